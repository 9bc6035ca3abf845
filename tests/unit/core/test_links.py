"""links: interface lookups the loop makes per packet, cached for a second and no longer."""

from __future__ import annotations

import os
import socket

import pytest

from xdp_bfd.core import links


@pytest.fixture
def kernel(monkeypatch):
    """A clock the test moves, and a count of the kernel lookups behind the cache."""
    calls = {"name": 0, "index": 0}
    clock = {"now": 10_000_000}
    real_name, real_index = socket.if_indextoname, socket.if_nametoindex

    def name(i: int) -> str:
        calls["name"] += 1
        return real_name(i)

    def index(n: str) -> int:
        calls["index"] += 1
        return real_index(n)

    monkeypatch.setattr(links.socket, "if_indextoname", name)
    monkeypatch.setattr(links.socket, "if_nametoindex", index)
    monkeypatch.setattr(links, "now_us", lambda: clock["now"])
    monkeypatch.setattr(links, "_names", {})
    monkeypatch.setattr(links, "_indexes", {})
    return calls, clock


def test_loopback_resolves_both_ways_once_per_second(kernel):
    calls, clock = kernel
    lo = socket.if_nametoindex("lo")
    calls["index"] = 0  # that one was ours, not the cache's
    for _ in range(5):
        assert links.index_of("lo") == lo
        assert links.name_of(lo) == "lo"
    assert calls == {"name": 1, "index": 1}
    clock["now"] += links.REFRESH_US - 1
    links.index_of("lo")
    assert calls["index"] == 1
    clock["now"] += 1  # a recreated interface gets a new index: looked up again
    assert links.index_of("lo") == lo
    assert calls["index"] == 2


def test_unknown_names_and_indexes_are_cached_too(kernel):
    calls, _clock = kernel
    missing = f"nx{os.getpid() % 100000}"
    assert links.index_of(missing) == 0
    assert links.index_of(missing) == 0
    assert links.name_of(0) is None
    assert links.name_of(2**31 - 1) is None
    assert links.name_of(2**31 - 1) is None
    assert calls == {"name": 1, "index": 1}
