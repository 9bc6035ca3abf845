"""RFC 5880 §6.2 / §6.8.6 state machine: every (state, received state) cell and timer expiry."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from harness.sessions import (
    LOCAL_DISCR,
    PEER_DISCR,
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
from xdp_bfd.wire.control import Diag, State, decode_control

D, AD, IN, U = State.DOWN, State.ADMIN_DOWN, State.INIT, State.UP
NO, DET, NBR, ADM = (
    Diag.NONE,
    Diag.CONTROL_DETECTION_TIME_EXPIRED,
    Diag.NEIGHBOR_SIGNALED_SESSION_DOWN,
    Diag.ADMINISTRATIVELY_DOWN,
)


def session_in(state: State) -> tuple[Session, int]:
    """A session in ``state`` with its outbox and events drained; returns it with the current time."""
    now = 10 * SECOND
    if state == AD:
        s = make(now, shutdown=True)
    else:
        s = make(now)
        if state == IN:
            deliver(s, packet(D, your=0), now)
        elif state == U:
            now = bring_up(s, now)
    sent(s, now)
    drain_events(s)
    assert s.state == state
    return s, now + 1_000


# (local state, received state) -> (new state, diag after, or None when nothing changes)
TRANSITIONS: list[tuple[State, State, State, Diag | None]] = [
    (D, AD, D, None),
    (D, D, IN, NO),
    (D, IN, U, NO),
    (D, U, D, None),
    (IN, AD, D, NBR),
    (IN, D, IN, None),
    (IN, IN, U, NO),
    (IN, U, U, NO),
    (U, AD, D, NBR),
    (U, D, D, NBR),
    (U, IN, U, None),
    (U, U, U, None),
    # §6.8.6: in AdminDown the packet is discarded after the remote values are recorded.
    (AD, AD, AD, None),
    (AD, D, AD, None),
    (AD, IN, AD, None),
    (AD, U, AD, None),
]


@pytest.mark.parametrize(("start", "received", "expected", "diag"), TRANSITIONS)
def test_transition_on_received_state(
    start: State, received: State, expected: State, diag: Diag | None
) -> None:
    s, now = session_in(start)
    diag_before = s.local_diag
    deliver(s, packet(received), now)
    assert s.state == expected
    assert s.remote_state == received
    assert s.remote_discr == PEER_DISCR
    events = drain_events(s)
    out = sent(s, now)
    if diag is None:
        assert events == []
        assert s.local_diag == diag_before
        assert out == []  # nothing changed, so nothing is sent ahead of the schedule
    else:
        assert events == [StateChanged(start, expected, diag, now)]
        assert s.local_diag == diag
        # §6.8.7: the new state goes out at once, not at the next periodic slot.
        assert [p.state for p in out] == [expected]
        assert out[0].diag == diag
        assert out[0].your_discr == PEER_DISCR


@pytest.mark.parametrize(("start", "received", "expected", "diag"), TRANSITIONS)
def test_poll_is_answered_in_every_cell(
    start: State, received: State, expected: State, diag: Diag | None
) -> None:
    s, now = session_in(start)
    deliver(s, packet(received, poll=True), now)
    out = sent(s, now)
    if start == AD:
        # The packet is discarded before the Poll is looked at (§6.8.6 order).
        assert out == []
        return
    # One packet only: the Final itself carries any new state.
    assert len(out) == 1
    assert out[0].final and not out[0].poll
    assert out[0].state == expected


@pytest.mark.parametrize(
    ("start", "expected", "diag"),
    [(D, D, None), (IN, D, DET), (U, D, DET), (AD, AD, None)],
)
def test_detection_timer_expiry(start: State, expected: State, diag: Diag | None) -> None:
    s, now = session_in(start)
    if start in (D, AD):
        # Let the session hear from the peer without moving, so there is a discriminator to forget.
        deliver(s, packet(AD), now)
        sent(s, now)
        drain_events(s)
    detect = s.detect_time_us
    assert detect > 0
    last_rx = s.last_rx_us
    assert s.remote_discr == PEER_DISCR
    # Nothing happens a microsecond early.
    run_until(s, now, last_rx + detect - 1)
    assert s.state == start
    assert s.remote_discr == PEER_DISCR
    _, out = run_until(s, last_rx + detect - 1, last_rx + detect)
    assert s.state == expected
    # §6.8.1: bfd.RemoteDiscr is zeroed once a Detection Time passes in silence, in any state.
    assert s.remote_discr == 0
    events = drain_events(s)
    if diag is None:
        assert events == []
    else:
        assert events == [StateChanged(start, D, diag, last_rx + detect)]
        assert s.local_diag == diag
        assert out[0][1].state == D
        assert out[0][1].diag == diag
        assert out[0][1].your_discr == 0


def test_detection_time_is_remote_mult_times_slower_of_rx_and_remote_tx() -> None:
    s, now = session_in(U)
    deliver(s, packet(U, detect_mult=5, desired_min_tx_us=400_000), now)
    # §6.8.4: remote Detect Mult x max(bfd.RequiredMinRxInterval, remote Desired Min TX).
    assert s.detect_time_us == 5 * 400_000
    deliver(s, packet(U, detect_mult=2, desired_min_tx_us=100_000), now + 1)
    assert s.detect_time_us == 2 * 300_000


def test_full_handshake_from_both_roles() -> None:
    # Peer starts Down and learns our discriminator: Down -> Init -> Up.
    s = make(0)
    deliver(s, packet(D, your=0), 0)
    deliver(s, packet(U), 1)
    assert [e.new for e in drain_events(s)] == [IN, U]
    # Peer already in Init when we hear it first: Down -> Up directly.
    s = make(0)
    deliver(s, packet(IN), 0)
    assert [e.new for e in drain_events(s)] == [U]


def test_up_down_counters() -> None:
    s, now = session_in(U)
    assert s.up_since_us > 0
    assert s.flaps == 0
    deliver(s, packet(D), now)
    assert s.flaps == 1
    assert s.up_since_us == 0
    deliver(s, packet(IN), now + 1)
    assert s.state == U
    assert s.up_since_us == now + 1
    s.detection_expired(now + 2)
    assert s.flaps == 2
    assert s.rx_packets >= 4


def test_a_down_sent_ahead_of_the_machine_is_not_sent_twice() -> None:
    s, now = session_in(U)
    sent(s, now)
    ahead = s.expiry_datagram()
    assert ahead is not None
    s.detection_expired(now + 1, sent=ahead)
    assert s.state == D and s.local_diag == DET
    # The host sent it: the machine queues nothing more at the transition.
    assert s.datagrams_to_send(now + 1) == []


def test_a_wrong_guess_sent_ahead_still_lets_the_machine_send_its_own_down() -> None:
    s, now = session_in(U)
    sent(s, now)
    ahead = s.expiry_datagram()
    s.detection_expired(now + 1, sent=b"not the down")
    assert s.datagrams_to_send(now + 1) == [ahead]


def test_the_down_ahead_is_built_once_per_configuration_and_stays_the_machines_own() -> None:
    s, now = session_in(U)
    sent(s, now)
    first = s.expiry_datagram()
    # A Poll, new remote timers: what they change, the Down does not carry.
    s.start_poll(now)
    deliver(s, packet(U, desired_min_tx_us=50_000, required_min_rx_us=70_000), now + 1)
    assert s.expiry_datagram() is first
    # A new configuration shapes the Down: it is built again, and it is what the machine sends.
    s.set_config(replace(s.config, detect_mult=5), now + 2)
    ahead = s.expiry_datagram()
    assert ahead is not first and decode_control(ahead).detect_mult == 5
    s.detection_expired(now + 3)
    assert s.datagrams_to_send(now + 3)[:1] == [ahead]


def test_only_an_init_or_up_session_has_a_down_to_send_ahead() -> None:
    for state in (D, AD):
        s, _ = session_in(state)
        assert s.expiry_datagram() is None


def test_received_diag_is_recorded() -> None:
    s, now = session_in(U)
    deliver(s, packet(D, diag=Diag.PATH_DOWN), now)
    assert s.remote_diag == Diag.PATH_DOWN
    assert s.local_diag == NBR


def test_down_keeps_diag_through_init_and_clears_it_on_up() -> None:
    s, now = session_in(U)
    deliver(s, packet(D), now)
    assert s.local_diag == NBR
    deliver(s, packet(D), now + 1)
    assert s.state == IN
    assert s.local_diag == NBR
    deliver(s, packet(U), now + 2)
    assert s.state == U
    assert s.local_diag == NO


# --- AdminDown (§6.8.16) ---------------------------------------------------------------


def test_shutdown_goes_admin_down_and_tells_the_peer_at_once() -> None:
    s, now = session_in(U)
    reconfigure(s, now, shutdown=True)
    assert s.state == AD
    assert s.local_diag == ADM
    assert drain_events(s) == [StateChanged(U, AD, ADM, now)]
    out = sent(s, now)
    assert [(p.state, p.diag) for p in out] == [(AD, ADM)]
    # No detection in AdminDown, and packets keep flowing at the slow rate.
    assert s.desired_min_tx_us >= SECOND
    _, later = run_until(s, now, now + 30 * SECOND)
    assert s.state == AD
    assert len(later) >= 20
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(later)]
    assert min(gaps) >= 750_000  # ≥ 1 s less at most 25 % jitter
    assert all(p.state == AD and p.diag == ADM for _, p in later)


def test_shutdown_release_returns_to_down_and_session_recovers() -> None:
    s, now = session_in(U)
    reconfigure(s, now, shutdown=True)
    reconfigure(s, now + 1, shutdown=False)
    assert s.state == D
    assert drain_events(s)[-1] == StateChanged(AD, D, ADM, now + 1)
    assert [p.state for p in sent(s, now + 1)][-1] == D
    deliver(s, packet(D), now + 2)
    deliver(s, packet(U), now + 3)
    assert s.state == U
    assert s.local_diag == NO


def test_created_shut_down_stays_admin_down() -> None:
    s = make(0, shutdown=True)
    assert s.state == AD
    assert s.local_diag == ADM
    for st in (D, IN, U):
        deliver(s, packet(st, your=0 if st == D else LOCAL_DISCR), 1)
    assert s.state == AD
    assert drain_events(s) == []


def test_admin_down_queues_one_packet_even_when_already_admin_down() -> None:
    s, now = session_in(U)
    s.admin_down(now)
    out = sent(s, now)
    assert [(p.state, p.diag) for p in out] == [(AD, ADM)]
    assert drain_events(s) == [StateChanged(U, AD, ADM, now)]
    s.admin_down(now + 1)
    assert [p.state for p in sent(s, now + 1)] == [AD]
    assert drain_events(s) == []


def test_peer_admin_down_brings_us_down_with_diag_3_and_we_stay_down() -> None:
    s, now = session_in(U)
    deliver(s, packet(AD, diag=ADM), now)
    assert s.state == D
    assert s.local_diag == NBR
    # A peer that stays AdminDown keeps us Down (not Init).
    deliver(s, packet(AD, diag=ADM), now + SECOND)
    assert s.state == D


# --- passive role (§6.1, §6.8.7) --------------------------------------------------------


def test_passive_is_silent_until_it_hears_the_peer() -> None:
    s = make(0, passive=True)
    assert s.get_timer() is None
    _, out = run_until(s, 0, 60 * SECOND)
    assert out == []
    assert s.tx_packets == 0
    deliver(s, packet(D, your=0), 60 * SECOND)
    assert s.state == IN
    out = sent(s, 60 * SECOND)
    assert [p.state for p in out] == [IN]
    assert out[0].your_discr == PEER_DISCR
    assert s.get_timer() is not None


def test_passive_falls_silent_again_when_the_peer_is_forgotten() -> None:
    s = make(0, passive=True)
    deliver(s, packet(AD, your=0), 0)
    assert s.state == D
    assert s.get_timer() is not None  # now it may talk
    _, out = run_until(s, 0, 10 * SECOND)
    assert s.remote_discr == 0
    last = out[-1][0]
    assert last < s.last_rx_us + s.detect_time_us + 1
    assert s.get_timer() is None
    s.admin_down(20 * SECOND)
    assert sent(s, 20 * SECOND) == []


def test_active_session_sends_first_packet_immediately() -> None:
    s = make(5 * SECOND)
    assert s.get_timer() == 5 * SECOND
    out = sent(s, 5 * SECOND)
    assert len(out) == 1
    p = out[0]
    assert (p.state, p.my_discr, p.your_discr, p.diag) == (D, LOCAL_DISCR, 0, NO)
    assert p.desired_min_tx_us == SECOND  # slow start
    assert p.required_min_rx_us == 300_000
    assert not p.poll and not p.final and not p.demand


def test_detection_external_disables_internal_timer() -> None:
    s, now = session_in(U)
    s.detection_external = True
    run_until(s, now, now + 60 * SECOND)
    # Nothing heard for a minute, but the kernel owns detection.
    assert s.state == U
    s.detection_expired(now + 60 * SECOND)
    assert s.state == D
    assert s.local_diag == DET
    assert s.remote_discr == 0


def test_note_rx_refreshes_detection() -> None:
    s, now = session_in(U)
    detect = s.detect_time_us
    t = now
    for _ in range(50):
        t += detect // 2
        s.note_rx(t)
        run_until(s, t - detect // 2, t)
    assert s.state == U
    assert s.last_rx_us == t
    run_until(s, t, t + detect)
    assert s.state == D


def test_set_config_rejects_a_new_key() -> None:
    s, now = session_in(U)
    with pytest.raises(ValueError, match="key"):
        reconfigure(s, now, multihop=True)


def test_a_fast_path_hold_delays_forgetting_the_remote_discriminator_while_down() -> None:
    """With ``rx_hold_us`` set (XDP holds back a Down session's repeats), §6.8.1's lapse moves by it."""
    hold = 250_000
    s, now = session_in(D)
    s.rx_hold_us = hold
    deliver(s, packet(U), now)  # Up to a Down session: ignored by the machine, remembered as the peer's
    sent(s, now)
    assert (s.state, s.remote_discr) == (D, PEER_DISCR)
    lapse = s.last_rx_us + s.detect_time_us + hold
    run_until(s, now, lapse - 1)
    assert s.remote_discr == PEER_DISCR, "forgotten inside the hold: a repeat held back in XDP is not silence"
    run_until(s, lapse - 1, lapse)
    assert (s.state, s.remote_discr) == (D, 0)
