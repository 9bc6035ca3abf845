"""Hitless takeover (--pin) at scale: N sessions, K successors in a row.

One pair of namespaces, the synthetic peer (bench/synth_peer.py, as scale.py
runs it) holding N sessions at 3xINTERVAL ms against ``xdp-bfd --kernel-tx
veth-d --pin DIR``. Once every session is Up and offloaded, a capture starts
on the peer's side and K times a successor is started with the same
arguments. Per takeover:

* ``gone_ms``: old engine gone, request (SIGUSR2) -> its pidfd readable, as the
  successor measures it; split into the old engine's own part (signal ->
  state written, from its owner record) and the rest (process exit);
* ``spawn_to_ready_s`` / ``request_to_ready_ms``: the successor's READY=1
  (sd_notify) after its start, and after its ``STATUS=taking over …`` (sent
  just before SIGUSR2): how long nobody but the kernel serves;
  ``mainpid_to_ready_ms`` from its MAINPID= (before the old engine's warm-up);
* ``serving_all_s``: spawn -> every session Up with kernel TX active in its stats.
* ``warm_up_state_decode_ms`` / ``state_decode_ms`` / ``checked_again``: the successor's decoding of
  the old engine's warm-up state before the request, of the request's state after it, and how many of
  its records differed from the warm-up's and were checked again.

Across the run: the peer's down events (the synthetic peer counts every Up ->
Down it sees, and which of them came after a silence of its own past the
detection time: the bed's, not the engine's), the engine's flaps, and on the wire (kernel timestamps, a
subset of sessions, ``--capture-net``) the worst gap in our transmissions and
any non-Up packet from us.

    sudo .venv/bin/python bench/takeover.py [--sessions 1024] [--interval-ms 10] [--takeovers 5]
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import ipaddress
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import benchlib
import synth_peer
from ladder import ENGINE_RESERVATION, UNIT_PREFIX
from scale import PeerProcess, by_discr, sessions_file, setup_addresses

from harness.capture import Capture, flow, gaps_ms
from harness.engine import EngineProcess
from harness.netns import Topology
from harness.wait import wait_until

GONE_RE = re.compile(r"pin: engine (\d+) handed over and was gone ([\d.]+) ms after the request(.*)")
# The successor's decoding of the old engine's warm-up state (before the request) and of the request's.
REHEARSAL_RE = re.compile(r"pin: read the warm-up's state of (\d+) sessions in ([\d.]+) ms before")
READ_RE = re.compile(r"pin: read the state of (\d+) sessions in ([\d.]+) ms[^(\n]*(?:\((\d+) checked again)?")
OWN_RE = re.compile(r"own part ([\d.]+) ms, exit ([\d.]+) ms")
HANDED_RE = re.compile(
    r"pin: handed over (\d+) sessions \((\d+) bytes of state\) in ([\d.]+) ms"
    r"(?: \(encoding ([\d.]+)(?:, (\d+) sessions encoded again)?[^)]*\))?"
)


class Notify:
    """An sd_notify socket the engines report to; keeps (arrival time, datagram)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))

    def recv(self, timeout: float, sender: EngineProcess | None = None) -> tuple[float, str]:
        """The next datagram, bounded by ``timeout``; with ``sender``, an engine that exits
        before it sends one is an error at once (with its last log lines), not a long timeout."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no sd_notify datagram within {timeout:g} s")
            self.sock.settimeout(min(left, 0.5) if sender is not None else left)
            try:
                data = self.sock.recv(256)
            except TimeoutError:
                if sender is not None and sender.proc is not None and sender.proc.poll() is not None:
                    tail = "\n".join(sender.log().splitlines()[-5:])
                    raise RuntimeError(
                        f"engine exited ({sender.proc.returncode}) before notifying:\n{tail}"
                    ) from None
                continue
            return time.monotonic(), data.decode()

    def close(self) -> None:
        self.sock.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        with contextlib.suppress(OSError):
            self.path.parent.rmdir()


def mac_of(ns: str, ifname: str) -> str:
    argv = ["ip", "-n", ns, "-j", "link", "show", "dev", ifname]
    out = subprocess.run(argv, capture_output=True, check=True)
    return json.loads(out.stdout)[0]["address"]


def serving_all(eng: EngineProcess, n: int) -> bool:
    doc = eng.stats(timeout=60)
    return doc["sessions_up"] == n and sum(1 for s in doc["sessions"] if s.get("kernel_tx_active")) == n


def takeover(old: EngineProcess, argv: list[str], bed: dict[str, Any], n: int) -> tuple[EngineProcess, dict]:
    notify: Notify = bed["notify"]
    w_spawn = time.time()
    t_spawn = time.monotonic()
    new = EngineProcess(bed["d"], argv, bed["work"], prefix=bed["prefix"]).start()
    t_main, first = notify.recv(120, new)
    # Then STATUS= at the request itself (SIGUSR2, after the old engine's warm-up; an older build
    # sends none) and READY=1.
    said = [first]
    t_request = t_ready = None
    while t_ready is None:
        t, msg = notify.recv(60, new)
        said.append(msg)
        if "READY=1" in msg:
            t_ready = t
        elif msg.startswith("STATUS=taking over"):
            t_request = t
    rc = old.wait_exit(timeout=30)
    line = new.wait_log("pin: engine", timeout=30)
    m = GONE_RE.search(line)
    own = OWN_RE.search(line)
    h = HANDED_RE.search(old.log())
    wait_until(lambda: serving_all(new, n), timeout=120, interval=0.5, what="successor serving all")
    r = {
        "old_exit": rc,
        "notify": [msg.strip() for msg in said],
        "gone_ms": float(m.group(2)) if m else None,
        "old_own_ms": float(own.group(1)) if own else None,
        "old_exit_ms": float(own.group(2)) if own else None,
        "handover_ms_old_log": float(h.group(3)) if h else None,
        "encoding_ms_old_log": float(h.group(4)) if h and h.group(4) else None,
        # Sessions the old engine encoded again at the request (the rest it kept from its warm-up).
        "encoded_again": int(h.group(5)) if h and h.group(5) else None,
        "state_bytes": int(h.group(2)) if h else None,
        "spawn_to_mainpid_s": round(t_main - t_spawn, 3),
        "spawn_to_ready_s": round(t_ready - t_spawn, 3),
        "request_to_ready_ms": round((t_ready - (t_request or t_main)) * 1e3, 1),
        "mainpid_to_ready_ms": round((t_ready - t_main) * 1e3, 1),
        "serving_all_s": round(time.monotonic() - t_spawn, 2),
        "adopted": "pin: adopted" in new.log(),
        # Before the request, the warm-up's state decoded in full; after it, only the records that differ.
        "warm_up_state_decode_ms": float(rh.group(2)) if (rh := REHEARSAL_RE.search(new.log())) else None,
        "state_decode_ms": float(rd.group(2)) if (rd := READ_RE.search(new.log())) else None,
        "checked_again": int(rd.group(3)) if rd and rd.group(3) else None,
        # The successor's own account: request -> each phase -> READY.
        "phases": new.wait_log("pin: serving again", timeout=30).split("pin: ", 1)[1].strip(),
    }
    # The machine from the successor's spawn to all sessions served: a slow takeover under a
    # stalled witness is the weather's as much as ours.
    r["witness"] = benchlib.witness_window(bed.get("witness"), w_spawn, time.time())
    return new, r


def wire(pkts: list, net: ipaddress.IPv4Network, n: int, t0: float, t1: float) -> dict[str, Any]:
    worst, non_up, counted, per, downs = 0.0, 0, 0, [], []
    for i in range(n):
        addr = synth_peer.peer_address(i)
        if ipaddress.ip_address(addr) not in net:
            continue
        mine = [p for p in flow(pkts, src=synth_peer.ENGINE_IP, dst=addr) if t0 <= p.ts <= t1]
        counted += 1
        non_up += sum(1 for p in mine if p.state != "up")
        downs += [p.ts for p in mine if p.state != "up"][:1]
        g = gaps_ms(mine)
        if g:
            per.append(max(g))
            worst = max(worst, *g)
    return {
        "sessions_captured": counted,
        "packets": len(pkts),
        "worst_gap_ms": round(worst, 2),
        "median_of_per_session_max_gap_ms": round(statistics.median(per), 2) if per else None,
        "non_up_from_us": non_up,
        # When each captured session first sent a non-Up packet (wall clock): what a witness
        # is asked about, the moment a session went down.
        "first_non_up_ts": sorted(downs),
    }


def parser() -> argparse.ArgumentParser:
    """The script's options; bench/suite.py builds its arguments with this same parser."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=1024)
    ap.add_argument("--interval-ms", type=int, default=10)
    ap.add_argument("--takeovers", type=int, default=5)
    ap.add_argument("--settle", type=float, default=3.0, help="seconds between takeovers")
    # 4 ms was enough with --kernel-clock off; with the clock on, 1024 x 3x10 ms never came up
    # under it (docs/benchmarks.md, "takeover.py with the kernel clock").
    ap.add_argument("--peer-runtime-us", type=int, default=8000, help="the peer's deadline runtime per 10 ms")
    ap.add_argument("--engine-arg", action="append", default=[], help="extra engine argument (repeatable)")
    ap.add_argument(
        "--engine-sched",
        default="plain",
        choices=("plain", "unit"),
        help=f"unit: every engine under {' '.join(UNIT_PREFIX)} with --sched-deadline {ENGINE_RESERVATION}",
    )
    ap.add_argument(
        "--capture-net",
        default="198.19.33.0/25",
        help="peer addresses whose packets are captured (all 1024 would be 100k packets/s)",
    )
    return ap


