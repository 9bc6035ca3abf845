"""The stress ladder and detection latency: every DUT backend against one FRR bfdd peer.

Two namespaces joined by one veth pair: ``d`` (the device under test, veth-d,
198.19.1.1) and ``p`` (the peer, veth-p, 198.19.1.2). The peer is stock FRR
bfdd under a SCHED_DEADLINE reservation (2 ms every 10 ms, taken with ``chrt``)
so that no stress level starves it: what is measured is the DUT. Every
measurement window is captured with tcpdump on veth-p, so both directions are
timestamped by the peer's kernel (softirq time, truthful even when every
userspace process is starved).

Backends (the DUT side, one at a time, alternated within each level):

``bfdd``         stock FRR bfdd, software BFD
``engine-sw``    ``xdp-bfd --sessions F`` (the engine as a complete software daemon)
``engine-ktx``   ``xdp-bfd --sessions F --kernel-tx veth-d`` (the XDP fast path)
``bfddp``        FRR bfdd ``--dplaneaddr ipv4:127.0.0.1:PORT`` driving
                 ``xdp-bfd --dplane-connect ipv4:127.0.0.1:PORT --kernel-tx veth-d``
``engine-pair``  engine <-> engine, a fleet's router-to-router link: ``xdp-bfd --sessions F
                 --kernel-tx veth-d`` against ``xdp-bfd --sessions F --kernel-tx veth-p``, both
                 as the unit runs them, IPv4 + IPv6, single-hop + multihop (four sessions), on a
                 bed of its own (see :class:`PairBed`: a capture on either XDP interface misses
                 what its program consumes and what it sends with XDP_TX, so the truth is taken
                 on a bridge between them); p's bfdd never holds these sessions. Ladder only
                 (the detection part kills p's bfdd, which this backend does not meet).

Every loop and wait here is bounded, every process is registered for cleanup
the moment it exists, and stress-ng runs in its own process group with its own
``--timeout`` and is killed as a group on the way out.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import benchlib

from harness.capture import Capture, WirePacket, down_transitions, flow, gap_stats
from harness.engine import EngineProcess
from harness.frr import Frr
from harness.netns import Link, Namespace, Topology
from harness.wait import WaitTimeout, wait_until

INTERVAL_MS = 10
DETECT_MULT = 3
DPLANE_PORT = 50710
ENGINE_RESERVATION = "1000/10000"
PEER_RESERVATION = ("2000000", "10000000")  # runtime, period (ns): the peer stays out of the fight
# The echo originator rides along in the engine-ktx cells (docs/benchmarks.md): the peer allows
# echo every 20 ms and forwards it back; the engine asks for 10, so it sends at the peer's 20.
ECHO_TX_MS = 10
PEER_ECHO_RX_MS = 20
ECHO_FIGURES = ("sent", "returned", "lost", "skipped", "send_errors")
PAIR = "engine-pair"
BACKENDS = ("bfdd", "engine-sw", "engine-ktx", "bfddp", PAIR)
# What a run selects when it names none (suite.py --backends), and what detection can measure.
DEFAULT_BACKENDS = ("bfdd", "engine-sw", "engine-ktx", "bfddp")
DETECTION_BACKENDS = DEFAULT_BACKENDS

# name -> (what it is, stress-ng arguments). Two workers each: one per vCPU of the reference machine.
LEVELS: dict[str, tuple[str, list[str]]] = {
    "L0": ("idle", []),
    "L1": ("CPU hogs", ["--cpu", "2"]),
    "L2": ("CPU + context-switch churn", ["--cpu", "2", "--switch", "2"]),
    "L3": ("CPU + timer/hrtimer pressure", ["--cpu", "2", "--timer", "2", "--hrtimers", "2"]),
    "L4": ("SCHED_FIFO-50 hogs", ["--cpu", "2", "--sched", "fifo", "--sched-prio", "50"]),
    "L5": ("SCHED_FIFO-99 hogs", ["--cpu", "2", "--sched", "fifo", "--sched-prio", "99"]),
}
# How the engine backends are scheduled (suite.py --engine-sched): "unit" runs
# them as the packaged xdp-bfd.service does at every level (SCHED_FIFO 60, and
# the engine's own deadline reservation); "plain" as a bare process at the
# default class, with the reservation only where nothing else survives (L5 and
# the soak). bfdd cannot reserve and runs as FRR's unit runs it (default
# class) everywhere.
ENGINE_SCHED_MODES = ("unit", "plain")
engine_sched = "unit"
UNIT_PREFIX = ["chrt", "-f", "60"]
RESERVED = {"L5", "soak"}


def reserved(level: str) -> bool:
    """Whether the engine backends take --sched-deadline at this level."""
    return engine_sched == "unit" or level in RESERVED


SOAK_LEVELS = ("L1", "L2", "L3", "L4", "L5")


def peer_block(peer: str, local: str, ifname: str, interval_ms: int) -> str:
    """bfdd.conf text for one single-hop peer, so a restarted bfdd comes back with it."""
    return (
        f"bfd\n peer {peer} local-address {local} interface {ifname}\n"
        f"  receive-interval {interval_ms}\n  transmit-interval {interval_ms}\n"
        f"  detect-multiplier {DETECT_MULT}\n  echo receive-interval {PEER_ECHO_RX_MS}\n exit\nexit\n"
    )


# -- stress ---------------------------------------------------------------------


class Stress:
    """stress-ng in its own process group, bounded by its --timeout and by :meth:`close`."""

    def __init__(self, args: list[str], seconds: float) -> None:
        self.argv = ["stress-ng", *args, "--timeout", f"{max(1, round(seconds))}s", "--quiet"]
        self.seconds = seconds
        self.proc = subprocess.Popen(
            self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )

    # How long stress-ng may overstay its --timeout before its group is killed: once seen, a
    # 3 s L4 window ran 28 s (the stress-ng parent starved by its own FIFO hogs), which stretches
    # the window and the run for nothing.
    GRACE_S = 3.0

    def wait(self) -> int | None:
        try:
            return self.proc.wait(timeout=self.seconds + self.GRACE_S)
        except subprocess.TimeoutExpired:
            return None
        finally:
            self.close()

    def close(self) -> None:
        # The group is ours: stress-ng was started as its leader in a new session.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


def stress_window(level: str, seconds: float, live: list[Stress]) -> list[str]:
    """Run ``level``'s stress for ``seconds`` (or stay idle); returns the commands run."""
    if level == "soak":
        part, cmds = seconds / len(SOAK_LEVELS), []
        for lv in SOAK_LEVELS:
            cmds += stress_window(lv, part, live)
        return cmds
    args = LEVELS[level][1]
    if not args:
        time.sleep(seconds)  # the idle window itself: nothing to wait for
        return []
    s = Stress(args, seconds)
    live.append(s)
    try:
        s.wait()
    finally:
        live.remove(s)
    return [" ".join(s.argv)]


