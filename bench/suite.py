"""The benchmark suite: ladder, detection, fast-path cost, scale, takeover, jitter — one run, one JSON.

    bench/run [--profile smoke|short|long] [--repeat N] [--out DIR]
              [--parts ladder,detection,cost,scale,takeover,jitter]

``bench/run`` runs ``scripts/setup`` and then this. Parts, in order:

ladder     every backend (bfdd, engine-sw, engine-ktx, bfddp, engine-pair) at every stress level
           L0-L5 and in a soak, alternated within each level (the order rotates from level to
           level), against the same FRR bfdd peer at 3x10 ms; flaps at both ends, DUT->peer gaps,
           packets never sent. engine-pair (``--backends`` narrows the list): engine <-> engine,
           both --kernel-tx, four sessions (IPv4/IPv6, single-hop/multihop) captured on a bridge
           between them, both ends' kernel- and user-sent counts against the capture
           (bench/ladder.py PairBed)
detection  N times per backend: SIGKILL the peer's bfdd; last peer packet -> our Down, on the wire
cost       ns per packet of the XDP program from the kernel's bpf run stats (bench/fastpath_cost.py)
scale      engine with --kernel-tx at 1..4096 sessions and stock bfdd at 1..64 sessions against the
           synthetic peer (bench/scale.py): CPU, Up count, flaps, the XDP program's share of a core
takeover   K hitless --pin takeovers in a row at N sessions (bench/takeover.py): old engine gone,
           request -> successor serving, the peer's down events, the worst gap on the wire
jitter     two engines, both --kernel-tx, N sessions between them (bench/jitter.py): every interval
           on the wire against RFC 5880 §6.8.7's 75-100 % band, each one above it beside a
           reference stream per CPU (the part's own)

A witness runs beside every run (tests/harness/witness.py's kernel-paced reference stream):
every ladder window, every detection kill and every takeover records the worst stall it saw, so
a flap can be told from a machine that stalled (bench/report.py judges with it).

``--repeat N`` runs the profile N times back to back (``DIR/run.json`` then holds every run under
``runs``; the report gives each target as min-max across them, met only when every run meets it).

Writes ``DIR/run.json`` after every step (an interrupted run keeps what it measured), then
``DIR/table.md`` and the charts (bench/report.py). DIR defaults to ``bench/out/<UTC stamp>/``.
Everything it starts is stopped on the way out, Ctrl-C and errors included. Exit status: 0 when
every part measured without an error, 1 when any part (or row) recorded one — each printed at
the end — 130 when interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import benchlib
import fastpath_cost
import jitter
import ladder
import report
import scale
import takeover

from harness.netns import PREFIX, Topology, attach_xdp_pass
from harness.witness import PERIOD_MS as WITNESS_PERIOD_MS

# Durations in seconds. "short" fits in about 12 minutes on the 2-vCPU reference VM; "long" is
# the publication run, sized so that --repeat 3 fits in 90 minutes (a session's clock has to hold
# the run and a clean-clone CI run after it); "smoke" checks that every part works (about
# 5 minutes; scripts/test runs it). Every profile's ladder includes engine <-> engine.
ALL_BACKENDS = [*ladder.DEFAULT_BACKENDS, ladder.PAIR]
PROFILES: dict[str, dict[str, Any]] = {
    "smoke": {
        "backends": ALL_BACKENDS,
        "levels": ["L0", "L4"],
        "level_s": 3,
        "soak_s": 5,
        "detection": [["L0", 2]],
        "cost": {"modes": ["generic"], "seconds": 2, "rounds": 1, "burst": 2000},
        "scale": {"ladder": "1@10,64@10", "bfdd": [1, 8], "seconds": 3, "settle": 1, "silence": False},
        "takeover": {"sessions": 8, "takeovers": 2, "settle": 1},
        "jitter": {"sessions": 4, "seconds": 3},
    },
    "short": {
        "backends": ALL_BACKENDS,
        "levels": ["L0", "L1", "L2", "L3", "L4", "L5"],
        "level_s": 7,
        "soak_s": 15,
        "detection": [["L0", 8], ["L4", 3]],
        "cost": {"modes": ["generic"], "seconds": 3, "rounds": 3, "burst": 20000},
        "scale": {
            "ladder": "1@10,8@10,32@10,64@10,1024@10,4096@20",
            "bfdd": [1, 8, 32, 64],
            "seconds": 3,
            "settle": 1,
            "silence": False,
        },
        "takeover": {"sessions": 64, "takeovers": 5, "settle": 2},
        "jitter": {"sessions": 16, "seconds": 10},
    },
    "long": {
        "backends": ALL_BACKENDS,
        "levels": ["L0", "L1", "L2", "L3", "L4", "L5"],
        "level_s": 15,
        "soak_s": 90,
        "detection": [["L0", 10], ["L4", 5]],
        "cost": {"modes": ["generic", "native"], "seconds": 5, "rounds": 3, "burst": 20000},
        "scale": {
            "ladder": "1@10,8@10,32@10,64@10,1024@10,4096@20",
            "bfdd": [1, 8, 32, 64],
            "seconds": 10,
            "settle": 2,
            "silence": True,
            # The sessions from a bfddp controller, as bfdd gives them: the mass failure's report
            # to it is timed beside the wire's Downs.
            "controller": "bfddp",
            # The stats' steps at 4096 sessions apart from the peers' interrupts (issue 16).
            "quiet_stats": "4096@20",
        },
        "takeover": {"sessions": 1024, "takeovers": 5, "settle": 3},
        # Where the clock's tail grew with the number of clocked sessions (docs/benchmarks.md).
        "jitter": {"sessions": 64, "seconds": 20},
    },
}
PARTS = ("ladder", "detection", "cost", "scale", "takeover", "jitter")
MAX_REPEAT = 10


class Interrupted(BaseException):
    """SIGTERM/SIGHUP: unwind through every ``finally`` like Ctrl-C does (a BaseException, so
    that no part's ``except Exception`` takes it for a broken row and carries on)."""


MAIN_PID = os.getpid()


def _on_signal(signum: int, _frame: object) -> None:
    # Only in the suite's own process: pyroute2 forks helpers that inherit this handler and
    # are ended with SIGTERM, and a child unwinding our ``finally`` blocks would tear the run
    # down under us (seen: the takeover's notify socket unlinked, so no READY ever arrived).
    if os.getpid() != MAIN_PID:
        os._exit(128 + signum)
    raise Interrupted(signal.Signals(signum).name)


class Watchdog(Exception):
    """A step overran its bound (seen here: a netlink reply pyroute2 waited for forever)."""


@contextlib.contextmanager
def watchdog(seconds: float, what: str) -> Iterator[None]:
    """Raise :class:`Watchdog` in the body after ``seconds``; nests (the outer bound keeps running)."""

    def fire(_signum: int, _frame: object) -> None:
        raise Watchdog(f"{what}: still running after {seconds:.0f} s")

    outer_left, _ = signal.getitimer(signal.ITIMER_REAL)
    outer = signal.signal(signal.SIGALRM, fire)
    started = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, min(seconds, outer_left) if outer_left else seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, outer)
        if outer_left:
            signal.setitimer(signal.ITIMER_REAL, max(0.001, outer_left - (time.monotonic() - started)))


