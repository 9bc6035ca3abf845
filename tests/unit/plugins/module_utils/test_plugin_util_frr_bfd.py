"""FRR bfd config parsing and command computation, against FRR 8.4.4's real output."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.xdp_bfd.fastpath.plugins.module_utils import frr_bfd
from frr_fixtures import EMPTY, FULL, FULL_PARSED, default_peer, peer_status, peers_json, running


def test_parse_full_running_config():
    assert frr_bfd.sorted_peers(frr_bfd.parse_running_config(FULL)) == FULL_PARSED


def test_parse_keeps_frr_order_before_sorting():
    peers = frr_bfd.parse_running_config(FULL)
    assert [p["peer"] for p in peers] == [
        "198.19.1.2", "fd00:bfd:1::2", "198.19.0.9", "198.19.0.10", "198.19.5.2", "198.19.99.1",
    ]  # fmt: skip


@pytest.mark.parametrize("text", [EMPTY, "", "!\nend\n", "bfd\nexit\n"])
def test_parse_no_peers(text):
    assert frr_bfd.parse_running_config(text) == []


def test_parse_older_frr_without_exit_lines():
    """FRR 7.x closes blocks with '!' only and prints 'no shutdown' explicitly."""
    text = (
        "bfd\n"
        " peer 198.19.0.2 interface eth1\n"
        "  receive-interval 10\n"
        "  no shutdown\n"
        " !\n"
        " profile slow\n"
        "  receive-interval 1000\n"
        " !\n"
        " peer 198.19.0.3\n"
        "  echo-interval 70\n"
        " !\n"
        "!\n"
        "line vty\n"
        "!\n"
    )
    assert frr_bfd.parse_running_config(text) == [
        default_peer("198.19.0.2", interface="eth1", receive_interval=10),
        default_peer("198.19.0.3", echo_interval=70, echo_receive_interval=70),
    ]


def test_parse_ignores_unknown_settings():
    text = running(" peer 198.19.0.2\n  label core-1\n  receive-interval 20\n")
    assert frr_bfd.parse_running_config(text) == [default_peer("198.19.0.2", receive_interval=20)]


@pytest.mark.parametrize(
    ("text", "msg"),
    [
        (
            running(" peer 198.19.0.2 sideways\n"),
            "cannot parse bfd peer line 'peer 198.19.0.2 sideways' (at 'sideways')",
        ),
        (running(" peer not-an-address\n"), "peer 'not-an-address' is not an IPv4 or IPv6 address"),
        (
            running(" peer 198.19.0.2\n  receive-interval fast\n"),
            "cannot parse bfd setting 'receive-interval fast'",
        ),
    ],
)
def test_parse_errors(text, msg):
    with pytest.raises(frr_bfd.BfdConfigError) as e:
        frr_bfd.parse_running_config(text)
    assert str(e.value) == msg


@pytest.mark.parametrize(
    ("entry", "header"),
    [
        ({"peer": "198.19.0.2"}, "peer 198.19.0.2"),
        ({"peer": "198.19.0.2", "interface": "eth1"}, "peer 198.19.0.2 interface eth1"),
        (
            {"peer": "198.19.0.2", "local_address": "198.19.0.1", "interface": "eth1", "vrf": "red"},
            "peer 198.19.0.2 local-address 198.19.0.1 vrf red interface eth1",
        ),
        ({"peer": "198.19.0.2", "vrf": "default"}, "peer 198.19.0.2"),
        (
            {"peer": "198.19.9.1", "multihop": True, "local_address": "198.19.0.1"},
            "peer 198.19.9.1 multihop local-address 198.19.0.1",
        ),
        (
            {"peer": "FD00:BFD:1:0::2", "local_address": "fd00:bfd:1:0:0:0:0:1"},
            "peer fd00:bfd:1::2 local-address fd00:bfd:1::1",
        ),
    ],
)
def test_peer_header_matches_frr_spelling(entry, header):
    assert frr_bfd.peer_header(frr_bfd.normalize_key(entry)) == header


P2 = "peer 198.19.0.2 local-address 198.19.0.1 interface eth1"
KEY2 = {"peer": "198.19.0.2", "local_address": "198.19.0.1", "interface": "eth1"}
HAVE2 = default_peer("198.19.0.2", local_address="198.19.0.1", interface="eth1", receive_interval=10,
                     transmit_interval=10, profile="fast", echo_mode=True)  # fmt: skip
OTHER = default_peer("198.19.0.3")

COMPUTE: list[dict[str, Any]] = [
    {
        "id": "merged-new-peer",
        "have": [],
        "want": [dict(KEY2, receive_interval=10, transmit_interval=10, detect_multiplier=3)],
        "state": "merged",
        "commands": ["bfd", P2, "transmit-interval 10", "receive-interval 10", "exit", "exit"],
    },
    {
        "id": "merged-new-peer-all-defaults",
        "have": [],
        "want": [{"peer": "198.19.0.3"}],
        "state": "merged",
        "commands": ["bfd", "peer 198.19.0.3", "exit", "exit"],
    },
    {
        "id": "merged-no-change",
        "have": [HAVE2],
        "want": [dict(KEY2, receive_interval=10, echo_mode=True)],
        "state": "merged",
        "commands": [],
    },
    {
        "id": "merged-only-given-fields",
        "have": [HAVE2, OTHER],
        "want": [dict(KEY2, detect_multiplier=5, echo_mode=False, echo_receive_interval=0)],
        "state": "merged",
        "commands": [
            "bfd",
            P2,
            "detect-multiplier 5",
            "no echo-mode",
            "echo receive-interval disabled",
            "exit",
            "exit",
        ],
    },
    {
        "id": "merged-shutdown-goes-first",
        "have": [HAVE2],
        "want": [dict(KEY2, shutdown=True, receive_interval=20)],
        "state": "merged",
        "commands": ["bfd", P2, "shutdown", "receive-interval 20", "exit", "exit"],
    },
    {
        "id": "merged-no-shutdown-goes-last",
        "have": [dict(HAVE2, shutdown=True)],
        "want": [dict(KEY2, shutdown=False, receive_interval=20)],
        "state": "merged",
        "commands": ["bfd", P2, "receive-interval 20", "no shutdown", "exit", "exit"],
    },
    {
        "id": "merged-profile-change",
        "have": [HAVE2],
        "want": [dict(KEY2, profile="slow")],
        "state": "merged",
        "commands": ["bfd", P2, "profile slow", "exit", "exit"],
    },
    {
        "id": "replaced-resets-what-is-not-given",
        "have": [HAVE2, OTHER],
        "want": [dict(KEY2, receive_interval=10)],
        "state": "replaced",
        "commands": ["bfd", P2, "no profile fast", "transmit-interval 300", "no echo-mode", "exit", "exit"],
    },
    {
        "id": "replaced-no-change",
        "have": [HAVE2],
        "want": [dict(KEY2, receive_interval=10, transmit_interval=10, profile="fast", echo_mode=True)],
        "state": "replaced",
        "commands": [],
    },
    {
        "id": "replaced-multihop-min-ttl-back-to-254",
        "have": [default_peer("198.19.9.1", multihop=True, local_address="198.19.0.1", minimum_ttl=200)],
        "want": [{"peer": "198.19.9.1", "multihop": True, "local_address": "198.19.0.1"}],
        "state": "replaced",
        "commands": [
            "bfd",
            "peer 198.19.9.1 multihop local-address 198.19.0.1",
            "minimum-ttl 254",
            "exit",
            "exit",
        ],
    },
    {
        "id": "overridden-deletes-others-first",
        "have": [HAVE2, OTHER],
        "want": [dict(KEY2, receive_interval=10, transmit_interval=10, profile="fast", echo_mode=True)],
        "state": "overridden",
        "commands": ["bfd", "no peer 198.19.0.3", "exit"],
    },
    {
        "id": "overridden-empty-deletes-all",
        "have": [HAVE2, OTHER],
        "want": [],
        "state": "overridden",
        "commands": ["bfd", "no " + P2, "no peer 198.19.0.3", "exit"],
    },
    {
        "id": "deleted-still-validates-settings",
        "have": [HAVE2, OTHER],
        "want": [dict(KEY2, receive_interval=999999)],  # ignored for deletion, but must be valid
        "state": "deleted",
        "error": "peer 198.19.0.2 local-address 198.19.0.1 interface eth1: "
        "receive_interval 999999 is outside 10-60000",
    },
    {
        "id": "deleted-one",
        "have": [HAVE2, OTHER],
        "want": [{"peer": "198.19.0.3"}],
        "state": "deleted",
        "commands": ["bfd", "no peer 198.19.0.3", "exit"],
    },
    {
        "id": "deleted-absent-is-no-op",
        "have": [HAVE2],
        "want": [{"peer": "198.19.0.2"}],  # no interface/local: another peer than HAVE2
        "state": "deleted",
        "commands": [],
    },
    {
        "id": "deleted-all",
        "have": [HAVE2, OTHER],
        "want": None,
        "state": "deleted",
        "commands": ["bfd", "no " + P2, "no peer 198.19.0.3", "exit"],
    },
    {
        "id": "deleted-empty-list-deletes-nothing",
        "have": [HAVE2, OTHER],
        "want": [],
        "state": "deleted",
        "commands": [],
    },
    {
        "id": "ipv6-spelling-is-the-same-peer",
        "have": [default_peer("fd00:bfd:1::2", local_address="fd00:bfd:1::1", receive_interval=10)],
        "want": [{"peer": "fd00:bfd:1:0::2", "local_address": "FD00:BFD:1::1", "receive_interval": 10}],
        "state": "merged",
        "commands": [],
    },
    {
        "id": "vrf-default-spelled-or-not",
        "have": [OTHER],
        "want": [{"peer": "198.19.0.3", "vrf": "default"}],
        "state": "replaced",
        "commands": [],
    },
    {
        "id": "error-multihop-without-local",
        "have": [],
        "want": [{"peer": "198.19.9.1", "multihop": True}],
        "state": "merged",
        "error": "peer 198.19.9.1 multihop: multihop needs local_address (FRR: local-address is required)",
    },
    {
        "id": "error-multihop-with-interface",
        "have": [],
        "want": [
            {"peer": "198.19.9.1", "multihop": True, "local_address": "198.19.0.1", "interface": "eth1"}
        ],
        "state": "merged",
        "error": "peer 198.19.9.1 multihop local-address 198.19.0.1 interface eth1: "
        "interface cannot be set on a multihop peer (FRR refuses it)",
    },
    {
        "id": "error-min-ttl-single-hop",
        "have": [],
        "want": [{"peer": "198.19.0.2", "minimum_ttl": 250}],
        "state": "merged",
        "error": "peer 198.19.0.2: minimum_ttl applies to multihop peers only",
    },
    {
        "id": "error-echo-multihop",
        "have": [],
        "want": [{"peer": "198.19.9.1", "multihop": True, "local_address": "198.19.0.1", "echo_mode": True}],
        "state": "merged",
        "error": "peer 198.19.9.1 multihop local-address 198.19.0.1: "
        "echo_mode is only available for single-hop peers",
    },
    {
        # FRR's default (what gathered reports) is accepted; anything else is refused.
        "id": "error-echo-interval-multihop",
        "have": [],
        "want": [
            {"peer": "198.19.9.1", "multihop": True, "local_address": "198.19.0.1", "echo_interval": 100}
        ],
        "state": "merged",
        "error": "peer 198.19.9.1 multihop local-address 198.19.0.1: "
        "echo_interval is only available for single-hop peers",
    },
    {
        "id": "error-detect-multiplier-range",
        "have": [],
        "want": [{"peer": "198.19.0.2", "detect_multiplier": 1}],
        "state": "merged",
        "error": "peer 198.19.0.2: detect_multiplier 1 is outside 2-255",
    },
    {
        "id": "error-echo-receive-range",
        "have": [],
        "want": [{"peer": "198.19.0.2", "echo_receive_interval": 5}],
        "state": "merged",
        "error": "peer 198.19.0.2: echo_receive_interval 5 is outside 10-60000 (or 0 to disable)",
    },
    {
        "id": "error-duplicate",
        "have": [],
        "want": [{"peer": "198.19.0.2"}, {"peer": "198.19.0.2", "vrf": "default"}],
        "state": "merged",
        "error": "peer 198.19.0.2 is listed twice in config",
    },
    {
        "id": "error-bad-address",
        "have": [],
        "want": [{"peer": "198.19.0.300"}],
        "state": "merged",
        "error": "peer '198.19.0.300' is not an IPv4 or IPv6 address",
    },
    {
        "id": "error-family-mismatch",
        "have": [],
        "want": [{"peer": "198.19.0.2", "local_address": "fd00:bfd:1::1"}],
        "state": "merged",
        "error": "peer 198.19.0.2 and local_address fd00:bfd:1::1 are not the same address family",
    },
    {
        "id": "error-profile-name",
        "have": [],
        "want": [{"peer": "198.19.0.2", "profile": "two words"}],
        "state": "merged",
        "error": "peer 198.19.0.2: profile 'two words' is not a valid profile name "
        "(1-64 characters, no spaces)",
    },
    {
        "id": "error-profile-too-long-for-frr-yang",
        "have": [],
        "want": [{"peer": "198.19.0.2", "profile": "p" * 65}],
        "state": "merged",
        "error": "peer 198.19.0.2: profile '"
        + "p" * 65
        + "' is not a valid profile name (1-64 characters, no spaces)",
    },
    {
        "id": "error-interface-name",
        "have": [],
        "want": [{"peer": "198.19.0.2", "interface": "an-interface-name"}],
        "state": "merged",
        "error": "peer 198.19.0.2 interface an-interface-name: interface 'an-interface-name' is not a valid "
        "interface name",
    },
    {
        "id": "error-vrf-name-with-spaces",
        "have": [],
        "want": [{"peer": "198.19.0.2", "vrf": "red interface eth9"}],
        "state": "merged",
        "error": "peer 198.19.0.2 vrf red interface eth9: vrf 'red interface eth9' is not a valid VRF name",
    },
    {
        "id": "error-link-local-needs-interface",
        "have": [],
        "want": [{"peer": "fe80::2"}],
        "state": "merged",
        "error": "peer fe80::2: a link-local peer needs interface",
    },
    {
        "id": "error-link-local-multihop",
        "have": [],
        "want": [{"peer": "fe80::2", "multihop": True, "local_address": "fe80::1"}],
        "state": "merged",
        "error": "peer fe80::2 multihop local-address fe80::1: "
        "a link-local address cannot be used for multihop",
    },
    {
        "id": "link-local-with-interface",
        "have": [],
        "want": [{"peer": "fe80::2", "interface": "eth1"}],
        "state": "merged",
        "commands": ["bfd", "peer fe80::2 interface eth1", "exit", "exit"],
    },
]


@pytest.mark.parametrize("case", COMPUTE, ids=[c["id"] for c in COMPUTE])
def test_compute(case):
    if "error" in case:
        with pytest.raises(frr_bfd.BfdConfigError) as e:
            frr_bfd.compute(case["have"], case["want"], case["state"])
        assert str(e.value) == case["error"]
        return
    commands, after = frr_bfd.compute(case["have"], case["want"], case["state"])
    assert commands == case["commands"]
    # Idempotence: the predicted end state needs no further command.
    if case["state"] != "deleted":
        again, after2 = frr_bfd.compute(after, case["want"] or [], case["state"])
        assert again == []
        assert after2 == after


def test_compute_predicts_after():
    _, after = frr_bfd.compute([HAVE2, OTHER], [dict(KEY2, receive_interval=20)], "replaced")
    assert after == [
        default_peer("198.19.0.2", local_address="198.19.0.1", interface="eth1", receive_interval=20),
        OTHER,
    ]


def test_render_config_is_frr_text():
    assert frr_bfd.render_config(FULL_PARSED[:3]) == (
        "peer 198.19.0.9 interface veth-a\n"
        " profile fast\n"
        "exit\n"
        "peer 198.19.0.10\n"
        "exit\n"
        "peer 198.19.1.2 local-address 198.19.1.1 interface veth-a\n"
        " detect-multiplier 5\n"
        " transmit-interval 20\n"
        " receive-interval 10\n"
        " shutdown\n"
        " passive-mode\n"
        " echo-mode\n"
        " echo transmit-interval 100\n"
        " echo receive-interval 100\n"
        "exit\n"
    )
    assert frr_bfd.render_config([]) == ""


def test_vtysh_argv():
    assert frr_bfd.vtysh_argv("/usr/bin/vtysh", None, ["show running-config bfd"]) == [
        "/usr/bin/vtysh", "-c", "show running-config bfd",
    ]  # fmt: skip
    assert frr_bfd.vtysh_argv("/usr/bin/vtysh", "/run/frr-lab", ["configure terminal", "bfd"]) == [
        "/usr/bin/vtysh", "--vty_socket", "/run/frr-lab", "-c", "configure terminal", "-c", "bfd",
    ]  # fmt: skip


def test_parse_peers_json():
    text = peers_json(peer_status("198.19.0.2", interface="eth1"), peer_status("198.19.0.3", "down"))
    peers = frr_bfd.parse_peers_json(text)
    assert [p["status"] for p in peers] == ["up", "down"]
    assert frr_bfd.status_key(peers[0]) == ("198.19.0.2", False, None, "default", "eth1")
    assert frr_bfd.parse_peers_json("") == []
    with pytest.raises(frr_bfd.BfdConfigError):
        frr_bfd.parse_peers_json("[{")
