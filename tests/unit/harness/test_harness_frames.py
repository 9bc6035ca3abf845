"""The fast-path tests' own tools are tested too: frame editors and the XDP oracle.

No kernel here: the frames are checked against scapy's own parse and by hand,
and the oracle against the rules as ``docs/fastpath.md`` states them.
"""

from __future__ import annotations

import random
import struct

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from harness.frames import (
    echo_payload,
    ip_checksum,
    ip_nops,
    l3_offset,
    mutate_control,
    with_ipv4_frag,
    with_udp_len,
)
from harness.inject import auth_simple, bfd_control, udp_frame
from harness.xdp_oracle import KernelTable, kernel_verdict, mapped16

MAC_P, MAC_D = "02:00:00:00:00:01", "02:00:00:00:00:02"
IFINDEX = 7
# The engine's (local) and the peer's addresses of each session, and its local discriminator.
V4 = ("198.19.1.1", "198.19.1.2")
V6 = ("fd00:bfd:1::1", "fd00:bfd:1::2")
MH = ("198.19.1.11", "198.19.1.12")  # multihop, minimum TTL 254
AU = ("198.19.1.1", "198.19.1.13")  # single-hop with authentication
DISCR = {"v4": 0x11, "v6": 0x22, "mh": 0x33, "au": 0x44}
PEER_DISCR = 0xABC  # the peer's own (My Discriminator in its packets)
STRANGER4 = "198.19.1.99"


def _frame(
    path: tuple[str, str], payload: bytes, *, dport: int = 3784, src: str | None = None, **kw
) -> bytes:
    """A frame from the peer to us on ``path`` (local, peer) unless ``src`` says otherwise."""
    local, peer = path
    return udp_frame(
        src_mac=MAC_P,
        dst_mac=MAC_D,
        src=src or peer,
        dst=local,
        sport=49999,
        dport=dport,
        payload=payload,
        **kw,
    )


def _poll(session: str, **over: object) -> bytes:
    fields: dict = {"state": "up", "flags": "P", "my_discr": PEER_DISCR, "your_discr": DISCR[session]}
    fields.update(over)
    return bfd_control(**fields)


@pytest.fixture
def table() -> KernelTable:
    t = KernelTable(IFINDEX)
    t.add_session(DISCR["v4"], *V4)
    t.add_session(DISCR["v6"], *V6)
    t.add_session(DISCR["mh"], *MH, multihop=True, min_ttl=254)
    t.add_session(DISCR["au"], *AU, auth=True)
    return t


# --- frames ---------------------------------------------------------------------


def test_ip_checksum_of_a_known_header():
    # The classic example header (192.168.0.1 -> 192.168.0.199, UDP): checksum 0xB861.
    hdr = bytes.fromhex("450000730000400040110000c0a80001c0a800c7")
    assert ip_checksum(hdr) == 0xB861
    assert ip_checksum(hdr[:10] + b"\xb8\x61" + hdr[12:]) == 0


@pytest.mark.parametrize(
    ("path", "vlan", "l3", "ip_len"),
    [(V4, None, 14, 20), (V4, 42, 18, 20), (V6, None, 14, 40), (V6, 42, 18, 40)],
    ids=["v4", "v4_vlan", "v6", "v6_vlan"],
)
def test_frame_lengths_and_offsets(path, vlan, l3, ip_len):
    f = _frame(path, bfd_control(), vlan=vlan)
    assert l3_offset(f) == l3
    assert len(f) == l3 + ip_len + 8 + 24
    udp_len = struct.unpack_from("!H", f, l3 + ip_len + 4)[0]
    assert udp_len == 8 + 24
    assert f[l3 + ip_len + 8 :] == bfd_control()


def test_ip_options_frame_keeps_a_valid_header():
    f = _frame(V4, bfd_control(), ip_options=ip_nops(8))
    assert f[14] == 0x47 and f[34:42] == ip_nops(8)
    assert ip_checksum(f[14:42]) == 0
    assert struct.unpack_from("!H", f, 16)[0] == 28 + 8 + 24


