"""Tables and charts of one suite run; ``--publish`` makes it the committed result.

    .venv/bin/python bench/report.py RUN_DIR              # RUN_DIR/table.md + RUN_DIR/*.png
    .venv/bin/python bench/report.py RUN_DIR --publish    # also docs/benchmarks/ and README's results

Reads only ``RUN_DIR/run.json`` (written by bench/suite.py), so a run can be re-rendered or
published later, on another machine. Publishing copies run.json to
``docs/benchmarks/results.json``, the table to ``results.md``, the charts next to them, and
rewrites README.md between ``<!-- bench:results:start -->`` and ``<!-- bench:results:end -->``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Callable
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
}
COLORS = {"bfdd": "#d62728", "engine-sw": "#ff7f0e", "engine-ktx": "#2ca02c", "bfddp": "#1f77b4"}

# The targets, judged on the engine with --kernel-tx.
GAP_L4_FACTOR = 1.15
NS_PER_PACKET = 250
OVERSHOOT_MEAN_MS = 0.5
CPU_AT_1024_PCT = 2.0


def _f(v: Any, digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _levels(doc: dict[str, Any]) -> list[str]:
    seen: list[str] = []
    for c in doc.get("ladder", []):
        if c["level"] not in seen:
            seen.append(c["level"])
    return seen


def _cell(doc: dict[str, Any], level: str, backend: str) -> dict[str, Any] | None:
    return next((c for c in doc.get("ladder", []) if c["level"] == level and c["backend"] == backend), None)


def _backends(doc: dict[str, Any]) -> list[str]:
    return doc.get("backends") or list(BACKEND_LABEL)


def _flaps(c: dict[str, Any]) -> int | None:
    """The worst count of Downs either end declared in the window (own counters or wire)."""
    vals = [c.get(k) for k in ("peer_flaps", "dut_flaps", "peer_downs_wire", "dut_downs_wire")]
    vals = [v for v in vals if v is not None]
    return max(vals) if vals else None


# -- facts ------------------------------------------------------------------------


def durations(doc: dict[str, Any]) -> str:
    p = doc.get("params", {})
    det = ", ".join(f"{k} kills under {lv}" for lv, k in p.get("detection", []))
    return (
        f"profile {p.get('profile')}: {p.get('level_s')} s per level and backend, soak {p.get('soak_s')} s "
        f"per backend, detection {det or '-'}; whole run {_f(doc.get('duration_s'), 0)} s"
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


def targets(doc: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    """(target, measured, met) for the issue's figures; met is None when the run lacks the part."""
    out: list[tuple[str, str, bool | None]] = []
    interval = doc.get("interval_ms", 10)
    ktx = [c for c in doc.get("ladder", []) if c["backend"] == "engine-ktx" and c["level"] != "L0"]
    if ktx:
        per = ", ".join(f"{c['level']} {_f(_flaps(c))}" for c in ktx)
        ok = all(_flaps(c) == 0 and "error" not in c for c in ktx)
        out.append(("engine --kernel-tx: 0 flaps at L1-L5 and in the soak", per, ok))
    c4 = _cell(doc, "L4", "engine-ktx")
    if c4 and c4.get("gap_ms"):
        mx = c4["gap_ms"]["max"]
        out.append(
            (
                f"max DUT→peer gap under L4 ≤ {GAP_L4_FACTOR} x {interval} ms",
                f"{mx:.2f} ms ({mx / interval:.3f} x)",
                mx <= GAP_L4_FACTOR * interval,
            )
        )
    for r in (doc.get("cost") or {}).get("results", []):
        med = r.get("median", {})
        ctrl, echo = (med.get("control") or {}), (med.get("echo") or {})
        v = ctrl.get("engine_ns_per_packet")
        if v is not None:
            out.append(
                (
                    f"≤ {NS_PER_PACKET} ns per packet ({r['mode']} XDP)",
                    f"control {v:.0f} ns, echo {_f(echo.get('engine_ns_per_packet'), 0)} ns "
                    f"(warm: {_f((med.get('burst') or {}).get('engine_ns_per_packet'), 0)} ns)",
                    v <= NS_PER_PACKET and (echo.get("engine_ns_per_packet") or 0) <= NS_PER_PACKET,
                )
            )
    det = [d for d in doc.get("detection", []) if d["backend"] == "engine-ktx"]
    for d in det:
        s = d.get("summary") or {}
        ov = s.get("overshoot_ms") or {}
        complete = s.get("n") == d["kills"]
        seen = (
            f"mean {_f(ov.get('mean'), 2)}, max {_f(ov.get('max'), 2)} ms, {s.get('n', 0)}/{d['kills']} kills"
        )
        if d["level"] == "L0":
            ok = complete and ov.get("mean") is not None and ov["mean"] <= OVERSHOOT_MEAN_MS
            out.append((f"mean detection overshoot ≤ {OVERSHOOT_MEAN_MS} ms (idle)", seen, ok))
        else:
            ok = complete and ov.get("max") is not None and ov["max"] <= interval
            what = f"detection bounded under {d['level']} (every kill seen, overshoot ≤ 1 interval)"
            out.append((what, seen, ok))
    rungs = (doc.get("scale") or {}).get("rungs", [])
    for r in rungs:
        st = r.get("steady") or {}
        if r["sessions"] == 4096:
            out.append(
                (
                    "4096 sessions Up",
                    f"{st.get('sessions_up')}/4096 at 3x{r['interval_ms']} ms, {st.get('flaps')} flaps",
                    st.get("sessions_up") == 4096,
                )
            )
        if r["sessions"] == 1024:
            cpu = (st.get("engine_cpu") or {}).get("cpu_pct_sched")
            out.append(
                (
                    f"≤ {CPU_AT_1024_PCT:g} % of a core at 1024 sessions",
                    f"{_f(cpu, 2)} % at 3x{r['interval_ms']} ms",
                    cpu is not None and cpu <= CPU_AT_1024_PCT,
                )
            )
    return out


