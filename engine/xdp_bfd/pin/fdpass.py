"""``--pin`` with bfddp: the old engine passes its bfddp sockets to the successor.

bfdd must never see the data-plane connection close during a handover: FRR
8.4's bfdd takes a close as "the data plane is gone" and, when the successor
connects, disables and re-enables every session (each counts a session-down
and tells zebra Down); FRR 10.3 only reconnects after 3 s. So the connection
itself (and, when the engine listens, the listening socket) changes hands
with SCM_RIGHTS, and bfdd talks to the successor on the same TCP stream.

Rendezvous: before it signals the old engine, the successor listens on an
abstract unix socket named from the pin directory (:func:`address`). The old
engine, once its state is written, connects, sends one SOCK_SEQPACKET
message — a header, the bytes it had read but not yet decoded (part of one
frame: everything whole was handled) and the output it had not yet sent —
with the descriptors, and exits. The successor takes the message once the old
engine is gone, so it is complete or absent; absent (an older engine, an
error, a refused peer) means the old behaviour: bfdd sees a close and
reconnects.

Both ends check who is on the other side (SO_PEERCRED): the old engine sends
only to an ``xdp-bfd`` process of its own user, and the successor accepts
only from the engine it asked to leave. Abstract names are per network
namespace, as are the addresses both engines serve.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("xdp_bfd.dplane")

MAGIC = b"XBFP"
VERSION = 1
_PREFIX = struct.Struct("!4sHIII")  # magic, version, header, pending input, pending output
# The largest message accepted: bfddp's output limit plus the rest, with room.
MAX_MESSAGE = (1 << 21) + (1 << 16)
MAX_FDS = 4
FD_NAMES = ("conn", "listener")


class PassError(Exception):
    """The descriptors cannot be passed; the message says why (one log line)."""


def address(root: Path, channel: bytes = b"") -> bytes:
    """The rendezvous name: the same for both engines of one pin directory, short whatever its path.

    ``channel`` names a second rendezvous beside the bfddp one (the sessions'
    sockets, session_sockets.py): an engine of an older build listens on the
    first only, so it never takes one channel's messages for the other's.
    """
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:24]
    return b"\0xdp-bfd/handover/" + digest.encode() + channel


@dataclass
class Parcel:
    """What the old engine's data plane hands over besides the descriptors themselves."""

    header: dict[str, Any]
    pending_in: bytes = b""
    pending_out: bytes = b""
    sockets: dict[str, socket.socket] = field(default_factory=dict)

    def close(self) -> None:
        for s in self.sockets.values():
            with contextlib.suppress(OSError):
                s.close()
        self.sockets.clear()


def pack(header: dict[str, Any], pending_in: bytes, pending_out: bytes) -> bytes:
    text = json.dumps(header, separators=(",", ":")).encode()
    prefix = _PREFIX.pack(MAGIC, VERSION, len(text), len(pending_in), len(pending_out))
    return prefix + text + pending_in + pending_out


def unpack(data: bytes) -> tuple[dict[str, Any], bytes, bytes]:
    """Header and the two byte strings; PassError for anything but one whole, current message."""
    if len(data) < _PREFIX.size:
        raise PassError(f"a {len(data)}-byte message is too short")
    magic, version, n_header, n_in, n_out = _PREFIX.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise PassError(f"unknown message (magic {magic!r}, version {version})")
    if _PREFIX.size + n_header + n_in + n_out != len(data):
        raise PassError("the message length does not match its header")
    pos = _PREFIX.size
    try:
        header = json.loads(data[pos : pos + n_header])
    except ValueError as e:
        raise PassError(f"unreadable header: {e}") from None
    if not isinstance(header, dict) or not isinstance(header.get("fds"), list):
        raise PassError("the header names no descriptors")
    pos += n_header
    return header, bytes(data[pos : pos + n_in]), bytes(data[pos + n_in : pos + n_in + n_out])


def _peer(sock: socket.socket) -> tuple[int, int]:
    pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return pid, uid


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def connect(root: Path, channel: bytes = b"") -> tuple[socket.socket, int]:
    """Old engine: a connection to the successor listening for ``root`` and its pid (PassError if none).

    Non-blocking: the successor is listening before it signals us, and a
    message either fits in the socket at once or the handover falls back.
    """
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_NONBLOCK)
    try:
        try:
            s.connect(address(root, channel))
        except OSError as e:
            raise PassError(f"no successor listening ({e.strerror or e})") from None
        try:
            pid, uid = _peer(s)
        except OSError as e:
            raise PassError(f"SO_PEERCRED: {e.strerror or e}") from None
        if uid != os.geteuid() or _comm(pid) != "xdp-bfd":
            raise PassError(f"the listener is pid {pid} (uid {uid}, {_comm(pid) or 'gone'}), not an engine")
    except PassError:
        s.close()
        raise
    return s, pid


