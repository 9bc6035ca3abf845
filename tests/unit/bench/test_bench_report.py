"""bench/report.py's judgement of a run: errors shown where the figures would be, targets fed by an
errored part "not measured", flaps under a machine stall "not judged", and repeated runs as
min-max that is met only when every run meets it. Also that bench/suite.py hands each part
every option that part reads."""

from __future__ import annotations

import ast
import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
SPAN = "\N{EN DASH}"  # report.py's min-max dash
sys.path.insert(0, str(REPO / "bench"))

import report  # noqa: E402

SCALE_ERROR = "AttributeError: 'Namespace' object has no attribute 'engine_sched'"


def cell(level: str, backend: str, flaps: int = 0, stall: float = 0.1, peer_stall: float = 0.0) -> dict:
    return {
        "backend": backend,
        "level": level,
        "seconds": 3,
        "peer_flaps": flaps,
        "dut_flaps": flaps,
        "peer_downs_wire": flaps,
        "dut_downs_wire": flaps,
        "dut_packets": 340,
        "nominal_dut_packets": 300,
        "missing_slots": 0,
        "gap_ms": {"n": 340, "p50": 8.8, "p99": 10.0, "p999": 10.2, "max": 10.3},
        "witness": {"stall_ms": stall, "max_gap_ms": 2 + stall, "frames": 1500, "expected": 1500},
        "peer_tx_gap_ms": {"n": 340, "p50": 8.8, "max": 10 + peer_stall},
        "peer_stall_ms": peer_stall,
    }


def kill(overshoot: float, stall: float = 0.05) -> dict:
    return {
        "latency_ms": 30 + overshoot,
        "detection_time_ms": 30.0,
        "overshoot_ms": overshoot,
        "witness_stall_ms": stall,
    }


def detection(level: str, samples: list[dict], kills: int | None = None) -> dict:
    ov = sorted(s["overshoot_ms"] for s in samples)
    summary = {
        "n": len(samples),
        "overshoot_ms": {"min": ov[0], "mean": sum(ov) / len(ov), "p99": ov[-1], "max": ov[-1]},
        "latency_ms": {
            "min": 30 + ov[0],
            "mean": 30 + sum(ov) / len(ov),
            "p99": 30 + ov[-1],
            "max": 30 + ov[-1],
        },
        "witness_stall_ms_max": max(s["witness_stall_ms"] for s in samples),
    }
    return {
        "backend": "engine-ktx",
        "level": level,
        "kills": kills or len(samples),
        "samples": samples,
        "summary": summary,
    }


def stats_job(wall_ms: float, step_us: int, step_cpu_ms: float) -> dict:
    """A dump's or a scrape's figures as bench/scale.py records them (the engine's own steps)."""
    job = {
        "steps": 300,
        "step_max_us": step_us,
        "step_cpu_max_us": round(step_cpu_ms * 1000),
        "cpu_us": 30000,
    }
    return {"wall_s": wall_ms / 1000, "engine_cpu_s": 0.03, "engine_job": job}


def scale_rung(n: int, ms: int = 10) -> dict:
    return {
        "sessions": n,
        "interval_ms": ms,
        "steady": {
            "sessions_up": n,
            "flaps": 0,
            "engine_cpu": {"cpu_pct_sched": 0.3},
            "xdp_cpu_pct": 2.4,
            "xdp_packets_per_s": n * 100.0,
            "xdp_ns_per_packet": 232.0,
            "peer": {
                "late_slots": 0,
                "resyncs": 0,
                "gap_max_ms": 14.5,
                "gaps_over_detect": 0,
                "flaps": 0,
                "flaps_after_silence": 0,
            },
            "flaps_before_window": 3,
            "stats_dump": stats_job(40.0, 600, 0.9),
            "metrics_scrape": stats_job(60.0, 800, 0.8),
        },
        "bringup": {
            "after_s": 14.1,
            "peer_gap_max_ms": 37.2,
            "peer_gaps_over_detect": 2,
            "peer_flaps": 3,
            "peer_flaps_after_silence": 2,
        },
    }


def cost_row(engine_ns: float, bare_ns: float) -> dict:
    return {
        "engine_ns_per_packet": engine_ns,
        "bare_ns_per_packet": bare_ns,
        "engine_over_bare": round(engine_ns / bare_ns, 2),
    }


