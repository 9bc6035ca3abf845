/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The BFD fast path: validate every BFD packet in the driver, stamp its arrival
 * for the kernel's detection sweep, and answer an Up session's peer by turning
 * its own frame into our reply (XDP_TX), so our transmit clock is the peer's
 * and no userspace wake-up is needed per packet.
 *
 * Verdicts: non-BFD traffic is passed untouched; a packet that breaks a rule
 * is dropped here with its own counter (never passed up: a forged packet once
 * overwrote live session state that way); a valid packet the fast path cannot
 * answer (session not Up, changed contents, authentication, dead-man gate
 * closed) is passed to the engine's socket.
 */
#include <uapi/linux/bpf.h>

#include "maps.h"
#include "parse.h"

/*
 * --spread-pass: non-BFD frames go to the stack through a cpumap, picked by a
 * hash of the flow, so the receiving CPU's softirq runs only this program and
 * the stack's work is done by the cpumap threads of every CPU. Not pinned:
 * each program has its own, filled by its engine before it attaches.
 * spread_cpu maps 0..n-1 to CPU ids (online CPUs need not be contiguous).
 */
BPF_CPUMAP(spread_map, BFD_SPREAD_MAX_CPUS);
BPF_ARRAY(spread_cpu, __u32, BFD_SPREAD_MAX_CPUS);

#define BFD_TTL 255             /* RFC 5881 §5 (GTSM): what single-hop packets carry */
#define BFD_TOS 0xc0            /* our replies' DSCP: CS6, network control */

/*
 * One walk of the frame (parse.h) serves every path: what it found is kept
 * here, as pointers the verifier has seen checked. The IP header pointers
 * tell the family: exactly one is set for IP, neither for anything else.
 */
struct parsed {
	struct ethhdr *eth;
	struct iphdr *ip4;
	struct ipv6hdr *ip6;
	void *l4;                /* just past the IP header (IPv6: before any extension header) */
	struct udphdr *udp;      /* a BFD port's only */
	struct hdr_cursor nh;    /* a BFD port's: at the UDP payload */
	__u8 ttl;
	__u16 dport;             /* host order */
	struct bfd_key key;      /* local = destination, peer = source */
};

static __always_inline void count(__u32 idx)
{
	__u64 *c = counters.lookup(&idx);

	if (c)
		*c += 1;
}

/*
 * Tell the engine; a full ring is counted, never silent. Returns 0 when
 * delivered. ``epoch`` says which watch the report is of (cfg.epoch, a tick
 * generation): the engine ignores one about a watch it has replaced.
 */
static __always_inline int emit(__u32 type, __u32 slot, struct bfd_cfg *c, __u32 epoch, __u64 now,
				__u64 last_rx, struct bfd_event *ev)
{
	ev->type = type;
	ev->slot = slot;
	ev->local_discr = c->local_discr;
	ev->epoch = epoch;
	ev->now_ns = now;
	ev->last_rx_ns = last_rx;
	if (events.ringbuf_output(ev, sizeof(*ev), type == BFD_EV_EXPIRED ? BPF_RB_FORCE_WAKEUP : 0) == 0)
		return 0;
	count(BFD_C_EVENT_LOST);
	return -1;
}

static __always_inline int drop(__u32 reason)
{
	count(reason);
	return XDP_DROP;
}

static __always_inline void v4_mapped(__u8 *out, __be32 addr)
{
	__builtin_memset(out, 0, 10);
	out[10] = 0xff;
	out[11] = 0xff;
	__builtin_memcpy(out + 12, &addr, 4);
}

static __always_inline int same16(const __u8 *a, const __u8 *b)
{
	const __u32 *x = (const __u32 *)a, *y = (const __u32 *)b;

	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3];
}

static __always_inline __u16 fold(__u64 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum & 0xffff;
}

static __always_inline __u64 sum16(const __u8 *p, int words)
{
	const __u16 *w = (const __u16 *)p;
	__u64 s = 0;

#pragma unroll
	for (int i = 0; i < 8; i++)
		if (i < words)
			s += w[i];
	return s;
}

/* A murmur3-style round and finaliser: cheap, and every input bit reaches the CPU choice. */
static __always_inline __u32 mix(__u32 h, __u32 w)
{
	w *= 0xcc9e2d51;
	w = (w << 15) | (w >> 17);
	w *= 0x1b873593;
	h ^= w;
	h = (h << 13) | (h >> 19);
	return h * 5 + 0xe6546b64;
}

static __always_inline __u32 fmix(__u32 h)
{
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h;
}

/*
 * Pass a non-BFD frame, through the cpumap when --spread-pass is on: one flow
 * always lands on one CPU (no reordering), flows spread over all of them.
 * Addresses, protocol and, for unfragmented TCP/UDP, the ports are hashed;
 * anything that is not IP stays on this CPU. A missing cpumap entry makes
 * the redirect return XDP_PASS (its flags' fallback), never a drop.
 */