def send(root: Path, header: dict[str, Any], pending_in: bytes, pending_out: bytes,
         socks: dict[str, socket.socket]) -> int:  # fmt: skip
    """Old engine: pass ``socks`` (by name) to the successor listening for ``root``; its pid."""
    names = [n for n in FD_NAMES if n in socks]
    payload = pack({**header, "fds": names}, pending_in, pending_out)
    s, pid = connect(root)
    with s:
        if len(payload) > 65536:
            # The default send buffer (wmem_default) holds about 200 KiB per datagram.
            with contextlib.suppress(OSError):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, len(payload) + 4096)
        try:
            socket.send_fds(s, [payload], [socks[n].fileno() for n in names])
        except OSError as e:
            raise PassError(f"send: {e.strerror or e} ({len(payload)} bytes)") from None
    return pid


class Inbox:
    """Successor: the listening end, opened before the old engine is signalled."""

    def __init__(self, root: Path, channel: bytes = b"") -> None:
        self.sock = socket.socket(
            socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC
        )
        try:
            self.sock.bind(address(root, channel))
            self.sock.listen(1)
        except OSError as e:
            self.sock.close()
            raise PassError(f"cannot listen for the old engine's sockets ({e.strerror or e})") from None

    def take(self, sender: int) -> Parcel | None:
        """Once ``sender`` is gone: its parcel, or None when it sent nothing. Closes the inbox."""
        try:
            return self._take(sender)
        finally:
            self.close()

    def accept_from(self, sender: int) -> socket.socket | None:
        """The connection ``sender`` made (non-blocking), None when it made none; PassError if another did."""
        try:
            conn, _ = self.sock.accept()
        except (BlockingIOError, InterruptedError):
            return None
        try:
            pid, _uid = _peer(conn)
            if pid != sender:
                raise PassError(f"a parcel came from pid {pid}, not from engine {sender}")
            conn.setblocking(False)
        except BaseException:
            conn.close()
            raise
        return conn

    def _take(self, sender: int) -> Parcel | None:
        conn = self.accept_from(sender)
        if conn is None:
            return None
        with conn:
            try:
                data, fds, flags, _ = socket.recv_fds(conn, MAX_MESSAGE, MAX_FDS, socket.MSG_CMSG_CLOEXEC)
            except (BlockingIOError, InterruptedError):
                return None
            if not data and not fds:
                return None  # it connected, then thought better of it (refused us)
            socks = [socket.socket(fileno=fd) for fd in fds]
            parcel = Parcel({}, sockets={})
            try:
                if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                    raise PassError("the parcel was truncated")
                header, pending_in, pending_out = unpack(data)
                names = header["fds"]
                if len(names) != len(socks) or not set(names) <= set(FD_NAMES):
                    raise PassError(f"the header names {names} for {len(socks)} descriptors")
            except PassError:
                for s in socks:
                    s.close()
                raise
            parcel.header, parcel.pending_in, parcel.pending_out = header, pending_in, pending_out
            parcel.sockets = dict(zip(names, socks, strict=True))
            return parcel

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def open_channel(root: Path, channel: bytes, what: str) -> Inbox | None:
    """Successor, before the request: the inbox of a channel beside bfddp's, or None (and why)."""
    try:
        return Inbox(root, channel)
    except PassError as e:
        logging.getLogger("xdp_bfd").warning("pin: %s; %s will be made afresh", e, what)
        return None


def receive_channel(
    inbox: Inbox | None,
    sender: int,
    receive: Callable[[socket.socket], None],
    what: str,
    conn: socket.socket | None = None,
) -> None:
    """Successor, once ``sender`` is gone: its connection on ``inbox`` to ``receive`` (nothing if it
    made none; why, logged); closes the inbox and the connection. ``conn``: that connection, accepted
    and read from before (it is read on)."""
    try:
        if conn is None and inbox is not None:
            conn = inbox.accept_from(sender)
        if conn is not None:
            with conn:
                receive(conn)
    except (PassError, OSError) as e:
        logging.getLogger("xdp_bfd").warning(
            "pin: %s were not received: %s; they will be made afresh", what, e
        )
    finally:
        if inbox is not None:
            inbox.close()


def open_inbox(root: Path) -> Inbox | None:
    """Successor, before the request: an inbox, or None (and why) when there can be none."""
    if os.environ.get("XDP_BFD_TEST_NO_FDPASS"):
        # Tests: the old behaviour, to show what the pass saves.
        log.warning("dplane: not receiving the old engine's bfddp sockets (XDP_BFD_TEST_NO_FDPASS)")
        return None
    try:
        return Inbox(root)
    except PassError as e:
        log.warning("dplane: %s; bfdd will see the old engine's connection close", e)
        return None


def collect(inbox: Inbox | None, sender: int) -> Parcel | None:
    """Successor, once ``sender`` is gone: what it passed, or None (and why, logged)."""
    if inbox is None:
        return None
    try:
        parcel = inbox.take(sender)
    except (PassError, OSError) as e:
        log.warning("dplane: the old engine's bfddp sockets were not received: %s; bfdd will reconnect", e)
        return None
    if parcel is None:
        log.info("dplane: engine %d passed no bfddp sockets (none, or it could not); starting afresh", sender)
    return parcel


__all__ = [
    "Inbox",
    "Parcel",
    "PassError",
    "address",
    "collect",
    "connect",
    "open_channel",
    "open_inbox",
    "pack",
    "receive_channel",
    "send",
    "unpack",
]