# -- the rig --------------------------------------------------------------------


@dataclass
class Rig:
    topo: Topology
    d: Namespace
    p: Namespace
    a: Link  # veth-d
    b: Link  # veth-p
    peer: Frr
    work: Path
    interval_ms: int
    peer_sched: str
    # The environment witness (harness.witness.ReferenceStream, started by the suite): every
    # window and every detection records what it saw, so a flap can be told from the weather.
    witness: Any = None
    stresses: list[Stress] = field(default_factory=list)
    frrs: list[Frr] = field(default_factory=list)
    engines: list[EngineProcess] = field(default_factory=list)
    pair: PairBed | None = None
    _caps: int = 0

    def pair_bed(self) -> PairBed:
        """The engine <-> engine bed, built on first use in this rig's topology (closed with it)."""
        if self.pair is None:
            self.pair = make_pair_bed(self.topo)
        return self.pair

    @property
    def dut_ip(self) -> str:
        return str(self.a.ip4)

    @property
    def peer_ip(self) -> str:
        return str(self.b.ip4)

    def peer_view(self) -> dict[str, Any]:
        return self.peer.peer(self.dut_ip) or {}

    def peer_downs(self) -> int:
        c = next((c for c in self.peer.counters() if c.get("peer") == self.dut_ip), {})
        return int(c.get("session-down", 0))

    def peer_fast(self) -> bool:
        """Up, with the fast timers agreed (the Poll that leaves the 1 s rate is done)."""
        v = self.peer_view()
        return v.get("status") == "up" and v.get("remote-transmit-interval") == self.interval_ms

    def pcap(self, tag: str) -> Path:
        self._caps += 1
        return self.work / f"{self._caps:03d}-{tag}.pcap"

    def capture(self, tag: str) -> Capture:
        return Capture(self.p, "veth-p", self.pcap(tag)).start()

    def close(self) -> None:
        for s in list(self.stresses):
            s.close()
        for e in self.engines:
            with contextlib.suppress(Exception):
                e.cleanup()
        for f in [*self.frrs, self.peer]:
            with contextlib.suppress(Exception):
                f.cleanup()
        self.topo.close()


def deadline_admitted(ns: Namespace) -> bool:
    """Whether the peer's reservation is admitted right now (other runs may hold deadline bandwidth)."""
    runtime, period = PEER_RESERVATION
    argv = ["chrt", "-d", "-R", "--sched-runtime", runtime, "--sched-deadline", period]
    out = ns.run([*argv, "--sched-period", period, "0", "true"], check=False)
    return out.returncode == 0


def make_rig(work: Path, interval_ms: int = INTERVAL_MS) -> Rig:
    work.mkdir(parents=True, exist_ok=True)
    topo = Topology()
    try:
        d, p = topo.namespace("d"), topo.namespace("p")
        a, b = topo.veth(d, "veth-d", p, "veth-p")
        # A bfdd dataplane client retrying a missing listener can connect to itself (docs/frr.md).
        d.sysctl("net.ipv4.ip_local_reserved_ports", DPLANE_PORT)
        runtime, period = PEER_RESERVATION
        prefix: list[str] = []
        sched = "default (deadline admission refused)"
        if deadline_admitted(p):
            prefix = ["chrt", "-d", "-R", "--sched-runtime", runtime, "--sched-deadline", period]
            prefix += ["--sched-period", period, "0"]
            sched = f"deadline {int(runtime) // 1000}/{int(period) // 1000} us"
        peer = Frr(p, "peer", bfdd_prefix=prefix)
        rig = Rig(topo, d, p, a, b, peer, work, interval_ms, sched)
        peer.start(peer_block(str(a.ip4), str(b.ip4), "veth-p", interval_ms))
        return rig
    except BaseException:
        topo.close()
        raise


# -- backends -------------------------------------------------------------------