class Run:
    """The document being written (one run, or every repeat under ``runs``) and the log lines."""

    def __init__(self, out: Path, doc: dict[str, Any]) -> None:
        self.out, self.doc = out, doc
        self.t0 = time.monotonic()
        self.tag = ""

    def save(self) -> None:
        tmp = self.out / "run.json.tmp"
        tmp.write_text(json.dumps(self.doc, indent=1, default=str) + "\n")
        tmp.replace(self.out / "run.json")

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.0f}s]{self.tag} {text}", flush=True)


class Rigs:
    """The ladder's rig (namespaces, the FRR peer), kept for the detection part so that both
    measure against the same peer; dropped after a part that failed, so the next builds afresh."""

    def __init__(self, run: Run, doc: dict[str, Any], work: Path, witness: Any) -> None:
        self.run, self.doc, self.work, self.witness = run, doc, work, witness
        self.rig: ladder.Rig | None = None

    def get(self, tag: str) -> ladder.Rig:
        if self.rig is None:
            self.rig = ladder.make_rig(self.work / tag)
            self.rig.witness = self.witness
            self.doc.setdefault("peer_sched", self.rig.peer_sched)
            self.run.say(f"{tag}: peer bfdd scheduling: {self.rig.peer_sched}")
        return self.rig

    def drop(self) -> None:
        if self.rig is not None:
            rig, self.rig = self.rig, None
            rig.close()


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def part_ladder(run: Run, doc: dict[str, Any], prof: dict[str, Any], backends: list[str], rigs: Rigs) -> None:
    cells = doc.setdefault("ladder", [])
    try:
        rig = rigs.get("ladder")
        steps = [(lv, prof["level_s"]) for lv in prof["levels"]]
        if prof["soak_s"]:
            steps.append(("soak", prof["soak_s"]))
        for i, (level, seconds) in enumerate(steps):
            order = backends[i % len(backends) :] + backends[: i % len(backends)]
            for backend in order:
                # A watchdog that fires inside the cell is the cell's error (run_cell records it).
                with watchdog(seconds + 150, f"{level} {backend}"):
                    cell = ladder.run_cell(rig, backend, level, seconds)
                cells.append(cell)
                run.save()
                if "error" in cell:
                    run.say(f"ladder {level:>4} {backend:<10} ERROR {cell['error']}")
                    continue
                g = cell.get("gap_ms") or {}
                w = cell.get("witness") or {}
                run.say(
                    f"ladder {level:>4} {backend:<10} flaps peer {cell.get('peer_flaps')} "
                    f"dut {cell.get('dut_flaps')}  gap p50 {g.get('p50')} max {g.get('max')} ms  "
                    f"missing {cell.get('missing_slots')}  witness stall {w.get('stall_ms')} ms, "
                    f"peer TX stall {cell.get('peer_stall_ms')} ms"
                )
                if "echo" in cell:
                    e = cell["echo"]
                    run.say(
                        f"  echo: {e['error']}"
                        if "error" in e
                        else f"  echo every {e['interval_ms']} ms: sent {e['sent']} returned {e['returned']} "
                        f"lost {e['lost']}, RTT {e['rtt_us']} us"
                    )
                if backend == ladder.PAIR:
                    ks = cell.get("kernel_sent") or {}
                    run.say(
                        "  engine <-> engine: kernel/user/captured "
                        + ", ".join(
                            f"{e} {k.get('kernel_tx_packets')}/{k.get('user_tx_packets')}/{k.get('captured')}"
                            for e, k in ks.items()
                        )
                        + f"; counters agree {cell.get('counters_agree')}; worst gap of "
                        f"{len(cell.get('pair_sessions') or {})} sessions {cell.get('worst_gap_ms')} ms; "
                        f"captures {cell.get('capture_views')}"
                    )
    except BaseException:
        rigs.drop()
        raise


