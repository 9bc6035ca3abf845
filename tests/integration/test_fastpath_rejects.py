"""The XDP fast path drops every malformed or misdirected BFD frame itself, and counts it.

One live setup for the whole module: the engine in namespace d with
``--kernel-tx veth-d`` (generic XDP on veth) and three sessions Up at 3x10 ms
against FRR 8.4 bfdd in namespace p: IPv4 and IPv6 single-hop on veth-d, and an
IPv4 multihop session (minimum TTL 254) between two extra addresses on the same
link, so its packets cross the XDP hook too. Every session is answered by the
kernel (``kernel_tx_active``) before any case runs. A fourth, engine-only session
with authentication stays Down (FRR 8.4 has no BFD authentication): it is the
target of the "A bit clear with auth configured" rule.

Frames built by ``harness.inject`` (edited at byte level by ``harness.frames``)
leave veth-p through an AF_PACKET socket, so they enter veth-d's XDP hook
exactly as FRR's own do. A reject case sends ``N`` copies (with the peer's
MAC) and asserts:

- the kernel drop counter named after the rule moved by exactly ``N`` and no
  other drop counter moved (the whole ``counters.drop`` map is compared; it
  merges the kernel's per-reason counters with the engine's userspace drops,
  so a frame that slipped past XDP and was dropped by the engine would show
  as an extra count, and as ``xdp_pass``);
- ``xdp_pass`` did not move: in steady state every genuine FRR packet is
  answered in XDP (or skipped as early), so any move would be ours;
- nothing was acted on: every rejected packet that carries a plausible
  session header has the Poll bit, so a packet accepted by mistake would be
  answered at once with a Final (by XDP, or by the engine). After each case a
  well-formed Poll (the marker) is injected and must be answered; its Final
  must be the only Final we sent since the case began (frames on one veth
  queue are handled in order);
- the three live sessions are undisturbed on both ends: Up, no flap, same
  ``up_since`` and discriminators, kernel TX still active and counting; FRR
  still Up with the same ``id``/``remote-id`` and an uptime that did not reset.

Accept cases (the positive controls) use a marker source MAC that no
interface owns: XDP answers to the frame's source MAC, so every reply to an
injected frame, and only those, is caught by a capture on ``ether dst
MARKER_MAC`` in p (FRR's stack discards them as "other host", so they never
disturb it). The "bad input" test sends a seeded mix of random, mutated,
truncated and oversized frames and checks every verdict against an
independent model of the rules (``harness.xdp_oracle``): the exact per-reason
drop counts, and, through captures keyed on the frames' own source MAC, that
XDP passed up exactly the frames that are not BFD and answered none.

The last test checks that IPv6 BFD behind an extension header dies in XDP too
(it once skipped the fast path and reached the engine's socket).

"Undisturbed" is a timing claim: the kernel answers, but FRR's bfdd is an
ordinary process with a 30 ms detection time. Each test that asserts it is a
timing window (:func:`undisturbed_window`, the userspace witness included): a
flap while a witness stalled 20 ms is inconclusive, and the baseline moves on
to the re-established sessions (:meth:`Live.rebase`) so that the re-run and
later tests are judged on their own, not all failed by one flap; the last
test still accounts for every flap, each excused by a stalled witness.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import os
import random
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from harness.capture import Capture, WirePacket
from harness.engine import EngineProcess
from harness.frames import echo_payload, ip_checksum, ip_nops, mutate_control, with_ipv4_frag, with_udp_len
from harness.frr import Frr, bfd_peer_block
from harness.inject import auth_simple, bfd_control, send_frames, udp_frame
from harness.netns import Link, Namespace, Topology
from harness.wait import WaitTimeout, wait_until
from harness.witness import Judge
from harness.xdp_oracle import KernelTable, kernel_verdict
from xdp_bfd.fastpath import abi

INTERVAL_MS = 10
MULT = 3
MIN_TTL = 254  # the multihop session's minimum TTL (FRR's default too)
N = 3  # copies of every rejected frame
SPORT = 49999  # source port of injected frames under test
MARKER_SPORT = 49998  # source port of the well-formed marker Polls and accept cases
MARKER_MAC = "02:bf:d0:00:00:01"  # owned by no interface: replies to it are ours alone
FUZZ_MAC = "02:bf:d0:00:00:02"  # source of the bad-input frames: whatever d's stack sees of them is ours
UP_SINCE_SLACK_S = 0.005
FUZZ_SEED = 0x5EED_BFD
FUZZ_RANDOM = 200

# Extra addresses on the live link: the multihop pair, and a stranger in p that
# has no session (its frames still arrive on veth-d).
MH_LOCAL, MH_PEER = "198.19.1.11", "198.19.1.12"
STRANGER4, STRANGER6 = "198.19.1.99", "fd00:bfd:1::99"
# A fourth, engine-only session with authentication (FRR 8.4 bfdd has none): it
# stays Down, and exists so that "A bit clear with auth configured" has a target.
# Nothing in p owns its peer address.
AUTH_PEER = "198.19.1.13"
# A fifth, engine-only session without authentication that stays Down (nothing in
# p owns its peer address either): the kernel does not watch its silence.
DOWN_PEER = "198.19.1.14"

SESSIONS = ("v4", "v6", "mh")

# Injected frames (any encapsulation), every Poll or Final on a control port in
# both families (ours and FRR's), and every echo frame.
CAPTURE_FILTER = (
    f"udp src port {SPORT} or udp src port {MARKER_SPORT} or udp port 3785"
    " or (ip and (udp port 3784 or udp port 4784) and udp[9] & 0x30 != 0)"
    " or (ip6 and ip6[6] == 17 and (ip6[42:2] == 3784 or ip6[42:2] == 4784) and ip6[49] & 0x30 != 0)"
    " or (vlan and udp)"
)


@dataclass(frozen=True)
class Sess:
    """One live session as both ends see it."""

    name: str
    local: str  # the engine's address
    peer: str  # FRR's address
    multihop: bool

    @property
    def dport(self) -> int:
        return 4784 if self.multihop else 3784

    @property
    def v6(self) -> bool:
        return ipaddress.ip_address(self.local).version == 6

    @property
    def stranger(self) -> str:
        return STRANGER6 if self.v6 else STRANGER4


@dataclass
class Live:
    d: Namespace
    p: Namespace
    a: Link  # veth-d
    b: Link  # veth-p
    frr: Frr
    engine: EngineProcess
    cap: Capture  # on veth-p, CAPTURE_FILTER
    capm: Capture  # on veth-p, ether dst MARKER_MAC: replies to injected frames
    ifindex: int  # veth-d's, in d
    sess: dict[str, Sess]
    steady: dict[str, WirePacket]  # FRR's own steady Up packet, per session
    our_sport: dict[str, int]  # the engine's source port, per session
    baseline: dict[str, dict] = field(default_factory=dict)  # engine stats per session
    auth_baseline: dict = field(default_factory=dict)  # the engine-only auth session
    down_baseline: dict = field(default_factory=dict)  # the engine-only plain session, Down
    frr_baseline: dict[str, dict] = field(default_factory=dict)  # FRR's peer per session
    all_up: Callable[[], dict | None] = lambda: None  # the stats when every session is Up at both ends
    frr_counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # FRR's (up, down) per session
    excused: list[str] = field(default_factory=list)  # flaps a stalled witness explained

    def session(self, stats: dict, name: str) -> dict:
        s = self.sess[name]
        return next(x for x in stats["sessions"] if x["peer"] == s.peer and x["multihop"] == s.multihop)

    def auth_session(self, stats: dict) -> dict:
        return next(x for x in stats["sessions"] if x["peer"] == AUTH_PEER)

    def down_session(self, stats: dict) -> dict:
        return next(x for x in stats["sessions"] if x["peer"] == DOWN_PEER)

    def frr_peers(self) -> dict[str, dict]:
        got = {(p["peer"], bool(p.get("multihop"))): p for p in self.frr.peers()}
        return {n: got[(s.local, s.multihop)] for n, s in self.sess.items()}

    def frr_counters(self) -> dict[str, tuple[int, int]]:
        got = {(c["peer"], bool(c.get("multihop"))): c for c in self.frr.counters()}
        return {
            n: (got[(s.local, s.multihop)]["session-up"], got[(s.local, s.multihop)]["session-down"])
            for n, s in self.sess.items()
        }

    def rebase(self, why: str) -> None:
        """After an inconclusive window: wait for every session Up again, and judge from there."""
        stats = wait_until(self.all_up, timeout=30, interval=0.2, what="every session Up again at both ends")
        peers = self.frr_peers()
        for n in SESSIONS:
            s = self.session(stats, n)
            if s["flaps"] != self.baseline[n]["flaps"]:
                self.excused.append(f"{n}: {s['flaps'] - self.baseline[n]['flaps']} flap(s) in {why}")
            self.baseline[n], self.frr_baseline[n] = s, peers[n]
        self.frr_counts = self.frr_counters()


# A stall this long alone explains a Down at either end: detection time less one interval.
STALL_MS = (MULT - 1) * INTERVAL_MS


def undisturbed_window(test: Callable[..., None]) -> Callable[..., None]:
    """The test's body as one timing window (module docstring); it must take ``live`` and ``timing``."""

    @functools.wraps(test)
    def run(**kwargs: object) -> None:
        live, timing = kwargs["live"], kwargs["timing"]
        assert isinstance(live, Live) and isinstance(timing, Judge)
        name = test.__name__
        with timing.window(
            name, stall_ms=STALL_MS, userspace=True, on_inconclusive=lambda: live.rebase(name)
        ):
            test(**kwargs)

    return run


