"""The echo originator (RFC 5880 §6.4): our own echo, sent from here, its returns stamped by XDP.

For each offloaded single-hop session that is Up, configured to send echo
(``echo_tx_ms``, or bfdd's echo-mode) and whose peer advertises a Required
Min Echo RX, the engine sends one probe per interval: addressed to ourselves,
to the peer's MAC, out the interface the peer's packets come in on (both
learned by XDP, ``slot_state``). The peer's forwarding plane sends it back;
XDP recognises it (``echo_return``), records its round trip in
``echo_rtt[slot]`` and drops it, so a return costs the engine nothing.

The engine judges each probe once, a detection time after it left: back if
its sequence number is in the returns ring, lost otherwise. Echo liveness is
advisory and stays so: a probe is sent by this process, so a scheduling stall
here looks exactly like a path failure, and it must never become a teardown.
It shows in the stats and metrics only; no session changes state for it.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..core import links
from ..core.host import Entry, Host, PacketCounts
from ..session.timers import echo_tx_interval_us
from ..wire.echo import EchoPacket, encode_echo
from .kernel import FastPath
from .loop import TakeSocket

log = logging.getLogger("xdp_bfd")

_ETH_P_IP, _ETH_P_IPV6 = 0x0800, 0x86DD
_CS6 = 0xC0  # as our control packets (netio)
_TTL = 255
_JUDGE_EVERY = 8  # sends between two reads of the returns ring
_MAX_TIMEOUT_PROBES = 32  # a probe is judged at most this many intervals after it left
_U64_MAX = (1 << 64) - 1


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def echo_frame(eth12: bytes, local16: bytes, sport: int, payload: bytes) -> bytes:
    """An Ethernet frame carrying ``payload`` to UDP 3785, from and to ``local16`` (v4-mapped for IPv4).

    ``eth12`` is the destination MAC (the peer's) then the source MAC (ours).
    """
    v4 = local16[:12] == bytes(10) + b"\xff\xff"
    udp_len = 8 + len(payload)
    if v4:
        addr = local16[12:]
        pseudo = addr + addr + struct.pack("!BBH", 0, socket.IPPROTO_UDP, udp_len)
        ip = struct.pack(
            "!BBHHHBBH4s4s", 0x45, _CS6, 20 + udp_len, 0, 0x4000, _TTL, socket.IPPROTO_UDP, 0, addr, addr
        )
        ip = ip[:10] + struct.pack("!H", _csum(ip)) + ip[12:]
        ethertype = _ETH_P_IP
    else:
        addr = local16
        pseudo = addr + addr + struct.pack("!IxxxB", udp_len, socket.IPPROTO_UDP)
        ip = struct.pack(
            "!IHBB16s16s", (6 << 28) | (_CS6 << 20), udp_len, socket.IPPROTO_UDP, _TTL, addr, addr
        )
        ethertype = _ETH_P_IPV6
    # The session's control source port: unique per session, in RFC 5881 §4's range.
    udp = struct.pack("!HHHH", sport, 3785, udp_len, 0)
    check = _csum(pseudo + udp + payload) or 0xFFFF
    udp = udp[:6] + struct.pack("!H", check)
    return eth12 + struct.pack("!H", ethertype) + ip + udp + payload


@dataclass
class _Echo:
    """One session's echo since it last started (each time the session comes Up)."""

    slot: int
    discr: int
    sport: int
    interval_us: int
    timeout_ns: int
    generation: int
    seq: int = 0
    sent: int = 0
    lost: int = 0
    judged_back: int = 0
    skipped: int = 0  # intervals with no way out yet (XDP has not seen the peer's packet)
    send_errors: int = 0
    active: bool = True
    pending: deque[tuple[int, int]] = field(default_factory=deque)  # (seq, sent at ns), oldest first


class EchoOriginator:
    """Our echo for the sessions that want it (a core.host.SessionObserver, after the Offload)."""

    def __init__(self, host: Host, fp: FastPath) -> None:
        self.host = host
        self.rtt = fp.program.bpf["echo_rtt"]
        self.read_state = fp.slots.read_state
        self.ring = fp.abi.echo_ring
        self.echoes: dict[int, _Echo] = {}  # by local discriminator
        self.socks: dict[int, socket.socket] = {}  # by ifindex
        # A predecessor's socket for an interface, taken before one is made (pin/packet_sockets.py).
        self.take: TakeSocket | None = None
        self.totals = {"sent": 0, "send_errors": 0}

    @staticmethod
    def interval_us(entry: Entry) -> int:
        """RFC 5880 §6.4/§6.8.9: Up, single hop, echo wanted, the peer willing; never faster than it asks.

        Not before the peer says Up as well: its fast path loops echo only over an Up session
        (as FRR's stack does only once its session is Up), so probes sent while it is still in
        Init come back as nothing and would be counted lost at every bring-up.
        """
        s, c = entry.session, entry.session.config
        if entry.slot is None or not entry.offloaded or c.multihop:
            return 0
        if not s.both_up:
            return 0
        return echo_tx_interval_us(c.echo_tx_us, s.remote_min_echo_rx_us)

    # -- the observer ---------------------------------------------------------------

    def added(self, entry: Entry) -> None:
        self.serviced(entry)

    def serviced(self, entry: Entry) -> None:
        want = self.interval_us(entry)
        e = self.echoes.get(entry.session.local_discr)
        if want == 0:
            if e is not None and e.active:
                self._judge(e, time.monotonic_ns())
                e.active = False
            return
        if e is None or not e.active or e.slot != entry.slot:
            self._start(entry, want)
        elif e.interval_us != want:
            e.interval_us = want
            e.timeout_ns = self._timeout_ns(entry, want)

    def removed(self, entry: Entry) -> None:
        e = self.echoes.pop(entry.session.local_discr, None)
        if e is not None:
            e.active = False

    def counts(self, entry: Entry, counts: PacketCounts) -> PacketCounts:
        return counts  # echo is not control traffic

    def session_stats(self, entry: Entry, out: dict[str, Any], now_ns: int) -> None:
        e = self.echoes.get(entry.session.local_discr)
        if e is None:
            return
        leaf = self.rtt[self.rtt.Key(e.slot)] if e.active else None
        if leaf is not None:
            self._judge(e, now_ns, leaf)
        out["echo"] = self._section(e, leaf, now_ns)

    def document(self, doc: dict[str, Any]) -> None:
        doc["echo_originator"] = {
            "sessions": sum(1 for e in self.echoes.values() if e.active),
            "sent": self.totals["sent"],
            "send_errors": self.totals["send_errors"],
        }

    # -- sending ----------------------------------------------------------------------

    def _timeout_ns(self, entry: Entry, interval_us: int) -> int:
        return min(entry.session.config.detect_mult, _MAX_TIMEOUT_PROBES) * interval_us * 1000

    def _start(self, entry: Entry, interval_us: int) -> None:
        assert entry.slot is not None
        # Random: a probe still in flight from before (this engine's or a
        # predecessor's) must not count as a return of this generation.
        gen = int.from_bytes(os.urandom(4), "big") or 1
        leaf = self.rtt.Leaf()
        leaf.gen = gen
        leaf.rtt_min_ns = _U64_MAX
        self.rtt[self.rtt.Key(entry.slot)] = leaf
        now_ns = time.monotonic_ns()
        e = _Echo(
            slot=entry.slot,
            discr=entry.session.local_discr,
            sport=entry.tx.sport,
            interval_us=interval_us,
            timeout_ns=self._timeout_ns(entry, interval_us),
            generation=gen,
        )
        self.echoes[e.discr] = e
        log.info(
            "echo: %s: sending our echo every %.1f ms", entry.session.config.describe(), interval_us / 1000
        )
        self.host.call_at(now_ns // 1000, lambda now: self._send(e, now))

    def _sock(self, ifindex: int) -> socket.socket | None:
        sock = self.socks.get(ifindex)
        if sock is not None:
            return sock
        sock = self.take(ifindex) if self.take is not None else None
        if sock is None:
            name = links.name_of(ifindex)
            if name is None:
                return None
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            try:
                sock.bind((name, 0))
            except OSError:
                sock.close()
                raise
        sock.setblocking(False)
        self.socks[ifindex] = sock
        return sock

    def _send(self, e: _Echo, now: int) -> None:
        if not e.active:
            return
        # The next one an interval after this one actually leaves (not after this
        # callback's deadline): a late send must not make the next gap shorter.
        # Never faster than the peer asked (§6.8.9).
        sent_at_us = self._send_one(e)
        self.host.call_at((sent_at_us or now) + e.interval_us, lambda t: self._send(e, t))

    def _send_one(self, e: _Echo) -> int | None:
        """One probe; when it left (monotonic µs), or None if it could not."""
        st = self.read_state(e.slot)
        rx_eth = bytes(st.rx_eth)  # the peer's packet: to us, from the peer
        eth = rx_eth[6:12] + rx_eth[:6]
        try:
            sock = self._sock(st.rx_ifindex) if st.rx_ifindex and any(eth) else None
        except OSError as err:
            # A timer callback must not raise into the loop (an interface that went away).
            self._failed(e, f"no socket on ifindex {st.rx_ifindex}: {err.strerror or err}")
            return None
        if sock is None:
            e.skipped += 1
            return None
        if len(e.pending) >= self.ring - _JUDGE_EVERY or e.sent % _JUDGE_EVERY == 0:
            self._judge(e, time.monotonic_ns())
        e.seq += 1
        tx_ns = time.monotonic_ns()
        payload = encode_echo(EchoPacket(e.discr, e.seq, e.generation, tx_ns))
        try:
            sock.send(echo_frame(eth, bytes(st.rx_local), e.sport, payload))
        except OSError as err:
            self._failed(e, err.strerror or str(err))
            return None
        e.sent += 1
        self.totals["sent"] += 1
        e.pending.append((e.seq, tx_ns))
        # After send() returned: the frame has left by then, however long the call took.
        return time.monotonic_ns() // 1000

    def _failed(self, e: _Echo, why: str) -> None:
        if not e.send_errors:  # once per start: the count says the rest
            log.warning("echo: discriminator %d: cannot send our echo: %s", e.discr, why)
        e.send_errors += 1
        self.totals["send_errors"] += 1

    # -- judging ----------------------------------------------------------------------

    def _judge(self, e: _Echo, now_ns: int, leaf: Any = None) -> None:
        """Each probe older than the timeout, once: back if the ring holds its sequence number."""
        if not e.pending or e.pending[0][1] > now_ns - e.timeout_ns:
            return
        if leaf is None:
            leaf = self.rtt[self.rtt.Key(e.slot)]
        ring, mask = leaf.ring, self.ring - 1
        while e.pending and e.pending[0][1] <= now_ns - e.timeout_ns:
            seq, _sent = e.pending.popleft()
            if ring[seq & mask].seq == seq:
                e.judged_back += 1
            else:
                e.lost += 1

    def _section(self, e: _Echo, leaf: Any, now_ns: int) -> dict[str, Any]:
        back = int(leaf.returned) if leaf is not None else e.judged_back
        rtt: dict[str, float] | None = None
        last_age_ms = None
        if leaf is not None and back:
            recent = sorted(int(r.rtt_us) for r in leaf.ring if r.seq)
            rtt = {
                "min": int(leaf.rtt_min_ns) / 1000,
                "mean": round(int(leaf.rtt_sum_ns) / back / 1000, 1),
                "p99": float(recent[max(0, -(-99 * len(recent) // 100) - 1)]) if recent else None,
                "max": int(leaf.rtt_max_ns) / 1000,
            }
            last_age_ms = round((now_ns - int(leaf.last_ns)) / 1e6, 1)
        return {
            "active": e.active,
            "interval_ms": e.interval_us / 1000,
            "sent": e.sent,
            "returned": back,
            "lost": e.lost,
            "pending": len(e.pending),
            "skipped": e.skipped,
            "send_errors": e.send_errors,
            "rtt_us": rtt,
            "last_return_age_ms": last_age_ms,
            # Advisory: a return within the timeout (never a session's state).
            "alive": last_age_ms is not None and last_age_ms * 1e6 <= e.timeout_ns,
        }

    def packet_sockets(self) -> list[tuple[int, int]]:
        """(interface index, descriptor) of each socket our echo leaves by, for a successor."""
        return [(i, s.fileno()) for i, s in self.socks.items() if s.fileno() >= 0]

    def close(self) -> None:
        for sock in self.socks.values():
            sock.close()
        self.socks.clear()


__all__ = ["EchoOriginator", "echo_frame"]
