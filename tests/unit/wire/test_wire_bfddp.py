"""FRR bfddp codec: frames built by hand from docs/bfddp.md, framing errors, streaming."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xdp_bfd.wire import (
    AddSession,
    CodecError,
    CountersReply,
    CountersRequest,
    DeleteSession,
    Diag,
    EchoReply,
    EchoRequest,
    FrameReader,
    Message,
    RemoteFlags,
    SessionFlags,
    SessionMessage,
    State,
    StateChange,
    decode_message,
    encode_message,
)
from xdp_bfd.wire.bfddp import MAX_FRAME_LEN

V4 = ipaddress.IPv4Address
V6 = ipaddress.IPv6Address


def frame(
    mtype: int, payload: bytes, *, ident: int = 0, version: int = 1, length: int | None = None
) -> bytes:
    """A frame built from the documented header layout, independent of the codec."""
    total = 8 + len(payload) if length is None else length
    return struct.pack("!BBHHH", version, 0, mtype, ident, total) + payload


def session_payload(
    flags: int, src: bytes, dst: bytes, ifname: bytes = b"", *, lid: int = 0x10, ifindex: int = 0
) -> bytes:
    payload = struct.pack("!I", flags) + src.ljust(16, b"\0") + dst.ljust(16, b"\0")
    payload += struct.pack("!IIIIIIBBHI", lid, 300_000, 200_000, 50_000, 40_000, 0, 254, 5, 0, ifindex)
    payload += ifname.ljust(64, b"\0")
    assert len(payload) == 132
    return payload


# --- known answers ----------------------------------------------------------------------

ECHO_REQUEST = frame(0, struct.pack("!QQ", 1_700_000_000_000_001, 0))
ECHO_REPLY = frame(1, struct.pack("!QQ", 1_700_000_000_000_001, 1_700_000_000_000_999))
ADD_V4 = frame(2, session_payload(0x08 | 0x04, b"", bytes([192, 0, 2, 1]), b"eth0", ifindex=3))
DELETE_V6 = frame(
    3,
    session_payload(0x10 | 0x01 | 0x40, V6("2001:db8::1").packed, V6("2001:db8::2").packed, lid=0xFFFFFFFF),
)
STATE_CHANGE = frame(4, struct.pack("!IIIIIIBBBx", 0x10, 0x20, 0x1, 300_000, 200_000, 50_000, 3, 0, 3))
COUNTERS_REQUEST = frame(5, struct.pack("!I", 0x10), ident=0x1234)
COUNTERS_REPLY = frame(6, struct.pack("!I4x8Q", 0x10, 1, 2, 3, 4, 5, 6, 7, 8), ident=0x1234)

KNOWN: list[tuple[bytes, Message]] = [
    (ECHO_REQUEST, EchoRequest(dp_time=1_700_000_000_000_001)),
    (ECHO_REPLY, EchoReply(dp_time=1_700_000_000_000_001, bfdd_time=1_700_000_000_000_999)),
    (
        ADD_V4,
        AddSession(
            flags=SessionFlags.ECHO | SessionFlags.CBIT,
            src=None,
            dst=V4("192.0.2.1"),
            lid=0x10,
            min_tx=300_000,
            min_rx=200_000,
            min_echo_tx=50_000,
            min_echo_rx=40_000,
            ttl=254,
            detect_mult=5,
            ifindex=3,
            ifname="eth0",
        ),
    ),
    (
        DELETE_V6,
        DeleteSession(
            flags=SessionFlags.IPV6 | SessionFlags.MULTIHOP | SessionFlags.SHUTDOWN,
            src=V6("2001:db8::1"),
            dst=V6("2001:db8::2"),
            lid=0xFFFFFFFF,
            min_tx=300_000,
            min_rx=200_000,
            min_echo_tx=50_000,
            min_echo_rx=40_000,
            ttl=254,
            detect_mult=5,
        ),
    ),
    (
        STATE_CHANGE,
        StateChange(
            lid=0x10,
            rid=0x20,
            remote_flags=RemoteFlags.CBIT,
            desired_tx=300_000,
            required_rx=200_000,
            required_echo_rx=50_000,
            state=State.UP,
            diag=Diag.NONE,
            detect_mult=3,
        ),
    ),
    (COUNTERS_REQUEST, CountersRequest(id=0x1234, lid=0x10)),
    (COUNTERS_REPLY, CountersReply(0x1234, 0x10, 1, 2, 3, 4, 5, 6, 7, 8)),
]
KNOWN_IDS = [
    "echo_request",
    "echo_reply",
    "add_v4",
    "delete_v6",
    "state_change",
    "counters_req",
    "counters_reply",
]


@pytest.mark.parametrize(("data", "msg"), KNOWN, ids=KNOWN_IDS)
def test_decode_known(data: bytes, msg: Message) -> None:
    assert decode_message(data) == msg


@pytest.mark.parametrize(("data", "msg"), KNOWN, ids=KNOWN_IDS)
def test_encode_known(data: bytes, msg: Message) -> None:
    assert encode_message(msg) == data


def test_documented_sizes() -> None:
    assert [len(data) for data, _ in KNOWN] == [24, 24, 140, 140, 36, 12, 80]


def test_id_is_ignored_outside_counters() -> None:
    assert decode_message(frame(1, struct.pack("!QQ", 1, 2), ident=77)) == EchoReply(1, 2)
    assert encode_message(EchoReply(1, 2))[4:6] == b"\0\0"


def test_add_and_delete_with_same_fields_differ() -> None:
    add = decode_message(ADD_V4)
    assert isinstance(add, AddSession)
    assert add != DeleteSession(**vars(add))


def test_ipv4_address_ignores_the_rest_of_the_slot() -> None:
    msg = decode_message(frame(2, session_payload(0, b"\x0a\0\0\x01" + b"\xff" * 12, b"\x0a\0\0\x02")))
    assert isinstance(msg, AddSession)
    assert (msg.src, msg.dst) == (V4("10.0.0.1"), V4("10.0.0.2"))


def test_ifname_is_nul_stripped_and_full_width() -> None:
    msg = decode_message(frame(2, session_payload(0, b"", b"\1", b"veth0\0garbage")))
    assert isinstance(msg, AddSession) and msg.ifname == "veth0"
    msg = decode_message(frame(2, session_payload(0, b"", b"\1", b"x" * 64)))
    assert isinstance(msg, AddSession) and msg.ifname == "x" * 64


def test_unknown_flag_bits_and_codes_survive() -> None:
    msg = decode_message(frame(2, session_payload(0x80000001, b"", b"\1")))
    assert isinstance(msg, AddSession) and int(msg.flags) == 0x80000001
    change = decode_message(frame(4, struct.pack("!IIIIIIBBBx", 1, 2, 0xF0, 0, 0, 0, 9, 200, 1)))
    assert isinstance(change, StateChange)
    assert (change.remote_flags, change.state, change.diag) == (0xF0, 9, 200)


def test_longer_version_1_session_parses() -> None:
    # An unmerged FRR change grows the session payload to 340 bytes (frame 348).
    grown = frame(2, session_payload(0x0C, b"", b"\xc0\0\2\1", b"eth0", ifindex=3) + b"\xaa" * 208)
    assert len(grown) == 348
    assert decode_message(grown) == decode_message(ADD_V4)
    assert FrameReader().feed(grown + ECHO_REPLY) == [decode_message(ADD_V4), decode_message(ECHO_REPLY)]


def test_bytes_beyond_the_frame_are_ignored_by_decode_message() -> None:
    assert decode_message(ECHO_REPLY + b"extra") == decode_message(ECHO_REPLY)


# --- rejects ---------------------------------------------------------------------------

FRAMING_REJECTS = [
    ("version 0", frame(0, bytes(16), version=0), "version"),
    ("version 2", frame(2, bytes(340), version=2), "version"),
    ("length 0", frame(0, bytes(16), length=0), "length"),
    ("length 7", frame(0, bytes(16), length=7), "length"),
    ("length 8 for echo", frame(0, b"", length=8), "length"),
    ("echo length 23", frame(1, bytes(15)), "length"),
    ("session length 139", frame(2, bytes(131)), "length"),
    ("delete length 139", frame(3, bytes(131)), "length"),
    ("state change length 35", frame(4, bytes(27)), "length"),
    ("counters request length 11", frame(5, bytes(3)), "length"),
    ("counters reply length 79", frame(6, bytes(71)), "length"),
    ("length beyond maximum", frame(2, b"", length=MAX_FRAME_LEN + 1), "length"),
    ("length 65535", frame(2, b"", length=65535), "length"),
    ("type 7", frame(7, bytes(16)), "type"),
    ("type 0xffff", frame(0xFFFF, bytes(16)), "type"),
    ("version beats length", frame(0, b"", version=2, length=0), "version"),
    ("length beats type", frame(99, b"", length=3), "length"),
]
FRAMING_IDS = [name for name, _, _ in FRAMING_REJECTS]


@pytest.mark.parametrize(("data", "reason"), [(d, r) for _, d, r in FRAMING_REJECTS], ids=FRAMING_IDS)
def test_decode_message_rejects(data: bytes, reason: str) -> None:
    with pytest.raises(CodecError) as err:
        decode_message(data)
    assert err.value.reason == reason


@pytest.mark.parametrize(("data", "reason"), [(d, r) for _, d, r in FRAMING_REJECTS], ids=FRAMING_IDS)
def test_frame_reader_rejects(data: bytes, reason: str) -> None:
    reader = FrameReader()
    with pytest.raises(CodecError) as err:
        reader.feed(ECHO_REPLY + data)
    assert err.value.reason == reason


@pytest.mark.parametrize(
    ("data", "reason"), [(b"", "short"), (ECHO_REPLY[:7], "short"), (ECHO_REPLY[:23], "length")]
)
def test_decode_message_incomplete(data: bytes, reason: str) -> None:
    with pytest.raises(CodecError) as err:
        decode_message(data)
    assert err.value.reason == reason


def test_reader_checks_version_on_the_first_byte() -> None:
    with pytest.raises(CodecError) as err:
        FrameReader().feed(b"\x02")
    assert err.value.reason == "version"


def test_reader_stays_broken_after_an_error() -> None:
    reader = FrameReader()
    with pytest.raises(CodecError):
        reader.feed(frame(9, bytes(8)))
    with pytest.raises(CodecError) as err:
        reader.feed(ECHO_REPLY)
    assert err.value.reason == "type"


def test_reader_buffers_partial_frames() -> None:
    reader = FrameReader()
    assert reader.feed(ADD_V4[:5]) == []
    assert reader.feed(ADD_V4[5:100]) == []
    assert reader.buffered == 100
    assert reader.feed(ADD_V4[100:] + COUNTERS_REQUEST[:1]) == [decode_message(ADD_V4)]
    assert reader.buffered == 1
    assert reader.feed(COUNTERS_REQUEST[1:]) == [CountersRequest(0x1234, 0x10)]
    assert reader.buffered == 0


# --- encoder input checks -----------------------------------------------------------------


def session(**changes: object) -> AddSession:
    base = {
        "flags": SessionFlags(0),
        "src": V4("10.0.0.1"),
        "dst": V4("10.0.0.2"),
        "lid": 1,
        "min_tx": 1,
        "min_rx": 1,
        "min_echo_tx": 0,
        "min_echo_rx": 0,
    }
    return AddSession(**(base | changes))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "msg",
    [
        session(flags=SessionFlags.IPV6),
        session(src=V6("::1"), dst=V6("::2")),
        session(ifname="x" * 64),
        session(ifname="a\0b"),
        session(lid=2**32),
        session(ttl=256),
        CountersRequest(id=2**16, lid=1),
        CountersReply(id=1, lid=1, echo_out_packets=2**64),
        EchoRequest(dp_time=-1),
    ],
)
def test_encode_rejects_values_that_do_not_fit(msg: Message) -> None:
    with pytest.raises(ValueError):
        encode_message(msg)


def test_encode_rejects_the_bare_session_base() -> None:
    base = SessionMessage(SessionFlags(0), None, V4("10.0.0.2"), 1, 1, 1, 0, 0)
    with pytest.raises(TypeError):
        encode_message(base)  # type: ignore[arg-type]


# --- properties ----------------------------------------------------------------------------

u8 = st.integers(0, 255)
u16 = st.integers(0, 2**16 - 1)
u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
ifnames = st.text(st.characters(exclude_characters="\0", exclude_categories=("Cs",)), max_size=20).filter(
    lambda name: len(os.fsencode(name)) <= 63
)


@st.composite
def sessions(draw: st.DrawFn) -> SessionMessage:
    flags = SessionFlags(draw(u32))
    if flags & SessionFlags.IPV6:
        addresses = st.integers(0, 2**128 - 1).map(V6)
        nonzero = st.integers(1, 2**128 - 1).map(V6)
    else:
        addresses = st.integers(0, 2**32 - 1).map(V4)
        nonzero = st.integers(1, 2**32 - 1).map(V4)
    cls = draw(st.sampled_from([AddSession, DeleteSession]))
    return cls(
        flags=flags,
        src=draw(st.none() | nonzero),
        dst=draw(addresses),
        lid=draw(u32),
        min_tx=draw(u32),
        min_rx=draw(u32),
        min_echo_tx=draw(u32),
        min_echo_rx=draw(u32),
        hold_time=draw(u32),
        ttl=draw(u8),
        detect_mult=draw(u8),
        ifindex=draw(u32),
        ifname=draw(ifnames),
    )


state_changes = st.builds(
    StateChange,
    lid=u32,
    rid=u32,
    remote_flags=u32.map(RemoteFlags),
    desired_tx=u32,
    required_rx=u32,
    required_echo_rx=u32,
    state=st.sampled_from(list(State)) | st.integers(4, 255),
    diag=st.sampled_from(list(Diag)) | st.integers(9, 255),
    detect_mult=u8,
)
counter_values = st.tuples(*[u64] * 8)
messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(EchoRequest, u64, u64),
    st.builds(EchoReply, u64, u64),
    sessions(),
    state_changes,
    st.builds(CountersRequest, u16, u32),
    st.builds(lambda ident, lid, values: CountersReply(ident, lid, *values), u16, u32, counter_values),
)


@settings(max_examples=300, deadline=None)
@given(messages)
def test_round_trip(msg: Message) -> None:
    data = encode_message(msg)
    assert struct.unpack_from("!H", data, 6)[0] == len(data)
    assert decode_message(data) == msg


@settings(max_examples=200, deadline=None)
@given(st.lists(messages, max_size=8), st.data())
def test_stream_split_anywhere_yields_the_same_messages(batch: list[Message], data: st.DataObject) -> None:
    stream = b"".join(encode_message(msg) for msg in batch)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    reader = FrameReader()
    got: list[Message] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        got += reader.feed(stream[start:end])
    assert got == batch
    assert reader.buffered == 0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=6))
def test_reader_on_arbitrary_bytes_raises_only_codec_error(chunks: list[bytes]) -> None:
    reader = FrameReader()
    try:
        for chunk in chunks:
            reader.feed(chunk)
    except CodecError:
        pass


@st.composite
def plausible_frames(draw: st.DrawFn) -> bytes:
    """Version-1 headers with any type and length over random payloads: past the version check."""
    payload = draw(st.binary(max_size=200))
    length = draw(st.integers(0, 2**16 - 1) | st.just(8 + len(payload)))
    return frame(draw(st.integers(0, 8)), payload, ident=draw(u16), length=length)


@settings(max_examples=300, deadline=None)
@given(st.lists(plausible_frames(), max_size=4))
def test_reader_on_plausible_garbage_raises_only_codec_error(frames: list[bytes]) -> None:
    with contextlib.suppress(CodecError):
        FrameReader().feed(b"".join(frames))


@settings(max_examples=300, deadline=None)
@given(plausible_frames() | st.binary(max_size=160))
def test_decode_message_on_arbitrary_bytes_raises_only_codec_error(data: bytes) -> None:
    with contextlib.suppress(CodecError):
        decode_message(data)
