"""Wire truth: tcpdump inside a namespace, decoded into BFD packets.

Timestamps are the kernel's (taken in softirq when the frame crosses the
interface), in nanosecond precision, so they stay truthful when the process
under test or the capture process itself is starved. The decoder here is
deliberately independent of the engine's codec: it is the observer, not the
observed.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import math
import re
import signal
import statistics
import struct
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .netns import Namespace
from .wait import wait_until

BFD_PORTS = (3784, 4784, 3785)
STATES = {0: "admin_down", 1: "down", 2: "init", 3: "up"}


@dataclass(frozen=True)
class WirePacket:
    ts: float  # seconds, kernel receive/transmit time
    src: str
    dst: str
    sport: int
    dport: int
    ttl: int
    # None: IPv4 checksum 0. Frames a local socket sends over veth carry only a
    # partial checksum, so this is meaningful for frames built elsewhere (XDP_TX
    # replies, injected frames), not for what the local stack sent.
    udp_csum_ok: bool | None
    payload: bytes
    vlan: int | None = None

    @property
    def kind(self) -> str:
        return "echo" if self.dport == 3785 or self.sport == 3785 else "control"

    # Control-packet fields (meaningless for echo); decoded lazily and leniently.
    def _u8(self, off: int) -> int:
        return self.payload[off] if len(self.payload) > off else 0

    def _u32(self, off: int) -> int:
        return struct.unpack_from("!I", self.payload, off)[0] if len(self.payload) >= off + 4 else 0

    @property
    def version(self) -> int:
        return self._u8(0) >> 5

    @property
    def diag(self) -> int:
        return self._u8(0) & 0x1F

    @property
    def state(self) -> str:
        return STATES[self._u8(1) >> 6]

    @property
    def poll(self) -> bool:
        return bool(self._u8(1) & 0x20)

    @property
    def final(self) -> bool:
        return bool(self._u8(1) & 0x10)

    @property
    def cpi(self) -> bool:
        return bool(self._u8(1) & 0x08)

    @property
    def auth(self) -> bool:
        return bool(self._u8(1) & 0x04)

    @property
    def demand(self) -> bool:
        return bool(self._u8(1) & 0x02)

    @property
    def detect_mult(self) -> int:
        return self._u8(2)

    @property
    def length(self) -> int:
        return self._u8(3)

    @property
    def my_discr(self) -> int:
        return self._u32(4)

    @property
    def your_discr(self) -> int:
        return self._u32(8)

    @property
    def desired_min_tx_us(self) -> int:
        return self._u32(12)

    @property
    def required_min_rx_us(self) -> int:
        return self._u32(16)

    @property
    def required_min_echo_rx_us(self) -> int:
        return self._u32(20)


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def _decode_frame(ts: float, frame: bytes) -> WirePacket | None:
    if len(frame) < 14:
        return None
    ethertype = struct.unpack_from("!H", frame, 12)[0]
    off, vlan = 14, None
    if ethertype == 0x8100 and len(frame) >= 18:
        vlan = struct.unpack_from("!H", frame, 14)[0] & 0x0FFF
        ethertype = struct.unpack_from("!H", frame, 16)[0]
        off = 18
    if ethertype == 0x0800:
        if len(frame) < off + 20:
            return None
        ihl = (frame[off] & 0x0F) * 4
        if frame[off + 9] != 17:
            return None
        ttl = frame[off + 8]
        src_b, dst_b = frame[off + 12 : off + 16], frame[off + 16 : off + 20]
        total_len = struct.unpack_from("!H", frame, off + 2)[0]
        l4 = frame[off + ihl : off + total_len]
        pseudo = src_b + dst_b + struct.pack("!BBH", 0, 17, len(l4))
        src, dst = str(ipaddress.IPv4Address(src_b)), str(ipaddress.IPv4Address(dst_b))
    elif ethertype == 0x86DD:
        if len(frame) < off + 40 or frame[off + 6] != 17:
            return None
        ttl = frame[off + 7]
        plen = struct.unpack_from("!H", frame, off + 4)[0]
        src_b, dst_b = frame[off + 8 : off + 24], frame[off + 24 : off + 40]
        l4 = frame[off + 40 : off + 40 + plen]
        pseudo = src_b + dst_b + struct.pack("!IxxxB", len(l4), 17)
        src, dst = str(ipaddress.IPv6Address(src_b)), str(ipaddress.IPv6Address(dst_b))
    else:
        return None
    if len(l4) < 8:
        return None
    sport, dport, _ulen, csum = struct.unpack_from("!HHHH", l4)
    if sport not in BFD_PORTS and dport not in BFD_PORTS:
        return None
    ok = None if (csum == 0 and ethertype == 0x0800) else _csum(pseudo + l4) == 0xFFFF
    return WirePacket(ts, src, dst, sport, dport, ttl, ok, bytes(l4[8:]), vlan)


def read_pcap(path: Path) -> list[WirePacket]:
    data = path.read_bytes()
    if len(data) < 24:
        return []
    magic = struct.unpack_from("<I", data)[0]
    endian, scale = {
        0xA1B2C3D4: ("<", 1e-6),
        0xA1B23C4D: ("<", 1e-9),
        0xD4C3B2A1: (">", 1e-6),
        0x4D3CB2A1: (">", 1e-9),
    }[magic]
    linktype = struct.unpack_from(endian + "I", data, 20)[0]
    if linktype != 1:
        raise ValueError(f"unexpected pcap link type {linktype}")
    out, off = [], 24
    while off + 16 <= len(data):
        sec, frac, incl, _orig = struct.unpack_from(endian + "IIII", data, off)
        if off + 16 + incl > len(data):
            # tcpdump is still writing this record: a snapshot taken now would read it cut short.
            break
        off += 16
        pkt = _decode_frame(sec + frac * scale, data[off : off + incl])
        off += incl
        if pkt is not None:
            out.append(pkt)
    return out


def _kernel_drops(text: str) -> int | None:
    """tcpdump's closing report: "N packets dropped by kernel" (None when it gave none)."""
    m = re.search(r"^(\d+) packets? dropped by kernel$", text, re.M)
    return int(m.group(1)) if m else None


