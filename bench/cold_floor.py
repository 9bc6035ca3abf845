"""What a cold packet pays for each piece of memory an XDP program touches: the floor under fastpath_cost.

At about 100 packets/s every run of an XDP program starts cold, and in this VM
the per-packet figure is made of what it has to fetch more than of what it
computes. This bench attaches several small programs at once, each on a veth
pair of its own, all of them the bare reflector (bench/xdp_reflector.py: parse,
swap MACs, XDP_TX) plus one shape of map access:

* ``bare``         nothing more: the floor fastpath_cost compares with;
* ``line_small``   one cache line of a 32-element array (kmalloc'd: the kernel's
  linear mapping, large pages);
* ``lines3_small`` three cache lines of that array's element;
* ``line_large``   one cache line of a 4096-element array (vmalloc'd: 4 KiB pages
  of their own, a page walk when the TLB has lost them);
* ``separate``     what the engine's control path touches, with its own layouts
  and maps (bfd_abi.h; bpf/maps.h): ``slot_cfg`` (4096, plain), ``slot_state``
  (4096, mmapable), ``gate`` and the per-CPU ``counters``, the same fields read
  and written, the counters added atomically — its logic left out;
* ``slot``         the same fields with both structures in one element of one
  mmapable array (each on its own cache lines, 512 bytes an element: never
  across two pages), the layout tried and not kept in session 27
  (docs/benchmarks.md, "What a cold packet pays for");
* ``slot_alone``   ``slot`` without the gate and the per-CPU counter: what those two
  lines add.

Each gets 100 IPv4 echo frames/s (UDP 3785) from the peer namespace; within a
tick the order in which the programs are fed rotates, because the first frame
after the sender wakes finds everything colder than the ones after it (measured
here: the same bare program cost 2.7 times as much when always fed first). ns
per packet = Δrun_time_ns / Δrun_cnt of each program over a window (fdinfo,
``kernel.bpf_stats_enabled=1``, the old value restored), medians over
``--rounds`` windows; "extra" is a shape's median less bare's.

    sudo .venv/bin/python bench/cold_floor.py [--seconds 5] [--rounds 5] [--modes generic,native]
"""

from __future__ import annotations

import argparse
import select
import statistics
import subprocess
import sys
import time
from typing import Any

import benchlib
from benchlib import REPO
from fastpath_cost import Injector, echo_frame
from xdp_reflector import ANSWER, INCLUDES, PARSE

from harness.netns import Topology, attach_xdp_pass

SHAPES = ("bare", "line_small", "lines3_small", "line_large", "separate", "slot", "slot_alone")
RATE = 100  # frames/s into each program: a 10 ms session's cadence
FLAGS = {"generic": 2, "native": 4}
SLOT = 0  # the slot an engine's first session gets (fastpath/slots.py)

