"""The software engine discards every malformed or misdirected control packet, and counts it.

One live setup for the whole module: the engine in namespace d with an IPv4
and an IPv6 session Up at 3x50 ms against FRR bfdd in namespace p (the
software engine is an ordinary process: at 3x10 ms one of this VM's 30-50 ms
stalls flapped the session in a clean-clone CI run, and with the fixture
shared by the module every later case failed on "undisturbed"; what the
module proves is about rejected packets, not about timing). From p,
frames built by ``harness.inject`` (every field chosen here, checksums by
scapy) go out of the peer's interface, so they reach the engine exactly as
the peer's own packets do. Each case sends ``N`` copies and then asserts:

- the drop counter named after the rule moved by exactly ``N``, and no other
  drop counter moved (the whole ``counters.drop`` map is compared);
- for the rules the session itself applies (``ttl``, ``auth_unexpected``), the
  session's own ``drops`` moved by ``N`` too;
- both live sessions are undisturbed: still Up, no flap, same ``up_since``,
  same remote discriminator;
- the frames really crossed the link (seen by a capture in d);
- nothing was acted on: every injected packet that gets as far as a session
  carries the Poll bit, so accepting it would make the engine answer with a
  Final at once. After each case a well-formed Poll (the marker) is injected;
  the engine must answer it, and that answer must be the only Final the
  engine sent since the case began (the engine handles packets in order, so
  a Final caused by a rejected packet would come before the marker's).

"Undisturbed" is a timing claim (two ordinary processes must keep each
other's 150 ms detection time), so each case is a timing window judged
against the witnesses with the userspace one included: a flap while a
witness stalled 100 ms is inconclusive, not a fault. One such flap (3x50 ms,
a clean-clone CI run, 2026-12-02) had failed every later case too, all
compared with the baseline the fixture took; now an inconclusive case moves
the baseline on to the re-established sessions (:meth:`Live.rebase`), so its
re-run and the cases after it are judged on their own, and the last test
still accounts for every flap: each one was excused by a stalled witness.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from harness.capture import Capture, WirePacket
from harness.engine import EngineProcess
from harness.frr import Frr, bfd_peer_block
from harness.inject import auth_simple, bfd_control, send_frames, udp_frame
from harness.netns import Link, Namespace, Topology
from harness.wait import wait_until
from harness.witness import Judge

INTERVAL_MS = 50
MULT = 3
N = 3  # copies of every rejected packet
SPORT = 49999  # source port of the injected packets under test
MARKER_SPORT = 49998  # source port of the well-formed marker Polls
FAMILIES = ("v4", "v6")
UP_SINCE_SLACK_S = 0.005
# A stall this long alone explains a Down at either end: detection time less one interval.
STALL_MS = (MULT - 1) * INTERVAL_MS

# Catch P and F control packets of both families, and every injected frame
# (listed first, so that a truncated one is matched before any payload load).
CAPTURE_FILTER = (
    f"(udp src port {SPORT} or udp src port {MARKER_SPORT})"
    " or (ip and udp port 3784 and udp[9] & 0x30 != 0)"
    " or (ip6 and ip6[6] == 17 and ip6[42:2] == 3784 and ip6[49] & 0x30 != 0)"
)


def addr(link: Link, family: str) -> str:
    return str(link.ip4 if family == "v4" else link.ip6)


@dataclass
class Live:
    d: Namespace
    p: Namespace
    a: Link  # engine side of the live link
    b: Link  # FRR side
    a2: Link  # a second link on which no session exists
    b2: Link
    frr: Frr
    engine: EngineProcess
    cap: Capture  # on a (veth-d)
    cap2: Capture  # on a2
    baseline: dict[str, dict]  # family -> the session as last seen settled Up
    all_up: Callable[[], dict | None]  # the engine's stats when both ends say Up, else None
    frr_counts: dict[str, tuple[int, int]]  # family -> FRR's (session-up, session-down) at the baseline
    excused: list[str]  # the flaps a stalled witness explained, one line each

    def session(self, stats: dict, family: str) -> dict:
        peer = addr(self.b, family)
        return next(s for s in stats["sessions"] if s["peer"] == peer)

    def frr_counters(self) -> dict[str, tuple[int, int]]:
        got = {c["peer"]: c for c in self.frr.counters()}
        return {
            fam: (got[addr(self.a, fam)]["session-up"], got[addr(self.a, fam)]["session-down"])
            for fam in FAMILIES
        }

    def rebase(self, why: str) -> None:
        """After an inconclusive window: wait for both ends Up again, and judge from there."""
        stats = wait_until(self.all_up, timeout=20, interval=0.2, what="both sessions Up again at both ends")
        for fam in FAMILIES:
            s = self.session(stats, fam)
            if s["flaps"] != self.baseline[fam]["flaps"]:
                self.excused.append(f"{fam}: {s['flaps'] - self.baseline[fam]['flaps']} flap(s) in {why}")
            self.baseline[fam] = s
        self.frr_counts = self.frr_counters()

    def window(self, timing: Judge, name: str) -> contextlib.AbstractContextManager:
        """The body as one timing window; an inconclusive one moves the baseline (module docstring)."""
        return timing.window(
            name, stall_ms=STALL_MS, userspace=True, on_inconclusive=lambda: self.rebase(name)
        )


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    if os.geteuid() != 0:
        pytest.fail("integration tests need root (network namespaces, XDP, FRR)")
    work = tmp_path_factory.mktemp("rejects")
    with contextlib.ExitStack() as stack:
        topo = Topology()
        stack.callback(topo.close)
        d, p = topo.namespace("d"), topo.namespace("p")
        a, b = topo.veth(d, "veth-d", p, "veth-p")
        a2, b2 = topo.veth(d, "veth-d2", p, "veth-p2")

        frr = Frr(p, "p")
        stack.callback(frr.cleanup)
        frr.start()
        for fam in FAMILIES:
            frr.configure(
                *bfd_peer_block(
                    addr(a, fam),
                    local=addr(b, fam),
                    interface="veth-p",
                    rx_ms=INTERVAL_MS,
                    tx_ms=INTERVAL_MS,
                    mult=MULT,
                )
            )

        sessions = work / "sessions.yaml"
        sessions.write_text(
            "".join(
                f"- {{local: '{addr(a, fam)}', peer: '{addr(b, fam)}', interface: veth-d,"
                f" min_tx_ms: {INTERVAL_MS}, min_rx_ms: {INTERVAL_MS}, detect_mult: {MULT}}}\n"
                for fam in FAMILIES
            )
        )
        engine = EngineProcess(d, ["--sessions", str(sessions)], work)
        stack.callback(engine.cleanup)
        engine.start()
        # SIGUSR1 before the handlers are installed would kill it: wait for the loop.
        engine.wait_log("serving 2 sessions", timeout=10)

        def all_up() -> dict | None:
            st = engine.stats()
            ours = {s["peer"]: s for s in st["sessions"]}
            peers = [frr.peer(addr(a, fam)) for fam in FAMILIES]
            # Our remote_state too: FRR says Up a packet before its Up reaches us,
            # and a baseline taken in between would read "init".
            ok = all(
                ours.get(addr(b, fam), {}).get("state")
                == ours.get(addr(b, fam), {}).get("remote_state")
                == "up"
                for fam in FAMILIES
            ) and all(pr and pr["status"] == "up" for pr in peers)
            return st if ok else None

        stats = wait_until(
            all_up, timeout=20, interval=0.2, what="both engine sessions and both FRR peers up"
        )

        cap = Capture(d, "veth-d", work / "veth-d.pcap", CAPTURE_FILTER).start()
        stack.callback(cap.stop)
        cap2 = Capture(d, "veth-d2", work / "veth-d2.pcap", CAPTURE_FILTER).start()
        stack.callback(cap2.stop)

        live = Live(d, p, a, b, a2, b2, frr, engine, cap, cap2, {}, all_up, {}, [])
        for fam in FAMILIES:
            s = live.session(stats, fam)
            # The engine and FRR agree on who is who.
            peer = frr.peer(addr(a, fam))
            assert peer is not None
            assert s["remote_discr"] == peer["id"], (s, peer)
            assert s["local_discr"] == peer["remote-id"], (s, peer)
            assert s["flaps"] == 0 and s["up_since"] > 0 and s["drops"] == {}, s
            live.baseline[fam] = s
        live.frr_counts = live.frr_counters()
        assert live.frr_counts == {fam: (1, 0) for fam in FAMILIES}, live.frr_counts
        yield live


# --- building packets -----------------------------------------------------------


@dataclass(frozen=True)
class Ctx:
    """What a case needs to build its packet: the live session's discriminators."""

    local: int  # the engine's discriminator (Your Discriminator of a genuine packet)
    remote: int  # FRR's (My Discriminator of a genuine packet)
    other_local: int  # the engine's discriminator of the other family's session
    unknown: int  # a discriminator no session has


