"""The programs of one bcc module: compiled and verified, attached to interfaces, the sweep started.

Everything here is a ``bcc`` call, and this is the only module that imports
bcc: lazily, so that an engine without ``--kernel-tx`` (and every tool that
only reads the ABI) never loads it.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..core import signals
from .abi import Abi
from .errors import KernelError
from .gate import SWEEP_TICK_NS
from .layout import PinPaths, layout_cflags
from .sysinfo import driver_of, online_cpus

log = logging.getLogger("xdp_bfd")

XDP_FLAGS_SKB_MODE = 2  # generic
XDP_FLAGS_DRV_MODE = 4  # native
# --spread-pass: frames queued per CPU before the cpumap drops (the kernel's samples use 2048).
SPREAD_QSIZE = 2048
# Every hrtimer expiry passes it, on every CPU, idle or not (sweep.c).
SWEEP_TRACEPOINT = b"hrtimer_expire_entry"


@dataclass
class Attachment:
    ifname: str
    ifindex: int
    mode: str  # "native" or "generic"
    flags: int


class Program:
    """The XDP program, the chained sweep programs and the tick program, compiled from ``abi``'s sources."""

    def __init__(self, abi: Abi, *, max_sessions: int, pin: PinPaths | None) -> None:
        import bcc  # noqa: PLC0415  (bcc is only needed with --kernel-tx)

        self._bcc = bcc
        src = abi.header.parent
        nsweeps = abi.sweep_programs(max_sessions)
        text = "\n".join((src / name).read_text() for name in ("xdp_bfd.c", "sweep.c", "tick.c"))
        cflags = [f"-I{src}", "-Wno-unused-function", *layout_cflags(max_sessions)]
        if pin is not None:
            pin.maps.mkdir(exist_ok=True)
            cflags += pin.cflags()
        try:
            self.bpf = bcc.BPF(text=text, cflags=cflags)
            self.xdp_fn = self.bpf.load_func(b"xdp_bfd_rx", bcc.BPF.XDP)
            # Loaded (and so verified) now: a successor must fail before it asks anyone to leave.
            self.sweep_fn = self.bpf.load_func(b"bfd_sweep", bcc.BPF.RAW_TRACEPOINT)
            self.sweep_fns = [
                self.bpf.load_func(f"bfd_sweep_{i}".encode(), bcc.BPF.RAW_TRACEPOINT) for i in range(nsweeps)
            ]
            self.sweep_clock_fn = self.bpf.load_func(b"bfd_sweep_clock", bcc.BPF.PERF_EVENT)
            # The transmit clock's program (tick.c), attached to its loop by fastpath.loop.
            self.tick_fn = self.bpf.load_func(b"bfd_tick", bcc.BPF.SCHED_CLS)
            chain = self.bpf["sweep_chain"]
            for i, fn in enumerate(self.sweep_fns):
                chain[ctypes.c_int(i)] = ctypes.c_int(fn.fd)
            self.watch_fns = [
                self.bpf.load_func(f"bfd_tick_watch_{i}".encode(), bcc.BPF.RAW_TRACEPOINT)
                for i in range(abi.tick_watch_programs(max_sessions))
            ]
            chain = self.bpf["tick_watch_chain"]
            for i, fn in enumerate(self.watch_fns):
                chain[ctypes.c_int(i)] = ctypes.c_int(fn.fd)
        except Exception as e:
            raise KernelError(f"cannot load the XDP program: {e}") from None
        self.attached: list[Attachment] = []
        self.swap: Swap | None = None

    # -- attach ---------------------------------------------------------------

    def interfaces(self) -> dict[str, int]:
        """ifname -> ifindex of every interface the program is attached to, or being swapped onto."""
        swapping = self.swap.ifindexes if self.swap is not None else {}
        return {**swapping, **{a.ifname: a.ifindex for a in self.attached}}

    def attach(self, ifname: str, mode: str, *, replace: bool = False) -> Attachment:
        """``replace``: swap our program in over one already there (a takeover), no gap."""
        ifindex = _ifindex(ifname)
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
                self._bcc.BPF.remove_xdp(ifname, flags)

    def fill_cpumap(self, cpus: list[int], qsize: int = SPREAD_QSIZE) -> None:
        """--spread-pass: one cpumap entry per CPU that takes traffic, ``qsize`` frames queued on each."""
        cpumap, slots = self.bpf["spread_map"], self.bpf["spread_cpu"]
        try:
            for i, cpu in enumerate(cpus):
                cpumap[cpumap.Key(cpu)] = cpumap.Leaf(qsize)
                slots[slots.Key(i)] = slots.Leaf(cpu)
        except Exception as e:
            raise KernelError(f"cannot fill the cpumap: {e}") from None

    def start_sweep(self) -> None:
        """The sweep on every hrtimer expiry, and a 0.5 ms timer on every CPU, phases spread over the period.

        The timer is a cpu-clock perf event that excludes idle: its own program
        does not run on an idle CPU (sweep.c), but its timer does fire there,
        and every expiry passes the tracepoint the sweep hangs on. A cpu-clock
        timer keeps the phase it started with, so started one after another
        the CPUs tick close together; spread, a silent peer waits for the next
        tick up to a period divided by the CPUs, at no extra cost.
        """
        from bcc.perf import Perf  # noqa: PLC0415  (bcc is only needed with --kernel-tx)

        cpus = online_cpus()
        key = (self._bcc.PerfType.SOFTWARE, self._bcc.PerfSWConfig.CPU_CLOCK)
        fds: dict[int, int] = {}
        start = time.monotonic_ns()
        try:
            self.bpf.attach_raw_tracepoint(tp=SWEEP_TRACEPOINT, fn_name=b"bfd_sweep")
            for i, cpu in enumerate(cpus):
                wait_ns = start + i * SWEEP_TICK_NS // len(cpus) - time.monotonic_ns()
                if wait_ns > 0:
                    time.sleep(wait_ns / 1e9)
                attr = Perf.perf_event_attr()
                attr.type, attr.config = key
                attr.sample_period = SWEEP_TICK_NS
                attr.exclude_idle = 1
                self.bpf.attach_perf_event_raw(attr=attr, fn_name=b"bfd_sweep_clock", cpu=cpu)
                # bcc keeps one CPU's fds per (type, config): gather them so close() detaches all.
                fds |= self.bpf.open_perf_events[key]
        except Exception as e:
            raise KernelError(f"cannot start the detection sweep: {e}") from None
        finally:
            if fds:
                self.bpf.open_perf_events[key] = fds

    def close(self) -> None:
        if self.swap is not None:
            self.swap.wait(raise_error=False)  # what it attached is detached with the rest
        for att in self.attached:
            with contextlib.suppress(Exception):
                self._bcc.BPF.remove_xdp(att.ifname, att.flags)
            log.info("kernel-tx: XDP detached from %s", att.ifname)
        self.attached.clear()
        with contextlib.suppress(Exception):
            self.bpf.cleanup()

    # -- stats ----------------------------------------------------------------

    def run_stats(self) -> tuple[int, int]:
        """(run_cnt, run_time_ns) of the XDP program (needs kernel.bpf_stats_enabled=1)."""
        # Raw os calls: this runs in a stats dump inside the loop, and the text
        # I/O stack costs far more than they do with cold caches (after a CPU hog).
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


