"""Session.export()/restore(): the state a --pin successor adopts is every attribute, no more."""

from __future__ import annotations

import pickle
import random

import pytest

from harness.sessions import LOCAL_DISCR, bring_up, config, deliver, make, packet, sent
from xdp_bfd.session import AuthConfig, Session
from xdp_bfd.wire import AuthType
from xdp_bfd.wire.control import State

CONFIGS = {
    "plain": {},
    "multihop": {"multihop": True},
    "demand": {"demand": True},
    "auth": {"auth": AuthConfig(AuthType.METICULOUS_KEYED_SHA1, key_id=3, secret=b"shared")},
}


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_state_fields_are_exactly_a_fresh_sessions_state_attributes(kind: str) -> None:
    # export() takes the values by position: an attribute missing from the list
    # would not be handed over, a listed one missing would fail the handover.
    s = make(**CONFIGS[kind])
    assert len(set(Session.STATE_FIELDS)) == len(Session.STATE_FIELDS)
    assert set(Session.STATE_FIELDS) == set(vars(s)) - Session._NOT_STATE
    assert set(vars(s)) >= Session._NOT_STATE  # what it leaves out is there: collaborators, queues


def _by_name(s: Session) -> dict:
    return dict(zip(Session.STATE_FIELDS, s.export(), strict=True))


def test_export_and_restore_round_trip() -> None:
    rng = random.Random(1)
    s = Session(config(), LOCAL_DISCR, now_us=0, rng=rng)
    now = bring_up(s, 0)
    now = s.get_timer()  # the next periodic packet: the transmit state moves too
    s.handle_timer(now)
    assert sent(s, now)
    state = pickle.loads(pickle.dumps(_by_name(s)))  # plain data, as the handover carries it
    twin = random.Random()  # the jitter to come: the same draws for both
    twin.setstate(rng.getstate())
    restored = Session.restore(s.config, state, rng=twin)
    assert restored.export() == s.export()
    assert set(vars(restored)) == set(vars(s))  # every attribute a session has, none from __init__
    assert (restored.local_discr, restored.state, restored.config) == (s.local_discr, State.UP, s.config)
    # The two go on alike: the same timer, the same answer to the same packet.
    assert restored.get_timer() == s.get_timer()
    for session in (s, restored):
        deliver(session, packet(State.DOWN), now + 1_000)
    assert restored.export() == s.export() and restored.state == State.DOWN


def test_restore_keeps_the_new_configuration() -> None:
    # A successor may run with changed arguments: the state comes over, the config is the given one.
    s = make()
    bring_up(s, 0)
    other = config(detect_mult=5)
    restored = Session.restore(other, _by_name(s))
    assert restored.config == other and restored.remote_discr == s.remote_discr


def test_a_restored_session_counts_the_peers_silence_from_when_it_reads_again() -> None:
    """The old engine read the peer's last packet at ``now``; the successor restores the session
    40 ms later, past the 30 ms detection time, with the peer's packets of the takeover still
    unread in the socket. Judged from the last packet read it would declare a live peer dead at
    its first service; from when it reads again, it does so only after a detection time of true
    silence."""
    s = make(min_tx_us=10_000, min_rx_us=10_000)
    now = bring_up(s, 0, desired_min_tx_us=10_000, required_min_rx_us=10_000)
    detect = s.detect_time_us
    assert detect == 30_000
    later = now + detect + 10_000
    stale = Session.restore(s.config, _by_name(s))
    sent(stale, later)
    assert stale.state == State.DOWN  # what the successor did before resume_reading
    restored = Session.restore(s.config, _by_name(s))
    restored.resume_reading(later)
    assert restored.get_timer() is not None
    sent(restored, later)
    assert restored.state == State.UP
    # A packet read now is what counts from here on; silence after it is detected as ever.
    deliver(restored, packet(State.UP, desired_min_tx_us=10_000, required_min_rx_us=10_000), later + 1_000)
    sent(restored, later + 1_000 + detect - 1)
    assert restored.state == State.UP
    sent(restored, later + 1_000 + detect)
    assert restored.state == State.DOWN
    # Untold, a dead peer is still found: a detection time after the resumption.
    dead = Session.restore(s.config, _by_name(s))
    dead.resume_reading(later)
    sent(dead, later + detect)
    assert dead.state == State.DOWN