def genuine(ctx: Ctx, **over: object) -> bytes:
    """What FRR itself sends while Up (plus P, see the module docstring), then ``over``."""
    fields: dict = {
        "state": "up",
        "flags": "P",
        "my_discr": ctx.remote,
        "your_discr": ctx.local,
        "detect_mult": MULT,
        "desired_min_tx_us": INTERVAL_MS * 1000,
        "required_min_rx_us": INTERVAL_MS * 1000,
    }
    fields.update(over)
    return bfd_control(**fields)


@dataclass(frozen=True)
class Case:
    name: str
    reason: str
    build: Callable[[Ctx], bytes]
    ttl: int = 255
    session_level: bool = False  # Rejected by the session: charged to its own drops too
    other_link: bool = False  # sent from the address that has no session


CASES = [
    Case("version_0", "version", lambda c: genuine(c, version=0)),
    Case("version_2", "version", lambda c: genuine(c, version=2)),
    Case("version_7", "version", lambda c: genuine(c, version=7)),
    Case("length_field_below_24", "length", lambda c: genuine(c, length=20)),
    Case("length_field_beyond_payload", "length", lambda c: genuine(c, length=30)),
    Case("truncated_20_bytes", "short", lambda c: genuine(c)[:20]),
    Case("empty_payload", "short", lambda c: b""),
    Case("detect_mult_0", "detect_mult", lambda c: genuine(c, detect_mult=0)),
    Case("m_bit", "multipoint", lambda c: genuine(c, flags="PM")),
    Case("my_discr_0", "my_discr", lambda c: genuine(c, my_discr=0)),
    Case("your_discr_0_state_up", "your_discr", lambda c: genuine(c, your_discr=0)),
    Case("your_discr_0_state_init", "your_discr", lambda c: genuine(c, your_discr=0, state="init")),
    Case("your_discr_unknown", "your_discr", lambda c: genuine(c, your_discr=c.unknown)),
    # A discriminator that exists, but belongs to a session with another peer address.
    Case("your_discr_of_other_session", "your_discr", lambda c: genuine(c, your_discr=c.other_local)),
    # The session's own discriminators, one hop away: RFC 5881 §5 GTSM.
    Case("ttl_254", "ttl", genuine, ttl=254, session_level=True),
    Case("ttl_1", "ttl", genuine, ttl=1, session_level=True),
    Case(
        "auth_bit_without_auth_configured",
        "auth_unexpected",
        lambda c: genuine(c, flags="PA", auth=auth_simple(1, b"secret")),
        session_level=True,
    ),
    Case(
        "auth_simple_empty_password", "auth_section", lambda c: genuine(c, flags="PA", auth=bytes([1, 3, 1]))
    ),
    Case(
        "auth_sha1_wrong_auth_len",
        "auth_section",
        lambda c: genuine(c, flags="PA", auth=bytes([4, 24, 1, 0, 0, 0, 0, 1]) + bytes(16)),
    ),
    Case(
        "auth_unknown_type",
        "auth_section",
        lambda c: genuine(c, flags="PA", auth=bytes([9, 8, 1, 0, 0, 0, 0, 1])),
    ),
    Case(
        "auth_len_beyond_length_field",
        "auth_section",
        # The section claims 28 bytes but the Length field leaves it only 8.
        lambda c: genuine(c, flags="PA", auth=bytes([4, 28, 1, 0, 0, 0, 0, 1]) + bytes(20), length=32),
    ),
    Case(
        "no_session_for_source",
        "no_session",
        lambda c: bfd_control(state="down", my_discr=c.remote, your_discr=0, flags="P"),
        other_link=True,
    ),
]


