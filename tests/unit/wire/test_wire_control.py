"""RFC 5880 §4.1 control packets: decode rules (§6.8.6), encoding, round trips."""

from __future__ import annotations

import contextlib
import dataclasses
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xdp_bfd.wire import Auth, AuthType, CodecError, ControlPacket, Diag, State
from xdp_bfd.wire.control import amended, decode_control, encode_control, renumbered

A_BIT, M_BIT = 0x04, 0x01


def raw(
    *,
    version: int = 1,
    diag: int = 0,
    state: int = 1,
    flags: int = 0,
    mult: int = 3,
    length: int | None = None,
    my: int = 1,
    your: int = 0,
    tx: int = 1_000_000,
    rx: int = 1_000_000,
    echo: int = 0,
    tail: bytes = b"",
) -> bytes:
    """A control packet built field by field, independent of the codec under test."""
    if length is None:
        length = 24 + len(tail)
    head = struct.pack(
        "!BBBBIIIII", version << 5 | diag, state << 6 | flags, mult, length, my, your, tx, rx, echo
    )
    return head + tail


def md5_section(auth_len: int = 24, auth_type: int = 2) -> bytes:
    return struct.pack("!BBBxI", auth_type, auth_len, 1, 7) + bytes(16)


def sha1_section(auth_len: int = 28, auth_type: int = 4) -> bytes:
    return struct.pack("!BBBxI", auth_type, auth_len, 1, 7) + bytes(20)


def simple_section(password: bytes, auth_len: int | None = None) -> bytes:
    return bytes((1, 3 + len(password) if auth_len is None else auth_len, 9)) + password


# --- known answers -------------------------------------------------------------------


def test_decode_known_packet() -> None:
    data = raw(
        diag=5,
        state=3,
        flags=0x20 | 0x08 | 0x02,
        mult=5,
        my=0xDEADBEEF,
        your=7,
        tx=300_000,
        rx=50_000,
        echo=20_000,
    )
    assert decode_control(data) == ControlPacket(
        state=State.UP,
        my_discr=0xDEADBEEF,
        your_discr=7,
        diag=Diag.PATH_DOWN,
        detect_mult=5,
        desired_min_tx_us=300_000,
        required_min_rx_us=50_000,
        required_min_echo_rx_us=20_000,
        poll=True,
        cpi=True,
        demand=True,
    )


def test_decode_final_bit_and_types() -> None:
    pkt = decode_control(raw(state=2, flags=0x10, your=3))
    assert pkt.final and not pkt.poll
    assert pkt.state is State.INIT
    assert pkt.diag is Diag.NONE
    assert pkt.version == 1
    assert pkt.auth is None


def test_encode_known_packet() -> None:
    pkt = ControlPacket(
        state=State.DOWN, my_discr=0x01020304, diag=Diag.CONTROL_DETECTION_TIME_EXPIRED, poll=True, final=True
    )
    assert encode_control(pkt) == raw(diag=1, state=1, flags=0x30, my=0x01020304)


def test_decode_simple_auth_section() -> None:
    data = raw(flags=A_BIT, tail=simple_section(b"secret"))
    assert decode_control(data).auth == Auth(AuthType.SIMPLE, key_id=9, data=b"secret")


@pytest.mark.parametrize(
    ("section", "auth_type", "digest_len"),
    [
        (md5_section(), AuthType.KEYED_MD5, 16),
        (md5_section(auth_type=3), AuthType.METICULOUS_KEYED_MD5, 16),
        (sha1_section(), AuthType.KEYED_SHA1, 20),
        (sha1_section(auth_type=5), AuthType.METICULOUS_KEYED_SHA1, 20),
    ],
)
def test_decode_keyed_auth_sections(section: bytes, auth_type: AuthType, digest_len: int) -> None:
    auth = decode_control(raw(flags=A_BIT, tail=section)).auth
    assert auth == Auth(auth_type, key_id=1, data=bytes(digest_len), sequence=7)


def test_bytes_beyond_length_are_ignored() -> None:
    assert decode_control(raw(length=24, tail=b"\xff" * 10)) == decode_control(raw())
    with_auth = raw(flags=A_BIT, tail=md5_section())
    assert decode_control(with_auth + b"junk") == decode_control(with_auth)


