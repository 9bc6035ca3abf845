"""The engine↔kernel ABI, read once from ``bpf/bfd_abi.h``.

Every flag, event, index and size the XDP program, the sweep and the engine
share is a ``#define`` in that header; :func:`load` parses it into typed values
(``IntFlag``/``IntEnum`` classes and sizes) so that no Python file restates
one. Map layouts are not here: bcc's generated ctypes give those.

Two kinds of value live in the header, with different owners:

* **Engine↔kernel values** (``struct bfd_cfg`` flags, event types, counter
  names and order, the ``--pin`` owner record's slots, chunk and table sizes)
  are defined by the header and nowhere else: Python takes them from it.
* **RFC values** (the control packet's flag bits and states, its version and
  lengths, RFC 5880 §4.1) are defined by the RFC. Their reference here is the
  wire codec, :mod:`.wire.control`, which is pure, table-tested against the RFC
  and must not depend on a C file; the header restates them for C, and
  :func:`load` refuses a header whose copy disagrees with the codec. (The UDP
  ports, RFC 5881/5883, are checked against ``netio`` by the unit tests.)

A header that lacks a name the engine needs fails with one :class:`AbiError`
naming every missing one.

The header is this build's: the packaged copy of the C sources, or the
directory ``$XDP_BFD_BPF_DIR`` names (:func:`bpf_dir`).
"""

from __future__ import annotations

import enum
import functools
import os
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..wire import auth, control, echo
from .errors import KernelError

__all__ = ["PACKAGED_BPF_DIR", "Abi", "AbiError", "bpf_dir", "load"]


class AbiError(KernelError):
    """The header does not describe an ABI this engine speaks; the message is the line to log."""


# The C sources are package data: every install carries the copy its Python
# code was built with (in a source tree xdp_bfd/bpf is a symlink to the
# repository's bpf/). A directory on disk, not a resource reader: bcc compiles
# from files and needs -I to reach the header.
PACKAGED_BPF_DIR = Path(__file__).parent.parent / "bpf"


def bpf_dir() -> Path:
    """Where the C sources are: $XDP_BFD_BPF_DIR if set, else the packaged copy."""
    override = os.environ.get("XDP_BFD_BPF_DIR")
    # An override that points nowhere is an error, not a reason to fall back:
    # whoever set it meant another build of the programs (an experiment, a bench run).
    where, how = (Path(override), "XDP_BFD_BPF_DIR") if override else (PACKAGED_BPF_DIR, "the package")
    if not (where / "bfd_abi.h").is_file():
        raise KernelError(f"cannot find the bpf/ sources: no bfd_abi.h in {where} ({how})")
    return where


# Python name -> the header's #define, per enum. The names are this module's
# contract with its callers; every value comes from the header.
_CFG = {
    "ACTIVE": "BFD_CFG_ACTIVE",
    "KTX": "BFD_CFG_KTX",
    "DETECT": "BFD_CFG_DETECT",
    "AUTH": "BFD_CFG_AUTH",
    "ECHO": "BFD_CFG_ECHO",
    "FINAL": "BFD_CFG_FINAL",
    "AUTH_SEQ": "BFD_CFG_AUTH_SEQ",
}
_EVENT = {"EXPIRED": "BFD_EV_EXPIRED", "POLL": "BFD_EV_POLL", "TICK_LOST": "BFD_EV_TICK_LOST"}
_TICK = {"RUN": "BFD_TICK_RUN", "SERIES": "BFD_TICK_SERIES"}
_SBFD = {"ACTIVE": "BFD_SBFD_ACTIVE"}
_OWNER = {
    "PID": "BFD_OWNER_PID",
    "STATE": "BFD_OWNER_STATE",
    "BLOB_LEN": "BFD_OWNER_BLOB_LEN",
    "DONE_NS": "BFD_OWNER_DONE_NS",
}
_OWNER_STATE = {"RUNNING": "BFD_OWNER_RUNNING", "HANDED_OVER": "BFD_OWNER_HANDED_OVER"}
_SIZES = {
    "max_sessions": "BFD_MAX_SESSIONS",
    "discr_slot_mask": "BFD_DISCR_SLOT_MASK",
    "control_len": "BFD_CONTROL_LEN",
    "pkt_max": "BFD_PKT_MAX",
    "sweep_chunk": "BFD_SWEEP_CHUNK",
    "sweep_copies": "BFD_SWEEP_COPIES",
    "handover_chunk": "BFD_HANDOVER_CHUNK",
    "handover_chunks": "BFD_HANDOVER_CHUNKS",
    "owner_slots": "BFD_OWNER_SLOTS",
    "spread_max_cpus": "BFD_SPREAD_MAX_CPUS",
    "tick_ethertype": "BFD_TICK_ETHERTYPE",
    "tick_magic": "BFD_TICK_MAGIC",
    "tick_len_full": "BFD_TICK_LEN_FULL",
    "down_magic": "BFD_DOWN_MAGIC",
    "down_batch": "BFD_DOWN_BATCH",
    "courier_magic": "BFD_COURIER_MAGIC",
    "courier_short_ns": "BFD_COURIER_SHORT_NS",
    "tick_len_min": "BFD_TICK_LEN_MIN",
    "tick_watch_chunk": "BFD_TICK_WATCH_CHUNK",
    "tick_watch_copies": "BFD_TICK_WATCH_COPIES",
    "series_depth": "BFD_SERIES_DEPTH",
    "series_max": "BFD_SERIES_MAX",
    "sbfd_max_reflectors": "BFD_SBFD_MAX_REFLECTORS",
    "sbfd_port": "BFD_PORT_SBFD",
    "echo_ring": "BFD_ECHO_RING",
}
_PORTS = ("BFD_PORT_CONTROL", "BFD_PORT_MULTIHOP", "BFD_PORT_ECHO")

