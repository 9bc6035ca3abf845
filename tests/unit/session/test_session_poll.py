"""Poll Sequence in both directions (§6.5) and Demand mode (§6.6, §6.8.4, §6.8.7)."""

from __future__ import annotations

from typing import Any

from harness.sessions import (
    SECOND,
    bring_up,
    deliver,
    drain_events,
    make,
    packet,
    reconfigure,
    run_until,
    sent,
)
from xdp_bfd.session import Session, StateChanged
from xdp_bfd.wire.control import Diag, State

UP, DOWN = State.UP, State.DOWN


def up(now: int = 10 * SECOND, peer: dict[str, Any] | None = None, **kw: Any) -> tuple[Session, int]:
    """Up, slow-start Poll done and followed by a plain packet; detection left to the test."""
    peer = peer or {}
    s = make(now, **kw)
    sent(s, now)
    now = bring_up(s, now, **peer)
    deliver(s, packet(UP, final=True, **peer), now + 1_000)
    deliver(s, packet(UP, **peer), now + 2_000)
    sent(s, now + 2_000)
    drain_events(s)
    assert not s.poll_active
    return s, now + 3_000


# --- the peer polls us -------------------------------------------------------------------


def test_peer_poll_is_answered_at_once_without_touching_the_schedule() -> None:
    s, now = up()
    s.detection_external = True
    before = s.get_timer()
    deliver(s, packet(UP, poll=True, desired_min_tx_us=500_000, required_min_rx_us=200_000), now)
    out = sent(s, now)
    assert len(out) == 1
    assert out[0].final and not out[0].poll
    assert s.get_timer() == before
    # The new parameters apply straight away.
    assert s.remote_desired_tx_us == 500_000
    assert s.remote_min_rx_us == 200_000
    assert s.detect_time_us == 3 * 500_000


def test_every_poll_gets_its_own_final() -> None:
    s, now = up()
    for i in range(5):
        deliver(s, packet(UP, poll=True), now + i)
        assert [p.final for p in sent(s, now + i)] == [True]


def test_peer_poll_while_we_poll_never_sets_both_bits() -> None:
    s, now = up()
    s.detection_external = True
    reconfigure(s, now, min_tx_us=200_000)
    assert s.poll_active
    deliver(s, packet(UP, poll=True), now + 1)
    final = sent(s, now + 1)
    assert [(p.poll, p.final) for p in final] == [(False, True)]
    # Our own Poll carries on in the periodic packets.
    _, out = run_until(s, now + 1, now + SECOND)
    assert out and all(p.poll and not p.final for _, p in out)


# --- we poll the peer -------------------------------------------------------------------------


def test_our_poll_repeats_until_a_final_arrives() -> None:
    s, now = up()
    s.detection_external = True
    reconfigure(s, now, min_tx_us=250_000)
    now, out = run_until(s, now, now + 2 * SECOND)
    assert len(out) >= 6
    assert all(p.poll for _, p in out)
    # A packet without F does not end it.
    deliver(s, packet(UP), now)
    assert s.poll_active
    deliver(s, packet(UP, final=True), now + 1)
    assert not s.poll_active
    _, out = run_until(s, now + 1, now + 2 * SECOND)
    assert out and not any(p.poll for _, p in out)


def test_a_poll_is_announced_only_once_its_first_p_has_gone_out() -> None:
    """The kernel's packets carry P from ``poll_announced`` on: a Final before our first P
    cannot end the Poll (§6.5), so a P of the kernel's must not go before it."""
    s, now = up()
    s.detection_external = True
    s.periodic_tx_external = True  # the kernel clocks the session
    # A change of our timers: our Poll begins, its first P not sent yet.
    reconfigure(s, now, min_tx_us=250_000)
    assert s.poll_active and not s.poll_announced
    # A Final now answers no P of ours: ignored, and the Poll still waits for its first P.
    deliver(s, packet(UP, final=True), now + 1)
    assert s.poll_active and not s.poll_announced
    # The first P is the session's own, at its next periodic slot; from then on it is announced.
    now, out = run_until(s, now + 1, now + SECOND)
    assert [p.poll for _, p in out][:1] == [True]
    assert s.poll_announced
    deliver(s, packet(UP, final=True), now + 1)
    assert not s.poll_active and not s.poll_announced


def test_poll_rides_on_periodic_packets_only() -> None:
    s, now = up()
    s.detection_external = True
    next_slot = s.get_timer()
    reconfigure(s, now, min_tx_us=250_000)
    # §6.5: no extra packet for the Poll when periodic packets are flowing.
    assert s.datagrams_to_send(now) == []
    assert s.get_timer() is not None and s.get_timer() <= next_slot


