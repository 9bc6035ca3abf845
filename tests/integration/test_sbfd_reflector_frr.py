"""FRR 10.3's S-BFD initiator against the XDP reflector (IPv6; IPv4 is not implemented in 10.3).

What FRR 10.3's sources say (docs/fastpath.md, "FRR 10.3's initiator here"):
``peer X bfd-mode sbfd-init bfd-name N local-address L remote-discr D`` runs
without SRv6 for IPv6 (raw IPv6/UDP to 7784 from 3784, or 4784 with
``multihop``, D bit set), and its IPv4 branch needs a segment list ("empty
sidlist for ipv4 bfd"). These tests hold FRR to both halves: the IPv6
initiator comes Up against the reflector and stays Up with every request
answered (captured on the initiator's link) and nothing passed to the
engine's userspace; when the reflector discriminator is removed (SIGHUP) the
initiator's session goes Down; the IPv4 initiator sends nothing to 7784 and
logs why. FRR's transmit interval cannot go below 10 ms, so this proof is at
10 ms; 3.3 ms is test_sbfd_reflector_stress.py's, with kernel-paced frames.

FRR 10.3 runs from the trixie root (harness/trixie.py). Not run at the time of
writing (the machine was reserved for a benchmark publication).
"""

from __future__ import annotations

import signal
import time

from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.utils import rdpcap

from harness.wait import wait_until

DISCR = 456
INTERVAL_MS = 10
SBFD_PORT = 7784


def _initiator(peer: str, local: str, name: str) -> list[str]:
    return [
        "bfd",
        f" peer {peer} bfd-mode sbfd-init bfd-name {name} local-address {local} remote-discr {DISCR}",
        f"  transmit-interval {INTERVAL_MS}",
        f"  receive-interval {INTERVAL_MS}",
        "  detect-multiplier 3",
        " exit",
        "exit",
    ]


def _reflector(engine) -> dict:
    st = engine.stats()
    return next(r for r in st["sbfd_reflector"]["reflectors"] if r["discr"] == DISCR) | {
        "xdp_pass": st["counters"]["xdp_pass"]
    }


def test_frr_10_3_initiator_is_up_against_the_xdp_reflector_over_ipv6(  # noqa: PLR0917  (pytest fixtures)
    topo, frr_factory, engine_factory, capture_factory, tmp_path, trixie_root
) -> None:
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    sessions = tmp_path / "sessions.yml"
    sessions.write_text(f"- {{sbfd_reflector: {DISCR}}}\n")
    engine = engine_factory(d, ["--kernel-tx", "veth-d", "--sessions", str(sessions)])
    engine.wait_log(f"sbfd: reflector answers {DISCR} in XDP (UDP {SBFD_PORT})", timeout=240)
    frr = frr_factory(p, "p", root=trixie_root).start()
    assert frr.version[:2] == (10, 3), frr.version
    peer = str(a.ip6)

    cap = capture_factory(p, "veth-p", f"ip6 and udp port {SBFD_PORT}")  # read with scapy below
    frr.configure(*_initiator(peer, str(b.ip6), "xdp-v6"))

    def up() -> dict | None:
        pr = frr.peer(peer)
        return pr if pr and pr.get("status") == "up" else None

    first = wait_until(up, timeout=30, what="FRR 10.3's S-BFD initiator Up")
    assert first.get("remote-id") == DISCR, first
    before = _reflector(engine)
    time.sleep(5)  # a steady window: 500 requests at 10 ms
    after = _reflector(engine)
    still = up()
    assert still is not None, frr.peer(peer)
    downs = next((c for c in frr.counters() if c.get("peer") == peer), {}).get("session-down", 0)
    assert downs == 0, frr.counters()
    answered = after["answered"] - before["answered"]
    assert answered >= 5 * 1000 / INTERVAL_MS * 0.8, answered  # FRR sends at its interval (jittered)
    assert after["rate_limited"] == before["rate_limited"]
    assert after["xdp_pass"] == before["xdp_pass"]  # nothing reached the engine's sockets

    cap.stop()
    pkts = rdpcap(str(cap.path))
    requests = [x for x in pkts if x.haslayer(UDP) and x[UDP].dport == SBFD_PORT]
    replies = [x for x in pkts if x.haslayer(UDP) and x[UDP].sport == SBFD_PORT]
    # Every request answered; at most the last one still in flight when the capture stopped.
    assert 0 <= len(requests) - len(replies) <= 1, (len(requests), len(replies))
    r = replies[-1]
    assert (r[IPv6].src, r[IPv6].dst, r[IPv6].hlim) == (peer, str(b.ip6), 255)
    assert r[UDP].dport == requests[-1][UDP].sport  # FRR's 3784 (4784 multihop)

    # The reflector goes away: FRR's session goes Down (its detection time, 30 ms, plus the reload).
    sessions.write_text("")
    engine.signal(signal.SIGHUP)
    wait_until(
        lambda: (frr.peer(peer) or {}).get("status") == "down", timeout=10, what="FRR's initiator Down"
    )


def test_frr_10_3_ipv4_initiator_sends_nothing_without_srv6(  # noqa: PLR0917  (pytest fixtures)
    topo, frr_factory, engine_factory, capture_factory, tmp_path, trixie_root
) -> None:
    """The finding in docs/fastpath.md, kept true: if a later FRR sends IPv4 S-BFD, this says so."""
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    engine = engine_factory(d, ["--kernel-tx", "veth-d", "--sbfd-reflector", str(DISCR)])
    engine.wait_log("bfd: serving 0 sessions with the XDP fast path", timeout=240)
    frr = frr_factory(p, "p", root=trixie_root).start()
    # On the sending side: on veth-d, generic XDP sees a frame before any capture would.
    cap = capture_factory(p, "veth-p", f"udp port {SBFD_PORT}")
    frr.configure(*_initiator(str(a.ip4), str(b.ip4), "xdp-v4"))
    wait_until(lambda: "empty sidlist for ipv4 bfd" in frr.log(), timeout=10, what="FRR's IPv4 refusal")
    time.sleep(3)
    cap.stop()
    assert [x for x in rdpcap(str(cap.path)) if x.haslayer(UDP) and x[UDP].dport == SBFD_PORT] == []
    assert (frr.peer(str(a.ip4)) or {}).get("status") != "up"
    assert _reflector(engine)["answered"] == 0
