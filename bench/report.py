"""Tables and charts of one suite run; ``--publish`` makes it the committed result.

    .venv/bin/python bench/report.py RUN_DIR              # RUN_DIR/table.md + RUN_DIR/*.png
    .venv/bin/python bench/report.py RUN_DIR --publish    # also docs/benchmarks/ and README's results

Reads only ``RUN_DIR/run.json`` (written by bench/suite.py), so a run can be re-rendered or
published later, on another machine. Publishing copies run.json to
``docs/benchmarks/results.json``, the table to ``results.md``, the charts next to them, and
rewrites README.md between ``<!-- bench:results:start -->`` and ``<!-- bench:results:end -->``.

A run made with ``--repeat N`` holds its runs under ``runs``: every target is then given as
min-max across them and is met only when every run meets it; each run's own tables follow.

Nothing here turns a missing figure into a number: a part or row that recorded an error shows
that error where its figures would be, and every target it feeds is "not measured". A failure
(a flap, a bound missed) in a window whose witness stalled long enough to explain it is shown
as such and makes the target "not judged", never "met".
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "benchmarks"
README = REPO / "README.md"
START, END = "<!-- bench:results:start -->", "<!-- bench:results:end -->"
CHARTS = ("gap_survival.png", "flaps.png", "detection.png", "cpu_vs_sessions.png")
BACKEND_LABEL = {
    "bfdd": "stock bfdd",
    "engine-sw": "engine (software)",
    "engine-ktx": "engine --kernel-tx",
    "bfddp": "bfdd -> engine (bfddp)",
    "engine-pair": "engine \N{LEFT RIGHT ARROW} engine",
}
COLORS = {
    "bfdd": "#d62728",
    "engine-sw": "#ff7f0e",
    "engine-ktx": "#2ca02c",
    "bfddp": "#1f77b4",
    "engine-pair": "#9467bd",
}
PAIR = "engine-pair"
STATS_SLACK = 10  # bench/ladder.py's: packets a stats dump's latency may put outside the window
PART_NAMES = ("ladder", "detection", "cost", "scale", "takeover", "jitter")

# The targets, judged on the engine with --kernel-tx.
GAP_L4_FACTOR = 1.15
NS_PER_PACKET = 250
OVERSHOOT_MEAN_MS = 0.5
CPU_AT_1024_PCT = 2.0

# Issue 16's: ahead of the seed engine (C, same design) on its own headline figures.
SEED_COLD_NS = 400
SEED_COLD_OVER_BARE = 2.0
SEED_WARM_NS = 80
SEED_OVERSHOOT_MEAN_MS = 0.5
SEED_OVERSHOOT_MAX_MS = 1.0
SEED_GONE_MS = 10.0
SEED_SERVING_MS = 100.0
SEED_SCRAPE_MS = 100.0
SEED_STEP_MS = 1.0

DASH = "\N{EN DASH}"  # min-max spans
MET, NOT_MET, NOT_MEASURED, NOT_JUDGED = "met", "not met", "not measured", "not judged"
MARK = {MET: "met", NOT_MET: "**not met**", NOT_MEASURED: "not measured", NOT_JUDGED: "not judged"}


def _f(v: Any, digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


# -- the run(s) in a document ------------------------------------------------------


def _runs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs of a document: every repeat of a ``--repeat N`` run, or the run itself."""
    return list(doc["runs"]) if "runs" in doc else [doc]


def _levels(doc: dict[str, Any]) -> list[str]:
    seen: list[str] = []
    for r in _runs(doc):
        for c in r.get("ladder", []):
            if c["level"] not in seen:
                seen.append(c["level"])
    return seen


def _planned_levels(doc: dict[str, Any]) -> list[str]:
    p = doc.get("params") or {}
    levels = list(p.get("levels") or _levels(doc))
    if p.get("soak_s") and "soak" not in levels:
        levels.append("soak")
    return levels


def _cell(doc: dict[str, Any], level: str, backend: str) -> dict[str, Any] | None:
    return next((c for c in doc.get("ladder", []) if c["level"] == level and c["backend"] == backend), None)


def _cells(doc: dict[str, Any], level: str, backend: str) -> list[dict[str, Any]]:
    """Every run's cell for (level, backend)."""
    return [c for r in _runs(doc) if (c := _cell(r, level, backend)) is not None]


def _backends(doc: dict[str, Any]) -> list[str]:
    return doc.get("backends") or list(BACKEND_LABEL)


def _flaps(c: dict[str, Any] | None) -> int | None:
    """The worst count of Downs either end declared in the window (own counters or wire)."""
    if not c or "error" in c:
        return None
    vals = [c.get(k) for k in ("peer_flaps", "dut_flaps", "peer_downs_wire", "dut_downs_wire")]
    vals = [v for v in vals if v is not None]
    return max(vals) if vals else None


def xdp_pct(st: dict[str, Any]) -> float | None:
    """The XDP program's % of a core in a scale window; None when it was not measured (runs
    before 2026-12-01 wrote 0.0 for a window whose run stats never moved)."""
    if st.get("xdp_not_measured") or not st.get("xdp_packets_per_s"):
        return None
    return st.get("xdp_cpu_pct")


def _parts(doc: dict[str, Any]) -> list[str]:
    return list(doc.get("parts") or [p for p in PART_NAMES if doc.get(p)])


def part_errors(doc: dict[str, Any]) -> dict[str, str]:
    """A run's part-level errors (a part that stopped, the witness that did not start), by part."""
    out: dict[str, str] = {}
    for e in doc.get("errors", []):
        part, _, text = str(e).partition(": ")
        out.setdefault(part, text)
    return out


def run_errors(doc: dict[str, Any]) -> list[str]:
    """Every error a document recorded, part-level and row-level, one line each: what makes the
    suite exit non-zero (and scripts/test's bench smoke fail)."""
    out: list[str] = []
    runs = _runs(doc)
    for i, r in enumerate(runs):
        pre = f"run {i + 1}: " if "runs" in doc else ""
        out += [f"{pre}{e}" for e in r.get("errors", [])]
        for c in r.get("ladder", []):
            if "error" in c:
                out.append(f"{pre}ladder {c['level']} {c['backend']}: {c['error']}")
        for d in r.get("detection", []):
            if "error" in d:
                out.append(f"{pre}detection {d['level']} {d['backend']}: {d['error']}")
        for c in (r.get("cost") or {}).get("results", []):
            if "error" in c:
                out.append(f"{pre}cost {c.get('mode')}: {c['error']}")
        sc = r.get("scale") or {}
        for rung in [*sc.get("bfdd_rungs", []), *sc.get("rungs", [])]:
            what = f"scale {rung.get('dut', 'engine')} {rung.get('sessions')}@{rung.get('interval_ms')}"
            if "error" in rung:
                out.append(f"{pre}{what}: {rung['error']}")
            elif (rung.get("steady") or {}).get("xdp_not_measured"):
                out.append(f"{pre}{what}: XDP % of a core not measured: {rung['steady']['xdp_not_measured']}")
        t = r.get("takeover") or {}
        if "error" in t:
            out.append(f"{pre}takeover: {t['error']}")
        if "error" in (r.get("jitter") or {}):
            out.append(f"{pre}jitter: {r['jitter']['error']}")
        # A witness that could not answer for a window leaves that window unjudgeable.
        wits = [c.get("witness") for c in r.get("ladder", [])]
        wits += [s.get("witness") for d in r.get("detection", []) for s in d.get("samples", [])]
        wits += [t.get("witness"), *(x.get("witness") for x in t.get("takeovers", []))]
        bad = [w["error"] for w in wits if isinstance(w, dict) and "error" in w]
        if bad:
            out.append(f"{pre}witness: no figures for {len(bad)} window(s): {bad[0]}")
        if r.get("leftover_namespaces"):
            out.append(f"{pre}namespaces left behind: {' '.join(r['leftover_namespaces'])}")
    if "runs" in doc:
        if doc.get("leftover_namespaces"):
            out.append(f"namespaces left behind: {' '.join(doc['leftover_namespaces'])}")
        want = doc.get("repeat", len(runs))
        if len(runs) < want and not doc.get("interrupted"):
            out.append(f"{len(runs)} of {want} runs recorded")
    if doc.get("interrupted"):
        out.append(f"interrupted: {doc['interrupted']}")
    return out


# -- the witness ------------------------------------------------------------------------


def flap_stall_ms(doc: dict[str, Any]) -> float:
    """A witness stall this long explains a flap alone: the detection time less one interval
    (what a punctual sender already uses of it), 20 ms at 3x10 ms."""
    interval = doc.get("interval_ms", 10)
    return (doc.get("detect_mult", 3) - 1) * interval


def window_stall(c: dict[str, Any]) -> tuple[float | None, str]:
    """The worst stall either witness saw in a ladder window: (ms, which), (None, "") unknown."""
    ref = (c.get("witness") or {}).get("stall_ms")
    peer = c.get("peer_stall_ms")
    known = [(v, w) for v, w in ((ref, "witness stall"), (peer, "peer TX stall")) if v is not None]
    if not known:
        return None, ""
    return max(known, key=lambda x: x[0])


def stalled(c: dict[str, Any], threshold_ms: float) -> bool:
    ms, _ = window_stall(c)
    return ms is not None and ms >= threshold_ms


def flap_note(doc: dict[str, Any], c: dict[str, Any]) -> str:
    """How a window with flaps is to be read: under a machine stall, or not."""
    if not _flaps(c) or not stalled(c, flap_stall_ms(doc)):
        return ""
    ms, which = window_stall(c)
    return f"flap under a machine stall: {which} {ms:.1f} ms"


# -- facts ------------------------------------------------------------------------


def durations(doc: dict[str, Any]) -> str:
    p = doc.get("params", {})
    det = ", ".join(f"{k} kills under {lv}" for lv, k in p.get("detection", []))
    t = p.get("takeover") or {}
    tk = f", takeover {t['takeovers']} x at {t['sessions']} sessions" if t else ""
    n = p.get("repeat", 1)
    reps = f", {n} runs back to back" if n > 1 else ""
    return (
        f"profile {p.get('profile')}{reps}: {p.get('level_s')} s per level and backend, "
        f"soak {p.get('soak_s')} s per backend, detection {det or '-'}{tk}; "
        f"whole run {_f(doc.get('duration_s'), 0)} s"
    )


def machine_line(doc: dict[str, Any]) -> str:
    m = doc.get("machine", {})
    return (
        f"{m.get('cpu_model')} ({m.get('nproc')} vCPU), kernel {m.get('kernel')}, FRR {m.get('frr')}, "
        f"bcc {m.get('bcc')}, engine {m.get('engine_commit')}, load average at start "
        f"{' '.join(m.get('loadavg_at_start', []))}"
    )


def footer(doc: dict[str, Any]) -> str:
    return (
        f"{machine_line(doc)}\n{durations(doc)}; run {doc.get('started_at')}\ncommand: {doc.get('command')}"
    )


# -- targets ----------------------------------------------------------------------


@dataclass
class Target:
    """One target judged on one run; ``figures`` are what min-max across repeats is taken of."""

    key: str
    name: str
    measured: str
    verdict: str
    why: str = ""
    # (label, value, unit, digits); value None: not measured in this run
    figures: list[tuple[str, float | None, str, int]] = field(default_factory=list)

    def mark(self) -> str:
        return MARK[self.verdict] + (f": {self.why}" if self.why else "")


