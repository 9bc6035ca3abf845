"""core.departure: an exit that leaves its address space to a sleeping child.

Real processes: a helper made a child subreaper forks the "engine", which
writes a token in its memory and leaves by ``exit_now``; the helper then
finds the orphan that took the address space over (re-parented to it), reads
the token through the orphan's memory, and looks at its descriptors and class.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import time

import pytest

from xdp_bfd.core import departure

PR_SET_CHILD_SUBREAPER = 36
KCMP_VM = 1
SYS_KCMP = {"x86_64": 312, "aarch64": 272}.get(os.uname().machine)
WAIT_S = 5.0  # every wait below ends on its condition long before this


def _children(of: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == of:
            out.append(int(name))
    return out


def _engine(report: int, linger_s: int, realtime: bool) -> None:  # pragma: no cover (a child)
    token = ctypes.create_string_buffer(b"departure-token-" + os.urandom(8).hex().encode())
    if realtime:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))  # no reset-on-fork: exit_now sets it
    os.write(report, json.dumps([ctypes.addressof(token), token.value.decode()]).encode())
    departure.exit_now(75, linger_s)


def _helper(linger_s: int, realtime: bool) -> dict:  # pragma: no cover (a child)
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    held, kept = socket.socketpair()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        kept.close()
        os.close(r)
        _engine(w, linger_s, realtime)
    held.close()
    os.close(w)
    address, token = json.loads(os.read(r, 4096))
    pidfd = os.pidfd_open(pid)
    gone = bool(select.select([pidfd], [], [], WAIT_S)[0])
    _, status = os.waitpid(pid, 0)
    kept.settimeout(WAIT_S)
    try:
        closed = kept.recv(1) == b""  # EOF: no process holds the engine's end any more
    except TimeoutError:
        closed = False
    out: dict = {"gone": gone, "status": os.waitstatus_to_exitcode(status), "closed": closed, "orphans": []}
    for orphan in _children(os.getpid()):
        with open(f"/proc/{orphan}/mem", "rb") as mem:
            mem.seek(address)
            seen = mem.read(len(token)).decode(errors="replace")
        info = {
            "token": seen == token,
            "fds": os.listdir(f"/proc/{orphan}/fd"),
            "policy": os.sched_getscheduler(orphan) & ~os.SCHED_RESET_ON_FORK,
        }
        t0 = time.monotonic()
        os.kill(orphan, signal.SIGTERM)
        os.waitpid(orphan, 0)
        info["ended_by_signal_s"] = time.monotonic() - t0
        out["orphans"].append(info)
    return out


def _scenario(linger_s: int, realtime: bool = False) -> dict:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the helper)
        code = 1
        try:
            os.close(r)
            os.write(w, json.dumps(_helper(linger_s, realtime)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    try:
        assert select.select([r], [], [], 4 * WAIT_S)[0], "the helper said nothing"
        data = os.read(r, 1 << 16)
    finally:
        os.close(r)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, data
    return json.loads(data)


pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="reads another process's memory (root)")


def test_the_address_space_outlives_the_exit_in_a_child_with_no_descriptors():
    out = _scenario(linger_s=30)
    assert out["gone"] and out["status"] == 75
    assert out["closed"], "a descriptor of the engine's survived its exit"
    [orphan] = out["orphans"]
    assert orphan["token"], "the child does not hold the engine's memory"
    assert orphan["fds"] == []
    # A signal ends the sleep: a service stop does not wait out the linger.
    assert orphan["ended_by_signal_s"] < WAIT_S


def test_a_real_time_engine_leaves_a_child_outside_the_real_time_classes():
    out = _scenario(linger_s=30, realtime=True)
    [orphan] = out["orphans"]
    assert orphan["token"]
    assert orphan["policy"] == os.SCHED_OTHER


def test_the_child_shares_the_address_space_rather_than_a_copy():
    """kcmp(2) on the engine and its child while both live: one address space (a fork's copy differs)."""
    if SYS_KCMP is None:
        pytest.skip(f"kcmp's number on {os.uname().machine} is not known here")
    libc = ctypes.CDLL(None, use_errno=True)
    r, w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the engine)
        child = departure._share_address_space(30)
        os.write(w, str(child).encode())
        os.read(go_r, 1)
        os._exit(0)
    os.close(w)
    try:
        assert select.select([r], [], [], WAIT_S)[0]
        child = int(os.read(r, 64))
        assert child > 0
        same = libc.syscall(SYS_KCMP, pid, child, KCMP_VM, 0, 0)
        if same < 0:
            pytest.skip(f"kcmp: {os.strerror(ctypes.get_errno())}")
        assert same == 0, "the child's address space is not the engine's"
    finally:
        os.write(go_w, b"x")
        os.waitpid(pid, 0)
        for fd in (r, go_r, go_w):
            os.close(fd)
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGTERM)  # re-parented to init, which reaps it


def test_no_linger_is_a_plain_exit():
    out = _scenario(linger_s=0)
    assert out["gone"] and out["status"] == 75 and out["closed"]
    assert out["orphans"] == []
