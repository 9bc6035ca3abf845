"""The S-BFD reflector (RFC 7880, RFC 7881) answers in XDP and nowhere else.

One engine for the module, in namespace d, ``--kernel-tx veth-d`` (generic XDP
on veth), no BFD session at all: the reflector discriminators come from the
command line (``--sbfd-reflector 456``) and from the sessions file (789, rate
limited to 50 answers a second with a burst of 5; 790, out of service:
AdminDown). The dead-man gate is off (``--deadman-us 0``) so that no accept
case depends on the engine being scheduled; the gate has a test of its own.

Every frame is built here with scapy (Ethernet, IP, UDP and ``scapy.contrib.bfd``),
not by the engine's codec, and leaves veth-p in namespace p through an
AF_PACKET socket, so it enters veth-d's XDP hook as an initiator's would. Its
source MAC is one no interface owns: XDP answers to the frame's source MAC,
so a capture on ``ether dst MARKER_MAC`` in p holds exactly the answers to
injected frames (p's stack discards them as "other host"). Replies are
decoded from that capture with scapy, field by field.

Every case also proves that nothing reached userspace or the stack: the
engine's ``xdp_pass`` (BFD frames handed to its sockets) and userspace drops
stay unchanged, and d's ``Udp.InDatagrams`` / ``Udp.NoPorts`` /
``Udp6InDatagrams`` / ``Udp6NoPorts`` do not move (nothing listens on 7784:
a frame passed up would count as NoPorts). A reject case sends ``N`` copies
and asserts that its witness counter moved by exactly ``N``, that no other
drop counter moved, and that no answer was captured.

The engine that runs is the checkout's: its log must carry the reflector's
start-up line, which no other build writes.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from scapy.contrib.bfd import BFD
from scapy.layers.inet import IP, UDP, IPOption
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import rdpcap

from harness.engine import EngineProcess
from harness.frames import ip_nops, mutate_control, with_ipv4_frag, with_udp_len
from harness.inject import send_frames
from harness.netns import Link, Namespace, Topology
from harness.wait import wait_until
from harness.xdp_oracle import KernelTable, kernel_verdict

SBFD_PORT = 7784
CLI_DISCR = 456  # --sbfd-reflector
RATE_DISCR = 789  # sessions file: rate_pps 50, burst 5
DOWN_DISCR = 790  # sessions file: state admin-down
UNKNOWN_DISCR = 4242  # no reflector has it
RATE_PPS, BURST = 50, 5
DEFAULT_MIN_RX_US = 3300  # the reflector's Required Min RX when the configuration names none
N = 3  # copies of every rejected frame
SPORT = 49152  # the initiator's source port (any but 7784, RFC 7881)
MARKER_MAC = "02:bf:d5:00:00:01"  # owned by no interface: answers to it are ours alone
INIT_DISCR = 0x0A0B0C0D  # the initiator's My Discriminator
FUZZ_SEED = 0x5EED_5BFD
FUZZ_N = 200
STACK_COUNTERS = ("Udp.InDatagrams", "Udp.NoPorts", "Udp6InDatagrams", "Udp6NoPorts")


@dataclass
class Live:
    d: Namespace
    p: Namespace
    a: Link  # veth-d: the reflector's
    b: Link  # veth-p: the initiator's
    engine: EngineProcess
    work: Path
    sessions: Path


def _sessions_text(*extra: str) -> str:
    return (
        f"- {{sbfd_reflector: {RATE_DISCR}, rate_pps: {RATE_PPS}, burst: {BURST}}}\n"
        f"- {{sbfd_reflector: {DOWN_DISCR}, state: admin-down}}\n" + "".join(extra)
    )


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    if os.geteuid() != 0:
        pytest.fail("integration tests need root (network namespaces, XDP)")
    work = tmp_path_factory.mktemp("sbfd-reflector")
    with contextlib.ExitStack() as stack:
        topo = Topology()
        stack.callback(topo.close)
        d, p = topo.namespace("d"), topo.namespace("p")
        a, b = topo.veth(d, "veth-d", p, "veth-p")
        sessions = work / "sessions.yml"
        sessions.write_text(_sessions_text())
        args = ["--sessions", str(sessions), "--kernel-tx", "veth-d", "--sbfd-reflector", str(CLI_DISCR)]
        engine = EngineProcess(d, [*args, "--deadman-us", "0", "--kernel-clock", "off"], work)
        stack.callback(engine.cleanup)
        engine.start()
        engine.wait_log("kernel-tx: XDP attached to veth-d (generic mode, ", timeout=240)
        # Only this checkout's engine writes it: the venv's installed copy would not run these tests.
        engine.wait_log(f"sbfd: reflector answers {CLI_DISCR}, {RATE_DISCR}, {DOWN_DISCR} in XDP (UDP 7784)")
        engine.wait_log("bfd: serving 0 sessions with the XDP fast path", timeout=10)
        yield Live(d, p, a, b, engine, work, sessions)


# --- frames and what came back ------------------------------------------------------


def sbfd(
    your: int = CLI_DISCR,
    *,
    my: int = INIT_DISCR,
    sta: int = 1,
    flags: str = "D",
    mult: int = 3,
    version: int = 1,
    length: int = 24,
    tx_us: int = 3300,
    tail: bytes = b"",
) -> bytes:
    """An initiator's control packet (RFC 7880: Down until its session is Up, D set as FRR's)."""
    pkt = BFD(
        version=version, diag=0, sta=sta, flags=flags, detect_mult=mult, len=length,
        my_discriminator=my, your_discriminator=your,
        min_tx_interval=tx_us, min_rx_interval=0, echo_rx_interval=0,
    )  # fmt: skip
    return bytes(pkt) + tail


def frame(
    live: Live,
    payload: bytes,
    *,
    v6: bool = False,
    sport: int = SPORT,
    dport: int = SBFD_PORT,
    ttl: int = 255,
    options: bytes = b"",
    src: str | None = None,
    dst: str | None = None,
) -> bytes:
    eth = Ether(src=MARKER_MAC, dst=live.a.mac)
    if v6:
        ip = IPv6(src=src or str(live.b.ip6), dst=dst or str(live.a.ip6), hlim=ttl)
    else:
        ip = IP(src=src or str(live.b.ip4), dst=dst or str(live.a.ip4), ttl=ttl)
        if options:
            ip.options = [IPOption(options)]
    return bytes(eth / ip / UDP(sport=sport, dport=dport) / Raw(payload))


@dataclass(frozen=True)
class Counts:
    drop: dict[str, int]  # counters.drop: the kernel's and the engine's, by reason
    xdp_drop: dict[str, int]
    sbfd_tx: int
    xdp_pass: int
    per_discr: dict[int, dict]
    stack: dict[str, int]

    def user_drops(self) -> dict[str, int]:
        return {k: v - self.xdp_drop.get(k, 0) for k, v in self.drop.items() if v - self.xdp_drop.get(k, 0)}


def counts(live: Live) -> Counts:
    doc = live.engine.stats()
    c = doc["counters"]
    per = {r["discr"]: r for r in doc["sbfd_reflector"]["reflectors"]}
    snmp = live.d.snmp()
    return Counts(
        dict(c["drop"]), dict(c["xdp_drop"]), c["sbfd_tx"], c["xdp_pass"], per,
        {k: snmp.get(k, 0) for k in STACK_COUNTERS},
    )  # fmt: skip


def captured(live: Live, name: str, frames: list[bytes], *, expect: int, settle_s: float = 0.5) -> list:
    """Send ``frames`` with a capture of the answers running; the answers, decoded by scapy."""
    path, log = live.work / f"{name}.pcap", live.work / f"{name}.tcpdump.log"
    argv = [
        "tcpdump",
        "-i",
        "veth-p",
        "-n",
        "-U",
        "--immediate-mode",
        "-w",
        str(path),
        f"ether dst {MARKER_MAC}",
    ]
    with log.open("w") as err:
        proc = live.p.popen(argv, stdout=subprocess.DEVNULL, stderr=err)
    try:
        # Only once tcpdump listens is "nothing captured" evidence of anything.
        wait_until(lambda: "listening on" in log.read_text(), timeout=10, what="tcpdump listening")
        send_frames(live.p, "veth-p", frames)
        if expect:
            wait_until(
                lambda: path.exists() and len(rdpcap(str(path))) >= expect,
                timeout=5,
                what=f"{expect} answers",
            )
        time.sleep(settle_s)  # anything more would have come by now
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
    return list(rdpcap(str(path))) if path.exists() else []


def assert_only(before: Counts, after: Counts, reason: str | None, n: int) -> None:
    """``reason`` moved by exactly ``n``, nothing else did, and nothing reached userspace or the stack."""
    moved = {
        k: after.drop.get(k, 0) - before.drop.get(k, 0)
        for k in set(after.drop) | set(before.drop)
        if after.drop.get(k, 0) != before.drop.get(k, 0)
    }
    assert moved == ({reason: n} if reason else {}), moved
    if reason:
        assert after.xdp_drop.get(reason, 0) - before.xdp_drop.get(reason, 0) == n  # died in XDP
    assert after.xdp_pass == before.xdp_pass
    assert after.user_drops() == before.user_drops()
    assert after.stack == before.stack, (before.stack, after.stack)


# --- accept ---------------------------------------------------------------------


def _check_answer(live: Live, req: bytes, ans, *, v6: bool, discr: int, state: int, diag: int, min_rx: int):
    q = Ether(req)
    qb = BFD(bytes(q[UDP].payload)[:24])
    assert ans[Ether].src == live.a.mac and ans[Ether].dst == MARKER_MAC
    if v6:
        ip = ans[IPv6]
        assert (ip.src, ip.dst, ip.hlim, ip.plen) == (str(live.a.ip6), str(live.b.ip6), 255, 32)
    else:
        ip = ans[IP]
        assert (ip.src, ip.dst, ip.ttl, ip.len, ip.ihl) == (str(live.a.ip4), str(live.b.ip4), 255, 52, 5)
        assert ip.tos == 0xC0
        redo = IP(bytes(ip))
        del redo.chksum
        assert IP(bytes(redo)).chksum == ip.chksum  # a valid header checksum
    udp = ans[UDP]
    assert (udp.sport, udp.dport, udp.len) == (SBFD_PORT, q[UDP].sport, 32)
    redo_udp = ans.copy()
    del redo_udp[UDP].chksum
    assert Ether(bytes(redo_udp))[UDP].chksum == udp.chksum  # a valid (full, not partial) UDP checksum
    raw = bytes(udp.payload)
    assert len(raw) == 24  # anything the request carried past its 24 bytes is gone
    rb = BFD(raw)
    assert (rb.version, rb.diag, rb.sta, rb.len) == (1, diag, state, 24)
    want_flags = "F" if "P" in qb.flags else ""
    assert str(rb.flags) == want_flags, (rb.flags, qb.flags)  # Poll -> Final; no P, D, C, A, M
    assert (rb.my_discriminator, rb.your_discriminator) == (discr, qb.my_discriminator)
    assert rb.detect_mult == qb.detect_mult
    assert rb.min_tx_interval == qb.min_tx_interval
    assert (rb.min_rx_interval, rb.echo_rx_interval) == (min_rx, 0)


@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
def test_an_initiator_is_answered_in_xdp(live: Live, v6: bool) -> None:
    reqs = [
        # FRR 10.3's initiator: Down, D set, from its BFD source port.
        frame(live, sbfd(sta=1, flags="D"), v6=v6, sport=3784),
        # Up with a Poll: answered with Final.
        frame(live, sbfd(sta=3, flags="P", mult=5, tx_us=10_000), v6=v6),
        # A routed initiator (TTL 64): S-BFD has no GTSM rule; padding past 24 bytes is shed.
        frame(live, sbfd(sta=3, flags="", tail=b"\0" * 16), v6=v6, ttl=64),
    ]
    before = counts(live)
    got = captured(live, f"accept-{'v6' if v6 else 'v4'}", reqs, expect=len(reqs))
    after = counts(live)
    assert len(got) == len(reqs)
    for req, ans in zip(reqs, got, strict=True):
        _check_answer(live, req, ans, v6=v6, discr=CLI_DISCR, state=3, diag=0, min_rx=DEFAULT_MIN_RX_US)
    assert after.sbfd_tx - before.sbfd_tx == len(reqs)
    assert after.per_discr[CLI_DISCR]["answered"] - before.per_discr[CLI_DISCR]["answered"] == len(reqs)
    assert_only(before, after, None, 0)


def test_a_reflector_out_of_service_answers_admin_down(live: Live) -> None:
    req = frame(live, sbfd(DOWN_DISCR, sta=3, flags="P"))
    before = counts(live)
    (ans,) = captured(live, "admin-down", [req], expect=1)
    _check_answer(live, req, ans, v6=False, discr=DOWN_DISCR, state=0, diag=7, min_rx=DEFAULT_MIN_RX_US)
    after = counts(live)
    assert after.per_discr[DOWN_DISCR]["answered"] - before.per_discr[DOWN_DISCR]["answered"] == 1
    assert after.per_discr[DOWN_DISCR]["state"] == "admin_down"
    assert_only(before, after, None, 0)


# --- reject -------------------------------------------------------------------------

REJECTS = [
    ("your_discr 0", lambda lv: frame(lv, sbfd(0)), "sbfd_your_discr_zero"),
    ("unknown discriminator", lambda lv: frame(lv, sbfd(UNKNOWN_DISCR)), "sbfd_unknown"),
    ("my_discr 0", lambda lv: frame(lv, sbfd(my=0)), "sbfd_my_discr"),
    ("version 2", lambda lv: frame(lv, sbfd(version=2)), "sbfd_version"),
    ("length field 23", lambda lv: frame(lv, sbfd(length=23)), "sbfd_length"),
    ("length past the payload", lambda lv: frame(lv, sbfd(length=40)), "sbfd_length"),
    ("payload of 20 bytes", lambda lv: frame(lv, sbfd()[:20]), "sbfd_short"),
    ("detect mult 0", lambda lv: frame(lv, sbfd(mult=0)), "sbfd_detect_mult"),
    ("M bit", lambda lv: frame(lv, sbfd(flags="M")), "sbfd_multipoint"),
    ("A bit", lambda lv: frame(lv, sbfd(flags="A", length=28, tail=b"\x01\x04\x01x")), "sbfd_auth"),
    ("from source port 7784", lambda lv: frame(lv, sbfd(), sport=SBFD_PORT), "sbfd_sport"),
    ("to a multicast address", lambda lv: frame(lv, sbfd(), dst="224.0.0.5"), "sbfd_address"),
    ("to the broadcast address", lambda lv: frame(lv, sbfd(), dst="255.255.255.255"), "sbfd_address"),
    ("from IPv6 loopback", lambda lv: frame(lv, sbfd(), v6=True, src="::1"), "sbfd_address"),
    ("to IPv6 multicast", lambda lv: frame(lv, sbfd(), v6=True, dst="ff02::1"), "sbfd_address"),
    ("IPv6 unknown discriminator", lambda lv: frame(lv, sbfd(UNKNOWN_DISCR), v6=True), "sbfd_unknown"),
    ("IPv4 options", lambda lv: frame(lv, sbfd(), options=b"\x01\x01\x01\x00"), "ip_options"),
    # A reflector discriminator names no session: on the BFD port it is an unknown Your Discriminator.
    (
        "reflector discriminator to 3784",
        lambda lv: frame(lv, sbfd(sta=3, flags=""), dport=3784),
        "your_discr",
    ),
]


@pytest.mark.parametrize(("name", "build", "reason"), REJECTS, ids=[r[0] for r in REJECTS])
def test_a_bad_frame_dies_in_xdp_with_its_counter(live: Live, name: str, build, reason: str) -> None:
    before = counts(live)
    got = captured(live, "reject-" + name.replace(" ", "-"), [build(live)] * N, expect=0)
    after = counts(live)
    assert got == [], f"{name}: answered"
    assert after.sbfd_tx == before.sbfd_tx
    assert_only(before, after, reason, N)


def fuzz_frames(live: Live, rng: random.Random) -> list[bytes]:
    """Requests with a change or two, random payloads, lying lengths, odd ports and addresses."""
    out = []
    while len(out) < FUZZ_N:
        v6 = rng.random() < 0.4
        if rng.random() < 0.3:
            payload = rng.randbytes(rng.choice((0, 1, 8, 23, 24, 24, 26, 40, rng.randrange(1, 100))))
        else:
            buf = bytearray(sbfd(sta=rng.choice((1, 3)), flags=rng.choice(("", "D", "P", "PD"))))
            for _ in range(rng.randrange(3)):
                mutate_control(buf, rng, UNKNOWN_DISCR)
            payload = bytes(buf[: rng.choice((24, 24, 24, 20, 1, 26, 40))])
        dst = None
        if rng.random() < 0.05:
            dst = "ff02::1" if v6 else "224.0.0.5"
        options = ip_nops(4) if not v6 and rng.random() < 0.05 else b""
        sport = rng.choice((SPORT, SPORT, 3784, 4784, SBFD_PORT))
        f = frame(live, payload, v6=v6, sport=sport, ttl=rng.choice((255, 64, 1)), dst=dst, options=options)
        if not v6 and not options and rng.random() < 0.05:
            f = with_ipv4_frag(f, 0x2000)
        if rng.random() < 0.05:
            f = with_udp_len(f, 8 + 1500)
        out.append(f)
    return out


def test_bad_and_good_input_is_charged_as_the_rules_say(live: Live) -> None:
    """A seeded mix, each frame's verdict predicted by an independent model (harness.xdp_oracle)."""
    table = KernelTable(live.d.index("veth-d"), sbfd={CLI_DISCR, RATE_DISCR, DOWN_DISCR})
    frames = fuzz_frames(live, random.Random(FUZZ_SEED))
    want = Counter(kernel_verdict(f, table) for f in frames)
    assert None not in want, "every frame here is to 7784 while a reflector is configured"
    assert want["sbfd_tx"] > 10 and len(want) > 8, want  # the mix reaches answers and many rules
    print(f"\n{FUZZ_N} frames, predicted: {dict(sorted(want.items()))}")
    before = counts(live)
    got = captured(live, "fuzz", frames, expect=want["sbfd_tx"])
    after = counts(live)
    assert len(got) == want["sbfd_tx"] == after.sbfd_tx - before.sbfd_tx, (len(got), want)
    moved = Counter({k: after.drop.get(k, 0) - before.drop.get(k, 0) for k in after.drop})
    assert +moved == Counter({k: n for k, n in want.items() if k != "sbfd_tx"}), (moved, want)
    assert after.xdp_pass == before.xdp_pass
    assert after.user_drops() == before.user_drops()