def _not_measured(key: str, name: str, why: str, figures: list | None = None) -> Target:
    return Target(key, name, "-", NOT_MEASURED, why, figures or [])


def _short(text: str, n: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


FLAP_TARGETS = {
    "engine-ktx": ("ktx_flaps", "engine --kernel-tx: 0 flaps at L1-L5 and in the soak"),
    PAIR: (
        "pair_flaps",
        "engine \N{LEFT RIGHT ARROW} engine (IPv4/IPv6, single-hop/multihop): 0 flaps at either end "
        "at L1-L5 and in the soak",
    ),
}


def _t_flaps(doc: dict[str, Any], perr: dict[str, str], backend: str = "engine-ktx") -> Target:
    key, name = FLAP_TARGETS[backend]
    want = [lv for lv in _planned_levels(doc) if lv != "L0"]
    cells = {lv: _cell(doc, lv, backend) for lv in want}
    figures = [(lv, _flaps(c), "", 0) for lv, c in cells.items()]
    measured = ", ".join(
        f"{lv} " + ("error" if c and "error" in c else "-" if c is None else _f(_flaps(c)))
        for lv, c in cells.items()
    )
    if not want:
        return _not_measured(key, name, "no stress level in this run")
    if "ladder" in perr:
        return Target(
            key, name, measured, NOT_MEASURED, f"the ladder stopped: {_short(perr['ladder'])}", figures
        )
    broken = [lv for lv, c in cells.items() if c is None or "error" in c]
    if broken:
        first = cells[broken[0]]
        why = f"no figure at {', '.join(broken)}" + (f" ({_short(first['error'])})" if first else "")
        return Target(key, name, measured, NOT_MEASURED, why, figures)
    flapped = [c for c in cells.values() if _flaps(c)]
    clean = [c for c in flapped if not stalled(c, flap_stall_ms(doc))]
    if clean:
        return Target(key, name, measured, NOT_MET, "", figures)
    if flapped:
        worst = max(window_stall(c)[0] or 0 for c in flapped)
        why = f"machine stalled in {len(flapped)} window(s) with flaps (stall up to {worst:.1f} ms)"
        return Target(key, name, measured, NOT_JUDGED, why, figures)
    return Target(key, name, measured, MET, "", figures)


def _t_pair_kernel_sent(doc: dict[str, Any], perr: dict[str, str]) -> Target:
    """Fleet links offloaded at both ends: in every engine <-> engine window (L0 included) each
    end sent every packet from the kernel and its counters agree with the bridge's capture. A
    window that disagrees because sessions went Down under a machine stall (re-establishment is
    userspace's, as it should be) is not judged; one that disagrees with a clean witness is not met."""
    key = "pair_kernel_sent"
    name = (
        "engine \N{LEFT RIGHT ARROW} engine: every periodic packet kernel-sent at both ends, "
        "counters = capture, every level"
    )
    cells = [c for c in doc.get("ladder", []) if c.get("backend") == PAIR]
    user = [
        sum(((c.get("kernel_sent") or {}).get(e) or {}).get("user_tx_packets") or 0 for e in ("d", "p"))
        for c in cells
        if "error" not in c
    ]
    figures = [("user-sent", max(user) if user else None, "", 0)]
    if "ladder" in perr:
        return _not_measured(key, name, f"the ladder stopped: {_short(perr['ladder'])}", figures)
    if not cells:
        return _not_measured(key, name, "no engine-pair window in this run", figures)
    broken = [c["level"] for c in cells if "error" in c]
    good = [c for c in cells if "error" not in c]
    agree = [c for c in good if c.get("counters_agree")]
    ticks = sum(((c.get("kernel_sent") or {}).get(e) or {}).get("tick_sent") or 0 for c in good for e in "dp")
    kernel = sum(
        ((c.get("kernel_sent") or {}).get(e) or {}).get("kernel_tx_packets") or 0 for c in good for e in "dp"
    )
    measured = (
        f"{len(agree)}/{len(cells)} windows agree; kernel-sent {kernel} (of which the clock's {ticks}), "
        f"user-sent {sum(user)}"
    )
    if broken:
        return Target(key, name, measured, NOT_MEASURED, f"no figure at {', '.join(broken)}", figures)
    off = [c for c in good if not c.get("counters_agree")]
    clean = [c for c in off if not (_flaps(c) and stalled(c, flap_stall_ms(doc)))]
    if clean:
        why = f"disagree at {', '.join(c['level'] for c in clean)}"
        return Target(key, name, measured, NOT_MET, why, figures)
    if off:
        levels = ", ".join(c["level"] for c in off)
        why = f"{levels}: sessions re-established after a flap under a machine stall"
        return Target(key, name, measured, NOT_JUDGED, why, figures)
    return Target(key, name, measured, MET, "", figures)


def _t_gap_l4(doc: dict[str, Any], perr: dict[str, str]) -> Target:
    interval = doc.get("interval_ms", 10)
    key, name = "ktx_gap_l4", f"max DUT→peer gap under L4 ≤ {GAP_L4_FACTOR} x {interval} ms"
    if "L4" not in _planned_levels(doc):
        return _not_measured(key, name, "no L4 window in this run")
    if "ladder" in perr:
        return _not_measured(
            key, name, f"the ladder stopped: {_short(perr['ladder'])}", [("max", None, " ms", 2)]
        )
    c = _cell(doc, "L4", "engine-ktx")
    if c is None or "error" in c or not c.get("gap_ms"):
        why = _short(c["error"]) if c and "error" in c else "no L4 engine-ktx window"
        return _not_measured(key, name, why, [("max", None, " ms", 2)])
    mx = c["gap_ms"]["max"]
    measured = f"{mx:.2f} ms ({mx / interval:.3f} x)"
    figures = [("max", mx, " ms", 2)]
    if mx <= GAP_L4_FACTOR * interval:
        return Target(key, name, measured, MET, "", figures)
    slack = (GAP_L4_FACTOR - 1) * interval
    if stalled(c, slack):
        ms, which = window_stall(c)
        return Target(
            key, name, measured, NOT_JUDGED, f"machine stalled in the window ({which} {ms:.1f} ms)", figures
        )
    return Target(key, name, measured, NOT_MET, "", figures)


def _cost_windows(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any] | None]]:
    """Each XDP mode the run planned, with its cost result (None: no window)."""
    results = {r.get("mode"): r for r in (doc.get("cost") or {}).get("results", [])}
    modes = ((doc.get("params") or {}).get("cost") or {}).get("modes") or list(results)
    return [(mode, results.get(mode)) for mode in modes]


def _engine_detections(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any] | None]]:
    """Each level the detection part planned, with the engine's row there (None: no row)."""
    rows = [d for d in doc.get("detection", []) if d["backend"] == "engine-ktx"]
    planned = (doc.get("params") or {}).get("detection") or [[d["level"], d["kills"]] for d in rows]
    return [(level, next((d for d in rows if d["level"] == level), None)) for level, _kills in planned]


def _t_cost(doc: dict[str, Any], perr: dict[str, str]) -> list[Target]:
    out = []
    for mode, r in _cost_windows(doc):
        key, name = f"cost_{mode}", f"≤ {NS_PER_PACKET} ns per packet ({mode} XDP)"
        empty = [("control", None, " ns", 0), ("echo", None, " ns", 0), ("warm", None, " ns", 0)]
        if "cost" in perr:
            out.append(_not_measured(key, name, f"the cost part stopped: {_short(perr['cost'])}", empty))
            continue
        if r is None or "error" in r:
            out.append(_not_measured(key, name, _short(r["error"]) if r else "no window in this run", empty))
            continue
        med = r.get("median", {})
        ctrl = (med.get("control") or {}).get("engine_ns_per_packet")
        echo = (med.get("echo") or {}).get("engine_ns_per_packet")
        warm = (med.get("burst") or {}).get("engine_ns_per_packet")
        figures = [("control", ctrl, " ns", 0), ("echo", echo, " ns", 0), ("warm", warm, " ns", 0)]
        if ctrl is None:
            out.append(_not_measured(key, name, "no control-path figure", figures))
            continue
        measured = f"control {ctrl:.0f} ns, echo {_f(echo, 0)} ns (warm: {_f(warm, 0)} ns)"
        ok = ctrl <= NS_PER_PACKET and (echo or 0) <= NS_PER_PACKET
        out.append(Target(key, name, measured, MET if ok else NOT_MET, "", figures))
    return out


def _detection_ok(
    level: str, samples: list[dict[str, Any]], kills: int, interval: float, complete: bool
) -> bool:
    if not samples or not complete:
        return False
    ov = [s["overshoot_ms"] for s in samples]
    if level == "L0":
        return sum(ov) / len(ov) <= OVERSHOOT_MEAN_MS
    return max(ov) <= interval


def _t_detection(doc: dict[str, Any], perr: dict[str, str]) -> list[Target]:
    interval = doc.get("interval_ms", 10)
    out = []
    for level, d in _engine_detections(doc):
        if level == "L0":
            name = f"mean detection overshoot ≤ {OVERSHOOT_MEAN_MS} ms (idle)"
        else:
            name = f"detection bounded under {level} (every kill seen, overshoot ≤ 1 interval)"
        key = f"detect_{level}"
        empty = [("mean", None, " ms", 2), ("max", None, " ms", 2), ("kills seen", None, "", 0)]
        if "detection" in perr and d is None:
            out.append(
                _not_measured(key, name, f"the detection part stopped: {_short(perr['detection'])}", empty)
            )
            continue
        if d is None or "error" in d:
            out.append(_not_measured(key, name, _short(d["error"]) if d else "no engine-ktx row", empty))
            continue
        s = d.get("summary") or {}
        ov = s.get("overshoot_ms") or {}
        n = s.get("n", 0)
        measured = f"mean {_f(ov.get('mean'), 2)}, max {_f(ov.get('max'), 2)} ms, {n}/{d['kills']} kills"
        figures = [
            ("mean", ov.get("mean"), " ms", 2),
            ("max", ov.get("max"), " ms", 2),
            ("kills seen", n, "", 0),
        ]
        samples = d.get("samples", [])
        complete = n == d["kills"]
        if _detection_ok(level, samples, d["kills"], interval, complete):
            out.append(Target(key, name, measured, MET, "", figures))
            continue
        # The kills whose span (last peer packet -> our Down) the witness saw stall by the bound's slack.
        slack = OVERSHOOT_MEAN_MS if level == "L0" else interval
        hit = [x for x in samples if (x.get("witness_stall_ms") or 0) >= slack]
        clean = [x for x in samples if x not in hit]
        if hit and complete and (not clean or _detection_ok(level, clean, len(clean), interval, True)):
            worst = max(x["witness_stall_ms"] for x in hit)
            why = (
                f"machine stalled in {len(hit)} of {len(samples)} kills (witness stall up to {worst:.1f} ms)"
            )
            out.append(Target(key, name, measured, NOT_JUDGED, why, figures))
        else:
            out.append(Target(key, name, measured, NOT_MET, "", figures))
    return out


