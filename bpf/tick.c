/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The transmit clock in the kernel. XDP answers a peer's packet with ours, so
 * a peer that keeps its own clock keeps ours; a peer that does not (another
 * fast path, a peer slower than we must be, one in Demand mode) needs
 * packets nobody asked for, and those must not wait for a userspace process
 * to be scheduled. Each clocked session owns one tick frame circulating in a
 * private veth pair: the shaped end's htb class releases it after its length
 * at the session's rate (an hrtimer in the qdisc), this program sees it on
 * the far end's ingress (clsact) and:
 *
 *   1. drops a frame of a stopped session or of an old generation;
 *   2. unless a packet left for the session within cfg.min_gap_ns (an XDP
 *      reply or the previous tick: the deadline guard), builds the session's
 *      current control packet from the maps and clones it out the interface
 *      the peer's packets come in by, while the dead-man gate is open and
 *      the sweep has not found the peer silent (as XDP stops answering); for
 *      a meticulous key, the next packet of the series the engine keeps
 *      signed ahead, or nothing when it ran dry (bfd_abi.h, struct bfd_series);
 *   3. resizes the frame to the period after the next one (htb waits a
 *      released frame's length before the next release: the frame's length
 *      on arrival is the time to the next tick), a random length (RFC 5880
 *      §6.8.7 jitter) counted from the last packet sent, and redirects it
 *      into the shaped end again.
 *
 * A frame of Downs (struct bfd_down_frame) is another thing that comes
 * round: the engine sends one in, unclassified, when the sweep reported many
 * peers silent, and each of its entries leaves as a Down built like the
 * clock's packets (tick_downs), instead of a send system call each. The
 * courier (tick_courier) is the last: it sends the Downs the sweep queued
 * itself, so they need no engine at all.
 *
 * Compiled after xdp_bfd.c and sweep.c as one text: it shares their maps and
 * helpers (fold, same16).
 */
#include <uapi/linux/pkt_cls.h>

/*
 * The packets the clock builds, Ethernet to the end of the longest BFD packet,
 * as 16-bit words for the checksums: the bytes past the session's packet
 * (tick_cfg.pkt_len) are zero, so they add nothing to a sum and are cut off
 * before the frame leaves (so every copy into the frame is of a constant size).
 */
struct tick_v4 {
	union {
		struct {
			__u8 dst[6];
			__u8 src[6];
			__be16 proto;
			struct iphdr ip;
			struct udphdr udp;
			__u8 bfd[BFD_PKT_MAX];
		} __attribute__((packed));
		__u16 w[47];
	};
};

struct tick_v6 {
	union {
		struct {
			__u8 dst[6];
			__u8 src[6];
			__be16 proto;
			struct ipv6hdr ip;
			struct udphdr udp;
			__u8 bfd[BFD_PKT_MAX];
		} __attribute__((packed));
		__u16 w[57];
	};
};

static __always_inline int is_v4_mapped(const __u8 *a)
{
	const __u32 *x = (const __u32 *)a;

	return x[0] == 0 && x[1] == 0 && x[2] == bpf_htonl(0xffff);
}

/*
 * Build one of the session's packets (pkt, n bytes of BFD) in the frame and
 * clone it out. Returns 0 once it left.
 */
static __always_inline int tick_send(struct __sk_buff *skb, const __u8 *pkt, __u32 n, struct bfd_cfg *c,
				     struct bfd_state *st)
{
	__u32 ifindex = st->rx_ifindex;