class Dut:
    """One DUT backend: start it, tell when it is serving, read its own flap count, stop it."""

    name = ""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.engine: EngineProcess | None = None
        self.bfdd: Frr | None = None

    def start(self, reserve: bool) -> None:
        raise NotImplementedError

    def ready(self) -> bool:
        raise NotImplementedError

    def flaps(self) -> int | None:
        raise NotImplementedError

    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.engine is not None:
            st = self.engine.stats(timeout=30)
            out["engine_sched"] = st.get("sched")
            out["engine_kernel_tx"] = st.get("kernel_tx")
            out["engine_xdp_mode"] = (st.get("xdp") or {}).get("mode")
        if self.bfdd is not None:
            out["bfdd_pid"] = self.bfdd.pid("bfdd")
        return out

    def stop(self) -> None:
        if self.bfdd is not None:
            self.bfdd.cleanup()
            self.bfdd = None
        if self.engine is not None:
            self.engine.cleanup()
            self.engine = None

    # helpers
    def _engine(self, args: list[str], reserve: bool) -> EngineProcess:
        if reserve:
            args = [*args, "--sched-deadline", ENGINE_RESERVATION]
        prefix = UNIT_PREFIX if engine_sched == "unit" else None
        e = EngineProcess(self.rig.d, args, self.rig.work, prefix)
        self.rig.engines.append(e)
        self.engine = e.start()
        return e

    def _bfdd(self, args: list[str]) -> Frr:
        f = Frr(self.rig.d, "dut", bfdd_args=args)
        self.rig.frrs.append(f)
        self.bfdd = f
        f.start(peer_block(self.rig.peer_ip, self.rig.dut_ip, "veth-d", self.rig.interval_ms))
        return f

    def _bfdd_flaps(self) -> int | None:
        assert self.bfdd is not None
        c = next((c for c in self.bfdd.counters() if c.get("peer") == self.rig.peer_ip), None)
        return None if c is None else int(c.get("session-down", 0))

    def _bfdd_up(self) -> bool:
        assert self.bfdd is not None
        return (self.bfdd.peer(self.rig.peer_ip) or {}).get("status") == "up"

    def _engine_session(self) -> dict[str, Any] | None:
        assert self.engine is not None
        st = self.engine.stats(timeout=30)
        return next((s for s in st["sessions"] if s["peer"] == self.rig.peer_ip), None)


class StockBfdd(Dut):
    name = "bfdd"

    def start(self, reserve: bool) -> None:
        self._bfdd([])

    def ready(self) -> bool:
        return self._bfdd_up()

    def flaps(self) -> int | None:
        return self._bfdd_flaps()


class EngineDut(Dut):
    def __init__(self, rig: Rig, kernel_tx: bool) -> None:
        super().__init__(rig)
        self.kernel_tx = kernel_tx
        self.name = "engine-ktx" if kernel_tx else "engine-sw"
        self.sessions = rig.work / "sessions.yml"
        echo = f", echo_tx_ms: {ECHO_TX_MS}" if kernel_tx else ""  # our echo needs the fast path
        self.sessions.write_text(
            f"- {{local: {rig.dut_ip}, peer: {rig.peer_ip}, interface: veth-d, "
            f"min_tx_ms: {rig.interval_ms}, min_rx_ms: {rig.interval_ms}, "
            f"detect_mult: {DETECT_MULT}{echo}}}\n"
        )

    def start(self, reserve: bool) -> None:
        args = ["--sessions", str(self.sessions)]
        if self.kernel_tx:
            args += ["--kernel-tx", "veth-d"]
            # The peer's forwarding plane returns our echo; on only while this backend runs.
            self.rig.p.sysctl("net.ipv4.ip_forward", 1)
        self._engine(args, reserve).wait_log("bfd: serving", timeout=60)

    def stop(self) -> None:
        super().stop()
        if self.kernel_tx:
            self.rig.p.sysctl("net.ipv4.ip_forward", 0)

    def echo(self) -> dict[str, Any] | None:
        s = self._engine_session()
        return None if s is None else s.get("echo")

    def ready(self) -> bool:
        s = self._engine_session()
        return bool(s and s["state"] == "up" and (s.get("kernel_tx_active") or not self.kernel_tx))

    def flaps(self) -> int | None:
        s = self._engine_session()
        return None if s is None else int(s["flaps"])


class BfddpDut(Dut):
    name = "bfddp"

    def start(self, reserve: bool) -> None:
        addr = f"ipv4:127.0.0.1:{DPLANE_PORT}"
        # The operator's order: the engine first, then bfdd.
        self._engine(["--dplane-connect", addr, "--kernel-tx", "veth-d"], reserve)
        self._bfdd(["--dplaneaddr", addr])
        assert self.engine is not None
        self.engine.wait_log("dplane: bfdd connected", timeout=60)

    def ready(self) -> bool:
        s = self._engine_session()
        return self._bfdd_up() and bool(s and s["state"] == "up" and s.get("kernel_tx_active"))

    def flaps(self) -> int | None:
        return self._bfdd_flaps()

    def info(self) -> dict[str, Any]:
        out = super().info()
        s = self._engine_session()
        out["engine_flaps"] = None if s is None else s["flaps"]
        return out


# -- engine <-> engine ---------------------------------------------------------------

# Per direction, the packets a stats dump's latency may put on one side of the window only (the
# counters are read in a dump before and one after, the capture counted between their times).
STATS_SLACK = 10
PAIR_COUNTS = ("flaps", "kernel_tx_packets", "user_tx_packets", "tick_sent", "rx_packets")


