"""RFC 5880 §6.7 authentication: digests computed by the encoder and checked by verify_auth."""

from __future__ import annotations

import hashlib
import struct

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from xdp_bfd.wire import Auth, AuthType, ControlPacket, State, decode_control, encode_control, verify_auth
from xdp_bfd.wire import auth as wire_auth

KEYED = [
    (AuthType.KEYED_MD5, 24, 16, hashlib.md5),
    (AuthType.METICULOUS_KEYED_MD5, 24, 16, hashlib.md5),
    (AuthType.KEYED_SHA1, 28, 20, hashlib.sha1),
    (AuthType.METICULOUS_KEYED_SHA1, 28, 20, hashlib.sha1),
]


def fixed_part(length: int) -> bytes:
    """State Up, A bit, detect mult 3, discriminators 0x11/0x22, 100 ms intervals."""
    return struct.pack("!BBBBIIIII", 0x20, 3 << 6 | 0x04, 3, length, 0x11, 0x22, 100_000, 100_000, 0)


def up(auth: Auth) -> ControlPacket:
    return ControlPacket(
        state=State.UP,
        my_discr=0x11,
        your_discr=0x22,
        desired_min_tx_us=100_000,
        required_min_rx_us=100_000,
        auth=auth,
    )


@pytest.mark.parametrize(("auth_type", "section_len", "digest_len", "hash_fn"), KEYED)
def test_encode_computes_the_rfc_digest(
    auth_type: AuthType, section_len: int, digest_len: int, hash_fn
) -> None:
    secret = b"s3cr3t"
    # §6.7.3/§6.7.4: the digest field holds the key padded with zeros while the whole packet is hashed.
    length = 24 + section_len
    head = fixed_part(length) + struct.pack("!BBBxI", auth_type, section_len, 5, 0xA0B0C0D0)
    expected = head + hash_fn(head + secret + bytes(digest_len - len(secret))).digest()

    # The placeholder data must not leak into the result.
    pkt = up(Auth(auth_type, key_id=5, data=b"\xee" * digest_len, sequence=0xA0B0C0D0))
    assert encode_control(pkt, secret=secret) == expected


@pytest.mark.parametrize(("auth_type", "section_len", "digest_len", "hash_fn"), KEYED)
def test_full_length_key(auth_type: AuthType, section_len: int, digest_len: int, hash_fn) -> None:
    secret = bytes(range(1, digest_len + 1))
    head = fixed_part(24 + section_len) + struct.pack("!BBBxI", auth_type, section_len, 0, 1)
    pkt = up(Auth(auth_type, key_id=0, data=b"", sequence=1))
    assert encode_control(pkt, secret=secret) == head + hash_fn(head + secret).digest()


def test_simple_password_on_the_wire() -> None:
    expected = fixed_part(24 + 3 + 8) + bytes((1, 11, 2)) + b"password"
    assert encode_control(up(Auth(AuthType.SIMPLE, 2, b"password"))) == expected
    # A secret overrides the data.
    assert encode_control(up(Auth(AuthType.SIMPLE, 2, b"other")), secret=b"password") == expected


@pytest.mark.parametrize(("auth_type", "section_len", "digest_len", "hash_fn"), KEYED)
def test_verify_keyed(auth_type: AuthType, section_len: int, digest_len: int, hash_fn) -> None:
    data = encode_control(up(Auth(auth_type, 1, b"", 42)), secret=b"key")
    pkt = decode_control(data)
    assert verify_auth(data, pkt, b"key")
    assert not verify_auth(data, pkt, b"kez")
    assert not verify_auth(data, pkt, b"")
    assert not verify_auth(data, pkt, b"k" * (digest_len + 1))


@pytest.mark.parametrize(("auth_type", "section_len", "digest_len", "hash_fn"), KEYED)
def test_verify_detects_tampering(auth_type: AuthType, section_len: int, digest_len: int, hash_fn) -> None:
    data = bytearray(encode_control(up(Auth(auth_type, 1, b"", 42)), secret=b"key"))
    for offset in (2, 8, 27, 30):  # detect mult, your discr, key id, sequence
        tampered = bytearray(data)
        tampered[offset] ^= 0x01
        assert not verify_auth(bytes(tampered), decode_control(bytes(tampered)), b"key")