# -- markdown -----------------------------------------------------------------------


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    return [_row(head), _row(["---"] * len(head)), *(_row(r) for r in rows)]


def targets_md(doc: dict[str, Any]) -> list[str]:
    mark = {True: "met", False: "**not met**", None: "-"}
    return _table(
        ["target (engine --kernel-tx)", "measured", ""], [[t, m, mark[ok]] for t, m, ok in targets(doc)]
    )


def ladder_md(doc: dict[str, Any]) -> list[str]:
    rows = []
    for level in _levels(doc):
        for b in _backends(doc):
            c = _cell(doc, level, b)
            if c is None:
                continue
            g = c.get("gap_ms") or {}
            rows.append(
                [
                    level,
                    BACKEND_LABEL.get(b, b),
                    f"{_f(c.get('peer_flaps'))} / {_f(c.get('peer_downs_wire'))}",
                    f"{_f(c.get('dut_flaps'))} / {_f(c.get('dut_downs_wire'))}",
                    _f(g.get("p50"), 2),
                    _f(g.get("p99"), 2),
                    _f(g.get("p999"), 2),
                    _f(g.get("max"), 1),
                    _f(c.get("missing_slots")),
                    f"{_f(c.get('dut_packets'))} / {_f(c.get('nominal_dut_packets'))}",
                    c.get("error", ""),
                ]
            )
    head = [
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
        "error",
    ]
    return _table(head, rows)


def detection_md(doc: dict[str, Any]) -> list[str]:
    rows = []
    for d in doc.get("detection", []):
        s = d.get("summary") or {}
        lat, ov = s.get("latency_ms") or {}, s.get("overshoot_ms") or {}
        rows.append(
            [
                d["level"],
                BACKEND_LABEL.get(d["backend"], d["backend"]),
                f"{s.get('n', 0)}/{d['kills']}",
                " / ".join(_f(lat.get(k), 2) for k in ("min", "mean", "p99", "max")),
                " / ".join(_f(ov.get(k), 2) for k in ("min", "mean", "p99", "max")),
                "; ".join(filter(None, [d.get("error", ""), *d.get("failed", [])]))[:120],
            ]
        )
    head = [
        "stress",
        "backend",
        "kills seen",
        "latency min / mean / p99 / max ms",
        "overshoot (same)",
        "error",
    ]
    return _table(head, rows)


def cost_md(doc: dict[str, Any]) -> list[str]:
    rows = []
    for r in (doc.get("cost") or {}).get("results", []):
        for kind, med in (r.get("median") or {}).items():
            rows.append(
                [
                    r["mode"],
                    {
                        "control": "control reply (RX-clocked TX)",
                        "echo": "echo reflection",
                        "burst": "echo, warm",
                    }[kind],
                    _f(med.get("engine_ns_per_packet"), 0),
                    f"{_f(med.get('engine_min'), 0)}-{_f(med.get('engine_max'), 0)}",
                    _f(med.get("bare_ns_per_packet"), 0),
                    _f(med.get("engine_over_bare"), 2),
                    med.get("packets"),
                ]
            )
    head = [
        "XDP mode",
        "path",
        "engine ns/pkt (median)",
        "range",
        "bare reflector ns/pkt",
        "ratio",
        "packets",
    ]
    return _table(head, rows)