@dataclass(frozen=True)
class PairSession:
    """One session of the pair, as both ends configure it."""

    name: str  # v4-single-hop, v6-multihop, ...
    family: int
    multihop: bool
    d_ip: str
    p_ip: str

    @property
    def port(self) -> int:
        return 4784 if self.multihop else 3784


def pair_sessions(d4: str, p4: str, d6: str, p6: str) -> list[PairSession]:
    """IPv4 and IPv6, single-hop and multihop, on one address pair each: the first one is the
    ladder's own session (what the other backends hold), the one its headline figures are of."""
    out = []
    for family, d_ip, p_ip in ((4, d4, p4), (6, d6, p6)):
        for mh in (False, True):
            name = f"v{family}-{'multihop' if mh else 'single-hop'}"
            out.append(PairSession(name, family, mh, d_ip, p_ip))
    return out


def pair_sessions_yaml(sessions: list[PairSession], side: str, ifname: str, interval_ms: int) -> str:
    """The sessions file of one end (``side`` "d" or "p")."""
    lines = []
    for s in sessions:
        ours, theirs = (s.d_ip, s.p_ip) if side == "d" else (s.p_ip, s.d_ip)
        hop = "multihop: true" if s.multihop else f"interface: {ifname}"
        lines.append(
            f"- {{local: '{ours}', peer: '{theirs}', {hop}, min_tx_ms: {interval_ms}, "
            f"min_rx_ms: {interval_ms}, detect_mult: {DETECT_MULT}}}"
        )
    return "\n".join(lines) + "\n"


@dataclass
class PairBed:
    """Two engines' namespaces on one plain bridge in a third (``Topology.bridged``): ``d`` holds
    veth-d, ``p`` veth-p, ``m`` the bridge with the ports m-a (towards d) and m-b.

    The ladder's own veth pair cannot carry this backend truthfully: with the engine's XDP on
    veth-p (generic mode on veth), tcpdump there sees neither what the program consumes (d's
    packets) nor what it answers with XDP_TX, so the capture is on m-a, where both directions
    cross a port without XDP. Captures on veth-d and veth-p run beside it and their counts are
    recorded (``capture_views``): what an XDP interface's own capture sees.
    """

    d: Namespace
    m: Namespace
    p: Namespace
    sessions: list[PairSession]


def make_pair_bed(topo: Topology) -> PairBed:
    d, p = topo.namespace("ed"), topo.namespace("ep")
    a, m = topo.bridged(d, "veth-d", p, "veth-p")
    # p joins d's subnet (the address of its own pair stays, unused): .1 and .2, as the ladder's pair.
    p4, p6 = a.v4.network[2], a.v6.network[2]
    p.run(["ip", "addr", "add", f"{p4}/{a.v4.network.prefixlen}", "dev", "veth-p"])
    p.run(["ip", "-6", "addr", "add", f"{p6}/{a.v6.network.prefixlen}", "dev", "veth-p", "nodad"])
    return PairBed(d, m, p, pair_sessions(str(a.ip4), str(p4), str(a.v6.ip), str(p6)))


def find_session(stats: dict[str, Any], peer: str, multihop: bool) -> dict[str, Any] | None:
    return next(
        (s for s in stats.get("sessions", []) if s["peer"] == peer and bool(s.get("multihop")) == multihop),
        None,
    )


class PairDut(Dut):
    """``engine-pair``: the DUT engine in the bed's d, and its peer, also an engine, in p."""

    name = PAIR

    def __init__(self, rig: Rig) -> None:
        super().__init__(rig)
        self.bed = rig.pair_bed()
        self.peer_engine: EngineProcess | None = None
        self.files = {}
        for side, ifname in (("d", "veth-d"), ("p", "veth-p")):
            f = rig.work / f"pair-sessions-{side}.yml"
            f.write_text(pair_sessions_yaml(self.bed.sessions, side, ifname, rig.interval_ms))
            self.files[side] = f

    def _one(self, ns: Namespace, side: str, ifname: str, reserve: bool) -> EngineProcess:
        args = ["--sessions", str(self.files[side]), "--kernel-tx", ifname]
        if reserve:
            args += ["--sched-deadline", ENGINE_RESERVATION]
        prefix = UNIT_PREFIX if engine_sched == "unit" else None
        e = EngineProcess(ns, args, self.rig.work, prefix)
        self.rig.engines.append(e)
        return e.start()

    def start(self, reserve: bool) -> None:
        self.engine = self._one(self.bed.d, "d", "veth-d", reserve)
        self.peer_engine = self._one(self.bed.p, "p", "veth-p", reserve)
        for e in (self.engine, self.peer_engine):
            e.wait_log("bfd: serving", timeout=90)  # two bcc compiles at once

    def stats(self) -> dict[str, dict[str, Any]]:
        assert self.engine is not None and self.peer_engine is not None
        return {"d": self.engine.stats(timeout=30), "p": self.peer_engine.stats(timeout=30)}

    def ready(self) -> bool:
        """Every session Up at both ends, at the fast timers, kernel-sent and kernel-clocked."""
        st = self.stats()
        for s in self.bed.sessions:
            for side, peer in (("d", s.p_ip), ("p", s.d_ip)):
                x = find_session(st[side], peer, s.multihop)
                if not x or x["state"] != "up" or x.get("tx_interval_us") != self.rig.interval_ms * 1000:
                    return False
                if not (x.get("kernel_tx_active") and x.get("kernel_clock")):
                    return False
        return True

    def flaps(self) -> int | None:
        st = self.stats()["d"]
        return sum(int(s["flaps"]) for s in st.get("sessions", []))

    def info(self) -> dict[str, Any]:
        out = super().info()
        for key, e in (("engine", self.engine), ("peer_engine", self.peer_engine)):
            if e is None:
                continue
            st = e.stats(timeout=30)
            if key == "peer_engine":
                out["peer_engine_sched"] = st.get("sched")
                out["peer_engine_kernel_tx"] = st.get("kernel_tx")
                out["peer_engine_xdp_mode"] = (st.get("xdp") or {}).get("mode")
            # The tick program's own counters (expired, no_path, error...: docs/fastpath.md).
            out[f"{key}_kernel_clock"] = st.get("kernel_clock")
        return out

    def stop(self) -> None:
        super().stop()
        if self.peer_engine is not None:
            self.peer_engine.cleanup()
            self.peer_engine = None