def _ifindex(ifname: str) -> int:
    try:
        return socket.if_nametoindex(ifname)
    except OSError:
        raise KernelError(f"--kernel-tx: no interface {ifname}") from None


class Swap:
    """A takeover's sweep started and program swapped in over the running one, in a thread of its own.

    Both wait in the kernel for what the old engine's exit left (RCU grace
    periods), whichever of the two comes first, and use almost no CPU while
    they wait (docs/benchmarks.md, session 34). On the way from the request to
    serving, that wait now overlaps the sessions' restore, which depends on
    neither: the maps are the same (the layout was checked before the
    request), and the programs only read what the restore writes. Made before
    the thread starts: the interface indexes, so an interface that is gone
    fails at once, and the Offload knows them while the swap is under way.
    """

    def __init__(self, program: Program, ifnames: Sequence[str], mode: str) -> None:
        self.program, self.mode = program, mode
        self.ifindexes = {ifname: _ifindex(ifname) for ifname in ifnames}
        self.error: KernelError | None = None
        self.thread = threading.Thread(target=self._run, name="xdp-swap", daemon=True)
        program.swap = self

    def start(self) -> None:
        # Started with the caught signals blocked, a mask the thread keeps: every
        # signal goes to the loop's thread, and none interrupts a netlink call here.
        with signals.held():
            self.thread.start()

    def _run(self) -> None:
        try:
            self.program.start_sweep()
            for ifname in self.ifindexes:
                self.program.attach(ifname, self.mode, replace=True)
        except KernelError as e:
            self.error = e
        except Exception as e:  # anything else: reported by wait(), in the loop's thread
            self.error = KernelError(f"cannot attach XDP: {e}")

    def wait(self, *, raise_error: bool = True) -> None:
        """Until every interface has the program; its error, if one failed."""
        if self.thread.ident is not None:  # started
            self.thread.join()
        if raise_error and self.error is not None:
            raise self.error


__all__ = ["SPREAD_QSIZE", "XDP_FLAGS_DRV_MODE", "XDP_FLAGS_SKB_MODE", "Attachment", "Program", "Swap"]
