"""offload_info: the signal it sends (exact argv), the wait for fresh stats, the verdict.

The engine is simulated by the fake ``pkill``/``kill`` command: its effect writes the stats
file the way the engine does on SIGUSR1. The clock is fake so waits take no time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.xdp_bfd.fastpath.plugins.module_utils import locate, offload
from ansible_collections.xdp_bfd.fastpath.plugins.modules import offload_info
from fastpath_modtest import Cmd
from frr_fixtures import peer_status, peers_json

PKILL = ["/usr/bin/pkill", "-USR1", "-x", "xdp-bfd"]
T0 = 1764470000.0


class FakeClock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(offload, "_clock", c)
    monkeypatch.setattr(offload, "_sleep", c.sleep)
    return c


def doc(generated_at: float, **kw: Any) -> dict[str, Any]:
    """A standalone engine's stats (no dataplane: bfdd's peers are not asked); ``kw`` overrides."""
    d = {
        "version": 1, "generated_at": generated_at, "pid": 1234, "engine_version": "0.1.0", "kernel_tx": True,
        "xdp": {"ifname": "eth1", "ifindex": 2, "mode": "native"},
        "dplane": None,
        "deadman_us": 3000000, "sched": "fifo 60", "sessions_configured": 1, "sessions_up": 1,
        "counters": {"xdp_tx": 90, "xdp_pass": 0, "drop": {}},
        "sessions": [{
            "local": "198.19.0.1", "peer": "198.19.0.2", "ifname": "eth1", "multihop": False,
            "local_discr": 1, "remote_discr": 2, "state": "up", "remote_state": "up", "diag": "none",
            "tx_interval_us": 10000,
            "detect_time_us": 30000, "rx_packets": 100, "kernel_tx_packets": 90, "user_tx_packets": 10,
            "last_rx_age_us": 3000, "last_ktx_age_us": 3100, "flaps": 0, "up_since": T0 - 5,
        }],
    }  # fmt: skip
    d.update(kw)
    return d


def engine_writes(path: Path, clock: FakeClock, **kw: Any):
    """The effect of SIGUSR1 on a live engine: stats generated 20 ms after the signal."""

    def effect() -> None:
        path.write_text(json.dumps(doc(round(clock.now + 0.02, 3), **kw)))

    return effect


def test_live(run_module, tmp_path, clock):
    path = tmp_path / "stats.json"
    res = run_module(offload_info, {"path": str(path)}, [Cmd(PKILL, effect=engine_writes(path, clock))])
    assert res["changed"] is False
    assert res["offload_live"] is True, res["reasons"]
    assert res["reasons"] == []
    assert res["signaled"] is True
    assert res["signal_command"] == PKILL
    assert res["stats"]["sessions"][0]["kernel_tx_packets"] == 90


def test_check_mode_runs_the_same(run_module, tmp_path, clock):
    path = tmp_path / "stats.json"
    res = run_module(
        offload_info, {"path": str(path)}, [Cmd(PKILL, effect=engine_writes(path, clock))], check_mode=True
    )
    assert res["changed"] is False
    assert res["offload_live"] is True


def test_waits_for_the_rewrite(run_module, tmp_path, clock, monkeypatch):
    """The file exists but is old; the engine's rewrite lands 0.35 s later: the module waits for it."""
    path = tmp_path / "stats.json"
    path.write_text(json.dumps(doc(T0 - 60)))
    real_sleep = clock.sleep

    def sleep(seconds: float) -> None:
        real_sleep(seconds)
        if clock.now >= T0 + 0.35 and json.loads(path.read_text())["generated_at"] < T0:
            path.write_text(json.dumps(doc(round(clock.now, 3))))

    monkeypatch.setattr(offload, "_sleep", sleep)
    res = run_module(offload_info, {"path": str(path), "timeout": 2}, [Cmd(PKILL)])
    assert res["offload_live"] is True, res["reasons"]
    assert 0.35 <= res["waited"] <= 0.5