def silence(n: int, p50: float = 0.3, mx: float = 0.8, downs: int | None = None, stall: float = 0.1) -> dict:
    """The mass silence's figures (scale.py's silence_check) with the witness of its span."""
    return {
        "detections_reported": n,
        "detection_ms": {"min": 60.0, "median": 60.3, "max": 60.8},
        "still_up_at_end": 0,
        "wire": {
            "up_seen": n,
            "downs_seen": n if downs is None else downs,
            "early": 0,
            "overshoot_ms": {"p50": p50, "p99": mx, "max": mx},
        },
        "witness": {"stall_ms": stall},
        "engine_cpu_us_per_expiry": 200.0,
    }


def takeover_part(down: int = 0, gap: float = 16.0, stall: float = 0.3) -> dict:
    done = [
        {"gone_ms": 5.0 + k, "request_to_ready_ms": 60.0 + k, "witness": {"stall_ms": stall}}
        for k in range(5)
    ]
    return {
        "params": {"sessions": 64, "takeovers": 5, "settle": 2},
        "sessions": 64,
        "interval_ms": 10,
        "takeovers_planned": 5,
        "takeovers": done,
        "wire": {"worst_gap_ms": gap},
        "witness": {"stall_ms": stall},
        "peer_down_events": down,
        "peer_down_after_own_silence": 0,
        "engine_flaps": down,
        "peer_sched": "deadline 4000/10000 us",
    }


def run_doc() -> dict[str, Any]:
    """A complete, clean short-profile run: every target met."""
    levels = ["L0", "L1", "L4"]
    return {
        "started_at": "20261201T000000Z",
        "command": "bench/suite.py --profile short",
        "machine": {
            "cpu_model": "test CPU",
            "nproc": 2,
            "kernel": "6.18",
            "frr": "8.4.4",
            "bcc": "0.26",
            "engine_commit": "abc",
            "loadavg_at_start": ["0.1", "0.1", "0.1"],
        },
        "params": {
            "profile": "short",
            "levels": levels,
            "level_s": 7,
            "soak_s": 0,
            "detection": [["L0", 3], ["L4", 2]],
            "cost": {"modes": ["generic"]},
            "scale": {"ladder": "1@10,1024@10,4096@20", "bfdd": [1]},
            "takeover": {"sessions": 64, "takeovers": 5, "settle": 2},
        },
        "parts": ["ladder", "detection", "cost", "scale", "takeover"],
        "backends": ["bfdd", "engine-ktx"],
        "interval_ms": 10,
        "detect_mult": 3,
        "levels": {
            "L0": {"what": "idle", "stress_ng": []},
            "L1": {"what": "CPU hogs", "stress_ng": ["--cpu", "2"]},
        },
        "soak_levels": ["L1", "L2"],
        "engine_sched": "unit",
        "engine_reservation": "1000/10000",
        "reserved_levels": ["L0", "L1", "L4"],
        "peer_sched": "deadline 2000/10000 us",
        "witness": {"what": "reference stream", "period_ms": 2.0},
        "ladder": [cell(lv, b) for lv in levels for b in ("bfdd", "engine-ktx")],
        "detection": [
            detection("L0", [kill(0.2), kill(0.3), kill(0.4)]),
            detection("L4", [kill(0.3), kill(0.6)]),
        ],
        "cost": {
            "results": [
                {
                    "mode": "generic",
                    "median": {
                        "control": cost_row(200.0, 110.0),
                        "echo": cost_row(180.0, 100.0),
                        "burst": cost_row(60.0, 40.0),
                    },
                }
            ]
        },
        "scale": {
            "rungs": [scale_rung(1), scale_rung(1024), scale_rung(4096, 20) | {"silence": silence(4096)}],
            "bfdd_rungs": [],
        },
        "takeover": takeover_part(),
        "complete": True,
        "duration_s": 500,
    }


def verdicts(doc: dict[str, Any]) -> dict[str, report.Target]:
    return {t.key: t for t in report.all_targets(doc)}


def test_a_clean_run_meets_every_target_and_records_no_error() -> None:
    doc = run_doc()
    got = verdicts(doc)
    assert {k: t.verdict for k, t in got.items()} == dict.fromkeys(got, report.MET)
    assert set(got) == {
        "ktx_flaps",
        "ktx_gap_l4",
        "cost_generic",
        "detect_L0",
        "detect_L4",
        "cpu_1024",
        "up_4096",
        "takeover_hitless",
        "seed_cold_generic",
        "seed_warm_generic",
        "seed_detect_L0",
        "seed_detect_L4",
        "seed_detect_4096",
        "seed_xdp_share",
        "seed_scrape",
        "seed_step",
        "seed_gone",
        "seed_serving",
    }
    assert report.run_errors(doc) == []
    assert "2.40 %" in got["cpu_1024"].measured  # the XDP program's share is carried