def _planned_rungs(doc: dict[str, Any]) -> list[tuple[int, int]]:
    text = ((doc.get("params") or {}).get("scale") or {}).get("ladder")
    if not text:
        return [(r["sessions"], r["interval_ms"]) for r in (doc.get("scale") or {}).get("rungs", [])]
    out = []
    for part in text.split(","):
        n, _, ms = part.partition("@")
        out.append((int(n), int(ms or 100)))
    return out


def _t_scale(doc: dict[str, Any], perr: dict[str, str]) -> list[Target]:
    out = []
    rungs = {r["sessions"]: r for r in (doc.get("scale") or {}).get("rungs", [])}
    planned = {n for n, _ in _planned_rungs(doc)}
    specs = [
        (
            1024,
            "cpu_1024",
            f"≤ {CPU_AT_1024_PCT:g} % of a core at 1024 sessions",
            [("userspace", None, " %", 2), ("XDP", None, " %", 2)],
        ),
        (4096, "up_4096", "4096 sessions Up", [("Up", None, "", 0), ("flaps", None, "", 0)]),
    ]
    for n, key, name, empty in specs:
        r = rungs.get(n)
        if n not in planned:
            out.append(_not_measured(key, name, f"no {n}-session rung in this profile", empty))
            continue
        if "scale" in perr and r is None:
            out.append(_not_measured(key, name, f"the scale part stopped: {_short(perr['scale'])}", empty))
            continue
        if r is None or "error" in r or not r.get("steady"):
            out.append(
                _not_measured(key, name, _short(r["error"]) if r and "error" in r else "no figure", empty)
            )
            continue
        st = r["steady"]
        if n == 1024:
            cpu = (st.get("engine_cpu") or {}).get("cpu_pct_sched")
            xdp = xdp_pct(st)
            measured = f"userspace {_f(cpu, 2)} % at 3x{r['interval_ms']} ms (XDP program " + (
                f"{xdp:.2f} % besides)" if xdp is not None else "not measured)"
            )
            figures = [("userspace", cpu, " %", 2), ("XDP", xdp, " %", 2)]
            if cpu is None:
                out.append(_not_measured(key, name, "no CPU figure", figures))
            else:
                out.append(
                    Target(key, name, measured, MET if cpu <= CPU_AT_1024_PCT else NOT_MET, "", figures)
                )
        else:
            up = st.get("sessions_up")
            measured = f"{up}/4096 at 3x{r['interval_ms']} ms, {st.get('flaps')} flaps"
            figures = [("Up", up, "", 0), ("flaps", st.get("flaps"), "", 0)]
            out.append(Target(key, name, measured, MET if up == 4096 else NOT_MET, "", figures))
    return out


def _t_takeover(doc: dict[str, Any], perr: dict[str, str]) -> Target:
    detect = doc.get("detect_mult", 3) * doc.get("interval_ms", 10)
    t = doc.get("takeover") or {}
    n = t.get("sessions") or ((doc.get("params") or {}).get("takeover") or {}).get("sessions")
    key = "takeover_hitless"
    name = f"--pin takeovers hitless at {n} sessions (0 peer down events, 0 flaps, worst gap < {detect:g} ms)"
    empty = [("down events", None, "", 0), ("worst gap", None, " ms", 1), ("gone max", None, " ms", 1)]
    if "takeover" in perr and not t:
        return _not_measured(key, name, f"the takeover part stopped: {_short(perr['takeover'])}", empty)
    if not t or "error" in t or "wire" not in t:
        return _not_measured(key, name, _short(t["error"]) if "error" in t else "no figure", empty)
    gone = [r["gone_ms"] for r in t.get("takeovers", []) if r.get("gone_ms") is not None]
    down, flaps, gap = t.get("peer_down_events"), t.get("engine_flaps"), t["wire"].get("worst_gap_ms")
    figures = [
        ("down events", down, "", 0),
        ("worst gap", gap, " ms", 1),
        ("gone max", max(gone, default=None), " ms", 1),
    ]
    measured = (
        f"{len(t.get('takeovers', []))} takeovers: {down} peer down events, {flaps} engine flaps, "
        f"worst gap {_f(gap, 1)} ms, old engine gone "
        f"{_f(min(gone, default=None), 1)}{DASH}{_f(max(gone, default=None), 1)} ms"
    )
    if down == 0 and flaps == 0 and gap is not None and gap < detect:
        return Target(key, name, measured, MET, "", figures)
    # The peer's own witness: it was silent past the detection time before each Down it saw, so
    # the engine was right to declare them (and its replies, clocked by the peer's, paused too).
    own = t.get("peer_down_after_own_silence")
    if down and own == down and flaps == down:
        why = f"every peer down event ({down}) followed a silence of the peer's own past the detection time"
        return Target(key, name, measured, NOT_JUDGED, why, figures)
    # Downs are judged by the witness just before them when the run says when they were; a long
    # gap alone (or an older run) by the whole window's.
    at_downs = bool((down or flaps) and t.get("witness_at_downs"))
    ms = ((t["witness_at_downs"] if at_downs else t.get("witness")) or {}).get("stall_ms")
    if ms is not None and ms >= flap_stall_ms(doc):
        where = "just before the sessions went down" if at_downs else "in the window"
        why = f"machine stalled {where} (witness stall {ms:.1f} ms)"
        return Target(key, name, measured, NOT_JUDGED, why, figures)
    return Target(key, name, measured, NOT_MET, "", figures)


def _below_after_stall(r: dict[str, Any]) -> int:
    """Intervals below the jitter band the witness explains (a document from before the rule: none)."""
    return r["below_band"] - r.get("below_band_clean", r["below_band"])


def _t_jitter(doc: dict[str, Any], perr: dict[str, str]) -> Target:
    """Issue 15's: every kernel-clocked interval on the wire inside RFC 5880 §6.8.7's band. An
    interval above it is the machine's when the part's witness (a stream per CPU) stalled within it
    at least as long as it overran; one below it when the witness stalled in the interval before
    it at least as long as it falls short (its opening packet left late; bench/jitter.py). A
    document from before that rule counts every interval below the band as the clock's."""
    j = doc.get("jitter") or {}
    r = j.get("result") or {}
    band = r.get("band") or (0.75, 1.0)
    n = r.get("sessions") or (j.get("params") or {}).get("sessions")
    key = "jitter_band"
    name = (
        f"kernel-clocked intervals on the wire within {band[0] * 100:g}{DASH}{band[1] * 100:g} % of the "
        f"interval (engine \N{LEFT RIGHT ARROW} engine, {n} sessions)"
    )
    empty = [("outside the band", None, "", 0), ("max", None, " x", 3)]
    if "jitter" in perr and not j:
        return _not_measured(key, name, f"the jitter part stopped: {_short(perr['jitter'])}", empty)
    if not r or "error" in j:
        return _not_measured(key, name, _short(j["error"]) if "error" in j else "no figure", empty)
    below, above = r["below_band"], r["above_band"]
    clean, stalled = r["above_band_clean"], r["above_band_under_stall"]
    short_stalled = _below_after_stall(r)
    short_clean = below - short_stalled
    q = r.get("quantiles_of_nominal") or {}
    figures = [("outside the band", below + above, "", 0), ("max", q.get("1.0"), " x", 3)]
    measured = (
        f"{r['intervals']} intervals, {_f((r['share_in_band'] or 0) * 100, 3)} % in the band; "
        f"{below} below ({short_stalled} just after a witness stall as long), "
        f"{above} above ({stalled} under a witness stall as long); "
        f"p99.9 {_f(q.get('0.999'), 3)}, max {_f(q.get('1.0'), 3)} x; "
        f"clock's share of the packets {_f(r.get('clock_share'), 2)}"
    )
    if not r["intervals"]:
        return Target(key, name, measured, NOT_MET, "no interval on the wire", figures)
    if below == 0 and above == 0:
        return Target(key, name, measured, MET, "", figures)
    if short_clean == 0 and clean == 0:
        ms = (r.get("witness") or {}).get("stall_ms")
        why = "every interval outside the band beside a witness stall as long" + (
            f" (up to {ms:.1f} ms)" if ms is not None else ""
        )
        return Target(key, name, measured, NOT_JUDGED, why, figures)
    return Target(key, name, measured, NOT_MET, "", figures)


# -- issue 16's targets: ahead of the seed -------------------------------------------
#
# A timing figure over its bound is excused by the environment only when the witness of its own
# window stalled by at least the excess (everything was that late); a row whose every miss is so
# excused is not judged, a row with one unexcused miss is not met.


def _excused(value: float, bound: float, stall: float | None) -> bool:
    return value > bound and stall is not None and stall >= value - bound


def _timed(
    key: str, name: str, measured: str, figures: list, misses: list[tuple[float, float, float | None]]
) -> Target:
    """Judge a timing row from its misses: (value, bound, witness stall of the value's window)."""
    over = [m for m in misses if m[0] > m[1]]
    if not over:
        return Target(key, name, measured, MET, "", figures)
    if all(_excused(*m) for m in over):
        worst = max(m[2] or 0.0 for m in over)
        why = f"machine stalled as long as each miss (witness stall up to {worst:.1f} ms)"
        return Target(key, name, measured, NOT_JUDGED, why, figures)
    return Target(key, name, measured, NOT_MET, "", figures)


def _t_seed_cost(doc: dict[str, Any], perr: dict[str, str]) -> list[Target]:
    """Cold (one session, ~100 pps) control and echo packets against the bare reflector measured
    in the same windows, and the warm (burst) packet."""
    out = []
    for mode, r in _cost_windows(doc):
        cold = (
            f"seed_cold_{mode}",
            f"cold packet ≤ {SEED_COLD_NS} ns and ≤ {SEED_COLD_OVER_BARE:g} x the bare reflector "
            f"({mode} XDP)",
        )
        warm = (f"seed_warm_{mode}", f"warm packet ≤ {SEED_WARM_NS} ns ({mode} XDP)")
        why = (
            f"the cost part stopped: {_short(perr['cost'])}"
            if "cost" in perr
            else _short(r["error"])
            if r and "error" in r
            else "no window in this run"
            if r is None
            else ""
        )
        if why:
            out += [_not_measured(*cold, why), _not_measured(*warm, why)]
            continue
        med = r.get("median", {})
        rows = [(k, med.get(k) or {}) for k in ("control", "echo")]
        figures = [(k, m.get("engine_over_bare"), " x", 2) for k, m in rows]
        if any(m.get("engine_ns_per_packet") is None or m.get("engine_over_bare") is None for _, m in rows):
            out.append(_not_measured(*cold, "no engine or bare-reflector figure", figures))
        else:
            measured = ", ".join(
                f"{k} {m['engine_ns_per_packet']:.0f} ns ({m['engine_over_bare']:.2f} x bare "
                f"{_f(m.get('bare_ns_per_packet'), 0)} ns)"
                for k, m in rows
            )
            ok = all(
                m["engine_ns_per_packet"] <= SEED_COLD_NS and m["engine_over_bare"] <= SEED_COLD_OVER_BARE
                for _, m in rows
            )
            out.append(Target(*cold, measured, MET if ok else NOT_MET, "", figures))
        ns = (med.get("burst") or {}).get("engine_ns_per_packet")
        wfig = [("warm", ns, " ns", 0)]
        if ns is None:
            out.append(_not_measured(*warm, "no burst figure", wfig))
        else:
            bare = (med.get("burst") or {}).get("bare_ns_per_packet")
            measured = f"{ns:.0f} ns (bare reflector {_f(bare, 0)} ns)"
            out.append(Target(*warm, measured, MET if ns <= SEED_WARM_NS else NOT_MET, "", wfig))
    return out


