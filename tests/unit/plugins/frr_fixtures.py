"""FRR 8.4.4 output captured from a real bfdd (vtysh --vty_socket ... on this project's testbed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HEADER = (
    "Building configuration...\n\nCurrent configuration:\n!\nfrr version 8.4.4\nfrr defaults traditional\n"
    "hostname vm\nservice integrated-vtysh-config\n!\n"
)

# `show running-config bfd` with no bfd node at all.
EMPTY = HEADER + "end\n"

# Every kind of peer FRR 8.4 prints, verbatim (a profile block first, defaults omitted).
FULL = HEADER + (
    "bfd\n"
    " profile fast\n"
    "  receive-interval 50\n"
    " exit\n"
    " !\n"
    " peer 198.19.1.2 local-address 198.19.1.1 interface veth-a\n"
    "  detect-multiplier 5\n"
    "  transmit-interval 20\n"
    "  receive-interval 10\n"
    "  shutdown\n"
    "  passive-mode\n"
    "  echo-mode\n"
    "  echo transmit-interval 100\n"
    "  echo receive-interval 100\n"
    " exit\n"
    " !\n"
    " peer fd00:bfd:1::2 local-address fd00:bfd:1::1 interface veth-a\n"
    " exit\n"
    " !\n"
    " peer 198.19.0.9 interface veth-a\n"
    "  profile fast\n"
    " exit\n"
    " !\n"
    " peer 198.19.0.10\n"
    " exit\n"
    " !\n"
    " peer 198.19.5.2 local-address 198.19.1.1 vrf red interface veth-a\n"
    "  echo receive-interval disabled\n"
    " exit\n"
    " !\n"
    " peer 198.19.99.1 multihop local-address 198.19.1.1\n"
    "  minimum-ttl 250\n"
    " exit\n"
    " !\n"
    "exit\n"
    "!\n"
    "end\n"
)


def running(*peer_blocks: str) -> str:
    """A running config holding the given peer blocks (each ' peer ...\\n  setting\\n' lines)."""
    if not peer_blocks:
        return EMPTY
    body = "".join(block + " exit\n !\n" for block in peer_blocks)
    return HEADER + "bfd\n" + body + "exit\n!\nend\n"


def default_peer(peer: str, **kw: Any) -> dict[str, Any]:
    """A parsed peer with FRR's defaults, overridden by ``kw``."""
    p = {
        "peer": peer, "multihop": False, "local_address": None, "vrf": "default", "interface": None,
        "profile": None, "detect_multiplier": 3, "transmit_interval": 300, "receive_interval": 300,
        "echo_mode": False, "echo_interval": 50, "echo_receive_interval": 50, "passive_mode": False,
        "shutdown": False, "minimum_ttl": None,
    }  # fmt: skip
    p.update(kw)
    if p["multihop"] and "minimum_ttl" not in kw:
        p["minimum_ttl"] = 254
    return p


FULL_PARSED = [
    default_peer("198.19.0.9", interface="veth-a", profile="fast"),
    default_peer("198.19.0.10"),
    default_peer(
        "198.19.1.2",
        local_address="198.19.1.1",
        interface="veth-a",
        detect_multiplier=5,
        transmit_interval=20,
        receive_interval=10,
        shutdown=True,
        passive_mode=True,
        echo_mode=True,
        echo_interval=100,
        echo_receive_interval=100,
    ),
    default_peer("198.19.99.1", multihop=True, local_address="198.19.1.1", minimum_ttl=250),
    default_peer("fd00:bfd:1::2", local_address="fd00:bfd:1::1", interface="veth-a"),
    default_peer(
        "198.19.5.2", local_address="198.19.1.1", vrf="red", interface="veth-a", echo_receive_interval=0
    ),
]


def peer_status(peer: str, status: str = "up", **kw: Any) -> dict[str, Any]:
    """One entry of `show bfd peers json` as FRR 8.4 prints it."""
    s = {
        "multihop": False, "peer": peer, "vrf": "default", "id": 129055911,
        "remote-id": 0 if status != "up" else 7, "passive-mode": False, "status": status,
        "diagnostic": "ok", "remote-diagnostic": "ok", "receive-interval": 300, "transmit-interval": 300,
        "echo-receive-interval": 50, "echo-transmit-interval": 0, "detect-multiplier": 3,
        "remote-receive-interval": 1000, "remote-transmit-interval": 1000,
        "remote-echo-receive-interval": 0, "remote-detect-multiplier": 3,
        "rtt-min": 0, "rtt-avg": 0, "rtt-max": 0,
    }  # fmt: skip
    if status == "up":
        s["uptime"] = 3
    else:
        s["downtime"] = 1
    s.update(kw)
    return s


def peers_json(*entries: dict[str, Any]) -> str:
    """FRR's pretty-printed JSON (two-space indent, no space after the colon)."""
    return json.dumps(list(entries), indent=2).replace('": ', '":') + "\n"


# `show interface vrf all json` of FRR 8.4.4 in a namespace with lo, eth1 (a veth, renamed from
# veth-a) and `interface nosuch9` in zebra's configuration: a pseudo interface, not in the kernel.
INTERFACES = (Path(__file__).parent / "captures" / "frr-8.4.4-show-interface-vrf-all.json").read_text()
