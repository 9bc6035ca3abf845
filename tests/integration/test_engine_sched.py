"""--sched-deadline: the engine takes the reservation itself, or says why not."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from harness.wait import wait_until
from xdp_bfd.core import sched


def _policy(pid: int) -> int:
    return int(re.search(r"^policy\s*:\s*(\d+)", Path(f"/proc/{pid}/sched").read_text(), re.M).group(1))


def _cap_eff(pid: int) -> int:
    return int(
        re.search(r"^CapEff:\s*([0-9a-f]+)", Path(f"/proc/{pid}/status").read_text(), re.M).group(1), 16
    )


def _session(topo):
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    return d, [str(a.ip4), str(b.ip4)]


def test_deadline_reserved_and_cap_sys_nice_dropped(topo, engine_factory):
    d, pair = _session(topo)
    eng = engine_factory(d, [*pair, "--sched-deadline", "1000/10000"])
    eng.wait_log("sched: SCHED_DEADLINE 1000/10000us reserved")
    assert _policy(eng.pid) == 6
    # Reclaiming, so a burst longer than the runtime is not stretched over
    # ten periods (sched.py; test_engine_sched_stress.py shows the flaps without it).
    assert sched.get_flags(eng.pid) & sched.SCHED_FLAG_RECLAIM
    assert eng.stats()["sched"] == "deadline 1000/10000"
    assert not _cap_eff(eng.pid) & (1 << 23), "CAP_SYS_NICE still effective"


def test_refusal_is_one_line_and_the_engine_keeps_serving(topo, engine_factory):
    d, pair = _session(topo)
    # Root without CAP_SYS_NICE: the kernel refuses SCHED_DEADLINE with EPERM.
    no_nice = ["setpriv", "--bounding-set=-sys_nice", "--inh-caps=-sys_nice"]
    eng = engine_factory(d, [*pair, "--sched-deadline", "1000/10000"], prefix=no_nice)
    line = eng.wait_log("sched: cannot reserve SCHED_DEADLINE 1000/10000us")
    assert "not permitted" in line and line.endswith("staying at other")
    assert not _cap_eff(eng.pid) & (1 << 23)  # the premise: it really lacks CAP_SYS_NICE
    doc = eng.stats()
    assert doc["sched"] == "other" and doc["sessions_configured"] == 1
    assert _policy(eng.pid) == 0


def test_started_at_fifo_it_compiles_at_sched_other_and_comes_back(topo, engine_factory):
    """As systemd starts the unit (CPUSchedulingPolicy=fifo): the compile must not run real-time."""
    d, pair = _session(topo)
    eng = engine_factory(d, [*pair, "--kernel-tx", "veth-d"], prefix=["chrt", "-f", "60"])
    # Logged just before the compile, which takes seconds here: the policy is
    # sampled there, a witness that must move from FIFO (1) to OTHER (0).
    eng.wait_log("kernel-tx: dead-man gate")
    samples: list[int] = []

    def probe() -> bool:
        samples.append(_policy(eng.pid))
        return samples[-1] == 0 or "bfd: serving" in eng.log()

    wait_until(probe, timeout=30, what="the compile")
    assert 0 in samples, f"never seen at SCHED_OTHER during the compile: policies {sorted(set(samples))}"
    eng.wait_log("sched: compiled at SCHED_OTHER, back at fifo 60")
    eng.wait_log("bfd: serving")
    assert _policy(eng.pid) == 1
    assert eng.stats()["sched"] == "fifo 60"


def test_started_at_fifo_without_a_way_back_it_stays_there(topo, engine_factory):
    d, pair = _session(topo)
    no_nice = ["setpriv", "--bounding-set=-sys_nice", "--inh-caps=-sys_nice"]
    eng = engine_factory(d, [*pair, "--kernel-tx", "veth-d"], prefix=["chrt", "-f", "60", *no_nice])
    eng.wait_log("sched: compiled at fifo 60 (could not come back from SCHED_OTHER)")
    eng.wait_log("bfd: serving")
    assert _policy(eng.pid) == 1 and not _cap_eff(eng.pid) & (1 << 23)


LEAVE = """
import json, os
from xdp_bfd.core import sched
assert sched.set_deadline(1000, 10000)
sched.drop_cap_sys_nice()
left = sched.leave_deadline()
print(json.dumps({"left": left, "policy": os.sched_getscheduler(0), "again": sched.leave_deadline()}))
"""


def test_a_handover_leaves_the_reservation_without_cap_sys_nice() -> None:
    """pin.handover: the old engine encodes and exits out of its reservation; CAP_SYS_NICE is long gone
    by then, and leaving for SCHED_OTHER must not need it (the reset-on-fork flag kept)."""
    argv = [sys.executable, "-c", LEAVE]
    out = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["left"] == [1000, 10000]
    assert got["policy"] == os.SCHED_OTHER | os.SCHED_RESET_ON_FORK
    assert got["again"] is None  # no reservation left to leave