# The header's shorter names for the codec's auth types.
_AUTH_NAMES = {
    "SIMPLE": "SIMPLE",
    "KEYED_MD5": "KEYED_MD5",
    "METICULOUS_KEYED_MD5": "MET_MD5",
    "KEYED_SHA1": "KEYED_SHA1",
    "METICULOUS_KEYED_SHA1": "MET_SHA1",
}

# The RFC values the header restates, and what the codec says they are.
_RFC: dict[str, int] = {
    "BFD_VERSION": control.VERSION,
    "BFD_CONTROL_LEN": control.MIN_LEN,
    "BFD_CONTROL_LEN_AUTH": control.MIN_LEN_AUTH,
    **{f"BFD_AUTH_{_AUTH_NAMES[t.name]}": int(t) for t in control.AuthType if t.name in _AUTH_NAMES},
    "BFD_AUTH_SEQ_OFF": control.MIN_LEN + 4,  # Type, Len, Key ID, Reserved: auth.KEYED_HEADER
    "BFD_PKT_MAX": control.MIN_LEN + max(auth.KEYED[t].section_len for t in auth.KEYED),
    "BFD_STATE_SHIFT": control.STATE_SHIFT,
    "BFD_VERSION_SHIFT": control.VERSION_SHIFT,
    **{f"BFD_FLAG_{f.name}": int(f) for f in control.Flag},
    **{f"BFD_STATE_{s.name}": int(s) for s in control.State},
    # Not the RFC's but ours, owned by the echo codec all the same.
    "BFD_ECHO_MAGIC": int.from_bytes(echo.ECHO_MAGIC, "big"),
    "BFD_ECHO_LEN": echo.ECHO_LEN,
}

_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(BFD_\w+)[ \t]+(0x[0-9a-fA-F]+|\d+)\b", re.M)
_COUNTERS = re.compile(r"#define BFD_COUNTERS\(X\)(.*?)\n\n", re.S)
_TICK_COUNTERS = re.compile(r"#define BFD_TICK_COUNTERS\(X\)(.*?)\n\n", re.S)
_COUNTER = re.compile(r"X\((\w+),\s*(\w+)\)")


