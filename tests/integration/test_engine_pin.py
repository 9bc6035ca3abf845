"""--pin: hitless takeover by a successor engine, SIGUSR2, layout changes; sd_notify.

The peers are real FRR 8.4 bfdd; "peers see nothing" is judged on the wire
(captures on the peer side) and by FRR's own session-down counters.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import socket
import time
from pathlib import Path

import pytest
from test_dplane_frr import rig  # noqa: F401  (the fixture, shared with the dplane tests)

from harness.capture import flow, gap_stats, gaps_ms, silence_before
from harness.frr import bfd_peer_block, deadline_prefix
from harness.wait import wait_until
from harness.witness import Inconclusive

# The peer's bfdd runs under a SCHED_DEADLINE reservation: on a shared 2-core
# host an ordinary bfdd with 64 sessions at 10 ms was seen to stall for 85 ms
# when other work spiked, and a stalled peer flaps whoever answers it. Half a
# core: those 64 sessions cost bfdd 19 % of a core here, so at 2 ms/10 ms it
# ran at its budget, throttled in most periods; its TX gaps (and so ours,
# clocked off them) reached 19-21 ms, and a rare longer one fired our
# detection during a takeover (1 run in 4 of the clean-clone CI).
DEADLINE = deadline_prefix(5000)
# 16 sessions: on the AMD EPYC machine kind (2026-12-02) FRR's bfdd did not hold 64 at 10 ms
# through a successor's start, with 5 or 8 ms of every 10 reserved, and 32 failed CI too: peers
# declared us down though our packets kept coming, and XDP saw the peer silent for 56 ms while
# its TX gaps stayed under 24 ms and the reference stream's under 12 ms (packet processing on one
# CPU starved, which the single reference stream of the time did not see). Fewer sessions, less
# of that load; the bound (no gap of a detection time, no Down) is the same. The takeover at
# 1024 sessions is bench/takeover.py's (the synthetic peer).
N_SESSIONS = 16
TAKEOVERS = 5
DETECT_MS = 30  # 3 x 10 ms
INTERVAL_MS = 10
# FRR's bfdd under its DEADLINE reservation sends about 5 ms late in every clean
# window here (peer TX stall 5.0-5.3 ms, ten takeovers, 2026-12-02), and XDP's
# replies are clocked by its packets: of the detection time, a punctual product
# leaves the environment 30 - 10 - 5 = 15 ms. With 20, a 16.5 ms stall of the
# reference stream that delayed our replies by exactly that much (worst gap 26.5 ms,
# FRR's detection fired) was judged a product fault.
PEER_LATE_MS = 5
STALL_MS = DETECT_MS - INTERVAL_MS - PEER_LATE_MS
MAX_RERUNS = 4  # takeovers re-run alone after an inconclusive one (three in a row: too noisy)


def steady_tail(r) -> list:
    """Two more seconds of steady state on the wire after a takeover; the whole capture."""
    t_back = r.cap.snapshot()[-1].ts
    wait_until(lambda: r.cap.snapshot()[-1].ts > t_back + 2.0, timeout=10, what="two seconds of capture")
    return r.cap.stop()


def wire_unseen_since(r, s, pkts: list, mark: float) -> float:
    """After ``mark`` every packet of session ``s`` either way is Up; returns our worst gap (ms)."""
    ours = [x for x in r.from_d(s, pkts) if x.ts > mark]
    bad = [(x.ts, x.state) for x in ours if x.state != "up"]
    assert ours and not bad, (s.name, bad[:5])
    theirs = [x for x in pkts if x.src == r.theirs(s) and x.dst == r.ours(s) and x.ts > mark]
    assert theirs and all(x.state == "up" for x in theirs), s.name
    return gap_stats(gaps_ms(ours)).max


def _addresses(i: int) -> tuple[str, str]:
    return f"198.19.200.{i + 1}", f"198.19.200.{i + 101}"


@pytest.fixture
def lab_pin(topo, frr_factory, tmp_path):
    """N_SESSIONS single-hop IPv4 sessions at 3x10 ms on one veth pair, FRR in p as the peer."""
    d, p = topo.namespace("d"), topo.namespace("p")
    topo.veth(d, "veth-d", p, "veth-p")
    lines = []
    for i in range(N_SESSIONS):
        ours, theirs = _addresses(i)
        d.run(["ip", "addr", "add", f"{ours}/24", "dev", "veth-d"])
        p.run(["ip", "addr", "add", f"{theirs}/24", "dev", "veth-p"])
        lines.append(
            f"- {{local: {ours}, peer: {theirs}, interface: veth-d, min_tx_ms: 10, min_rx_ms: 10}}\n"
        )
    sessions = tmp_path / "sessions.yml"
    sessions.write_text("".join(lines))
    frr = frr_factory(p, "p", bfdd_prefix=DEADLINE).start()
    block = []
    for i in range(N_SESSIONS):
        ours, theirs = _addresses(i)
        block += bfd_peer_block(ours, local=theirs, interface="veth-p", rx_ms=10, tx_ms=10)
    frr.configure(*block)
    return d, p, frr, sessions


def _all_up(frr) -> bool:
    peers = [x for x in frr.peers() if x.get("peer", "").startswith("198.19.200.")]
    return len(peers) == N_SESSIONS and all(x.get("status") == "up" for x in peers)


def _downs(frr) -> int:
    return sum(c["session-down"] for c in frr.counters() if c["peer"].startswith("198.19.200."))


def _discrs(eng) -> dict[str, int]:
    return {s["peer"]: s["local_discr"] for s in eng.stats()["sessions"]}


def _state_log(engines, local: str) -> str:
    """Every engine's log lines on ``local``'s session, expiries and handovers, oldest engine first."""
    keys = (f"session: {local} ", "pin:", "expired")
    lines = []
    for n, e in enumerate(engines):
        lines += [f"engine {n}: {ln}" for ln in e.log().splitlines() if any(k in ln for k in keys)]
    return "\n".join(lines[-60:])


def _serving_all(eng) -> bool:
    doc = eng.stats()
    return doc["sessions_up"] == N_SESSIONS and all(s["kernel_tx_active"] for s in doc["sessions"])


def _settled(frr, eng, quiet_s: float = 3.0, timeout: float = 30.0) -> None:
    """Every session Up at both ends, with no Down at FRR, for ``quiet_s`` in a row (bounded).

    The window judges takeovers, not bring-up: on a slow machine a bring-up of many
    sessions still flaps one now and then after the first all-Up, and a window opened
    on it was judged inconclusive (the peer's slow rate after its Down, at +0.3 s).
    """
    deadline = time.monotonic() + timeout
    downs, since = _downs(frr), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = _downs(frr)
        if now != downs or not _all_up(frr) or not _serving_all(eng):
            downs, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
    pytest.fail(f"bring-up never settled: no {quiet_s:g} s without a Down at FRR within {timeout:g} s")


def test_takeover_is_hitless_five_times(lab_pin, engine_factory, capture_factory, pin_dir, timing):
    d, p, frr, sessions = lab_pin
    args = [
        "--sessions",
        str(sessions),
        "--kernel-tx",
        "veth-d",
        "--pin",
        str(pin_dir),
        "--log-level",
        "info",
    ]
    engines = [engine_factory(d, args)]
    wait_until(lambda: _all_up(frr), timeout=30, what=f"{N_SESSIONS} sessions up at FRR")
    wait_until(lambda: _serving_all(engines[-1]), timeout=15, what="kernel TX on every session")
    discrs = _discrs(engines[-1])
    clean: list[float] = []
    # Each takeover is its own window: the FRR peer stalls past 20 ms now and then
    # during one here (its own TX gaps say so), and one such takeover is re-run
    # alone, not the four clean ones with it. Three inconclusive in a row still
    # fail as too noisy; a product fault fails at once.
    for n in range(TAKEOVERS + MAX_RERUNS):
        if len(clean) == TAKEOVERS:
            break
        _settled(frr, engines[-1])
        try:
            clean.append(
                _one_takeover(n, engines, d, p, frr, args, discrs, engine_factory, capture_factory, timing)
            )
        except Inconclusive as e:
            print(f"\ntakeover {n + 1} inconclusive, re-run alone: {str(e).splitlines()[0]}")
    assert len(clean) == TAKEOVERS, f"{len(clean)} clean takeovers of {TAKEOVERS} in {n + 1} tries"
    print(f"\n{TAKEOVERS} clean takeovers of {N_SESSIONS} sessions: old engine gone after {clean} ms")


def _one_takeover(  # noqa: PLR0917  (the test's fixtures and state)
    n, engines, d, p, frr, args, discrs, engine_factory, capture_factory, timing
) -> float:
    """One takeover judged on its own window; returns request -> old engine gone (ms)."""
    downs = _downs(frr)
    eng = engines[-1]
    sockets = _source_sockets(eng.pid)
    assert len(sockets) == N_SESSIONS, sockets
    packet = _packet_sockets(eng.pid)
    assert packet, "no packet socket (the transmit clock's loop sends its frames in through one)"
    # A machine (or an FRR peer) STALL_MS late explains a Down without us.
    with timing.window(f"takeover {n + 1} ({N_SESSIONS} sessions)", stall_ms=STALL_MS) as w:
        cap = capture_factory(p, "veth-p")
        new = engine_factory(d, args)
        engines.append(new)
        assert eng.wait_exit(timeout=20) == 75, eng.log()
        line = new.wait_log("pin: adopted", timeout=20)
        assert f"{N_SESSIONS} sessions" in line
        # Each session sends from the socket it had (pin/session_sockets.py): same port, same socket.
        assert f"kept {N_SESSIONS} of their sockets" in line, line
        assert _source_sockets(new.pid) == sockets
        # The loop's socket changed hands too (pin/packet_sockets.py): the old engine's exit
        # waited for no grace period.
        assert "and its socket" in new.log() and _packet_sockets(new.pid) == packet, new.log()
        gone = re.search(r"gone ([\d.]+) ms after the request", new.log())
        assert gone, new.log()
        # The warm-up before the request (SIGWINCH, acknowledged in the owner record) happened.
        assert re.search(r"it had prepared in [\d.]+ ms", new.log()), new.log()
        # ... and the state it wrote then was decoded before the request, so the request's was
        # checked only where it differed (the log says how many records were checked again), or
        # not decoded at all when it is the warm-up's very bytes (nothing changed in between).
        assert f"read the warm-up's state of {N_SESSIONS} sessions" in new.log(), new.log()
        # The sockets the warm-up passed were checked then (pin/state.check_early), not at the restore.
        assert f"checked {N_SESSIONS} of its sessions' sockets" in new.log(), new.log()
        assert re.search(
            r"\((\d+) checked again since the warm-up's(\)|: its very bytes, not decoded again\))", new.log()
        ), new.log()
        assert "handed over" in eng.log()
        # Sessions the kernel carries whole (Up, XDP answering, the sweep watching) are serviced after
        # READY, as background work (pin/catchup.py): every one here, once the loop has run.
        carried = re.search(r"; (\d+) the kernel carries serviced once the loop runs", line)
        assert carried and int(carried.group(1)) >= 1, line
        wait_until(lambda: _serving_all(new), timeout=15, what="successor serving every session")
        assert f"the {carried.group(1)} adopted sessions the kernel carried serviced in the loop" in new.log()
        assert _discrs(new) == discrs  # peers keep talking to the same discriminators
        # FRR's counters read while the capture still runs: a Down they count
        # falls inside the capture, where the peer's own TX gaps can witness it
        # (read after the stop, an FRR stall during the analysis read as ours).
        downs_after, all_up = _downs(frr), _all_up(frr)
        pkts = cap.stop()
        for i in range(N_SESSIONS):
            ours, theirs = _addresses(i)
            w.peer(flow(pkts, src=theirs, dst=ours), period_ms=INTERVAL_MS)
        worst, faults = 0.0, []
        for i in range(N_SESSIONS):
            ours, theirs = _addresses(i)
            ours_flow = flow(pkts, src=ours, dst=theirs)
            theirs_flow = flow(pkts, src=theirs, dst=ours)
            assert ours_flow, f"nothing from {ours} in the capture"
            faults += _first_fault(ours_flow, theirs_flow, ours, theirs, engines)
            worst = max(worst, gap_stats(gaps_ms(ours_flow)).max)
        print(f"\ntakeover {n + 1}: old engine gone after {gone.group(1)} ms; worst gap in our TX "
              f"{worst:.1f} ms; {len(pkts)} packets captured")  # fmt: skip
        if faults:
            # Judged over the whole takeover, not narrowed to the fault: narrowed,
            # a stall of one CPU's packet processing that the single reference
            # stream of the time missed (XDP saw the peer silent for 56 ms, its
            # TX gaps under 24 ms) read as a product fault (docs/testing.md).
            _when, what = min(faults)
            raise AssertionError(f"{len(faults)} session(s) failed; the first:\n{what}")
        assert downs_after == downs, f"FRR counted {downs_after - downs} down event(s)"
        assert all_up
    return float(gone.group(1))


def _packet_sockets(pid: int) -> set[int]:
    """The inodes of the AF_PACKET sockets ``pid`` holds."""
    inodes = {int(line.split()[-1]) for line in Path(f"/proc/{pid}/net/packet").read_text().splitlines()[1:]}
    held = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:[") and int(target[8:-1]) in inodes:
            held.add(int(target[8:-1]))
    return held


def _source_sockets(pid: int) -> dict[int, int]:
    """Source port -> socket inode of the sessions' sockets in ``pid``'s network namespace."""
    out = {}
    for line in Path(f"/proc/{pid}/net/udp").read_text().splitlines()[1:]:
        fields = line.split()
        port = int(fields[1].rsplit(":", 1)[1], 16)
        if port >= 49152:
            out[port] = int(fields[9])
    return out


def _first_fault(ours_flow, theirs_flow, ours: str, theirs: str, engines) -> list[tuple[float, str]]:
    """This session's first fault as (when, why): our gap of a detection time or more, our
    non-Up packet, or the peer leaving Up; nothing when it held."""
    found = []
    for a, b in itertools.pairwise(ours_flow):
        if (b.ts - a.ts) * 1e3 >= DETECT_MS:
            found.append((b.ts, f"{ours} silent {(b.ts - a.ts) * 1e3:.1f} ms from {a.ts:.3f}"))
            break
    for sender, other, label in (
        (ours_flow, theirs_flow, f"{ours} sent"),
        (theirs_flow, ours_flow, f"peer {theirs} sent"),
    ):
        bad = next((x for x in sender if x.state != "up"), None)
        if bad is not None:
            why = f"{label} {bad.state} (diag {bad.diag}) at {bad.ts:.3f}; the other side before it: "
            found.append((bad.ts, why + f"{silence_before(other, bad.ts)}\n{_state_log(engines, ours)}"))
    return sorted(found)[:1]


def _one_session_lab(topo, frr_factory, tmp_path):
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    # Under its own reservation, as the 64-session peer: a successor's compile
    # takes a core for seconds, and an ordinary bfdd beside it was seen to go
    # quiet for 24-69 ms on a busy machine (the witnesses said so).
    frr = frr_factory(p, "p", bfdd_prefix=deadline_prefix(2000)).start()
    frr.configure(*bfd_peer_block(str(a.ip4), local=str(b.ip4), interface="veth-p", rx_ms=10, tx_ms=10))
    sessions = tmp_path / "one.yml"
    sessions.write_text(
        f"- {{local: {a.ip4}, peer: {b.ip4}, interface: veth-d, min_tx_ms: 10, min_rx_ms: 10}}\n"
    )
    return d, p, a, b, frr, sessions


def _peer_down_count(frr, peer: str) -> int:
    return next(c for c in frr.counters() if c["peer"] == peer)["session-down"]


def test_sigusr2_alone_exits_75_and_leaves_the_state(  # noqa: PLR0917  (pytest fixtures)
    topo, frr_factory, engine_factory, capture_factory, tmp_path, pin_dir, timing
):
    d, p, a, b, frr, sessions = _one_session_lab(topo, frr_factory, tmp_path)
    # Nobody runs from the exit until the successor has compiled (3.4-4.9 s
    # on a loaded 2-vCPU machine), so the dead-man gate must outlast that:
    # this test is about the state left behind, not about the gate.
    args = [
        "--sessions",
        str(sessions),
        "--kernel-tx",
        "veth-d",
        "--pin",
        str(pin_dir),
        "--deadman-us",
        "15000000",
    ]
    eng = engine_factory(d, args)
    wait_until(lambda: (frr.peer(str(a.ip4)) or {}).get("status") == "up", timeout=20, what="up")
    wait_until(lambda: eng.session(str(b.ip4))["kernel_tx_active"], timeout=10, what="kernel TX")
    discr = eng.session(str(b.ip4))["local_discr"]
    downs = _peer_down_count(frr, str(a.ip4))
    # The peer here is an ordinary bfdd: on a busy machine it can go quiet
    # past its own detection time while the successor compiles.
    with timing.window("SIGUSR2 alone, successor adopts", stall_ms=20, userspace=True) as w:
        cap = capture_factory(p, "veth-p")
        eng.signal(signal.SIGUSR2)
        assert eng.wait_exit(timeout=10) == 75
        # Nobody runs now; the XDP program left behind keeps answering the peer.
        new = engine_factory(d, args)
        new.wait_log("pin: adopted 1 sessions", timeout=20)
        w.peer(flow(cap.stop(), src=str(b.ip4), dst=str(a.ip4)), period_ms=10)
        assert "pin: engine" not in new.log()  # nothing to ask: it adopted what was left
        s = new.session(str(b.ip4))
        assert s["local_discr"] == discr and s["state"] == "up", new.log()
        assert _peer_down_count(frr, str(a.ip4)) == downs


def test_changed_layout_starts_fresh_and_says_so(topo, frr_factory, engine_factory, tmp_path, pin_dir):
    d, _p, a, b, frr, sessions = _one_session_lab(topo, frr_factory, tmp_path)
    args = ["--sessions", str(sessions), "--kernel-tx", "veth-d", "--pin", str(pin_dir)]
    eng = engine_factory(d, args)
    wait_until(lambda: (frr.peer(str(a.ip4)) or {}).get("status") == "up", timeout=20, what="up")
    old_layouts = {x.name for x in pin_dir.iterdir() if x.is_dir()}
    new = engine_factory(d, args, prefix=["env", "XDP_BFD_TEST_LAYOUT_CHANGE=1"])
    assert eng.wait_exit(timeout=20) == 75
    new.wait_log("bfd: serving", timeout=20)
    assert "different layout" in new.log() and "starting fresh" in new.log()
    assert "pin: adopted" not in new.log()
    layouts = {x.name for x in pin_dir.iterdir() if x.is_dir()}
    assert len(layouts) == 1 and not layouts & old_layouts  # the old build's maps are gone
    wait_until(lambda: new.session(str(b.ip4))["state"] == "up", timeout=20, what="fresh session up")


def test_notify_ready_after_serving_and_stopping(topo, engine_factory, tmp_path):
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as rx:
        rx.bind(str(path))
        rx.settimeout(30)
        eng = engine_factory(d, [str(a.ip4), str(b.ip4), "--kernel-tx", "veth-d"],
                             prefix=["env", f"NOTIFY_SOCKET={path}"])  # fmt: skip
        assert rx.recv(256) == b"READY=1\n"
        # READY came after the engine was serving: the attach is already in its log.
        log = eng.log()
        assert "kernel-tx: XDP attached to veth-d" in log and "bfd: serving 1 sessions" in log
        eng.signal(signal.SIGTERM)
        assert rx.recv(256) == b"STOPPING=1\n"
        assert eng.wait_exit(timeout=10) == 0


def test_notify_takeover_names_the_new_main_pid(topo, engine_factory, tmp_path, pin_dir):
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    path = tmp_path / "notify"
    args = [str(a.ip4), str(b.ip4), "--kernel-tx", "veth-d", "--pin", str(pin_dir)]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as rx:
        rx.bind(str(path))
        rx.settimeout(30)
        env = ["env", f"NOTIFY_SOCKET={path}"]
        old = engine_factory(d, args, prefix=env)
        assert rx.recv(256) == b"READY=1\n"
        new = engine_factory(d, args, prefix=env)
        said = [rx.recv(256).decode() for _ in range(3)]
        assert old.wait_exit(timeout=10) == 75
    # ip netns exec / env exec in place, so the engine's pid is the Popen's.
    assert said[0] == f"MAINPID={new.pid}\n"  # before the old one leaves
    assert said[1] == f"STATUS=taking over from engine {old.pid}\n"  # the request itself
    assert said[2] == f"MAINPID={new.pid}\nSTATUS=serving\nREADY=1\n"


def test_takeover_with_bfdd_driving_is_hitless(rig, pin_dir, engine_factory, timing):  # noqa: F811
    """--pin + --dplane-connect: real FRR 8.4.4 bfdd owns the sessions; a successor takes over.

    The old engine passes its bfddp connection to the successor (fdpass.py),
    so bfdd never sees it close. Neither side may see anything: no down event
    at the peer, no non-Up packet, and bfdd's own session-down counter (what
    its clients, BGP, would act on) unchanged.
    """
    from test_dplane_frr import (  # noqa: PLC0415
        PORT,
        SH4,
        SH6,
        SLOW_MS,
        _bring_up,
        _check_up_and_discriminators,
        _counters,
    )

    specs = (SH4, SH6)
    args = ["--dplane-connect", f"ipv4:127.0.0.1:{PORT}", "--kernel-tx", "veth-d",
            "--pin", str(pin_dir), "--dp-hold", "10"]  # fmt: skip
    # 3x50 ms as the bfdd restart tests: the peer here is an ordinary bfdd, and
    # on a busy shared VM it stalls past 30 ms by itself (seen: flaps before
    # any takeover). The takeover is what is judged, not the peer's scheduling.
    r = rig(args, ["--dplaneaddr", f"ipv4:127.0.0.1:{PORT}"], specs=specs, interval_ms=SLOW_MS)
    _bring_up(r, specs)
    ids = {s: (r.in_d(s)["id"], r.in_d(s)["remote-id"]) for s in specs}
    downs = {s: _counters(r.peer, r.ours(s), False)["session-down"] for s in specs}
    d_downs = {s: _counters(r.bfdd, r.theirs(s), False)["session-down"] for s in specs}
    # A machine or a peer late by the detection time less one interval explains a Down without us.
    with timing.window("takeover under bfdd", stall_ms=2 * r.interval_ms) as w:
        mark = r.cap.snapshot()[-1].ts
        r.bfdd.vtysh("debug bfd peer", "debug bfd distributed")
        log_mark = len(r.bfdd.log())

        old = r.engine
        new = engine_factory(r.d, args)
        assert old.wait_exit(timeout=20) == 75, old.log()
        new.wait_log("pin: adopted 2 sessions", timeout=20)
        r.engine = new
        # bfdd reconnects to the successor and re-adds both sessions (same discriminators).
        for s in specs:
            wait_until(
                lambda s=s: (
                    (e := r.in_engine(s)) is not None and e["origin"] == "dplane" and e["kernel_tx_active"]
                ),
                timeout=15,
                what=f"{s.name} re-added by bfdd and offloaded",
            )
        assert "dplane: bfdd connected" in new.log()
        pkts = steady_tail(r)
        for s in specs:
            theirs = [x for x in pkts if x.src == r.theirs(s) and x.dst == r.ours(s) and x.ts > mark]
            w.peer(theirs, period_ms=r.interval_ms)
        worst = 0.0
        for s in specs:
            worst = max(worst, wire_unseen_since(r, s, pkts, mark))
            assert _counters(r.peer, r.ours(s), False)["session-down"] == downs[s]
            assert _counters(r.bfdd, r.theirs(s), False)["session-down"] == d_downs[s], s.name
            assert (r.in_d(s)["id"], r.in_d(s)["remote-id"]) == ids[s]
            _check_up_and_discriminators(r, s)
        print(f"\nbfdd-driven takeover: {new.wait_log('pin: engine')}; worst gap in our TX {worst:.1f} ms")
        print("bfdd (controller) log during the takeover:\n" + r.bfdd.log()[log_mark:])
        assert worst < 3 * r.interval_ms


@pytest.mark.parametrize("how", ["--pin", "--succeed"])
def test_a_successor_stopped_while_compiling_leaves_the_old_engine_serving(
    topo, engine_factory, pin_dir, how
):
    """A reload that gives up stops its successor, often mid-compile: the old engine must stay.

    Seen in molecule's fleet: a compile slower than the reload's wait, the
    reload's SIGTERM recorded during it, and the successor then took over
    anyway and stopped, leaving the unit with no engine.
    """
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    args = [str(a.ip4), str(b.ip4), "--kernel-tx", "veth-d"]
    old = engine_factory(d, [*args, "--pin", str(pin_dir)] if how == "--pin" else args)
    old.wait_log("bfd: serving")
    new = engine_factory(d, [*args, "--pin", str(pin_dir)] if how == "--pin" else [*args, how, str(old.pid)])
    # Logged once its signal handlers are in place, just before the compile (seconds here).
    new.wait_log("kernel-tx: dead-man gate")
    new.signal(signal.SIGTERM)
    assert new.wait_exit(timeout=60) != 0, new.log()
    # The witness that the stop landed before the takeover and was acted on there.
    assert "stopped before taking over: the running engine was not asked to leave" in new.log(), new.log()
    assert old.proc.poll() is None, old.log()
    assert "SIGUSR2" not in old.log() and "handed over" not in old.log(), old.log()
    assert old.stats()["kernel_tx"] is True
    assert old.stop() == 0, old.log()
