"""What bfdd shows is true: the peer's timers in ``show bfd peers`` follow the wire.

bfdd driving the engine learns the peer's timers and multiplier only from
BFD_STATE_CHANGE reports. A session usually comes Up while its peer is still
on its 1 s slow start, and the peer's Poll to its configured rate comes after
that transition; the engine reports the new values with a report in the same
state (dplane.py, TIMERS_SETTLE_US). The first test pins down what bfdd does
with such a report — the fact the engine relies on — with the test playing
the data plane; the second runs the engine under bfdd against a real peer and
takes the peer's values from a capture on the peer's side of the link.
Both for FRR 8.4 (the host's) and 10.3 (a trixie root).
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import socket
import threading
from collections.abc import Iterator

import pytest
from test_dplane_frr import (
    PORT,
    SH4,
    SLOW_MS,
    Rig,
    Spec,
    _bring_up,
    _counters,
    rig,  # noqa: F401  (the fixture, shared with the dplane tests)
)

from harness.capture import WirePacket
from harness.frr import Frr, _owner, bfd_peer_block
from harness.netns import Namespace
from harness.wait import WaitTimeout, wait_until
from xdp_bfd.wire.bfddp import (
    AddSession,
    CountersReply,
    CountersRequest,
    EchoReply,
    EchoRequest,
    FrameReader,
    Message,
    RemoteFlags,
    StateChange,
    encode_message,
)
from xdp_bfd.wire.control import Diag, State

RELEASES = ["8.4", "10.3"]
# What FRR's JSON calls the peer's values (the same keys in 8.4 and 10.3,
# bfdd/bfdd_vty.c), in ms; the multiplier as is.
SHOWN = ("remote-transmit-interval", "remote-receive-interval", "remote-echo-receive-interval")


def _frr_root(request: pytest.FixtureRequest, release: str) -> str:
    # Only the 10.3 cases need the trixie root (built once, about 30 s).
    return request.getfixturevalue("trixie_root") if release == "10.3" else "/"


def shown(peer: dict) -> tuple[int, int, int, int] | None:
    """The peer's values as bfdd's ``show bfd peers json`` has them (ms, and the multiplier)."""
    if not peer:
        return None
    return (*(peer[k] for k in SHOWN), peer["remote-detect-multiplier"])


def on_the_wire(pkt: WirePacket) -> tuple[int, int, int, int]:
    """A captured packet's values as bfdd would show them: FRR prints µs // 1000."""
    return (
        pkt.desired_min_tx_us // 1000,
        pkt.required_min_rx_us // 1000,
        pkt.required_min_echo_rx_us // 1000,
        pkt.detect_mult,
    )


# --- what bfdd does with a report in the state it already has -------------------------------------