def test_pidfile_uses_kill(run_module, tmp_path, clock):
    path, pidfile = tmp_path / "stats.json", tmp_path / "xdp-bfd.pid"
    pidfile.write_text("4242\n")
    cmd = Cmd(["/usr/bin/kill", "-USR1", "4242"], effect=engine_writes(path, clock))
    res = run_module(offload_info, {"path": str(path), "pidfile": str(pidfile)}, [cmd])
    assert res["offload_live"] is True
    assert res["signal_command"] == ["/usr/bin/kill", "-USR1", "4242"]


def test_process_name(run_module, tmp_path, clock):
    path = tmp_path / "stats.json"
    cmd = Cmd(["/usr/bin/pkill", "-USR1", "-x", "xdp-bfd-lab"], effect=engine_writes(path, clock))
    res = run_module(offload_info, {"path": str(path), "process_name": "xdp-bfd-lab"}, [cmd])
    assert res["offload_live"] is True


def test_not_live_reasons_are_returned_not_failed(run_module, tmp_path, clock):
    path = tmp_path / "stats.json"
    res = run_module(
        offload_info,
        {"path": str(path)},
        [Cmd(PKILL, effect=engine_writes(path, clock, kernel_tx=False, xdp=None, sessions_up=0))],
    )
    assert not res.failed
    assert res["offload_live"] is False
    assert res["reasons"] == [
        "kernel_tx is not true: the XDP fast path is not attached",
        "0 of 1 configured sessions are up",
    ]


def test_userspace_answering_is_not_live(run_module, tmp_path, clock):
    path = tmp_path / "stats.json"
    s = doc(0)["sessions"][0] | {"kernel_tx_packets": 0, "last_ktx_age_us": None, "user_tx_packets": 100}
    res = run_module(
        offload_info, {"path": str(path)}, [Cmd(PKILL, effect=engine_writes(path, clock, sessions=[s]))]
    )
    assert res["offload_live"] is False
    assert res["reasons"] == [
        "session 198.19.0.1->198.19.0.2 on eth1 is up but the kernel has sent nothing for it "
        "(userspace is answering)"
    ]


def test_max_ktx_age(run_module, tmp_path, clock):
    path = tmp_path / "stats.json"
    res = run_module(
        offload_info,
        {"path": str(path), "max_ktx_age_us": 3000},
        [Cmd(PKILL, effect=engine_writes(path, clock))],
    )
    assert res["reasons"] == [
        "session 198.19.0.1->198.19.0.2 on eth1: last kernel TX 3100 us ago, more than 3000 us "
        "(userspace is answering)"
    ]


def test_engine_not_running(run_module, tmp_path, clock):
    path = tmp_path / "stats.json"
    path.write_text(json.dumps(doc(T0 - 3600)))
    res = run_module(offload_info, {"path": str(path)}, [Cmd(PKILL, rc=1)])
    assert not res.failed
    assert res["offload_live"] is False
    assert res["signaled"] is False
    assert res["reasons"] == ["no process named xdp-bfd is running"]
    assert res["stats"]["generated_at"] == T0 - 3600  # the last dump, for the operator


def test_stale_file_times_out(run_module, tmp_path, clock):
    path = tmp_path / "stats.json"
    path.write_text(json.dumps(doc(T0 - 3600)))
    res = run_module(offload_info, {"path": str(path), "timeout": 1.5}, [Cmd(PKILL)])
    assert res["offload_live"] is False
    assert res["reasons"] == [
        "stats were generated at 1764466400.000, before the signal at 1764470000.000 "
        "(the engine wrote none in time)"
    ]
    assert res["waited"] == pytest.approx(1.5, abs=0.11)


