"""Replacing an engine that runs without ``--pin``: what the peer sees, with real bfdd on both sides.

Issue 20: one unpinned engine restart cost the peer six down events. d runs
the controlling bfdd and the engine (XDP fast path, kernel clock), p a plain
software bfdd; a capture on p's side and p's own counters say what the peer
saw. A plain stop-then-start leaves the sessions to bfdd for as long as the
new engine compiles (FRR 8.4's bfdd takes them back in software and flaps
them every ~3 s; 10.3's leaves them to nobody); ``--succeed PID`` compiles
first and stops the old engine only then (docs/frr.md, "Restarting the
engine").
"""

from __future__ import annotations

import collections
import itertools
import socket
import struct
import time
from pathlib import Path

import pytest
import test_dplane_frr
from test_dplane_frr import PORT, SH4, SH6, SLOW_MS, Rig, _counters

from harness.capture import WirePacket
from harness.wait import wait_until

# test_dplane_frr's two-namespace rig, under a name of this module's.
pair_rig = test_dplane_frr.rig
SPECS = (SH4, SH6)
# The control case's gap between the old engine's exit and the new one's start:
# longer than bfdd 8.4's software detection time (3 x its 1 s slow rate), as a
# compile on a loaded router can be (the issue saw 25 s).
SLOW_START_S = 10.0


class NotifySocket:
    """An sd_notify socket, as systemd's: each datagram kept with its sender's pid (SO_PASSCRED)."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(str(path))
        self.sock.setblocking(False)

    def drain(self) -> list[tuple[int, str]]:
        out = []
        for _ in range(1000):  # a few datagrams per engine; bounded all the same
            try:
                data, anc, _flags, _addr = self.sock.recvmsg(512, socket.CMSG_SPACE(12))
            except BlockingIOError:
                break
            pid = next(
                (struct.unpack("iII", d[:12])[0] for lvl, kind, d in anc if kind == socket.SCM_CREDENTIALS),
                0,
            )
            out.append((pid, data.decode().strip()))
        return out

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def notify(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """NOTIFY_SOCKET for every process the test starts (both engines, and bfdd, inherit it)."""
    sock = NotifySocket(tmp_path / "notify")
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify"))
    try:
        yield sock
    finally:
        sock.close()


def _up_pair(make, frr: str, trixie_root: str) -> tuple[Rig, list[str]]:
    if frr == "8.4":
        args = ["--dplane-connect", f"ipv4:127.0.0.1:{PORT}", "--kernel-tx", "veth-d"]
        r = make(args, ["--dplaneaddr", f"ipv4:127.0.0.1:{PORT}"], specs=SPECS, interval_ms=SLOW_MS)
    else:
        args = ["--dplane", str(PORT), "--kernel-tx", "veth-d"]
        r = make(
            args,
            ["--dplaneaddr", f"ipv4c:127.0.0.1:{PORT}"],
            root=trixie_root,
            specs=SPECS,
            interval_ms=SLOW_MS,
        )
        assert r.bfdd.version[:2] == (10, 3)
    for s in SPECS:
        r.bfdd.configure(*r.d_lines(s))
    r.wait_up(*SPECS)
    for s in SPECS:
        wait_until(lambda s=s: r.in_engine(s)["kernel_tx_active"], timeout=10, what=f"{s.name} offloaded")
        assert _counters(r.peer, r.ours(s), False)["session-down"] == 0
    return r, args


def _wait_served_again(r: Rig, t0: float, mark: float) -> tuple[list[WirePacket], float]:
    for s in SPECS:
        wait_until(
            lambda s=s: (e := r.in_engine(s)) is not None and e["state"] == "up" and e["kernel_tx_active"],
            timeout=60,
            what=f"{s.name} Up and offloaded in the new engine",
        )
        wait_until(lambda s=s: r.in_p(s).get("status") == "up", timeout=10, what=f"{s.name} Up in p")
    back = time.monotonic() - t0
    # Two seconds of steady state after it, on the wire.
    wait_until(lambda: r.cap.snapshot()[-1].ts > mark + back + 2.0, timeout=10, what="2 s of capture")
    return r.cap.stop(), back


def _runs(pkts: list[WirePacket], mark: float) -> str:
    """d's packets after ``mark`` as runs of one state: 'admin_down@+0.01s x1, down@+0.80s x3, …'."""
    runs: list[list] = []
    for x in pkts:
        if not runs or runs[-1][0] != x.state:
            runs.append([x.state, x.ts - mark, 0])
        runs[-1][2] += 1
    return ", ".join(f"{st}@+{t:.2f}s x{n}" for st, t, n in runs)


