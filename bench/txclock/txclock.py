#!/usr/bin/python3
"""Kernel transmit clock prototype (issue 15): recirculating tick frames in a shaped veth loop.

A prototype of the clock, not the product: the rig behind docs/txclock.md. Run inside netns txc-a by
bench/txclock/run.sh, which builds the topology, takes the integration-test lock and cleans up:

    ip netns exec txc-a bench/txclock/txclock.py --out DIR --bpffs BPFFS EXPERIMENT...

Topology (made by run.sh):
  txc-a:  lpA <-> lpB   the shaped loop (root qdisc on lpA, tick program on lpB ingress)
          rfA <-> rfB   reference loop (plain tbf, one frame: the environment witness, group REF)
          ra  <-> rb    "real" link; rb lives in txc-b (UDP socket on 3784, witness program on rb ingress)

Results: DIR/results.json (rewritten after every scenario); the log goes to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes as ct
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from bcc import BPF
from bcc.libbcc import lib

HERE = Path(__file__).resolve().parent
NS_B = "txc-b"
MAGIC = 0x7BFD71C0
DISCR_BASE = 0x10000
REF_SLOT = 1023
W_NB, W_BUCKET_NS, W_GROUPS = 15000, 10000, 3  # as in witness.c
RUN, SEND, DROP_ONCE = 1, 2, 4  # TXC_RUN, TXC_SEND, TXC_DROP_ONCE in tick.c
CNAMES = ["tick", "sent", "stale", "gated", "clone_err", "resize_err", "not_tick", "early_skip"]
SO_SNDBUFFORCE = 32  # not in Python's socket module
MS = 1_000_000
BFD_PORT = 3784
lib.bpf_obj_pin.argtypes = [ct.c_int, ct.c_char_p]
lib.bpf_obj_pin.restype = ct.c_int


class Tick(NamedTuple):
    """Where a session's tick frame circulates: its htb class (skb->priority) and its length range."""

    classid: int
    lo: int
    hi: int


def sh(cmd: str, *, check: bool = True, stdin: str | None = None, timeout: float = 120) -> str:
    r = subprocess.run(
        cmd, shell=True, capture_output=True, text=True, input=stdin, timeout=timeout, check=False
    )
    if check and r.returncode:
        raise RuntimeError(f"{cmd}: {r.stderr.strip()}")
    return r.stdout


def tc_batch(lines: list[str]) -> None:
    if lines and lines[0].startswith("qdisc replace dev lpA root"):
        sh(
            "tc qdisc del dev lpA root", check=False
        )  # htb cannot be 'replaced' by htb; drops stopped frames too
        lines = [lines[0].replace("qdisc replace", "qdisc add", 1), *lines[1:]]
    sh("tc -batch -", stdin="\n".join(lines) + "\n")


def link(dev: str, ns: str | None = None) -> tuple[int, bytes]:
    j = json.loads(sh(f"ip {'-n ' + ns if ns else ''} -j link show dev {dev}"))[0]
    return j["ifindex"], bytes.fromhex(j["address"].replace(":", ""))


def ipv4(dev: str, ns: str | None = None) -> bytes:
    j = json.loads(sh(f"ip {'-n ' + ns if ns else ''} -j -4 addr show dev {dev}"))[0]
    return socket.inet_aton(j["addr_info"][0]["local"])


def log(*a: object) -> None:
    print(time.strftime("%H:%M:%S"), *a, flush=True)


