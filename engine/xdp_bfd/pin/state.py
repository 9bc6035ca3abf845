"""The handed-over state: what the old engine writes and the successor restores, field for field.

Per session: the shell's fields (``_ENTRY_FIELDS``), its drop counts, the last
packet it accepted, its source port, its configuration, the state machine
(``Session.export()``, in ``Session.STATE_FIELDS`` order) and the dataplane's
bookkeeping for it.

Format 3 is data only: a header (magic ``XBFS``, the version, the length of
what follows) and JSON of lists, in the fingerprint's field order, nothing but
numbers, strings, booleans and null. Nothing a successor reads can run code:
whoever can write the pinned map can at most make the successor start fresh.
The decoder is total, like the packet codec: it returns the state or raises
:class:`Refused` naming the first field (and session) that is not what this
build writes: a type, a range, an enum member, an address, a length. The
blob is at most :data:`MAX_BLOB` bytes and :data:`MAX_SESSIONS` sessions.

Secrets are not at rest: an authenticated session's configuration carries
its key's type and ID, never the secret; the successor takes the secret from
its own configuration (:func:`restore`). The last packet a session accepted
is kept only when it has no authentication section (a simple password
travels in clear; the fast path never uses such a packet anyway).

A fingerprint of the field names names the format: a successor whose fields
differ starts fresh rather than misread the state. Formats 1 and 2 (pickle)
are no longer read: a successor that finds one says so and starts fresh.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import ipaddress
import json
import logging
import operator
import os
import socket
import struct
import time
import zlib
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, NamedTuple

from ..core.clock import now_us
from ..core.handoff import DPLANE_SESSIONS
from ..core.host import Entry, Host
from ..core.netio import adoptable
from ..fastpath.clock import Clock
from ..fastpath.observer import Offload, index_of
from ..fastpath.slots import Slots
from ..session import AuthConfig, Session, SessionConfig
from ..wire.control import AuthType, ControlPacket, Diag, Flag, State
from . import touched
from .catchup import Catchup, carried
from .session_sockets import Passed

log = logging.getLogger("xdp_bfd")

# 3: data only (JSON of lists behind a binary header). 1 and 2 were pickles and are refused.
FORMAT_VERSION = 3
MAGIC = b"XBFS"
_HEADER = struct.Struct("!4sHI")  # magic, version, length of the JSON text that follows
# Bounds: the pinned map holds 4 MiB (the header's chunk size times its chunk count, abi.py)
# and the fast path 4096 sessions (its session limit); a session takes about 450 bytes.
MAX_BLOB = 4 << 20
MAX_SESSIONS = 4096
# A decoding successor looks whether the old engine is gone every this many sessions (parse).
LOOK_EVERY = 64
MAX_RAW = 255  # a control packet's Length is one byte: what the fast path can compare
MAX_DROP_REASONS = 64
MAX_NAME = 64  # a drop reason's length

_ENTRY_FIELDS = (
    "origin",
    "user_tx_packets",
    "user_tx_bytes",
    "rx_bytes",
    "slot",
    "offloaded",
    "epoch",
    "detect_armed",
    "last_detection_us",
    "last_detection_overshoot_us",
)
_entry_values = operator.attrgetter(*_ENTRY_FIELDS)
# The configuration as saved: SessionConfig's fields in order, ``auth`` as [type, key ID].
_CONFIG_FIELDS = tuple(f.name for f in fields(SessionConfig))
# _last_content: the packet we last sent minus P, F and auth (it never carries one).
_PACKET_FIELDS = tuple(f.name for f in fields(ControlPacket) if f.name != "auth")
_packet_values = operator.attrgetter(*_PACKET_FIELDS)
# The dataplane's bookkeeping of one session (dplane/resume.py handover_doc).
_DP_REQUIRED = ("min_echo_tx_us", "cbit")
_DP_KEYS = (*_DP_REQUIRED, "held_until_us", "lid", "reported", "told", "state")
_ORIGINS = ("cli", "file", "dplane")
_AUTH_BIT = int(Flag.AUTH)


@functools.cache
def fingerprint(version: int = FORMAT_VERSION) -> str:
    """Changes whenever the saved fields change, so an incompatible successor starts fresh."""
    names = list(Session.STATE_FIELDS)
    names += [f.name for f in fields(SessionConfig)] + list(_ENTRY_FIELDS) + [str(version)]
    if version >= 3:
        names += [*_PACKET_FIELDS, *_DP_KEYS]
    return hashlib.sha256("\0".join(names).encode()).hexdigest()[:16]


# --- encoding (the old engine, on its way out) ---------------------------------------


def _bookkeeping(host: Host) -> dict[int, Any]:
    """The dataplane's part, by discriminator (empty without a dataplane)."""
    return host.handoff.section(DPLANE_SESSIONS) or {}


# A configuration changes rarely and its record never: kept by identity (the
# object itself held, so its id is not reused) and warmed by rehearse().
_config_records: dict[int, tuple[SessionConfig, list[Any]]] = {}


def _config_record(c: SessionConfig) -> list[Any]:
    hit = _config_records.get(id(c))
    if hit is not None and hit[0] is c:
        return hit[1]
    auth = None if c.auth is None else [int(c.auth.type), c.auth.key_id]  # never the secret
    record = [
        None if c.local is None else c.local.packed.hex(),
        c.peer.packed.hex(),
        c.interface,
        c.multihop,
        c.min_tx_us,
        c.min_rx_us,
        c.detect_mult,
        c.echo_us,
        c.passive,
        c.minimum_ttl,
        c.shutdown,
        c.demand,
        auth,
        c.echo_tx_us,
    ]
    if len(_config_records) >= 2 * MAX_SESSIONS:
        _config_records.clear()
    _config_records[id(c)] = (c, record)
    return record


_LAST_CONTENT = Session.STATE_FIELDS.index("_last_content")


def _session_values(s: Session) -> list[Any]:
    values = list(s.export())
    content = values[_LAST_CONTENT]
    if content is not None:
        values[_LAST_CONTENT] = list(_packet_values(content))
    return values


