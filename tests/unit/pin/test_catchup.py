"""The successor's catch-up: adopted sessions the kernel carries are serviced from the loop."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import random
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from harness.fakehost import FakeHost
from xdp_bfd.core.handoff import Handoff
from xdp_bfd.core.host import Entry
from xdp_bfd.fastpath.observer import Offload
from xdp_bfd.pin import state
from xdp_bfd.pin.catchup import Catchup, carried
from xdp_bfd.session import AuthConfig, Session, SessionConfig
from xdp_bfd.wire.control import Auth, AuthType, ControlPacket, State, decode_control, encode_control


def _cfg(i: int, **kw: Any) -> SessionConfig:
    addr = ipaddress.ip_address
    return SessionConfig(
        addr(f"198.19.{i}.1"), addr(f"198.19.{i}.2"), "eth0", min_tx_us=10_000, min_rx_us=10_000, **kw
    )


def _up(i: int, **kw: Any) -> Session:
    """An Up session whose peer sends as fast as it asks us to (XDP may answer it)."""
    s = Session(_cfg(i, **kw), 7 + i, now_us=1_000, rng=random.Random(i))
    auth = s.config.auth
    for n, peer_state in enumerate((State.DOWN, State.UP)):
        wire_auth = None
        if auth is not None:
            wire_auth = Auth(auth.type, auth.key_id, b"", 100 + n)
        pkt = ControlPacket(
            state=peer_state,
            my_discr=99,
            your_discr=s.local_discr if peer_state == State.UP else 0,
            desired_min_tx_us=10_000,
            required_min_rx_us=10_000,
            auth=wire_auth,
        )
        raw = encode_control(pkt, secret=auth.secret if auth else None)
        s.receive(decode_control(raw), raw, 2_000 + n, ttl=255)
    s.datagrams_to_send(3_000)
    if s.poll_active:  # Up: the fast timers' Poll, answered
        wire_auth = Auth(auth.type, auth.key_id, b"", 102) if auth is not None else None
        fin = ControlPacket(state=State.UP, my_discr=99, your_discr=s.local_discr, final=True,
                            desired_min_tx_us=10_000, required_min_rx_us=10_000, auth=wire_auth)  # fmt: skip
        raw = encode_control(fin, secret=auth.secret if auth else None)
        s.receive(decode_control(raw), raw, 3_500, ttl=255)
        s.datagrams_to_send(3_500)
    assert s.state == State.UP and not s.poll_active
    return s


def _peer_slows(s: Session, now: int) -> None:
    """The peer now sends every 50 ms while we must every 10: XDP's replies alone fall short."""
    raw = encode_control(ControlPacket(state=State.UP, my_discr=99, your_discr=s.local_discr,
                                       desired_min_tx_us=50_000, required_min_rx_us=10_000))  # fmt: skip
    s.receive(decode_control(raw), raw, now, ttl=255)


def _carried_entry(s: Session, slot: int = 0) -> Entry:
    """As the predecessor left a session the kernel carries: its packets and detection external."""
    s.periodic_tx_external = True
    s.detection_external = True
    return Entry(s, SimpleNamespace(sport=49152 + slot, dport=3784), "file", slot=slot, offloaded=True,
                 epoch=2, detect_armed=True)  # fmt: skip


CLOCKED = SimpleNamespace(clocking=lambda _entry: True)
UNCLOCKED = SimpleNamespace(clocking=lambda _entry: False)


def test_a_session_the_kernel_carries_waits() -> None:
    entry = _carried_entry(_up(0))
    assert Offload.answers(entry)  # the peer sends as often as we must: XDP's replies do
    assert carried(entry, Offload, None)  # type: ignore[arg-type]
    assert carried(entry, Offload, CLOCKED)  # type: ignore[arg-type]


def _not_carried_cases() -> dict[str, Any]:
    def slower_peer() -> tuple[Entry, Any]:
        s = _up(0)
        _peer_slows(s, 5_000)  # and nothing clocks it
        s.datagrams_to_send(5_000)
        return _carried_entry(s), UNCLOCKED

    def transmits_itself() -> tuple[Entry, Any]:
        entry = _carried_entry(_up(0))
        entry.session.periodic_tx_external = False  # its own timer sends: a deadline of its own
        return entry, CLOCKED

    def detects_itself() -> tuple[Entry, Any]:
        entry = _carried_entry(_up(0))
        entry.session.detection_external = False
        return entry, CLOCKED

    def unarmed() -> tuple[Entry, Any]:
        entry = _carried_entry(_up(0))
        entry.detect_armed = False
        return entry, CLOCKED

    def polling() -> tuple[Entry, Any]:
        s = _up(0)
        s.set_config(replace(s.config, min_tx_us=20_000), 20_000)
        s.datagrams_to_send(20_000)
        assert s.poll_active
        return _carried_entry(s), CLOCKED

    def echo() -> tuple[Entry, Any]:
        return _carried_entry(_up(0, echo_tx_us=50_000)), CLOCKED

    def authenticated() -> tuple[Entry, Any]:
        key = AuthConfig(AuthType.KEYED_SHA1, 3, b"k" * 20)
        return _carried_entry(_up(0, auth=key)), CLOCKED

    def down() -> tuple[Entry, Any]:
        s = Session(_cfg(0), 7, now_us=1_000, rng=random.Random(0))
        return _carried_entry(s), CLOCKED

    def not_offloaded() -> tuple[Entry, Any]:
        entry = _carried_entry(_up(0))
        entry.offloaded = False
        return entry, CLOCKED

    return {f.__name__: f for f in (slower_peer, transmits_itself, detects_itself, unarmed, polling, echo,
                                    authenticated, down, not_offloaded)}  # fmt: skip