def _t_seed_detection(doc: dict[str, Any], perr: dict[str, str]) -> list[Target]:
    """One session's kills (the detection part): mean and max overshoot, each kill excused only
    by its own witness."""
    out = []
    for level, d in _engine_detections(doc):
        key = f"seed_detect_{level}"
        name = (
            f"detection overshoot mean ≤ {SEED_OVERSHOOT_MEAN_MS:g}, max ≤ {SEED_OVERSHOOT_MAX_MS:g} ms, "
            f"one session ({'idle' if level == 'L0' else level})"
        )
        empty = [("mean", None, " ms", 2), ("max", None, " ms", 2)]
        if d is None or "error" in d:
            why = (
                f"the detection part stopped: {_short(perr['detection'])}"
                if "detection" in perr and d is None
                else _short(d["error"])
                if d
                else "no engine-ktx row"
            )
            out.append(_not_measured(key, name, why, empty))
            continue
        samples = d.get("samples") or []
        ov = [x["overshoot_ms"] for x in samples]
        if not ov or len(ov) != d["kills"]:
            figs = [("mean", None, " ms", 2), ("max", max(ov, default=None), " ms", 2)]
            out.append(_not_measured(key, name, f"{len(ov)} of {d['kills']} kills seen", figs))
            continue
        mean = sum(ov) / len(ov)
        figures = [("mean", mean, " ms", 2), ("max", max(ov), " ms", 2)]
        measured = f"mean {mean:.2f}, max {max(ov):.2f} ms over {len(ov)} kills"
        misses = [(x["overshoot_ms"], SEED_OVERSHOOT_MAX_MS, x.get("witness_stall_ms")) for x in samples]
        # The mean's excess is excused by the kills' worst stall only when that covers it too.
        worst = max((x.get("witness_stall_ms") or 0.0 for x in samples), default=None)
        misses.append((mean, SEED_OVERSHOOT_MEAN_MS, worst))
        out.append(_timed(key, name, measured, figures, misses))
    return out


def _rung_4096(doc: dict[str, Any], perr: dict[str, str]) -> tuple[dict[str, Any] | None, str]:
    """The largest rung of at least 4096 sessions, or why it cannot be read ("" with no rung
    when the scale part ran without it: the caller names what is missing)."""
    if not [n for n, _ in _planned_rungs(doc) if n >= 4096]:
        return None, "no 4096-session rung in this profile"
    rungs = [r for r in (doc.get("scale") or {}).get("rungs", []) if r.get("sessions", 0) >= 4096]
    if not rungs:
        return None, f"the scale part stopped: {_short(perr['scale'])}" if "scale" in perr else ""
    r = rungs[-1]
    return r, _short(r["error"]) if "error" in r else ""


def _t_seed_mass(doc: dict[str, Any], perr: dict[str, str]) -> Target:
    """Every peer silent at once at the largest rung (4096): every expiry reported and every
    session's Down on the wire within the bounds past detection (p50 for the mean)."""
    key = "seed_detect_4096"
    name = (
        f"every peer silent at once at 4096 sessions: every Down on the wire, overshoot "
        f"p50 ≤ {SEED_OVERSHOOT_MEAN_MS:g}, max ≤ {SEED_OVERSHOOT_MAX_MS:g} ms"
    )
    empty = [("p50", None, " ms", 2), ("max", None, " ms", 2), ("Downs", None, "", 0)]
    r, why = _rung_4096(doc, perr)
    sil = (r or {}).get("silence")
    if r is None or why or not sil:
        return _not_measured(key, name, why or "no mass silence in this run", empty)
    n, wire = r["sessions"], sil.get("wire") or {}
    ov = wire.get("overshoot_ms") or {}
    p50, mx, downs = ov.get("p50"), ov.get("max"), wire.get("downs_seen")
    figures = [("p50", p50, " ms", 2), ("max", mx, " ms", 2), ("Downs", downs, "", 0)]
    stall = (sil.get("witness") or {}).get("stall_ms")
    measured = (
        f"{sil.get('detections_reported')}/{n} expiries reported, {downs}/{n} Downs on the wire at "
        f"3x{r['interval_ms']} ms, p50 {_f(p50, 2)}, max {_f(mx, 2)} ms past detection, "
        f"{sil.get('still_up_at_end')} still Up; witness stall {_f(stall, 1)} ms"
    )
    pace = wire.get("pace") or {}
    if pace.get("late"):
        # Why they were late: a queue from the sweep to the wire, or a detection found late.
        measured += (
            f"; {pace.get('late_queued')} of {pace['late']} Downs late by > 1 ms fell due behind a "
            f"courier round's worth of others (due {_f(pace.get('due_per_ms_peak'))}/ms at the densest, "
            f"the path's pace {_f(pace.get('left_per_ms_while_queued'))}/ms)"
        )
    if p50 is None or mx is None:
        return _not_measured(key, name, "no Down matched on the wire", figures)
    if downs != n or sil.get("detections_reported") != n or sil.get("still_up_at_end"):
        return Target(key, name, measured, NOT_MET, "a session not declared Down", figures)
    misses = [(p50, SEED_OVERSHOOT_MEAN_MS, stall), (mx, SEED_OVERSHOOT_MAX_MS, stall)]
    return _timed(key, name, measured, figures, misses)


def _t_seed_takeover(doc: dict[str, Any], perr: dict[str, str]) -> list[Target]:
    """Request -> old engine gone, and request -> successor READY (the bench's own clock: the
    successor's STATUS= at SIGUSR2, MAINPID= in runs of older builds, and READY datagrams), each
    takeover excused only by its own witness."""
    t = doc.get("takeover") or {}
    n = t.get("sessions") or ((doc.get("params") or {}).get("takeover") or {}).get("sessions")
    specs = [
        ("seed_gone", f"--pin takeover at {n} sessions: request → old engine gone ≤ {SEED_GONE_MS:g} ms",
         "gone_ms", SEED_GONE_MS),
        ("seed_serving",
         f"--pin takeover at {n} sessions: request → successor serving (READY) ≤ {SEED_SERVING_MS:g} ms",
         "request_to_ready_ms", SEED_SERVING_MS),
    ]  # fmt: skip
    out = []
    for key, name, field_, bound in specs:
        empty = [("max", None, " ms", 1)]
        if not t or "error" in t or not t.get("takeovers"):
            why = (
                f"the takeover part stopped: {_short(perr['takeover'])}"
                if "takeover" in perr and not t
                else _short(t["error"])
                if "error" in t
                else "no takeover in this run"
            )
            out.append(_not_measured(key, name, why, empty))
            continue
        done = [x for x in t["takeovers"] if x.get(field_) is not None]
        vals = [x[field_] for x in done]
        figures = [("max", max(vals, default=None), " ms", 1)]
        if len(done) != len(t["takeovers"]):
            out.append(_not_measured(key, name, f"{len(done)} of {len(t['takeovers'])} measured", figures))
            continue
        stalls = [(x.get("witness") or {}).get("stall_ms") for x in done]
        measured = (
            f"{min(vals):.1f}{DASH}{max(vals):.1f} ms over {len(vals)} takeovers "
            f"(witness stall up to {_f(max((s for s in stalls if s is not None), default=None), 1)} ms)"
        )
        misses = [(v, bound, s) for v, s in zip(vals, stalls, strict=True)]
        out.append(_timed(key, name, measured, figures, misses))
    return out


def _t_seed_xdp_share(doc: dict[str, Any], perr: dict[str, str]) -> Target:
    key, name = "seed_xdp_share", "XDP % of a core measured from bpf run stats in every scale row"
    rungs = (doc.get("scale") or {}).get("rungs", [])
    good = [r for r in rungs if "error" not in r and r.get("steady")]
    have = [r["sessions"] for r in good if xdp_pct(r["steady"]) is not None]
    figures = [("rows measured", len(have), "", 0)]
    if "scale" in perr and not good:
        return _not_measured(key, name, f"the scale part stopped: {_short(perr['scale'])}", figures)
    if not good:
        return _not_measured(key, name, "no scale row", figures)
    measured = (
        f"{len(have)}/{len(good)} rows ("
        + ", ".join(f"{r['sessions']}: {_f(xdp_pct(r['steady']), 2)} %" for r in good)
        + ")"
    )
    return Target(key, name, measured, MET if len(have) == len(good) else NOT_MET, "", figures)


def _t_seed_stats(doc: dict[str, Any], perr: dict[str, str]) -> list[Target]:
    """Observability at the largest rung (4096): a scrape's answer within its bound, and no
    background step (the document, its exposition or JSON) holding the loop over its bound.
    The steps are the engine's own account (loop_lag.background); the dump's job is the one
    before it, of the same size (bench/scale.py)."""
    specs = [
        ("seed_scrape", f"stats at 4096 sessions: a scrape answered within {SEED_SCRAPE_MS:g} ms"),
        ("seed_step", f"stats at 4096 sessions: no background step over {SEED_STEP_MS:g} ms of loop time"),
    ]
    empty = [("max", None, " ms", 1)]
    r, why = _rung_4096(doc, perr)
    st = (r or {}).get("steady") or {}
    dump, scrape = st.get("stats_dump") or {}, st.get("metrics_scrape") or {}
    if why or not dump.get("wall_s") or not scrape.get("wall_s"):
        why = why or "no dump or scrape in this run"
        return [_not_measured(key, name, why, empty) for key, name in specs]
    jobs = [(label, x.get("engine_job") or {}) for label, x in (("dump", dump), ("scrape", scrape))]

    def job_text(label: str, x: dict[str, Any], job: dict[str, Any]) -> str:
        cpu = job.get("cpu_us")
        return (
            f"{label} {x['wall_s'] * 1000:.0f} ms ({_f(cpu / 1000 if cpu is not None else None, 0)} ms of "
            f"engine CPU in {job.get('steps', '-')} steps)"
        )

    answered = scrape["wall_s"] * 1000
    out = [
        _timed(
            specs[0][0],
            specs[0][1],
            ", ".join(job_text(label, x, job) for (label, job), x in zip(jobs, (dump, scrape), strict=True)),
            [("scrape", answered, " ms", 0)],
            [(answered, SEED_SCRAPE_MS, None)],
        )
    ]
    longest = [(label, job.get("step_max_us"), job.get("step_cpu_max_us")) for label, job in jobs]
    if any(us is None for _, us, _ in longest):
        return [*out, _not_measured(*specs[1], "the engine did not report its steps", empty)]
    busy = ", ".join(
        f"{label} {us / 1000:.2f} ms (thread CPU {_f(cpu / 1000 if cpu is not None else None, 2)})"
        for label, us, cpu in longest
    )
    quiet = (doc.get("scale") or {}).get("quiet_stats")
    if not quiet:
        worst = max(us for _, us, _ in longest) / 1000
        return [*out, _timed(*specs[1], f"longest step: {busy}", [("max", worst, " ms", 2)],
                             [(worst, SEED_STEP_MS, None)])]  # fmt: skip
    # Judged where the step is the engine's own work: with no peer, beside the figures under
    # the peers' traffic (whose softirqs this kernel charges to the step they interrupt).
    if "error" in quiet or quiet.get("step_max_us") is None:
        why = _short(quiet["error"]) if "error" in quiet else "the engine did not report its steps"
        return [*out, _not_measured(*specs[1], f"no peer: {why}", empty)]
    worst = quiet["step_max_us"] / 1000
    stall = (quiet.get("witness") or {}).get("stall_ms")
    measured = (
        f"no peer, {quiet['sessions']} sessions, {len(quiet.get('rounds') or [])} dumps and scrapes: "
        f"{worst:.2f} ms (thread CPU {_f((quiet.get('step_cpu_max_us') or 0) / 1000, 2)}, witness stall "
        f"{_f(stall, 1)} ms); under the peers' traffic: {busy}"
    )
    return [*out, _timed(*specs[1], measured, [("max", worst, " ms", 2)], [(worst, SEED_STEP_MS, stall)])]


