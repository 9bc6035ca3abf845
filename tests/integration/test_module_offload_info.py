"""offload_info against the real engine: live with the XDP fast path, not live without it.

The engine runs one session against a real FRR 8.4 bfdd across a veth; the module is run by
``ansible`` (ad-hoc, local connection) with a pid file naming this test's engine, so no other
xdp-bfd process on the machine is signalled.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness import ansible
from harness.frr import bfd_peer_block
from harness.wait import wait_until

INTERVAL_MS = 10


def offload_info(env: dict[str, str], args: dict[str, Any]) -> dict:
    # Check mode: the module changes nothing, and must say so even when asked to.
    return ansible.run_module(env, "offload_info", args, check=True)


@pytest.mark.parametrize("kernel_tx", [True, False], ids=["xdp", "software"])
def test_offload_info_against_the_engine(
    topo, frr_factory, engine_factory, tmp_path, *, ansible_env, kernel_tx
):
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
