"""The engine as a process: signals, reloads, exit codes, the stats contract.

Run against real FRR 8.4 bfdd peers so "undisturbed" is judged by the far end
as well as by our own counters.
"""

from __future__ import annotations

import signal
import subprocess

import pytest

from harness.engine import XDP_BFD
from harness.frr import bfd_peer_block
from harness.wait import wait_until


@pytest.fixture
def lab(topo, frr_factory, engine_factory, capture_factory, tmp_path):
    """Engine in d with IPv4 and IPv6 single-hop sessions Up against FRR in p at 3x10 ms."""
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    frr = frr_factory(p, "p").start()
    for ours, theirs in ((a.ip4, b.ip4), (a.ip6, b.ip6)):
        frr.configure(*bfd_peer_block(str(ours), local=str(theirs), interface="veth-p", rx_ms=10, tx_ms=10))
    path = tmp_path / "sessions.yml"

    def entry(ours, theirs, **kw):
        fields = {
            "local": ours,
            "peer": theirs,
            "interface": "veth-d",
            "min_tx_ms": 10,
            "min_rx_ms": 10,
            **kw,
        }
        return "- {" + ", ".join(f"{k}: {v}" for k, v in fields.items()) + "}\n"

    path.write_text(entry(a.ip4, b.ip4) + entry(a.ip6, b.ip6))
    cap = capture_factory(p, "veth-p")
    eng = engine_factory(d, ["--sessions", str(path)])

    def frr_status(addr):
        return (frr.peer(str(addr)) or {}).get("status")

    wait_until(lambda: frr_status(a.ip4) == "up" and frr_status(a.ip6) == "up", timeout=15, what="both up")
    return {"a": a, "b": b, "d": d, "frr": frr, "eng": eng, "path": path, "entry": entry, "cap": cap}


@pytest.mark.timing(stall_ms=20, userspace=True)  # a 3x10 ms flap: detection time less one interval
def test_stats_contract_and_process_name(lab):
    a, b, eng = lab["a"], lab["b"], lab["eng"]
    # pkill -x matches the process name: the contract says it must be xdp-bfd.
    before = eng.stats_identity()
    subprocess.run(["pkill", "-USR1", "-x", "xdp-bfd"], check=True)
    wait_until(
        lambda: eng.stats_identity() not in (None, before),
        timeout=5,
        what="stats written after pkill -USR1 -x xdp-bfd",
    )
    doc = eng.stats()
    contract = {
        "version",
        "generated_at",
        "pid",
        "engine_version",
        "kernel_tx",
        "xdp",
        "dplane",
        "deadman_us",
    }
    contract |= {"sched", "sessions_configured", "sessions_up", "counters", "sessions"}
    assert contract <= set(doc), contract - set(doc)
    assert (doc["version"], doc["pid"], doc["kernel_tx"]) == (1, eng.pid, False)
    assert (doc["sessions_configured"], doc["sessions_up"]) == (2, 2)
    assert set(doc["counters"]) >= {"xdp_tx", "xdp_pass", "drop"}
    by_peer = {s["peer"]: s for s in doc["sessions"]}
    assert set(by_peer) == {str(b.ip4), str(b.ip6)}
    s = by_peer[str(b.ip4)]
    assert (s["local"], s["ifname"], s["multihop"], s["state"], s["remote_state"]) == (
        str(a.ip4), "veth-d", False, "up", "up",
    )  # fmt: skip
    assert (s["tx_interval_us"], s["detect_time_us"], s["diag"], s["flaps"]) == (10_000, 30_000, "none", 0)
    assert s["rx_packets"] > 0 and s["user_tx_packets"] > 0 and s["kernel_tx_packets"] == 0
    assert 0 <= s["last_rx_age_us"] < 1_000_000 and s["up_since"] > 0


