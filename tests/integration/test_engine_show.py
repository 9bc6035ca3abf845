"""``xdp-bfd show`` and ``offload_info`` find a LIVE engine's stats by themselves.

Neither is told the stats path: the engine runs with a non-default ``--stats-dump``
under the test's directory (found from its command line), inside a private pid
namespace (found as the only engine there), and with the engine's default path
in a private /tmp of its own (the unit's PrivateTmp, emulated with ``unshare -m``
and a tmpfs: only ``/proc/PID/root`` reaches it). Other engines may run on the
machine at the same time (other test runs), so the cases outside a pid namespace
name their engine with ``--pid`` / ``pidfile`` and never signal anyone else's.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import ansible
from harness.engine import XDP_BFD, EngineProcess
from harness.frr import bfd_peer_block
from harness.wait import wait_until

INTERVAL_MS = 10
HOST_DEFAULT_STATS = Path("/tmp/bfd_tx_stats.json")  # the engine's default (stats.locate.DEFAULT_STATS_PATH)


def same_dump(doc: dict, on_disk: dict) -> bool:
    """``doc`` came from that file: same engine, same keys. The file may have been rewritten
    since by another run's ``pkill -USR1 -x xdp-bfd``, which reaches every engine on the machine."""
    same = (doc["pid"], set(doc)) == (on_disk["pid"], set(on_disk))
    return same and doc["generated_at"] <= on_disk["generated_at"]


def show(*args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*prefix, XDP_BFD, "show", *args], capture_output=True, text=True, timeout=60, check=False
    )


def row_of(table: str, peer: str) -> dict[str, str]:
    """The table row for ``peer`` as {column: value} (columns are two spaces apart)."""
    lines = table.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("PEER "))
    header = lines[head]
    starts = [header.index(col) for col in header.split("  ") if col]
    names = [c.strip() for c in header.split("  ") if c]
    for line in lines[head + 1 :]:
        if line.split()[:1] == [peer]:
            cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
            return dict(zip(names, cells, strict=True))
    raise AssertionError(f"no row for {peer} in:\n{table}")


@pytest.fixture
def kernel_rig(topo, frr_factory, engine_factory, tmp_path):
    """Engine in d (XDP generic on veth-d, stats under tmp_path) Up against FRR 8.4 in p at 3x10 ms."""
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
    stats = tmp_path / "show-stats" / "engine.json"  # not the default, not where anyone else looks
    engine = engine_factory(
        d,
        [
            "--sessions",
            str(sessions),
            "--kernel-tx",
            "veth-d",
            "--xdp-mode",
            "generic",
            "--stats-dump",
            str(stats),
        ],
    )
    engine.stats_path = stats
    engine.wait_log("bfd: serving", timeout=30)
    wait_until(lambda: (frr.peer(str(a.ip4)) or {}).get("status") == "up", timeout=20, what="FRR up")
    wait_until(
        lambda: engine.session(str(b.ip4)).get("kernel_tx_active"), timeout=20, what="kernel TX active"
    )
    return {"a": a, "b": b, "engine": engine, "stats": stats}