PROGRAM = (
    INCLUDES
    + r"""
#include "bfd_abi.h"

struct small { __u8 b[192]; };
BPF_ARRAY(small, struct small, 32);
BPF_ARRAY(large, struct small, BFD_MAX_SESSIONS);
BPF_ARRAY(slot_cfg, struct bfd_cfg, BFD_MAX_SESSIONS);
BPF_F_TABLE("array", __u32, struct bfd_state, slot_state, BFD_MAX_SESSIONS, BPF_F_MMAPABLE);
struct slot {
	struct bfd_cfg cfg;
	struct bfd_state st __attribute__((aligned(64)));
} __attribute__((aligned(512)));
BPF_F_TABLE("array", __u32, struct slot, slots, BFD_MAX_SESSIONS, BPF_F_MMAPABLE);
BPF_ARRAY(gate, struct bfd_gate, 1);
BPF_PERCPU_ARRAY(counters, __u64, BFD_C_MAX);

static __always_inline int touch(struct bfd_cfg *c, struct bfd_state *st, void *eth, __u32 local, int alone)
{
	__u32 zero = 0, ci = BFD_C_XDP_TX;
	struct bfd_gate none = {}, *g = alone ? &none : gate.lookup(&zero);
	__u64 spare = 0, *n = alone ? &spare : counters.lookup(&ci);

	if (!g || !n)
		return XDP_PASS;
	/* The reads of the control path: flags, discriminator, path, then the steady packet and our reply. */
	if (!(c->flags & BFD_CFG_ACTIVE) || c->local_discr == 0 || c->peer[15] == 1 || c->ifindex == 1 ||
		c->multihop || c->expect[0] == 1 || c->expect[23] == 1 || c->reply[0] == 1 || c->sport == 1)
		return XDP_DROP;
	__u64 now = bpf_ktime_get_ns();
	if (g->deadman_ns && now - g->heartbeat_ns > g->deadman_ns)
		return XDP_PASS;
	st->last_rx_ns = now;
	st->rx_ifindex = 1;
	__builtin_memcpy(st->rx_eth, eth, sizeof(st->rx_eth));
	__builtin_memcpy(st->rx_local + 12, &local, 4);
	__sync_fetch_and_add(&st->rx_packets, 1);
	__sync_fetch_and_add(&st->rx_bytes, BFD_CONTROL_LEN);
	if (st->expired_epoch == c->epoch + 1)
		return XDP_DROP;
	__u64 last = st->last_ktx_ns;
	if (now - last < c->min_gap_ns || __sync_val_compare_and_swap(&st->last_ktx_ns, last, now) != last)
		return XDP_DROP;
	__sync_fetch_and_add(&st->ktx_packets, 1);
	__sync_fetch_and_add(&st->ktx_bytes, BFD_CONTROL_LEN);
	*n += 1;
	return XDP_TX;
}

int floor_reflect(struct xdp_md *ctx)
{"""
    + PARSE
    + r"""
	__u32 k = SLOT;

#if SHAPE == 1 || SHAPE == 2
	struct small *s = small.lookup(&k);
	if (!s)
		return XDP_PASS;
	if (s->b[0] == 1 || (SHAPE == 2 && (s->b[64] == 1 || s->b[128] == 1)))
		return XDP_DROP;
	s->b[8] += 1;
#elif SHAPE == 3
	struct small *s = large.lookup(&k);
	if (!s)
		return XDP_PASS;
	if (s->b[0] == 1)
		return XDP_DROP;
	s->b[8] += 1;
#elif SHAPE == 4
	struct bfd_cfg *c = slot_cfg.lookup(&k);
	struct bfd_state *st = slot_state.lookup(&k);
	if (!c || !st || touch(c, st, eth, ip->daddr, 0) != XDP_TX)
		return XDP_PASS;
#elif SHAPE == 5 || SHAPE == 6
	struct slot *m = slots.lookup(&k);
	if (!m || touch(&m->cfg, &m->st, eth, ip->daddr, SHAPE == 6) != XDP_TX)
		return XDP_PASS;
#endif
"""
    + ANSWER
    + "}\n"
)


def attach(mode: str, ifnames: list[str], max_seconds: float) -> int:
    """In the DUT namespace: a program per shape on its interface; prints ``shape fd``s, then ``ready``."""
    import ctypes  # noqa: PLC0415

    from bcc import BPF  # noqa: PLC0415

    held = []
    for shape, ifname in zip(SHAPES, ifnames, strict=True):
        cflags = [f"-DSHAPE={SHAPES.index(shape)}", f"-DSLOT={SLOT}", f"-I{REPO / 'bpf'}"]
        b = BPF(text=PROGRAM, cflags=cflags)
        k = ctypes.c_uint32(SLOT)
        if shape in ("separate", "slot", "slot_alone"):
            # A session as the engine leaves one: active, answered, its gap long past.
            table = b["slot_cfg"] if shape == "separate" else b["slots"]
            leaf = table.Leaf()
            cfg = leaf if shape == "separate" else leaf.cfg
            cfg.flags, cfg.local_discr, cfg.min_gap_ns = 0x03, 1, 7_500_000
            table[k] = leaf
        fn = b.load_func(b"floor_reflect", BPF.XDP)
        b.attach_xdp(ifname, fn, FLAGS[mode])
        held.append((b, ifname))
        print(shape, fn.fd, flush=True)
    print("ready", flush=True)
    try:
        deadline = time.monotonic() + max_seconds
        while time.monotonic() < deadline:
            readable, _, _ = select.select([sys.stdin], [], [], 1.0)
            if readable and not sys.stdin.readline():
                break
    finally:
        for b, ifname in held:
            b.remove_xdp(ifname, FLAGS[mode])
    return 0


