"""Raw bpf(2) and statfs(2): what ``--pin`` reads before anything is compiled, without bcc.

A successor decides how to start (take over, adopt, start fresh) from the
owner record another build pinned, before it compiles its own programs: so
the map is opened by path and read with the bare system call.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from pathlib import Path

BPF_FS_MAGIC = 0xCAFE4A11
_BPF_NR = {"x86_64": 321, "aarch64": 280}
_BPF_MAP_LOOKUP_ELEM, _BPF_OBJ_GET = 1, 7
_ATTR_SIZE = 128  # union bpf_attr, as much of it as these commands use, zero-padded

_libc = ctypes.CDLL(None, use_errno=True)


def _errno_error() -> OSError:
    err = ctypes.get_errno()
    return OSError(err, os.strerror(err))


def is_bpffs(path: Path) -> bool:
    """Whether ``path`` is on a bpf filesystem (OSError when it cannot be examined)."""
    buf = ctypes.create_string_buffer(128)  # struct statfs; f_type comes first
    if _libc.statfs(str(path).encode(), buf) != 0:
        raise _errno_error()
    return struct.unpack_from("=q", buf.raw)[0] & 0xFFFFFFFF == BPF_FS_MAGIC


def _bpf(cmd: int, attr: bytes) -> int:
    buf = ctypes.create_string_buffer(attr, _ATTR_SIZE)
    nr = _BPF_NR.get(platform.machine())
    if nr is None:
        raise OSError(errno.ENOSYS, "bpf(2) is not wired up for this machine")
    ret = _libc.syscall(nr, cmd, buf, _ATTR_SIZE)
    if ret < 0:
        raise _errno_error()
    return ret


def open_pinned(path: Path) -> int:
    """BPF_OBJ_GET: a descriptor for the object pinned at ``path`` (the caller closes it)."""
    name = ctypes.create_string_buffer(str(path).encode())
    return _bpf(_BPF_OBJ_GET, struct.pack("=QII", ctypes.addressof(name), 0, 0))


def lookup_u64(fd: int, key: int) -> int:
    """BPF_MAP_LOOKUP_ELEM on an array of u64: the value at index ``key``."""
    k, value = ctypes.c_uint32(key), ctypes.c_uint64(0)
    _bpf(_BPF_MAP_LOOKUP_ELEM, struct.pack("=I4xQQQ", fd, ctypes.addressof(k), ctypes.addressof(value), 0))
    return value.value


__all__ = ["BPF_FS_MAGIC", "is_bpffs", "lookup_u64", "open_pinned"]
