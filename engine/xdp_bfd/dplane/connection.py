"""One bfdd stream: framing in, a bounded buffer out, and the stamps of our ECHO_REQUESTs.

Nothing here decides what a message means or when a connection is made:
the :class:`Owner` (the transport) is told of every message and of the end.
"""

from __future__ import annotations

import contextlib
import socket
import time
from typing import TYPE_CHECKING, Protocol

from ..wire.bfddp import FrameReader, Message, encode_message
from ..wire.errors import CodecError

if TYPE_CHECKING:
    from ..core.host import Loop

# bfdd's own buffers are 8 KiB; 1 MiB is ~29000 state changes, far more than
# any burst we produce, so reaching it means bfdd is not reading at all.
OUTPUT_LIMIT = 1 << 20
# Bounded work per wake-up, so a flood from bfdd cannot starve session timers:
# 16 KiB is twice bfdd's own output buffer and at most ~1400 counters requests;
# the selector is level-triggered, so the rest is read on the next turn of the
# loop, after the timers that are due.
READ_CHUNK = 16384
READS_PER_WAKE = 1


class Owner(Protocol):
    """What a connection reports to: its messages, and its end."""

    def handle(self, conn: Connection, msg: Message, now_us: int) -> None: ...

    def lost(self, conn: Connection, reason: str, now_us: int) -> None:
        """bfdd ended it (closed, reset)."""

    def drop(self, conn: Connection, reason: str, now_us: int) -> None:
        """We end it (framing error, bfdd not reading, no keepalive)."""


class EchoStamps:
    """The dp_time of our ECHO_REQUESTs, kept across connections (and a --pin takeover)."""

    def __init__(self) -> None:
        self.last = 0

    def next(self) -> int:
        # µs since the epoch as bfddp says, strictly increasing so that a reply
        # names exactly one request.
        t = max(time.time_ns() // 1000, self.last + 1)
        self.last = t
        return t


class Connection:
    """One bfdd stream: framing in, a bounded buffer out. Its owner decides what it means."""

    def __init__(self, loop: Loop, owner: Owner, sock: socket.socket, now_us: int) -> None:
        self.loop = loop
        self.owner = owner
        self.sock = sock
        self.reader = FrameReader()
        self.out = bytearray()
        self.open = True
        self.failed: str | None = None
        self._writing = False
        self.barrier: int | None = None
        self.proven = False  # bfdd answered the barrier: this is a working bfdd
        self.last_reply_us = now_us
        loop.watch(sock, self.on_ready)

    def send(self, *msgs: Message) -> None:
        if not self.open or self.failed:
            return
        for m in msgs:
            self.out += encode_message(m)
        if len(self.out) > OUTPUT_LIMIT:
            self.fail(f"output buffer over {OUTPUT_LIMIT} bytes: bfdd is not reading")
            return
        self.flush()

    def flush(self) -> None:
        while self.out and self.open and not self.failed:
            try:
                n = self.sock.send(self.out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                self.fail(f"send: {e.strerror or e}")
                return
            del self.out[:n]
        self._want_write(bool(self.out))

    def _want_write(self, on: bool) -> None:
        if on == self._writing or not self.open:
            return
        self._writing = on
        self.loop.watch(self.sock, self.on_ready, write=on)

    def fail(self, reason: str) -> None:
        """Stop all I/O now; the disconnect runs from the loop, not from inside a caller."""
        if self.failed or not self.open:
            return
        self.failed = reason
        self.loop.call_at(0, lambda now: self.owner.drop(self, reason, now))

    def on_ready(self, now_us: int) -> None:
        if not self.open:
            return
        if self.out:
            self.flush()
        self.pump(now_us)

    def pump(self, now_us: int, reads: int = READS_PER_WAKE) -> None:
        """Read and handle what bfdd sent, a bounded amount per call."""
        for _ in range(reads):
            if not self.open or self.failed:
                return
            try:
                data = self.sock.recv(READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                self.owner.lost(self, e.strerror or str(e), now_us)
                return
            if not data:
                self.owner.lost(self, "connection closed by bfdd", now_us)
                return
            try:
                msgs = self.reader.feed(data)
            except CodecError as e:
                self.owner.drop(self, f"framing error: {e}", now_us)
                return
            for m in msgs:
                self.owner.handle(self, m, now_us)
                if not self.open or self.failed:
                    return

    def close(self) -> None:
        if not self.open:
            return
        self.open = False
        self.loop.unwatch(self.sock)
        with contextlib.suppress(OSError):
            self.sock.close()


# --- the data plane ---------------------------------------------------------------------


def error_text(e: Exception) -> str:
    return e.strerror if isinstance(e, OSError) and e.strerror else str(e)


__all__ = ["OUTPUT_LIMIT", "READS_PER_WAKE", "READ_CHUNK", "Connection", "EchoStamps", "Owner", "error_text"]