def test_no_file(run_module, tmp_path, clock):
    path = tmp_path / "missing.json"
    res = run_module(offload_info, {"path": str(path), "timeout": 0.5}, [Cmd(PKILL)])
    assert res["offload_live"] is False
    assert res["stats"] is None
    assert res["reasons"] == [
        f"cannot read {path}: No such file or directory (waited 0.5 s after the signal)"
    ]


def test_bad_json(run_module, tmp_path, clock):
    path = tmp_path / "stats.json"

    def effect() -> None:
        path.write_text("{not json")

    res = run_module(offload_info, {"path": str(path), "timeout": 0.2}, [Cmd(PKILL, effect=effect)])
    assert res["offload_live"] is False
    assert res["reasons"][0].startswith(f"{path} is not valid JSON: ")


def test_pidfile_missing(run_module, tmp_path, clock):
    pidfile = tmp_path / "nope.pid"
    res = run_module(offload_info, {"path": str(tmp_path / "s.json"), "pidfile": str(pidfile)}, [])
    assert not res.failed
    assert res["signaled"] is False
    assert res["signal_command"] is None
    assert res["reasons"] == [f"cannot read pidfile {pidfile}: No such file or directory"]


def test_pidfile_garbage(run_module, tmp_path, clock):
    pidfile = tmp_path / "x.pid"
    pidfile.write_text("xdp-bfd\n")
    res = run_module(offload_info, {"path": str(tmp_path / "s.json"), "pidfile": str(pidfile)}, [])
    assert res["reasons"] == [f"pidfile {pidfile} does not hold a process id: 'xdp-bfd'"]


def test_kill_fails(run_module, tmp_path, clock):
    pidfile = tmp_path / "x.pid"
    pidfile.write_text("999999\n")
    res = run_module(
        offload_info,
        {"path": str(tmp_path / "s.json"), "pidfile": str(pidfile)},
        [Cmd(["/usr/bin/kill", "-USR1", "999999"], rc=1, err="kill: (999999): No such process\n")],
    )
    assert res["reasons"] == [f"cannot signal pid 999999 from {pidfile}: kill: (999999): No such process"]


# -- bfdd's configured peers (issue 20: a peer bfdd never handed over left the verdict "live") ---

DPLANE = {"mode": "connect", "address": "127.0.0.1:50700", "connected": True}
STATUS = ["/usr/bin/vtysh", "-c", "show bfd peers json"]
UP2 = peer_status("198.19.0.2", "up", local="198.19.0.1", interface="eth1")
# FRR 8.4 with a peer on a mistyped interface: down, and bfdd never gives it to the engine.
TYPO3 = peer_status("198.19.0.3", "down", local="198.19.0.1", interface="nosuch0", diagnostic="ok")


def test_frr_peers_all_offloaded(run_module, tmp_path, clock):
    path = tmp_path / "stats.json"
    res = run_module(
        offload_info,
        {"path": str(path)},
        [Cmd(PKILL, effect=engine_writes(path, clock, dplane=DPLANE)), Cmd(STATUS, out=peers_json(UP2))],
    )
    assert res["offload_live"] is True, res["reasons"]
    assert res["frr_peers"] == {"configured": 1, "up": 1, "offloaded": 1}


def test_a_peer_bfdd_never_handed_over_is_not_live(run_module, tmp_path, clock):
    path = tmp_path / "stats.json"
    res = run_module(
        offload_info,
        {"path": str(path)},
        [
            Cmd(PKILL, effect=engine_writes(path, clock, dplane=DPLANE)),
            Cmd(STATUS, out=peers_json(UP2, TYPO3)),
        ],
    )
    assert res["offload_live"] is False
    assert res["frr_peers"] == {"configured": 2, "up": 1, "offloaded": 1}
    assert res["reasons"] == [
        "1 of 2 BFD peers configured in FRR are not Up and offloaded: 198.19.0.3 local 198.19.0.1 on "
        "nosuch0: down in FRR for 1 s, no session in the engine"
    ]


