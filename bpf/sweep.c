/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Detection in the kernel. XDP cannot see silence: a dead link delivers no
 * packet, so the program that would notice never runs. This program runs on
 * a periodic perf event on every CPU instead (bcc cannot use bpf_timer) and
 * reports each session whose peer has been silent for its detection time.
 * It keeps working while the engine is stopped: the events wait in the ring
 * buffer, and XDP stops answering an expired session at once.
 *
 * The engine compiles this file after xdp_bfd.c as one text, so it shares
 * that file's maps and helpers (count, emit).
 */
#include <uapi/linux/bpf_perf_event.h>

/*
 * The verifier explores a bounded loop iteration by iteration and refuses more
 * than 8192 pending branches, so one program covers BFD_SWEEP_CHUNK slots.
 * BFD_MAX_SESSIONS / BFD_SWEEP_CHUNK copies of it, each for its own range,
 * run on every tick: the whole table is swept every period, and a copy whose
 * range holds no session returns at once.
 */
#define BFD_SWEEP_CHUNK 512

/* When each copy last ran: the programs fire on every CPU, but one sweep per period is enough. */
BPF_ARRAY(sweep_last, __u64, 8);

static __always_inline int sweep_range(__u32 base)
{
	__u32 zero = 0, copy = base / BFD_SWEEP_CHUNK;
	struct bfd_gate *g = gate.lookup(&zero);
	__u64 *ran = sweep_last.lookup(&copy);
	__u64 now = bpf_ktime_get_ns();
	__u32 n;

	if (!g || !ran)
		return 0;
	n = g->nslots;
	if (base >= n)
		return 0;
	/* Another CPU swept this range less than 4 ms ago (a race costs one extra sweep). */
	if (now - *ran < 4000000)
		return 0;
	*ran = now;
	for (__u32 j = 0; j < BFD_SWEEP_CHUNK; j++) {
		__u32 k = base + j;
		struct bfd_cfg *c;
		struct bfd_state *s;
		__u64 last;

		if (k >= n)
			break;
		c = slot_cfg.lookup(&k);
		s = slot_state.lookup(&k);
		if (!c || !s)
			break;
		if (!(c->flags & BFD_CFG_DETECT))
			continue;
		last = s->last_rx_ns;
		/* Two CPUs may both see it once; the engine ignores the second report. */
		if (!last || s->expired_epoch == c->epoch || now <= last || now - last <= c->detect_ns)
			continue;
		struct bfd_event ev = {};
		/* Marked only once the engine can hear of it: a full ring is retried next tick. */
		if (emit(BFD_EV_EXPIRED, k, c, now, last, &ev) == 0)
			s->expired_epoch = c->epoch;
	}
	return 0;
}

/* The engine attaches bfd_sweep_0 .. bfd_sweep_<MAX/CHUNK - 1>. */
#define BFD_SWEEP(i) \
	int bfd_sweep_##i(struct bpf_perf_event_data *ctx) { return sweep_range((i) * BFD_SWEEP_CHUNK); }
BFD_SWEEP(0)
BFD_SWEEP(1)
BFD_SWEEP(2)
BFD_SWEEP(3)
BFD_SWEEP(4)
BFD_SWEEP(5)
BFD_SWEEP(6)
BFD_SWEEP(7)
