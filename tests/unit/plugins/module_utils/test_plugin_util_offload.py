"""The offload verdict (DESIGN.md "Stats JSON"): one row per rule, each with the reason it gives."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ansible_collections.xdp_bfd.fastpath.plugins.module_utils import offload

SIGNAL = 1764470000.0


def session(**kw: Any) -> dict[str, Any]:
    s = {
        "local": "198.19.0.1", "peer": "198.19.0.2", "ifname": "eth1", "multihop": False,
        "local_discr": 1, "remote_discr": 2, "state": "up", "remote_state": "up", "diag": "none",
        "tx_interval_us": 10000, "detect_time_us": 30000, "rx_packets": 500, "kernel_tx_packets": 480,
        "user_tx_packets": 20, "last_rx_age_us": 4000, "last_ktx_age_us": 4100, "flaps": 0,
        "up_since": 1764469990.0,
    }  # fmt: skip
    s.update(kw)
    return s


def stats(**kw: Any) -> dict[str, Any]:
    doc = {
        "version": 1, "generated_at": SIGNAL + 0.05, "pid": 1234, "engine_version": "0.1.0",
        "kernel_tx": True, "xdp": {"ifname": "eth1", "ifindex": 2, "mode": "native"},
        "dplane": {"mode": "connect", "address": "127.0.0.1:50700", "connected": True},
        "deadman_us": 3000000, "sched": "deadline 1000/10000",
        "sessions_configured": 1, "sessions_up": 1,
        "counters": {"xdp_tx": 480, "xdp_pass": 3, "drop": {"ttl": 0}},
        "sessions": [session()],
    }  # fmt: skip
    doc.update(kw)
    return doc


S2 = "198.19.0.1->198.19.0.2 on eth1"

EVALUATE: list[tuple[str, dict[str, Any], dict[str, Any], list[str]]] = [
    ("live", stats(), {}, []),
    ("software-dplane-null-is-fine", stats(dplane=None), {}, []),
    ("no-signal-time-skips-freshness", stats(generated_at=1.0), {"signal_time": None}, []),
    (
        "stale",
        stats(generated_at=SIGNAL - 10),
        {},
        [
            "stats were generated at 1764469990.000, before the signal at 1764470000.000 "
            "(the engine wrote none in time)"
        ],
    ),
    ("rounded-generated_at-within-a-millisecond-is-fresh", stats(generated_at=SIGNAL - 0.0004), {}, []),
    ("no-generated_at", stats(generated_at=None), {}, ["stats have no generated_at"]),
    (
        "kernel-tx-off",
        stats(kernel_tx=False),
        {},
        ["kernel_tx is not true: the XDP fast path is not attached"],
    ),
    (
        "dplane-down",
        stats(dplane={"mode": "connect", "address": "127.0.0.1:50700", "connected": False}),
        {},
        ["dataplane 127.0.0.1:50700 is not connected to bfdd"],
    ),
    (
        "sessions-not-all-up",
        stats(sessions_up=0, sessions=[session(state="down")]),
        {},
        ["0 of 1 configured sessions are up"],
    ),
    (
        "no-sessions",
        stats(sessions_configured=0, sessions_up=0, sessions=[]),
        {},
        ["0 sessions configured, fewer than 1"],
    ),
    (
        "no-sessions-accepted-with-min-0",
        stats(sessions_configured=0, sessions_up=0, sessions=[]),
        {"min_sessions": 0},
        [],
    ),
    (
        "userspace-answering",
        stats(sessions=[session(kernel_tx_packets=0, last_ktx_age_us=None)]),
        {},
        [f"session {S2} is up but the kernel has sent nothing for it (userspace is answering)"],
    ),
    (
        "ktx-stale-beyond-3x-detect",
        stats(sessions=[session(last_ktx_age_us=90001)]),
        {},
        [f"session {S2}: last kernel TX 90001 us ago, more than 90000 us (userspace is answering)"],
    ),
    ("ktx-at-3x-detect-is-recent", stats(sessions=[session(last_ktx_age_us=90000)]), {}, []),
    (
        "explicit-bound",
        stats(sessions=[session(last_ktx_age_us=20000)]),
        {"max_ktx_age_us": 15000},
        [f"session {S2}: last kernel TX 20000 us ago, more than 15000 us (userspace is answering)"],
    ),
    (
        "no-ktx-time",
        stats(sessions=[session(last_ktx_age_us=None)]),
        {},
        [f"session {S2} is up but has no last kernel TX time"],
    ),
    (
        "down-sessions-not-judged-on-ktx",
        stats(
            sessions_configured=2,
            sessions_up=1,
            sessions=[session(), session(peer="198.19.0.6", state="down", kernel_tx_packets=0)],
        ),
        {},
        ["1 of 2 configured sessions are up"],
    ),
    (
        "several-reasons-at-once",
        stats(kernel_tx=False, dplane={"connected": False}, sessions_up=0, sessions=[]),
        {},
        [
            "kernel_tx is not true: the XDP fast path is not attached",
            "dataplane is not connected to bfdd",
            "0 of 1 configured sessions are up",
        ],
    ),
]


@pytest.mark.parametrize(("doc", "kw", "reasons"), [e[1:] for e in EVALUATE], ids=[e[0] for e in EVALUATE])
def test_evaluate(doc, kw, reasons):
    kw = dict(kw)
    signal_time = kw.pop("signal_time", SIGNAL)
    live, got = offload.evaluate(copy.deepcopy(doc), signal_time, **kw)
    assert got == reasons
    assert live is (not reasons)


def test_evaluate_not_a_dict():
    assert offload.evaluate(None, SIGNAL) == (False, ["no stats document"])


def test_bound_without_detect_time_falls_back_to_3s():
    assert offload.ktx_age_bound_us({"detect_time_us": 0}) == 3000000
    assert offload.ktx_age_bound_us({"detect_time_us": 30000}) == 90000
    assert offload.ktx_age_bound_us({"detect_time_us": 30000}, 5) == 5


@pytest.mark.parametrize(
    ("peer", "reasons"),
    [
        ({"peer": "198.19.0.2", "local_address": "198.19.0.1", "interface": "eth1", "multihop": False}, []),
        ({"peer": "198.19.0.2", "local_address": None, "interface": None, "multihop": False}, []),
        (
            {"peer": "198.19.0.9", "interface": "eth1"},
            ["peer 198.19.0.9 on eth1 has no session in the engine"],
        ),
        ({"peer": "198.19.0.2", "multihop": True}, ["peer 198.19.0.2 has no session in the engine"]),
        (
            {"peer": "198.19.0.2", "interface": "eth2"},
            ["peer 198.19.0.2 on eth2 has no session in the engine"],
        ),
    ],
)
def test_peer_offload_reasons(peer, reasons):
    assert offload.peer_offload_reasons(stats(), [peer]) == reasons


def test_peer_offload_reasons_state_and_v6_spelling():
    doc = stats(sessions=[session(peer="fd00:bfd:1::2", local="fd00:bfd:1::1", state="init")])
    assert offload.peer_offload_reasons(doc, [{"peer": "fd00:bfd:1:0:0::2"}]) == [
        "peer fd00:bfd:1:0:0::2: the engine's session is init"
    ]


# Who clocks a link: the kernel's transmit clock (kernel_clock, from the engines that have it),
# else XDP answering the peer's packets (kernel_tx_active), else userspace.
CLOCKS = [
    ("kernel-clock", {"kernel_clock": True, "kernel_tx_active": True}, "kernel"),
    ("kernel-clock-without-xdp-reply", {"kernel_clock": True, "kernel_tx_active": False}, "kernel"),
    ("peer-clocked", {"kernel_clock": False, "kernel_tx_active": True}, "peer-clocked"),
    ("userspace", {"kernel_clock": False, "kernel_tx_active": False}, "userspace"),
    ("older-engine-xdp", {"kernel_tx_active": True}, "peer-clocked"),
    ("older-engine-software", {"kernel_tx_active": False}, "userspace"),
    ("nothing-said", {}, "userspace"),
]


@pytest.mark.parametrize(("session", "clock"), [c[1:] for c in CLOCKS], ids=[c[0] for c in CLOCKS])
def test_link_clock(session, clock):
    assert offload.link_clock(session) == clock


def test_links_name_state_and_clock():
    stats = {
        "sessions": [
            {
                "local": "198.19.0.1",
                "peer": "198.19.0.2",
                "ifname": "eth0",
                "state": "up",
                "kernel_tx_active": True,
            },
            {
                "local": "198.19.0.1",
                "peer": "198.19.0.2",
                "multihop": True,
                "state": "down",
                "kernel_clock": False,
            },
        ]
    }
    assert offload.links(stats) == [
        {"session": "198.19.0.1->198.19.0.2 on eth0", "state": "up", "clock": "peer-clocked"},
        {"session": "198.19.0.1->198.19.0.2 (multihop)", "state": "down", "clock": "userspace"},
    ]
    assert offload.links(None) == []