static __always_inline int pass_other(struct parsed *p)
{
	__u32 zero = 0, h = 0x2545f491;
	struct bfd_gate *g = gate.lookup(&zero);
	__u8 l4proto;
	__u32 *ports = NULL;

	if (!g || !g->spread_cpus)
		goto pass;
	if (p->ip4) {
		struct iphdr *ip = p->ip4;

		l4proto = ip->protocol;
		h = mix(mix(mix(h, ip->saddr), ip->daddr), l4proto);
		if (!(ip->frag_off & bpf_htons(IPV4_MF | IPV4_OFFSET)))
			ports = p->l4;
	} else if (p->ip6) {
		const __u32 *a = (const __u32 *)&p->ip6->saddr;

#pragma unroll
		for (int i = 0; i < 8; i++)
			h = mix(h, a[i]);  /* saddr then daddr: adjacent in the header */
		l4proto = p->ip6->nexthdr;
		h = mix(h, l4proto);
		ports = p->l4;
	} else {
		goto pass;
	}
	if (ports && (l4proto == IPPROTO_UDP || l4proto == IPPROTO_TCP) && (void *)(ports + 1) <= p->nh.end)
		h = mix(h, *ports);
	__u32 k = ((__u64)fmix(h) * g->spread_cpus) >> 32;
	__u32 *cpu = spread_cpu.lookup(&k);
	if (!cpu)
		goto pass;
	int act = spread_map.redirect_map(*cpu, XDP_PASS);
	if (act == XDP_REDIRECT) {
		count(BFD_C_SPREAD);
		return act;
	}
pass:
	/* Not counted: xdp_pass counts BFD packets handed to the engine. */
	return XDP_PASS;
}

/* UDP 7784 is ours only while a reflector discriminator is configured; otherwise it passes untouched. */
static __always_inline int sbfd_on(void)
{
	__u32 zero = 0;
	struct bfd_sbfd_global *g = sbfd_global.lookup(&zero);

	return g && g->reflectors;
}

static __always_inline int bfd_port(__u16 dport)
{
	return dport == BFD_PORT_CONTROL || dport == BFD_PORT_MULTIHOP || dport == BFD_PORT_ECHO ||
	       (dport == BFD_PORT_SBFD && sbfd_on());
}

/*
 * Ethernet (one optional 802.1Q tag), IPv4 without options or IPv6, UDP.
 * Returns 1 for a BFD port, 0 for anything else (passed untouched), or a
 * negative counter index for a BFD packet to drop. What it parsed stays in
 * ``p`` either way: pass_other hashes the flow from it.
 */
static __always_inline int parse(struct xdp_md *ctx, struct parsed *p)
{
	struct hdr_cursor *nh = &p->nh;
	struct udphdr *udp;
	int proto;

	cursor_init(nh, ctx);
	proto = parse_ethhdr(nh, &p->eth);
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip;

		if (parse_iphdr(nh, &ip) < 0)
			return 0;
		p->ip4 = ip;
		p->l4 = nh->pos;
		if (ip->protocol != IPPROTO_UDP)
			return 0;
		/* Non-first fragments carry no UDP header to match on. */
		if (ip->frag_off & bpf_htons(IPV4_OFFSET))
			return 0;
		if (parse_udphdr(nh, &udp) < 0)
			return 0;
		p->dport = bpf_ntohs(udp->dest);
		if (!bfd_port(p->dport))
			return 0;
		/* Options push UDP to a variable offset; a BFD packet never needs them. */
		if (ip->ihl * 4 != sizeof(*ip))
			return -BFD_C_DROP_IP_OPTIONS;
		if (ip->frag_off & bpf_htons(IPV4_MF))
			return -BFD_C_DROP_FRAGMENT;
		p->ttl = ip->ttl;
		v4_mapped(p->key.local, ip->daddr);
		v4_mapped(p->key.peer, ip->saddr);
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6;
		__u8 ext = 0;
		int nexthdr = parse_ip6hdr(nh, &ip6);

		if (nexthdr < 0)
			return 0;
		p->ip6 = ip6;
		p->l4 = nh->pos;
		/*
		 * BFD never needs an extension header, but a packet hidden behind one
		 * must not slip past the rules: skip a few to find the UDP port.
		 */
		nexthdr = skip_ip6hdrext(nh, nexthdr, &ext);
		if (nexthdr != IPPROTO_UDP || parse_udphdr(nh, &udp) < 0)
			return 0;
		p->dport = bpf_ntohs(udp->dest);
		if (!bfd_port(p->dport))
			return 0;
		if (ext & IPV6_EXT_FRAGMENT)
			return -BFD_C_DROP_FRAGMENT;
		if (ext)
			return -BFD_C_DROP_IP_OPTIONS;
		p->ttl = ip6->hop_limit;
		__builtin_memcpy(p->key.local, &ip6->daddr, 16);
		__builtin_memcpy(p->key.peer, &ip6->saddr, 16);
	} else {
		return 0;
	}
	p->udp = udp;
	p->key.multihop = p->dport == BFD_PORT_MULTIHOP;
	p->key.ifindex = ctx->ingress_ifindex;
	return 1;
}

/*
 * A session may not be bound to an interface, and bfdd may not name our
 * address: try the exact key, then without the interface, then without the
 * local address. Only packets with Your Discriminator 0 (bring-up) come here.
 * The key is left modified; the caller restores what it needs.
 */