def test_unassigned_diag_is_kept_as_int() -> None:
    pkt = decode_control(raw(diag=31))
    assert pkt.diag == 31
    assert encode_control(pkt) == raw(diag=31)


@pytest.mark.parametrize("state", [0, 1])
def test_zero_your_discr_allowed_when_down(state: int) -> None:
    assert decode_control(raw(state=state, your=0)).your_discr == 0


def test_reserved_byte_of_keyed_section_is_ignored() -> None:
    section = bytearray(md5_section())
    section[3] = 0xFF
    assert decode_control(raw(flags=A_BIT, tail=bytes(section))).auth is not None


# --- rejects ----------------------------------------------------------------------------

REJECTS = [
    ("empty", b"", "short"),
    ("one byte version 1", b"\x20", "short"),
    ("23 bytes", raw()[:23], "short"),
    ("A bit, 24 bytes", raw(flags=A_BIT, length=26)[:24], "short"),
    ("A bit, 25 bytes", raw(flags=A_BIT, length=26, tail=b"\x02"), "short"),
    ("version 0", raw(version=0), "version"),
    ("version 2", raw(version=2), "version"),
    ("version 7", raw(version=7), "version"),
    ("bad version beats short", b"\x40", "version"),
    ("length 0", raw(length=0), "length"),
    ("length 23", raw(length=23), "length"),
    ("A bit, length 24", raw(flags=A_BIT, length=24, tail=md5_section()), "length"),
    ("A bit, length 25", raw(flags=A_BIT, length=25, tail=md5_section()), "length"),
    ("length beyond data", raw(length=25), "length"),
    ("length 255", raw(length=255, tail=bytes(40)), "length"),
    ("short beats length", raw(length=0)[:20], "short"),
    ("detect mult 0", raw(mult=0), "detect_mult"),
    ("M bit", raw(flags=M_BIT), "multipoint"),
    ("my discr 0", raw(my=0), "my_discr"),
    ("your discr 0 in Init", raw(state=2, your=0), "your_discr"),
    ("your discr 0 in Up", raw(state=3, your=0), "your_discr"),
    ("length beats detect mult", raw(length=23, mult=0), "length"),
    ("detect mult beats M", raw(mult=0, flags=M_BIT), "detect_mult"),
    ("M beats my discr", raw(flags=M_BIT, my=0), "multipoint"),
    ("my discr beats your discr", raw(state=3, my=0, your=0), "my_discr"),
    ("your discr beats auth", raw(state=3, your=0, flags=A_BIT, tail=b"\x00\x00"), "your_discr"),
    ("auth type 0", raw(flags=A_BIT, tail=md5_section(auth_type=0)), "auth_section"),
    ("auth type 6", raw(flags=A_BIT, tail=md5_section(auth_type=6)), "auth_section"),
    ("auth type 255", raw(flags=A_BIT, tail=md5_section(auth_type=255)), "auth_section"),
    ("only type and len", raw(flags=A_BIT, tail=b"\x02\x18"), "auth_section"),
    ("simple, empty password", raw(flags=A_BIT, tail=simple_section(b"")), "auth_section"),
    ("simple, 17-byte password", raw(flags=A_BIT, tail=simple_section(b"x" * 17)), "auth_section"),
    ("simple, auth len 2", raw(flags=A_BIT, tail=simple_section(b"pw", auth_len=2)), "auth_section"),
    ("simple, auth len 0", raw(flags=A_BIT, tail=simple_section(b"pw", auth_len=0)), "auth_section"),
    ("simple beyond length", raw(flags=A_BIT, tail=simple_section(b"pw", auth_len=6)), "auth_section"),
    ("md5 len 23", raw(flags=A_BIT, tail=md5_section(23)), "auth_section"),
    ("md5 len 25", raw(flags=A_BIT, tail=md5_section(25) + b"\0"), "auth_section"),
    ("md5 len 28", raw(flags=A_BIT, tail=md5_section(28) + bytes(4)), "auth_section"),
    ("meticulous md5 len 28", raw(flags=A_BIT, tail=md5_section(28, 3) + bytes(4)), "auth_section"),
    ("sha1 len 24", raw(flags=A_BIT, tail=sha1_section(24)), "auth_section"),
    ("sha1 len 27", raw(flags=A_BIT, tail=sha1_section(27)), "auth_section"),
    ("meticulous sha1 len 29", raw(flags=A_BIT, tail=sha1_section(29, 5) + b"\0"), "auth_section"),
    ("md5 beyond length", raw(flags=A_BIT, length=40, tail=md5_section()), "auth_section"),
    ("sha1 beyond length", raw(flags=A_BIT, length=48, tail=sha1_section()), "auth_section"),
]


