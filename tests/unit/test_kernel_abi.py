"""The engine reads names and constants from the one ABI header, not from a copy."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from xdp_bfd.kernel import PACKAGED_BPF_DIR, KernelError, abi_constants, bpf_dir, counter_names, mapped16

REPO_BPF = Path(__file__).resolve().parents[2] / "bpf"


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


def test_the_sources_default_to_the_packaged_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDP_BFD_BPF_DIR", raising=False)
    assert bpf_dir() == PACKAGED_BPF_DIR
    names = {p.name for p in REPO_BPF.iterdir()}
    assert {"bfd_abi.h", "maps.h", "sweep.c", "xdp_bfd.c"} <= names
    for name in names:
        assert (PACKAGED_BPF_DIR / name).read_bytes() == (REPO_BPF / name).read_bytes(), name
    if PACKAGED_BPF_DIR.parent.is_relative_to(REPO_BPF.parent):
        # Run from the checkout (editable install): the package's bpf/ is the
        # repository's through a link, so there is one copy to edit.
        assert PACKAGED_BPF_DIR.resolve() == REPO_BPF.resolve()


def test_the_override_wins_and_must_hold_the_sources(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "bfd_abi.h").write_text("/* another build */\n")
    monkeypatch.setenv("XDP_BFD_BPF_DIR", str(tmp_path))
    assert bpf_dir() == tmp_path
    # Pointing nowhere is an error, not a quiet fall-back to the packaged copy.
    monkeypatch.setenv("XDP_BFD_BPF_DIR", str(tmp_path / "missing"))
    with pytest.raises(KernelError, match=r"no bfd_abi\.h in .*missing \(XDP_BFD_BPF_DIR\)"):
        bpf_dir()