def test_show_sessions_json_and_counters_from_the_command_line(kernel_rig):
    b, engine, stats = kernel_rig["b"], kernel_rig["engine"], kernel_rig["stats"]
    pid = str(engine.pid)
    before = engine.stats_identity()

    res = show("--pid", pid)
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    assert engine.stats_identity() != before, "show did not make the engine write its stats"
    lines = res.stdout.splitlines()
    assert lines[0].startswith(f"engine pid {engine.pid}, xdp-bfd ")
    assert f"stats {stats} (command line)" in lines[0]
    assert "fast path: XDP on veth-d (generic)" in res.stdout
    assert "sessions: 1 configured, 1 up" in res.stdout
    row = row_of(res.stdout, str(b.ip4))
    assert (row["IFACE"], row["HOP"], row["STATE"], row["REMOTE"], row["TX"]) == (
        "veth-d", "single", "up", "up", "kernel",
    )  # fmt: skip
    assert row["FLAPS"] == "0" and row["DIAG"] == "-"
    assert row["UPTIME"].endswith("s") and row["LAST RX"].endswith(("us", "ms"))

    res = show("--json", "--pid", pid)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert same_dump(doc, json.loads(stats.read_text())), "--json is not the document the engine wrote"
    assert (doc["pid"], doc["kernel_tx"], doc["sessions_up"]) == (engine.pid, True, 1)

    res = show("counters", "--pid", pid)
    assert res.returncode == 0, res.stderr
    assert "fast path verdicts" in res.stdout and "drops by reason" in res.stdout
    verdicts = {w[0]: w[1] for w in map(str.split, res.stdout.splitlines()) if len(w) == 2}
    # XDP judged the peer's packets: each was answered, or skipped as early because the
    # transmit clock had just sent (every one of them can be, the clock's phase decides).
    assert int(verdicts["xdp_tx"]) + int(verdicts["tx_early"]) > 0, res.stdout
    counters = json.loads(show("counters", "--json", "--pid", pid).stdout)
    assert counters["fast_path"]["xdp_tx"] + counters["fast_path"]["tx_early"] > 0
    assert set(counters["drops"]) >= {"ttl", "version", "no_session"}
    (s,) = counters["sessions"]
    assert (s["peer"], s["ifname"]) == (str(b.ip4), "veth-d") and s["kernel_tx_packets"] > 0


def test_offload_info_without_a_path_reads_the_engines_command_line(kernel_rig, tmp_path, ansible_env):
    engine, stats = kernel_rig["engine"], kernel_rig["stats"]
    pidfile = tmp_path / "xdp-bfd.pid"
    pidfile.write_text(f"{engine.pid}\n")
    res = ansible.run_module(ansible_env, "offload_info", {"pidfile": str(pidfile), "timeout": 5}, check=True)
    assert not res.get("failed"), res
    assert res["reasons"] == [] and res["offload_live"] is True, res
    assert (res["stats_path"], res["stats_path_from"]) == (str(stats), "cmdline")
    assert res["stats"]["pid"] == engine.pid


def test_show_without_pid_takes_the_only_engine_of_its_pid_namespace(topo, engine_factory, tmp_path):
    """In a pid namespace of its own the engine is the only one: plain ``xdp-bfd show`` finds it.
    From outside, ``--pid HOSTPID`` finds it too, though it calls itself pid 1 in its stats."""
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    stats = tmp_path / "pidns" / "stats.json"
    runner = engine_factory(
        d,
        [str(a.ip4), str(b.ip4), "--stats-dump", str(stats)],
        prefix=["unshare", "--pid", "--fork", "--mount-proc"],
    )
    runner.wait_log("bfd: serving", timeout=30)
    engine_pid = wait_until(lambda: _only_child(runner.pid), timeout=5, what="the engine under unshare")
    try:
        res = show(prefix=("nsenter", "--target", str(engine_pid), "--pid", "--mount"))
        assert res.returncode == 0, res.stderr
        assert res.stdout.startswith("engine pid 1, xdp-bfd "), res.stdout
        assert f"stats {stats} (command line)" in res.stdout
        row = row_of(res.stdout, str(b.ip4))
        assert (row["STATE"], row["TX"], row["LAST RX"]) == ("down", "user", "-")

        res = show("--json", "--pid", str(engine_pid))
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["pid"] == 1
    finally:
        os.kill(engine_pid, signal.SIGTERM)  # unshare --fork waits for it, then exits
    assert runner.wait_exit(timeout=10) == 0


@pytest.fixture
def private_tmp_engine(topo, tmp_path) -> Iterator[tuple[EngineProcess, str]]:
    """A software engine with the engine's default stats path, /tmp/bfd_tx_stats.json, in a
    private tmpfs /tmp (what PrivateTmp=yes gives the unit); and its peer's address."""
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    tag = uuid.uuid4().hex[:8]
    hold = Path(f"/run/xbt-{os.getpid()}-oldtmp-{tag}")
    engine = DefaultPathEngine(d, [str(a.ip4), str(b.ip4)], tmp_path, _private_tmp(tag, hold)).start()
    try:
        engine.wait_log("bfd: serving", timeout=30)
        yield engine, str(b.ip4)
    finally:
        engine.cleanup()
        hold.rmdir()


