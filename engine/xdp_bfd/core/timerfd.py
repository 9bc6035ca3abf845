"""A CLOCK_MONOTONIC timerfd: a wake-up at a deadline finer than epoll's millisecond.

epoll_wait counts its timeout in milliseconds, and Python rounds a timeout up
to the next one, so a loop that waits on epoll alone wakes up to 1 ms after each
deadline. A timerfd in the same epoll set fires at the deadline to the
nanosecond and input still wakes the loop at once. Python 3.11 has no
``os.timerfd_create`` (3.13 has), hence libc through ctypes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

CLOCK_MONOTONIC = 1
TFD_NONBLOCK = os.O_NONBLOCK
TFD_CLOEXEC = os.O_CLOEXEC


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _ITimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_libc = ctypes.CDLL(None, use_errno=True)
_create = _libc.timerfd_create
_create.argtypes = [ctypes.c_int, ctypes.c_int]
_create.restype = ctypes.c_int
_settime = _libc.timerfd_settime
_settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_ITimerspec), ctypes.c_void_p]
_settime.restype = ctypes.c_int


class TimerFd:
    """One-shot, relative: ``arm(ns)`` makes the fd readable ``ns`` from now; ``arm(0)`` disarms."""

    def __init__(self) -> None:
        fd = _create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self.fd = fd
        self.armed = False
        self._spec = _ITimerspec()

    def fileno(self) -> int:
        return self.fd

    def arm(self, ns: int) -> None:
        if ns <= 0 and not self.armed:
            return  # nothing to disarm: no syscall
        sec, nsec = divmod(max(0, ns), 1_000_000_000)
        self._spec.it_value.tv_sec, self._spec.it_value.tv_nsec = sec, nsec
        if _settime(self.fd, 0, ctypes.byref(self._spec), None) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")
        self.armed = ns > 0

    def expired(self, _now: int = 0) -> None:
        """Take the expiry off the fd (a selector callback)."""
        self.armed = False
        # Nothing to read when it was disarmed or re-armed between the wake-up and this read.
        with contextlib.suppress(BlockingIOError):
            os.read(self.fd, 8)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