def seed_targets(doc: dict[str, Any]) -> list[Target]:
    """Issue 16's rows, for the parts the run included."""
    parts, perr = _parts(doc), part_errors(doc)
    out: list[Target] = []
    if "cost" in parts:
        out += _t_seed_cost(doc, perr)
    if "detection" in parts and "engine-ktx" in _backends(doc):
        out += _t_seed_detection(doc, perr)
    if "scale" in parts:
        out += [_t_seed_mass(doc, perr), _t_seed_xdp_share(doc, perr), *_t_seed_stats(doc, perr)]
    if "takeover" in parts:
        out += _t_seed_takeover(doc, perr)
    return out


def targets(doc: dict[str, Any]) -> list[Target]:
    """The issue's targets judged on one run; a part the run did not include has none."""
    parts, perr = _parts(doc), part_errors(doc)
    out: list[Target] = []
    if "ladder" in parts and "engine-ktx" in _backends(doc):
        out += [_t_flaps(doc, perr), _t_gap_l4(doc, perr)]
    if "ladder" in parts and PAIR in _backends(doc):
        out += [_t_flaps(doc, perr, PAIR), _t_pair_kernel_sent(doc, perr)]
    if "cost" in parts:
        out += _t_cost(doc, perr)
    if "detection" in parts and "engine-ktx" in _backends(doc):
        out += _t_detection(doc, perr)
    if "scale" in parts:
        out += _t_scale(doc, perr)
    if "takeover" in parts:
        out.append(_t_takeover(doc, perr))
    if "jitter" in parts:
        out.append(_t_jitter(doc, perr))
    return out + seed_targets(doc)


def _span(vals: list[float], unit: str, digits: int) -> str:
    lo, hi = min(vals), max(vals)
    if lo == hi:
        return f"{_f(float(lo) if digits else lo, digits)}{unit}"
    return f"{_f(float(lo) if digits else lo, digits)}{DASH}{_f(float(hi) if digits else hi, digits)}{unit}"


def aggregate(per_run: list[list[Target]]) -> list[Target]:
    """Targets across the runs of a repeated run: each figure as min-max over the runs that
    measured it; met only when every run met it (not met if any run missed it; else not
    measured, else not judged, naming the runs)."""
    n = len(per_run)
    keys: list[str] = []
    for ts in per_run:
        keys += [t.key for t in ts if t.key not in keys]
    out = []
    for key in keys:
        ts = [next((t for t in run if t.key == key), None) for run in per_run]
        first = next(t for t in ts if t is not None)
        labels: list[tuple[str, str, int]] = []
        for t in ts:
            for label, _, unit, digits in t.figures if t else []:
                if label not in [x[0] for x in labels]:
                    labels.append((label, unit, digits))
        parts = []
        for label, unit, digits in labels:
            vals = [v for t in ts if t for lb, v, _, _ in t.figures if lb == label and v is not None]
            if not vals:
                parts.append(f"{label} -")
                continue
            text = f"{label} {_span(vals, unit, digits)}"
            if len(vals) < n:
                text += f" ({len(vals)} of {n} runs)"
            parts.append(text)
        verdicts = [t.verdict if t else NOT_MEASURED for t in ts]

        def runs_with(v: str, verdicts: list[str] = verdicts) -> list[int]:
            return [i + 1 for i, x in enumerate(verdicts) if x == v]

        if all(v == MET for v in verdicts):
            verdict, why = MET, f"in all {n} runs"
        else:
            verdict = next(v for v in (NOT_MET, NOT_MEASURED, NOT_JUDGED) if v in verdicts)
            idx = runs_with(verdict)
            reason = next(
                (t.why for t, v in zip(ts, verdicts, strict=True) if v == verdict and t and t.why), ""
            )
            why = f"in run{'s' if len(idx) > 1 else ''} {', '.join(map(str, idx))} of {n}" + (
                f" ({reason})" if reason else ""
            )
        out.append(Target(key, first.name, ", ".join(parts) or "-", verdict, why, []))
    return out


def all_targets(doc: dict[str, Any]) -> list[Target]:
    """The targets of a document: one run's, or every repeat's aggregated."""
    if "runs" in doc:
        return aggregate([targets(r) for r in doc["runs"]])
    return targets(doc)


# -- markdown -----------------------------------------------------------------------


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |"


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    return [_row(head), _row(["---"] * len(head)), *(_row(r) for r in rows)]


def _error_row(ident: list[Any], error: str, width: int) -> list[Any]:
    """A row that recorded an error: who it is, then the error where the figures would be."""
    return [*ident, f"**error**: {_short(error, 300)}", *[""] * (width - len(ident) - 1)]


def targets_md(doc: dict[str, Any]) -> list[str]:
    head = ["target", "measured", ""]
    if "runs" in doc:
        head[1] = f"measured (min{DASH}max over {len(doc['runs'])} runs)"
    return _table(head, [[t.name, t.measured, t.mark()] for t in all_targets(doc)])


def _part_stopped(doc: dict[str, Any], part: str) -> list[str]:
    err = part_errors(doc).get(part)
    if not err:
        return []
    return [f"**The {part} part stopped with an error:** {_short(err, 400)} (its targets: not measured)", ""]


LADDER_HEAD = [
    "level",
    "backend",
    "peer flaps (FRR / wire)",
    "DUT flaps (own / wire)",
    "gap p50 ms",
    "p99",
    "p99.9",
    "max",
    "never sent",
    "DUT packets / nominal",
    "witness stall ms",
    "peer TX max gap ms",
    "note",
]


def ladder_md(doc: dict[str, Any]) -> list[str]:
    rows = []
    for level in _levels(doc):
        for b in _backends(doc):
            c = _cell(doc, level, b)
            if c is None:
                continue
            ident = [level, BACKEND_LABEL.get(b, b)]
            if "error" in c:
                rows.append(_error_row(ident, c["error"], len(LADDER_HEAD)))
                continue
            g = c.get("gap_ms") or {}
            w = c.get("witness") or {}
            rows.append(
                [
                    *ident,
                    f"{_f(c.get('peer_flaps'))} / {_f(c.get('peer_downs_wire'))}",
                    f"{_f(c.get('dut_flaps'))} / {_f(c.get('dut_downs_wire'))}",
                    _f(g.get("p50"), 2),
                    _f(g.get("p99"), 2),
                    _f(g.get("p999"), 2),
                    _f(g.get("max"), 1),
                    _f(c.get("missing_slots")),
                    f"{_f(c.get('dut_packets'))} / {_f(c.get('nominal_dut_packets'))}",
                    f"witness error: {_short(w['error'], 80)}" if "error" in w else _f(w.get("stall_ms"), 1),
                    _f((c.get("peer_tx_gap_ms") or {}).get("max"), 1),
                    flap_note(doc, c),
                ]
            )
    return [*_part_stopped(doc, "ladder"), *_table(LADDER_HEAD, rows)]


ECHO_HEAD = [
    "level",
    "interval ms",
    "sent",
    "returned",
    "lost",
    "no way out / send errors",
    "RTT µs min / mean / p99 / max (since echo start)",
    "witness stall ms",
]


def echo_md(doc: dict[str, Any]) -> list[str]:
    """Our echo in the engine-ktx cells (bench/ladder.py echo_figures): advisory, exposed to scheduling."""
    rows = []
    for level in _levels(doc):
        c = _cell(doc, level, "engine-ktx")
        if c is None or "error" in c or "echo" not in c:
            continue
        e = c["echo"]
        if "error" in e:
            rows.append(_error_row([level], e["error"], len(ECHO_HEAD)))
            continue
        rtt = e.get("rtt_us") or {}
        w = c.get("witness") or {}
        rows.append(
            [
                level,
                _f(e.get("interval_ms")),
                _f(e.get("sent")),
                _f(e.get("returned")),
                _f(e.get("lost")),
                f"{_f(e.get('skipped'))} / {_f(e.get('send_errors'))}",
                " / ".join(_f(rtt.get(k), 0) for k in ("min", "mean", "p99", "max")),
                _f(w.get("stall_ms"), 1),
            ]
        )
    return _table(ECHO_HEAD, rows) if rows else []


PAIR_HEAD = [
    "level",
    "session",
    "flaps d / p (own)",
    "Downs on the wire d→p / p→d",
    "gap max ms d→p / p→d",
    "never sent d→p / p→d",
    "d kernel / user / tick / captured",
    "p kernel / user / tick / captured",
    "counters agree",
]


def _counts(e: dict[str, Any]) -> str:
    if "error" in e:
        return f"error: {_short(e['error'], 60)}"
    return " / ".join(_f(e.get(k)) for k in ("kernel_tx_packets", "user_tx_packets", "tick_sent", "captured"))


def _agree(d: dict[str, Any], p: dict[str, Any]) -> str:
    """yes, or why not: packets sent from userspace (then whether kernel + user still accounts
    for every captured packet), a count off the capture, or a clock that never ticked."""
    if d.get("agree") and p.get("agree"):
        return "yes"
    why = []
    for side, e in (("d", d), ("p", p)):
        if "error" in e or e.get("agree"):
            continue
        off = (e.get("kernel_minus_captured") or 0) + (e.get("user_tx_packets") or 0)
        bits = [f"user {e.get('user_tx_packets')}"] if e.get("user_tx_packets") else []
        bits.append(f"kernel+user-captured {off:+d}")
        if not e.get("tick_sent"):
            bits.append("no tick")
        why.append(f"{side}: {', '.join(bits)}")
    return "**no**" + (f" ({'; '.join(why)})" if why else "")