class PlayedDataplane:
    """The test as bfdd's data plane: records what bfdd sends, answers what bfdd waits for.

    bfdd blocks (vtysh included) until a counters request is answered, so a
    reader thread answers each at once, with zeros.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(0.2)
        self.adds: list[AddSession] = []
        self._lock = threading.Lock()
        self._stop = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def send(self, *msgs: Message) -> None:
        with self._lock:
            self.sock.sendall(b"".join(encode_message(m) for m in msgs))

    def _read(self) -> None:
        reader = FrameReader()
        while not self._stop:
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            for m in reader.feed(data):
                if isinstance(m, AddSession):
                    self.adds.append(m)
                elif isinstance(m, CountersRequest):
                    self.send(CountersReply(m.id, m.lid))
                elif isinstance(m, EchoRequest):
                    self.send(EchoReply(m.dp_time, 0))

    def close(self) -> None:
        self._stop = True
        self._thread.join(timeout=2)
        self.sock.close()


@contextlib.contextmanager
def played_dataplane(d: Namespace, bfdd: Frr, release: str) -> Iterator[PlayedDataplane]:
    """Start ``bfdd`` attached to a data plane the test plays, in the direction its release supports."""
    if release == "8.4":
        bfdd.bfdd_args = ["--dplaneaddr", f"ipv4:127.0.0.1:{PORT}"]
        bfdd.start()
        sock = d.socket(socket.AF_INET, socket.SOCK_STREAM)
        wait_until(lambda: sock.connect_ex(("127.0.0.1", PORT)) == 0, timeout=5, what="bfdd listening")
    else:
        listener = d.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", PORT))
        listener.listen(1)
        listener.settimeout(10)
        bfdd.bfdd_args = ["--dplaneaddr", f"ipv4c:127.0.0.1:{PORT}"]
        bfdd.start()
        sock, _ = listener.accept()
        listener.close()
    dp = PlayedDataplane(sock)
    try:
        yield dp
    finally:
        dp.close()


def start_bgpd(bfdd: Frr, neighbor: str, source: str) -> None:
    """bgpd beside ``bfdd``, with BFD on one neighbor and the BFD library's debug log on.

    harness.frr starts zebra and bfdd only; this borrows its argv builder
    (paths, chroot) for a third daemon. bgpd will never reach the neighbor:
    it is here as bfdd's client, to show what a client does with the
    notification a same-state report causes.
    """
    conf = bfdd.dir / "bgpd.conf"
    conf.write_text(
        "debug bgp bfd\n"
        f"router bgp 65001\n bgp router-id {source}\n neighbor {neighbor} remote-as 65002\n"
        f" neighbor {neighbor} update-source {source}\n neighbor {neighbor} bfd\nexit\n"
    )
    shutil.chown(conf, *_owner(bfdd.dir))
    bfdd.ns.run(bfdd._argv("bgpd", ["-p", "0"]))  # no BGP listener: nothing else is tested here


@pytest.mark.parametrize("release", RELEASES)
def test_bfdd_takes_a_same_state_report_as_new_timers_and_nothing_else(request, topo, frr_factory, release):
    """The same state with other timers: bfdd shows the new values, counts no transition, keeps its uptime.

    Its one side effect, read in bfdd/dplane.c (frr-8.4.4 and frr-10.3): the
    notification to zebra every report causes (``zebra-notifications`` +1),
    which zebra relays to bfdd's clients; lib/bfd.c in the client drops it
    as no state change (bgpd here, with ``debug bgp bfd``). That notification
    is why the engine coalesces these reports.
    """
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    d.sysctl("net.ipv4.ip_local_reserved_ports", PORT)
    bfdd = frr_factory(d, "d", root=_frr_root(request, release))
    assert ".".join(map(str, bfdd.version[:2])) == release
    with played_dataplane(d, bfdd, release) as dp:
        # The operator's peer and bgpd's registration name the same session (no interface).
        bfdd.configure("debug bfd zebra", *bfd_peer_block(str(b.ip4), local=str(a.ip4), rx_ms=50, tx_ms=50))
        start_bgpd(bfdd, str(b.ip4), str(a.ip4))
        add = wait_until(
            lambda: next((m for m in dp.adds if m.dst == b.ip4), None), timeout=5, what="bfdd's ADD"
        )
        # bgpd 10.3 registers before it knows its source, then moves the registration to it;
        # deregistering the sourceless one sets the configured session Down in bfdd without a
        # counter or a notification (bfdd/ptm_adapter.c, _ptm_bfd_session_del), so an Up reported
        # before that silently vanishes (a CI run: no uptime of 2 s within 5 s). bgpd 8.4 keeps
        # the sourceless registration while BGP is not established. The report waits for the last.
        local = "0.0.0.0" if release == "8.4" else str(a.ip4)
        registered = f"ptm-add-dest: register peer [mhop:no peer:{b.ip4} local:{local} "
        wait_until(lambda: registered in bfdd.log(), timeout=10, what=f"bgpd's registration from {local}")

        def report(tx: int, rx: int, echo: int, mult: int) -> None:
            dp.send(StateChange(add.lid, 0x5EED, RemoteFlags(0), tx, rx, echo, State.UP, Diag.NONE, mult))

        def peer() -> dict:
            return next((x for x in bfdd.peers() if x.get("peer") == str(b.ip4)), {})

        def bgpd_updates(since: int = 0) -> list[str]:
            """What the BFD library in bgpd did with each notification: 'sessions updated: N'."""
            return [x for x in bfdd.log("bgpd")[since:].splitlines() if "sessions updated:" in x]

        report(1_000_000, 1_000_000, 0, 3)  # Up on the peer's slow start
        # The status is part of the wait: bfdd shows 1000/1000 x3 for a peer it has heard
        # nothing from as well, so the timers alone can be there before the report is.
        wait_until(
            lambda: shown(p := peer()) == (1000, 1000, 0, 3) and p.get("status") == "up",
            timeout=5,
            what="bfdd showing Up",
        )
        assert peer()["remote-id"] == 0x5EED
        # bgpd hears Up, by the report's notification or on registering (whichever came last).
        wait_until(
            lambda: any(x.endswith("sessions updated: 1") for x in bgpd_updates()),
            timeout=10,
            what="bgpd told Up",
        )
        # Uptime counts whole seconds: at 2, a reset would read 0 or 1.
        wait_until(lambda: peer().get("uptime", 0) >= 2, timeout=5, what="two seconds of uptime")
        before, up_for, mark = _counters(bfdd, str(b.ip4), False), peer()["uptime"], len(bfdd.log("bgpd"))

        report(10_000, 20_000, 30_000, 5)
        wait_until(lambda: shown(peer()) == (10, 20, 30, 5), timeout=5, what="bfdd showing the new timers")
        after, now = _counters(bfdd, str(b.ip4), False), peer()
        told = wait_until(lambda: bgpd_updates(mark), timeout=5, what="bgpd hearing of the report")
    print(
        f"\nFRR {release}: same-state report -> shown {shown(now)}, uptime {up_for} -> {now['uptime']} s, "
        f"session-up {before['session-up']} -> {after['session-up']}, "
        f"zebra-notifications {before['zebra-notifications']} -> {after['zebra-notifications']}; "
        f"bgpd: {told[-1].rsplit(':', 2)[-2].strip()}: {told[-1].rsplit(':', 1)[-1].strip()}"
    )
    assert now["status"] == "up" and now["uptime"] >= up_for
    assert (before["session-up"], before["session-down"]) == (1, 0)
    assert (after["session-up"], after["session-down"]) == (1, 0)
    assert after["zebra-notifications"] == before["zebra-notifications"] + 1
    # The client got the notification and did nothing with it.
    assert all(x.endswith("sessions updated: 0") for x in told), told
    assert "bfd state" not in bfdd.log("bgpd")[mark:]


# --- the engine under bfdd against a real peer --------------------------------------------------


def configured(values: tuple[int, int, int, int]) -> tuple[int, int, int]:
    """What the peer's configuration sets: transmit, receive, multiplier (not echo)."""
    return values[0], values[1], values[3]