# --- sending and observing ------------------------------------------------------


def ctx_for(live: Live, stats: dict, family: str) -> Ctx:
    s = live.session(stats, family)
    other = live.session(stats, "v6" if family == "v4" else "v4")
    taken = {x["local_discr"] for x in stats["sessions"]}
    unknown = next(x for x in (s["local_discr"] ^ 0x5A5A5A5A, 0xFFFFFFFE, 12345) if x and x not in taken)
    return Ctx(s["local_discr"], s["remote_discr"], other["local_discr"], unknown)


def frame(
    live: Live, family: str, payload: bytes, *, ttl: int = 255, other_link: bool = False, sport: int = SPORT
) -> bytes:
    src, dst = (live.b2, live.a2) if other_link else (live.b, live.a)
    return udp_frame(
        src_mac=src.mac,
        dst_mac=dst.mac,
        src=addr(src, family),
        dst=addr(dst, family),
        sport=sport,
        dport=3784,
        payload=payload,
        ttl=ttl,
    )


def engine_finals(pkts: list[WirePacket], live: Live, family: str) -> list[WirePacket]:
    return [p for p in pkts if p.src == addr(live.a, family) and p.sport != SPORT and p.final]


def peer_polls(pkts: list[WirePacket], live: Live, family: str) -> list[WirePacket]:
    return [
        p for p in pkts if p.src == addr(live.b, family) and p.sport not in (SPORT, MARKER_SPORT) and p.poll
    ]