def _raw(entry: Entry) -> str:
    raw = entry.last_rx_raw
    if entry.session.config.auth is not None or (len(raw) > 1 and raw[1] & _AUTH_BIT):
        # A simple password travels in clear: the state holds no authenticated packet, so the
        # successor's fast path accepts repeats again once the successor has verified one itself.
        return ""
    return raw[:MAX_RAW].hex()


def _record(entry: Entry, dp: Any) -> list[Any]:
    """One session's part of the state (format 3: values in field order)."""
    return [
        _entry_values(entry),
        entry.drops,
        _raw(entry),
        entry.tx.sport,
        _config_record(entry.session.config),
        _session_values(entry.session),
        dp,
    ]


def _dump(obj: Any) -> bytes:
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    return _HEADER.pack(MAGIC, FORMAT_VERSION, len(text)) + text


class _Encoded(NamedTuple):
    """A session's encoded record and everything it was made from (each immutable, or a copy)."""

    session: Session  # by identity: a session made again under the same discriminator is another
    generation: int  # Session.generation when ``state`` was taken
    caller: tuple[Any, ...]  # Session.CALLER_FIELDS, which the generation does not count
    state: tuple[Any, ...]  # Session.export(): scalars, enums, tuples, a frozen packet
    entry: tuple[Any, ...]
    drops: dict[str, int]
    raw: bytes
    sport: int
    config: SessionConfig  # by identity, as _config_record keeps it
    dp: Any  # built afresh by the dataplane for each encoding
    text: bytes


# Each session's record as JSON, by discriminator. Encoding a record is three
# quarters of the old engine's work at a takeover's request (docs/benchmarks.md,
# "A takeover's exit"); the warm-up (rehearse) leaves every record here, and the
# request encodes again only the sessions whose inputs changed since. The
# machine's forty values are compared only when its generation moved: reading
# them touched more memory than anything else the request does.
_kept: dict[int, _Encoded] = {}
_fresh = [0]  # records encoded afresh by the last encode()
_compared = [0]  # records whose machine state the last encode() compared (its generation moved)


def encoded_afresh() -> int:
    """How many sessions the last :func:`encode` had to encode again (the rest were kept)."""
    return _fresh[0]


def compared() -> int:
    """How many sessions' state the last :func:`encode` compared value by value (the others' had
    not moved since they were encoded)."""
    return _compared[0]


_caller_values = operator.attrgetter(*Session.CALLER_FIELDS)


def _record_text(discr: int, entry: Entry, dp: Any, kept: dict[int, _Encoded]) -> bytes:
    s = entry.session
    gen, caller = s.generation, _caller_values(s)
    ev, raw, sport = _entry_values(entry), entry.last_rx_raw, entry.tx.sport
    hit = _kept.get(discr)
    if (
        hit is not None
        and hit.session is s
        and hit.caller == caller
        and hit.config is s.config
        and hit.raw == raw
        and hit.sport == sport
        and hit.entry == ev
        and hit.drops == entry.drops
        and hit.dp == dp
    ):
        if hit.generation == gen:
            kept[discr] = hit
            return hit.text
        _compared[0] += 1
        state = s.export()
        if hit.state == state:
            kept[discr] = hit._replace(generation=gen)
            return hit.text
    else:
        state = s.export()
    _fresh[0] += 1
    text = json.dumps(_record(entry, dp), separators=(",", ":"), allow_nan=False).encode()
    kept[discr] = _Encoded(s, gen, caller, state, ev, dict(entry.drops), raw, sport, s.config, dp, text)
    return text


class _Whole(NamedTuple):
    """The records of every session as an encoding left them, in the table's order.

    Trusted by the next :func:`encode` only while the table holds the very same
    entries in the same order, each watched (:mod:`.touched`) since its record
    was made: then a session no note names is as its record says.
    """

    keys: list[int]
    entries: list[Entry]
    texts: list[bytes]
    dp: dict[int, Any]  # the dataplane's part the records were made with
    index: dict[int, int]  # discriminator -> position
    framed: tuple[int, bytes] | None = None  # (nslots, the whole state) once framed


_kept_whole: list[_Whole | None] = [None]
_read = [0]  # sessions the last encode() read (the rest it took as the warm-up left them)


def read() -> int:
    """How many sessions the last :func:`encode` read; the others no note named since the warm-up."""
    return _read[0]


def _same_table(host: Host, w: _Whole) -> bool:
    # Both in C: no Python frame per session (the point of the whole).
    return list(host.sessions) == w.keys and all(map(operator.is_, host.sessions.values(), w.entries))


def encode(host: Host, nslots: int) -> bytes:
    """The state of every session of ``host`` (ValueError beyond the format's bounds).

    The same bytes as one ``json.dumps`` of the whole document. After a
    warm-up (:func:`rehearse`) only the sessions a note names (:mod:`.touched`)
    are read, each compared with its kept record and encoded again if it
    differs; without one (or when the table or the dataplane's part changed
    since) every session is, its record kept encoded and used again when
    nothing it was made from has changed.
    """
    if len(host.sessions) > MAX_SESSIONS:
        raise ValueError(f"{len(host.sessions)} sessions, the state holds at most {MAX_SESSIONS}")
    dp = _bookkeeping(host)
    _fresh[0] = _compared[0] = 0
    noted = touched.taken()
    w = _kept_whole[0]
    if w is not None and _same_table(host, w) and dp == w.dp:
        return _encode_noted(w, noted | touched.blind(), dp, nslots)
    _kept_whole[0] = None
    kept: dict[int, _Encoded] = {}
    records = [_record_text(discr, entry, dp.get(discr), kept) for discr, entry in host.sessions.items()]
    _read[0] = len(records)
    _kept.clear()  # sessions gone since are forgotten
    _kept.update(kept)
    return _framed(records, nslots)


