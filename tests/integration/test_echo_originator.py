"""The echo originator (RFC 5880 §6.4) against real FRR peers, 8.4 and 10.3, both families.

The engine (``--kernel-tx``) sends its own echo to the peer's MAC, addressed to
itself; the peer's kernel forwards it back; XDP stamps the return and drops it.
Wire truth from a capture on the peer's side: every probe the peer did not
send back is one the engine counts lost, and no other. Echo is advisory: with
the peer's forwarding off the loss climbs and the control sessions stay Up.
"""

from __future__ import annotations

import itertools
import struct
import time
from dataclasses import dataclass

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from harness.capture import Capture
from harness.engine import EngineProcess
from harness.frr import Frr, bfd_peer_block
from harness.inject import send_frames
from harness.netns import Link, Namespace
from harness.wait import wait_until

CONTROL_MS = 100  # control at 3x100 ms: the phases below last seconds under a userspace FRR
ECHO_TX_MS = 10  # what we would like
PEER_ECHO_RX_MS = 20  # what the peer allows: the interval must be this (§6.8.9)
MAGIC = b"XBFE"


@dataclass(frozen=True)
class Probe:
    discr: int
    seq: int
    gen: int
    ts: float
    ttl: int
    src: str


def probes(pkts: list, local: str) -> list[Probe]:
    """Our probes on the wire, decoded independently of the engine's codec."""
    out = []
    for p in pkts:
        if p.dport == 3785 and p.src == local and p.dst == local and p.payload[:4] == MAGIC:
            discr, seq, gen = struct.unpack_from("!III", p.payload, 4)
            out.append(Probe(discr, seq, gen, p.ts, p.ttl, p.src))
    return out


@dataclass
class Rig:
    d: Namespace
    p: Namespace
    a: Link
    b: Link
    frr: Frr
    engine: EngineProcess
    cap: Capture

    def local(self, family: str) -> str:
        return str(self.a.ip4 if family == "ipv4" else self.a.ip6)

    def peer(self, family: str) -> str:
        return str(self.b.ip4 if family == "ipv4" else self.b.ip6)

    def echo(self, family: str) -> dict:
        return self.engine.session(self.peer(family)).get("echo") or {}

    def forwarding(self, on: bool) -> None:
        self.p.sysctl("net.ipv4.ip_forward", int(on))
        self.p.sysctl("net.ipv6.conf.all.forwarding", int(on))


FAMILIES = ("ipv4", "ipv6")


@pytest.fixture(params=["frr8", "frr10"])
def rig(request, topo, frr_factory, engine_factory, capture_factory, tmp_path) -> Rig:  # noqa: PLR0917
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    root = request.getfixturevalue("trixie_root") if request.param == "frr10" else None
    frr = frr_factory(p, "p", **({"root": root} if root else {})).start()
    p.sysctl("net.ipv4.conf.all.rp_filter", 0)
    p.sysctl("net.ipv4.conf.veth-p.rp_filter", 0)
    rig = Rig(d, p, a, b, frr, None, None)  # type: ignore[arg-type]
    rig.forwarding(True)
    lines, entries = [], []
    for family in FAMILIES:
        lines += bfd_peer_block(
            rig.local(family),
            local=rig.peer(family),
            interface="veth-p",
            rx_ms=CONTROL_MS,
            tx_ms=CONTROL_MS,
            extra=(f"echo receive-interval {PEER_ECHO_RX_MS}",),
        )
        entries.append(
            f"- {{local: {rig.local(family)}, peer: {rig.peer(family)}, interface: veth-d,"
            f" min_tx_ms: {CONTROL_MS}, min_rx_ms: {CONTROL_MS}, echo_tx_ms: {ECHO_TX_MS}}}"
        )
    frr.configure(*lines)
    sessions = tmp_path / "sessions.yml"
    sessions.write_text("\n".join(entries) + "\n")
    rig.cap = capture_factory(p, "veth-p", "udp port 3785")
    rig.engine = engine_factory(d, ["--kernel-tx", "veth-d", "--sessions", str(sessions)])
    for family in FAMILIES:
        wait_until(
            lambda f=family: (frr.peer(rig.local(f)) or {}).get("status") == "up",
            timeout=30,
            what=f"{family} Up",
        )
    return rig


def _returned_all(rig: Rig, family: str, n: int) -> dict:
    def probe() -> dict | None:
        e = rig.echo(family)
        return e if e.get("returned", 0) >= n else None

    return wait_until(probe, timeout=10, what=f"{n} of our {family} echoes back")


def spacing(rig: Rig, family: str, t0: float) -> None:
    """Never faster than the peer allows (§6.8.9): each probe an interval after the last, on the wire."""
    sent = sorted(
        (q for q in probes(rig.cap.snapshot(), rig.local(family)) if q.ttl == 255 and q.ts >= t0),
        key=lambda q: q.seq,
    )
    gaps = [(b.ts - a.ts) * 1000 for a, b in itertools.pairwise(sent)]
    assert len(gaps) >= 20, gaps
    assert min(gaps) >= PEER_ECHO_RX_MS * 0.95, gaps


def _wire_lost(rig: Rig, family: str, gen: int, upto: int) -> tuple[int, int]:
    """(sent, not sent back) by the peer, for our probes 1..upto of generation ``gen``: from the capture."""
    ours = [q for q in probes(rig.cap.snapshot(), rig.local(family)) if q.gen == gen and q.seq <= upto]
    out = {q.seq for q in ours if q.ttl == 255}
    back = {q.seq for q in ours if q.ttl < 255}
    return len(out), len(out - back)