class Rig:
    def __init__(self, out: Path, pin: Path) -> None:
        self.out, self.pin = out, pin
        self.results: dict[str, Any] = {}
        self.lpA, self.lpA_mac = link("lpA")
        self.lpB, self.lpB_mac = link("lpB")
        self.rfA, self.rfA_mac = link("rfA")
        self.rfB, self.rfB_mac = link("rfB")
        self.ra, self.ra_mac = link("ra")
        self.rb, self.rb_mac = link("rb", NS_B)
        self.ra_addr, self.rb_addr = ipv4("ra"), ipv4("rb", NS_B)
        t0 = time.monotonic()
        self.b = BPF(src_file=str(HERE / "tick.c"))
        self.w = BPF(src_file=str(HERE / "witness.c"))
        self.compile_s = time.monotonic() - t0
        self.fn = self.b.load_func("txc_tick", BPF.SCHED_CLS)
        self.wfn = self.w.load_func("wit", BPF.SCHED_CLS)
        for name, fd in (("tick", self.fn.fd), ("wit", self.wfn.fd)):
            p = pin / name
            p.unlink(missing_ok=True)
            if lib.bpf_obj_pin(fd, str(p).encode()) != 0:
                raise RuntimeError(f"pin {p}")
        for dev in ("lpB", "rfB"):
            sh(f"tc qdisc replace dev {dev} clsact")
            sh(f"tc filter replace dev {dev} ingress pref 1 handle 1 bpf da pinned {pin}/tick")
        sh(f"tc -n {NS_B} qdisc replace dev rb clsact")
        sh(f"tc -n {NS_B} filter replace dev rb ingress pref 1 handle 1 bpf da pinned {pin}/wit")
        self.cfg = self.b["txc_cfg"]
        self.state = self.b["txc_state"]
        self.gate = self.b["txc_gate"]
        self.cnt = self.b["txc_cnt"]
        self.gen: dict[int, int] = {}
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 64 << 20)  # circulating frames keep their sk
        self.sock.bind(("lpA", 0))
        self.rsock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        self.rsock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 1 << 20)
        self.rsock.bind(("rfA", 0))
        self.set_gate(0, 0)

    # ---- results ----------------------------------------------------------
    def record(self, key: str, value: Any) -> None:
        self.results[key] = value
        self.save()

    def save(self) -> None:
        (self.out / "results.json").write_text(json.dumps(self.results, indent=1, default=str))

    # ---- maps -------------------------------------------------------------
    def ctrl(self, slot: int, period_ns: int) -> bytes:
        us = period_ns // 1000
        return struct.pack(
            ">BBBBIIIII", 1 << 5, 3 << 6, 3, 24, DISCR_BASE + slot, 0xABC00000 + slot, us, us, 0
        )

    def set_cfg(
        self,
        slot: int,
        flags: int,
        tick: Tick,
        period_ns: int,
        *,
        loop_if: int | None = None,
        min_gap_ns: int = 0,
    ) -> None:
        gen = self.gen.get(slot, 1)
        data = struct.pack(
            "<IIIIIHH12s4s4s2s2sBB2x24s4xQ",
            flags,
            gen,
            tick.classid,
            loop_if or self.lpA,
            self.ra,
            tick.lo,
            tick.hi,
            self.rb_mac + self.ra_mac,
            self.ra_addr,
            self.rb_addr,
            struct.pack(">H", 49152 + slot),
            struct.pack(">H", BFD_PORT),
            0xC0,
            255,
            self.ctrl(slot, period_ns),
            min_gap_ns,
        )
        leaf = self.cfg.Leaf()
        if ct.sizeof(leaf) != len(data):
            raise RuntimeError(f"struct txc_cfg is {ct.sizeof(leaf)} bytes, packed {len(data)}")
        ct.memmove(ct.addressof(leaf), data, len(data))
        self.cfg[ct.c_int(slot)] = leaf

    def _change_cfg(self, slot: int, **fields: int) -> None:
        leaf = self.cfg[ct.c_int(slot)]
        for k, v in fields.items():
            setattr(leaf, k, v)
        self.cfg[ct.c_int(slot)] = leaf

    def set_flags(self, slot: int, flags: int) -> None:
        self._change_cfg(slot, flags=flags)

    def set_classid(self, slot: int, classid: int) -> None:
        self._change_cfg(slot, classid=classid)

    def set_min_gap(self, slot: int, min_gap_ns: int) -> None:
        self._change_cfg(slot, min_gap_ns=min_gap_ns)

    def bump_gen(self, slot: int) -> None:
        self.gen[slot] = self.gen.get(slot, 1) + 1
        self._change_cfg(slot, gen=self.gen[slot])

    def new_gen(self, slot: int) -> None:
        """Before a session's (first) start: frames of any earlier generation die at their next release."""
        self.gen[slot] = self.gen.get(slot, 0) + 1

    def set_gate(self, hb: int, deadman: int) -> None:
        leaf = self.gate.Leaf()
        leaf.heartbeat_ns, leaf.deadman_ns = hb, deadman
        self.gate[ct.c_int(0)] = leaf

    def st(self, slot: int) -> Any:
        return self.state[ct.c_int(slot)]

    def counters(self) -> dict[str, int]:
        return {n: sum(self.cnt[ct.c_int(i)]) for i, n in enumerate(CNAMES)}

    def inject(self, slot: int, length: int, *, ref: bool = False) -> None:
        frame = (self.rfB_mac + self.rfA_mac if ref else self.lpB_mac + self.lpA_mac) + struct.pack(
            ">H", 0x88B5
        )
        frame += struct.pack("<III", MAGIC, slot, self.gen.get(slot, 1))
        (self.rsock if ref else self.sock).send(frame.ljust(max(60, length), b"\0"))

    # ---- witness ----------------------------------------------------------
    def wit_reset(self, slots: dict[int, int]) -> None:
        ws, wg = self.w["w_slot"], self.w["w_group"]
        for s, g in slots.items():
            ws[ct.c_int(s)] = ws.Leaf()
            self.state[ct.c_int(s)] = self.state.Leaf()  # tick-side gaps restart too
            wg[ct.c_int(s)] = ct.c_uint(g)

    def wit_hist(self) -> list[int]:
        hist = [0] * (W_GROUPS * W_NB)
        for k, v in self.w["w_hist"].items_lookup_batch():
            hist[getattr(k, "value", k)] = getattr(v, "value", v)
        return hist

    def wit_slots(self, slots: dict[int, int]) -> dict[int, dict[str, int]]:
        ws = self.w["w_slot"]
        per = {s: ws[ct.c_int(s)] for s in slots}
        return {s: {"cnt": v.cnt, "sum": v.sum, "min": v.min, "max": v.max} for s, v in per.items()}

    def wit_count(self, slot: int) -> int:
        return self.w["w_slot"][ct.c_int(slot)].cnt


def pct(hist_g: list[int], q: float) -> float | None:
    tot = sum(hist_g)
    if not tot:
        return None
    acc, want = 0, q * tot
    for i, c in enumerate(hist_g):
        acc += c
        if acc >= want:
            return (i + 0.5) * W_BUCKET_NS / 1e6
    return None