def test_an_errored_scale_part_shows_its_error_in_its_rows_and_measures_no_target() -> None:
    doc = run_doc()
    doc["scale"]["rungs"] = [
        {"sessions": n, "interval_ms": ms, "error": SCALE_ERROR}
        for n, ms in ((1, 10), (1024, 10), (4096, 20))
    ]
    table = report.table_md(doc)
    scale = "\n".join(report.scale_md(doc))
    assert scale.count(f"**error**: {SCALE_ERROR}") == 3
    for figure in ("None", "/1024 |", "| - |"):
        assert figure not in scale
    assert "None" not in table
    got = verdicts(doc)
    for key in ("cpu_1024", "up_4096"):
        assert got[key].verdict == report.NOT_MEASURED
        assert SCALE_ERROR in got[key].why
        assert got[key].mark().startswith("not measured: AttributeError")
    # Nothing else is touched by the scale part's error.
    assert got["ktx_flaps"].verdict == report.MET
    errors = report.run_errors(doc)
    assert len(errors) == 3 and all(SCALE_ERROR in e for e in errors)


def test_a_part_that_stopped_names_its_error_above_its_table_and_its_targets_are_not_measured() -> None:
    doc = run_doc()
    doc["ladder"] = doc["ladder"][:2]  # L0 only: the watchdog stopped the part at L1
    doc["errors"] = ["ladder: Watchdog: L1 bfdd: still running after 157 s"]
    doc["complete"] = False
    lines = report.ladder_md(doc)
    assert lines[0].startswith("**The ladder part stopped with an error:** Watchdog: L1 bfdd")
    got = verdicts(doc)
    assert got["ktx_flaps"].verdict == report.NOT_MEASURED
    assert got["ktx_gap_l4"].verdict == report.NOT_MEASURED
    assert "Watchdog" in got["ktx_flaps"].why
    assert report.run_errors(doc) == ["ladder: Watchdog: L1 bfdd: still running after 157 s"]


def test_an_errored_ladder_cell_is_a_row_with_its_error_and_no_figure() -> None:
    doc = run_doc()
    bad = next(c for c in doc["ladder"] if c["level"] == "L4" and c["backend"] == "engine-ktx")
    bad.clear()
    bad |= {"backend": "engine-ktx", "level": "L4", "seconds": 7, "error": "WaitTimeout: engine-ktx Up"}
    row = next(r for r in report.ladder_md(doc) if r.startswith("| L4 | engine --kernel-tx"))
    assert "**error**: WaitTimeout: engine-ktx Up" in row
    assert "None" not in row and "- / -" not in row
    got = verdicts(doc)
    assert got["ktx_flaps"].verdict == report.NOT_MEASURED
    assert "no figure at L4" in got["ktx_flaps"].why
    assert got["ktx_gap_l4"].verdict == report.NOT_MEASURED
    assert "L4 engine-ktx: WaitTimeout" in report.run_errors(doc)[0]


def test_a_scale_row_shows_the_bring_up_beside_the_peers_own_silences() -> None:
    doc = run_doc()
    row = next(r for r in report.scale_md(doc) if "| 1024 |" in r)
    assert "| 14.1 / 3 |" in row
    assert "| 37.2 / 2; 14.5 / 0 |" in row
    assert "| 3 / 2; 0 / 0 |" in row