def pair_md(doc: dict[str, Any]) -> list[str]:
    """The engine <-> engine cells, a row per session: both ends' flaps, both directions on the
    wire (the bridge's capture), both ends' kernel- and user-sent counts against the capture."""
    rows = []
    views: list[str] = []
    for c in doc.get("ladder", []):
        if c.get("backend") != PAIR:
            continue
        if "error" in c:
            rows.append(_error_row([c["level"], "-"], c["error"], len(PAIR_HEAD)))
            continue
        for name, x in (c.get("pair_sessions") or {}).items():
            ends, dp, pd = x.get("ends") or {}, x.get("d_to_p") or {}, x.get("p_to_d") or {}
            d, p = ends.get("d") or {}, ends.get("p") or {}
            rows.append(
                [
                    c["level"],
                    name,
                    f"{_f(d.get('flaps'))} / {_f(p.get('flaps'))}",
                    f"{_f(dp.get('downs_wire'))} / {_f(pd.get('downs_wire'))}",
                    f"{_f((dp.get('gap_ms') or {}).get('max'))} / {_f((pd.get('gap_ms') or {}).get('max'))}",
                    f"{_f(dp.get('missing_slots'))} / {_f(pd.get('missing_slots'))}",
                    _counts(d),
                    _counts(p),
                    _agree(d, p),
                ]
            )
        if cv := c.get("capture_views"):
            seen = "; ".join(f"{k} {v.get('d_to_p')} / {v.get('p_to_d')}" for k, v in cv.items())
            views.append(f"{c['level']}: {seen}")
    if not rows:
        return []
    return [
        "Two engines, both `--kernel-tx` as the unit runs them, on a bridge of their own (d — m — p); "
        "the wire is the capture on the bridge port m-a. *kernel / user / tick*: each end's "
        "`kernel_tx_packets`, `user_tx_packets` and `tick_sent` between a stats dump before and one "
        "after the window; *captured*: that end's packets the bridge saw between the two dumps; "
        f"they agree when user is 0, the clock ticked and kernel is within {STATS_SLACK} of captured.",
        "",
        *_table(PAIR_HEAD, rows),
        "",
        "What each capture saw in the window, d→p / p→d, every session (a capture on an XDP interface "
        "misses what its program consumes and what it sends with XDP_TX): " + " · ".join(views),
    ]


DETECTION_HEAD = [
    "stress",
    "backend",
    "kills seen",
    "latency min / mean / p99 / max ms",
    "overshoot (same)",
    "witness worst stall ms",
    "failed kills",
]


def detection_md(doc: dict[str, Any]) -> list[str]:
    rows = []
    for d in doc.get("detection", []):
        ident = [d["level"], BACKEND_LABEL.get(d["backend"], d["backend"])]
        if "error" in d:
            rows.append(_error_row(ident, d["error"], len(DETECTION_HEAD)))
            continue
        s = d.get("summary") or {}
        lat, ov = s.get("latency_ms") or {}, s.get("overshoot_ms") or {}
        rows.append(
            [
                *ident,
                f"{s.get('n', 0)}/{d['kills']}",
                " / ".join(_f(lat.get(k), 2) for k in ("min", "mean", "p99", "max")),
                " / ".join(_f(ov.get(k), 2) for k in ("min", "mean", "p99", "max")),
                _f(s.get("witness_stall_ms_max"), 2),
                _short("; ".join(d.get("failed", [])), 120),
            ]
        )
    return [*_part_stopped(doc, "detection"), *_table(DETECTION_HEAD, rows)]


COST_HEAD = [
    "XDP mode",
    "path",
    "engine ns/pkt (median)",
    "range",
    "bare reflector ns/pkt",
    "ratio",
    "packets",
]


def cost_md(doc: dict[str, Any]) -> list[str]:
    rows = []
    for r in (doc.get("cost") or {}).get("results", []):
        if "error" in r:
            rows.append(_error_row([r.get("mode")], r["error"], len(COST_HEAD)))
            continue
        for kind, med in (r.get("median") or {}).items():
            rows.append(
                [
                    r["mode"],
                    {
                        "control": "control reply (RX-clocked TX)",
                        "echo": "echo reflection",
                        "burst": "echo, warm",
                        "sbfd": "S-BFD reflector answer",
                        "sbfd_burst": "S-BFD reflector, warm",
                        "auth": "authenticated packet accepted (keyed SHA1, no digest)",
                    }[kind],
                    _f(med.get("engine_ns_per_packet"), 0),
                    f"{_f(med['engine_min'], 0)}-{_f(med['engine_max'], 0)}"
                    if med.get("engine_min") is not None and med.get("engine_max") is not None
                    else "-",
                    _f(med.get("bare_ns_per_packet"), 0),
                    _f(med.get("engine_over_bare"), 2),
                    _f(med.get("packets")),
                ]
            )
    return [*_part_stopped(doc, "cost"), *_table(COST_HEAD, rows)]


SCALE_HEAD = [
    "DUT",
    "sessions",
    "timers ms",
    "Up",
    "flaps",
    "userspace CPU % of a core",
    "XDP ns/pkt",
    "XDP % of a core",
    "bring-up s / flaps on the way",
    "peer late slots / resyncs",
    "peer worst gap ms / gaps past detection: bring-up; window",
    "flaps the peer saw / after its own silence: bring-up; window",
]


def scale_md(doc: dict[str, Any]) -> list[str]:
    sc = doc.get("scale") or {}
    rows = []
    for key, label in (("bfdd_rungs", "stock bfdd"), ("rungs", "engine --kernel-tx")):
        for r in sc.get(key, []):
            ident = [label, r["sessions"], f"3x{r['interval_ms']}"]
            if "error" in r:
                rows.append(_error_row(ident, r["error"], len(SCALE_HEAD)))
                continue
            st, bu = r.get("steady") or {}, r.get("bringup") or {}
            pe = st.get("peer") or {}
            if key == "bfdd_rungs":
                cpu, ns, xdp = (st.get("dut_cpu") or {}).get("cpu_pct_sched"), "n/a", "n/a (no XDP)"
            else:
                cpu, ns = (
                    (st.get("engine_cpu") or {}).get("cpu_pct_sched"),
                    _f(st.get("xdp_ns_per_packet"), 0),
                )
                xdp = (
                    f"not measured: {st['xdp_not_measured']}"
                    if st.get("xdp_not_measured")
                    else _f(xdp_pct(st), 3)
                    if xdp_pct(st) is not None
                    else "not measured (run stats did not move)"
                )
            rows.append(
                [
                    *ident,
                    f"{_f(st.get('sessions_up'))}/{r['sessions']}",
                    _f(st.get("flaps")),
                    _f(cpu, 2),
                    ns,
                    xdp,
                    f"{_f(bu.get('after_s'))} / {_f(st.get('flaps_before_window'))}",
                    f"{_f(pe.get('late_slots'))} / {_f(pe.get('resyncs'))}",
                    # The bed's own silences: a flap after one is the peer's, not the DUT's.
                    f"{_f(bu.get('peer_gap_max_ms'))} / {_f(bu.get('peer_gaps_over_detect'))}; "
                    f"{_f(pe.get('gap_max_ms'))} / {_f(pe.get('gaps_over_detect'))}",
                    # Those the peer cannot explain by its own silence are the DUT's.
                    f"{_f(bu.get('peer_flaps'))} / {_f(bu.get('peer_flaps_after_silence'))}; "
                    f"{_f(pe.get('flaps'))} / {_f(pe.get('flaps_after_silence'))}",
                ]
            )
    return [*_part_stopped(doc, "scale"), *_table(SCALE_HEAD, rows), *silence_md(sc)]


SILENCE_HEAD = [
    "sessions",
    "timers ms",
    "expiries the kernel reported",
    "kernel-measured silence ms median / max",
    "still Up at the end",
    "wire: Downs / sessions seen Up",
    "wire: Down past detection ms p50 / max",
    "wire: Downs without a silence",
    "wire: Downs due per ms (densest 5 ms) / left per ms while queued",
    "of the Downs, the kernel's",
    "report to the controller past detection ms p50 / max",
    "engine CPU µs per expiry",
    "witness worst stall ms",
]


def silence_md(sc: dict[str, Any]) -> list[str]:
    """Every peer silent at once (scale.py's silence check), where the profile ran it."""
    rows = []
    for r in sc.get("rungs", []):
        si = r.get("silence")
        if not si:
            continue
        det, wire = si.get("detection_ms") or {}, si.get("wire") or {}
        over, pace = wire.get("overshoot_ms") or {}, wire.get("pace") or {}
        # Only where the sessions came from a bfddp controller (scale.py --controller bfddp).
        told = (si.get("controller") or {}).get("overshoot_ms") or {}
        rows.append(
            [
                r["sessions"],
                f"3x{r['interval_ms']}",
                f"{_f(si.get('detections_reported'))}/{r['sessions']}",
                f"{_f(det.get('median'))} / {_f(det.get('max'))}",
                _f(si.get("still_up_at_end")),
                f"{_f(wire.get('downs_seen'))} / {_f(wire.get('up_seen'))}",
                f"{_f(over.get('p50'))} / {_f(over.get('max'))}",
                _f(wire.get("early")),
                # The demand against the path's pace (scale.py down_pace): a queue, or a late sweep.
                f"{_f(pace.get('due_per_ms_peak'))} / {_f(pace.get('left_per_ms_while_queued'))}",
                _f(si.get("kernel_sent_downs")),
                f"{_f(told.get('p50'))} / {_f(told.get('max'))}" if told else "-",
                _f(si.get("engine_cpu_us_per_expiry")),
                # Over the wire figures' span: from the first silence to the last Down.
                _f((si.get("witness") or {}).get("stall_ms")),
            ]
        )
    if not rows:
        return []
    return [
        "",
        "Every peer silent at once (the peer exits; docs/benchmarks.md, scale.py):",
        "",
        *_table(SILENCE_HEAD, rows),
    ]


TAKEOVER_HEAD = [
    "sessions",
    "takeovers",
    "old engine gone ms min / max",
    "request → successor serving (READY) ms min / max",
    "peer down events",
    "of them after the peer's own silence",
    "engine flaps",
    "worst wire gap ms",
    "witness worst stall ms",
    "peer scheduling",
]


def _minmax(vals: list[float], digits: int = 1) -> str:
    return f"{_f(min(vals), digits)} / {_f(max(vals), digits)}" if vals else "-"


def takeover_md(doc: dict[str, Any]) -> list[str]:
    t = doc.get("takeover") or {}
    rows = []
    if t:
        planned = t.get("takeovers_planned") or (t.get("params") or {}).get("takeovers")
        ident = [t.get("sessions") or (t.get("params") or {}).get("sessions")]
        done = t.get("takeovers", [])
        if "error" in t:
            rows.append(
                _error_row(ident, f"{t['error']} (after {len(done)} of {planned})", len(TAKEOVER_HEAD))
            )
        else:
            stalls = [
                x["witness"]["stall_ms"] for x in done if (x.get("witness") or {}).get("stall_ms") is not None
            ]
            if (t.get("witness") or {}).get("stall_ms") is not None:
                stalls.append(t["witness"]["stall_ms"])
            rows.append(
                [
                    *ident,
                    f"{len(done)}/{planned}",
                    _minmax([x["gone_ms"] for x in done if x.get("gone_ms") is not None]),
                    _minmax(
                        [x["request_to_ready_ms"] for x in done if x.get("request_to_ready_ms") is not None]
                    ),
                    _f(t.get("peer_down_events")),
                    _f(t.get("peer_down_after_own_silence")),
                    _f(t.get("engine_flaps")),
                    _f((t.get("wire") or {}).get("worst_gap_ms"), 1),
                    _f(max(stalls), 1) if stalls else "-",
                    t.get("peer_sched", "-"),
                ]
            )
    return [*_part_stopped(doc, "takeover"), *_table(TAKEOVER_HEAD, rows)]