static __always_inline __u32 *lookup_by_path(struct bfd_key *k)
{
	__u8 local[16];
	__u32 ifindex = k->ifindex;
	__u32 *slot = sessions.lookup(k);

	if (slot)
		return slot;
	k->ifindex = 0;
	slot = sessions.lookup(k);
	if (slot)
		return slot;
	__builtin_memcpy(local, k->local, 16);
	__builtin_memset(k->local, 0, 16);
	k->ifindex = ifindex;
	slot = sessions.lookup(k);
	if (!slot) {
		k->ifindex = 0;
		slot = sessions.lookup(k);
	}
	__builtin_memcpy(k->local, local, 16);
	return slot;
}

static __always_inline void swap_macs(struct ethhdr *eth)
{
	__u8 mac[ETH_ALEN];

	__builtin_memcpy(mac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, mac, ETH_ALEN);
}

/*
 * The session a discriminator of ours names, and its slot, each candidate
 * confirmed by its slot's own cfg.local_discr. One the engine chose carries its
 * slot in its low bits (bfd_abi.h): one array lookup. Any other (bfdd's) is
 * found through discr_slot, which the engine keeps for the first session with
 * those low bits: two. The hash is left for the rest (two sessions' numbers
 * sharing their low bits, a session handed over by an engine that numbered
 * otherwise).
 */
static __always_inline struct bfd_cfg *cfg_of_discr(__u32 d, __u32 *idx)
{
	__u32 k = d & BFD_DISCR_SLOT_MASK;
	struct bfd_cfg *c = slot_cfg.lookup(&k);

	if (c && c->local_discr == d) {
		*idx = k;
		return c;
	}
	__u32 *named = discr_slot.lookup(&k);

	if (named && *named) {
		__u32 s = *named - 1;

		c = slot_cfg.lookup(&s);
		if (c && c->local_discr == d) {
			*idx = s;
			return c;
		}
	}
	__u32 *slot = by_discr.lookup(&d);

	if (!slot)
		return NULL;
	count(BFD_C_DISCR_HASH);
	*idx = *slot;
	return slot_cfg.lookup(idx);
}

/*
 * One of our own echoes, back from the peer's forwarding plane: stamped into
 * echo_rtt and dropped (it has done its work). Ours only if it names one of
 * our sessions and comes addressed to ourselves, to the address and on the
 * interface that session's peer uses; anything else returns -1 and is treated
 * as a peer's echo (another engine's probe carries the same magic and is
 * reflected like any echo).
 */
static __always_inline int echo_return(struct parsed *p, const struct bfd_echo_probe *e)
{
	__u32 idx;

	if (!cfg_of_discr(bpf_ntohl(e->discr), &idx))
		return -1;
	struct bfd_state *st = slot_state.lookup(&idx);
	struct bfd_echo_rtt *r = echo_rtt.lookup(&idx);
	if (!st || !r || !same16(p->key.local, p->key.peer) || !same16(p->key.local, st->rx_local) ||
	    st->rx_ifindex != p->key.ifindex)
		return -1;
	__u64 now = bpf_ktime_get_ns();
	__u64 tx;
	__builtin_memcpy(&tx, &e->tx_ns, sizeof(tx));
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	tx = __builtin_bswap64(tx);
#endif
	if (bpf_ntohl(e->gen) != r->gen || tx > now || now - tx > BFD_ECHO_MAX_RTT_NS)
		return drop(BFD_C_DROP_ECHO_STALE);
	__u64 rtt = now - tx;
	__u32 seq = bpf_ntohl(e->seq);
	__sync_fetch_and_add(&r->returned, 1);
	__sync_fetch_and_add(&r->rtt_sum_ns, rtt);
	/* Without atomics: a session's returns are an echo interval apart, so two never race here. */
	if (rtt < r->rtt_min_ns)
		r->rtt_min_ns = rtt;
	if (rtt > r->rtt_max_ns)
		r->rtt_max_ns = rtt;
	r->last_ns = now;
	r->last_seq = seq;
	struct bfd_echo_ret *slotted = &r->ring[seq & (BFD_ECHO_RING - 1)];
	slotted->seq = seq;
	slotted->rtt_us = rtt / 1000 ? rtt / 1000 : 1;
	count(BFD_C_ECHO_RX);
	return XDP_DROP;
}

/*
 * Echo: our own coming back (echo_return), else a peer's to reflect for a
 * session we hold, at layer 2 (IPv4 self-addressed) or layer 3 (FRR's IPv6).
 */
