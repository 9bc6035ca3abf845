"""The ladder's engine <-> engine backend (bench/ladder.py ``engine-pair``): its sessions files, the
figures of a window from a capture and both ends' stats dumps (counters against the capture),
the suite's backend selection, and its table in bench/report.py."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "bench"))

import ladder  # noqa: E402
import report  # noqa: E402
import suite  # noqa: E402

from harness.capture import WirePacket  # noqa: E402

SESSIONS = ladder.pair_sessions("198.19.2.1", "198.19.2.2", "fd00:bfd:2::1", "fd00:bfd:2::2")
T0, T1 = 100.0, 103.0


def pkt(ts: float, src: str, dst: str, dport: int, state: int = 3) -> WirePacket:
    payload = bytes([0x20, state << 6, 3, 24]) + bytes(20)
    return WirePacket(ts, src, dst, 49152, dport, 255, None, payload)


def wire(skip: dict[tuple[str, str], set[int]] | None = None) -> list[WirePacket]:
    """Every session, both directions, a packet every 10 ms from T0 - 0.5 to T1 + 0.5."""
    out = []
    for s in SESSIONS:
        for src, dst in ((s.d_ip, s.p_ip), (s.p_ip, s.d_ip)):
            gone = (skip or {}).get((s.name, src), set())
            out += [pkt(T0 - 0.5 + k * 0.01, src, dst, s.port) for k in range(400) if k not in gone]
    return sorted(out, key=lambda p: p.ts)


def dumps(pkts: list[WirePacket], user: int = 0, flaps: int = 0) -> tuple[dict, dict]:
    """Stats dumps at T0 - 0.1 and T1 + 0.1 whose kernel counts are what the wire carried."""
    s0, s1 = {}, {}
    for side in ("d", "p"):
        before, after = [], []
        for s in SESSIONS:
            src, peer = (s.d_ip, s.p_ip) if side == "d" else (s.p_ip, s.d_ip)
            n = sum(1 for p in pkts if p.src == src and p.dport == s.port and T0 - 0.1 < p.ts <= T1 + 0.1)
            base = {"peer": peer, "multihop": s.multihop, "state": "up"}
            before.append(base | {k: 1000 for k in ladder.PAIR_COUNTS} | {"flaps": 0, "user_tx_packets": 0})
            after.append(
                base
                | {k: 1000 + n for k in ladder.PAIR_COUNTS}
                | {"flaps": flaps, "user_tx_packets": user, "tick_sent": 1000 + n // 2}
            )
        s0[side] = {"generated_at": T0 - 0.1, "sessions": before}
        s1[side] = {"generated_at": T1 + 0.1, "sessions": after}
    return s0, s1


def figures(pkts: list[WirePacket], s0: dict, s1: dict) -> dict:
    return ladder.pair_figures(pkts, SESSIONS, s0, s1, interval_ms=10, t0=T0, t1=T1)


def test_the_pair_holds_four_sessions_and_each_end_names_the_other() -> None:
    assert [s.name for s in SESSIONS] == ["v4-single-hop", "v4-multihop", "v6-single-hop", "v6-multihop"]
    d = yaml.safe_load(ladder.pair_sessions_yaml(SESSIONS, "d", "veth-d", 10))
    p = yaml.safe_load(ladder.pair_sessions_yaml(SESSIONS, "p", "veth-p", 10))
    assert [(x["local"], x["peer"]) for x in d] == [(x["peer"], x["local"]) for x in p]
    assert [x.get("interface") for x in d] == ["veth-d", None, "veth-d", None]
    assert [bool(x.get("multihop")) for x in p] == [False, True, False, True]
    assert all(x["min_tx_ms"] == 10 and x["detect_mult"] == ladder.DETECT_MULT for x in d + p)


def test_a_clean_window_agrees_with_the_capture_at_both_ends() -> None:
    pkts = wire()
    out = figures(pkts, *dumps(pkts))
    assert out["counters_agree"] is True
    assert out["dut_flaps"] == out["peer_flaps"] == 0
    assert out["missing_slots"] == out["missing_slots_all"] == 0
    assert out["gap_ms"]["max"] < 10.5 and out["worst_gap_ms"] < 10.5
    assert set(out["pair_sessions"]) == {s.name for s in SESSIONS}
    # Single-hop and multihop on one address pair are told apart by port, not merged.
    assert out["dut_packets"] == out["pair_sessions"]["v4-single-hop"]["d_to_p"]["packets"] == 301
    for side in ("d", "p"):
        ks = out["kernel_sent"][side]
        assert ks["user_tx_packets"] == 0 and ks["kernel_tx_packets"] == ks["captured"] == 4 * 320
    assert "peer_stall_ms" not in out  # the peer engine is under test, not a witness


def test_a_gap_flaps_and_user_sent_packets_show_and_break_the_agreement() -> None:
    s = SESSIONS[3]
    pkts = wire({(s.name, s.p_ip): set(range(100, 105))})  # five of p's v6 multihop packets never sent
    s0, s1 = dumps(wire(), user=2, flaps=1)  # the counters say the wire carried them all
    out = figures(pkts, s0, s1)
    x = out["pair_sessions"][s.name]
    assert x["p_to_d"]["missing_slots"] == 5 and x["p_to_d"]["gap_ms"]["max"] > 59
    assert x["ends"]["p"]["kernel_minus_captured"] == 5
    assert out["missing_slots"] == 0 and out["missing_slots_all"] == 5  # the headline is v4 single-hop
    assert out["worst_gap_ms"] > 59
    assert out["dut_flaps"] == out["peer_flaps"] == 4  # summed over the sessions
    assert out["counters_agree"] is False
    assert all(not e["agree"] for e in x["ends"].values())  # user-sent packets at both ends


def test_a_session_missing_from_a_dump_is_an_error_of_that_end_not_a_zero() -> None:
    pkts = wire()
    s0, s1 = dumps(pkts)
    s1["d"]["sessions"].pop(0)
    out = figures(pkts, s0, s1)
    assert "error" in out["pair_sessions"]["v4-single-hop"]["ends"]["d"]
    assert out["dut_flaps"] is None and out["counters_agree"] is False


def test_capture_views_count_each_direction() -> None:
    pkts = wire()
    v = ladder.capture_view(pkts, SESSIONS, T0, T1)
    assert v == {"d_to_p": 4 * 301, "p_to_d": 4 * 301}
    only_p = [p for p in pkts if p.src not in {s.d_ip for s in SESSIONS}]
    assert ladder.capture_view(only_p, SESSIONS, T0, T1)["d_to_p"] == 0


def test_the_pair_is_selectable_but_not_in_the_default_set_nor_in_detection() -> None:
    assert ladder.PAIR in ladder.BACKENDS
    assert ladder.PAIR not in ladder.DEFAULT_BACKENDS and ladder.PAIR not in ladder.DETECTION_BACKENDS
    assert set(ladder.DEFAULT_BACKENDS) <= set(ladder.BACKENDS)


def test_the_report_shows_the_pair_per_session() -> None:
    pkts = wire()
    cell = {"backend": ladder.PAIR, "level": "L4", "seconds": 3} | figures(pkts, *dumps(pkts))
    cell["capture_views"] = {
        "bridge m-a": {"d_to_p": 1204, "p_to_d": 1204},
        "veth-p": {"d_to_p": 0, "p_to_d": 9},
    }
    bad = {"backend": ladder.PAIR, "level": "L5", "seconds": 3, "error": "WaitTimeout: both engines Up"}
    doc = {"backends": [ladder.PAIR], "ladder": [cell, bad], "interval_ms": 10, "detect_mult": 3}
    text = "\n".join(report.pair_md(doc))
    assert report.BACKEND_LABEL[ladder.PAIR] == "engine \N{LEFT RIGHT ARROW} engine"
    assert text.count("| L4 |") == 4 and "| L4 | v6-multihop | 0 / 0 |" in text
    assert "| yes |" in text and "**error**: WaitTimeout: both engines Up" in text
    assert "bridge m-a 1204 / 1204; veth-p 0 / 9" in text
    assert "engine \N{LEFT RIGHT ARROW} engine" in "\n".join(report.ladder_md(doc))
    assert report.pair_md({"ladder": [{"backend": "bfdd", "level": "L0"}]}) == []


def test_a_disagreement_says_whether_userspace_sent_the_missing_packets() -> None:
    d = {"agree": False, "user_tx_packets": 8, "kernel_minus_captured": -8, "tick_sent": 1700}
    p = {"agree": True}
    assert report._agree(d, p) == "**no** (d: user 8, kernel+user-captured +0)"
    lost = {"agree": False, "user_tx_packets": 0, "kernel_minus_captured": 12, "tick_sent": 0}
    assert report._agree(p, lost) == "**no** (p: kernel+user-captured +12, no tick)"
    assert report._agree(p, p) == "yes"


def pair_doc(*cells: dict) -> dict:
    return {
        "parts": ["ladder"],
        "backends": [ladder.PAIR],
        "params": {"levels": ["L0", "L4"], "soak_s": 0},
        "interval_ms": 10,
        "detect_mult": 3,
        "ladder": list(cells),
    }


def pair_cell(
    level: str, skip: dict | None = None, user: int = 0, flaps: int = 0, stall: float = 0.2
) -> dict:
    pkts = wire(skip)
    cell = {"backend": ladder.PAIR, "level": level, "seconds": 3} | figures(pkts, *dumps(pkts, user, flaps))
    return cell | {"witness": {"stall_ms": stall}}


def pair_verdicts(doc: dict) -> dict[str, report.Target]:
    return {t.key: t for t in report.targets(doc)}


def test_clean_pair_windows_meet_both_pair_targets() -> None:
    got = pair_verdicts(pair_doc(pair_cell("L0"), pair_cell("L4")))
    assert got["pair_flaps"].verdict == report.MET and got["pair_flaps"].measured == "L4 0"
    kernel = got["pair_kernel_sent"]
    assert kernel.verdict == report.MET, kernel
    assert kernel.measured.startswith("2/2 windows agree; kernel-sent ") and kernel.measured.endswith(
        "user-sent 0"
    )
    assert "ktx_flaps" not in got  # no engine-ktx backend in this run


def test_a_pair_flap_in_a_clean_window_fails_both_and_under_a_stall_is_not_judged() -> None:
    # Userspace re-establishes what went Down: its packets break the agreement too.
    flapped = pair_cell("L4", user=6, flaps=1)
    got = pair_verdicts(pair_doc(pair_cell("L0"), flapped))
    assert got["pair_flaps"].verdict == report.NOT_MET
    assert (
        got["pair_kernel_sent"].verdict == report.NOT_MET and got["pair_kernel_sent"].why == "disagree at L4"
    )
    got = pair_verdicts(pair_doc(pair_cell("L0"), pair_cell("L4", user=6, flaps=1, stall=25.0)))
    assert got["pair_flaps"].verdict == report.NOT_JUDGED
    assert got["pair_kernel_sent"].verdict == report.NOT_JUDGED
    assert "flap under a machine stall" in got["pair_kernel_sent"].why


def test_user_sent_packets_without_a_flap_are_not_met_and_an_errored_window_is_not_measured() -> None:
    got = pair_verdicts(pair_doc(pair_cell("L0", user=3), pair_cell("L4")))
    assert got["pair_kernel_sent"].verdict == report.NOT_MET
    assert got["pair_kernel_sent"].figures == [("user-sent", 24, "", 0)]  # 3 per session and end
    bad = {"backend": ladder.PAIR, "level": "L4", "seconds": 3, "error": "WaitTimeout: both engines Up"}
    got = pair_verdicts(pair_doc(pair_cell("L0"), bad))
    assert got["pair_kernel_sent"].verdict == report.NOT_MEASURED
    assert got["pair_flaps"].verdict == report.NOT_MEASURED


def test_every_profile_runs_the_pair_in_its_ladder() -> None:
    for name, prof in suite.PROFILES.items():
        assert ladder.PAIR in prof["backends"], name
        assert set(ladder.DEFAULT_BACKENDS) <= set(prof["backends"]), name