def test_another_port_is_not_the_reflectors(live: Live) -> None:
    """7785 is not S-BFD: passed to d's stack untouched, which has no socket there (NoPorts)."""
    before = counts(live)
    got = captured(live, "port-7785", [frame(live, sbfd(), dport=7785)] * N, expect=0)
    after = counts(live)
    assert got == []
    assert after.stack["Udp.NoPorts"] - before.stack["Udp.NoPorts"] == N  # the witness: it reached the stack
    assert after.drop == before.drop and after.sbfd_tx == before.sbfd_tx and after.xdp_pass == before.xdp_pass


def test_the_rate_limit_drops_the_excess_and_counts_it(live: Live) -> None:
    sent = 40
    before = counts(live)
    t0 = time.monotonic()
    got = captured(live, "rate", [frame(live, sbfd(RATE_DISCR))] * sent, expect=BURST)
    elapsed = time.monotonic() - t0  # bounds what the bucket can have refilled while they went
    after = counts(live)
    answered = after.per_discr[RATE_DISCR]["answered"] - before.per_discr[RATE_DISCR]["answered"]
    limited = after.per_discr[RATE_DISCR]["rate_limited"] - before.per_discr[RATE_DISCR]["rate_limited"]
    assert answered == len(got) and answered + limited == sent
    assert BURST <= answered <= BURST + int(elapsed * RATE_PPS) + 1, (answered, elapsed)
    assert limited > 0
    assert_only(before, after, "sbfd_rate_limited", limited)
    # The bucket refills: after a second one more answer (at least) goes out.
    time.sleep(1.0)
    assert len(captured(live, "rate-refilled", [frame(live, sbfd(RATE_DISCR))], expect=1)) == 1