static __always_inline int echo(struct parsed *p)
{
	struct bfd_echo_key ek = {};
	const struct bfd_echo_probe *e = p->nh.pos;
	__u32 *slot;

	if ((void *)(e + 1) <= p->nh.end && e->magic == bpf_htonl(BFD_ECHO_MAGIC) &&
	    udp_payload_len(&p->nh, p->udp) >= (int)sizeof(*e)) {
		int r = echo_return(p, e);

		if (r >= 0)
			return r;
	}
	__builtin_memcpy(ek.peer, p->key.peer, 16);
	ek.ifindex = p->key.ifindex;
	slot = echo_peers.lookup(&ek);
	if (!slot) {
		ek.ifindex = 0;
		slot = echo_peers.lookup(&ek);
	}
	if (!slot)
		return drop(BFD_C_DROP_ECHO_UNKNOWN);
	struct bfd_cfg *c = slot_cfg.lookup(slot);
	if (!c || !(c->flags & BFD_CFG_ECHO))
		return drop(BFD_C_DROP_ECHO_UNKNOWN);
	swap_macs(p->eth);
	if (!same16(p->key.local, p->key.peer)) {
		/* Addressed to us: send it back to its sender (the UDP checksum is unchanged by a swap). */
		if (p->ip6) {
			__builtin_memcpy(&p->ip6->saddr, p->key.local, 16);
			__builtin_memcpy(&p->ip6->daddr, p->key.peer, 16);
		} else if (p->ip4) {
			__builtin_memcpy(&p->ip4->saddr, p->key.local + 12, 4);
			__builtin_memcpy(&p->ip4->daddr, p->key.peer + 12, 4);
		}
	}
	struct bfd_state *st = slot_state.lookup(slot);
	if (st)
		__sync_fetch_and_add(&st->echo_packets, 1);
	count(BFD_C_ECHO_TX);
	return XDP_TX;
}

/*
 * Rewrite the frame in place into our reply: 24 bytes of BFD from the
 * session's template. ``bfd`` is the peer's header; ``peer_discr`` its My
 * Discriminator, read before the template overwrites it.
 */
static __always_inline int reply(struct xdp_md *ctx, struct parsed *p, struct bfd_ctrl *bfd, struct bfd_cfg *c,
				 __be32 peer_discr, int final)
{
	struct ethhdr *eth = p->eth;
	struct iphdr *ip = p->ip4;
	struct ipv6hdr *ip6 = p->ip6;
	struct udphdr *udp = p->udp;
	long excess = p->nh.end - (void *)(bfd + 1);

	if (excess > 0) {
		/*
		 * Anything past our 24 bytes goes. Moving the frame's end invalidates
		 * every pointer into it (for the verifier): walk the headers again.
		 */
		struct hdr_cursor nh;
		int proto;

		if (bpf_xdp_adjust_tail(ctx, (int)-excess))
			return XDP_PASS;
		cursor_init(&nh, ctx);
		proto = parse_ethhdr(&nh, &eth);
		if (ip6) {
			if (proto != bpf_htons(ETH_P_IPV6) || parse_ip6hdr(&nh, &ip6) < 0)
				return XDP_DROP;
		} else if (proto != bpf_htons(ETH_P_IP) || parse_iphdr(&nh, &ip) < 0) {
			return XDP_DROP;
		}
		if (parse_udphdr(&nh, &udp) < 0)
			return XDP_DROP;
		bfd = nh.pos;
		if ((void *)(bfd + 1) > nh.end)
			return XDP_DROP;
	}
	swap_macs(eth);

	__u64 sum = bpf_htons(IPPROTO_UDP) + bpf_htons(sizeof(struct udphdr) + BFD_CONTROL_LEN);
	if (ip6) {
		ip6->payload_len = bpf_htons(sizeof(struct udphdr) + BFD_CONTROL_LEN);
		ip6->hop_limit = BFD_TTL;
		__builtin_memcpy(&ip6->saddr, p->key.local, 16);
		__builtin_memcpy(&ip6->daddr, p->key.peer, 16);
		sum += sum16(p->key.local, 8) + sum16(p->key.peer, 8);
	} else if (ip) {
		ip->tos = BFD_TOS;
		ip->tot_len = bpf_htons(sizeof(*ip) + sizeof(struct udphdr) + BFD_CONTROL_LEN);
		ip->id = 0;
		ip->frag_off = bpf_htons(IPV4_DF);
		ip->ttl = BFD_TTL;
		ip->check = 0;
		__builtin_memcpy(&ip->saddr, p->key.local + 12, 4);
		__builtin_memcpy(&ip->daddr, p->key.peer + 12, 4);
		ip->check = fold(sum16((__u8 *)ip, 8) + sum16((__u8 *)ip + 16, 2));
		sum += sum16(p->key.local + 12, 2) + sum16(p->key.peer + 12, 2);
	} else {
		return XDP_DROP;
	}
	udp->source = c->sport;
	udp->dest = c->dport;
	udp->len = bpf_htons(sizeof(struct udphdr) + BFD_CONTROL_LEN);
	udp->check = 0;
	__builtin_memcpy(bfd, c->reply, sizeof(*bfd));
	bfd->your_discr = peer_discr;
	if (final)  /* never P and F together (RFC 5880 §6.5): our own Poll goes on in the next one */
		bfd->flags = (bfd->flags & ~BFD_FLAG_POLL) | BFD_FLAG_FINAL;
	/*
	 * Frames from local senders on veth carry only a partial checksum: compute
	 * it all, over the 8-byte UDP header and the 24 bytes of BFD (16 words;
	 * the BFD header follows the UDP header).
	 */
	sum += sum16((__u8 *)udp, 8) + sum16((__u8 *)bfd + 8, 8);
	__u16 check = fold(sum);
	udp->check = check ? check : 0xffff;
	return XDP_TX;
}