def _add_addr(ns: Namespace, ifname: str, cidr: str) -> None:
    iface = ipaddress.ip_interface(cidr)
    with ns.ipr() as ipr:
        ipr.addr("add", index=ns.index(ifname), address=str(iface.ip), prefixlen=iface.network.prefixlen)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    if os.geteuid() != 0:
        pytest.fail("integration tests need root (network namespaces, XDP, FRR)")
    work = tmp_path_factory.mktemp("fastpath-rejects")
    with contextlib.ExitStack() as stack:
        topo = Topology()
        stack.callback(topo.close)
        d, p = topo.namespace("d"), topo.namespace("p")
        a, b = topo.veth(d, "veth-d", p, "veth-p")
        _add_addr(d, "veth-d", f"{MH_LOCAL}/24")
        _add_addr(p, "veth-p", f"{MH_PEER}/24")
        _add_addr(p, "veth-p", f"{STRANGER4}/24")
        _add_addr(p, "veth-p", f"{STRANGER6}/64")
        sess = {
            "v4": Sess("v4", str(a.ip4), str(b.ip4), False),
            "v6": Sess("v6", str(a.ip6), str(b.ip6), False),
            "mh": Sess("mh", MH_LOCAL, MH_PEER, True),
        }

        frr = Frr(p, "p")
        stack.callback(frr.cleanup)
        frr.start()
        for s in sess.values():
            frr.configure(
                *bfd_peer_block(
                    s.local,
                    local=s.peer,
                    interface=None if s.multihop else "veth-p",
                    multihop=s.multihop,
                    rx_ms=INTERVAL_MS,
                    tx_ms=INTERVAL_MS,
                    mult=MULT,
                    extra=(f"minimum-ttl {MIN_TTL}",) if s.multihop else (),
                )
            )

        sessions = work / "sessions.yaml"
        sessions.write_text(
            "".join(
                f"- {{local: '{s.local}', peer: '{s.peer}',"
                + (f" multihop: true, minimum_ttl: {MIN_TTL}," if s.multihop else " interface: veth-d,")
                + f" min_tx_ms: {INTERVAL_MS}, min_rx_ms: {INTERVAL_MS}, detect_mult: {MULT}}}\n"
                for s in sess.values()
            )
            + f"- {{local: '{a.ip4}', peer: '{AUTH_PEER}', interface: veth-d,"
            " auth: {type: simple, key_id: 1, secret: fastpath}}\n"
            + f"- {{local: '{a.ip4}', peer: '{DOWN_PEER}', interface: veth-d}}\n"
        )
        sessions.chmod(0o600)  # it holds a secret: the engine refuses it readable by others
        engine = EngineProcess(d, ["--sessions", str(sessions), "--kernel-tx", "veth-d"], work)
        stack.callback(engine.cleanup)
        engine.start()
        engine.wait_log("kernel-tx: XDP attached to veth-d (generic mode, ", timeout=30)
        engine.wait_log("bfd: serving 5 sessions with the XDP fast path", timeout=10)

        def all_up() -> dict | None:
            st = engine.stats()
            ours = [next((x for x in st["sessions"] if x["peer"] == s.peer), {}) for s in sess.values()]
            theirs = {(x["peer"], bool(x.get("multihop"))): x for x in frr.peers()}
            # remote_state too: a baseline taken before the peer's Up arrives reads "init".
            ok = all(
                x.get("state") == x.get("remote_state") == "up" and x.get("kernel_tx_active") for x in ours
            ) and all(theirs.get((s.local, s.multihop), {}).get("status") == "up" for s in sess.values())
            return st if ok else None

        first = wait_until(all_up, timeout=30, interval=0.2, what="3 sessions Up on both ends, kernel TX on")

        # FRR's own steady packets (and our source ports), straight off the wire.
        probe = Capture(p, "veth-p", work / "steady.pcap", "udp and (port 3784 or port 4784)").start()
        stack.callback(probe.stop)

        def steady_seen() -> tuple[dict, dict] | None:
            pkts = probe.snapshot()
            theirs, ours = {}, {}
            for n, s in sess.items():
                for pk in pkts:
                    plain = pk.state == "up" and not (pk.poll or pk.final) and pk.dport == s.dport
                    if plain and pk.src == s.peer and pk.dst == s.local:
                        theirs[n] = pk
                    elif plain and pk.src == s.local and pk.dst == s.peer:
                        ours[n] = pk.sport
            return (theirs, ours) if len(theirs) == len(ours) == len(sess) else None

        theirs, our_sport = wait_until(steady_seen, timeout=5, what="steady packets of every session")
        probe.stop()

        cap = Capture(p, "veth-p", work / "veth-p.pcap", CAPTURE_FILTER).start()
        stack.callback(cap.stop)
        capm = Capture(p, "veth-p", work / "marker.pcap", f"ether dst {MARKER_MAC}").start()
        stack.callback(capm.stop)

        live = Live(d, p, a, b, frr, engine, cap, capm, d.index("veth-d"), sess, theirs, our_sport)
        live.all_up = all_up
        # Kernel TX is live: every session's kernel count grows.
        second = wait_until(
            lambda: (
                (st := engine.stats())
                and all(
                    live.session(st, n)["kernel_tx_packets"] > live.session(first, n)["kernel_tx_packets"]
                    for n in sess
                )
                and st
            ),
            timeout=5,
            what="kernel_tx_packets growing on every session",
        )
        peers = live.frr_peers()
        for n in sess:
            s, pr = live.session(second, n), peers[n]
            # The engine and FRR agree on who is who, and FRR's packet is what we copy.
            assert (s["remote_discr"], s["local_discr"]) == (pr["id"], pr["remote-id"]), (s, pr)
            assert (theirs[n].my_discr, theirs[n].your_discr) == (pr["id"], pr["remote-id"])
            assert s["flaps"] == 0 and s["up_since"] > 0 and s["drops"] == {}, s
            assert our_sport[n] not in (SPORT, MARKER_SPORT) and theirs[n].sport not in (SPORT, MARKER_SPORT)
            live.baseline[n] = s
            live.frr_baseline[n] = pr
        au = live.auth_session(second)
        assert (au["state"], au["remote_discr"], au["drops"]) == ("down", 0, {}), au
        live.auth_baseline = au
        dn = live.down_session(second)
        assert (dn["state"], dn["remote_discr"], dn["drops"]) == ("down", 0, {}), dn
        live.down_baseline = dn
        live.frr_counts = live.frr_counters()
        assert live.frr_counts == {n: (1, 0) for n in SESSIONS}, live.frr_counts
        yield live