def test_frr_behind_the_engine_names_both_views(run_module, tmp_path, clock):
    # The molecule fleet once failed on exactly this: bfdd down, the engine's session Up and
    # kernel-answered. The reason has to say how long each side has held its view.
    path = tmp_path / "stats.json"
    down = peer_status("198.19.0.2", "down", local="198.19.0.1", interface="eth1",
                       downtime=2, diagnostic="neighbor signaled session down")  # fmt: skip
    s = doc(0)["sessions"][0] | {"flaps": 1}
    res = run_module(
        offload_info,
        {"path": str(path)},
        [
            Cmd(PKILL, effect=engine_writes(path, clock, dplane=DPLANE, sessions=[s])),
            Cmd(STATUS, out=peers_json(down)),
        ],
    )
    assert res["frr_peers"] == {"configured": 1, "up": 0, "offloaded": 0}
    assert res["reasons"] == [
        "1 of 1 BFD peers configured in FRR are not Up and offloaded: 198.19.0.2 local 198.19.0.1 on eth1: "
        "down in FRR for 2 s (diagnostic: neighbor signaled session down), "
        # up_since is T0 - 5, the dump 20 ms after the signal at T0.
        "the engine's session is up for 5.0 s with 1 flaps"
    ]


def test_an_up_peer_answered_by_userspace_is_not_offloaded(run_module, tmp_path, clock):
    path = tmp_path / "stats.json"
    s = doc(0)["sessions"][0] | {"kernel_tx_packets": 0, "last_ktx_age_us": None}
    res = run_module(
        offload_info,
        {"path": str(path)},
        [
            Cmd(PKILL, effect=engine_writes(path, clock, dplane=DPLANE, sessions=[s])),
            Cmd(STATUS, out=peers_json(UP2)),
        ],
    )
    assert res["frr_peers"] == {"configured": 1, "up": 1, "offloaded": 0}
    assert res["reasons"][-1] == (
        "1 of 1 BFD peers configured in FRR are not Up and offloaded: 198.19.0.2 local 198.19.0.1 on eth1: "
        "not answered by the kernel"
    )


def test_shut_down_peers_do_not_count(run_module, tmp_path, clock):
    path = tmp_path / "stats.json"
    off = peer_status("198.19.0.4", "shutdown")
    res = run_module(
        offload_info,
        {"path": str(path)},
        [Cmd(PKILL, effect=engine_writes(path, clock, dplane=DPLANE)), Cmd(STATUS, out=peers_json(UP2, off))],
    )
    assert res["offload_live"] is True, res["reasons"]
    assert res["frr_peers"] == {"configured": 1, "up": 1, "offloaded": 1}


def test_bfdd_unreadable_is_a_reason(run_module, tmp_path, clock):
    path = tmp_path / "stats.json"
    res = run_module(
        offload_info,
        {"path": str(path), "vtysh_socket": "/run/frr-r1"},
        [
            Cmd(PKILL, effect=engine_writes(path, clock, dplane=DPLANE)),
            Cmd(
                ["/usr/bin/vtysh", "--vty_socket", "/run/frr-r1", "-c", "show bfd peers json"],
                rc=1,
                err="Exiting: failed to connect to any daemons.\n",
            ),
        ],
    )
    assert res["offload_live"] is False
    assert res["frr_peers"] is None
    assert res["reasons"] == [
        "cannot read bfdd's peers (vtysh rc 1): Exiting: failed to connect to any daemons."
    ]


