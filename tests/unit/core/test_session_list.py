"""Engine.apply_session_list: the sessions of one origin made exactly the list given.

A configuration a session already holds as that very object (a takeover's
restore hands the configured ones over) is passed without hashing or
comparing it; every other is compared as before.
"""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from pathlib import Path

import pytest

from xdp_bfd.core.engine import Engine
from xdp_bfd.session import SessionConfig


def _cfg(i: int, **kw) -> SessionConfig:
    return SessionConfig(
        local=ipaddress.ip_address("127.0.0.1"), peer=ipaddress.ip_address(f"127.0.1.{i}"), **kw
    )


@pytest.fixture
def engine(tmp_path: Path):
    e = Engine(stats_path=tmp_path / "stats.json")
    yield e
    e.shutdown()


@pytest.fixture
def keyed(monkeypatch) -> list[SessionConfig]:
    """Every configuration whose key was asked for, in order."""
    asked: list[SessionConfig] = []
    real = SessionConfig.key

    def key(self: SessionConfig):
        asked.append(self)
        return real(self)

    monkeypatch.setattr(SessionConfig, "key", key)
    return asked


def _held(engine: Engine) -> dict[int, SessionConfig]:
    return {d: e.session.config for d, e in engine.sessions.items()}


def test_sessions_holding_the_given_objects_are_left_without_a_comparison(engine: Engine, keyed) -> None:
    configs = [_cfg(i) for i in range(1, 4)]
    for c in configs:
        engine.add_session(c, "file")
    before = _held(engine)
    keyed.clear()
    engine.apply_session_list(list(configs), "file")
    assert _held(engine) == before and all(a is b for a, b in zip(before.values(), configs, strict=True))
    assert keyed == []  # the witness below shows the same call does ask when it must


def test_equal_copies_changes_additions_and_removals_are_compared_as_before(engine: Engine, keyed) -> None:
    a, b, c, d = (_cfg(i) for i in range(1, 5))
    for cfg in (a, b, c):
        engine.add_session(cfg, "file")
    discr = {e.session.config.peer: dd for dd, e in engine.sessions.items()}
    b_copy, c_changed = replace(b), replace(c, min_tx_us=50_000)
    keyed.clear()
    engine.apply_session_list([a, b_copy, c_changed, d], "file")
    held = {e.session.config.peer: (dd, e.session.config) for dd, e in engine.sessions.items()}
    assert held[a.peer] == (discr[a.peer], a) and held[a.peer][1] is a
    assert held[b.peer][0] == discr[b.peer] and held[b.peer][1] is b  # equal: the session keeps its own
    assert held[c.peer][0] == discr[c.peer] and held[c.peer][1] is c_changed
    assert d.peer in held
    # Only what no session held was asked for its key (the passed one, a, never).
    assert all(k is not a for k in keyed) and {id(k) for k in keyed} >= {id(b_copy), id(c_changed), id(d)}
    keyed.clear()
    engine.apply_session_list([a], "file")
    assert [e.session.config for e in engine.sessions.values()] == [a]
    assert all(k is not a for k in keyed) and {id(k) for k in keyed} == {id(b), id(c_changed), id(d)}


def test_a_session_of_another_origin_is_neither_taken_nor_removed(engine: Engine, caplog) -> None:
    a, b = _cfg(1), _cfg(2)
    engine.add_session(a, "cli")
    engine.add_session(b, "file")
    engine.apply_session_list([a, b], "file")  # a is the command line's, even as the very object
    assert sorted((e.origin, str(e.session.config.peer)) for e in engine.sessions.values()) == [
        ("cli", "127.0.1.1"),
        ("file", "127.0.1.2"),
    ]
    assert "already comes from cli" in caplog.text
    engine.apply_session_list([], "file")
    assert [e.origin for e in engine.sessions.values()] == ["cli"]
