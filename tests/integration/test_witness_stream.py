"""The reference stream is a witness that moves: it shows a hole the test makes in it."""

from __future__ import annotations

import time

import pytest

from harness.witness import PERIOD_MS, Inconclusive, Judge, Registry


def test_the_stream_flows_and_a_hole_in_it_is_seen(reference_stream):
    t0 = time.time()
    # The witness must be able to stall: take the receiving end down for
    # 150 ms, so its frames wait in the shaped queue (or are lost) meanwhile.
    b = reference_stream.topo.namespaces[1]
    b.run(["ip", "link", "set", "wit1", "down"])
    down_at = time.time()
    time.sleep(0.15)  # the hole's length is the stimulus, not a wait for anything
    up_from = time.time()
    b.run(["ip", "link", "set", "wit1", "up"])
    time.sleep(0.3)
    fig = reference_stream.figures(t0, time.time())
    print(f"\nreference across the hole: {fig}")
    # The link was down at least from the first command's return to the second's start.
    assert fig.max_gap_ms >= (up_from - down_at) * 1e3 - PERIOD_MS
    assert up_from - t0 <= fig.max_gap_at_s <= up_from - t0 + 0.5
    # Outside the hole it flows at its period.
    assert fig.frames >= fig.expected * 0.5


def test_a_failure_during_a_real_hole_is_inconclusive(reference_stream):
    judge = Judge(reference_stream, Registry(), "self-test")
    b = reference_stream.topo.namespaces[1]
    with pytest.raises(Inconclusive, match="INCONCLUSIVE"), judge.window("hole", stall_ms=50):
        b.run(["ip", "link", "set", "wit1", "down"])
        time.sleep(0.15)
        b.run(["ip", "link", "set", "wit1", "up"])
        raise AssertionError("late, as everything was")
