"""Timer negotiation (§6.8.2, §6.8.3), transmission (§6.8.7) and jitter."""

from __future__ import annotations

import itertools
import random
import statistics
from typing import Any

import pytest

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
from xdp_bfd.session import Session
from xdp_bfd.session.timers import jittered
from xdp_bfd.wire.control import State


def steady_up(now: int = 10 * SECOND, peer: dict[str, Any] | None = None, **kw: Any) -> tuple[Session, int]:
    """An Up session whose slow-start Poll has completed and been followed by a plain packet.

    The scripted peer only speaks when a test makes it, so detection is handed
    to an (imaginary) external detector to keep the session Up.
    """
    peer = peer or {}
    s = make(now, **kw)
    s.detection_external = True
    sent(s, now)
    now = bring_up(s, now, **peer)
    assert s.poll_active
    now += 1_000
    deliver(s, packet(State.UP, final=True, **peer), now)
    assert not s.poll_active
    deliver(s, packet(State.UP, **peer), now + 1_000)
    sent(s, now + 1_000)
    return s, now + 2_000


def gaps(times: list[int]) -> list[int]:
    return [b - a for a, b in itertools.pairwise(times)]


# --- slow start (§6.8.3) --------------------------------------------------------------


def test_not_up_advertises_at_least_one_second() -> None:
    s = make(0, min_tx_us=50_000, min_rx_us=50_000)
    assert s.desired_min_tx_us == SECOND
    assert s.required_min_rx_us == 50_000  # only the TX side is held back
    assert s.tx_interval_us == SECOND
    _, out = run_until(s, 0, 20 * SECOND)
    assert all(p.desired_min_tx_us == SECOND for _, p in out)
    assert all(750_000 <= g <= SECOND for g in gaps([t for t, _ in out]))


def test_slow_configured_value_is_kept_when_not_up() -> None:
    s = make(0, min_tx_us=2 * SECOND)
    assert s.desired_min_tx_us == 2 * SECOND


def test_reaching_up_switches_to_configured_with_a_poll() -> None:
    s = make(0, min_tx_us=100_000, min_rx_us=100_000)
    sent(s, 0)
    deliver(s, packet(State.DOWN, your=0, required_min_rx_us=100_000), 1_000)
    init_pkt = sent(s, 1_000)
    assert init_pkt[0].desired_min_tx_us == SECOND
    assert not init_pkt[0].poll
    deliver(s, packet(State.UP, required_min_rx_us=100_000), 2_000)
    out = sent(s, 2_000)
    # The Up packet itself opens the Poll and carries the new value.
    assert [(p.state, p.poll, p.desired_min_tx_us) for p in out] == [(State.UP, True, 100_000)]
    assert s.poll_active
    # A decrease of our TX interval is safe to use at once.
    assert s.tx_interval_us == 100_000
    # Every packet carries P until the Final arrives.
    now, later = run_until(s, 2_000, 2_000 + 5 * 100_000)
    assert later and all(p.poll for _, p in later)
    deliver(s, packet(State.UP, final=True, required_min_rx_us=100_000), now)
    assert not s.poll_active
    _, after = run_until(s, now, now + 5 * 100_000)
    assert after and not any(p.poll for _, p in after)


def test_up_before_the_peer_keeps_the_slow_rate_until_the_peer_says_up() -> None:
    """Up on the peer's Init: nobody can answer a fast rate for us yet, so it waits for the peer's Up."""
    s = make(0, min_tx_us=100_000, min_rx_us=100_000)
    s.detection_external = True  # the scripted peer speaks only when told to
    sent(s, 0)
    deliver(s, packet(State.INIT, desired_min_tx_us=SECOND, required_min_rx_us=100_000), 1_000)
    out = sent(s, 1_000)
    assert s.state == State.UP and s.remote_state == State.INIT and not s.both_up
    assert [(p.state, p.poll, p.desired_min_tx_us) for p in out] == [(State.UP, False, SECOND)]
    assert (s.tx_interval_us, s.poll_active) == (SECOND, False)
    now, later = run_until(s, 1_000, 1_000 + 3 * SECOND)
    assert 2 <= len(later) <= 4 and all(not p.poll and p.desired_min_tx_us == SECOND for _, p in later)
    deliver(s, packet(State.UP, required_min_rx_us=100_000), now)
    assert s.both_up
    out = sent(s, now)
    # The peer's Up opens our Poll to the configured rate, used at once (a faster TX is safe).
    assert [(p.state, p.poll, p.desired_min_tx_us) for p in out] == [(State.UP, True, 100_000)]
    assert (s.tx_interval_us, s.poll_active) == (100_000, True)


