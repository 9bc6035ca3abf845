"""The reason the product exists: under SCHED_FIFO CPU hogs, userspace BFD is
starved and flaps; the XDP path answers from softirq and does not.

Same FRR peer, same stress, one run: the engine in software mode, then with
--kernel-tx. The peer's bfdd runs under a SCHED_DEADLINE reservation so that
it stays out of the fight (testbed.md); flaps are counted on the wire, from the
peer's packets, and by the peer's own counters.
"""

from __future__ import annotations

import subprocess

import pytest

from harness.capture import down_transitions, flow, gap_stats, gaps_ms
from harness.frr import bfd_peer_block, deadline_prefix
from harness.wait import wait_until

STRESS_S = 30
DEADLINE = deadline_prefix(2000)  # one session (four in the scheduling tests that share it)


def _peer_flaps(pkts, src):
    """Up -> not-Up transitions in the peer's packets: each one a flap the peer declared."""
    return down_transitions(flow(pkts, src=src[0], dst=src[1]))


def _stress() -> subprocess.Popen:
    # Bounded by its own timeout; the test also kills it on the way out.
    return subprocess.Popen(
        [
            "stress-ng",
            "--cpu",
            "2",
            "--sched",
            "fifo",
            "--sched-prio",
            "50",
            "--timeout",
            f"{STRESS_S}s",
            "--quiet",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_fifo_hogs_flap_software_not_xdp(  # noqa: PLR0917  (pytest fixtures)
    topo, frr_factory, engine_factory, capture_factory, tmp_path, timing
):
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    frr = frr_factory(p, "p", bfdd_prefix=DEADLINE).start()
    frr.configure(*bfd_peer_block(str(a.ip4), local=str(b.ip4), interface="veth-p", rx_ms=10, tx_ms=10))
    sessions = tmp_path / "sessions.yml"
    sessions.write_text(
        f"- {{local: {a.ip4}, peer: {b.ip4}, interface: veth-d, min_tx_ms: 10, min_rx_ms: 10}}\n"
    )

    def run(backend: str, extra: list[str]) -> dict:
        eng = engine_factory(d, ["--sessions", str(sessions), *extra])
        wait_until(lambda: (frr.peer(str(a.ip4)) or {}).get("status") == "up", timeout=20, what="session up")
        if extra:
            wait_until(lambda e=eng: e.session(str(b.ip4))["kernel_tx_active"], timeout=10, what="kernel TX")
        downs = next(c for c in frr.counters() if c["peer"] == str(a.ip4))["session-down"]
        cap = capture_factory(p, "veth-p")
        hog = _stress()
        try:
            hog.wait(timeout=STRESS_S + 30)
        finally:
            hog.kill()
            hog.wait()
        pkts = cap.stop()
        ours = flow(pkts, src=str(a.ip4), dst=str(b.ip4))
        r = {
            "peer_flaps_wire": _peer_flaps(pkts, (str(b.ip4), str(a.ip4))),
            "peer_session_down": next(c for c in frr.counters() if c["peer"] == str(a.ip4))["session-down"]
            - downs,
            "gaps": gap_stats(gaps_ms(ours)),
            "packets": len(ours),
            "theirs": flow(pkts, src=str(b.ip4), dst=str(a.ip4)),
        }
        eng.stop()
        # Let the peer see the engine leave and settle before the next backend.
        wait_until(lambda: (frr.peer(str(a.ip4)) or {}).get("status") != "up", timeout=10, what="peer down")
        print(f"\n{STRESS_S} s of stress-ng --cpu 2 --sched fifo --sched-prio 50, {backend}: "
              f"peer flaps {r['peer_flaps_wire']} (wire) / {r['peer_session_down']} (FRR), "
              f"our TX {r['gaps']}")  # fmt: skip
        return r

    # The witness that the stress starves userspace: software mode flaps. (A
    # stalled machine only adds flaps here, so this needs no judging.)
    assert run("software", [])["peer_flaps_wire"] > 0, "the stress did not hurt the software engine"
    # The fast path does not flap under the very same stress. A stall of the
    # 30 ms detection time less one interval explains a flap without us.
    with timing.window("kernel-tx under FIFO-50 hogs", stall_ms=20.0) as w:
        xdp = run("xdp", ["--kernel-tx", "veth-d"])
        w.peer(xdp["theirs"], period_ms=10)
        assert xdp["peer_flaps_wire"] == 0
        assert xdp["peer_session_down"] == 0
        assert xdp["gaps"].max < 30.0