	if (n < BFD_CONTROL_LEN || n > BFD_PKT_MAX)
		return -1;
	if (is_v4_mapped(c->peer)) {
		struct tick_v4 f = {};
		__u64 sum = 0;

		__builtin_memcpy(f.dst, st->rx_eth + 6, 6);  /* back to whoever sent the peer's packet */
		__builtin_memcpy(f.src, st->rx_eth, 6);
		f.proto = bpf_htons(ETH_P_IP);
		f.ip.version = 4;
		f.ip.ihl = 5;
		f.ip.tos = BFD_TOS;
		f.ip.tot_len = bpf_htons(sizeof(f.ip) + sizeof(f.udp) + n);
		f.ip.frag_off = bpf_htons(IPV4_DF);
		f.ip.ttl = BFD_TTL;
		f.ip.protocol = IPPROTO_UDP;
		__builtin_memcpy(&f.ip.saddr, st->rx_local + 12, 4);
		__builtin_memcpy(&f.ip.daddr, c->peer + 12, 4);
		f.udp.source = c->sport;
		f.udp.dest = c->dport;
		f.udp.len = bpf_htons(sizeof(f.udp) + n);
		__builtin_memcpy(f.bfd, pkt, BFD_PKT_MAX);
#pragma unroll
		for (int i = 7; i < 17; i++)  /* the IPv4 header */
			sum += f.w[i];
		f.ip.check = fold(sum);
		sum = bpf_htons(IPPROTO_UDP) + f.udp.len;
#pragma unroll
		for (int i = 13; i < 47; i++)  /* addresses, UDP header, BFD */
			sum += f.w[i];
		__u16 check = fold(sum);
		f.udp.check = check ? check : 0xffff;
		if (bpf_skb_change_tail(skb, sizeof(f), 0) || bpf_skb_store_bytes(skb, 0, &f, sizeof(f), 0) ||
		    bpf_skb_change_tail(skb, sizeof(f) - BFD_PKT_MAX + n, 0))
			return -1;
	} else {
		struct tick_v6 f = {};
		__u64 sum;

		__builtin_memcpy(f.dst, st->rx_eth + 6, 6);
		__builtin_memcpy(f.src, st->rx_eth, 6);
		f.proto = bpf_htons(ETH_P_IPV6);
		f.ip.version = 6;
		f.ip.priority = BFD_TOS >> 4;  /* traffic class CS6, as IPv4's TOS */
		f.ip.payload_len = bpf_htons(sizeof(f.udp) + n);
		f.ip.nexthdr = IPPROTO_UDP;
		f.ip.hop_limit = BFD_TTL;
		__builtin_memcpy(&f.ip.saddr, st->rx_local, 16);
		__builtin_memcpy(&f.ip.daddr, c->peer, 16);
		f.udp.source = c->sport;
		f.udp.dest = c->dport;
		f.udp.len = f.ip.payload_len;
		__builtin_memcpy(f.bfd, pkt, BFD_PKT_MAX);
		sum = bpf_htons(IPPROTO_UDP) + f.udp.len;
#pragma unroll
		for (int i = 11; i < 57; i++)  /* addresses, UDP header, BFD */
			sum += f.w[i];
		__u16 check = fold(sum);
		f.udp.check = check ? check : 0xffff;
		if (bpf_skb_change_tail(skb, sizeof(f), 0) || bpf_skb_store_bytes(skb, 0, &f, sizeof(f), 0) ||
		    bpf_skb_change_tail(skb, sizeof(f) - BFD_PKT_MAX + n, 0))
			return -1;
	}
	return bpf_clone_redirect(skb, ifindex, 0) ? -1 : 0;
}

/*
 * One session's Down, built like a tick's packet from the session's maps at
 * this moment (addresses and MACs from the peer's last packet); counted by
 * outcome. ``epoch``: the watch the Down is for (the courier's), or NULL (a
 * frame's, sent by the engine as it heard of the expiry).
 */
static __always_inline void send_down(struct __sk_buff *skb, __u32 slot, const __u8 *pkt, __u32 len,
				      const __u32 *epoch)
{
	struct bfd_cfg *c = slot_cfg.lookup(&slot);
	struct bfd_state *st = slot_state.lookup(&slot);

	if (!c || !st || !(c->flags & BFD_CFG_ACTIVE) || (epoch && *epoch != c->epoch)) {
		tick_count(BFD_TC_DOWN_STALE);  /* the session left, or was watched anew, meanwhile */
	} else if (!st->rx_ifindex) {
		tick_count(BFD_TC_DOWN_NO_PATH);
	} else if (tick_send(skb, pkt, len, c, st)) {
		tick_count(BFD_TC_DOWN_ERROR);
	} else {
		__sync_fetch_and_add(&st->ktx_packets, 1);
		__sync_fetch_and_add(&st->ktx_bytes, len);
		tick_count(BFD_TC_DOWN_SENT);
	}
}

/*
 * A frame of Downs (struct bfd_down_frame). The entries are read out first:
 * the frame itself is rebuilt into each Down in turn.
 */
static __always_inline int tick_downs(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct bfd_down_frame *f = down_scratch.lookup(&zero);

	if (!f || bpf_skb_load_bytes(skb, 0, f, sizeof(*f)) < 0) {
		tick_count(BFD_TC_DOWN_ERROR);
		return TC_ACT_SHOT;
	}
	__u32 n = f->count;

	for (__u32 i = 0; i < BFD_DOWN_BATCH && i < n; i++) {
		struct bfd_down_entry *e = &f->e[i];

		send_down(skb, e->slot, e->pkt, e->pkt_len, NULL);
	}
	return TC_ACT_SHOT;
}