def summarize(
    h0: list[int],
    h1: list[int],
    *,
    per: dict[int, dict[str, int]],
    slots: dict[int, int],
    nominal: dict[int, int],
    window_s: float,
) -> dict[int, dict[str, Any]]:
    """Per group: percentiles (ms), exact max/min from per-slot stats, in-band fraction."""
    out = {}
    for g in sorted(set(slots.values())):
        hg = [h1[g * W_NB + i] - h0[g * W_NB + i] for i in range(W_NB)]
        tot = sum(hg)
        ss = [s for s, gg in slots.items() if gg == g]
        nom = nominal[g]
        lo_b, hi_b = int(0.75 * nom / W_BUCKET_NS), int(nom / W_BUCKET_NS)  # buckets fully in [75 %, 100 %)
        inband = sum(hg[lo_b : hi_b + 1])
        early = sum(hg[:lo_b])
        over105 = sum(hg[int(1.05 * nom / W_BUCKET_NS) + 1 :])
        means = [per[s]["sum"] / per[s]["cnt"] / 1e6 for s in ss if per[s]["cnt"]]
        out[g] = {
            "sessions": len(ss),
            "intervals": tot,
            "nominal_ms": nom / 1e6,
            "expected": round(len(ss) * window_s * 1e9 / nom) if nom else None,
            "p1": pct(hg, 0.01),
            "p50": pct(hg, 0.5),
            "p99": pct(hg, 0.99),
            "p999": pct(hg, 0.999),
            "min": min((per[s]["min"] for s in ss if per[s]["cnt"]), default=0) / 1e6,
            "max": max((per[s]["max"] for s in ss), default=0) / 1e6,
            "frac_75_100": round(inband / tot, 5) if tot else None,
            "frac_below_75": round(early / tot, 5) if tot else None,
            "frac_above_105": round(over105 / tot, 5) if tot else None,
            "session_mean_ms": [round(min(means), 4), round(max(means), 4)] if means else None,
            "sessions_silent": sum(1 for s in ss if not per[s]["cnt"]),
        }
    return out


def softirq_jiffies() -> tuple[int, int]:
    with open("/proc/stat") as f:
        parts = f.readline().split()
    return int(parts[7]), sum(int(x) for x in parts[1:])


def snmp_b() -> dict[str, int]:
    txt = sh(f"ip netns exec {NS_B} cat /proc/net/snmp").splitlines()
    udp = [line.split()[1:] for line in txt if line.startswith("Udp:")]
    return dict(zip(udp[0], map(int, udp[1]), strict=True))


def prog_stats(fd: int) -> tuple[int, int]:
    d = {}
    with open(f"/proc/self/fdinfo/{fd}") as f:
        for line in f:
            k, _, v = line.partition(":")
            d[k.strip()] = v.strip()
    return int(d.get("run_time_ns", 0)), int(d.get("run_cnt", 0))


def backlog_lines(dev: str) -> list[str]:
    return [line.strip() for line in sh(f"tc -s qdisc show dev {dev}").splitlines() if "backlog" in line]


# ---- arrangements ---------------------------------------------------------------
def htb_class(minor: int, rate: int, burst: int) -> str:
    return (
        f"class add dev lpA parent 1: classid 1:{minor:x} htb rate {rate * 8}bit ceil {rate * 8}bit "
        f"burst {burst} cburst {burst} quantum 1514"
    )


def setup_loop(
    mode: str,
    sessions: dict[int, int],
    lmax: int,
    jitter: tuple[float, float] | None = None,
    *,
    burst_us: int = 200,
) -> tuple[dict[int, Tick], list[str]]:
    """sessions: {slot: period_ns}. Returns {slot: Tick} and the tc commands used."""
    cmds, plan = [], {}
    lo_f, hi_f = jitter or (1.0, 1.0)
    lo, hi = int(lmax * lo_f + 0.999), int(lmax * hi_f)
    if mode == "tbf":
        per = next(iter(sessions.values()))
        rate = round(lmax * 1e9 / per)  # one frame's rate: the queue's frames share it
        limit = lmax * (len(sessions) + 8)
        cmds.append(f"qdisc replace dev lpA root tbf rate {rate * 8}bit burst {lmax} limit {limit}")
        plan = {s: Tick(0, lo, hi) for s in sessions}
    else:
        cmds.append("qdisc replace dev lpA root handle 1: htb default 0")
        if mode == "htb-int":
            periods = sorted(set(sessions.values()))
            for i, p in enumerate(periods):
                k = sum(1 for v in sessions.values() if v == p)
                rate = round(k * lmax * 1e9 / p)  # k frames of lmax bytes drain in one period
                minor = 0x10 + i
                cmds.append(htb_class(minor, rate, max(1, round(rate * burst_us / 1e6))))
                cmds.append(f"qdisc add dev lpA parent 1:{minor:x} handle {minor:x}: pfifo limit {k + 64}")
                for s, v in sessions.items():
                    if v == p:
                        plan[s] = Tick(0x10000 | minor, lo, hi)
        elif mode == "htb-sess":
            for s, p in sessions.items():
                rate = round(lmax * 1e9 / p)
                minor = 0x100 + s
                cmds.append(htb_class(minor, rate, max(1, round(rate * burst_us / 1e6))))
                cmds.append(f"qdisc add dev lpA parent 1:{minor:x} handle {minor:x}: pfifo limit 8")
                plan[s] = Tick(0x10000 | minor, lo, hi)
    tc_batch(cmds)
    return plan, cmds


def start_ref(rig: Rig) -> None:
    # Reference: one 1000-byte frame behind a plain tbf at 100000 B/s -> 10 ms.
    sh("tc qdisc replace dev rfA root tbf rate 800000bit burst 1000 limit 10000")
    rig.new_gen(REF_SLOT)
    rig.set_cfg(REF_SLOT, RUN | SEND, Tick(0, 1000, 1000), 10 * MS, loop_if=rig.rfA)
    rig.inject(REF_SLOT, 1000, ref=True)


