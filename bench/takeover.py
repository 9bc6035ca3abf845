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
* ``serving_all_s``: spawn -> every session Up with kernel TX active in its stats (a
  meticulous session: Up);
* ``engine_cpu_settle``: the successor's CPU in the settle after it (% of one core);
* with ``--meticulous``: ``series_signed_ahead`` (sessions whose series the old engine topped up,
  or signed ahead in a build before 2026-12-07, from its log) and ``meticulous_standby`` (the
  successor's meticulous sessions with a kernel clock for a series: the clock's budget may refuse one).
* ``warm_up_state_decode_ms`` / ``state_decode_ms`` / ``checked_again``: the successor's decoding of
  the old engine's warm-up state before the request, of the request's state after it, and how many of
  its records differed from the warm-up's and were checked again.

Across the run: the peer's down events (the synthetic peer counts every Up ->
Down it sees, and which of them came after a silence of its own past the
detection time: the bed's, not the engine's), the engine's flaps, and on the wire (kernel timestamps, a
subset of sessions, ``--capture-net``) the worst gap in our transmissions and
any non-Up packet from us.

With ``--meticulous M`` the first M sessions use a meticulous keyed type (``--auth-type``) on both
sides: the engine's sessions file gives them the synthetic peer's key, and the peer signs its
packets and checks ours as a real peer would, discarding (and counting) any with a wrong digest or a
Sequence Number outside RFC 5880 §6.7.3's window, and declaring the session Down by its own
detection timer when nothing acceptable came for a detection time. Such a session's packets cannot
be sent by the kernel from one template: the kernel sends the series the engine keeps signed ahead
(since 2026-12-07 all along; before, only between the request and the successor's restore). The
``meticulous`` section of the result gives their own figures: the peer's down events and auth
rejects among them, the engine's flaps and drops of theirs, the wire (worst gap, every captured
packet checked again as the peer checks it, the Sequence Number steps seen) and how many packets the
kernel sent signed ahead. The capture always covers some of them.

    sudo .venv/bin/python bench/takeover.py [--sessions 1024] [--interval-ms 10] [--takeovers 5]
        [--meticulous M [--auth-type meticulous-keyed-md5|meticulous-keyed-sha1]]
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
from collections import Counter
from collections.abc import Callable, Collection
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
    r"(?: \(encoding ([\d.]+)(?:, [\d.]+ of CPU)?(?:, (\d+) sessions encoded again)?[^)]*\))?"
)
# The same line's parts (this build's): the encoding's CPU, the sessions whose machine state was
# compared, the sessions read (a build before 2026-12-07 read every one and does not say), the
# state's write (chunks written of all) and the sockets' pass.
PARTS_RE = re.compile(
    r"pin: handed over .*?\(encoding [\d.]+, ([\d.]+) of CPU, \d+ sessions encoded again since the warm-up, "
    r"(\d+) compared(?:, (\d+) read)?; writing ([\d.]+), (\d+) of (\d+) chunks; sockets ([\d.]+)"
)
# The old engine's series of the meticulous sessions' packets for the kernel's clock: topped up
# (this build's: they run all along), or signed ahead at the request (a build before 2026-12-07).
SERIES_RE = re.compile(r"pin: handed over .*?(\d+) series (?:topped up|signed ahead)")
# Meticulous sessions captured outside --capture-net at most (one tcpdump host term each).
CAPTURE_SIGNED_MAX = 16


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


def serving_all(eng: EngineProcess, n: int, signed: Collection[str] = ()) -> bool:
    """Every session Up, a plain one's packets the kernel's (kernel TX active); a meticulous one
    (peer address in ``signed``) sends its own, so Up is all it can be (whether its clock stands
    by for a handover's series is counted apart, ``standby``: the clock's budget may refuse it)."""
    doc = eng.stats(timeout=60)

    def serving(s: dict[str, Any]) -> bool:
        return s.get("state") == "up" if s.get("peer") in signed else bool(s.get("kernel_tx_active"))

    return doc["sessions_up"] == n and sum(1 for s in doc["sessions"] if serving(s)) == n


def standby(doc: dict[str, Any], signed: Collection[str]) -> int | None:
    """How many meticulous sessions have a kernel clock for a handover's series (None without the
    clock, or without such sessions): sending one all along (``series_left``, this build's) or
    standing by for one (an older build's); the others get no packet signed ahead."""
    if not signed or "kernel_clock" not in doc:
        return None
    return sum(
        1
        for s in doc["sessions"]
        if s.get("peer") in signed and (s.get("kernel_clock_standby") or s.get("series_left"))
    )


