"""Time from process start to ``kernel-tx: XDP attached to`` (bcc compilation included).

Each run starts ``xdp-bfd --sessions F --kernel-tx veth-d`` in a fresh process
inside a namespace (one veth pair, one session, no peer needed), reads its log
from a pipe and timestamps every line as it arrives (monotonic clock, so the
figures carry the pipe's latency, well under a millisecond). The clock starts
just before the process is spawned, so interpreter start-up, imports, argument
parsing, bcc's compilation, the verifier and the attach are all inside it.
Each run is stopped with SIGTERM before the next one starts.

Phases reported per run (each from process start):
  deadman   ``kernel-tx: dead-man gate``: Python up, engine imported, args parsed
  attached  ``kernel-tx: XDP attached to``: bcc compiled and loaded, XDP attached (the target)
  serving   ``bfd: serving``: sweep attached, sockets bound, sessions installed

    sudo .venv/bin/python bench/start_time.py [--runs 5] [--xdp-mode auto]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import benchlib

from harness.engine import XDP_BFD
from harness.netns import PREFIX, Namespace, Topology

TARGET_S = 3.0
MARKS = {
    "deadman": "kernel-tx: dead-man gate",
    "attached": "kernel-tx: XDP attached to",
    "serving": "bfd: serving",
}


class TimedLog:
    """Every line of a pipe with its arrival time (monotonic seconds)."""

    def __init__(self, stream: Any) -> None:
        self.lines: list[tuple[float, str]] = []
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            with self._cv:
                self.lines.append((time.monotonic(), line.rstrip("\n")))
                self._cv.notify_all()
        with self._cv:
            self.lines.append((time.monotonic(), ""))  # EOF marker
            self._cv.notify_all()

    def wait_for(self, text: str, timeout: float) -> float | None:
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                for t, line in self.lines:
                    if text in line:
                        return t
                if (self.lines and self.lines[-1][1] == "") or time.monotonic() >= deadline:
                    return None
                self._cv.wait(timeout=max(0.0, min(0.5, deadline - time.monotonic())))

    def text(self) -> str:
        with self._cv:
            return "\n".join(line for _, line in self.lines)


def one_run(ns: Namespace, sessions: Path, mode: str, timeout: float) -> dict[str, Any]:
    argv = [
        XDP_BFD,
        "--sessions",
        str(sessions),
        "--kernel-tx",
        "veth-d",
        "--xdp-mode",
        mode,
        "--stats-dump",
        str(sessions.with_suffix(".stats.json")),
    ]
    t0 = time.monotonic()
    proc = ns.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    log = TimedLog(proc.stdout)
    out: dict[str, Any] = {}
    try:
        for name, text in MARKS.items():
            t = log.wait_for(text, timeout - (time.monotonic() - t0))
            out[f"{name}_s"] = round(t - t0, 3) if t is not None else None
        attach = next((line for _, line in log.lines if MARKS["attached"] in line), None)
        out["attach_line"] = attach
        if out["serving_s"] is None:
            out["error"] = "no 'bfd: serving' line:\n" + log.text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            out["exit_code"] = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out["exit_code"] = proc.wait(timeout=15)
        out["exit_after_sigterm_s"] = round(time.monotonic() - t0, 3)
    return out


def summary(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"min": min(values), "median": round(statistics.median(values), 3), "max": max(values)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--xdp-mode", default="auto", choices=("auto", "native", "generic"))
    ap.add_argument("--timeout", type=float, default=60.0, help="per run, seconds")
    args = ap.parse_args()
    if not 1 <= args.runs <= 50:
        ap.error("--runs: 1-50")
    stamp, work, doc = benchlib.begin("start_time", {"runs": args.runs, "xdp_mode": args.xdp_mode})
    doc["target_s"] = TARGET_S
    doc["runs"] = []
    t_all = time.monotonic()
    topo = Topology()
    try:
        d, p = topo.namespace("d"), topo.namespace("p")
        a, b = topo.veth(d, "veth-d", p, "veth-p")
        sessions = work / "sessions.yml"
        sessions.write_text(f"- {{local: {a.ip4}, peer: {b.ip4}, interface: veth-d}}\n")
        for i in range(args.runs):
            r = one_run(d, sessions, args.xdp_mode, args.timeout)
            r["run"] = i + 1
            doc["runs"].append(r)
            print(f"run {i + 1}: attached after {r['attached_s']} s", flush=True)
    finally:
        topo.close()
        doc["duration_s"] = round(time.monotonic() - t_all, 1)
        doc["leftover_namespaces"] = benchlib.require_clean_netns(f"{PREFIX}{os.getpid()}-")
        for name in MARKS:
            doc[f"{name}_s"] = summary(
                [r[f"{name}_s"] for r in doc["runs"] if r.get(f"{name}_s") is not None]
            )
        path = benchlib.write_result("start_time", stamp, doc)
    rows = [[r["run"], r["deadman_s"], r["attached_s"], r["serving_s"], r["exit_code"]] for r in doc["runs"]]
    print(benchlib.table(["run", "deadman s", "attached s", "serving s", "exit"], rows))
    att = doc["attached_s"]
    if att:
        print(
            f"start -> XDP attached: min {att['min']:.2f}  median {att['median']:.2f}  "
            f"max {att['max']:.2f} s  (target <= {TARGET_S:g} s)"
        )
    if doc["leftover_namespaces"]:
        print(f"WARNING: namespaces left behind: {' '.join(doc['leftover_namespaces'])}")
    print(f"result: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