/*
 * Whether `stamp` lies less than `gap` before `now`. A stamp after `now` was
 * written on another CPU after this program read the clock, so it is the
 * newest there is; the unsigned difference would call it ages old (an XDP
 * reply and a tick both sent, microseconds apart, seen on the wire).
 */
static __always_inline int within(__u64 now, __u64 stamp, __u64 gap)
{
	return stamp >= now || now - stamp < gap;
}

/* Two 24-byte control packets, word by word: the caller has bounds-checked the packet side. */
static __always_inline int same24(const __u32 *in, const __u8 *was8)
{
	const __u32 *was = (const __u32 *)was8;

	return in[0] == was[0] && in[1] == was[1] && in[2] == was[2] && in[3] == was[3] && in[4] == was[4] &&
	       in[5] == was[5];
}

/* A packet as the auth checks see it: copied out of the frame, zero past its Length. */
union bfd_pkt {
	__u8 b[BFD_PKT_MAX];
	__u32 w[BFD_PKT_MAX / 4];
};

/* Words [from, to) of a copied packet and of a template (both zero past their length). */
static __always_inline int same_words(const union bfd_pkt *in, const __u8 *was8, int from, int to)
{
	const __u32 *was = (const __u32 *)was8;
	int diff = 0;

#pragma unroll
	for (int i = 0; i < BFD_PKT_MAX / 4; i++)
		if (i >= from && i < to)
			diff |= in->w[i] ^ was[i];
	return !diff;
}

/*
 * RFC 5880 §6.7 for a session with BFD_CFG_AUTH (docs/fastpath.md,
 * "Authenticated sessions"). No digest is computed here. 1: the packet is,
 * byte for byte, the last one the engine verified (cfg.expect), which the
 * engine would accept again: a non-meticulous Sequence Number may repeat
 * (§6.7.3), a password is the same password. 0: the engine verifies it.
 * Below 0: -(the drop reason) of a packet the engine would refuse as well,
 * so a forger's packets die here: a section not of its type's length, another
 * type or key, a Sequence Number behind the verified one (a replay), or a
 * digest or password other than the verified one's for the same bytes.
 */
static __always_inline int auth_check(struct xdp_md *ctx, const struct bfd_ctrl *bfd, __u32 len,
				      const struct bfd_cfg *c, const struct bfd_state *st, __u64 now)
{
	union bfd_pkt in = {};
	__u32 off = (long)((void *)bfd - (void *)(long)ctx->data);

	if (len < BFD_CONTROL_LEN_AUTH || len > BFD_PKT_MAX)
		return -BFD_C_DROP_AUTH_SECTION;  /* no section of any type is that long */
	if (bpf_xdp_load_bytes(ctx, off, in.b, len))
		return -BFD_C_DROP_SHORT;
	__u8 type = in.b[24], alen = in.b[25];
	int keyed = type != BFD_AUTH_SIMPLE;

	if (BFD_CONTROL_LEN + alen > len)
		return -BFD_C_DROP_AUTH_SECTION;
	if (!keyed ? alen < 4 || alen > 19 :
	    (type == BFD_AUTH_KEYED_MD5 || type == BFD_AUTH_MET_MD5) ? alen != 24 :
	    (type == BFD_AUTH_KEYED_SHA1 || type == BFD_AUTH_MET_SHA1) ? alen != 28 : 1)
		return -BFD_C_DROP_AUTH_SECTION;
	if (type != c->auth_type)
		return -BFD_C_DROP_AUTH_TYPE;
	if (in.b[26] != c->auth_key_id)
		return -BFD_C_DROP_AUTH_KEY_ID;
	if (keyed && (c->flags & BFD_CFG_AUTH_SEQ)) {
		__u64 last = st->last_rx_ns > c->verified_ns ? st->last_rx_ns : c->verified_ns;

		/* §6.7.3: the sequence is known until twice the detection time passes without a packet. */
		if (now - last < 2 * c->detect_ns) {
			/*
			 * Only what lies behind the verified number dies here (a replay):
			 * the engine may be further on than cfg.auth_seq says, never behind
			 * it, so a number past the window goes up for the engine to judge.
			 */
			__u32 behind = c->auth_seq - bpf_ntohl(in.w[BFD_AUTH_SEQ_OFF / 4]);
			int meticulous = type == BFD_AUTH_MET_MD5 || type == BFD_AUTH_MET_SHA1;

			if ((behind && behind < 0x80000000) || (meticulous && !behind))
				return -BFD_C_DROP_AUTH_SEQUENCE;
		}
	}
	if (!c->expect_len)
		return 0;
	if (len == c->expect_len && same_words(&in, c->expect, 0, BFD_PKT_MAX / 4))
		return 1;
	if (!keyed) {
		/* The same Length and password length as the verified packet, and another password. */
		if (len == c->expect_len && alen == c->expect[25] && len == BFD_CONTROL_LEN + alen &&
		    !same_words(&in, c->expect, BFD_CONTROL_LEN / 4, BFD_PKT_MAX / 4))
			return -BFD_C_DROP_AUTH_DIGEST;
	} else if (len == c->expect_len && same_words(&in, c->expect, 0, BFD_AUTH_SEQ_OFF / 4 + 1)) {
		/* The packet and Sequence Number the engine verified, and another digest. */
		return -BFD_C_DROP_AUTH_DIGEST;
	}
	return 0;
}

