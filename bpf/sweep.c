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

/* The transmit clock's counters: the sweep queues Downs for its courier (tick.c). */
static __always_inline void tick_count(__u32 idx)
{
	__u64 *c = tick_counters.lookup(&idx);

	if (c)
		*c += 1;
}

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
	__u64 expiry_ns;        /* the earliest expiry of a session the last whole walk foresaw (the courier's aim) */
	__u64 next_expiry_ns;   /* the same, as the walk under way finds it */
};
BPF_ARRAY(sweep_clock, struct sweep_clock, 1);
/*
 * The walks' CPU bound. A walk costs about 18 ns a slot here. One that nothing
 * is due for comes every sweep_ns (the gate's, for what no walk could
 * foresee: 2 us a slot, about 1 % of a core). One whose due time came never
 * starts sooner than 2 us a slot after the last, or SWEEP_DUE_GAP_NS where
 * that is less: due times come rarely
 * at rest (about one a detection time less an interval: a peer's packet moves
 * its session's expiry on), but when many peers fall silent together their
 * expiries follow each other over an interval, and each must be found at
 * once; at 4096 slots the old bound of 2 us a slot held walks 5 ms apart.
 * While due times keep coming, that is up to a third of a core at 4096 slots.
 */
#define SWEEP_GAP_NS_PER_SLOT 2000
#define SWEEP_DUE_GAP_NS 200000

static __always_inline void due_by(struct sweep_clock *clk, __u64 t)
{
	if (t < clk->due_ns)
		clk->due_ns = t;
}

/*
 * Whether the courier (tick.c) came round lately: only then does a silence's
 * Down go to it; else the engine sends it, as it hears of the expiry.
 */
static __always_inline int courier_live(__u64 now)
{
	__u32 k = BFD_COURIER_SLOT;
	struct bfd_tick_cfg *tc = tick_cfg.lookup(&k);
	struct bfd_tick_state *ts = tick_state.lookup(&k);

	if (!tc || !ts || !(tc->flags & BFD_TICK_RUN) || ts->gen_seen != tc->gen)
		return 0;
	return within(now, ts->last_tick_ns, tc->lost_ns + 1);
}

/* Hand the session's Down to the courier, once per watch. Returns 1 when it is (or was) queued. */
static __always_inline int queue_down(__u32 k, struct bfd_cfg *c, struct bfd_state *s)
{
	if (s->queued_epoch == c->epoch)
		return 1;  /* queued by a walk whose report did not reach the ring */
	struct bfd_down_pkt *d = down_pkt.lookup(&k);
	if (!d || !d->pkt_len || d->epoch != c->epoch || down_queue.push(&k, 0))
		return 0;
	s->queued_epoch = c->epoch;
	tick_count(BFD_TC_DOWN_QUEUED);
	return 1;
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
	int courier = courier_live(now);
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
			if (last + c->detect_ns < clk->next_expiry_ns)
				clk->next_expiry_ns = last + c->detect_ns;
			continue;
		}
		struct bfd_event ev = {};
		/* The Down first: it goes to the peer whatever the engine is doing. */
		if (courier)
			ev.queued = queue_down(k, c, s);
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

	/* Whatever is due, not sooner than the CPU bound; else at the longest gap (the gate's sweep_ns). */
	if (gap < (floor < SWEEP_DUE_GAP_NS ? floor : SWEEP_DUE_GAP_NS))
		return 0;
	if (now < clk->due_ns && gap < g->sweep_ns)
		return 0;
	/* One CPU walks; a CPU that lost the race has nothing to add. */
	if (__sync_val_compare_and_swap(&clk->ran_ns, ran, now) != ran)
		return 0;
	clk->due_ns = now + g->sweep_ns;
	clk->next_expiry_ns = ~0ULL;
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
	/* The table is swept (or the next copy is missing): what it foresaw is the courier's aim. */
	struct sweep_clock *clk = sweep_clock.lookup(&zero);
	if (clk)
		clk->expiry_ns = clk->next_expiry_ns;
	/* The clocks' frames next. */
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

/* One frame's watch: reported lost once per generation. -1: no such entry. */
static __always_inline int watch_one(__u32 k, __u64 now, struct sweep_clock *clk, struct bfd_event *ev)
{
	struct bfd_tick_cfg *tc = tick_cfg.lookup(&k);
	struct bfd_tick_state *ts = tick_state.lookup(&k);

	if (!tc || !ts)
		return -1;
	if (!(tc->flags & BFD_TICK_RUN) || ts->lost_gen == tc->gen)
		return 0;
	__u64 last = ts->gen_seen == tc->gen ? ts->last_tick_ns : tc->armed_ns;
	if (!last || now <= last)
		return 0;
	if (now - last <= tc->lost_ns) {
		due_by(clk, last + tc->lost_ns);
		return 0;
	}
	/* The slot and generation say it all (the engine knows whose they are). */
	ev->slot = k;
	ev->epoch = tc->gen;
	ev->now_ns = now;
	ev->last_rx_ns = last;
	if (events.ringbuf_output(ev, sizeof(*ev), 0) == 0) {
		ts->lost_gen = tc->gen;
	} else {
		count(BFD_C_EVENT_LOST);
		due_by(clk, now);
	}
	return 0;
}

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
		if (watch_one(k, now, clk, &ev) < 0)
			break;
	}
	/* The courier's frame is watched as a session's is. */
	if (base == 0) {
		__u32 k = BFD_COURIER_SLOT;

		watch_one(k, now, clk, &ev);
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
