"""The reference streams are witnesses that move: each CPU's shows a hole the test makes in it."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.wait import wait_until
from harness.witness import FRAME_LEN, PERIOD_MS, RATE_BIT, Inconclusive, Judge, ReferenceStream, Registry


@contextlib.contextmanager
def held(stream: ReferenceStream) -> Iterator[None]:
    """Hold the stream's frames in their queue for the body's duration.

    The shaper slowed to 8 bit/s, not the link taken down: a carrier loss
    purges the queued reserve, and every later window would see a dead stream.
    """
    a = stream.topo.namespaces[0]
    # From the stream's own CPU: the change reruns the queue where it is made,
    # and the qdisc's timer is armed there.
    pin = ["taskset", "-c", str(stream.cpu)] if stream.cpu is not None else []

    def rate(bits: int) -> None:
        a.run([*pin, "tc", "qdisc", "change", "dev", "wit0", "root", "tbf", "rate", f"{bits}bit",
               "burst", str(FRAME_LEN + 34), "limit", "16000000"])  # fmt: skip

    rate(8)
    try:
        yield
    finally:
        rate(RATE_BIT)


def test_the_stream_flows_and_a_hole_in_it_is_seen(reference_stream):
    assert len(reference_stream.streams) == len(os.sched_getaffinity(0))  # one per CPU
    for stream in reference_stream.streams:
        t0 = time.time()
        with held(stream):
            hold_from = time.time()
            time.sleep(0.15)  # the hole's length is the stimulus, not a wait for anything
            hold_to = time.time()
        time.sleep(0.3)
        # The composite's figures are the worst CPU's: this one, with the hole.
        fig = reference_stream.figures(t0, time.time())
        print(f"\nreference across the hole in CPU {stream.cpu}'s stream: {fig}")
        assert fig.cpu == stream.cpu
        assert fig.max_gap_ms >= (hold_to - hold_from) * 1e3 - PERIOD_MS
        assert hold_to - t0 <= fig.max_gap_at_s <= hold_to - t0 + 0.5
        # After the hole it flows at its period again, its reserve intact.
        t1 = time.time()
        time.sleep(0.5)
        after = stream.figures(t1, time.time())
        assert after.frames >= after.expected * 0.9 and after.stall_ms < 50, after


def test_a_failure_during_a_real_hole_is_inconclusive(reference_stream):
    judge = Judge(reference_stream, Registry(), "self-test")
    with pytest.raises(Inconclusive, match="INCONCLUSIVE"), judge.window("hole", stall_ms=50):
        with held(reference_stream.streams[-1]):
            time.sleep(0.15)
        raise AssertionError("late, as everything was")


def _policy(pid: int) -> int:
    """The scheduling policy /proc says the process runs under (6: SCHED_DEADLINE)."""
    for line in Path(f"/proc/{pid}/sched").read_text().splitlines():
        if line.startswith("policy"):
            return int(line.split(":")[1])
    raise AssertionError(f"no policy line for {pid}")


def test_the_deadline_witness_runs_under_the_reservation_and_a_stop_is_seen(reference_stream):
    clock = reference_stream.deadline
    assert clock is not None and clock.proc is not None
    assert _policy(clock.proc.pid) == 6, "the deadline witness is not under SCHED_DEADLINE"
    t0 = time.time()
    time.sleep(0.3)
    idle = clock.lateness_ms(t0, time.time())
    # Stopped, it wakes late by as long: the witness moves.
    t1 = time.time()
    os.kill(clock.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(0.08)  # the stop's length is the stimulus
    finally:
        os.kill(clock.proc.pid, signal.SIGCONT)
    with contextlib.suppress(AssertionError):
        wait_until(lambda: clock.lateness_ms(t1, time.time()) >= 60, timeout=5, what="the late wake-up")
    stopped = clock.lateness_ms(t1, time.time())
    print(f"\ndeadline witness: late {idle:.1f} ms idle, {stopped:.1f} ms across an 80 ms stop")
    assert stopped >= 60 and stopped > idle, (idle, stopped)