def _private_tmp(tag: str, hold: Path) -> list[str]:
    """``unshare -m`` with a tmpfs on /tmp, as PrivateTmp=yes gives the unit.

    A checkout under /tmp (CI clones there) would vanish with the host's /tmp,
    the engine's own program with it; the unit's lives under /opt. So the
    checkout's top directory is bound back in from a hold on the old /tmp.
    """
    script = f"mount -t tmpfs xdp-bfd-show-{tag} /tmp"
    checkout = Path(XDP_BFD).resolve()
    hold.mkdir()
    if checkout.is_relative_to("/tmp"):
        top = Path("/tmp") / checkout.relative_to("/tmp").parts[0]
        script = (
            f"mount --bind /tmp {hold} && {script} && mkdir -p {top} && "
            f"mount --bind {hold / top.relative_to('/tmp')} {top}"
        )
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", f'{script} && exec "$0" "$@"']


class DefaultPathEngine(EngineProcess):
    """EngineProcess without the ``--stats-dump`` it adds: the engine's own default applies."""

    def start(self) -> DefaultPathEngine:
        self._log = self.log_path.open("w")
        self.proc = self.ns.popen(
            [*self.prefix, XDP_BFD, *self.args], stdout=self._log, stderr=subprocess.STDOUT
        )
        return self


def _host_default_pid() -> int | None:
    """Who wrote the host's /tmp/bfd_tx_stats.json (another engine on the machine may have)."""
    with contextlib.suppress(FileNotFoundError, ValueError):
        return json.loads(HOST_DEFAULT_STATS.read_text()).get("pid")
    return None


def test_show_reads_the_engines_private_tmp(private_tmp_engine, tmp_path, ansible_env):
    engine, peer = private_tmp_engine
    res = show("--json", "--pid", str(engine.pid))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["pid"] == engine.pid and doc["sessions"][0]["peer"] == peer
    private = Path(f"/proc/{engine.pid}/root") / HOST_DEFAULT_STATS.relative_to("/")
    assert same_dump(doc, json.loads(private.read_text()))
    assert _host_default_pid() != engine.pid, "the dump landed in the host's /tmp, not the engine's own"

    res = show("--pid", str(engine.pid))
    assert res.returncode == 0, res.stderr
    assert f"stats {HOST_DEFAULT_STATS} (default)" in res.stdout

    pidfile = tmp_path / "xdp-bfd.pid"
    pidfile.write_text(f"{engine.pid}\n")
    res = ansible.run_module(ansible_env, "offload_info", {"pidfile": str(pidfile), "timeout": 5}, check=True)
    assert not res.get("failed"), res
    assert res["signaled"] is True and res["stats"]["pid"] == engine.pid, res
    assert (res["stats_path"], res["stats_path_from"]) == (str(HOST_DEFAULT_STATS), "default")
    assert "kernel_tx is not true: the XDP fast path is not attached" in res["reasons"]


def test_show_refuses_a_stale_file_and_a_missing_engine(private_tmp_engine):
    engine, _ = private_tmp_engine
    assert show("--pid", str(engine.pid)).returncode == 0  # a dump exists now
    engine.signal(signal.SIGSTOP)  # alive, but writes nothing: the file there is old
    try:
        res = show("--pid", str(engine.pid), "--timeout", "0.5")
    finally:
        engine.signal(signal.SIGCONT)
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert res.stdout == ""
    assert res.stderr.startswith(f"xdp-bfd show: no fresh stats from engine pid {engine.pid}")
    assert "within 0.5 s of SIGUSR1" in res.stderr and "refusing to show old data" in res.stderr
    assert len(res.stderr.splitlines()) == 1

    engine.stop()
    res = show("--pid", str(engine.pid))
    assert res.returncode == 3, (res.stdout, res.stderr)
    assert res.stderr == f"xdp-bfd show: no process with pid {engine.pid}\n"


def _only_child(pid: int) -> int | None:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except FileNotFoundError:
        return None
    return int(children[0]) if len(children) == 1 else None