def _handover_parts(log: str) -> dict[str, Any]:
    """The old engine's handover line's parts (empty for a build that does not log them)."""
    p = PARTS_RE.search(log)
    if p is None:
        return {}
    return {
        "encoding_cpu_ms_old_log": float(p.group(1)),
        "compared": int(p.group(2)),
        "read": int(p.group(3)) if p.group(3) else None,
        "write_ms_old_log": float(p.group(4)),
        "chunks_written": [int(p.group(5)), int(p.group(6))],
        "sockets_ms_old_log": float(p.group(7)),
    }


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
    signed = bed.get("signed", ())
    wait_until(lambda: serving_all(new, n, signed), timeout=120, interval=0.5, what="successor serving all")
    t_serving = time.monotonic()
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
        **_handover_parts(old.log()),
        # Meticulous sessions whose next packets the old engine signed ahead (none: no such line).
        "series_signed_ahead": int(sr.group(1)) if (sr := SERIES_RE.search(old.log())) else 0,
        "spawn_to_mainpid_s": round(t_main - t_spawn, 3),
        "spawn_to_ready_s": round(t_ready - t_spawn, 3),
        "request_to_ready_ms": round((t_ready - (t_request or t_main)) * 1e3, 1),
        "mainpid_to_ready_ms": round((t_ready - t_main) * 1e3, 1),
        "serving_all_s": round(t_serving - t_spawn, 2),
        "adopted": "pin: adopted" in new.log(),
        # Before the request, the warm-up's state decoded in full; after it, only the records that differ.
        "warm_up_state_decode_ms": float(rh.group(2)) if (rh := REHEARSAL_RE.search(new.log())) else None,
        "state_decode_ms": float(rd.group(2)) if (rd := READ_RE.search(new.log())) else None,
        "checked_again": int(rd.group(3)) if rd and rd.group(3) else None,
        # The successor's own account: request -> each phase -> READY.
        "phases": new.wait_log("pin: serving again", timeout=30).split("pin: ", 1)[1].strip(),
    }
    if signed:
        # Meticulous sessions whose clock stands by for the next takeover's series (at most all).
        r["meticulous_standby"] = standby(new.stats(timeout=60), signed)
    # The machine from the successor's spawn to all sessions served: a slow takeover under a
    # stalled witness is the weather's as much as ours.
    r["witness"] = benchlib.witness_window(bed.get("witness"), w_spawn, time.time())
    return new, r


def _cpu(eng: EngineProcess) -> dict[str, float] | None:
    with contextlib.suppress(OSError):
        return benchlib.proc_cpu(eng.pid)
    return None


def _cpu_pct(a: dict[str, float] | None, b: dict[str, float] | None) -> float | None:
    """The engine's CPU between two samples, percent of one core (its reservation: 10 with unit)."""
    return benchlib.cpu_delta(a, b)["cpu_pct_sched"] if a and b else None


def _lag_ms(doc: dict[str, Any]) -> float | None:
    lag = (doc.get("loop_lag") or {}).get("max_us")
    return round(lag / 1000, 1) if lag is not None else None


def captured(net: ipaddress.IPv4Network, n: int, met: int) -> tuple[list[int], str]:
    """The sessions the capture covers and its filter: those of ``net``, and when that holds none
    of the ``met`` meticulous sessions, the first of them (up to CAPTURE_SIGNED_MAX) by address."""
    mine = [i for i in range(n) if ipaddress.ip_address(synth_peer.peer_address(i)) in net]
    extra = [] if any(i < met for i in mine) else list(range(min(met, CAPTURE_SIGNED_MAX)))
    dst = " or ".join([f"dst net {net}", *(f"dst host {synth_peer.peer_address(i)}" for i in extra)])
    return sorted({*mine, *extra}), f"udp and src host {synth_peer.ENGINE_IP} and ({dst})"


def wire(pkts: list, sessions: Collection[int], t0: float, t1: float) -> dict[str, Any]:
    worst, non_up, counted, per, downs = 0.0, 0, 0, [], []
    for i in sessions:
        addr = synth_peer.peer_address(i)
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