def _encode_noted(w: _Whole, noted: set[int], dp: dict[int, Any], nslots: int) -> bytes:
    texts = w.texts
    read = 0
    for discr in noted:
        i = w.index.get(discr)
        if i is None:  # a note of an entry the table no longer holds
            continue
        read += 1
        text = _record_text(discr, w.entries[i], dp.get(discr), _kept)
        if text is not texts[i]:
            if texts is w.texts:
                texts = list(texts)
            texts[i] = text
    _read[0] = read
    if texts is w.texts and w.framed is not None and w.framed[0] == nslots:
        return w.framed[1]
    blob = _framed(texts, nslots)
    _kept_whole[0] = w._replace(texts=texts, framed=(nslots, blob))
    return blob


def _framed(records: list[bytes], nslots: int) -> bytes:
    """The whole state around the records (ValueError beyond MAX_BLOB).

    Copied once: each copy of half a megabyte is a fresh mapping whose pages
    fault in one by one, a third of the request's encoding at 1024 sessions.
    """
    head = json.dumps([fingerprint(), os.getpid(), nslots], separators=(",", ":")).encode()[:-1] + b",["
    length = len(head) + sum(map(len, records)) + max(len(records) - 1, 0) + len(b"]]")
    if _HEADER.size + length > MAX_BLOB:
        raise ValueError(f"a state of {_HEADER.size + length} bytes, the format holds at most {MAX_BLOB}")
    prefix = _HEADER.pack(MAGIC, FORMAT_VERSION, length) + head
    if not records:
        return prefix + b"]]"
    parts = list(records)
    parts[0] = prefix + parts[0]
    parts[-1] += b"]]"
    return b",".join(parts)


def rehearse(host: Host, per_step: int) -> Generator[None, None, None]:
    """Encode the sessions ``per_step`` at a time and keep them: what :func:`encode` then reuses.

    Each session is watched (:mod:`.touched`) before its record is made, so
    that the request reads only those touched since. When the table is the
    same at the end, every session watched and encoded, the records are kept
    whole in its order for the request (and :func:`rehearsed`).
    """
    _kept_whole[0] = None  # until this warm-up is through: a stale whole must not outlive the notes forgotten
    touched.forget()
    dp = _bookkeeping(host)
    entries = list(host.sessions.items())
    kept: dict[int, _Encoded] = {}
    watched = True
    for i in range(0, len(entries), per_step):
        for discr, entry in entries[i : i + per_step]:
            watched = touched.watch(discr, entry) and watched
            _record_text(discr, entry, dp.get(discr), kept)
        yield
    _kept.update(kept)
    keys = [discr for discr, _ in entries]
    texts = [kept[d].text for d in keys]
    w = _Whole(keys, [e for _, e in entries], texts, dp, {d: i for i, d in enumerate(keys)})
    if watched and _same_table(host, w):
        _kept_whole[0] = w


def rehearsed(host: Host, nslots: int) -> bytes:
    """The state as the warm-up left it encoded, for a successor to decode before its request.

    Each session's kept record joined as it is, without the comparison
    :func:`encode` makes (the request's encoding makes it); a session the
    warm-up did not reach is left out. Only a decoding aid: the successor
    restores what the request's state says (:func:`parse`'s ``known``).
    """
    w = _kept_whole[0]
    if w is not None and _same_table(host, w):
        blob = _framed(w.texts, nslots)
        _kept_whole[0] = w._replace(framed=(nslots, blob))
        return blob
    texts = [hit.text for discr in host.sessions if (hit := _kept.get(discr)) is not None]
    return _framed(texts, nslots)


# --- decoding (the successor) ---------------------------------------------------------


class Refused(Exception):
    """The blob is not a state this build reads; the message says why (one log line)."""


@dataclass(frozen=True)
class Record:
    """One handed-over session, every value checked."""

    entry: dict[str, Any]  # _ENTRY_FIELDS by name
    drops: dict[str, int]
    last_rx_raw: bytes
    sport: int
    config: SessionConfig  # without auth: see ``auth``
    auth: tuple[AuthType, int] | None  # the key's type and ID; the secret is the successor's
    state: dict[str, Any]  # Session.STATE_FIELDS by name
    dp: dict[str, Any] | None


@dataclass(frozen=True)
class Handed:
    """The state a predecessor handed over."""

    pid: int
    nslots: int
    sessions: list[Record]


Check = Callable[[Any], Any]  # the value as restored, or raise _Bad(what was expected)


class _Bad(Exception):
    pass


# Plain integers and booleans, the bulk of a session, are checked inline by _values
# (a call per value would double the decoding time): their checks say what they are.
_INT, _BOOL, _OTHER = 0, 1, 2


def _ints(lo: int, hi: int) -> Check:
    def check(v: Any) -> Any:
        if type(v) is not int or not lo <= v <= hi:
            raise _Bad(f"expected an integer {lo}..{hi}")
        return v

    check.plan = (_INT, lo, hi, False)  # type: ignore[attr-defined]
    return check


def _optional(inner: Check) -> Check:
    def check(v: Any) -> Any:
        return None if v is None else inner(v)

    kind, lo, hi, _ = getattr(inner, "plan", (_OTHER, 0, 0, False))
    check.plan = (kind, lo, hi, True)  # type: ignore[attr-defined]
    return check


def _boolean(v: Any) -> Any:
    if type(v) is not bool:
        raise _Bad("expected true or false")
    return v


_boolean.plan = (_BOOL, 0, 0, False)  # type: ignore[attr-defined]