/*
 * The courier (bfd_abi.h): sends what the sweep queued, BFD_DOWN_BATCH a
 * round; a round that leaves Downs queued sends itself round again unshaped
 * (htb's direct queue), so a whole table's Downs do not wait for periods.
 * Otherwise its next round is aimed at the earliest expiry the sweep's last
 * walk foresaw (never sooner than BFD_COURIER_SHORT_NS, never later than its
 * class's period), so it comes round often only where a Down can be due.
 */
static __always_inline int tick_courier(struct __sk_buff *skb, struct bfd_tick_hdr *th)
{
	__u32 k = BFD_COURIER_SLOT, zero = 0;
	struct bfd_tick_cfg *tc = tick_cfg.lookup(&k);
	struct bfd_tick_state *ts = tick_state.lookup(&k);

	if (!tc || !ts || !(tc->flags & BFD_TICK_RUN) || tc->gen != th->gen || !tc->period_ns) {
		tick_count(BFD_TC_COURIER_STALE);
		return TC_ACT_SHOT;  /* stopped or restarted */
	}
	/* The time to the next release, fixed one round ago (read before the frame is rebuilt). */
	__u64 ahead = (__u64)skb->len * tc->period_ns / BFD_TICK_LEN_FULL;
	__u64 now = bpf_ktime_get_ns();
	ts->last_tick_ns = now;
	ts->gen_seen = th->gen;
	ts->ticks++;
	tick_count(BFD_TC_COURIER);

	for (__u32 i = 0; i < BFD_DOWN_BATCH; i++) {
		__u32 slot;

		if (down_queue.pop(&slot))
			break;
		struct bfd_down_pkt *d = down_pkt.lookup(&slot);
		if (!d) {
			tick_count(BFD_TC_DOWN_STALE);
			continue;
		}
		send_down(skb, slot, d->pkt, d->pkt_len, &d->epoch);
		ts->sent++;
	}
	__u32 next;
	int more = down_queue.peek(&next) == 0;
	__u32 len = tc->len_max;
	struct sweep_clock *clk = sweep_clock.lookup(&zero);
	__u64 at = now + ahead;  /* the next release; what this round decides is the one after */

	if (more || !clk) {
		len = tc->len_min;
	} else if (clk->expiry_ns < at + tc->period_ns) {
		__u64 wait = clk->expiry_ns > at ? clk->expiry_ns - at : 0;

		len = wait * BFD_TICK_LEN_FULL / tc->period_ns;
		if (len < tc->len_min)
			len = tc->len_min;
	}
	if (len < BFD_TICK_LEN_MIN)
		len = BFD_TICK_LEN_MIN;
	if (bpf_skb_change_tail(skb, len, 0) || bpf_skb_store_bytes(skb, 0, th, sizeof(*th), 0)) {
		tick_count(BFD_TC_TICK_ERROR);
		return TC_ACT_SHOT;  /* lost: the sweep reports it, the engine sends another */
	}
	skb->priority = more ? 0 : tc->classid;
	return bpf_redirect(tc->loop_ifindex, 0);
}

