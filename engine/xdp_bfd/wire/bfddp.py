"""FRR's distributed-BFD data-plane protocol ("bfddp"), see docs/bfddp.md.

A byte stream of frames: an 8-byte big-endian header (version 1, zero, type,
id, length including the header) and a fixed payload per type. Frames are
parsed by their length field and bytes past the known payload are ignored, so
a longer version-1 frame still decodes. Any framing error is fatal to the
connection (bfdd itself stops reading on a bad version), hence the reader
raises instead of trying to resynchronise.
"""

from __future__ import annotations

import enum
import ipaddress
import os
import struct
from dataclasses import dataclass
from typing import Any, TypeAlias

from .control import Diag, State
from .errors import CodecError

__all__ = [
    "HEADER_LEN",
    "MAX_FRAME_LEN",
    "VERSION",
    "AddSession",
    "CountersReply",
    "CountersRequest",
    "DeleteSession",
    "EchoReply",
    "EchoRequest",
    "FrameReader",
    "IPAddress",
    "Message",
    "MessageType",
    "RemoteFlags",
    "SessionFlags",
    "SessionMessage",
    "StateChange",
    "decode_message",
    "encode_message",
]

VERSION = 1
_HEADER = struct.Struct("!BBHHH")
HEADER_LEN = _HEADER.size  # 8
# The largest known frame is 348 bytes (an unmerged version-2 session); anything
# far beyond that means the stream is out of step, and waiting for up to 64 KiB
# that will never make sense would only delay the reconnect.
MAX_FRAME_LEN = 4096

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address


class MessageType(enum.IntEnum):
    ECHO_REQUEST = 0
    ECHO_REPLY = 1
    ADD_SESSION = 2
    DELETE_SESSION = 3
    STATE_CHANGE = 4
    REQUEST_COUNTERS = 5
    SESSION_COUNTERS = 6


class SessionFlags(enum.IntFlag):
    MULTIHOP = 0x01
    DEMAND = 0x02
    CBIT = 0x04
    ECHO = 0x08
    IPV6 = 0x10
    PASSIVE = 0x20
    SHUTDOWN = 0x40


class RemoteFlags(enum.IntFlag):
    """The peer's bits reported in a state change."""

    CBIT = 0x1
    DEMAND = 0x2
    MULTIPOINT = 0x4


# --- messages ------------------------------------------------------------------


@dataclass(frozen=True)
class EchoRequest:
    """Data plane → bfdd; bfdd answers at once (a FIFO barrier after connect)."""

    dp_time: int
    bfdd_time: int = 0


@dataclass(frozen=True)
class EchoReply:
    """bfdd → data plane; ``dp_time`` is copied from the request. Times in µs since the epoch."""

    dp_time: int
    bfdd_time: int


@dataclass(frozen=True)
class SessionMessage:
    """Payload shared by :class:`AddSession` and :class:`DeleteSession`; not sent itself.

    ``src`` is None when bfdd has no local address. Addresses are IPv6 exactly
    when ``flags`` has IPV6. Intervals are in µs; ``lid`` is our My Discriminator.
    """

    flags: SessionFlags
    src: IPAddress | None
    dst: IPAddress
    lid: int
    min_tx: int
    min_rx: int
    min_echo_tx: int
    min_echo_rx: int
    hold_time: int = 0
    ttl: int = 255
    detect_mult: int = 3
    ifindex: int = 0
    ifname: str = ""


@dataclass(frozen=True)
class AddSession(SessionMessage):
    """Add or update (bfdd re-sends adds with the same lid on every change)."""


@dataclass(frozen=True)
class DeleteSession(SessionMessage):
    pass


@dataclass(frozen=True)
class StateChange:
    """Data plane → bfdd. ``state`` is the local state; the rest describe the peer."""

    lid: int
    rid: int
    remote_flags: RemoteFlags
    desired_tx: int
    required_rx: int
    required_echo_rx: int
    state: State | int  # a value RFC 5880 does not name stays an int
    diag: Diag | int  # a value RFC 5880 does not name stays an int
    detect_mult: int


@dataclass(frozen=True)
class CountersRequest:
    """bfdd → data plane; ``id`` is the header id the reply must echo."""

    id: int
    lid: int


@dataclass(frozen=True)
class CountersReply:
    id: int
    lid: int
    control_in_bytes: int = 0
    control_in_packets: int = 0
    control_out_bytes: int = 0
    control_out_packets: int = 0
    echo_in_bytes: int = 0
    echo_in_packets: int = 0
    echo_out_bytes: int = 0
    echo_out_packets: int = 0


Message: TypeAlias = (
    EchoRequest | EchoReply | AddSession | DeleteSession | StateChange | CountersRequest | CountersReply
)

# --- payload layouts --------------------------------------------------------------

_ECHO = struct.Struct("!QQ")
# flags, src, dst, lid, min_tx, min_rx, min_echo_tx, min_echo_rx, hold_time, ttl, detect_mult,
# zero, ifindex, ifname
_SESSION = struct.Struct("!I16s16sIIIIIIBBHI64s")
# lid, rid, remote_flags, desired_tx, required_rx, required_echo_rx, state, diag, detect_mult, pad
_STATE = struct.Struct("!IIIIIIBBBx")
_COUNTERS_REQUEST = struct.Struct("!I")
# lid, 4 pad bytes (bfdd aligns the u64s), eight counters
_COUNTERS_REPLY = struct.Struct("!I4x8Q")

