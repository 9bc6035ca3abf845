"""The engine's loop under SCHED_FIFO-99 CPU hogs: a deadline reservation holds, FIFO 60 alone does not.

Userspace still has work with --kernel-tx: with ``--kernel-clock off`` the
sessions whose timers the fast path cannot clock off the peer (asymmetric:
our RequiredMinRx above our interval, so our periodic TX is the loop's; with
the clock on the kernel sends those, tests/integration/test_fastpath.py), and
always the dead-man heartbeat every offloaded session depends on (the gate
closes after --deadman-us without it). The clock is off here so that the loop
carries packets whose every delay the capture sees.
``stress-ng --cpu 2 --sched fifo --sched-prio 99`` runs above every FIFO
priority an operator would give the engine; only SCHED_DEADLINE runs ahead of
it. Run A: ``chrt -f 60`` plus ``--sched-deadline 1000/10000``; run B: ``chrt
-f 60`` alone; same peer, same stress, alternating.

The peer is real FRR 8.4.4 bfdd under its own deadline reservation (as in
test_fastpath_stress.py), so the peer is not what flaps. Flaps are counted on
the wire (capture on the peer's side, kernel timestamps) and by bfdd's own
counters, judged from the moment every session is Up to the moment the
counters are read again after the stress — so the stats dump that follows
the stress is judged too. That dump is where run A used to flap: right after
the hogs every cache is cold, Python runs several times slower, and a dump
built in big steps overran the period's runtime, so the deadline throttled the
loop past the next transmissions (an ftrace of the engine showed it runnable
on an idle CPU for 5-8 ms at a time). Now the dump takes one small step per
reservation period (Engine.dump_pace_us) and per-packet interface lookups are
cached (links.py); the report's "after the stress, largest gap" is the
witness. The stats file lives on tmpfs here as it does under the unit
(/run/xdp-bfd). ``XDP_BFD_STRESS_S`` (default 30) and
``XDP_BFD_STRESS_ROUNDS`` (default 1: A then B) are for local iteration.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from test_fastpath_stress import DEADLINE

from harness.capture import down_transitions, flow, gap_stats, gaps_ms, silence_before
from harness.frr import bfd_peer_block
from harness.wait import wait_until

STRESS_S = int(os.environ.get("XDP_BFD_STRESS_S", "30"))
ROUNDS = int(os.environ.get("XDP_BFD_STRESS_ROUNDS", "1"))
RESERVATION = "1000/10000"  # 1 ms per 10 ms: the seed held at 0.2 ms, so 5x headroom
INTERVAL_MS = 10
# Offloaded sessions the kernel answers (alive only while the heartbeat is),
# and sessions with asymmetric timers whose every packet userspace sends.
KTX = [(f"198.19.201.{i + 1}", f"198.19.201.{i + 101}") for i in range(2)]
USER = [(f"198.19.201.{i + 11}", f"198.19.201.{i + 111}") for i in range(2)]


def _policy(pid: int) -> tuple[int, int]:
    text = Path(f"/proc/{pid}/sched").read_text()
    policy = int(re.search(r"^policy\s*:\s*(\d+)", text, re.M).group(1))
    prio = int(re.search(r"^prio\s*:\s*(-?\d+)", text, re.M).group(1))
    return policy, prio


def _hog_policies(pid: int) -> list[tuple[int, int]]:
    """(policy, prio) of stress-ng's workers: the stress must really run at FIFO 99."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    found = []
    for child in out.stdout.split():
        try:
            found.append(_policy(int(child)))
        except (OSError, AttributeError):
            continue
    return found


