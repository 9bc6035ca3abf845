"""``--pin``: the packet sockets change hands too, so that the old engine's exit waits for nothing.

The last close of an AF_PACKET socket waits for an RCU grace period
(``packet_release`` calls ``synchronize_net``): about 6 ms unloaded here and
6-15 ms of the old engine's exit in the bench's takeovers at 1024 sessions, on
the takeover's path (docs/benchmarks.md, "A takeover's exit"). The
engine holds one for the transmit clock's loop (fastpath/loop.py) and one per
interface it sends its own echo on (fastpath/echo.py). Passed to the
successor, the old engine's close drops a reference, not the socket; the
successor sends on the same sockets (the loop's frames in flight stay charged
to the socket that sent them) and closes, at its own stop, those it never
takes.

The rendezvous is session_sockets.py's, on a channel of its own; a message
names each descriptor's interface index. The old engine passes them at its
warm-up over a connection it keeps (:class:`Sender`), and at the request only
a socket it has opened since (none, as a rule): the request then makes no
connection of its own. The successor reads every message of the one
connection once the old engine is gone; a later socket for an interface
replaces an earlier one. Nothing passed is trusted beyond what the kernel
says: a descriptor that is not an AF_PACKET raw socket bound to the interface
it is named for is closed at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Sequence
from pathlib import Path

from . import fdpass

log = logging.getLogger("xdp_bfd")

CHANNEL = b"/packet"
MAX_SOCKETS = 64  # the loop's and one per echo interface: far below SCM_MAX_FD
MAX_MESSAGE = 4 << 10
# Messages a successor reads from one connection: the warm-up's and the request's, with room.
MAX_MESSAGES = 8


def _message(sock: socket.socket, items: Sequence[tuple[int, int]]) -> None:
    header = {"pid": os.getpid(), "fds": [ifindex for ifindex, _fd in items]}
    try:
        socket.send_fds(sock, [fdpass.pack(header, b"", b"")], [fd for _i, fd in items])
    except OSError as e:
        raise fdpass.PassError(f"send: {e.strerror or e}") from None


def _inode(fd: int) -> int:
    """The socket's inode: what tells it from a later one under the same number (0 if it is closed,
    which the message then refuses as ever)."""
    try:
        return os.fstat(fd).st_ino
    except OSError:
        return 0


def send(root: Path, sockets: Sequence[tuple[int, int]]) -> int:
    """Old engine: pass ``(interface index, descriptor)`` of each packet socket; the successor's pid.

    PassError when nobody listens or the message is not taken: the sockets then
    close with the process, as before.
    """
    items = list(sockets)[:MAX_SOCKETS]
    s, pid = fdpass.connect(root, CHANNEL)
    with s:
        _message(s, items)
    return pid


class Sender:
    """Old engine: one connection to the successor from the warm-up to the exit (PassError if none).

    Remembers each socket it passed by interface and inode (a descriptor's
    number can be reused), so that the request passes only what is new.
    """

    def __init__(self, root: Path) -> None:
        self.sock, self.pid = fdpass.connect(root, CHANNEL)
        self.passed: set[tuple[int, int]] = set()
        self.broken = False

    def pass_new(self, sockets: Sequence[tuple[int, int]]) -> tuple[int, int]:
        """Pass each ``(interface index, descriptor)`` not passed yet; (passed now, how many were new).

        A message the socket does not take leaves the connection ``broken``.
        """
        new = [
            (i, fd, ino) for i, fd in list(sockets)[:MAX_SOCKETS] if (i, ino := _inode(fd)) not in self.passed
        ]
        if not new or self.broken:
            return 0, len(new)
        try:
            _message(self.sock, [(i, fd) for i, fd, _ino in new])
        except fdpass.PassError as e:
            self.broken = True
            log.warning("pin: the packet sockets were not passed: %s", e)
            return 0, len(new)
        self.passed.update((i, ino) for i, _fd, ino in new)
        return len(new), len(new)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class PacketSockets:
    """Successor: the packet sockets the old engine passed, by interface index, until each is taken."""

    def __init__(self) -> None:
        self.socks: dict[int, socket.socket] = {}
        self.refused = 0

    def take(self, ifindex: int) -> socket.socket | None:
        """The socket passed for ``ifindex`` (yours from now on), or None."""
        return self.socks.pop(ifindex, None)

    def close(self) -> None:
        """Close what nobody took (at the engine's stop: each last close waits for a grace period)."""
        for s in self.socks.values():
            with contextlib.suppress(OSError):
                s.close()
        self.socks.clear()

    def receive(self, conn: socket.socket) -> None:
        """Every message of ``conn`` (the old engine is gone: they are all there), in order."""
        for _ in range(MAX_MESSAGES):
            try:
                data, fds, flags, _ = socket.recv_fds(conn, MAX_MESSAGE, MAX_SOCKETS, socket.MSG_CMSG_CLOEXEC)
            except (BlockingIOError, InterruptedError):
                return
            if not data and not fds:
                return  # the end of the connection
            self._take_message(data, fds, flags)

    def _take_message(self, data: bytes, fds: list[int], flags: int) -> None:
        names = _indexes(data, len(fds)) if not flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) else None
        seen: set[int] = set()
        for i, fd in enumerate(fds):
            ifindex = names[i] if names is not None else 0
            if ifindex in seen:  # one socket an interface a message
                os.close(fd)
                s = None
            else:
                s = _packet_socket(fd, ifindex)
            if s is None:
                self.refused += 1
                continue
            seen.add(ifindex)
            # A later message's socket replaces an earlier one's.
            earlier = self.socks.pop(ifindex, None)
            if earlier is not None:
                earlier.close()
            self.socks[ifindex] = s


def _indexes(data: bytes, n: int) -> list[int] | None:
    """Each of the message's ``n`` descriptors' interface index; None if the header says otherwise."""
    try:
        header, _in, _out = fdpass.unpack(data)
    except fdpass.PassError:
        return None
    out = header["fds"]
    if len(out) != n or not all(type(v) is int and 1 <= v < 1 << 31 for v in out):
        return None
    return out


def _packet_socket(fd: int, ifindex: int) -> socket.socket | None:
    """``fd`` as a socket if it is an AF_PACKET raw socket bound to ``ifindex``; else closed, None."""
    try:
        s = socket.socket(fileno=fd)  # the kernel says what it is (SO_DOMAIN, SO_TYPE)
    except OSError:
        os.close(fd)
        return None
    try:
        bound = s.family == socket.AF_PACKET and s.type == socket.SOCK_RAW and ifindex > 0
        if bound and socket.if_nametoindex(s.getsockname()[0]) == ifindex:
            return s
    except (OSError, IndexError, TypeError):
        pass
    s.close()
    return None


def open_inbox(root: Path) -> fdpass.Inbox | None:
    """Successor, before the request: the inbox for the packet sockets, or None (and why)."""
    return fdpass.open_channel(root, CHANNEL, "the packet sockets (and the old engine's exit waits)")


def collect(inbox: fdpass.Inbox | None, sender: int) -> PacketSockets:
    """Successor, once ``sender`` is gone: what it passed (maybe nothing, and why, logged)."""
    passed = PacketSockets()
    fdpass.receive_channel(inbox, sender, passed.receive, "the packet sockets")
    return passed


__all__ = ["CHANNEL", "PacketSockets", "Sender", "collect", "open_inbox", "send"]