class Plan:
    """How the fields of one list are checked: plain integers and booleans all at once, in C — the
    types of the whole list against those seen valid before, the integers' ranges by one
    ``struct.pack`` — and the rest one by one by their checks. (A call per value doubled the time.)"""

    def __init__(self, names: Sequence[str], checks: Sequence[Check]) -> None:
        self.names, self.checks = tuple(names), tuple(checks)
        self.plain: list[tuple[int, int, str, bool]] = []  # index, kind, struct code, optional
        self.others: list[tuple[int, str, Check]] = []
        for i, (name, c) in enumerate(zip(names, checks, strict=True)):
            kind, lo, hi, optional = getattr(c, "plan", (_OTHER, 0, 0, False))
            code = _CODES.get((lo, hi), "") if kind == _INT else "?"
            if kind == _OTHER or not code:
                self.others.append((i, name, c))
            else:
                self.plain.append((i, kind, code, optional))
        # The types of a valid list, as tuple(map(type, values)) -> what packs its integers.
        self.shapes: dict[tuple[type, ...], tuple[Callable[[list[Any]], Sequence[Any]], str]] = {}

    def plain_ok(self, values: list[Any]) -> bool:
        shape = tuple(map(type, values))
        known = self.shapes.get(shape)
        if known is None:
            known = self._learn(shape)
            if known is None:
                return False
        get, fmt = known
        try:
            struct.pack(fmt, *get(values))
        except struct.error:
            return False
        return True

    def _learn(self, shape: tuple[type, ...]) -> tuple[Callable[[list[Any]], Sequence[Any]], str] | None:
        ints, fmt = [], "="
        for i, kind, code, optional in self.plain:
            t = shape[i]
            if optional and t is _NONE:
                continue
            if t is not (int if kind == _INT else bool):
                return None
            if kind == _INT:
                ints.append(i)
                fmt += code
        if len(self.shapes) >= 256:  # a shape per combination of absent values: few
            self.shapes.clear()
        self.shapes[shape] = known = (_getter(ints), fmt)
        return known


_NONE = type(None)
_CODES = {(0, 255): "B", (0, 65535): "H", (0, (1 << 32) - 1): "I", (0, (1 << 64) - 1): "Q"}
_CODES[-(1 << 63), (1 << 63) - 1] = "q"


def _getter(idx: list[int]) -> Callable[[list[Any]], Sequence[Any]]:
    if not idx:
        return lambda _values: ()
    if len(idx) == 1:
        i = idx[0]
        return lambda values: (values[i],)
    return operator.itemgetter(*idx)


def _plan(names: Sequence[str], checks: Sequence[Check]) -> Plan:
    return Plan(names, checks)


def _member(enum: Any) -> Check:
    members = {int(m): m for m in enum}

    def check(v: Any) -> Any:
        m = members.get(v) if type(v) is int else None
        if m is None:
            raise _Bad(f"expected a {enum.__name__} ({min(members)}..{max(members)})")
        return m

    return check


def _diag_code(v: Any) -> Any:
    """A peer's Diag: a member, or the unassigned 5-bit code the codec keeps as an int."""
    if type(v) is not int or not 0 <= v <= 31:
        raise _Bad("expected a Diag code 0..31")
    return Diag(v) if v in Diag._value2member_map_ else v


def _text(max_len: int) -> Check:
    def check(v: Any) -> Any:
        if type(v) is not str or not 0 < len(v) <= max_len:
            raise _Bad(f"expected a string of 1..{max_len} characters")
        return v

    return check


def _one_of(choices: Sequence[str]) -> Check:
    def check(v: Any) -> Any:
        if v not in choices or type(v) is not str:
            raise _Bad(f"expected one of {', '.join(choices)}")
        return v

    return check


def _list(v: Any, n: int) -> list[Any]:
    if type(v) is not list or len(v) != n:
        raise _Bad(f"expected a list of {n}")
    return v


def _checked(plan: Plan, v: Any) -> dict[str, Any]:
    """``v``, a list in the plan's order, checked value by value: by name (_Bad names the field)."""
    values = _list(v, len(plan.names))
    if not plan.plain_ok(values):
        _first_bad(plan, values)
    out = dict(zip(plan.names, values, strict=True))
    for i, name, check in plan.others:
        try:
            out[name] = check(values[i])
        except _Bad as e:
            raise _field(name, e, values[i]) from None
    return out


def _field(name: str, e: _Bad, value: Any) -> _Bad:
    """``e`` as the problem of field ``name`` (".name: what, got value"; nested: ".name.inner: ...")."""
    text = str(e)
    return _Bad(f".{name}{text}" if text.startswith(".") else f".{name}: {text}, got {_show(value)}")


def _first_bad(plan: Plan, values: list[Any]) -> None:
    """Value by value, the first that is not what its field holds (raises _Bad naming it)."""
    for name, check, value in zip(plan.names, plan.checks, values, strict=True):
        try:
            check(value)
        except _Bad as e:
            raise _field(name, e, value) from None
    raise _Bad("a value out of range")  # not reached: plain_ok failed on one of them


def _values(plan: Plan, v: Any, where: str) -> dict[str, Any]:
    try:
        return _checked(plan, v)
    except _Bad as e:
        raise Refused(f"{where}{e}" if str(e).startswith(".") else f"{where}: {e}") from None


def _show(v: Any) -> str:
    """A decoded value for a log line: scalars as JSON, at most 40 characters; containers by size."""
    if isinstance(v, (list, dict)):
        return f"a {'list' if isinstance(v, list) else 'mapping'} of {len(v)}"
    text = json.dumps(v)
    return text if len(text) <= 40 else text[:37] + "..."


_U8, _U16, _U32 = _ints(0, 255), _ints(0, 65535), _ints(0, (1 << 32) - 1)
_U64 = _ints(0, (1 << 64) - 1)
_TIME = _ints(-(1 << 63), (1 << 63) - 1)  # monotonic microseconds (or a difference of two)
_DISCR = _ints(1, (1 << 32) - 1)

_PACKET_CHECKS: dict[str, Check] = {
    "state": _member(State),
    "my_discr": _U32,
    "your_discr": _U32,
    "diag": _member(Diag),
    "detect_mult": _U8,
    "desired_min_tx_us": _U32,
    "required_min_rx_us": _U32,
    "required_min_echo_rx_us": _U32,
    "poll": _boolean,
    "final": _boolean,
    "cpi": _boolean,
    "demand": _boolean,
    "multipoint": _boolean,
    "version": _ints(0, 7),
}


_PACKET_PLAN = _plan(_PACKET_FIELDS, [_PACKET_CHECKS[name] for name in _PACKET_FIELDS])


def _packet(v: Any) -> Any:
    return ControlPacket(**_checked(_PACKET_PLAN, v))


def _sched_key(v: Any) -> Any:
    tx, one = _list(v, 2)
    return (_U32(tx), _boolean(one))


