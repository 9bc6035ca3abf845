"""The engine's read of a receiver: a datagram at a time, and a pending signal ends it."""

from __future__ import annotations

import itertools
import socket
from types import SimpleNamespace

from xdp_bfd.core.clock import now_us
from xdp_bfd.core.engine import Engine
from xdp_bfd.core.netio import Receiver


def _burst(n: int) -> tuple[Receiver, socket.socket]:
    rx = Receiver(socket.AF_INET, 0)  # an ephemeral port on the wildcard address: nobody else's
    port = rx.sock.getsockname()[1]
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(n):
        tx.sendto(bytes([i]) * 24, ("127.0.0.1", port))
    return rx, tx


def test_a_signal_during_a_burst_leaves_the_rest_in_the_socket():
    rx, tx = _burst(6)
    try:
        seen: list[int] = []
        reactor = SimpleNamespace(pending_signals=[])

        def on_datagram(dg, _now):
            seen.append(dg.data[0])
            if len(seen) == 2:
                reactor.pending_signals.append(10)  # arrived while the second was handled

        host = SimpleNamespace(on_datagram=on_datagram, reactor=reactor)
        Engine._drain(host, rx, 0)  # type: ignore[arg-type]
        assert seen == [0, 1]
        # Not read and dropped: the next wake-up reads the rest, in order.
        reactor.pending_signals.clear()
        Engine._drain(host, rx, 0)  # type: ignore[arg-type]
        assert seen == [0, 1, 2, 3, 4, 5]
        assert list(rx.datagrams()) == []
    finally:
        rx.close()
        tx.close()


def test_without_a_signal_a_burst_is_read_whole_up_to_the_batch():
    rx, tx = _burst(5)
    try:
        got = [(dg.data[0], len(dg.data), dg.src.version) for dg in rx.datagrams()]
        assert got == [(i, 24, 4) for i in range(5)]
    finally:
        rx.close()
        tx.close()


def test_each_datagram_is_stamped_as_it_is_read_not_at_the_wake_up():
    """A backlog that takes long to handle (a meticulous key's, verified here) must not leave the
    peer's last packet stamped with the wake-up: the timers judge silence right after the read."""
    rx, tx = _burst(4)
    try:
        stamps: list[int] = []

        def on_datagram(_dg, now):
            stamps.append(now)
            spin = now_us() + 2_000  # 2 ms of handling, on the same clock as the stamps
            while now_us() < spin:
                pass

        host = SimpleNamespace(on_datagram=on_datagram, reactor=SimpleNamespace(pending_signals=[]))
        woke = now_us()
        Engine._drain(host, rx, woke)  # type: ignore[arg-type]
        assert stamps[0] == woke and len(stamps) == 4
        assert all(b - a >= 2_000 for a, b in itertools.pairwise(stamps))
    finally:
        rx.close()
        tx.close()
