"""``xdp-bfd show`` on the command line: dispatch, exit codes, one line on stderr.

The engine and its stats are faked at ``xdp_bfd.stats.locate``'s seams; a live engine is in
tests/integration/test_engine_show.py.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from xdp_bfd import cli
from xdp_bfd.cli import main, parse_args
from xdp_bfd.core.errors import EXIT_USAGE
from xdp_bfd.stats import locate, show

DOC = {
    "version": 1, "generated_at": 1764470000.5, "pid": 4242, "engine_version": "0.1.0", "kernel_tx": False,
    "xdp": None, "dplane": None, "deadman_us": 3000000, "sched": "other", "sessions_configured": 1,
    "sessions_up": 1, "counters": {"xdp_tx": 0, "xdp_pass": 0, "drop": {"ttl": 1}},
    "sessions": [{"local": "198.19.0.1", "peer": "198.19.0.2", "ifname": "eth1", "multihop": False,
                  "state": "up", "remote_state": "up", "diag": "none", "detect_time_us": 900000,
                  "rx_packets": 5, "kernel_tx_packets": 0, "user_tx_packets": 9, "last_rx_age_us": 2500,
                  "last_ktx_age_us": None, "flaps": 1, "up_since": 1764469990.5, "drops": {}}],
}  # fmt: skip
ENGINE = locate.EngineProc(
    4242, ("/venv/bin/python3", "/venv/bin/xdp-bfd", "--dplane", "1"), "xdp-bfd.service"
)
WHERE = locate.StatsLocation(
    "/run/xdp-bfd/stats.json", "command line", Path("/proc/4242/root/run/xdp-bfd/stats.json")
)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    """show_main as it runs, minus renaming the test process; the engine list is ``fake["engines"]``."""
    state: dict = {"engines": [ENGINE], "asked": []}
    monkeypatch.setattr(cli, "set_process_name", lambda name=b"": state.setdefault("name", name))
    monkeypatch.setattr(locate, "find_engines", lambda: state["engines"])
    monkeypatch.setattr(
        locate, "engine_by_pid", lambda pid: next(e for e in state["engines"] if e.pid == pid)
    )
    monkeypatch.setattr(locate, "stats_location", lambda engine: WHERE)

    def request_stats(engine: locate.EngineProc, where: locate.StatsLocation, *, timeout: float) -> tuple:
        state["asked"].append((engine.pid, where.path, timeout))
        if "error" in state:
            raise state["error"]
        return DOC, 0.21

    monkeypatch.setattr(locate, "request_stats", request_stats)
    before = signal.getsignal(signal.SIGUSR1)
    try:
        yield state
    finally:
        signal.signal(signal.SIGUSR1, before)


def test_show_prints_the_table(fake, capsys):
    assert main(["show"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.splitlines()[0] == (
        "engine pid 4242, xdp-bfd 0.1.0, stats /run/xdp-bfd/stats.json (command line), 0.21 s after SIGUSR1"
    )
    assert out.splitlines()[-1].split() == [
        "198.19.0.2", "198.19.0.1", "eth1", "single", "up", "up", "10s", "user", "2.5ms", "1", "-",
    ]  # fmt: skip
    assert fake["asked"] == [(4242, "/run/xdp-bfd/stats.json", 5.0)]
    assert fake["name"] == b"xdp-bfd-show"  # not reached by `pkill -x xdp-bfd`
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN


def test_show_json_and_counters(fake, capsys):
    assert main(["show", "--json", "--timeout", "2.5"]) == 0
    assert json.loads(capsys.readouterr().out) == DOC
    assert fake["asked"][-1][2] == 2.5
    assert main(["show", "counters", "--json"]) == 0
    counters = json.loads(capsys.readouterr().out)
    assert counters["drops"] == {"ttl": {"total": 1, "xdp": 0}}
    assert main(["show", "counters"]) == 0
    assert "drops by reason" in capsys.readouterr().out
    assert main(["show", "sessions"]) == 0


def test_show_pid_chooses(fake, capsys):
    other = locate.EngineProc(4343, ("xdp-bfd",))
    fake["engines"] = [ENGINE, other]
    assert main(["show"]) == 2
    assert capsys.readouterr().err == (
        "xdp-bfd show: 2 engines are running: pid 4242 (xdp-bfd.service), pid 4343; choose one with --pid\n"
    )
    assert main(["show", "--pid", "4343"]) == 0
    assert fake["asked"] == [(4343, "/run/xdp-bfd/stats.json", 5.0)]


def test_show_no_engine_exits_3(fake, capsys):
    fake["engines"] = []
    assert main(["show"]) == 3
    assert capsys.readouterr() == ("", "xdp-bfd show: no engine running (no process named xdp-bfd)\n")


def test_show_stale_exits_1(fake, capsys):
    fake["error"] = locate.LocateError("no fresh stats from engine pid 4242 …; refusing to show old data")
    assert main(["show"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "xdp-bfd show: no fresh stats from engine pid 4242 …; refusing to show old data\n"


@pytest.mark.parametrize(
    "argv",
    [["show", "--bogus"], ["show", "routes"], ["show", "--pid", "0"], ["show", "--timeout", "-1"],
     ["show", "--timeout", "soon"], ["show", "--timeout", "nan"], ["show", "--timeout", "inf"]],
)  # fmt: skip
def test_show_usage_errors_exit_2_in_one_line(argv, capsys):
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("xdp-bfd show: ") and err.count("\n") == 1


def test_the_engines_own_command_line_is_unchanged():
    # "show" only as the first word; the engine's options and positional form parse as before.
    a = parse_args(["--dplane", "50700", "--stats-dump", "/run/xdp-bfd/stats.json"])
    assert (a.dplane_mode, str(a.stats_dump)) == ("listen", "/run/xdp-bfd/stats.json")
    assert str(parse_args(["198.19.0.1", "198.19.0.2"]).stats_dump) == locate.DEFAULT_STATS_PATH
    assert main(["--dplane", "1", "show"]) == EXIT_USAGE  # not the subcommand: a stray positional


def test_show_counters_lists_the_sbfd_reflector_per_discriminator():
    doc = json.loads(json.dumps(DOC))
    doc["counters"] |= {"sbfd_tx": 7, "drop": {"sbfd_unknown": 2}, "xdp_drop": {"sbfd_unknown": 2}}
    doc["sbfd_reflector"] = {
        "port": 7784,
        "reflectors": [{"discr": 456, "state": "up", "min_rx_us": 3300, "rate_pps": 10000, "burst": 1000,
                        "answered": 7, "rate_limited": 1, "last_answer_age_us": 2500}],
    }  # fmt: skip
    c = show.counters(doc)
    assert c["fast_path"]["sbfd_tx"] == 7
    assert c["drops"]["sbfd_unknown"] == {"total": 2, "xdp": 2}
    assert c["sbfd_reflector"] == [
        {"discr": 456, "state": "up", "answered": 7, "rate_limited": 1, "last_answer_age_us": 2500}
    ]
    text = show.format_counters(doc)
    assert "S-BFD reflector (UDP 7784, answered in XDP)" in text
    assert ["456", "up", "7", "1", "2.5ms"] in [line.split() for line in text.splitlines()]
    assert show.counters(DOC)["sbfd_reflector"] is None  # no fast path, no reflector
