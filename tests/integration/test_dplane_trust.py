"""Nobody but bfdd drives the engine: a local stranger on the bfddp port is refused, in both directions.

Namespace d runs the controlling bfdd and the engine; p a software bfdd as the
peer (test_dplane_frr's rig). The stranger is a real process running as
``nobody`` (setpriv) in d: as a client of the listening engine (FRR 10.3,
``ipv4c:``) it connects and sends a registration; as a listener on bfdd's
port (FRR 8.4, engine ``--dplane-connect``) it waits for the engine and
records every byte it receives. Each time: refused in one log line, counted
in the stats' ``dplane.refused``, bfdd undisturbed, its sessions Up on the
peer (whose own session-down counter must not move), held sessions
surviving a bfdd restart with the stranger in the middle of it.
"""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
import time

import pytest
from test_dplane_frr import (
    PORT,
    SH4,
    SH6,
    Rig,
    _counters,
    rig,  # noqa: F401  (the fixture, shared with the dplane tests)
)

from harness.frr import _chroot_ids
from harness.netns import Namespace
from harness.wait import wait_until
from xdp_bfd.wire.bfddp import AddSession, SessionFlags, encode_message

# 3x50 ms: the claims are about who may connect, not about scheduling.
INTERVAL_MS = 50
SPECS = (SH4, SH6)
NOBODY = 65534
STRANGER_MAX_S = 30  # every stranger exits by itself within this

# The stranger, as nobody: "connect N HEX" connects N times, sends HEX and reads until the end;
# "listen" listens on the port until its stdin closes, reading whatever arrives. Prints a JSON tally.
STRANGER = r"""
import json, select, socket, sys, time
mode, port, deadline = sys.argv[1], int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
out = {"connections": 0, "bytes": 0, "closed": 0}
if mode == "listen":
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("127.0.0.1", port))
    l.listen(8)
    print("listening", flush=True)
    socks = []
    while time.monotonic() < deadline:
        ready, _, _ = select.select([l, sys.stdin, *socks], [], [], 0.1)
        if sys.stdin in ready:
            break
        for s in ready:
            if s is l:
                socks.append(l.accept()[0])
                out["connections"] += 1
                continue
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            out["bytes"] += len(data)
            if not data:
                out["closed"] += 1
                socks.remove(s)
                s.close()
else:
    for _ in range(int(sys.argv[4])):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        out["connections"] += 1
        try:
            s.sendall(bytes.fromhex(sys.argv[5]))
            while time.monotonic() < deadline:
                data = s.recv(65536)
                if not data:
                    break
                out["bytes"] += len(data)
        except OSError:
            pass  # reset: closed with our bytes unread
        out["closed"] += 1
        s.close()
print(json.dumps(out), flush=True)
"""


