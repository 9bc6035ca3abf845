"""RemoteParamsChanged: the session says when the peer starts advertising other timers or another multiplier.

bfdd shows the peer's timers only as the data plane last reported them, so
the dataplane needs to hear of a change that comes without a state change
(a peer leaving its slow start with a Poll, a reconfigured peer). The event
is opt-in (``remote_events``) and fires once per change, not per packet.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.sessions import SECOND, bring_up, deliver, drain_events, make, packet, sent
from xdp_bfd.session import Rejected, RemoteParamsChanged, Session, StateChanged
from xdp_bfd.wire.control import Diag, State

UP, DOWN, INIT = State.UP, State.DOWN, State.INIT
# What the peer advertises in the support module's packets (300 ms, no echo, 3).
FAST = (300_000, 300_000, 0, 3)


def watched(now: int = 0, **kw: object) -> Session:
    s = make(now, **kw)
    s.remote_events = True
    return s


def up_and_quiet(now: int = 10 * SECOND) -> tuple[Session, int]:
    s = watched(now)
    sent(s, now)
    now = bring_up(s, now)
    deliver(s, packet(UP), now + 1_000)
    sent(s, now + 1_000)
    assert drain_events(s) == []
    return s, now + 2_000


def test_without_the_switch_only_state_changes_are_queued() -> None:
    # Existing callers drain next_event() expecting StateChanged alone.
    s = make(0)
    deliver(s, packet(DOWN, your=0), 1_000)
    deliver(s, packet(UP, desired_min_tx_us=50_000, detect_mult=5), 2_000)
    assert [type(e) for e in drain_events(s)] == [StateChanged, StateChanged]


def test_the_first_packet_is_news_and_comes_before_the_state_change_it_causes() -> None:
    s = watched(0)
    deliver(s, packet(DOWN, your=0, desired_min_tx_us=SECOND, required_min_rx_us=20_000), 1_000)
    assert drain_events(s) == [
        RemoteParamsChanged(SECOND, 20_000, 0, 3, 1_000),
        StateChanged(DOWN, INIT, Diag.NONE, 1_000),
    ]


def test_a_poll_that_changes_the_timers_is_one_event_however_long_it_repeats() -> None:
    s, now = up_and_quiet()
    s.detection_external = True
    new = {"desired_min_tx_us": 10_000, "required_min_rx_us": 20_000}
    for i in range(4):
        deliver(s, packet(UP, poll=True, **new), now + i * 1_000)
    deliver(s, packet(UP, **new), now + 5_000)
    assert drain_events(s) == [RemoteParamsChanged(10_000, 20_000, 0, 3, now)]
    assert (s.remote_desired_tx_us, s.remote_min_rx_us) == (10_000, 20_000)


@pytest.mark.parametrize(
    ("field", "value", "want"),
    [
        ("desired_min_tx_us", 50_000, (50_000, 300_000, 0, 3)),
        ("required_min_rx_us", 50_000, (300_000, 50_000, 0, 3)),
        ("required_min_echo_rx_us", 50_000, (300_000, 300_000, 50_000, 3)),
        ("detect_mult", 5, (300_000, 300_000, 0, 5)),
    ],
)
def test_each_value_bfdd_shows_is_watched_and_so_is_the_way_back(
    field: str, value: int, want: tuple[int, ...]
) -> None:
    s, now = up_and_quiet()
    deliver(s, packet(UP, **{field: value}), now)
    deliver(s, packet(UP, **{field: value}), now + 1_000)
    deliver(s, packet(UP), now + 2_000)
    assert drain_events(s) == [RemoteParamsChanged(*want, now), RemoteParamsChanged(*FAST, now + 2_000)]


def test_nothing_else_in_the_packet_counts() -> None:
    s, now = up_and_quiet()
    deliver(s, packet(UP, diag=Diag.ECHO_FUNCTION_FAILED), now)
    deliver(s, packet(UP, final=True), now + 1_000)
    deliver(s, packet(UP, my=0x3333_3333), now + 2_000)
    assert drain_events(s) == []


def test_a_rejected_packet_changes_nothing() -> None:
    s, now = up_and_quiet()
    pkt = packet(UP, desired_min_tx_us=10_000)
    with pytest.raises(Rejected):
        deliver(s, pkt, now, ttl=254)
    with pytest.raises(Rejected):
        deliver(s, replace(pkt, your_discr=0x0BAD), now)
    assert drain_events(s) == [] and s.remote_desired_tx_us == 300_000


def test_a_change_that_takes_the_session_down_says_both() -> None:
    s, now = up_and_quiet()
    deliver(s, packet(DOWN, your=0, desired_min_tx_us=SECOND, required_min_rx_us=SECOND), now)
    assert drain_events(s) == [
        RemoteParamsChanged(SECOND, SECOND, 0, 3, now),
        StateChanged(UP, DOWN, Diag.NEIGHBOR_SIGNALED_SESSION_DOWN, now),
    ]


def test_the_switch_is_no_part_of_the_state_a_pin_successor_adopts() -> None:
    # A field of its own would change the handover fingerprint, and a takeover
    # from the engine this one replaces would start fresh instead of adopting.
    s, _ = up_and_quiet()
    assert "remote_events" not in Session.STATE_FIELDS
    assert set(vars(s)) - Session._NOT_STATE - {"remote_events"} == set(Session.STATE_FIELDS)