def test_verify_ignores_bytes_beyond_length() -> None:
    data = encode_control(up(Auth(AuthType.KEYED_SHA1, 1, b"", 1)), secret=b"key") + b"padding"
    assert verify_auth(data, decode_control(data), b"key")


def test_verify_simple_password() -> None:
    data = encode_control(up(Auth(AuthType.SIMPLE, 1, b"hunter2")))
    pkt = decode_control(data)
    assert verify_auth(data, pkt, b"hunter2")
    assert not verify_auth(data, pkt, b"hunter3")
    assert not verify_auth(data, pkt, b"hunter")


def test_verify_without_auth_section_is_false() -> None:
    data = encode_control(ControlPacket(State.DOWN, 1))
    assert not verify_auth(data, decode_control(data), b"key")


def test_verify_with_data_not_matching_packet_is_false() -> None:
    pkt = decode_control(encode_control(up(Auth(AuthType.KEYED_MD5, 1, b"", 1)), secret=b"k"))
    assert not verify_auth(b"", pkt, b"k")
    assert not verify_auth(encode_control(ControlPacket(State.DOWN, 1)), pkt, b"k")


def test_encode_rejects_secret_longer_than_key_field() -> None:
    with pytest.raises(ValueError):
        encode_control(up(Auth(AuthType.KEYED_MD5, 1, b"", 1)), secret=bytes(17))
    with pytest.raises(ValueError):
        encode_control(up(Auth(AuthType.SIMPLE, 1, b"x")), secret=bytes(17))


@pytest.mark.parametrize(
    ("auth_type", "auth_len", "available", "ok"),
    [
        (1, 4, 4, True),
        (1, 19, 19, True),
        (1, 3, 3, False),
        (1, 20, 20, False),
        (1, 19, 18, False),
        (2, 24, 24, True),
        (2, 24, 30, True),
        (3, 28, 28, False),
        (4, 28, 28, True),
        (5, 24, 24, False),
        (4, 28, 27, False),
        (0, 24, 24, False),
        (6, 24, 24, False),
    ],
)
def test_section_problem(auth_type: int, auth_len: int, available: int, ok: bool) -> None:
    assert (wire_auth.section_problem(auth_type, auth_len, available) is None) == ok


def test_max_secret_len() -> None:
    assert [wire_auth.max_secret_len(t) for t in range(1, 6)] == [16, 16, 16, 20, 20]


# --- properties -----------------------------------------------------------------------


@st.composite
def signed(draw: st.DrawFn) -> tuple[ControlPacket, bytes]:
    auth_type = draw(st.sampled_from(list(AuthType)[1:]))
    limit = wire_auth.max_secret_len(auth_type)
    low = 1 if auth_type == AuthType.SIMPLE else 0
    secret = draw(st.binary(min_size=low, max_size=limit))
    sequence = None if auth_type == AuthType.SIMPLE else draw(st.integers(0, 2**32 - 1))
    pkt = ControlPacket(
        state=draw(st.sampled_from([State.DOWN, State.ADMIN_DOWN])),
        my_discr=draw(st.integers(1, 2**32 - 1)),
        your_discr=draw(st.integers(0, 2**32 - 1)),
        poll=draw(st.booleans()),
        auth=Auth(auth_type, draw(st.integers(0, 255)), b"x", sequence),
    )
    return pkt, secret


@settings(max_examples=300, deadline=None)
@given(signed(), st.binary(max_size=20))
def test_signed_packets_verify_with_their_secret_only(
    case: tuple[ControlPacket, bytes], other: bytes
) -> None:
    pkt, secret = case
    data = encode_control(pkt, secret=secret)
    decoded = decode_control(data)
    assert decoded.auth is not None and pkt.auth is not None
    assert (decoded.auth.type, decoded.auth.key_id, decoded.auth.sequence) == (
        pkt.auth.type,
        pkt.auth.key_id,
        pkt.auth.sequence,
    )
    assert verify_auth(data, decoded, secret)
    # Keys are zero padded, so only a secret that pads to the same field is equivalent.
    size = wire_auth.max_secret_len(pkt.auth.type)
    if pkt.auth.type == AuthType.SIMPLE:
        assume(other != secret)
    else:
        assume(len(other) > size or other.ljust(size, b"\0") != secret.ljust(size, b"\0"))
    assert not verify_auth(data, decoded, other)
