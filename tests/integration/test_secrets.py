"""Authentication secrets stay in the sessions file: never in the stats, the metrics or the log.

Two real engines, one per namespace, authenticate each other with keyed SHA1
(the secret is never on the wire, only digests made with it). The engine under
test runs with ``--log-level debug`` and ``--metrics``, goes Up, is reloaded
with a changed file, with a broken file that quotes nothing but the field, and
with a file readable by others (refused; the running sessions stay), and is
stopped. Then the secret, in every spelling a leak would take (text, hex,
Python's bytes repr), is looked for in the stats file it wrote, a metrics
scrape, its whole log and its command line.
"""

from __future__ import annotations

import signal
from pathlib import Path

from test_engine_metrics import _scrape

from harness.engine import XDP_BFD
from harness.wait import wait_until

SECRET = "Zq7-s3cret-9x!"  # 14 bytes: fits SHA1 and MD5 alike
METRICS_PORT = 9481
MARKS = [SECRET, SECRET.encode().hex(), repr(SECRET.encode()), SECRET[:8]]


def _sessions(path: Path, local, peer, ifname: str, *, min_tx_ms: int = 50, mode: int = 0o600) -> Path:
    path.write_text(
        f"- {{local: '{local}', peer: '{peer}', interface: {ifname}, min_tx_ms: {min_tx_ms},"
        f" min_rx_ms: 50, auth: {{type: keyed-sha1, key_id: 3, secret: '{SECRET}'}}}}\n"
    )
    path.chmod(mode)
    return path


def _leaks(where: str, text: str) -> list[str]:
    return [f"{where} holds {m!r}" for m in MARKS if m in text]


def test_the_secret_reaches_no_stats_metrics_or_log(topo, engine_factory, tmp_path):
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    fd = _sessions(tmp_path / "d.yml", a.ip4, b.ip4, "veth-d")
    fp = _sessions(tmp_path / "p.yml", b.ip4, a.ip4, "veth-p")
    ed = engine_factory(
        d, ["--sessions", str(fd), "--metrics", f"127.0.0.1:{METRICS_PORT}", "--log-level", "debug"]
    )
    ep = engine_factory(p, ["--sessions", str(fp)])
    for e in (ed, ep):
        e.wait_log("serving 1 sessions", timeout=10)

    def up() -> dict | None:
        s = ed.session(str(b.ip4))
        return s if s["state"] == "up" and s["remote_state"] == "up" else None

    first = wait_until(up, timeout=15, interval=0.1, what="the authenticated session Up")
    assert first["drops"] == {}, first

    # Reloads: a changed timer (applied), a bad field next to the secret, a file others may read.
    _sessions(fd, a.ip4, b.ip4, "veth-d", min_tx_ms=60)
    ed.signal(signal.SIGHUP)
    ed.wait_log(f"reload: {fd} applied (1 sessions)")
    fd.write_text(fd.read_text().replace("min_rx_ms: 50", "min_rx_ms: 50, detect_mult: 0"))
    ed.signal(signal.SIGHUP)
    ed.wait_log("detect_mult: expected an integer 1-255, got 0; keeping the running sessions unchanged")
    _sessions(fd, a.ip4, b.ip4, "veth-d", mode=0o644)
    ed.signal(signal.SIGHUP)
    refused = ed.wait_log("holds authentication secrets but is readable by others (mode 0644)")
    assert refused.endswith("chmod 600 it; keeping the running sessions unchanged"), refused

    doc = ed.stats()
    again = next(s for s in doc["sessions"] if s["peer"] == str(b.ip4))
    assert (again["state"], again["flaps"], again["local_discr"]) == ("up", 0, first["local_discr"]), again
    stats_text = ed.stats_path.read_text()
    status, metrics = _scrape(d, METRICS_PORT)
    assert status == "HTTP/1.0 200 OK", status
    assert "xdp_bfd_session_up" in metrics and str(b.ip4) in metrics, metrics[:500]
    cmdline = Path(f"/proc/{ed.pid}/cmdline").read_bytes().decode(errors="replace")

    assert ed.stop() == 0
    log = ed.log()
    assert "reload: " in log and "metrics: serving on" in log, log
    leaks = [
        *_leaks("the stats file", stats_text),
        *_leaks("the metrics scrape", metrics),
        *_leaks("the engine's log", log),
        *_leaks("the command line", cmdline),
    ]
    assert not leaks, leaks
    # The witness that the marks would be found: the file the engine read holds them.
    assert SECRET in fd.read_text()


def test_a_sessions_file_with_secrets_readable_by_others_is_refused_at_start(topo, tmp_path):
    ns = topo.namespace("e")
    f = _sessions(tmp_path / "s.yml", "198.19.0.1", "198.19.0.2", "lo", mode=0o640)
    out = ns.run([XDP_BFD, "--sessions", str(f), "--stats-dump", str(tmp_path / "st.json")], check=False)
    assert out.returncode == 1, out
    lines = [line for line in out.stderr.splitlines() if line]
    assert lines == [
        f"xdp-bfd: {f}: holds authentication secrets but is readable by others (mode 0640); chmod 600 it"
    ], out.stderr
    assert not (tmp_path / "st.json").exists()


def test_sighup_keeps_the_sessions_while_the_file_is_readable_by_others(topo, engine_factory, tmp_path):
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")  # nobody answers in p: the sessions stay Down
    f = _sessions(tmp_path / "s.yml", a.ip4, b.ip4, "veth-d")
    eng = engine_factory(d, ["--sessions", str(f)])
    eng.wait_log("serving 1 sessions", timeout=10)
    before = eng.stats()["sessions"]
    assert [s["peer"] for s in before] == [str(b.ip4)]

    # A second session is added, but the file is now readable by others: nothing changes.
    f.write_text(f.read_text() + f"- {{local: '{a.ip6}', peer: '{b.ip6}', interface: veth-d}}\n")
    f.chmod(0o644)
    eng.signal(signal.SIGHUP)
    line = eng.wait_log("keeping the running sessions unchanged")
    assert line.endswith(
        f"{f}: holds authentication secrets but is readable by others (mode 0644); chmod 600 it;"
        " keeping the running sessions unchanged"
    ), line
    after = eng.stats()["sessions"]
    assert [(s["peer"], s["local_discr"]) for s in after] == [(s["peer"], s["local_discr"]) for s in before]

    f.chmod(0o600)
    eng.signal(signal.SIGHUP)
    eng.wait_log(f"reload: {f} applied (2 sessions)")
    assert sorted(s["peer"] for s in eng.stats()["sessions"]) == sorted([str(b.ip4), str(b.ip6)])
