/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Detection in the kernel. XDP cannot see silence: a dead link delivers no
 * packet, so the program that would notice never runs. This program runs at
 * every hrtimer expiry instead (bcc cannot use bpf_timer), a periodic perf
 * event on every CPU being one such timer, and reports each session whose
 * peer has been silent for its detection time.
 * It keeps working while the engine is stopped: the events wait in the ring
 * buffer, and XDP stops answering an expired session at once.
 *
 * The engine compiles this file after xdp_bfd.c as one text, so it shares
 * that file's maps and helpers (count, emit).
 */
#include <uapi/linux/bpf_perf_event.h>

/* The chain runs from a raw tracepoint; its context only passes through the tail calls. */
typedef struct bpf_raw_tracepoint_args sweep_ctx;

/*
 * One program covers BFD_SWEEP_CHUNK slots (the verifier's limit, see
 * bfd_abi.h): BFD_SWEEP_COPIES copies of it each sweep their own range and
 * tail-call the next one while the table goes on.
 */
_Static_assert(BFD_SWEEP_CHUNK * BFD_SWEEP_COPIES >= BFD_MAX_SESSIONS,
	       "the sweep's copies must cover BFD_MAX_SESSIONS");

BPF_PROG_ARRAY(sweep_chain, BFD_SWEEP_COPIES);
BPF_PROG_ARRAY(tick_watch_chain, BFD_TICK_WATCH_COPIES);

/*
 * When the table was last swept, and when it must be swept next: the earliest
 * moment a session can expire (its last arrival plus its detection time) or a
 * tick frame can be overdue, as the last walk found them. A packet arriving
 * since only moves a session's moment later, so nothing can expire before
 * due_ns but what the walk could not see: a session heard for the first time,
 * or whose detection time the engine shortened. For those the gate's sweep_ns
 * is the longest gap between walks. So detection is quantised by the timers'
 * expiries, not by the walk's period.
 */
struct sweep_clock {
	__u64 ran_ns;
	__u64 due_ns;
};
BPF_ARRAY(sweep_clock, struct sweep_clock, 1);
/* The walk's CPU bound: it costs about 18 ns a slot here, so at most one per 2 us a slot (about 1 % of a core). */
#define SWEEP_GAP_NS_PER_SLOT 2000

static __always_inline void due_by(struct sweep_clock *clk, __u64 t)
{
	if (t < clk->due_ns)
		clk->due_ns = t;
}

static __always_inline void sweep_range(__u32 base)
{
	__u32 zero = 0;
	struct bfd_gate *g = gate.lookup(&zero);
	struct sweep_clock *clk = sweep_clock.lookup(&zero);
	__u64 now = bpf_ktime_get_ns();
	__u32 n;

	if (!g || !clk)
		return;
	n = g->nslots;
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
		/* An authenticated packet XDP could not check is alive once the engine has verified it. */
		if ((c->flags & BFD_CFG_AUTH) && c->verified_ns > last)
			last = c->verified_ns;
		if (!last || s->expired_epoch == c->epoch || now <= last)
			continue;
		if (now - last <= c->detect_ns) {
			due_by(clk, last + c->detect_ns);
			continue;
		}
		struct bfd_event ev = {};
		/* Two CPUs may both see it once; the engine ignores the second report. */
		/* Marked only once the engine can hear of it: a full ring is retried next tick. */
		if (emit(BFD_EV_EXPIRED, k, c, c->epoch, now, last, &ev) == 0)
			s->expired_epoch = c->epoch;
		else
			due_by(clk, now);
	}
}

/*
 * The tick. A perf event's own program (bfd_sweep_clock) does not run on an
 * idle CPU here: of 9 366 expiries of an idle vCPU's 0.5 ms cpu-clock timer in
 * 5 s it ran 21 times, and where it ran while idle the event throttled itself
 * and its timer stopped until the next scheduler tick (docs/fastpath.md). The
 * timer itself keeps firing when the event excludes idle, so the sweep hangs
 * on the tracepoint every hrtimer expiry passes (timer:hrtimer_expire_entry):
 * it runs at every tick of every CPU, busy or idle, and at any other timer
 * besides. The first past the due time claims the walk; the others return
 * after two map lookups.
 */
int bfd_sweep_clock(struct bpf_perf_event_data *ctx)
{
	return 0;
}

int bfd_sweep(sweep_ctx *ctx)
{
	__u32 zero = 0;
	struct bfd_gate *g = gate.lookup(&zero);
	struct sweep_clock *clk = sweep_clock.lookup(&zero);
	__u64 now = bpf_ktime_get_ns();

	if (!g || !clk || !g->nslots)
		return 0;
	__u64 ran = clk->ran_ns;
	__u64 gap = now - ran;
	__u64 floor = (__u64)g->nslots * SWEEP_GAP_NS_PER_SLOT;

	/* Whatever is due, not sooner than the CPU bound (nor than the longest gap, which it never exceeds). */
	if (gap < (floor < g->sweep_ns ? floor : g->sweep_ns))
		return 0;
	if (now < clk->due_ns && gap < g->sweep_ns)
		return 0;
	/* One CPU walks; a CPU that lost the race has nothing to add. */
	if (__sync_val_compare_and_swap(&clk->ran_ns, ran, now) != ran)
		return 0;
	clk->due_ns = now + g->sweep_ns;
	sweep_chain.call(ctx, 0);
	return 0;
}

