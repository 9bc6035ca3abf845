"""Two engines with the fast path facing each other: a fleet's router-to-router link.

Neither side's peer keeps a clock of its own, so every periodic packet comes
from a kernel transmit clock (bpf/tick.c): XDP answers what arrives, the tick
sends what nobody asked for. Judged on the wire (a capture on a bridge
between them: a capture on an XDP interface misses what its program
consumes) and by both engines' flap and kernel-sent counts.
"""

from __future__ import annotations

import contextlib
import signal

import pytest

from harness.capture import flow, gap_stats, gaps_ms
from harness.wait import WaitTimeout, wait_until

INTERVAL_MS = 10
WINDOW_PACKETS = 600  # about 6 s of one direction at 10 ms
STOPPED_PACKETS = 200  # 2 s of them with engine a stopped
FIFO = ["chrt", "-f", "60"]
# Packets a stats dump's latency (up to 100 ms at 10 ms) may put on one side of the window only.
STATS_SLACK = 10
COUNTS = ("flaps", "kernel_tx_packets", "user_tx_packets", "tick_sent")


@pytest.fixture
def pair(topo, engine_factory, capture_factory, tmp_path):
    """Two engines on one bridged subnet, both --kernel-tx, one session between them."""
    fixtures = (topo, engine_factory, capture_factory, tmp_path)
    return lambda family, multihop, *a_args, a_session="", b_session="": _pair(
        fixtures, family, multihop, a_args, a_session=a_session, b_session=b_session
    )


def _pair(
    fixtures: tuple,
    family: int,
    multihop: bool,
    a_args: tuple = (),
    *,
    a_session: str = "",
    b_session: str = "",
):
    """``a_args``: more arguments for engine a (--pin); ``a_session``/``b_session``: more keys for a
    session."""
    topo, engine_factory, capture_factory, tmp_path = fixtures
    a_ns, b_ns = topo.namespace("a"), topo.namespace("b")
    a, m_ns = topo.bridged(a_ns, "veth-a", b_ns, "veth-b")
    # b joins a's subnet (its own pair's address stays, unused).
    if family == 4:
        a_ip, b_ip = a.ip4, a.v4.network[3]
        b_ns.run(["ip", "addr", "add", f"{b_ip}/24", "dev", "veth-b"])
    else:
        a_ip, b_ip = a.v6.ip, a.v6.network[3]
        b_ns.run(["ip", "-6", "addr", "add", f"{b_ip}/64", "dev", "veth-b", "nodad"])
    hop = "multihop: true" if multihop else "interface: {ifname}"
    engines = {}
    for ns, ours, theirs, ifname in ((a_ns, a_ip, b_ip, "veth-a"), (b_ns, b_ip, a_ip, "veth-b")):
        sessions = tmp_path / f"sessions-{ns.name}.yml"
        extra = a_session if ns is a_ns else b_session
        sessions.write_text(
            f"- {{local: '{ours}', peer: '{theirs}', {hop.format(ifname=ifname)}, "
            f"min_tx_ms: {INTERVAL_MS}, min_rx_ms: {INTERVAL_MS}{extra}}}\n"
        )
        args = ["--sessions", str(sessions), "--kernel-tx", ifname, "--xdp-mode", "generic"]
        # As the packaged unit runs it.
        engines[ifname] = engine_factory(ns, args + list(a_args if ns is a_ns else ()), prefix=FIFO)
    ea, eb = engines["veth-a"], engines["veth-b"]
    for e in (ea, eb):
        e.wait_log("bfd: serving", timeout=60)  # two bcc compiles at once on a busy box
    cap = capture_factory(m_ns, "m-a")

    # A Demand-mode a asks b for silence: then only a's side is clocked.
    b_clocked = "demand" not in a_session

    def both_up() -> bool:
        sa, sb = ea.session(str(b_ip)), eb.session(str(a_ip))
        up = sa["state"] == "up" and sb["state"] == "up"
        return up and sa["kernel_clock"] and sb["kernel_clock"] == b_clocked

    wait_until(both_up, timeout=20, what="both sessions Up and kernel-clocked")
    return ea, eb, cap, str(a_ip), str(b_ip)


