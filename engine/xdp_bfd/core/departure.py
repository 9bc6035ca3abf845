"""An exit whose address space is torn down after the process is gone, by a child that shares it.

A process's exit frees every page it has mapped before its parent, or
anyone holding a pidfd of it, learns that it is gone: for the engine, with
bcc's libraries relocated and its heap, about 5 ms of the kernel's time,
which a ``--pin`` successor waits on (docs/benchmarks.md, "A takeover's
exit"). A child made with ``CLONE_VM`` shares the address space, so the
exit only drops a reference to it; the child sleeps :data:`LINGER_S` (any
signal ends it sooner) and frees it when it exits in turn.

What the child must not have: the engine's descriptors (it would hold the
sweep's and the sockets' open, which a successor waits to see released, so
every descriptor is closed first and the child gets an empty table) and a
real-time class (its teardown would then compete with the successor's
restore: the engine sets reset-on-fork, or makes no child). It runs nothing
but libc's ``sleep`` on a stack of its own; its exit status is nobody's
business, and whoever reaps the engine's orphans (the service manager)
reaps it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
from typing import NoReturn

CLONE_VM = 0x100
# Past a successor's restore of a large table, so that the teardown's CPU
# falls after it; a service stop's signal ends it at once.
LINGER_S = 1
_STACK_BYTES = 64 << 10
_RT = (os.SCHED_FIFO, os.SCHED_RR)


def _children_not_realtime() -> bool:
    """Whether a child of this thread starts outside the real-time classes (sets reset-on-fork if needed)."""
    try:
        policy = os.sched_getscheduler(0)
        if policy & os.SCHED_RESET_ON_FORK or policy not in _RT:
            return True  # a reset child, or one that inherits a fair class (deadline asks for the flag)
        # Same class and priority with the flag added: what an unprivileged thread may do.
        os.sched_setscheduler(0, policy | os.SCHED_RESET_ON_FORK, os.sched_getparam(0))
    except OSError:
        return False
    return True


def _close_all() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    top = hard if 0 < hard < (1 << 20) else 1 << 20
    os.closerange(0, top)


def _share_address_space(linger_s: int) -> int:
    """A child in this address space, asleep ``linger_s`` seconds: its pid, or -1 (errno in ctypes)."""
    libc = ctypes.CDLL(None, use_errno=True)
    clone = libc.clone
    clone.restype = ctypes.c_int
    clone.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    # Never freed: this process does not come back to Python after the call, and the
    # child leaves it only by exiting.
    stack = ctypes.create_string_buffer(_STACK_BYTES)
    _share_address_space.stack = stack  # type: ignore[attr-defined]
    top = (ctypes.addressof(stack) + _STACK_BYTES) & ~15
    # clone() calls fn(arg); sleep() takes its one integer argument where a pointer
    # argument goes on Linux's ABIs (x86-64, arm64: the first argument register).
    fn = ctypes.cast(libc.sleep, ctypes.c_void_p).value
    return int(clone(fn, top, CLONE_VM | signal.SIGCHLD, linger_s))


def exit_now(status: int, linger_s: int = LINGER_S) -> NoReturn:
    """Exit ``status`` at once, closing every descriptor, the address space left to a sleeping child.

    Without a child (``linger_s`` 0, a real-time class that cannot be reset
    for it, or clone refused) it is a plain ``os._exit``, the teardown then
    part of the exit. Log handlers must have been flushed: stdout and stderr
    are closed too.
    """
    child_ok = linger_s > 0 and _children_not_realtime()
    with contextlib.suppress(OSError):
        _close_all()
    if child_ok:
        _share_address_space(linger_s)
    os._exit(status)


__all__ = ["LINGER_S", "exit_now"]