/* One copy: its range, then the next copy while the table goes on (bcc: no map calls in macros). */
static __always_inline int sweep_copy(sweep_ctx *ctx, __u32 i)
{
	__u32 zero = 0;
	struct bfd_gate *g;

	sweep_range(i * BFD_SWEEP_CHUNK);
	g = gate.lookup(&zero);
	if (g && (i + 1) * BFD_SWEEP_CHUNK < g->nslots)
		sweep_chain.call(ctx, i + 1);
	/* The table is swept (or the next copy is missing): the clocks' frames next. */
	tick_watch_chain.call(ctx, 0);
	return 0;
}

/* BFD_SWEEP_COPIES of them (a unit test counts them against the header). */
#define BFD_SWEEP(i) \
	int bfd_sweep_##i(sweep_ctx *ctx) { return sweep_copy(ctx, (i)); }
BFD_SWEEP(0)
BFD_SWEEP(1)
BFD_SWEEP(2)
BFD_SWEEP(3)
BFD_SWEEP(4)
BFD_SWEEP(5)
BFD_SWEEP(6)
BFD_SWEEP(7)

/*
 * A tick frame can be lost (a full queue, a failed resize): the clock of its
 * session stops without a sound. Reported once per generation when not seen
 * for tick_cfg.lost_ns; the engine sends another frame in. Programs of their
 * own, chained after the sweep: in the sweep's loop body this check
 * multiplied the verifier's paths (9 s of load time at 4096 slots).
 */
_Static_assert(BFD_TICK_WATCH_CHUNK * BFD_TICK_WATCH_COPIES >= BFD_MAX_SESSIONS,
	       "the tick watch's copies must cover BFD_MAX_SESSIONS");
_Static_assert(BFD_SWEEP_COPIES + BFD_TICK_WATCH_COPIES < 33, "the kernel allows 33 tail calls in a row");

static __always_inline void watch_range(__u32 base)
{
	__u32 zero = 0;
	struct bfd_gate *g = gate.lookup(&zero);
	struct sweep_clock *clk = sweep_clock.lookup(&zero);
	__u64 now = bpf_ktime_get_ns();

	if (!g || !clk)
		return;
	__u32 n = g->nslots;
	/* Out of the loop: stack written in some iterations only would keep the verifier from pruning. */
	struct bfd_event ev = {.type = BFD_EV_TICK_LOST};

	for (__u32 j = 0; j < BFD_TICK_WATCH_CHUNK; j++) {
		__u32 k = base + j;

		if (k >= n)
			break;
		struct bfd_tick_cfg *tc = tick_cfg.lookup(&k);
		struct bfd_tick_state *ts = tick_state.lookup(&k);
		if (!tc || !ts)
			break;
		if (!(tc->flags & BFD_TICK_RUN) || ts->lost_gen == tc->gen)
			continue;
		__u64 last = ts->gen_seen == tc->gen ? ts->last_tick_ns : tc->armed_ns;
		if (!last || now <= last)
			continue;
		if (now - last <= tc->lost_ns) {
			due_by(clk, last + tc->lost_ns);
			continue;
		}
		/* The slot and generation say it all (the engine knows whose they are). */
		ev.slot = k;
		ev.epoch = tc->gen;
		ev.now_ns = now;
		ev.last_rx_ns = last;
		if (events.ringbuf_output(&ev, sizeof(ev), 0) == 0) {
			ts->lost_gen = tc->gen;
		} else {
			count(BFD_C_EVENT_LOST);
			due_by(clk, now);
		}
	}
}

static __always_inline int watch_copy(sweep_ctx *ctx, __u32 i)
{
	__u32 zero = 0;
	struct bfd_gate *g;

	watch_range(i * BFD_TICK_WATCH_CHUNK);
	g = gate.lookup(&zero);
	if (g && (i + 1) * BFD_TICK_WATCH_CHUNK < g->nslots)
		tick_watch_chain.call(ctx, i + 1);
	return 0;
}

#define BFD_TICK_WATCH(i) \
	int bfd_tick_watch_##i(sweep_ctx *ctx) { return watch_copy(ctx, (i)); }
BFD_TICK_WATCH(0)
BFD_TICK_WATCH(1)
BFD_TICK_WATCH(2)
BFD_TICK_WATCH(3)
BFD_TICK_WATCH(4)
BFD_TICK_WATCH(5)
BFD_TICK_WATCH(6)
BFD_TICK_WATCH(7)
