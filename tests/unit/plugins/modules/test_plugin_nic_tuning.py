"""nic_tuning against faked ethtool 6.1: each case lists the exact commands and their output."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.xdp_bfd.fastpath.plugins.modules import nic_tuning
from fastpath_modtest import Cmd, run_case

E = "/usr/sbin/ethtool"

# What ethtool 6.1 prints (netlink for -a/-c; ioctl text for -n/-N).
PAUSE_ON = (
    "Pause parameters for eth1:\nAutonegotiate:\ton\nRX:\t\ton\nTX:\t\ton\n"
    "RX negotiated: on\nTX negotiated: on\n\n"
)
PAUSE_OFF = "Pause parameters for eth1:\nAutonegotiate:\toff\nRX:\t\toff\nTX:\t\toff\n\n"
PAUSE_AN_ON_RX_OFF = (
    "Pause parameters for eth1:\nAutonegotiate:\ton\nRX:\t\toff\nTX:\t\toff\n"
    "RX negotiated: off\nTX negotiated: off\n\n"
)
NOT_SUPPORTED = "netlink error: Operation not supported\n"
NO_DEVICE = "netlink error: no device matches name (offset 24)\nnetlink error: No such device\n"


def hash_out(flow: str, *fields: str) -> str:
    head = {"udp4": "UDP over IPV4 flows", "udp6": "UDP over IPV6 flows", "tcp4": "TCP over IPV4 flows"}[flow]
    body = "".join(f + "\n" for f in fields) if fields else "None"
    return f"{head} use these fields for computing Hash flow key:\n{body}\n"


SA, DA = "IP SA", "IP DA"
L4_01, L4_23 = "L4 bytes 0 & 1 [TCP/UDP src port]", "L4 bytes 2 & 3 [TCP/UDP dst port]"
HASH_SD_4 = hash_out("udp4", SA, DA)
HASH_SDFN_4 = hash_out("udp4", SA, DA, L4_01, L4_23)
HASH_SDFN_6 = hash_out("udp6", SA, DA, L4_01, L4_23)
HASH_NONE_4 = hash_out("udp4")


def coalesce_out(rx_usecs: str = "3", rx_frames: str = "n/a", adaptive_rx: str = "off") -> str:
    return (
        "Coalesce parameters for eth1:\n"
        f"Adaptive RX: {adaptive_rx}  TX: n/a\n"
        "stats-block-usecs: n/a\nsample-interval: n/a\npkt-rate-low: n/a\npkt-rate-high: n/a\n\n"
        f"rx-usecs: {rx_usecs}\nrx-frames: {rx_frames}\nrx-usecs-irq: n/a\nrx-frames-irq: n/a\n\n"
        "tx-usecs: 3\ntx-frames: n/a\ntx-usecs-irq: n/a\ntx-frames-irq: 128\n\n"
        "rx-usecs-low: n/a\nrx-frame-low: n/a\ntx-usecs-low: n/a\ntx-frame-low: n/a\n\n"
        "rx-usecs-high: n/a\nrx-frame-high: n/a\ntx-usecs-high: n/a\ntx-frame-high: n/a\n\n"
        "CQE mode RX: n/a  TX: n/a\n\n"
    )


OFF = {"autoneg": False, "rx": False, "tx": False}
ON = {"autoneg": True, "rx": True, "tx": True}
PAUSE_ALL_OFF = {"interface": "eth1", "pause": OFF}
SET_ALL_OFF = [E, "-A", "eth1", "autoneg", "off", "rx", "off", "tx", "off"]
COAL_BEFORE = {"adaptive_rx": False, "adaptive_tx": None, "rx_usecs": 3, "rx_frames": None, "tx_usecs": 3,
               "tx_frames": None}  # fmt: skip

CASES: list[dict[str, Any]] = [
    {
        "id": "pause-all-off",
        "params": PAUSE_ALL_OFF,
        "commands": [
            Cmd([E, "-a", "eth1"], out=PAUSE_ON),
            Cmd(SET_ALL_OFF),
            Cmd([E, "-a", "eth1"], out=PAUSE_OFF),
        ],
        "expect": {
            "changed": True,
            "pause": {"supported": True, "changed": True, "before": ON, "after": OFF},
            "commands": [SET_ALL_OFF],
            "unsupported": [],
        },
    },
    {
        "id": "pause-check-mode-runs-no-set",
        "params": PAUSE_ALL_OFF,
        "check_mode": True,
        "commands": [Cmd([E, "-a", "eth1"], out=PAUSE_ON)],
        "expect": {
            "changed": True,
            "pause": {"supported": True, "changed": True, "before": ON, "after": OFF},
            "commands": [SET_ALL_OFF],
        },
    },
    {
        "id": "pause-already-off",
        "params": PAUSE_ALL_OFF,
        "commands": [Cmd([E, "-a", "eth1"], out=PAUSE_OFF)],
        "expect": {
            "changed": False,
            "commands": [],
            "pause": {"supported": True, "changed": False, "before": OFF, "after": OFF},
        },
    },
    {
        "id": "pause-only-differing-field-and-null-left-alone",
        "params": {"interface": "eth1", "pause": {"autoneg": False, "rx": False, "tx": None}},
        "commands": [
            Cmd([E, "-a", "eth1"], out=PAUSE_AN_ON_RX_OFF),
            Cmd([E, "-A", "eth1", "autoneg", "off"]),
            Cmd([E, "-a", "eth1"], out=PAUSE_OFF),
        ],
        "expect": {"changed": True, "commands": [[E, "-A", "eth1", "autoneg", "off"]]},
    },
    {
        "id": "pause-unsupported-reported",
        "params": PAUSE_ALL_OFF,
        "commands": [Cmd([E, "-a", "eth1"], rc=1, err=NOT_SUPPORTED)],
        "expect": {
            "changed": False,
            "unsupported": ["pause"],
            "commands": [],
            "pause": {
                "supported": False,
                "changed": False,
                "before": None,
                "after": None,
                "msg": "-a eth1: netlink error: Operation not supported",
            },
        },
    },
    {
        "id": "pause-set-unsupported-reported",
        "params": PAUSE_ALL_OFF,
        "commands": [Cmd([E, "-a", "eth1"], out=PAUSE_ON), Cmd(SET_ALL_OFF, rc=76, err=NOT_SUPPORTED)],
        "expect": {
            "changed": False,
            "unsupported": ["pause"],
            "commands": [],
            "pause": {"supported": False, "changed": False, "before": ON, "after": ON},
        },
    },
    {
        "id": "pause-unsupported-strict-fails",
        "params": dict(PAUSE_ALL_OFF, strict=True),
        "commands": [Cmd([E, "-a", "eth1"], rc=1, err=NOT_SUPPORTED)],
        "fail": "pause is not supported by the driver of eth1: "
        "-a eth1: netlink error: Operation not supported",
    },
    {
        "id": "no-such-device-fails",
        "params": {"interface": "eth9", "pause": OFF},
        "commands": [Cmd([E, "-a", "eth9"], rc=1, err=NO_DEVICE)],
        "fail": "ethtool -a eth9 failed (rc 1): netlink error: no device matches name (offset 24)\n"
        "netlink error: No such device",
    },
    {
        "id": "pause-not-taken-fails",
        "params": PAUSE_ALL_OFF,
        "commands": [
            Cmd([E, "-a", "eth1"], out=PAUSE_ON),
            Cmd(SET_ALL_OFF),
            Cmd([E, "-a", "eth1"], out=PAUSE_ON),
        ],
        "fail": "ethtool -A eth1 autoneg off rx off tx off succeeded but pause now reads "
        "{'autoneg': True, 'rx': True, 'tx': True}, not {'autoneg': False, 'rx': False, 'tx': False}",
    },
    {
        "id": "pause-garbage-output-fails",
        "params": PAUSE_ALL_OFF,
        "commands": [Cmd([E, "-a", "eth1"], out="Pause parameters for eth1:\n")],
        "fail": "cannot read pause parameters from ethtool output 'Pause parameters for eth1:\\n'",
    },
    {
        "id": "hash-udp4-set-udp6-already",
        "params": {"interface": "eth1", "rx_flow_hash": {"udp4": "sdfn", "udp6": "nfds"}},
        "commands": [
            Cmd([E, "-n", "eth1", "rx-flow-hash", "udp4"], out=HASH_SD_4),
            Cmd([E, "-N", "eth1", "rx-flow-hash", "udp4", "sdfn"]),
            Cmd([E, "-n", "eth1", "rx-flow-hash", "udp4"], out=HASH_SDFN_4),
            Cmd([E, "-n", "eth1", "rx-flow-hash", "udp6"], out=HASH_SDFN_6),
        ],
        "expect": {
            "changed": True,
            "rx_flow_hash": {
                "udp4": {"supported": True, "changed": True, "before": "sd", "after": "sdfn"},
                "udp6": {"supported": True, "changed": False, "before": "sdfn", "after": "sdfn"},
            },
            "commands": [[E, "-N", "eth1", "rx-flow-hash", "udp4", "sdfn"]],
        },
    },
    {
        "id": "hash-from-none",
        "params": {"interface": "eth1", "rx_flow_hash": {"udp4": "sdfn"}},
        "commands": [
            Cmd([E, "-n", "eth1", "rx-flow-hash", "udp4"], out=HASH_NONE_4),
            Cmd([E, "-N", "eth1", "rx-flow-hash", "udp4", "sdfn"]),
            Cmd([E, "-n", "eth1", "rx-flow-hash", "udp4"], out=HASH_SDFN_4),
        ],
        "expect": {
            "changed": True,
            "rx_flow_hash": {"udp4": {"supported": True, "changed": True, "before": "", "after": "sdfn"}},
        },
    },
    {
        "id": "hash-check-mode",
        "params": {"interface": "eth1", "rx_flow_hash": {"udp4": "sdfn"}},
        "check_mode": True,
        "commands": [Cmd([E, "-n", "eth1", "rx-flow-hash", "udp4"], out=HASH_SD_4)],
        "expect": {
            "changed": True,
            "commands": [[E, "-N", "eth1", "rx-flow-hash", "udp4", "sdfn"]],
            "rx_flow_hash": {"udp4": {"supported": True, "changed": True, "before": "sd", "after": "sdfn"}},
        },
    },
    {
        # ethtool 6.1 prints the refusal and still exits 0.
        "id": "hash-refused-with-rc0-is-unsupported",
        "params": {"interface": "eth1", "rx_flow_hash": {"udp4": "sdfn"}},
        "commands": [
            Cmd([E, "-n", "eth1", "rx-flow-hash", "udp4"], out=HASH_NONE_4),
            Cmd(
                [E, "-N", "eth1", "rx-flow-hash", "udp4", "sdfn"],
                err="Cannot change RX network flow hashing options: Invalid argument\n",
            ),
        ],
        "expect": {
            "changed": False,
            "unsupported": ["rx_flow_hash.udp4"],
            "commands": [],
            "rx_flow_hash": {"udp4": {"supported": False, "changed": False, "before": "", "after": ""}},
        },
    },
    {
        "id": "hash-refused-strict-fails",
        "params": {"interface": "eth1", "rx_flow_hash": {"udp4": "sdfn"}, "strict": True},
        "commands": [
            Cmd([E, "-n", "eth1", "rx-flow-hash", "udp4"], out=HASH_NONE_4),
            Cmd(
                [E, "-N", "eth1", "rx-flow-hash", "udp4", "sdfn"],
                err="Cannot change RX network flow hashing options: Operation not supported\n",
            ),
        ],
        "fail": "rx_flow_hash.udp4 is not supported by the driver of eth1: -N eth1 rx-flow-hash udp4 sdfn: "
        "Cannot change RX network flow hashing options: Operation not supported",
    },
    {
        "id": "hash-read-unsupported",
        "params": {"interface": "lo", "rx_flow_hash": {"udp4": "sdfn"}},
        "commands": [
            Cmd(
                [E, "-n", "lo", "rx-flow-hash", "udp4"],
                rc=1,
                err="Cannot get RX network flow hashing options: Operation not supported\n",
            ),
        ],
        "expect": {"changed": False, "unsupported": ["rx_flow_hash.udp4"]},
    },
    {
        "id": "hash-other-error-fails",
        "params": {"interface": "eth1", "rx_flow_hash": {"udp4": "sdfn"}},
        "commands": [
            Cmd([E, "-n", "eth1", "rx-flow-hash", "udp4"], out=HASH_NONE_4),
            Cmd(
                [E, "-N", "eth1", "rx-flow-hash", "udp4", "sdfn"],
                err="Cannot change RX network flow hashing options: Device or resource busy\n",
            ),
        ],
        "fail": "ethtool -N eth1 rx-flow-hash udp4 sdfn failed (rc 0): "
        "Cannot change RX network flow hashing options: Device or resource busy",
    },
    {
        "id": "hash-bad-letters-fail-before-running",
        "params": {"interface": "eth1", "rx_flow_hash": {"udp4": "sdxn"}},
        "commands": [],
        "fail": "rx_flow_hash.udp4: rx-flow-hash letters 'x' are not ethtool fields (use mvtsdfner)",
    },
    {
        "id": "coalesce-rx-usecs-0",
        "params": {"interface": "eth1", "coalesce": {"rx_usecs": 0}},
        "commands": [
            Cmd([E, "-c", "eth1"], out=coalesce_out("3")),
            Cmd([E, "-C", "eth1", "rx-usecs", "0"]),
            Cmd([E, "-c", "eth1"], out=coalesce_out("0")),
        ],
        "expect": {
            "changed": True,
            "commands": [[E, "-C", "eth1", "rx-usecs", "0"]],
            "coalesce": {
                "supported": True,
                "changed": True,
                "before": COAL_BEFORE,
                "after": dict(COAL_BEFORE, rx_usecs=0),
            },
        },
    },
    {
        "id": "coalesce-already",
        "params": {"interface": "eth1", "coalesce": {"rx_usecs": 3, "adaptive_rx": False}},
        "commands": [Cmd([E, "-c", "eth1"], out=coalesce_out("3"))],
        "expect": {"changed": False, "commands": []},
    },
    {
        "id": "coalesce-adaptive-and-usecs",
        "params": {"interface": "eth1", "coalesce": {"rx_usecs": 0, "adaptive_rx": True}},
        "commands": [
            Cmd([E, "-c", "eth1"], out=coalesce_out("3")),
            Cmd([E, "-C", "eth1", "adaptive-rx", "on", "rx-usecs", "0"]),
            Cmd([E, "-c", "eth1"], out=coalesce_out("0", adaptive_rx="on")),
        ],
        "expect": {"changed": True},
    },
    {
        "id": "coalesce-na-field-unsupported-without-set",
        "params": {"interface": "eth1", "coalesce": {"rx_frames": 1}},
        "commands": [Cmd([E, "-c", "eth1"], out=coalesce_out("3"))],
        "expect": {
            "changed": False,
            "unsupported": ["coalesce"],
            "coalesce": {
                "supported": False,
                "changed": False,
                "before": COAL_BEFORE,
                "after": COAL_BEFORE,
                "msg": "ethtool -c eth1 reports rx-frames as n/a",
            },
        },
    },
    {
        "id": "coalesce-value-refused-unsupported",
        "params": {"interface": "eth1", "coalesce": {"rx_usecs": 5}},
        "commands": [
            Cmd([E, "-c", "eth1"], out=coalesce_out("0", rx_frames="1")),
            Cmd([E, "-C", "eth1", "rx-usecs", "5"], rc=1, err=NOT_SUPPORTED),
        ],
        "expect": {"changed": False, "unsupported": ["coalesce"]},
    },
    {
        "id": "coalesce-negative-fails",
        "params": {"interface": "eth1", "coalesce": {"rx_usecs": -1}},
        "commands": [],
        "fail": "coalesce.rx_usecs must not be negative, got -1",
    },
    {
        "id": "all-three-mixed-support",
        "params": {
            "interface": "eth1",
            "pause": OFF,
            "rx_flow_hash": {"udp4": "sdfn"},
            "coalesce": {"rx_usecs": 0},
        },
        "commands": [
            Cmd([E, "-a", "eth1"], rc=1, err=NOT_SUPPORTED),
            Cmd([E, "-n", "eth1", "rx-flow-hash", "udp4"], out=HASH_SDFN_4),
            Cmd([E, "-c", "eth1"], out=coalesce_out("3")),
            Cmd([E, "-C", "eth1", "rx-usecs", "0"]),
            Cmd([E, "-c", "eth1"], out=coalesce_out("0")),
        ],
        "expect": {
            "changed": True,
            "unsupported": ["pause"],
            "commands": [[E, "-C", "eth1", "rx-usecs", "0"]],
        },
    },
    {
        "id": "option-like-interface-fails",
        "params": {"interface": "-h", "pause": OFF},
        "commands": [],
        "fail": "interface '-h' is not a valid interface name",
    },
    {
        "id": "nothing-requested-fails",
        "params": {"interface": "eth1"},
        "commands": [],
        "fail": "one of the following is required: pause, rx_flow_hash, coalesce",
    },
    {
        "id": "ethtool-missing-fails",
        "params": PAUSE_ALL_OFF,
        "binaries": {"ethtool": None},
        "commands": [],
        "fail": "Failed to find required executable 'ethtool' in paths",
    },
]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_nic_tuning(case):
    run_case(nic_tuning, case)


def test_diff_mode_gives_before_and_after(run_module):
    res = run_module(
        nic_tuning,
        {"interface": "eth1", "pause": OFF, "rx_flow_hash": {"udp4": "sdfn"}},
        [
            Cmd([E, "-a", "eth1"], out=PAUSE_ON),
            Cmd([E, "-n", "eth1", "rx-flow-hash", "udp4"], out=HASH_SD_4),
        ],
        check_mode=True,
        diff=True,
    )
    assert res["diff"] == {
        "before": {"pause": ON, "rx_flow_hash": {"udp4": "sd"}},
        "after": {"pause": OFF, "rx_flow_hash": {"udp4": "sdfn"}},
    }


def test_no_diff_without_diff_mode(run_module):
    res = run_module(nic_tuning, PAUSE_ALL_OFF, [Cmd([E, "-a", "eth1"], out=PAUSE_OFF)])
    assert "diff" not in res.data