def signed_wire(
    pkts: list, sessions: Collection[int], key: synth_peer.Key, t0: float, t1: float
) -> dict[str, Any]:
    """The captured meticulous sessions' packets from us, checked again as the peer checks them
    (synth_peer.Key: A bit, type, lengths, key ID, digest, and the Sequence Number against the
    previous captured packet's: the window of RFC 5880 §6.7.3), and their Sequence Number steps
    other than 1 (a takeover with a series leaves one step of 2 per session)."""
    out = wire(pkts, sessions, t0, t1)
    rejects: Counter[str] = Counter()
    steps: Counter[int] = Counter()
    checked = 0
    for i in sessions:
        last = None
        for p in flow(pkts, src=synth_peer.ENGINE_IP, dst=synth_peer.peer_address(i)):
            if not t0 <= p.ts <= t1:
                continue
            data = p.payload
            checked += 1
            why = key.check(data, last)
            if why is not None:
                rejects[why] += 1
            if len(data) >= 32 and data[1] & synth_peer.FLAG_A:
                seq = synth_peer.seq_of(data)
                if last is not None and (step := (seq - last) & 0xFFFFFFFF) != 1:
                    steps[step if step < 0x80000000 else step - 0x100000000] += 1
                last = seq
    return out | {
        "packets_checked": checked,
        "rejects": sum(rejects.values()),
        "rejects_by": dict(sorted(rejects.items())),
        # Sequence Number steps other than +1 between consecutive captured packets, by step.
        "seq_steps": {str(k): v for k, v in sorted(steps.items())},
    }


def meticulous_figures(
    signed: Collection[str],
    *,
    peer0: dict[str, Any],
    peer1: dict[str, Any],
    s0: dict[str, Any],
    s1: dict[str, Any],
    wire_doc: dict[str, Any],
) -> dict[str, Any]:
    """The meticulous sessions' own figures across the takeovers: the peer's (status lines before
    and after), the engine's (stats before and after) and the wire's (``signed_wire``)."""

    def delta(key: str) -> int | None:
        return peer1[key] - peer0.get(key, 0) if key in peer1 else None

    by0, by1 = peer0.get("auth_rejected_by") or {}, peer1.get("auth_rejected_by") or {}
    a0 = {s["local_discr"]: s for s in s0["sessions"] if s.get("peer") in signed}
    a1 = {s["local_discr"]: s for s in s1["sessions"] if s.get("peer") in signed}
    drops: Counter[str] = Counter()
    for k, s in a1.items():
        before = (a0.get(k) or {}).get("drops") or {}
        for why, v in (s.get("drops") or {}).items():
            if v - before.get(why, 0):
                drops[why] += v - before.get(why, 0)
    c0 = ((s0.get("kernel_clock") or {}).get("counters")) or {}
    c1 = ((s1.get("kernel_clock") or {}).get("counters")) or {}
    return {
        # The peer's Up -> Down for these sessions (by the DUT's Down or its own detection timer).
        "peer_down_events": delta("auth_flaps"),
        # Of them, by the peer's own detection timer: nothing acceptable for a detection time.
        "peer_detect_expired": delta("auth_detect_expired"),
        # Our packets the peer discarded (a wrong digest, a Sequence Number outside the window…).
        "auth_rejected": delta("auth_rejected"),
        "auth_rejected_by": {k: v - by0.get(k, 0) for k, v in by1.items() if v - by0.get(k, 0)},
        "auth_accepted": delta("auth_accepted"),
        # The peer's bfd.AuthSeqKnown lapsed (2 x detection time without an acceptable packet).
        "peer_seq_forgotten": delta("auth_seq_forgotten"),
        "engine_flaps": sum(a1[k]["flaps"] - a0[k]["flaps"] for k in a1 if k in a0),
        "engine_drops": dict(sorted(drops.items())),
        "up_at_end": sum(1 for s in a1.values() if s.get("state") == "up"),
        # What the kernel's clock sent of the series signed ahead, and its ticks that found none.
        "kernel_sent_signed_ahead": c1["tick_prepaid"] - c0.get("tick_prepaid", 0)
        if "tick_prepaid" in c1
        else None,
        "wire": wire_doc,
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
        help=f"unit: every engine under {' '.join(UNIT_PREFIX)} with --sched-deadline (--engine-reservation)",
    )
    ap.add_argument(
        "--engine-reservation",
        default=ENGINE_RESERVATION,
        metavar="RUNTIME/PERIOD",
        help=f"each engine's --sched-deadline under --engine-sched unit, in us (default {ENGINE_RESERVATION},"
        " the unit's): docs/operations.md sizes it for meticulous keys",
    )
    ap.add_argument(
        "--capture-net",
        default="198.19.33.0/25",
        help="peer addresses whose packets are captured (all 1024 would be 100k packets/s); the first"
        f" meticulous sessions (up to {CAPTURE_SIGNED_MAX}) are added when it holds none of them",
    )
    ap.add_argument(
        "--meticulous",
        type=int,
        default=0,
        metavar="M",
        help="the first M sessions authenticated with --auth-type on both sides (0: none)",
    )
    ap.add_argument(
        "--auth-type",
        default="meticulous-keyed-sha1",
        choices=tuple(synth_peer.AUTH_TYPES),
        help="the meticulous sessions' authentication type",
    )
    ap.add_argument(
        "--witness",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the bed's reference stream beside the takeovers (the suite runs its own)",
    )
    return ap


