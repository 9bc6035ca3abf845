"""Our echo packet format: fixed 24 bytes the peer's forwarding plane returns unchanged."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xdp_bfd.wire import ECHO_LEN, CodecError, EchoPacket, decode_echo, encode_echo

KNOWN = b"XBFE" + struct.pack("!IIIQ", 0x01020304, 7, 9, 1_700_000_000_123_456_789)


def test_known_answer_decode() -> None:
    assert decode_echo(KNOWN) == EchoPacket(
        my_discr=0x01020304, sequence=7, generation=9, tx_time_ns=1_700_000_000_123_456_789
    )


def test_known_answer_encode() -> None:
    assert encode_echo(EchoPacket(0x01020304, 7, 9, 1_700_000_000_123_456_789)) == KNOWN
    assert ECHO_LEN == len(KNOWN) == 24


def test_trailing_bytes_are_ignored() -> None:
    noisy = KNOWN + b"ethernet padding"
    assert decode_echo(noisy) == decode_echo(KNOWN)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "short"),
        (b"XBFE", "short"),
        (KNOWN[:23], "short"),
        (b"XBE1" + KNOWN[4:], "magic"),
        (b"\0" * 24, "magic"),
        (b"xbfe" + KNOWN[4:], "magic"),
        (bytes([1, 24, 0, 0]) + KNOWN[4:], "magic"),  # FRR's echo
    ],
)
def test_rejects(data: bytes, reason: str) -> None:
    with pytest.raises(CodecError) as err:
        decode_echo(data)
    assert err.value.reason == reason


@pytest.mark.parametrize(
    "pkt",
    [
        EchoPacket(2**32, 0, 0, 0),
        EchoPacket(1, -1, 0, 0),
        EchoPacket(1, 0, 2**32, 0),
        EchoPacket(1, 0, 0, 2**64),
    ],
)
def test_encode_rejects_values_that_do_not_fit(pkt: EchoPacket) -> None:
    with pytest.raises(ValueError):
        encode_echo(pkt)


u32 = st.integers(0, 2**32 - 1)


@settings(max_examples=300, deadline=None)
@given(st.builds(EchoPacket, u32, u32, u32, st.integers(0, 2**64 - 1)), st.binary(max_size=16))
def test_round_trip(pkt: EchoPacket, trailer: bytes) -> None:
    data = encode_echo(pkt)
    assert len(data) == ECHO_LEN
    assert decode_echo(data + trailer) == pkt


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40) | st.binary(max_size=36).map(lambda b: b"XBFE" + b))
def test_decode_arbitrary_bytes_raises_only_codec_error(data: bytes) -> None:
    try:
        pkt = decode_echo(data)
    except CodecError:
        return
    assert data[:4] == b"XBFE"
    assert isinstance(pkt, EchoPacket)