/* 1 when this packet repeats one of the last two passed up, within the hold (BFD_PASS_HOLD_*NS). */
static __always_inline int repeats_passed(struct bfd_state *st, const struct bfd_ctrl *bfd, __u64 now,
					  __u64 hold)
{
	const __u32 *in = (const __u32 *)bfd;

	if ((same24(in, st->passed_a) && now - st->passed_ns_a < hold) ||
	    (same24(in, st->passed_b) && now - st->passed_ns_b < hold))
		return 1;
	/* The older slot takes it. Two CPUs may race here: the worst is one more copy passed up. */
	if (st->passed_ns_a <= st->passed_ns_b) {
		__builtin_memcpy(st->passed_a, bfd, BFD_CONTROL_LEN);
		st->passed_ns_a = now;
	} else {
		__builtin_memcpy(st->passed_b, bfd, BFD_CONTROL_LEN);
		st->passed_ns_b = now;
	}
	return 0;
}

static __always_inline int gate_open(__u64 now)
{
	__u32 zero = 0;
	struct bfd_gate *g = gate.lookup(&zero);

	return g && (!g->deadman_ns || within(now, g->heartbeat_ns, g->deadman_ns + 1));
}

/*
 * The reflector's token bucket, as GCRA: a packet conforms while the bucket's
 * theoretical arrival time runs at most burst_ns ahead of now, and each one
 * pushes it interval_ns further. The stamp is claimed by compare-and-swap
 * (initiators on several CPUs share a discriminator); a CAS lost to another
 * CPU is retried, so only the rate, never a race, refuses a packet.
 */
static __always_inline int sbfd_take_token(struct bfd_sbfd_state *st, struct bfd_sbfd_cfg *c, __u64 now)
{
#pragma unroll
	for (int i = 0; i < 4; i++) {
		__u64 tat = st->tat_ns;
		__u64 base = tat > now ? tat : now;

		if (base - now > c->burst_ns)
			return 0;
		if (__sync_val_compare_and_swap(&st->tat_ns, tat, base + c->interval_ns) == tat)
			return 1;
	}
	return 0;
}

/*
 * An address an answer may come from and go to: not multicast, broadcast,
 * unspecified or loopback (``a`` as the key holds it: IPv4 v4-mapped). A
 * request from or to one is not an initiator's, and answering it would send
 * from an address that is nobody's or to a group.
 */
static __always_inline int sbfd_unicast(const __u8 *a, int v4)
{
	const __u32 *w = (const __u32 *)a;

	if (v4) {
		__u8 first = a[12];

		return first != 0 && first != 127 && first < 224;
	}
	if (a[0] == 0xff)
		return 0;
	return w[0] || w[1] || w[2] || (w[3] != 0 && w[3] != bpf_htonl(1));
}

/*
 * S-BFD reflector (RFC 7880, RFC 7881): stateless, so the whole
 * answer is the frame we hold. RFC 5880 §6.8.6's checks that apply to a
 * packet without a session run first, each with a counter of its own (the
 * sbfd_* names: an S-BFD reject never hides among a session's); the reply
 * swaps the discriminators and the addresses, goes back to the initiator's
 * source port from 7784 with TTL 255, says Up (or AdminDown for a reflector
 * out of service), answers a Poll with Final and advertises our Required Min
 * RX. Nothing reaches userspace: answered or dropped, never passed.
 */