def test_leaving_up_goes_back_to_slow_rate_without_a_poll() -> None:
    s, now = steady_up(min_tx_us=100_000)
    assert s.desired_min_tx_us == 100_000
    deliver(s, packet(State.DOWN), now)
    out = sent(s, now)
    assert [(p.state, p.poll, p.desired_min_tx_us) for p in out] == [(State.DOWN, False, SECOND)]
    assert s.tx_interval_us == SECOND
    assert not s.poll_active


def test_leaving_up_cancels_a_poll_in_flight() -> None:
    s = make(0)
    now = bring_up(s, 0)
    assert s.poll_active
    deliver(s, packet(State.DOWN), now + 1)
    assert not s.poll_active
    _, out = run_until(s, now + 1, now + 5 * SECOND)
    assert not any(p.poll for _, p in out)


# --- changes while Up (§6.8.3) ----------------------------------------------------------


def test_desired_tx_increase_waits_for_the_final() -> None:
    s, now = steady_up(min_tx_us=300_000)
    reconfigure(s, now, min_tx_us=800_000)
    assert s.poll_active
    assert s.desired_min_tx_us == 800_000  # advertised at once...
    assert s.tx_interval_us == 300_000  # ...but not used until the Poll completes
    now, out = run_until(s, now, now + 3 * SECOND)
    assert all(p.poll and p.desired_min_tx_us == 800_000 for _, p in out)
    assert max(gaps([t for t, _ in out])) <= 300_000
    deliver(s, packet(State.UP, final=True), now)
    assert s.tx_interval_us == 800_000
    _, out = run_until(s, now, now + 10 * SECOND)
    assert all(600_000 <= g <= 800_000 for g in gaps([t for t, _ in out]))


def test_desired_tx_decrease_takes_effect_at_once() -> None:
    s, now = steady_up(min_tx_us=300_000, peer={"required_min_rx_us": 50_000})
    reconfigure(s, now, min_tx_us=100_000)
    assert s.poll_active
    assert s.tx_interval_us == 100_000
    _, out = run_until(s, now, now + SECOND)
    assert max(gaps([t for t, _ in out])) <= 100_000


def test_required_rx_decrease_keeps_old_detection_time_until_final() -> None:
    peer = {"desired_min_tx_us": 50_000, "required_min_rx_us": 50_000}
    s, now = steady_up(min_rx_us=300_000, peer=peer)
    assert s.detect_time_us == 3 * 300_000
    reconfigure(s, now, min_rx_us=100_000)
    assert s.required_min_rx_us == 100_000
    assert s.detect_time_us == 3 * 300_000
    deliver(s, packet(State.UP, **peer), now + 1_000)  # a packet without F changes nothing
    assert s.detect_time_us == 3 * 300_000
    t, out = run_until(s, now + 1_000, now + 400_000)
    assert out and out[0][1].poll  # our Poll went out
    deliver(s, packet(State.UP, final=True, **peer), t)
    assert s.detect_time_us == 3 * 100_000


def test_required_rx_increase_takes_effect_at_once() -> None:
    peer = {"desired_min_tx_us": 50_000}
    s, now = steady_up(min_rx_us=100_000, peer=peer)
    reconfigure(s, now, min_rx_us=500_000)
    assert s.detect_time_us == 3 * 500_000