@pytest.mark.parametrize("vlan", [None, 42])
def test_with_ipv4_frag_sets_only_the_fragment_field(vlan):
    f = _frame(V4, bfd_control(), vlan=vlan)
    off = l3_offset(f)
    g = with_ipv4_frag(f, 0x2003)
    assert len(g) == len(f)
    assert struct.unpack_from("!H", g, off + 6)[0] == 0x2003
    assert ip_checksum(g[off : off + 20]) == 0, "the header checksum was not redone"
    # Everything but the fragment field and the checksum is untouched.
    changed = [i for i in range(len(f)) if f[i] != g[i]]
    assert set(changed) <= {off + 6, off + 7, off + 10, off + 11}, changed
    ip = Ether(g)[IP]
    assert (ip.flags, ip.frag) == ("MF", 3)
    del ip.chksum
    assert IP(bytes(ip)).chksum == struct.unpack_from("!H", g, off + 10)[0], "scapy computes another checksum"


@pytest.mark.parametrize(("path", "l4"), [(V4, 14 + 20), (V6, 14 + 40)], ids=["v4", "v6"])
def test_with_udp_len_lies_in_the_udp_header_only(path, l4):
    f = _frame(path, bfd_control())
    g = with_udp_len(f, 8 + 1500)
    assert len(g) == len(f) and g[:l4] == f[:l4] and g[l4 + 8 :] == f[l4 + 8 :]
    assert struct.unpack_from("!HHHH", g, l4) == (49999, 3784, 8 + 1500, 0)
    # Tagged: the same, four bytes further.
    t = with_udp_len(_frame(path, bfd_control(), vlan=5), 9)
    assert struct.unpack_from("!HH", t, l4 + 4 + 4) == (9, 0)


def test_echo_payload_layout():
    p = echo_payload(7)
    assert len(p) == 16
    assert (p[0] >> 5, p[1]) == (1, 16)
    assert struct.unpack_from("!IQ", p, 4) == (0xEC40_0007, 7)
    assert echo_payload(8) != p


def test_mutate_control_is_seeded_and_varied():
    base = bfd_control(my_discr=5, your_discr=6, flags="P")

    def mutated(seed: int) -> bytes:
        buf = bytearray(base)
        mutate_control(buf, random.Random(seed), unknown=0xFFFFFFFE)
        return bytes(buf)

    assert mutated(1) == mutated(1)
    outs = {mutated(s) for s in range(300)}
    assert all(len(o) == 24 for o in outs)
    assert len(outs) > 50
    # Each field the mutations aim at is hit at least once.
    assert any(o[4:8] == bytes(4) for o in outs), "my discr never zeroed"
    assert any(o[2] == 0 for o in outs), "detect mult never zeroed"
    assert any(o[8:12] == (0xFFFFFFFE).to_bytes(4, "big") for o in outs), "the unknown discr never used"
    assert any(o[0] >> 5 != 1 for o in outs), "version never changed"


# --- the oracle -----------------------------------------------------------------


def test_mapped16():
    assert mapped16("198.19.1.1") == bytes(10) + b"\xff\xff" + bytes([198, 19, 1, 1])
    assert mapped16("fd00:bfd:1::1") == bytes.fromhex("fd000bfd000100000000000000000001")


def test_table_binds_single_hop_to_the_interface(table):
    assert table.by_discr[DISCR["v4"]] == (mapped16(V4[1]), False, IFINDEX, 255, False)
    assert table.by_discr[DISCR["mh"]] == (mapped16(MH[1]), True, 0, 254, False)
    assert table.by_key[(mapped16(MH[0]), mapped16(MH[1]), 0, True)] == DISCR["mh"]
    assert (mapped16(V6[1]), IFINDEX) in table.echo and (mapped16(MH[1]), 0) in table.echo