def make_dut(rig: Rig, name: str) -> Dut:
    return {
        "bfdd": lambda: StockBfdd(rig),
        "engine-sw": lambda: EngineDut(rig, kernel_tx=False),
        "engine-ktx": lambda: EngineDut(rig, kernel_tx=True),
        "bfddp": lambda: BfddpDut(rig),
        PAIR: lambda: PairDut(rig),
    }[name]()


def bring_up(rig: Rig, dut: Dut, reserve: bool, timeout: float = 45.0) -> float:
    """Start ``dut`` and wait (bounded) until both ends are Up at the fast timers; seconds taken."""
    t0 = time.monotonic()
    dut.start(reserve)
    wait_until(dut.ready, timeout=timeout, interval=0.2, what=f"{dut.name} Up")
    wait_until(rig.peer_fast, timeout=timeout, interval=0.1, what=f"the peer Up at 3x{rig.interval_ms} ms")
    return time.monotonic() - t0


def take_down(rig: Rig, dut: Dut) -> None:
    dut.stop()
    # The next backend must meet a peer that has let this one go.
    with contextlib.suppress(WaitTimeout):
        wait_until(lambda: rig.peer_view().get("status") != "up", timeout=15, what="the peer Down")


# -- wire figures -----------------------------------------------------------------


def survival(gaps: list[float], points: int = 120, tail: int = 60) -> list[list[float]]:
    """A compact survival curve [[gap_ms, P(gap > gap_ms)], ...]: the largest ``tail`` gaps exactly,
    the rest at ``points`` log-spaced ranks (enough to plot, small enough to commit)."""
    s = sorted(gaps)
    n = len(s)
    if not n:
        return []
    idx = {n - 1 - k for k in range(min(tail, n))}
    for k in range(points):
        # ranks from the bottom up to the tail, log-spaced in the survival probability
        surv = 10 ** (-(k / max(1, points - 1)) * max(1.0, _log10(n)))
        idx.add(max(0, min(n - 1, round(n * (1 - surv)))))
    return [[round(s[i], 3), round((n - 1 - i) / n, 6)] for i in sorted(idx)]


def _log10(x: float) -> float:
    return math.log10(x) if x > 0 else 0.0


def missing_slots(gaps: list[float], interval_ms: float) -> int:
    """Packets never sent: every gap longer than 1.5 x interval counts round(gap / interval) - 1
    slots (at least 1) in which the DUT should have transmitted and did not."""
    return sum(max(1, round(g / interval_ms) - 1) for g in gaps if g > 1.5 * interval_ms)


def bracketed(sent: list[WirePacket], t0: float, t1: float) -> list[WirePacket]:
    """One direction's packets in the window, bracketed by the last packet before it and the first
    after it, so a sender that was silent across an edge of the window still shows the whole gap."""
    before = [p for p in sent if p.ts < t0][-1:]
    after = [p for p in sent if p.ts > t1][:1]
    return before + [p for p in sent if t0 <= p.ts <= t1] + after


def _gap_ms(gaps: list[float]) -> dict[str, Any]:
    g = gap_stats(gaps)
    return {
        "n": g.n,
        "p50": round(g.p50, 3),
        "p99": round(g.p99, 3),
        "p999": round(g.p999, 3),
        "max": round(g.max, 3),
    }


def wire_figures(pkts: list[WirePacket], rig: Rig, t0: float, t1: float) -> dict[str, Any]:
    ours_all = flow(pkts, src=rig.dut_ip, dst=rig.peer_ip)
    theirs_all = flow(pkts, src=rig.peer_ip, dst=rig.dut_ip)
    ours = bracketed(ours_all, t0, t1)
    theirs = [p for p in theirs_all if t0 <= p.ts <= t1]
    gaps = [(y.ts - x.ts) * 1e3 for x, y in itertools.pairwise(ours)]
    # The peer's own cadence, a second witness (FRR under its reservation is not the code under
    # test): gaps after an Up packet only, since a peer that declared Down sends at 1 s by design.
    theirs_b = bracketed(theirs_all, t0, t1)
    peer_gaps = [(y.ts - x.ts) * 1e3 for x, y in itertools.pairwise(theirs_b) if x.state == "up"]
    out: dict[str, Any] = {
        "window_s": round(t1 - t0, 3),
        "dut_packets": sum(1 for p in ours if t0 <= p.ts <= t1),
        "peer_packets": len(theirs),
        "nominal_dut_packets": round((t1 - t0) * 1000 / rig.interval_ms),
        "dut_downs_wire": down_transitions(ours),
        "peer_downs_wire": down_transitions(theirs),
        "missing_slots": missing_slots(gaps, rig.interval_ms),
        "gaps_over_1_5x": sum(1 for g in gaps if g > 1.5 * rig.interval_ms),
    }
    if len(gaps) >= 1:
        out["gap_ms"] = _gap_ms(gaps)
        out["gap_survival"] = survival(gaps)
    if peer_gaps:
        pg = gap_stats(peer_gaps)
        out["peer_tx_gap_ms"] = {"n": pg.n, "p50": round(pg.p50, 3), "max": round(pg.max, 3)}
        out["peer_stall_ms"] = round(max(0.0, pg.max - rig.interval_ms), 3)
    return out