@pytest.mark.parametrize(("data", "reason"), [(d, r) for _, d, r in REJECTS], ids=[n for n, _, _ in REJECTS])
def test_reject_reason(data: bytes, reason: str) -> None:
    with pytest.raises(CodecError) as err:
        decode_control(data)
    assert err.value.reason == reason


# --- encoder input checks -------------------------------------------------------------


@pytest.mark.parametrize(
    "pkt",
    [
        ControlPacket(State.UP, 1, diag=32),  # type: ignore[arg-type]
        ControlPacket(State.UP, 1, version=8),
        ControlPacket(State.UP, 2**32),
        ControlPacket(State.UP, 1, detect_mult=256),
        ControlPacket(State.UP, 1, desired_min_tx_us=-1),
        ControlPacket(State.UP, 1, auth=Auth(AuthType.SIMPLE, 1, b"")),
        ControlPacket(State.UP, 1, auth=Auth(AuthType.SIMPLE, 1, b"x" * 17)),
        ControlPacket(State.UP, 1, auth=Auth(AuthType.SIMPLE, 256, b"x")),
        ControlPacket(State.UP, 1, auth=Auth(AuthType.KEYED_MD5, 1, bytes(16))),  # no sequence
        ControlPacket(State.UP, 1, auth=Auth(AuthType.KEYED_MD5, 1, bytes(15), 1)),
        ControlPacket(State.UP, 1, auth=Auth(AuthType.KEYED_SHA1, 1, bytes(16), 1)),
        ControlPacket(State.UP, 1, auth=Auth(AuthType.KEYED_SHA1, 1, bytes(20), 2**32)),
        ControlPacket(State.UP, 1, auth=Auth(AuthType.NONE, 1, b"")),
    ],
)
def test_encode_rejects_values_that_do_not_fit(pkt: ControlPacket) -> None:
    with pytest.raises(ValueError):
        encode_control(pkt)


# --- properties -----------------------------------------------------------------------

u32 = st.integers(0, 2**32 - 1)


@st.composite
def auths(draw: st.DrawFn) -> Auth:
    auth_type = draw(st.sampled_from(list(AuthType)[1:]))
    key_id = draw(st.integers(0, 255))
    if auth_type == AuthType.SIMPLE:
        return Auth(auth_type, key_id, draw(st.binary(min_size=1, max_size=16)))
    size = 16 if auth_type in (AuthType.KEYED_MD5, AuthType.METICULOUS_KEYED_MD5) else 20
    return Auth(auth_type, key_id, draw(st.binary(min_size=size, max_size=size)), draw(u32))


@st.composite
def valid_packets(draw: st.DrawFn) -> ControlPacket:
    state = draw(st.sampled_from(list(State)))
    low = 0 if state in (State.DOWN, State.ADMIN_DOWN) else 1
    return ControlPacket(
        state=state,
        my_discr=draw(st.integers(1, 2**32 - 1)),
        your_discr=draw(st.integers(low, 2**32 - 1)),
        diag=draw(st.sampled_from(list(Diag))),
        detect_mult=draw(st.integers(1, 255)),
        desired_min_tx_us=draw(u32),
        required_min_rx_us=draw(u32),
        required_min_echo_rx_us=draw(u32),
        poll=draw(st.booleans()),
        final=draw(st.booleans()),
        cpi=draw(st.booleans()),
        demand=draw(st.booleans()),
        auth=draw(st.none() | auths()),
    )