def scale_md(doc: dict[str, Any]) -> list[str]:
    sc = doc.get("scale") or {}
    rows = []
    for r in sc.get("bfdd_rungs", []):
        st = r.get("steady") or {}
        pe = st.get("peer") or {}
        rows.append(
            [
                "stock bfdd",
                r["sessions"],
                f"3x{r['interval_ms']}",
                f"{st.get('sessions_up')}/{r['sessions']}",
                st.get("flaps"),
                _f((st.get("dut_cpu") or {}).get("cpu_pct_sched"), 2),
                "-",
                f"{pe.get('late_slots')} / {pe.get('resyncs')}",
            ]
        )
    for r in sc.get("rungs", []):
        st = r.get("steady") or {}
        pe = st.get("peer") or {}
        rows.append(
            [
                "engine --kernel-tx",
                r["sessions"],
                f"3x{r['interval_ms']}",
                f"{st.get('sessions_up')}/{r['sessions']}",
                st.get("flaps"),
                _f((st.get("engine_cpu") or {}).get("cpu_pct_sched"), 2),
                _f(st.get("xdp_cpu_pct"), 3),
                f"{pe.get('late_slots')} / {pe.get('resyncs')}",
            ]
        )
    head = [
        "DUT",
        "sessions",
        "timers ms",
        "Up",
        "flaps",
        "userspace CPU % of a core",
        "XDP % of a core",
        "peer late slots / resyncs",
    ]
    return _table(head, rows)


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