def part_detection(
    run: Run, doc: dict[str, Any], prof: dict[str, Any], backends: list[str], rigs: Rigs
) -> None:
    rows = doc.setdefault("detection", [])
    try:
        # engine-pair does not meet the peer's bfdd that detection kills: the ladder only.
        measured = [b for b in backends if b in ladder.DETECTION_BACKENDS]
        if not measured:
            return
        rig = rigs.get("detection")
        for level, kills in prof["detection"]:
            for backend in measured:
                budget = 15 + kills * 5
                with watchdog(budget + 150, f"detection {level} {backend}"):
                    r = ladder.run_detection(rig, backend, kills, level, budget_s=budget)
                if not r.get("samples") and "error" not in r:
                    # Not one kill measured is a broken part, not a figure.
                    r["error"] = "no kill measured: " + "; ".join(r.get("failed", []))[:300]
                rows.append(r)
                run.save()
                if "error" in r:
                    run.say(f"detection {level} {backend:<10} ERROR {r['error']}")
                    continue
                s = r.get("summary") or {}
                ov = s.get("overshoot_ms") or {}
                run.say(
                    f"detection {level} {backend:<10} {s.get('n', 0)}/{kills} kills seen, overshoot mean "
                    f"{ov.get('mean')} max {ov.get('max')} ms, witness stall max "
                    f"{s.get('witness_stall_ms_max')} ms"
                )
    finally:
        rigs.drop()