def test_detect_mult_change_needs_no_poll() -> None:
    s, now = steady_up()
    reconfigure(s, now, detect_mult=5)
    assert not s.poll_active
    now, out = run_until(s, now, now + SECOND)
    assert out[0][1].detect_mult == 5
    assert not out[0][1].poll


def test_remote_rx_reduction_is_honoured_immediately() -> None:
    s, now = steady_up(peer={"required_min_rx_us": SECOND})
    assert s.tx_interval_us == SECOND
    sent(s, now)
    now, out = run_until(s, now, now + 2 * SECOND)
    last_tx = out[-1][0]
    deliver(s, packet(State.UP, poll=True, required_min_rx_us=100_000), last_tx + 10_000)
    assert [p.final for p in sent(s, last_tx + 10_000)] == [True]
    assert s.tx_interval_us == 300_000
    # §6.8.3: no longer than the new interval after the previous packet.
    assert s.get_timer() is not None
    assert s.get_timer() <= last_tx + 300_000


def test_remote_rx_increase_is_never_undercut() -> None:
    s, now = steady_up()
    now, out = run_until(s, now, now + SECOND)
    last_tx = out[-1][0]
    deliver(s, packet(State.UP, required_min_rx_us=2 * SECOND), last_tx + 1)
    _, out = run_until(s, last_tx + 1, last_tx + 20 * SECOND)
    times = [last_tx] + [t for t, _ in out]
    assert min(gaps(times)) >= 1_500_000


def test_no_periodic_tx_when_remote_min_rx_is_zero() -> None:
    s, now = steady_up()
    deliver(s, packet(State.UP, required_min_rx_us=0), now)
    _, out = run_until(s, now, now + 10 * SECOND)
    assert out == []
    # A Poll is still answered.
    deliver(s, packet(State.UP, poll=True, required_min_rx_us=0), now + 10 * SECOND - 1)
    assert [p.final for p in sent(s, now + 10 * SECOND)] == [True]


def test_config_change_during_poll_is_queued_after_it() -> None:
    s, now = steady_up(min_tx_us=300_000)
    reconfigure(s, now, min_tx_us=400_000)
    assert s.poll_active
    reconfigure(s, now + 1, min_tx_us=500_000)
    # Only one Poll in flight: the second change waits, and the P packets keep the first value.
    assert s.desired_min_tx_us == 400_000
    now, out = run_until(s, now + 1, now + SECOND)
    assert {p.desired_min_tx_us for _, p in out} == {400_000}
    deliver(s, packet(State.UP, final=True), now)
    assert s.tx_interval_us == 400_000
    # Not yet: a late Final for the first Poll must not end the second one.
    assert not s.poll_active
    assert s.desired_min_tx_us == 400_000
    deliver(s, packet(State.UP), now + 1_000)
    assert s.poll_active
    assert s.desired_min_tx_us == 500_000
    assert s.tx_interval_us == 400_000  # increase again waits for its own Final
    now, out = run_until(s, now + 1_000, now + SECOND)
    assert out and all(p.poll and p.desired_min_tx_us == 500_000 for _, p in out)
    deliver(s, packet(State.UP, final=True), now)
    assert s.tx_interval_us == 500_000
    assert not s.poll_active


def test_queued_poll_starts_after_an_interval_without_any_packet() -> None:
    s, now = steady_up(min_tx_us=300_000)
    reconfigure(s, now, min_tx_us=400_000)
    reconfigure(s, now, min_tx_us=500_000)
    sent(s, now + 300_000)
    deliver(s, packet(State.UP, final=True), now + 310_000)
    assert not s.poll_active
    deadline = s.get_timer()
    assert deadline is not None and deadline <= now + 310_000 + 400_000
    run_until(s, now + 310_000, now + 310_000 + 400_000)
    assert s.poll_active
    assert s.desired_min_tx_us == 500_000