def run_mode(mode: str, seconds: float, rounds: int) -> dict[str, Any]:
    topo = Topology()
    prog: subprocess.Popen | None = None
    inj: Injector | None = None
    try:
        d, p = topo.namespace("d"), topo.namespace("p")
        links = [topo.veth(d, f"cf-d{i}", p, f"cf-p{i}") for i in range(len(SHAPES))]
        if mode == "native":
            for _, b in links:
                attach_xdp_pass(p, b.ifname)
        prog = d.popen(
            [sys.executable, __file__, "--attach", mode, ",".join(a.ifname for a, _ in links)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert prog.stdout is not None and prog.stdin is not None
        fds: dict[str, int] = {}
        for line in prog.stdout:
            if line.strip() == "ready":
                break
            shape, fd = line.split()
            fds[shape] = int(fd)
        if len(fds) != len(SHAPES):
            raise RuntimeError(f"the programs did not attach ({sorted(fds)})")
        # The injector rotates which frame goes first in a tick (see the docstring).
        frames = {b.ifname: echo_frame(b, a) for a, b in links}
        inj = Injector(p, list(frames))
        inj.paced(frames, rate=RATE, seconds=1.0)  # past each program's first runs
        windows: dict[str, list[float | None]] = {s: [] for s in SHAPES}
        for _ in range(rounds):
            before = {s: benchlib.bpf_prog_fd_stats(prog.pid, fd) for s, fd in fds.items()}
            inj.paced(frames, rate=RATE, seconds=seconds)
            time.sleep(0.05)  # the last frames through the kernel
            after = {s: benchlib.bpf_prog_fd_stats(prog.pid, fd) for s, fd in fds.items()}
            for s in SHAPES:
                dc, dn = after[s][0] - before[s][0], after[s][1] - before[s][1]
                windows[s].append(round(dn / dc, 1) if dc else None)
        out: dict[str, Any] = {"mode": mode, "windows": windows, "shapes": {}}
        measured = [w for w in windows["bare"] if w is not None]
        if not measured:
            raise RuntimeError(f"{mode}: the bare program ran on no frame in any window")
        bare = statistics.median(measured)
        for s in SHAPES:
            got = [w for w in windows[s] if w is not None]
            med = statistics.median(got) if got else None
            out["shapes"][s] = {
                "ns_per_packet": med,
                "extra_ns": None if med is None else round(med - bare, 1),
                "ratio_to_bare": None if med is None else round(med / bare, 2),
                "windows_measured": len(got),
            }
        return out
    finally:
        if inj is not None:
            inj.close()
        if prog is not None:
            if prog.stdin is not None:
                prog.stdin.close()
            try:
                prog.wait(timeout=30)
            except subprocess.TimeoutExpired:
                prog.kill()
        topo.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--modes", default="generic,native")
    ap.add_argument("--attach", nargs=2, metavar=("MODE", "IFNAMES"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.attach:
        return attach(args.attach[0], args.attach[1].split(","), max_seconds=600.0)
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in FLAGS for m in modes):
        ap.error(f"--modes: one or more of {', '.join(FLAGS)}")
    if not 1 <= args.seconds <= 600 or not 1 <= args.rounds <= 100:
        ap.error("--seconds 1-600, --rounds 1-100")
    stamp, _, doc = benchlib.begin(
        "cold_floor", {"seconds": args.seconds, "rounds": args.rounds, "modes": modes}
    )
    t0 = time.monotonic()
    with benchlib.bpf_stats_enabled():
        doc["modes"] = [run_mode(m, args.seconds, args.rounds) for m in modes]
    doc["duration_s"] = round(time.monotonic() - t0, 1)
    rows = [
        [m["mode"], s, v["ns_per_packet"], v["extra_ns"], v["ratio_to_bare"]]
        for m in doc["modes"]
        for s, v in m["shapes"].items()
    ]
    print(benchlib.table(["mode", "shape", "ns/pkt (median)", "extra over bare", "÷ bare"], rows))
    print(benchlib.write_result("cold_floor", stamp, doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
