"""BPF_PROG_TEST_RUN: one run of a loaded program on bytes of our choosing, through libbpf.

For a check that needs the program to see a map state that real traffic
only reaches by a race between CPUs (a stamp written on another CPU after
this one read its clock): the maps are written by hand, the program runs once
on the frame given, and its counters say which branch it took. Nothing is
sent: the run's skb or xdp_buff belongs to the call.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os


class _Opts(ctypes.Structure):
    # struct bpf_test_run_opts, libbpf 1.x (bpf.h).
    _fields_ = [
        ("sz", ctypes.c_size_t),
        ("data_in", ctypes.c_void_p),
        ("data_out", ctypes.c_void_p),
        ("data_size_in", ctypes.c_uint32),
        ("data_size_out", ctypes.c_uint32),
        ("ctx_in", ctypes.c_void_p),
        ("ctx_out", ctypes.c_void_p),
        ("ctx_size_in", ctypes.c_uint32),
        ("ctx_size_out", ctypes.c_uint32),
        ("retval", ctypes.c_uint32),
        ("repeat", ctypes.c_int),
        ("duration", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("cpu", ctypes.c_uint32),
        ("batch_size", ctypes.c_uint32),
    ]


_lib: ctypes.CDLL | None = None


def _libbpf() -> ctypes.CDLL:
    global _lib  # noqa: PLW0603  (loaded once)
    if _lib is None:
        # bcc's own libbcc_bpf links against it: present wherever the fast path runs.
        _lib = ctypes.CDLL(ctypes.util.find_library("bpf") or "libbpf.so.1", use_errno=True)
        _lib.bpf_prog_test_run_opts.argtypes = [ctypes.c_int, ctypes.POINTER(_Opts)]
        _lib.bpf_prog_test_run_opts.restype = ctypes.c_int
    return _lib


def run_once(prog_fd: int, data: bytes) -> int:
    """The program's return value for one run on ``data`` (a whole frame from its Ethernet header)."""
    buf = ctypes.create_string_buffer(data, len(data))
    # No data_out: what the program made of the frame is not read back, only its counters.
    opts = _Opts(
        sz=ctypes.sizeof(_Opts), data_in=ctypes.cast(buf, ctypes.c_void_p), data_size_in=len(data), repeat=1
    )
    rc = _libbpf().bpf_prog_test_run_opts(prog_fd, ctypes.byref(opts))
    if rc != 0:
        err = -rc if rc < 0 else ctypes.get_errno()
        raise OSError(err, f"BPF_PROG_TEST_RUN: {os.strerror(err)}")
    return int(opts.retval)
