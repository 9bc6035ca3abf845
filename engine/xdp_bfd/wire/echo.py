"""Our BFD echo packet (RFC 5880 §6.4 leaves the content to the implementation).

A fixed 24-byte layout, all fields in network order::

    magic "XBFE" (4) | my_discr u32 | sequence u32 | generation u32 | tx time u64 (ns, CLOCK_MONOTONIC)

The peer's forwarding plane returns it unchanged; XDP matches the return
(``bpf/xdp_bfd.c``, ``echo_return``), whose header restates this layout
(``struct bfd_echo_probe``; ``fastpath.abi`` refuses a header that disagrees).
The magic tells our echoes from a peer's (FRR's start with version 1, length
24) and from stray traffic on port 3785; the discriminator picks the session
without a lookup by address; the generation tells a return from before the
session's echo was last restarted.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import CodecError

__all__ = ["ECHO_LEN", "ECHO_MAGIC", "EchoPacket", "decode_echo", "encode_echo"]

ECHO_MAGIC = b"XBFE"
_ECHO = struct.Struct("!4sIIIQ")
ECHO_LEN = _ECHO.size  # 24


@dataclass(frozen=True)
class EchoPacket:
    """One echo packet; ``tx_time_ns`` is the sender's monotonic clock when it was sent."""

    my_discr: int
    sequence: int
    generation: int
    tx_time_ns: int


def encode_echo(pkt: EchoPacket) -> bytes:
    """The 24 wire bytes of ``pkt``; ValueError if a field does not fit."""
    try:
        return _ECHO.pack(ECHO_MAGIC, pkt.my_discr, pkt.sequence, pkt.generation, pkt.tx_time_ns)
    except struct.error as exc:
        raise ValueError(f"echo field out of range: {exc}") from exc


def decode_echo(data: bytes) -> EchoPacket:
    """Decode an echo packet; reasons ``short`` then ``magic``. Trailing bytes (link padding) are ignored."""
    if len(data) < ECHO_LEN:
        raise CodecError("short", f"{len(data)} bytes, need {ECHO_LEN}")
    magic, my_discr, sequence, generation, tx_time_ns = _ECHO.unpack_from(data)
    if magic != ECHO_MAGIC:
        raise CodecError("magic", repr(bytes(magic)))
    return EchoPacket(my_discr=my_discr, sequence=sequence, generation=generation, tx_time_ns=tx_time_ns)