_PAYLOAD: dict[MessageType, struct.Struct] = {
    MessageType.ECHO_REQUEST: _ECHO,
    MessageType.ECHO_REPLY: _ECHO,
    MessageType.ADD_SESSION: _SESSION,
    MessageType.DELETE_SESSION: _SESSION,
    MessageType.STATE_CHANGE: _STATE,
    MessageType.REQUEST_COUNTERS: _COUNTERS_REQUEST,
    MessageType.SESSION_COUNTERS: _COUNTERS_REPLY,
}
_IFNAME_MAX = 63  # char[64] with room for bfdd's terminating NUL


# --- decoding -------------------------------------------------------------------


def decode_message(frame: bytes) -> Message:
    """Decode one complete frame; bytes past its length field are ignored.

    Reasons, in check order: ``short`` (under 8 bytes), ``version``,
    ``length`` (< 8 or > MAX_FRAME_LEN), ``type``, ``length`` (below the type's
    minimum, or more than the bytes given).
    """
    if len(frame) < HEADER_LEN:
        raise CodecError("short", f"{len(frame)} bytes, need {HEADER_LEN}")
    mtype, ident, length = _check_header(frame)
    if length > len(frame):
        raise CodecError("length", f"length field {length} > {len(frame)} bytes given")
    return _decode_payload(mtype, ident, frame[HEADER_LEN:length])


def _check_header(buf: bytes | bytearray, offset: int = 0) -> tuple[MessageType, int, int]:
    """Validate the header at ``offset``; returns (type, id, length)."""
    version, _zero, raw_type, ident, length = _HEADER.unpack_from(buf, offset)
    if version != VERSION:
        raise CodecError("version", f"version {version}")
    if not HEADER_LEN <= length <= MAX_FRAME_LEN:
        raise CodecError("length", f"length field {length}")
    try:
        mtype = MessageType(raw_type)
    except ValueError:
        raise CodecError("type", f"unknown type {raw_type}") from None
    minimum = HEADER_LEN + _PAYLOAD[mtype].size
    if length < minimum:
        raise CodecError("length", f"length field {length} < {minimum} for {mtype.name}")
    return mtype, ident, length


def _decode_payload(mtype: MessageType, ident: int, payload: bytes | bytearray) -> Message:
    fields = _PAYLOAD[mtype].unpack_from(payload)
    if mtype == MessageType.ECHO_REQUEST:
        return EchoRequest(*fields)
    if mtype == MessageType.ECHO_REPLY:
        return EchoReply(*fields)
    if mtype == MessageType.ADD_SESSION:
        return AddSession(**_session_fields(fields))
    if mtype == MessageType.DELETE_SESSION:
        return DeleteSession(**_session_fields(fields))
    if mtype == MessageType.STATE_CHANGE:
        return _decode_state_change(fields)
    if mtype == MessageType.REQUEST_COUNTERS:
        return CountersRequest(ident, *fields)
    return CountersReply(ident, *fields)


def _session_fields(fields: tuple) -> dict[str, Any]:
    raw_flags, src, dst, lid, tx, rx, echo_tx, echo_rx, hold, ttl, mult, _zero, ifindex, ifname = fields
    flags = SessionFlags(raw_flags)
    ipv6 = bool(flags & SessionFlags.IPV6)
    source = _address(src, ipv6)
    return {
        "flags": flags,
        "src": None if source.is_unspecified else source,
        "dst": _address(dst, ipv6),
        "lid": lid,
        "min_tx": tx,
        "min_rx": rx,
        "min_echo_tx": echo_tx,
        "min_echo_rx": echo_rx,
        "hold_time": hold,
        "ttl": ttl,
        "detect_mult": mult,
        "ifindex": ifindex,
        # fsdecode, because socket.if_nametoindex() encodes names the same way back.
        "ifname": os.fsdecode(ifname.split(b"\0", 1)[0]),
    }


def _address(raw: bytes, ipv6: bool) -> IPAddress:
    if ipv6:
        return ipaddress.IPv6Address(raw)
    return ipaddress.IPv4Address(raw[:4])


def _decode_state_change(fields: tuple) -> StateChange:
    lid, rid, remote, tx, rx, echo_rx, state, diag, mult = fields
    return StateChange(
        lid=lid,
        rid=rid,
        remote_flags=RemoteFlags(remote),
        desired_tx=tx,
        required_rx=rx,
        required_echo_rx=echo_rx,
        # Unknown codes stay plain ints: decoding is total, the reader decides.
        state=_enum_or_int(State, state),
        diag=_enum_or_int(Diag, diag),
        detect_mult=mult,
    )


def _enum_or_int(cls: type[enum.IntEnum], value: int) -> int:
    try:
        return cls(value)
    except ValueError:
        return value


