"""A bfddp controller for the bench: adds the sessions as bfdd would, and stamps what the engine reports.

It stands where bfdd stands in a deployment (bfdd listening, the engine
connecting: ``--dplane-connect unix:PATH``), so that a bench can measure the
half of a failure that the routing protocols see: when the engine's
``BFD_STATE_CHANGE`` for a session reaches its controller. It is an
instrument, not a stand-in for bfdd in any test: it only adds sessions,
answers echoes, and records each state change with the wall-clock time at
which its bytes were read (the clock a capture stamps packets with, so the
two line up).

A unix socket, because the engine runs in a namespace of its own and the
bench does not: a path is reachable from both.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from dataclasses import dataclass
from ipaddress import ip_address
from pathlib import Path

from xdp_bfd.wire.bfddp import (
    AddSession,
    EchoReply,
    EchoRequest,
    FrameReader,
    SessionFlags,
    StateChange,
    encode_message,
)

# A silent engine must not hold the bench: every blocking call is bounded by this.
IO_TIMEOUT_S = 0.2


@dataclass(frozen=True)
class Change:
    """One BFD_STATE_CHANGE as it reached the controller."""

    at: float  # time.time() when its bytes were read
    lid: int
    state: int
    diag: int


def add_session(lid: int, local: str, peer: str, ifname: str, interval_ms: int) -> AddSession:
    """A single-hop IPv4 session as bfdd's DP_ADD_SESSION describes it (bfdd's id is our discriminator)."""
    us = interval_ms * 1000
    return AddSession(
        flags=SessionFlags(0),
        src=ip_address(local),
        dst=ip_address(peer),
        lid=lid,
        min_tx=us,
        min_rx=us,
        min_echo_tx=0,
        min_echo_rx=0,
        ttl=255,
        detect_mult=3,
        ifname=ifname,
    )


class Controller:
    """Listens on ``path``; once the engine connects, adds ``sessions`` and records what it reports."""

    def __init__(self, path: Path, sessions: list[AddSession]) -> None:
        self.path = path
        self.sessions = sessions
        self.changes: list[Change] = []
        self.connected_at: float | None = None
        self.error: str | None = None
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(1)
        self.listener.settimeout(IO_TIMEOUT_S)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="bfddp-controller", daemon=True)
        self._thread.start()

    def address(self) -> str:
        """The engine's side: ``--dplane-connect`` takes this."""
        return f"unix:{self.path}"

    def _run(self) -> None:
        try:
            conn = self._accept()
            if conn is None:
                return
            with conn:
                self._serve(conn)
        except OSError as e:
            self.error = f"{type(e).__name__}: {e}"

    def _accept(self) -> socket.socket | None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            self.connected_at = time.time()
            return conn
        return None

    def _serve(self, conn: socket.socket) -> None:
        # The adds go out as the engine takes them (it adds a session at a time, between its other
        # work), while its reports are read: neither side may wait for the other.
        conn.setblocking(False)
        out = bytearray(b"".join(encode_message(m) for m in self.sessions))
        reader = FrameReader()
        with selectors.DefaultSelector() as sel:
            sel.register(conn, selectors.EVENT_READ | selectors.EVENT_WRITE)
            while not self._stop.is_set():
                ready = sel.select(IO_TIMEOUT_S)
                at = time.time()
                events = ready[0][1] if ready else 0
                if events & selectors.EVENT_WRITE and out:
                    with contextlib.suppress(BlockingIOError):
                        del out[: conn.send(out)]
                    if not out:
                        sel.modify(conn, selectors.EVENT_READ)
                if not events & selectors.EVENT_READ:
                    continue
                try:
                    data = conn.recv(1 << 16)
                except BlockingIOError:
                    continue
                if not data:
                    self.error = "the engine closed the connection"
                    return
                for msg in reader.feed(data):
                    if isinstance(msg, StateChange):
                        with self._lock:
                            self.changes.append(Change(at, msg.lid, int(msg.state), int(msg.diag)))
                    elif isinstance(msg, EchoRequest):
                        if not out:
                            sel.modify(conn, selectors.EVENT_READ | selectors.EVENT_WRITE)
                        out += encode_message(EchoReply(msg.dp_time, int(at * 1e6)))

    def recorded(self) -> list[Change]:
        with self._lock:
            return list(self.changes)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.listener.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
