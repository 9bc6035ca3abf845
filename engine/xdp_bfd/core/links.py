"""Interface names and indexes for the loop, remembered for a second.

The loop needs them per packet in userspace (the receive path check, the
kernel config written after each service); the kernel lookup behind
``socket.if_indextoname`` is a socket, an ioctl and a close every time, and
under a deadline reservation three syscalls per packet are budget the timers
need. An interface deleted and recreated under the same name gets a new
index, so nothing is trusted for longer than ``REFRESH_US``: a recreated
link is picked up within a second, as the sessions' detection notices it
anyway.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import TypeVar

from .clock import now_us

REFRESH_US = 1_000_000

K = TypeVar("K")
V = TypeVar("V")

_names: dict[int, tuple[str | None, int]] = {}  # ifindex -> (name or None, when looked up)
_indexes: dict[str, tuple[int, int]] = {}  # name -> (ifindex or 0, when looked up)


def _remembered(cache: dict[K, tuple[V, int]], key: K, lookup: Callable[[K], V], missing: V) -> V:
    """``lookup(key)`` (``missing`` when the kernel has none), at most once per REFRESH_US."""
    now = now_us()
    hit = cache.get(key)
    if hit is not None and now - hit[1] < REFRESH_US:
        return hit[0]
    try:
        value = lookup(key)
    except OSError:
        value = missing
    cache[key] = (value, now)
    return value


def name_of(ifindex: int) -> str | None:
    """The interface's name, None for 0 or an index the kernel does not know."""
    if not ifindex:
        return None
    return _remembered(_names, ifindex, socket.if_indextoname, None)


def index_of(name: str) -> int:
    """The interface's index, 0 when there is none by that name."""
    return _remembered(_indexes, name, socket.if_nametoindex, 0)