def test_a_reload_changes_the_discriminators_and_an_empty_set_gives_7784_back(live: Live) -> None:
    live.sessions.write_text(_sessions_text("- {sbfd_reflector: 901, min_rx_us: 10000}\n"))
    live.engine.signal(signal.SIGHUP)
    live.engine.wait_log("reload: ")
    wait_until(lambda: 901 in counts(live).per_discr, timeout=5, what="901 configured")
    req = frame(live, sbfd(901, sta=3, flags=""))
    (ans,) = captured(live, "reloaded", [req], expect=1)
    _check_answer(live, req, ans, v6=False, discr=901, state=3, diag=0, min_rx=10_000)

    # A discriminator given twice keeps everything as it was.
    live.sessions.write_text(_sessions_text(f"- {{sbfd_reflector: {CLI_DISCR}}}\n"))
    live.engine.signal(signal.SIGHUP)
    line = live.engine.wait_log(
        f"S-BFD reflector discriminator {CLI_DISCR} is already given by --sbfd-reflector"
    )
    assert "keeping the running sessions unchanged" in line
    assert 901 in counts(live).per_discr

    # Removed from the file: its frames are unknown now (the command line's stays).
    live.sessions.write_text("")
    live.engine.signal(signal.SIGHUP)
    wait_until(lambda: set(counts(live).per_discr) == {CLI_DISCR}, timeout=5, what="only the CLI's left")
    before = counts(live)
    assert captured(live, "removed", [frame(live, sbfd(RATE_DISCR))] * N, expect=0) == []
    assert_only(before, counts(live), "sbfd_unknown", N)
    live.sessions.write_text(_sessions_text())
    live.engine.signal(signal.SIGHUP)
    wait_until(lambda: RATE_DISCR in counts(live).per_discr, timeout=5, what="the file's back")


