"""RFC 5880 §4 control packets: the value types and their codec.

Encoding and decoding are pure and total: any byte string either decodes or
raises :class:`CodecError`. Digest helpers live in :mod:`.auth`.
"""

from __future__ import annotations

import enum
import hmac
import struct
from dataclasses import dataclass, field, fields
from typing import Any

from . import auth as _auth
from .errors import CodecError

__all__ = [
    "Auth",
    "AuthType",
    "CodecError",
    "ControlPacket",
    "Diag",
    "Flag",
    "State",
    "amended",
    "decode_control",
    "encode_control",
    "renumbered",
    "verify_auth",
]


class State(enum.IntEnum):
    ADMIN_DOWN = 0
    DOWN = 1
    INIT = 2
    UP = 3


class Flag(enum.IntFlag):
    """The flag bits of the second byte, below the two State bits (§4.1)."""

    POLL = 0x20
    FINAL = 0x10
    CPI = 0x08
    AUTH = 0x04
    DEMAND = 0x02
    MULTIPOINT = 0x01


class Diag(enum.IntEnum):
    NONE = 0
    CONTROL_DETECTION_TIME_EXPIRED = 1
    ECHO_FUNCTION_FAILED = 2
    NEIGHBOR_SIGNALED_SESSION_DOWN = 3
    FORWARDING_PLANE_RESET = 4
    PATH_DOWN = 5
    CONCATENATED_PATH_DOWN = 6
    ADMINISTRATIVELY_DOWN = 7
    REVERSE_CONCATENATED_PATH_DOWN = 8


class AuthType(enum.IntEnum):
    NONE = 0
    SIMPLE = 1
    KEYED_MD5 = 2
    METICULOUS_KEYED_MD5 = 3
    KEYED_SHA1 = 4
    METICULOUS_KEYED_SHA1 = 5


@dataclass(frozen=True)
class Auth:
    """The authentication section as it appears on the wire.

    ``data`` is the password for SIMPLE (1-16 bytes) and the digest for the
    keyed types (16 bytes MD5, 20 bytes SHA1). ``sequence`` is None for SIMPLE.
    """

    type: AuthType
    key_id: int
    data: bytes
    sequence: int | None = None


@dataclass(frozen=True)
class ControlPacket:
    """One decoded control packet. Intervals are in microseconds, as on the wire."""

    state: State
    my_discr: int
    your_discr: int = 0
    diag: Diag = Diag.NONE
    detect_mult: int = 3
    desired_min_tx_us: int = 1_000_000
    required_min_rx_us: int = 1_000_000
    required_min_echo_rx_us: int = 0
    poll: bool = False
    final: bool = False
    cpi: bool = False
    demand: bool = False
    multipoint: bool = False
    auth: Auth | None = field(default=None)
    version: int = 1


_FIELD_NAMES = frozenset(f.name for f in fields(ControlPacket))


def amended(pkt: ControlPacket, **changes: Any) -> ControlPacket:
    """``dataclasses.replace(pkt, **changes)`` at about a quarter of its cost.

    The periodic path builds a packet from the session's content with P and F
    set, and the fast path's templates do the same for every session a
    takeover adopts: ``replace`` walks every field's metadata and runs
    ``__init__`` each time. ControlPacket has no checks of its own to run, so
    its values are copied with the changes over them. An unknown name is a
    TypeError, as with ``replace``.
    """
    if not changes.keys() <= _FIELD_NAMES:
        raise TypeError(f"ControlPacket has no field {sorted(changes.keys() - _FIELD_NAMES)[0]!r}")
    new = object.__new__(ControlPacket)
    vars(new).update(vars(pkt), **changes)
    return new


# --- wire format --------------------------------------------------------------

# Vers/Diag, flags, Detect Mult, Length, My/Your Discr, three intervals (§4.1).
_FIXED = struct.Struct("!BBBBIIIII")
MIN_LEN = _FIXED.size  # 24
MIN_LEN_AUTH = MIN_LEN + 2  # the A bit promises at least Auth Type and Auth Len
VERSION = 1
VERSION_SHIFT = 5  # Vers in the top 3 bits of the first byte, Diag below
STATE_SHIFT = 6  # Sta in the top 2 bits of the second byte, the flags below

# Plain ints for the codec itself: `flags & Flag.POLL` would build a Flag on every test.
_P, _F, _C, _A, _D, _M = (
    int(f) for f in (Flag.POLL, Flag.FINAL, Flag.CPI, Flag.AUTH, Flag.DEMAND, Flag.MULTIPOINT)
)