def part_cost(run: Run, doc: dict[str, Any], prof: dict[str, Any], work: Path) -> None:
    c = prof["cost"]
    (work / "cost").mkdir(parents=True, exist_ok=True)
    out = doc.setdefault("cost", {"params": c, "results": []})
    with benchlib.bpf_stats_enabled():
        for mode in c["modes"]:
            run.say(f"cost: {mode}, echo, S-BFD and control windows of {c['seconds']} s x {c['rounds']}")
            try:
                with watchdog(180 + 4 * c["rounds"] * c["seconds"], f"cost {mode}"):
                    r = fastpath_cost.run_mode(mode, c["seconds"], c["rounds"], work / "cost", c["burst"])
            except Exception as e:  # the next mode and the next part still run
                r = {"mode": mode, "error": _error(e)}
            fastpath_cost.summarize(r)
            if "error" not in r and (r["median"].get("control") or {}).get("engine_ns_per_packet") is None:
                r["error"] = "the engine's XDP run stats did not move in the control windows"
            out["results"].append(r)
            run.save()
            if "error" in r:
                run.say(f"cost {mode}: ERROR {r['error']}")
                continue
            med = r.get("median", {})
            run.say(
                f"cost {mode}: control {(med.get('control') or {}).get('engine_ns_per_packet')} ns/pkt, "
                f"echo {(med.get('echo') or {}).get('engine_ns_per_packet')} ns/pkt, "
                f"S-BFD reflector {(med.get('sbfd') or {}).get('engine_ns_per_packet')} ns/pkt"
            )


def scale_args(s: dict[str, Any], engine_sched: str) -> argparse.Namespace:
    """The scale part's arguments, from bench/scale.py's own parser: every option a rung reads
    exists (the script's default where the profile says nothing)."""
    argv = [
        "--ladder", s["ladder"], "--bfdd-ladder", ",".join(str(n) for n in s["bfdd"]),
        "--seconds", str(s["seconds"]), "--settle", str(s["settle"]), "--xdp-mode", "generic",
        "--engine-sched", engine_sched,
    ]  # fmt: skip
    if not s["silence"]:
        argv.append("--no-silence-check")
    if "controller" in s:
        argv += ["--controller", s["controller"]]
    if "quiet_stats" in s:
        argv += ["--quiet-stats", s["quiet_stats"]]
    return scale.parser().parse_args(argv)


def part_scale(
    run: Run, doc: dict[str, Any], prof: dict[str, Any], work: Path, witness: Any, *, engine_sched: str
) -> None:
    s = prof["scale"]
    args = scale_args(s, engine_sched)
    rungs = scale.parse_ladder(args.ladder)
    bfdd = scale.parse_counts(args.bfdd_ladder)
    params = s | {"engine_sched": engine_sched}
    out = doc.setdefault("scale", {"params": params, "rungs": [], "bfdd_rungs": []})
    (work / "scale").mkdir(parents=True, exist_ok=True)
    topo = Topology()
    try:
        with benchlib.bpf_stats_enabled():
            d, p = topo.namespace("d"), topo.namespace("p")
            topo.veth(d, "veth-d", p, "veth-p")
            d_mac, p_mac = benchlib.mac(d.name, "veth-d"), benchlib.mac(p.name, "veth-p")
            bed = scale.Bed(d, p, d_mac, p_mac, args, work / "scale", witness)
            if args.xdp_mode == "native":
                attach_xdp_pass(p, "veth-p")
            scale.setup_addresses(d, p, max([n for n, _ in rungs] + bfdd), d_mac, p_mac)
            for n in bfdd:
                ms = args.bfdd_interval_ms
                run.say(f"scale: bfdd, {n} sessions at 3x{ms} ms")
                try:
                    with watchdog(150 + n / 4 + args.seconds + args.settle, f"scale bfdd {n}"):
                        r = scale.run_bfdd_rung(bed, n, ms)
                except Exception as e:
                    r = {"dut": "bfdd", "sessions": n, "interval_ms": ms, "error": _error(e)}
                out["bfdd_rungs"].append(r)
                run.save()
                if "error" in r:
                    run.say(f"scale bfdd {n}: ERROR {r['error']}")
                    continue
                st = r.get("steady") or {}
                run.say(
                    f"scale bfdd {n}: up {st.get('sessions_up')}/{n}, flaps {st.get('flaps')}, "
                    f"CPU {(st.get('dut_cpu') or {}).get('cpu_pct_sched')} %"
                )
            for n, ms in rungs:
                run.say(f"scale: engine --kernel-tx, {n} sessions at 3x{ms} ms")
                try:
                    bound = 240 + n / 40 + args.seconds + args.settle + 30 * args.silence_check
                    with watchdog(bound, f"scale {n}"):
                        r = scale.run_rung(bed, n, ms)
                except Exception as e:
                    r = {"sessions": n, "interval_ms": ms, "error": _error(e)}
                out["rungs"].append(r)
                run.save()
                if "error" in r:
                    run.say(f"scale engine {n}: ERROR {r['error']}")
                    continue
                st = r.get("steady") or {}
                run.say(
                    f"scale engine {n}: up {st.get('sessions_up')}/{n}, flaps {st.get('flaps')}, "
                    f"CPU {(st.get('engine_cpu') or {}).get('cpu_pct_sched')} %, "
                    f"XDP {st.get('xdp_cpu_pct')} % (bring-up {(r.get('bringup') or {}).get('after_s')} s)"
                    + (f"  {st['xdp_not_measured']}" if st.get("xdp_not_measured") else "")
                )
            for n, ms in scale.parse_ladder(args.quiet_stats) if args.quiet_stats else []:
                run.say(f"scale: stats at {n} sessions, no peer")
                try:
                    with watchdog(240 + n / 40, f"scale quiet stats {n}"):
                        out["quiet_stats"] = q = scale.run_quiet_stats(bed, n, ms)
                except Exception as e:
                    out["quiet_stats"] = q = {"sessions": n, "interval_ms": ms, "error": _error(e)}
                run.save()
                run.say(
                    f"scale quiet stats {n}: "
                    + (
                        f"ERROR {q['error']}"
                        if "error" in q
                        else f"longest step {q.get('step_max_us')} us (thread CPU {q.get('step_cpu_max_us')})"
                    )
                )
    finally:
        topo.close()