@pytest.mark.parametrize(
    ("frr_peers", "dplane", "binaries", "asks"),
    [
        ("auto", None, {}, False),  # a standalone engine: its sessions file is the configuration
        ("auto", DPLANE, {"vtysh": None}, False),  # no FRR on the host
        ("never", DPLANE, {}, False),
        ("always", None, {}, True),
    ],
    ids=["auto-standalone", "auto-no-vtysh", "never", "always"],
)
def test_when_bfdds_peers_are_asked(run_module, tmp_path, clock, *, frr_peers, dplane, binaries, asks):
    path = tmp_path / "stats.json"
    commands = [Cmd(PKILL, effect=engine_writes(path, clock, dplane=dplane))]
    if asks:
        commands.append(Cmd(STATUS, out=peers_json(UP2)))
    res = run_module(offload_info, {"path": str(path), "frr_peers": frr_peers}, commands, binaries=binaries)
    assert res["offload_live"] is True, res["reasons"]
    assert (res["frr_peers"] is not None) == asks


def test_always_without_vtysh_is_a_reason(run_module, tmp_path, clock):
    path = tmp_path / "stats.json"
    res = run_module(
        offload_info,
        {"path": str(path), "frr_peers": "always"},
        [Cmd(PKILL, effect=engine_writes(path, clock))],
        binaries={"vtysh": None},
    )
    assert res["reasons"] == ["vtysh is not installed: bfdd's peers cannot be read"]


@pytest.mark.parametrize(
    ("params", "msg"),
    [
        ({"timeout": -1}, "timeout must not be negative, got -1.0"),
        ({"max_ktx_age_us": 0}, "max_ktx_age_us must be positive, got 0"),
        ({"min_sessions": -2}, "min_sessions must not be negative, got -2"),
        ({"process_name": ""}, "process_name must not be empty"),
        ({"timeout": "soon"}, "argument 'timeout' is of type str and we were unable to convert to float: "),
    ],
)
def test_bad_parameters_fail_with_one_message(run_module, tmp_path, clock, params, msg):
    res = run_module(offload_info, dict(params), [])
    assert res.failed
    assert res["msg"].startswith(msg)


# -- no path: found from the running engine (module_utils/locate.py) --------------------------

VENV = "/opt/xdp-bfd/venv/bin"


class FakeHost:
    """A /proc with the given engines (each with its own root: its mount namespace) and an
    /etc/xdp-bfd/engine.conf, both under tmp_path."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp, self.proc, self.conf = tmp, tmp / "proc", tmp / "engine.conf"
        self.proc.mkdir()
        monkeypatch.setattr(locate, "PROC", str(self.proc))
        monkeypatch.setattr(locate, "ENGINE_CONF", str(self.conf))

    def engine(self, pid: int, *args: str, cmdline: bool = True) -> Path:
        d = self.proc / str(pid)
        d.mkdir()
        (d / "comm").write_text("xdp-bfd\n")
        argv = [f"{VENV}/python3", f"{VENV}/xdp-bfd", *args] if cmdline else []
        (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
        (d / "stat").write_text(f"{pid} (xdp-bfd) S 1\n")
        root = self.tmp / f"root-{pid}"
        (root / "tmp").mkdir(parents=True)
        (d / "root").symlink_to(root)
        (d / "cwd").symlink_to("/")
        return root


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHost:
    return FakeHost(tmp_path, monkeypatch)


def test_no_path_reads_the_engines_command_line(run_module, host, clock):
    root = host.engine(4242, "--dplane", "50700", "--stats-dump", "/tmp/xdp-bfd/stats.json")
    (root / "tmp" / "xdp-bfd").mkdir()
    # The engine's /tmp is its own (PrivateTmp): only its root reaches the file.
    res = run_module(
        offload_info, {}, [Cmd(PKILL, effect=engine_writes(root / "tmp/xdp-bfd/stats.json", clock))]
    )
    assert res["offload_live"] is True, res["reasons"]
    assert (res["stats_path"], res["stats_path_from"]) == ("/tmp/xdp-bfd/stats.json", "cmdline")


def test_no_path_with_a_pidfile_asks_that_engine(run_module, host, clock, tmp_path):
    host.engine(4242, "--stats-dump", "/run/a.json")
    root = host.engine(4343, "--stats-dump", "/tmp/b.json")
    pidfile = tmp_path / "xdp-bfd.pid"
    pidfile.write_text("4343\n")
    kill = Cmd(["/usr/bin/kill", "-USR1", "4343"], effect=engine_writes(root / "tmp/b.json", clock))
    res = run_module(offload_info, {"pidfile": str(pidfile)}, [kill])
    assert res["offload_live"] is True, res["reasons"]
    assert (res["stats_path"], res["stats_path_from"]) == ("/tmp/b.json", "cmdline")


def test_no_path_engine_default(run_module, host, clock):
    root = host.engine(4242, "--dplane", "50700")
    res = run_module(
        offload_info, {}, [Cmd(PKILL, effect=engine_writes(root / "tmp/bfd_tx_stats.json", clock))]
    )
    assert res["offload_live"] is True, res["reasons"]
    assert (res["stats_path"], res["stats_path_from"]) == ("/tmp/bfd_tx_stats.json", "default")


def test_no_path_from_engine_conf(run_module, host, clock):
    """The command line cannot be read: the unit's arguments are in engine.conf."""
    host.conf.write_text(
        '# rendered by the engine role\nXDP_BFD_ARGS="--dplane 50700 --stats-dump /run/xdp-bfd/stats.json"\n'
        'XDP_BFD_SCHED=""\n'
    )
    root = host.engine(4242, cmdline=False)
    (root / "run" / "xdp-bfd").mkdir(parents=True)
    res = run_module(
        offload_info, {}, [Cmd(PKILL, effect=engine_writes(root / "run/xdp-bfd/stats.json", clock))]
    )
    assert res["offload_live"] is True, res["reasons"]
    assert (res["stats_path"], res["stats_path_from"]) == ("/run/xdp-bfd/stats.json", "engine.conf")