# --- building frames ------------------------------------------------------------


@dataclass(frozen=True)
class Ctx:
    """Discriminators of the live sessions: ``local`` is the engine's, ``remote`` FRR's."""

    local: dict[str, int]
    remote: dict[str, int]
    auth_local: int  # the engine's discriminator of the auth session
    unknown: int  # a discriminator no session has
    # No session's either, but with the low bits of each session's own, which name
    # its slot (docs/fastpath.md, "Slots"): the slot's check must refuse it.
    near: dict[str, int]


def ctx_of(live: Live) -> Ctx:
    local = {n: live.baseline[n]["local_discr"] for n in SESSIONS}
    remote = {n: live.baseline[n]["remote_discr"] for n in SESSIONS}
    auth_local = live.auth_baseline["local_discr"]
    taken = {*local.values(), auth_local, live.down_baseline["local_discr"]}
    unknown = next(x for x in (local["v4"] ^ 0x5A5A5A5A, 0xFFFFFFFE, 12345) if x and x not in taken)
    near = {n: d ^ 0x5A5A0000 for n, d in local.items()}
    assert not taken & set(near.values())
    return Ctx(local, remote, auth_local, unknown, near)


def genuine(live: Live, name: str, **over: object) -> bytes:
    """FRR's own steady packet of session ``name`` with the Poll bit (see the docstring), then ``over``."""
    pk = live.steady[name]
    fields: dict = {
        "state": "up",
        "flags": "P",
        "diag": pk.diag,
        "my_discr": pk.my_discr,
        "your_discr": pk.your_discr,
        "detect_mult": pk.detect_mult,
        "desired_min_tx_us": pk.desired_min_tx_us,
        "required_min_rx_us": pk.required_min_rx_us,
        "required_min_echo_rx_us": pk.required_min_echo_rx_us,
    }
    fields.update(over)
    return bfd_control(**fields)


def frame(
    live: Live,
    name: str,
    payload: bytes,
    *,
    ttl: int = 255,
    src: str | None = None,
    dst: str | None = None,
    dport: int | None = None,
    sport: int = SPORT,
    src_mac: str | None = None,
    vlan: int | None = None,
    ip_options: bytes = b"",
) -> bytes:
    """A frame from p to d on session ``name``'s path unless told otherwise."""
    s = live.sess[name]
    return udp_frame(
        src_mac=src_mac or live.b.mac,
        dst_mac=live.a.mac,
        src=src or s.peer,
        dst=dst or s.local,
        sport=sport,
        dport=dport or s.dport,
        payload=payload,
        ttl=ttl,
        vlan=vlan,
        ip_options=ip_options,
    )


# --- observing ------------------------------------------------------------------


def all_drops(stats: dict) -> dict[str, int]:
    return {k: v for k, v in stats["counters"]["drop"].items() if v}


def our_finals(live: Live, pkts: list[WirePacket]) -> list[WirePacket]:
    ours = {s.local for s in live.sess.values()}
    return [p for p in pkts if p.src in ours and p.sport not in (SPORT, MARKER_SPORT) and p.final]


def peer_polls(live: Live, pkts: list[WirePacket]) -> list[WirePacket]:
    theirs = {s.peer for s in live.sess.values()}
    return [p for p in pkts if p.src in theirs and p.sport not in (SPORT, MARKER_SPORT) and p.poll]


def marker_replies(live: Live, mark: int, pred: Callable[[WirePacket], bool], n: int = 1) -> list:
    return wait_until(
        lambda: (got := [p for p in live.capm.snapshot()[mark:] if pred(p)]) and len(got) >= n and got,
        timeout=3,
        what=f"{n} kernel repl(ies) to injected frames",
    )


def send_marker_poll(live: Live, name: str) -> WirePacket:
    """Inject a well-formed Poll on session ``name``; return the kernel's Final (sent to MARKER_MAC)."""
    s = live.sess[name]
    mark = len(live.capm.snapshot())
    f = frame(live, name, genuine(live, name), sport=MARKER_SPORT, src_mac=MARKER_MAC)
    send_frames(live.p, "veth-p", [f])
    return marker_replies(live, mark, lambda p: p.src == s.local and p.final)[0]


def assert_undisturbed(live: Live, before: dict, after: dict) -> None:
    for n in SESSIONS:
        s, base = live.session(after, n), live.baseline[n]
        keys = ("state", "remote_state", "flaps", "remote_discr", "local_discr", "kernel_tx_active")
        got = {k: s[k] for k in keys}
        want = {k: base[k] for k in keys}
        # The session's own (userspace) drops: nothing sent in this window reached it.
        got["drops"], want["drops"] = s["drops"], live.session(before, n)["drops"]
        # up_since is converted from the monotonic clock at each dump, rounded to
        # the millisecond: it may wobble by a millisecond or two, never by a flap.
        got["up_since"] = (
            "same" if abs(s["up_since"] - base["up_since"]) <= UP_SINCE_SLACK_S else s["up_since"]
        )
        want["up_since"] = "same"
        assert got == want, f"{n} session disturbed: {got} != {want}\nengine log:\n{live.engine.log()}"

    # Still answered by the kernel: its count moves past where it stood before the case.
    def counting(st: dict) -> bool:
        return all(
            live.session(st, n)["kernel_tx_packets"] > live.session(before, n)["kernel_tx_packets"]
            and live.session(st, n)["kernel_tx_active"]
            for n in SESSIONS
        )

    if not counting(after):
        stats_when(live, counting, "kernel TX to keep counting on every session")
    au, base = live.auth_session(after), live.auth_baseline
    keys = ("state", "remote_state", "remote_discr", "flaps", "drops", "rx_packets")
    assert {k: au[k] for k in keys} == {k: base[k] for k in keys}, f"the auth session was reached: {au}"