def takeover_args(t: dict[str, Any], engine_sched: str) -> argparse.Namespace:
    """The takeover part's arguments, from bench/takeover.py's own parser."""
    argv = ["--sessions", str(t["sessions"]), "--takeovers", str(t["takeovers"])]
    argv += ["--settle", str(t["settle"])]
    args = takeover.parser().parse_args([*argv, "--engine-sched", engine_sched])
    if problem := takeover.check(args):
        raise ValueError(f"takeover profile: {problem}")
    return args


def part_takeover(
    run: Run, doc: dict[str, Any], prof: dict[str, Any], work: Path, witness: Any, *, engine_sched: str
) -> None:
    args = takeover_args(prof["takeover"], engine_sched)
    out = doc.setdefault("takeover", {"params": prof["takeover"] | {"engine_sched": engine_sched}})
    out |= {"sessions": args.sessions, "interval_ms": args.interval_ms, "takeovers_planned": args.takeovers}
    run.say(f"takeover: {args.sessions} sessions at 3x{args.interval_ms} ms, {args.takeovers} takeovers")
    try:
        with watchdog(takeover.budget_s(args), "takeover"):
            takeover.run(args, work / "takeover", out, witness, say=run.say)
    except Exception as e:
        out["error"] = _error(e)
    run.save()
    done = len(out.get("takeovers", []))
    if "error" in out:
        run.say(f"takeover: {done}/{args.takeovers} done, ERROR {out['error']}")
        return
    gone = [r["gone_ms"] for r in out["takeovers"] if r.get("gone_ms") is not None]
    run.say(
        f"takeover: {done}/{args.takeovers} done, "
        f"gone {min(gone, default=None)}-{max(gone, default=None)} ms, "
        f"peer down events {out.get('peer_down_events')}, engine flaps {out.get('engine_flaps')}, "
        f"worst gap {(out.get('wire') or {}).get('worst_gap_ms')} ms, witness stall "
        f"{(out.get('witness') or {}).get('stall_ms')} ms"
        + (
            f" (just before the downs: {out['witness_at_downs'].get('stall_ms')} ms)"
            if out.get("witness_at_downs")
            else ""
        )
    )


def jitter_args(j: dict[str, Any]) -> argparse.Namespace:
    """The jitter part's arguments, from bench/jitter.py's own parser."""
    args = jitter.parser().parse_args(["--sessions", str(j["sessions"]), "--seconds", str(j["seconds"])])
    if problem := jitter.check(args):
        raise ValueError(f"jitter profile: {problem}")
    return args


