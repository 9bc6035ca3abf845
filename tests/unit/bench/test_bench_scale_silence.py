"""bench/scale.py's wire witness of a mass failure: each session's Down against the silence before it."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "bench"))

import dp_controller  # noqa: E402
import scale  # noqa: E402

from harness.capture import WirePacket  # noqa: E402
from harness.inject import bfd_control  # noqa: E402

US = scale.synth_peer.ENGINE_IP


def _pk(ts: float, src: str, dst: str, state: str, diag: int = 0) -> WirePacket:
    return WirePacket(ts, src, dst, 49152, 3784, 255, True, bfd_control(state=state, diag=diag))


def test_each_down_is_judged_against_the_silence_it_answers():
    a, b, c, d, e = (f"198.19.33.{i}" for i in range(1, 6))
    pkts = [
        # a: Up both ways, silent after 1.000, our Down 31 ms later (1 ms past a 30 ms detection time).
        _pk(0.990, a, US, "up"),
        _pk(0.991, US, a, "up"),
        _pk(1.000, a, US, "up"),
        _pk(1.031, US, a, "down", 1),
        _pk(2.031, US, a, "down", 1),  # the next slow-rate Down is not a second transition
        # b: paused 40 ms, our Down 5 ms past detection, then its frames came back.
        _pk(1.000, US, b, "up"),
        _pk(1.010, b, US, "up"),
        _pk(1.045, US, b, "down", 1),
        _pk(1.050, b, US, "up"),
        # c: already Down when the capture began (no Up of ours): no witness, not counted.
        _pk(1.000, c, US, "up"),
        _pk(1.100, US, c, "down", 1),
        # d: paused 40 ms, one frame came back, our Down 1 ms later answers the pause (11 ms late).
        _pk(0.999, US, d, "up"),
        _pk(1.000, d, US, "up"),
        _pk(1.040, d, US, "up"),
        _pk(1.041, US, d, "down", 1),
        # e: our Down only 10 ms after the peer's frame, no silence on the wire: early, -20 ms.
        _pk(0.999, US, e, "up"),
        _pk(1.000, e, US, "up"),
        _pk(1.010, e, US, "up"),
        _pk(1.020, US, e, "down", 1),
    ]
    w = scale.wire_downs(sorted(pkts, key=lambda p: p.ts), 30.0)
    assert (w["peers_seen"], w["up_seen"], w["downs_seen"]) == (5, 4, 4)
    assert (w["paused"], w["resumed"], w["early"]) == (1, 1, 1)
    # Sorted overshoots: -20 (e), 1 (a), 5 (b), 11 (d).
    assert (w["overshoot_ms"]["p50"], w["overshoot_ms"]["max"]) == (5.0, 11.0)
    assert w["span_ms"] == 25.0


def test_no_down_is_no_figure():
    w = scale.wire_downs([_pk(1.0, "198.19.33.1", US, "up"), _pk(1.001, US, "198.19.33.1", "up")], 30.0)
    assert (w["up_seen"], w["downs_seen"], w["overshoot_ms"], w["span_ms"]) == (1, 0, None, None)


def test_each_report_to_the_controller_is_judged_against_the_same_sessions_wire():
    """The controller's first Down of each session after the stop, matched by bfdd's id (i + 1)."""
    a, b = scale.synth_peer.peer_address(0), scale.synth_peer.peer_address(1)
    pkts = [
        _pk(0.999, US, a, "up"),
        _pk(1.000, a, US, "up"),
        _pk(1.031, US, a, "down", 1),
        _pk(0.999, US, b, "up"),
        _pk(1.000, b, US, "up"),
        _pk(1.035, US, b, "down", 1),
    ]
    found: dict = {}
    scale.wire_downs(pkts, 30.0, found)
    assert found == {a: (1.000, 1.031), b: (1.000, 1.035)}
    changes = [
        dp_controller.Change(0.5, 1, 1, 0),  # a bring-up's Down, before the stop: not this silence
        dp_controller.Change(1.040, 1, 1, 1),  # a: 10 ms past detection, 9 ms after its Down
        dp_controller.Change(1.041, 1, 1, 1),  # a second report of a's Down is not its first
        dp_controller.Change(1.050, 2, 3, 0),  # b Up again: not a Down
        dp_controller.Change(1.060, 2, 1, 1),  # b: 30 ms past detection, 25 ms after its Down
        dp_controller.Change(1.070, 9, 1, 1),  # a session the capture did not see: reported, unmatched
    ]
    c = scale.controller_downs(changes, found, since=0.9, detect_ms=30.0)
    assert (c["downs_reported"], c["matched_to_wire"]) == (3, 2)
    assert (round(c["overshoot_ms"]["p50"], 1), round(c["overshoot_ms"]["max"], 1)) == (30.0, 30.0)
    assert round(c["after_wire_ms"]["max"], 1) == 25.0
    assert c["span_ms"] == 30.0
    assert scale.controller_downs([], found, since=0.9, detect_ms=30.0)["overshoot_ms"] is None


def test_the_pace_tells_a_queue_behind_the_path_from_a_late_detection():
    """40 Downs falling due 25 us apart that left one every 0.1 ms, and one due alone, 5.1 ms late."""
    # Down i falls due at 1.0 + i * 25 us (a hair early, so no comparison rests on a float's last
    # bit) and leaves at 1.0 + i * 0.1 ms; the lone one falls due at 1.005 when all have left.
    due_left = [(1.0 + i * 25e-6 - 1e-9, 1.0 + i * 1e-4) for i in range(40)]
    due_left.append((1.005, 1.0101))
    p = scale.down_pace(due_left)
    assert p is not None
    # 41 dues over 5 ms; the densest 5 ms holds all 40 of the burst (the lone one is 5 ms after
    # the first, one float step outside the window).
    assert (p["due_per_ms"], p["due_per_ms_peak"]) == (8.0, 8.0)
    # At departure k, min(40, 4k + 1) were due and k had left: 30 queued at k = 10, the most.
    assert p["queued_max"] == 30
    # More than a round (16) queued at departures 6 to 23: 18 departures over 1.8 ms.
    assert (p["left_per_ms_while_queued"], p["queued_ms"]) == (10.0, 1.8)
    # Late by more than 1 ms: Downs 14 to 39 (i x 75 us late) and the lone one. Behind more than a
    # round when they fell due (i + 1 due, ceil(i / 4) gone): Downs 22 to 39; the lone one was not.
    assert (p["late"], p["late_queued"]) == (27, 18)


def test_no_pace_without_two_downs():
    assert scale.down_pace([(1.0, 1.001)]) is None