def test_final_before_our_first_poll_packet_is_ignored() -> None:
    s, now = steady_up()
    reconfigure(s, now, min_tx_us=800_000)
    deliver(s, packet(State.UP, final=True), now + 1)  # no P has gone out yet
    assert s.poll_active
    assert s.tx_interval_us == 300_000


# --- jitter (§6.8.7) ---------------------------------------------------------------------


@pytest.mark.parametrize("interval", [1, 3, 4, 10, 999, 300_000, 1_000_000, 4_294_967_295])
def test_jitter_bounds_function(interval: int) -> None:
    rng = random.Random(7)
    normal = [jittered(interval, 3, rng) for _ in range(2_000)]
    assert all(interval * 3 / 4 <= v <= interval for v in normal)
    single = [jittered(interval, 1, rng) for _ in range(2_000)]
    assert all(interval * 3 / 4 <= v <= max(interval * 9 / 10, interval - interval // 4) for v in single)
    if interval >= 1_000:
        assert all(v <= interval * 9 / 10 for v in single)


def test_jitter_spreads_over_the_whole_range() -> None:
    rng = random.Random(3)
    samples = [jittered(1_000_000, 3, rng) / 1_000_000 for _ in range(20_000)]
    assert min(samples) < 0.76
    assert max(samples) > 0.99
    assert statistics.mean(samples) == pytest.approx(0.875, abs=0.01)
    samples = [jittered(1_000_000, 1, rng) / 1_000_000 for _ in range(20_000)]
    assert min(samples) < 0.76
    assert 0.89 < max(samples) <= 0.90


@pytest.mark.parametrize(("mult", "low", "high"), [(3, 0.75, 1.0), (1, 0.75, 0.90)])
def test_periodic_gaps_are_jittered(mult: int, low: float, high: float) -> None:
    s, now = steady_up(detect_mult=mult, peer={"detect_mult": 3})
    _, out = run_until(s, now, now + 600 * SECOND)
    observed = gaps([t for t, _ in out])
    assert len(observed) > 1_500
    interval = s.tx_interval_us
    assert all(low * interval <= g <= high * interval for g in observed)
    ratios = [g / interval for g in observed]
    assert min(ratios) < low + 0.01
    assert max(ratios) > high - 0.01


def test_same_seed_same_schedule() -> None:
    def schedule(seed: int) -> list[int]:
        s = make(0, seed=seed)
        return [t for t, _ in run_until(s, 0, 60 * SECOND)[1]]

    assert schedule(5) == schedule(5)
    assert schedule(5) != schedule(6)


# --- kernel fast path hooks ------------------------------------------------------------------


def test_periodic_tx_external_suppresses_only_periodic_packets() -> None:
    s, now = steady_up()
    s.periodic_tx_external = True
    assert s.get_timer() is None or s.get_timer() > now + 3600 * SECOND
    _, out = run_until(s, now, now + 10 * SECOND)
    assert out == []
    now += 10 * SECOND
    # Finals still go out at once.
    deliver(s, packet(State.UP, poll=True), now)
    assert [p.final for p in sent(s, now)] == [True]
    # Our own Poll's first P is ours (a Final counts only after it); its repeats are the kernel's.
    reconfigure(s, now, min_tx_us=200_000)
    now, out = run_until(s, now, now + SECOND)
    assert [p.poll for _, p in out] == [True] and s.poll_active
    deliver(s, packet(State.UP, final=True), now)
    assert not s.poll_active
    _, out = run_until(s, now, now + 10 * SECOND)
    assert out == []
    # The transition packet is ours too.
    deliver(s, packet(State.DOWN), now + 10 * SECOND)
    out = sent(s, now + 10 * SECOND)
    assert [p.state for p in out] == [State.DOWN]
    # Not Up: the kernel no longer answers, we send periodically again.
    _, out = run_until(s, now + 10 * SECOND, now + 20 * SECOND)
    assert len(out) >= 9
    drain_events(s)
