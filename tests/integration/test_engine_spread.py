"""--spread-pass: non-BFD traffic reaches the stack through a cpumap, spread over the CPUs by flow.

Real parts: the engine's XDP program (generic mode on veth), a real FRR 8.4.4
peer keeping a 3x10 ms session Up on kernel TX, and plain UDP sockets as the
stack's consumers. Witnesses: bytes received by the sockets, the ``spread``
counter, and SO_INCOMING_CPU, which names the CPU whose stack delivered a
socket's last datagram (the cpumap thread's CPU, not the sender's).
"""

from __future__ import annotations

import contextlib
import os
import socket

import pytest
from test_fastpath_stress import DEADLINE

from harness.frr import bfd_peer_block
from harness.wait import wait_until

SO_INCOMING_CPU = 49
FLOWS = 32
PER_FLOW = 20
BASE_PORT = 47000


def _session_lab(topo, frr_factory, tmp_path):
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    # The peer under its own reservation (as in test_fastpath_stress.py): an
    # ordinary bfdd at 3x10 ms flaps by itself on a busy shared host.
    frr = frr_factory(p, "p", bfdd_prefix=DEADLINE).start()
    frr.configure(*bfd_peer_block(str(a.ip4), local=str(b.ip4), interface="veth-p", rx_ms=10, tx_ms=10))
    sessions = tmp_path / "one.yml"
    sessions.write_text(
        f"- {{local: {a.ip4}, peer: {b.ip4}, interface: veth-d, min_tx_ms: 10, min_rx_ms: 10}}\n"
    )
    return d, p, a, b, frr, ["--sessions", str(sessions), "--kernel-tx", "veth-d"]


def _send_flows(p, a, b) -> list[socket.socket]:
    """FLOWS flows (one source port each) of PER_FLOW datagrams from the peer to our address."""
    senders = []
    for i in range(FLOWS):
        s = p.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((str(b.ip4), BASE_PORT + i))
        senders.append(s)
    for _ in range(PER_FLOW):
        for i, s in enumerate(senders):
            s.sendto(b"x" * 100, (str(a.ip4), BASE_PORT + i))
    return senders


@pytest.mark.timing(stall_ms=20)  # a 3x10 ms flap: detection time less one interval
def test_spread_pass_delivers_through_the_cpumap(topo, frr_factory, engine_factory, tmp_path):
    d, p, a, b, frr, args = _session_lab(topo, frr_factory, tmp_path)
    eng = engine_factory(d, [*args, "--spread-pass"])
    line = eng.wait_log("kernel-tx: spread-pass", timeout=30)
    ncpu = len(os.sched_getaffinity(0))
    assert f"spread over {ncpu} CPUs" in line, line
    wait_until(lambda: (frr.peer(str(a.ip4)) or {}).get("status") == "up", timeout=20, what="session up")
    wait_until(lambda: eng.session(str(b.ip4))["kernel_tx_active"], timeout=10, what="kernel TX")
    before = eng.stats()
    assert before["xdp"]["spread_cpus"] == ncpu

    receivers = []
    senders: list[socket.socket] = []
    try:
        for i in range(FLOWS):
            r = d.socket(socket.AF_INET, socket.SOCK_DGRAM)
            r.bind((str(a.ip4), BASE_PORT + i))
            # Connected: the kernel records SO_INCOMING_CPU only for connected UDP sockets.
            r.connect((str(b.ip4), BASE_PORT + i))
            r.setblocking(False)
            receivers.append(r)
        senders = _send_flows(p, a, b)
        got = [0] * FLOWS
        cpus: set[int] = set()

        def drained() -> bool:
            for i, r in enumerate(receivers):
                with contextlib.suppress(BlockingIOError):
                    while True:
                        got[i] += len(r.recv(2048))
                        cpus.add(r.getsockopt(socket.SOL_SOCKET, SO_INCOMING_CPU))
            return sum(got) == FLOWS * PER_FLOW * 100

        wait_until(drained, timeout=10, what="every datagram delivered")
    finally:
        for s in receivers + senders:
            s.close()
    after = eng.stats()
    # Every datagram went through the cpumap (ARP and the like may add a few more).
    assert after["counters"]["spread"] - before["counters"]["spread"] >= FLOWS * PER_FLOW
    # Flows landed on more than one CPU's stack (the hash is fixed, so is this).
    assert -1 not in cpus and cpus <= set(os.sched_getaffinity(0)), cpus
    if ncpu > 1:
        assert len(cpus) > 1, cpus
    print(f"\n{FLOWS} flows x {PER_FLOW} datagrams delivered by the stacks of CPUs {sorted(cpus)}")
    # BFD itself never goes that way: still Up and answered by the kernel.
    s = eng.session(str(b.ip4))
    assert s["state"] == "up" and s["kernel_tx_active"]
    # Sent by the kernel (XDP's replies and the transmit clock's ticks count alike).
    sent = [d["sessions"][0]["kernel_tx_packets"] for d in (before, after)]
    assert sent[1] > sent[0], sent
    assert (frr.peer(str(a.ip4)) or {}).get("status") == "up"


