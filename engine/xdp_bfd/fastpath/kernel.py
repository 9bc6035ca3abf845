"""The XDP fast path from userspace: compile with bcc, attach, keep the maps.

Map layouts come from ``bpf/bfd_abi.h`` through bcc's generated ctypes
(``table.Leaf``/``table.Key``), and every shared value (flags, events, sizes,
the counter names) from the same header through :mod:`.abi`: nothing here
restates a C layout or constant.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import ipaddress
import logging
import os
import re
import socket
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import abi as _abi

log = logging.getLogger("xdp_bfd")

# The sweep's tick on every CPU; the engine sets how often a tick actually
# sweeps (gate.sweep_ns): a short period for few sessions, where detection
# overshoot is what an operator sees, growing with the table so that the sweep
# costs at most about 1 % of a core (about 18 ns a slot measured here).
SWEEP_TICK_NS = 500_000
SWEEP_MIN_NS = 500_000
SWEEP_MAX_NS = 5_000_000
SWEEP_NS_PER_SLOT = 2_000


def sweep_period_ns(nslots: int) -> int:
    return max(SWEEP_MIN_NS, min(SWEEP_MAX_NS, nslots * SWEEP_NS_PER_SLOT))


# --spread-pass: frames queued per CPU before the cpumap drops (the kernel's samples use 2048).
SPREAD_QSIZE = 2048
XDP_FLAGS_SKB_MODE = 2  # generic
XDP_FLAGS_DRV_MODE = 4  # native


class KernelError(Exception):
    """The fast path cannot be set up; the message is the one line to log."""


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


def load_abi(header: Path | None = None) -> _abi.Abi:
    """The ABI of ``header`` (default: this build's bfd_abi.h), parsed once; a bad header is a KernelError."""
    try:
        return _abi.load(header or bpf_dir() / "bfd_abi.h")
    except _abi.AbiError as e:
        raise KernelError(str(e)) from None


def counter_names(header: Path) -> list[str]:
    """Counter names in index order, read from the BFD_COUNTERS X-macro."""
    return list(load_abi(header).counters)


def abi_constants(header: Path) -> Mapping[str, int]:
    """Every ``#define BFD_<NAME> <number>`` of the header (the one parse :mod:`.abi` keeps)."""
    return load_abi(header).constants


def mapped16(addr: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> bytes:
    """The 16-byte form the maps use: IPv4 as ::ffff:a.b.c.d."""
    if addr is None:
        return bytes(16)
    if addr.version == 4:
        return bytes(10) + b"\xff\xff" + addr.packed
    return addr.packed


def driver_of(ifname: str) -> str:
    """The kernel driver behind an interface (ETHTOOL_GDRVINFO), '' if it has none."""
    siocethtool, gdrvinfo = 0x8946, 3
    info = ctypes.create_string_buffer(struct.pack("I", gdrvinfo), 196)  # struct ethtool_drvinfo
    ifreq = struct.pack("16sP", ifname.encode()[:15], ctypes.addressof(info)).ljust(40, b"\0")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            fcntl.ioctl(s.fileno(), siocethtool, ifreq)
        except OSError:
            return ""
    return info.raw[4:36].split(b"\0", 1)[0].decode(errors="replace")


def online_cpus() -> list[int]:
    """The online CPU ids (``0-3,8-11`` in sysfs)."""
    text = Path("/sys/devices/system/cpu/online").read_text().strip()
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def layout_sources(src: Path) -> list[str]:
    """What decides the map layouts: maps.h and every header it includes, transitively.

    Program code (xdp_bfd.c, sweep.c, parse.h) is not among them: a successor
    whose programs changed but whose maps did not adopts the maps (--pin).
    """
    out, todo = [], ["maps.h"]
    while todo:
        name = todo.pop(0)
        if name in out:
            continue
        out.append(name)
        todo += re.findall(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"', (src / name).read_text(), re.M)
    return out


def layout_id(src: Path, cflags: list[str]) -> str:
    """Names a build's map layouts: everything that decides them, hashed (see bfd_abi.h, --pin)."""
    h = hashlib.sha256()
    for name in sorted(layout_sources(src)):
        h.update((src / name).read_bytes())
    for flag in sorted(cflags):
        h.update(flag.encode() + b"\0")
    return h.hexdigest()[:16]


def layout_cflags(max_sessions: int) -> list[str]:
    """The flags that shape the maps (and so the layout id)."""
    flags = [f"-DBFD_MAX_SESSIONS={max_sessions}"]
    if os.environ.get("XDP_BFD_TEST_LAYOUT_CHANGE") == "1":
        # Tests stand in for an upgrade whose maps differ with a real layout change.
        flags.append("-DBFD_TEST_LAYOUT_CHANGE")
    return flags


@dataclass(frozen=True)
class PinPaths:
    """``--pin ROOT``: ROOT/owner for every build, ROOT/<layout id>/ for this build's maps."""

    root: Path
    layout: str

    @property
    def maps(self) -> Path:
        return self.root / self.layout

    def cflags(self) -> list[str]:
        return [f'-DBFD_PIN_ROOT="{self.root}"', f'-DBFD_PIN_DIR="{self.maps}"']


@dataclass
class Attachment:
    ifname: str
    ifindex: int
    mode: str  # "native" or "generic"
    flags: int


class FastPath:
    """One bcc module: the XDP program, the sweep programs, their maps."""

    def __init__(
        self, deadman_us: int, *, max_sessions: int | None = None, pin: PinPaths | None = None
    ) -> None:
        from bcc import BPF  # noqa: PLC0415  (bcc is only needed with --kernel-tx)

        self._BPF = BPF
        src = bpf_dir()
        # Read before compiling: the values must describe the header this build compiles.
        self.abi = load_abi(src / "bfd_abi.h")
        self.consts = self.abi.constants
        self.counter_names = list(self.abi.counters)
        self.max_sessions = max_sessions or self.abi.max_sessions
        try:
            nsweeps = self.abi.sweep_programs(self.max_sessions)
        except _abi.AbiError as e:
            raise KernelError(str(e)) from None
        self.pin = pin
        text = (src / "xdp_bfd.c").read_text() + "\n" + (src / "sweep.c").read_text()
        cflags = [f"-I{src}", "-Wno-unused-function", *layout_cflags(self.max_sessions)]
        if pin is not None:
            pin.maps.mkdir(exist_ok=True)
            cflags += pin.cflags()
        try:
            self.bpf = BPF(text=text, cflags=cflags)
            self.xdp_fn = self.bpf.load_func(b"xdp_bfd_rx", BPF.XDP)
            # Loaded (and so verified) now: a successor must fail before it asks anyone to leave.
            self.sweep_fn = self.bpf.load_func(b"bfd_sweep", BPF.PERF_EVENT)
            self.sweep_fns = [
                self.bpf.load_func(f"bfd_sweep_{i}".encode(), BPF.PERF_EVENT) for i in range(nsweeps)
            ]
            chain = self.bpf["sweep_chain"]
            for i, fn in enumerate(self.sweep_fns):
                chain[ctypes.c_int(i)] = ctypes.c_int(fn.fd)
        except Exception as e:
            raise KernelError(f"cannot load the XDP program: {e}") from None
        self.slot_cfg = self.bpf["slot_cfg"]
        self.slot_state = self.bpf["slot_state"]
        self.sessions = self.bpf["sessions"]
        self.by_discr = self.bpf["by_discr"]
        self.echo_peers = self.bpf["echo_peers"]
        self.gate = self.bpf["gate"]
        self.counters = self.bpf["counters"]
        self.event_type = self.bpf["event_layout"].Leaf
        # With --pin; looked up here like the other tables (bcc builds a
        # table's ctypes types on first access), not inside a handover.
        self.owner = self.bpf["owner"] if pin is not None else None
        self.handover = self.bpf["handover"] if pin is not None else None
        self.deadman_ns = deadman_us * 1000
        self.nslots = 0
        self.spread_cpus = 0
        self._free: list[int] = []
        self._used: set[int] = set()
        self.attached: list[Attachment] = []
        self._sweeps = 0
        self._events_open = False
        if pin is None:
            self.heartbeat(0)
        else:
            # Shared with a running engine until it hands over: its gate stays as it wrote it.
            self._heartbeat_ns = self.gate[self.gate.Key(0)].heartbeat_ns

    # -- attach ---------------------------------------------------------------

    def attach(self, ifname: str, mode: str, *, replace: bool = False) -> Attachment:
        """``replace``: swap our program in over one already there (a takeover), no gap."""
        try:
            ifindex = socket.if_nametoindex(ifname)
        except OSError:
            raise KernelError(f"--kernel-tx: no interface {ifname}") from None
        driver = driver_of(ifname)
        reason = f"driver {driver or 'unknown'}"
        if mode == "auto":
            if driver == "veth":
                chosen = "generic"
                reason = "veth: native XDP_TX only reaches a peer that runs XDP too"
            else:
                chosen = "native"
        else:
            chosen = mode
        flags = XDP_FLAGS_DRV_MODE if chosen == "native" else XDP_FLAGS_SKB_MODE
        swapped = False
        if replace:
            # The kernel replaces a program attached in the same mode atomically.
            with contextlib.suppress(Exception):
                self.bpf.attach_xdp(ifname, self.xdp_fn, flags)
                swapped = True
        if not swapped:
            self._detach_any(ifname)
        try:
            if not swapped:
                self.bpf.attach_xdp(ifname, self.xdp_fn, flags)
        except Exception as e:
            if mode != "auto" or chosen == "generic":
                raise KernelError(f"cannot attach XDP to {ifname} in {chosen} mode: {e}") from None
            chosen, flags = "generic", XDP_FLAGS_SKB_MODE
            reason = f"driver {driver or 'unknown'} has no native XDP"
            try:
                self.bpf.attach_xdp(ifname, self.xdp_fn, flags)
            except Exception as e2:
                raise KernelError(f"cannot attach XDP to {ifname}: {e2}") from None
        att = Attachment(ifname, ifindex, chosen, flags)
        self.attached.append(att)
        log.info("kernel-tx: XDP attached to %s (%s mode, %s)", ifname, chosen, reason)
        return att

    def _detach_any(self, ifname: str) -> None:
        # A crashed engine leaves its program attached (the dead-man gate keeps it
        # from answering); the next start replaces it whatever mode it was in.
        for flags in (XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE):
            with contextlib.suppress(Exception):
                self._BPF.remove_xdp(ifname, flags)

    def enable_spread(self, qsize: int = SPREAD_QSIZE) -> int:
        """--spread-pass: one cpumap entry per online CPU; returns how many take traffic."""
        cpus = online_cpus()[: self.abi.spread_max_cpus]
        cpumap, slots = self.bpf["spread_map"], self.bpf["spread_cpu"]
        try:
            for i, cpu in enumerate(cpus):
                cpumap[cpumap.Key(cpu)] = cpumap.Leaf(qsize)
                slots[slots.Key(i)] = slots.Leaf(cpu)
        except Exception as e:
            raise KernelError(f"cannot fill the cpumap: {e}") from None
        self.spread_cpus = len(cpus)
        if self.pin is not None:
            # Before the adoption the pinned gate is the old engine's (it has
            # left by now): keep its heartbeat and sweep range, change only ours.
            g = self.gate[self.gate.Key(0)]
            self._heartbeat_ns, self.nslots = g.heartbeat_ns, g.nslots
        self._write_gate()
        return self.spread_cpus

    def start_sweep(self) -> None:
        from bcc import PerfSWConfig, PerfType  # noqa: PLC0415

        try:
            self.bpf.attach_perf_event(
                ev_type=PerfType.SOFTWARE,
                ev_config=PerfSWConfig.CPU_CLOCK,
                fn_name=b"bfd_sweep",
                sample_period=SWEEP_TICK_NS,
                cpu=-1,
            )
        except Exception as e:
            raise KernelError(f"cannot start the detection sweep: {e}") from None
        self._sweeps = 1

    def close(self) -> None:
        if self.pin is not None:
            # A clean stop leaves nothing to adopt: the next start begins fresh.
            with contextlib.suppress(Exception):
                self.set_owner(0, 0, 0)
        for att in self.attached:
            with contextlib.suppress(Exception):
                self._BPF.remove_xdp(att.ifname, att.flags)
            log.info("kernel-tx: XDP detached from %s", att.ifname)
        self.attached.clear()
        with contextlib.suppress(Exception):
            self.bpf.cleanup()

    # -- slots ----------------------------------------------------------------

    def alloc(self) -> int:
        if self._free:
            slot = self._free.pop()
        elif self.nslots < self.max_sessions:
            slot = self.nslots
            self.nslots += 1
        else:
            raise KernelError(f"the fast path holds at most {self.max_sessions} sessions")
        self._used.add(slot)
        self.slot_state[self.slot_state.Key(slot)] = self.slot_state.Leaf()
        self._write_gate()
        return slot

    def _index_keys(self, *, local: Any, peer: Any, ifindex: int, multihop: bool, discr: int) -> list:
        """(table, key) for each index that leads a packet to the session's slot."""
        k = self.sessions.Key()
        ctypes.memmove(k.local, mapped16(local), 16)
        ctypes.memmove(k.peer, mapped16(peer), 16)
        k.ifindex, k.multihop = ifindex, int(multihop)
        e = self.echo_peers.Key()
        ctypes.memmove(e.peer, mapped16(peer), 16)
        e.ifindex = ifindex
        return [(self.sessions, k), (self.by_discr, self.by_discr.Key(discr)), (self.echo_peers, e)]

    def install(self, slot: int, *, local: Any, peer: Any, ifindex: int, multihop: bool, discr: int) -> None:
        for table, key in self._index_keys(
            local=local, peer=peer, ifindex=ifindex, multihop=multihop, discr=discr
        ):
            table[key] = ctypes.c_uint32(slot)

    def uninstall(
        self, slot: int, *, local: Any, peer: Any, ifindex: int, multihop: bool, discr: int
    ) -> None:
        self.slot_cfg[self.slot_cfg.Key(slot)] = self.slot_cfg.Leaf()
        for table, key in self._index_keys(
            local=local, peer=peer, ifindex=ifindex, multihop=multihop, discr=discr
        ):
            with contextlib.suppress(KeyError):
                del table[key]
        self._used.discard(slot)
        self._free.append(slot)

    def write_cfg(self, slot: int, cfg: dict[str, Any]) -> None:
        leaf = self.slot_cfg.Leaf()
        for name, value in cfg.items():
            if isinstance(value, bytes):
                ctypes.memmove(getattr(leaf, name), value, len(value))
            else:
                setattr(leaf, name, value)
        self.slot_cfg[self.slot_cfg.Key(slot)] = leaf

    def read_state(self, slot: int) -> Any:
        return self.slot_state[self.slot_state.Key(slot)]

    def adopt_slots(self, nslots: int, used: set[int]) -> None:
        """Take over the slot table of the engine we replace (its maps are ours now)."""
        self.nslots = nslots
        self._used = set(used)
        self._free = sorted(set(range(nslots)) - self._used, reverse=True)
        self._write_gate()

    def reset_tables(self) -> None:
        """Forget whatever sessions the pinned maps hold (state we could not adopt)."""
        for table in (self.sessions, self.by_discr, self.echo_peers):
            table.clear()
        for i in range(self.max_sessions):
            self.slot_cfg[self.slot_cfg.Key(i)] = self.slot_cfg.Leaf()
        self.nslots = 0
        self._write_gate()

    # -- --pin: owner record and handover blob ----------------------------------

    def set_owner(self, pid: int, state: int, blob_len: int, *, done_ns: int = 0) -> None:
        owner, slot = self.owner, self.abi.Owner
        assert owner is not None, "set_owner needs --pin"
        for idx, value in (
            (slot.DONE_NS, done_ns),
            (slot.BLOB_LEN, blob_len),
            (slot.STATE, state),
            (slot.PID, pid),
        ):
            owner[owner.Key(idx)] = ctypes.c_uint64(value)

    def write_handover(self, blob: bytes) -> None:
        table, size = self.handover, self.abi.handover_chunk
        assert table is not None, "write_handover needs --pin"
        if len(blob) > size * self.abi.handover_chunks:
            raise KernelError(f"handover state of {len(blob)} bytes does not fit the pinned map")
        for i in range(0, len(blob), size):
            leaf = table.Leaf()
            part = blob[i : i + size]
            ctypes.memmove(leaf.data, part, len(part))
            table[table.Key(i // size)] = leaf

    def read_handover(self, length: int) -> bytes:
        table, size = self.handover, self.abi.handover_chunk
        assert table is not None, "read_handover needs --pin"
        out = bytearray()
        for i in range(0, length, size):
            out += bytes(table[table.Key(i // size)].data)[: min(size, length - i)]
        return bytes(out)

    # -- gate, counters, events -----------------------------------------------

    def heartbeat(self, now_ns: int) -> None:
        self._heartbeat_ns = now_ns
        self._write_gate()

    def _write_gate(self) -> None:
        g = self.gate.Leaf()
        g.heartbeat_ns = getattr(self, "_heartbeat_ns", 0)
        g.deadman_ns = self.deadman_ns
        g.nslots = self.nslots
        g.spread_cpus = self.spread_cpus
        g.sweep_ns = sweep_period_ns(self.nslots)
        self.gate[self.gate.Key(0)] = g

    def counter_totals(self) -> dict[str, int]:
        out = {}
        for i, name in enumerate(self.counter_names):
            out[name] = int(sum(self.counters[self.counters.Key(i)]))
        return out

    def open_events(self, callback: Callable[[Any], None]) -> int:
        """Start delivering ring-buffer events; returns the fd to poll for readability."""
        table = self.bpf["events"]
        etype = self.event_type

        def cb(_ctx: Any, data: Any, _size: int) -> int:
            callback(ctypes.cast(data, ctypes.POINTER(etype)).contents)
            return 0

        table.open_ring_buffer(cb)
        self._events_open = True
        return table.map_fd

    def consume_events(self) -> None:
        if self._events_open:
            self.bpf.ring_buffer_consume()

    def prog_run_stats(self) -> tuple[int, int]:
        """(run_cnt, run_time_ns) of the XDP program (needs kernel.bpf_stats_enabled=1)."""
        # Raw os calls: this runs in a stats dump inside the loop, and the text
        # I/O stack was milliseconds of it with cold caches (after a CPU hog).
        cnt = ns = 0
        with contextlib.suppress(OSError):
            fd = os.open(f"/proc/self/fdinfo/{self.xdp_fn.fd}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                text = os.read(fd, 4096)
            finally:
                os.close(fd)
            for line in text.splitlines():
                key, _, value = line.partition(b":")
                if key == b"run_time_ns":
                    ns = int(value)
                elif key == b"run_cnt":
                    cnt = int(value)
        return cnt, ns
