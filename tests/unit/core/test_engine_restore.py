"""Engine.restored / join_restored: a handed-over session made ahead changes nothing until it joins."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

import pytest

from xdp_bfd.core.engine import Engine
from xdp_bfd.session import Session, SessionConfig


@pytest.fixture
def engine(tmp_path: Path):
    e = Engine(stats_path=tmp_path / "stats.json")
    yield e
    e.shutdown()


def test_a_session_made_ahead_takes_its_port_and_its_place_only_when_it_joins(engine: Engine) -> None:
    cfg = SessionConfig(local=ipaddress.ip_address("127.0.0.1"), peer=ipaddress.ip_address("127.0.1.9"))
    state = dict(zip(Session.STATE_FIELDS, Session(cfg, 77, now_us=0).export(), strict=True))
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sport = sock.getsockname()[1]
    entry = engine.restored(cfg, "file", sport=sport, state=state, sock=sock)
    assert entry.session.local_discr == 77 and entry.tx.sport == sport
    assert engine.sessions == {} and sport not in engine.ports.used
    assert sock.getsockopt(socket.IPPROTO_IP, socket.IP_TTL) == 255  # made as the restore makes it
    engine.join_restored(entry)
    assert engine.sessions == {77: entry} and sport in engine.ports.used
    assert engine.lookup(cfg.key()) is entry
    engine.remove_session(77, admin_down=False)
    assert sport not in engine.ports.used
