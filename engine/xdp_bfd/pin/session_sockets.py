"""``--pin``: the sessions' sockets change hands with their state.

RFC 5881 §4 wants one source port for a session's whole life. Left to the
old engine's exit, every port is free for a moment (another process could
take one) and the successor makes each socket again: a socket, its options
and a bind, about 15 µs a session unloaded and three times that beside 1024
sessions' traffic (docs/benchmarks.md). Passed, the successor checks what the
kernel says each one is (``core.netio.adoptable``) and keeps it.

The rendezvous is fdpass.py's, on a channel of its own: before it signals
the old engine, the successor listens; the old engine connects at its
warm-up (:class:`Sender`) and sends messages of at most :data:`PER_MESSAGE`
descriptors (the kernel's limit for one message), each with a header naming
every descriptor's session and source port; at the request it sends only the
sessions' sockets it has not passed yet (sessions added since), and exits.
A socket passed early is the same socket, not a copy: the old engine goes on
sending from it, the successor only holds it. The successor reads what the
warm-up passed before the request (:func:`receive_early`), so that each can be
checked against the warm-up's record of its session then, and the rest once
the old engine is gone; a session passed twice keeps the later socket.
Whatever does not arrive (no listener, a full socket buffer, a truncated
message, a header that does not add up) is made afresh on its recorded port,
as before; nothing passed is trusted beyond what the kernel reports about it.
"""

from __future__ import annotations

import contextlib
import logging
import operator
import os
import socket
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..core.netio import SOURCE_PORT_FIRST, SOURCE_PORT_LAST
from . import fdpass

log = logging.getLogger("xdp_bfd")

CHANNEL = b"/sessions"
PER_MESSAGE = 253  # SCM_MAX_FD: descriptors the kernel takes in one message
# A message's header: about 20 bytes a descriptor; the rest is room.
MAX_MESSAGE = 16 << 10
SEND_BUFFER = 1 << 20  # 4096 sessions take 17 messages of about 6 KiB each


class Sender:
    """Old engine: one connection to the successor, from its warm-up to the exit (PassError if none).

    Remembers what each session passed (its transmitter, whose socket and port
    never change), so that the request sends only what is new.
    """

    def __init__(self, root: Path) -> None:
        self.sock, self.pid = fdpass.connect(root, CHANNEL)
        with contextlib.suppress(OSError):
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        self.passed: dict[int, Any] = {}  # discriminator -> the transmitter whose socket went
        self.broken = False

    def carried(self, discrs: Sequence[int], txs: Sequence[Any]) -> bool:
        """Whether this connection carried the socket of each session (``discrs[i]``'s is ``txs[i]``).

        In C, without a Python frame a session: the request's question when the
        warm-up passed them all (it did at 1024 sessions in every bench run).
        """
        return len(discrs) == len(txs) and all(map(operator.is_, map(self.passed.get, discrs), txs))

    def pass_sessions(self, sessions: Iterable[tuple[int, Any]]) -> tuple[int, int]:
        """Pass the socket of each ``(discriminator, transmitter)`` this connection has not carried
        yet; (passed now, how many it had not carried)."""
        passed = self.passed
        new = [
            (discr, tx, fd)
            for discr, tx in sessions
            if passed.get(discr) is not tx and (fd := tx.fileno()) >= 0
        ]
        sent = self.send([(discr, tx.sport, fd) for discr, tx, fd in new])
        for discr, tx, _fd in new[:sent]:
            passed[discr] = tx
        return sent, len(new)

    def send(self, sockets: Sequence[tuple[int, int, int]]) -> int:
        """Pass ``(discriminator, source port, descriptor)`` of each; how many went, in order.

        Stops at the first message the socket does not take; the connection
        is then ``broken`` (the successor keeps what came before it).
        """
        sent = 0
        for i in range(0, len(sockets), PER_MESSAGE):
            chunk = sockets[i : i + PER_MESSAGE]
            header = {"pid": os.getpid(), "fds": [[discr, sport] for discr, sport, _fd in chunk]}
            try:
                socket.send_fds(self.sock, [fdpass.pack(header, b"", b"")], [fd for _d, _p, fd in chunk])
            except OSError as e:
                self.broken = True
                log.warning("pin: %d session sockets passed, the rest not: %s", sent, e.strerror or e)
                break
            sent += len(chunk)
        return sent

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class Passed:
    """Successor: the sockets the old engine passed, by discriminator, until each is taken."""

    def __init__(self) -> None:
        self.fds: dict[int, tuple[int, int]] = {}  # discriminator -> (source port, descriptor)
        self.refused = 0  # descriptors received but unusable (closed at once)
        # Made into sockets and checked before the request (pin.state.check_early), by
        # discriminator: (source port, socket, what the check was made against).
        self.checked: dict[int, tuple[int, socket.socket, Any]] = {}
        self.conn: socket.socket | None = None  # the old engine's connection, read before the request

    def take(self, discr: int, sport: int) -> int | None:
        """The descriptor passed for session ``discr`` on ``sport``, yours to close; None if none was."""
        got = self.fds.pop(discr, None)
        if got is None:
            return None
        if got[0] != sport:
            os.close(got[1])
            self.refused += 1
            return None
        return got[1]

    def checked_for(self, discr: int) -> tuple[int, socket.socket, Any] | None:
        """The socket checked before the request for session ``discr``, yours to close; None if none was."""
        return self.checked.pop(discr, None)

    def close(self) -> None:
        """Close every descriptor nobody took (their sessions were not restored)."""
        for _sport, fd in self.fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()
        for _sport, sock, _against in self.checked.values():
            sock.close()
        self.checked.clear()
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def receive(self, conn: socket.socket) -> None:
        while True:
            try:
                data, fds, flags, _ = socket.recv_fds(conn, MAX_MESSAGE, PER_MESSAGE, socket.MSG_CMSG_CLOEXEC)
            except (BlockingIOError, InterruptedError):
                return
            if not data and not fds:
                return  # the old engine closed its end: that was all
            self._add(data, fds, flags)

    def _add(self, data: bytes, fds: list[int], flags: int) -> None:
        pairs = _pairs(data, len(fds)) if not flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) else None
        if pairs is None:
            for fd in fds:
                os.close(fd)
            self.refused += len(fds)
            return
        for (discr, sport), fd in zip(pairs, fds, strict=True):
            earlier = self.fds.get(discr)
            if earlier is not None:
                # Passed at the warm-up and again at the request: the session's socket changed.
                os.close(earlier[1])
                self.refused += 1
            checked = self.checked.pop(discr, None)
            if checked is not None:  # the same, for one already checked before the request
                checked[1].close()
                self.refused += 1
            self.fds[discr] = (sport, fd)


