"""Every Rejected reason, and that a rejected packet leaves the session untouched."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from harness.sessions import (
    LOCAL_DISCR,
    SECOND,
    bring_up,
    deliver,
    make,
    packet,
    sent,
    snapshot,
)
from xdp_bfd.session import AuthConfig, Rejected, Session
from xdp_bfd.wire.control import Auth, AuthType, ControlPacket, State, decode_control, encode_control

KEY = AuthConfig(AuthType.METICULOUS_KEYED_SHA1, key_id=7, secret=b"s3cret")


class Peer:
    """Signs packets the way a correctly configured peer would."""

    def __init__(self, auth: AuthConfig | None, seq: int = 1000) -> None:
        self.auth = auth
        self.seq = seq

    def raw(self, pkt: ControlPacket, **auth_overrides: object) -> bytes:
        if self.auth is None:
            return encode_control(pkt)
        self.seq += 1
        sequence = self.seq if self.auth.keyed else None
        auth = Auth(self.auth.type, self.auth.key_id, b"", sequence)
        auth = replace(auth, **auth_overrides)  # type: ignore[arg-type]
        secret = self.auth.secret if self.auth.type != AuthType.SIMPLE else None
        if self.auth.type == AuthType.SIMPLE and "data" not in auth_overrides:
            auth = replace(auth, data=self.auth.secret)
        return encode_control(replace(pkt, auth=auth), secret=secret)


def up_session(auth: AuthConfig | None = None, **kw: object) -> tuple[Session, Peer, int]:
    s = make(10 * SECOND, auth=auth, **kw)  # type: ignore[arg-type]
    peer = Peer(auth)
    now = 10 * SECOND
    for pkt in (packet(State.DOWN, your=0), packet(State.UP), packet(State.UP, final=True)):
        raw = peer.raw(pkt)
        s.receive(decode_control(raw), raw, now, ttl=255)
        now += 1_000
    sent(s, now)
    assert s.state == State.UP
    return s, peer, now


def assert_rejected(s: Session, reason: str, act: Callable[[], None]) -> None:
    before = snapshot(s)
    with pytest.raises(Rejected) as info:
        act()
    assert info.value.reason == reason
    assert snapshot(s) == before


def test_ttl_single_hop_must_be_255() -> None:
    s, _, now = up_session()
    for ttl in (0, 1, 64, 254):
        assert_rejected(s, "ttl", lambda ttl=ttl: deliver(s, packet(State.DOWN), now, ttl=ttl))
    deliver(s, packet(State.UP), now, ttl=255)
    deliver(s, packet(State.UP), now + 1, ttl=None)  # not known: not checked
    assert s.rx_packets == 5


def test_ttl_multihop_floor() -> None:
    s = make(0, multihop=True, minimum_ttl=250)
    assert_rejected(s, "ttl", lambda: deliver(s, packet(State.DOWN, your=0), 0, ttl=249))
    deliver(s, packet(State.DOWN, your=0), 0, ttl=250)
    deliver(s, packet(State.UP), 1, ttl=255)
    assert s.state == State.UP


def test_multihop_never_advertises_echo() -> None:
    s = make(0, multihop=True, echo_us=50_000)
    assert sent(s, 0)[0].required_min_echo_rx_us == 0
    s = make(0, echo_us=50_000)
    assert sent(s, 0)[0].required_min_echo_rx_us == 50_000


def test_your_discriminator_must_be_ours() -> None:
    s, _, now = up_session()
    assert_rejected(s, "your_discr", lambda: deliver(s, packet(State.DOWN, your=LOCAL_DISCR + 1), now))


def test_zero_your_discriminator_only_in_down_states() -> None:
    s = make(0)
    # The decoder drops these already; a hand-built one must not move the session either.
    pkt = ControlPacket(state=State.UP, my_discr=5, your_discr=0)
    assert_rejected(s, "your_discr", lambda: s.receive(pkt, encode_control(pkt), 0, ttl=255))
    pkt = ControlPacket(state=State.INIT, my_discr=5, your_discr=0)
    assert_rejected(s, "your_discr", lambda: s.receive(pkt, encode_control(pkt), 0, ttl=255))


def test_auth_missing() -> None:
    s, _, now = up_session(KEY)
    assert_rejected(s, "auth_missing", lambda: deliver(s, packet(State.DOWN), now))


def test_auth_unexpected() -> None:
    s, _, now = up_session()
    raw = Peer(KEY).raw(packet(State.DOWN))
    assert_rejected(s, "auth_unexpected", lambda: s.receive(decode_control(raw), raw, now, ttl=255))


def test_auth_type_mismatch() -> None:
    s, _, now = up_session(KEY)
    other = AuthConfig(AuthType.KEYED_SHA1, key_id=KEY.key_id, secret=KEY.secret)
    raw = Peer(other, seq=5000).raw(packet(State.DOWN))
    assert_rejected(s, "auth_type", lambda: s.receive(decode_control(raw), raw, now, ttl=255))


def test_auth_key_id_mismatch() -> None:
    s, peer, now = up_session(KEY)
    raw = peer.raw(packet(State.DOWN), key_id=KEY.key_id + 1)
    assert_rejected(s, "auth_key_id", lambda: s.receive(decode_control(raw), raw, now, ttl=255))


def test_auth_digest_wrong_secret() -> None:
    s, peer, now = up_session(KEY)
    raw = Peer(replace(KEY, secret=b"wrong"), seq=peer.seq).raw(packet(State.DOWN))
    assert_rejected(s, "auth_digest", lambda: s.receive(decode_control(raw), raw, now, ttl=255))


def test_auth_digest_tampered_packet() -> None:
    s, peer, now = up_session(KEY)
    raw = bytearray(peer.raw(packet(State.UP)))
    raw[12] ^= 0x01  # flip a bit of Desired Min TX Interval after signing
    assert_rejected(s, "auth_digest", lambda: s.receive(decode_control(bytes(raw)), bytes(raw), now, ttl=255))


def test_auth_sequence_replay() -> None:
    s, peer, now = up_session(KEY)
    raw = peer.raw(packet(State.DOWN))
    s.receive(decode_control(raw), raw, now, ttl=255)
    assert s.state == State.DOWN
    assert_rejected(s, "auth_sequence", lambda: s.receive(decode_control(raw), raw, now + 1, ttl=255))


def test_simple_password_wrong() -> None:
    simple = AuthConfig(AuthType.SIMPLE, key_id=1, secret=b"hunter2")
    s, peer, now = up_session(simple)
    raw = peer.raw(packet(State.DOWN), data=b"hunter3")
    assert_rejected(s, "auth_digest", lambda: s.receive(decode_control(raw), raw, now, ttl=255))
    raw = peer.raw(packet(State.DOWN))
    s.receive(decode_control(raw), raw, now, ttl=255)
    assert s.state == State.DOWN


@pytest.mark.parametrize("state", [State.DOWN, State.INIT, State.UP, State.ADMIN_DOWN])
def test_rejected_packet_changes_nothing_in_any_state(state: State) -> None:
    s = make(10 * SECOND, shutdown=state == State.ADMIN_DOWN)
    now = 10 * SECOND
    if state == State.INIT:
        deliver(s, packet(State.DOWN, your=0), now)
    elif state == State.UP:
        now = bring_up(s, now)
    assert s.state == state
    # Including a pending packet and an undrained event, which must survive untouched.
    for bad in (
        lambda: deliver(s, packet(State.DOWN, poll=True), now + 1, ttl=1),
        lambda: deliver(s, packet(State.ADMIN_DOWN, your=99, final=True), now + 1),
        lambda: deliver(s, packet(State.DOWN, auth=Auth(AuthType.SIMPLE, 1, b"x")), now + 1),
    ):
        before = snapshot(s)
        with pytest.raises(Rejected):
            bad()
        assert snapshot(s) == before
