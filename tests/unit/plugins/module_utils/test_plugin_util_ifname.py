"""The one interface-name rule (the kernel's dev_valid_name, plus no leading '-')."""

from __future__ import annotations

import pytest
from ansible_collections.xdp_bfd.fastpath.plugins.module_utils import ifname

VALID = ["eth0", "enp3s0f1", "a", "x" * 15, "br-lan", "veth.100", "eth0@1", "wlan_0", "é" * 7]
INVALID = [
    "",
    ".",
    "..",
    "x" * 16,  # IFNAMSIZ includes the NUL
    "é" * 8,  # 16 bytes in UTF-8
    "eth/0",
    "eth0:1",  # an alias label, not a device
    "eth 0",
    "eth0\t",
    "eth0\n",
    "-h",  # ethtool would read it as an option
]


@pytest.mark.parametrize("name", VALID)
def test_valid(name):
    assert ifname.valid(name)


@pytest.mark.parametrize("name", INVALID)
def test_invalid(name):
    assert not ifname.valid(name)