def assert_frr_undisturbed(live: Live) -> None:
    for n, pr in live.frr_peers().items():
        base = live.frr_baseline[n]
        got = (pr["status"], pr["id"], pr["remote-id"], pr["uptime"] >= base["uptime"])
        assert got == ("up", base["id"], base["remote-id"], True), (n, pr, base)


def stats_when(live: Live, pred: Callable[[dict], bool], what: str) -> dict:
    return wait_until(lambda: (st := live.engine.stats()) and pred(st) and st, timeout=5, what=what)


def sent_and_counted(live: Live, frames: list[bytes], base: dict, what: str) -> dict:
    """Send ``frames`` from p; the stats once XDP has passed up or held back every one since ``base``."""
    assert send_frames(live.p, "veth-p", frames) == len(frames)
    return stats_when(
        live,
        lambda st: (
            st["counters"]["xdp_pass"] + st["counters"]["pass_repeat"]
            >= base["xdp_pass"] + base["pass_repeat"] + len(frames)
        ),
        what,
    )


def passed_and_held(c0: dict, c1: dict) -> tuple[int, int]:
    """How many went up (``xdp_pass``) and how many XDP held back as repeats (``pass_repeat``)."""
    return c1["xdp_pass"] - c0["xdp_pass"], c1["pass_repeat"] - c0["pass_repeat"]


# --- accept cases: the positive controls ----------------------------------------


@pytest.mark.parametrize("name", SESSIONS)
@undisturbed_window
def test_poll_is_answered_with_final_by_the_kernel(live, timing, name):
    """A Poll copied from FRR's steady packet is answered at once, in XDP, with a Final."""
    s = live.sess[name]
    # The multihop one arrives at exactly the session's minimum TTL: accepted.
    ttl = MIN_TTL if s.multihop else 255
    before = live.engine.stats()
    mark = len(live.capm.snapshot())
    poll = genuine(live, name)
    send_frames(live.p, "veth-p", [frame(live, name, poll, ttl=ttl, sport=MARKER_SPORT, src_mac=MARKER_MAC)])
    # The Final; a periodic packet from the kernel clock may follow it to the marker MAC (the
    # clock sends where the last valid packet came from) until FRR's next packet.
    final = marker_replies(live, mark, lambda p: p.src == s.local and p.final)[0]
    after = stats_when(
        live,
        lambda st: (
            live.session(st, name)["kernel_tx_packets"] > live.session(before, name)["kernel_tx_packets"]
        ),
        "the session's kernel TX count to move",
    )

    assert (final.src, final.dst, final.sport, final.dport) == (
        s.local,
        s.peer,
        live.our_sport[name],
        s.dport,
    )
    assert final.ttl == 255 and final.udp_csum_ok is True, final
    assert (final.state, final.final, final.poll) == ("up", True, False), final
    assert (final.my_discr, final.your_discr) == (
        live.baseline[name]["local_discr"],
        live.steady[name].my_discr,
    )
    assert (final.desired_min_tx_us, final.required_min_rx_us) == (INTERVAL_MS * 1000, INTERVAL_MS * 1000)
    assert len(final.payload) == 24 and final.length == 24
    assert after["counters"]["xdp_tx"] > before["counters"]["xdp_tx"]
    assert all_drops(after) == all_drops(before), "a genuine Poll was dropped"
    assert after["counters"]["xdp_pass"] == before["counters"]["xdp_pass"]
    # The engine learned of the Poll from the ring buffer and sent nothing itself.
    assert live.session(after, name)["user_tx_packets"] == live.session(before, name)["user_tx_packets"]
    assert_undisturbed(live, before, after)


@pytest.mark.parametrize("name", SESSIONS)
@undisturbed_window
def test_steady_copy_is_answered_by_the_kernel(live, timing, name):
    """FRR's own steady packet, copied and injected, is answered by XDP_TX.

    The fast path never answers faster than 0.75 x the interval, and FRR's own
    packets are answered too, so one injected copy is either answered or skipped
    as early (``tx_early``): send one at a time until one is answered (bounded).
    A copy also teaches the transmit clock (tick.c) the marker's address, so the
    clock's next send reaches the marker capture as well: a copy counts as
    answered only when ``xdp_tx`` moved with the capture, and one that moved
    neither counter within 3 s (only the clock sent) is followed by another.
    """
    s = live.sess[name]
    payload = live.steady[name].payload
    f = frame(live, name, payload, sport=live.steady[name].sport, src_mac=MARKER_MAC)
    before = live.engine.stats()
    mark = len(live.capm.snapshot())
    sent = 0
    answered = False
    for _ in range(100):  # about 1 in 8 copies lands late enough to be answered
        c = live.engine.stats()["counters"]
        early, xdp_tx, seen = c["tx_early"], c["xdp_tx"], len(live.capm.snapshot())
        sent += send_frames(live.p, "veth-p", [f])

        def outcome(early: int = early, xdp_tx: int = xdp_tx, seen: int = seen) -> str | None:
            # A frame to the marker alone is not XDP's answer: the copy also taught the transmit
            # clock (tick.c) the marker's address (rx_eth), so the clock's next send goes there too.
            c = live.engine.stats()["counters"]
            if c["xdp_tx"] > xdp_tx and len(live.capm.snapshot()) > seen:
                return "answered"
            return "early" if c["tx_early"] > early else None

        with contextlib.suppress(WaitTimeout):  # the clock's send, and nothing of ours: another copy
            got = wait_until(outcome, timeout=3, what="the injected copy answered or skipped")
            answered = got == "answered"
        if answered:
            break
    assert answered, f"none of {sent} copies was answered by XDP_TX"
    replies = marker_replies(live, mark, lambda p: True)
    after = live.engine.stats()
    print(f"\n{name}: answered after {sent} cop(ies)")
    # Not bounded by the copies sent: the clock's sends to the marker are among them.
    assert len(replies) >= 1
    for r in replies:
        assert (r.src, r.dst, r.sport, r.dport) == (s.local, s.peer, live.our_sport[name], s.dport), r
        assert r.ttl == 255 and r.udp_csum_ok is True, r
        assert (r.state, r.poll, r.final) == ("up", False, False), r
        assert (r.my_discr, r.your_discr) == (live.baseline[name]["local_discr"], live.steady[name].my_discr)
    assert after["counters"]["xdp_tx"] > before["counters"]["xdp_tx"]
    assert all_drops(after) == all_drops(before)
    assert after["counters"]["xdp_pass"] == before["counters"]["xdp_pass"]
    assert_undisturbed(live, before, after)