def _judge(ea, eb, cap, a_ip: str, b_ip: str, *, stop=None) -> None:
    """A window of WINDOW_PACKETS from a, judged on the wire and by both engines' counters."""
    before = {k: e.session(o) for k, e, o in (("a", ea, b_ip), ("b", eb, a_ip))}
    mark = cap.snapshot()[-1].ts

    def sent_since(t: float) -> int:
        return len([p for p in flow(cap.snapshot(), src=a_ip, dst=b_ip) if p.ts > t])

    def window_done() -> bool:
        return sent_since(mark) >= WINDOW_PACKETS

    if stop is not None:
        # Two seconds of a's packets with a stopped (inside its 3 s dead-man bound), then the rest.
        stop.signal(signal.SIGSTOP)
        try:
            with contextlib.suppress(WaitTimeout):
                wait_until(lambda: sent_since(mark) >= STOPPED_PACKETS, timeout=10, what="2 s of a stopped")
        finally:
            stop.signal(signal.SIGCONT)
    # Judged below with the figures of what did happen, enough packets or not.
    with contextlib.suppress(WaitTimeout):
        wait_until(window_done, timeout=20, what=f"{WINDOW_PACKETS} packets from a on the wire")
    after = {k: e.session(o) for k, e, o in (("a", ea, b_ip), ("b", eb, a_ip))}
    pkts = [p for p in cap.snapshot() if p.ts > mark]
    delta = {k: {f: after[k][f] - before[k][f] for f in COUNTS} for k in after}
    print(delta)
    for src, dst, k in ((a_ip, b_ip, "a"), (b_ip, a_ip, "b")):
        mine = flow(pkts, src=src, dst=dst)
        stats = gap_stats(gaps_ms(mine))
        print(f"\n{src} -> {dst}: {len(mine)} packets, gaps {stats}")
        assert len(mine) >= WINDOW_PACKETS * 0.9
        assert {p.state for p in mine} == {"up"}, f"{src} sent a non-Up packet"
        # Never a gap of the detection time: what a working pair must show.
        assert stats.max < 3 * INTERVAL_MS
        # Wire truth and the kernel's count agree: every periodic packet was kernel-sent.
        assert delta[k]["user_tx_packets"] == 0, f"engine {k} sent from userspace"
        # (The counters are read a stats dump before and after the window: a few packets apart.)
        assert abs(delta[k]["kernel_tx_packets"] - len(mine)) <= STATS_SLACK, (k, delta[k], len(mine))
    for k in ("a", "b"):
        assert delta[k]["flaps"] == 0, f"engine {k} flapped"
    # The ticks carry it (the witness that moves): some of each side's packets nobody asked for.
    assert all(d["tick_sent"] > 0 for d in delta.values()), delta


@pytest.mark.parametrize("multihop", [False, True], ids=["single-hop", "multihop"])
@pytest.mark.parametrize("family", [4, 6], ids=["ipv4", "ipv6"])
def test_two_fast_paths_hold_a_session_between_them(pair, timing, family, multihop):
    ea, eb, cap, a_ip, b_ip = pair(family, multihop)
    # The bound is 30 ms; a punctual clock uses 10 of it, so a stall of 20 explains a miss.
    with timing.window("engine <-> engine, kernel clocks", stall_ms=2 * INTERVAL_MS):
        _judge(ea, eb, cap, a_ip, b_ip)


def test_an_engine_stopped_is_invisible_to_its_fast_path_peer(pair, timing):
    # WINDOW_PACKETS at 10 ms: about 6 s, the first 2 of them with engine a stopped.
    ea, eb, cap, a_ip, b_ip = pair(4, False)
    with timing.window("engine a stopped, kernel clocks", stall_ms=2 * INTERVAL_MS):
        _judge(ea, eb, cap, a_ip, b_ip, stop=ea)


TAKEOVERS = 3


def test_pin_takeovers_keep_the_kernel_clock_going(pair, engine_factory, pin_dir, timing):
    """Engine a is replaced three times (--pin): its clock must tick on through every handover."""
    ea, eb, cap, a_ip, b_ip = pair(4, False, "--pin", str(pin_dir))
    b_before = eb.session(a_ip)
    mark = cap.snapshot()[-1].ts
    # As the bound above: 30 ms at the peer, 10 of it a punctual clock's.
    with timing.window(f"{TAKEOVERS} takeovers facing a fast path", stall_ms=2 * INTERVAL_MS):
        for _ in range(TAKEOVERS):
            new = engine_factory(ea.ns, ea.args, prefix=FIFO)
            assert ea.wait_exit(timeout=30) == 75, ea.log()
            new.wait_log("pin: adopted 1 sessions", timeout=30)
            assert "frames in flight" in new.log()  # the loop was adopted, not rebuilt
            wait_until(lambda n=new: n.session(b_ip)["kernel_clock"], timeout=10, what="successor clocking")
            ea = new
        pkts = [p for p in cap.snapshot() if p.ts > mark]
        ours = flow(pkts, src=a_ip, dst=b_ip)
        stats = gap_stats(gaps_ms(ours))
        print(f"\n{TAKEOVERS} takeovers: a -> b {len(ours)} packets, gaps {stats}")
        assert {p.state for p in ours} == {"up"}
        assert stats.max < 3 * INTERVAL_MS
        b_after = eb.session(a_ip)
        assert b_after["flaps"] == b_before["flaps"] and b_after["state"] == "up"
        assert not [p for p in flow(pkts, src=b_ip, dst=a_ip) if p.state != "up"]


