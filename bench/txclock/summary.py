#!/usr/bin/python3
"""Markdown tables from the results run.sh writes.

    bench/txclock/summary.py [RESULTS.json | RUN_DIR ...]    (default: every bench/out/txclock-*/results.json)

One row per witness group of each scenario (sess: the 10 ms sessions, sess50: the 50 ms ones, REF: the
reference tbf loop), then the control, gate, limits, baseline, classchange and backlog figures as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "out"
GROUP_NAMES = {"0": "sess", "1": "sess50", "2": "REF"}
HEADER = (
    "| run | scenario | group | n | intervals/expected | p50 | p99 | p99.9 | min | max | in 75-100 % | <75 % "
    "| tick-side min..max | BPF ns/tick | softirq % of 1 core | reinj/dead |"
)
EXTRAS = ("E5-control", "E6-gate", "E2c-limits", "E4-baseline-no-sessions", "E5b-classchange", "backlog")


def run_label(f: str) -> str:
    """results.json -> its directory's name; results-round1.json (the prototype's) -> round1."""
    p = Path(f)
    return p.parent.name if p.name == "results.json" else p.stem.split("-")[-1]


def row(f: str, name: str, v: dict[str, Any], g: str, x: dict[str, Any]) -> str:
    gaps = v.get("tick_side_gap_ms")
    ts = (gaps.get(g) or gaps.get(int(g))) if gaps else None
    tp = v.get("tick_prog", {})
    sq = v.get("softirq_pct_of_one_core", round(2 * v.get("softirq_cpu_pct_of_vm", 0), 1))  # 2 CPUs (round 1)
    group = GROUP_NAMES[str(g)]
    ref = group == "REF"
    cells = [
        run_label(f),
        name,
        group,
        x["sessions"],
        f"{x['intervals']}/{x['expected']}",
        x["p50"],
        x["p99"],
        x["p999"],
        f"{x['min']:.3f}",
        f"{x['max']:.3f}",
        x["frac_75_100"],
        x["frac_below_75"],
        ts or "",
        "" if ref else tp.get("avg_ns", ""),
        "" if ref else sq,
        "" if ref else f"{v.get('reinjected_at_start', '')}/{v.get('dead_at_end', '')}",
    ]
    return "| " + " | ".join(str(c) for c in cells) + " |"


def main() -> int:
    args = sys.argv[1:] or [str(p) for p in sorted(OUT.glob("txclock-*/results.json"))]
    files = [str(Path(a) / "results.json") if Path(a).is_dir() else a for a in args]
    docs = {f: json.loads(Path(f).read_text()) for f in files}
    print(HEADER)
    print("|---" * 16 + "|")
    for f, doc in docs.items():
        for name, v in doc.items():
            if "groups" not in v:
                continue
            for g, x in v["groups"].items():
                print(row(f, name, v, g, x))
    for f, doc in docs.items():
        for k in EXTRAS:
            if k in doc:
                print(f"\n{f}: {k}: {json.dumps(doc[k])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