@pytest.mark.parametrize("name", SESSIONS)
@undisturbed_window
def test_repeats_of_a_packet_passed_up_are_dropped_in_xdp(live, timing, name):
    """A packet for the engine's socket goes up once; its repeats within the hold die in XDP.

    FRR's steady packet with F and without P (a Final nobody asked for: not
    steady, so it goes to the engine, which ignores it). ``N`` copies back to
    back: one ``xdp_pass``, ``N - 1`` ``pass_repeat``. Once the hold
    (BFD_PASS_HOLD_NS) is over, one more copy goes up again.
    """
    hold_s = abi.load().constants["BFD_PASS_HOLD_NS"] / 1e9
    f = frame(live, name, genuine(live, name, flags="F"), sport=live.steady[name].sport)
    before = live.engine.stats()
    c0 = before["counters"]
    t0 = time.monotonic()
    after = sent_and_counted(live, [f] * N, c0, f"{N} copies passed or dropped as repeats")
    sent_in = time.monotonic() - t0
    c1 = after["counters"]
    assert sent_in < hold_s, f"the check itself took {sent_in:.3f} s, longer than the hold"
    assert passed_and_held(c0, c1) == (1, N - 1)
    assert all_drops(after) == all_drops(before), "a repeat is not a reject"
    # The hold is over (a deadline, not a guess): the next copy goes up again.
    wait_until(lambda: time.monotonic() - t0 > hold_s * 1.2, timeout=hold_s * 2, what="the hold to pass")
    assert send_frames(live.p, "veth-p", [f]) == 1
    again = stats_when(
        live, lambda st: st["counters"]["xdp_pass"] > c1["xdp_pass"], "the copy after the hold"
    )
    assert again["counters"]["pass_repeat"] == c1["pass_repeat"]
    assert_undisturbed(live, before, again)


@undisturbed_window
def test_repeats_to_a_down_session_are_held_but_its_finals_are_not(live, timing):
    """A session the kernel does not watch (Down) hears a peer's repeats once per idle hold, every Final.

    At bring-up a Down session whose peer still says Up used to pass every
    packet of the peer's fast rate to the engine. ``N`` copies of an Up packet
    naming the Down session (which ignores Up, §6.8.6, but learns the peer's
    discriminator from it): one ``xdp_pass``, ``N - 1`` ``pass_repeat``. Then
    ``N`` copies of the same packet with F: each goes up (the session times our
    Poll's answer itself), no ``pass_repeat``.
    """
    hold_s = abi.load().constants["BFD_PASS_HOLD_IDLE_NS"] / 1e9
    dn = live.down_baseline
    theirs = 0x0D0E0A0D
    up = bfd_control(state="up", my_discr=theirs, your_discr=dn["local_discr"])
    fin = bfd_control(state="up", flags="F", my_discr=theirs, your_discr=dn["local_discr"])
    plain, final = (frame(live, "v4", x, src=DOWN_PEER, sport=MARKER_SPORT) for x in (up, fin))
    before = live.engine.stats()
    c0 = before["counters"]
    t0 = time.monotonic()
    c1 = sent_and_counted(live, [plain] * N, c0, f"{N} Up copies passed or held")["counters"]
    assert passed_and_held(c0, c1) == (1, N - 1)
    # The copy that went up reached the session: it learned the discriminator and stayed Down.
    got = wait_until(
        lambda: (st := live.engine.stats()) and live.down_session(st)["remote_discr"] == theirs and st,
        timeout=5,
        what="the Down session to learn the peer's discriminator",
    )
    assert (live.down_session(got)["state"], live.down_session(got)["flaps"]) == ("down", dn["flaps"])
    after = sent_and_counted(live, [final] * N, c1, f"{N} Finals passed up or held")
    c2 = after["counters"]
    assert time.monotonic() - t0 < hold_s, "the check took longer than the hold: the counts prove nothing"
    assert passed_and_held(c1, c2) == (N, 0)
    assert all_drops(after) == all_drops(before), "a held repeat is not a reject"
    assert_undisturbed(live, before, after)


@pytest.mark.parametrize("name", SESSIONS)
@undisturbed_window
def test_repeats_of_a_poll_are_each_answered_and_reported_once(live, timing, name):
    """A Poll XDP answers is reported to the engine once per hold, but every copy gets its Final.

    A peer repeats its Poll at its own rate until our Final reaches it; at
    bring-up a thousand sessions do so at once. ``N`` copies back to back:
    ``N`` Finals on the wire, ``N - 1`` ``poll_repeat`` (one event), nothing
    passed up and nothing counted as a reject.
    """
    s = live.sess[name]
    f = frame(live, name, genuine(live, name), sport=MARKER_SPORT, src_mac=MARKER_MAC)
    before = live.engine.stats()
    c0 = before["counters"]
    mark = len(live.capm.snapshot())
    assert send_frames(live.p, "veth-p", [f] * N) == N
    finals = marker_replies(live, mark, lambda p: p.src == s.local and p.final, n=N)
    after = stats_when(
        live, lambda st: st["counters"]["poll_repeat"] >= c0["poll_repeat"] + N - 1, "the repeats counted"
    )
    c1 = after["counters"]
    assert len(finals) == N
    assert c1["poll_repeat"] - c0["poll_repeat"] == N - 1
    assert c1["xdp_pass"] == c0["xdp_pass"]
    assert all_drops(after) == all_drops(before), "a repeated Poll is not a reject"
    assert_undisturbed(live, before, after)


@undisturbed_window
def test_back_to_back_copies_are_rate_limited(live, timing):
    """RFC 5880 §6.8.7: five copies in a burst get at most one reply; the rest count ``tx_early``."""
    s = live.sess["v4"]
    f = frame(live, "v4", live.steady["v4"].payload, sport=live.steady["v4"].sport, src_mac=MARKER_MAC)
    before = live.engine.stats()
    mark = len(live.capm.snapshot())
    sent = send_frames(live.p, "veth-p", [f] * 5)
    # Every copy is either answered or skipped; FRR's packets can only add to tx_early.
    after = stats_when(
        live,
        lambda st: (
            len(live.capm.snapshot()[mark:]) + st["counters"]["tx_early"] - before["counters"]["tx_early"]
            >= sent
        ),
        "all 5 copies answered or skipped",
    )
    replies = live.capm.snapshot()[mark:]
    early = after["counters"]["tx_early"] - before["counters"]["tx_early"]
    print(f"\nburst of {sent}: {len(replies)} answered, tx_early +{early}")
    assert len(replies) <= 1, replies
    assert early >= sent - len(replies)
    assert all(r.src == s.local and r.dst == s.peer and r.ttl == 255 for r in replies), replies
    assert all_drops(after) == all_drops(before)
    assert after["counters"]["xdp_pass"] == before["counters"]["xdp_pass"]
    assert_undisturbed(live, before, after)