def test_the_mass_silence_is_shown_where_the_profile_ran_it() -> None:
    doc = run_doc()
    del doc["scale"]["rungs"][2]["silence"]
    assert not any("Every peer silent" in r for r in report.scale_md(doc))
    doc["scale"]["rungs"][1]["silence"] = {
        "detections_reported": 1024,
        "detection_ms": {"min": 30.0, "median": 31.0, "max": 32.1},
        "still_up_at_end": 0,
        "wire": {
            "up_seen": 1024,
            "downs_seen": 1020,
            "early": 0,
            "overshoot_ms": {"p50": 70.0, "max": 138.0},
        },
        "engine_cpu_us_per_expiry": 228.8,
    }
    lines = report.scale_md(doc)
    assert any("Every peer silent" in r for r in lines)
    row = lines[-1]
    assert (
        row.startswith("| 1024 | 3x")
        and "| 1024/1024 | 31.0 / 32.1 | 0 | 1020 / 1024 | 70.0 / 138.0 | 0 | - / - | - | - | 228.8 | - |"
        in row
    )
    # Sessions from a bfddp controller (scale.py --controller bfddp): its reports' lateness beside the wire's.
    told = {"overshoot_ms": {"p50": 19.0, "p99": 47.9, "max": 48.4}}
    doc["scale"]["rungs"][1]["silence"]["controller"] = told
    row = report.scale_md(doc)[-1]
    assert "| 70.0 / 138.0 | 0 | - / - | - | 19.0 / 48.4 | 228.8 | - |" in row
    doc["scale"]["rungs"][1]["silence"] |= {"witness": {"stall_ms": 3.25}, "kernel_sent_downs": 1020}
    row = report.scale_md(doc)[-1]
    assert row.endswith("| 70.0 / 138.0 | 0 | - / - | 1020 | 19.0 / 48.4 | 228.8 | 3.2 |")
    # The demand against the path's pace (scale.py down_pace).
    pace = {"due_per_ms_peak": 210.4, "left_per_ms_while_queued": 63.1}
    doc["scale"]["rungs"][1]["silence"]["wire"]["pace"] = pace
    assert "| 70.0 / 138.0 | 0 | 210.4 / 63.1 | 1020 |" in report.scale_md(doc)[-1]


def test_an_unmeasured_xdp_share_is_an_error_not_a_zero() -> None:
    doc = run_doc()
    st = doc["scale"]["rungs"][1]["steady"]
    st |= {"xdp_cpu_pct": None, "xdp_packets_per_s": None, "xdp_not_measured": "run stats did not move"}
    row = next(r for r in report.scale_md(doc) if "| 1024 |" in r)
    assert "not measured: run stats did not move" in row
    assert "0.000" not in row
    assert "XDP program not measured" in verdicts(doc)["cpu_1024"].measured
    assert any("XDP % of a core not measured" in e for e in report.run_errors(doc))


@pytest.mark.parametrize(
    ("stall", "peer_stall", "verdict"),
    [(35.0, 0.0, report.NOT_JUDGED), (0.0, 25.0, report.NOT_JUDGED), (19.9, 0.5, report.NOT_MET)],
)
def test_a_flap_under_a_machine_stall_is_shown_and_not_judged(
    stall: float, peer_stall: float, verdict: str
) -> None:
    doc = run_doc()
    c = next(c for c in doc["ladder"] if c["level"] == "L1" and c["backend"] == "engine-ktx")
    c |= cell("L1", "engine-ktx", flaps=1, stall=stall, peer_stall=peer_stall)
    t = verdicts(doc)["ktx_flaps"]
    assert t.verdict == verdict
    row = next(r for r in report.ladder_md(doc) if r.startswith("| L1 | engine --kernel-tx"))
    if verdict == report.NOT_JUDGED:
        assert "flap under a machine stall:" in row
        assert t.mark().startswith("not judged: machine stalled in 1 window(s)")
    else:
        assert "machine stall" not in row
        assert t.mark() == "**not met**"
    assert verdicts(doc)["ktx_flaps"].verdict != report.MET


def test_a_flap_in_a_clean_window_is_not_met_even_beside_a_stalled_one() -> None:
    doc = run_doc()
    for lv, stall in (("L1", 40.0), ("L4", 0.2)):
        c = next(c for c in doc["ladder"] if c["level"] == lv and c["backend"] == "engine-ktx")
        c |= cell(lv, "engine-ktx", flaps=1, stall=stall)
    assert verdicts(doc)["ktx_flaps"].verdict == report.NOT_MET


def test_a_stall_without_a_flap_leaves_the_window_clean() -> None:
    doc = run_doc()
    c = next(c for c in doc["ladder"] if c["level"] == "L4" and c["backend"] == "engine-ktx")
    c |= cell("L4", "engine-ktx", flaps=0, stall=60.0)
    assert verdicts(doc)["ktx_flaps"].verdict == report.MET


