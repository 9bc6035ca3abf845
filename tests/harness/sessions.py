"""Helpers shared by the test_session_* modules (this module holds no tests).

Everything runs on a simulated clock: times are plain integers in µs.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import replace
from ipaddress import IPv4Address
from typing import Any

from xdp_bfd.session import Rejected, Session, SessionConfig, StateChanged
from xdp_bfd.wire.control import ControlPacket, State, decode_control, encode_control

LOCAL_DISCR = 0x1111_1111
PEER_DISCR = 0x2222_2222
LOCAL_IP = IPv4Address("192.0.2.1")
PEER_IP = IPv4Address("192.0.2.2")
SECOND = 1_000_000

PROPERTIES = (
    "state",
    "remote_state",
    "local_diag",
    "remote_diag",
    "local_discr",
    "remote_discr",
    "remote_min_rx_us",
    "remote_desired_tx_us",
    "remote_detect_mult",
    "remote_min_echo_rx_us",
    "remote_demand",
    "desired_min_tx_us",
    "required_min_rx_us",
    "tx_interval_us",
    "detect_time_us",
    "poll_active",
    "rx_packets",
    "tx_packets",
    "flaps",
    "up_since_us",
    "last_rx_us",
)


def config(**kw: Any) -> SessionConfig:
    kw.setdefault("local", LOCAL_IP)
    kw.setdefault("peer", PEER_IP)
    return SessionConfig(**kw)


def make(now: int = 0, *, seed: int = 1, discr: int = LOCAL_DISCR, **kw: Any) -> Session:
    return Session(config(**kw), discr, now_us=now, rng=random.Random(seed))


def reconfigure(session: Session, now: int, **changes: Any) -> None:
    session.set_config(replace(session.config, **changes), now)


def packet(state: State, *, your: int = LOCAL_DISCR, my: int = PEER_DISCR, **kw: Any) -> ControlPacket:
    """A packet from the peer, with the peer already using its configured (fast) timers."""
    kw.setdefault("desired_min_tx_us", 300_000)
    kw.setdefault("required_min_rx_us", 300_000)
    return ControlPacket(state=state, my_discr=my, your_discr=your, **kw)


def deliver(
    session: Session, pkt: ControlPacket, now: int, *, secret: bytes | None = None, ttl: int | None = 255
) -> None:
    """Encode ``pkt`` as the peer would and hand the decoded result to ``session``."""
    raw = encode_control(pkt, secret=secret)
    session.receive(decode_control(raw), raw, now, ttl=ttl)


def sent(session: Session, now: int) -> list[ControlPacket]:
    return [decode_control(raw) for raw in session.datagrams_to_send(now)]


def drain_events(session: Session) -> list[StateChanged]:
    out = []
    while (event := session.next_event()) is not None:
        out.append(event)
    return out


def snapshot(session: Session) -> dict[str, object]:
    """Everything observable about a session without draining it."""
    view: dict[str, object] = {name: getattr(session, name) for name in PROPERTIES}
    view["timer"] = session.get_timer()
    view["outbox"] = list(session._outbox)
    view["events"] = list(session._events)
    return view


def bring_up(session: Session, now: int, **kw: Any) -> int:
    """Three-way handshake from Down against a scripted peer; returns the time after it."""
    deliver(session, packet(State.DOWN, your=0, **kw), now)
    now += 1_000
    deliver(session, packet(State.UP, **kw), now)
    assert session.state == State.UP
    sent(session, now)
    drain_events(session)
    return now


def run_until(session: Session, now: int, until: int) -> tuple[int, list[tuple[int, ControlPacket]]]:
    """Step ``session`` alone through its timers up to ``until``; returns (now, sent packets with times)."""
    out: list[tuple[int, ControlPacket]] = []
    for _ in range(1_000_000):
        deadline = session.get_timer()
        if deadline is None or deadline > until:
            return until, out
        assert deadline >= now, f"timer went backwards: {deadline} < {now}"
        now = deadline
        session.handle_timer(now)
        out.extend((now, p) for p in sent(session, now))
    raise AssertionError("timer loop did not settle")


Drop = Callable[[Session, ControlPacket, int], bool]


class Pair:
    """Two sessions joined by a symmetric link with fixed latency, on one simulated clock."""

    def __init__(self, a: Session, b: Session, *, now: int = 0, latency_us: int = 500) -> None:
        self.a = a
        self.b = b
        self.now = now
        self.latency_us = latency_us
        self._in_flight: list[tuple[int, int, int, bytes]] = []
        self._order = itertools.count()
        self.events: dict[str, list[StateChanged]] = {"a": [], "b": []}
        self.rejected: dict[str, list[str]] = {"a": [], "b": []}
        self.wire: list[tuple[int, str, ControlPacket]] = []

    def _flush(self, drop: Drop | None) -> None:
        for name, src, dst in (("a", self.a, 1), ("b", self.b, 0)):
            for raw in src.datagrams_to_send(self.now):
                pkt = decode_control(raw)
                self.wire.append((self.now, name, pkt))
                if drop is None or not drop(src, pkt, self.now):
                    heapq.heappush(self._in_flight, (self.now + self.latency_us, next(self._order), dst, raw))
        for name, s in (("a", self.a), ("b", self.b)):
            self.events[name].extend(drain_events(s))

    def run(self, until: int, *, drop: Drop | None = None, max_steps: int = 2_000_000) -> None:
        for _ in range(max_steps):
            self._flush(drop)
            deadlines = [t for t in (self.a.get_timer(), self.b.get_timer()) if t is not None]
            if self._in_flight:
                deadlines.append(self._in_flight[0][0])
            if not deadlines or min(deadlines) > until:
                self.now = until
                return
            step = min(deadlines)
            assert step >= self.now, f"timer went backwards: {step} < {self.now}"
            self.now = step
            while self._in_flight and self._in_flight[0][0] <= self.now:
                _, _, dst, raw = heapq.heappop(self._in_flight)
                target = (self.a, self.b)[dst]
                try:
                    target.receive(decode_control(raw), raw, self.now, ttl=255)
                except Rejected as exc:
                    self.rejected[("a", "b")[dst]].append(exc.reason)
            for s in (self.a, self.b):
                deadline = s.get_timer()
                if deadline is not None and deadline <= self.now:
                    s.handle_timer(self.now)
        raise AssertionError("simulation did not settle")

    def sent_by(self, name: str, since: int = 0) -> list[tuple[int, ControlPacket]]:
        return [(t, p) for t, n, p in self.wire if n == name and t >= since]
