/* Kernel transmit clock prototype: recirculating tick frames in a shaped veth loop.
 *
 * Attached (clsact ingress, direct-action) on the far end B of a private veth pair
 * A<->B whose A end has a shaping root qdisc (htb or tbf). Each running session
 * owns one tick frame [eth(dst,src,0x88b5) magic slot gen | padding to len].
 * On every release of that frame from A's qdisc this program:
 *   1. checks the frame belongs to a running session generation (else drops it: stop);
 *   2. stamps last_tick_ns (userspace/the sweep detect a lost frame by it);
 *   3. if the session sends and the dead-man gate is open: rewrites the frame into
 *      the session's *current* 66-byte BFD control frame (Eth+IPv4+UDP+24 B, both
 *      checksums computed here from the map) and clones it out the real interface;
 *   4. resizes the frame to a (random) length in [len_min, len_max] - the next
 *      release time behind the shaper is len*8/rate - restores the tick header,
 *      sets skb->priority = the htb class the map names, and redirects it back
 *      into A's egress queue.
 */
#include <uapi/linux/bpf.h>
#include <uapi/linux/pkt_cls.h>
#include <uapi/linux/if_ether.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/udp.h>
#include <uapi/linux/in.h>

#define TXC_SLOTS 1024
#define TXC_MAGIC 0x7bfd71c0
#define TXC_ETHERTYPE 0x88b5

#define TXC_RUN 0x01        /* keep the tick frame circulating */
#define TXC_SEND 0x02       /* clone a control packet out on each tick */
#define TXC_DROP_ONCE 0x04  /* test hook: lose the frame once (simulates a queue overflow) */

#define TXC_C_TICK 0
#define TXC_C_SENT 1
#define TXC_C_STALE 2       /* frame of a stopped session or an old generation: dropped */
#define TXC_C_GATED 3       /* tick while the dead-man gate was closed: no clone */
#define TXC_C_CLONE_ERR 4
#define TXC_C_RESIZE_ERR 5
#define TXC_C_NOT_TICK 6
#define TXC_C_EARLY 7       /* tick arrived too soon after the last clone (delayed predecessor): no clone */
#define TXC_C_MAX 8

struct tick_hdr {
	__u8 dst[6];
	__u8 src[6];
	__be16 proto;
	__u32 magic;
	__u32 slot;
	__u32 gen;
} __attribute__((packed));  /* 26 bytes */

/* Written by userspace only. */
struct txc_cfg {
	__u32 flags;
	__u32 gen;            /* a frame whose gen differs is dropped (re-inject = gen+1) */
	__u32 classid;        /* skb->priority on recirculation: htb major:minor of the session's class */
	__u32 loop_ifindex;   /* A end of the loop (redirect target) */
	__u32 out_ifindex;    /* the real interface the control packet leaves by */
	__u16 len_min;        /* tick frame length range: period = len*8/class rate */
	__u16 len_max;
	__u8 eth[12];         /* dst MAC, src MAC */
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u8 tos;
	__u8 ttl;
	__u8 pad[2];
	__u8 ctrl[24];        /* the current BFD control packet (RFC 5880 4.1) */
	__u32 pad2;
	__u64 min_gap_ns;     /* 0: off; else no clone sooner than this after the last one (RFC 5880 6.8.7 floor) */
};

/* Written by the kernel only. */
struct txc_state {
	__u64 last_tick_ns;
	__u64 ticks;
	__u64 sent;
	__u64 gated;
	__u64 max_gap_ns;
	__u64 min_gap_ns;
	__u64 last_sent_ns;
	__u64 early_skips;
};

struct txc_gate {
	__u64 heartbeat_ns;
	__u64 deadman_ns;     /* 0: no gate */
};

struct bfd_frame {
	union {
		struct {
			__u8 dst[6];
			__u8 src[6];
			__be16 proto;
			struct iphdr ip;
			struct udphdr udp;
			__u8 ctrl[24];
		} __attribute__((packed));
		__u16 w[33];
	};
};

BPF_ARRAY(txc_cfg, struct txc_cfg, TXC_SLOTS);
BPF_ARRAY(txc_state, struct txc_state, TXC_SLOTS);
BPF_ARRAY(txc_gate, struct txc_gate, 1);
BPF_PERCPU_ARRAY(txc_cnt, __u64, TXC_C_MAX);

static __always_inline void cnt(__u32 i)
{
	__u64 *c = txc_cnt.lookup(&i);
	if (c)
		*c += 1;
}

static __always_inline __u16 txc_fold(__u64 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return ~s & 0xffff;
}

