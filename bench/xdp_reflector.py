"""A bare XDP reflector: the floor a BFD fast path is compared with.

Run inside a namespace by ``fastpath_cost.py``: parses Ethernet/IPv4/UDP, and
for UDP 3784/3785 swaps the MAC addresses and returns XDP_TX. No maps, no
checks, no checksum work. Prints ``ready`` once attached, then waits for EOF on
stdin (or ``--max-seconds``) and detaches. The caller reads the program's run
stats from /proc/<pid>/fdinfo.
"""

from __future__ import annotations

import argparse
import select
import sys
import time

INCLUDES = r"""
#include <uapi/linux/bpf.h>
#include <uapi/linux/if_ether.h>
#include <uapi/linux/in.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/udp.h>
"""

# The body in two parts, so that bench/cold_floor.py can put work between them.
PARSE = r"""
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct udphdr *udp = data + sizeof(*eth) + sizeof(*ip);
	unsigned char mac[ETH_ALEN];

	if ((void *)(udp + 1) > end)
		return XDP_PASS;
	if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
		return XDP_PASS;
	if (udp->dest != bpf_htons(3784) && udp->dest != bpf_htons(3785))
		return XDP_PASS;
"""
ANSWER = r"""
	__builtin_memcpy(mac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, mac, ETH_ALEN);
	return XDP_TX;
"""

PROGRAM = INCLUDES + "int bare_reflect(struct xdp_md *ctx)\n{" + PARSE + ANSWER + "}\n"

FLAGS = {"generic": 2, "native": 4}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("ifname")
    ap.add_argument("mode", choices=sorted(FLAGS))
    ap.add_argument("--max-seconds", type=float, default=300.0)
    args = ap.parse_args()
    from bcc import BPF  # noqa: PLC0415

    b = BPF(text=PROGRAM)
    fn = b.load_func(b"bare_reflect", BPF.XDP)
    b.attach_xdp(args.ifname, fn, FLAGS[args.mode])
    try:
        print("ready", flush=True)
        deadline = time.monotonic() + args.max_seconds
        while time.monotonic() < deadline:
            readable, _, _ = select.select([sys.stdin], [], [], 1.0)
            if readable and not sys.stdin.readline():
                break
    finally:
        b.remove_xdp(args.ifname, FLAGS[args.mode])
    return 0


if __name__ == "__main__":
    sys.exit(main())