JITTER_HEAD = [
    "sessions",
    "intervals",
    "in the band %",
    "below (after a witness stall)",
    "above (under a witness stall)",
    "p0.1 / p50 / p99.9 / max x nominal",
    "clock's share",
    "flaps",
    "witness stall ms",
]


def jitter_md(doc: dict[str, Any]) -> list[str]:
    j = doc.get("jitter") or {}
    rows: list[list[Any]] = []
    if "error" in j:
        rows.append(_error_row([(j.get("params") or {}).get("sessions")], j["error"], len(JITTER_HEAD)))
    elif r := j.get("result"):
        q = r.get("quantiles_of_nominal") or {}
        rows.append(
            [
                r.get("sessions"),
                r["intervals"],
                _f((r["share_in_band"] or 0) * 100, 3),
                f"{r['below_band']} ({_below_after_stall(r)})",
                f"{r['above_band']} ({r['above_band_under_stall']})",
                " / ".join(_f(q.get(k), 3) for k in ("0.001", "0.5", "0.999", "1.0")),
                _f(r.get("clock_share"), 2),
                (r.get("engines") or {}).get("flaps"),
                _f((r.get("witness") or {}).get("stall_ms"), 1),
            ]
        )
    return [*_part_stopped(doc, "jitter"), *_table(JITTER_HEAD, rows)]


def engine_sched_sentence(doc: dict[str, Any]) -> str:
    """How the run scheduled the engine backends (runs before --engine-sched were all "plain")."""
    levels = ", ".join(doc.get("reserved_levels", []))
    if doc.get("engine_sched", "plain") == "unit":
        return (
            "Engine backends run as the packaged unit runs them: `chrt -f 60` and "
            f"`--sched-deadline {doc.get('engine_reservation')}` at every level; bfdd runs as FRR's unit "
            "runs it (default class)."
        )
    reservation = doc.get("engine_reservation")
    return (
        f"Engine backends run at the default class, holding `--sched-deadline {reservation}` "
        f"at {levels}; bfdd runs at its default."
    )


def witness_sentence(doc: dict[str, Any]) -> str:
    w = doc.get("witness") or {}
    err = part_errors(doc).get("witness")
    if err:
        return f"**Witness: not running** ({_short(err, 300)}): no window below is judged against it."
    if not w:
        return "No witness ran in this run (made before the suite had one)."
    return (
        f"Witness: {w.get('what')}, one frame every {w.get('period_ms')} ms timed by the kernel; "
        "a row's *witness stall* is how much later than its period its worst frame came in that "
        "window (for a detection row: between the peer's last packet and our Down, worst kill). "
        f"A flap in a window where the witness or the peer's own cadence stalled ≥ {flap_stall_ms(doc):g} ms "
        "(the detection time less one interval) is marked *flap under a machine stall* and judged "
        "neither clean nor a failure of ours: its target says *not judged*."
    )


def sections_md(doc: dict[str, Any], charts: str = "", level: str = "##") -> list[str]:
    """One run's tables (the targets table aside)."""
    lines: list[str] = []
    parts = _parts(doc)
    if "ladder" in parts or doc.get("ladder"):
        lines += [
            f"{level} Stress ladder",
            "",
            "Levels: "
            + "; ".join(
                f"{k} {v['what']} (`stress-ng {' '.join(v['stress_ng'])}`)"
                if v["stress_ng"]
                else f"{k} {v['what']}"
                for k, v in doc.get("levels", {}).items()
            )
            + f"; soak: {', '.join(doc.get('soak_levels', []))} back to back in one window. "
            + engine_sched_sentence(doc),
            "",
            *ladder_md(doc),
            "",
        ]
        if pair := pair_md(doc):
            lines += [f"{level}# Engine \N{LEFT RIGHT ARROW} engine", "", *pair, ""]
        if echo := echo_md(doc):
            lines += [
                f"{level}# Echo originator (engine, `--kernel-tx`)",
                "",
                "Our echo rides along in the engine's `--kernel-tx` cells: `echo_tx_ms` 10 against a peer "
                "that allows 20 ms and forwards it back. Counts are the window's (a probe is judged a "
                "detection time after it left); echo is advisory and sent from the engine's loop, so "
                "stress shows here as loss and round-trip tail, never as a flap.",
                "",
                *echo,
                "",
            ]
        if "gap_survival.png" in charts:
            lines += ["![gap survival](gap_survival.png)", "", "![flaps](flaps.png)", ""]
    if "detection" in parts or doc.get("detection"):
        lines += [f"{level} Detection latency", "", *detection_md(doc), ""]
        if "detection.png" in charts:
            lines += ["![detection](detection.png)", ""]
    if "cost" in parts or (doc.get("cost") or {}).get("results"):
        lines += [f"{level} Fast-path cost", "", *cost_md(doc), ""]
    if "scale" in parts or doc.get("scale"):
        lines += [f"{level} Scale", "", *scale_md(doc), ""]
        if "cpu_vs_sessions.png" in charts:
            lines += ["![CPU vs sessions](cpu_vs_sessions.png)", ""]
    if "takeover" in parts or doc.get("takeover"):
        lines += [
            f"{level} Hitless takeover (`--pin`)",
            "",
            "The synthetic peer (bench/synth_peer.py) holds the sessions at "
            f"3x{(doc.get('takeover') or {}).get('interval_ms', 10)} ms against "
            "`xdp-bfd --kernel-tx veth-d --pin DIR`; each takeover starts a successor with the same "
            "arguments (bench/takeover.py). *Old engine gone*: request → the old process's pidfd "
            "readable; *request → successor serving*: its `STATUS=taking over` (sent at SIGUSR2) → "
            "READY=1 (from MAINPID= in runs before 2026-12-05's session 30, which sent no STATUS).",
            "",
            *takeover_md(doc),
            "",
        ]
    if "jitter" in parts or doc.get("jitter"):
        lines += [
            f"{level} Transmit clock jitter",
            "",
            "Two engines, both `--kernel-tx`, face each other across a bridge at 3x10 ms; every interval "
            "between two packets of one session in one direction, captured on the bridge, as a fraction "
            f"of the negotiated interval (bench/jitter.py). RFC 5880 §6.8.7's band is 75{DASH}100 % "
            f"(75{DASH}90 % with Detect Mult 1); an interval above it counts as the machine's when the "
            "part's reference stream (one per CPU) stalled within it at least as long as it overran, "
            "one below it when the stream stalled in the interval before it at least as long as it "
            "falls short (its opening packet left late).",
            "",
            *jitter_md(doc),
            "",
        ]
    return lines


def _header(doc: dict[str, Any]) -> list[str]:
    return [
        f"Machine: {machine_line(doc)}.",
        "",
        f"Command: `{doc.get('command')}` — {durations(doc)}.",
        "",
        f"Peer: FRR bfdd in its own namespace, scheduling {doc.get('peer_sched', '-')}; every backend "
        f"against it at 3x{doc.get('interval_ms')} ms, one at a time, alternated within each level. "
        "Captured on the peer's veth with kernel timestamps. Method: docs/benchmarks.md."
        + (
            f" Except {BACKEND_LABEL[PAIR]}: an engine at both ends, on a bridge of their own, captured on "
            "the bridge (its section below); its peer flaps are the peer engine's own."
            if PAIR in _backends(doc)
            else ""
        ),
        "",
        witness_sentence(doc),
        "",
    ]


def _errors_md(doc: dict[str, Any]) -> list[str]:
    errs = run_errors(doc)
    if not errs:
        return []
    return ["## Errors", "", *(f"- {_short(e, 400)}" for e in errs), ""]


def table_md(doc: dict[str, Any], charts: str = "") -> str:
    if "runs" in doc:
        return table_md_repeated(doc, charts)
    lines = [f"# Benchmark run {doc.get('started_at')}", "", *_header(doc)]
    if doc.get("interrupted") or not doc.get("complete"):
        lines += [f"**Incomplete run** ({doc.get('interrupted', 'errors below')}).", ""]
    lines += ["## Targets", "", *targets_md(doc), ""]
    lines += sections_md(doc, charts)
    lines += _errors_md(doc)
    return "\n".join(lines)


def table_md_repeated(doc: dict[str, Any], charts: str = "") -> str:
    runs = doc["runs"]
    lines = [
        f"# Benchmark run {doc.get('started_at')}: {len(runs)} runs of profile "
        f"{(doc.get('params') or {}).get('profile')}",
        "",
        # The peer and the witness are each run's own; the first run's words stand for all.
        *_header(doc | {k: runs[0][k] for k in ("peer_sched", "witness", "errors") if k in runs[0]}),
    ]
    if doc.get("interrupted") or not doc.get("complete"):
        lines += [f"**Incomplete run** ({doc.get('interrupted', 'errors below')}).", ""]
    lines += [
        "## Targets",
        "",
        f"Each figure is given as min{DASH}max over the {len(runs)} runs; a target is met only when every "
        "run meets it.",
        "",
        *targets_md(doc),
        "",
    ]
    if "gap_survival.png" in charts:
        lines += ["![gap survival](gap_survival.png)", "", "![flaps](flaps.png)", ""]
    if "detection.png" in charts:
        lines += ["![detection](detection.png)", ""]
    if "cpu_vs_sessions.png" in charts:
        lines += ["![CPU vs sessions](cpu_vs_sessions.png)", ""]
    for i, r in enumerate(runs):
        lines += [
            f"## Run {i + 1} of {len(runs)} ({r.get('started_at')}, load average at start "
            f"{' '.join((r.get('machine') or {}).get('loadavg_at_start', []))}, "
            f"{_f(r.get('duration_s'), 0)} s)",
            "",
            witness_sentence(r),
            "",
            "### Targets",
            "",
            *targets_md(r),
            "",
            *sections_md(r, "", level="###"),
        ]
    lines += _errors_md(doc)
    return "\n".join(lines)


# -- charts -----------------------------------------------------------------------


def _figure(doc: dict[str, Any], title: str, draw: Callable[[Any], None], size: tuple[float, float]) -> Any:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig = plt.figure(figsize=size, dpi=100)
    draw(fig)
    fig.suptitle(title, fontsize=12)
    fig.text(0.01, 0.005, footer(doc), fontsize=6.5, family="monospace", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.07, 1, 0.96))
    return fig


def chart_gaps(doc: dict[str, Any]) -> Any:
    levels = _levels(doc)
    interval = doc.get("interval_ms", 10)
    cols = min(4, len(levels))
    rows = (len(levels) + cols - 1) // cols
    several = len(_runs(doc)) > 1

    def draw(fig: Any) -> None:
        for i, level in enumerate(levels):
            ax = fig.add_subplot(rows, cols, i + 1)
            for b in _backends(doc):
                # One line per run of a repeated run, the backend's colour for all of them.
                for k, c in enumerate(_cells(doc, level, b)):
                    pts = c.get("gap_survival") or []
                    if pts:
                        ax.step(
                            [p[0] for p in pts],
                            [max(p[1], 1e-5) for p in pts],
                            where="post",
                            color=COLORS.get(b),
                            label=BACKEND_LABEL.get(b, b) if k == 0 else None,
                            lw=1.0 if several else 1.3,
                            alpha=0.7 if several else 1.0,
                        )
            ax.axvline(interval, color="grey", ls=":", lw=0.8)
            ax.axvline(3 * interval, color="black", ls="--", lw=0.8)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_ylim(1e-4, 1.5)
            # Below 1 ms are only the immediate answers (Final, a changed state), not cadence.
            ax.set_xlim(left=1)
            what = (doc.get("levels", {}).get(level) or {}).get("what", "rotating L1-L5")
            ax.set_title(f"{level}: {what}", fontsize=9)
            ax.set_xlabel("DUT→peer gap (ms)", fontsize=8)
            ax.set_ylabel("P(gap > x)", fontsize=8)
            ax.tick_params(labelsize=7)
            if i == 0 and ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)

    runs = f", {len(_runs(doc))} runs" if several else ""
    return _figure(
        doc,
        f"DUT→peer transmit gaps at 3x{interval} ms "
        f"(survival{runs}; dotted: interval, dashed: detection time)",
        draw,
        (4.2 * cols, 3.4 * rows + 0.8),
    )