# (id, frame, verdict): one rule each, in the fast path's order.
VERDICTS = [
    ("v4_poll", lambda: _frame(V4, _poll("v4")), "accepted"),
    ("v6_poll", lambda: _frame(V6, _poll("v6")), "accepted"),
    ("v4_poll_vlan", lambda: _frame(V4, _poll("v4"), vlan=42), "accepted"),
    ("v4_down_found_by_addresses", lambda: _frame(V4, _poll("v4", state="down", your_discr=0)), "accepted"),
    ("mh_at_min_ttl", lambda: _frame(MH, _poll("mh"), dport=4784, ttl=254), "accepted"),
    ("shorter_than_ethernet", lambda: _frame(V4, _poll("v4"))[:13], None),
    ("tag_cut_short", lambda: _frame(V4, _poll("v4"), vlan=42)[:17], None),
    ("not_a_bfd_port", lambda: _frame(V4, _poll("v4"), dport=53), None),
    ("arp", lambda: b"\xff" * 6 + bytes(6) + b"\x08\x06" + bytes(28), None),
    ("udp_header_cut", lambda: _frame(V4, _poll("v4"))[: 14 + 20 + 7], None),
    ("non_first_fragment", lambda: with_ipv4_frag(_frame(V4, _poll("v4")), 0x0003), None),
    ("ip_options", lambda: _frame(V4, _poll("v4"), ip_options=ip_nops(4)), "ip_options"),
    ("first_fragment", lambda: with_ipv4_frag(_frame(V4, _poll("v4")), 0x2000), "fragment"),
    ("echo_from_peer", lambda: _frame(V4, echo_payload(1), dport=3785), "echo_tx"),
    ("echo_from_stranger", lambda: _frame(V4, echo_payload(1), dport=3785, src=STRANGER4), "echo_unknown"),
    ("single_hop_ttl_254", lambda: _frame(V6, _poll("v6"), ttl=254), "ttl"),
    ("udp_length_beyond_frame", lambda: with_udp_len(_frame(V4, _poll("v4")), 8 + 40), "short"),
    ("payload_empty", lambda: _frame(V4, b""), "short"),
    ("version_2", lambda: _frame(V4, _poll("v4", version=2)), "version"),
    ("payload_20_bytes", lambda: _frame(V4, _poll("v4")[:20]), "short"),
    ("length_field_20", lambda: _frame(V4, _poll("v4", length=20)), "length"),
    ("length_24_with_a_bit", lambda: _frame(V4, _poll("v4", flags="PA", length=24)), "length"),
    ("length_beyond_payload", lambda: _frame(V4, _poll("v4", length=30)), "length"),
    ("detect_mult_0", lambda: _frame(V4, _poll("v4", detect_mult=0)), "detect_mult"),
    ("m_bit", lambda: _frame(V4, _poll("v4", flags="PM")), "multipoint"),
    ("my_discr_0", lambda: _frame(V4, _poll("v4", my_discr=0)), "my_discr"),
    ("your_discr_unknown", lambda: _frame(V4, _poll("v4", your_discr=0x999)), "your_discr"),
    (
        "your_discr_0_state_init",
        lambda: _frame(V4, _poll("v4", your_discr=0, state="init")),
        "your_discr_zero",
    ),
    ("no_session", lambda: _frame(V4, _poll("v4", state="down", your_discr=0), src=STRANGER4), "no_session"),
    ("discr_from_stranger", lambda: _frame(V4, _poll("v4"), src=STRANGER4), "path"),
    ("v6_discr_in_v4_frame", lambda: _frame(V4, _poll("v6")), "path"),
    ("single_hop_discr_on_4784", lambda: _frame(V4, _poll("v4"), dport=4784), "path"),
    ("mh_discr_on_3784", lambda: _frame(MH, _poll("mh")), "path"),
    ("mh_below_min_ttl", lambda: _frame(MH, _poll("mh"), dport=4784, ttl=253), "min_ttl"),
    (
        "a_bit_without_auth",
        lambda: _frame(V4, _poll("v4", flags="PA", auth=auth_simple(1, b"secret"))),
        "auth_unexpected",
    ),
    ("auth_session_a_bit_clear", lambda: _frame(AU, _poll("au", state="init")), "auth_missing"),
]