int txc_tick(struct __sk_buff *skb)
{
	struct tick_hdr th;

	if (bpf_skb_load_bytes(skb, 0, &th, sizeof(th)) < 0 || th.proto != bpf_htons(TXC_ETHERTYPE) ||
	    th.magic != TXC_MAGIC) {
		cnt(TXC_C_NOT_TICK);
		return TC_ACT_SHOT;   /* nothing else belongs on the private loop */
	}
	__u32 slot = th.slot;
	struct txc_cfg *c = txc_cfg.lookup(&slot);
	struct txc_state *s = txc_state.lookup(&slot);
	if (!c || !s)
		return TC_ACT_SHOT;
	if (!(c->flags & TXC_RUN) || c->gen != th.gen) {
		cnt(TXC_C_STALE);
		return TC_ACT_SHOT;
	}
	if (c->flags & TXC_DROP_ONCE) {
		c->flags &= ~TXC_DROP_ONCE;
		cnt(TXC_C_STALE);
		return TC_ACT_SHOT;
	}
	__u64 now = bpf_ktime_get_ns();
	if (s->last_tick_ns) {
		__u64 gap = now - s->last_tick_ns;
		if (gap > s->max_gap_ns)
			s->max_gap_ns = gap;
		if (!s->min_gap_ns || gap < s->min_gap_ns)
			s->min_gap_ns = gap;
	}
	s->last_tick_ns = now;
	s->ticks++;
	cnt(TXC_C_TICK);

	__u32 zero = 0;
	struct txc_gate *g = txc_gate.lookup(&zero);
	int open = g && (!g->deadman_ns || now - g->heartbeat_ns <= g->deadman_ns);

	if ((c->flags & TXC_SEND) && !open) {
		s->gated++;
		cnt(TXC_C_GATED);
	} else if ((c->flags & TXC_SEND) && c->min_gap_ns && s->last_sent_ns && now - s->last_sent_ns < c->min_gap_ns) {
		s->early_skips++;
		cnt(TXC_C_EARLY);
	} else if (c->flags & TXC_SEND) {
		struct bfd_frame f = {};

		__builtin_memcpy(f.dst, c->eth, 12);
		f.proto = bpf_htons(ETH_P_IP);
		f.ip.version = 4;
		f.ip.ihl = 5;
		f.ip.tos = c->tos;
		f.ip.tot_len = bpf_htons(20 + 8 + 24);
		f.ip.frag_off = bpf_htons(0x4000);  /* DF */
		f.ip.ttl = c->ttl;
		f.ip.protocol = IPPROTO_UDP;
		f.ip.saddr = c->saddr;
		f.ip.daddr = c->daddr;
		f.udp.source = c->sport;
		f.udp.dest = c->dport;
		f.udp.len = bpf_htons(8 + 24);
		__builtin_memcpy(f.ctrl, c->ctrl, 24);
		__u64 sum = 0;
#pragma unroll
		for (int i = 7; i < 17; i++)  /* IPv4 header: bytes 14..33 */
			sum += f.w[i];
		f.ip.check = txc_fold(sum);
		sum = bpf_htons(IPPROTO_UDP) + bpf_htons(8 + 24);
#pragma unroll
		for (int i = 13; i < 33; i++)  /* saddr, daddr, UDP header, BFD: bytes 26..65 */
			sum += f.w[i];
		__u16 ck = txc_fold(sum);
		f.udp.check = ck ? ck : 0xffff;

		if (bpf_skb_change_tail(skb, sizeof(f), 0) ||
		    bpf_skb_store_bytes(skb, 0, &f, sizeof(f), 0)) {
			cnt(TXC_C_RESIZE_ERR);
			return TC_ACT_SHOT;
		}
		if (bpf_clone_redirect(skb, c->out_ifindex, 0) == 0) {
			s->sent++;
			s->last_sent_ns = now;
			cnt(TXC_C_SENT);
		} else {
			cnt(TXC_C_CLONE_ERR);
		}
	}

	/* Next period: this frame's length behind the shaper. */
	__u32 lo = c->len_min, hi = c->len_max, len = lo;
	if (hi > lo)
		len = lo + bpf_get_prandom_u32() % (hi - lo + 1);
	if (len < sizeof(th))
		len = sizeof(th);
	if (bpf_skb_change_tail(skb, len, 0) || bpf_skb_store_bytes(skb, 0, &th, sizeof(th), 0)) {
		cnt(TXC_C_RESIZE_ERR);
		return TC_ACT_SHOT;
	}
	skb->priority = c->classid;
	return bpf_redirect(c->loop_ifindex, 0);
}
