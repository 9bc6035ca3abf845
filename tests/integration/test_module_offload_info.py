"""offload_info against the real engine: live with the XDP fast path, not live without it.

The engine runs one session against a real FRR 8.4 bfdd across a veth; the module is run by
``ansible`` (ad-hoc, local connection) with a pid file naming this test's engine, so no other
xdp-bfd process on the machine is signalled.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness import ansible
from harness.frr import bfd_peer_block
from harness.wait import wait_until

INTERVAL_MS = 10
REPO = Path(__file__).resolve().parents[2]


def offload_info(env: dict[str, str], args: dict[str, Any]) -> dict:
    # Check mode: the module changes nothing, and must say so even when asked to.
    return ansible.run_module(env, "offload_info", args, check=True)


def engine_against_frr(topo, frr_factory, engine_factory, tmp_path, *, kernel_tx: bool):
    """An engine with one session against a real FRR 8.4 bfdd across a veth, Up (and offloaded)."""
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    frr = frr_factory(p, "p").start()
    frr.configure(
        *bfd_peer_block(
            str(a.ip4), local=str(b.ip4), interface="veth-p", rx_ms=INTERVAL_MS, tx_ms=INTERVAL_MS
        )
    )
    sessions = tmp_path / "sessions.yml"
    sessions.write_text(
        f"- {{local: {a.ip4}, peer: {b.ip4}, interface: veth-d, "
        f"min_tx_ms: {INTERVAL_MS}, min_rx_ms: {INTERVAL_MS}}}\n"
    )
    args = ["--sessions", str(sessions)]
    if kernel_tx:
        args += ["--kernel-tx", "veth-d", "--xdp-mode", "generic"]
    engine = engine_factory(d, args)
    engine.wait_log("bfd: serving", timeout=30)
    wait_until(lambda: (frr.peer(str(a.ip4)) or {}).get("status") == "up", timeout=20, what="FRR up")
    if kernel_tx:
        wait_until(
            lambda: engine.session(str(b.ip4)).get("kernel_tx_active"), timeout=20, what="kernel TX active"
        )
    return engine


@pytest.mark.parametrize("kernel_tx", [True, False], ids=["xdp", "software"])
def test_offload_info_against_the_engine(
    topo, frr_factory, engine_factory, tmp_path, *, ansible_env, kernel_tx
):
    engine = engine_against_frr(topo, frr_factory, engine_factory, tmp_path, kernel_tx=kernel_tx)
    pidfile = tmp_path / "xdp-bfd.pid"
    pidfile.write_text(f"{engine.pid}\n")

    res = offload_info(ansible_env, {"pidfile": str(pidfile), "path": str(engine.stats_path), "timeout": 5})
    assert not res.get("failed"), res
    assert res["changed"] is False
    assert res["signaled"] is True
    assert res["signal_command"][1:] == ["-USR1", str(engine.pid)]
    assert res["stats"]["pid"] == engine.pid
    session = res["stats"]["sessions"][0]
    assert session["state"] == "up"
    if kernel_tx:
        assert res["reasons"] == []
        assert res["offload_live"] is True
        assert session["kernel_tx_packets"] > 0
    else:
        assert res["offload_live"] is False
        assert "kernel_tx is not true: the XDP fast path is not attached" in res["reasons"]
        assert any("the kernel has sent nothing for it (userspace is answering)" in r for r in res["reasons"])


def run_verify_offload(
    env: dict[str, str], tmp_path, hostvars: dict[str, dict[str, Any]]
) -> tuple[int, dict]:
    """The collection's verify_offload.yml over ``hostvars`` (local connection), as the json callback says."""
    inventory = {
        "bfd_routers": {"hosts": hostvars},
        "all": {"vars": {"ansible_connection": "local", "ansible_become": False}},
    }
    inv = tmp_path / "inventory.json"
    inv.write_text(json.dumps(inventory))
    out = subprocess.run(
        [
            str(ansible.VENV_BIN / "ansible-playbook"),
            "-i",
            str(inv),
            str(REPO / "playbooks" / "verify_offload.yml"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    try:
        return out.returncode, json.loads(out.stdout)
    except ValueError:
        raise AssertionError(f"no JSON (rc {out.returncode}):\n{out.stdout}\n{out.stderr}") from None


def test_verify_offload_fails_the_host_that_is_not_live_and_only_it(
    topo, frr_factory, engine_factory, tmp_path, *, ansible_env
):
    # r1 (first in the inventory, first in sort order) is live; r2's engine was
    # stopped, as in issue 20's lab run. Only r2 may fail, by its own task.
    live = engine_against_frr(topo, frr_factory, engine_factory, tmp_path, kernel_tx=True)
    # r2: an engine of its own (another namespace, bfdd-driven, no peer), then stopped.
    stopped = engine_factory(
        topo.namespace("e"),
        ["--dplane-listen", "ipv4:127.0.0.1:50790", "--stats-dump", str(tmp_path / "r2-stats.json")],
    )
    stopped.wait_log("bfd: serving", timeout=30)
    stopped_pid = stopped.pid
    stopped.stop()
    (tmp_path / "r1.pid").write_text(f"{live.pid}\n")
    (tmp_path / "r2.pid").write_text(f"{stopped_pid}\n")
    hostvars = {
        "r1": {
            "xdp_bfd_stats_path": str(live.stats_path),
            "xdp_bfd_verify_pidfile": str(tmp_path / "r1.pid"),
        },
        "r2": {
            "xdp_bfd_stats_path": str(tmp_path / "r2-stats.json"),
            "xdp_bfd_verify_pidfile": str(tmp_path / "r2.pid"),
        },
    }

    rc, doc = run_verify_offload(ansible_env, tmp_path, hostvars)

    assert rc == 2, f"rc {rc}: {doc['stats']}"
    assert doc["stats"]["r1"].get("failures", 0) == 0, doc["stats"]
    assert doc["stats"]["r2"].get("failures", 0) == 1, doc["stats"]
    failed = {
        (task["task"]["name"], host, res.get("_ansible_delegated_vars", {}).get("ansible_host"))
        for task in doc["plays"][0]["tasks"]
        for host, res in task["hosts"].items()
        if res.get("failed")
    }
    assert failed == {("The offload is live on this host", "r2", None)}, failed
    by_task = {task["task"]["name"]: task["hosts"] for task in doc["plays"][0]["tasks"]}
    assert by_task["The offload is live on this host"]["r1"]["msg"].startswith("r1: offload live, 1/1")
    assert by_task["The offload is live on this host"]["r2"]["msg"].startswith(
        f"r2: offload not live: cannot signal pid {stopped_pid}"
    )
    # One table for the fleet, naming both hosts with their verdicts.
    table = next(iter(by_task["Print the fleet table"].values()))["msg"]
    hosts = [row for row in table if not row.startswith(" ")]
    assert [row.split()[0] for row in hosts] == ["host", "r1", "r2"]
    assert hosts[1].endswith(" live")
    assert "NOT LIVE: cannot signal pid" in hosts[2]
    # Under r1, its one session: Up, and clocked by the peer through XDP (or by the kernel's own
    # transmit clock, on engines that have one), never by userspace.
    links = table[table.index(hosts[1]) + 1 : table.index(hosts[2])]
    assert len(links) == 1, table
    assert links[0].split()[-2:][0] == "up", links
    assert links[0].split()[-1] in {"peer-clocked", "kernel"}, links