def direction_figures(sent: list[WirePacket], t0: float, t1: float, interval_ms: int) -> dict[str, Any]:
    """One direction of one pair session in the window: packets, Downs, gaps, slots never sent."""
    b = bracketed(sent, t0, t1)
    gaps = [(y.ts - x.ts) * 1e3 for x, y in itertools.pairwise(b)]
    out: dict[str, Any] = {
        "packets": sum(1 for p in b if t0 <= p.ts <= t1),
        "nominal": round((t1 - t0) * 1000 / interval_ms),
        "downs_wire": down_transitions(b),
        "not_up": sum(1 for p in b if t0 <= p.ts <= t1 and p.state != "up"),
        "missing_slots": missing_slots(gaps, interval_ms),
        "gaps_over_1_5x": sum(1 for g in gaps if g > 1.5 * interval_ms),
    }
    if gaps:
        out["gap_ms"] = _gap_ms(gaps)
    return out


def end_counts(
    before: dict[str, Any] | None, after: dict[str, Any] | None, sent: list[WirePacket], g0: float, g1: float
) -> dict[str, Any]:
    """One end of one session: its counters' movement between two stats dumps against the packets
    of its direction a capture saw between the dumps' times (every one of them should be
    kernel-sent: ``user_tx_packets`` 0, ``kernel_tx_packets`` within STATS_SLACK of the capture)."""
    if before is None or after is None:
        return {"error": "the session is missing from a stats dump"}
    delta = {k: int(after.get(k) or 0) - int(before.get(k) or 0) for k in PAIR_COUNTS}
    captured = sum(1 for p in sent if g0 < p.ts <= g1)
    diff = delta["kernel_tx_packets"] - captured
    return delta | {
        "captured": captured,
        "kernel_minus_captured": diff,
        "stats_window_s": round(g1 - g0, 3),
        "agree": delta["user_tx_packets"] == 0 and abs(diff) <= STATS_SLACK and delta["tick_sent"] > 0,
    }


def pair_figures(
    pkts: list[WirePacket],
    sessions: list[PairSession],
    s0: dict[str, dict[str, Any]],
    s1: dict[str, dict[str, Any]],
    *,
    interval_ms: int,
    t0: float,
    t1: float,
) -> dict[str, Any]:
    """An engine-pair window from the bridge's capture and both ends' dumps before (``s0``) and
    after (``s1``) it, by end ("d", "p"). The headline keys (those of every backend's cell) are
    of the first session; flaps and wire Downs are summed over every session."""
    per: dict[str, Any] = {}
    for s in sessions:
        flows = {
            "d": [p for p in flow(pkts, src=s.d_ip, dst=s.p_ip) if p.dport == s.port],
            "p": [p for p in flow(pkts, src=s.p_ip, dst=s.d_ip) if p.dport == s.port],
        }
        ends = {}
        for side, peer in (("d", s.p_ip), ("p", s.d_ip)):
            a, b = find_session(s0[side], peer, s.multihop), find_session(s1[side], peer, s.multihop)
            ends[side] = end_counts(a, b, flows[side], s0[side]["generated_at"], s1[side]["generated_at"])
        per[s.name] = {
            "d_to_p": direction_figures(flows["d"], t0, t1, interval_ms),
            "p_to_d": direction_figures(flows["p"], t0, t1, interval_ms),
            "ends": ends,
        }
    head_s = sessions[0]
    head = per[head_s.name]
    ours = bracketed(
        [p for p in flow(pkts, src=head_s.d_ip, dst=head_s.p_ip) if p.dport == head_s.port], t0, t1
    )
    gaps = [(y.ts - x.ts) * 1e3 for x, y in itertools.pairwise(ours)]

    def total(side: str, key: str) -> int | None:
        vals = [x["ends"][side].get(key) for x in per.values()]
        return None if any(v is None for v in vals) else sum(vals)

    worst = [x[d]["gap_ms"]["max"] for x in per.values() for d in ("d_to_p", "p_to_d") if x[d].get("gap_ms")]
    out: dict[str, Any] = {
        "window_s": round(t1 - t0, 3),
        "dut_packets": head["d_to_p"]["packets"],
        "peer_packets": head["p_to_d"]["packets"],
        "nominal_dut_packets": head["d_to_p"]["nominal"],
        "dut_flaps": total("d", "flaps"),
        "peer_flaps": total("p", "flaps"),
        "dut_downs_wire": sum(x["d_to_p"]["downs_wire"] for x in per.values()),
        "peer_downs_wire": sum(x["p_to_d"]["downs_wire"] for x in per.values()),
        "missing_slots": head["d_to_p"]["missing_slots"],
        "gaps_over_1_5x": head["d_to_p"]["gaps_over_1_5x"],
        "worst_gap_ms": max(worst) if worst else None,
        "missing_slots_all": sum(x[d]["missing_slots"] for x in per.values() for d in ("d_to_p", "p_to_d")),
        "kernel_sent": {
            side: {
                k: total(side, k) for k in ("kernel_tx_packets", "user_tx_packets", "tick_sent", "captured")
            }
            for side in ("d", "p")
        },
        "counters_agree": all(e.get("agree") for x in per.values() for e in x["ends"].values()),
        "pair_sessions": per,
    }
    if gaps:
        out["gap_ms"] = head["d_to_p"]["gap_ms"]
        out["gap_survival"] = survival(gaps)
    if pg := head["p_to_d"].get("gap_ms"):
        # The peer is an engine under test too, not a witness of the weather: no peer_stall_ms.
        out["peer_tx_gap_ms"] = {"n": pg["n"], "p50": pg["p50"], "max": pg["max"]}
    return out


