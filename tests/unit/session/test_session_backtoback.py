"""Two Session objects wired back-to-back through encode/decode on a simulated clock."""

from __future__ import annotations

import random
from ipaddress import IPv4Address, IPv6Address
from typing import Any

import pytest

from harness.sessions import SECOND, Pair, config, reconfigure
from xdp_bfd.session import AuthConfig, Session, StateChanged
from xdp_bfd.wire.control import AuthType, ControlPacket, Diag, State

MINUTE = 60 * SECOND
A_IP, B_IP = IPv4Address("198.51.100.1"), IPv4Address("198.51.100.2")


def pair(a_kw: dict[str, Any] | None = None, b_kw: dict[str, Any] | None = None, **both: Any) -> Pair:
    a = Session(
        config(local=A_IP, peer=B_IP, **{**both, **(a_kw or {})}), 0xA, now_us=0, rng=random.Random(1)
    )
    b = Session(
        config(local=B_IP, peer=A_IP, **{**both, **(b_kw or {})}), 0xB, now_us=0, rng=random.Random(2)
    )
    return Pair(a, b)


def states(p: Pair) -> tuple[State, State]:
    return p.a.state, p.b.state


def assert_steady(p: Pair, tx_us: int) -> None:
    assert p.rejected == {"a": [], "b": []}
    assert states(p) == (State.UP, State.UP)
    assert not p.a.poll_active and not p.b.poll_active
    assert p.a.tx_interval_us == tx_us
    assert p.b.tx_interval_us == tx_us


def test_reach_up_and_stay_up_for_minutes() -> None:
    p = pair()
    p.run(5 * SECOND)
    assert states(p) == (State.UP, State.UP)
    assert [e.new for e in p.events["a"]] in ([State.INIT, State.UP], [State.UP])
    assert p.a.remote_discr == 0xB and p.b.remote_discr == 0xA
    # The slow-start Poll has completed and the configured rate is in use.
    assert_steady(p, 300_000)
    assert p.a.remote_desired_tx_us == 300_000
    assert p.a.detect_time_us == 900_000
    up_at = p.now
    tx_before = p.a.tx_packets
    p.run(up_at + 10 * MINUTE)
    assert states(p) == (State.UP, State.UP)
    assert p.a.flaps == 0 and p.b.flaps == 0
    assert p.events["a"][-1].new == State.UP
    # 10 minutes at 300 ms less 0-25 % jitter: about 2286 packets.
    sent_packets = p.a.tx_packets - tx_before
    assert 2_000 < sent_packets <= 10 * MINUTE // 225_000 + 1
    steady = [pkt for _, pkt in p.sent_by("a", up_at)]
    assert not any(pkt.poll or pkt.final for pkt in steady)


@pytest.mark.parametrize(
    "auth_type",
    [
        AuthType.SIMPLE,
        AuthType.KEYED_MD5,
        AuthType.METICULOUS_KEYED_MD5,
        AuthType.KEYED_SHA1,
        AuthType.METICULOUS_KEYED_SHA1,
    ],
)
def test_up_with_authentication(auth_type: AuthType) -> None:
    auth = AuthConfig(auth_type, key_id=1, secret=b"shared-key")
    p = pair(auth=auth)
    p.run(3 * MINUTE)
    assert_steady(p, 300_000)
    assert p.a.flaps == 0 and p.b.flaps == 0


def test_mismatched_auth_never_comes_up() -> None:
    p = pair(
        a_kw={"auth": AuthConfig(AuthType.KEYED_SHA1, 1, b"one")},
        b_kw={"auth": AuthConfig(AuthType.KEYED_SHA1, 1, b"two")},
    )
    p.run(10 * SECOND)
    assert states(p) == (State.DOWN, State.DOWN)
    assert p.a.rx_packets == 0 and p.b.rx_packets == 0
    assert set(p.rejected["a"]) == set(p.rejected["b"]) == {"auth_digest"}


def test_survives_poll_sequences_both_directions() -> None:
    p = pair()
    p.run(5 * SECOND)
    assert_steady(p, 300_000)
    # Slower TX on A: B's detection time must grow before A actually slows down.
    reconfigure(p.a, p.now, min_tx_us=1_500_000)
    p.run(p.now + MINUTE)
    assert p.a.tx_interval_us == 1_500_000
    assert p.b.remote_desired_tx_us == 1_500_000
    assert p.b.detect_time_us == 3 * 1_500_000
    # Faster RX on B: A speeds up, B's detection time shrinks after the Poll.
    reconfigure(p.b, p.now, min_rx_us=100_000)
    reconfigure(p.a, p.now, min_tx_us=100_000)
    p.run(p.now + MINUTE)
    assert p.a.tx_interval_us == 100_000
    assert p.b.detect_time_us == 300_000
    # Several changes in a row, each queued behind the last.
    for value in (200_000, 400_000, 250_000):
        reconfigure(p.a, p.now, min_tx_us=value)
    p.run(p.now + MINUTE)
    assert p.a.tx_interval_us == 250_000
    assert p.b.remote_desired_tx_us == 250_000
    assert p.a.flaps == 0 and p.b.flaps == 0
    assert states(p) == (State.UP, State.UP)


