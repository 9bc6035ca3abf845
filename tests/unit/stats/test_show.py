"""``xdp-bfd show`` formatting, from stats documents shaped like the engine's own.

``REAL`` is a document a live engine wrote (tests/integration/test_engine_show.py's rig:
--kernel-tx generic on veth-d, one session Up against FRR 8.4 at 3x10 ms), with a
dataplane section and a second, software-answered session added.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from xdp_bfd.stats import show

DROP_REASONS = [
    "event_lost", "ip_options", "fragment", "ttl", "short", "version", "length", "detect_mult", "multipoint",
    "my_discr", "your_discr", "your_discr_zero", "no_session", "path", "min_ttl", "auth_unexpected",
    "auth_missing", "echo_unknown",
]  # fmt: skip

REAL: dict[str, Any] = {
    "version": 1, "generated_at": 1796114281.303, "pid": 17216, "engine_version": "0.1.0", "kernel_tx": True,
    "xdp": {"ifname": "veth-d", "ifindex": 2, "mode": "generic",
            "interfaces": [{"ifname": "veth-d", "ifindex": 2, "mode": "generic"}],
            "run_cnt": 0, "run_time_ns": 0, "ns_per_packet": None, "spread_cpus": 0},
    "dplane": {"mode": "connect", "address": "127.0.0.1:50700", "connected": True, "sessions": 2, "held": 0,
               "connections": 1},
    "deadman_us": 3000000, "sched": "deadline 1000/10000", "sessions_configured": 2, "sessions_up": 1,
    "counters": {"xdp_tx": 46, "xdp_pass": 3,
                 "drop": dict.fromkeys(DROP_REASONS, 0) | {"ttl": 7, "auth_digest": 2},
                 "echo_tx": 0, "tx_early": 1, "spread": 0,
                 "xdp_drop": dict.fromkeys(DROP_REASONS, 0) | {"ttl": 7}},
    "sessions": [
        {"local": "198.19.1.1", "peer": "198.19.1.2", "ifname": "veth-d", "multihop": False,
         "local_discr": 172196132, "remote_discr": 3909625111, "state": "up", "remote_state": "up",
         "diag": "none", "tx_interval_us": 10000, "detect_time_us": 30000, "rx_packets": 49,
         "kernel_tx_packets": 46, "user_tx_packets": 3, "last_rx_age_us": 11495, "last_ktx_age_us": 11495,
         "flaps": 0, "up_since": 1796114281.303 - 3723, "origin": "file", "drops": {}, "echo_reflected": 0,
         "last_detection_us": None, "last_detection_overshoot_us": None, "offloaded": True,
         "kernel_tx_active": True},
        {"local": "fd00:bfd:1::1", "peer": "fd00:bfd:1::2", "ifname": None, "multihop": True,
         "local_discr": 5, "remote_discr": 0, "state": "down", "remote_state": "down",
         "diag": "control_detection_time_expired", "tx_interval_us": 1000000, "detect_time_us": 0,
         "rx_packets": 10, "kernel_tx_packets": 0, "user_tx_packets": 120, "last_rx_age_us": 4_200_000,
         "last_ktx_age_us": None, "flaps": 2, "up_since": 0, "origin": "dplane",
         "drops": {"auth_digest": 2}, "echo_reflected": 0, "offloaded": True, "kernel_tx_active": False},
    ],
    "loop_lag": {"buckets": [[100, 0], ["+Inf", 4]], "count": 4, "sum_us": 6002, "max_us": 3610,
                 "background": {"steps": 40, "step_max_us": 820, "jobs": 3, "last_job": None}},
}  # fmt: skip


@pytest.fixture
def doc() -> dict[str, Any]:
    return copy.deepcopy(REAL)


def test_sessions_table(doc):
    origin = "stats /run/xdp-bfd/stats.json (command line), 0.02 s after SIGUSR1"
    assert show.format_sessions(doc, origin).splitlines() == [
        f"engine pid 17216, xdp-bfd 0.1.0, {origin}",
        "fast path: XDP on veth-d (generic)",
        "dataplane: connect 127.0.0.1:50700, bfdd connected",
        "sched: deadline 1000/10000",
        "sessions: 2 configured, 1 up",
        "",
        "PEER           LOCAL          IFACE   HOP     STATE  REMOTE  UPTIME    TX      LAST RX  FLAPS  DIAG",
        "198.19.1.2     198.19.1.1     veth-d  single  up     up      1h02m03s  kernel  11.5ms   0      -",
        "fd00:bfd:1::2  fd00:bfd:1::1  -       multi   down   down    -         user    4.20s    2      "
        "control_detection_time_expired",
    ]
    assert show.format_sessions(doc).endswith("control_detection_time_expired\n")


def test_software_engine_without_dataplane(doc):
    doc |= {"kernel_tx": False, "xdp": None, "dplane": None}
    text = show.format_sessions(doc)
    assert text.splitlines()[:3] == [
        "engine pid 17216, xdp-bfd 0.1.0",
        "fast path: none (software only, no --kernel-tx)",
        "dataplane: none",
    ]
    doc["dplane"] = {"mode": "listen", "address": "127.0.0.1:50700", "connected": False}
    assert "dataplane: listen 127.0.0.1:50700, bfdd NOT connected\n" in show.format_sessions(doc)


@pytest.mark.parametrize(
    ("kw", "want"),
    [
        ({}, "kernel"),
        ({"last_ktx_age_us": 90_000}, "kernel"),  # three detection times: still the kernel's
        ({"last_ktx_age_us": 90_001}, "user"),  # the kernel stopped: userspace answers
        ({"last_ktx_age_us": None}, "user"),
        ({"kernel_tx_packets": 0, "last_ktx_age_us": None}, "user"),
        ({"detect_time_us": 0, "last_ktx_age_us": 2_999_999}, "kernel"),  # 3 s without a detection time
        ({"detect_time_us": 0, "last_ktx_age_us": 3_000_001}, "user"),
        ({"kernel_tx_packets": 0, "user_tx_packets": 0, "last_ktx_age_us": None}, "-"),  # passive, silent
    ],
)
def test_who_transmits(doc, kw, want):
    assert show.transmitter(doc["sessions"][0] | kw) == want


@pytest.mark.parametrize(
    ("us", "text"),
    [(None, "-"), (-1, "-"), (True, "-"), (0, "0us"), (999, "999us"), (1000, "1.0ms"), (11495, "11.5ms"),
     (999_949, "999.9ms"), (999_950, "1.00s"), (59_994_999, "59.99s"), (60_000_000, "1m00s"),
     (61_000_000, "1m01s")],
)  # fmt: skip
def test_ages(us, text):
    assert show.fmt_age_us(us) == text


@pytest.mark.parametrize(
    ("s", "text"),
    [(None, "-"), (0, "0s"), (59.9, "59s"), (60, "1m00s"), (3723, "1h02m03s"), (90061, "1d01h01m")],
)
def test_durations(s, text):
    assert show.fmt_duration(s) == text


def test_uptime_only_while_up(doc):
    up, down = doc["sessions"]
    assert show.uptime(doc, up) == "1h02m03s"
    assert show.uptime(doc, down) == "-"
    assert show.uptime(doc, up | {"up_since": 0}) == "-"
    assert show.uptime(doc, up | {"up_since": doc["generated_at"] + 1}) == "0s"  # clocks a tick apart


def test_missing_fields_print_as_dashes():
    text = show.format_sessions({"sessions": [{"peer": "198.19.0.2"}]})
    assert text.splitlines()[0] == "engine pid -, xdp-bfd -"
    assert text.splitlines()[-1].split() == [
        "198.19.0.2",
        "-",
        "-",
        "single",
        "-",
        "-",
        "-",
        "-",
        "-",
        "-",
        "-",
    ]
    assert show.format_sessions({}).endswith("\nno sessions\n")
    assert "no sessions" in show.format_counters({})


def test_counters_grouping(doc):
    c = show.counters(doc)
    assert c["fast_path"] == {"xdp_tx": 46, "xdp_pass": 3, "echo_tx": 0, "tx_early": 1, "spread": 0}
    assert c["xdp_program"] == {"run_cnt": 0, "run_time_ns": 0, "ns_per_packet": None, "spread_cpus": 0}
    assert c["drops"]["ttl"] == {"total": 7, "xdp": 7}
    assert c["drops"]["auth_digest"] == {"total": 2, "xdp": 0}  # the engine's, not the kernel's
    assert list(c["drops"]) == sorted(c["drops"])
    assert c["dplane"] == {"connected": True, "sessions": 2, "held": 0, "connections": 1}
    assert c["loop_lag"] == {"count": 4, "max_us": 3610, "mean_us": 1500.5, "background_step_max_us": 820}
    assert [s["peer"] for s in c["sessions"]] == ["198.19.1.2", "fd00:bfd:1::2"]
    assert c["sessions"][1] == {
        "peer": "fd00:bfd:1::2", "local": "fd00:bfd:1::1", "ifname": None, "multihop": True, "rx_packets": 10,
        "kernel_tx_packets": 0, "user_tx_packets": 120, "echo_reflected": 0, "drops": {"auth_digest": 2},
    }  # fmt: skip


def test_counters_future_counters_appear(doc):
    doc["counters"]["kclock_tx"] = 5
    doc["dplane"]["echo_requests"] = 9
    c = show.counters(doc)
    assert c["fast_path"]["kclock_tx"] == 5 and c["dplane"]["echo_requests"] == 9
    text = show.format_counters(doc)
    assert "  kclock_tx  5\n" in text and "  echo_requests  9\n" in text


def test_counters_text(doc):
    text = show.format_counters(doc)
    blocks = text.split("\n\n")
    assert blocks[1] == (
        "fast path verdicts\n  xdp_tx    46\n  xdp_pass  3\n  echo_tx   0\n  tx_early  1\n  spread    0"
    )
    drops = blocks[3].splitlines()
    assert drops[1].split() == ["REASON", "TOTAL", "IN", "XDP"]
    assert "  auth_digest      2      0" in drops
    assert "  ttl              7      7" in drops
    assert blocks[4] == (
        "dataplane (connect 127.0.0.1:50700)\n  connected    yes\n  sessions     2\n  held         0\n"
        "  connections  1"
    )
    assert blocks[5] == (
        "loop lag\n  runs                     4\n  max                      3.6ms\n"
        "  mean                     1.5ms\n  longest background step  820us"
    )
    assert blocks[6] == (
        "per session\n"
        "  PEER           LOCAL          IFACE   HOP     RX  KERNEL TX  USER TX  ECHO  DROPS\n"
        "  198.19.1.2     198.19.1.1     veth-d  single  49  46         3        0     0\n"
        "  fd00:bfd:1::2  fd00:bfd:1::1  -       multi   10  0          120      0     auth_digest 2\n"
    )


def test_counters_show_our_echo_for_the_sessions_that_send_it(doc):
    assert show.counters(doc)["echo"] == [] and "our echo" not in show.format_counters(doc)
    doc["sessions"][0]["echo"] = {
        "active": True, "interval_ms": 20.0, "sent": 45, "returned": 41, "lost": 2, "pending": 2,
        "skipped": 0, "send_errors": 0, "rtt_us": {"min": 50.2, "mean": 80.5, "p99": 300.0, "max": 900.7},
        "last_return_age_ms": 3.0, "alive": True,
    }  # fmt: skip
    c = show.counters(doc)
    assert c["echo"] == [
        {"peer": "198.19.1.2", "interval_ms": 20.0, "sent": 45, "returned": 41, "lost": 2,
         "rtt_us": {"min": 50.2, "mean": 80.5, "p99": 300.0, "max": 900.7}, "alive": True},
    ]  # fmt: skip
    block = next(b for b in show.format_counters(doc).split("\n\n") if b.startswith("our echo"))
    assert block.splitlines()[2].split() == ["198.19.1.2", "20.0ms", "45", "41", "2", "50/80/300/901", "yes"]


def test_counters_of_a_software_engine(doc):
    doc |= {"kernel_tx": False, "xdp": None, "dplane": None}
    doc["counters"] = {"xdp_tx": 0, "xdp_pass": 0, "drop": {}}
    c = show.counters(doc)
    assert (c["xdp_program"], c["dplane"], c["drops"]) == (None, None, {})
    text = show.format_counters(doc)
    assert "XDP program" not in text and "dataplane (" not in text
    assert "drops by reason (total: kernel and engine; in XDP: the kernel's part)\n  none\n" in text