class Capture:
    """tcpdump on one interface of a namespace; :meth:`stop` returns the packets.

    Use as a context manager or call start/stop. The process is always reaped.
    """

    def __init__(self, ns: Namespace, ifname: str, path: Path, bpf_filter: str | None = None) -> None:
        self.ns, self.ifname, self.path = ns, ifname, path
        self.filter = bpf_filter or "udp and (port 3784 or port 4784 or port 3785)"
        self.proc: subprocess.Popen | None = None
        self.packets: list[WirePacket] = []
        # What tcpdump said on its way out: packets the kernel dropped before tcpdump read them.
        self.dropped: int | None = None

    def start(self, timeout: float = 10.0) -> Capture:
        self.proc = self.ns.popen(
            [
                "tcpdump", "-i", self.ifname, "-n", "-U", "--immediate-mode", "-B", "16384",
                "--time-stamp-precision=nano", "-s", "512", "-w", str(self.path), self.filter,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        # tcpdump says "listening on" once the socket and filter are in place;
        # only then is "not seen on the wire" evidence of anything.
        line = ""
        deadline = time.monotonic() + timeout
        assert self.proc.stderr is not None
        while "listening on" not in line:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"tcpdump did not start on {self.ifname}: {line!r}")
            line = self.proc.stderr.readline()
        return self

    def stop(self) -> list[WirePacket]:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            if self.proc.stderr:
                with contextlib.suppress(OSError, ValueError):
                    self.dropped = _kernel_drops(self.proc.stderr.read())
                self.proc.stderr.close()
            self.proc = None
            self.packets = read_pcap(self.path) if self.path.exists() else []
        return self.packets

    def snapshot(self) -> list[WirePacket]:
        """Packets written so far, without stopping (tcpdump -U flushes per packet)."""
        return read_pcap(self.path) if self.path.exists() else []

    def wait_for(self, predicate: object, *, timeout: float, what: str) -> WirePacket:
        def probe() -> WirePacket | None:
            return next((p for p in self.snapshot() if predicate(p)), None)  # type: ignore[operator]

        return wait_until(probe, timeout=timeout, interval=0.1, what=what)

    def __enter__(self) -> Capture:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def flow(packets: Iterable[WirePacket], *, src: str, dst: str, kind: str = "control") -> list[WirePacket]:
    return [p for p in packets if p.src == src and p.dst == dst and p.kind == kind]


def down_transitions(packets: Iterable[WirePacket]) -> int:
    """Up -> not-Up transitions in one direction's packets: each one a Down the sender declared."""
    downs, prev = 0, None
    for p in packets:
        if prev == "up" and p.state != "up":
            downs += 1
        prev = p.state
    return downs


def gaps_ms(packets: Iterable[WirePacket]) -> list[float]:
    """The gaps between consecutive packets in time.

    In time, not in the file's order: tcpdump stores what two CPUs stamped a
    little out of order (seen: a packet stamped 12 ms before the one stored
    ahead of it), and in file order that is one gap too long and one negative.
    """
    ts = sorted(p.ts for p in packets)
    return [(b - a) * 1e3 for a, b in itertools.pairwise(ts)]


def silence_before(packets: Iterable[WirePacket], t: float, *, window_s: float = 1.0) -> str:
    """How quiet one direction was before ``t``: its last packet and its largest gap in the window.

    For a Down on the wire this says who went quiet first: the side that
    declared the Down hears the other side's packets; a last packet or a gap
    under the detection time means the declaring side stalled, not the other.
    """
    before = [p.ts for p in packets if t - window_s <= p.ts < t]
    if not before:
        return f"nothing in the {window_s:.1f} s before"
    gaps = [(b - a) * 1e3 for a, b in itertools.pairwise([*before, t])]
    last_ms, window = (t - before[-1]) * 1e3, f"{window_s:.1f} s"
    return f"last packet {last_ms:.1f} ms before, largest gap {max(gaps):.1f} ms in the {window} before"


@dataclass(frozen=True)
class GapStats:
    n: int
    p50: float
    p99: float
    p999: float
    max: float

    def __str__(self) -> str:
        return f"n={self.n} p50={self.p50:.2f} p99={self.p99:.2f} p999={self.p999:.2f} max={self.max:.2f} ms"


def _quantile(sorted_values: list[float], q: float) -> float:
    # Nearest-rank (rank = ceil(q*n)): a reported p99 is a gap that really
    # happened. The epsilon keeps 0.99*100 from rounding up to rank 100.
    idx = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values) - 1e-9) - 1))
    return sorted_values[idx]


def gap_stats(gaps: list[float]) -> GapStats:
    if not gaps:
        raise ValueError("no gaps: fewer than two packets")
    s = sorted(gaps)
    return GapStats(len(s), statistics.median(s), _quantile(s, 0.99), _quantile(s, 0.999), s[-1])


def steady(packets: list[WirePacket], state: str = "up") -> Iterator[WirePacket]:
    """Packets from the first one in ``state`` onwards while they stay in it."""
    started = False
    for p in packets:
        if p.state == state:
            started = True
            yield p
        elif started:
            return