_STATE_CHECKS: dict[str, Check] = {
    "_adv_rx_us": _U32,
    "_adv_tx_us": _U32,
    "_eff_rx_us": _U32,
    "_eff_tx_us": _U32,
    "_f_clear_since_poll": _boolean,
    "_flaps": _U64,
    "_last_content": _optional(_packet),
    "_last_rx_us": _optional(_TIME),
    "_last_sent_demand": _boolean,
    "_last_tx_us": _optional(_TIME),
    "_local_diag": _member(Diag),
    "_local_discr": _DISCR,
    "_next_tx_us": _optional(_TIME),
    "_poll_active": _boolean,
    "_poll_ended_us": _optional(_TIME),
    "_poll_first_tx_us": _optional(_TIME),
    "_poll_queued": _boolean,
    "_rcv_seq": _U32,
    "_remote_demand": _boolean,
    "_remote_desired_tx_us": _U32,
    "_remote_detect_mult": _U8,
    "_remote_diag": _diag_code,
    "_remote_discr": _U32,
    "_remote_min_echo_rx_us": _U32,
    "_remote_min_rx_us": _U32,
    "_remote_state": _member(State),
    "_rx_packets": _U64,
    "_sched_key": _optional(_sched_key),
    "_seq_known": _boolean,
    "_state": _member(State),
    "_transition_pending": _boolean,
    "_tx_packets": _U64,
    "_up_since_us": _TIME,
    "_xmit_seq": _U32,
    "demand_poll_us": _U64,
    "detection_external": _boolean,
    "periodic_tx_external": _boolean,
}
# A field without a check fails here, at import (and the unit tests), not at a takeover.
_STATE_PLAN = _plan(Session.STATE_FIELDS, [_STATE_CHECKS[name] for name in Session.STATE_FIELDS])

_ENTRY_PLAN = _plan(
    _ENTRY_FIELDS,
    (
        _one_of(_ORIGINS),
        _U64,
        _U64,
        _U64,
        _ints(0, MAX_SESSIONS - 1),  # every session has one under --kernel-tx; below nslots: see _whole
        _boolean,
        _U32,
        _boolean,
        _optional(_TIME),
        _optional(_TIME),
    ),
)


def _address(v: Any) -> Any:
    """An address, as its packed bytes in hex (parsed in C: ten times faster than its text)."""
    if type(v) is not str or len(v) not in (8, 32):
        raise _Bad("expected an IPv4 or IPv6 address (8 or 32 hex digits)")
    try:
        packed = bytes.fromhex(v)
    except ValueError:
        raise _Bad("expected an IPv4 or IPv6 address (8 or 32 hex digits)") from None
    if len(packed) == 4:
        return ipaddress.IPv4Address(packed)
    if len(packed) == 16:
        return ipaddress.IPv6Address(packed)
    raise _Bad("expected an IPv4 or IPv6 address (8 or 32 hex digits)")


_AUTH_TYPE = _member(AuthType)


def _auth_ref(v: Any) -> Any:
    kind, key_id = _list(v, 2)
    kind = _AUTH_TYPE(kind)
    if kind == AuthType.NONE:
        raise _Bad("AuthType.NONE is expressed as null")
    return (kind, _U8(key_id))


# SessionConfig's fields: types here, ranges and their relations by SessionConfig itself.
_CONFIG_PLAN = _plan(
    _CONFIG_FIELDS,
    (
        _optional(_address),
        _address,
        _optional(_text(15)),  # an interface name (IFNAMSIZ less the NUL)
        _boolean,
        _TIME,
        _TIME,
        _TIME,
        _TIME,
        _boolean,
        _TIME,
        _boolean,
        _boolean,
        _optional(_auth_ref),
        _TIME,
    ),
)

_DP_CHECKS: dict[str, Check] = {
    "min_echo_tx_us": _U32,
    "cbit": _boolean,
    "held_until_us": _optional(_TIME),
    "lid": _optional(_U32),
    "reported": _boolean,
    "told": _optional(lambda v: [_U32(x) for x in _list(v, 4)]),
    "state": _optional(_member(State)),
}


def _config(v: Any, where: str) -> tuple[SessionConfig, tuple[AuthType, int] | None]:
    values = _values(_CONFIG_PLAN, v, where)
    auth = values.pop("auth")
    try:
        return SessionConfig(**values), auth
    except ValueError as e:
        raise Refused(f"{where}: {e}") from None


def _drops(v: Any, where: str) -> dict[str, int]:
    if type(v) is not dict or len(v) > MAX_DROP_REASONS:
        raise Refused(f"{where}: expected a mapping of at most {MAX_DROP_REASONS} drop reasons")
    for name, count in v.items():
        if len(name) > MAX_NAME or type(count) is not int or not 0 <= count < 1 << 64:
            raise Refused(f"{where}: {_show(name)}: expected a count, got {_show(count)}")
    return v


def _raw_bytes(v: Any, where: str) -> bytes:
    if type(v) is not str or len(v) > 2 * MAX_RAW:
        raise Refused(f"{where}: expected the hex of at most {MAX_RAW} bytes")
    try:
        return bytes.fromhex(v)
    except ValueError:
        raise Refused(f"{where}: expected the hex of at most {MAX_RAW} bytes") from None


def _dp(v: Any, where: str) -> dict[str, Any] | None:
    if v is None:
        return None
    if type(v) is not dict or not set(_DP_REQUIRED) <= v.keys() or not v.keys() <= set(_DP_KEYS):
        raise Refused(f"{where}: expected a mapping of {', '.join(_DP_KEYS)}")
    out = {}
    for name, value in v.items():
        try:
            out[name] = _DP_CHECKS[name](value)
        except _Bad as e:
            raise Refused(f"{where}{_field(name, e, value)}") from None
    return out