def test_no_path_none_running_shows_engine_confs_last_dump(run_module, host, clock, tmp_path):
    last = tmp_path / "last.json"
    last.write_text(json.dumps(doc(T0 - 3600)))
    host.conf.write_text(f'XDP_BFD_ARGS="--dplane 50700 --stats-dump {last}"\n')
    res = run_module(offload_info, {}, [Cmd(PKILL, rc=1)])
    assert not res.failed
    assert (res["signaled"], res["offload_live"]) == (False, False)
    assert res["reasons"] == ["no process named xdp-bfd is running"]
    assert (res["stats_path"], res["stats_path_from"]) == (str(last), "engine.conf")
    assert res["stats"]["generated_at"] == T0 - 3600


def test_no_path_none_running_nothing_anywhere(run_module, host, clock):
    res = run_module(offload_info, {}, [Cmd(PKILL, rc=1)])
    assert res["reasons"] == ["no process named xdp-bfd is running"]
    assert (res["stats_path"], res["stats_path_from"], res["stats"]) == (
        "/tmp/bfd_tx_stats.json",
        "default",
        None,
    )


def test_no_path_several_running_signals_nobody(run_module, host, clock):
    host.engine(4242, "--stats-dump", "/run/a.json")
    host.engine(4343, "--stats-dump", "/run/b.json")
    res = run_module(offload_info, {}, [])
    assert not res.failed
    assert (res["signaled"], res["offload_live"], res["signal_command"]) == (False, False, None)
    assert res["reasons"] == [
        "2 engines named xdp-bfd are running (pids 4242, 4343): give the stats path or a pid file"
    ]
    assert res["stats_path"] is None


def test_path_given_is_read_as_is(run_module, host, clock, tmp_path):
    host.engine(4242, "--stats-dump", "/tmp/elsewhere.json")
    path = tmp_path / "given.json"
    res = run_module(offload_info, {"path": str(path)}, [Cmd(PKILL, effect=engine_writes(path, clock))])
    assert res["offload_live"] is True
    assert (res["stats_path"], res["stats_path_from"]) == (str(path), "path")
