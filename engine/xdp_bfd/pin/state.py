"""The handed-over state: what the old engine writes and the successor restores, field for field.

Per session: the shell's fields (``_ENTRY_FIELDS``), its drop counts, the last
packet it accepted, its source port, its configuration, the state machine
(``Session.export()``, in ``Session.STATE_FIELDS`` order) and the dataplane's
bookkeeping for it. The whole is pickled and compressed: pickle because the
old engine is gone only once this is written, and it encodes much faster
than JSON. The blob lives in a root-only pinned map that only a process
holding CAP_BPF could have written.

A fingerprint of the field names names the format: a successor whose fields
differ starts fresh rather than misread the state. The format changes only
under a new version, which the next build still reads beside the old one
(this one reads format 1 too).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import operator
import os
import pickle
import zlib
from collections import Counter
from collections.abc import Generator
from dataclasses import fields
from typing import Any

from ..core.clock import now_us
from ..core.handoff import DPLANE_SESSIONS
from ..core.host import Entry, Host
from ..fastpath.observer import Offload
from ..session import Session, SessionConfig

log = logging.getLogger("xdp_bfd")

# 2: per session, value tuples in the fingerprint's field order (1 had dicts,
# slower to encode). A successor reads both.
FORMAT_VERSION = 2

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


@functools.cache
def fingerprint(version: int = FORMAT_VERSION) -> str:
    """Changes whenever the saved fields change, so an incompatible successor starts fresh."""
    names = list(Session.STATE_FIELDS)
    names += [f.name for f in fields(SessionConfig)] + list(_ENTRY_FIELDS) + [str(version)]
    return hashlib.sha256("\0".join(names).encode()).hexdigest()[:16]


def _bookkeeping(host: Host) -> dict[int, Any]:
    """The dataplane's part, by discriminator (empty without a dataplane)."""
    return host.handoff.section(DPLANE_SESSIONS) or {}


def _record(entry: Entry, dp: Any) -> tuple:
    """One session's part of the state (format 2: values in field order, taken in C by the getters)."""
    return (
        _entry_values(entry),
        dict(entry.drops),
        entry.last_rx_raw,
        entry.tx.sport,
        entry.session.config,
        entry.session.export(),
        dp,
    )


def _pack(obj: Any) -> bytes:
    return zlib.compress(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), 1)


def encode(host: Host, nslots: int) -> bytes:
    """The state of every session of ``host``, pickled and compressed."""
    dp = _bookkeeping(host)
    return _pack(
        {
            "format": fingerprint(),
            "pid": os.getpid(),
            "nslots": nslots,
            "sessions": [_record(entry, dp.get(discr)) for discr, entry in host.sessions.items()],
        }
    )


def rehearse(host: Host, per_step: int) -> Generator[None, None, None]:
    """Encode the sessions for nothing, ``per_step`` at a time: warms every cache :func:`encode` uses."""
    dp = _bookkeeping(host)
    entries = list(host.sessions.items())
    for i in range(0, len(entries), per_step):
        _pack([_record(e, dp.get(d)) for d, e in entries[i : i + per_step]])
        yield


def decode(blob: bytes) -> dict[str, Any] | None:
    """The state, or None (and why, logged) when this build cannot use it."""
    try:
        state = pickle.loads(zlib.decompress(blob))
    except Exception as e:
        log.warning("pin: the handed-over state is unreadable (%s); starting fresh", e)
        return None
    if state.get("format") == fingerprint(1):
        return state  # per session: dicts, what restore() takes
    if state.get("format") != fingerprint():
        log.warning(
            "pin: the handed-over state comes from an engine with other session fields; starting fresh"
        )
        return None
    names = Session.STATE_FIELDS
    state["sessions"] = [
        (
            dict(zip(_ENTRY_FIELDS, ev, strict=True)),
            drops,
            raw,
            sport,
            config,
            dict(zip(names, sv, strict=True)),
            dp,
        )
        for ev, drops, raw, sport, config, sv, dp in state["sessions"]
    ]
    return state


def restore(host: Host, offload: Offload, state: dict[str, Any]) -> list[Entry]:
    """Recreate the handed-over sessions: same discriminators, slots and source ports."""
    used = {f["slot"] for f, *_ in state["sessions"] if f["slot"] is not None}
    offload.slots.adopt(state["nslots"], used)
    out = []
    bookkeeping: dict[int, Any] = {}
    for entry_fields, drops, last_rx_raw, sport, config, session_state, dp in state["sessions"]:
        entry = host.restore_session(config, entry_fields["origin"], sport=sport, state=session_state)
        for name, value in entry_fields.items():
            setattr(entry, name, value)
        entry.drops = Counter(drops)
        entry.last_rx_raw = last_rx_raw
        if dp is not None:
            bookkeeping[entry.session.local_discr] = dp
        offload.adopted(entry)
        out.append(entry)
    host.handoff.leave(DPLANE_SESSIONS, bookkeeping)
    now = now_us()
    for entry in out:
        host.service(entry, now)
    log.info("pin: adopted %d sessions from engine %d", len(out), state["pid"])
    return out


__all__ = ["FORMAT_VERSION", "decode", "encode", "fingerprint", "rehearse", "restore"]
