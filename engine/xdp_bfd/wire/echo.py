"""Our BFD echo packet (RFC 5880 §6.4 leaves the content to the implementation).

A fixed 24-byte layout the XDP reflector carries unmodified::

    magic "XBE1" (4) | my_discr u32 | sequence u32 | tx time u64 (µs) | 4 reserved zero bytes

The magic lets the receiver tell our echoes from stray traffic on port 3785;
the discriminator picks the session without a lookup by address.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import CodecError

__all__ = ["ECHO_LEN", "ECHO_MAGIC", "EchoPacket", "decode_echo", "encode_echo"]

ECHO_MAGIC = b"XBE1"
_ECHO = struct.Struct("!4sIIQ4x")
ECHO_LEN = _ECHO.size  # 24


@dataclass(frozen=True)
class EchoPacket:
    """One echo packet; ``tx_time_us`` is the sender's clock when it was sent."""

    my_discr: int
    sequence: int
    tx_time_us: int


def encode_echo(pkt: EchoPacket) -> bytes:
    """The 24 wire bytes of ``pkt``; ValueError if a field does not fit."""
    try:
        return _ECHO.pack(ECHO_MAGIC, pkt.my_discr, pkt.sequence, pkt.tx_time_us)
    except struct.error as exc:
        raise ValueError(f"echo field out of range: {exc}") from exc


def decode_echo(data: bytes) -> EchoPacket:
    """Decode an echo packet; reasons ``short`` then ``magic``.

    Trailing bytes (link padding) and the reserved bytes are ignored.
    """
    if len(data) < ECHO_LEN:
        raise CodecError("short", f"{len(data)} bytes, need {ECHO_LEN}")
    magic, my_discr, sequence, tx_time_us = _ECHO.unpack_from(data)
    if magic != ECHO_MAGIC:
        raise CodecError("magic", repr(bytes(magic)))
    return EchoPacket(my_discr=my_discr, sequence=sequence, tx_time_us=tx_time_us)
