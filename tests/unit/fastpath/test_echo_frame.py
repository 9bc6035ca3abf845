"""The echo originator's frame, checked by an independent decoder (scapy), both families."""

from __future__ import annotations

import ipaddress

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from xdp_bfd.fastpath.echo import echo_frame
from xdp_bfd.fastpath.slots import mapped16
from xdp_bfd.wire.echo import EchoPacket, decode_echo, encode_echo

PEER_MAC, OUR_MAC = bytes.fromhex("020000000002"), bytes.fromhex("020000000001")


@pytest.mark.parametrize("addr", ["198.19.1.1", "fd00:bfd:1::1"])
def test_the_probe_is_addressed_to_ourselves_at_the_peers_mac_with_good_checksums(addr: str) -> None:
    payload = encode_echo(EchoPacket(0x01020304, 5, 7, 123_456_789))
    frame = echo_frame(PEER_MAC + OUR_MAC, mapped16(ipaddress.ip_address(addr)), 65535, payload)
    pkt = Ether(frame)
    assert (pkt.dst, pkt.src) == ("02:00:00:00:00:02", "02:00:00:00:00:01")
    ip = pkt[IP] if IP in pkt else pkt[IPv6]
    assert ip.src == ip.dst == addr
    assert (ip.ttl if IP in pkt else ip.hlim) == 255
    assert (ip.tos if IP in pkt else ip.tc) == 0xC0
    udp = pkt[UDP]
    assert (udp.sport, udp.dport, udp.len) == (65535, 3785, 8 + 24)
    got_ip, got_udp = (ip.chksum if IP in pkt else None), udp.chksum
    # Rebuilt by scapy with the checksums recomputed: ours must be the same.
    again = Ether(frame)
    if IP in again:
        del again[IP].chksum
    del again[UDP].chksum
    again = Ether(bytes(again))
    assert again[UDP].chksum == got_udp != 0
    if got_ip is not None:
        assert again[IP].chksum == got_ip
    assert decode_echo(bytes(udp.payload)) == EchoPacket(0x01020304, 5, 7, 123_456_789)