def capture_view(pkts: list[WirePacket], sessions: list[PairSession], t0: float, t1: float) -> dict[str, int]:
    """What one capture saw of the pair in the window, per direction (every session)."""
    d_ips = {s.d_ip for s in sessions}
    win = [p for p in pkts if t0 <= p.ts <= t1 and p.kind == "control"]
    return {
        "d_to_p": sum(1 for p in win if p.src in d_ips),
        "p_to_d": sum(1 for p in win if p.src not in d_ips),
    }


# -- one cell of the ladder ---------------------------------------------------------


def echo_figures(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any]:
    """Our echo over the window: probes sent and judged in it, and the round trips so far.

    The counts are differences (a probe is judged a detection time after it left, so a window's
    loss is the probes judged lost in it); the round trips are the engine's since its echo began.
    """
    if not before or not after:
        return {"error": "the engine reported no echo for the session (not Up, or the peer allows none)"}
    out: dict[str, Any] = {k: after[k] - before[k] for k in ECHO_FIGURES}
    out["interval_ms"] = after["interval_ms"]
    out["rtt_us"] = after["rtt_us"]
    return out


def run_cell(rig: Rig, backend: str, level: str, seconds: float) -> dict[str, Any]:
    if backend == PAIR:
        return run_pair_cell(rig, level, seconds)
    reserve = reserved(level)
    out: dict[str, Any] = {"backend": backend, "level": level, "seconds": seconds, "reserved": reserve}
    dut = make_dut(rig, backend)
    cap: Capture | None = None
    try:
        out["bring_up_s"] = round(bring_up(rig, dut, reserve), 2)
        out["dut"] = dut.info()
        peer0, dut0 = rig.peer_downs(), dut.flaps()
        echo0 = dut.echo() if isinstance(dut, EngineDut) and dut.kernel_tx else None
        cap = rig.capture(f"{level}-{backend}")
        t0 = time.time()
        out["stress"] = stress_window(level, seconds, rig.stresses)
        t1 = time.time()
        time.sleep(0.05)  # the packet after the window, for the trailing gap
        pkts = cap.stop()
        cap = None
        peer1, dut1 = rig.peer_downs(), dut.flaps()
        out["peer_flaps"] = peer1 - peer0
        out["dut_flaps"] = None if dut0 is None or dut1 is None else dut1 - dut0
        out |= wire_figures(pkts, rig, t0, t1)
        out["witness"] = benchlib.witness_window(rig.witness, t0, t1)
        out["dut_after"] = dut.info()
        if isinstance(dut, EngineDut) and dut.kernel_tx:
            out["echo"] = echo_figures(echo0, dut.echo())
    except Exception as e:  # one broken cell must not cost the rest of the run
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        if cap is not None:
            cap.stop()
        take_down(rig, dut)
    return out


def run_pair_cell(rig: Rig, level: str, seconds: float) -> dict[str, Any]:
    """One engine <-> engine window: both engines started as the unit runs them, every session Up
    and kernel-clocked, stats from both before and after the stress, the bridge captured."""
    reserve = reserved(level)
    out: dict[str, Any] = {"backend": PAIR, "level": level, "seconds": seconds, "reserved": reserve}
    caps: dict[str, Capture] = {}
    dut: PairDut | None = None
    try:
        dut = PairDut(rig)
        bed = dut.bed
        out["sessions"] = [s.name for s in bed.sessions]
        t_up = time.monotonic()
        dut.start(reserve)
        wait_until(dut.ready, timeout=60, interval=0.3, what="both engines Up at 3x10 ms, kernel-clocked")
        out["bring_up_s"] = round(time.monotonic() - t_up, 2)
        out["dut"] = dut.info()
        for name, ns, ifname in (
            ("bridge m-a", bed.m, "m-a"),
            ("veth-d", bed.d, "veth-d"),
            ("veth-p", bed.p, "veth-p"),
        ):
            caps[name] = Capture(ns, ifname, rig.pcap(f"{level}-{PAIR}-{ifname}")).start()
        time.sleep(0.1)
        s0 = dut.stats()
        t0 = time.time()
        out["stress"] = stress_window(level, seconds, rig.stresses)
        t1 = time.time()
        s1 = dut.stats()
        time.sleep(0.1)  # the packet after the window, and after the last dump
        pkts = {name: c.stop() for name, c in caps.items()}
        caps = {}
        out |= pair_figures(
            pkts["bridge m-a"], bed.sessions, s0, s1, interval_ms=rig.interval_ms, t0=t0, t1=t1
        )
        out["capture_views"] = {name: capture_view(p, bed.sessions, t0, t1) for name, p in pkts.items()}
        out["witness"] = benchlib.witness_window(rig.witness, t0, t1)
        out["dut_after"] = dut.info()
    except Exception as e:  # one broken cell must not cost the rest of the run
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        for c in caps.values():
            with contextlib.suppress(Exception):
                c.stop()
        if dut is not None:
            dut.stop()
    return out


