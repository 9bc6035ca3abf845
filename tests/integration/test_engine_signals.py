"""Signals that come while the engine loads its programs wait for the load, then are acted on.

The verifier gives a program up (EAGAIN) whenever a signal is pending for the
loading thread, and libbpf retries a few times only: before the engine held
its caught signals during the load, stats requests in quick succession while
it started made it exit 1 ("cannot load the XDP program: ... Resource
temporarily unavailable").
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from harness.wait import wait_until
from xdp_bfd.stats.locate import sigusr1_caught

STORM_INTERVAL_S = 0.001
STORM_MAX = 200_000  # a bound on the loop besides its deadline
STORM_DEADLINE_S = 120  # two compiles at once on a busy box take under a minute


def test_stats_requests_during_the_load_neither_fail_it_nor_get_lost(topo, engine_factory, tmp_path):
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    sessions = tmp_path / "sessions.yml"
    # Nobody answers on p: the session stays Down, which is all a start needs.
    sessions.write_text(f"- {{local: '{a.ip4}', peer: '{b.ip4}', interface: veth-d}}\n")
    eng = engine_factory(d, ["--sessions", str(sessions), "--kernel-tx", "veth-d", "--xdp-mode", "generic"])

    def catching() -> bool:
        assert eng.proc is not None
        if eng.proc.poll() is not None:
            raise AssertionError(f"engine exited ({eng.proc.returncode}) early:\n{eng.log()}")
        # Before it has a handler, SIGUSR1 would kill the engine.
        return bool(sigusr1_caught(Path(f"/proc/{eng.pid}/status").read_text()))

    wait_until(catching, timeout=30, interval=0.001, what="the engine catching SIGUSR1")
    sent = before_attach = 0
    deadline = time.monotonic() + STORM_DEADLINE_S
    while "bfd: serving" not in (text := eng.log()):
        assert eng.proc is not None
        if eng.proc.poll() is not None:
            raise AssertionError(f"engine exited ({eng.proc.returncode}) under {sent} SIGUSR1:\n{text}")
        assert time.monotonic() < deadline and sent < STORM_MAX, f"not serving after {sent} SIGUSR1"
        eng.signal(signal.SIGUSR1)
        sent += 1
        before_attach += "kernel-tx: XDP attached" not in text
        time.sleep(STORM_INTERVAL_S)
    # The witness that the storm covered the load: the compile and load come before the attach.
    assert before_attach >= 100, (sent, before_attach)
    assert "temporarily unavailable" not in eng.log()
    # Held, not lost: they are answered once the loop runs (no dump is written unasked).
    wait_until(eng.stats_path.exists, timeout=30, what="a stats file after the held requests")