def decode_control(data: bytes) -> ControlPacket:
    """Decode one control packet; raise :class:`CodecError` for anything §6.8.6 discards.

    Checks run in this order, the first failure naming the drop counter:
    ``version``, ``short``, ``length``, ``detect_mult``, ``multipoint``,
    ``my_discr``, ``your_discr``, ``auth_section``. (An empty buffer is
    ``short``: it has no version to check.) Bytes past the Length field are
    ignored. An unassigned Diag code is kept as a plain int rather than dropped,
    since §4.1 makes the diagnostic informational only.
    """
    length = _check_size(data)
    vers_diag, flags, detect_mult, _, my_discr, your_discr, tx, rx, echo_rx = _FIXED.unpack_from(data)
    state = State(flags >> STATE_SHIFT)
    _check_fields(state, flags, detect_mult, my_discr, your_discr)
    auth = _decode_auth(data[MIN_LEN:length]) if flags & _A else None
    return ControlPacket(
        state=state,
        my_discr=my_discr,
        your_discr=your_discr,
        diag=_diag(vers_diag & 0x1F),
        detect_mult=detect_mult,
        desired_min_tx_us=tx,
        required_min_rx_us=rx,
        required_min_echo_rx_us=echo_rx,
        poll=bool(flags & _P),
        final=bool(flags & _F),
        cpi=bool(flags & _C),
        demand=bool(flags & _D),
        multipoint=bool(flags & _M),
        auth=auth,
        version=vers_diag >> VERSION_SHIFT,
    )


def _check_size(data: bytes) -> int:
    """Version and size checks; returns the Length field."""
    if not data:
        raise CodecError("short", "empty")
    version = data[0] >> VERSION_SHIFT
    if version != VERSION:
        raise CodecError("version", f"version {version}")
    has_auth = len(data) > 1 and data[1] & _A
    needed = MIN_LEN_AUTH if has_auth else MIN_LEN
    if len(data) < needed:
        raise CodecError("short", f"{len(data)} bytes, need {needed}")
    length = data[3]
    if length < needed:
        raise CodecError("length", f"length field {length} < {needed}")
    if length > len(data):
        raise CodecError("length", f"length field {length} > {len(data)} bytes received")
    return length


def _check_fields(state: State, flags: int, detect_mult: int, my_discr: int, your_discr: int) -> None:
    if detect_mult == 0:
        raise CodecError("detect_mult", "zero")
    if flags & _M:
        raise CodecError("multipoint", "M bit set")
    if my_discr == 0:
        raise CodecError("my_discr", "zero")
    if your_discr == 0 and state not in (State.DOWN, State.ADMIN_DOWN):
        raise CodecError("your_discr", f"zero in state {state.name}")


def _diag(code: int) -> Diag:
    try:
        return Diag(code)
    except ValueError:
        return code  # type: ignore[return-value]  # unassigned code, see decode_control


def _decode_auth(section: bytes) -> Auth:
    """The auth section, cut at the Length field (so at least 2 bytes)."""
    auth_type, auth_len = section[0], section[1]
    problem = _auth.section_problem(auth_type, auth_len, len(section))
    if problem is not None:
        raise CodecError("auth_section", problem)
    if auth_type == _auth.SIMPLE:
        return Auth(AuthType.SIMPLE, key_id=section[2], data=bytes(section[3:auth_len]))
    _, _, key_id, sequence = _auth.KEYED_HEADER.unpack_from(section)
    digest = bytes(section[_auth.KEYED_HEADER.size : auth_len])
    return Auth(AuthType(auth_type), key_id=key_id, data=digest, sequence=sequence)


def encode_control(pkt: ControlPacket, *, secret: bytes | None = None) -> bytes:
    """Encode ``pkt``; with ``pkt.auth`` set, append the section and set the A bit.

    For the keyed types and a ``secret``, the digest is computed per
    §6.7.3/§6.7.4 and ``pkt.auth.data`` is ignored; without a secret,
    ``pkt.auth.data`` is sent as the digest (tests, replays). For SIMPLE the
    password is ``secret`` if given, else ``pkt.auth.data``. The encoder does
    not enforce the receive rules (a zero My Discriminator encodes), only that
    every value fits its field; it raises ValueError otherwise.
    """
    section = _encode_auth(pkt.auth, secret) if pkt.auth is not None else b""
    packet = _encode_fixed(pkt, MIN_LEN + len(section)) + section
    if pkt.auth is not None and pkt.auth.type in _auth.KEYED and secret is not None:
        digest = _auth.keyed_digest(packet, MIN_LEN, pkt.auth.type, secret)
        start = MIN_LEN + _auth.KEYED_HEADER.size
        packet = packet[:start] + digest + packet[start + len(digest) :]
    return packet


