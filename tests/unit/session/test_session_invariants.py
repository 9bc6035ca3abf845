"""Random walks through the session API checking invariants the event loop relies on."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.sessions import LOCAL_DISCR, PEER_DISCR, make
from xdp_bfd.session import Rejected, Session
from xdp_bfd.session.timers import SLOW_TX_US
from xdp_bfd.wire.control import ControlPacket, State, decode_control, encode_control

states = st.sampled_from(list(State))
intervals = st.sampled_from([0, 1, 50_000, 300_000, 1_000_000, 2_500_000])

peer_packets = st.builds(
    lambda state, known, poll, final, demand, tx, rx, mult: ControlPacket(
        state=state,
        my_discr=PEER_DISCR,
        your_discr=LOCAL_DISCR if known or state in (State.INIT, State.UP) else 0,
        poll=poll,
        final=final and not poll,
        demand=demand,
        desired_min_tx_us=max(tx, 1),
        required_min_rx_us=rx,
        detect_mult=mult,
    ),
    states,
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    intervals,
    intervals,
    st.integers(1, 5),
)

config_changes = st.fixed_dictionaries(
    {},
    optional={
        "min_tx_us": st.sampled_from([10_000, 300_000, 1_000_000, 3_000_000]),
        "min_rx_us": st.sampled_from([0, 10_000, 300_000, 1_000_000]),
        "detect_mult": st.integers(1, 5),
        "shutdown": st.booleans(),
        "demand": st.booleans(),
        "passive": st.booleans(),
    },
)

actions = st.one_of(
    st.tuples(st.just("rx"), peer_packets, st.integers(0, 2_000_000)),
    st.tuples(st.just("timer"), st.none(), st.integers(0, 3_000_000)),
    st.tuples(st.just("config"), config_changes, st.integers(0, 500_000)),
    st.tuples(st.just("poll"), st.none(), st.integers(0, 500_000)),
    st.tuples(st.just("detect"), st.none(), st.integers(0, 500_000)),
    st.tuples(st.just("admin"), st.none(), st.integers(0, 500_000)),
)


def check_sent(s: Session, raws: list[bytes]) -> None:
    for raw in raws:
        p = decode_control(raw)
        assert not (p.poll and p.final), "§6.5: never P and F together"
        assert p.my_discr == LOCAL_DISCR
        if p.demand:
            assert p.state == State.UP
        if p.state != State.UP:
            assert p.desired_min_tx_us >= SLOW_TX_US, "§6.8.3: slow while not Up"
        if s.config.passive:
            assert p.your_discr != 0, "§6.8.7: passive stays silent until it knows the peer"


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.booleans(), st.lists(actions, max_size=60))
def test_random_walk_keeps_invariants(passive: bool, walk: list[tuple[str, object, int]]) -> None:
    s = make(0, passive=passive)
    now = 0
    for kind, arg, advance in walk:
        now += advance
        if kind == "rx":
            assert isinstance(arg, ControlPacket)
            raw = encode_control(arg)
            try:
                s.receive(decode_control(raw), raw, now, ttl=255)
            except Rejected as exc:
                assert exc.reason == "your_discr"
        elif kind == "timer":
            deadline = s.get_timer()
            if deadline is not None:
                now = max(now, deadline)
            s.handle_timer(now)
            after = s.get_timer()
            # The event loop must never be asked to wake in the past (a busy loop).
            assert after is None or after > now
        elif kind == "config":
            assert isinstance(arg, dict)
            s.set_config(replace(s.config, **arg), now)
        elif kind == "poll":
            s.start_poll(now)
        elif kind == "detect":
            # What a host sends ahead of the machine is exactly the machine's own Down.
            ahead = s.expiry_datagram()
            expiring = s.state in (State.INIT, State.UP) and not s.config.passive
            assert (ahead is not None) == expiring
            s.detection_expired(now)
            sent = s.datagrams_to_send(now)
            assert ahead is None or sent[:1] == [ahead]
            check_sent(s, sent)
        else:
            s.admin_down(now)
        if kind != "detect":
            check_sent(s, s.datagrams_to_send(now))
        after = s.get_timer()
        assert after is None or after > now
        assert s.tx_interval_us >= 1
        assert (s.up_since_us != 0 or now == 0) if s.state == State.UP else s.up_since_us == 0
        if s.state != State.UP:
            assert not s.poll_active
            assert s.desired_min_tx_us == max(s.config.min_tx_us, SLOW_TX_US)
        while s.next_event() is not None:
            pass


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(st.lists(peer_packets, min_size=1, max_size=30))
def test_packets_never_crash_and_events_chain(pkts: list[ControlPacket]) -> None:
    s = make(0)
    state = s.state
    for i, p in enumerate(pkts):
        try:
            s.receive(p, encode_control(p), (i + 1) * 1_000, ttl=255)
        except Rejected:
            continue
        while (ev := s.next_event()) is not None:
            assert ev.old == state
            assert ev.new != ev.old
            state = ev.new
        assert s.state == state
