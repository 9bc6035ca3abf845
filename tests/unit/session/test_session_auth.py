"""§6.7 authentication: transmit sequence numbers and the receive windows."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from harness.sessions import SECOND, make, packet, reconfigure, run_until, sent
from xdp_bfd.session import AuthConfig, Rejected, Session
from xdp_bfd.session.timers import sequence_in_window
from xdp_bfd.wire.control import (
    Auth,
    AuthType,
    ControlPacket,
    State,
    decode_control,
    encode_control,
    verify_auth,
)

U32 = 1 << 32
KEYED = [AuthType.KEYED_MD5, AuthType.KEYED_SHA1]
METICULOUS = [AuthType.METICULOUS_KEYED_MD5, AuthType.METICULOUS_KEYED_SHA1]


class FixedStart(random.Random):
    """An rng whose 32-bit draw (bfd.XmitAuthSeq's start) is chosen by the test."""

    def __init__(self, start: int) -> None:
        super().__init__(1)
        self._start = start

    def getrandbits(self, k: int) -> int:
        return self._start if k == 32 else super().getrandbits(k)


def key(auth_type: AuthType) -> AuthConfig:
    return AuthConfig(auth_type, key_id=3, secret=b"k" * 10)


def signed(auth: AuthConfig, pkt: ControlPacket, seq: int | None) -> bytes:
    return encode_control(replace(pkt, auth=Auth(auth.type, auth.key_id, b"", seq)), secret=auth.secret)


def feed(
    s: Session, auth: AuthConfig, seq: int | None, now: int, *, state: State = State.DOWN, mult: int = 3
) -> None:
    raw = signed(auth, packet(state, your=0 if state == State.DOWN else s.local_discr, detect_mult=mult), seq)
    s.receive(decode_control(raw), raw, now, ttl=255)


def accepted(s: Session, auth: AuthConfig, seq: int, now: int, *, mult: int = 3) -> bool:
    try:
        feed(s, auth, seq, now, mult=mult)
    except Rejected as exc:
        assert exc.reason == "auth_sequence"
        return False
    return True


# --- transmit side -------------------------------------------------------------------------


@pytest.mark.parametrize("auth_type", KEYED + METICULOUS)
def test_transmitted_packets_are_signed_and_sequence_advances(auth_type: AuthType) -> None:
    auth = key(auth_type)
    s = Session(make(0, auth=auth).config, 77, now_us=0, rng=FixedStart(U32 - 2))
    raws = [raw for t in range(0, 5 * SECOND, SECOND // 4) for raw in s.datagrams_to_send(t)]
    assert len(raws) >= 4
    seqs = []
    for raw in raws:
        pkt = decode_control(raw)
        assert pkt.auth is not None and pkt.auth.type == auth_type and pkt.auth.key_id == 3
        assert verify_auth(raw, pkt, auth.secret)
        assert not verify_auth(raw, pkt, b"other")
        seqs.append(pkt.auth.sequence)
    # Starts at the rng's draw (§6.8.1) and wraps as an unsigned 32-bit number.
    assert seqs[:4] == [U32 - 2, U32 - 1, 0, 1]


def test_transmit_sequence_starts_random() -> None:
    starts = set()
    for seed in range(20):
        s = make(0, seed=seed, auth=key(AuthType.KEYED_SHA1))
        pkt = decode_control(s.datagrams_to_send(0)[0])
        assert pkt.auth is not None
        starts.add(pkt.auth.sequence)
    assert len(starts) == 20


def test_simple_password_is_sent() -> None:
    auth = AuthConfig(AuthType.SIMPLE, key_id=9, secret=b"pw")
    s = make(0, auth=auth)
    raw = s.datagrams_to_send(0)[0]
    pkt = decode_control(raw)
    assert pkt.auth == Auth(AuthType.SIMPLE, 9, b"pw", None)
    assert verify_auth(raw, pkt, b"pw")


# --- receive windows (§6.7.3, §6.7.4) ---------------------------------------------------------


def test_window_function() -> None:
    assert sequence_in_window(10, 10, 3, meticulous=False)
    assert not sequence_in_window(10, 10, 3, meticulous=True)
    assert sequence_in_window(19, 10, 3, meticulous=True)
    assert not sequence_in_window(20, 10, 3, meticulous=False)
    assert not sequence_in_window(9, 10, 3, meticulous=False)
    assert sequence_in_window(2, U32 - 3, 2, meticulous=True)  # 5 ahead across the wrap
    assert not sequence_in_window(U32 - 4, U32 - 3, 2, meticulous=False)


@pytest.mark.parametrize("auth_type", KEYED + METICULOUS)
@pytest.mark.parametrize("start", [1_000, U32 - 3, U32 - 1, 0])
def test_receive_window_edges(auth_type: AuthType, start: int) -> None:
    auth = key(auth_type)
    meticulous = auth_type in METICULOUS
    s = make(0, auth=auth)
    assert accepted(s, auth, start, 1)  # first packet: any sequence (AuthSeqKnown is 0)
    # Replay of the last one: fine for keyed, refused for meticulous.
    assert accepted(s, auth, start, 2) is not meticulous
    # Behind the window.
    assert not accepted(s, auth, (start - 1) % U32, 3)
    # Just past the window (3 x Detect Mult of the received packet).
    assert not accepted(s, auth, (start + 3 * 3 + 1) % U32, 4)
    # The far edge of the window.
    assert accepted(s, auth, (start + 9) % U32, 5)
    # The window has moved: the old number is now a replay.
    assert not accepted(s, auth, start, 6)
    # Detect Mult of the packet sizes the window.
    assert accepted(s, auth, (start + 9 + 15) % U32, 7, mult=5)


@pytest.mark.parametrize("auth_type", METICULOUS)
def test_meticulous_every_packet_must_advance(auth_type: AuthType) -> None:
    auth = key(auth_type)
    s = make(0, auth=auth)
    seq = U32 - 5
    for i in range(12):  # walks across 2^32
        assert accepted(s, auth, seq, i)
        assert not accepted(s, auth, seq, i)
        seq = (seq + 1) % U32


def test_sequence_known_is_forgotten_after_twice_the_detection_time() -> None:
    auth = key(AuthType.METICULOUS_KEYED_SHA1)
    s = make(0, auth=auth)
    feed(s, auth, 500, 0)
    assert s.state == State.INIT
    detect = s.detect_time_us
    # Init -> Down after one detection time; the window is still remembered.
    run_until(s, 0, detect)
    assert s.state == State.DOWN
    assert not accepted(s, auth, 10, detect + 1)
    run_until(s, detect + 1, 2 * detect)
    # §6.8.1: after 2 x Detection Time in silence a restarted peer can resynchronise.
    assert accepted(s, auth, 10, 2 * detect)
    assert not accepted(s, auth, 10, 2 * detect + 1)


def test_window_expiry_is_also_checked_without_a_timer_call() -> None:
    auth = key(AuthType.METICULOUS_KEYED_MD5)
    s = make(0, auth=auth)
    feed(s, auth, 500, 0, state=State.ADMIN_DOWN)
    detect = s.detect_time_us
    assert accepted(s, auth, 10, 2 * detect)


def test_an_external_detector_keeps_the_sequence_known_for_the_kernel() -> None:
    """With the fast path watching the peer, the session does not see the peer's repeats: its
    own timer must not forget bfd.RcvAuthSeq (the kernel lapses it by its own stamps), while its
    check of a packet that does reach it still lapses by its own view."""
    auth = key(AuthType.KEYED_SHA1)
    s = make(0, auth=auth)
    s.detection_external = True
    feed(s, auth, 500, 0)
    detect = s.detect_time_us
    assert s.rcv_auth_seq == 500
    run_until(s, 0, 10 * detect)
    assert s.rcv_auth_seq == 500  # the witness below: without the detector it is forgotten
    assert accepted(s, auth, 10, 10 * detect)  # the session's own view lapsed: a resync goes through
    assert s.rcv_auth_seq == 10
    t = make(0, auth=auth)
    feed(t, auth, 500, 0)
    run_until(t, 0, 10 * detect)
    assert t.rcv_auth_seq is None


@pytest.mark.parametrize("auth_type", KEYED + METICULOUS)
def test_a_keyed_session_has_no_down_to_send_ahead(auth_type: AuthType) -> None:
    # Its Sequence Number belongs to the packet that carries it: the machine sends the Down itself.
    auth = key(auth_type)
    s = make(0, auth=auth)
    feed(s, auth, 10, 1_000)
    assert s.state == State.INIT
    assert s.expiry_datagram() is None


def test_a_password_session_sends_its_down_ahead_exactly() -> None:
    auth = AuthConfig(AuthType.SIMPLE, key_id=9, secret=b"pw")
    s = make(0, auth=auth)
    feed(s, auth, None, 1_000)
    s.datagrams_to_send(1_000)
    ahead = s.expiry_datagram()
    s.detection_expired(2_000)
    assert s.datagrams_to_send(2_000)[:1] == [ahead]
    assert decode_control(ahead).auth is not None


def test_forged_packet_does_not_move_the_window() -> None:
    auth = key(AuthType.METICULOUS_KEYED_SHA1)
    s = make(0, auth=auth)
    feed(s, auth, 100, 0)
    forged = signed(AuthConfig(auth.type, auth.key_id, b"guess"), packet(State.DOWN, your=0), 105)
    with pytest.raises(Rejected, match="auth_digest"):
        s.receive(decode_control(forged), forged, 1, ttl=255)
    assert accepted(s, auth, 101, 2)


def test_forged_first_packet_does_not_seed_the_window() -> None:
    auth = key(AuthType.METICULOUS_KEYED_SHA1)
    s = make(0, auth=auth)
    forged = signed(AuthConfig(auth.type, auth.key_id, b"guess"), packet(State.DOWN, your=0), U32 - 1)
    with pytest.raises(Rejected, match="auth_digest"):
        s.receive(decode_control(forged), forged, 1, ttl=255)
    assert accepted(s, auth, 12345, 2)


def test_auth_change_resets_the_window() -> None:
    auth = key(AuthType.METICULOUS_KEYED_SHA1)
    s = make(0, auth=auth)
    feed(s, auth, 100, 0)
    new = AuthConfig(AuthType.METICULOUS_KEYED_SHA1, key_id=4, secret=b"fresh")
    reconfigure(s, 1, auth=new)
    assert accepted(s, new, 7, 2)
    # And the packets we send switch key at once.
    pkt = sent(s, 2 * SECOND)[-1]
    assert pkt.auth is not None and pkt.auth.key_id == 4


def test_enabling_auth_on_a_running_session() -> None:
    s = make(0)
    raw = encode_control(packet(State.DOWN, your=0))
    s.receive(decode_control(raw), raw, 0, ttl=255)
    auth = key(AuthType.KEYED_MD5)
    reconfigure(s, 1, auth=auth)
    with pytest.raises(Rejected, match="auth_missing"):
        s.receive(decode_control(raw), raw, 2, ttl=255)
    assert accepted(s, auth, 1, 3)