def _session(v: Any, i: int) -> Record:
    where = f"session {i}"
    try:
        ev, drops, raw, sport, config, sv, dp = _list(v, 7)
    except _Bad as e:
        raise Refused(f"{where}: {e}") from None
    entry = _values(_ENTRY_PLAN, ev, where)
    if type(sport) is not int or not 1 <= sport <= 65535:
        raise Refused(f"{where}.sport: expected a port 1..65535, got {_show(sport)}")
    cfg, auth = _config(config, f"{where}.config")
    return Record(
        entry,
        _drops(drops, f"{where}.drops"),
        _raw_bytes(raw, f"{where}.last_rx_raw"),
        sport,
        cfg,
        auth,
        _values(_STATE_PLAN, sv, where),
        _dp(dp, f"{where}.dplane"),
    )


def _pickled(blob: bytes) -> bool:
    """Whether ``blob`` is what formats 1 and 2 were: a compressed pickle (two bytes inflated, no more)."""
    try:
        return zlib.decompressobj().decompress(blob, 2)[:1] == b"\x80"  # PROTO, pickle's first opcode
    except zlib.error:
        return False


def _whole(sessions: list[Record], nslots: int) -> None:
    """What holds across sessions: unique discriminators, slots and session keys; slots in range."""
    discrs: set[int] = set()
    slots: set[int] = set()
    keys: set[Any] = set()
    for i, r in enumerate(sessions):
        discr, slot, key = r.state["_local_discr"], r.entry["slot"], r.config.key()
        if discr in discrs or key in keys or slot in slots:
            raise Refused(f"session {i}: its discriminator, slot or key is another session's")
        if slot >= nslots:
            raise Refused(f"session {i}.slot: {slot} is not below nslots {nslots}")
        discrs.add(discr)
        keys.add(key)
        slots.add(slot)


# A session's record as JSON gave it, and the Record it was checked into (an earlier decoding's).
Known = Sequence[tuple[Any, Record]]
_afresh = [0]  # records the last parse() checked afresh (the rest were known)


def decoded_afresh() -> int:
    """How many records the last :func:`parse` checked afresh, the others being known equal."""
    return _afresh[0]


