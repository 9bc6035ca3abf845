"""Byte-level builders of the frames ``harness.inject`` cannot make whole.

``harness.inject`` builds well-formed frames (a BFD payload wrapped by scapy
into Ethernet, an optional 802.1Q tag, IPv4 or IPv6, and UDP). What the fast
path's tests need besides is built or edited here, on the bytes themselves:
FRR's echo payload, IPv4 options, a frame whose fragment field or UDP Length
is set after the fact (the IPv4 header checksum kept valid, so the frame is
wrong in that one field only), and seeded mutations of a control packet.
Nothing here reads the engine's code: the frames stay an independent input.
"""

from __future__ import annotations

import random
import struct

ETH_HLEN = 14  # destination and source MAC, EtherType
VLAN_HLEN = 4  # one 802.1Q tag
ETHERTYPE_8021Q = b"\x81\x00"
IPV6_HLEN = 40


def l3_offset(frame: bytes) -> int:
    """Where the IP header starts: after the Ethernet header and at most one 802.1Q tag."""
    return ETH_HLEN + VLAN_HLEN if frame[12:14] == ETHERTYPE_8021Q else ETH_HLEN


def ip_checksum(header: bytes) -> int:
    """The Internet checksum of an (even-length) header; 0 over a header whose checksum is right."""
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def with_ipv4_frag(frame: bytes, frag_off: int) -> bytes:
    """The IPv4 frame with its flags/fragment-offset field set and the header checksum redone."""
    off = l3_offset(frame)
    ihl = (frame[off] & 0x0F) * 4
    hdr = bytearray(frame[off : off + ihl])
    struct.pack_into("!H", hdr, 6, frag_off)
    struct.pack_into("!H", hdr, 10, 0)
    struct.pack_into("!H", hdr, 10, ip_checksum(bytes(hdr)))
    return frame[:off] + bytes(hdr) + frame[off + ihl :]


def with_udp_len(frame: bytes, udp_len: int) -> bytes:
    """The frame with a UDP Length field that lies (IP lengths untouched; checksum zeroed)."""
    off = l3_offset(frame)
    l4 = off + ((frame[off] & 0x0F) * 4 if frame[off] >> 4 == 4 else IPV6_HLEN)
    out = bytearray(frame)
    struct.pack_into("!HH", out, l4 + 4, udp_len, 0)
    return bytes(out)


def echo_payload(tag: int) -> bytes:
    """An echo payload in FRR's layout (version 1, length 16, discriminator, sequence); opaque to XDP."""
    return struct.pack("!BBHIQ", 1 << 5, 16, 0, 0xEC40_0000 | tag, tag)


def ip_nops(n: int) -> bytes:
    """``n`` bytes of IPv4 NOP options (``n`` a multiple of 4 keeps the IHL whole)."""
    return b"\x01" * n


def mutate_control(payload: bytearray, rng: random.Random, unknown: int) -> None:
    """One change, in place, to a genuine control packet, aimed at one field or another.

    ``unknown`` is a Your Discriminator no session has; the choices are drawn
    from ``rng`` alone, so a seed gives the same mutations every run.
    """
    op = rng.randrange(10)
    if op == 0:
        payload[rng.randrange(4)] ^= 1 << rng.randrange(8)  # version/diag, flags, mult, length
    elif op == 1:
        payload[4:8] = bytes(4)  # my discr
    elif op == 2:
        payload[8:12] = bytes(4)  # your discr (and the state decides)
        payload[1] = (payload[1] & 0x3F) | rng.randrange(4) << 6
    elif op == 3:
        payload[8:12] = rng.choice((unknown, rng.getrandbits(32))).to_bytes(4, "big")
    elif op == 4:
        payload[2] = 0  # detect mult
    elif op == 5:
        payload[1] |= rng.choice((0x01, 0x04, 0x05))  # M, A
    elif op == 6:
        payload[3] = rng.choice((0, 1, 23, 25, 26, 255))  # length field
    elif op == 7:
        payload[0] = rng.randrange(8) << 5 | payload[0] & 0x1F  # version
    else:
        payload[rng.randrange(len(payload))] = rng.randrange(256)