@pytest.mark.timing(stall_ms=20)  # a 3x10 ms flap: detection time less one interval
def test_without_spread_pass_nothing_goes_through_the_cpumap(topo, frr_factory, engine_factory, tmp_path):
    d, p, a, _b, _frr, args = _session_lab(topo, frr_factory, tmp_path)
    eng = engine_factory(d, args)
    eng.wait_log("bfd: serving", timeout=30)
    r = d.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r.bind((str(a.ip4), BASE_PORT))
    r.settimeout(5)
    s = p.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b"y" * 100, (str(a.ip4), BASE_PORT))
        assert len(r.recv(2048)) == 100  # the witness: traffic still flows, passed untouched
    finally:
        r.close()
        s.close()
    doc = eng.stats()
    assert doc["counters"]["spread"] == 0 and doc["xdp"]["spread_cpus"] == 0
    assert "spread-pass" not in eng.log()


@pytest.mark.timing(stall_ms=20)  # a 3x10 ms flap: detection time less one interval
def test_spread_pass_survives_a_pin_takeover(topo, frr_factory, engine_factory, tmp_path, pin_dir):
    """Each program has its own cpumap: the successor fills its own before it swaps in."""
    d, p, a, b, frr, args = _session_lab(topo, frr_factory, tmp_path)
    args += ["--pin", str(pin_dir), "--spread-pass"]
    old = engine_factory(d, args)
    wait_until(lambda: (frr.peer(str(a.ip4)) or {}).get("status") == "up", timeout=20, what="session up")
    wait_until(lambda: old.session(str(b.ip4))["kernel_tx_active"], timeout=10, what="kernel TX")
    downs = next(c for c in frr.counters() if c["peer"] == str(a.ip4))["session-down"]
    new = engine_factory(d, args)
    assert old.wait_exit(timeout=20) == 75
    new.wait_log("pin: adopted 1 sessions", timeout=20)
    assert "kernel-tx: spread-pass: non-BFD traffic spread over" in new.log()
    before = new.stats()
    r = d.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r.bind((str(a.ip4), BASE_PORT))
    r.settimeout(5)
    s = p.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _ in range(PER_FLOW):
            s.sendto(b"z" * 100, (str(a.ip4), BASE_PORT))
        got = sum(len(r.recv(2048)) for _ in range(PER_FLOW))
    finally:
        r.close()
        s.close()
    assert got == PER_FLOW * 100
    after = new.stats()
    assert after["counters"]["spread"] - before["counters"]["spread"] >= PER_FLOW
    assert after["xdp"]["spread_cpus"] == len(os.sched_getaffinity(0))
    sess = new.session(str(b.ip4))
    assert sess["state"] == "up" and sess["kernel_tx_active"]
    assert next(c for c in frr.counters() if c["peer"] == str(a.ip4))["session-down"] == downs
