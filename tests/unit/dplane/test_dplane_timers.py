"""A peer's new timers reach bfdd across a --pin takeover of the bfddp connection.

The old engine may leave while a timers report is still waiting for the
values to settle; the successor, resuming the same stream, must send it.
Real sockets and fake Hosts (harness/fakehost.py), as in test_dplane_handover.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from test_dplane_handover import (
    _gone,
    _old_engine,
    _successor,
    add,
    as_engine,  # noqa: F401  (the fixture, by name)
)

from harness.fakehost import FakeHost
from xdp_bfd.core.handoff import DPLANE_CONNECTION, DPLANE_SESSIONS
from xdp_bfd.dplane import Dataplane
from xdp_bfd.pin import fdpass
from xdp_bfd.wire.bfddp import EchoRequest, StateChange, encode_message
from xdp_bfd.wire.control import State

SLOW = {"remote_discr": 77, "remote_desired_tx_us": 1_000_000, "remote_min_rx_us": 1_000_000}
FAST = {"remote_desired_tx_us": 10_000, "remote_min_rx_us": 10_000}


def _handed_over(tmp_path: Path, *, retime: bool, older: bool = False) -> tuple[Dataplane, FakeHost, list]:
    """Session 1001 Up at the peer's slow start, handed over: the successor and what bfdd got since."""
    old_dp, old, bfdd = _old_engine()
    bfdd.send(encode_message(add(1001)))
    assert old.spin(2, lambda: 1001 in old.sessions)
    old.change(1001, State.UP, remote_detect_mult=3, **SLOW)
    assert bfdd.wait(lambda: any(isinstance(m, StateChange) for m in bfdd.got))
    if retime:
        # The old engine's loop never runs again: its report, 200 ms off, never goes.
        old.retime(1001, time.monotonic_ns() // 1000, **FAST)
    before = len(bfdd.got)
    inbox = fdpass.Inbox(tmp_path)
    bookkeeping = old.handoff.section(DPLANE_SESSIONS)
    old.handoff.depart(tmp_path)
    parcel = inbox.take(os.getpid())
    _gone(old_dp)
    if older:
        for doc in bookkeeping.values():
            del doc["told"]  # what an engine from before this key hands over
    new_dp, new = _successor(old, old_dp, bookkeeping=bookkeeping)
    new.handoff.leave(DPLANE_CONNECTION, parcel)
    bfdd.eng = new
    started = time.time_ns() // 1000
    new_dp.start()
    # The successor's first keepalive, 1 s on, is the barrier: bfdd's stream is
    # in order, so anything sent before it (a report due after 200 ms) is in.
    assert bfdd.wait(lambda: any(isinstance(m, EchoRequest) and m.dp_time >= started for m in bfdd.got), 3)
    bfdd.close()
    new_dp.close()
    return new_dp, new, [m for m in bfdd.got[before:] if isinstance(m, StateChange)]


@pytest.mark.usefixtures("as_engine")
def test_a_report_the_old_engine_had_not_sent_yet_is_sent_by_the_successor(tmp_path: Path) -> None:
    new_dp, _, got = _handed_over(tmp_path, retime=True)
    assert [(m.lid, m.state, m.desired_tx, m.required_rx) for m in got] == [(1001, State.UP, 10_000, 10_000)]
    assert new_dp.stats()["timers_reports"] == 1


@pytest.mark.usefixtures("as_engine")
def test_values_bfdd_already_has_are_not_sent_again(tmp_path: Path) -> None:
    new_dp, _, got = _handed_over(tmp_path, retime=False)
    assert got == [] and new_dp.stats()["timers_reports"] == 0


@pytest.mark.usefixtures("as_engine")
def test_after_an_older_engine_an_up_session_is_reported_once(tmp_path: Path) -> None:
    # An older engine may have left bfdd showing the slow start: one report settles it.
    new_dp, _, got = _handed_over(tmp_path, retime=False, older=True)
    assert [(m.state, m.desired_tx) for m in got] == [(State.UP, 1_000_000)]
    assert new_dp.stats()["timers_reports"] == 1
