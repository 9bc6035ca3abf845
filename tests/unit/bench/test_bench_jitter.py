"""bench/jitter.py's judgement of the tail: an interval above RFC 5880 §6.8.7's band is the
machine's only when the environment witness stalled at least as long as the interval overran."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "bench"))

import jitter  # noqa: E402


def test_an_overrun_is_excused_only_by_a_stall_as_long_as_itself():
    # 10 ms nominal, band top 1.0: a 16 ms interval overran by 6 ms, a 12 ms one by 2 ms.
    above = [(1.6, 100.0, 100.016), (1.2, 200.0, 200.012), (1.05, 300.0, 300.0105)]
    stalls = {100.0: 6.1, 200.0: 1.9, 300.0: 0.0}
    clean, excused = jitter.judge_tail(above, 1.0, 10.0, lambda t0, _t1: stalls[t0])
    assert excused == 1
    assert clean == [(1.2, 200.0, 200.012), (1.05, 300.0, 300.0105)]


def test_with_a_silent_witness_nothing_is_excused():
    above = [(1.3, 1.0, 1.013), (1.1, 2.0, 2.011)]
    clean, excused = jitter.judge_tail(above, 0.9, 10.0, lambda _t0, _t1: 0.0)
    assert (len(clean), excused) == (2, 0)
