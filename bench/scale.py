"""Many sessions Up on the fast path: what they cost the engine's userspace.

One pair of namespaces for the whole ladder. The engine side (veth-d) holds
198.19.32.1/19; the peer side (veth-p) holds one address per session
(198.19.33.1, .2, … 250 per /24, see bench/synth_peer.py) and static neighbour
entries on both ends keep ARP out of the picture. For each rung COUNT@INTERVAL_MS:

1. the synthetic peer (bench/synth_peer.py) starts in the peer namespace;
2. ``xdp-bfd --sessions F --kernel-tx veth-d`` starts with COUNT sessions
   (local 198.19.32.1, one peer address each, interface veth-d, min_tx = min_rx
   = INTERVAL_MS, detect multiplier 3);
3. bring-up: wait (bounded) until the engine has every session Up with kernel
   TX active and the peer has every session Up with no Poll open;
4. steady state for ``--seconds``: the engine's CPU from /proc/PID/stat
   (utime+stime, tick-sampled) and from schedstat (exact), its wake-ups, the
   Up count, flaps, the kernel's share of our transmissions, the kernel-side
   cost (XDP ns/packet and the detection sweep, from bpf run stats), and the
   peer's own CPU and lateness, so a slow peer cannot pass for a slow engine;
5. one stats dump and one Prometheus scrape, with the engine CPU each cost;
6. the silence check (skip with --no-silence-check): the peer exits without a
   word, every session's peer falls silent at once, and the engine's Up count
   is followed for detection time + 10 s (bounded).

    sudo .venv/bin/python bench/scale.py [--ladder 1@10,64@10,1024@10,4096@100] [--seconds 15]
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import benchlib
import dp_controller
import synth_peer
from benchlib import REPO
from ladder import ENGINE_RESERVATION, UNIT_PREFIX

from harness.capture import Capture
from harness.engine import EngineProcess
from harness.frr import Frr
from harness.netns import PREFIX, Namespace, Topology, attach_xdp_pass, entered
from harness.wait import wait_until
from xdp_bfd.fastpath import abi

DEFAULT_LADDER = "1@10,64@10,1024@10,4096@100"
CPU_TARGET_PCT = 2.0
PROG_TYPE_SCHED_CLS, PROG_TYPE_XDP, PROG_TYPE_PERF_EVENT, PROG_TYPE_RAW_TRACEPOINT = 3, 6, 7, 17
METRICS_PORT = 9464


class PeerProcess:
    """synth_peer.py in a namespace; keeps its latest status line."""

    def __init__(self, ns: Namespace, argv: list[str]) -> None:
        self.proc = ns.popen(
            [sys.executable, str(REPO / "bench" / "synth_peer.py"), *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                doc = json.loads(line)
                with self._lock:
                    self.lines.append(doc)

    def recent(self, count: int) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(x) for x in self.lines[-count:]]

    def latest(self) -> dict[str, Any]:
        with self._lock:
            return dict(self.lines[-1]) if self.lines else {}

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout: float) -> dict[str, Any]:
        def ready() -> dict | None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"synthetic peer exited ({self.proc.returncode}) before it was ready")
            with self._lock:
                return next((d for d in self.lines if d.get("ready")), None)

        return wait_until(ready, timeout=timeout, what="synthetic peer ready")

    def stop(self) -> dict[str, Any]:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self._thread.join(timeout=5)
        return self.latest()


def ip_batch(ns: Namespace, lines: list[str]) -> None:
    subprocess.run(
        ["ip", "-n", ns.name, "-batch", "-"],
        input="\n".join(lines) + "\n",
        text=True,
        check=True,
        timeout=120,
    )


def setup_addresses(d: Namespace, p: Namespace, n: int, d_mac: str, p_mac: str) -> None:
    prefix = synth_peer.SUBNET.prefixlen
    ip_batch(d, [f"address add {synth_peer.ENGINE_IP}/{prefix} dev veth-d"])
    ip_batch(p, [f"address add {synth_peer.peer_address(i)}/{prefix} dev veth-p" for i in range(n)])
    # Static neighbours: no ARP storm when thousands of sessions start at once.
    ip_batch(
        d,
        [
            f"neigh replace {synth_peer.peer_address(i)} lladdr {p_mac} dev veth-d nud permanent"
            for i in range(n)
        ],
    )
    ip_batch(p, [f"neigh replace {synth_peer.ENGINE_IP} lladdr {d_mac} dev veth-p nud permanent"])


def sessions_file(
    path: Path, n: int, interval_ms: int, *, auth: str | None = None, auth_count: int = 0
) -> None:
    """The engine's sessions file for the synthetic peer's first ``n`` addresses. With ``auth``
    (a sessions-file auth type), the first ``auth_count`` sessions use it with the synthetic peer's
    key (synth_peer.AUTH_KEY_ID, AUTH_SECRET), and the file is written mode 0600 (docs/engine.md)."""
    secret = auth is not None and auth_count > 0
    if secret:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # created afresh, so owner-only from its first byte
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if secret else 0o644)
    with os.fdopen(fd, "w") as f:
        for i in range(n):
            key = ""
            if secret and i < auth_count:
                key = (
                    f", auth: {{type: {auth}, key_id: {synth_peer.AUTH_KEY_ID}, "
                    f"secret: '{synth_peer.AUTH_SECRET.decode()}'}}"
                )
            f.write(
                f"- {{local: {synth_peer.ENGINE_IP}, peer: {synth_peer.peer_address(i)}, interface: veth-d, "
                f"min_tx_ms: {interval_ms}, min_rx_ms: {interval_ms}, detect_mult: 3{key}}}\n"
            )


def prog_times(pid: int) -> dict[str, int]:
    out = {"xdp_cnt": 0, "xdp_ns": 0, "sweep_cnt": 0, "sweep_ns": 0, "tick_cnt": 0, "tick_ns": 0}
    # The sweep's kind: its tick (a perf event) and its chain with the tick watch (raw tracepoint programs).
    kinds = {
        PROG_TYPE_XDP: "xdp",
        PROG_TYPE_PERF_EVENT: "sweep",
        PROG_TYPE_RAW_TRACEPOINT: "sweep",
        PROG_TYPE_SCHED_CLS: "tick",
    }
    for prog in benchlib.bpf_prog_stats(pid):
        kind = kinds.get(prog.get("prog_type", -1))
        if kind:
            out[f"{kind}_cnt"] += prog.get("run_cnt", 0)
            out[f"{kind}_ns"] += prog.get("run_time_ns", 0)
    return out


def link_counts(ns: Namespace, ifname: str) -> dict[str, int]:
    return benchlib.link_counts(ns.name, ifname)


def udp_errors(ns: Namespace) -> dict[str, int]:
    snmp = ns.snmp()
    return {k: snmp.get(f"Udp.{k}", 0) for k in ("RcvbufErrors", "InErrors", "NoPorts")}


def scrape(ns: Namespace, port: int, timeout: float = 60.0) -> bytes:
    """GET /metrics from the engine's --metrics listener inside ``ns``; the whole response."""
    with entered(ns.name):
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    chunks = []
    with sock:
        sock.sendall(b"GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def by_discr(stats: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {s["local_discr"]: s for s in stats["sessions"]}


@dataclass
class Bed:
    """The namespaces of the whole ladder and what every rung needs from them."""

    d: Namespace
    p: Namespace
    d_mac: str
    p_mac: str
    args: argparse.Namespace
    work: Path
    # The kernel-paced reference stream (harness.witness) whose stalls judge the silence check's
    # timing; None: that check's figures carry no witness.
    witness: Any = None


def engine_argv(bed: Bed, source: list[str], stats_path: Path) -> tuple[list[str], list[str] | None]:
    """The engine's arguments for a rung, and the prefix it runs under (as the unit, or plain)."""
    args = bed.args
    argv = [
        *source,
        "--kernel-tx",
        "veth-d",
        "--xdp-mode",
        args.xdp_mode,
        "--metrics",
        f"127.0.0.1:{METRICS_PORT}",
        "--kernel-clock",
        args.kernel_clock,
        # On tmpfs, as the unit writes it (/run/xdp-bfd): on this disk's ext4, replacing a
        # 4 MB file is milliseconds of the kernel's time in the dump's last step.
        "--stats-dump",
        str(stats_path),
    ]
    if args.engine_sched != "unit":
        return argv, None
    # As the unit runs it: FIFO 60, then the loop's own deadline reservation.
    return [*argv, "--sched-deadline", ENGINE_RESERVATION], UNIT_PREFIX


def run_quiet_stats(bed: Bed, n: int, interval_ms: int, *, rounds: int = 3) -> dict[str, Any]:
    """Dumps and scrapes at ``n`` sessions with no peer: the stats' own steps, apart from interrupts.

    Under the peers' traffic (every rung) this kernel charges the softirqs that
    carry it to whatever step they interrupt (no IRQ time accounting): at 4096
    sessions a step of 0.2 ms came out at up to 2.7 ms. Here the same engine holds
    ``n`` sessions that stay Down (nobody answers; each sends once a second), so a
    step is the document's, the JSON's and the exposition's work. The reference
    stream (the bed's witness) over the same span says whether the machine was quiet.
    """
    d, work = bed.d, bed.work
    sessions = work / f"sessions-quiet-{n}.yml"
    sessions_file(sessions, n, interval_ms)
    stats_path = Path(f"/dev/shm/xdp-bfd-scale-{d.name}-quiet-{n}.json")
    out: dict[str, Any] = {"sessions": n, "interval_ms": interval_ms, "rounds": []}
    argv, prefix = engine_argv(bed, ["--sessions", str(sessions)], stats_path)
    eng = EngineProcess(d, argv, work, prefix).start()
    try:
        eng.wait_log("bfd: serving", timeout=120)
        time.sleep(bed.args.settle)
        t0 = time.time()
        for _ in range(rounds):
            t = time.monotonic()
            eng.stats(timeout=60)
            dump_s = time.monotonic() - t
            t = time.monotonic()
            body = scrape(d, METRICS_PORT)
            out["rounds"].append(
                {"dump_s": round(dump_s, 3), "scrape_s": round(time.monotonic() - t, 3), "bytes": len(body)}
            )
        last = eng.stats(timeout=60)
        out["witness"] = benchlib.witness_window(bed.witness, t0, time.time())
        bg = (last.get("loop_lag") or {}).get("background") or {}
        out |= {
            "sessions_configured": last.get("sessions_configured"),
            "sessions_up": last.get("sessions_up"),
            "steps": bg.get("steps"),
            "step_max_us": bg.get("step_max_us"),
            "step_cpu_max_us": bg.get("step_cpu_max_us"),
            "engine_log": str(eng.log_path),
        }
    finally:
        out["engine_exit"] = eng.stop()
        eng.cleanup()
        stats_path.unlink(missing_ok=True)
    return out


def run_rung(bed: Bed, n: int, interval_ms: int) -> dict[str, Any]:
    d, p, args, work = bed.d, bed.p, bed.args, bed.work
    out: dict[str, Any] = {"sessions": n, "interval_ms": interval_ms, "detect_mult": 3}
    controller: dp_controller.Controller | None = None
    if args.controller == "bfddp":
        # The sessions come from a controller over bfddp, as bfdd gives them: the silence check
        # then also stamps when each Down reaches it.
        controller = dp_controller.Controller(
            work / f"bfddp-{n}-{interval_ms}ms.sock",
            [
                dp_controller.add_session(
                    i + 1, synth_peer.ENGINE_IP, synth_peer.peer_address(i), "veth-d", interval_ms
                )
                for i in range(n)
            ],
        )
        source = ["--dplane-connect", controller.address()]
    else:
        sessions = work / f"sessions-{n}.yml"
        sessions_file(sessions, n, interval_ms)
        source = ["--sessions", str(sessions)]
    bringup_timeout = 60 + n / 40
    peer = PeerProcess(
        p,
        [
            "--ifname",
            "veth-p",
            "--src-mac",
            bed.p_mac,
            "--dst-mac",
            bed.d_mac,
            "--count",
            str(n),
            "--interval-ms",
            str(interval_ms),
            "--max-seconds",
            str(int(bringup_timeout + args.seconds + 120)),
            # The engine polls as each session comes Up; the peer need not read its plain replies.
            "--filter",
            "always",
        ],
    )
    eng: EngineProcess | None = None
    stats_path = Path(f"/dev/shm/xdp-bfd-scale-{d.name}-{n}.json")
    t_rung = time.monotonic()
    try:
        out["peer_slots"] = peer.wait_ready(timeout=30)
        udp0 = udp_errors(d)
        argv, prefix = engine_argv(bed, source, stats_path)
        eng = EngineProcess(d, argv, work, prefix).start()
        t_start = time.monotonic()
        out["attach_line"] = eng.wait_log("kernel-tx: XDP attached to", timeout=120).strip()
        eng.wait_log("bfd: serving", timeout=120)
        out["serving_after_s"] = round(time.monotonic() - t_start, 2)

        # Bring-up, bounded: every session Up on both ends, kernel TX active, no Poll open.
        last: dict[str, Any] = {}

        def all_up() -> bool:
            st = eng.stats(timeout=60)
            ps = peer.latest()
            active = sum(1 for s in st["sessions"] if s.get("kernel_tx_active"))
            last.update(
                engine_up=st["sessions_up"],
                kernel_tx_active=active,
                peer_up=ps.get("up"),
                peer_polls_open=ps.get("polls_open"),
            )
            return st["sessions_up"] == n and active == n and ps.get("up") == n and ps.get("polls_open") == 0

        try:
            wait_until(all_up, timeout=bringup_timeout, interval=1.0, what=f"{n} sessions Up and offloaded")
            out["all_up"] = True
        except AssertionError:
            out["all_up"] = False
        out["bringup"] = (
            last | {"after_s": round(time.monotonic() - t_start, 2)} | peer_witness(peer.recent(100000))
        )
        out["udp_errors_bringup"] = {k: v - udp0[k] for k, v in udp_errors(d).items()}
        time.sleep(args.settle)

        # Steady state.
        s0 = eng.stats(timeout=60)

        def snapshot() -> tuple:
            # Everything the steady-state window is the difference of, read in one place.
            return (
                benchlib.proc_cpu(eng.pid),
                benchlib.proc_cpu(peer.pid),
                benchlib.system_cpu(),
                prog_times(eng.pid),
                link_counts(p, "veth-p"),
                link_counts(d, "veth-d"),
                peer.latest(),
                udp_errors(d),
            )

        cpu0, pcpu0, sys0, prog0, lp0, ld0, ps0, udp0 = snapshot()
        time.sleep(args.seconds)
        cpu1, pcpu1, sys1, prog1, lp1, ld1, ps1, udp1 = snapshot()
        # One stats dump (SIGUSR1): what an operator's poll costs the engine at this size.
        t_dump = time.monotonic()
        s1 = eng.stats(timeout=60)
        cpu_dump = benchlib.proc_cpu(eng.pid)
        dump = {
            "wall_s": round(time.monotonic() - t_dump, 3),
            "engine_cpu_s": round(cpu_dump["sched_s"] - cpu1["sched_s"], 3),
        }
        # One Prometheus scrape (--metrics): the same per-session walk, plus the exposition.
        t_scrape = time.monotonic()
        body = scrape(d, METRICS_PORT)
        scrape_cost = {
            "wall_s": round(time.monotonic() - t_scrape, 3),
            "engine_cpu_s": round(benchlib.proc_cpu(eng.pid)["sched_s"] - cpu_dump["sched_s"], 3),
            "bytes": len(body),
        }
        # The engine's own account of each (its background steps, loop_lag.background): a
        # document reports the job before it, so s1's is the dump before it (s0's, the same
        # size) and a dump after the scrape reports the scrape's.
        s2 = eng.stats(timeout=60)
        bg1, bg2 = (((s.get("loop_lag") or {}).get("background") or {}) for s in (s1, s2))
        dump["engine_job"] = bg1.get("last_job")
        scrape_cost["engine_job"] = bg2.get("last_job")
        scrape_cost["step_max_us_since_start"] = bg2.get("step_max_us")

        engine_cpu = benchlib.cpu_delta(cpu0, cpu1)
        window = engine_cpu["window_s"]
        a, b = by_discr(s0), by_discr(s1)
        ktx = sum(b[k]["kernel_tx_packets"] - a[k]["kernel_tx_packets"] for k in b if k in a)
        utx = sum(b[k]["user_tx_packets"] - a[k]["user_tx_packets"] for k in b if k in a)
        silent = sum(1 for k in b if k in a and b[k]["kernel_tx_packets"] == a[k]["kernel_tx_packets"])
        flaps = sum(b[k]["flaps"] - a[k]["flaps"] for k in b if k in a)
        dx = {k: prog1[k] - prog0[k] for k in prog0}
        if not dx["xdp_cnt"]:
            # No program fd in the engine's fdinfo (loaded and handed off): its own run stats.
            x0, x1 = s0.get("xdp") or {}, s1.get("xdp") or {}
            dx["xdp_cnt"] = int(x1.get("run_cnt") or 0) - int(x0.get("run_cnt") or 0)
            dx["xdp_ns"] = int(x1.get("run_time_ns") or 0) - int(x0.get("run_time_ns") or 0)
        c0, c1 = s0["counters"], s1["counters"]
        # The XDP program answers every peer packet: a window in which its run stats did not move
        # was not measured (the stats were off), never a 0 % figure.
        xdp_measured = dx["xdp_cnt"] > 0
        out["steady"] = {
            "engine_cpu": engine_cpu,
            "sessions_configured": s1["sessions_configured"],
            "sessions_up": s1["sessions_up"],
            "sessions_up_at_start": s0["sessions_up"],
            "flaps_before_window": sum(x["flaps"] for x in s0["sessions"]),
            "kernel_tx_active": sum(1 for s in s1["sessions"] if s.get("kernel_tx_active")),
            "flaps": flaps,
            "kernel_tx_packets": ktx,
            "user_tx_packets": utx,
            "kernel_tx_share": round(ktx / (ktx + utx), 5) if ktx + utx else None,
            "sessions_without_kernel_tx": silent,
            "xdp_pass": c1["xdp_pass"] - c0["xdp_pass"],
            "tx_early": c1.get("tx_early", 0) - c0.get("tx_early", 0),
            "drops": {k: v - c0["drop"].get(k, 0) for k, v in c1["drop"].items() if v - c0["drop"].get(k, 0)},
            "xdp_ns_per_packet": round(dx["xdp_ns"] / dx["xdp_cnt"], 1) if dx["xdp_cnt"] else None,
            "xdp_packets_per_s": round(dx["xdp_cnt"] / window, 1) if xdp_measured else None,
            "xdp_cpu_pct": round(100 * dx["xdp_ns"] / 1e9 / window, 3) if xdp_measured else None,
            "xdp_window_s": window,
            "sweep_runs_per_s": round(dx["sweep_cnt"] / window, 1),
            "sweep_cpu_pct": round(100 * dx["sweep_ns"] / 1e9 / window, 3),
            "sweep_ns_per_run": round(dx["sweep_ns"] / dx["sweep_cnt"], 1) if dx["sweep_cnt"] else None,
            # The kernel transmit clock: its program's runs (one per tick frame release) and cost.
            "tick_runs_per_s": round(dx["tick_cnt"] / window, 1),
            "tick_cpu_pct": round(100 * dx["tick_ns"] / 1e9 / window, 3),
            "tick_ns_per_run": round(dx["tick_ns"] / dx["tick_cnt"], 1) if dx["tick_cnt"] else None,
            "clocked_sessions": (s1.get("kernel_clock") or {}).get("clocked_sessions"),
            "tick_counters": {
                k: v - ((s0.get("kernel_clock") or {}).get("counters") or {}).get(k, 0)
                for k, v in ((s1.get("kernel_clock") or {}).get("counters") or {}).items()
            },
            "expected_peer_pps": round(n * 1000 / interval_ms, 1),
            "peer_sent_per_s": round((ps1.get("sent", 0) - ps0.get("sent", 0)) / window, 1),
            "replies_on_veth_p_per_s": round((lp1["rx_packets"] - lp0["rx_packets"]) / window, 1),
            "veth_drops": {
                "veth-d": {k: ld1[k] - ld0[k] for k in ("rx_dropped", "tx_dropped")},
                "veth-p": {k: lp1[k] - lp0[k] for k in ("rx_dropped", "tx_dropped")},
            },
            "engine_udp_errors": {k: udp1[k] - udp0[k] for k in udp0},
            "peer_cpu": benchlib.cpu_delta(pcpu0, pcpu1),
            "peer": peer_window(ps0, ps1, peer.recent(int(window) + 1))
            | {
                "steady_filter": ps1.get("steady_filter"),
                "send_errors": ps1.get("send_errors", 0) - ps0.get("send_errors", 0),
            },
            "system_cpu": benchlib.system_cpu_delta(sys0, sys1),
            "stats_dump": dump,
            "metrics_scrape": scrape_cost,
        }
        if not xdp_measured:
            out["steady"]["xdp_not_measured"] = (
                "the XDP program's run stats did not move in the window "
                f"(kernel.bpf_stats_enabled now {benchlib.sysctl_get('kernel.bpf_stats_enabled')})"
            )
        if args.silence_check:
            out["silence"] = silence_check(
                eng,
                peer,
                n,
                interval_ms,
                ns=p,
                work=work,
                controller=controller,
                witness=bed.witness,
                downs0=kernel_downs(s1),
            )
    finally:
        if controller is not None:
            controller.close()
            out["controller_error"] = controller.error
        if eng is not None:
            t_stop = time.monotonic()
            out["engine_exit"] = eng.stop()
            out["engine_stop_s"] = round(time.monotonic() - t_stop, 2)
            eng.cleanup()
            out["engine_log"] = str(eng.log_path)
        stats_path.unlink(missing_ok=True)
        out["peer_final"] = peer.stop()
    out["duration_s"] = round(time.monotonic() - t_rung, 1)
    return out


def peer_witness(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The synthetic peer's own punctuality over its status lines: its worst gap between two
    periodic frames of a session, and how many slots went out later than the detection time
    (each a silence the engine is right to declare Down: the environment's, not the engine's);
    and the flaps it saw, with those that followed such a silence of its own."""
    last = lines[-1] if lines else {}
    return {
        "peer_gap_max_ms": max((x.get("gap_max_ms", 0) for x in lines), default=None),
        "peer_gaps_over_detect": last.get("gaps_over_detect"),
        "peer_flaps": last.get("flaps"),
        "peer_flaps_after_silence": last.get("flaps_after_silence"),
    }


def peer_window(ps0: dict[str, Any], ps1: dict[str, Any], lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The synthetic peer over a window, from its status before (ps0) and after (ps1) and the
    status lines within it (each with the worst lateness and gap since the line before)."""

    def delta(key: str) -> int:
        return ps1.get(key, 0) - ps0.get(key, 0)

    return {
        "flaps": delta("flaps"),
        "up": ps1.get("up"),
        "late_max_ms": max((x.get("late_max_ms", 0) for x in lines), default=None),
        "late_slots": delta("late_slots"),
        "resyncs": delta("resyncs"),
        "gap_max_ms": peer_witness(lines)["peer_gap_max_ms"],
        "gaps_over_detect": delta("gaps_over_detect"),
        "flaps_after_silence": delta("flaps_after_silence"),
    }


def _spread(xs: list[float]) -> dict[str, float] | None:
    """p50 / p99 / max of a mass failure's per-session figures (ms), None without any."""
    if not xs:
        return None
    xs = sorted(xs)
    return {
        "p50": round(xs[len(xs) // 2], 2),
        "p99": round(xs[min(len(xs) - 1, int(len(xs) * 0.99))], 2),
        "max": round(xs[-1], 2),
    }


def wire_downs(
    packets: list[Any], detect_ms: float, found: dict[str, tuple[float, float]] | None = None
) -> dict[str, Any]:
    """Each session's Down on the wire against the silence it answers (both in one capture).

    Per peer address: our first Down with diag 1 after an Up of ours (the transition), and the
    silence it answers: the last gap of at least the detection time in the peer's frames before
    it (the Down's own time closing the last gap). ``overshoot_ms`` is the Down's lateness past
    the detection time from that silence's start, by the kernel's stamps: what the whole engine
    took, kernel sweep and userspace. Counted beside it: ``paused``, the peer's frames came back
    before our Down (it stalled, then fell silent; the Down answers the stall); ``resumed``, they
    came back after it; ``early``, no such gap on the wire at all (a frame this capture saw that
    our XDP did not count: a false Down, or one lost between the two). ``span_ms`` is how long
    the Downs kept leaving after the first. ``found`` (when given) gets each peer's silence start
    and our Down's time, for :func:`controller_downs`.
    """
    by_peer: dict[str, list[Any]] = {}
    for pk in packets:
        if pk.dst == synth_peer.ENGINE_IP:
            by_peer.setdefault(pk.src, []).append(pk)
        elif pk.src == synth_peer.ENGINE_IP:
            by_peer.setdefault(pk.dst, []).append(pk)
    over: list[float] = []
    due_left: list[tuple[float, float]] = []  # each Down's due time (silence + detection) and its time
    paused = resumed = early = 0
    for pkts in by_peer.values():
        heard: list[float] = []
        was_up = False
        for pk in pkts:  # in capture order
            if pk.dst == synth_peer.ENGINE_IP:
                heard.append(pk.ts)
            elif pk.state == "up":
                was_up = True
            elif was_up and pk.state == "down" and pk.diag == 1 and heard:
                ends = [*heard[1:], pk.ts]
                gaps = [t for t, e in zip(heard, ends, strict=True) if (e - t) * 1e3 >= detect_ms]
                start = gaps[-1] if gaps else heard[-1]
                paused += bool(gaps) and start != heard[-1]
                early += not gaps
                over.append((pk.ts - start) * 1e3 - detect_ms)
                due_left.append((start + detect_ms / 1e3, pk.ts))
                if found is not None:
                    found[pk.dst] = (start, pk.ts)
                resumed += any(q.dst == synth_peer.ENGINE_IP and q.ts > pk.ts for q in pkts)
                break
    return {
        "peers_seen": len(by_peer),
        # The check's premise, per session: we were saying Up when the peer fell silent. A session
        # a stall had already taken Down (or whose Ups tcpdump missed) has no witness here.
        "up_seen": sum(
            any(pk.src == synth_peer.ENGINE_IP and pk.state == "up" for pk in pkts)
            for pkts in by_peer.values()
        ),
        "downs_seen": len(over),
        "paused": paused,
        "resumed": resumed,
        "early": early,
        "overshoot_ms": _spread(over),
        "span_ms": round((max(lefts) - min(lefts)) * 1e3, 1) if (lefts := [t for _, t in due_left]) else None,
        "pace": down_pace(due_left),
    }


# The courier's round (bfd_abi.h, BFD_DOWN_BATCH): more Downs due and unsent than one round sends
# means the path, not the sweep, holds them.
COURIER_ROUND = abi.load().down_batch
PEAK_WINDOW_S = 0.005


def down_pace(due_left: list[tuple[float, float]]) -> dict[str, Any] | None:
    """How fast Downs fell due against how fast they left, from the capture's (due, left) pairs.

    ``due`` is a session's silence start plus the detection time (when its Down could leave at the
    earliest), ``left`` its Down on the wire. ``due_per_ms``: the demand, Downs falling due per ms
    over the span of due times; ``due_per_ms_peak``: the most falling due in any 5 ms, per ms (a
    peer that dies slowly spreads its silences and thins the demand over the whole span).
    ``queued_max``: the most Downs due and not yet on the wire at any departure.
    ``left_per_ms_while_queued``: the departures per ms while more than a courier round was due and
    unsent, i.e. the pace of the path from the sweep's queue to the wire when it had work waiting
    (the peer's receive in its namespace and the capture share these CPUs). ``late``: Downs more
    than 1 ms past due; ``late_queued``: of them, those that fell due behind more than a round of
    others (lateness from the path's pace, not from a detection found late).
    """
    if len(due_left) < 2:
        return None
    dues = sorted(d for d, _ in due_left)
    lefts = sorted(t for _, t in due_left)
    due_span = dues[-1] - dues[0]

    def queued_at(t: float) -> int:
        return bisect.bisect_right(dues, t) - bisect.bisect_left(lefts, t)

    busy_s = 0.0
    busy_n = 0
    for a, b in itertools.pairwise(lefts):
        if queued_at(a) > COURIER_ROUND:
            busy_s += b - a
            busy_n += 1
    late = [(d, t) for d, t in due_left if t - d > 1e-3]
    return {
        "due_per_ms": round((len(dues) - 1) / (due_span * 1e3), 1) if due_span > 0 else None,
        "due_per_ms_peak": round(
            max(bisect.bisect_right(dues, d + PEAK_WINDOW_S) - i for i, d in enumerate(dues))
            / (PEAK_WINDOW_S * 1e3),
            1,
        ),
        "queued_max": max(queued_at(t) for t in lefts),
        "left_per_ms_while_queued": round(busy_n / (busy_s * 1e3), 1) if busy_s > 0 else None,
        "queued_ms": round(busy_s * 1e3, 2),
        "late": len(late),
        "late_queued": sum(1 for d, _ in late if queued_at(d) > COURIER_ROUND),
    }


def controller_downs(
    changes: list[dp_controller.Change], found: dict[str, tuple[float, float]], since: float, detect_ms: float
) -> dict[str, Any]:
    """When each session's Down reached its controller (bfddp), against the wire of the same capture.

    Per session the first BFD_STATE_CHANGE to Down read after ``since`` (the moment the peer
    was stopped, wall clock), matched to its peer by bfdd's id (the bench gives session i the
    id i + 1). ``overshoot_ms``: past the detection time from the silence's start on the wire,
    what a routing protocol waited beyond BFD's own detection; ``after_wire_ms``: after our Down
    left on the wire; ``span_ms``: from the first report to the last.
    """
    first: dict[int, float] = {}
    for c in changes:
        if c.at >= since and c.state == 1 and c.lid not in first:  # 1: Down
            first[c.lid] = c.at
    over: list[float] = []
    after: list[float] = []
    for lid, at in first.items():
        seen = found.get(synth_peer.peer_address(lid - 1))
        if seen is not None:
            over.append((at - seen[0]) * 1e3 - detect_ms)
            after.append((at - seen[1]) * 1e3)
    return {
        "downs_reported": len(first),
        "matched_to_wire": len(over),
        "overshoot_ms": _spread(over),
        "after_wire_ms": _spread(after),
        "span_ms": round((max(first.values()) - min(first.values())) * 1e3, 1) if first else None,
    }


def silence_check(
    eng: EngineProcess,
    peer: PeerProcess,
    n: int,
    interval_ms: int,
    *,
    ns: Namespace,
    work: Path,
    controller: dp_controller.Controller | None = None,
    witness: Any = None,
    downs0: int | None = None,
) -> dict[str, Any]:
    """Every peer falls silent at once (the peer process exits, no AdminDown): a link failure.

    The kernel sweep must report every session's expiry; the figures are each
    session's Down on the wire (a capture on the peer's side: our Down with diag 1
    against the silence it answers, see :func:`wire_downs`), how long until the
    engine has no session Up, and how many are still Up when the bounded wait
    ends (a session the engine never declares Down is a route never withdrawn).
    ``witness`` (the reference stream) is read over the same span as the wire's
    figures, from the first silence to the last Down: how late everything was.
    ``downs0``: the tick program's Down count before (the steady window's
    last stats document), for how many of the Downs the kernel sent.
    The Up count comes from stats dumps, which are paced over many loop
    iterations at scale: it is a coarse clock, the wire is the fine one.
    """
    detect_s = 3 * interval_ms / 1000
    cap = Capture(
        ns, "veth-p", work / f"silence-{n}-{interval_ms}ms-{time.monotonic_ns()}.pcap", "udp and port 3784"
    )
    cap.start()
    try:
        # Every session's last frame must be in the capture: a few intervals of them first.
        time.sleep(max(0.2, 5 * interval_ms / 1000))
        cpu0 = benchlib.proc_cpu(eng.pid)
        prog0 = prog_times(eng.pid)
        stopped_at = time.time()
        peer.stop()
        t0 = time.monotonic()
        # The expiries' own cost, before any stats request adds its own: the engine's CPU while
        # it handles them, given 0.5 ms of wall time a session (several times what they took).
        time.sleep(detect_s + 0.5 + n / 2000)
        cpu_s = benchlib.proc_cpu(eng.pid)["sched_s"] - cpu0["sched_s"]
        prog1 = prog_times(eng.pid)
        out = _silence_samples(eng, n, t0, detect_s, downs0)
        out["engine_cpu_s"] = round(cpu_s, 4)
        # The tick program over the same span: the courier's rounds and every Down it cloned
        # (through the veth's transmit, not the peer's receive), and the ticks of sessions still
        # Up at first. An upper bound of the sending side's cost per Down, beside the wire's pace.
        tick_ns, tick_cnt = prog1["tick_ns"] - prog0["tick_ns"], prog1["tick_cnt"] - prog0["tick_cnt"]
        sent = out["kernel_sent_downs"]
        out["tick_program"] = {
            "runs": tick_cnt,
            "run_ms": round(tick_ns / 1e6, 3),
            "us_per_down_at_most": round(tick_ns / 1e3 / sent, 2) if sent else None,
        }
        reported = out["detections_reported"]
        out["engine_cpu_us_per_expiry"] = round(cpu_s * 1e6 / reported, 1) if reported else None
        # The last Downs' frames reach tcpdump's file a moment after the engine counted them.
        time.sleep(0.5)
    finally:
        packets = cap.stop()
    found: dict[str, tuple[float, float]] = {}
    out["wire"] = wire_downs(packets, detect_s * 1e3, found)
    # A Down the capture lost shows its session's next one (a slow-rate interval later) as its
    # Down: the wire's maxima are the capture's when it dropped any.
    out["wire"]["capture_dropped"] = cap.dropped
    if found:
        lo, hi = min(v[0] for v in found.values()), max(v[1] for v in found.values())
    else:
        lo, hi = stopped_at, stopped_at + detect_s
    out["witness"] = benchlib.witness_window(witness, lo, hi)
    if controller is not None:
        out["controller"] = controller_downs(controller.recorded(), found, stopped_at, detect_s * 1e3)
    return out


def _silence_samples(
    eng: EngineProcess, n: int, t0: float, detect_s: float, downs0: int | None
) -> dict[str, Any]:
    deadline = t0 + detect_s + 10
    samples = []
    st: dict[str, Any] = {}
    while time.monotonic() < deadline:
        st = eng.stats(timeout=60)
        samples.append((round(time.monotonic() - t0, 2), st["sessions_up"]))
        if st["sessions_up"] == 0:
            break
        time.sleep(0.25)
    stuck = [s for s in st.get("sessions", []) if s["state"] == "up"]
    downs1 = kernel_downs(st)
    queued1 = kernel_downs(st, "down_queued")
    # The kernel's own measure of each detection: silence (µs) when the sweep reported it.
    det = sorted(
        s["last_detection_us"]
        for s in st.get("sessions", [])
        if s["state"] != "up" and s.get("last_detection_us")
    )
    return {
        "detections_reported": len(det),
        "detection_ms": {
            "min": round(det[0] / 1000, 2),
            "median": round(statistics.median(det) / 1000, 2),
            "max": round(det[-1] / 1000, 2),
        }
        if det
        else None,
        "detect_time_s": detect_s,
        "all_down_after_s": samples[-1][0] if samples and samples[-1][1] == 0 else None,
        "still_up_at_end": len(stuck),
        "still_up_kernel_tx_active": sum(1 for s in stuck if s.get("kernel_tx_active")),
        "waited_s": round(time.monotonic() - t0, 2),
        "samples": samples,
        "sessions": n,
        # How many of the Downs the tick program sent (docs/fastpath.md, "Many expiries at once");
        # None where the engine's loop has no such counter (an older build, --kernel-clock off).
        "kernel_sent_downs": None if downs0 is None or downs1 is None else downs1 - downs0,
        # Of those, how many the sweep queued for the courier, which sends them without the engine
        # (since session 32; None before): counted since the rung's engine started, so a bring-up
        # flap's Down is in it too.
        "kernel_queued_downs": queued1,
    }


def kernel_downs(stats: dict[str, Any], name: str = "down_sent") -> int | None:
    """The tick program's count of Downs it sent (or ``name``'s), from a stats document."""
    return ((stats.get("kernel_clock") or {}).get("counters") or {}).get(name)


def bfdd_conf(n: int, interval_ms: int) -> str:
    """bfdd.conf with one single-hop peer per synthetic session, the engine's address as ours."""
    lines = ["bfd"]
    for i in range(n):
        lines += [
            f" peer {synth_peer.peer_address(i)} local-address {synth_peer.ENGINE_IP} interface veth-d",
            f"  receive-interval {interval_ms}",
            f"  transmit-interval {interval_ms}",
            "  detect-multiplier 3",
            " exit",
        ]
    return "\n".join([*lines, "exit", ""])


def run_bfdd_rung(bed: Bed, n: int, interval_ms: int) -> dict[str, Any]:
    """Stock FRR bfdd as the DUT with ``n`` sessions against the same synthetic peer: its CPU.

    The curve the engine's is put beside. bfdd saturates a core well before the
    engine notices anything, so bring-up is waited for (bounded) but not
    required: the window is measured either way and the Up count says how far
    bfdd got.
    """
    d, p, args = bed.d, bed.p, bed.args
    out: dict[str, Any] = {"dut": "bfdd", "sessions": n, "interval_ms": interval_ms, "detect_mult": 3}
    bringup_timeout = 20 + n / 4
    peer = PeerProcess(
        p,
        [
            "--ifname", "veth-p", "--src-mac", bed.p_mac, "--dst-mac", bed.d_mac,
            "--count", str(n), "--interval-ms", str(interval_ms),
            "--max-seconds", str(int(bringup_timeout + args.seconds + 120)),
        ],
    )  # fmt: skip
    frr: Frr | None = None
    t_rung = time.monotonic()
    try:
        out["peer_slots"] = peer.wait_ready(timeout=30)
        frr = Frr(d, f"scale{n}")
        frr.start(bfdd_conf(n, interval_ms))
        t_start = time.monotonic()

        def ups() -> int:
            return sum(1 for x in frr.peers() if x.get("status") == "up")

        def downs() -> int:
            return sum(int(c.get("session-down", 0)) for c in frr.counters())

        try:
            wait_until(lambda: ups() == n and peer.latest().get("polls_open") == 0,
                       timeout=bringup_timeout, interval=1.0, what=f"bfdd: {n} sessions Up")  # fmt: skip
            out["all_up"] = True
        except AssertionError:
            out["all_up"] = False
        out["bringup"] = {"after_s": round(time.monotonic() - t_start, 2), "up": ups()} | peer_witness(
            peer.recent(100000)
        )
        time.sleep(args.settle)
        pid = frr.pid("bfdd")
        assert pid is not None
        down0, cpu0, ps0 = downs(), benchlib.proc_cpu(pid), peer.latest()
        time.sleep(args.seconds)
        cpu1, ps1 = benchlib.proc_cpu(pid), peer.latest()
        up1, down1 = ups(), downs()
        out["steady"] = {
            "dut_cpu": benchlib.cpu_delta(cpu0, cpu1),
            "sessions_up": up1,
            "flaps": down1 - down0,
            # A stalled peer loop (a busy machine) makes bfdd flap without bfdd being at fault.
            "peer": peer_window(ps0, ps1, peer.recent(int(args.seconds) + 1)),
        }
    finally:
        if frr is not None:
            frr.cleanup()
        out["peer_final"] = peer.stop()
    out["duration_s"] = round(time.monotonic() - t_rung, 1)
    return out


def parse_counts(text: str) -> list[int]:
    counts = [int(x) for x in text.split(",") if x]
    if not all(1 <= c <= 256 for c in counts):
        raise ValueError("bfdd rungs: 1-256 sessions each")
    return counts


def parse_ladder(text: str) -> list[tuple[int, int]]:
    rungs = []
    for part in text.split(","):
        count, _, interval = part.partition("@")
        n, ms = int(count), int(interval or 100)
        if not 1 <= n <= 4096 or not 1 <= ms <= 10_000:
            raise ValueError(f"rung {part!r}: COUNT 1-4096 @ INTERVAL_MS 1-10000")
        rungs.append((n, ms))
    return rungs


def parser() -> argparse.ArgumentParser:
    """The script's options; bench/suite.py builds its arguments with this same parser, so every
    option a rung reads exists there too (with the script's default unless the suite sets it)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--ladder", default=DEFAULT_LADDER, help=f"COUNT@INTERVAL_MS,... (default {DEFAULT_LADDER})"
    )
    ap.add_argument("--seconds", type=float, default=15.0, help="steady-state window per rung")
    ap.add_argument("--settle", type=float, default=2.0, help="wait after bring-up before measuring")
    ap.add_argument("--xdp-mode", default="generic", choices=("generic", "native"))
    ap.add_argument("--kernel-clock", default="on", choices=("on", "off"), help="the engine's --kernel-clock")
    ap.add_argument(
        "--no-silence-check",
        dest="silence_check",
        action="store_false",
        help="skip the mass-failure phase (every peer silent at once) after each rung",
    )
    ap.add_argument(
        "--bfdd-ladder",
        default="",
        metavar="COUNT,...",
        help="also measure stock FRR bfdd as the DUT at these session counts (e.g. 1,8,32,64)",
    )
    ap.add_argument("--bfdd-interval-ms", type=int, default=10, help="bfdd rungs' interval (3xN ms)")
    ap.add_argument(
        "--quiet-stats",
        default="",
        metavar="COUNT@INTERVAL_MS",
        help="after the rungs, dumps and scrapes at COUNT sessions with no peer (their steps apart from "
        "the peers' interrupts)",
    )
    ap.add_argument(
        "--controller",
        default="file",
        choices=("file", "bfddp"),
        help="where the sessions come from: a --sessions file, or a bfddp controller (as bfdd gives"
        " them; the silence check then also times each Down's report to it)",
    )
    ap.add_argument(
        "--engine-sched",
        default="plain",
        choices=("plain", "unit"),
        help=f"unit: the engine under {' '.join(UNIT_PREFIX)} with --sched-deadline {ENGINE_RESERVATION}",
    )
    return ap


def main() -> int:
    ap = parser()
    args = ap.parse_args()
    try:
        rungs = parse_ladder(args.ladder)
        bfdd_rungs = parse_counts(args.bfdd_ladder)
        quiet = parse_ladder(args.quiet_stats) if args.quiet_stats else []
    except ValueError as e:
        ap.error(str(e))
    if not 1 <= args.seconds <= 600 or not 0 <= args.settle <= 60:
        ap.error("--seconds 1-600, --settle 0-60")
    stamp, work, doc = benchlib.begin(
        "scale",
        {
            "ladder": rungs,
            "seconds": args.seconds,
            "settle": args.settle,
            "xdp_mode": args.xdp_mode,
            "bfdd_ladder": bfdd_rungs,
            "bfdd_interval_ms": args.bfdd_interval_ms,
            "engine_sched": args.engine_sched,
            "controller": args.controller,
        },
    )
    doc["cpu_target_pct_at_1024"] = CPU_TARGET_PCT
    doc["rungs"] = []
    doc["bfdd_rungs"] = []
    t_all = time.monotonic()
    topo = Topology()
    witness = None
    try:
        if args.silence_check or quiet:
            witness = benchlib.start_witness(work / "witness")
        with benchlib.bpf_stats_enabled() as old:
            doc["machine"]["bpf_stats_enabled_restored_to"] = old
            d, p = topo.namespace("d"), topo.namespace("p")
            topo.veth(d, "veth-d", p, "veth-p")
            bed = Bed(
                d, p, benchlib.mac(d.name, "veth-d"), benchlib.mac(p.name, "veth-p"), args, work, witness
            )
            if args.xdp_mode == "native":
                attach_xdp_pass(p, "veth-p")
            t0 = time.monotonic()
            setup_addresses(
                d, p, max(n for n, _ in rungs + quiet + [(c, 0) for c in bfdd_rungs]), bed.d_mac, bed.p_mac
            )
            doc["address_setup_s"] = round(time.monotonic() - t0, 2)
            for n, ms in rungs:
                print(f"-- {n} sessions at 3x{ms} ms", flush=True)
                r = run_rung(bed, n, ms)
                doc["rungs"].append(r)
                st = r.get("steady", {})
                cpu = st.get("engine_cpu", {}).get("cpu_pct_sched")
                up_s = r.get("bringup", {}).get("after_s")
                print(
                    f"   up {st.get('sessions_up')}/{n}, engine CPU {cpu} % (bring-up {up_s} s)", flush=True
                )
            for n, ms in quiet:
                print(f"-- stats at {n} sessions, no peer", flush=True)
                doc["quiet_stats"] = q = run_quiet_stats(bed, n, ms)
                print(
                    f"   longest step {q.get('step_max_us')} us (thread CPU {q.get('step_cpu_max_us')})",
                    flush=True,
                )
            for n in bfdd_rungs:
                print(f"-- bfdd: {n} sessions at 3x{args.bfdd_interval_ms} ms", flush=True)
                r = run_bfdd_rung(bed, n, args.bfdd_interval_ms)
                doc["bfdd_rungs"].append(r)
                st = r.get("steady", {})
                cpu = st.get("dut_cpu", {}).get("cpu_pct_sched")
                print(f"   up {st.get('sessions_up')}/{n}, bfdd CPU {cpu} %", flush=True)
    finally:
        if witness is not None:
            witness.close()
        topo.close()
        doc["duration_s"] = round(time.monotonic() - t_all, 1)
        doc["leftover_namespaces"] = benchlib.require_clean_netns(f"{PREFIX}{os.getpid()}-")
        path = benchlib.write_result("scale", stamp, doc)
    rows = []
    for r in doc["rungs"]:
        st = r.get("steady") or {}
        cpu = st.get("engine_cpu") or {}
        rows.append(
            [
                r["sessions"],
                f"3x{r['interval_ms']}",
                f"{st.get('sessions_up')}/{r['sessions']}",
                st.get("flaps"),
                cpu.get("cpu_pct_stat"),
                cpu.get("cpu_pct_sched"),
                cpu.get("wakeups_per_s"),
                st.get("kernel_tx_share"),
                st.get("xdp_ns_per_packet"),
                st.get("sweep_cpu_pct"),
                st.get("tick_cpu_pct"),
                (st.get("peer_cpu") or {}).get("cpu_pct_sched"),
                (r.get("bringup") or {}).get("after_s"),
            ]
        )
    print(
        benchlib.table(
            [
                "sessions",
                "timers ms",
                "up",
                "flaps",
                "cpu% stat",
                "cpu% sched",
                "wakeups/s",
                "ktx share",
                "xdp ns/pkt",
                "sweep cpu%",
                "tick cpu%",
                "peer cpu%",
                "bring-up s",
            ],
            rows,
        )
    )
    print(f"target: 1024 Up sessions cost the engine's userspace <= {CPU_TARGET_PCT:g} % of one core")
    rows = []
    for r in doc["rungs"]:
        st, si = r.get("steady") or {}, r.get("silence") or {}
        rows.append(
            [
                r["sessions"],
                f"3x{r['interval_ms']}",
                (st.get("stats_dump") or {}).get("engine_cpu_s"),
                (st.get("metrics_scrape") or {}).get("engine_cpu_s"),
                (r.get("udp_errors_bringup") or {}).get("RcvbufErrors"),
                si.get("all_down_after_s"),
                si.get("still_up_at_end"),
                f"{wire.get('downs_seen')}/{wire.get('up_seen')}/{r['sessions']}"
                if (wire := si.get("wire"))
                else None,
                (wire.get("overshoot_ms") or {}).get("p50") if wire else None,
                (wire.get("overshoot_ms") or {}).get("max") if wire else None,
                (wire.get("pace") or {}).get("due_per_ms_peak") if wire else None,
                (wire.get("pace") or {}).get("left_per_ms_while_queued") if wire else None,
                (ctl.get("overshoot_ms") or {}).get("p50") if (ctl := si.get("controller")) else None,
                (ctl.get("overshoot_ms") or {}).get("max") if ctl else None,
                si.get("kernel_sent_downs"),
                (si.get("witness") or {}).get("stall_ms"),
                si.get("engine_cpu_us_per_expiry"),
            ]
        )
    if doc["bfdd_rungs"]:
        bfdd_rows = [
            [
                r["sessions"],
                f"3x{r['interval_ms']}",
                f"{(r.get('steady') or {}).get('sessions_up')}/{r['sessions']}",
                (r.get("steady") or {}).get("flaps"),
                ((r.get("steady") or {}).get("dut_cpu") or {}).get("cpu_pct_sched"),
            ]
            for r in doc["bfdd_rungs"]
        ]
        print("\nstock bfdd as the DUT, same peer:")
        print(benchlib.table(["sessions", "timers ms", "up", "flaps", "bfdd cpu% sched"], bfdd_rows))
    print("\noperator polls, bring-up drops, and every peer silent at once:")
    print(
        benchlib.table(
            [
                "sessions",
                "timers ms",
                "stats dump cpu s",
                "scrape cpu s",
                "rcvbuf drops",
                "all down s",
                "still Up",
                "wire Downs/Up/all",
                "wire overshoot p50 ms",
                "max ms",
                "Downs due/ms peak",
                "left/ms queued",
                "bfddp overshoot p50 ms",
                "max ms",
                "kernel-sent Downs",
                "witness stall ms",
                "engine cpu us/expiry",
            ],
            rows,
        )
    )
    if doc["leftover_namespaces"]:
        print(f"WARNING: namespaces left behind: {' '.join(doc['leftover_namespaces'])}")
    print(f"result: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