class FrameReader:
    """Splits a bfddp byte stream into messages, buffering partial frames.

    A framing error (reasons as in :func:`decode_message`, minus ``short``)
    raises :class:`CodecError` at once; the caller must drop the connection.
    Messages already decoded in the same :meth:`feed` call are discarded with
    it (bfdd re-sends its sessions on reconnect), and the reader stays broken:
    every later call raises the same reason.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._error: CodecError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held back waiting for the rest of a frame."""
        return len(self._buf)

    def pending(self) -> bytes:
        """The bytes held back, for a process that resumes the stream (``--pin``)."""
        return bytes(self._buf)

    def feed(self, data: bytes) -> list[Message]:
        if self._error is not None:
            raise CodecError(self._error.reason, self._error.detail)
        self._buf += data
        try:
            return self._drain()
        except CodecError as exc:
            self._error = exc
            raise

    def _drain(self) -> list[Message]:
        messages: list[Message] = []
        pos = 0
        while (header := self._complete_frame(pos)) is not None:
            mtype, ident, length = header
            messages.append(_decode_payload(mtype, ident, self._buf[pos + HEADER_LEN : pos + length]))
            pos += length
        del self._buf[:pos]
        return messages

    def _complete_frame(self, pos: int) -> tuple[MessageType, int, int] | None:
        """Header of the frame at ``pos`` if all of it is buffered, else None."""
        available = len(self._buf) - pos
        if available == 0:
            return None
        # Check the version as soon as its byte is here: a stream out of step fails fast.
        if self._buf[pos] != VERSION:
            raise CodecError("version", f"version {self._buf[pos]}")
        if available < HEADER_LEN:
            return None
        header = _check_header(self._buf, pos)
        return header if available >= header[2] else None


# --- encoding -------------------------------------------------------------------


def encode_message(msg: Message) -> bytes:
    """The wire bytes of ``msg``; ValueError if a field does not fit its slot."""
    mtype, ident, payload = _encode_payload(msg)
    length = HEADER_LEN + len(payload)
    try:
        return _HEADER.pack(VERSION, 0, mtype, ident, length) + payload
    except struct.error as exc:
        raise ValueError(f"bfddp header field out of range: {exc}") from exc


def _encode_payload(msg: Message) -> tuple[MessageType, int, bytes]:
    try:
        match msg:
            case EchoRequest():
                return MessageType.ECHO_REQUEST, 0, _ECHO.pack(msg.dp_time, msg.bfdd_time)
            case EchoReply():
                return MessageType.ECHO_REPLY, 0, _ECHO.pack(msg.dp_time, msg.bfdd_time)
            case AddSession():
                return MessageType.ADD_SESSION, 0, _encode_session(msg)
            case DeleteSession():
                return MessageType.DELETE_SESSION, 0, _encode_session(msg)
            case StateChange():
                return MessageType.STATE_CHANGE, 0, _encode_state_change(msg)
            case CountersRequest():
                return MessageType.REQUEST_COUNTERS, msg.id, _COUNTERS_REQUEST.pack(msg.lid)
            case CountersReply():
                return MessageType.SESSION_COUNTERS, msg.id, _encode_counters_reply(msg)
    except struct.error as exc:
        raise ValueError(f"{type(msg).__name__} field out of range: {exc}") from exc
    raise TypeError(f"not a bfddp message: {msg!r}")


def _encode_session(msg: SessionMessage) -> bytes:
    version = 6 if msg.flags & SessionFlags.IPV6 else 4
    for name, addr in (("src", msg.src), ("dst", msg.dst)):
        if addr is not None and addr.version != version:
            raise ValueError(f"{name} {addr} is not IPv{version} as the IPV6 flag says")
    ifname = os.fsencode(msg.ifname)
    if len(ifname) > _IFNAME_MAX or b"\0" in ifname:
        raise ValueError(f"bad interface name {msg.ifname!r}")
    return _SESSION.pack(
        msg.flags,
        _packed_address(msg.src),
        _packed_address(msg.dst),
        msg.lid,
        msg.min_tx,
        msg.min_rx,
        msg.min_echo_tx,
        msg.min_echo_rx,
        msg.hold_time,
        msg.ttl,
        msg.detect_mult,
        0,
        msg.ifindex,
        ifname,
    )


def _packed_address(addr: IPAddress | None) -> bytes:
    # struct's "16s" pads with zeros, which is also bfdd's "no source address".
    return b"" if addr is None else addr.packed


def _encode_state_change(msg: StateChange) -> bytes:
    return _STATE.pack(
        msg.lid,
        msg.rid,
        msg.remote_flags,
        msg.desired_tx,
        msg.required_rx,
        msg.required_echo_rx,
        msg.state,
        msg.diag,
        msg.detect_mult,
    )


def _encode_counters_reply(msg: CountersReply) -> bytes:
    return _COUNTERS_REPLY.pack(
        msg.lid,
        msg.control_in_bytes,
        msg.control_in_packets,
        msg.control_out_bytes,
        msg.control_out_packets,
        msg.echo_in_bytes,
        msg.echo_in_packets,
        msg.echo_out_bytes,
        msg.echo_out_packets,
    )