@settings(max_examples=300, deadline=None)
@given(valid_packets())
def test_round_trip(pkt: ControlPacket) -> None:
    data = encode_control(pkt)
    assert data[3] == len(data)
    assert decode_control(data) == pkt


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_decode_arbitrary_bytes_raises_only_codec_error(data: bytes) -> None:
    try:
        pkt = decode_control(data)
    except CodecError:
        return
    assert isinstance(pkt, ControlPacket)


@settings(max_examples=300, deadline=None)
@given(valid_packets(), st.data())
def test_decode_mutated_packets_raises_only_codec_error(pkt: ControlPacket, data: st.DataObject) -> None:
    # Random bytes rarely get past the version check; corrupting valid packets reaches the later rules.
    wire = bytearray(encode_control(pkt))
    for _ in range(data.draw(st.integers(1, 4))):
        wire[data.draw(st.integers(0, len(wire) - 1))] = data.draw(st.integers(0, 255))
    wire[0] = 0x20 | wire[0] & 0x1F
    cut = data.draw(st.integers(0, len(wire)))
    with contextlib.suppress(CodecError):
        decode_control(bytes(wire[:cut]))


# --- amended: dataclasses.replace without its cost ---------------------------------


_CHANGES = st.fixed_dictionaries(
    {},
    optional={
        "state": st.sampled_from(list(State)),
        "your_discr": st.integers(0, 2**32 - 1),
        "diag": st.sampled_from(list(Diag)),
        "poll": st.booleans(),
        "final": st.booleans(),
        "demand": st.booleans(),
        "desired_min_tx_us": st.integers(0, 2**32 - 1),
        "auth": st.none() | st.just(Auth(AuthType.SIMPLE, 1, b"abc")),
    },
)


@given(_CHANGES)
@settings(max_examples=200, deadline=None)
def test_amended_is_replace(changes):
    base = ControlPacket(
        state=State.UP, my_discr=7, your_discr=9, detect_mult=5, required_min_echo_rx_us=50_000
    )
    before = dataclasses.astuple(base)
    got, want = amended(base, **changes), dataclasses.replace(base, **changes)
    assert got == want and hash(got) == hash(want) and repr(got) == repr(want)
    assert encode_control(dataclasses.replace(got, auth=None)) == encode_control(
        dataclasses.replace(want, auth=None)
    )
    assert dataclasses.astuple(base) == before  # the original is untouched
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.poll = True  # type: ignore[misc]


def test_amended_has_no_init_checks_to_skip():
    """amended copies values without ``__init__``: sound only while the packet has no checks of its own."""
    assert not hasattr(ControlPacket, "__post_init__")


def test_amended_refuses_a_name_that_is_not_a_field():
    with pytest.raises(TypeError, match="no field 'pol'"):
        amended(ControlPacket(state=State.UP, my_discr=1), pol=True)


@pytest.mark.parametrize(
    "auth_type",
    [AuthType.KEYED_MD5, AuthType.METICULOUS_KEYED_MD5, AuthType.KEYED_SHA1, AuthType.METICULOUS_KEYED_SHA1],
)
def test_a_packet_renumbered_is_the_packet_encoded_at_that_number(auth_type: AuthType) -> None:
    secret = b"renumber"
    pkt = ControlPacket(state=State.UP, my_discr=7, your_discr=9, final=True)

    def at(seq: int) -> bytes:
        return encode_control(amended(pkt, auth=Auth(auth_type, 4, b"", seq)), secret=secret)

    assert renumbered(at(41), 2**32 + 3, secret) == at(3)
    assert renumbered(at(41), 41, secret) == at(41)
    assert renumbered(at(41), 42, secret) != at(41)


def test_only_a_keyed_packet_can_be_renumbered() -> None:
    plain = encode_control(ControlPacket(state=State.UP, my_discr=7, your_discr=9))
    simple = encode_control(
        ControlPacket(state=State.UP, my_discr=7, your_discr=9, auth=Auth(AuthType.SIMPLE, 1, b"pw"))
    )
    for data in (plain, simple):
        with pytest.raises(ValueError, match=r"renumber|Sequence"):
            renumbered(data, 5, b"pw")