def test_our_echo_comes_back_stamped_in_xdp_and_loss_is_the_wires(rig, timing):
    before = rig.engine.stats()
    for family in FAMILIES:
        # Spacing is judged on the wire, so a stall of the machine (a frame held in a softirq
        # while the next leaves on time) could alone shorten a gap by its own length.
        with timing.window(f"echo spacing {family}", stall_ms=PEER_ECHO_RX_MS * 0.05, userspace=True):
            t0 = time.time()
            e = _returned_all(rig, family, rig.echo(family).get("returned", 0) + 25)
            spacing(rig, family, t0)
        # §6.8.9: at the slower of ours (10 ms) and the peer's Required Min Echo RX (20 ms).
        assert e["interval_ms"] == PEER_ECHO_RX_MS
        assert e["active"] and e["alive"] and e["lost"] == 0 and e["send_errors"] == 0
        assert 0 < e["rtt_us"]["min"] <= e["rtt_us"]["mean"] <= e["rtt_us"]["max"]
        assert e["rtt_us"]["min"] <= e["rtt_us"]["p99"] <= e["rtt_us"]["max"]
        ours = probes(rig.cap.snapshot(), rig.local(family))
        sent = sorted((q for q in ours if q.ttl == 255), key=lambda q: q.seq)
        assert len(sent) >= 25 and all(q.gen == sent[0].gen for q in sent)
        # Forwarded back by the peer: one hop less, same bytes.
        assert {q.seq for q in ours if q.ttl == 254} >= {q.seq for q in sent[:-2]}
    after = rig.engine.stats()
    # Returns die in XDP as a verdict of their own, and nothing reached the stack as a reject.
    assert after["counters"]["echo_rx"] > before["counters"]["echo_rx"]
    assert not after["counters"]["xdp_drop"].get("echo_unknown")
    assert after["counters"]["echo_tx"] == before["counters"]["echo_tx"]  # none of ours reflected

    # Frames that look like ours but are not: each dies with its own counter, no return counted.
    v4 = rig.local("ipv4")
    e4 = rig.echo("ipv4")
    s4 = rig.engine.session(rig.peer("ipv4"))
    good = next(q for q in probes(rig.cap.snapshot(), v4) if q.ttl == 255)
    forged = {
        # Names none of our sessions: a peer's echo then, from an address we hold no session with.
        "echo_unknown": [(s4["local_discr"] + 1000, good.gen, v4)],
        "echo_stale": [(s4["local_discr"], good.gen ^ 1, v4)],  # ours, of another generation
    }
    # Ours by discriminator but from the peer: not a return, the peer's echo, reflected to it.
    reflected = (s4["local_discr"], good.gen, rig.peer("ipv4"))
    frames = []
    for discr, gen, src in [*(x for v in forged.values() for x in v), reflected]:
        payload = MAGIC + struct.pack("!IIIQ", discr, 1, gen, 0)
        frames.append(
            bytes(
                Ether(dst=rig.a.mac, src=rig.b.mac)
                / IP(src=src, dst=v4, ttl=254)
                / UDP(sport=49152, dport=3785)
                / Raw(payload)
            )
        )
    s0 = rig.engine.stats()
    c0 = s0["counters"]["xdp_drop"]
    send_frames(rig.p, "veth-p", frames)

    def moved() -> dict | None:
        st = rig.engine.stats()
        c = st["counters"]["xdp_drop"]
        got = {k: c.get(k, 0) - c0.get(k, 0) for k in forged}
        got["echo_tx"] = st["counters"]["echo_tx"] - s0["counters"]["echo_tx"]
        return c if got == {**{k: len(v) for k, v in forged.items()}, "echo_tx": 1} else None

    wait_until(moved, timeout=5, what="each forged echo counted under its reason, the peer's reflected")
    assert rig.echo("ipv4")["lost"] == e4["lost"] == 0

    # Forwarding off at the peer: the loss climbs one for one with the probes
    # it kept, the control sessions stay Up (echo is advisory), then returns resume.
    # A stall of FRR (userspace) as long as its detection time less one interval explains a flap.
    with timing.window("echo loss, control Up", stall_ms=2 * CONTROL_MS, userspace=True):
        rig.forwarding(False)
        marks = {f: rig.echo(f) for f in FAMILIES}
        for family in FAMILIES:
            wait_until(
                lambda f=family: rig.echo(f)["lost"] >= marks[f]["lost"] + 15,
                timeout=10,
                what=f"{family} echo loss climbs",
            )
        stopped = {f: rig.echo(f) for f in FAMILIES}
        rig.forwarding(True)
        for family in FAMILIES:
            # Returns stopped: at most those already in flight when the switch went.
            assert stopped[family]["returned"] <= marks[family]["returned"] + 2
            e = stopped[family]
            _returned_all(rig, family, e["returned"] + 10)
            e = rig.echo(family)
            judged = e["sent"] - e["pending"]
            sent, not_back = _wire_lost(rig, family, _gen(rig, family), judged)
            assert sent == judged, "the capture holds every probe the engine judged"
            assert e["lost"] == not_back >= 15
            assert e["returned"] >= judged - e["lost"]
        for family in FAMILIES:
            s = rig.engine.session(rig.peer(family))
            assert (s["state"], s["flaps"]) == ("up", 0)
            assert (rig.frr.peer(rig.local(family)) or {}).get("status") == "up"


def _gen(rig: Rig, family: str) -> int:
    ours = [q for q in probes(rig.cap.snapshot(), rig.local(family)) if q.ttl == 255]
    return ours[-1].gen