def renumbered(data: bytes, sequence: int, secret: bytes) -> bytes:
    """``data``, a packet of a keyed type as :func:`encode_control` made it, at Sequence Number
    ``sequence`` and signed again: the same packet as if it had been encoded at that number.

    For a sender that learns its packet's number only as it sends it (a meticulous key's
    packets beside a series the kernel sends, fastpath/series.py). Raises ValueError for a
    packet without a keyed section.
    """
    if len(data) < MIN_LEN + _auth.KEYED_HEADER.size or not data[1] & _A:
        raise ValueError("no authentication section to renumber")
    auth_type = data[MIN_LEN]
    if auth_type not in _auth.KEYED:
        raise ValueError(f"auth type {auth_type} carries no Sequence Number")
    head = bytearray(data)
    struct.pack_into("!I", head, MIN_LEN + 4, sequence % 2**32)
    digest = _auth.keyed_digest(bytes(head), MIN_LEN, auth_type, secret)
    start = MIN_LEN + _auth.KEYED_HEADER.size
    head[start : start + len(digest)] = digest
    return bytes(head)


def _encode_fixed(pkt: ControlPacket, length: int) -> bytes:
    _require_bits("version", pkt.version, 3)
    _require_bits("diag", pkt.diag, 5)
    _require_bits("state", pkt.state, 2)
    flags = pkt.state << STATE_SHIFT
    for bit, on in ((_P, pkt.poll), (_F, pkt.final), (_C, pkt.cpi), (_D, pkt.demand), (_M, pkt.multipoint)):
        if on:
            flags |= bit
    if pkt.auth is not None:
        flags |= _A
    try:
        return _FIXED.pack(
            pkt.version << VERSION_SHIFT | pkt.diag,
            flags,
            pkt.detect_mult,
            length,
            pkt.my_discr,
            pkt.your_discr,
            pkt.desired_min_tx_us,
            pkt.required_min_rx_us,
            pkt.required_min_echo_rx_us,
        )
    except struct.error as exc:
        raise ValueError(f"control packet field out of range: {exc}") from exc


def _require_bits(name: str, value: int, bits: int) -> None:
    if not 0 <= value < 1 << bits:
        raise ValueError(f"{name} {value} does not fit {bits} bits")


def _encode_auth(auth: Auth, secret: bytes | None) -> bytes:
    _require_bits("key_id", auth.key_id, 8)
    if auth.type == AuthType.SIMPLE:
        password = auth.data if secret is None else secret
        if not _auth.SIMPLE_MIN_PASSWORD <= len(password) <= _auth.SIMPLE_MAX_PASSWORD:
            raise ValueError(f"simple password of {len(password)} bytes, need 1-16")
        return bytes((auth.type, 3 + len(password), auth.key_id)) + password
    spec = _auth.KEYED.get(auth.type)
    if spec is None:
        raise ValueError(f"cannot encode auth type {auth.type}")
    if auth.sequence is None:
        raise ValueError(f"{AuthType(auth.type).name} needs a sequence number")
    _require_bits("sequence", auth.sequence, 32)
    # With a secret the field holds the padded key until the digest replaces it (§6.7.3).
    field = _auth.pad_key(secret, spec.digest_len) if secret is not None else auth.data
    if len(field) != spec.digest_len:
        raise ValueError(f"digest of {len(field)} bytes, need {spec.digest_len}")
    return _auth.KEYED_HEADER.pack(auth.type, spec.section_len, auth.key_id, auth.sequence) + field


def verify_auth(data: bytes, pkt: ControlPacket, secret: bytes) -> bool:
    """Check the password or digest of ``pkt``, decoded from ``data``, against ``secret``.

    False when the packet carries no auth section or when ``secret`` cannot be
    used with its type (too long). Key ID and sequence checks are the session's.
    """
    auth = pkt.auth
    if auth is None:
        return False
    if auth.type == AuthType.SIMPLE:
        return _auth.password_matches(auth.data, secret)
    spec = _auth.KEYED.get(auth.type)
    if spec is None or len(secret) > spec.digest_len or len(data) < MIN_LEN:
        return False
    length = data[3]
    if length < MIN_LEN + spec.section_len or length > len(data):
        return False
    expected = _auth.keyed_digest(bytes(data[:length]), MIN_LEN, auth.type, secret)
    return hmac.compare_digest(expected, auth.data)
