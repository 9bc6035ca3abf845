"""Finding the engine and its stats file (``xdp_bfd.stats.locate``), on a fake /proc tree.

The parsers agree with the engine's own argparse (the value the engine writes to is the
one ``--stats-dump`` parsing gives), and with the copy the Ansible modules carry in
plugins/module_utils/locate.py (tests/unit/plugins/module_utils/test_plugin_util_locate.py).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from xdp_bfd.cli import build_parser
from xdp_bfd.stats import locate
from xdp_bfd.stats.locate import DEFAULT_STATS_PATH

REPO = Path(__file__).resolve().parents[3]
VENV = "/opt/xdp-bfd/venv/bin"
SIGCGT_USR1 = f"{1 << (signal.SIGUSR1 - 1) | 1 << (signal.SIGTERM - 1):016x}"


ARG_CASES = [
    (["--dplane", "50700", "--stats-dump", "/run/xdp-bfd/stats.json"], "/run/xdp-bfd/stats.json"),
    (["--stats-dump=/run/s.json", "--dplane", "1"], "/run/s.json"),
    (["--stats", "/a.json", "--dplane", "1"], "/a.json"),  # argparse takes unambiguous prefixes
    (["--st=/b.json", "--dplane", "1"], "/b.json"),
    (["--stats-dump", "/1.json", "--stats-dump", "/2.json", "--dplane", "1"], "/2.json"),  # last wins
    (["--dplane", "1", "--sessions", "/etc/s.yml"], None),
    (["--dplane", "1", "relative.json"], None),
    (["--dplane", "1", "--stats-dump", "rel/s.json"], "rel/s.json"),
    (["198.19.0.1", "198.19.0.2", "--stats-dump", "/c.json"], "/c.json"),
    (["--dplane", "1", "--", "--stats-dump"], None),
]


@pytest.mark.parametrize(("args", "want"), ARG_CASES)
def test_stats_path_from_args_agrees_with_argparse(args, want):
    assert locate.stats_path_from_args(args) == want
    ns = build_parser().parse_known_args(args)[0]
    assert str(ns.stats_dump) == (want or DEFAULT_STATS_PATH).rstrip("/")


def test_an_ambiguous_prefix_is_not_the_stats_option():
    assert locate.stats_path_from_args(["--s", "/x.json"]) is None  # --sessions, --sched-…, --stats-…
    assert locate.stats_path_from_args(["--stats-dump"]) is None  # no value: argparse refuses it


@pytest.mark.parametrize(
    ("argv", "args"),
    [
        ([f"{VENV}/python3", f"{VENV}/xdp-bfd", "--dplane", "1"], ["--dplane", "1"]),  # a console script
        ([f"{VENV}/xdp-bfd", "--dplane", "1"], ["--dplane", "1"]),
        (["python3", "-m", "xdp_bfd.cli", "--dplane", "1"], ["--dplane", "1"]),
        (["/usr/bin/python3", "-E", "/usr/local/bin/xdp-bfd", "show"], ["show"]),
        (["strange-launcher", "--dplane", "1"], ["--dplane", "1"]),
    ],
)
def test_engine_args(argv, args):
    assert locate.engine_args(argv) == args


def test_the_shipped_engine_conf():
    text = (REPO / "files" / "engine.conf").read_text()
    env = locate.parse_env_file(text)
    assert env["XDP_BFD_SCHED"] == "--sched-deadline 1000/10000"
    assert env["XDP_BFD_ARGS"].startswith("--dplane 50700 --kernel-tx eth0 ")
    assert locate.stats_path_from_conf(text) == "/run/xdp-bfd/stats.json"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ('XDP_BFD_ARGS="--dplane 1 --stats-dump /run/a.json"\n', "/run/a.json"),
        ("XDP_BFD_ARGS='--dplane 1 --stats-dump=/run/b.json'\n", "/run/b.json"),
        ("XDP_BFD_ARGS=--dplane 1 --stats-dump /run/c.json\n", "/run/c.json"),
        ('# XDP_BFD_ARGS="--stats-dump /no.json"\n; also a comment\nXDP_BFD_ARGS="--dplane 1"\n', None),
        ('XDP_BFD_ARGS="--dplane 1 \\\n  --stats-dump /run/d.json"\n', "/run/d.json"),  # continued
        ('XDP_BFD_ARGS="--dplane 1"\nXDP_BFD_SCHED="--stats-dump /run/e.json"\n', "/run/e.json"),
        ('XDP_BFD_ARGS="--stats-dump /run/\\"q\\".json"\n', '/run/"q".json'),
        ("", None),
    ],
)
def test_engine_conf_forms(text, want):
    assert locate.stats_path_from_conf(text) == want


@pytest.mark.parametrize(
    ("text", "unit"),
    [
        ("0::/system.slice/xdp-bfd.service\n", "xdp-bfd.service"),
        ("0::/machine.slice/libpod-ab12.scope/container/system.slice/xdp-bfd.service\n", "xdp-bfd.service"),
        ("0::/user.slice/user-0.slice/session-3.scope\n", "session-3.scope"),
        ("12:cpu,cpuacct:/\n1:name=systemd:/system.slice/xdp-bfd.service\n", "xdp-bfd.service"),
        ("0::/\n", None),
    ],
)
def test_unit_of(text, unit):
    assert locate.unit_of(text) == unit


def test_status_fields():
    status = f"Name:\txdp-bfd\nNSpid:\t4242\t1\nSigIgn:\t0000000000001000\nSigCgt:\t{SIGCGT_USR1}\n"
    assert locate.sigusr1_caught(status) is True
    assert locate.own_pid(status, 4242) == 1
    assert locate.sigusr1_caught("SigCgt:\t0000000000004000\n") is False
    assert locate.sigusr1_caught("Name:\tx\n") is None
    assert locate.own_pid("Name:\tx\n", 4242) == 4242


# -- a fake /proc ----------------------------------------------------------------------


class FakeProc:
    def __init__(self, tmp: Path) -> None:
        self.dir = tmp / "proc"
        self.dir.mkdir()
        self.tmp = tmp

    def add(
        self, pid: int, argv: list[str], *, comm: str = "xdp-bfd", state: str = "S", cwd: str = "/",
        cgroup: str = "0::/system.slice/xdp-bfd.service\n", caught: bool = True, nspid: int | None = None,
    ) -> Path:  # fmt: skip
        d = self.dir / str(pid)
        d.mkdir()
        (d / "comm").write_text(comm + "\n")
        (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
        (d / "stat").write_text(f"{pid} ({comm}) {state} 1 {pid} {pid} 0 -1\n")
        (d / "cgroup").write_text(cgroup)
        sigcgt = SIGCGT_USR1 if caught else "0000000000004000"
        ns = "\t".join(str(p) for p in (pid, nspid) if p)
        (d / "status").write_text(f"Name:\t{comm}\nNSpid:\t{ns}\nSigCgt:\t{sigcgt}\n")
        root = self.tmp / f"root-{pid}"  # the process's own view of the file system
        root.mkdir()
        (d / "root").symlink_to(root)
        (d / "cwd").symlink_to(cwd)
        return root

    def engine(self, pid: int, *args: str, **kw: Any) -> Path:
        return self.add(pid, [f"{VENV}/python3", f"{VENV}/xdp-bfd", *args], **kw)


@pytest.fixture
def proc(tmp_path: Path) -> FakeProc:
    return FakeProc(tmp_path)


def test_find_engines_skips_what_is_not_an_engine(proc):
    proc.engine(4242, "--dplane", "1")
    proc.engine(4343, "--sessions", "/etc/s.yml", cgroup="0::/user.slice/session-2.scope\n")
    proc.engine(4444, "show")  # an operator's `xdp-bfd show` that has not renamed itself yet
    proc.engine(4545, "--dplane", "1", state="Z")
    proc.add(4646, ["/usr/bin/bash"], comm="bash")
    proc.add(4747, ["xdp-bfd-show"], comm="xdp-bfd-show")
    proc.engine(4848, "--dplane", "2")  # "us"
    (proc.dir / "self").mkdir()
    found = locate.find_engines(proc.dir, exclude=[4848])
    assert [(e.pid, e.unit) for e in found] == [(4242, "xdp-bfd.service"), (4343, "session-2.scope")]
    assert found[0].argv == (f"{VENV}/python3", f"{VENV}/xdp-bfd", "--dplane", "1")


def test_choose_one_none_several(proc):
    with pytest.raises(locate.NoEngine, match=r"^no engine running \(no process named xdp-bfd\)$") as e:
        locate.choose([])
    assert e.value.exit_code == 3
    one = locate.EngineProc(4242, ("xdp-bfd",), "xdp-bfd.service")
    assert locate.choose([one]) is one
    two = locate.EngineProc(4343, ("xdp-bfd",))
    with pytest.raises(locate.SeveralEngines) as e:
        locate.choose([one, two])
    assert (
        str(e.value) == "2 engines are running: pid 4242 (xdp-bfd.service), pid 4343; choose one with --pid"
    )
    assert e.value.exit_code == 2


def test_engine_by_pid(proc):
    proc.engine(4242, "--dplane", "1")
    proc.add(4646, ["/usr/bin/bash"], comm="bash")
    assert locate.engine_by_pid(4242, proc.dir).unit == "xdp-bfd.service"
    with pytest.raises(locate.NoEngine, match=r"^no process with pid 9999$"):
        locate.engine_by_pid(9999, proc.dir)
    proc.engine(4545, "--dplane", "1", state="Z")
    with pytest.raises(locate.NoEngine, match=r"^no process with pid 4545 \(it has exited\)$"):
        locate.engine_by_pid(4545, proc.dir)
    with pytest.raises(locate.LocateError, match=r"^pid 4646 is 'bash', not the engine \(xdp-bfd\)$") as e:
        locate.engine_by_pid(4646, proc.dir)
    assert e.value.exit_code == 1


def where(proc: FakeProc, pid: int, conf: Path | None = None) -> locate.StatsLocation:
    engine = locate.engine_by_pid(pid, proc.dir)
    return locate.stats_location(engine, proc.dir, conf or proc.tmp / "no-engine.conf")


def test_stats_location_from_the_command_line(proc):
    root = proc.engine(4242, "--dplane", "1", "--stats-dump", "/tmp/private/s.json")
    loc = where(proc, 4242)
    assert (loc.path, loc.source) == ("/tmp/private/s.json", "command line")
    # Read in the engine's mount namespace (PrivateTmp): through /proc/PID/root.
    assert loc.read_path == proc.dir / "4242" / "root" / "tmp/private/s.json"
    (root / "tmp" / "private").mkdir(parents=True)
    (root / "tmp" / "private" / "s.json").write_text("{}")
    assert loc.read_path.read_text() == "{}"


def test_stats_location_relative_to_the_engines_cwd(proc):
    proc.engine(4242, "--dplane", "1", "--stats-dump", "run/s.json", cwd="/var/lib/xdp-bfd")
    loc = where(proc, 4242)
    assert loc.path == "/var/lib/xdp-bfd/run/s.json"
    assert loc.read_path == proc.dir / "4242" / "root" / "var/lib/xdp-bfd/run/s.json"


def test_stats_location_default(proc):
    proc.engine(4242, "--dplane", "1")
    conf = proc.tmp / "engine.conf"
    conf.write_text('XDP_BFD_ARGS="--stats-dump /run/conf.json"\n')  # the running command line wins
    assert (where(proc, 4242, conf).path, where(proc, 4242, conf).source) == (DEFAULT_STATS_PATH, "default")


def test_stats_location_from_engine_conf_when_the_command_line_is_unreadable(proc):
    proc.engine(4242)
    (proc.dir / "4242" / "cmdline").write_bytes(b"")
    conf = proc.tmp / "engine.conf"
    conf.write_text((REPO / "files" / "engine.conf").read_text())
    loc = where(proc, 4242, conf)
    assert (loc.path, loc.source) == ("/run/xdp-bfd/stats.json", "engine.conf")
    conf.unlink()
    assert where(proc, 4242, conf).source == "default"


def test_stats_location_without_access_to_the_root(proc):
    proc.engine(4242, "--stats-dump", "/run/s.json")
    (proc.dir / "4242" / "root").unlink()  # as a user: /proc/PID/root of root's process is closed
    assert where(proc, 4242).read_path == Path("/run/s.json")


# -- asking for a dump -----------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1764470000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def dump(path: Path, generated_at: float, pid: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(".tmp")
    tmp.write_text(json.dumps({"version": 1, "generated_at": generated_at, "pid": pid, "sessions": []}))
    os.replace(tmp, path)  # a new inode, as the engine's write_atomic


def ask(proc: FakeProc, pid: int, kill: Any, clock: Clock, timeout: float = 1.0) -> tuple[dict, float]:
    engine = locate.engine_by_pid(pid, proc.dir)
    loc = locate.stats_location(engine, proc.dir, proc.tmp / "no.conf")
    return locate.request_stats(
        engine, loc, timeout=timeout, proc=proc.dir, kill=kill, clock=clock, sleep=clock.sleep
    )


def test_request_stats_waits_for_the_new_file(proc):
    root = proc.engine(4242, "--stats-dump", "/tmp/s.json")
    file = root / "tmp" / "s.json"
    dump(file, 1764460000.0, 4242)  # an old dump
    clock, sent = Clock(), []

    def kill(pid: int, sig: int) -> None:
        sent.append((pid, sig))

    def sleep(s: float) -> None:
        clock.now += s
        if clock.now >= 1764470000.3 and json.loads(file.read_text())["generated_at"] < clock.now - 1:
            dump(file, 1764470000.05, 4242)  # the paced dump lands 0.3 s on

    clock.sleep = sleep  # type: ignore[method-assign]
    doc, waited = ask(proc, 4242, kill, clock)
    assert sent == [(4242, signal.SIGUSR1)]
    assert doc["generated_at"] == 1764470000.05
    assert 0.3 <= waited < 0.35


def test_request_stats_refuses_a_stale_file(proc):
    root = proc.engine(4242, "--stats-dump", "/tmp/s.json")
    dump(root / "tmp" / "s.json", 1764460000.0, 4242)
    clock = Clock()
    with pytest.raises(locate.LocateError) as e:
        ask(proc, 4242, lambda pid, sig: None, clock, timeout=1.5)
    assert str(e.value) == (
        "no fresh stats from engine pid 4242 (xdp-bfd.service) at /tmp/s.json (command line) within 1.5 s "
        "of SIGUSR1: the file was not replaced; refusing to show old data"
    )
    assert e.value.exit_code == 1
    assert clock.now == pytest.approx(1764470001.5, abs=0.03)


def test_request_stats_a_new_file_with_an_old_time_is_stale(proc):
    """Replaced after the signal, but generated before it (a dump already under way): not ours."""
    root = proc.engine(4242, "--stats-dump", "/tmp/s.json")
    clock = Clock()

    def kill(pid: int, sig: int) -> None:
        dump(root / "tmp" / "s.json", clock.now - 0.2, 4242)

    with pytest.raises(locate.LocateError, match=r"it was generated at 1764469999.8, before the signal"):
        ask(proc, 4242, kill, clock, timeout=0.2)


def test_request_stats_another_engines_dump_is_not_ours(proc):
    root = proc.engine(4242, "--stats-dump", "/tmp/s.json")
    clock = Clock()

    def kill(pid: int, sig: int) -> None:
        dump(root / "tmp" / "s.json", clock.now + 0.01, 777)

    with pytest.raises(locate.LocateError, match=r"written by pid 777, not by the engine signalled"):
        ask(proc, 4242, kill, clock, timeout=0.2)


def test_request_stats_in_a_pid_namespace(proc):
    """Seen from outside its pid namespace, the engine's stats call it by its inner pid."""
    root = proc.engine(4242, "--stats-dump", "/tmp/s.json", nspid=1)
    clock = Clock()
    doc, _ = ask(proc, 4242, lambda pid, sig: dump(root / "tmp" / "s.json", clock.now, 1), clock)
    assert doc["pid"] == 1


def test_request_stats_not_before_the_engine_handles_sigusr1(proc):
    proc.engine(4242, "--stats-dump", "/tmp/s.json", caught=False)
    sent = []
    with pytest.raises(locate.LocateError, match=r"is still starting \(it does not handle SIGUSR1 yet\)$"):
        ask(proc, 4242, lambda pid, sig: sent.append(pid), Clock())
    assert sent == []  # SIGUSR1's default action would have killed it


@pytest.mark.parametrize(
    ("error", "kind", "msg"),
    [
        (ProcessLookupError, locate.NoEngine, "engine pid 4242 (xdp-bfd.service) exited"),
        (PermissionError, locate.LocateError,
         "not allowed to signal engine pid 4242 (xdp-bfd.service) (run as root)"),
    ],
)  # fmt: skip
def test_request_stats_signal_errors(proc, error, kind, msg):
    proc.engine(4242, "--stats-dump", "/tmp/s.json")

    def kill(pid: int, sig: int) -> None:
        raise error

    with pytest.raises(kind) as e:
        ask(proc, 4242, kill, Clock())
    assert str(e.value) == msg