@dataclass(frozen=True)
class Abi:
    """One header's ABI. The enum classes are built per header (see :func:`load`)."""

    header: Path
    constants: Mapping[str, int]  # every ``#define BFD_<NAME> <number>``
    counters: tuple[str, ...]  # stats names, in counter index order (BFD_COUNTERS)
    tick_counters: tuple[str, ...]  # the tick program's, in index order (BFD_TICK_COUNTERS)
    CfgFlag: type[enum.IntFlag]  # struct bfd_cfg.flags
    TickFlag: type[enum.IntFlag]  # struct bfd_tick_cfg.flags
    SbfdFlag: type[enum.IntFlag]  # struct bfd_sbfd_cfg.flags
    Event: type[enum.IntEnum]  # struct bfd_event.type
    Owner: type[enum.IntEnum]  # slots of the --pin owner record
    OwnerState: type[enum.IntEnum]  # its BFD_OWNER_STATE values
    ports: tuple[int, int, int]  # single-hop, multihop, echo
    max_sessions: int
    discr_slot_mask: int  # a discriminator's bits that name its slot, when the engine chose it
    control_len: int
    pkt_max: int  # the longest control packet (with keyed SHA1's section): cfg.expect, tick_cfg.pkt
    sweep_chunk: int
    sweep_copies: int
    handover_chunk: int
    handover_chunks: int
    owner_slots: int
    spread_max_cpus: int
    tick_ethertype: int
    tick_magic: int
    tick_len_full: int
    down_magic: int  # a frame of Downs for the tick program (struct bfd_down_frame)
    down_batch: int  # its entries at most
    courier_magic: int  # the courier's frame, which sends the Downs the sweep queued (tick.c)
    courier_short_ns: int  # the courier's shortest round
    tick_len_min: int
    tick_watch_chunk: int
    tick_watch_copies: int
    series_depth: int  # packets a meticulous key's series holds (struct bfd_series)
    series_max: int  # sessions with a series at once (elements of the series array)
    sbfd_max_reflectors: int
    sbfd_port: int  # RFC 7881's, restated for C: checked against netio by the unit tests
    echo_ring: int  # the returns XDP keeps per session (struct bfd_echo_rtt.ring)

    def sweep_programs(self, sessions: int) -> int:
        """How many chained sweep programs cover ``sessions`` slots."""
        if sessions > self.sweep_chunk * self.sweep_copies:
            raise AbiError(
                f"{self.header}: the sweep covers at most {self.sweep_chunk * self.sweep_copies} sessions"
                f" (BFD_SWEEP_COPIES x BFD_SWEEP_CHUNK), not {sessions}"
            )
        return -(-sessions // self.sweep_chunk)

    def tick_watch_programs(self, sessions: int) -> int:
        """How many chained watch programs (lost tick frames) cover ``sessions`` slots."""
        most = self.tick_watch_chunk * self.tick_watch_copies
        if sessions > most:
            raise AbiError(
                f"{self.header}: the tick watch covers at most {most}"
                f" sessions (BFD_TICK_WATCH_COPIES x BFD_TICK_WATCH_CHUNK), not {sessions}"
            )
        return -(-sessions // self.tick_watch_chunk)


def load(header: Path | None = None) -> Abi:
    """The ABI ``header`` (default: this build's) defines, parsed once per process for each content."""
    header = header or bpf_dir() / "bfd_abi.h"
    try:
        text = header.read_text()
    except OSError as e:
        raise AbiError(f"cannot read {header}: {e.strerror}") from None
    return _parse(header, text)


@functools.cache
def _parse(header: Path, text: str) -> Abi:
    consts: dict[str, int] = {}
    clashes = []
    for name, value in _DEFINE.findall(text):
        v = int(value, 0)
        if consts.get(name, v) != v:
            clashes.append(name)
        consts[name] = v
    if clashes:
        raise AbiError(f"{header}: defined twice with different values: {', '.join(sorted(set(clashes)))}")
    block = _COUNTERS.search(text)
    counters = tuple(name for _idx, name in _COUNTER.findall(block.group(1))) if block else ()
    tblock = _TICK_COUNTERS.search(text)
    tick_counters = tuple(name for _idx, name in _COUNTER.findall(tblock.group(1))) if tblock else ()
    wanted = [*_CFG.values(), *_EVENT.values(), *_TICK.values(), *_SBFD.values(), *_OWNER.values()]
    wanted += _OWNER_STATE.values()
    wanted += [*_SIZES.values(), *_PORTS, *_RFC]
    missing = sorted({n for n in wanted if n not in consts})
    if not tblock:
        missing.insert(0, "BFD_TICK_COUNTERS")
    if not block:
        missing.insert(0, "BFD_COUNTERS")
    if missing:
        raise AbiError(f"{header}: the engine needs {', '.join(missing)}, which the header does not define")
    wrong = [f"{n} is {consts[n]:#x}, the wire codec says {v:#x}" for n, v in _RFC.items() if consts[n] != v]
    if wrong:
        raise AbiError(f"{header}: {'; '.join(wrong)}")
    if len(set(counters)) != len(counters):
        raise AbiError(f"{header}: BFD_COUNTERS names a counter twice")
    if len(set(tick_counters)) != len(tick_counters):
        raise AbiError(f"{header}: BFD_TICK_COUNTERS names a counter twice")

    def values(spec: dict[str, str]) -> dict[str, int]:
        return {py: consts[c] for py, c in spec.items()}

    # The functional API: member values exist only once the header is read.
    return Abi(
        header=header,
        constants=types.MappingProxyType(consts),
        counters=counters,
        tick_counters=tick_counters,
        CfgFlag=enum.IntFlag("CfgFlag", values(_CFG), module=__name__),
        TickFlag=enum.IntFlag("TickFlag", values(_TICK), module=__name__),
        SbfdFlag=enum.IntFlag("SbfdFlag", values(_SBFD), module=__name__),
        Event=enum.IntEnum("Event", values(_EVENT), module=__name__),
        Owner=enum.IntEnum("Owner", values(_OWNER), module=__name__),
        OwnerState=enum.IntEnum("OwnerState", values(_OWNER_STATE), module=__name__),
        ports=(consts[_PORTS[0]], consts[_PORTS[1]], consts[_PORTS[2]]),
        **{field: consts[c] for field, c in _SIZES.items()},
    )