def send_marker(live: Live, ctx: Ctx, family: str, mark: int) -> WirePacket:
    """Inject a well-formed Poll; return the engine's Final that answers it."""
    send_frames(live.p, "veth-p", [frame(live, family, genuine(ctx), sport=MARKER_SPORT)])

    def answered() -> WirePacket | None:
        new = live.cap.snapshot()[mark:]
        seen = [i for i, p in enumerate(new) if p.sport == MARKER_SPORT]
        if not seen:
            return None
        return next(iter(engine_finals(new[seen[0] :], live, family)), None)

    return wait_until(answered, timeout=3, what=f"the engine's Final answering a {family} marker Poll")


def assert_undisturbed(live: Live, stats: dict) -> None:
    for fam in FAMILIES:
        s, base = live.session(stats, fam), live.baseline[fam]
        got = {k: s[k] for k in ("state", "remote_state", "flaps", "remote_discr", "local_discr")}
        want = {k: base[k] for k in got}
        # up_since is converted from the monotonic clock at each dump, rounded to
        # the millisecond: it may wobble by a millisecond or two, never by a flap.
        got["up_since"] = (
            "same" if abs(s["up_since"] - base["up_since"]) <= UP_SINCE_SLACK_S else s["up_since"]
        )
        want["up_since"] = "same"
        assert got == want, f"{fam} session disturbed: {got} != {want}\nengine log:\n{live.engine.log()}"


# --- the tests ------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_positive_control_injected_poll_is_answered(live, family, timing):
    """A genuine packet injected the same way IS accepted: injection reaches the engine at all."""
    with live.window(timing, f"positive control {family}"):
        _positive_control(live, family)


