"""Build any BFD packet, valid or malformed, and send it from a namespace.

The payload builder is plain struct packing with every field overridable
(a length that lies, version 7, the M bit…); scapy wraps it into Ethernet,
an optional 802.1Q tag, IPv4 (with options if asked) or IPv6, and UDP with a
correct checksum unless told otherwise. Frames leave through an AF_PACKET
socket opened inside the namespace, so they enter the peer's XDP hook exactly
as a real peer's would.
"""

from __future__ import annotations

import hashlib
import ipaddress
import socket
import struct

from scapy.layers.inet import IP, UDP, IPOption
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw

from .netns import Namespace

STATE = {"admin_down": 0, "down": 1, "init": 2, "up": 3}
FLAG_BITS = {"P": 0x20, "F": 0x10, "C": 0x08, "A": 0x04, "D": 0x02, "M": 0x01}


def bfd_control(
    *,
    state: str = "up",
    diag: int = 0,
    my_discr: int = 1,
    your_discr: int = 0,
    detect_mult: int = 3,
    desired_min_tx_us: int = 300_000,
    required_min_rx_us: int = 300_000,
    required_min_echo_rx_us: int = 0,
    flags: str = "",
    version: int = 1,
    length: int | None = None,
    auth: bytes = b"",
    trailer: bytes = b"",
) -> bytes:
    """A control packet; ``length`` defaults to the true length, ``auth`` is the raw section."""
    bits = STATE[state] << 6
    for f in flags:
        bits |= FLAG_BITS[f]
    body_len = 24 + len(auth)
    head = struct.pack(
        "!BBBBIIIII",
        (version << 5) | (diag & 0x1F),
        bits,
        detect_mult,
        body_len if length is None else length,
        my_discr,
        your_discr,
        desired_min_tx_us,
        required_min_rx_us,
        required_min_echo_rx_us,
    )
    return head + auth + trailer


def auth_simple(key_id: int, password: bytes) -> bytes:
    return struct.pack("!BBB", 1, 3 + len(password), key_id) + password


def auth_keyed(auth_type: int, key_id: int, seq: int, digest: bytes) -> bytes:
    return struct.pack("!BBBxI", auth_type, 8 + len(digest), key_id, seq) + digest


# RFC 5880 §4.1's Auth Type codes by the sessions file's names, and the keyed types' hashes.
AUTH_TYPES = {
    "simple": 1,
    "keyed-md5": 2,
    "meticulous-keyed-md5": 3,
    "keyed-sha1": 4,
    "meticulous-keyed-sha1": 5,
}
METICULOUS = {3, 5}
HASHES = {2: ("md5", 16), 3: ("md5", 16), 4: ("sha1", 20), 5: ("sha1", 20)}


def keyed_digest(packet: bytes, auth_type: int, secret: bytes) -> bytes:
    """§6.7.3/§6.7.4, computed here and not by the engine's codec: hash the packet with the digest
    field holding the zero-padded secret."""
    name, size = HASHES[auth_type]
    keyed = packet[:32] + secret.ljust(size, b"\0") + packet[32 + size :]
    return hashlib.new(name, keyed).digest()


def seq_of(payload: bytes) -> int:
    """Sequence number of a keyed auth section (bytes 28..32)."""
    return struct.unpack_from("!I", payload, 28)[0]


def udp_frame(
    *,
    src_mac: str,
    dst_mac: str,
    src: str,
    dst: str,
    sport: int,
    dport: int,
    payload: bytes,
    ttl: int = 255,
    vlan: int | None = None,
    ip_options: bytes = b"",
    udp_checksum: int | None = None,
) -> bytes:
    eth = Ether(src=src_mac, dst=dst_mac)
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan)
    if ipaddress.ip_address(src).version == 4:
        ip = IP(src=src, dst=dst, ttl=ttl, tos=0xC0)
        if ip_options:
            ip.options = [IPOption(ip_options)]
    else:
        ip = IPv6(src=src, dst=dst, hlim=ttl, tc=0xC0)
    udp = UDP(sport=sport, dport=dport)
    if udp_checksum is not None:
        udp.chksum = udp_checksum
    return bytes(eth / ip / udp / Raw(payload))


def send_frames(ns: Namespace, ifname: str, frames: list[bytes]) -> int:
    """Send raw Ethernet frames out of ``ifname`` in ``ns``; returns how many were sent."""
    s = ns.socket(socket.AF_PACKET, socket.SOCK_RAW)
    try:
        s.bind((ifname, 0))
        for f in frames:
            s.send(f)
    finally:
        s.close()
    return len(frames)
