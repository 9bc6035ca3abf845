"""``--pin``: a hitless handover from a running engine to its successor.

The successor (started with the same arguments while the old engine runs)
compiles and verifies its programs against the pinned maps, names itself the
service's main process, and sends the old engine SIGUSR2. The old engine
writes its userspace state (per session: configuration, state machine,
discriminators, timers, authentication sequence numbers, fast-path slot and
source port) into the pinned ``handover`` map, marks the owner record handed
over and exits 75 at once, leaving its XDP program attached and answering
peers. The successor then swaps its own program in over the same maps (one
atomic replace), restores the sessions and serves. Nothing is written outside
the bpffs directory, so SIGUSR2 alone leaves the state for a later successor.

Two things keep builds apart: the maps live under a directory named by the
layout id (bfd_abi.h, maps.h and the compile flags hashed), and the state
carries a fingerprint of the session fields. Either differing means the
successor discards the pinned state and starts fresh, and says so.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import gc
import hashlib
import logging
import operator
import os
import pickle
import platform
import select
import signal
import struct
import time
import zlib
from collections import Counter
from collections.abc import Generator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.clock import now_us
from ..core.handoff import DPLANE_SESSIONS
from ..core.host import Entry, Host
from ..fastpath.kernel import abi_constants, bpf_dir
from ..session import Session, SessionConfig

if TYPE_CHECKING:
    from ..fastpath.kernel import FastPath
    from ..fastpath.observer import Offload

log = logging.getLogger("xdp_bfd")

# 2: per session, value tuples in the fingerprint's field order (1 had dicts:
# twice the encoding time at 1024 sessions). A successor reads both.
FORMAT_VERSION = 2
HANDOVER_TIMEOUT_S = 5.0
# Before SIGUSR2 the successor sends this and waits (at most PREPARE_WAIT_S)
# until the running engine says it has encoded its state once for nothing:
# an engine idle behind its fast path has every cache cold, and its first
# encoding ran 8x slower than the next (64 sessions: 8 ms against 1). The
# default action of SIGWINCH is to ignore it, so an engine of an older build
# is not harmed by it; the successor then asks after the wait, as before.
PREPARE_SIGNAL = signal.SIGWINCH
PREPARE_WAIT_S = 2.0  # paced under a reservation: 1024 sessions take about 0.5 s
BPF_FS_MAGIC = 0xCAFE4A11
_BPF_NR = {"x86_64": 321, "aarch64": 280}
_BPF_MAP_LOOKUP_ELEM, _BPF_OBJ_GET = 1, 7

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

_libc = ctypes.CDLL(None, use_errno=True)


class HandoverError(Exception):
    """The handover cannot happen; the message is the line to log."""


# --- the pin directory ----------------------------------------------------------------


def check_bpffs(root: Path) -> None:
    buf = ctypes.create_string_buffer(128)  # struct statfs; f_type comes first
    if _libc.statfs(str(root).encode(), buf) != 0:
        raise HandoverError(f"--pin {root}: {os.strerror(ctypes.get_errno())}")
    if struct.unpack_from("=q", buf.raw)[0] & 0xFFFFFFFF != BPF_FS_MAGIC:
        raise HandoverError(f"--pin {root} is not a bpffs (mount -t bpf bpf {root})")
    if '"' in str(root) or "\\" in str(root):
        raise HandoverError(f"--pin {root}: the path may not contain quotes or backslashes")


def _bpf(cmd: int, attr: bytes) -> int:
    buf = ctypes.create_string_buffer(attr, 128)
    nr = _BPF_NR.get(platform.machine())
    if nr is None:
        raise OSError(errno.ENOSYS, "bpf(2) is not wired up for this machine")
    ret = _libc.syscall(nr, cmd, buf, 128)
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


def read_owner(root: Path, consts: dict[str, int]) -> dict[str, int] | None:
    """The owner record of ``root`` (any build's), read before we compile anything."""
    path = root / "owner"
    if not path.exists():
        return None
    name = ctypes.create_string_buffer(str(path).encode())
    fd = _bpf(_BPF_OBJ_GET, struct.pack("=QII", ctypes.addressof(name), 0, 0))
    try:
        values = []
        for i in range(consts["BFD_OWNER_SLOTS"]):
            key, value = ctypes.c_uint32(i), ctypes.c_uint64(0)
            attr = struct.pack("=I4xQQQ", fd, ctypes.addressof(key), ctypes.addressof(value), 0)
            _bpf(_BPF_MAP_LOOKUP_ELEM, attr)
            values.append(value.value)
    finally:
        os.close(fd)
    return {
        "pid": values[consts["BFD_OWNER_PID"]],
        "state": values[consts["BFD_OWNER_STATE"]],
        "blob_len": values[consts["BFD_OWNER_BLOB_LEN"]],
        # 0 from a build that did not record it.
        "done_ns": values[consts["BFD_OWNER_DONE_NS"]] if consts.get("BFD_OWNER_DONE_NS") else 0,
    }


def is_engine(pid: int) -> bool:
    """A live xdp-bfd process (the name guards against a recycled pid)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "xdp-bfd" and pid != os.getpid()
    except OSError:
        return False


def layout_dirs(root: Path) -> list[Path]:
    return [p for p in root.iterdir() if p.is_dir() and len(p.name) == 16 and _is_hex(p.name)]


def _is_hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


def remove_pins(directory: Path) -> None:
    for p in directory.iterdir():
        with contextlib.suppress(OSError):
            p.unlink()
    with contextlib.suppress(OSError):
        directory.rmdir()


@dataclass(frozen=True)
class Plan:
    """What a starting engine does with ``--pin``: fresh, takeover (pid), replace (pid), adopt."""

    kind: str
    pid: int = 0
    why: str = ""


def plan(root: Path, layout: str, consts: dict[str, int]) -> Plan:
    owner = read_owner(root, consts)
    ours = root / layout
    same = ours.is_dir() and any(ours.iterdir())
    if owner and owner["pid"] and is_engine(owner["pid"]):
        if same:
            return Plan("takeover", owner["pid"])
        return Plan("replace", owner["pid"], "its maps were built with a different layout")
    if owner and owner["state"] == consts["BFD_OWNER_HANDED_OVER"]:
        if same:
            return Plan("adopt", owner["pid"])
        return Plan("fresh", why="the state left there was built with a different map layout")
    if same:
        return Plan("fresh", why="no engine handed it over (it stopped or crashed)")
    return Plan("fresh")


def prepare(root: Path, layout: str, p: Plan) -> None:
    """Before compiling: a fresh start must not open stale maps of our own layout."""
    if p.kind in ("fresh", "replace") and (root / layout).is_dir():
        remove_pins(root / layout)
    if p.why:
        log.warning("pin: discarding the pinned state in %s (%s); starting fresh", root, p.why)


@dataclass(frozen=True)
class Departure:
    """How long the old engine took to leave: all of it, and its own part when it recorded one."""

    gone_ms: float
    own_ms: float | None = None  # request -> state written (the old engine's work)
    request_ns: int = 0  # CLOCK_MONOTONIC of the request, to time the rest of the takeover
    prepared_ms: float | None = None  # before the request: the old engine's warm-up, serving meanwhile

    def __str__(self) -> str:
        text = f"was gone {self.gone_ms:.1f} ms after the request"
        if self.own_ms is not None:
            text += f" (own part {self.own_ms:.1f} ms, exit {self.gone_ms - self.own_ms:.1f} ms)"
        if self.prepared_ms is not None:
            text += f"; it had prepared in {self.prepared_ms:.1f} ms"
        else:
            text += "; it did not prepare (an older build?)"
        return text


def _owner_done_ns(root: Path, consts: dict[str, int]) -> int:
    with contextlib.suppress(OSError):
        owner = read_owner(root, consts)
        return owner["done_ns"] if owner else 0
    return 0


def _prepare(pid: int, root: Path, consts: dict[str, int]) -> float | None:
    """PREPARE_SIGNAL, then wait for the owner record's mark; ms taken, None if it never came."""
    before = _owner_done_ns(root, consts)
    t0 = time.monotonic_ns()
    os.kill(pid, PREPARE_SIGNAL)
    deadline = t0 + int(PREPARE_WAIT_S * 1e9)
    while time.monotonic_ns() < deadline:
        if _owner_done_ns(root, consts) != before:
            return (time.monotonic_ns() - t0) / 1e6
        time.sleep(0.0005)
    return None


def request(pid: int, root: Path, consts: dict[str, int]) -> Departure:
    """SIGUSR2 to the running engine; returns when it was gone (raises HandoverError)."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return Departure(0.0, request_ns=time.monotonic_ns())
    try:
        prepared_ms = _prepare(pid, root, consts)
        t0 = time.monotonic_ns()
        os.kill(pid, signal.SIGUSR2)
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        if not poller.poll(HANDOVER_TIMEOUT_S * 1000):
            raise HandoverError(f"pin: engine {pid} did not hand over within {HANDOVER_TIMEOUT_S:.0f} s")
        t1 = time.monotonic_ns()
    finally:
        os.close(pidfd)
    done = _owner_done_ns(root, consts)
    return Departure((t1 - t0) / 1e6, (done - t0) / 1e6 if t0 <= done <= t1 else None, t0, prepared_ms)


def finish(root: Path, layout: str) -> None:
    """Once we own the directory: what other builds left there goes."""
    for d in layout_dirs(root):
        if d.name != layout:
            remove_pins(d)


# --- the state ------------------------------------------------------------------------


def session_fields() -> tuple[str, ...]:
    """The Session attributes handed over, in the order format 2 lists their values."""
    return Session.STATE_FIELDS


@functools.cache
def fingerprint(version: int = FORMAT_VERSION) -> str:
    """Changes whenever the saved fields change, so an incompatible successor starts fresh."""
    names = list(session_fields())
    names += [f.name for f in fields(SessionConfig)] + list(_ENTRY_FIELDS) + [str(version)]
    return hashlib.sha256("\0".join(names).encode()).hexdigest()[:16]


_entry_values = operator.attrgetter(*_ENTRY_FIELDS)


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


def encode(host: Host, offload: Offload) -> bytes:
    """The state, pickled and compressed.

    The old engine is gone only once this is written: JSON took 65 ms for 1024
    sessions where pickle takes about 5. The blob lives in a root-only pinned
    map that only a process holding CAP_BPF could have written.
    """
    dp = host.handoff.section(DPLANE_SESSIONS) or {}
    sessions = [_record(entry, dp.get(discr)) for discr, entry in host.sessions.items()]
    state = {
        "format": fingerprint(),
        "pid": os.getpid(),
        "nslots": offload.fp.nslots,
        "sessions": sessions,
    }
    return _pack(state)


def _pack(obj: Any) -> bytes:
    return zlib.compress(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), 1)


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
    names = session_fields()
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


WARM_UP_SLICE_SESSIONS = 64


def warm_up(host: Host, offload: Offload) -> None:
    """PREPARE_SIGNAL: encode the state once for nothing (warm caches), then say so in the owner record.

    The engine still serves meanwhile, so this goes in paced steps like a stats
    dump (a stats document, then the sessions pickled a slice at a time): in
    one piece it was 30-50 ms of loop time at 1024 sessions, cold, and ten
    times that under a 1 ms/10 ms reservation.
    """
    fp = offload.fp

    def encode_slices(_doc: dict[str, Any]) -> Generator[None, None, None]:
        dp = host.handoff.section(DPLANE_SESSIONS) or {}
        entries = list(host.sessions.items())
        for i in range(0, len(entries), WARM_UP_SLICE_SESSIONS):
            part = [_record(e, dp.get(d)) for d, e in entries[i : i + WARM_UP_SLICE_SESSIONS]]
            _pack(part)
            yield
        fp.set_owner(os.getpid(), fp.consts["BFD_OWNER_RUNNING"], 0, done_ns=time.monotonic_ns())

    host.want_stats(encode_slices)


def hand_over(host: Host, offload: Offload) -> None:
    """SIGUSR2: write the state for a successor and exit 75 without a word to the peers."""
    fp = offload.fp
    assert fp.pin is not None
    t0 = time.monotonic_ns()
    # No collection while the state is pickled: thousands of fresh containers
    # would trigger several, and this process either exits in a moment or
    # goes back to serving (then the collector comes back).
    gc.disable()
    try:
        blob = encode(host, offload)
        t_encoded = time.monotonic_ns()
        fp.write_handover(blob)
    except Exception as e:
        gc.enable()
        log.error("pin: cannot hand over: %s; still serving", e)
        return
    c = fp.consts
    host.handoff.depart(fp.pin.root)  # the bfddp sockets go to the successor (fdpass.py)
    fp.set_owner(os.getpid(), c["BFD_OWNER_HANDED_OVER"], len(blob), done_ns=time.monotonic_ns())
    log.info(
        "pin: handed over %d sessions (%d bytes of state) in %.1f ms (encoding %.1f); exiting 75",
        len(host.sessions),
        len(blob),
        (time.monotonic_ns() - t0) / 1e6,
        (t_encoded - t0) / 1e6,
    )
    for h in logging.getLogger().handlers:
        h.flush()
    # No shutdown: the XDP program stays attached and answering, the maps stay
    # pinned, and no AdminDown goes out. The kernel closes the rest.
    os._exit(75)


def load(fp: FastPath) -> dict[str, Any] | None:
    consts = abi_constants(bpf_dir() / "bfd_abi.h")
    assert fp.pin is not None
    owner = read_owner(fp.pin.root, consts)
    if not owner or owner["state"] != consts["BFD_OWNER_HANDED_OVER"] or not owner["blob_len"]:
        log.warning("pin: the engine left without handing over its state; starting fresh")
        return None
    return decode(fp.read_handover(owner["blob_len"]))


def restore(host: Host, offload: Offload, state: dict[str, Any]) -> list[Entry]:
    """Recreate the handed-over sessions: same discriminators, slots and source ports."""
    used = {f["slot"] for f, *_ in state["sessions"] if f["slot"] is not None}
    offload.fp.adopt_slots(state["nslots"], used)
    out = []
    bookkeeping: dict[int, Any] = {}
    for fields_, drops, last_rx_raw, sport, config, session_vars, dp in state["sessions"]:
        entry = host.restore_session(config, fields_["origin"], sport=sport, state=session_vars)
        for name, value in fields_.items():
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