def test_start_poll_only_while_up() -> None:
    s = make(0)
    s.start_poll(0)
    assert not s.poll_active
    s, now = up()
    s.start_poll(now)
    assert s.poll_active


# --- Demand mode, we ask for it (§6.6) --------------------------------------------------------


def test_demand_bit_only_when_both_up_and_announced_with_a_poll() -> None:
    s = make(0, demand=True, min_tx_us=SECOND)
    _, out = run_until(s, 0, 3 * SECOND)
    assert not any(p.demand for _, p in out)
    deliver(s, packet(DOWN, your=0), 3 * SECOND)
    assert not any(p.demand for p in sent(s, 3 * SECOND))
    deliver(s, packet(UP), 3 * SECOND + 1)
    out = sent(s, 3 * SECOND + 1)
    # min_tx is already 1 s, so this Poll is for the D bit alone.
    assert [(p.state, p.demand, p.poll) for p in out] == [(UP, True, True)]


def test_local_demand_detects_only_through_polls() -> None:
    s, now = up(demand=True)
    # The peer has stopped sending: async detection no longer applies.
    now, _ = run_until(s, now, now + 60 * SECOND)
    assert s.state == UP
    detect = s.detect_time_us
    # §6.8.4 demand formula: our multiplier times our agreed transmit interval.
    assert detect == 3 * max(300_000, s.remote_min_rx_us)
    s.start_poll(now)
    now, out = run_until(s, now, now + detect + SECOND)
    polls = [t for t, p in out if p.poll]
    assert polls
    assert s.state == DOWN
    assert drain_events(s) == [StateChanged(UP, DOWN, Diag.CONTROL_DETECTION_TIME_EXPIRED, polls[0] + detect)]


def test_local_demand_poll_answered_keeps_session_up() -> None:
    s, now = up(demand=True)
    for _ in range(20):
        s.start_poll(now)
        now, out = run_until(s, now, now + 400_000)
        assert out and out[0][1].poll
        deliver(s, packet(UP, final=True), now)
        assert not s.poll_active
        deliver(s, packet(UP), now + 1)  # lets the next Poll start straight away
        now += 5 * SECOND
        run_until(s, now - 5 * SECOND, now)
    assert s.state == UP
    assert drain_events(s) == []


# --- Demand mode, the peer asks for it --------------------------------------------------------


def test_remote_demand_stops_periodic_tx() -> None:
    s, now = up()
    s.detection_external = True
    deliver(s, packet(UP, demand=True), now)
    assert s.remote_demand
    _, out = run_until(s, now, now + 60 * SECOND)
    assert out == []
    # A Poll is still answered.
    deliver(s, packet(UP, demand=True, poll=True), now + 60 * SECOND)
    assert [p.final for p in sent(s, now + 60 * SECOND)] == [True]


def test_remote_demand_poll_for_our_change_then_silence_again() -> None:
    s, now = up()
    s.detection_external = True
    deliver(s, packet(UP, demand=True), now)
    run_until(s, now, now + 10 * SECOND)
    now += 10 * SECOND
    reconfigure(s, now, min_tx_us=200_000)
    # No periodic packets to ride on: the Poll starts transmitting at once.
    out = sent(s, now)
    assert [p.poll for p in out] == [True]
    now, out = run_until(s, now, now + SECOND)
    assert out and all(p.poll for _, p in out)
    deliver(s, packet(UP, demand=True, final=True), now)
    _, out = run_until(s, now, now + 30 * SECOND)
    assert out == []


def test_remote_demand_content_change_is_pushed_with_a_poll() -> None:
    s, now = up()
    s.detection_external = True
    deliver(s, packet(UP, demand=True), now)
    reconfigure(s, now, detect_mult=7)
    assert s.poll_active
    # Not faster than the negotiated interval since our last packet (§6.8.7).
    _, out = run_until(s, now, now + s.tx_interval_us)
    assert [(p.poll, p.detect_mult) for _, p in out] == [(True, 7)]


def test_remote_demand_ends_and_periodic_resumes() -> None:
    s, now = up()
    s.detection_external = True
    deliver(s, packet(UP, demand=True), now)
    _, out = run_until(s, now, now + 5 * SECOND)
    assert out == []
    deliver(s, packet(UP, demand=False), now + 5 * SECOND)
    _, out = run_until(s, now + 5 * SECOND, now + 6 * SECOND)
    assert len(out) >= 3


def test_remote_demand_ignored_when_not_up() -> None:
    s = make(0)
    deliver(s, packet(DOWN, your=0, demand=True), 0)
    assert s.state == State.INIT
    _, out = run_until(s, 0, 3 * SECOND)
    assert out  # still periodic: §6.6 needs both ends Up