def _positive_control(live: Live, family: str) -> None:
    before = live.engine.stats()
    ctx = ctx_for(live, before, family)
    mark = len(live.cap.snapshot())
    final = send_marker(live, ctx, family, mark)
    after = live.engine.stats()

    new = live.cap.snapshot()[mark:]
    injected = [p for p in new if p.sport == MARKER_SPORT]
    assert len(injected) == 1 and injected[0].ttl == 255 and injected[0].udp_csum_ok, injected
    # The answer is the session's own: its discriminators, sent to the peer.
    assert final.dst == addr(live.b, family) and final.dport == 3784, final
    assert (final.my_discr, final.your_discr, final.state) == (ctx.local, ctx.remote, "up"), final
    assert not final.poll and final.ttl == 255
    assert len(engine_finals(new, live, family)) == 1 + len(peer_polls(new, live, family))
    s_before, s_after = live.session(before, family), live.session(after, family)
    assert s_after["rx_packets"] > s_before["rx_packets"]
    assert after["counters"]["drop"] == before["counters"]["drop"], "a genuine packet was dropped"
    assert s_after["drops"] == s_before["drops"]
    assert_undisturbed(live, after)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("family", FAMILIES)
def test_rejected_and_counted(live, family, case, timing):
    with live.window(timing, f"{family} {case.name}"):
        _rejected_and_counted(live, family, case)


def _rejected_and_counted(live: Live, family: str, case: Case) -> None:
    before = live.engine.stats()
    ctx = ctx_for(live, before, family)
    payload = case.build(ctx)
    cap = live.cap2 if case.other_link else live.cap
    mark, mark_main = len(cap.snapshot()), len(live.cap.snapshot())

    sent = send_frames(
        live.p,
        "veth-p2" if case.other_link else "veth-p",
        [frame(live, family, payload, ttl=case.ttl, other_link=case.other_link)] * N,
    )
    assert sent == N

    # The frames crossed the link as built: that is what the engine was given.
    on_wire = wait_until(
        lambda: (got := [p for p in cap.snapshot()[mark:] if p.sport == SPORT]) and len(got) >= N and got,
        timeout=3,
        what=f"{N} injected frames on the wire",
    )
    assert len(on_wire) == N
    assert all(p.payload == payload and p.ttl == case.ttl and p.udp_csum_ok for p in on_wire), on_wire

    base = before["counters"]["drop"].get(case.reason, 0)
    after = wait_until(
        lambda: (st := live.engine.stats())["counters"]["drop"].get(case.reason, 0) >= base + N and st,
        timeout=5,
        what=f"drop counter {case.reason!r} to reach {base + N}",
    )
    want = Counter(before["counters"]["drop"])
    want[case.reason] += N
    assert after["counters"]["drop"] == dict(want), "drop counters moved other than by exactly N"

    s_before, s_after = live.session(before, family), live.session(after, family)
    want_own = Counter(s_before["drops"])
    if case.session_level:
        want_own[case.reason] += N
    assert s_after["drops"] == dict(want_own), "the session's own drop counters"
    other = "v6" if family == "v4" else "v4"
    assert live.session(after, other)["drops"] == live.session(before, other)["drops"]
    assert_undisturbed(live, after)

    # Nothing was acted on: the marker's Final is the only one since the case began.
    send_marker(live, ctx, family, mark_main)
    new = live.cap.snapshot()[mark_main:]
    finals, polls = engine_finals(new, live, family), peer_polls(new, live, family)
    assert len(finals) == 1 + len(polls), f"the engine answered a rejected packet: {finals}"


def test_live_sessions_survived_everything(live):
    """Run last: the sessions stayed Up throughout, on both ends."""
    stats = live.engine.stats()
    assert_undisturbed(live, stats)
    for fam in FAMILIES:
        peer = live.frr.peer(addr(live.a, fam))
        assert peer is not None and peer["status"] == "up", peer
    # FRR's own counts: (1, 0) unless a stalled witness excused a flap (printed).
    assert live.frr_counters() == live.frr_counts, (live.frr_counters(), live.frr_counts, live.excused)
    if live.excused:
        print("\nflaps excused by a stalled witness: " + "; ".join(live.excused))
    log = live.engine.log()
    assert "internal error" not in log and "Traceback" not in log, log
    assert live.engine.proc is not None and live.engine.proc.poll() is None
