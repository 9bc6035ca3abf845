"""The benchmark suite: stress ladder, detection latency, fast-path cost, scale — one run, one JSON.

    sudo bench/run [--profile smoke|short|long] [--out DIR] [--parts ladder,detection,cost,scale]

``bench/run`` runs ``scripts/setup`` and then this. Parts, in order:

ladder     every backend (bfdd, engine-sw, engine-ktx, bfddp) at every stress level L0-L5 and in a
           soak, alternated within each level (the order rotates from level to level), against the
           same FRR bfdd peer at 3x10 ms; flaps at both ends, DUT->peer gaps, packets never sent
detection  N times per backend: SIGKILL the peer's bfdd; last peer packet -> our Down, on the wire
cost       ns per packet of the XDP program from the kernel's bpf run stats (bench/fastpath_cost.py)
scale      engine with --kernel-tx at 1..4096 sessions and stock bfdd at 1..64 sessions against the
           synthetic peer (bench/scale.py): CPU, Up count, flaps

Writes ``DIR/run.json`` after every step (an interrupted run keeps what it measured), then
``DIR/table.md`` and the charts (bench/report.py). DIR defaults to ``bench/out/<UTC stamp>/``.
Everything it starts is stopped on the way out, Ctrl-C and errors included.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import benchlib
import fastpath_cost
import ladder
import report
import scale

from harness.netns import PREFIX, Topology, attach_xdp_pass

# Durations in seconds. "short" fits in 10 minutes on the 2-vCPU reference VM; "long" is the
# publication run; "smoke" checks that every part works (about 3 minutes).
PROFILES: dict[str, dict[str, Any]] = {
    "smoke": {
        "levels": ["L0", "L4", "L5"],
        "level_s": 3,
        "soak_s": 5,
        "detection": [["L0", 2]],
        "cost": {"modes": ["generic"], "seconds": 2, "rounds": 1, "burst": 2000},
        "scale": {"ladder": "1@10,64@10", "bfdd": [1, 8], "seconds": 3, "settle": 1, "silence": False},
    },
    "short": {
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
    },
    "long": {
        "levels": ["L0", "L1", "L2", "L3", "L4", "L5"],
        "level_s": 20,
        "soak_s": 300,
        "detection": [["L0", 30], ["L4", 15], ["L5", 15]],
        "cost": {"modes": ["generic", "native"], "seconds": 5, "rounds": 3, "burst": 20000},
        "scale": {
            "ladder": "1@10,8@10,32@10,64@10,1024@10,4096@20",
            "bfdd": [1, 8, 32, 64],
            "seconds": 15,
            "settle": 2,
            "silence": True,
        },
    },
}
PARTS = ("ladder", "detection", "cost", "scale")


class Interrupted(Exception):
    """SIGTERM/SIGHUP: unwind through every ``finally`` like Ctrl-C does."""


def _on_signal(signum: int, _frame: object) -> None:
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
    def __init__(self, out: Path, doc: dict[str, Any]) -> None:
        self.out, self.doc = out, doc
        self.t0 = time.monotonic()

    def save(self) -> None:
        tmp = self.out / "run.json.tmp"
        tmp.write_text(json.dumps(self.doc, indent=1, default=str) + "\n")
        tmp.replace(self.out / "run.json")

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.0f}s] {text}", flush=True)


def part_ladder(run: Run, prof: dict[str, Any], backends: list[str], work: Path) -> None:
    cells = run.doc.setdefault("ladder", [])
    rig = ladder.make_rig(work / "ladder")
    run.doc["peer_sched"] = rig.peer_sched
    run.say(f"ladder: peer bfdd scheduling: {rig.peer_sched}")
    try:
        steps = [(lv, prof["level_s"]) for lv in prof["levels"]]
        if prof["soak_s"]:
            steps.append(("soak", prof["soak_s"]))
        for i, (level, seconds) in enumerate(steps):
            order = backends[i % len(backends) :] + backends[: i % len(backends)]
            for backend in order:
                with watchdog(seconds + 150, f"{level} {backend}"):
                    cell = ladder.run_cell(rig, backend, level, seconds)
                cells.append(cell)
                run.save()
                g = cell.get("gap_ms") or {}
                run.say(
                    f"ladder {level:>4} {backend:<10} flaps peer {cell.get('peer_flaps')} "
                    f"dut {cell.get('dut_flaps')}  gap p50 {g.get('p50')} max {g.get('max')} ms  "
                    f"missing {cell.get('missing_slots')}"
                    + (f"  ERROR {cell['error']}" if "error" in cell else "")
                )
        if "detection" in run.doc["parts"]:
            detections(run, rig, prof, backends)
    finally:
        rig.close()


def detections(run: Run, rig: ladder.Rig, prof: dict[str, Any], backends: list[str]) -> None:
    for level, kills in prof["detection"]:
        for backend in backends:
            budget = 15 + kills * 5
            with watchdog(budget + 150, f"detection {level} {backend}"):
                r = ladder.run_detection(rig, backend, kills, level, budget_s=budget)
            run.doc.setdefault("detection", []).append(r)
            run.save()
            s = r.get("summary") or {}
            ov = s.get("overshoot_ms") or {}
            run.say(
                f"detection {level} {backend:<10} {s.get('n', 0)}/{kills} kills seen, overshoot mean "
                f"{ov.get('mean')} max {ov.get('max')} ms" + (f"  ERROR {r['error']}" if "error" in r else "")
            )


def part_detection_only(run: Run, prof: dict[str, Any], backends: list[str], work: Path) -> None:
    """Detection without the ladder (``--parts detection``): its own rig."""
    rig = ladder.make_rig(work / "detection")
    run.doc.setdefault("peer_sched", rig.peer_sched)
    try:
        detections(run, rig, prof, backends)
    finally:
        rig.close()


def part_cost(run: Run, prof: dict[str, Any], work: Path) -> None:
    c = prof["cost"]
    (work / "cost").mkdir(parents=True, exist_ok=True)
    out = run.doc.setdefault("cost", {"params": c, "results": []})
    with benchlib.bpf_stats_enabled():
        for mode in c["modes"]:
            run.say(f"cost: {mode}, echo and control windows of {c['seconds']} s x {c['rounds']}")
            try:
                with watchdog(180 + 4 * c["rounds"] * c["seconds"], f"cost {mode}"):
                    r = fastpath_cost.run_mode(mode, c["seconds"], c["rounds"], work / "cost", c["burst"])
            except Exception as e:  # the next mode and the next part still run
                r = {"mode": mode, "error": f"{type(e).__name__}: {e}"}
                run.say(f"cost {mode}: ERROR {r['error']}")
            fastpath_cost.summarize(r)
            out["results"].append(r)
            run.save()
            med = r.get("median", {})
            run.say(
                f"cost {mode}: control {(med.get('control') or {}).get('engine_ns_per_packet')} ns/pkt, "
                f"echo {(med.get('echo') or {}).get('engine_ns_per_packet')} ns/pkt"
            )


def part_scale(run: Run, prof: dict[str, Any], work: Path) -> None:
    s = prof["scale"]
    rungs = scale.parse_ladder(s["ladder"])
    out = run.doc.setdefault("scale", {"params": s, "rungs": [], "bfdd_rungs": []})
    args = argparse.Namespace(
        seconds=s["seconds"], settle=s["settle"], xdp_mode="generic", silence_check=s["silence"]
    )
    (work / "scale").mkdir(parents=True, exist_ok=True)
    topo = Topology()
    try:
        with benchlib.bpf_stats_enabled():
            d, p = topo.namespace("d"), topo.namespace("p")
            topo.veth(d, "veth-d", p, "veth-p")
            d_mac, p_mac = benchlib.mac(d.name, "veth-d"), benchlib.mac(p.name, "veth-p")
            bed = scale.Bed(d, p, d_mac, p_mac, args, work / "scale")
            if args.xdp_mode == "native":
                attach_xdp_pass(p, "veth-p")
            scale.setup_addresses(d, p, max([n for n, _ in rungs] + s["bfdd"]), d_mac, p_mac)
            for n in s["bfdd"]:
                run.say(f"scale: bfdd, {n} sessions at 3x10 ms")
                try:
                    with watchdog(150 + n / 4 + s["seconds"] + s["settle"], f"scale bfdd {n}"):
                        r = scale.run_bfdd_rung(bed, n, 10)
                except Exception as e:
                    r = {"dut": "bfdd", "sessions": n, "interval_ms": 10, "error": f"{type(e).__name__}: {e}"}
                out["bfdd_rungs"].append(r)
                run.save()
                st = r.get("steady") or {}
                run.say(
                    f"scale bfdd {n}: up {st.get('sessions_up')}/{n}, flaps {st.get('flaps')}, "
                    f"CPU {(st.get('dut_cpu') or {}).get('cpu_pct_sched')} %"
                )
            for n, ms in rungs:
                run.say(f"scale: engine --kernel-tx, {n} sessions at 3x{ms} ms")
                try:
                    bound = 240 + n / 40 + s["seconds"] + s["settle"] + 30 * s["silence"]
                    with watchdog(bound, f"scale {n}"):
                        r = scale.run_rung(bed, n, ms)
                except Exception as e:
                    r = {"sessions": n, "interval_ms": ms, "error": f"{type(e).__name__}: {e}"}
                out["rungs"].append(r)
                run.save()
                st = r.get("steady") or {}
                run.say(
                    f"scale engine {n}: up {st.get('sessions_up')}/{n}, flaps {st.get('flaps')}, "
                    f"CPU {(st.get('engine_cpu') or {}).get('cpu_pct_sched')} % "
                    f"(bring-up {(r.get('bringup') or {}).get('after_s')} s)"
                )
    finally:
        topo.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="short", choices=sorted(PROFILES))
    ap.add_argument("--out", type=Path, help="run directory (default bench/out/<UTC stamp>)")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    ap.add_argument("--backends", default=",".join(ladder.BACKENDS), help="ladder/detection backends")
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
    backends = [x for x in args.backends.split(",") if x]
    prof = json.loads(json.dumps(PROFILES[args.profile]))
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
    ):
        ap.error("unknown part, backend or level, or a duration out of range")

    stamp, _, doc = benchlib.begin("suite", {"profile": args.profile, **prof})
    out = (args.out or benchlib.OUT / stamp).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    work.mkdir(exist_ok=True)
    doc |= {
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
    run = Run(out, doc)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    run.say(f"profile {args.profile}: parts {','.join(parts)}; writing {out}")
    status = 0
    steps = []
    if "ladder" in parts:
        steps.append(("ladder", lambda: part_ladder(run, prof, backends, work)))
    elif "detection" in parts:
        steps.append(("detection", lambda: part_detection_only(run, prof, backends, work)))
    if "cost" in parts:
        steps.append(("cost", lambda: part_cost(run, prof, work)))
    if "scale" in parts:
        steps.append(("scale", lambda: part_scale(run, prof, work)))
    try:
        for name, step in steps:
            try:
                step()
            except Exception as e:  # a broken part is reported; the next one still runs
                doc.setdefault("errors", []).append(f"{name}: {type(e).__name__}: {e}")
                run.say(f"{name}: ERROR {type(e).__name__}: {e}")
        doc["complete"] = not doc.get("errors")
    except (KeyboardInterrupt, Interrupted) as e:
        doc["interrupted"] = str(e) or "KeyboardInterrupt"
        status = 130
    finally:
        doc["duration_s"] = round(time.monotonic() - run.t0, 1)
        doc["leftover_namespaces"] = benchlib.require_clean_netns(f"{PREFIX}{os.getpid()}-")
        run.save()
    run.say(f"measured in {doc['duration_s']} s; rendering")
    try:
        report.render(out)
    except Exception as e:  # a chart must not cost the measurements
        print(f"report: {type(e).__name__}: {e}", file=sys.stderr)
        status = status or 1
    if doc["leftover_namespaces"]:
        print(f"WARNING: namespaces left behind: {' '.join(doc['leftover_namespaces'])}")
    print(f"run: {out / 'run.json'}\ntable: {out / 'table.md'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
