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


def test_a_shortfall_is_excused_only_by_a_stall_as_long_before_it():
    # 10 ms nominal, band bottom 0.75: 7.2 ms falls short by 0.3 ms, 7.45 ms by 0.05 ms. The
    # stall must lie in the interval before (its start to the short one's start).
    below = [(0.72, 10.0, 10.009), (0.745, 20.0, 20.0095), (0.745, 30.0, 30.0095)]
    stalls = {(10.0, 10.009): 0.31, (20.0, 20.0095): 0.04, (30.0, 30.0095): 0.06}
    clean, excused = jitter.judge_short(below, 0.75, 10.0, lambda t0, t1: stalls[(t0, t1)])
    assert excused == 2
    assert clean == [(0.745, 20.0, 20.0095)]


def test_with_a_silent_witness_nothing_is_excused():
    above = [(1.3, 1.0, 1.013), (1.1, 2.0, 2.011)]
    clean, excused = jitter.judge_tail(above, 0.9, 10.0, lambda _t0, _t1: 0.0)
    assert (len(clean), excused) == (2, 0)


# --- the suite's jitter part and its target (bench/report.py) -----------------------------------

import report  # noqa: E402
import suite  # noqa: E402


def _doc(**result: object) -> dict:
    r = {
        "sessions": 64, "interval_ms": 10, "detect_mult": 3, "intervals": 300_000, "share_in_band": 1.0,
        "band": [0.75, 1.0], "below_band": 0, "above_band": 0, "above_band_under_stall": 0,
        "above_band_clean": 0, "witness": {"stall_ms": 0.3},
        "quantiles_of_nominal": {"0.001": 0.77, "0.5": 0.87, "0.999": 0.98, "1.0": 0.985},
        "engines": {"flaps": 0}, "clock_share": 0.5,
    }  # fmt: skip
    r |= result
    return {"parts": ["jitter"], "jitter": {"params": {"sessions": 64, "seconds": 20}, "result": r}}


def _target(doc: dict) -> report.Target:
    (t,) = [t for t in report.targets(doc) if t.key == "jitter_band"]
    return t


def test_every_interval_in_the_band_is_met_and_one_outside_is_not():
    assert _target(_doc()).verdict == report.MET
    assert _target(_doc(above_band=1, above_band_clean=1)).verdict == report.NOT_MET
    # Below the band: the clock's unless a stall before it explains it; a document from before
    # the rule counts every one as the clock's.
    assert _target(_doc(below_band=1, below_band_clean=1)).verdict == report.NOT_MET
    assert _target(_doc(below_band=1)).verdict == report.NOT_MET
    t = _target(_doc(below_band=2, below_band_clean=0, above_band=1, above_band_under_stall=1))
    assert t.verdict == report.NOT_JUDGED and "2 below (2 just after a witness stall" in t.measured


def test_an_overrun_under_a_stall_as_long_is_not_judged_and_says_why():
    t = _target(_doc(above_band=3, above_band_under_stall=3))
    assert t.verdict == report.NOT_JUDGED and "witness stall" in t.why
    assert t.figures[0] == ("outside the band", 3, "", 0)


def test_an_errored_or_empty_part_is_not_measured_and_counted_as_an_error():
    doc = {"parts": ["jitter"], "jitter": {"params": {"sessions": 64}, "error": "RuntimeError: boom"}}
    assert _target(doc).verdict == report.NOT_MEASURED
    assert "jitter: RuntimeError: boom" in report.run_errors(doc)
    assert any("boom" in line for line in report.jitter_md(doc))
    assert _target(_doc(intervals=0)).verdict == report.NOT_MET


def test_the_section_shows_the_figures():
    text = "\n".join(report.sections_md(_doc(above_band=2, above_band_under_stall=1)))
    assert "Transmit clock jitter" in text and "| 64 | 300000 | 100.000 | 0 (0) | 2 (1) |" in text


def test_every_profile_runs_jitter_with_arguments_its_parser_takes():
    for name, prof in suite.PROFILES.items():
        args = suite.jitter_args(prof["jitter"])
        assert jitter.check(args) is None, name
        assert jitter.budget_s(args) > args.seconds
    assert "jitter" in suite.PARTS and "jitter" in report.PART_NAMES
