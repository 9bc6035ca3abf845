"""The engine's read of a receiver: a datagram at a time, and a pending signal ends it."""

from __future__ import annotations

import socket
from types import SimpleNamespace

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