@pytest.mark.parametrize("case", sorted(_not_carried_cases()))
def test_a_session_with_anything_due_of_its_own_is_serviced_at_once(case: str) -> None:
    entry, clock = _not_carried_cases()[case]()
    assert not carried(entry, Offload, clock)  # type: ignore[arg-type]


def test_a_clock_carries_what_xdp_would_not_answer() -> None:
    s = _up(0)
    _peer_slows(s, 5_000)
    s.datagrams_to_send(5_000)
    entry = _carried_entry(s)
    assert not Offload.answers(entry)
    assert carried(entry, Offload, CLOCKED)  # type: ignore[arg-type]


def _host_with(n: int) -> tuple[FakeHost, list[Entry], list[int]]:
    host = FakeHost()
    seen: list[int] = []
    host.observers.append(SimpleNamespace(serviced=lambda e: seen.append(e.session.local_discr),  # type: ignore[arg-type]
                                          removed=lambda e: None))  # fmt: skip
    entries = []
    for i in range(n):
        s = _up(i)
        entry = host.restore_session(
            s.config, "file", sport=49152 + i, state=dict(zip(Session.STATE_FIELDS, s.export(), strict=True))
        )
        entries.append(entry)
    return host, entries, seen


def test_waiting_sessions_are_serviced_one_a_step_of_the_loops_background_work(caplog) -> None:
    host, entries, seen = _host_with(5)
    c = Catchup(host)
    c.defer(entries)
    assert seen == [] and len(host.jobs) == 1  # nothing before the loop runs
    host.remove_session(entries[2].session.local_discr, admin_down=False)  # gone meanwhile
    assert host.run_jobs(2) == 2 and seen == [7, 8]  # a session a step
    with caplog.at_level(logging.INFO, "xdp_bfd"):
        assert host.run_jobs() == 3
    assert seen == [7, 8, 10, 11]  # in order, the removed one skipped
    assert not c.pending and not host.jobs
    line = next(r.getMessage() for r in caplog.records if "carried serviced" in r.getMessage())
    assert "the 5 adopted sessions" in line and "in the loop" in line


def test_nothing_deferred_schedules_nothing() -> None:
    host = FakeHost()
    c = Catchup(host)
    c.defer([])
    assert not host.jobs and c.waited == 0


class _Offload:
    """What the restore asks of the Offload, with its real judgement of what XDP answers and detects."""

    answers = staticmethod(Offload.answers)
    kernel_detects = staticmethod(Offload.kernel_detects)

    def __init__(self) -> None:
        self.slots = SimpleNamespace(adopt=lambda nslots, used: None, batched=contextlib.nullcontext)

    def adopted(self, entry: Any) -> None:
        pass

    def removed(self, entry: Any) -> None:
        pass


def test_the_restore_services_only_what_the_kernel_does_not_carry(caplog) -> None:
    carried_s, slower, polling = _up(0), _up(1), _up(2)
    _peer_slows(slower, 5_000)
    polling.set_config(replace(polling.config, min_tx_us=20_000), 20_000)
    sessions = [carried_s, slower, polling]
    entries = {}
    for i, s in enumerate(sessions):
        s.datagrams_to_send(20_000)
        entries[s.local_discr] = _carried_entry(s, slot=i)
        entries[s.local_discr].last_rx_raw = b""
    old = SimpleNamespace(sessions=entries, handoff=Handoff())
    handed = state.parse(state.encode(old, 4))
    host = FakeHost()
    seen: list[int] = []
    host.observers.append(SimpleNamespace(serviced=lambda e: seen.append(e.session.local_discr)))  # type: ignore[arg-type]
    c = Catchup(host)
    with caplog.at_level(logging.INFO, "xdp_bfd"):
        out = state.restore(host, _Offload(), handed, [], catchup=c)  # type: ignore[arg-type]
    assert len(out) == 3
    assert seen == [8, 9]  # the slower peer's and the polling session's services are due now
    assert [e.session.local_discr for e in c.pending] == [7]
    assert "1 the kernel carries serviced once the loop runs" in caplog.text
    # A handover before the catch-up's end hands the waiting session on as it came: its record is
    # the one this engine adopted (the next successor adopts it the same way).
    again = state.parse(state.encode(host, 4))
    assert again.sessions[0].state == handed.sessions[0].state
    assert again.sessions[0].entry == handed.sessions[0].entry
    assert again.sessions[1].state != handed.sessions[1].state  # (a serviced one moved on: a witness)
    host.run_jobs()
    assert seen == [8, 9, 7]
    # Without a catch-up (a test's restore, an older caller) every session is serviced at once.
    host2, seen2 = FakeHost(), []
    host2.observers.append(SimpleNamespace(serviced=lambda e: seen2.append(e.session.local_discr)))  # type: ignore[arg-type]
    state.restore(host2, _Offload(), handed, [])  # type: ignore[arg-type]
    assert seen2 == [7, 8, 9]
