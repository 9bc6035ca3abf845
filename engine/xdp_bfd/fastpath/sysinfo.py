"""What the fast path asks of the host it runs on: an interface's driver, the online CPUs."""

from __future__ import annotations

import ctypes
import fcntl
import socket
import struct
from pathlib import Path

_SIOCETHTOOL = 0x8946
_ETHTOOL_GDRVINFO = 3
_DRVINFO_SIZE = 196  # struct ethtool_drvinfo


def driver_of(ifname: str) -> str:
    """The kernel driver behind an interface (ETHTOOL_GDRVINFO), '' if it has none."""
    info = ctypes.create_string_buffer(struct.pack("I", _ETHTOOL_GDRVINFO), _DRVINFO_SIZE)
    ifreq = struct.pack("16sP", ifname.encode()[:15], ctypes.addressof(info)).ljust(40, b"\0")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            fcntl.ioctl(s.fileno(), _SIOCETHTOOL, ifreq)
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


__all__ = ["driver_of", "online_cpus"]
