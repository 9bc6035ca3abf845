"""The kernel transmit clock's intervals on the wire: do they keep RFC 5880 §6.8.7's band?

Two engines, both ``--kernel-tx``, face each other across a bridge (a fleet's
router-to-router link: every periodic packet is the kernel clock's or an XDP
reply to it). ``--sessions`` sessions on one address pair each
(198.19.1.0/24 and up, the integration tests' plan); tcpdump on the bridge
port records both directions for ``--seconds``. Every interval between two
packets of one session in one direction is divided by the session's
negotiated interval; the result is the share inside [0.75, 1.0], the
quantiles, the worst intervals with their time (to line up with a stall
of the machine), and how much of it the clock sent (the engines'
``tick_sent`` against ``kernel_tx_packets``). Figures, not a verdict; but
every interval above the band is put beside the environment witness (the test
suite's kernel-paced reference streams, one per CPU) over the
same span: one the witness explains (it stalled at least as long as the
interval overran the band) was the machine's, the others are the clock's own
tail (``above_band_clean``, with the worst of them). An interval below the band
is the machine's only when the witness stalled, in the interval before it, at
least as long as it falls short (the packet that opens it left late); the
others are the clock's (``below_band_clean``).

    sudo .venv/bin/python bench/jitter.py [--sessions 16] [--interval-ms 10] [--seconds 20] [--detect-mult 3]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import benchlib

from harness.capture import Capture, flow
from harness.engine import EngineProcess
from harness.netns import PREFIX, Topology
from harness.wait import wait_until

# RFC 5880 §6.8.7: 75-100 % of the interval; at most 90 % with Detect Mult 1.
BAND, BAND_MULT1 = (0.75, 1.0), (0.75, 0.9)


def _addresses(i: int) -> tuple[str, str]:
    return f"198.19.{1 + i // 100}.{1 + i % 100}", f"198.19.{1 + i // 100}.{101 + i % 100}"


# (ratio to nominal, start, end of the window the witness is asked about)
Interval = tuple[float, float, float]


def _split(
    intervals: list[Interval],
    miss: Callable[[float], float],
    interval_ms: float,
    stall_ms: Callable[[float, float], float],
) -> tuple[list[Interval], int]:
    """Those the witness does not explain, and a count of those it does: it stalled within the
    window for at least ``miss(ratio)`` x the nominal interval."""
    clean, excused = [], 0
    for r, t0, t1 in intervals:
        if stall_ms(t0, t1) >= miss(r) * interval_ms:
            excused += 1
        else:
            clean.append((r, t0, t1))
    return clean, excused


def judge_tail(
    above: list[Interval], high: float, interval_ms: float, stall_ms: Callable[[float, float], float]
) -> tuple[list[Interval], int]:
    """Split the intervals above the band, each (ratio, start, end) in wall-clock seconds: the
    witness explains one when it stalled within it for at least the time it ran past ``high`` x
    the nominal one (the machine was that late)."""
    return _split(above, lambda r: r - high, interval_ms, stall_ms)


def judge_short(
    below: list[Interval], low: float, interval_ms: float, stall_ms: Callable[[float, float], float]
) -> tuple[list[Interval], int]:
    """Split the intervals below the band, each (ratio, start of the interval before it, its own
    start) in wall-clock seconds. No stall makes a packet early, but one can make the packet before
    it late: an interval short of ``low`` x the nominal one by less than the witness stalled in the
    interval before it (the packet that opens it left that much late) is the machine's; a packet
    the kernel sent early (two programs sending at once, say) has no such stall to hide behind."""
    return _split(below, lambda r: low - r, interval_ms, stall_ms)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--interval-ms", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--detect-mult", type=int, default=3, choices=(1, 2, 3, 4, 5))
    return ap


def check(args: argparse.Namespace) -> str | None:
    if not 1 <= args.sessions <= 200 or not 1 <= args.seconds <= 600:
        return "--sessions 1-200, --seconds 1-600"
    return None


def budget_s(args: argparse.Namespace) -> float:
    """How long a run may take: two compiles, the bring-up, the window and the analysis."""
    return 240 + 2 * args.seconds + args.sessions


def run(args: argparse.Namespace, work: Path, out: dict[str, Any]) -> None:
    """One window between two engines into ``out["result"]``; raises on a broken premise."""
    topo = Topology()
    engines: list[EngineProcess] = []
    cap: Capture | None = None
    witness = None
    try:
        # One stream per CPU: the loops' softirqs run on either.
        witness = benchlib.start_witness(work / "witness", per_cpu=True)
        a_ns, b_ns = topo.namespace("a"), topo.namespace("b")
        _a, m_ns = topo.bridged(a_ns, "veth-a", b_ns, "veth-b")
        pairs = [_addresses(i) for i in range(args.sessions)]
        for ns, ifname, side in ((a_ns, "veth-a", 0), (b_ns, "veth-b", 1)):
            ns.run(["ip", "addr", "flush", "dev", ifname])
            lines = []
            for pair in pairs:
                ns.run(["ip", "addr", "add", f"{pair[side]}/16", "dev", ifname])
                lines.append(
                    f"- {{local: {pair[side]}, peer: {pair[1 - side]}, interface: {ifname}, "
                    f"min_tx_ms: {args.interval_ms}, min_rx_ms: {args.interval_ms}, "
                    f"detect_mult: {args.detect_mult}}}\n"
                )
            sessions = work / f"sessions-{ifname}.yml"
            sessions.write_text("".join(lines))
            argv = ["--sessions", str(sessions), "--kernel-tx", ifname, "--xdp-mode", "generic"]
            engines.append(EngineProcess(ns, argv, work, ["chrt", "-f", "60"]).start())
        for e in engines:
            e.wait_log("bfd: serving", timeout=120)

        def all_clocked() -> bool:
            return all(
                d["sessions_up"] == args.sessions and all(s.get("kernel_clock") for s in d["sessions"])
                for d in (e.stats() for e in engines)
            )

        wait_until(all_clocked, timeout=60, what="every session Up and kernel-clocked at both ends")
        time.sleep(1.0)  # the bring-up Poll sequences are over
        before = [e.stats() for e in engines]
        cap = Capture(m_ns, "m-a", work / "jitter.pcap").start()
        t0, t0_wall = time.monotonic(), time.time()
        wait_until(lambda: time.monotonic() - t0 >= args.seconds, timeout=args.seconds + 5, what="window")
        pkts = cap.stop()
        t1_wall = time.time()
        after = [e.stats() for e in engines]
        out["result"] = _result(args, pairs, pkts, before, after, witness, (t0_wall, t1_wall))
    finally:
        if cap is not None:
            cap.stop()
        for e in engines:
            e.cleanup()
        topo.close()
        if witness is not None:
            witness.close()


def _result(  # noqa: PLR0917  (the window's parts)
    args: argparse.Namespace,
    pairs: list[tuple[str, str]],
    pkts: list[Any],
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    witness: Any,
    span: tuple[float, float],
) -> dict[str, Any]:
    ratios: list[float] = []
    worst: list[tuple[float, str]] = []
    band = BAND_MULT1 if args.detect_mult == 1 else BAND
    above: list[Interval] = []
    below: list[Interval] = []
    for local, peer in pairs:
        for src, dst in ((local, peer), (peer, local)):
            mine = flow(pkts, src=src, dst=dst)
            opened = None  # when the interval before this one began
            for x, y in itertools.pairwise(mine):
                r = (y.ts - x.ts) * 1e3 / args.interval_ms
                ratios.append(r)
                worst.append((r, f"{src}->{dst} at {y.ts:.6f}"))
                if r > band[1]:
                    above.append((r, x.ts, y.ts))
                elif r < band[0]:
                    # The interval before it is where its opening packet could have been held up.
                    below.append((r, opened if opened is not None else x.ts, x.ts))
                opened = x.ts
    ratios.sort()
    inside = sum(1 for r in ratios if band[0] <= r <= band[1])

    def stall_ms(t0: float, t1: float) -> float:
        w = benchlib.witness_window(witness, t0, t1) or {}
        return w.get("stall_ms", 0.0)  # a witness that cannot say excuses nothing

    clean, excused = judge_tail(above, band[1], args.interval_ms, stall_ms)
    short_clean, short_excused = judge_short(below, band[0], args.interval_ms, stall_ms)
    sent = {
        k: sum(
            sum(s[k] for s in a["sessions"]) - sum(s[k] for s in b["sessions"])
            for a, b in zip(after, before, strict=True)
        )
        for k in ("tick_sent", "kernel_tx_packets", "user_tx_packets", "flaps")
    }
    q = {str(p): round(benchlib.quantile(ratios, p), 4) for p in (0.0, 0.001, 0.01, 0.5, 0.99, 0.999, 1.0)}
    return {
        "sessions": args.sessions,
        "interval_ms": args.interval_ms,
        "detect_mult": args.detect_mult,
        "intervals": len(ratios),
        "share_in_band": round(inside / len(ratios), 6) if ratios else None,
        "band": band,
        "below_band": len(below),
        # Below the band just after a witness stall longer than the shortfall: the packet that
        # opens the interval left late (the machine's), not the one that closes it early.
        "below_band_under_stall": short_excused,
        "below_band_clean": len(short_clean),
        "worst_short_clean": [f"{r:.3f} x at {t0:.6f}" for r, _tp, t0 in sorted(short_clean)[:3]],
        "above_band": len(above),
        # Above the band while the reference stream stalled at least as long: the machine's.
        "above_band_under_stall": excused,
        "above_band_clean": len(clean),
        "share_in_band_or_under_stall": round((inside + excused + short_excused) / len(ratios), 6)
        if ratios
        else None,
        "worst_clean": [f"{r:.3f} x at {t1:.6f}" for r, _t0, t1 in sorted(clean)[-3:]],
        "witness": benchlib.witness_window(witness, *span),
        "quantiles_of_nominal": q,
        "worst": [w for _r, w in sorted(worst)[:3]] + [w for _r, w in sorted(worst)[-3:]],
        "engines": sent,
        "clock_share": round(sent["tick_sent"] / sent["kernel_tx_packets"], 4)
        if sent["kernel_tx_packets"]
        else None,
    }


def main() -> int:
    ap = parser()
    args = ap.parse_args()
    if problem := check(args):
        ap.error(problem)
    stamp, work, doc = benchlib.begin("jitter", vars(args))
    try:
        run(args, work, doc)
        res = doc["result"]
        rows = [[k, v] for k, v in res.items() if not isinstance(v, dict | list)]
        rows += [[f"{k} {q}", v] for k in ("quantiles_of_nominal", "engines") for q, v in res[k].items()]
        rows.append(["witness stall ms (window)", (res["witness"] or {}).get("stall_ms")])
        print(benchlib.table(["figure", "value"], rows))
    finally:
        doc["leftover_namespaces"] = benchlib.require_clean_netns(f"{PREFIX}{os.getpid()}-")
        path = benchlib.write_result("jitter", stamp, doc)
        print(f"result: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