def table_md(doc: dict[str, Any], charts: str = "") -> str:
    lines = [
        f"# Benchmark run {doc.get('started_at')}",
        "",
        f"Machine: {machine_line(doc)}.",
        "",
        f"Command: `{doc.get('command')}` — {durations(doc)}.",
        "",
        f"Peer: FRR bfdd in its own namespace, scheduling {doc.get('peer_sched', '-')}; every backend "
        f"against it at 3x{doc.get('interval_ms')} ms, one at a time, alternated within each level. "
        "Captured on the peer's veth with kernel timestamps. Method: docs/benchmarks.md.",
        "",
    ]
    if doc.get("interrupted") or not doc.get("complete"):
        lines += [f"**Incomplete run** ({doc.get('interrupted', 'stopped early')}).", ""]
    lines += ["## Targets", "", *targets_md(doc), ""]
    if doc.get("ladder"):
        lines += [
            "## Stress ladder",
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
        if "gap_survival.png" in charts:
            lines += ["![gap survival](gap_survival.png)", "", "![flaps](flaps.png)", ""]
    if doc.get("detection"):
        lines += ["## Detection latency", "", *detection_md(doc), ""]
        if "detection.png" in charts:
            lines += ["![detection](detection.png)", ""]
    if (doc.get("cost") or {}).get("results"):
        lines += ["## Fast-path cost", "", *cost_md(doc), ""]
    if doc.get("scale"):
        lines += ["## Scale", "", *scale_md(doc), ""]
        if "cpu_vs_sessions.png" in charts:
            lines += ["![CPU vs sessions](cpu_vs_sessions.png)", ""]
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

    def draw(fig: Any) -> None:
        for i, level in enumerate(levels):
            ax = fig.add_subplot(rows, cols, i + 1)
            for b in _backends(doc):
                c = _cell(doc, level, b)
                pts = (c or {}).get("gap_survival") or []
                if pts:
                    ax.step(
                        [p[0] for p in pts],
                        [max(p[1], 1e-5) for p in pts],
                        where="post",
                        color=COLORS.get(b),
                        label=BACKEND_LABEL.get(b, b),
                        lw=1.3,
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
            if i == 0:
                ax.legend(fontsize=7)

    return _figure(
        doc,
        f"DUT→peer transmit gaps at 3x{interval} ms (survival; dotted: interval, dashed: detection time)",
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
            ys = [(_flaps(c) if (c := _cell(doc, lv, b)) else None) for lv in levels]
            xs = [i + (j - (len(bs) - 1) / 2) * w for i in range(len(levels))]
            ax.bar(xs, [y or 0 for y in ys], w, color=COLORS.get(b), label=BACKEND_LABEL.get(b, b))
            for x, y in zip(xs, ys, strict=True):
                ax.text(x, (y or 0) + 0.1, _f(y), ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(levels)), levels)
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylabel("flaps in the window (worst of both ends)")
        ax.legend(fontsize=8)

    return _figure(doc, "Flaps per stress level and backend", draw, (10, 5))


def chart_detection(doc: dict[str, Any]) -> Any:
    det = [d for d in doc.get("detection", []) if d.get("samples")]

    def draw(fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
        labels = []
        for i, d in enumerate(det):
            ys = [s["latency_ms"] for s in d["samples"]]
            ax.boxplot([ys], positions=[i], widths=0.5, showfliers=False)
            ax.scatter(
                [i + (k % 7 - 3) * 0.03 for k in range(len(ys))],
                ys,
                s=10,
                color=COLORS.get(d["backend"]),
                alpha=0.8,
                zorder=3,
            )
            labels.append(f"{BACKEND_LABEL.get(d['backend'], d['backend'])}\n{d['level']}")
        if det:
            t = det[0]["samples"][0]["detection_time_ms"]
            ax.axhline(t, color="black", ls="--", lw=0.8, label=f"detection time {t:g} ms")
            ax.legend(fontsize=8)
        ax.set_xticks(range(len(labels)), labels, fontsize=7)
        ax.set_ylabel("last peer packet → our Down on the wire (ms)")

    return _figure(
        doc, "Detection latency after the peer's bfdd is killed", draw, (max(8, 1.4 * len(det)), 5)
    )


def chart_cpu(doc: dict[str, Any]) -> Any:
    sc = doc.get("scale") or {}

    def draw(fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
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
                ax.plot([p[0] for p in pts], [max(p[1], 1e-3) for p in pts], "o-", color=color, label=label)
                for n, y, ms in pts:
                    ax.annotate(
                        f"{y:.2f}%\n3x{ms}",
                        (n, max(y, 1e-3)),
                        fontsize=6.5,
                        textcoords="offset points",
                        xytext=(4, 4),
                    )
        xdp = [
            (r["sessions"], (r.get("steady") or {}).get("xdp_cpu_pct"))
            for r in sc.get("rungs", [])
            if (r.get("steady") or {}).get("xdp_cpu_pct") is not None
        ]
        if xdp:
            ax.plot(
                [p[0] for p in xdp],
                [max(p[1], 1e-3) for p in xdp],
                "s--",
                color=COLORS["engine-ktx"],
                alpha=0.5,
                label="engine: XDP program (kernel)",
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
    made: list[Path] = []
    makers = {
        "gap_survival.png": (chart_gaps, bool(doc.get("ladder"))),
        "flaps.png": (chart_flaps, bool(doc.get("ladder"))),
        "detection.png": (chart_detection, any(d.get("samples") for d in doc.get("detection", []))),
        "cpu_vs_sessions.png": (chart_cpu, bool((doc.get("scale") or {}).get("rungs"))),
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


def readme_section(doc: dict[str, Any]) -> str:
    mark = {True: "met", False: "**not met**", None: "-"}
    rows = [[t, m, mark[ok]] for t, m, ok in targets(doc)]
    ladder_rows = []
    for level in _levels(doc):
        row = [level]
        for b in _backends(doc):
            c = _cell(doc, level, b)
            g = (c or {}).get("gap_ms") or {}
            row.append(f"{_f(_flaps(c)) if c else '-'} / {_f(g.get('max'), 1)}")
        ladder_rows.append(row)
    lines = [
        START,
        f"Generated by `bench/report.py --publish` from the run of {doc.get('started_at')}: "
        f"{machine_line(doc)}; {durations(doc)}; `{doc.get('command')}`. "
        "Full tables: [docs/benchmarks/results.md](docs/benchmarks/results.md); method: "
        "[docs/benchmarks.md](docs/benchmarks.md).",
        "",
        *_table(["target (engine --kernel-tx)", "measured", ""], rows),
        "",
        f"Flaps / max DUT→peer gap (ms) at 3x{doc.get('interval_ms')} ms, same FRR peer, alternated:",
        "",
        *_table(["level", *(BACKEND_LABEL.get(b, b) for b in _backends(doc))], ladder_rows),
        "",
        "![gap survival](docs/benchmarks/gap_survival.png)",
        END,
    ]
    return "\n".join(lines)


def publish(run_dir: Path) -> None:
    doc = json.loads((run_dir / "run.json").read_text())
    render(run_dir)
    DOCS.mkdir(parents=True, exist_ok=True)
    for old in DOCS.glob("*.png"):
        old.unlink()
    shutil.copyfile(run_dir / "run.json", DOCS / "results.json")
    shutil.copyfile(run_dir / "table.md", DOCS / "results.md")
    for name in CHARTS:
        if (run_dir / name).exists():
            shutil.copyfile(run_dir / name, DOCS / name)
    text = README.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"README.md has no {START} … {END} markers")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    README.write_text(head + readme_section(doc) + tail)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--publish", action="store_true", help="copy into docs/benchmarks/ and update README.md")
    args = ap.parse_args()
    if not (args.run_dir / "run.json").exists():
        ap.error(f"{args.run_dir}/run.json not found")
    if args.publish:
        publish(args.run_dir)
        print(f"published {args.run_dir} -> {DOCS.relative_to(REPO)}/ and README.md")
    else:
        for p in render(args.run_dir):
            print(p)
        print(args.run_dir / "table.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
