"""--pin with bfddp: the old engine's bfddp sockets pass to the successor (pin/fdpass.py, dplane/resume.py).

Real sockets throughout: a TCP connection from a stand-in bfdd, the abstract
unix rendezvous and SCM_RIGHTS. The two engines are fake Hosts
(harness/fakehost.py) in one process; the successor's is given what
handover.restore would have given it (the sessions and the dataplane's
handover section), and the old one's handoff board departs as pin makes it.
Only the "is the listener an xdp-bfd process" check is pointed at this process.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
from pathlib import Path
from typing import Any

import pytest
from test_dplane import Client
from test_dplane import add as _add

from harness.fakehost import FakeHost
from xdp_bfd.core.handoff import DPLANE_CONNECTION, DPLANE_SESSIONS
from xdp_bfd.dplane import Dataplane
from xdp_bfd.dplane.address import DplaneAddress
from xdp_bfd.pin import fdpass
from xdp_bfd.session import Session
from xdp_bfd.wire.bfddp import (
    AddSession,
    CountersReply,
    CountersRequest,
    EchoRequest,
    StateChange,
    encode_message,
)
from xdp_bfd.wire.control import State

# Real loopback sockets: the client is this process, whoever runs the tests (no root needed).
ME = (os.geteuid(),)


def add(lid: int) -> AddSession:
    """One session per id, each to its own peer."""
    return _add(lid, dst=ipaddress.ip_address(f"198.19.1.{lid % 200 + 2}"))


@pytest.fixture
def as_engine(monkeypatch):
    """This test process passes for the successor engine the old one checks for."""
    monkeypatch.setattr(fdpass, "_comm", lambda pid: "xdp-bfd")


def _old_engine(hold_s: int = 10) -> tuple[Dataplane, FakeHost, Client]:
    eng = FakeHost()
    dp = Dataplane(eng, DplaneAddress("ipv4", "127.0.0.1", 0), mode="listen", hold_s=hold_s, allow=ME)
    dp.start()
    port = dp.transport.listener.getsockname()[1]  # type: ignore[union-attr]
    bfdd = Client(eng, port)
    assert eng.spin(2, lambda: dp.transport.conn is not None)
    return dp, eng, bfdd


def _restored(old: FakeHost, bookkeeping: dict[int, Any] | None = None) -> FakeHost:
    """A host holding what restore() would: the same sessions and the dataplane section.

    ``bookkeeping``: the dataplane's section as handed over (by default the old one's, as it is now).
    """
    eng = FakeHost()
    for e in old.sessions.values():
        state = dict(zip(Session.STATE_FIELDS, e.session.export(), strict=True))
        eng.restore_session(e.session.config, e.origin, sport=e.tx.sport, state=state)
    if bookkeeping is None:
        bookkeeping = old.handoff.section(DPLANE_SESSIONS)
    eng.handoff.leave(DPLANE_SESSIONS, bookkeeping)
    for entry in eng.sessions.values():
        eng.service(entry, eng.now)
    return eng


def _successor(
    old: FakeHost, old_dp: Dataplane, hold_s: int = 10, bookkeeping: dict[int, Any] | None = None
) -> tuple[Dataplane, FakeHost]:
    eng = _restored(old, bookkeeping)
    dp = Dataplane(eng, old_dp.addr, mode="listen", hold_s=hold_s, allow=ME)
    return dp, eng


def _gone(dp: Dataplane) -> None:
    """The old engine exits: its descriptors close, nothing is sent or shut down."""
    t = dp.transport
    for s in (t.conn.sock if t.conn else None, t.listener):
        if s is not None:
            dp.host.unwatch(s)
            s.close()
    t.conn = t.listener = None


def test_pack_round_trips_and_refuses_anything_else():
    header = {"fds": ["conn"], "lids": [1, 2]}
    data = fdpass.pack(header, b"\x01\x02", b"out")
    assert fdpass.unpack(data) == (header, b"\x01\x02", b"out")
    for bad in (data[:-1], data + b"x", b"XXXX" + data[4:], data[:5], fdpass.pack({"fds": 1}, b"", b"")):
        with pytest.raises(fdpass.PassError):
            fdpass.unpack(bad)


def test_the_stream_resumes_at_the_message_boundary(tmp_path: Path, as_engine, caplog):
    caplog.set_level(logging.INFO, "xdp_bfd.dplane")
    old_dp, old, bfdd = _old_engine()
    bfdd.send(encode_message(add(1001)) + encode_message(add(1002)))
    assert old.spin(2, lambda: set(old.sessions) == {1001, 1002})
    old.change(1001, State.UP, remote_discr=77)
    assert bfdd.wait(lambda: any(isinstance(m, StateChange) and m.lid == 1001 for m in bfdd.got))

    # The cut: one request answered by the old engine, and 10 bytes of the next frame read but undecodable.
    third = encode_message(add(1003))
    bfdd.send(encode_message(CountersRequest(7, 1001)) + third[:10])
    assert bfdd.wait(lambda: any(isinstance(m, CountersReply) and m.id == 7 for m in bfdd.got))
    assert old.spin(2, lambda: old_dp.transport.conn.reader.buffered == 10)  # type: ignore[union-attr]
    # And output the old engine could not send yet (bfdd not reading, say).
    old_dp.transport.conn.out += encode_message(EchoRequest(424242))  # type: ignore[union-attr]
    before = len(bfdd.got)

    inbox = fdpass.Inbox(tmp_path)
    old.handoff.depart(tmp_path)
    parcel = inbox.take(os.getpid())
    _gone(old_dp)
    assert parcel is not None and set(parcel.sockets) == {"conn", "listener"}
    assert parcel.pending_in == third[:10] and parcel.header["lids"] == [1001, 1002]

    new_dp, new = _successor(old, old_dp)
    # Session 1002 came up while no engine ran: bfdd, told Down at registration, must hear it.
    new.change(1002, State.UP)
    new.handoff.leave(DPLANE_CONNECTION, parcel)
    bfdd.eng = new
    # bfdd goes on writing mid-frame, then asks again.
    bfdd.send(third[10:] + encode_message(CountersRequest(8, 1002)))
    new_dp.start()
    assert bfdd.wait(lambda: any(isinstance(m, CountersReply) and m.id == 8 for m in bfdd.got))
    assert new.spin(1, lambda: 1003 in new.sessions)

    after = bfdd.got[before:]
    assert not bfdd.eof
    assert isinstance(after[0], EchoRequest) and after[0].dp_time == 424242  # the unsent output, first
    changes = [m for m in after if isinstance(m, StateChange)]
    assert [(m.lid, m.state) for m in changes] == [(1002, State.UP)]  # 1001: bfdd already knows
    assert [m.id for m in after if isinstance(m, CountersReply)] == [8]
    assert set(new.sessions) == {1001, 1002, 1003} and new.removed == []
    assert set(new_dp.registry.by_lid) == {1001, 1002, 1003} and not new_dp.registry.held()
    assert new_dp.stats()["connections"] == 1  # the same connection, not a reconnect
    assert "bfdd connected (handed over by engine" in caplog.text
    # The listening socket came along too: a second client is refused, as before the handover.
    other = socket.create_connection(new_dp.transport.listener.getsockname())  # type: ignore[union-attr]
    assert new.spin(2, lambda: "refusing a second connection" in caplog.text)
    other.close()
    bfdd.close()
    new_dp.close()


def test_held_sessions_keep_their_deadline_across_the_pass(tmp_path: Path, as_engine):
    old_dp, old, bfdd = _old_engine()
    bfdd.send(encode_message(add(1001)))
    assert old.spin(2, lambda: 1001 in old.sessions)
    bfdd.close()  # bfdd went away: the session is held
    assert old.spin(2, lambda: old_dp.transport.conn is None and old_dp.registry.held())
    deadline = old_dp.registry.held()[0].held_until_us
    inbox = fdpass.Inbox(tmp_path)
    old.handoff.depart(tmp_path)
    parcel = inbox.take(os.getpid())
    _gone(old_dp)
    assert parcel is not None and set(parcel.sockets) == {"listener"}
    new_dp, new = _successor(old, old_dp)
    new.handoff.leave(DPLANE_CONNECTION, parcel)
    new_dp.start()
    assert [r.held_until_us for r in new_dp.registry.held()] == [deadline]
    # bfdd comes back on the inherited listener and re-adds it: adopted, not recreated.
    back = Client(new, new_dp.transport.listener.getsockname()[1])  # type: ignore[union-attr]
    back.send(encode_message(add(2001)))
    assert new.spin(2, lambda: 2001 in new_dp.registry.by_lid)
    assert new_dp.registry.by_lid[2001].discr == 1001 and new.removed == []
    back.close()
    new_dp.close()


def test_a_successor_without_the_sessions_closes_the_stream(tmp_path: Path, as_engine, caplog):
    old_dp, old, bfdd = _old_engine()
    bfdd.send(encode_message(add(1001)))
    assert old.spin(2, lambda: 1001 in old.sessions)
    inbox = fdpass.Inbox(tmp_path)
    old.handoff.depart(tmp_path)
    parcel = inbox.take(os.getpid())
    _gone(old_dp)
    new_dp, new = _successor(old, old_dp, bookkeeping={})  # the state was not adopted (another build's, say)
    new.handoff.leave(DPLANE_CONNECTION, parcel)
    bfdd.eng = new
    new_dp.start()
    assert "not resuming the handed-over bfddp connection (1 of bfdd's 1 sessions" in caplog.text
    # bfdd sees the close and will re-add its sessions to whoever listens.
    assert bfdd.wait(lambda: bfdd.eof)
    assert new_dp.transport.listener is not None  # listening again, on its own socket
    bfdd.close()
    new_dp.close()


def test_no_successor_or_a_stranger_means_the_old_behaviour(tmp_path: Path, monkeypatch, caplog):
    old_dp, old, bfdd = _old_engine()
    old.handoff.depart(tmp_path)  # nobody listens
    assert "cannot pass the bfddp connection to the successor: no successor listening" in caplog.text
    caplog.clear()
    inbox = fdpass.Inbox(tmp_path)  # a listener, but this process is not called xdp-bfd
    monkeypatch.setattr(fdpass, "_comm", lambda pid: "python3")
    old.handoff.depart(tmp_path)
    assert "not an engine" in caplog.text
    assert inbox.take(os.getpid()) is None  # nothing was sent
    # The old engine still owns a working connection (a failed pass changes nothing).
    bfdd.send(encode_message(add(1001)))
    assert old.spin(2, lambda: 1001 in old.sessions)
    bfdd.close()
    old_dp.close()


def test_the_inbox_takes_only_from_the_engine_it_asked(tmp_path: Path, as_engine):
    inbox = fdpass.Inbox(tmp_path)
    a, b = socket.socketpair()
    fdpass.send(tmp_path, {"pid": 1}, b"", b"", {"conn": a})
    with pytest.raises(fdpass.PassError, match="not from engine"):
        inbox.take(os.getpid() + 1)
    for s in (a, b):
        s.close()
    assert isinstance(fdpass.address(tmp_path), bytes) and fdpass.address(tmp_path).startswith(b"\0")


def test_a_successor_with_another_address_closes_the_stream(tmp_path: Path, as_engine, caplog):
    old_dp, old, bfdd = _old_engine()
    bfdd.send(encode_message(add(1001)))
    assert old.spin(2, lambda: 1001 in old.sessions)
    inbox = fdpass.Inbox(tmp_path)
    old.handoff.depart(tmp_path)
    parcel = inbox.take(os.getpid())
    _gone(old_dp)
    eng = _restored(old)
    eng.handoff.leave(DPLANE_CONNECTION, parcel)
    new_dp = Dataplane(eng, DplaneAddress("ipv4", "127.0.0.1", 0), mode="connect", hold_s=10, allow=ME)
    bfdd.eng = eng
    new_dp.transport._try_connect = lambda now: None  # type: ignore[method-assign,assignment]  # no bfdd here
    new_dp.start()
    assert "not resuming the handed-over bfddp connection (it was listen 127.0.0.1:0" in caplog.text
    assert bfdd.wait(lambda: bfdd.eof)
    # The sessions wait for bfdd's re-adds, as in any takeover without the pass.
    assert [r.discr for r in new_dp.registry.held()] == [1001] and not new_dp.registry.by_lid
    bfdd.close()
    new_dp.close()
