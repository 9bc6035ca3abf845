"""Scheduling the engine's loop: a SCHED_DEADLINE reservation, taken by the engine itself.

Deadline tasks run ahead of every SCHED_FIFO priority, so no real-time load
starves the loop however high it runs (operator manual, "Scheduling"). systemd
cannot set SCHED_DEADLINE, and Python has no ``os.sched_setattr``: this calls
the system calls through ctypes. The reservation is taken after bcc has
compiled (compiling under a real-time class trips RT throttling) and with
reset-on-fork set, because a deadline task may not fork otherwise.

The reservation also asks for bandwidth reclaiming (SCHED_FLAG_RECLAIM,
GRUB): without it the kernel throttles a deadline task that used its runtime
until the next period even on an idle CPU, so any burst of Python longer than
the runtime (a stats dump, a reload) is stretched over several periods; the
first case found was a stats dump that held the loop long enough for
sessions whose packets userspace sends to expire at the peer
(test_engine_sched_stress.py, docs/benchmarks.md). With reclaiming the task may also run on the
deadline bandwidth nobody reserved (up to kernel.sched_rt_runtime_us), still
ahead of every SCHED_FIFO task; the loop does not rely on it for more than
slack (bursts are also cut into slices, core/document.py). Kernels without
it (before 4.13) get the plain reservation and a warning.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import platform
import resource
import struct
from collections.abc import Iterator

log = logging.getLogger("xdp_bfd")

SCHED_DEADLINE = 6
SCHED_FLAG_RESET_ON_FORK = 0x01
SCHED_FLAG_RECLAIM = 0x02
CAP_SYS_NICE = 23
_SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}  # sched_setattr, sched_getattr
_ATTR = struct.Struct("=IIQiIQQQ")  # struct sched_attr up to sched_period (48 bytes, SCHED_ATTR_SIZE_VER0)

_libc = ctypes.CDLL(None, use_errno=True)


def _nr(index: int) -> int:
    try:
        return _SYSCALLS[platform.machine()][index]
    except KeyError:
        raise OSError(errno.ENOSYS, f"sched_setattr is not wired up for {platform.machine()}") from None


def set_deadline(runtime_us: int, period_us: int, *, reclaim: bool = True) -> bool:
    """Reserve ``runtime_us`` of CPU in every ``period_us`` for the calling thread (raises OSError).

    Returns whether the kernel took the reclaiming flag too.
    """
    ns = (runtime_us * 1000, period_us * 1000, period_us * 1000)  # runtime, deadline, period
    flags = SCHED_FLAG_RESET_ON_FORK | (SCHED_FLAG_RECLAIM if reclaim else 0)
    attr = ctypes.create_string_buffer(_ATTR.pack(_ATTR.size, SCHED_DEADLINE, flags, 0, 0, *ns))
    if _libc.syscall(_nr(0), 0, attr, 0) != 0:
        err = ctypes.get_errno()
        if err == errno.EINVAL and reclaim:
            return set_deadline(runtime_us, period_us, reclaim=False)
        raise OSError(err, os.strerror(err))
    return reclaim


def get_flags(pid: int = 0) -> int:
    """A thread's sched_flags, the caller's by default (0 when it cannot be read)."""
    buf = ctypes.create_string_buffer(_ATTR.size)
    if _libc.syscall(_nr(1), pid, buf, _ATTR.size, 0) != 0:
        return 0
    return _ATTR.unpack(buf.raw)[2]


def get_deadline() -> tuple[int, int] | None:
    """(runtime_us, period_us) when the calling thread runs under SCHED_DEADLINE."""
    buf = ctypes.create_string_buffer(_ATTR.size)
    if _libc.syscall(_nr(1), 0, buf, _ATTR.size, 0) != 0:
        return None
    _size, policy, _flags, _nice, _prio, runtime, _deadline, period = _ATTR.unpack(buf.raw)
    return (runtime // 1000, period // 1000) if policy == SCHED_DEADLINE else None


def leave_deadline() -> tuple[int, int] | None:
    """Leave a SCHED_DEADLINE reservation for SCHED_OTHER: the reservation left, or None.

    For work that has to finish as soon as it can and serves nothing while it
    runs (a ``--pin`` handover: the state's encoding and the exit). Under the
    reservation it got 1 ms of CPU in 10 and took several times as long
    (docs/benchmarks.md). A lower class needs no CAP_SYS_NICE; the
    reset-on-fork flag is kept, as an unprivileged thread must. There is no
    way back without CAP_SYS_NICE, which the engine gave up.
    """
    held = get_deadline()
    if held is None:
        return None
    try:
        os.sched_setscheduler(0, os.SCHED_OTHER | os.SCHED_RESET_ON_FORK, os.sched_param(0))
    except OSError as e:
        log.warning("sched: cannot leave the SCHED_DEADLINE reservation: %s", e.strerror or e)
        return None
    return held


def why_refused(err: int) -> str:
    return {
        errno.EBUSY: "admission control refused it (deadline bandwidth full, see kernel.sched_rt_runtime_us)",
        errno.EPERM: "not permitted (needs CAP_SYS_NICE, and no CPU affinity narrower than its root domain)",
        errno.EINVAL: "the kernel rejected the parameters",
        errno.ENOSYS: "not supported here",
    }.get(err, os.strerror(err))


def drop_cap_sys_nice() -> None:
    """Give up CAP_SYS_NICE once the reservation is held: nothing later needs it."""
    pr_capbset_drop = 24
    _libc.prctl(pr_capbset_drop, CAP_SYS_NICE, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()  # two of {effective, permitted, inheritable}
    if _libc.capget(header, data) != 0:
        return
    for i in range(3):
        data[i] &= ~(1 << CAP_SYS_NICE)
    _libc.capset(header, data)


def reserve(spec: tuple[int, int] | None) -> tuple[int, int, bool] | None:
    """Apply ``--sched-deadline`` if given; on refusal say why and keep the class we have.

    Returns the runtime and period reserved, in microseconds, and whether the
    kernel reclaims idle bandwidth for us; None when nothing was reserved.
    """
    if spec is None:
        return None
    runtime, period = spec
    try:
        reclaiming = set_deadline(runtime, period)
    except OSError as e:
        current = describe()
        log.warning("sched: cannot reserve SCHED_DEADLINE %d/%dus: %s; staying at %s",
                    runtime, period, why_refused(e.errno or 0), current)  # fmt: skip
        return None
    drop_cap_sys_nice()
    log.info("sched: SCHED_DEADLINE %d/%dus reserved (CAP_SYS_NICE dropped)", runtime, period)
    if not reclaiming:
        log.warning("sched: this kernel cannot reclaim idle bandwidth (SCHED_FLAG_RECLAIM); "
                    "work beyond %dus in a period waits for the next one", runtime)  # fmt: skip
    return runtime, period, reclaiming


def describe() -> str:
    """The loop's class as the stats report it: ``other``, ``fifo 60``, ``deadline 1000/10000``."""
    dl = get_deadline()
    if dl is not None:
        return f"deadline {dl[0]}/{dl[1]}"
    policy = os.sched_getscheduler(0)
    name = {0: "other", 1: "fifo", 2: "rr", 3: "batch", 5: "idle"}.get(policy, str(policy))
    if name in ("fifo", "rr"):
        return f"{name} {os.sched_getparam(0).sched_priority}"
    return name


def _may_raise_to(priority: int) -> bool:
    """Whether this thread could return to a real-time ``priority`` after leaving it."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        with open("/proc/thread-self/status") as f:
            eff = next(line for line in f if line.startswith("CapEff:"))
        if int(eff.split()[1], 16) & (1 << CAP_SYS_NICE):
            return True
    soft, _hard = resource.getrlimit(resource.RLIMIT_RTPRIO)
    return soft == resource.RLIM_INFINITY or soft >= priority


@contextlib.contextmanager
def outside_real_time(what: str) -> Iterator[None]:
    """Run ``what`` (the compile) at SCHED_OTHER when started at SCHED_FIFO or RR, then return.

    systemd starts the unit at FIFO (CPUSchedulingPolicy=). A compile there
    holds a CPU ahead of every ordinary task for seconds, and ahead of the
    engine it replaces, which runs at the same priority; and where real-time
    time is budgeted (RT throttling, a container's cpu.rt_runtime_us) it runs
    at that budget: 100 ms a second stretched compiles to 50-90 s in molecule.
    Left as it is when the thread could not come back (no CAP_SYS_NICE, no
    RLIMIT_RTPRIO): slow is better than losing the class.
    """
    policy = os.sched_getscheduler(0)
    if policy not in (os.SCHED_FIFO, os.SCHED_RR):
        yield
        return
    param = os.sched_getparam(0)
    if not _may_raise_to(param.sched_priority):
        log.info("sched: %s at %s (could not come back from SCHED_OTHER)", what, describe())
        yield
        return
    was = describe()
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    try:
        yield
    finally:
        try:
            os.sched_setscheduler(0, policy, param)
            log.info("sched: %s at SCHED_OTHER, back at %s", what, was)
        except OSError as e:
            log.warning("sched: cannot return to %s after %s: %s; running at SCHED_OTHER", was, what, e)
