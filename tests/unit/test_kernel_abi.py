"""The engine reads names and constants from the one ABI header, not from a copy."""

from __future__ import annotations

import ipaddress

from xdp_bfd.kernel import abi_constants, bpf_dir, counter_names, mapped16


def test_counter_names_come_from_the_header_in_index_order():
    header = bpf_dir() / "bfd_abi.h"
    names = counter_names(header)
    block = header.read_text().split("#define BFD_COUNTERS(X)", 1)[1].split("\n\n", 1)[0]
    assert len(names) == block.count("X(") == len(set(names))
    assert names[:2] == ["xdp_tx", "xdp_pass"]
    # Every DESIGN.md reject rule has its own counter.
    rules = {"ip_options", "ttl", "min_ttl", "version", "short", "length", "detect_mult", "multipoint"}
    rules |= {"my_discr", "your_discr", "your_discr_zero", "auth_unexpected", "auth_missing"}
    assert rules <= set(names), rules - set(names)


def test_constants():
    c = abi_constants(bpf_dir() / "bfd_abi.h")
    assert c["BFD_MAX_SESSIONS"] >= 4096
    assert (c["BFD_PORT_CONTROL"], c["BFD_PORT_MULTIHOP"], c["BFD_PORT_ECHO"]) == (3784, 4784, 3785)
    flags = [
        c[k] for k in ("BFD_CFG_ACTIVE", "BFD_CFG_KTX", "BFD_CFG_DETECT", "BFD_CFG_AUTH", "BFD_CFG_ECHO")
    ]
    assert len(set(flags)) == 5 and all(f & (f - 1) == 0 for f in flags)


def test_v4_mapped_keys_keep_families_apart():
    v4 = mapped16(ipaddress.ip_address("198.19.0.1"))
    assert v4 == bytes(10) + b"\xff\xff" + bytes([198, 19, 0, 1])
    assert mapped16(ipaddress.ip_address("fd00:bfd::1")) == ipaddress.ip_address("fd00:bfd::1").packed
    assert mapped16(None) == bytes(16)
    assert ipaddress.IPv6Address(v4).ipv4_mapped == ipaddress.ip_address("198.19.0.1")