def chart_flaps(doc: dict[str, Any]) -> Any:
    levels = _levels(doc)
    bs = _backends(doc)

    def draw(fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
        w = 0.8 / len(bs)
        for j, b in enumerate(bs):
            # The worst run's count, labelled min-max when runs differ.
            per = [[f for c in _cells(doc, lv, b) if (f := _flaps(c)) is not None] for lv in levels]
            ys = [max(v) if v else None for v in per]
            xs = [i + (j - (len(bs) - 1) / 2) * w for i in range(len(levels))]
            ax.bar(xs, [y or 0 for y in ys], w, color=COLORS.get(b), label=BACKEND_LABEL.get(b, b))
            for x, y, v in zip(xs, ys, per, strict=True):
                text = _f(y) if not v or min(v) == max(v) else f"{min(v)}{DASH}{max(v)}"
                ax.text(x, (y or 0) + 0.1, text, ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(levels)), levels)
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylabel(
            "flaps in the window (worst of both ends" + (", worst run)" if len(_runs(doc)) > 1 else ")")
        )
        ax.legend(fontsize=8)

    return _figure(doc, "Flaps per stress level and backend", draw, (10, 5))


def _detections(doc: dict[str, Any]) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(backend, level, samples) with every run's samples pooled, in first-seen order."""
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in _runs(doc):
        for d in r.get("detection", []):
            out.setdefault((d["backend"], d["level"]), []).extend(d.get("samples") or [])
    return [(b, lv, s) for (b, lv), s in out.items() if s]


def chart_detection(doc: dict[str, Any]) -> Any:
    det = _detections(doc)

    def draw(fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
        labels = []
        for i, (backend, level, samples) in enumerate(det):
            ys = [s["latency_ms"] for s in samples]
            ax.boxplot([ys], positions=[i], widths=0.5, showfliers=False)
            ax.scatter(
                [i + (k % 7 - 3) * 0.03 for k in range(len(ys))],
                ys,
                s=10,
                color=COLORS.get(backend),
                alpha=0.8,
                zorder=3,
            )
            labels.append(f"{BACKEND_LABEL.get(backend, backend)}\n{level}")
        if det:
            t = det[0][2][0]["detection_time_ms"]
            ax.axhline(t, color="black", ls="--", lw=0.8, label=f"detection time {t:g} ms")
            ax.legend(fontsize=8)
        ax.set_xticks(range(len(labels)), labels, fontsize=7)
        ax.set_ylabel("last peer packet → our Down on the wire (ms)")

    return _figure(
        doc, "Detection latency after the peer's bfdd is killed", draw, (max(8, 1.4 * len(det)), 5)
    )


def chart_cpu(doc: dict[str, Any]) -> Any:
    scs = [r.get("scale") or {} for r in _runs(doc)]

    def draw(fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
        for k, sc in enumerate(scs):
            for key, label, color, cpu_key in (
                ("bfdd_rungs", "stock bfdd", COLORS["bfdd"], "dut_cpu"),
                ("rungs", "engine --kernel-tx (userspace)", COLORS["engine-ktx"], "engine_cpu"),
            ):
                pts = [
                    (
                        r["sessions"],
                        ((r.get("steady") or {}).get(cpu_key) or {}).get("cpu_pct_sched"),
                        r["interval_ms"],
                    )
                    for r in sc.get(key, [])
                ]
                pts = [p for p in pts if p[1] is not None]
                if pts:
                    ax.plot(
                        [p[0] for p in pts],
                        [max(p[1], 1e-3) for p in pts],
                        "o-",
                        color=color,
                        label=label if k == 0 else None,
                    )
                    for n, y, ms in pts if k == 0 else []:
                        ax.annotate(
                            f"{y:.2f}%\n3x{ms}",
                            (n, max(y, 1e-3)),
                            fontsize=6.5,
                            textcoords="offset points",
                            xytext=(4, 4),
                        )
            xdp = [
                (r["sessions"], x)
                for r in sc.get("rungs", [])
                if (x := xdp_pct(r.get("steady") or {})) is not None
            ]
            if xdp:
                ax.plot(
                    [p[0] for p in xdp],
                    [max(p[1], 1e-3) for p in xdp],
                    "s--",
                    color=COLORS["engine-ktx"],
                    alpha=0.5,
                    label="engine: XDP program (kernel)" if k == 0 else None,
                )
        ax.axhline(
            CPU_AT_1024_PCT, color="grey", ls=":", lw=0.8, label=f"{CPU_AT_1024_PCT:g} % target at 1024"
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("sessions")
        ax.set_ylabel("% of one core")
        ax.legend(fontsize=8)

    return _figure(doc, "CPU vs sessions (steady state)", draw, (9, 5.5))


def render(run_dir: Path) -> list[Path]:
    doc = json.loads((run_dir / "run.json").read_text())
    runs = _runs(doc)
    made: list[Path] = []
    makers = {
        "gap_survival.png": (chart_gaps, any(r.get("ladder") for r in runs)),
        "flaps.png": (chart_flaps, any(r.get("ladder") for r in runs)),
        "detection.png": (chart_detection, bool(_detections(doc))),
        "cpu_vs_sessions.png": (chart_cpu, any((r.get("scale") or {}).get("rungs") for r in runs)),
    }
    import matplotlib.pyplot as plt  # noqa: PLC0415

    for name, (make, wanted) in makers.items():
        path = run_dir / name
        if not wanted:
            path.unlink(missing_ok=True)
            continue
        fig = make(doc)
        fig.savefig(path)
        plt.close(fig)
        made.append(path)
    (run_dir / "table.md").write_text(table_md(doc, " ".join(p.name for p in made)) + "\n")
    return made


def _ladder_summary(doc: dict[str, Any]) -> list[list[str]]:
    """README's ladder table: flaps / max gap per level and backend (min-max over runs), and the
    witness's worst stall in the level's windows; a flap under a machine stall says so."""
    rows = []
    thr = flap_stall_ms(doc)
    for level in _levels(doc):
        row = [level]
        stalls: list[float] = []
        for b in _backends(doc):
            cells = _cells(doc, level, b)
            flaps = [f for c in cells if (f := _flaps(c)) is not None]
            gaps = [c["gap_ms"]["max"] for c in cells if "error" not in c and c.get("gap_ms")]
            stalls += [ms for c in cells if (ms := window_stall(c)[0]) is not None]
            errs = sum(1 for c in cells if "error" in c)
            text = (
                f"{_span(flaps, '', 0) if flaps else '-'} / {_span(gaps, '', 1) if gaps else '-'}"
                if flaps or gaps
                else "error"
                if errs
                else "-"
            )
            under = sum(1 for c in cells if _flaps(c) and stalled(c, thr))
            if under:
                text += f" (flap under a machine stall{'' if len(cells) == 1 else f' in {under} runs'})"
            if errs and (flaps or gaps):
                text += f" ({errs} run(s) errored)"
            row.append(text)
        row.append(_span(stalls, "", 1) if stalls else "-")
        rows.append(row)
    return rows


def readme_section(doc: dict[str, Any]) -> str:
    rows = [[t.name, t.measured, t.mark()] for t in all_targets(doc)]
    runs = _runs(doc)
    head = ["target", "measured", ""]
    if "runs" in doc:
        head[1] = f"measured (min{DASH}max over {len(runs)} runs; met only if every run meets it)"
    span = f" (min{DASH}max over {len(runs)} runs)" if len(runs) > 1 else ""
    lines = [
        START,
        f"Generated by `bench/report.py --publish` from the run of {doc.get('started_at')}: "
        f"{machine_line(doc)}; {durations(doc)}; `{doc.get('command')}`. "
        "Full tables: [docs/benchmarks/results.md](docs/benchmarks/results.md); method: "
        "[docs/benchmarks.md](docs/benchmarks.md).",
        "",
        *_table(head, rows),
        "",
        f"Flaps / max DUT→peer gap (ms) at 3x{doc.get('interval_ms')} ms{span}, same FRR peer"
        + (
            f" ({BACKEND_LABEL[PAIR]}: the two engines face each other, four sessions, the IPv4 "
            "single-hop one's gap shown)"
            if PAIR in _backends(doc)
            else ""
        )
        + ", alternated; "
        "the last column is the worst stall the witness (a kernel-paced reference stream) or the peer's "
        "own cadence showed in that level's windows:",
        "",
        *_table(
            ["level", *(BACKEND_LABEL.get(b, b) for b in _backends(doc)), "witness worst stall ms"],
            _ladder_summary(doc),
        ),
        "",
        "![gap survival](docs/benchmarks/gap_survival.png)",
        END,
    ]
    return "\n".join(lines)


def publish(run_dir: Path, docs: Path = DOCS, readme: Path = README, *, allow_errors: bool = False) -> None:
    """Make ``run_dir`` the committed result: ``docs`` (results.json, results.md, the charts) and
    the results section of ``readme``. A run that recorded errors is refused unless allowed."""
    doc = json.loads((run_dir / "run.json").read_text())
    errors = run_errors(doc)
    if errors and not allow_errors:
        lines = "\n  ".join(errors)
        raise SystemExit(f"{run_dir}: not published, the run recorded {len(errors)} error(s):\n  {lines}")
    text = readme.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{readme} has no {START} … {END} markers")
    render(run_dir)
    docs.mkdir(parents=True, exist_ok=True)
    for old in docs.glob("*.png"):
        old.unlink()
    shutil.copyfile(run_dir / "run.json", docs / "results.json")
    shutil.copyfile(run_dir / "table.md", docs / "results.md")
    for name in CHARTS:
        if (run_dir / name).exists():
            shutil.copyfile(run_dir / name, docs / name)
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(head + readme_section(doc) + tail)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--publish", action="store_true", help="copy into docs/benchmarks/ and update README.md")
    ap.add_argument(
        "--allow-errors", action="store_true", help="publish even a run that recorded errors (they are shown)"
    )
    args = ap.parse_args()
    if not (args.run_dir / "run.json").exists():
        ap.error(f"{args.run_dir}/run.json not found")
    if args.publish:
        publish(args.run_dir, allow_errors=args.allow_errors)
        print(f"published {args.run_dir} -> {DOCS.relative_to(REPO)}/ and README.md")
    else:
        for p in render(args.run_dir):
            print(p)
        print(args.run_dir / "table.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