def test_demand_mode_with_polls_survives_the_engine_stopped(pair, timing):
    """a asks for Demand mode: b goes silent but for Finals, a's clock alone keeps b's session Up."""
    ea, eb, cap, a_ip, b_ip = pair(4, False, "--demand-poll-us", "250000", a_session=", demand: true")

    def demand_on() -> bool:
        return any(p.demand for p in flow(cap.snapshot(), src=a_ip, dst=b_ip))

    wait_until(demand_on, timeout=10, what="a's D bit on the wire")
    b_before = eb.session(a_ip)
    mark = cap.snapshot()[-1].ts + 0.1  # b's last periodic packets may still be under way
    with timing.window("demand mode, engine a stopped", stall_ms=2 * INTERVAL_MS):
        ea.signal(signal.SIGSTOP)
        try:
            wait_until(
                lambda: (
                    len([p for p in flow(cap.snapshot(), src=a_ip, dst=b_ip) if p.ts > mark])
                    >= STOPPED_PACKETS
                ),
                timeout=10,
                what="2 s of a's packets with a stopped",
            )
        finally:
            ea.signal(signal.SIGCONT)
        # And a few of a's Polls after it (its verification resumes with the engine).
        wait_until(
            lambda: sum(p.poll for p in flow(cap.snapshot(), src=a_ip, dst=b_ip) if p.ts > mark) >= 2,
            timeout=5,
            what="a's Polls again",
        )
        pkts = [p for p in cap.snapshot() if p.ts > mark]
        ours, theirs = flow(pkts, src=a_ip, dst=b_ip), flow(pkts, src=b_ip, dst=a_ip)
        stats = gap_stats(gaps_ms(ours))
        print(f"\ndemand mode, a stopped 2 s: a {len(ours)} packets, gaps {stats}; b sent {len(theirs)}")
        assert {p.state for p in ours} == {"up"} and all(p.demand for p in ours)
        assert stats.max < 3 * INTERVAL_MS
        # b honours the D bit: nothing but Finals to a's Polls (the witness that Demand mode was on).
        assert theirs and all(p.final for p in theirs), [(p.ts, p.poll, p.final) for p in theirs[:5]]
        b_after = eb.session(a_ip)
        assert b_after["state"] == "up" and b_after["flaps"] == b_before["flaps"]
        a_after = ea.session(b_ip)
        assert a_after["state"] == "up" and a_after["flaps"] == 0


def test_our_echo_is_reflected_by_the_other_fast_path(pair, timing):
    """a sends our echo (IPv6, self-addressed), b's XDP reflects it like any echo, a's XDP takes it back.

    b's XDP must not take a's probe for a return of its own (the same magic): it names none of
    b's sessions, so it is a peer's echo to reflect. a starts only once b says Up (b reflects
    only over an Up session), so not one probe is lost, from the first.
    """
    ea, eb, _cap, a_ip, b_ip = pair(6, False, a_session=", echo_tx_ms: 20", b_session=", echo_ms: 20")

    def back() -> dict | None:
        e = ea.session(b_ip).get("echo") or {}
        return e if e.get("returned", 0) >= 25 else None

    # A probe is judged lost 3 x 20 ms after it left: a kernel stall that long could hold a return.
    with timing.window("our echo through the other fast path", stall_ms=50):
        e = wait_until(back, timeout=10, what="25 of a's echoes back through b")
        assert (e["interval_ms"], e["lost"], e["send_errors"]) == (20.0, 0, 0), e
    assert eb.session(a_ip)["echo_reflected"] >= 25
    assert not eb.stats()["counters"]["xdp_drop"].get("echo_unknown")
