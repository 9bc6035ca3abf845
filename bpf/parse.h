/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Header parsing for every path of the XDP program, in the shape of
 * xdp-tools' parsing_helpers.h: a cursor walks the frame from the front, and
 * each helper checks that the header it hands out lies inside the frame
 * before anything reads it, moves the cursor past it, and returns what comes
 * next (-1: cut short or malformed). No caller reads a header the helper did
 * not check, so there is no offset to mask for the verifier.
 *
 * No maps here (bcc rewrites map calls only in its main file) and no map
 * layouts: the --pin layout id hashes maps.h and what it includes, and a
 * change here must stay a change of program, adoptable by a successor.
 */
#ifndef BFD_PARSE_H
#define BFD_PARSE_H

#include <uapi/linux/if_ether.h>
#include <uapi/linux/in.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/ipv6.h>
#include <uapi/linux/udp.h>

#include "bfd_abi.h"

/* IPv4 frag_off (host order); the kernel's IP_MF/IP_OFFSET are not UAPI. */
#define IPV4_DF 0x4000
#define IPV4_MF 0x2000
#define IPV4_OFFSET 0x1fff

/* IPv6 extension headers skipped to find what they hide (BFD itself never uses one). */
#define IPV6_EXT_MAX 3
#define IPV6_EXT_SEEN 0x01
#define IPV6_EXT_FRAGMENT 0x02

struct hdr_cursor {
	void *pos;
	void *end;
};

struct bfd_vlan_hdr {
	__be16 tci;
	__be16 proto;
};

static __always_inline void cursor_init(struct hdr_cursor *nh, struct xdp_md *ctx)
{
	nh->pos = (void *)(long)ctx->data;
	nh->end = (void *)(long)ctx->data_end;
}

/* Ethernet and at most one 802.1Q tag: the EtherType after them (network order), or -1. */
static __always_inline int parse_ethhdr(struct hdr_cursor *nh, struct ethhdr **ethhdr)
{
	struct ethhdr *eth = nh->pos;
	struct bfd_vlan_hdr *vlan;
	__be16 proto;

	if ((void *)(eth + 1) > nh->end)
		return -1;
	nh->pos = eth + 1;
	*ethhdr = eth;
	proto = eth->h_proto;
	if (proto == bpf_htons(ETH_P_8021Q)) {
		vlan = nh->pos;
		if ((void *)(vlan + 1) > nh->end)
			return -1;
		nh->pos = vlan + 1;
		proto = vlan->proto;
	}
	return proto;
}

/* IPv4 with its options: the protocol, or -1 (IHL below 5, or the header longer than the frame). */
static __always_inline int parse_iphdr(struct hdr_cursor *nh, struct iphdr **iphdr)
{
	struct iphdr *ip = nh->pos;
	__u32 len;

	if ((void *)(ip + 1) > nh->end)
		return -1;
	len = ip->ihl * 4;
	if (len < sizeof(*ip) || nh->pos + len > nh->end)
		return -1;
	nh->pos += len;
	*iphdr = ip;
	return ip->protocol;
}

/* The fixed IPv6 header: the next header, or -1. */
static __always_inline int parse_ip6hdr(struct hdr_cursor *nh, struct ipv6hdr **ip6hdr)
{
	struct ipv6hdr *ip6 = nh->pos;

	if ((void *)(ip6 + 1) > nh->end)
		return -1;
	nh->pos = ip6 + 1;
	*ip6hdr = ip6;
	return ip6->nexthdr;
}

/*
 * Skip up to IPV6_EXT_MAX extension headers (hop-by-hop, routing,
 * destination options, fragment) after the header ``nexthdr`` names: the
 * first header that is not one of them, or -1 when one is cut short. *seen
 * gets IPV6_EXT_SEEN for any skipped, IPV6_EXT_FRAGMENT for a fragment header.
 */
static __always_inline int skip_ip6hdrext(struct hdr_cursor *nh, int nexthdr, __u8 *seen)
{
#pragma unroll
	for (int i = 0; i < IPV6_EXT_MAX; i++) {
		struct ipv6_opt_hdr *h = nh->pos;
		__u32 len;

		if (nexthdr == IPPROTO_FRAGMENT) {
			len = 8;
			*seen |= IPV6_EXT_FRAGMENT;
		} else if (nexthdr == IPPROTO_HOPOPTS || nexthdr == IPPROTO_ROUTING || nexthdr == IPPROTO_DSTOPTS) {
			if ((void *)(h + 1) > nh->end)
				return -1;
			len = ((__u32)h->hdrlen + 1) * 8;
		} else {
			return nexthdr;
		}
		if (nh->pos + len > nh->end)
			return -1;
		*seen |= IPV6_EXT_SEEN;
		nexthdr = h->nexthdr;
		nh->pos += len;
	}
	return nexthdr;
}

/* The UDP header: 0, or -1 when it is cut short. */
static __always_inline int parse_udphdr(struct hdr_cursor *nh, struct udphdr **udphdr)
{
	struct udphdr *udp = nh->pos;

	if ((void *)(udp + 1) > nh->end)
		return -1;
	nh->pos = udp + 1;
	*udphdr = udp;
	return 0;
}

/*
 * The payload ``udp`` (just parsed, the cursor after it) claims: its length,
 * or -1 when the length field is below the header's own size or runs past
 * the frame. The cursor stays at the payload.
 */
static __always_inline int udp_payload_len(struct hdr_cursor *nh, const struct udphdr *udp)
{
	__u32 len = bpf_ntohs(udp->len);

	if (len < sizeof(*udp))
		return -1;
	len -= sizeof(*udp);
	if (nh->pos + len > nh->end)
		return -1;
	return len;
}

static __always_inline __u8 bfd_version(const struct bfd_ctrl *b)
{
	return b->vers_diag >> BFD_VERSION_SHIFT;
}

static __always_inline __u8 bfd_state(const struct bfd_ctrl *b)
{
	return b->flags >> BFD_STATE_SHIFT;
}

/*
 * The BFD control header at the cursor, in a UDP payload of ``len`` bytes,
 * with RFC 5880 §6.8.6's first checks in its order (the version is read from
 * the first byte before the length is known to be enough): 0 with *bfdhdr
 * set, or the counter of the reason to drop it.
 */
static __always_inline int parse_bfdhdr(struct hdr_cursor *nh, int len, struct bfd_ctrl **bfdhdr)
{
	struct bfd_ctrl *bfd = nh->pos;

	if (len < 1 || nh->pos + 1 > nh->end)
		return BFD_C_DROP_SHORT;
	if (bfd_version(bfd) != BFD_VERSION)
		return BFD_C_DROP_VERSION;
	if (len < BFD_CONTROL_LEN || (void *)(bfd + 1) > nh->end)
		return BFD_C_DROP_SHORT;
	*bfdhdr = bfd;
	return 0;
}

#endif /* BFD_PARSE_H */
