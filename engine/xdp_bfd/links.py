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

from .clock import now_us

REFRESH_US = 1_000_000

_names: dict[int, tuple[str | None, int]] = {}  # ifindex -> (name or None, when looked up)
_indexes: dict[str, tuple[int, int]] = {}  # name -> (ifindex or 0, when looked up)


def name_of(ifindex: int) -> str | None:
    """The interface's name, None for 0 or an index the kernel does not know."""
    if not ifindex:
        return None
    now = now_us()
    hit = _names.get(ifindex)
    if hit is not None and now - hit[1] < REFRESH_US:
        return hit[0]
    try:
        name: str | None = socket.if_indextoname(ifindex)
    except OSError:
        name = None
    _names[ifindex] = (name, now)
    return name


def index_of(name: str) -> int:
    """The interface's index, 0 when there is none by that name."""
    now = now_us()
    hit = _indexes.get(name)
    if hit is not None and now - hit[1] < REFRESH_US:
        return hit[0]
    try:
        ifindex = socket.if_nametoindex(name)
    except OSError:
        ifindex = 0
    _indexes[name] = (ifindex, now)
    return ifindex