static __always_inline int sbfd_reflect(struct xdp_md *ctx, struct parsed *p)
{
	struct udphdr *udp = p->udp;
	struct bfd_ctrl *bfd;

	/* 7784 is the reflector's source port: a frame from it is a reflection, and answering
	 * it would set two reflectors talking to each other for ever (RFC 7881). */
	if (udp->source == bpf_htons(BFD_PORT_SBFD))
		return drop(BFD_C_DROP_SBFD_SPORT);
	if (!sbfd_unicast(p->key.local, p->ip4 != NULL) || !sbfd_unicast(p->key.peer, p->ip4 != NULL))
		return drop(BFD_C_DROP_SBFD_ADDRESS);
	int payload = udp_payload_len(&p->nh, udp);
	if (payload < 0)
		return drop(BFD_C_DROP_SBFD_SHORT);
	int r = parse_bfdhdr(&p->nh, payload, &bfd);
	if (r)
		return drop(r == BFD_C_DROP_VERSION ? BFD_C_DROP_SBFD_VERSION : BFD_C_DROP_SBFD_SHORT);
	__u8 flags = bfd->flags;
	__u8 len = bfd->length;
	if (len < ((flags & BFD_FLAG_AUTH) ? BFD_CONTROL_LEN_AUTH : BFD_CONTROL_LEN) || len > payload)
		return drop(BFD_C_DROP_SBFD_LENGTH);
	if (bfd->detect_mult == 0)
		return drop(BFD_C_DROP_SBFD_DETECT_MULT);
	if (flags & BFD_FLAG_MULTIPOINT)
		return drop(BFD_C_DROP_SBFD_MULTIPOINT);
	if (!bfd->my_discr)
		return drop(BFD_C_DROP_SBFD_MY_DISCR);
	/* The reflector is found by Your Discriminator alone (RFC 7880): 0 names none. */
	if (!bfd->your_discr)
		return drop(BFD_C_DROP_SBFD_YOUR_DISCR_ZERO);
	__u32 d = bpf_ntohl(bfd->your_discr);
	struct bfd_sbfd_cfg *c = sbfd_cfg.lookup(&d);
	struct bfd_sbfd_state *st = sbfd_state.lookup(&d);
	if (!c || !st || !(c->flags & BFD_SBFD_ACTIVE))
		return drop(BFD_C_DROP_SBFD_UNKNOWN);
	/* No keys are configured for S-BFD and digests are not computed here. */
	if (flags & BFD_FLAG_AUTH)
		return drop(BFD_C_DROP_SBFD_AUTH);
	__u64 now = bpf_ktime_get_ns();
	/* A wedged engine must not look alive through its reflector either (the dead-man gate). */
	if (!gate_open(now))
		return drop(BFD_C_DROP_SBFD_GATED);
	if (!sbfd_take_token(st, c, now)) {
		__sync_fetch_and_add(&st->rate_limited, 1);
		return drop(BFD_C_DROP_SBFD_RATE);
	}

	/* The answer, as a one-packet session template for reply(). */
	struct bfd_cfg rc = {};
	struct bfd_ctrl *t = (struct bfd_ctrl *)rc.reply;
	t->vers_diag = (BFD_VERSION << BFD_VERSION_SHIFT) | c->diag;
	t->flags = c->state << BFD_STATE_SHIFT;
	t->detect_mult = bfd->detect_mult;
	t->length = BFD_CONTROL_LEN;
	t->my_discr = bfd->your_discr;
	t->desired_min_tx = bfd->desired_min_tx;
	t->required_min_rx = c->min_rx;
	rc.sport = bpf_htons(BFD_PORT_SBFD);
	rc.dport = udp->source;
	r = reply(ctx, p, bfd, &rc, bfd->my_discr, flags & BFD_FLAG_POLL);
	if (r != XDP_TX)  /* the frame could not be shortened to 24 bytes of BFD */
		return drop(BFD_C_DROP_SBFD_LENGTH);
	__sync_fetch_and_add(&st->answered, 1);
	st->last_ns = now;
	count(BFD_C_SBFD_TX);
	return XDP_TX;
}