def test_the_dead_man_gate_stops_the_reflector(tmp_path: Path) -> None:
    """A stopped engine's reflector goes quiet: its frames die as sbfd_gated, then it answers again."""
    if os.geteuid() != 0:
        pytest.fail("integration tests need root (network namespaces, XDP)")
    deadman_s = 1.0
    with contextlib.ExitStack() as stack:
        topo = Topology()
        stack.callback(topo.close)
        d, p = topo.namespace("d"), topo.namespace("p")
        a, b = topo.veth(d, "veth-d", p, "veth-p")
        args = ["--kernel-tx", "veth-d", "--sbfd-reflector", str(CLI_DISCR), "--kernel-clock", "off"]
        engine = EngineProcess(d, [*args, "--deadman-us", str(int(deadman_s * 1e6))], tmp_path)
        stack.callback(engine.cleanup)
        engine.start()
        engine.wait_log("bfd: serving 0 sessions with the XDP fast path", timeout=240)
        lv = Live(d, p, a, b, engine, tmp_path, tmp_path / "none")
        assert len(captured(lv, "gate-open", [frame(lv, sbfd())], expect=1)) == 1
        before = counts(lv)
        engine.signal(signal.SIGSTOP)
        try:
            time.sleep(deadman_s + 0.5)  # the last heartbeat is older than the bound now
            got = captured(lv, "gate-closed", [frame(lv, sbfd())] * N, expect=0)
        finally:
            engine.signal(signal.SIGCONT)
        assert got == []
        assert_only(before, counts(lv), "sbfd_gated", N)
        # The heartbeat is back (one beat: at most a quarter of the bound).
        wait_until(
            lambda: len(captured(lv, "gate-reopened", [frame(lv, sbfd())], expect=0, settle_s=0.2)) == 1,
            timeout=5,
            what="the reflector answering again",
        )


def test_the_answer_leaves_from_the_address_the_initiator_asked(live: Live) -> None:
    """The reply leaves from the address the initiator asked (a second address on the link works too)."""
    extra = ipaddress.ip_interface("198.19.1.77/24")
    with live.d.ipr() as ipr:
        ipr.addr("add", index=live.d.index("veth-d"), address=str(extra.ip), prefixlen=24)
    eth = Ether(src=MARKER_MAC, dst=live.a.mac)
    req = bytes(
        eth / IP(src=str(live.b.ip4), dst=str(extra.ip)) / UDP(sport=SPORT, dport=SBFD_PORT) / Raw(sbfd())
    )
    (ans,) = captured(live, "second-address", [req], expect=1)
    assert (ans[IP].src, ans[IP].dst) == (str(extra.ip), str(live.b.ip4))