def parse(
    blob: bytes,
    *,
    max_sessions: int = MAX_SESSIONS,
    look: Callable[[], None] | None = None,
    known: Known | None = None,
    keep: list[tuple[Any, Record]] | None = None,
    same: tuple[bytes, Handed] | None = None,
) -> Handed:
    """The state in ``blob``; :class:`Refused` (why) for anything but a whole, current, valid one.

    ``look`` is called now and then (after the JSON, every :data:`LOOK_EVERY`
    sessions): a successor decoding while the old engine exits notes there
    when it is gone (handover.request).

    ``known``: the records of an earlier decoding (the old engine's warm-up
    state, decoded before the request), by position. A record whose value, as
    JSON gives it, equals the known one at its position is that Record, not
    checked again: the checks are a function of the value. (Python's equality
    takes 1 for true: such a record is restored as the checked one, a state
    whoever could write the map could have written as it is.) The checks of
    the whole (slots, discriminators, keys) are made every time. ``keep``
    receives each session's (value, Record), for a later decoding's ``known``.

    ``same``: an earlier decoding (its bytes, its result). A blob byte for byte
    the same is that result: the decoding is a function of the bytes. A
    request after which no session changed writes the warm-up's very bytes.
    """
    if same is not None and blob == same[0]:
        _afresh[0] = 0
        return same[1]
    if len(blob) > MAX_BLOB:
        raise Refused(f"{len(blob)} bytes, more than the {MAX_BLOB} a state may have")
    if blob[:4] != MAGIC:
        if _pickled(blob):
            raise Refused(
                "it is in a format this build no longer reads (format 1 or 2, a pickle: "
                "code-carrying formats are refused)"
            )
        raise Refused("it is not an xdp-bfd state (no header)")
    if len(blob) < _HEADER.size:
        raise Refused(f"a {len(blob)}-byte state is shorter than its header")
    _, version, length = _HEADER.unpack_from(blob)
    if version != FORMAT_VERSION:
        raise Refused(f"it is format {version}, this build reads format {FORMAT_VERSION}")
    if _HEADER.size + length != len(blob):
        raise Refused(f"its header says {length} bytes, {len(blob) - _HEADER.size} follow (truncated?)")
    try:
        doc = json.loads(blob[_HEADER.size :], parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise Refused(f"it is not valid JSON ({type(e).__name__})") from None
    try:
        fp, pid, nslots, sessions = _list(doc, 4)
    except _Bad as e:
        raise Refused(f"the top level: {e}") from None
    if fp != fingerprint():
        raise Refused("it comes from an engine with other session fields")
    if type(pid) is not int or not 1 <= pid < 1 << 22:
        raise Refused(f"pid: expected a process id, got {_show(pid)}")
    if type(nslots) is not int or not 0 <= nslots <= max_sessions:
        raise Refused(f"nslots: expected 0..{max_sessions}, got {_show(nslots)}")
    if type(sessions) is not list or len(sessions) > max_sessions:
        raise Refused(f"sessions: expected a list of at most {max_sessions}")
    one = _session if not known else functools.partial(_known_or_checked, known)
    if look is None:
        records = [one(v, i) for i, v in enumerate(sessions)]
    else:
        look()
        records = []
        for i0 in range(0, len(sessions), LOOK_EVERY):
            records += [one(v, i) for i, v in enumerate(sessions[i0 : i0 + LOOK_EVERY], i0)]
            look()
    reused = {id(r) for _, r in known or ()}
    _afresh[0] = sum(1 for r in records if id(r) not in reused)
    _whole(records, nslots)
    if keep is not None:
        keep.extend(zip(sessions, records, strict=True))
    return Handed(pid, nslots, records)


def _known_or_checked(known: Known, v: Any, i: int) -> Record:
    if i < len(known):
        value, record = known[i]
        if value == v:
            return record
    return _session(v, i)


def configured_as(known: Known, configs: Iterable[SessionConfig]) -> list[tuple[Any, Record]]:
    """``known`` with each record's configuration replaced by the equal one of ``configs``, that object.

    Made before the request, on the warm-up's records: a session restored from
    one then holds this engine's own configuration object, which the
    comparison with the arguments after the restore (``apply_session_list``)
    passes by identity instead of hashing and comparing it, a cost of the
    request -> serving path otherwise (docs/benchmarks.md). Authenticated
    sessions keep theirs: the secret joins the configuration at the restore.
    """
    mine = {c: c for c in configs if c.auth is None}
    return [
        (v, r if r.auth is not None or (c := mine.get(r.config)) is None else replace(r, config=c))
        for v, r in known
    ]


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number this format holds")


def decode(
    blob: bytes,
    *,
    max_sessions: int = MAX_SESSIONS,
    look: Callable[[], None] | None = None,
    known: Known | None = None,
    same: tuple[bytes, Handed] | None = None,
) -> Handed | None:
    """The state, or None (and why, one line) when this build cannot use it: never anything else."""
    try:
        return parse(blob, max_sessions=max_sessions, look=look, known=known, same=same)
    except Refused as e:
        log.warning("pin: the handed-over state is refused: %s; starting fresh", e)
        return None


# --- restoring -------------------------------------------------------------------------


def _with_secret(r: Record, secrets: dict[Any, AuthConfig]) -> SessionConfig | None:
    """The session's configuration with its key from ours; None when we have not that key."""
    if r.auth is None:
        return r.config
    auth = secrets.get(r.config.key())
    if auth is None or (auth.type, auth.key_id) != r.auth:
        return None
    return replace(r.config, auth=auth)


def _forget(offload: Offload, r: Record) -> None:
    """The kernel forgets the slot of a session not restored (the configuration brings it up afresh)."""
    session = Session(r.config, r.state["_local_discr"], now_us=0)
    offload.removed(Entry(session, None, r.entry["origin"], slot=r.entry["slot"]))


def _secrets(configs: Iterable[SessionConfig]) -> dict[Any, AuthConfig]:
    return {c.key(): c.auth for c in configs if c.auth is not None}


# A session made ahead of the request: the warm-up's record, the socket checked against it, the entry.
Ahead = dict[int, tuple[Record, socket.socket, Entry]]  # by discriminator


def build_ahead(
    host: Host,
    known: Known,
    configs: Iterable[SessionConfig],
    passed: Passed | None,
    slots: Slots | None = None,
) -> Ahead:
    """Before the request: the warm-up's sessions made as the restore would make them (host.restored).

    Only those whose socket the warm-up passed and :func:`check_early` found
    right for the very record: the restore joins such an entry where the
    request's state left the record unchanged (the same Record, ``parse``'s
    ``known``) and the same socket is still the one to keep; any other it
    makes afresh as before, and what is not joined is dropped (its socket
    stays the Passed's, to keep or to close). The object making and the socket
    options were a third of a restore's CPU at 1024 sessions (docs/benchmarks.md).
    ``slots``: each such session's index writes are made too (Slots.prepare).
    """
    out: Ahead = {}
    if passed is None:
        return out
    secrets = _secrets(configs)
    interfaces = _Interfaces()
    for _v, r in known:
        discr = r.state["_local_discr"]
        early = passed.checked.get(discr)
        if early is None or early[2] is not r:
            continue
        config = _with_secret(r, secrets)
        if config is None:
            continue
        try:
            entry = _made(host, r, config, early[1], interfaces.ifindex(r.config.interface))
        except OSError:
            continue  # the restore tries again, and says why
        out[discr] = (r, early[1], entry)
        if slots is not None:
            slots.prepare(r.entry["slot"], **index_of(config, discr))
    return out


def _made(host: Host, r: Record, config: SessionConfig, sock: socket.socket, ifindex: int | None) -> Entry:
    entry = host.restored(config, r.entry["origin"], sport=r.sport, state=r.state, sock=sock, ifindex=ifindex)
    _carry(entry, r)
    return entry


def _carry(entry: Entry, r: Record) -> None:
    """What the record carries beside the session's own state."""
    for name, value in r.entry.items():
        setattr(entry, name, value)
    entry.drops = Counter(r.drops)
    entry.last_rx_raw = r.last_rx_raw


def restore(
    host: Host,
    offload: Offload,
    state: Handed,
    configs: Iterable[SessionConfig] = (),
    *,
    clock: Clock | None = None,
    sockets: Passed | None = None,
    catchup: Catchup | None = None,
    ahead: Ahead | None = None,
) -> list[Entry]:
    """Recreate the handed-over sessions: same discriminators, slots and source ports.

    ``clock`` (the kernel transmit clock) keeps each adopted session's tick
    frame going as the pinned ``tick_cfg`` describes it. ``sockets``: those
    the predecessor passed; a session keeps its own when the kernel says it is
    what this engine would make for it, and gets a new one otherwise.

    ``configs`` is this engine's own configuration: an authenticated session
    takes its secret from there (matched by session key, same key type and
    ID) and is not restored without it.

    ``catchup``: the sessions the kernel carries whole are serviced from the
    loop's turns (pin/catchup.py), not here; without it every session is.

    ``ahead``: sessions :func:`build_ahead` made before the request, joined
    where their record and socket are still the ones to restore.
    """
    secrets = _secrets(configs)
    used = {r.entry["slot"] for r in state.sessions}
    offload.slots.adopt(state.nslots, used)
    kept = _Kept(sockets)
    t0, cpu0 = time.monotonic_ns(), time.thread_time_ns()
    with (
        offload.slots.batched(),  # every adopted session's configuration and indexes, one batch a map
        clock.adopting() if clock is not None else contextlib.nullcontext(),
    ):
        out, later = _adopt(
            host, offload, state, secrets=secrets, kept=kept, clock=clock, catchup=catchup, ahead=ahead or {}
        )
    log.info(
        "pin: adopted %d sessions from engine %d%s%s; in %.1f ms (%.1f ms of CPU)%s",
        len(out),
        state.pid,
        kept.summary(len(out)),
        f"; {kept.joined} made before the request" if ahead is not None else "",
        (time.monotonic_ns() - t0) / 1e6,
        (time.thread_time_ns() - cpu0) / 1e6,
        f"; {later} the kernel carries serviced once the loop runs" if later else "",
    )
    return out


def _adopt(
    host: Host,
    offload: Offload,
    state: Handed,
    *,
    secrets: dict[Any, AuthConfig],
    kept: _Kept,
    clock: Clock | None,
    catchup: Catchup | None,
    ahead: Ahead,
) -> tuple[list[Entry], int]:
    out = []
    bookkeeping: dict[int, Any] = {}
    for r in state.sessions:
        config = _with_secret(r, secrets)
        if config is None:
            kind, key_id = r.auth or (AuthType.NONE, 0)
            log.warning(
                "pin: session %s -> %s is authenticated (%s key %d) and this engine's configuration "
                "has not that key; not restored, it starts afresh",
                r.config.local or "*",
                r.config.peer,
                kind.name,
                key_id,
            )
            _forget(offload, r)
            continue
        sock = kept.socket_for(r)
        made = ahead.get(r.state["_local_discr"])
        if made is not None and made[0] is r and sock is not None and made[1] is sock:
            entry = made[2]
            host.join_restored(entry)
            kept.joined += 1
        else:
            entry = host.restore_session(
                config, r.entry["origin"], sport=r.sport, state=r.state, sock=sock,
                ifindex=kept.ifindex(r.config.interface),
            )  # fmt: skip
            _carry(entry, r)
        if r.dp is not None:
            bookkeeping[entry.session.local_discr] = r.dp
        offload.adopted(entry)
        if clock is not None:
            clock.adopted(entry)
        out.append(entry)
    host.handoff.leave(DPLANE_SESSIONS, bookkeeping)
    # A meticulous key's clock sends the series the predecessor topped up; such a session is
    # serviced when the loop is about to run (Started.resume_series), its silence judged from then.
    held = clock.prepaid if clock is not None else {}
    now = now_us()
    later = []
    for entry in out:
        entry.session.resume_reading(now)  # before a detection timer is judged (host.service)
        if entry.slot in held:
            continue
        if catchup is not None and carried(entry, offload, clock):
            later.append(entry)
        else:
            host.service(entry, now)
    if catchup is not None:
        catchup.defer(later)
    return out, len(later)


def _socket_of(fd: int, r: Record) -> tuple[socket.socket | None, str | None]:
    """The passed descriptor as a socket, and why it is not the one record ``r``'s session would make."""
    family = socket.AF_INET6 if r.config.peer.version == 6 else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_DGRAM, 0, fileno=fd)
    except OSError as e:
        os.close(fd)
        return None, f"not a socket ({e.strerror or e})"
    return sock, _unadoptable(sock, r)