def test_short_loss_is_tolerated_and_long_loss_detected() -> None:
    p = pair()
    p.run(5 * SECOND)
    start = p.now

    def drop_two_of_a(src: Session, pkt: ControlPacket, t: int) -> bool:
        return src is p.a and start <= t < start + 500_000

    p.run(start + 30 * SECOND, drop=drop_two_of_a)
    assert states(p) == (State.UP, State.UP)
    cut = p.now

    def cut_link(src: Session, pkt: ControlPacket, t: int) -> bool:
        return cut <= t < cut + 5 * SECOND

    p.run(cut + 5 * SECOND, drop=cut_link)
    assert states(p) == (State.DOWN, State.DOWN)
    for name in ("a", "b"):
        down = [e for e in p.events[name] if e.new == State.DOWN]
        assert down[0].diag == Diag.CONTROL_DETECTION_TIME_EXPIRED
        assert cut + 900_000 - 300_000 <= down[0].at_us <= cut + 900_000 + 1_000
    # The link heals: both come back (remote discriminators were forgotten, §6.8.1).
    p.run(p.now + 10 * SECOND)
    assert states(p) == (State.UP, State.UP)
    assert p.a.flaps == 1 and p.b.flaps == 1


def test_one_way_failure_brings_both_down() -> None:
    p = pair()
    p.run(5 * SECOND)
    cut = p.now
    p.run(cut + 3 * SECOND, drop=lambda src, pkt, t: src is p.a)
    # B stops hearing A and says so; A hears B's Down and follows with diag 3.
    assert p.b.local_diag == Diag.CONTROL_DETECTION_TIME_EXPIRED
    assert p.a.state != State.UP
    assert any(e.new == State.DOWN and e.diag == Diag.NEIGHBOR_SIGNALED_SESSION_DOWN for e in p.events["a"])


def test_admin_down_and_back() -> None:
    p = pair()
    p.run(5 * SECOND)
    reconfigure(p.a, p.now, shutdown=True)
    p.run(p.now + 30 * SECOND)
    assert states(p) == (State.ADMIN_DOWN, State.DOWN)
    assert p.b.local_diag == Diag.NEIGHBOR_SIGNALED_SESSION_DOWN
    assert p.b.remote_state == State.ADMIN_DOWN
    # AdminDown keeps talking slowly; B stays Down rather than timing out into a loop.
    assert p.b.flaps == 1
    reconfigure(p.a, p.now, shutdown=False)
    p.run(p.now + 10 * SECOND)
    assert_steady(p, 300_000)


def test_engine_admin_down_tells_the_peer_at_once() -> None:
    p = pair()
    p.run(5 * SECOND)
    t = p.now
    p.a.admin_down(t)
    p.run(t + 10_000)
    assert p.b.state == State.DOWN
    assert p.events["b"][-1] == StateChanged(
        State.UP, State.DOWN, Diag.NEIGHBOR_SIGNALED_SESSION_DOWN, t + 500
    )


def test_passive_side_waits_for_the_active_one() -> None:
    p = pair(a_kw={"passive": True}, b_kw={"passive": True})
    p.run(MINUTE)
    assert states(p) == (State.DOWN, State.DOWN)
    assert p.wire == []
    reconfigure(p.b, p.now, passive=False)
    p.run(p.now + 5 * SECOND)
    assert_steady(p, 300_000)


def test_asymmetric_timers_and_multipliers() -> None:
    p = pair(a_kw={"min_tx_us": 100_000, "min_rx_us": 500_000, "detect_mult": 5}, b_kw={"min_tx_us": 50_000})
    p.run(2 * MINUTE)
    assert states(p) == (State.UP, State.UP)
    # A sends at the slower of its 100 ms and B's 300 ms receive limit; B at A's 500 ms limit.
    assert p.a.tx_interval_us == 300_000
    assert p.b.tx_interval_us == 500_000
    assert p.a.detect_time_us == 3 * 500_000
    assert p.b.detect_time_us == 5 * 300_000
    assert p.a.flaps == 0


def test_detect_mult_one_stays_up() -> None:
    p = pair(detect_mult=1)
    p.run(10 * MINUTE)
    assert states(p) == (State.UP, State.UP)
    assert p.a.flaps == 0 and p.b.flaps == 0


def test_demand_mode_both_ways() -> None:
    p = pair(a_kw={"demand": True})
    p.run(10 * SECOND)
    assert states(p) == (State.UP, State.UP)
    assert p.b.remote_demand
    quiet_from = p.now
    p.run(quiet_from + MINUTE)
    # B has stopped sending periodic packets; A (not asked for Demand) keeps sending.
    assert p.sent_by("b", quiet_from) == []
    assert len(p.sent_by("a", quiet_from)) > 150
    # A verifies the path with Polls now and then.
    for _ in range(5):
        p.a.start_poll(p.now)
        p.run(p.now + 10 * SECOND)
        assert states(p) == (State.UP, State.UP)
    # B goes silent for good; A's next Poll goes unanswered and A declares the session down.
    cut = p.now
    p.a.start_poll(cut)
    p.run(cut + 5 * SECOND, drop=lambda src, pkt, t: src is p.b)
    assert p.a.state != State.UP
    assert any(e.diag == Diag.CONTROL_DETECTION_TIME_EXPIRED for e in p.events["a"])


def test_ipv6_multihop() -> None:
    a_ip, b_ip = IPv6Address("2001:db8::1"), IPv6Address("2001:db8::2")
    a = Session(config(local=a_ip, peer=b_ip, multihop=True), 1, now_us=0, rng=random.Random(1))
    b = Session(config(local=None, peer=a_ip, multihop=True), 2, now_us=0, rng=random.Random(2))
    p = Pair(a, b)
    p.run(MINUTE)
    assert states(p) == (State.UP, State.UP)
