"""module_utils/locate.py: the modules' copy of the engine's discovery rules (xdp_bfd/locate.py).

The modules cannot import the engine package, so the rules live twice; these tests hold the
copy to the engine's: same answers for the same command lines and engine.conf texts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.xdp_bfd.fastpath.plugins.module_utils import locate

from xdp_bfd.stats import locate as engine_locate

REPO = Path(__file__).resolve().parents[4]
VENV = "/opt/xdp-bfd/venv/bin"

ARGVS = [
    [f"{VENV}/python3", f"{VENV}/xdp-bfd", "--dplane", "50700", "--stats-dump", "/run/xdp-bfd/stats.json"],
    [f"{VENV}/xdp-bfd", "--stats-dump=/run/s.json"],
    ["python3", "-m", "xdp_bfd.cli", "--stats", "/a.json"],
    [f"{VENV}/xdp-bfd", "--st=/b.json", "--stats-dump", "/c.json"],
    [f"{VENV}/xdp-bfd", "--dplane", "1", "--", "--stats-dump", "/no.json"],
    [f"{VENV}/xdp-bfd", "--s", "/no.json"],
    [f"{VENV}/xdp-bfd", "--dplane", "1"],
    [f"{VENV}/xdp-bfd", "--stats-dump"],
    [f"{VENV}/xdp-bfd", "show"],
    ["launcher", "--stats-dump", "/d.json"],
]

CONFS = [
    (REPO / "files" / "engine.conf").read_text(),
    "XDP_BFD_ARGS='--dplane 1 --stats-dump=/run/b.json'\n",
    'XDP_BFD_ARGS="--dplane 1 \\\n  --stats-dump /run/d.json"\n',
    '# XDP_BFD_ARGS="--stats-dump /no.json"\nXDP_BFD_SCHED="--stats-dump /run/e.json"\n',
    'XDP_BFD_ARGS="--stats-dump /run/\\"q\\".json"\n',
    "",
]


@pytest.mark.parametrize("argv", ARGVS)
def test_command_lines_read_as_the_engine_reads_them(argv):
    args = locate.engine_args(argv)
    assert args == engine_locate.engine_args(argv)
    assert locate.stats_path_from_args(args) == engine_locate.stats_path_from_args(args)


@pytest.mark.parametrize("text", CONFS)
def test_engine_conf_read_as_the_engine_reads_it(text):
    assert locate.parse_env_file(text) == engine_locate.parse_env_file(text)
    assert locate.stats_path_from_conf(text) == engine_locate.stats_path_from_conf(text)


def test_same_default_as_the_engine():
    assert locate.ENGINE_DEFAULT_STATS_PATH == engine_locate.DEFAULT_STATS_PATH
    assert str(engine_locate.ENGINE_CONF) == locate.ENGINE_CONF


def test_the_shipped_engine_conf():
    assert locate.stats_path_from_conf(CONFS[0]) == "/run/xdp-bfd/stats.json"


def fake_engine(proc: Path, pid: int, argv: list[str], comm: str = "xdp-bfd", state: str = "S") -> Path:
    d = proc / str(pid)
    d.mkdir(parents=True)
    (d / "comm").write_text(comm + "\n")
    (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
    (d / "stat").write_text(f"{pid} ({comm}) {state} 1\n")
    root = proc.parent / f"root-{pid}"
    root.mkdir()
    (d / "root").symlink_to(root)
    (d / "cwd").symlink_to("/srv")
    return root


def test_discover(tmp_path):
    proc = tmp_path / "proc"
    fake_engine(proc, 4242, [f"{VENV}/xdp-bfd", "--stats-dump", "/tmp/s.json"])
    fake_engine(proc, 4343, [f"{VENV}/xdp-bfd", "show"])
    fake_engine(proc, 4444, [f"{VENV}/xdp-bfd", "--dplane", "1"], state="Z")
    fake_engine(proc, 4545, ["/bin/sh"], comm="sh")
    conf = str(tmp_path / "engine.conf")
    assert locate.find_engines(proc=str(proc)) == [4242]
    found = locate.discover([4242], proc=str(proc), conf=conf)
    assert found == {
        "path": "/tmp/s.json", "source": "cmdline", "error": None,
        "read_path": str(proc / "4242" / "root" / "tmp" / "s.json"),
    }  # fmt: skip
    fake_engine(proc, 4646, [f"{VENV}/xdp-bfd", "--stats-dump", "rel.json"])
    assert locate.discover([4646], proc=str(proc), conf=conf)["path"] == "/srv/rel.json"
    assert locate.discover([4242, 4646], proc=str(proc), conf=conf) == {
        "path": None, "read_path": None, "source": None,
        "error": "2 engines named xdp-bfd are running (pids 4242, 4646): give the stats path or a pid file",
    }  # fmt: skip
    assert locate.discover([], proc=str(proc), conf=conf)["source"] == "default"
    Path(conf).write_text('XDP_BFD_ARGS="--stats-dump /run/x/s.json"\n')
    assert locate.discover([], proc=str(proc), conf=conf) == {
        "path": "/run/x/s.json", "read_path": "/run/x/s.json", "source": "engine.conf", "error": None,
    }  # fmt: skip
    (proc / "4242" / "cmdline").write_bytes(b"")  # unreadable command line: what the unit passes
    assert locate.discover([4242], proc=str(proc), conf=conf)["source"] == "engine.conf"
    assert locate.engine_pids(4242, proc=str(proc)) == [4242]
    assert locate.engine_pids(9999, proc=str(proc)) == []
