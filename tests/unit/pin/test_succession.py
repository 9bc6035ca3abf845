"""``--succeed PID``: which process may be stopped, and that it is gone when ``retire`` returns.

Real processes (a child renamed ``xdp-bfd`` with prctl, as the engine renames
itself), real signals and pidfds: nothing here is faked.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from xdp_bfd.core.errors import EngineError
from xdp_bfd.pin.succession import Predecessor

# A stand-in engine: renames itself as cli.set_process_name does, says so, then
# waits; ``ignore`` makes it outlive SIGUSR2 (as an engine from before --succeed does), another
# name makes it some other process.
_FAKE_ENGINE = """
import ctypes, signal, sys, time
ctypes.CDLL(None).prctl(15, sys.argv[2].encode(), 0, 0, 0)
if sys.argv[1] == "ignore":
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(60)
"""


def _engine_like(mode: str = "obey", name: str = "xdp-bfd") -> subprocess.Popen:
    argv = [sys.executable, "-c", _FAKE_ENGINE, mode, name]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline() == "ready\n"
    return p


def test_a_process_that_is_not_an_engine_is_refused_and_left_alone():
    other = _engine_like(name="bfdd")
    try:
        with pytest.raises(EngineError, match=r"that process is 'bfdd', not an engine \(xdp-bfd\)"):
            Predecessor(other.pid)
        assert other.poll() is None  # not signalled
    finally:
        other.kill()
        other.wait()


def test_a_pid_that_does_not_exist_is_one_clear_error():
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: the pid names nothing now
    with pytest.raises(EngineError, match=rf"--succeed {gone.pid}: no such process"):
        Predecessor(gone.pid)


def test_retire_returns_once_the_engine_has_exited():
    p = _engine_like()
    try:
        ms = Predecessor(p.pid).retire(timeout_s=5)
        # Gone when retire returned: the exit status (SIGUSR2's default action) is there at once.
        assert p.poll() == -signal.SIGUSR2, p.returncode
        assert 0 <= ms < 5000
    finally:
        p.kill()
        p.wait()


def test_an_engine_that_ignores_sigusr2_is_killed_after_the_timeout():
    p = _engine_like("ignore")
    try:
        t0 = time.monotonic()
        Predecessor(p.pid).retire(timeout_s=0.3)
        assert p.poll() == -9, p.returncode
        assert time.monotonic() - t0 >= 0.3
    finally:
        p.kill()
        p.wait()