@pytest.mark.timing(stall_ms=100, userspace=True)  # a 3x50 ms flap: detection time less one interval
@pytest.mark.parametrize("frr", ["8.4", "10.3"])
def test_successor_compiles_before_the_old_engine_stops(pair_rig, engine_factory, trixie_root, frr, notify):
    """``--succeed PID``: one down event per session at the peer, however long the compile."""
    r, args = _up_pair(pair_rig, frr, trixie_root)
    old = r.engine
    mark = r.cap.snapshot()[-1].ts
    t0 = time.monotonic()
    r.engine = engine_factory(r.d, [*args, "--succeed", str(old.pid)])
    r.engine.wait_log(f"succeed: engine {old.pid} stopped", timeout=60)
    # Stepped down for a successor: exit 75, as after a --pin handover.
    assert old.wait_exit(timeout=5) == 75, old.log()
    pkts, back = _wait_served_again(r, t0, mark)
    said = notify.drain()
    # As systemd would hear it: the old engine ready, the successor's MAINPID= and
    # READY=1, and no STOPPING=1 from the old one (systemd 257 stops the unit on it).
    by_old = [m for pid, m in said if pid == old.pid]
    by_new = [m for pid, m in said if pid == r.engine.pid]
    assert by_old == ["READY=1"], said
    assert by_new[:1] == [f"MAINPID={r.engine.pid}"] and "READY=1" in by_new[-1], said
    assert "succeed: SIGUSR2: a successor takes this engine's place" in old.log()
    print(f"\nFRR {frr}: successor serving {back:.1f} s after it started")
    for s in SPECS:
        ours = [x for x in r.from_d(s, pkts) if x.ts > mark]
        admin = [x for x in ours if x.state == "admin_down"]
        c = _counters(r.peer, r.ours(s), False)
        print(f"  {s.name}: {_runs(ours, mark)}; peer session-down {c['session-down']} up {c['session-up']}")
        assert len(admin) == 1, f"{len(admin)} AdminDown packets, one expected (the old engine's stop)"
        # The old engine served through the successor's compile: Up packets at the
        # session's rate from the start of the successor until its AdminDown ...
        before = [x for x in ours if x.ts < admin[0].ts]
        assert {x.state for x in before} == {"up"}, _runs(ours, mark)
        ts = [mark, *(x.ts for x in before)]
        gaps = [b - a for a, b in itertools.pairwise(ts)]
        assert before and max(gaps) < 3 * SLOW_MS / 1e3, f"a gap of {max(gaps) * 1e3:.0f} ms before the stop"
        # ... which came only after the compile (seconds, not a signal's round trip).
        assert admin[0].ts - mark > 1.0, f"the old engine stopped {admin[0].ts - mark:.2f} s in"
        # The peer counted exactly the one down event the AdminDown is, and Up again.
        assert c["session-down"] == 1 and c["session-up"] == 2, c
        # Steady state: only Up packets in the last two seconds of the capture.
        tail = [x for x in ours if x.ts > pkts[-1].ts - 2.0]
        assert tail and {x.state for x in tail} == {"up"}, _runs(ours, mark)


@pytest.mark.timing(stall_ms=100, userspace=True)
def test_a_slow_plain_restart_flaps_the_peer_under_frr84(pair_rig, engine_factory, trixie_root):
    """The control: stop, SLOW_START_S with no engine, start. The measure above must see this fail.

    bfdd 8.4 takes the sessions back in software, with the slow 1 s timers
    they had before the hand-off, and does not hear the peer: the peer goes
    Init on each of its Down packets and times out again — more than one down
    event per session, where ``--succeed`` costs one.
    """
    r, args = _up_pair(pair_rig, "8.4", trixie_root)
    mark = r.cap.snapshot()[-1].ts
    t0 = time.monotonic()
    r.engine.stop()
    time.sleep(SLOW_START_S)  # the test input: a compile this long
    r.engine = engine_factory(r.d, args)
    pkts, back = _wait_served_again(r, t0, mark)
    print(f"\nFRR 8.4, plain restart, {SLOW_START_S:.0f} s between stop and start: back after {back:.1f} s")
    for s in SPECS:
        ours = [x for x in r.from_d(s, pkts) if x.ts > mark]
        c = _counters(r.peer, r.ours(s), False)
        states = collections.Counter(x.state for x in ours)
        print(f"  {s.name}: {_runs(ours, mark)}; peer session-down {c['session-down']} up {c['session-up']}")
        assert states["down"] > 0, "bfdd's software fallback sent no Down packet"
        assert c["session-down"] > 1, c