def part_jitter(run: Run, doc: dict[str, Any], prof: dict[str, Any], work: Path) -> None:
    args = jitter_args(prof["jitter"])
    out = doc.setdefault("jitter", {"params": prof["jitter"]})
    run.say(
        f"jitter: {args.sessions} sessions at 3x{args.interval_ms} ms between two engines, {args.seconds:g} s"
    )
    (work / "jitter").mkdir(parents=True, exist_ok=True)
    try:
        with watchdog(jitter.budget_s(args), "jitter"):
            jitter.run(args, work / "jitter", out)
    except Exception as e:
        out["error"] = _error(e)
    run.save()
    if "error" in out:
        run.say(f"jitter: ERROR {out['error']}")
        return
    r = out["result"]
    run.say(
        f"jitter: {r['intervals']} intervals, {r['share_in_band']} in band, {r['below_band']} below, "
        f"{r['above_band']} above ({r['above_band_under_stall']} under a witness stall), "
        f"max {r['quantiles_of_nominal']['1.0']} x"
    )


@dataclass
class Plan:
    """What every run of the invocation does."""

    prof: dict[str, Any]
    parts: list[str]
    backends: list[str]
    engine_sched: str


def run_profile(run: Run, doc: dict[str, Any], plan: Plan, work: Path) -> None:
    """Every part of one run into ``doc``, beside one witness; errors are recorded, not raised."""
    prof, parts, backends, engine_sched = plan.prof, plan.parts, plan.backends, plan.engine_sched
    t0 = time.monotonic()
    witness = None
    errors = doc.setdefault("errors", [])
    try:
        with watchdog(60, "witness start"):
            witness = benchlib.start_witness(work / "witness")
        doc["witness"] = {
            "what": "kernel-paced reference stream (tests/harness/witness.py)",
            "period_ms": WITNESS_PERIOD_MS,
            "pcap": str(work / "witness" / "reference.pcap"),
        }
    except Exception as e:  # the parts still run; their rows then carry no witness
        errors.append(f"witness: {_error(e)}")
        run.say(f"witness: ERROR {_error(e)}")
    rigs = Rigs(run, doc, work, witness)
    steps: list[tuple[str, Callable[[], None]]] = []
    if "ladder" in parts:
        steps.append(("ladder", lambda: part_ladder(run, doc, prof, backends, rigs)))
    if "detection" in parts:
        steps.append(("detection", lambda: part_detection(run, doc, prof, backends, rigs)))
    if "cost" in parts:
        steps.append(("cost", lambda: part_cost(run, doc, prof, work)))
    if "scale" in parts:
        steps.append(("scale", lambda: part_scale(run, doc, prof, work, witness, engine_sched=engine_sched)))
    if "takeover" in parts:
        steps.append(
            ("takeover", lambda: part_takeover(run, doc, prof, work, witness, engine_sched=engine_sched))
        )
    if "jitter" in parts:
        steps.append(("jitter", lambda: part_jitter(run, doc, prof, work)))
    try:
        for name, step in steps:
            try:
                step()
            except Exception as e:  # a broken part is reported; the next one still runs
                errors.append(f"{name}: {_error(e)}")
                run.say(f"{name}: ERROR {_error(e)}")
            run.save()
    finally:
        rigs.drop()
        if witness is not None:
            witness.close()
        doc["duration_s"] = round(time.monotonic() - t0, 1)
    doc["complete"] = not report.run_errors(doc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="short", choices=sorted(PROFILES))
    ap.add_argument(
        "--repeat", type=int, default=1, help=f"run the profile N times back to back (1-{MAX_REPEAT})"
    )
    ap.add_argument("--out", type=Path, help="run directory (default bench/out/<UTC stamp>)")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    ap.add_argument(
        "--backends",
        help=f"ladder/detection backends, of {','.join(ladder.BACKENDS)} "
        f"(default: the profile's, {','.join(ALL_BACKENDS)}; {ladder.PAIR}: the ladder only)",
    )
    ap.add_argument(
        "--engine-sched",
        default="unit",
        choices=ladder.ENGINE_SCHED_MODES,
        help="engine backends as the packaged unit runs them (FIFO 60 + deadline, every level) "
        "or as a plain process (reservation at L5/soak only)",
    )
    ap.add_argument("--level-seconds", type=float, help="override the profile's seconds per level")
    ap.add_argument("--soak-seconds", type=float, help="override the profile's soak (0: none)")
    ap.add_argument("--levels", help="override the profile's levels, e.g. L0,L4")
    args = ap.parse_args()
    parts = [x for x in args.parts.split(",") if x]
    prof = json.loads(json.dumps(PROFILES[args.profile]))
    backends = [x for x in args.backends.split(",") if x] if args.backends else prof["backends"]
    if args.level_seconds is not None:
        prof["level_s"] = args.level_seconds
    if args.soak_seconds is not None:
        prof["soak_s"] = args.soak_seconds
    if args.levels:
        prof["levels"] = args.levels.split(",")
    ladder.engine_sched = args.engine_sched
    if (
        not set(parts) <= set(PARTS)
        or not set(backends) <= set(ladder.BACKENDS)
        or not set(prof["levels"]) <= set(ladder.LEVELS)
        or not 1 <= prof["level_s"] <= 3600
        or not 0 <= prof["soak_s"] <= 24 * 3600
        or not 1 <= args.repeat <= MAX_REPEAT
    ):
        ap.error("unknown part, backend or level, or a duration or --repeat out of range")
    # The parts' own parsers, checked before anything runs.
    if "scale" in parts:
        scale_args(prof["scale"], args.engine_sched)
    if "takeover" in parts:
        takeover_args(prof["takeover"], args.engine_sched)
    if "jitter" in parts:
        jitter_args(prof["jitter"])

    stamp, stray, head = benchlib.begin("suite", {"profile": args.profile, "repeat": args.repeat, **prof})
    with contextlib.suppress(OSError):
        stray.rmdir()  # begin()'s per-script work directory: the suite keeps its own under DIR/work
    out = (args.out or benchlib.OUT / stamp).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    work.mkdir(exist_ok=True)
    head |= {
        "parts": parts,
        "backends": backends,
        "interval_ms": ladder.INTERVAL_MS,
        "detect_mult": ladder.DETECT_MULT,
        "levels": {k: {"what": v[0], "stress_ng": v[1]} for k, v in ladder.LEVELS.items()},
        "soak_levels": list(ladder.SOAK_LEVELS),
        "engine_sched": ladder.engine_sched,
        "reserved_levels": [lv for lv in ladder.LEVELS if ladder.reserved(lv)]
        + (["soak"] if ladder.reserved("soak") else []),
        "engine_reservation": ladder.ENGINE_RESERVATION,
    }
    plan = Plan(prof, parts, backends, args.engine_sched)
    top = copy.deepcopy(head)
    if args.repeat > 1:
        top |= {"repeat": args.repeat, "runs": []}
    run = Run(out, top)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    run.say(f"profile {args.profile}: parts {','.join(parts)}, {args.repeat} run(s); writing {out}")
    status = 0
    try:
        for k in range(args.repeat):
            if args.repeat == 1:
                doc, wk = top, work
            else:
                doc = copy.deepcopy(head) | {
                    "repeat_index": k + 1,
                    "started_at": benchlib.utc_stamp(),
                    "machine": benchlib.machine_facts() if k else head["machine"],
                }
                top["runs"].append(doc)
                wk = work / f"r{k + 1}"
                wk.mkdir(exist_ok=True)
                run.tag = f" [{k + 1}/{args.repeat}]"
            run_profile(run, doc, plan, wk)
            run.save()
    except (KeyboardInterrupt, Interrupted) as e:
        top["interrupted"] = str(e) or "KeyboardInterrupt"
        status = 130
    finally:
        run.tag = ""
        top["duration_s"] = round(time.monotonic() - run.t0, 1)
        top["leftover_namespaces"] = benchlib.require_clean_netns(f"{PREFIX}{os.getpid()}-")
        if args.repeat > 1:
            top["complete"] = all(r.get("complete") for r in top["runs"]) and len(top["runs"]) == args.repeat
        run.save()
    run.say(f"measured in {top['duration_s']} s; rendering")
    try:
        report.render(out)
    except Exception as e:  # a chart must not cost the measurements
        print(f"report: {type(e).__name__}: {e}", file=sys.stderr)
        status = status or 1
    print(f"run: {out / 'run.json'}\ntable: {out / 'table.md'}")
    errors = report.run_errors(top)
    if errors:
        # What scripts/test shows when its bench smoke fails: every part's and row's error.
        print(f"bench: {len(errors)} error(s):", file=sys.stderr)
        for e in errors:
            text = e.replace("\n", "\n        ")
            print(f"  ERROR {text}", file=sys.stderr)
        status = status or 1
    return status


if __name__ == "__main__":
    sys.exit(main())
