"""The bfd_session module against a real FRR 8.4 bfdd, run the way Ansible runs it.

Two namespaces, one veth, zebra + bfdd in each (tests/harness/frr.py). The module is
executed by ``ansible`` itself (ad-hoc, connection local, AnsiballZ and all) from a
temporary ``ansible_collections/xdp_bfd/fastpath`` tree, with ``vtysh_socket`` pointing
at side a's private FRR: it creates a session that comes Up against side b, is idempotent,
previews a change in check mode without making it, refuses a peer on an interface the host does
not have, replaces and deletes.
"""

from __future__ import annotations

from typing import Any

from harness import ansible
from harness.frr import bfd_peer_block


def run_module(env: dict[str, str], args: dict[str, Any], *, check: bool = False, diff: bool = False) -> dict:
    return ansible.run_module(env, "bfd_session", args, check=check, diff=diff)


def test_bfd_session_against_frr(topo, frr_factory, ansible_env):
    a_ns, b_ns = topo.namespace("a"), topo.namespace("b")
    a, b = topo.veth(a_ns, "veth-a", b_ns, "veth-b")
    fa = frr_factory(a_ns, "a").start()
    fb = frr_factory(b_ns, "b").start()
    fb.configure(*bfd_peer_block(str(a.ip4), local=str(b.ip4), interface="veth-b", rx_ms=100, tx_ms=100))

    sock = fa._p("")
    peer = {
        "peer": str(b.ip4), "local_address": str(a.ip4), "interface": "veth-a",
        "receive_interval": 100, "transmit_interval": 100,
    }  # fmt: skip
    header = f"peer {b.ip4} local-address {a.ip4} interface veth-a"
    base = {"vtysh_socket": sock}

    # Check mode on an empty bfdd: the commands, and nothing configured.
    res = run_module(ansible_env, {**base, "config": [peer]}, check=True, diff=True)
    assert not res.get("failed"), res
    assert res["changed"] is True
    assert res["commands"] == ["bfd", header, "transmit-interval 100", "receive-interval 100", "exit", "exit"]
    assert res["diff"]["before"] == ""
    assert fa.peers() == []

    # Apply and wait for the session to come Up against b.
    res = run_module(ansible_env, {**base, "config": [peer], "wait": "up", "wait_timeout": 30})
    assert not res.get("failed"), res
    assert res["changed"] is True
    assert res["before"] == []
    assert [(p["peer"], p["receive_interval"], p["transmit_interval"]) for p in res["after"]] == [
        (str(b.ip4), 100, 100)
    ]
    assert [s["status"] for s in res["peers_status"]] == ["up"]
    assert fa.peer(str(b.ip4))["status"] == "up"

    # Idempotent: the same task again changes nothing.
    res = run_module(ansible_env, {**base, "config": [peer]})
    assert not res.get("failed"), res
    assert res["changed"] is False
    assert res["commands"] == []

    # Issue 20: a mistyped interface fails before any change (zebra's interfaces, read through the
    # same vtysh), in check mode and for real; FRR keeps exactly the one peer it had.
    typo = {**peer, "interface": "nosuch0", "receive_interval": 200}
    for check in (True, False):
        res = run_module(ansible_env, {**base, "config": [typo]}, check=check)
        assert res.get("failed"), res
        assert res["msg"] == (
            f"peer {b.ip4} local-address {a.ip4} interface nosuch0: interface nosuch0 does not exist on this "
            "host (interfaces: lo, veth-a); FRR would take the peer, never bring it up, and bfdd would never "
            "hand it to the engine"
        )
    assert [(p["peer"], p["interface"]) for p in fa.peers()] == [(str(b.ip4), "veth-a")]

    # Check mode with a change leaves FRR as it was.
    res = run_module(ansible_env, {**base, "config": [{**peer, "detect_multiplier": 5}]}, check=True)
    assert res["changed"] is True
    assert res["commands"] == ["bfd", header, "detect-multiplier 5", "exit", "exit"]
    assert fa.peer(str(b.ip4))["detect-multiplier"] == 3

    # Replaced: the timers go back to FRR's defaults, the new multiplier is set.
    replaced = {k: peer[k] for k in ("peer", "local_address", "interface")} | {"detect_multiplier": 5}
    res = run_module(ansible_env, {**base, "config": [replaced], "state": "replaced"}, diff=True)
    assert not res.get("failed"), res
    assert res["commands"] == [
        "bfd", header, "detect-multiplier 5", "transmit-interval 300", "receive-interval 300", "exit", "exit",
    ]  # fmt: skip
    assert res["diff"]["after"] == f"{header}\n detect-multiplier 5\nexit\n"
    live = fa.peer(str(b.ip4))
    assert (live["detect-multiplier"], live["receive-interval"], live["transmit-interval"]) == (5, 300, 300)

    # Gathered reads back what is there.
    res = run_module(ansible_env, {**base, "state": "gathered"})
    assert [(p["peer"], p["detect_multiplier"]) for p in res["gathered"]] == [(str(b.ip4), 5)]

    # FRR refuses a line it checks itself (VRF names: 36 characters at most) and still exits 0:
    # the module fails with FRR's words, and nothing was added.
    res = run_module(ansible_env, {**base, "config": [{"peer": "198.19.99.9", "vrf": "v" * 37}]})
    assert res.get("failed"), res
    assert res["msg"].startswith(
        "vtysh failed (rc 0) applying the bfd configuration: % Failed to edit configuration."
    )
    assert "Traceback" not in res["msg"]
    assert [p["peer"] for p in res["after"]] == [str(b.ip4)]

    # Deleted without config removes every peer.
    res = run_module(ansible_env, {**base, "state": "deleted"})
    assert not res.get("failed"), res
    assert res["changed"] is True
    assert fa.peers() == []