def test_detection_missed_only_because_of_a_stalled_kill_is_not_judged() -> None:
    doc = run_doc()
    doc["detection"][0] = detection("L0", [kill(0.2), kill(0.3), kill(4.0, stall=3.9)])
    t = verdicts(doc)["detect_L0"]
    assert t.verdict == report.NOT_JUDGED
    assert "1 of 3 kills" in t.why
    # The same overshoot with a clean witness is ours.
    doc["detection"][0] = detection("L0", [kill(0.2), kill(0.3), kill(4.0, stall=0.05)])
    assert verdicts(doc)["detect_L0"].verdict == report.NOT_MET
    row = next(r for r in report.detection_md(doc) if r.startswith("| L0 "))
    assert "| 0.05 |" in row  # the witness's worst stall beside the row


def test_takeover_table_and_target() -> None:
    doc = run_doc()
    row = report.takeover_md(doc)[2]
    assert row.startswith("| 64 | 5/5 | 5.0 / 9.0 | 60.0 / 64.0 | 0 | 0 | 0 | 16.0 |")
    doc["takeover"] = takeover_part(down=64, gap=995.0)
    assert verdicts(doc)["takeover_hitless"].verdict == report.NOT_MET
    # Down events are judged by the witness just before them, not anywhere in the window.
    doc["takeover"] |= {"witness": {"stall_ms": 30.0}, "witness_at_downs": {"stall_ms": 0.4}}
    assert verdicts(doc)["takeover_hitless"].verdict == report.NOT_MET
    doc["takeover"]["witness_at_downs"] = {"stall_ms": 25.0}
    t = verdicts(doc)["takeover_hitless"]
    assert t.verdict == report.NOT_JUDGED and "just before the sessions went down" in t.why
    doc["takeover"] = {
        "params": {"sessions": 64},
        "sessions": 64,
        "takeovers": [],
        "error": "TimeoutError: timed out",
    }
    t = verdicts(doc)["takeover_hitless"]
    assert t.verdict == report.NOT_MEASURED and "TimeoutError" in t.why
    assert "**error**: TimeoutError: timed out (after 0 of" in report.takeover_md(doc)[2]


def repeated(*runs: dict[str, Any]) -> dict[str, Any]:
    top = copy.deepcopy(runs[0])
    for k in ("ladder", "detection", "cost", "scale", "takeover"):
        top.pop(k, None)
    top["params"] = top["params"] | {"repeat": len(runs)}
    return top | {"repeat": len(runs), "runs": list(runs)}


def test_aggregate_is_min_max_and_met_only_when_every_run_meets() -> None:
    a, b, c = run_doc(), run_doc(), run_doc()
    next(x for x in b["ladder"] if x["level"] == "L4" and x["backend"] == "engine-ktx")["gap_ms"]["max"] = (
        11.0
    )
    next(x for x in c["ladder"] if x["level"] == "L4" and x["backend"] == "engine-ktx")["gap_ms"]["max"] = (
        19.36
    )
    got = verdicts(repeated(a, b, c))
    gap = got["ktx_gap_l4"]
    assert gap.measured == f"max 10.30{SPAN}19.36 ms"
    assert gap.verdict == report.NOT_MET and gap.why.startswith("in run 3 of 3")
    assert got["ktx_flaps"].verdict == report.MET and got["ktx_flaps"].why == "in all 3 runs"
    assert got["ktx_flaps"].measured.startswith("L1 0, L4 0")

    # One run that could not measure a target keeps it from "met".
    c = run_doc()
    c["scale"]["rungs"][1] = {"sessions": 1024, "interval_ms": 10, "error": SCALE_ERROR}
    t = verdicts(repeated(run_doc(), run_doc(), c))["cpu_1024"]
    assert t.verdict == report.NOT_MEASURED
    assert t.why.startswith("in run 3 of 3") and SCALE_ERROR in t.why
    assert t.measured == "userspace 0.30 % (2 of 3 runs), XDP 2.40 % (2 of 3 runs)"

    # A miss anywhere outranks the rest; a stalled run alone is "not judged".
    s = run_doc()
    next(x for x in s["ladder"] if x["level"] == "L1" and x["backend"] == "engine-ktx").update(
        cell("L1", "engine-ktx", flaps=2, stall=50.0)
    )
    t = verdicts(repeated(run_doc(), s))["ktx_flaps"]
    assert t.verdict == report.NOT_JUDGED and t.measured.startswith(f"L1 0{SPAN}2, L4 0")
    f = run_doc()
    next(x for x in f["ladder"] if x["level"] == "L1" and x["backend"] == "engine-ktx").update(
        cell("L1", "engine-ktx", flaps=1)
    )
    assert verdicts(repeated(f, s))["ktx_flaps"].verdict == report.NOT_MET