def _stress() -> subprocess.Popen:
    # Bounded by its own timeout; the caller also kills it on the way out.
    return subprocess.Popen(
        ["stress-ng", "--cpu", "2", "--sched", "fifo", "--sched-prio", "99",
         "--timeout", f"{STRESS_S}s", "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.fixture
def lab(topo, frr_factory, tmp_path):
    d, p = topo.namespace("d"), topo.namespace("p")
    topo.veth(d, "veth-d", p, "veth-p")
    lines, block = [], []
    for ours, theirs in KTX + USER:
        d.run(["ip", "addr", "add", f"{ours}/24", "dev", "veth-d"])
        p.run(["ip", "addr", "add", f"{theirs}/24", "dev", "veth-p"])
        # Asymmetric: asking the peer for 2x our interval makes our TX userspace's (RFC 5880 §6.8.7).
        min_rx = INTERVAL_MS * 2 if (ours, theirs) in USER else INTERVAL_MS
        lines.append(
            f"- {{local: {ours}, peer: {theirs}, interface: veth-d, "
            f"min_tx_ms: {INTERVAL_MS}, min_rx_ms: {min_rx}}}\n"
        )
        block += bfd_peer_block(ours, local=theirs, interface="veth-p", rx_ms=INTERVAL_MS, tx_ms=INTERVAL_MS)
    sessions = tmp_path / "sessions.yml"
    sessions.write_text("".join(lines))
    frr = frr_factory(p, "p", bfdd_prefix=DEADLINE).start()
    frr.configure(*block)
    return d, p, frr, sessions


def _frr_up(frr) -> bool:
    peers = {x.get("peer"): x.get("status") for x in frr.peers()}
    return all(peers.get(ours) == "up" for ours, _ in KTX + USER)


def _downs(frr) -> dict[str, int]:
    return {c["peer"]: c["session-down"] for c in frr.counters()}


def _ready(eng) -> bool:
    by_peer = {s["peer"]: s for s in eng.stats()["sessions"]}
    return all(by_peer[t]["state"] == "up" and by_peer[t]["kernel_tx_active"] for _, t in KTX) and all(
        by_peer[t]["state"] == "up" and not by_peer[t]["kernel_tx_active"] for _, t in USER
    )


def _timeline(pkts, since: float, start: float) -> list[str]:
    """Each change to a non-Up state either side sent after ``start``, in seconds from ``since``."""
    out = []
    for ours, theirs in KTX + USER:
        for src, dst in ((ours, theirs), (theirs, ours)):
            prev = "up"
            for x in flow(pkts, src=src, dst=dst):
                if x.ts >= start and x.state not in (prev, "up"):
                    out.append(f"{x.ts - since:+9.3f} s {src} -> {dst} {x.state} (diag {x.diag})")
                prev = x.state
    return sorted(out)


def _quiet_before_downs(pkts, start: float, end: float, since: float) -> list[str]:
    """For each session the peer declared down in [start, end]: how quiet were we before it?

    Our silence under the detection time (3 x 10 ms) means we kept sending and
    the peer declared it anyway: the peer stalled, not the engine.
    """
    out = []
    for ours, theirs in KTX + USER:
        theirs_judged = (x for x in flow(pkts, src=theirs, dst=ours) if start <= x.ts <= end)
        down = next((x for x in theirs_judged if x.state != "up"), None)
        if down is not None:
            out.append(
                f"{down.ts - since:+9.3f} s {theirs} declared {ours} {down.state} (diag {down.diag}); "
                f"our packets: {silence_before(flow(pkts, src=ours, dst=theirs), down.ts)}"
            )
    return out


def _one_run(name: str, lab: tuple, engine_factory, capture_factory) -> dict:
    # The stats file on tmpfs, as the unit has it (/run/xdp-bfd): on this
    # ext4 /tmp, the dump right after the stress waited tens of ms for the
    # journal (tcpdump's backlog being written out), long enough for the
    # userspace-sent sessions to expire at the peer.
    stats_path = Path(f"/dev/shm/xbt-{os.getpid()}-stats-{name}.json")
    try:
        return _measure(name, lab, engine_factory, capture_factory, stats_path)
    finally:
        stats_path.unlink(missing_ok=True)


def _measure(name: str, lab: tuple, engine_factory, capture_factory, stats_path: Path) -> dict:
    d, p, frr, sessions = lab
    args = ["--sessions", str(sessions), "--kernel-tx", "veth-d", "--kernel-clock", "off"]
    args += ["--stats-dump", str(stats_path)]
    if name == "A":
        args += ["--sched-deadline", RESERVATION]
    # One capture from before the engine starts to after it left: a flap
    # anywhere between "all Up" and the engine's stop is judged, not only
    # inside the stress, and the timeline says where it fell.
    cap = capture_factory(p, "veth-p")
    eng = engine_factory(d, args, prefix=["chrt", "-f", "60"])
    eng.stats_path = stats_path
    wait_until(lambda: _frr_up(frr), timeout=30, what=f"run {name}: sessions up at FRR")
    wait_until(lambda: _ready(eng), timeout=15, what=f"run {name}: kernel TX on/off as planned")
    t_ready = time.time()
    policy, _prio = _policy(eng.pid)
    sched = eng.stats()["sched"]
    if name == "A":
        assert policy == 6 and sched == f"deadline {RESERVATION}", (policy, sched, eng.log())
    else:
        assert policy == 1 and sched == "fifo 60", (policy, sched)
    before = eng.stats()
    downs = _downs(frr)
    t0 = time.time()
    hog = _stress()
    try:
        # Sampled while the hogs run (this process only gets the RT-throttling gaps).
        hogs = wait_until(lambda: _hog_policies(hog.pid), timeout=STRESS_S, what="stress-ng workers")
        hog.wait(timeout=STRESS_S + 30)
    finally:
        hog.kill()
        hog.wait()
    t1 = time.time()
    after = eng.stats()
    r: dict = {"sched": sched, "hogs": hogs}
    r["frr_downs"] = {k: v - downs.get(k, 0) for k, v in _downs(frr).items()}
    t_end = time.time()
    eng.stop()
    # Let the peer see the engine leave before the next run brings them up again.
    wait_until(lambda: not _frr_up(frr), timeout=10, what="peer sessions down after the engine left")
    pkts = cap.stop()
    r["timeline"] = _timeline(pkts, t0, t_ready)
    r["quiet"] = _quiet_before_downs(pkts, t_ready, t_end, t0)
    r["window"] = (t_ready - t0, t1 - t0, t_end - t0)
    r["engine_log"] = [ln for ln in eng.log().splitlines() if "session:" in ln and " -> " in ln][-20:]
    r["theirs"] = [
        [x for x in flow(pkts, src=theirs, dst=ours) if t_ready <= x.ts <= t_end]
        for ours, theirs in KTX + USER
    ]
    r["our_non_up"] = {}
    r["peer_flaps"] = {}
    r["gaps"] = {}
    r["counts"] = {}
    r["post_gap"] = {}
    for ours, theirs in KTX + USER:
        stressed = [x for x in flow(pkts, src=ours, dst=theirs) if t0 <= x.ts <= t1]
        # Judged from "all Up" to the moment FRR's counters were read again.
        judged = [x for x in flow(pkts, src=ours, dst=theirs) if t_ready <= x.ts <= t_end]
        theirs_judged = [x for x in flow(pkts, src=theirs, dst=ours) if t_ready <= x.ts <= t_end]
        r["our_non_up"][ours] = sum(1 for x in judged if x.state != "up")
        r["peer_flaps"][ours] = down_transitions(theirs_judged)
        r["gaps"][ours] = gap_stats(gaps_ms(stressed)) if len(stressed) > 1 else None
        r["counts"][ours] = len(stressed)
        # From the stress's end to the counters read: the window a post-stress stall falls in.
        post = [x for x in flow(pkts, src=ours, dst=theirs) if t1 - 0.05 <= x.ts <= t_end]
        r["post_gap"][ours] = max(gaps_ms(post), default=float("nan"))
    by_peer = {s["peer"]: s for s in after["sessions"]}
    by_peer0 = {s["peer"]: s for s in before["sessions"]}
    r["user_tx"] = {t: by_peer[t]["user_tx_packets"] - by_peer0[t]["user_tx_packets"] for _, t in USER}
    r["loop_wakeups"] = after["loop_lag"]["count"] - before["loop_lag"]["count"]
    r["loop_lag_max_us"] = after["loop_lag"]["max_us"]
    r["engine_flaps"] = sum(s["flaps"] for s in after["sessions"]) - sum(
        s["flaps"] for s in before["sessions"]
    )
    return r


def _report(name: str, r: dict) -> str:
    lines = [
        f"run {name} ({r['sched']}), {STRESS_S} s of stress-ng --cpu 2 --sched fifo --sched-prio 99 "
        f"(workers' policy/prio {r['hogs']}):",
        f"  FRR session-down {sum(r['frr_downs'].values())}, peer flaps on the wire "
        f"{sum(r['peer_flaps'].values())}, our non-Up packets {sum(r['our_non_up'].values())}, "
        f"engine flaps {r['engine_flaps']}",
        f"  loop wake-ups during the run {r['loop_wakeups']}, loop lag max {r['loop_lag_max_us']} us, "
        f"userspace TX {r['user_tx']}",
    ]
    for ours, _ in KTX + USER:
        kind = "kernel TX" if (ours, _) in KTX else "user TX"
        lines.append(
            f"  {ours} ({kind}): {r['counts'][ours]} packets, gaps {r['gaps'][ours]}; "
            f"after the stress, largest gap {r['post_gap'][ours]:.1f} ms"
        )
    ready, end_stress, end = r["window"]
    lines.append(
        f"  timeline (s from the stress start; all Up {ready:+.3f}, stress end {end_stress:+.3f}, "
        f"counters read {end:+.3f}, then the engine stops):"
    )
    lines += [f"    {e}" for e in r["timeline"]] or ["    (no non-Up packet)"]
    lines += [f"  who went quiet: {e}" for e in r["quiet"]]
    lines += [f"  engine: {ln}" for ln in r["engine_log"]]
    return "\n".join(lines)


def _premise(r: dict) -> None:
    # The hogs really ran at FIFO 99 (policy 1, kernel prio 99 - 99 = 0). Not
    # a timing verdict: pytest.fail passes through the judge unjudged.
    if not (r["hogs"] and all(pol == 1 and prio == 0 for pol, prio in r["hogs"])):
        pytest.fail(f"the stress did not run at FIFO 99: {r['hogs']}")


@pytest.mark.slow
@pytest.mark.timeout(ROUNDS * 2 * (STRESS_S + 90) + 60)
def test_fifo99_hogs_deadline_holds(lab, engine_factory, capture_factory, timing):
    for _ in range(ROUNDS):
        # Run A is the verdict. A stall of the detection time less one
        # interval (20 ms) explains a flap without us, as does the deadline
        # witness (the engine's reservation) as late.
        with timing.window(
            "run A: deadline 1 ms/10 ms under FIFO-99 hogs", stall_ms=20.0, deadline=True
        ) as w:
            r = _one_run("A", lab, engine_factory, capture_factory)
            print("\n" + _report("A", r))
            _premise(r)
            for theirs in r["theirs"]:
                w.peer(theirs, period_ms=INTERVAL_MS)
            # Witnesses that something moved: the loop woke (its periodic TX
            # and the heartbeat), and every session kept its rate through the stress.
            assert r["loop_wakeups"] >= STRESS_S * 50, r["loop_wakeups"]
            for ours, _ in KTX + USER:
                assert r["counts"][ours] >= STRESS_S * 1000 // INTERVAL_MS * 0.9, (ours, r["counts"][ours])
            for t, n in r["user_tx"].items():
                assert n >= STRESS_S * 1000 // INTERVAL_MS * 0.9, (t, n)
            # And nothing flapped, on either side, by any count.
            assert sum(r["frr_downs"].values()) == 0, r["frr_downs"]
            assert sum(r["peer_flaps"].values()) == 0, r["peer_flaps"]
            assert sum(r["our_non_up"].values()) == 0, r["our_non_up"]
            assert r["engine_flaps"] == 0
        r = _one_run("B", lab, engine_factory, capture_factory)
        print("\n" + _report("B", r))
        _premise(r)
        # Deterministic, so asserted: nothing at FIFO 60 runs while FIFO-99
        # hogs hold both cores (RT throttling stalls every RT task, the
        # engine included), so the userspace-sent sessions go down at the
        # peer. This is the witness that the stress bites at all; a stalled
        # machine only adds downs, so it needs no judging.
        assert all(r["frr_downs"].get(ours, 0) >= 1 for ours, _ in USER), r["frr_downs"]