@pytest.mark.parametrize(("build", "want"), [v[1:] for v in VERDICTS], ids=[v[0] for v in VERDICTS])
def test_oracle_verdict(table, build, want):
    assert kernel_verdict(build(), table) == want


def test_oracle_agrees_with_scapy_on_what_is_bfd(table):
    """Every frame the oracle calls BFD is, to scapy, UDP to a BFD port from an address it parsed."""
    for _, build, want in VERDICTS:
        f = build()
        if want is None:
            continue
        pkt = Ether(f)
        ip = pkt[IP] if IP in pkt else pkt[IPv6]
        assert pkt[UDP].dport in (3784, 4784, 3785), f.hex()
        assert ip.dst in (V4[0], V6[0], MH[0], AU[0]), f.hex()


# --- the S-BFD reflector's rules --------------------------------------------------------

SBFD_DISCR = 456


def _sbfd(
    path: tuple[str, str] = V4,
    *,
    sport: int = 49152,
    src: str | None = None,
    dst: str | None = None,
    ttl: int = 255,
    ip_options: bytes = b"",
    **over: object,
) -> bytes:
    fields: dict = {"state": "down", "flags": "", "my_discr": PEER_DISCR, "your_discr": SBFD_DISCR}
    fields.update(over)
    local, peer = path
    return udp_frame(
        src_mac=MAC_P, dst_mac=MAC_D, src=src or peer, dst=dst or local, sport=sport, dport=7784,
        ttl=ttl, ip_options=ip_options, payload=bfd_control(**fields),
    )  # fmt: skip


SBFD_VERDICTS = [
    ("v4_request", _sbfd, "sbfd_tx"),
    ("v6_request_poll", lambda: _sbfd(V6, state="up", flags="P"), "sbfd_tx"),
    ("routed_ttl_64_from_3784", lambda: _sbfd(sport=3784, ttl=64, state="up"), "sbfd_tx"),
    ("ip_options", lambda: _sbfd(ip_options=ip_nops(4)), "ip_options"),
    ("from_7784", lambda: _sbfd(sport=7784), "sbfd_sport"),
    ("to_multicast", lambda: _sbfd(dst="224.0.0.5"), "sbfd_address"),
    ("from_v6_loopback", lambda: _sbfd(V6, src="::1"), "sbfd_address"),
    ("version_2", lambda: _sbfd(version=2), "sbfd_version"),
    ("length_23", lambda: _sbfd(length=23), "sbfd_length"),
    ("detect_mult_0", lambda: _sbfd(detect_mult=0), "sbfd_detect_mult"),
    ("m_bit", lambda: _sbfd(flags="M"), "sbfd_multipoint"),
    ("my_discr_0", lambda: _sbfd(my_discr=0), "sbfd_my_discr"),
    ("your_discr_0", lambda: _sbfd(your_discr=0), "sbfd_your_discr_zero"),
    ("unknown", lambda: _sbfd(your_discr=SBFD_DISCR + 1), "sbfd_unknown"),
    ("a_bit", lambda: _sbfd(flags="A", auth=auth_simple(1, b"secret")), "sbfd_auth"),
]


@pytest.mark.parametrize(("build", "want"), [v[1:] for v in SBFD_VERDICTS], ids=[v[0] for v in SBFD_VERDICTS])
def test_oracle_sbfd_verdict(table, build, want):
    table.sbfd.add(SBFD_DISCR)
    assert kernel_verdict(build(), table) == want


def test_oracle_passes_7784_while_no_reflector_is_configured(table):
    assert kernel_verdict(_sbfd(), table) is None
    assert kernel_verdict(_sbfd(sport=7784), table) is None