def test_a_witness_that_could_not_answer_is_an_error() -> None:
    doc = run_doc()
    doc["ladder"][3]["witness"] = {"error": "RuntimeError: the witness capture died"}
    assert report.run_errors(doc) == [
        "witness: no figures for 1 window(s): RuntimeError: the witness capture died"
    ]
    row = report.ladder_md(doc)[2 + 3]
    assert "witness error: RuntimeError: the witness capture died" in row


def test_run_errors_of_a_repeated_run_name_the_run() -> None:
    b = run_doc()
    b["takeover"]["error"] = "TimeoutError: timed out"
    assert report.run_errors(repeated(run_doc(), b)) == ["run 2: takeover: TimeoutError: timed out"]


def test_publish_handles_a_repeated_run_and_refuses_an_errored_one(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run_dir, docs, readme = tmp_path / "run", tmp_path / "docs", tmp_path / "README.md"
    run_dir.mkdir()
    readme.write_text(f"# x\n\nbefore\n{report.START}\nold\n{report.END}\nafter\n")
    doc = repeated(run_doc(), run_doc(), run_doc())
    (run_dir / "run.json").write_text(json.dumps(doc))
    report.publish(run_dir, docs, readme)
    text = readme.read_text()
    assert text.startswith("# x\n\nbefore\n") and text.endswith("after\n") and "\nold\n" not in text
    assert f"min{SPAN}max over 3 runs; met only if every run meets it" in text
    assert "None" not in text
    assert json.loads((docs / "results.json").read_text())["repeat"] == 3
    results = (docs / "results.md").read_text()
    assert "## Run 3 of 3" in results and "None" not in results
    assert (docs / "gap_survival.png").exists()

    doc["runs"][1]["errors"] = ["cost: RuntimeError: the bare reflector did not attach"]
    (run_dir / "run.json").write_text(json.dumps(doc))
    with pytest.raises(SystemExit, match=r"(?s)not published.*run 2: cost: RuntimeError"):
        report.publish(run_dir, docs, readme)


def _args_read(path: Path) -> set[str]:
    """Every ``args.NAME`` a bench script reads."""
    tree = ast.parse(path.read_text())
    return {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "args"
    }


def test_the_suite_supplies_every_option_its_parts_read() -> None:
    import scale  # noqa: PLC0415
    import suite  # noqa: PLC0415

    read_by_scale = _args_read(REPO / "bench" / "scale.py")
    read_by_takeover = _args_read(REPO / "bench" / "takeover.py")
    assert "engine_sched" in read_by_scale  # the option the short run died on
    for name, prof in suite.PROFILES.items():
        assert set(suite.PARTS) <= {"ladder", "detection", *prof}, name
        args = suite.scale_args(prof["scale"], "unit")
        missing = {a for a in read_by_scale if not hasattr(args, a)}
        assert not missing, f"profile {name}: scale.py reads {missing} the suite does not supply"
        assert args.engine_sched == "unit"
        assert scale.parse_ladder(args.ladder) and scale.parse_counts(args.bfdd_ladder)
        targs = suite.takeover_args(prof["takeover"], "unit")
        missing = {a for a in read_by_takeover if not hasattr(targs, a)}
        assert not missing, f"profile {name}: takeover.py reads {missing} the suite does not supply"
    smoke = suite.takeover_args(suite.PROFILES["smoke"]["takeover"], "unit")
    assert (smoke.sessions, smoke.engine_sched) == (8, "unit")


def test_echo_rows_come_from_the_engine_ktx_cells_and_an_echo_error_is_its_row() -> None:
    doc = run_doc()
    cells = [c for c in doc["ladder"] if c["backend"] == "engine-ktx"]
    assert len(cells) >= 2
    assert report.echo_md(doc) == []  # no echo figures recorded: no table at all
    rtt = {"min": 41.2, "mean": 80.4, "p99": 310.0, "max": 950.7}
    cells[0]["echo"] = {"sent": 150, "returned": 149, "lost": 1, "skipped": 0, "send_errors": 0,
                        "interval_ms": 20.0, "rtt_us": rtt}  # fmt: skip
    cells[1]["echo"] = {"error": "the engine reported no echo for the session"}
    lines = report.echo_md(doc)
    good = next(r for r in lines if r.startswith(f"| {cells[0]['level']} |"))
    assert "| 20.0 | 150 | 149 | 1 | 0 / 0 | 41 / 80 / 310 / 951 |" in good
    bad = next(r for r in lines if r.startswith(f"| {cells[1]['level']} |"))
    assert "**error**: the engine reported no echo" in bad and "None" not in bad
    assert any("Echo originator" in line for line in report.sections_md(doc))


def test_takeover_downs_after_the_peers_own_silence_are_not_judged_and_one_without_is() -> None:
    doc = run_doc()
    doc["takeover"] = takeover_part(down=3, gap=40.0) | {"peer_down_after_own_silence": 3}
    t = verdicts(doc)["takeover_hitless"]
    assert t.verdict == report.NOT_JUDGED and "silence of the peer's own" in t.why
    assert report.takeover_md(doc)[2].startswith("| 64 | 5/5 | 5.0 / 9.0 | 60.0 / 64.0 | 3 | 3 | 3 |")
    doc["takeover"]["peer_down_after_own_silence"] = 2  # one Down the peer's silence does not explain
    assert verdicts(doc)["takeover_hitless"].verdict == report.NOT_MET


def test_the_seeds_timing_rows_excuse_a_miss_only_by_its_own_windows_stall() -> None:
    doc = run_doc()
    doc["takeover"]["takeovers"][2] |= {"gone_ms": 30.0, "witness": {"stall_ms": 25.0}}
    t = verdicts(doc)["seed_gone"]
    assert t.verdict == report.NOT_JUDGED and "25.0 ms" in t.why
    assert t.measured.startswith(f"5.0{SPAN}30.0 ms over 5 takeovers")
    # A stall shorter than the miss does not explain it; another takeover's stall is not its own.
    doc["takeover"]["takeovers"][2]["witness"] = {"stall_ms": 15.0}
    doc["takeover"]["takeovers"][3]["witness"] = {"stall_ms": 40.0}
    assert verdicts(doc)["seed_gone"].verdict == report.NOT_MET
    doc["takeover"]["takeovers"][4]["request_to_ready_ms"] = 150.0
    assert verdicts(doc)["seed_serving"].verdict == report.NOT_MET
    # One session's kills: the max bound per kill, the mean besides.
    doc["detection"][0] = detection("L0", [kill(0.2), kill(0.3), kill(3.0, stall=2.5)])
    assert verdicts(doc)["seed_detect_L0"].verdict == report.NOT_JUDGED
    doc["detection"][0] = detection("L0", [kill(0.7), kill(0.8), kill(0.9)])
    t = verdicts(doc)["seed_detect_L0"]
    assert t.verdict == report.NOT_MET and t.measured == "mean 0.80, max 0.90 ms over 3 kills"
    assert verdicts(doc)["detect_L0"].verdict == report.NOT_MET  # the older row agrees on the mean


def test_the_mass_silence_at_4096_needs_every_down_and_its_timing_under_a_witness() -> None:
    doc = run_doc()
    rung = doc["scale"]["rungs"][2]
    rung["silence"] = silence(4096, p50=30.0, mx=45.0, stall=50.0)
    t = verdicts(doc)["seed_detect_4096"]
    assert t.verdict == report.NOT_JUDGED
    assert "p50 30.00, max 45.00 ms past detection" in t.measured and "witness stall 50.0 ms" in t.measured
    rung["silence"] = silence(4096, p50=30.0, mx=45.0, stall=2.0)
    assert verdicts(doc)["seed_detect_4096"].verdict == report.NOT_MET
    # Where the late Downs queued behind the path, the row says so beside its figures.
    pace = {"due_per_ms_peak": 210.4, "left_per_ms_while_queued": 63.1, "late": 4032, "late_queued": 4030}
    rung["silence"]["wire"]["pace"] = pace
    t = verdicts(doc)["seed_detect_4096"]
    assert t.verdict == report.NOT_MET and t.measured.endswith(
        "; 4030 of 4032 Downs late by > 1 ms fell due behind a courier round's worth of others "
        "(due 210.4/ms at the densest, the path's pace 63.1/ms)"
    )
    # A session never seen going Down is a route never withdrawn: no stall excuses it.
    rung["silence"] = silence(4096, downs=4090, stall=50.0)
    t = verdicts(doc)["seed_detect_4096"]
    assert t.verdict == report.NOT_MET and "not declared Down" in t.why
    del rung["silence"]
    t = verdicts(doc)["seed_detect_4096"]
    assert t.verdict == report.NOT_MEASURED and "no mass silence" in t.why


def test_stats_at_4096_are_judged_by_the_scrapes_answer_and_the_longest_step() -> None:
    doc = run_doc()
    got = verdicts(doc)
    assert got["seed_scrape"].verdict == report.MET and got["seed_step"].verdict == report.MET
    assert got["seed_scrape"].measured == (
        "dump 40 ms (30 ms of engine CPU in 300 steps), scrape 60 ms (30 ms of engine CPU in 300 steps)"
    )
    assert (
        got["seed_step"].measured
        == "longest step: dump 0.60 ms (thread CPU 0.90), scrape 0.80 ms (thread CPU 0.80)"
    )
    st = doc["scale"]["rungs"][2]["steady"]
    st["metrics_scrape"] = stats_job(890.0, 5200, 5.2)
    got = verdicts(doc)
    assert got["seed_scrape"].verdict == report.NOT_MET and got["seed_step"].verdict == report.NOT_MET
    assert "scrape 5.20 ms" in got["seed_step"].measured
    # Only the largest rung counts: a smaller one's slow scrape is not the 4096 row's.
    doc["scale"]["rungs"][2]["steady"]["metrics_scrape"] = stats_job(60.0, 800, 0.8)
    doc["scale"]["rungs"][1]["steady"]["metrics_scrape"] = stats_job(900.0, 9000, 9.0)
    assert verdicts(doc)["seed_scrape"].verdict == report.MET
    # With a measurement apart from the peers' interrupts, that is the one judged.
    doc["scale"]["rungs"][2]["steady"]["metrics_scrape"] = stats_job(60.0, 5200, 5.2)
    doc["scale"]["quiet_stats"] = {
        "sessions": 4096, "rounds": [{}] * 3, "step_max_us": 900, "step_cpu_max_us": 880,
        "witness": {"stall_ms": 0.2},
    }  # fmt: skip
    t = verdicts(doc)["seed_step"]
    assert t.verdict == report.MET
    assert t.measured.startswith("no peer, 4096 sessions, 3 dumps and scrapes: 0.90 ms (thread CPU 0.88")
    assert "under the peers' traffic: dump 0.60 ms (thread CPU 0.90), scrape 5.20 ms" in t.measured
    doc["scale"]["quiet_stats"] |= {"step_max_us": 3000, "witness": {"stall_ms": 2.5}}
    assert verdicts(doc)["seed_step"].verdict == report.NOT_JUDGED  # the machine stalled as long
    doc["scale"]["quiet_stats"]["witness"] = {"stall_ms": 0.3}
    assert verdicts(doc)["seed_step"].verdict == report.NOT_MET
    doc["scale"]["quiet_stats"] = {"sessions": 4096, "error": "engine did not start"}
    t = verdicts(doc)["seed_step"]
    assert t.verdict == report.NOT_MEASURED and "engine did not start" in t.why
    del doc["scale"]["quiet_stats"]
    del doc["scale"]["rungs"][2]["steady"]["stats_dump"]
    got = verdicts(doc)
    assert got["seed_scrape"].verdict == report.NOT_MEASURED and "no dump or scrape" in got["seed_scrape"].why
    assert got["seed_step"].verdict == report.NOT_MEASURED


def test_the_cold_packet_is_judged_against_the_bare_reflector_of_the_same_windows() -> None:
    doc = run_doc()
    med = doc["cost"]["results"][0]["median"]
    med["echo"] = cost_row(300.0, 100.0)  # under 400 ns, but 3 x the bare reflector
    t = verdicts(doc)["seed_cold_generic"]
    assert t.verdict == report.NOT_MET and "echo 300 ns (3.00 x bare 100 ns)" in t.measured
    assert verdicts(doc)["cost_generic"].verdict == report.NOT_MET  # and over the older 250 ns
    med["burst"] = cost_row(90.0, 40.0)
    assert verdicts(doc)["seed_warm_generic"].verdict == report.NOT_MET
    del med["control"]["bare_ns_per_packet"], med["control"]["engine_over_bare"]
    assert verdicts(doc)["seed_cold_generic"].verdict == report.NOT_MEASURED