def check(args: argparse.Namespace) -> str | None:
    """What is wrong with ``args``, or None."""
    if not 1 <= args.sessions <= 4096 or not 1 <= args.takeovers <= 50:
        return "--sessions 1-4096, --takeovers 1-50"
    if not 0 <= getattr(args, "meticulous", 0) <= args.sessions:
        return "--meticulous 0-SESSIONS"
    runtime, _, period = getattr(args, "engine_reservation", ENGINE_RESERVATION).partition("/")
    if not (runtime.isdigit() and period.isdigit() and 0 < int(runtime) <= int(period)):
        return "--engine-reservation RUNTIME/PERIOD in us, 0 < RUNTIME <= PERIOD"
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
        met = getattr(args, "meticulous", 0)
        auth_type = getattr(args, "auth_type", "meticulous-keyed-sha1")
        sessions_file(sessions, n, args.interval_ms, auth=auth_type if met else None, auth_count=met)
        signed = {synth_peer.peer_address(i) for i in range(met)}
        bringup = 60 + n / 40
        peer = PeerProcess(
            p,
            ["--ifname", "veth-p", "--src-mac", b_mac, "--dst-mac", a_mac, "--count", str(n),
             "--interval-ms", str(args.interval_ms), "--max-seconds", str(int(budget_s(args))),
             # As scale.py: the engine polls as each session comes Up, so the peer need not read
             # its plain Up replies (at 1024 sessions, 100 k a second).
             "--filter", "always",
             *(["--meticulous", str(met), "--auth-type", auth_type] if met else [])],
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
            argv += ["--sched-deadline", args.engine_reservation]
            out["engine_reservation"] = args.engine_reservation
            prefix += UNIT_PREFIX
        eng = EngineProcess(d, argv, work, prefix=prefix).start()
        notify.recv(120, eng)  # READY=1
        wait_until(
            lambda: (
                serving_all(eng, n, signed)
                and peer.latest().get("up") == n
                and peer.latest().get("polls_open") == 0
            ),
            timeout=bringup,
            interval=1.0,
            what=f"{n} sessions Up and offloaded",
        )
        cpu0 = _cpu(eng)
        time.sleep(args.settle)
        s0 = eng.stats(timeout=60)
        # The engine's own CPU (one core = 100) against its reservation, and its loop's worst lag.
        out["engine_cpu_before_takeovers"] = _cpu_pct(cpu0, _cpu(eng))
        out["engine_loop_lag_max_ms_before"] = _lag_ms(s0)
        if met:
            out["meticulous_standby_before"] = standby(s0, signed)
        peer0 = peer.latest()
        flaps0 = peer0.get("flaps", 0)
        own0 = peer0.get("flaps_after_silence", 0)
        covered, bpf = captured(net, n, met)
        cap = Capture(p, "veth-p", work / "takeover.pcap", bpf)
        cap.start()
        t0 = time.time()
        bed = {"d": d, "work": work, "notify": notify, "witness": witness, "prefix": prefix, "signed": signed}
        for k in range(args.takeovers):
            eng, r = takeover(eng, argv, bed, n)
            cpu0 = _cpu(eng)
            results.append(r)
            say(
                f"takeover {k + 1}: gone {r['gone_ms']} ms, request -> READY {r['request_to_ready_ms']} ms, "
                f"spawn -> READY {r['spawn_to_ready_s']} s"
            )
            time.sleep(args.settle)
            r["engine_cpu_settle"] = _cpu_pct(cpu0, _cpu(eng))
        t1 = time.time()
        pkts = cap.stop()
        cap = None
        s1 = eng.stats(timeout=60)
        a0, a1 = by_discr(s0), by_discr(s1)
        out["wire"] = wire(pkts, covered, t0, t1)
        out["witness"] = benchlib.witness_window(witness, t0, t1)
        # Detection time plus one interval before each first Down: a stall there explains it.
        span = (3 + 1) * args.interval_ms / 1000
        out["witness_at_downs"] = witness_at_downs(witness, out["wire"]["first_non_up_ts"], span)
        out["peer_down_events"] = peer.latest().get("flaps", 0) - flaps0
        # Those that followed a silence of the peer's own past the detection time (its witness).
        out["peer_down_after_own_silence"] = peer.latest().get("flaps_after_silence", 0) - own0
        out["engine_flaps"] = sum(a1[k]["flaps"] - a0[k]["flaps"] for k in a1 if k in a0)
        out["engine_loop_lag_max_ms_end"] = _lag_ms(s1)  # the last engine's, over its life
        out["same_discriminators"] = set(a0) == set(a1)
        out["sessions_up_at_end"] = s1["sessions_up"]
        # A stalled peer (a busy host) silences every session at once: say so beside the flaps.
        lines = [x for x in peer.recent(100000) if "late_max_ms" in x]
        out["peer_late_max_ms"] = max((x["late_max_ms"] for x in lines), default=None)
        out["peer_resyncs"] = lines[-1].get("resyncs") if lines else None
        if met:
            key = synth_peer.Key(auth_type, synth_peer.AUTH_KEY_ID, synth_peer.AUTH_SECRET)
            mine = [i for i in covered if i < met]
            out["meticulous"] = meticulous_figures(
                signed,
                peer0=peer0,
                peer1=peer.latest(),
                s0=s0,
                s1=s1,
                wire_doc=signed_wire(pkts, mine, key, t0, t1),
            ) | {"sessions": met, "auth_type": auth_type}
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
    # As the suite runs this part: a burst of downs after a takeover is the bed's when the
    # reference stream stalled in the same window (witness_at_downs), ours when it did not.
    witness = None
    try:
        if args.witness:
            witness = benchlib.start_witness(work / "witness")
        run(args, work, doc, witness)
    finally:
        if witness is not None:
            witness.close()
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
        f"wire {doc.get('wire')}\n"
        f"witness over the takeovers {doc.get('witness')}, before the downs {doc.get('witness_at_downs')}\n"
        f"engine CPU % of a core: before the takeovers {doc.get('engine_cpu_before_takeovers')}, "
        f"in each settle {[r.get('engine_cpu_settle') for r in doc['takeovers']]}; engine loop lag max "
        f"{doc.get('engine_loop_lag_max_ms_before')} ms before, {doc.get('engine_loop_lag_max_ms_end')} ms "
        "(the last engine)"
    )
    if m := doc.get("meticulous"):
        w = m.get("wire") or {}
        series = [r.get("series_signed_ahead") for r in doc["takeovers"]]
        ready = [
            doc.get("meticulous_standby_before"),
            *(r.get("meticulous_standby") for r in doc["takeovers"]),
        ]
        print(
            f"{m['sessions']} meticulous ({m['auth_type']}): peer down events {m['peer_down_events']} "
            f"({m['peer_detect_expired']} by its detection timer), auth rejected {m['auth_rejected']} "
            f"{m['auth_rejected_by']}, engine flaps {m['engine_flaps']}, engine drops {m['engine_drops']}, "
            f"clocks standing by before each takeover {ready[: len(series)]}, "
            f"series signed ahead per takeover {series}, kernel sent signed ahead "
            f"{m['kernel_sent_signed_ahead']}; wire: {w.get('sessions_captured')} captured, worst gap "
            f"{w.get('worst_gap_ms')} ms, median per-session max "
            f"{w.get('median_of_per_session_max_gap_ms')} ms, "
            f"rejects {w.get('rejects')} {w.get('rejects_by')}, seq steps {w.get('seq_steps')}, "
            f"non-Up {w.get('non_up_from_us')}"
        )
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