@pytest.mark.parametrize("name", ["v4", "v6"])
@undisturbed_window
def test_echo_is_reflected_in_xdp(live, timing, name):
    """FRR's echo forms: IPv4 addressed to the sender itself, IPv6 addressed to us."""
    s = live.sess[name]
    # IPv4 echo travels src = dst = the sender; IPv6 comes to our address and goes back swapped.
    dst = s.local if s.v6 else s.peer
    payload = echo_payload(7 if s.v6 else 4)
    before = live.engine.stats()
    mark = len(live.capm.snapshot())
    f = frame(live, name, payload, dst=dst, dport=3785, sport=MARKER_SPORT, src_mac=MARKER_MAC)
    send_frames(live.p, "veth-p", [f])
    (back,) = marker_replies(live, mark, lambda p: True)
    after = stats_when(
        live, lambda st: st["counters"]["echo_tx"] > before["counters"]["echo_tx"], "echo_tx to move"
    )
    want_src, want_dst = (s.local, s.peer) if s.v6 else (s.peer, s.peer)
    assert (back.src, back.dst, back.sport, back.dport) == (want_src, want_dst, MARKER_SPORT, 3785), back
    assert back.payload == payload and back.ttl == 255 and back.udp_csum_ok is True, back
    # Nothing else sends echo here (FRR's echo mode is off): the count is ours alone.
    assert after["counters"]["echo_tx"] == before["counters"]["echo_tx"] + 1
    reflected = {
        n: live.session(after, n)["echo_reflected"] - live.session(before, n)["echo_reflected"]
        for n in SESSIONS
    }
    assert reflected == {n: int(n == name) for n in SESSIONS}, reflected
    assert all_drops(after) == all_drops(before)
    assert after["counters"]["xdp_pass"] == before["counters"]["xdp_pass"]
    assert_undisturbed(live, before, after)


@undisturbed_window
def test_vlan_tagged_poll_is_parsed_and_answered_with_its_tag(live, timing):
    """One 802.1Q tag: the parser looks past it, and the reply keeps it."""
    s = live.sess["v4"]
    before = live.engine.stats()
    mark = len(live.capm.snapshot())
    f = frame(live, "v4", genuine(live, "v4"), vlan=42, sport=MARKER_SPORT, src_mac=MARKER_MAC)
    send_frames(live.p, "veth-p", [f])
    # The Final; the kernel clock's next periodic packet may follow it to the marker MAC (the clock
    # sends where the last valid packet came from, untagged: docs/limitations.md) until FRR's next.
    final = marker_replies(live, mark, lambda p: p.src == s.local and p.final)[0]
    after = live.engine.stats()
    assert (final.vlan, final.src, final.dst, final.final, final.ttl) == (42, s.local, s.peer, True, 255), (
        final
    )
    assert final.udp_csum_ok is True
    assert all_drops(after) == all_drops(before)
    assert after["counters"]["xdp_pass"] == before["counters"]["xdp_pass"]
    assert_undisturbed(live, before, after)


# --- reject cases ---------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    reason: str
    session: str  # whose marker Poll follows (and, by default, whose path the frames take)
    build: Callable[[Live, Ctx], bytes]


def _family_cases(fam: str) -> list[Case]:
    other = "v6" if fam == "v4" else "v4"

    def g(**over: object) -> Callable[[Live, Ctx], bytes]:
        return lambda lv, c: frame(lv, fam, genuine(lv, fam, **over))

    stranger = STRANGER6 if fam == "v6" else STRANGER4
    return [
        Case(f"{fam}_ttl_254", "ttl", fam, lambda lv, c: frame(lv, fam, genuine(lv, fam), ttl=254)),
        Case(f"{fam}_ttl_1", "ttl", fam, lambda lv, c: frame(lv, fam, genuine(lv, fam), ttl=1)),
        Case(f"{fam}_version_0", "version", fam, g(version=0)),
        Case(f"{fam}_version_2", "version", fam, g(version=2)),
        Case(f"{fam}_version_7", "version", fam, g(version=7)),
        Case(f"{fam}_payload_20_bytes", "short", fam, lambda lv, c: frame(lv, fam, genuine(lv, fam)[:20])),
        Case(f"{fam}_payload_empty", "short", fam, lambda lv, c: frame(lv, fam, b"")),
        Case(
            f"{fam}_udp_length_beyond_frame",
            "short",
            fam,
            lambda lv, c: with_udp_len(frame(lv, fam, genuine(lv, fam)), 8 + 40),
        ),
        Case(f"{fam}_length_field_20", "length", fam, g(length=20)),
        Case(f"{fam}_length_field_beyond_payload", "length", fam, g(length=30)),
        Case(
            f"{fam}_length_24_with_a_bit",
            "length",
            fam,
            g(flags="PA", auth=auth_simple(1, b"secret"), length=24),
        ),
        Case(f"{fam}_detect_mult_0", "detect_mult", fam, g(detect_mult=0)),
        Case(f"{fam}_m_bit", "multipoint", fam, g(flags="PM")),
        Case(f"{fam}_my_discr_0", "my_discr", fam, g(my_discr=0)),
        Case(
            f"{fam}_your_discr_unknown",
            "your_discr",
            fam,
            lambda lv, c: frame(lv, fam, genuine(lv, fam, your_discr=c.unknown)),
        ),
        Case(
            f"{fam}_your_discr_names_the_slot_not_the_session",
            "your_discr",
            fam,
            lambda lv, c: frame(lv, fam, genuine(lv, fam, your_discr=c.near[fam])),
        ),
        Case(f"{fam}_your_discr_0_state_up", "your_discr_zero", fam, g(your_discr=0)),
        Case(f"{fam}_your_discr_0_state_init", "your_discr_zero", fam, g(your_discr=0, state="init")),
        Case(
            f"{fam}_no_session_for_source",
            "no_session",
            fam,
            lambda lv, c: frame(lv, fam, genuine(lv, fam, your_discr=0, state="down"), src=stranger),
        ),
        Case(
            f"{fam}_known_discr_from_stranger",
            "path",
            fam,
            lambda lv, c: frame(lv, fam, genuine(lv, fam), src=stranger),
        ),
        Case(
            f"{fam}_discr_of_the_{other}_session",
            "path",
            fam,
            lambda lv, c: frame(lv, fam, genuine(lv, fam, your_discr=c.local[other])),
        ),
        Case(
            f"{fam}_singlehop_discr_on_4784",
            "path",
            fam,
            lambda lv, c: frame(lv, fam, genuine(lv, fam), dport=4784),
        ),
        Case(
            f"{fam}_a_bit_without_auth",
            "auth_unexpected",
            fam,
            g(flags="PA", auth=auth_simple(1, b"secret")),
        ),
        Case(
            f"{fam}_echo_from_stranger",
            "echo_unknown",
            fam,
            # FRR's forms: IPv4 self-addressed, IPv6 to us.
            lambda lv, c: frame(
                lv, fam, echo_payload(1), src=stranger, dst=None if fam == "v6" else stranger, dport=3785
            ),
        ),
        Case(
            f"{fam}_vlan_ttl_254",
            "ttl",
            fam,
            lambda lv, c: frame(lv, fam, genuine(lv, fam), ttl=254, vlan=42),
        ),
        Case(
            f"{fam}_vlan_version_7",
            "version",
            fam,
            lambda lv, c: frame(lv, fam, genuine(lv, fam, version=7), vlan=42),
        ),
    ]