def _unadoptable(sock: socket.socket, r: Record) -> str | None:
    c = r.config
    return adoptable(sock, local=c.local, peer=c.peer, interface=c.interface, multihop=c.multihop,
                     sport=r.sport)  # fmt: skip


def check_early(passed: Passed, known: Known) -> int:
    """Before the request: each socket the warm-up passed, checked against the warm-up's record of
    its session; how many passed the check.

    The restore then keeps such a socket without asking the kernel again when
    the request's state left the record unchanged (the same Record, ``parse``'s
    ``known``), and checks it against the new record otherwise. A socket the
    check refuses is kept for the restore too, which checks it again and says why.
    """
    good = 0
    for _v, r in known:
        discr = r.state["_local_discr"]
        fd = passed.take(discr, r.sport)
        if fd is None:
            continue
        sock, why = _socket_of(fd, r)
        if sock is None:
            passed.refused += 1  # not a socket (closed): the restore makes the session's afresh
            continue
        passed.checked[discr] = (r.sport, sock, r if why is None else None)
        good += why is None
    return good


class _Interfaces:
    """Interface indexes looked up once per interface for a whole restore."""

    def __init__(self) -> None:
        self._ifindex: dict[str, int] = {}

    def ifindex(self, interface: str | None) -> int | None:
        """Looked up once per interface for the whole restore (None: the interface is gone)."""
        if not interface:
            return 0
        if interface not in self._ifindex:
            try:
                self._ifindex[interface] = socket.if_nametoindex(interface)
            except OSError:
                return None  # the Transmitter looks again, and says why it cannot
        return self._ifindex[interface]


class _Kept(_Interfaces):
    """The restore's view of the passed sockets: each checked against its session, counted."""

    def __init__(self, sockets: Passed | None) -> None:
        super().__init__()
        self.sockets = sockets
        self.kept = 0
        self.joined = 0  # sessions made before the request (build_ahead) and joined as they were
        self.refused: Counter[str] = Counter()

    def socket_for(self, r: Record) -> socket.socket | None:
        if self.sockets is None:
            return None
        discr = r.state["_local_discr"]
        early = self.sockets.checked_for(discr)
        if early is not None:
            sport, sock, against = early
            if against is r and sport == r.sport:
                # Checked before the request against this very record (the request's state
                # left it unchanged). What was checked cannot change once bound, but for the
                # device, which only the old engine holding the socket could set, and does not.
                self.kept += 1
                return sock
            why = _unadoptable(sock, r) if sport == r.sport else f"passed for port {sport}"
        else:
            fd = self.sockets.take(discr, r.sport)
            if fd is None:
                return None
            sock, why = _socket_of(fd, r)
        if why is not None:
            if sock is not None:
                sock.close()
            self.refused[why] += 1
            return None
        self.kept += 1
        return sock

    def summary(self, restored: int) -> str:
        if self.sockets is None:
            return ""
        text = f"; kept {self.kept} of their sockets"
        reasons = [f"{n} {why}" for why, n in self.refused.most_common(3)]
        if self.sockets.refused:
            reasons.append(
                f"{self.sockets.refused} in a malformed message, a duplicate or under another port"
            )
        if reasons:
            text += f", refused {self.refused.total() + self.sockets.refused} ({'; '.join(reasons)})"
        if restored - self.kept:
            text += f", made {restored - self.kept} afresh"
        return text


__all__ = [
    "FORMAT_VERSION",
    "MAX_BLOB",
    "MAX_SESSIONS",
    "Ahead",
    "Handed",
    "Record",
    "Refused",
    "build_ahead",
    "check_early",
    "configured_as",
    "decode",
    "encode",
    "fingerprint",
    "parse",
    "rehearse",
    "restore",
]