# -- detection latency ---------------------------------------------------------------


def detection_time_ms(last_peer: WirePacket, last_ours: WirePacket | None) -> float:
    """RFC 5880 §6.8.4: the peer's detect mult x max(our RequiredMinRx, its DesiredMinTx)."""
    rx = last_ours.required_min_rx_us if last_ours is not None else 0
    return last_peer.detect_mult * max(rx, last_peer.desired_min_tx_us) / 1000


def one_kill(rig: Rig, cap: Capture, timeout: float) -> dict[str, Any]:
    wait_until(rig.peer_fast, timeout=timeout, interval=0.1, what="the peer Up before the kill")
    # A random phase against the peer's transmit timer, so the samples cover it.
    time.sleep(random.uniform(0.2, 0.4))
    t_kill = time.time()
    rig.peer.kill("bfdd")  # SIGKILL: no AdminDown, the peer just falls silent

    def our_down() -> WirePacket | None:
        return next(
            (
                x
                for x in flow(cap.snapshot(), src=rig.dut_ip, dst=rig.peer_ip)
                if x.ts > t_kill - 0.05 and x.state == "down"
            ),
            None,
        )

    down = wait_until(our_down, timeout=timeout, interval=0.05, what="our Down on the wire")
    pkts = cap.snapshot()
    last_peer = [x for x in flow(pkts, src=rig.peer_ip, dst=rig.dut_ip) if x.ts < down.ts][-1]
    last_ours = [x for x in flow(pkts, src=rig.dut_ip, dst=rig.peer_ip) if x.ts < last_peer.ts][-1:]
    det = detection_time_ms(last_peer, last_ours[0] if last_ours else None)
    latency = (down.ts - last_peer.ts) * 1e3
    rig.peer.restart_bfdd()
    # What the machine did between the peer's last packet and our Down: the span the latency is.
    wit = benchlib.witness_window(rig.witness, last_peer.ts, down.ts)
    return {
        "latency_ms": round(latency, 3),
        "detection_time_ms": det,
        "overshoot_ms": round(latency - det, 3),
        "down_diag": down.diag,
        "kill_after_last_peer_ms": round((t_kill - last_peer.ts) * 1e3, 3),
        "witness_stall_ms": (wit or {}).get("stall_ms"),
        "witness": wit,
    }


def run_detection(rig: Rig, backend: str, kills: int, level: str, budget_s: float) -> dict[str, Any]:
    """``kills`` times: SIGKILL the peer's bfdd, time last peer packet -> our Down on the wire."""
    reserve = reserved(level)
    out: dict[str, Any] = {"backend": backend, "level": level, "kills": kills, "samples": []}
    dut = make_dut(rig, backend)
    cap: Capture | None = None
    stress: Stress | None = None
    t_start = time.monotonic()
    try:
        out["bring_up_s"] = round(bring_up(rig, dut, reserve), 2)
        cap = rig.capture(f"detect-{level}-{backend}")
        if LEVELS[level][1]:
            stress = Stress(LEVELS[level][1], budget_s)
            rig.stresses.append(stress)
            out["stress"] = " ".join(stress.argv)
            time.sleep(1.0)  # let the hogs take the CPUs before the first kill
        for _ in range(kills):
            if time.monotonic() - t_start > budget_s:
                out["stopped_early"] = "time budget spent"
                break
            left = budget_s - (time.monotonic() - t_start)
            try:
                out["samples"].append(one_kill(rig, cap, timeout=max(5.0, min(20.0, left))))
            except (WaitTimeout, IndexError) as e:
                out.setdefault("failed", []).append(f"{type(e).__name__}: {e}")
                with contextlib.suppress(Exception):
                    if not rig.peer.alive("bfdd"):
                        rig.peer.restart_bfdd()
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        if stress is not None:
            stress.close()
            rig.stresses.remove(stress)
        if cap is not None:
            cap.stop()
        take_down(rig, dut)
    out["summary"] = summarize_detection(out["samples"])
    out["duration_s"] = round(time.monotonic() - t_start, 1)
    return out


def summarize_detection(samples: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not samples:
        return None
    out: dict[str, Any] = {"n": len(samples)}
    for key in ("latency_ms", "overshoot_ms"):
        v = sorted(s[key] for s in samples)
        out[key] = {
            "min": v[0],
            "mean": round(sum(v) / len(v), 3),
            "p99": benchlib.quantile(v, 0.99),
            "max": v[-1],
        }
    stalls = [s["witness_stall_ms"] for s in samples if s.get("witness_stall_ms") is not None]
    out["witness_stall_ms_max"] = max(stalls) if stalls else None
    return out


def cleanup_leftovers() -> list[str]:
    return benchlib.require_clean_netns(f"xbt-{os.getpid()}-")