def from_peer(r: Rig, spec: Spec, pkts: list[WirePacket]) -> list[WirePacket]:
    return [x for x in pkts if x.src == r.theirs(spec) and x.dst == r.ours(spec) and x.dport == 3784]


def wire_now(r: Rig, spec: Spec) -> WirePacket | None:
    """The peer's latest Up packet on the wire (captured on its side)."""
    ups = [x for x in from_peer(r, spec, r.cap.snapshot()) if x.state == "up"]
    return ups[-1] if ups else None


def bfdd_agrees_with_the_wire(r: Rig, spec: Spec, what: str) -> tuple[int, int, int, int]:
    """Wait (bounded) until d's bfdd shows what the peer's latest packet carries; returns it."""

    def agree() -> tuple[int, int, int, int] | None:
        last = wire_now(r, spec)
        values = shown(r.in_d(spec))
        return values if last is not None and values == on_the_wire(last) else None

    try:
        return wait_until(agree, timeout=5, what=what)
    except WaitTimeout:
        last = wire_now(r, spec)
        wire = on_the_wire(last) if last is not None else None
        raise AssertionError(f"{what}: bfdd shows {shown(r.in_d(spec))}, the peer sends {wire}") from None


@pytest.mark.parametrize("release", RELEASES)
def test_bfdd_shows_the_timers_the_peer_sends(request, rig, release):  # noqa: F811
    """Slow start, then a reconfigured peer: d's bfdd shows what the peer puts on the wire, never a new Up."""
    spec = SH4
    if release == "8.4":
        args = (["--dplane-connect", f"ipv4:127.0.0.1:{PORT}"], ["--dplaneaddr", f"ipv4:127.0.0.1:{PORT}"])
    else:
        args = (["--dplane", str(PORT)], ["--dplaneaddr", f"ipv4c:127.0.0.1:{PORT}"])
    r = rig(
        [*args[0], "--kernel-tx", "veth-d"],
        args[1],
        root=_frr_root(request, release),
        specs=(spec,),
        interval_ms=SLOW_MS,
    )
    assert ".".join(map(str, r.bfdd.version[:2])) == release
    _bring_up(r, (spec,))

    # 1. Out of the slow start. The peer advertised 1 s while not Up (the
    # first Up report's values, unless the engine came Up on the peer's own
    # Poll), then polled to its configured 50 ms.
    settled = bfdd_agrees_with_the_wire(r, spec, "out of the slow start")
    # Transmit, receive, multiplier as configured (echo: FRR's default 50 ms).
    assert configured(settled) == (SLOW_MS, SLOW_MS, 3), settled
    peer_pkts = from_peer(r, spec, r.cap.snapshot())
    assert any(x.desired_min_tx_us == 1_000_000 for x in peer_pkts), "no slow start on the wire"
    first = r.engine.stats()["dplane"]["timers_reports"]
    print(f"\nFRR {release}: out of the slow start, bfdd shows {settled}; {first} timers report(s)")
    assert first <= 1  # the peer leaves its slow start in one Poll, TX and RX together

    # 2. The peer changes its timers and multiplier while Up: every value bfdd shows moves.
    # Uptime counts whole seconds: at 2, a reset would read 0 or 1.
    wait_until(lambda: r.in_d(spec).get("uptime", 0) >= 2, timeout=5, what="two seconds of uptime in d")
    up_for = r.in_d(spec)["uptime"]
    before = _counters(r.bfdd, r.theirs(spec), False)
    mark = r.cap.snapshot()[-1].ts
    r.peer.configure(
        *bfd_peer_block(r.ours(spec), local=r.theirs(spec), interface="veth-p", rx_ms=30, tx_ms=40, mult=4)
    )
    wait_until(
        lambda: (w := wire_now(r, spec)) is not None and configured(on_the_wire(w)) == (40, 30, 4),
        timeout=5,
        what="the peer's new timers on the wire",
    )
    now = bfdd_agrees_with_the_wire(r, spec, "after the peer's reconfiguration")
    assert configured(now) == (40, 30, 4)
    after = _counters(r.bfdd, r.theirs(spec), False)
    reports = r.engine.stats()["dplane"]["timers_reports"] - first
    # At most one report per change the peer made on the wire (three config
    # lines may be up to three; a Poll repeating its values is none), counted
    # from its last packet before the reconfiguration.
    pkts = from_peer(r, spec, r.cap.snapshot())
    since = max(i for i, x in enumerate(pkts) if x.ts <= mark)
    seen = [on_the_wire(x) for x in pkts[since:]]
    changes = sum(1 for x, y in itertools.pairwise(seen) if x != y)
    shown_d = r.in_d(spec)
    print(
        f"FRR {release}: peer reconfigured -> bfdd shows {now}; {reports} timers report(s) for {changes} "
        f"change(s) on the wire; session-up {before['session-up']} -> {after['session-up']}, uptime "
        f"{up_for} -> {shown_d['uptime']} s, zebra-notifications {before['zebra-notifications']} -> "
        f"{after['zebra-notifications']}"
    )
    assert 1 <= reports <= changes
    # Not a new Up: no transition counted, the uptime runs on; bfdd notified zebra once per report.
    assert (after["session-up"], after["session-down"]) == (1, 0), after
    assert shown_d["status"] == "up" and shown_d["uptime"] >= up_for
    assert after["zebra-notifications"] - before["zebra-notifications"] == reports
    # And the peer saw nothing of it but its own Poll answered.
    assert _counters(r.peer, r.ours(spec), False)["session-down"] == 0