class Stranger:
    """``nobody`` in ``ns`` running :data:`STRANGER`; :meth:`result` stops it and reads its tally."""

    def __init__(self, ns: Namespace, *args: str) -> None:
        argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "/usr/bin/python3"]
        self.proc = ns.popen(
            [*argv, "-c", STRANGER, args[0], str(PORT), str(STRANGER_MAX_S), *args[1:]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.pid = self.proc.pid  # ip netns exec and setpriv exec: the same process runs python3

    def wait_listening(self) -> None:
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "listening", "the stranger could not listen"

    def result(self) -> dict:
        """Close its stdin (a listener stops), wait for it, and read its tally."""
        try:
            out, _ = self.proc.communicate(timeout=STRANGER_MAX_S + 5)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return json.loads(out.strip().splitlines()[-1])


def _refusal(pid: int) -> str:
    return (
        f"dplane: refused a connection from uid {NOBODY} (pid {pid}, python3): not an allowed dataplane user"
    )


def _stranger_add(r: Rig) -> str:
    """What the stranger sends: a registration of a session of its own (hex)."""
    add = AddSession(
        flags=SessionFlags(0), src=r.a.ip4, dst=ipaddress.IPv4Address("198.19.77.9"), lid=0x51, min_tx=50_000,
        min_rx=50_000, min_echo_tx=0, min_echo_rx=0, ttl=255, detect_mult=3, ifname="veth-d",
    )  # fmt: skip
    return encode_message(add).hex()


def _up(r: Rig) -> dict:
    for s in SPECS:
        r.bfdd.configure(*r.d_lines(s))
    r.wait_up(*SPECS)
    downs = {s: _counters(r.peer, r.ours(s), False) for s in SPECS}
    for s, c in downs.items():
        assert c["session-down"] == 0 and c["session-up"] == 1, (s.name, c)
    return {s: r.in_p(s)["remote-id"] for s in SPECS}


def _adopted_again(r: Rig) -> None:
    """bfdd restarted: both held sessions adopted, Up in d again."""
    wait_until(
        lambda: r.engine.log().count("dplane: adopted held session") == len(SPECS),
        timeout=15,
        what="bfdd back, both sessions adopted",
    )
    for x in SPECS:
        wait_until(lambda x=x: r.in_d(x).get("status") == "up", timeout=10, what=f"{x.name} up in d again")


def _untouched(r: Rig, discr: dict) -> None:
    """The peer saw nothing: each session Up, with the same discriminator, never down."""
    for s in SPECS:
        c = _counters(r.peer, r.ours(s), False)
        assert c["session-down"] == 0 and c["session-up"] == 1, (s.name, c)
        assert r.in_p(s)["status"] == "up" and r.in_p(s)["remote-id"] == discr[s], r.in_p(s)
        assert r.in_d(s)["status"] == "up", r.in_d(s)
    sessions = r.engine.stats()["sessions"]
    assert sorted(x["peer"] for x in sessions) == sorted(r.theirs(s) for s in SPECS), sessions


@pytest.mark.timing(stall_ms=100, userspace=True)  # a 3x50 ms flap: detection time less one interval
def test_frr103_a_stranger_cannot_connect_while_bfdd_is_connected_or_away(rig, trixie_root):  # noqa: F811
    """Listening engine, FRR 10.3 connecting: a nobody client is refused, with bfdd there and while held."""
    # The trixie root has its own user database: its frr is not the host's (on this host uid 997 may
    # well be somebody else). The default allow list (frr, root) still lets it in, by the name its own
    # root-owned root gives it (dplane/peer.py name_in_own_root).
    trixie_frr = _chroot_ids(trixie_root)[0]
    r = rig(
        ["--dplane", str(PORT), "--dp-hold", "20"],
        ["--dplaneaddr", f"ipv4c:127.0.0.1:{PORT}"],
        root=trixie_root,
        specs=SPECS,
        interval_ms=INTERVAL_MS,
    )
    assert r.bfdd.version[:2] == (10, 3)
    connected = rf"^dplane: bfdd connected as frr \(uid {trixie_frr} in its own root, pid \d+\)$"
    assert re.search(connected, r.engine.log(), re.M), r.engine.log()
    discr = _up(r)

    # bfdd connected: the stranger is refused before the one-bfdd rule even looks at it.
    s = Stranger(r.d, "connect", "3", _stranger_add(r))
    got = s.result()
    assert got == {"connections": 3, "bytes": 0, "closed": 3}, got
    log = r.engine.log()
    assert log.count(_refusal(s.pid)) == 3, log
    assert "refusing a second connection" not in log
    dp = r.engine.stats()["dplane"]
    assert (dp["refused"], dp["connected"], dp["connections"], dp["sessions"]) == (3, True, 1, 2), dp
    _untouched(r, discr)

    # bfdd gone, its sessions held: the stranger neither takes the slot nor ends the hold.
    (r.bfdd.dir / "bfdd.conf").write_text(r.d_conf(*SPECS))
    r.bfdd.kill("bfdd")
    wait_until(lambda: r.engine.stats()["dplane"]["held"] == 2, timeout=5, what="the sessions held")
    s = Stranger(r.d, "connect", "2", _stranger_add(r))
    assert s.result() == {"connections": 2, "bytes": 0, "closed": 2}
    dp = r.engine.stats()["dplane"]
    assert (dp["refused"], dp["connected"], dp["held"], dp["connections"]) == (5, False, 2, 1), dp
    r.bfdd.restart_bfdd()
    _adopted_again(r)
    _untouched(r, discr)
    dp = r.engine.stats()["dplane"]
    assert (dp["refused"], dp["connected"], dp["held"], dp["connections"]) == (5, True, 0, 2), dp
    assert r.engine.log().count(_refusal(s.pid)) == 2


@pytest.mark.timing(stall_ms=100, userspace=True)  # a 3x50 ms flap: detection time less one interval
def test_frr84_the_engine_tells_a_strangers_listener_nothing(rig, frr_factory):  # noqa: F811
    """Engine --dplane-connect: a nobody listener on bfdd's port gets no byte, before bfdd and while held."""
    r = rig(
        ["--dplane-connect", f"ipv4:127.0.0.1:{PORT}", "--dp-hold", "20"],
        None,
        specs=SPECS,
        interval_ms=INTERVAL_MS,
    )
    line = f"dplane: refused the listener on 127.0.0.1:{PORT}, uid {NOBODY} (pid %d, python3): "
    line += "not an allowed dataplane user; retrying"

    # Before bfdd: the stranger got the port first.
    s = Stranger(r.d, "listen")
    s.wait_listening()
    r.engine.wait_log(line % s.pid)
    wait_until(lambda: r.engine.stats()["dplane"]["refused"] >= 2, timeout=10, what="a second refusal")
    got = s.result()
    assert got["connections"] >= 2 and got["bytes"] == 0, got
    assert r.engine.log().count(line % s.pid) == 1, "logged once per distinct refusal"

    r.bfdd = frr_factory(r.d, "d", bfdd_args=["--dplaneaddr", f"ipv4:127.0.0.1:{PORT}"])
    r.bfdd.start()
    r.engine.wait_log("dplane: bfdd connected as frr (uid ")
    discr = _up(r)

    # bfdd killed, the sessions held; the stranger binds the port before bfdd is back.
    (r.bfdd.dir / "bfdd.conf").write_text(r.d_conf(*SPECS))
    before = r.engine.stats()["dplane"]["refused"]
    r.bfdd.kill("bfdd")
    s = Stranger(r.d, "listen")
    s.wait_listening()
    wait_until(
        lambda: r.engine.stats()["dplane"]["refused"] >= before + 3, timeout=10, what="refusals while held"
    )
    dp = r.engine.stats()["dplane"]
    assert (dp["connected"], dp["held"]) == (False, 2), dp
    got = s.result()
    assert got["connections"] >= 3 and got["bytes"] == 0, f"the engine told the stranger something: {got}"
    assert r.engine.log().count(line % s.pid) == 1
    t0 = time.monotonic()
    r.bfdd.restart_bfdd()
    _adopted_again(r)
    print(f"\nbfdd back and both held sessions adopted {time.monotonic() - t0:.1f} s after its restart")
    _untouched(r, discr)
    dp = r.engine.stats()["dplane"]
    # Every connection the engine counts is one it vetted as bfdd's (the stranger's only raise
    # "refused"). A CI run counted 3: the restarted bfdd was attached to twice. Why is printed
    # here from the engine's log; it is not this test's claim.
    attached = r.engine.log().count("dplane: bfdd connected as frr (uid ")
    if dp["connections"] != 2:
        print("\n".join(x for x in r.engine.log().splitlines() if "dplane:" in x))
    assert (dp["connected"], dp["held"]) == (True, 0), dp
    assert dp["connections"] == attached >= 2, (dp, attached)
