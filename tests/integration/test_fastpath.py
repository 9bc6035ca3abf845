"""The XDP fast path against a real FRR 8.4 bfdd: who answers, how fast, and what
happens when either side dies or stalls. Wire truth from a capture on the peer's
side; kernel truth from the fast path's counters.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass

import pytest

from harness.capture import Capture, flow, gap_stats, gaps_ms
from harness.engine import EngineProcess
from harness.frr import Frr, bfd_peer_block
from harness.netns import Link, Namespace, attach_xdp_pass, xdp_attached
from harness.wait import wait_until

INTERVAL_MS = 10
# Sweep period (5 ms) plus reading the ring buffer and sending the Down packet.
SWEEP_BOUND_MS = 5 + 10


@dataclass
class FastPair:
    d: Namespace
    p: Namespace
    a: Link
    b: Link
    frr: Frr
    engine: EngineProcess
    cap: Capture
    args: list[str]

    @property
    def local(self) -> str:
        return str(self.a.ip4)

    @property
    def peer(self) -> str:
        return str(self.b.ip4)

    def ours(self, pkts: list) -> list:
        return flow(pkts, src=self.local, dst=self.peer)

    def theirs(self, pkts: list) -> list:
        return flow(pkts, src=self.peer, dst=self.local)

    def wait_offloaded(self, timeout: float = 15) -> dict:
        wait_until(
            lambda: (self.frr.peer(self.local) or {}).get("status") == "up", timeout=timeout, what="FRR up"
        )

        def active() -> dict | None:
            s = self.engine.session(self.peer)
            # Our Poll at Up (the fast rate) sends its first P from userspace: wait for its end.
            return s if s["state"] == "up" and s["kernel_tx_active"] and not s["poll_active"] else None

        return wait_until(active, timeout=timeout, what="kernel TX active on the session, our Poll over")

    def frr_counters(self) -> dict:
        return next(c for c in self.frr.counters() if c["peer"] == self.local)


@pytest.fixture
def fast_pair(topo, frr_factory, engine_factory, capture_factory, tmp_path):
    def make(*, mode: str = "auto", extra: tuple[str, ...] = ()) -> FastPair:
        d, p = topo.namespace("d"), topo.namespace("p")
        a, b = topo.veth(d, "veth-d", p, "veth-p")
        if mode == "native":
            attach_xdp_pass(p, "veth-p")
        frr = frr_factory(p, "p").start()
        frr.configure(
            *bfd_peer_block(
                str(a.ip4), local=str(b.ip4), interface="veth-p", rx_ms=INTERVAL_MS, tx_ms=INTERVAL_MS
            )
        )
        sessions = tmp_path / "sessions.yml"
        sessions.write_text(
            f"- {{local: {a.ip4}, peer: {b.ip4}, interface: veth-d, min_tx_ms: {INTERVAL_MS}, "
            f"min_rx_ms: {INTERVAL_MS}}}\n"
        )
        cap = capture_factory(p, "veth-p")
        args = ["--sessions", str(sessions), "--kernel-tx", "veth-d", "--xdp-mode", mode, *extra]
        eng = engine_factory(d, args)
        return FastPair(d, p, a, b, frr, eng, cap, args)

    return make


@pytest.mark.parametrize("mode", ["native", "generic"])
def test_kernel_answers_the_steady_state(fast_pair, mode, timing):
    fp = fast_pair(mode=mode)
    line = fp.engine.wait_log("kernel-tx: XDP attached to veth-d")
    assert f"({mode} mode, " in line
    fp.engine.wait_log("kernel-tx: dead-man gate at 3000000us")
    before = fp.wait_offloaded()
    # Our gaps must stay under two intervals: a stall of one interval explains a miss.
    with timing.window(f"steady state, {mode}", stall_ms=INTERVAL_MS) as w:
        _steady_state(fp, mode, before, w)


def _steady_state(fp: FastPair, mode: str, before: dict, w) -> None:
    csum_errors = fp.p.snmp()
    counters = fp.engine.stats()["counters"]
    mark = fp.cap.snapshot()[-1].ts
    wait_until(
        lambda: len([p for p in fp.ours(fp.cap.snapshot()) if p.ts > mark]) >= 300,
        timeout=15,
        what="300 of our packets on the wire",
    )
    after = fp.engine.session(fp.peer)
    ktx = after["kernel_tx_packets"] - before["kernel_tx_packets"]
    utx = after["user_tx_packets"] - before["user_tx_packets"]
    share = ktx / (ktx + utx)
    print(f"\n{mode}: kernel TX {ktx}, userspace TX {utx} ({share:.1%} kernel)")
    assert share >= 0.95
    window = [p for p in fp.ours(fp.cap.snapshot()) if p.ts > mark]
    # Every reply the kernel counted reached the peer, and nothing else was sent.
    assert abs(len(window) - (ktx + utx)) <= 0.05 * len(window) + 3, (len(window), ktx, utx)
    assert {p.dport for p in window} == {3784}
    assert {p.sport for p in window} == {fp.ours(fp.cap.snapshot())[0].sport}
    assert {p.ttl for p in window} == {255}
    # A packet sent by a local socket over veth carries only a partial checksum
    # (the receiving stack trusts it); a frame rewritten in XDP must carry a
    # full one. So bad checksums can only be userspace's (a few packets it
    # sends while a busy machine delays the peer), never more than it sent.
    bad = [p for p in window if not p.udp_csum_ok]
    assert len(bad) <= utx, f"{len(bad)} bad UDP checksums, only {utx} packets from userspace"
    assert {p.state for p in window} == {"up"}
    assert {p.your_discr for p in window} == {after["remote_discr"]}
    assert fp.p.snmp()["Udp.InCsumErrors"] == csum_errors["Udp.InCsumErrors"]
    w.peer([p for p in fp.theirs(fp.cap.snapshot()) if p.ts > mark], period_ms=INTERVAL_MS)
    # RX-clocked: our gaps are the peer's, jitter and all.
    ours, theirs = (
        gap_stats(gaps_ms(window)),
        gap_stats(gaps_ms([p for p in fp.theirs(fp.cap.snapshot()) if p.ts > mark])),
    )
    print(f"{mode}: ours {ours}\n{mode}: FRR  {theirs}")
    assert ours.max < 2 * INTERVAL_MS
    assert (after["state"], after["flaps"]) == ("up", 0)
    # The discriminator we chose named the slot: of the peer's packets the kernel counted
    # for the session (each found by its Your Discriminator), none needed the hash (bfd_abi.h).
    now = fp.engine.stats()
    assert now["sessions"][0]["rx_packets"] - before["rx_packets"] >= 250
    assert now["counters"]["discr_by_hash"] == counters["discr_by_hash"], (now["counters"], counters)


def test_peer_poll_is_answered_by_the_kernel_and_the_rate_follows(fast_pair, timing):
    fp = fast_pair()
    before = fp.wait_offloaded()
    # Replies every 20 ms must stay under 30: a stall of 10 ms explains a miss.
    with timing.window("peer's Poll, rate follows", stall_ms=10) as w:
        _poll_and_rate(fp, before, w)


def _poll_and_rate(fp: FastPair, before: dict, w) -> None:
    # The peer asks for packets no faster than every 20 ms but keeps sending every 10.
    fp.frr.configure("bfd", f"peer {fp.local} interface veth-p", "receive-interval 20", "exit", "exit")
    poll = fp.cap.wait_for(
        lambda p: p.src == fp.peer and p.poll and p.required_min_rx_us == 20_000, timeout=5, what="FRR's Poll"
    )
    final = fp.cap.wait_for(
        lambda p: p.src == fp.local and p.final and p.ts >= poll.ts, timeout=5, what="Final"
    )
    print(f"\nPoll -> Final on the wire: {(final.ts - poll.ts) * 1e6:.0f} us")
    assert final.udp_csum_ok  # built by XDP: a full checksum
    wait_until(
        lambda: len([p for p in fp.ours(fp.cap.snapshot()) if p.ts > final.ts]) >= 60,
        timeout=10,
        what="60 replies after the Final",
    )
    after = fp.engine.session(fp.peer)
    # The Final and everything after came from the kernel: userspace sent nothing.
    assert after["user_tx_packets"] == before["user_tx_packets"]
    assert after["kernel_tx_packets"] > before["kernel_tx_packets"]
    assert (after["state"], after["flaps"], after["kernel_tx_active"], after["tx_interval_us"]) == (
        "up", 0, True, 20_000,
    )  # fmt: skip
    w.peer([p for p in fp.theirs(fp.cap.snapshot()) if p.ts > final.ts], period_ms=INTERVAL_MS)
    # RFC 5880 §6.8.7 in XDP: replies at least 0.75 x 20 ms apart although the peer sends every 10.
    gaps = gap_stats(gaps_ms([p for p in fp.ours(fp.cap.snapshot()) if p.ts > final.ts][1:]))
    print(f"after the Poll: {gaps}")
    assert gaps.p50 >= 15.0 and gaps.max < 30.0


def test_asymmetric_timers_are_clocked_by_the_kernel(fast_pair, timing):
    fp = fast_pair()
    before = fp.wait_offloaded()
    # The bound is 30 ms (the peer's detection time); a punctual clock uses 10 of it.
    with timing.window("asymmetric timers, kernel clock", stall_ms=2 * INTERVAL_MS):
        _asymmetric(fp, before, stop=False)


def test_asymmetric_timers_survive_the_engine_stopped(fast_pair, timing):
    fp = fast_pair()
    before = fp.wait_offloaded()
    with timing.window("asymmetric timers, engine stopped", stall_ms=2 * INTERVAL_MS) as w:
        _asymmetric(fp, before, stop=True, window=w)


def _asymmetric(fp: FastPair, before: dict, *, stop: bool, window=None) -> None:
    # The peer now sends every 40 ms but still wants ours every 10: replies to
    # its packets cannot keep up, so the kernel's clock must send between them.
    fp.frr.configure("bfd", f"peer {fp.local} interface veth-p", "transmit-interval 40", "exit", "exit")

    def clocked() -> bool:
        s = fp.engine.session(fp.peer)
        return not s["kernel_tx_active"] and s["kernel_clock"]

    wait_until(clocked, timeout=5, what="XDP replies off, the kernel clock on")
    mid = fp.engine.session(fp.peer)
    downs = fp.frr_counters()["session-down"]
    mark = fp.cap.snapshot()[-1].ts
    if stop:
        fp.engine.signal(signal.SIGSTOP)
    try:
        # 200 of ours at 10 ms: 2 s, every one of them with the engine stopped if asked.
        wait_until(
            lambda: len([p for p in fp.ours(fp.cap.snapshot()) if p.ts > mark]) >= 200,
            timeout=10,
            what="200 packets from the kernel clock",
        )
    finally:
        if stop:
            fp.engine.signal(signal.SIGCONT)
    pkts = [p for p in fp.cap.snapshot() if p.ts > mark]
    if window is not None:
        window.peer(fp.theirs(pkts), period_ms=40)
    after = fp.engine.session(fp.peer)
    ours = fp.ours(pkts)
    gaps = gap_stats(gaps_ms(ours))
    print(
        f"\nkernel clock at 10 ms against a 40 ms peer{' (engine stopped)' if stop else ''}: {gaps}; "
        f"user TX {after['user_tx_packets'] - mid['user_tx_packets']}, our P/F {sum(p.poll for p in ours)}/"
        f"{sum(p.final for p in ours)}, theirs {sum(p.poll for p in fp.theirs(pkts))}/"
        f"{sum(p.final for p in fp.theirs(pkts))}"
    )
    if not stop:
        # (Stopped, it cannot send; what it answers once resumed, a Final, is no periodic packet.)
        assert after["user_tx_packets"] == mid["user_tx_packets"], "userspace sent periodic packets"
    assert after["tick_sent"] - mid["tick_sent"] >= len(ours) - 10
    assert gaps.max < 3 * INTERVAL_MS and {p.state for p in ours} == {"up"}
    assert (after["state"], after["flaps"]) == ("up", before["flaps"])
    assert fp.frr_counters()["session-down"] == downs
    assert not [p for p in fp.theirs(pkts) if p.state != "up"]


def test_peer_poll_is_answered_by_the_kernel_while_the_clock_sends(fast_pair, timing):
    """The peer's Poll gets XDP's Final also where XDP does not answer the steady packets.

    With the peer sending every 40 ms the kernel clock sends ours and XDP's
    steady replies are off; the peer then announces 50 ms with a Poll. The
    same happens at bring-up: every peer announces its fast rate with a Poll
    while XDP's replies are still off for it (the engine learned its slow
    rate from its Init), and left to userspace those Polls repeat at the new
    rate until answered (docs/fastpath.md, bring-up at scale).
    """
    fp = fast_pair()
    fp.wait_offloaded()
    with timing.window("peer's Poll while the kernel clock sends", stall_ms=2 * INTERVAL_MS) as w:
        fp.frr.configure("bfd", f"peer {fp.local} interface veth-p", "transmit-interval 40", "exit", "exit")

        def clocked() -> dict | None:
            s = fp.engine.session(fp.peer)
            return (
                s
                if not s["kernel_tx_active"] and s["kernel_clock"] and s["detect_time_us"] == 120_000
                else None
            )

        mid = wait_until(clocked, timeout=5, what="XDP replies off, the kernel clock on, detection 3 x 40 ms")
        mark = fp.cap.snapshot()[-1].ts
        fp.frr.configure("bfd", f"peer {fp.local} interface veth-p", "transmit-interval 50", "exit", "exit")
        poll = fp.cap.wait_for(
            lambda p: p.src == fp.peer and p.poll and p.desired_min_tx_us == 50_000 and p.ts > mark,
            timeout=5,
            what="FRR's Poll announcing 50 ms",
        )
        final = fp.cap.wait_for(
            lambda p: p.src == fp.local and p.final and p.ts >= poll.ts, timeout=5, what="our Final"
        )
        print(f"\nPoll -> Final on the wire: {(final.ts - poll.ts) * 1e6:.0f} us")
        # The engine learned the Poll's values from XDP's event: detection 3 x 50 ms.
        after = wait_until(
            lambda: (s := fp.engine.session(fp.peer))["detect_time_us"] == 150_000 and s,
            timeout=5,
            what="detection time 150 ms",
        )
        w.peer([p for p in fp.theirs(fp.cap.snapshot()) if p.ts >= poll.ts], period_ms=50)
        assert final.udp_csum_ok  # built by XDP: a full checksum
        # Userspace sent nothing: the Final is XDP's (before, the engine answered: one user TX).
        assert after["user_tx_packets"] == mid["user_tx_packets"], "userspace answered the Poll"
        assert (after["state"], after["flaps"], after["kernel_tx_active"]) == ("up", mid["flaps"], False)


def test_peer_killed_is_detected_by_the_sweep(fast_pair, timing):
    fp = fast_pair()
    fp.wait_offloaded()
    sent0 = fp.engine.stats()["kernel_clock"]["counters"]["down_sent"]
    # The kernel's bound leaves 2 ms over one sweep period; judged from the
    # peer's last packet to our Down, the only moment a stall could matter.
    with timing.window("detection by the sweep", stall_ms=2) as w:
        mark = fp.cap.snapshot()[-1].ts
        fp.frr.kill("bfdd")
        down = fp.cap.wait_for(
            lambda p: p.ts > mark and p.src == fp.local and p.state == "down",
            timeout=5,
            what="our Down packet",
        )
        # Long enough for a second Down the machine would send at once if it did not know of the
        # first; well short of the 1 pps a Down session sends at.
        wait_until(lambda: fp.cap.snapshot()[-1].ts > down.ts + 0.2, timeout=5, what="0.2 s after the Down")
        packets = fp.cap.stop()
        last = max(p.ts for p in fp.theirs(packets))
        w.focus(last, down.ts)
        wire_ms = (down.ts - last) * 1e3
        s = fp.engine.session(fp.peer)
        print(f"\ndetection: wire {wire_ms:.2f} ms, kernel {s['last_detection_us'] / 1e3:.2f} ms of silence")
        assert down.diag == 1
        assert 3 * INTERVAL_MS <= wire_ms + 1 <= 3 * INTERVAL_MS + SWEEP_BOUND_MS
        assert 3 * INTERVAL_MS * 1000 < s["last_detection_us"] <= (3 * INTERVAL_MS + 5 + 2) * 1000
    # The Down was the tick program's (built from the maps: a full UDP checksum), sent once.
    assert fp.engine.stats()["kernel_clock"]["counters"]["down_sent"] == sent0 + 1
    assert down.udp_csum_ok
    again = [p for p in packets if down.ts < p.ts <= down.ts + 0.2 and p.src == fp.local]
    assert not [p for p in again if p.state == "down"], "the Down left twice"


def test_sigkill_leaves_the_gate_to_close_then_restart_replaces(fast_pair, timing):
    fp = fast_pair(extra=("--deadman-us", "1000000"))
    fp.wait_offloaded()
    # The peer's Down may come 10 ms past its detection time after our last reply.
    with timing.window("dead-man gate after SIGKILL", stall_ms=10):
        _gate_closes(fp)


def _gate_closes(fp: FastPair) -> None:
    mark = fp.cap.snapshot()[-1].ts
    fp.engine.signal(signal.SIGKILL)
    fp.engine.wait_exit(timeout=10)
    # The program outlives the process and keeps answering, until the gate closes.
    peer_down = fp.cap.wait_for(
        lambda p: p.ts > mark and p.src == fp.peer and p.state == "down", timeout=10, what="the peer's Down"
    )
    pkts = fp.cap.snapshot()
    replies = [p for p in fp.ours(pkts) if mark < p.ts < peer_down.ts]
    last_reply = replies[-1].ts
    print(
        f"\nafter SIGKILL: kernel answered {(last_reply - mark) * 1e3:.0f} ms, "
        f"peer down {(peer_down.ts - last_reply) * 1e3:.1f} ms after the last reply"
    )
    # The gate closes 1 s after the last heartbeat, and heartbeats come every
    # quarter of the bound: between 0.75 and 1 s after the kill.
    assert 0.73 <= last_reply - mark <= 1.05, "the dead-man gate did not close at 1 s"
    assert peer_down.diag == 1 and (peer_down.ts - last_reply) * 1e3 <= 3 * INTERVAL_MS + 10
    assert xdp_attached(fp.d, "veth-d")
    # The next engine replaces the orphaned program and serves the session again.
    restarted = EngineProcess(fp.d, fp.args, fp.engine.workdir).start()
    try:
        restarted.wait_log("kernel-tx: XDP attached to veth-d")
        wait_until(lambda: fp.frr.peer(fp.local)["status"] == "up", timeout=15, what="FRR up again")
        assert restarted.stop() == 0
        assert not xdp_attached(fp.d, "veth-d"), "SIGTERM left the XDP program attached"
    finally:
        restarted.cleanup()


def test_sigstop_within_the_deadman_is_invisible(fast_pair, timing):
    fp = fast_pair()
    fp.wait_offloaded()
    # Our gaps must stay under two intervals: a stall of one interval explains a miss.
    with timing.window("engine stopped, kernel answers", stall_ms=INTERVAL_MS) as w:
        _stopped_is_invisible(fp, w)


def _stopped_is_invisible(fp: FastPair, w) -> None:
    downs_before = fp.frr_counters()["session-down"]
    mark = fp.cap.snapshot()[-1].ts
    fp.engine.signal(signal.SIGSTOP)
    try:
        # Two seconds of the peer's clock, counted on the wire: ~225 packets at 3x10 ms.
        wait_until(
            lambda: len([p for p in fp.ours(fp.cap.snapshot()) if p.ts > mark]) >= 200,
            timeout=10,
            what="200 kernel replies while the engine is stopped",
        )
    finally:
        fp.engine.signal(signal.SIGCONT)
    stopped = [p for p in fp.ours(fp.cap.snapshot()) if p.ts > mark]
    w.peer([p for p in fp.theirs(fp.cap.snapshot()) if p.ts > mark], period_ms=INTERVAL_MS)
    stats = gap_stats(gaps_ms(stopped))
    print(f"\nwhile stopped: {stats}")
    assert stats.max < 2 * INTERVAL_MS
    assert {p.state for p in stopped} == {"up"}
    s = fp.engine.session(fp.peer)
    assert (s["state"], s["flaps"]) == ("up", 0)
    assert fp.frr_counters()["session-down"] == downs_before
    assert not [p for p in fp.theirs(fp.cap.snapshot()) if p.ts > mark and p.state != "up"]


def test_detection_runs_while_the_engine_is_stopped(fast_pair, timing):
    fp = fast_pair()
    fp.wait_offloaded()
    # As the sweep test: 2 ms of slack over one sweep period, from the peer's last packet.
    with timing.window("detection while the engine is stopped", stall_ms=2) as w:
        _detect_while_stopped(fp, w)


def _detect_while_stopped(fp: FastPair, w) -> None:
    queued0 = fp.engine.stats()["kernel_clock"]["counters"]["down_queued"]
    fp.engine.signal(signal.SIGSTOP)
    try:
        mark = fp.cap.snapshot()[-1].ts
        fp.frr.kill("bfdd")
        # Let the silence run well past the detection time with nobody in userspace.
        # (Capture timestamps are wall-clock, like time.time().)
        wait_until(
            lambda: time.time() - mark > 0.3 and fp.cap.snapshot()[-1].ts <= mark + 0.05,
            timeout=5,
            what="300 ms of silence with the engine stopped",
        )
        resumed = time.time()
    finally:
        fp.engine.signal(signal.SIGCONT)
    wait_until(lambda: fp.engine.session(fp.peer)["state"] == "down", timeout=5, what="engine down")
    pkts = fp.cap.snapshot()
    last = max(p.ts for p in fp.theirs(pkts))
    # The Down left from the kernel's courier while nobody was in userspace (bpf/tick.c).
    downs = [p for p in fp.ours(pkts) if p.ts > last and p.state == "down"]
    assert downs, "no Down on the wire"
    down = downs[0]
    w.focus(last, max(last + 0.037, down.ts))
    s = fp.engine.session(fp.peer)
    print(
        f"\nkernel detection while stopped: {s['last_detection_us'] / 1e3:.2f} ms of silence,"
        f" Down on the wire {(down.ts - last) * 1e3:.2f} ms after the peer's last packet"
    )
    assert s["diag"] == "control_detection_time_expired"
    assert 30_000 < s["last_detection_us"] <= 37_000
    assert down.ts < resumed and (down.diag, down.ttl, down.udp_csum_ok) == (1, 255, True)
    assert fp.engine.stats()["kernel_clock"]["counters"]["down_queued"] == queued0 + 1
    # The machine knew of the kernel's Down: no second one at once (the next is the slow rate's, >= 0.75 s).
    assert not [p for p in downs[1:] if p.ts < down.ts + 0.5]
