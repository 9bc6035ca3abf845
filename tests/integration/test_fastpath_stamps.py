"""A stamp written on another CPU after a program read its clock is the newest, not the oldest.

XDP's replies and the transmit clock's ticks claim one "last sent" stamp
(bfd_state.last_ktx_ns) so that a session never sends twice within 0.75 x
its interval. Each program reads the clock first and the stamp later; another
CPU may claim the stamp in between, with a later time than this program's
``now``. Read as an unsigned ``now - stamp`` that stamp was ages old: the
program sent as well, microseconds after the other (exact duplicates in the
jitter bench's captures, both directions, 6-37 in 20 s at 64 sessions). The
same reading closed the dead-man gate on a heartbeat written just after a
program's clock read.

The race needs two CPUs within a microsecond, so the map states it leaves are
written here by hand and the tick program runs once on a frame of ours
(BPF_PROG_TEST_RUN): its counters say which branch it took. The session has
no path to a peer (no packet seen), so a tick that decides to send counts
``tick_no_path`` and sends nothing anywhere.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest

from harness.testrun import run_once

SLOT, GEN = 3, 7
PERIOD_NS = 10_000_000
AHEAD_NS = 10_000_000_000  # a stamp this far past the clock is unmistakably "after now"


@pytest.fixture(scope="module")
def fp() -> Iterator[Any]:
    from xdp_bfd.fastpath.kernel import FastPath  # noqa: PLC0415 (bcc: only for the tests that use it)

    f = FastPath(3_000_000, max_sessions=64)
    try:
        yield f
    finally:
        f.close()


def _arm(fp: Any, *, last_ktx_ns: int, heartbeat_ns: int) -> None:
    """Slot SLOT clocked at PERIOD_NS, the gate's heartbeat and the session's stamp as given."""
    abi = fp.abi
    fp.slots.write_cfg(SLOT, {"flags": int(abi.CfgFlag.ACTIVE), "epoch": 1, "min_gap_ns": PERIOD_NS * 3 // 4})
    tc = fp.tick_cfg.Leaf()
    tc.flags, tc.gen, tc.classid, tc.loop_ifindex = int(abi.TickFlag.RUN), GEN, 0, 1
    tc.len_min, tc.len_max, tc.pkt_len, tc.period_ns, tc.lost_ns = 150, 200, 24, PERIOD_NS, PERIOD_NS * 4
    tc.pkt[0] = 0x20  # something to send: the branch is what is judged, not the packet
    fp.tick_cfg[fp.tick_cfg.Key(SLOT)] = tc
    states = fp.program.bpf["slot_state"]
    st = states.Leaf()
    st.last_ktx_ns = last_ktx_ns
    st.rx_ifindex = 0
    states[states.Key(SLOT)] = st
    fp.gate.heartbeat(heartbeat_ns)


def _tick(fp: Any) -> dict[str, int]:
    """One release of the slot's frame; the tick counters that moved."""
    abi = fp.abi
    head = b"\x02" * 6 + b"\x04" * 6 + struct.pack(">H", abi.tick_ethertype)
    frame = (head + struct.pack("=III", abi.tick_magic, SLOT, GEN)).ljust(150, b"\0")
    before = fp.tick_counters.totals()
    run_once(fp.program.tick_fn.fd, frame)
    after = fp.tick_counters.totals()
    return {k: after[k] - before[k] for k in after if after[k] != before[k]}


def test_a_tick_after_an_old_send_goes_on_to_send(fp):
    # The witness: with the stamp a second old and the gate fresh, this tick goes past both checks.
    now = time.monotonic_ns()
    _arm(fp, last_ktx_ns=now - 1_000_000_000, heartbeat_ns=now)
    assert _tick(fp) == {"tick": 1, "tick_no_path": 1}


def test_a_stamp_claimed_after_the_ticks_clock_read_skips_the_tick(fp):
    now = time.monotonic_ns()
    _arm(fp, last_ktx_ns=now + AHEAD_NS, heartbeat_ns=now)
    assert _tick(fp) == {"tick": 1, "tick_skipped": 1}


def test_a_heartbeat_written_after_the_ticks_clock_read_keeps_the_gate_open(fp):
    now = time.monotonic_ns()
    _arm(fp, last_ktx_ns=now - 1_000_000_000, heartbeat_ns=now + AHEAD_NS)
    assert _tick(fp) == {"tick": 1, "tick_no_path": 1}


def test_a_stale_heartbeat_closes_the_gate(fp):
    # The gate's other side, so the test above can tell an open gate from a check that never ran.
    now = time.monotonic_ns()
    _arm(fp, last_ktx_ns=now - 1_000_000_000, heartbeat_ns=now - 10_000_000_000)
    assert _tick(fp) == {"tick": 1, "tick_gated": 1}