def stop_all(rig: Rig, slots: list[int], wait_s: float = 0.2) -> None:
    for s in slots:
        rig.set_flags(s, 0)
    time.sleep(wait_s)


def inject_all(rig: Rig, slots: list[int], lmax: int, *, pace_ns: int = 0, new_gen: bool = False) -> None:
    """Inject in batches of 32 frames, then 1 ms: a burst of injections overflows the per-CPU backlog
    (netdev_max_backlog). pace_ns spreads the starts over that time (busy wait) so that per-session
    classes do not fire in phase."""
    t0 = time.perf_counter()
    for i, s in enumerate(slots):
        if pace_ns:
            while time.perf_counter() < t0 + pace_ns / 1e9 * i / len(slots):
                pass
        if new_gen:
            rig.bump_gen(s)
        rig.inject(s, lmax if s != REF_SLOT else 1000, ref=(s == REF_SLOT))
        if i % 32 == 31:
            time.sleep(0.001)


def stress_window(window_s: float) -> None:
    p = subprocess.Popen(
        ["stress-ng", "--cpu", "2", "--sched", "fifo", "--sched-prio", "99", "--timeout", str(window_s)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        p.wait(timeout=window_s + 60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
    time.sleep(0.2)


def run_scenario(
    rig: Rig,
    name: str,
    mode: str,
    sessions: dict[int, int],
    *,
    lmax: int = 1000,
    jitter: tuple[float, float] | None = None,
    window_s: float = 10,
    stress: bool = False,
    cost: bool = False,
    groups: dict[int, int] | None = None,
    min_gap: float = 0.0,
    flags: int = RUN | SEND,
) -> dict[str, Any]:
    """sessions: {slot: period_ns}. Measures with the witness; the reference loop runs alongside."""
    log(f"scenario {name}: mode={mode} n={len(sessions)} lmax={lmax} jitter={jitter} stress={stress}")
    plan, cmds = setup_loop(mode, sessions, lmax, jitter)
    groups = groups or {s: (0 if p == 10 * MS else 1) for s, p in sessions.items()}
    nominal = {0: 10 * MS, 1: 50 * MS, 2: 10 * MS}
    for s, p in sessions.items():
        nominal[groups[s]] = p
    slots = dict(groups)
    slots[REF_SLOT] = 2
    rig.wit_reset(slots)
    for s, p in sessions.items():
        rig.new_gen(s)
        rig.set_cfg(s, flags, plan[s], p, min_gap_ns=int(min_gap * p))
    start_ref(rig)
    longest = max(sessions.values())
    inject_all(rig, list(sessions), lmax, pace_ns=min(sessions.values()) if mode == "htb-sess" else 0)
    time.sleep(0.5 + 2 * longest / 1e9)
    reinjected = 0
    for _ in range(3):  # userspace's check: a session whose frame never ticked (or stopped) gets a new one
        now = time.monotonic_ns()
        dead = [
            s
            for s in [*sessions, REF_SLOT]
            if now - rig.st(s).last_tick_ns > 3 * (sessions.get(s) or 10 * MS)
        ]
        if not dead:
            break
        inject_all(rig, dead, lmax, new_gen=True)
        reinjected += len(dead)
        time.sleep(0.3 + 2 * longest / 1e9)
    rig.wit_reset(slots)  # drop the start-up intervals
    time.sleep(0.05)
    h0 = rig.wit_hist()
    c0, u0, sq0, sn0 = rig.counters(), snmp_b(), softirq_jiffies(), time.monotonic()
    if cost:
        sh("sysctl -qw kernel.bpf_stats_enabled=1")
        r0 = prog_stats(rig.fn.fd), prog_stats(rig.wfn.fd)
    if stress:
        stress_window(window_s)
    else:
        time.sleep(window_s)
    elapsed = time.monotonic() - sn0
    now = time.monotonic_ns()
    dead_end = sum(1 for s in sessions if now - rig.st(s).last_tick_ns > 3 * sessions[s])
    if cost:
        r1 = prog_stats(rig.fn.fd), prog_stats(rig.wfn.fd)
        sh("sysctl -qw kernel.bpf_stats_enabled=0")
    c1, u1, sq1 = rig.counters(), snmp_b(), softirq_jiffies()
    h1, p1 = rig.wit_hist(), rig.wit_slots(slots)
    tick_gaps: dict[int, tuple[int, int]] = {}
    for s, g in slots.items():
        v = rig.st(s)
        lo_, hi_ = tick_gaps.get(g, (1 << 62, 0))
        tick_gaps[g] = (min(lo_, v.min_gap_ns or lo_), max(hi_, v.max_gap_ns))
    res = {
        "reinjected_at_start": reinjected,
        "dead_at_end": dead_end,
        "min_gap": min_gap,
        "mode": mode,
        "sessions": len(sessions),
        "lmax": lmax,
        "jitter": jitter,
        "stress": stress,
        "window_s": round(elapsed, 2),
        "tc": cmds[:3] + ([f"... {len(cmds) - 3} more"] if len(cmds) > 3 else []),
        "groups": summarize(h0, h1, per=p1, slots=slots, nominal=nominal, window_s=elapsed),
        "counters": {k: c1[k] - c0[k] for k in c1},
        "peer_udp": {
            k: u1[k] - u0[k] for k in ("InDatagrams", "InCsumErrors", "InErrors", "NoPorts", "RcvbufErrors")
        },
        "tick_side_gap_ms": {g: [round(a / 1e6, 3), round(b / 1e6, 3)] for g, (a, b) in tick_gaps.items()},
        "softirq_cpu_pct_of_vm": round(100 * (sq1[0] - sq0[0]) / max(1, sq1[1] - sq0[1]), 2),
        "softirq_pct_of_one_core": round(
            (sq1[0] - sq0[0]) / elapsed, 2
        ),  # USER_HZ 100: jiffies/s = % of a core
    }
    if cost:
        (t0_, n0), (tw0, nw0) = r0
        (t1_, n1), (tw1, nw1) = r1
        res["tick_prog"] = {
            "runs": n1 - n0,
            "avg_ns": round((t1_ - t0_) / max(1, n1 - n0), 1),
            "cpu_pct_of_one_core": round(100 * (t1_ - t0_) / (elapsed * 1e9), 3),
        }
        res["witness_prog"] = {"runs": nw1 - nw0, "avg_ns": round((tw1 - tw0) / max(1, nw1 - nw0), 1)}
    stop_all(rig, [*sessions, REF_SLOT], wait_s=0.1 + 2 * longest / 1e9)
    res["after_stop_backlog"] = backlog_lines("lpA")[:2]
    rig.record(name, res)
    for k, v in res["groups"].items():
        log(
            f"  group {k}: n={v['sessions']} iv={v['intervals']}/{v['expected']} "
            f"p50={v['p50']} p99={v['p99']} max={v['max']:.3f} min={v['min']:.3f} "
            f"in75-100={v['frac_75_100']} means={v['session_mean_ms']} silent={v['sessions_silent']}"
        )
    log(f"  reinjected_at_start={reinjected} dead_at_end={dead_end}")
    log(f"  tick-side min/max gap per group (ms): {res['tick_side_gap_ms']}")
    log(
        f"  counters={res['counters']} udp={res['peer_udp']} softirq%={res['softirq_cpu_pct_of_vm']}"
        + (f" tick={res.get('tick_prog')}" if cost else "")
    )
    return res


def every(n: int, period_ns: int = 10 * MS) -> dict[int, int]:
    return dict.fromkeys(range(n), period_ns)


def mixed(n: int) -> dict[int, int]:
    """Half the sessions at 10 ms, half at 50 ms (interleaved)."""
    return {s: (10 * MS if s % 2 == 0 else 50 * MS) for s in range(n)}


# ---- experiments (run.sh NAME runs exp_NAME) ----------------------------------------
def exp_smoke(rig: Rig) -> None:
    run_scenario(rig, "smoke", "htb-sess", {0: 10 * MS}, window_s=2)


def exp_single(rig: Rig) -> None:
    for mode in ("htb-sess", "tbf"):
        run_scenario(rig, f"E1-{mode}-idle", mode, {0: 10 * MS})
        run_scenario(rig, f"E1-{mode}-stress", mode, {0: 10 * MS}, window_s=20, stress=True)


def exp_many(rig: Rig) -> None:
    run_scenario(rig, "E2-tbf-16-shared", "tbf", every(16), window_s=5)
    for n in (16, 256):
        for mode in ("htb-int", "htb-sess"):
            run_scenario(rig, f"E2-{mode}-{n}", mode, every(n))
    for mode in ("htb-int", "htb-sess"):
        run_scenario(rig, f"E2-{mode}-mix", mode, mixed(256))
    run_scenario(rig, "E2-htb-int-256-stress", "htb-int", every(256), window_s=20, stress=True)


def exp_jitter(rig: Rig) -> None:
    j = (0.75, 1.0)
    run_scenario(rig, "E3-htb-sess-1-jitter", "htb-sess", {0: 10 * MS}, jitter=j)
    run_scenario(rig, "E3-htb-sess-256-jitter", "htb-sess", every(256), jitter=j, cost=True)
    run_scenario(rig, "E3-htb-sess-256-jitter90", "htb-sess", every(256), jitter=(0.75, 0.9))
    run_scenario(rig, "E3-htb-int-256-jitter", "htb-int", every(256), jitter=j, cost=True)
    run_scenario(rig, "E3-htb-sess-mix-jitter", "htb-sess", mixed(256), jitter=j)
    run_scenario(
        rig,
        "E3-htb-sess-256-jitter-stress",
        "htb-sess",
        every(256),
        jitter=j,
        window_s=20,
        stress=True,
        cost=True,
    )


def exp_fine(rig: Rig) -> None:
    for per_us, lmax in ((1000, 1000), (3333, 1000), (3300, 1000), (100_000, 1000)):
        run_scenario(
            rig,
            f"E2b-htb-sess-{per_us}us",
            "htb-sess",
            {0: per_us * 1000},
            lmax=lmax,
            window_s=5,
            groups={0: 0},
        )


def exp_baseline(rig: Rig) -> None:
    s0 = softirq_jiffies()
    time.sleep(10)
    s1 = softirq_jiffies()
    res = {"softirq_cpu_pct_of_vm": round(100 * (s1[0] - s0[0]) / max(1, s1[1] - s0[1]), 2)}
    rig.record("E4-baseline-no-sessions", res)
    log("baseline softirq%", res)


def exp_control(rig: Rig) -> None:
    """Start, change interval, loss + detection + re-inject, duplicate protection, stop."""
    res: dict[str, Any] = {}
    tc_batch(
        [
            "qdisc replace dev lpA root handle 1: htb default 0",
            htb_class(0x10, 100_000, 20),
            "qdisc add dev lpA parent 1:10 handle 10: pfifo limit 64",
            htb_class(0x50, 20_000, 4),
            "qdisc add dev lpA parent 1:50 handle 50: pfifo limit 64",
        ]
    )
    s = 7
    rig.new_gen(s)
    rig.wit_reset({s: 0})
    rig.set_cfg(s, RUN | SEND, Tick(0x10010, 1000, 1000), 10 * MS)
    t0 = time.monotonic_ns()
    rig.inject(s, 1000)
    for _ in range(200):
        if rig.st(s).sent:
            break
        time.sleep(0.0005)
    res["start_first_send_ms"] = (rig.st(s).last_tick_ns - t0) / 1e6

    def rate_over(sec: float) -> float:
        a = rig.st(s).ticks
        time.sleep(sec)
        return (rig.st(s).ticks - a) / sec

    res["ticks_per_s_class_10ms"] = rate_over(1.0)
    # Change the interval: the program puts the frame into the class the map names on its next release.
    rig.set_classid(s, 0x10050)
    time.sleep(0.2)
    res["ticks_per_s_class_50ms"] = rate_over(1.0)
    rig.set_classid(s, 0x10010)
    time.sleep(0.2)
    res["ticks_per_s_back_10ms"] = rate_over(1.0)
    # Loss: the program drops the frame once (stands in for a queue overflow / allocation failure).
    rig.w["w_slot"][ct.c_int(s)] = rig.w["w_slot"].Leaf()  # witness only: the state's last_tick_ns must stay
    time.sleep(0.05)
    rig.set_flags(s, RUN | SEND | DROP_ONCE)
    detected = None
    for _ in range(1000):  # userspace (or the sweep) checks last_tick_ns against 3 x interval
        now = time.monotonic_ns()
        if now - rig.st(s).last_tick_ns > 3 * 10 * MS:
            detected = now
            break
        time.sleep(0.002)
    last_tick = rig.st(s).last_tick_ns
    rig.bump_gen(s)
    rig.set_flags(s, RUN | SEND)
    rig.inject(s, 1000)
    time.sleep(0.1)
    res["loss_detect_ms_after_last_tick"] = (detected - last_tick) / 1e6 if detected else None
    res["loss_gap_on_wire_ms"] = rig.w["w_slot"][ct.c_int(s)].max / 1e6
    res["ticks_per_s_after_reinject"] = rate_over(1.0)
    # Duplicate: a second frame of the same generation; a gen bump kills the older one.
    rig.inject(s, 1000)
    time.sleep(0.1)
    res["ticks_per_s_two_frames_same_gen"] = rate_over(1.0)
    rig.bump_gen(s)
    rig.inject(s, 1000)
    time.sleep(0.1)
    res["ticks_per_s_after_gen_bump_reinject"] = rate_over(1.0)
    # Stop.
    c0 = rig.counters()["stale"]
    rig.set_flags(s, 0)
    time.sleep(0.1)
    res["stale_drops_on_stop"] = rig.counters()["stale"] - c0
    res["ticks_per_s_after_stop"] = rate_over(0.5)
    res["backlog_after_stop"] = backlog_lines("lpA")
    rig.record("E5-control", res)
    log("control", json.dumps(res))


def exp_classchange(rig: Rig) -> None:
    """Per-session class: change the session's interval with 'tc class change' (no re-inject)."""
    res: dict[str, Any] = {}
    s = 5
    plan, _ = setup_loop("htb-sess", {s: 10 * MS}, 1000, (0.77, 0.98))
    rig.new_gen(s)
    rig.set_cfg(s, RUN | SEND, plan[s], 10 * MS, min_gap_ns=int(0.75 * 10 * MS))
    rig.inject(s, 1000)
    time.sleep(0.2)

    def rate_over(sec: float) -> float:
        a = rig.st(s).ticks
        time.sleep(sec)
        return round((rig.st(s).ticks - a) / sec, 1)

    minor = 0x100 + s
    res["ticks_per_s_10ms_initial"] = rate_over(1.0)  # the loop's last step rewrites ticks_per_s_10ms
    for per_ms in (50, 1000, 10):
        rate = round(1000 * 1e9 / (per_ms * MS))
        burst = max(1, round(rate * 200e-6))
        cmd = "tc " + htb_class(minor, rate, burst).replace("class add", "class change", 1)
        t0 = time.monotonic_ns()
        sh(cmd)
        # the map's min_gap (0.75 x interval) follows the interval
        rig.set_min_gap(s, int(0.75 * per_ms * MS))
        res[f"tc_class_change_ms_to_{per_ms}"] = round((time.monotonic_ns() - t0) / 1e6, 2)
        time.sleep(min(1.0, 2 * per_ms / 1000))
        res[f"ticks_per_s_{per_ms}ms"] = rate_over(2.0 if per_ms >= 1000 else 1.0)
        res[f"cmd_{per_ms}"] = cmd
    rig.set_flags(s, 0)
    time.sleep(0.05)
    rig.record("E5b-classchange", res)
    log("classchange", json.dumps(res))


def exp_gate(rig: Rig) -> None:
    tc_batch(
        [
            "qdisc replace dev lpA root handle 1: htb default 0",
            htb_class(0x10, 100_000, 20),
            "qdisc add dev lpA parent 1:10 handle 10: pfifo limit 64",
        ]
    )
    s = 9
    rig.new_gen(s)
    rig.wit_reset({s: 0})
    rig.set_gate(time.monotonic_ns(), 50 * MS)
    rig.set_cfg(s, RUN | SEND, Tick(0x10010, 1000, 1000), 10 * MS)
    rig.inject(s, 1000)
    phases = []

    def phase(name: str, sec: float, *, beat: bool) -> None:
        a, w0 = rig.st(s), rig.wit_count(s)
        a = (a.ticks, a.sent, a.gated)
        end = time.monotonic() + sec
        while time.monotonic() < end:
            if beat:
                rig.set_gate(time.monotonic_ns(), 50 * MS)
            time.sleep(0.01)
        b = rig.st(s)
        phases.append(
            {
                "phase": name,
                "ticks": b.ticks - a[0],
                "sent": b.sent - a[1],
                "gated": b.gated - a[2],
                "witness_rx": rig.wit_count(s) - w0,
            }
        )

    phase("heartbeat 1 s", 1.0, beat=True)
    phase("engine silent 1 s (deadman 50 ms)", 1.0, beat=False)
    phase("heartbeat again 1 s", 1.0, beat=True)
    rig.set_flags(s, 0)
    rig.set_gate(0, 0)
    time.sleep(0.1)
    rig.record("E6-gate", phases)
    log("gate", json.dumps(phases))


def exp_round2(rig: Rig) -> None:
    j = (0.75, 1.0)
    exp_baseline(rig)
    run_scenario(rig, "R2-htb-sess-16", "htb-sess", every(16))
    run_scenario(rig, "R2-htb-int-256", "htb-int", every(256), cost=True)
    run_scenario(rig, "R2-htb-sess-256", "htb-sess", every(256), cost=True)
    run_scenario(rig, "R2-htb-sess-256-jitter", "htb-sess", every(256), jitter=j, cost=True)
    run_scenario(rig, "R2-htb-sess-256-jitter-L200", "htb-sess", every(256), lmax=200, jitter=j, cost=True)
    run_scenario(rig, "R2-htb-int-256-L200", "htb-int", every(256), lmax=200, cost=True)
    run_scenario(rig, "R2-tbf-1-jitter", "tbf", {0: 10 * MS}, jitter=j)
    run_scenario(rig, "R2-htb-sess-1000-jitter-L200", "htb-sess", every(1000), lmax=200, jitter=j, cost=True)
    run_scenario(rig, "R2-htb-int-1000-L200", "htb-int", every(1000), lmax=200, cost=True)
    run_scenario(
        rig,
        "R2-htb-sess-256-jitter-L200-stress",
        "htb-sess",
        every(256),
        lmax=200,
        jitter=j,
        cost=True,
        window_s=20,
        stress=True,
    )


def exp_round3(rig: Rig) -> None:
    m = (0.77, 0.98)  # 200 us of margin each side for hrtimer/softirq noise
    run_scenario(rig, "R3-htb-sess-256-jit77-98", "htb-sess", every(256), jitter=m, cost=True)
    run_scenario(
        rig, "R3-htb-sess-256-jit77-98-skip75", "htb-sess", every(256), jitter=m, cost=True, min_gap=0.75
    )
    run_scenario(rig, "R3-htb-sess-mix-jit77-98-skip75", "htb-sess", mixed(256), jitter=m, min_gap=0.75)
    run_scenario(rig, "R3-htb-sess-16-jit77-98-skip75", "htb-sess", every(16), jitter=m, min_gap=0.75)
    run_scenario(rig, "R3-htb-sess-1-jit77-98-skip75", "htb-sess", {0: 10 * MS}, jitter=m, min_gap=0.75)
    run_scenario(
        rig,
        "R3-htb-sess-1000-L200-jit77-98-skip75",
        "htb-sess",
        every(1000),
        lmax=200,
        jitter=m,
        cost=True,
        min_gap=0.75,
    )
    run_scenario(rig, "R3-htb-int-1000-L200", "htb-int", every(1000), lmax=200, cost=True)
    run_scenario(
        rig,
        "R3-htb-sess-256-jit77-98-skip75-stress",
        "htb-sess",
        every(256),
        jitter=m,
        cost=True,
        min_gap=0.75,
        window_s=20,
        stress=True,
    )
    run_scenario(rig, "R3-htb-int-256-stress", "htb-int", every(256), cost=True, window_s=20, stress=True)


def exp_round4(rig: Rig) -> None:
    m = (0.77, 0.98)
    exp_baseline(rig)
    run_scenario(
        rig,
        "R4-htb-sess-256-jit-skip-NOSEND",
        "htb-sess",
        every(256),
        jitter=m,
        cost=True,
        min_gap=0.75,
        flags=RUN,
    )
    run_scenario(
        rig,
        "R4-htb-sess-256-L200-jit-skip",
        "htb-sess",
        every(256),
        lmax=200,
        jitter=m,
        cost=True,
        min_gap=0.75,
    )
    run_scenario(
        rig,
        "R4-htb-sess-512-L200-jit-skip",
        "htb-sess",
        every(512),
        lmax=200,
        jitter=m,
        cost=True,
        min_gap=0.75,
    )
    run_scenario(
        rig, "R4-htb-sess-256-jit-skip-again", "htb-sess", every(256), jitter=m, cost=True, min_gap=0.75
    )


def exp_limits(rig: Rig) -> None:
    """Frame length limits on the loop: below 60 bytes, at and above MTU+14, with a raised MTU."""
    res = {}
    for mtu, ln in ((1500, 40), (1500, 1514), (1500, 1515), (1500, 1600), (9000, 9014), (9000, 9100)):
        sh(f"ip link set dev lpA mtu {mtu}; ip link set dev lpB mtu {mtu}")
        tc_batch(
            [
                "qdisc replace dev lpA root handle 1: htb default 0",
                htb_class(0x10, ln * 100, ln // 50 + 1),
                "qdisc add dev lpA parent 1:10 handle 10: pfifo limit 64",
            ]
        )
        s = 11
        rig.new_gen(s)
        rig.set_cfg(s, RUN | SEND, Tick(0x10010, ln, ln), 10 * MS)
        rig.state[ct.c_int(s)] = rig.state.Leaf()
        rig.inject(s, 100)  # injected small; the program resizes it to ln on its first pass
        time.sleep(0.5)
        v = rig.st(s)
        res[f"mtu{mtu}-len{ln}"] = {
            "ticks_in_0_5s": v.ticks,
            "sent": v.sent,
            "min_gap_ms": v.min_gap_ns / 1e6,
            "max_gap_ms": v.max_gap_ns / 1e6,
            "counters": rig.counters(),
        }
        rig.set_flags(s, 0)
        time.sleep(0.05)
    sh("ip link set dev lpA mtu 1500; ip link set dev lpB mtu 1500")
    rig.record("E2c-limits", res)
    log("limits", json.dumps(res))


def softnet_dropped() -> int:
    """Sum over CPUs of /proc/net/softnet_stat's second column (the per-CPU backlog's drops)."""
    with open("/proc/net/softnet_stat") as f:
        return sum(int(line.split()[1], 16) for line in f if line.strip())


def exp_backlog(rig: Rig) -> None:
    """What drops the frames at 1000 sessions: 1000 frames into one htb class per interval (L 200), then
    lpB's rx_dropped, the softnet drops and the dead sessions 0.5 s later. The full tc/ip/softnet text
    goes to OUT/backlog.txt."""
    sess = every(1000)
    plan, _ = setup_loop("htb-int", sess, 200)
    try:
        for s in sess:
            rig.new_gen(s)
            rig.set_cfg(s, RUN | SEND, plan[s], 10 * MS)
        softnet0, text0 = softnet_dropped(), sh("cat /proc/net/softnet_stat")
        rx0 = json.loads(sh("ip -s -j link show dev lpB"))[0]["stats64"]["rx"]["dropped"]
        c0 = rig.counters()
        inject_all(rig, list(sess), 200)
        time.sleep(0.5)
        now = time.monotonic_ns()
        dead = [s for s in sess if now - rig.st(s).last_tick_ns > 30 * MS]
        text1 = sh("tc -s class show dev lpA; tc -s qdisc show dev lpA; ip -s link show dev lpB")
        text1 += sh("cat /proc/net/softnet_stat")
        rx1 = json.loads(sh("ip -s -j link show dev lpB"))[0]["stats64"]["rx"]["dropped"]
        c1 = rig.counters()
        res = {
            "sessions": len(sess),
            "dead_after_0_5s": len(dead),
            "dead_first": dead[:10],
            "dead_last": dead[-10:],
            "ticks_of_slot_0_3": [rig.st(s).ticks for s in range(4)],
            "lpB_rx_dropped": rx1 - rx0,
            "softnet_dropped": softnet_dropped() - softnet0,
            "counters": {k: c1[k] - c0[k] for k in c1},
        }
    finally:
        stop_all(rig, list(sess))
    (rig.out / "backlog.txt").write_text(f"softnet_stat before:\n{text0}\nafter 0.5 s:\n{text1}")
    rig.record("backlog", res)
    log("backlog", json.dumps(res))


EXPS: dict[str, Callable[[Rig], None]] = {
    "smoke": exp_smoke,
    "single": exp_single,
    "many": exp_many,
    "jitter": exp_jitter,
    "fine": exp_fine,
    "baseline": exp_baseline,
    "round2": exp_round2,
    "round3": exp_round3,
    "round4": exp_round4,
    "limits": exp_limits,
    "control": exp_control,
    "gate": exp_gate,
    "classchange": exp_classchange,
    "backlog": exp_backlog,
}


def _terminate(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # run.sh's cleanup sends SIGTERM: stop the sessions and save (finally)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--out", type=Path, default=os.environ.get("TXC_OUT"), help="results directory (env TXC_OUT)"
    )
    ap.add_argument(
        "--bpffs", type=Path, default=os.environ.get("TXC_BPFFS"), help="a mounted bpffs (env TXC_BPFFS)"
    )
    ap.add_argument("experiments", nargs="+", choices=sorted(EXPS), metavar="EXPERIMENT")
    args = ap.parse_args()
    if args.out is None or args.bpffs is None:
        ap.error("--out and --bpffs (or TXC_OUT and TXC_BPFFS) are required")
    args.out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _terminate)
    rig = Rig(args.out, args.bpffs)
    rig.results["_meta"] = {
        "kernel": os.uname().release,
        "ncpu": os.cpu_count(),
        "compile_s": round(rig.compile_s, 2),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "experiments": args.experiments,
    }
    try:
        for e in args.experiments:
            EXPS[e](rig)
    finally:
        for s in list(rig.gen):
            with contextlib.suppress(Exception):  # best effort: the namespaces go away next anyway
                rig.set_flags(s, 0)
        rig.set_gate(0, 0)
        time.sleep(0.3)
        rig.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
