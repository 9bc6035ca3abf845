"""Demand mode between two engines, and --demand-poll-us on the wire."""

from __future__ import annotations

import itertools

import pytest

from harness.capture import flow
from harness.wait import wait_until


def _poll_starts(pkts):
    starts, prev = [], False
    for p in pkts:
        if p.poll and not prev:
            starts.append(p.ts)
        prev = p.poll
    return starts


@pytest.mark.timing(stall_ms=50, userspace=True)  # the cadence's bounds leave 50 ms either side of 250-400 ms
@pytest.mark.parametrize("poll_us", [250_000, 0])
def test_demand_poll_cadence(topo, engine_factory, capture_factory, tmp_path, poll_us):
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    fa, fb = tmp_path / "a.yml", tmp_path / "b.yml"
    fa.write_text(f"- {{local: {a.ip4}, peer: {b.ip4}, interface: veth-d, min_tx_ms: 50, min_rx_ms: 50, "
                  "demand: true}\n")  # fmt: skip
    fb.write_text(f"- {{local: {b.ip4}, peer: {a.ip4}, interface: veth-p, min_tx_ms: 50, min_rx_ms: 50}}\n")
    cap = capture_factory(p, "veth-p")
    ea = engine_factory(d, ["--sessions", str(fa), "--demand-poll-us", str(poll_us)])
    eb = engine_factory(p, ["--sessions", str(fb)])
    wait_until(lambda: eb.session(str(a.ip4))["state"] == "up", timeout=15, what="B up")
    # Once B has seen A's D bit it stops its periodic packets: only Finals remain.
    wait_until(
        lambda: any(q.demand for q in flow(cap.snapshot(), src=str(a.ip4), dst=str(b.ip4))),
        timeout=5,
        what="A's D bit",
    )
    mark = cap.snapshot()[-1].ts + 0.5
    wait_until(lambda: cap.snapshot()[-1].ts > mark + 3.0, timeout=10, what="3 s of traffic after settling")
    pkts = [q for q in cap.snapshot() if q.ts > mark]
    from_a = flow(pkts, src=str(a.ip4), dst=str(b.ip4))
    from_b = flow(pkts, src=str(b.ip4), dst=str(a.ip4))
    starts = _poll_starts(from_a)
    assert len(from_a) >= 40  # the witness: A kept sending, the window was live
    assert all(q.final for q in from_b), "B sent periodic packets to a Demand-mode peer"
    if poll_us:
        gaps = [y - x for x, y in itertools.pairwise(starts)]
        print(f"\nPoll starts every {[round(g * 1e3) for g in gaps]} ms (asked: {poll_us // 1000} ms)")
        assert len(starts) >= 8 and all(0.25 <= g <= 0.45 for g in gaps), gaps
        assert len(from_b) >= len(starts)  # every Poll got its Final
    else:
        assert starts == [] and from_b == []
    assert ea.session(str(b.ip4))["flaps"] == 0
