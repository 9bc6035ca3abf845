"""bfd_session against faked vtysh: the exact argv of every call, with FRR 8.4.4's real output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.xdp_bfd.fastpath.plugins.module_utils import locate, offload
from ansible_collections.xdp_bfd.fastpath.plugins.modules import bfd_session
from fastpath_modtest import Cmd, run_case
from frr_fixtures import FULL, FULL_PARSED, INTERFACES, default_peer, peer_status, peers_json, running

V = "/usr/bin/vtysh"
READ = [V, "-c", "show running-config bfd"]
STATUS = [V, "-c", "show bfd peers json"]
IFACES = [V, "-c", "show interface vrf all json"]
LINKS = Cmd(IFACES, out=INTERFACES)
PKILL = ["/usr/bin/pkill", "-USR1", "-x", "xdp-bfd"]
# What FRR 8.4 prints (exit status 0) when echo-mode is turned on.
ECHO_WARNING = "% Echo mode works correctly for IPv4, but only works when the peer is also FRR for IPv6."


def apply(*lines: str, socket: str | None = None) -> list[str]:
    argv = [V] + (["--vty_socket", socket] if socket else [])
    for line in ("configure terminal", *lines):
        argv += ["-c", line]
    return argv


P2 = "peer 198.19.0.2 local-address 198.19.0.1 interface eth1"
KEY2 = {"peer": "198.19.0.2", "local_address": "198.19.0.1", "interface": "eth1"}
BLOCK2_FAST = " " + P2 + "\n  transmit-interval 10\n  receive-interval 10\n"
PEER2_FAST = default_peer(
    "198.19.0.2", local_address="198.19.0.1", interface="eth1", transmit_interval=10, receive_interval=10
)
BLOCK3 = " peer 198.19.0.3\n"
PROFILE_FAST = " profile fast\n  receive-interval 50\n"
PEER3 = default_peer("198.19.0.3")
FAST2 = dict(KEY2, receive_interval=10, transmit_interval=10)
CREATE2 = apply("bfd", P2, "transmit-interval 10", "receive-interval 10", "exit", "exit")

NO_SUCH_IF_MSG = (
    "peer 198.19.0.2 local-address 198.19.0.1 interface {name}: interface {name} does not exist on this "
    "host (interfaces: eth1, lo); FRR would take the peer, never bring it up, and bfdd would never hand it "
    "to the engine"
)

CASES: list[dict[str, Any]] = [
    {
        "id": "merged-creates",
        "params": {"config": [FAST2]},
        "commands": [Cmd(READ, out=running()), LINKS, Cmd(CREATE2), Cmd(READ, out=running(BLOCK2_FAST))],
        "expect": {
            "changed": True,
            "before": [],
            "after": [PEER2_FAST],
            "commands": ["bfd", P2, "transmit-interval 10", "receive-interval 10", "exit", "exit"],
        },
    },
    {
        "id": "merged-no-change",
        "params": {"config": [dict(KEY2, receive_interval=10, detect_multiplier=3)]},
        "commands": [Cmd(READ, out=running(BLOCK2_FAST, BLOCK3))],
        "expect": {
            "changed": False,
            "commands": [],
            "before": [PEER2_FAST, PEER3],
            "after": [PEER2_FAST, PEER3],
        },
    },
    {
        "id": "merged-check-mode-reads-only",
        "params": {"config": [FAST2]},
        "check_mode": True,
        "commands": [Cmd(READ, out=running(BLOCK3)), LINKS],
        "expect": {
            "changed": True,
            "before": [PEER3],
            "after": [PEER2_FAST, PEER3],
            "commands": ["bfd", P2, "transmit-interval 10", "receive-interval 10", "exit", "exit"],
        },
    },
    {
        "id": "replaced",
        "params": {"config": [dict(KEY2, receive_interval=10)], "state": "replaced"},
        "commands": [
            Cmd(READ, out=running(BLOCK2_FAST, BLOCK3)),
            LINKS,
            Cmd(apply("bfd", P2, "transmit-interval 300", "exit", "exit")),
            Cmd(READ, out=running(" " + P2 + "\n  receive-interval 10\n", BLOCK3)),
        ],
        "expect": {
            "changed": True,
            "commands": ["bfd", P2, "transmit-interval 300", "exit", "exit"],
            "after": [dict(PEER2_FAST, transmit_interval=300), PEER3],
        },
    },
    {
        "id": "overridden",
        "params": {"config": [FAST2], "state": "overridden"},
        "commands": [
            Cmd(READ, out=running(BLOCK2_FAST, BLOCK3)),
            LINKS,
            Cmd(apply("bfd", "no peer 198.19.0.3", "exit")),
            Cmd(READ, out=running(BLOCK2_FAST)),
        ],
        "expect": {"changed": True, "commands": ["bfd", "no peer 198.19.0.3", "exit"], "after": [PEER2_FAST]},
    },
    {
        "id": "deleted-one",
        "params": {"config": [KEY2], "state": "deleted"},
        "commands": [
            Cmd(READ, out=running(BLOCK2_FAST, BLOCK3)),
            Cmd(apply("bfd", "no " + P2, "exit")),
            Cmd(READ, out=running(BLOCK3)),
        ],
        "expect": {"changed": True, "before": [PEER2_FAST, PEER3], "after": [PEER3]},
    },
    {
        "id": "deleted-all",
        "params": {"state": "deleted"},
        "commands": [
            Cmd(READ, out=running(BLOCK2_FAST, BLOCK3)),
            Cmd(apply("bfd", "no " + P2, "no peer 198.19.0.3", "exit")),
            Cmd(READ, out=running()),
        ],
        "expect": {"changed": True, "after": []},
    },
    {
        "id": "deleted-nothing-there",
        "params": {"config": [KEY2], "state": "deleted"},
        "commands": [Cmd(READ, out=running(BLOCK3))],
        "expect": {"changed": False, "commands": []},
    },
    {
        "id": "gathered-real-frr-output",
        "params": {"state": "gathered"},
        "commands": [Cmd(READ, out=FULL)],
        "expect": {"changed": False, "gathered": FULL_PARSED},
    },
    # The resource-module workflow: what gathered returns is valid config and,
    # fed back unchanged, changes nothing, for every state that replaces.
    *(
        {
            "id": f"gathered-round-trips-{state}",
            "params": {"config": FULL_PARSED, "state": state},
            "commands": [Cmd(READ, out=FULL)],
            "expect": {"changed": False, "commands": [], "after": FULL_PARSED},
        }
        for state in ("merged", "replaced", "overridden")
    ),
    {
        # FRR takes a profile name it does not define and applies nothing: refused before any change.
        "id": "an-undefined-profile-fails-before-any-change",
        "params": {"config": [dict(KEY2, profile="fastt")]},
        "commands": [Cmd(READ, out=running(PROFILE_FAST))],
        "fail": "peer 198.19.0.2 local-address 198.19.0.1 interface eth1: profile 'fastt' is not defined "
        "in FRR's bfd configuration (defined: fast)",
    },
    {
        # Issue 20: FRR takes a peer on an interface that does not exist and never brings it up.
        "id": "an-unknown-interface-fails-before-any-change",
        "params": {"config": [dict(KEY2, interface="nosuch0")]},
        "commands": [Cmd(READ, out=running()), LINKS],
        "fail": NO_SUCH_IF_MSG.format(name="nosuch0"),
        "fail_has": {"before": []},
    },
    {
        "id": "an-unknown-interface-fails-in-check-mode-too",
        "params": {"config": [dict(KEY2, interface="nosuch0")], "state": "replaced"},
        "check_mode": True,
        "commands": [Cmd(READ, out=running(BLOCK3)), LINKS],
        "fail": NO_SUCH_IF_MSG.format(name="nosuch0"),
    },
    {
        # zebra lists an interface named in its own configuration but absent from the kernel.
        "id": "a-pseudo-interface-is-not-an-interface",
        "params": {"config": [dict(KEY2, interface="nosuch9")]},
        "commands": [Cmd(READ, out=running()), LINKS],
        "fail": NO_SUCH_IF_MSG.format(name="nosuch9"),
    },
    {
        "id": "an-interface-of-another-vrf-fails",
        "params": {"config": [dict(KEY2, vrf="red")]},
        "commands": [Cmd(READ, out=running()), LINKS],
        "fail": "peer 198.19.0.2 local-address 198.19.0.1 vrf red interface eth1: interface eth1 is in vrf "
        "default, not in vrf red",
    },
    {
        # Nothing to change, nothing to check: a peer already configured is not judged again.
        "id": "interfaces-not-read-without-a-change",
        "params": {"config": [FAST2]},
        "commands": [Cmd(READ, out=running(BLOCK2_FAST))],
        "expect": {"changed": False, "commands": []},
    },
    {
        "id": "a-defined-profile-is-applied",
        "params": {"config": [dict(KEY2, profile="fast")]},
        "commands": [
            Cmd(READ, out=running(PROFILE_FAST)),
            LINKS,
            Cmd(apply("bfd", P2, "profile fast", "exit", "exit")),
            Cmd(READ, out=running(PROFILE_FAST, " " + P2 + "\n  profile fast\n")),
        ],
        "expect": {"changed": True, "commands": ["bfd", P2, "profile fast", "exit", "exit"]},
    },
    {
        "id": "parsed-runs-nothing",
        "params": {"state": "parsed", "running_config": FULL},
        "commands": [],
        "binaries": {"vtysh": None},
        "expect": {"changed": False, "parsed": FULL_PARSED},
    },
    {
        "id": "rendered-runs-nothing",
        "params": {"state": "rendered", "config": [FAST2]},
        "commands": [],
        "binaries": {"vtysh": None},
        "expect": {
            "changed": False,
            "rendered": ["bfd", P2, "transmit-interval 10", "receive-interval 10", "exit", "exit"],
        },
    },
    {
        "id": "vty-socket",
        "params": {"config": [FAST2], "vtysh_socket": "/run/frr-lab"},
        "commands": [
            Cmd([V, "--vty_socket", "/run/frr-lab", "-c", "show running-config bfd"], out=running()),
            Cmd([V, "--vty_socket", "/run/frr-lab", "-c", "show interface vrf all json"], out=INTERFACES),
            Cmd(
                apply(
                    "bfd",
                    P2,
                    "transmit-interval 10",
                    "receive-interval 10",
                    "exit",
                    "exit",
                    socket="/run/frr-lab",
                )
            ),
            Cmd(
                [V, "--vty_socket", "/run/frr-lab", "-c", "show running-config bfd"], out=running(BLOCK2_FAST)
            ),
        ],
        "expect": {"changed": True},
    },
    {
        "id": "save",
        "params": {"config": [FAST2], "save": True},
        "commands": [
            Cmd(READ, out=running()),
            LINKS,
            Cmd(CREATE2),
            Cmd([V, "-c", "write memory"], out="Note: this version of vtysh never writes vtysh.conf\n"),
            Cmd(READ, out=running(BLOCK2_FAST)),
        ],
        "expect": {"changed": True},
    },
    {
        "id": "save-only-after-a-change",
        "params": {"config": [FAST2], "save": True},
        "commands": [Cmd(READ, out=running(BLOCK2_FAST))],
        "expect": {"changed": False},
    },
    {
        "id": "frr-not-running-fails",
        "params": {"state": "gathered", "vtysh_socket": "/nonexistent"},
        "commands": [
            Cmd(
                [V, "--vty_socket", "/nonexistent", "-c", "show running-config bfd"],
                rc=1,
                err="Exiting: failed to connect to any daemons.\n",
            ),
        ],
        "fail": "vtysh failed (rc 1) reading the bfd configuration: "
        "Exiting: failed to connect to any daemons.",
    },
    {
        "id": "frr-refuses-a-line-fails",
        "params": {"config": [FAST2]},
        "commands": [
            Cmd(READ, out=running()),
            LINKS,
            Cmd(CREATE2, rc=1, out="% Unknown command: transmit-interval 10\n"),
            Cmd(READ, out=running(" " + P2 + "\n")),
        ],
        "fail": "vtysh failed (rc 1) applying the bfd configuration: % Unknown command: transmit-interval 10 "
        "(other lines may have been applied)",
        "fail_has": {
            "commands": ["bfd", P2, "transmit-interval 10", "receive-interval 10", "exit", "exit"],
            "before": [],
            "after": [default_peer("198.19.0.2", local_address="198.19.0.1", interface="eth1")],
        },
    },
    {
        # FRR 8.4 exits 0 after a YANG refusal and carries on with the next lines.
        "id": "frr-yang-refusal-with-rc0-fails",
        "params": {"config": [{"peer": "198.19.0.8", "vrf": "w" * 37}]},
        "commands": [
            Cmd(READ, out=running()),
            Cmd(
                apply("bfd", "peer 198.19.0.8 vrf " + "w" * 37, "exit", "exit"),
                out="% Failed to edit configuration.\n\nYANG error(s):\n Unsatisfied length - string "
                f'"{"w" * 37}" length is not allowed.\n YANG path: Schema location '
                '"/frr-bfdd:bfdd/bfd/sessions/single-hop/vrf".\n',
            ),
            Cmd(READ, out=running()),
        ],
        "fail": "vtysh failed (rc 0) applying the bfd configuration: % Failed to edit configuration. "
        f'YANG error(s): Unsatisfied length - string "{"w" * 37}" length is not allowed. '
        'YANG path: Schema location "/frr-bfdd:bfdd/bfd/sessions/single-hop/vrf". '
        "(other lines may have been applied)",
        "fail_has": {"after": []},
    },
    {
        "id": "frr-accepts-but-does-not-apply-fails",
        "params": {"config": [FAST2]},
        "commands": [Cmd(READ, out=running()), LINKS, Cmd(CREATE2), Cmd(READ, out=running(" " + P2 + "\n"))],
        "fail": "FRR accepted the commands but its configuration still differs; still needed: "
        + P2
        + "; transmit-interval 10; receive-interval 10",
    },
    {
        "id": "invalid-input-fails-before-vtysh",
        "params": {"config": [{"peer": "198.19.9.1", "multihop": True}]},
        "commands": [],
        "fail": "peer 198.19.9.1 multihop: multihop needs local_address (FRR: local-address is required)",
    },
    {
        "id": "config-with-gathered-fails",
        "params": {"config": [FAST2], "state": "gathered"},
        "commands": [],
        "fail": "config cannot be used with state=gathered",
    },
    {
        "id": "merged-needs-config",
        "params": {"state": "merged"},
        "commands": [],
        "fail": "state is merged but all of the following are missing: config",
    },
    {
        "id": "vtysh-missing-fails",
        "params": {"state": "gathered"},
        "binaries": {"vtysh": None},
        "commands": [],
        "fail": "Failed to find required executable 'vtysh' in paths",
    },
]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_bfd_session(case):
    run_case(bfd_session, case)


def test_diff_mode(run_module):
    res = run_module(
        bfd_session,
        {"config": [FAST2, {"peer": "198.19.0.3"}], "state": "overridden"},
        [Cmd(READ, out=running(" peer 198.19.0.4\n  shutdown\n")), LINKS],
        check_mode=True,
        diff=True,
    )
    assert res["diff"] == {
        "before": "peer 198.19.0.4\n shutdown\nexit\n",
        "after": "peer 198.19.0.2 local-address 198.19.0.1 interface eth1\n transmit-interval 10\n"
        " receive-interval 10\nexit\npeer 198.19.0.3\nexit\n",
    }


def test_frr_messages_become_warnings(run_module):
    echo = dict(KEY2, echo_mode=True)
    res = run_module(
        bfd_session,
        {"config": [echo]},
        [
            Cmd(READ, out=running()),
            LINKS,
            Cmd(
                apply("bfd", P2, "echo-mode", "exit", "exit"),
                out=ECHO_WARNING + "\n",
            ),
            Cmd(READ, out=running(" " + P2 + "\n  echo-mode\n")),
        ],
    )
    assert res["changed"] is True
    assert res.warnings == ["vtysh: " + ECHO_WARNING[2:]]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1764470000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    c = FakeClock()
    for mod in (bfd_session, offload):
        monkeypatch.setattr(mod, "_sleep", c.sleep)
    monkeypatch.setattr(bfd_session, "_monotonic", c)
    monkeypatch.setattr(offload, "_clock", c)
    return c


UP2 = peer_status("198.19.0.2", "up", local="198.19.0.1", interface="eth1")
DOWN2 = peer_status(
    "198.19.0.2", "down", local="198.19.0.1", interface="eth1", diagnostic="control detection time expired"
)


def test_wait_up_polls_until_up(run_module, clock):
    res = run_module(
        bfd_session,
        {"config": [FAST2], "wait": "up", "wait_timeout": 10},
        [
            Cmd(READ, out=running()),
            LINKS,
            Cmd(CREATE2),
            Cmd(READ, out=running(BLOCK2_FAST)),
            Cmd(STATUS, out=peers_json()),
            Cmd(STATUS, out=peers_json(DOWN2)),
            Cmd(STATUS, out=peers_json(UP2, peer_status("198.19.0.7", "down"))),
        ],
    )
    assert not res.failed, res.data
    assert res["peers_status"] == [UP2]


def test_wait_up_ignores_shut_down_peers(run_module, clock):
    res = run_module(
        bfd_session,
        {"config": [dict(FAST2, shutdown=True)], "wait": "up"},
        [Cmd(READ, out=running(BLOCK2_FAST + "  shutdown\n")), Cmd(STATUS, out=peers_json())],
    )
    assert not res.failed, res.data
    assert res["peers_status"] == []


def test_wait_up_times_out_with_the_reason(run_module, clock):
    commands = [Cmd(READ, out=running(BLOCK2_FAST))]
    commands += [Cmd(STATUS, out=peers_json(DOWN2)) for _ in range(5)]  # 0, 0.5, ... 2.0 s
    res = run_module(bfd_session, {"config": [FAST2], "wait": "up", "wait_timeout": 2}, commands)
    assert res.failed
    assert res["msg"] == (
        "BFD peers not up after 2 s: 198.19.0.2 local-address 198.19.0.1 interface eth1 is down "
        "(diagnostic: control detection time expired)"
    )
    assert res["peers_status"] == [DOWN2]
    assert res["changed"] is False


def test_wait_not_in_check_mode(run_module, clock):
    res = run_module(
        bfd_session,
        {"config": [FAST2], "wait": "offloaded"},
        [Cmd(READ, out=running()), LINKS],
        check_mode=True,
    )
    assert res["changed"] is True
    assert "peers_status" not in res.data


def _stats(clock: FakeClock, ktx: int) -> dict[str, Any]:
    return {
        "version": 1, "generated_at": round(clock.now + 0.01, 3), "pid": 99, "kernel_tx": True,
        "xdp": {"ifname": "eth1", "ifindex": 2, "mode": "native"},
        "dplane": {"mode": "connect", "address": "127.0.0.1:50700", "connected": True},
        "sessions_configured": 1, "sessions_up": 1,
        "sessions": [{"local": "198.19.0.1", "peer": "198.19.0.2", "ifname": "eth1", "multihop": False,
                      "state": "up", "detect_time_us": 30000, "kernel_tx_packets": ktx,
                      "last_ktx_age_us": 2000 if ktx else None}],
    }  # fmt: skip


def test_wait_offloaded(run_module, clock, tmp_path: Path):
    path = tmp_path / "stats.json"
    answers = iter([0, 57])  # first dump: userspace still answers; second: the kernel does

    def engine() -> None:
        path.write_text(json.dumps(_stats(clock, next(answers))))

    res = run_module(
        bfd_session,
        {"config": [FAST2], "wait": "offloaded", "stats_path": str(path)},
        [
            Cmd(READ, out=running(BLOCK2_FAST)),
            Cmd(STATUS, out=peers_json(UP2)),
            Cmd(PKILL, effect=engine),
            Cmd(PKILL, effect=engine),
        ],
    )
    assert not res.failed, res.data
    assert res["offload"]["offload_live"] is True
    assert res["offload"]["reasons"] == []


def test_wait_offloaded_fails_with_reasons(run_module, clock, tmp_path: Path):
    path = tmp_path / "stats.json"
    res = run_module(
        bfd_session,
        {"config": [FAST2], "wait": "offloaded", "wait_timeout": 0, "stats_path": str(path)},
        [
            Cmd(READ, out=running(BLOCK2_FAST)),
            Cmd(STATUS, out=peers_json(UP2)),
            Cmd(PKILL, rc=1),
        ],
    )
    assert res.failed
    assert res["msg"] == "BFD offload not live after 0 s: no process named xdp-bfd is running"
    assert res["offload"]["offload_live"] is False


def test_wait_offloaded_finds_the_stats_from_the_engine(run_module, clock, tmp_path: Path, monkeypatch):
    """No stats_path: the engine's own --stats-dump (module_utils/locate.py), read through its root."""
    proc, root = tmp_path / "proc", tmp_path / "engine-root"
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "comm").write_text("xdp-bfd\n")
    (proc / "4242" / "cmdline").write_bytes(b"/opt/xdp-bfd/venv/bin/xdp-bfd\0--stats-dump\0/tmp/s.json\0")
    (proc / "4242" / "stat").write_text("4242 (xdp-bfd) S 1\n")
    (proc / "4242" / "root").symlink_to(root)
    (root / "tmp").mkdir(parents=True)
    monkeypatch.setattr(locate, "PROC", str(proc))
    monkeypatch.setattr(locate, "ENGINE_CONF", str(tmp_path / "engine.conf"))

    def engine() -> None:
        (root / "tmp" / "s.json").write_text(json.dumps(_stats(clock, 57)))

    res = run_module(
        bfd_session,
        {"config": [FAST2], "wait": "offloaded"},
        [Cmd(READ, out=running(BLOCK2_FAST)), Cmd(STATUS, out=peers_json(UP2)), Cmd(PKILL, effect=engine)],
    )
    assert not res.failed, res.data
    assert res["offload"]["offload_live"] is True
    assert (res["offload"]["stats_path"], res["offload"]["stats_path_from"]) == ("/tmp/s.json", "cmdline")
