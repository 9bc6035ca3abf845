"""The session table's demultiplexer (RFC 5880 §6.8.6): Your Discriminator on its own path, else the path."""

from __future__ import annotations

import ipaddress
import random

from xdp_bfd.core.host import Entry
from xdp_bfd.core.netio import Datagram
from xdp_bfd.core.table import SessionTable
from xdp_bfd.session import Session, SessionConfig

A = ipaddress.ip_address


class _Tx:  # a transmitter that is never used: the table only files entries
    sport = 49152


def _entry(table: SessionTable, **cfg) -> Entry:
    config = SessionConfig(**cfg)
    e = Entry(Session(config, table.allocate_discr(), now_us=0), _Tx(), "file")  # type: ignore[arg-type]
    table.insert(e)
    return e


def _dg(src: str, dst: str, *, multihop: bool = False, ifindex: int = 0) -> Datagram:
    return Datagram(
        data=b"", src=A(src), dst=A(dst), sport=49152, ttl=255, ifindex=ifindex, multihop=multihop
    )


def test_discriminators_are_unique_and_nonzero() -> None:
    t = SessionTable(random.Random(3))
    t._next_discr = 0xFFFFFFFF  # the wrap skips 0
    seen = {t.allocate_discr() for _ in range(3)}
    assert 0 not in seen and len(seen) == 3


def test_your_discriminator_finds_the_session_only_from_its_own_peer() -> None:
    t = SessionTable(random.Random(1))
    e = _entry(t, local=A("198.19.0.1"), peer=A("198.19.0.2"))
    d = e.session.local_discr
    assert t.find(_dg("198.19.0.2", "198.19.0.1"), d) is e
    assert t.find(_dg("198.19.0.9", "198.19.0.1"), d) is None  # a stranger who learned it
    assert t.find(_dg("198.19.0.2", "198.19.0.1", multihop=True), d) is None  # another hop mode
    assert t.find(_dg("198.19.0.2", "198.19.0.1"), d + 1) is None


def test_without_a_discriminator_the_most_specific_path_wins() -> None:
    t = SessionTable(random.Random(2))
    wildcard = _entry(t, local=None, peer=A("198.19.0.2"))
    exact = _entry(t, local=A("198.19.0.1"), peer=A("198.19.0.2"))
    assert t.find(_dg("198.19.0.2", "198.19.0.1"), 0) is exact
    assert t.find(_dg("198.19.0.2", "198.19.0.5"), 0) is wildcard
    assert t.lookup(exact.session.config.key()) is exact
    assert t.pop(exact.session.local_discr) is exact
    assert t.find(_dg("198.19.0.2", "198.19.0.1"), 0) is wildcard
    assert t.lookup(exact.session.config.key()) is None
