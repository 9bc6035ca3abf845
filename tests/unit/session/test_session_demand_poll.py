"""--demand-poll-us: a Demand-mode session verifies the path on its own cadence."""

from __future__ import annotations

import itertools
import random

import pytest

from harness.sessions import SECOND, Pair, config
from xdp_bfd.session import Session
from xdp_bfd.wire.control import Diag, State

MINUTE = 60 * SECOND


def _pair(poll_us: int) -> Pair:
    a = Session(config(demand=True, min_tx_us=50_000, min_rx_us=50_000), 1, now_us=0, rng=random.Random(1))
    b = Session(config(local=config().peer, peer=config().local, min_tx_us=50_000, min_rx_us=50_000), 2,
                now_us=0, rng=random.Random(2))  # fmt: skip
    a.demand_poll_us = poll_us
    p = Pair(a, b)
    p.run(10 * SECOND)
    assert (a.state, b.state) == (State.UP, State.UP) and b.remote_demand
    return p


def _polls(p: Pair, since: int) -> list[int]:
    """When each Poll Sequence started: a P packet after one without P."""
    starts, prev = [], False
    for t, pkt in p.sent_by("a", since):
        if pkt.poll and not prev:
            starts.append(t)
        prev = pkt.poll
    return starts


@pytest.mark.parametrize("poll_us", [1_000_000, 300_000])
def test_polls_at_the_cadence(poll_us):
    p = _pair(poll_us)
    start = p.now
    p.run(start + 20 * SECOND)
    starts = _polls(p, start)
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(starts) >= 20 * SECOND // (poll_us + 200_000) - 1
    # Each gap is the cadence plus the Poll's own round trip, never less.
    assert all(poll_us <= g <= poll_us + 200_000 for g in gaps), gaps
    assert p.a.flaps == 0


def test_never_faster_than_the_detection_time():
    p = _pair(1)  # asks for a Poll every microsecond
    start = p.now
    p.run(start + 5 * SECOND)
    starts = _polls(p, start)
    assert all(b - a >= p.a.detect_time_us for a, b in itertools.pairwise(starts))
    assert len(starts) >= 5  # the witness: it does poll


def test_zero_never_polls_and_silence_goes_unnoticed():
    p = _pair(0)
    start = p.now
    p.run(start + MINUTE, drop=lambda src, pkt, t: src is p.b)
    # Stock bfdd behaviour: with the peer silent, nothing ever finds out.
    assert _polls(p, start) == []
    assert len(p.sent_by("a", start)) > 100  # a kept talking, so the run was live
    assert p.a.state == State.UP


def test_a_silent_peer_is_found_by_the_next_poll():
    p = _pair(500_000)
    cut = p.now
    p.run(cut + 3 * SECOND, drop=lambda src, pkt, t: src is p.b)
    assert p.a.state == State.DOWN
    down = [e for e in p.events["a"] if e.new == State.DOWN][-1]
    assert down.diag == Diag.CONTROL_DETECTION_TIME_EXPIRED
    assert down.at_us - cut <= 500_000 + 2 * p.a.detect_time_us
