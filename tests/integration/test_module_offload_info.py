"""offload_info against the real engine: live with the XDP fast path, not live without it.

The engine runs one session against a real FRR 8.4 bfdd across a veth; the module is run by
``ansible`` (ad-hoc, local connection) with a pid file naming this test's engine, so no other
xdp-bfd process on the machine is signalled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.frr import bfd_peer_block
from harness.wait import wait_until

VENV_BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]
INTERVAL_MS = 10


@pytest.fixture
def ansible_env(tmp_path: Path) -> dict[str, str]:
    tree = tmp_path / "collections" / "ansible_collections" / "xdp_bfd"
    tree.mkdir(parents=True)
    (tree / "fastpath").symlink_to(REPO, target_is_directory=True)
    env = dict(os.environ)
    env.update(
        ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "collections"),
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-local"),
        ANSIBLE_REMOTE_TEMP=str(tmp_path / "ansible-remote"),
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
    )
    env.pop("ANSIBLE_CONFIG", None)
    return env


def offload_info(env: dict[str, str], args: dict[str, Any]) -> dict:
    argv = [
        str(VENV_BIN / "ansible"), "localhost", "-i", "localhost,", "-c", "local",
        "-m", "xdp_bfd.fastpath.offload_info", "-a", json.dumps(args), "--check",
    ]  # fmt: skip
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    try:
        doc = json.loads(out.stdout)
    except ValueError:
        pytest.fail(f"ansible printed no JSON (rc {out.returncode}):\n{out.stdout}\n{out.stderr}")
    return doc["plays"][0]["tasks"][0]["hosts"]["localhost"]


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