def check(args: argparse.Namespace) -> str | None:
    """What is wrong with ``args``, or None."""
    if not 1 <= args.sessions <= 4096 or not 1 <= args.takeovers <= 50:
        return "--sessions 1-4096, --takeovers 1-50"
    return None


def budget_s(args: argparse.Namespace) -> float:
    """An upper bound for one run: bring-up, every takeover with its settle, and the rest."""
    return 60 + args.sessions / 40 + args.takeovers * (args.settle + 60) + 120


def witness_at_downs(witness: Any, stamps: list[float], span_s: float) -> dict[str, Any] | None:
    """The witness's worst stall in the ``span_s`` before each moment a session went down: the
    silence the engine's detection saw ends there (None without downs or a witness)."""
    figs = [benchlib.witness_window(witness, t - span_s, t) for t in stamps]
    figs = [f for f in figs if f and "stall_ms" in f]
    return max(figs, key=lambda f: f["stall_ms"]) if figs else None


def run(
    args: argparse.Namespace,
    work: Path,
    out: dict[str, Any],
    witness: Any = None,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """One run into ``out`` (filled as it goes, so an error keeps what was measured)."""
    net = ipaddress.IPv4Network(args.capture_net)
    n = args.sessions
    topo = Topology()
    pin = work / "pin"
    pin.mkdir(parents=True, exist_ok=True)
    # Root-only, as the role mounts it: the engine refuses a pin directory others may write.
    subprocess.run(["mount", "-t", "bpf", "-o", "mode=0700", "bpf", str(pin)], check=True)
    notify = Notify(work / "notify")
    peer = eng = cap = None
    results: list[dict[str, Any]] = out.setdefault("takeovers", [])
    t_all = time.monotonic()
    try:
        d, p = topo.namespace("d"), topo.namespace("p")
        topo.veth(d, "veth-d", p, "veth-p")
        a_mac, b_mac = mac_of(d.name, "veth-d"), mac_of(p.name, "veth-p")
        setup_addresses(d, p, n, a_mac, b_mac)
        sessions = work / "sessions.yml"
        sessions_file(sessions, n, args.interval_ms)
        bringup = 60 + n / 40
        peer = PeerProcess(
            p,
            ["--ifname", "veth-p", "--src-mac", b_mac, "--dst-mac", a_mac, "--count", str(n),
             "--interval-ms", str(args.interval_ms), "--max-seconds", str(int(budget_s(args))),
             # As scale.py: the engine polls as each session comes Up, so the peer need not read
             # its plain Up replies (at 1024 sessions, 100 k a second).
             "--filter", "always"],
        )  # fmt: skip
        peer.wait_ready(timeout=30)
        # The peer is Python sending every 10 ms: on a shared host it stalls and
        # flaps sessions by itself unless it holds a reservation (as FRR does in
        # the tests). No fork follows, so no reset-on-fork is needed. Another run
        # may hold the deadline bandwidth: then it runs at its default, and says so.
        runtime = str(args.peer_runtime_us * 1000)
        chrt = subprocess.run(
            ["chrt", "-a", "-d", "--sched-runtime", runtime, "--sched-deadline",
             "10000000", "--sched-period", "10000000", "-p", "0", str(peer.pid)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        out["peer_sched"] = (
            f"deadline {args.peer_runtime_us}/10000 us"
            if chrt.returncode == 0
            else f"default (deadline admission refused: {chrt.stderr.strip()})"
        )
        argv = ["--sessions", str(sessions), "--kernel-tx", "veth-d", "--pin", str(pin), *args.engine_arg]
        prefix = ["env", f"NOTIFY_SOCKET={notify.path}"]
        if args.engine_sched == "unit":
            # As the unit runs it: FIFO 60, then the loop's own deadline reservation.
            argv += ["--sched-deadline", ENGINE_RESERVATION]
            prefix += UNIT_PREFIX
        eng = EngineProcess(d, argv, work, prefix=prefix).start()
        notify.recv(120, eng)  # READY=1
        wait_until(
            lambda: (
                serving_all(eng, n) and peer.latest().get("up") == n and peer.latest().get("polls_open") == 0
            ),
            timeout=bringup,
            interval=1.0,
            what=f"{n} sessions Up and offloaded",
        )
        time.sleep(args.settle)
        s0 = eng.stats(timeout=60)
        flaps0 = peer.latest().get("flaps", 0)
        own0 = peer.latest().get("flaps_after_silence", 0)
        cap = Capture(
            p, "veth-p", work / "takeover.pcap", f"udp and src host {synth_peer.ENGINE_IP} and dst net {net}"
        )
        cap.start()
        t0 = time.time()
        bed = {"d": d, "work": work, "notify": notify, "witness": witness, "prefix": prefix}
        for k in range(args.takeovers):
            eng, r = takeover(eng, argv, bed, n)
            results.append(r)
            say(
                f"takeover {k + 1}: gone {r['gone_ms']} ms, request -> READY {r['request_to_ready_ms']} ms, "
                f"spawn -> READY {r['spawn_to_ready_s']} s"
            )
            time.sleep(args.settle)
        t1 = time.time()
        pkts = cap.stop()
        cap = None
        s1 = eng.stats(timeout=60)
        a0, a1 = by_discr(s0), by_discr(s1)
        out["wire"] = wire(pkts, net, n, t0, t1)
        out["witness"] = benchlib.witness_window(witness, t0, t1)
        # Detection time plus one interval before each first Down: a stall there explains it.
        span = (3 + 1) * args.interval_ms / 1000
        out["witness_at_downs"] = witness_at_downs(witness, out["wire"]["first_non_up_ts"], span)
        out["peer_down_events"] = peer.latest().get("flaps", 0) - flaps0
        # Those that followed a silence of the peer's own past the detection time (its witness).
        out["peer_down_after_own_silence"] = peer.latest().get("flaps_after_silence", 0) - own0
        out["engine_flaps"] = sum(a1[k]["flaps"] - a0[k]["flaps"] for k in a1 if k in a0)
        out["same_discriminators"] = set(a0) == set(a1)
        out["sessions_up_at_end"] = s1["sessions_up"]
        # A stalled peer (a busy host) silences every session at once: say so beside the flaps.
        lines = [x for x in peer.recent(100000) if "late_max_ms" in x]
        out["peer_late_max_ms"] = max((x["late_max_ms"] for x in lines), default=None)
        out["peer_resyncs"] = lines[-1].get("resyncs") if lines else None
    finally:
        if cap is not None:
            cap.stop()
        if eng is not None:
            eng.cleanup()
        if peer is not None:
            out["peer_final"] = peer.stop()
        notify.close()
        topo.close()
        subprocess.run(["umount", "-l", str(pin)], check=False)
        out["duration_s"] = round(time.monotonic() - t_all, 1)
    return out


def main() -> int:
    ap = parser()
    args = ap.parse_args()
    if problem := check(args):
        ap.error(problem)
    # SIGTERM must unwind through the cleanup below (namespaces, the bpffs mount),
    # in this process only: pyroute2 forks helpers that inherit the handler and
    # are ended with SIGTERM, and a child unwinding our finally would tear the
    # run down under us.
    main_pid = os.getpid()

    def on_term(*_: object) -> None:
        if os.getpid() != main_pid:
            os._exit(143)
        sys.exit(1)

    signal.signal(signal.SIGTERM, on_term)
    faulthandler.register(signal.SIGUSR1)  # where a stuck run is: kill -USR1 PID
    stamp, work, doc = benchlib.begin("takeover", vars(args))
    try:
        run(args, work, doc)
    finally:
        path = benchlib.write_result("takeover", stamp, doc)
    keys = (
        "gone_ms",
        "old_own_ms",
        "old_exit_ms",
        "request_to_ready_ms",
        "spawn_to_ready_s",
        "serving_all_s",
    )
    rows = [[i + 1, *(r[k] for k in keys)] for i, r in enumerate(doc["takeovers"])]
    print(
        benchlib.table(
            ["#", "gone ms", "old own ms", "exit ms", "request->READY ms", "spawn->READY s", "serving all s"],
            rows,
        )
    )
    print(
        f"{args.sessions} sessions at 3x{args.interval_ms} ms: "
        f"peer down events {doc.get('peer_down_events')} "
        f"({doc.get('peer_down_after_own_silence')} after its own silence), "
        f"engine flaps {doc.get('engine_flaps')}, peer late max {doc.get('peer_late_max_ms')} ms, "
        f"wire {doc.get('wire')}\n{path}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