int bfd_tick(struct __sk_buff *skb)
{
	struct bfd_tick_hdr th;

	if (bpf_skb_load_bytes(skb, 0, &th, sizeof(th)) < 0 || th.proto != bpf_htons(BFD_TICK_ETHERTYPE)) {
		tick_count(BFD_TC_TICK_FOREIGN);
		return TC_ACT_SHOT;
	}
	if (th.magic == BFD_DOWN_MAGIC)
		return tick_downs(skb);
	if (th.magic == BFD_COURIER_MAGIC)
		return tick_courier(skb, &th);
	if (th.magic != BFD_TICK_MAGIC) {
		tick_count(BFD_TC_TICK_FOREIGN);
		return TC_ACT_SHOT;  /* nothing else belongs on the loop */
	}
	__u32 slot = th.slot;
	struct bfd_tick_cfg *tc = tick_cfg.lookup(&slot);
	struct bfd_tick_state *ts = tick_state.lookup(&slot);
	struct bfd_cfg *c = slot_cfg.lookup(&slot);
	struct bfd_state *st = slot_state.lookup(&slot);

	if (!tc || !ts || !c || !st || !(tc->flags & BFD_TICK_RUN) || tc->gen != th.gen ||
	    !(c->flags & BFD_CFG_ACTIVE) || !tc->period_ns) {
		tick_count(BFD_TC_TICK_STALE);
		return TC_ACT_SHOT;  /* the clock of this frame was stopped or restarted */
	}
	/*
	 * htb charges a frame's length when it releases it, and waits that long
	 * before its next release: the length this frame arrived with is the time
	 * to the next tick, decided one tick ago. What this tick decides is the
	 * period after that one.
	 */
	__u64 ahead = skb->len;
	__u64 now = bpf_ktime_get_ns();
	ts->last_tick_ns = now;
	ts->gen_seen = th.gen;
	ts->ticks++;
	tick_count(BFD_TC_TICK);

	__u64 last = st->last_ktx_ns;
	const __u8 *pkt = tc->pkt;
	__u32 pkt_len = tc->pkt_len;
	struct bfd_series *sr = NULL;
	__u32 seq = 0, epoch = 0;

	if (tc->flags & BFD_TICK_SERIES) {
		/* A meticulous key: the next packet of the series the engine signed (bfd_abi.h). */
		__u32 idx = tc->series_idx;

		pkt = NULL;
		sr = series.lookup(&idx);
		if (sr && sr->slot == slot && now >= sr->not_before_ns) {
			epoch = sr->epoch;
			seq = ts->series_epoch == epoch ? ts->series_next : sr->first_seq;
			if (seq - sr->first_seq < sr->count && sr->count <= BFD_SERIES_DEPTH) {
				pkt = sr->pkt + (seq & (BFD_SERIES_DEPTH - 1)) * BFD_PKT_MAX;
				pkt_len = sr->pkt_len;
			}
		}
		if (!pkt)
			sr = NULL;
	}
	if (!pkt) {
		tick_count(BFD_TC_TICK_UNPAID);  /* nothing signed ahead (none yet, or run dry) */
	} else if (last && within(now, last, c->min_gap_ns)) {
		ts->skipped++;
		tick_count(BFD_TC_TICK_SKIPPED);
	} else if (!gate_open(now)) {
		ts->gated++;
		tick_count(BFD_TC_TICK_GATED);
	} else if ((c->flags & BFD_CFG_DETECT) && st->expired_epoch == c->epoch) {
		/* The sweep saw the peer go silent: no Up packet leaves until the engine has said Down. */
		tick_count(BFD_TC_TICK_EXPIRED);
	} else if (!st->rx_ifindex) {
		tick_count(BFD_TC_TICK_NO_PATH);  /* no packet from the peer yet: no way to it known */
	} else if (__sync_val_compare_and_swap(&st->last_ktx_ns, last, now) != last) {
		/* XDP answered for this session on another CPU just now: that was this interval's packet. */
		ts->skipped++;
		tick_count(BFD_TC_TICK_SKIPPED);
	} else if (tick_send(skb, pkt, pkt_len, c, st) == 0) {
		ts->sent++;
		__sync_fetch_and_add(&st->ktx_packets, 1);
		__sync_fetch_and_add(&st->ktx_bytes, pkt_len);
		tick_count(BFD_TC_TICK_SENT);
		if (sr) {
			/* Only this slot's frame writes them; the engine refills from here. */
			ts->series_epoch = epoch;
			ts->series_next = seq + 1;
			tick_count(BFD_TC_TICK_PREPAID);
		}
	} else {
		/* The stamp says sent: the next tick comes within the interval anyway (counted, rare). */
		tick_count(BFD_TC_TICK_ERROR);
	}

	/*
	 * The period after the next tick: random in [len_min, len_max] (the jitter)
	 * after whichever send is the last one then. Measured in frame bytes from
	 * the last send (ours, or XDP's): when the next tick comes too soon after
	 * it to send, the one after it must come at that send plus the jitter.
	 */
	__u32 lo = tc->len_min, hi = tc->len_max, len = lo;
	if (hi > lo)
		len = lo + bpf_get_prandom_u32() % (hi - lo + 1);
	__u64 sent = st->last_ktx_ns;  /* again: this tick's send, or XDP's on another CPU meanwhile */
	if (sent && within(now, sent, c->min_gap_ns)) {
		__u64 since = sent > now ? 0 : now - sent;
		__u64 next = since * BFD_TICK_LEN_FULL / tc->period_ns + ahead;

		if (next < c->min_gap_ns * BFD_TICK_LEN_FULL / tc->period_ns)
			len = len > next ? len - next : 0;
	}
	if (len < BFD_TICK_LEN_MIN)
		len = BFD_TICK_LEN_MIN;
	if (bpf_skb_change_tail(skb, len, 0) || bpf_skb_store_bytes(skb, 0, &th, sizeof(th), 0)) {
		tick_count(BFD_TC_TICK_ERROR);
		return TC_ACT_SHOT;  /* the frame is lost: the sweep reports it, the engine sends another */
	}
	skb->priority = tc->classid;
	return bpf_redirect(tc->loop_ifindex, 0);
}
