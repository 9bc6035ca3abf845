"""The observer is tested too: pcap decoding and gap statistics."""

from __future__ import annotations

import struct

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw
from scapy.utils import wrpcap

from harness import capture
from harness.capture import gap_stats, gaps_ms, read_pcap
from harness.inject import auth_simple, bfd_control


def _write(tmp_path, frames):
    path = tmp_path / "t.pcap"
    pkts = []
    for ts, f in frames:
        p = Ether(bytes(f))
        p.time = ts
        pkts.append(p)
    wrpcap(str(path), pkts, nano=True)
    return path


def test_decodes_v4_v6_vlan_and_fields(tmp_path):
    payload = bfd_control(
        state="init", diag=3, my_discr=7, your_discr=9, flags="PC", desired_min_tx_us=10_000
    )
    v4 = (
        Ether()
        / IP(src="198.19.1.1", dst="198.19.1.2", ttl=255)
        / UDP(sport=49152, dport=3784)
        / Raw(payload)
    )
    v6 = Ether() / Dot1Q(vlan=42) / IPv6(src="fd00:bfd:1::1", dst="fd00:bfd:1::2", hlim=254)
    v6 = v6 / UDP(sport=49153, dport=4784) / Raw(payload)
    other = Ether() / IP(src="198.19.1.1", dst="198.19.1.2") / UDP(sport=53, dport=53) / Raw(b"x")
    pkts = read_pcap(_write(tmp_path, [(1.0, v4), (1.5, other), (2.000000123, v6)]))
    assert len(pkts) == 2
    a, b = pkts
    assert (a.src, a.dst, a.sport, a.dport, a.ttl, a.vlan) == (
        "198.19.1.1",
        "198.19.1.2",
        49152,
        3784,
        255,
        None,
    )
    assert (a.state, a.diag, a.poll, a.final, a.cpi) == ("init", 3, True, False, True)
    assert (a.my_discr, a.your_discr, a.desired_min_tx_us, a.udp_csum_ok) == (7, 9, 10_000, True)
    assert (b.src, b.vlan, b.ttl, b.dport, b.udp_csum_ok) == ("fd00:bfd:1::1", 42, 254, 4784, True)
    assert b.ts == pytest.approx(2.000000123, abs=1e-9)


def test_bad_udp_checksum_is_seen(tmp_path):
    f = Ether() / IP(src="198.19.1.1", dst="198.19.1.2") / UDP(sport=49152, dport=3784, chksum=0x1234)
    pkts = read_pcap(_write(tmp_path, [(1.0, f / Raw(bfd_control()))]))
    assert pkts[0].udp_csum_ok is False


def test_a_record_still_being_written_is_not_read(tmp_path):
    """A snapshot taken while tcpdump writes sees the last record cut short; it must not be read
    as a short packet (a keyed-MD5 packet without its digest looked unsigned)."""
    f = Ether() / IP(src="198.19.1.1", dst="198.19.1.2") / UDP(sport=49152, dport=3784)
    path = _write(
        tmp_path, [(1.0, f / Raw(bfd_control(state="down"))), (2.0, f / Raw(bfd_control(state="up")))]
    )
    whole = path.read_bytes()
    assert [p.state for p in read_pcap(path)] == ["down", "up"]
    for cut in (1, 10, 30):
        path.write_bytes(whole[:-cut])
        assert [p.state for p in read_pcap(path)] == ["down"], cut


def test_malformed_lengths_decode_leniently():
    raw = bfd_control(version=7, length=200, auth=auth_simple(1, b"pw"), flags="A")
    assert raw[0] >> 5 == 7 and raw[3] == 200 and len(raw) == 24 + 5
    assert struct.unpack_from("!BBB", raw, 24) == (1, 5, 1)


def test_gap_stats_nearest_rank():
    gaps = [10.0] * 99 + [500.0]
    s = gap_stats(gaps)
    assert (s.n, s.p50, s.max) == (100, 10.0, 500.0)
    # With 100 gaps, p99 is the 99th smallest: the single 500 ms stall shows only in max.
    assert s.p99 == 10.0
    assert gap_stats([*gaps, 500.0]).p99 == 500.0


def test_gaps_ms_from_timestamps():
    class P:
        def __init__(self, ts):
            self.ts = ts

    assert gaps_ms([P(1.0), P(1.01), P(1.03)]) == pytest.approx([10.0, 20.0])
    # Stored out of time order (two CPUs' stamps): the gaps are between times, none negative.
    assert gaps_ms([P(1.0), P(1.031), P(1.019), P(1.04)]) == pytest.approx([19.0, 12.0, 9.0])
    with pytest.raises(ValueError):
        gap_stats([])


def test_tcpdumps_closing_report_gives_the_kernels_drops():
    report = "12 packets captured\n15 packets received by filter\n3 packets dropped by kernel\n"
    assert capture._kernel_drops(report) == 3
    assert capture._kernel_drops("1 packet captured\n0 packets dropped by kernel\n") == 0
    # Killed before its report: no figure, not a zero.
    assert capture._kernel_drops("listening on veth-p\n") is None