def _pairs(data: bytes, n: int) -> list[tuple[int, int]] | None:
    """Each of the message's ``n`` descriptors' (discriminator, source port); None if it says otherwise."""
    try:
        header, _in, _out = fdpass.unpack(data)
    except fdpass.PassError:
        return None
    out = []
    for item in header["fds"]:
        if not (isinstance(item, list) and len(item) == 2 and all(type(v) is int for v in item)):
            return None
        discr, sport = item
        if not (1 <= discr < 1 << 32 and SOURCE_PORT_FIRST <= sport <= SOURCE_PORT_LAST):
            return None
        out.append((discr, sport))
    return out if len(out) == n else None


def open_inbox(root: Path) -> fdpass.Inbox | None:
    """Successor, before the request: the inbox for the sessions' sockets, or None (and why)."""
    return fdpass.open_channel(root, CHANNEL, "the sessions' sockets")


def receive_early(inbox: fdpass.Inbox | None, sender: int) -> Passed:
    """Successor, after ``sender``'s warm-up and before the request: what it passed so far.

    The connection is kept for :func:`collect`. One that fails here is
    dropped (why, logged): what came stays, the rest is made afresh.
    """
    passed = Passed()
    if inbox is None:
        return passed
    try:
        passed.conn = inbox.accept_from(sender)
        if passed.conn is not None:
            passed.receive(passed.conn)
    except (fdpass.PassError, OSError) as e:
        log.warning("pin: the sessions' sockets were not received at the warm-up: %s", e)
        if passed.conn is not None:
            passed.conn.close()
            passed.conn = None
    return passed


def collect(inbox: fdpass.Inbox | None, sender: int, early: Passed | None = None) -> Passed:
    """Successor, once ``sender`` is gone: what it passed (maybe nothing, and why, logged).

    ``early``: what :func:`receive_early` read before the request; the rest
    comes on the connection it kept. Closes the inbox.
    """
    passed = early if early is not None else Passed()
    conn, passed.conn = passed.conn, None
    fdpass.receive_channel(inbox, sender, passed.receive, "the sessions' sockets", conn)
    return passed


__all__ = ["CHANNEL", "PER_MESSAGE", "Passed", "Sender", "collect", "open_inbox", "receive_early"]