@pytest.mark.timing(stall_ms=20, userspace=True)  # a 3x10 ms flap: detection time less one interval
def test_reload_adds_removes_changes_without_disturbing(lab):
    a, b, eng, frr, path, entry = lab["a"], lab["b"], lab["eng"], lab["frr"], lab["path"], lab["entry"]
    v4 = eng.session(str(b.ip4))
    # Change v4's detect multiplier, drop v6, add a multihop v4 session.
    frr.configure(*bfd_peer_block(str(a.ip4), local=str(b.ip4), multihop=True, rx_ms=50, tx_ms=50))
    path.write_text(
        entry(a.ip4, b.ip4, detect_mult=5)
        + f"- {{local: {a.ip4}, peer: {b.ip4}, multihop: true, min_tx_ms: 50}}\n"
    )
    eng.signal(signal.SIGHUP)
    eng.wait_log("reload:")
    wait_until(lambda: (frr.peer(str(a.ip6)) or {}).get("status") == "down", timeout=5, what="v6 torn down")
    assert frr.peer(str(a.ip6))["remote-diagnostic"] == "administratively down"

    def multihop_up():
        return any(p.get("multihop") and p["status"] == "up" for p in frr.peers())

    wait_until(multihop_up, timeout=10, what="the new multihop session up")
    doc = eng.stats()
    sessions = {(s["peer"], s["multihop"]): s for s in doc["sessions"]}
    assert set(sessions) == {(str(b.ip4), False), (str(b.ip4), True)}
    now = sessions[(str(b.ip4), False)]
    # The changed session kept its identity: no flap, same discriminators and uptime.
    assert (now["flaps"], now["up_since"], now["local_discr"], now["state"]) == (
        0, v4["up_since"], v4["local_discr"], "up",
    )  # fmt: skip

    def single_hop_mult():
        return next(p for p in frr.peers() if p["peer"] == str(a.ip4) and not p.get("multihop"))[
            "remote-detect-multiplier"
        ]

    wait_until(lambda: single_hop_mult() == 5, timeout=5, what="the new multiplier at FRR")

    # A bad file changes nothing and says why in one line.
    path.write_text("- {local: 198.19.1.1, peer: [oops\n")
    eng.signal(signal.SIGHUP)
    line = eng.wait_log("keeping the running sessions unchanged")
    assert "not valid YAML" in line
    after = {(s["peer"], s["multihop"]): s for s in eng.stats()["sessions"]}
    assert set(after) == set(sessions)
    assert after[(str(b.ip4), False)]["flaps"] == 0


def test_sigterm_sends_admin_down_and_exits_0(lab):
    a, eng, frr, cap = lab["a"], lab["eng"], lab["frr"], lab["cap"]
    eng.signal(signal.SIGTERM)
    assert eng.wait_exit(timeout=10) == 0
    for ours in (str(a.ip4), str(a.ip6)):
        pkt = cap.wait_for(
            lambda p, o=ours: p.src == o and p.state == "admin_down", timeout=5, what="AdminDown"
        )
        assert pkt.diag == 7
        wait_until(lambda o=ours: frr.peer(o)["status"] == "down", timeout=5, what="FRR sees us down")
        assert frr.peer(ours)["remote-diagnostic"] == "administratively down"


@pytest.mark.parametrize(
    ("argv", "code", "needle"),
    [
        (["198.19.0.1"], 2, "give both LOCAL_IP and PEER_IP"),
        (["--bogus"], 2, "unrecognized arguments"),
        (["--sessions", "/nonexistent/sessions.yml"], 1, "No such file"),
    ],
)
def test_errors_are_one_line_with_exit_code(topo, argv, code, needle):
    ns = topo.namespace("e")
    out = ns.run([XDP_BFD, *argv], check=False)
    assert out.returncode == code
    lines = [line for line in out.stderr.splitlines() if line]
    assert len(lines) == 1 and needle in lines[0], out.stderr


def test_bad_sessions_file_fails_before_binding(topo, tmp_path):
    ns = topo.namespace("e")
    f = tmp_path / "s.yml"
    f.write_text("- {local: 198.19.0.1, peer: 198.19.0.2, detect_mult: 0}\n")
    out = ns.run([XDP_BFD, "--sessions", str(f)], check=False)
    assert out.returncode == 1
    assert out.stderr.strip().endswith("[0].detect_mult: expected an integer 1-255, got 0"), out.stderr