int xdp_bfd_rx(struct xdp_md *ctx)
{
	struct parsed p = {};
	struct bfd_ctrl *bfd;
	int r = parse(ctx, &p);

	if (r == 0)
		return pass_other(&p);
	if (r < 0)
		return drop(-r);
	if (p.dport == BFD_PORT_ECHO)
		return echo(&p);
	if (p.dport == BFD_PORT_SBFD)
		return sbfd_reflect(ctx, &p);
	/* RFC 5881 §5 (GTSM): single-hop packets arrive with TTL 255 or were forwarded. */
	if (p.dport == BFD_PORT_CONTROL && p.ttl != BFD_TTL)
		return drop(BFD_C_DROP_TTL);

	int payload = udp_payload_len(&p.nh, p.udp);
	if (payload < 0)
		return drop(BFD_C_DROP_SHORT);
	/* RFC 5880 §6.8.6, in its order. */
	r = parse_bfdhdr(&p.nh, payload, &bfd);
	if (r)
		return drop(r);
	__u8 flags = bfd->flags;
	__u8 len = bfd->length;
	if (len < ((flags & BFD_FLAG_AUTH) ? BFD_CONTROL_LEN_AUTH : BFD_CONTROL_LEN) || len > payload)
		return drop(BFD_C_DROP_LENGTH);
	if (bfd->detect_mult == 0)
		return drop(BFD_C_DROP_DETECT_MULT);
	if (flags & BFD_FLAG_MULTIPOINT)
		return drop(BFD_C_DROP_MULTIPOINT);
	__be32 my_discr = bfd->my_discr, your_discr = bfd->your_discr;
	if (!my_discr)
		return drop(BFD_C_DROP_MY_DISCR);

	__u32 idx;
	struct bfd_cfg *c;
	if (your_discr) {
		c = cfg_of_discr(bpf_ntohl(your_discr), &idx);
		if (!c)
			return drop(BFD_C_DROP_YOUR_DISCR);
	} else {
		if (bfd_state(bfd) >= BFD_STATE_INIT)  /* Init or Up must name our discriminator */
			return drop(BFD_C_DROP_YOUR_DISCR_ZERO);
		__u32 *slot = lookup_by_path(&p.key);

		p.key.ifindex = ctx->ingress_ifindex;
		if (!slot)
			return drop(BFD_C_DROP_NO_SESSION);
		idx = *slot;
		c = slot_cfg.lookup(&idx);
	}
	struct bfd_state *st = slot_state.lookup(&idx);
	if (!c || !st || !(c->flags & BFD_CFG_ACTIVE))
		return drop(BFD_C_DROP_NO_SESSION);
	/* Whatever found the session, the packet must come along its path. */
	if (!same16(c->peer, p.key.peer) || c->multihop != p.key.multihop ||
	    (c->ifindex && c->ifindex != p.key.ifindex))
		return drop(BFD_C_DROP_PATH);
	if (p.key.multihop && p.ttl < c->min_ttl)
		return drop(BFD_C_DROP_MIN_TTL);
	if ((flags & BFD_FLAG_AUTH) && !(c->flags & BFD_CFG_AUTH))
		return drop(BFD_C_DROP_AUTH_UNEXPECTED);
	if (!(flags & BFD_FLAG_AUTH) && (c->flags & BFD_CFG_AUTH))
		return drop(BFD_C_DROP_AUTH_MISSING);

	__u64 now = bpf_ktime_get_ns();
	int verified = 1;  /* what stamps the peer alive: without authentication, every valid packet */
	if (c->flags & BFD_CFG_AUTH) {
		r = auth_check(ctx, bfd, len, c, st, now);
		if (r < 0)
			return drop(-r);
		verified = r;
	}
	if (verified)
		st->last_rx_ns = now;
	/* The way back to the peer, for the transmit clock (tick.c): what a reply would use. */
	st->rx_ifindex = p.key.ifindex;
	__builtin_memcpy(st->rx_eth, p.eth, sizeof(st->rx_eth));
	__builtin_memcpy(st->rx_local, p.key.local, sizeof(st->rx_local));
	__sync_fetch_and_add(&st->rx_packets, 1);
	__sync_fetch_and_add(&st->rx_bytes, len);
	if (c->flags & BFD_CFG_AUTH) {
		/*
		 * Never answered here: our reply would need a digest. The verified
		 * packet again, while the sweep watches the session, is accepted (the
		 * engine has it); anything else goes up to be verified.
		 */
		if (verified && (c->flags & BFD_CFG_DETECT))
			return drop(BFD_C_AUTH_STEADY);
		count(BFD_C_XDP_PASS);
		return XDP_PASS;
	}

	if (!gate_open(now) || !(c->flags & (BFD_CFG_KTX | BFD_CFG_FINAL)) || st->expired_epoch == c->epoch)
		goto up;

	int steady = (c->flags & BFD_CFG_KTX) && same24((const __u32 *)bfd, c->expect);
	if (steady) {
		/*
		 * RFC 5880 §6.8.7: never faster than 0.75 x the interval; an early reply
		 * is skipped. The stamp is claimed, not just read: the transmit clock
		 * (tick.c) may be sending for this session on another CPU right now.
		 */
		__u64 last = st->last_ktx_ns;
		if (within(now, last, c->min_gap_ns) || __sync_val_compare_and_swap(&st->last_ktx_ns, last, now) != last) {
			__sync_fetch_and_add(&st->early_skips, 1);
			count(BFD_C_TX_EARLY);
			return XDP_DROP;
		}
	} else if (!((flags & BFD_FLAG_POLL) && bfd_state(bfd) == BFD_STATE_UP && (c->flags & BFD_CFG_FINAL))) {
		goto up;
	} else {
		/*
		 * A Poll while Up: answer with Final now (§6.8.7: whatever the transmit
		 * timer says), and tell the engine what it asked. Also for a session
		 * whose steady packets XDP does not answer: at bring-up every peer
		 * announces its fast rate with a Poll, and left to userspace those
		 * Polls repeat at that rate until answered (docs/fastpath.md). A
		 * peer repeats its Poll until our Final reaches its own reader: the
		 * engine hears each one once per BFD_PASS_HOLD_NS.
		 */
		if (repeats_passed(st, bfd, now, BFD_PASS_HOLD_NS)) {
			count(BFD_C_POLL_REPEAT);
		} else {
			struct bfd_event ev = {};
			ev.ifindex = p.key.ifindex;
			ev.ttl = p.ttl;
			__builtin_memcpy(ev.pkt, bfd, BFD_CONTROL_LEN);
			emit(BFD_EV_POLL, idx, c, c->epoch, now, now, &ev);
		}
	}
	/*
	 * A steady reply claimed the "last sent" stamp above. A Final does not
	 * touch it: §6.8.7 sends it outside the periodic schedule, and a clock
	 * (tick.c) that counted it would move its next periodic packet.
	 */
	r = reply(ctx, &p, bfd, c, my_discr, flags & BFD_FLAG_POLL);
	if (r == XDP_TX) {
		__sync_fetch_and_add(&st->ktx_packets, 1);
		__sync_fetch_and_add(&st->ktx_bytes, BFD_CONTROL_LEN);
		count(BFD_C_XDP_TX);
	}
	return r;
up:
	/*
	 * Unwatched (Down, AdminDown, Demand), a session's repeats are held back
	 * too, but never a Final: a Poll of ours may have been answered by the
	 * same bytes as the last one, and the session times that answer itself.
	 * A Down session hears a peer that still says Up once per (longer) hold,
	 * not at its fast rate (the bring-up storm, docs/fastpath.md).
	 */
	if ((c->flags & BFD_CFG_DETECT) ? repeats_passed(st, bfd, now, BFD_PASS_HOLD_NS)
					: !(flags & BFD_FLAG_FINAL) && repeats_passed(st, bfd, now, BFD_PASS_HOLD_IDLE_NS)) {
		count(BFD_C_PASS_REPEAT);
		return XDP_DROP;
	}
	count(BFD_C_XDP_PASS);
	return XDP_PASS;
}
