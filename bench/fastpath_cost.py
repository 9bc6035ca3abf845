"""What one packet costs the XDP fast path, from the kernel's own run stats.

For each XDP mode (generic, native), in a fresh pair of namespaces joined by two
veth pairs:

* pair 1 (veth-d/veth-p): the engine, ``xdp-bfd --kernel-tx veth-d``, against
  FRR 8.4 bfdd at 3x10 ms in the peer namespace;
* pair 2 (veth-d2/veth-p2): a bare reflector (bench/xdp_reflector.py: parse,
  swap MACs, XDP_TX, no maps), fed IPv4 echo frames at 100/s: the floor,
  measured in the same windows so that both see the same machine noise.

Windows, N seconds each (``--seconds``, default 5), each kind ``--rounds`` times
(default 3; the table shows medians):

1. ``echo``    — FRR not yet configured; IPv4 echo frames (UDP 3785,
   src = dst = the peer's address, injected from the peer namespace) at 100/s
   on each pair: the engine's echo reflection path against the bare reflector.
2. ``control`` — FRR configured; once the session is Up and the kernel answers
   it (``kernel_tx_active``), N seconds of steady state: the RX-clocked
   control reply path (what the ≤ 250 ns target is about), bare reflector fed
   alongside.
3. ``sbfd``    — (before FRR is configured, so nothing else crosses the
   program) S-BFD requests (UDP 7784, Your Discriminator = the engine's
   reflector, ``--sbfd-reflector``, docs/fastpath.md) at 100/s on pair 1, echo
   on pair 2: the reflector's answer path, validation and token bucket
   included, against the bare reflector.
4. ``burst``   — (``--burst``, default 20000) echo frames back to back into
   each program: the same code with warm caches; ``sbfd_burst`` the same with
   S-BFD requests (the bench's reflector has a rate limit above the burst, so
   every frame is answered, not dropped by the bucket).
5. ``auth``    — (before FRR is configured) an authenticated session (keyed
   SHA1) on a third veth pair (veth-d3/veth-p3) against a second engine with
   its fast path, both kernel-clocked at 3x10 ms: what the XDP program costs
   for a peer's authenticated packet it accepts without a digest (the last one
   the engine verified, docs/fastpath.md), against the bare reflector; the
   second engine is stopped before the control windows.

ns/packet = delta run_time_ns / delta run_cnt over the window (the engine's
from its stats JSON ``xdp`` section, the reflector's from /proc/PID/fdinfo),
with kernel.bpf_stats_enabled=1 (the old value is restored). Native mode on
veth needs an XDP program on the peer end too (an XDP_PASS one is attached).

    sudo .venv/bin/python bench/fastpath_cost.py [--seconds 5] [--rounds 3] [--modes generic,native]
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import socket
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import benchlib
from benchlib import REPO

from harness.engine import EngineProcess
from harness.frr import Frr, bfd_peer_block
from harness.inject import udp_frame
from harness.netns import PREFIX, Link, Namespace, Topology, attach_xdp_pass
from harness.wait import wait_until

INTERVAL_MS = 10
ECHO_RATE = 100  # frames/s, the cadence of a 10 ms control session
TARGET_NS = 250
PROG_TYPE_XDP = 6
SBFD_DISCR = 456  # the engine's reflector discriminator in this bench
SBFD_PORT = 7784
AUTH = "{type: keyed-sha1, key_id: 1, secret: 'bench-auth-key'}"


def echo_frame(peer: Link, local: Link) -> bytes:
    # RFC 5881 §4: echo to UDP 3785; an IPv4 echo is addressed to its own sender.
    payload = bytes([0x20, 0, 0, 24]) + (1).to_bytes(4, "big") + bytes(16)
    src = str(peer.ip4)
    return udp_frame(
        src_mac=benchlib.mac(peer.ns.name, peer.ifname),
        dst_mac=benchlib.mac(local.ns.name, local.ifname),
        src=src,
        dst=src,
        sport=49999,
        dport=3785,
        payload=payload,
    )


def sbfd_frame(peer: Link, local: Link) -> bytes:
    # An initiator's request (RFC 7880): version 1, Up, D set, Your Discriminator the reflector's.
    payload = struct.pack("!BBBBIIIII", 0x20, 0xC2, 3, 24, 1, SBFD_DISCR, INTERVAL_MS * 1000, 0, 0)
    return udp_frame(
        src_mac=benchlib.mac(peer.ns.name, peer.ifname),
        dst_mac=benchlib.mac(local.ns.name, local.ifname),
        src=str(peer.ip4),
        dst=str(local.ip4),
        sport=49152,
        dport=SBFD_PORT,
        payload=payload,
    )


class Injector:
    """AF_PACKET sockets in the peer namespace, one per interface."""

    def __init__(self, ns: Namespace, ifnames: list[str]) -> None:
        self.socks: dict[str, socket.socket] = {}
        try:
            for ifname in ifnames:
                s = ns.socket(socket.AF_PACKET, socket.SOCK_RAW)
                self.socks[ifname] = s
                s.bind((ifname, 0))
        except BaseException:
            self.close()
            raise

    def paced(self, frames: dict[str, bytes], *, rate: float, seconds: float) -> int:
        """Each frame on its interface ``rate`` times a second for ``seconds`` (absolute deadlines).

        Which frame goes first rotates tick by tick: the first after the sender wakes
        finds the machine colder than the next (bench/cold_floor.py), and a fixed order
        would charge that to the same program every time.
        """
        start, sent = time.monotonic(), 0
        order = list(frames.items())
        for i in range(int(rate * seconds)):
            benchlib.monotonic_sleep_until(start + i / rate)
            for j in range(len(order)):
                ifname, f = order[(i + j) % len(order)]
                self.socks[ifname].send(f)
                sent += 1
        return sent

    def burst(self, ifname: str, frame: bytes, count: int) -> float:
        """``count`` frames back to back; a full veth ring (ENOBUFS) costs a short pause, bounded."""
        s, t0 = self.socks[ifname], time.monotonic()
        sent = pauses = 0
        while sent < count and pauses < 10 * count:
            try:
                s.send(frame)
                sent += 1
            except OSError as e:
                if e.errno != errno.ENOBUFS:
                    raise
                pauses += 1
                time.sleep(0.0002)
        return time.monotonic() - t0

    def close(self) -> None:
        for s in self.socks.values():
            s.close()


def window(c0: tuple[int, int], c1: tuple[int, int], seconds: float) -> dict[str, Any]:
    dc, dn = c1[0] - c0[0], c1[1] - c0[1]
    return {
        "window_s": round(seconds, 3),
        "run_cnt": dc,
        "run_time_ns": dn,
        "ns_per_packet": round(dn / dc, 1) if dc else None,
        "packets_per_s": round(dc / seconds, 1) if seconds else None,
    }


def measure(probes: dict[str, Callable[[], tuple[int, int]]], body: Callable[[], float]) -> dict[str, Any]:
    """Sample every probe, run ``body`` (returns its duration), sample again; a window per probe."""
    before = {k: p() for k, p in probes.items()}
    t0 = time.monotonic()
    took = body()
    time.sleep(0.05)  # the last frames through the kernel
    wall = time.monotonic() - t0
    return {k: window(before[k], p(), took or wall) for k, p in probes.items()}


def session_of(dump: dict[str, Any], peer: Link) -> dict[str, Any]:
    """The engine's session with ``peer`` in one stats dump."""
    return next(x for x in dump["sessions"] if x["peer"] == str(peer.ip4))


