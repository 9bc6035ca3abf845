"""Many peers silent at once against a real FRR bfdd: every session's Down leaves from the kernel
(queued by the sweep, sent by the tick program's courier up to BFD_DOWN_BATCH a round), once, as
its machine would send it. Wire truth from a capture on the peer's side; kernel truth from the tick
program's counters.
"""

from __future__ import annotations

import time

import pytest

from harness.capture import WirePacket
from harness.frr import bfd_peer_block
from harness.wait import wait_until

# More than one frame's worth (BFD_DOWN_BATCH is 16), at timers bfdd keeps at this count.
SESSIONS, INTERVAL_MS = 20, 50


@pytest.mark.parametrize("courier", [True, False], ids=["courier", "frames"])
def test_a_mass_expiry_sends_every_down_from_the_kernel_once(  # noqa: PLR0917  (pytest fixtures)
    topo, frr_factory, engine_factory, capture_factory, tmp_path, courier
):
    """``frames``: without the courier (as when it is lost, or its queue full) the engine hands the
    Downs to the tick program in frames as it hears of the expiries."""
    d, p = topo.namespace("d"), topo.namespace("p")
    _, b = topo.veth(d, "veth-d", p, "veth-p")
    # Distinct addresses at both ends: bfdd tells single-hop sessions apart by the peer's address.
    net = b.v4.network
    pairs = [
        (str(net.network_address + 100 + i), str(net.network_address + 150 + i)) for i in range(SESSIONS)
    ]
    for ours, theirs in pairs:
        d.run(["ip", "addr", "add", f"{ours}/{net.prefixlen}", "dev", "veth-d"])
        p.run(["ip", "addr", "add", f"{theirs}/{net.prefixlen}", "dev", "veth-p"])
    frr = frr_factory(p, "p").start()
    lines: list[str] = []
    for ours, theirs in pairs:
        lines += bfd_peer_block(ours, local=theirs, interface="veth-p", rx_ms=INTERVAL_MS, tx_ms=INTERVAL_MS)
    frr.configure(*lines)
    sessions = tmp_path / "sessions.yml"
    sessions.write_text(
        "".join(
            f"- {{local: {ours}, peer: {theirs}, interface: veth-d, min_tx_ms: {INTERVAL_MS}, "
            f"min_rx_ms: {INTERVAL_MS}}}\n"
            for ours, theirs in pairs
        )
    )
    peers = [theirs for _, theirs in pairs]
    ours_of = {theirs: ours for ours, theirs in pairs}
    cap = capture_factory(p, "veth-p")
    eng = engine_factory(
        d,
        ["--sessions", str(sessions), "--kernel-tx", "veth-d", "--xdp-mode", "generic"],
        prefix=[] if courier else ["env", "XDP_BFD_TEST_NO_COURIER=1"],
    )

    def offloaded() -> dict | None:
        doc = eng.stats()
        up = [
            s
            for s in doc["sessions"]
            if s["state"] == "up" and s["kernel_tx_active"] and not s["poll_active"]
        ]
        return doc if len(up) == SESSIONS else None

    before = wait_until(offloaded, timeout=60, interval=0.5, what=f"{SESSIONS} sessions Up, offloaded")
    sent0 = before["kernel_clock"]["counters"]["down_sent"]
    queued0 = before["kernel_clock"]["counters"]["down_queued"]
    assert before["kernel_clock"]["courier"]["running"] is courier
    user0 = {s["peer"]: s["user_tx_packets"] for s in before["sessions"]}
    mark = cap.snapshot()[-1].ts
    frr.kill("bfdd")

    def downs() -> dict[str, WirePacket]:
        return {
            pk.dst: pk
            for pk in reversed(cap.snapshot())
            if pk.ts > mark and pk.dst in ours_of and pk.src == ours_of[pk.dst] and pk.state == "down"
        }

    def all_down() -> dict[str, WirePacket] | None:
        seen = downs()  # each peer's first Down: the earliest overwrites in the reversed walk
        return seen if len(seen) == SESSIONS else None

    first = wait_until(all_down, timeout=10, what="every Down")
    last_down = max(pk.ts for pk in first.values())
    # Until a packet past half a second after the last Down: a repeat the machine would send at once
    # if it did not know of the kernel's Down falls inside; the slow rate's next (user-sent, 0.75 s
    # or more later) marks the end.
    wait_until(lambda: cap.snapshot()[-1].ts > last_down + 0.5, timeout=5, what="0.5 s after the last Down")
    t_ask = time.time()
    after = eng.stats()
    t_told = time.time()
    # The capture past the stats' moment (as each session's next packet, at most a slow interval on).
    wait_until(lambda: cap.snapshot()[-1].ts > t_told, timeout=5, what="a packet after the stats")
    packets = cap.stop()

    assert after["kernel_clock"]["counters"]["down_sent"] == sent0 + SESSIONS
    # Each by way of the courier's queue, or (without it) each in a frame of the engine's.
    assert after["kernel_clock"]["counters"]["down_queued"] == queued0 + (SESSIONS if courier else 0)
    assert after["kernel_clock"]["counters"]["down_error"] == 0
    assert set(first) == set(peers)
    user = {s["peer"]: s["user_tx_packets"] for s in after["sessions"]}
    for peer, down in first.items():
        # Built by the kernel: a full UDP checksum (the local stack leaves a partial one on veth).
        assert (down.diag, down.ttl, down.udp_csum_ok) == (1, 255, True), peer
        later = [pk for pk in packets if pk.dst == peer and pk.src == ours_of[peer] and pk.ts > down.ts]
        assert not [pk for pk in later if pk.ts <= down.ts + 0.5], f"the Down to {peer} left twice"
        # What the engine sent itself since: the slow rate's packets after that, sent by the time
        # the stats were asked for at least and by the time they came back at most.
        sent_by = [len([pk for pk in later if pk.ts <= t]) for t in (t_ask, t_told)]
        assert sent_by[0] <= user[peer] - user0[peer] <= sent_by[1], peer
        assert not any(pk.udp_csum_ok for pk in later if pk.ts <= t_told), peer
    assert [s["state"] for s in after["sessions"]] == ["down"] * SESSIONS