CASES = [
    *_family_cases("v4"),
    *_family_cases("v6"),
    *(
        Case(
            f"v4_ip_options_to_{port}",
            "ip_options",
            "v4",
            lambda lv, c, port=port: frame(lv, "v4", genuine(lv, "v4"), dport=port, ip_options=ip_nops(4)),
        )
        for port in (3784, 4784, 3785)
    ),
    *(
        Case(
            f"v4_first_fragment_to_{port}",
            "fragment",
            "v4",
            lambda lv, c, port=port: with_ipv4_frag(frame(lv, "v4", genuine(lv, "v4"), dport=port), 0x2000),
        )
        for port in (3784, 4784, 3785)
    ),
    # The engine-only session with authentication: its path, no A bit.
    Case(
        "auth_session_a_bit_clear_down",
        "auth_missing",
        "v4",
        lambda lv, c: frame(
            lv, "v4", bfd_control(state="down", my_discr=0x0BADF00D, your_discr=0), src=AUTH_PEER
        ),
    ),
    Case(
        "auth_session_a_bit_clear_its_discr",
        "auth_missing",
        "v4",
        lambda lv, c: frame(
            lv, "v4", bfd_control(state="init", my_discr=0x0BADF00D, your_discr=c.auth_local), src=AUTH_PEER
        ),
    ),
    Case("mh_ttl_200", "min_ttl", "mh", lambda lv, c: frame(lv, "mh", genuine(lv, "mh"), ttl=200)),
    Case("mh_ttl_253", "min_ttl", "mh", lambda lv, c: frame(lv, "mh", genuine(lv, "mh"), ttl=MIN_TTL - 1)),
    Case(
        "mh_discr_on_3784",
        "path",
        "mh",
        lambda lv, c: frame(lv, "mh", genuine(lv, "mh"), dport=3784),
    ),
    Case(
        "mh_your_discr_unknown",
        "your_discr",
        "mh",
        lambda lv, c: frame(lv, "mh", genuine(lv, "mh", your_discr=c.unknown), ttl=200),
    ),
    Case(
        "mh_a_bit_without_auth",
        "auth_unexpected",
        "mh",
        lambda lv, c: frame(lv, "mh", genuine(lv, "mh", flags="PA", auth=auth_simple(1, b"secret"))),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@undisturbed_window
def test_rejected_in_xdp_and_counted(live, timing, case):
    ctx = ctx_of(live)
    f = case.build(live, ctx)
    before = live.engine.stats()
    mark = len(live.cap.snapshot())

    assert send_frames(live.p, "veth-p", [f] * N) == N
    # The frames left p as built (the capture decodes them independently).
    on_wire = wait_until(
        lambda: (
            (got := [p for p in live.cap.snapshot()[mark:] if p.sport == SPORT]) and len(got) >= N and got
        ),
        timeout=3,
        what=f"{N} injected frames on the wire",
    )
    assert len(on_wire) == N, on_wire

    base = before["counters"]["drop"].get(case.reason, 0)
    after = stats_when(
        live,
        lambda st: st["counters"]["drop"].get(case.reason, 0) >= base + N,
        f"drop counter {case.reason!r} to reach {base + N}",
    )
    want = Counter(all_drops(before))
    want[case.reason] += N
    assert all_drops(after) == dict(want), "drop counters moved other than by exactly N"
    assert after["counters"]["xdp_pass"] == before["counters"]["xdp_pass"], "a rejected frame was passed up"
    assert after["counters"]["echo_tx"] == before["counters"]["echo_tx"]
    assert_undisturbed(live, before, after)

    # Nothing was acted on: the marker's Final is the only one since the case began.
    send_marker_poll(live, case.session)
    new = live.cap.snapshot()[mark:]
    finals, polls = our_finals(live, new), peer_polls(live, new)
    assert len(finals) == 1 + len(polls), f"a rejected frame was answered: {finals}"
    assert_frr_undisturbed(live)


def test_ip_options_frame_is_what_it_claims():
    """The IPv4 options frame really has IHL 6 (4 NOPs) and a valid header checksum."""
    f = udp_frame(
        src_mac="02:00:00:00:00:01",
        dst_mac="02:00:00:00:00:02",
        src=STRANGER4,
        dst=MH_LOCAL,
        sport=SPORT,
        dport=3784,
        payload=bytes(24),
        ip_options=ip_nops(4),
    )
    assert f[14] == 0x46 and f[14 + 20 : 14 + 24] == ip_nops(4)
    assert ip_checksum(f[14:38]) == 0
    assert struct.unpack_from("!H", f, 16)[0] == 24 + 8 + 24
    frag = with_ipv4_frag(f, 0x2000)
    assert frag[20] == 0x20 and ip_checksum(frag[14:38]) == 0


# --- bad input ------------------------------------------------------------------


def kernel_table(live: Live) -> KernelTable:
    """What the fixture configured, as the oracle's table."""
    t = KernelTable(live.ifindex)
    entries = [(live.baseline[n]["local_discr"], s, False) for n, s in live.sess.items()]
    entries.append((live.auth_baseline["local_discr"], Sess("au", str(live.a.ip4), AUTH_PEER, False), True))
    entries.append((live.down_baseline["local_discr"], Sess("dn", str(live.a.ip4), DOWN_PEER, False), False))
    for discr, s, auth in entries:
        t.add_session(
            discr, s.local, s.peer, multihop=s.multihop, min_ttl=MIN_TTL if s.multihop else 255, auth=auth
        )
    return t


def bad_input(live: Live, rng: random.Random) -> list[bytes]:
    """Random, mutated, truncated and oversized frames; none the model would let through."""
    out: list[bytes] = []
    t = kernel_table(live)
    unknown = ctx_of(live).unknown
    while len(out) < FUZZ_RANDOM:
        name = rng.choice(SESSIONS)
        s = live.sess[name]
        if rng.random() < 0.35:
            n = rng.choice((0, 1, 2, 8, 16, 23, 24, 24, 25, 26, 30, 48, 64, rng.randrange(1, 200)))
            payload = rng.randbytes(n)
        else:
            # A genuine steady packet with a change or two: reaches the deeper checks.
            buf = bytearray(live.steady[rng.choice(SESSIONS)].payload)
            for _ in range(rng.randrange(1, 3)):
                mutate_control(buf, rng, unknown)
            payload = bytes(buf[: rng.choice((24, 24, 24, 24, 20, 1, 26, 40))])
        port = rng.choice((s.dport, s.dport, s.dport, 3784 + 4784 - s.dport, 3785))
        # Echo only from the stranger: an echo reflected to the peer's address would go to FRR.
        src = s.stranger if port == 3785 or rng.random() < 0.15 else s.peer
        ttl = rng.choice((255, 255, 255, 255, 254, MIN_TTL - 1, 200, 1))
        vlan = 7 if rng.random() < 0.1 else None
        opts = ip_nops(4 * rng.randrange(1, 4)) if not s.v6 and rng.random() < 0.05 else b""
        f = frame(
            live, name, payload, src=src, dport=port, ttl=ttl, vlan=vlan, ip_options=opts, src_mac=FUZZ_MAC
        )
        if not s.v6 and rng.random() < 0.05:
            f = with_ipv4_frag(f, 0x2000)
        if kernel_verdict(f, t) not in ("accepted", "echo_tx"):
            out.append(f)
    for name in ("v4", "v6"):
        # Truncated: cut inside the Ethernet header's tag, the IP header, the UDP header,
        # and (counted: the UDP header is whole) short of the UDP Length.
        whole = frame(live, name, genuine(live, name), src_mac=FUZZ_MAC)
        tagged = frame(live, name, genuine(live, name), vlan=7, src_mac=FUZZ_MAC)
        l4 = 14 + (40 if name == "v6" else 20)
        out += [whole[:cut] for cut in (14, 16, 14 + 10, l4 - 1, l4, l4 + 4, l4 + 7, l4 + 8, l4 + 8 + 12)]
        out += [tagged[:17], tagged[: l4 + 4 + 6]]
    # IPv4 non-first fragments: no UDP header to match on, left to the stack (which never completes them).
    v4 = frame(live, "v4", genuine(live, "v4"), src_mac=FUZZ_MAC)
    out += [with_ipv4_frag(v4, frag) for frag in (0x0003, 0x2003)]
    # Oversized: 1400 bytes of BFD payload around lying lengths.
    big = bytes(1400 - 24)
    for name in SESSIONS:
        out += [
            frame(live, name, payload, src_mac=FUZZ_MAC)
            for payload in (
                genuine(live, name, length=20) + big,  # length
                genuine(live, name, version=2) + big,  # version
                genuine(live, name, flags="PA", length=255) + big,  # auth_unexpected
                rng.randbytes(1400),
            )
        ]
        # short: the UDP Length claims more than the frame holds
        out.append(with_udp_len(frame(live, name, genuine(live, name) + big, src_mac=FUZZ_MAC), 8 + 1500))
    return out


def pcap_records(path: Path) -> int:
    """Frames in a pcap file, whatever they hold (the harness decoder skips the truncated ones)."""
    data = path.read_bytes() if path.exists() else b""
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    n, off = 0, 24
    while off + 16 <= len(data):
        incl = struct.unpack_from(endian + "I", data, off + 8)[0]
        off += 16 + incl
        n += 1
    return n


@undisturbed_window
def test_bad_input_is_all_dropped_in_xdp(live, timing, tmp_path):
    """Seeded garbage on every BFD port: each frame is charged exactly where the rules say.

    The frames come from FUZZ_MAC, so a capture on veth-d (which sees only what
    XDP passes to the stack) counts exactly the frames that got past XDP, and a
    capture in p on ``ether dst FUZZ_MAC`` exactly those XDP answered.
    """
    rng = random.Random(FUZZ_SEED)
    frames = bad_input(live, rng)
    t = kernel_table(live)
    verdicts = [kernel_verdict(f, t) for f in frames]
    assert "accepted" not in verdicts and "echo_tx" not in verdicts
    want = Counter(v for v in verdicts if v is not None)
    untouched = verdicts.count(None)
    # Of those, a frame whose 802.1Q tag itself is cut short is freed by the kernel's
    # VLAN untagging right after XDP, before any tap could see it.
    tag_cut = sum(
        1
        for f, v in zip(frames, verdicts, strict=True)
        if v is None and f[12:14] == b"\x81\x00" and len(f) < 18
    )
    visible = untouched - tag_cut
    print(f"\n{len(frames)} frames (seed {FUZZ_SEED:#x}): {dict(sorted(want.items()))}, {untouched} not BFD")
    assert untouched >= 10 and len(want) >= 12, "the generator lost its variety"

    with contextlib.ExitStack() as stack:
        passed = stack.enter_context(Capture(live.d, "veth-d", tmp_path / "d.pcap", f"ether src {FUZZ_MAC}"))
        answered = stack.enter_context(
            Capture(live.p, "veth-p", tmp_path / "p.pcap", f"ether dst {FUZZ_MAC}")
        )
        before = live.engine.stats()
        mark = len(live.cap.snapshot())
        for i in range(0, len(frames), 50):
            send_frames(live.p, "veth-p", frames[i : i + 50])
        total = sum(want.values())

        def dropped(st: dict) -> int:
            return sum(all_drops(st).values()) - sum(all_drops(before).values())

        after = stats_when(live, lambda st: dropped(st) >= total, f"{total} kernel drops")
        # Witness for the untouched ones: they reached d's stack, which drops them itself.
        wait_until(
            lambda: pcap_records(passed.path) >= visible,
            timeout=3,
            what=f"{visible} untouched frames in d's stack",
        )
        send_marker_poll(live, "v4")  # processed after every bad frame: both captures are complete
    assert pcap_records(passed.path) == visible, "XDP passed more than the frames that are not BFD"
    assert pcap_records(answered.path) == 0, "XDP answered a bad frame"
    expected = Counter(all_drops(before))
    expected.update(want)
    assert all_drops(after) == dict(expected), "drops differ from the rules' verdicts"
    assert after["counters"]["xdp_pass"] == before["counters"]["xdp_pass"], "garbage was passed to the engine"
    assert after["counters"]["echo_tx"] == before["counters"]["echo_tx"]
    assert_undisturbed(live, before, after)
    new = live.cap.snapshot()[mark:]
    assert len(our_finals(live, new)) == 1 + len(peer_polls(live, new))
    assert_frr_undisturbed(live)
    assert live.engine.proc is not None and live.engine.proc.poll() is None


def test_live_sessions_survived_everything(live):
    """Run last: the sessions stayed Up throughout, on both ends, and the engine is healthy."""
    st = live.engine.stats()
    for n in SESSIONS:
        s, base = live.session(st, n), live.baseline[n]
        # 0 flaps, unless a stalled witness excused one (printed below).
        assert (s["state"], s["flaps"], s["remote_discr"], s["kernel_tx_active"]) == (
            "up",
            base["flaps"],
            base["remote_discr"],
            True,
        )
    assert_frr_undisturbed(live)
    assert live.frr_counters() == live.frr_counts, (live.frr_counters(), live.frr_counts, live.excused)
    if live.excused:
        print("\nflaps excused by a stalled witness: " + "; ".join(live.excused))
    log = live.engine.log()
    assert "Traceback" not in log and "internal error" not in log, log
    assert live.engine.proc is not None and live.engine.proc.poll() is None


@pytest.mark.parametrize("ext", ["hop_by_hop", "atomic_fragment"])
def test_v6_extension_header_does_not_bypass_the_fast_path(live, ext):
    """A BFD packet behind an IPv6 extension header dies in XDP, like IPv4 options.

    Last in the module: were it to regress, these frames would reach the v6
    session (its own ``drops`` move), which the other tests would rightly call
    a disturbance.
    """
    s = live.sess["v6"]
    hdr = IPv6ExtHdrHopByHop() if ext == "hop_by_hop" else IPv6ExtHdrFragment(m=0, offset=0, id=0xBFD)
    f = bytes(
        Ether(src=live.b.mac, dst=live.a.mac)
        / IPv6(src=s.peer, dst=s.local, hlim=254, tc=0xC0)
        / hdr
        / UDP(sport=SPORT, dport=3784)
        / Raw(genuine(live, "v6"))
    )
    before = live.engine.stats()
    total = sum(all_drops(before).values())
    assert send_frames(live.p, "veth-p", [f] * N) == N
    # Witness: the frames are dropped, by XDP under the extension header's reason.
    after = stats_when(
        live, lambda st: sum(all_drops(st).values()) >= total + N, f"{N} more drops of any reason"
    )
    assert live.session(after, "v6")["drops"] == live.session(before, "v6")["drops"], (
        "the frames reached the engine's socket"
    )
    assert after["counters"]["xdp_pass"] == before["counters"]["xdp_pass"]
    reason = "ip_options" if ext == "hop_by_hop" else "fragment"
    assert after["counters"]["xdp_drop"][reason] - before["counters"]["xdp_drop"][reason] == N