def reflector_probe(pid: int) -> Callable[[], tuple[int, int]]:
    def probe() -> tuple[int, int]:
        progs = [p for p in benchlib.bpf_prog_stats(pid) if p.get("prog_type") == PROG_TYPE_XDP]
        if not progs:
            raise RuntimeError("the bare reflector holds no XDP program")
        return progs[0]["run_cnt"], progs[0]["run_time_ns"]

    return probe


def engine_probe(eng: EngineProcess, extra: dict[str, Any]) -> Callable[[], tuple[int, int]]:
    """The engine's ``xdp`` run stats from its stats JSON; keeps the last dump in ``extra``."""

    def probe() -> tuple[int, int]:
        st = eng.stats(timeout=10)
        extra.setdefault("dumps", []).append(st)
        x = st.get("xdp") or {}
        return int(x.get("run_cnt") or 0), int(x.get("run_time_ns") or 0)

    return probe


def run_mode(mode: str, seconds: float, rounds: int, work: Path, burst: int) -> dict[str, Any]:
    topo = Topology()
    frr: Frr | None = None
    eng: EngineProcess | None = None
    peer_eng: EngineProcess | None = None
    refl: subprocess.Popen | None = None
    inj: Injector | None = None
    out: dict[str, Any] = {"mode": mode}
    t_mode = time.monotonic()
    try:
        d, p = topo.namespace("d"), topo.namespace("p")
        a, b = topo.veth(d, "veth-d", p, "veth-p")
        a2, b2 = topo.veth(d, "veth-d2", p, "veth-p2")
        a3, b3 = topo.veth(d, "veth-d3", p, "veth-p3")
        if mode == "native":
            attach_xdp_pass(p, "veth-p")
            attach_xdp_pass(p, "veth-p2")
        frames = {"veth-p": echo_frame(b, a), "veth-p2": echo_frame(b2, a2)}
        inj = Injector(p, list(frames))
        refl = d.popen(
            [
                sys.executable,
                str(REPO / "bench" / "xdp_reflector.py"),
                "veth-d2",
                mode,
                "--max-seconds",
                "600",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert refl.stdout is not None and refl.stdin is not None
        if refl.stdout.readline().strip() != "ready":
            raise RuntimeError("the bare reflector did not attach")
        frr = Frr(p, "p").start()
        sessions = work / f"sessions-{mode}.yml"
        sessions.write_text(
            f"- {{local: {a.ip4}, peer: {b.ip4}, interface: veth-d, "
            f"min_tx_ms: {INTERVAL_MS}, min_rx_ms: {INTERVAL_MS}}}\n"
            # The bucket above any burst here: the cost measured is an answer's, never a drop's.
            f"- {{sbfd_reflector: {SBFD_DISCR}, rate_pps: 10000000, burst: 10000000}}\n"
            f"- {{local: {a3.ip4}, peer: {b3.ip4}, interface: veth-d3, "
            f"min_tx_ms: {INTERVAL_MS}, min_rx_ms: {INTERVAL_MS}, auth: {AUTH}}}\n"
        )
        sessions.chmod(0o600)  # it holds a key
        args = ["--sessions", str(sessions), "--kernel-tx", "veth-d,veth-d3", "--xdp-mode", mode]
        eng = EngineProcess(d, args, work).start()
        out["attach_line"] = eng.wait_log("kernel-tx: XDP attached to veth-d", timeout=60).strip()
        dumps: dict[str, Any] = {}
        probes = {"engine": engine_probe(eng, dumps), "bare": reflector_probe(refl.pid)}

        # 1. Echo: the same stream into both programs.
        def echo_body() -> float:
            t0 = time.monotonic()
            inj.paced(frames, rate=ECHO_RATE, seconds=seconds)
            return time.monotonic() - t0

        out["echo"] = []
        for _ in range(rounds):
            w = measure(probes, echo_body)
            c0, c1 = dumps["dumps"][-2]["counters"], dumps["dumps"][-1]["counters"]
            w["engine"]["echo_tx"] = c1.get("echo_tx", 0) - c0.get("echo_tx", 0)
            out["echo"].append(w)

        # 1b. S-BFD: requests to the reflector on pair 1, echo into the bare reflector alongside.
        sbfd = sbfd_frame(b, a)

        def sbfd_body() -> float:
            t0 = time.monotonic()
            inj.paced({"veth-p": sbfd, "veth-p2": frames["veth-p2"]}, rate=ECHO_RATE, seconds=seconds)
            return time.monotonic() - t0

        out["sbfd"] = []
        for _ in range(rounds):
            w = measure(probes, sbfd_body)
            c0, c1 = dumps["dumps"][-2]["counters"], dumps["dumps"][-1]["counters"]
            w["engine"]["sbfd_tx"] = c1.get("sbfd_tx", 0) - c0.get("sbfd_tx", 0)
            out["sbfd"].append(w)

        # 1c. Authenticated: a second engine on pair 3, both kernel-clocked; the reflector fed alongside.
        peer_sessions = work / f"sessions-{mode}-peer.yml"
        peer_sessions.write_text(
            f"- {{local: {b3.ip4}, peer: {a3.ip4}, interface: veth-p3, "
            f"min_tx_ms: {INTERVAL_MS}, min_rx_ms: {INTERVAL_MS}, auth: {AUTH}}}\n"
        )
        peer_sessions.chmod(0o600)
        peer_eng = EngineProcess(
            p, ["--sessions", str(peer_sessions), "--kernel-tx", "veth-p3", "--xdp-mode", mode], work
        ).start()

        def auth_clocked() -> dict | None:
            s = eng.session(str(b3.ip4))
            return s if s["state"] == "up" and s["kernel_clock"] else None

        wait_until(auth_clocked, timeout=60, what="the authenticated session Up and kernel-clocked")
        time.sleep(0.5)  # past the Poll that switches the timers

        def auth_body() -> float:
            t0 = time.monotonic()
            inj.paced({"veth-p2": frames["veth-p2"]}, rate=ECHO_RATE, seconds=seconds)
            return time.monotonic() - t0

        out["auth"] = []
        for _ in range(rounds):
            w = measure(probes, auth_body)
            s0, s1 = dumps["dumps"][-2], dumps["dumps"][-1]
            a0, a1 = session_of(s0, b3), session_of(s1, b3)
            w["engine"] |= {
                "auth_steady": s1["counters"]["auth_steady"] - s0["counters"]["auth_steady"],
                "xdp_pass": s1["counters"]["xdp_pass"] - s0["counters"]["xdp_pass"],
                "kernel_tx_packets": a1["kernel_tx_packets"] - a0["kernel_tx_packets"],
                "user_tx_packets": a1["user_tx_packets"] - a0["user_tx_packets"],
                "flaps": a1["flaps"] - a0["flaps"],
            }
            out["auth"].append(w)
        peer_eng.cleanup()  # its packets would be in every later window
        peer_eng = None

        # 2. Control: FRR at 3x10 ms, session Up and answered by the kernel; the reflector fed alongside.
        frr.configure(
            *bfd_peer_block(
                str(a.ip4), local=str(b.ip4), interface="veth-p", rx_ms=INTERVAL_MS, tx_ms=INTERVAL_MS
            )
        )
        t_up = time.monotonic()

        def offloaded() -> dict | None:
            s = eng.session(str(b.ip4))
            return s if s["state"] == "up" and s["kernel_tx_active"] else None

        wait_until(offloaded, timeout=30, what="session Up with kernel TX active")
        out["up_after_s"] = round(time.monotonic() - t_up, 2)
        time.sleep(0.5)  # past the Poll that switches the timers

        def control_body() -> float:
            t0 = time.monotonic()
            inj.paced({"veth-p2": frames["veth-p2"]}, rate=ECHO_RATE, seconds=seconds)
            return time.monotonic() - t0

        out["control"] = []
        for _ in range(rounds):
            w = measure(probes, control_body)
            s0, s1 = dumps["dumps"][-2], dumps["dumps"][-1]
            a0, a1 = session_of(s0, b), session_of(s1, b)
            ktx = a1["kernel_tx_packets"] - a0["kernel_tx_packets"]
            utx = a1["user_tx_packets"] - a0["user_tx_packets"]
            w["engine"] |= {
                "kernel_tx_packets": ktx,
                "user_tx_packets": utx,
                "kernel_tx_share": round(ktx / (ktx + utx), 4) if ktx + utx else None,
                "xdp_pass": s1["counters"]["xdp_pass"] - s0["counters"]["xdp_pass"],
                "tx_early": s1["counters"].get("tx_early", 0) - s0["counters"].get("tx_early", 0),
                "state": a1["state"],
                "flaps": a1["flaps"] - a0["flaps"],
            }
            out["control"].append(w)

        # 3. Warm caches: echo frames back to back, one program at a time.
        if burst:
            out["burst"] = [
                {
                    "engine": measure(
                        {"engine": probes["engine"]}, lambda: inj.burst("veth-p", frames["veth-p"], burst)
                    )["engine"],
                    "bare": measure(
                        {"bare": probes["bare"]}, lambda: inj.burst("veth-p2", frames["veth-p2"], burst)
                    )["bare"],
                }
            ]
            out["sbfd_burst"] = [
                {
                    "engine": measure({"engine": probes["engine"]}, lambda: inj.burst("veth-p", sbfd, burst))[
                        "engine"
                    ],
                    "bare": measure(
                        {"bare": probes["bare"]}, lambda: inj.burst("veth-p2", frames["veth-p2"], burst)
                    )["bare"],
                }
            ]
        out["engine_log"] = str(eng.log_path)
    finally:
        if inj is not None:
            inj.close()
        if refl is not None:
            with contextlib.suppress(Exception):
                if refl.stdin is not None:
                    refl.stdin.close()
                refl.wait(timeout=30)
            if refl.poll() is None:
                refl.kill()
                refl.wait(timeout=10)
        if peer_eng is not None:
            peer_eng.cleanup()
        if eng is not None:
            eng.cleanup()
        if frr is not None:
            frr.cleanup()
        topo.close()
    out["duration_s"] = round(time.monotonic() - t_mode, 1)
    return out


def summarize(r: dict[str, Any]) -> None:
    """Medians over the rounds of each window kind, and the table rows, into ``r``."""
    r["median"], r["rows"] = {}, []
    for kind in ("control", "echo", "burst", "sbfd", "sbfd_burst", "auth"):
        ws = r.get(kind) or []
        if not ws:
            continue
        eng_ns = [w["engine"]["ns_per_packet"] for w in ws if w["engine"]["ns_per_packet"]]
        bare_ns = [w["bare"]["ns_per_packet"] for w in ws if w["bare"]["ns_per_packet"]]
        ratios = [
            w["engine"]["ns_per_packet"] / w["bare"]["ns_per_packet"]
            for w in ws
            if w["engine"]["ns_per_packet"] and w["bare"]["ns_per_packet"]
        ]
        med = {
            "engine_ns_per_packet": round(statistics.median(eng_ns), 1) if eng_ns else None,
            "engine_min": min(eng_ns, default=None),
            "engine_max": max(eng_ns, default=None),
            "bare_ns_per_packet": round(statistics.median(bare_ns), 1) if bare_ns else None,
            "engine_over_bare": round(statistics.median(ratios), 2) if ratios else None,
            "packets": sum(w["engine"]["run_cnt"] for w in ws),
        }
        r["median"][kind] = med
        share = [w["engine"]["kernel_tx_share"] for w in ws if w["engine"].get("kernel_tx_share") is not None]
        r["rows"].append(
            [
                r["mode"],
                kind,
                med["engine_ns_per_packet"],
                f"{med['engine_min']:.0f}-{med['engine_max']:.0f}" if eng_ns else None,
                med["packets"],
                med["bare_ns_per_packet"],
                med["engine_over_bare"],
                min(share) if share else None,
            ]
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0, help="length of each measurement window")
    ap.add_argument(
        "--rounds", type=int, default=3, help="windows per kind (echo, control); medians reported"
    )
    ap.add_argument("--modes", default="generic,native", help="comma-separated: generic, native")
    ap.add_argument(
        "--burst", type=int, default=20000, help="echo frames sent back to back (warm cache); 0: skip"
    )
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if (
        not set(modes) <= {"generic", "native"}
        or not 0 < args.seconds <= 120
        or not 1 <= args.rounds <= 20
        or not 0 <= args.burst <= 10**6
    ):
        ap.error("modes: generic,native; seconds: (0, 120]; rounds: 1-20; burst: [0, 1e6]")
    stamp, work, doc = benchlib.begin(
        "fastpath_cost",
        {
            "seconds": args.seconds,
            "rounds": args.rounds,
            "modes": modes,
            "interval_ms": INTERVAL_MS,
            "echo_rate_per_s": ECHO_RATE,
            "burst": args.burst,
        },
    )
    doc["target_ns_per_packet"] = TARGET_NS
    doc["results"] = []
    t_all = time.monotonic()
    try:
        with benchlib.bpf_stats_enabled() as old:
            doc["machine"]["bpf_stats_enabled_restored_to"] = old
            for mode in modes:
                print(f"-- {mode}: echo, S-BFD, auth, control ({args.seconds:g} s each), bursts", flush=True)
                r = run_mode(mode, args.seconds, args.rounds, work, args.burst)
                summarize(r)
                doc["results"].append(r)
    finally:
        doc["duration_s"] = round(time.monotonic() - t_all, 1)
        doc["leftover_namespaces"] = benchlib.require_clean_netns(f"{PREFIX}{os.getpid()}-")
        path = benchlib.write_result("fastpath_cost", stamp, doc)
    rows = [row for r in doc["results"] for row in r.get("rows", [])]
    print(
        benchlib.table(
            [
                "mode",
                "window",
                "engine ns/pkt",
                "range",
                "packets",
                "bare ns/pkt",
                "engine/bare",
                "ktx share",
            ],
            rows,
        )
    )
    ctrl = {
        r["mode"]: r["median"]["control"]["engine_ns_per_packet"] for r in doc["results"] if r.get("control")
    }
    if ctrl:
        here = ", ".join(f"{m} {v:.0f} ns" for m, v in ctrl.items())
        print(f"control path (median of {args.rounds} windows): {here}; target <= {TARGET_NS} ns/packet")
    refl = {r["mode"]: r["median"]["sbfd"]["engine_ns_per_packet"] for r in doc["results"] if r.get("sbfd")}
    if refl:
        here = ", ".join(f"{m} {v:.0f} ns" for m, v in refl.items() if v is not None)
        print(f"S-BFD reflector answer (median of {args.rounds} windows): {here}")
    auth = {r["mode"]: r["median"]["auth"]["engine_ns_per_packet"] for r in doc["results"] if r.get("auth")}
    if auth:
        here = ", ".join(f"{m} {v:.0f} ns" if v is not None else f"{m} not measured" for m, v in auth.items())
        print(f"authenticated packet accepted in XDP (keyed SHA1, median of {args.rounds} windows): {here}")
    if doc["leftover_namespaces"]:
        print(f"WARNING: namespaces left behind: {' '.join(doc['leftover_namespaces'])}")
    print(f"result: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
