"""How the engine and bfdd reach each other: listen or connect, back off, keep alive, disconnect.

Either side may listen: ``--dplane-listen`` (bfdd ``ipv4c:``, FRR
10.1.2+/10.2.1+/10.3+) or ``--dplane-connect`` (bfdd ``ipv4:``/``ipv6:``/
``unix:``, every release, FRR 8.4 included). Every socket is vetted first
(:mod:`.gate`: only allowed users may be the dataplane). One bfdd at a time; what its
messages mean is the handler's business (:mod:`.dispatch`), what becomes of
its sessions when it goes is the hold's (:mod:`.hold`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import stat
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.errors import EngineError
from ..wire.bfddp import EchoRequest, Message
from .connection import Connection, EchoStamps, error_text

if TYPE_CHECKING:
    from ..core.host import Host
    from .address import DplaneAddress
    from .gate import Gate
    from .hold import Hold
    from .peer import Peer

log = logging.getLogger("xdp_bfd.dplane")

# Keepalive: an ECHO_REQUEST every second; any EchoReply proves bfdd alive.
# The limit is generous on purpose: a busy bfdd (a large config load) must not
# cost a reconnect, and a dead bfdd process closes its socket anyway — this
# only catches a wedged one, so that a restarted bfdd can take its place.
ECHO_INTERVAL_US = 1_000_000
DEAD_AFTER_US = 10_000_000

# Connect mode: 0.1 s doubling to 3 s. While held sessions wait for bfdd the
# retry stays at 0.1 s: a restarted bfdd runs the peers of its configuration in
# software until a data plane attaches, and the first Down packet it sends
# takes the peer down — every 100 ms of waiting is a chance for one to leave.
BACKOFF_FIRST_US = 100_000
BACKOFF_MAX_US = 3_000_000
BACKOFF_HOLDING_US = 100_000


class Transport:
    """The bfddp sockets of one engine; :class:`~.connection.Owner` of the connection it made."""

    def __init__(
        self,
        host: Host,
        addr: DplaneAddress,
        *,
        mode: str,
        hold: Hold,
        stamps: EchoStamps,
        handler: Callable[[Connection, Message, int], None],
        gate: Gate,
    ) -> None:
        self.host = host
        self.gate = gate
        self.addr = addr
        self.mode = mode
        self.hold = hold
        self.stamps = stamps
        self.handler = handler
        self.conn: Connection | None = None
        self.listener: socket.socket | None = None
        self.connections = 0
        self._closed = False
        self._connecting: socket.socket | None = None
        self._backoff_us = BACKOFF_FIRST_US
        self._announced = False
        self._unix_path_made: str | None = None

    def start(self, now_us: int) -> None:
        if self.mode == "listen":
            if self.listener is None:
                self._listen()
        elif self.conn is None:
            self._try_connect(now_us)

    def close(self) -> None:
        """Stop talking to bfdd. Sessions are left to the engine (whose shutdown AdminDowns them)."""
        self._closed = True
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        for s in (self.listener, self._connecting):
            if s is not None:
                self.host.unwatch(s)
                s.close()
        self.listener = self._connecting = None
        if self._unix_path_made is not None:
            _unlink_socket(self._unix_path_made)
            self._unix_path_made = None

    # -- sockets ------------------------------------------------------------------------

    def _family(self) -> int:
        return {"ipv4": socket.AF_INET, "ipv6": socket.AF_INET6, "unix": socket.AF_UNIX}[self.addr.kind]

    def _sockaddr(self) -> Any:
        if self.addr.kind == "unix":
            return self.addr.host
        if self.addr.kind == "ipv6":
            return (self.addr.host, self.addr.port, 0, 0)
        return (self.addr.host, self.addr.port)

    def _listen(self) -> None:
        s = socket.socket(self._family(), socket.SOCK_STREAM)
        try:
            if self.addr.kind == "unix":
                _unlink_socket(self.addr.host)
            else:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if self.addr.kind == "ipv6":
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind(self._sockaddr())
            s.listen(8)
            s.setblocking(False)
        except OSError as e:
            s.close()
            raise EngineError(f"dplane: cannot listen on {self.addr.display}: {e.strerror or e}") from None
        if self.addr.kind == "unix":
            self._unix_path_made = self.addr.host
        self.listener = s
        self.host.watch(s, self._on_accept)
        log.info("dplane: listening on %s (bfdd: %s)", self.addr.display, self.addr.bfdd_client_form())

    def _on_accept(self, now_us: int) -> None:
        for _ in range(8):
            if self.listener is None:
                return
            try:
                sock, peer = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                # EMFILE and friends: leave it in the backlog, the loop will come back.
                log.warning("dplane: accept: %s", e.strerror or e)
                return
            # Who it is comes first: a stranger is refused before it can count
            # as bfdd, and before the slot's rules below look at it.
            who = self.gate.vet(sock, now_us)
            if who is None:
                sock.close()
                continue
            if self.conn is not None:
                # A bfdd that went away may have left its EOF unread behind this accept.
                self.conn.pump(now_us, reads=16)
                if self.conn is not None and self.conn.failed:
                    self.drop(self.conn, self.conn.failed, now_us)
            if self.conn is not None:
                # One bfdd at a time: a stray local client must not be able to cut
                # off a working bfdd. A wedged bfdd is dropped by the keepalive,
                # after which its successor's retry (every 3 s) gets in.
                log.warning("dplane: refusing a second connection from %s: bfdd is connected", peer or "unix")
                sock.close()
                continue
            self._attach(sock, now_us, who)

    def _try_connect(self, now_us: int) -> None:
        if self._closed or self.conn is not None or self._connecting is not None:
            return
        if not self._announced:
            log.info("dplane: connecting to %s", self.addr.display)
            self._announced = True
        try:
            s = socket.socket(self._family(), socket.SOCK_STREAM)
        except OSError as e:  # out of descriptors: try again later
            self._retry(now_us, error_text(e))
            return
        try:
            s.setblocking(False)
            err = s.connect_ex(self._sockaddr())
        except OSError as e:  # e.g. a unix path too long for sockaddr_un
            err = e.errno or errno.EINVAL
        if err == 0:
            self._vetted(s, now_us)
        elif err in (errno.EINPROGRESS, errno.EAGAIN, errno.EALREADY):
            self._connecting = s
            self.host.watch(s, self._on_connect_ready, read=False, write=True)
        else:
            s.close()
            self._retry(now_us, os.strerror(err))

    def _on_connect_ready(self, now_us: int) -> None:
        s = self._connecting
        if s is None:
            return
        self._connecting = None
        self.host.unwatch(s)
        err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            s.close()
            self._retry(now_us, os.strerror(err))
            return
        self._vetted(s, now_us)

    def _vetted(self, sock: socket.socket, now_us: int) -> None:
        """Connect mode: attach only to a listener an allowed user owns; else close and back off."""
        who = self.gate.vet(sock, now_us)
        if who is None:
            sock.close()
            self._retry(now_us, "the listener's owner is not an allowed dataplane user")
            return
        self._attach(sock, now_us, who)

    def _retry(self, now_us: int, why: str) -> None:
        cap = BACKOFF_HOLDING_US if self.hold.holding() else BACKOFF_MAX_US
        delay = min(self._backoff_us, cap)
        self._backoff_us = min(self._backoff_us * 2, cap)
        log.debug("dplane: connect to %s failed (%s); next try in %.1fs", self.addr.display, why, delay / 1e6)
        self.host.call_at(now_us + delay, self._try_connect)

    def _attach(self, sock: socket.socket, now_us: int, who: Peer) -> None:
        sock.setblocking(False)
        if self.addr.kind != "unix":
            # Small messages that bfdd waits for (counters replies): no Nagle delay.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Connection(self.host, self, sock, now_us)
        self.conn = conn
        self.connections += 1
        self._announced = False
        log.info("dplane: bfdd connected as %s", who.user())
        # bfdd sends its registrations first and answers in order: the reply to
        # this one marks the end of the burst.
        conn.barrier = self.echo(conn)
        self.host.call_at(now_us + ECHO_INTERVAL_US, lambda now: self._keepalive(conn, now))

    def echo(self, conn: Connection) -> int:
        t = self.stamps.next()
        conn.send(EchoRequest(t))
        return t

    def _keepalive(self, conn: Connection, now_us: int) -> None:
        if conn is not self.conn or not conn.open or conn.failed:
            return
        if now_us - conn.last_reply_us > DEAD_AFTER_US:
            self.drop(conn, f"no echo reply from bfdd for {DEAD_AFTER_US // 1_000_000} s", now_us)
            return
        self.echo(conn)
        self.host.call_at(now_us + ECHO_INTERVAL_US, lambda now: self._keepalive(conn, now))

    # -- disconnects ---------------------------------------------------------------------

    def drop(self, conn: Connection, reason: str, now_us: int) -> None:
        """We end the connection (framing error, bfdd not reading, no keepalive)."""
        if conn.open:
            log.warning("dplane: dropping connection: %s", reason)
        self.disconnected(conn, now_us)

    def lost(self, conn: Connection, reason: str, now_us: int) -> None:
        """bfdd ended it (closed, reset)."""
        if conn.open:
            log.info("dplane: bfdd disconnected (%s)", reason)
        self.disconnected(conn, now_us)

    def disconnected(self, conn: Connection, now_us: int) -> None:
        if not conn.open:
            return
        conn.close()
        if self.conn is conn:
            self.conn = None
        self.hold.bfdd_gone(now_us)
        if self.mode == "connect" and not self._closed:
            # A bfdd that had answered the barrier was working: try again at
            # once, it may only have dropped this connection. One that never
            # answered keeps backing off, so a bfdd that accepts and closes
            # cannot make us spin.
            if conn.proven:
                self._backoff_us = BACKOFF_FIRST_US
                self.host.call_at(now_us, self._try_connect)
            else:
                self._retry(now_us, "connection ended before bfdd answered")

    # -- what the connection and its messages tell us ------------------------------------

    def handle(self, conn: Connection, msg: Message, now_us: int) -> None:
        self.handler(conn, msg, now_us)

    def barrier_passed(self, conn: Connection, now_us: int) -> None:
        """bfdd answered the barrier: a working bfdd, and the end of its registration burst."""
        conn.barrier = None
        conn.proven = True
        self._backoff_us = BACKOFF_FIRST_US
        self.hold.barrier_passed(now_us)

    # -- --pin: the sockets a predecessor handed over (resume.py) -------------------------

    def adopt_listener(self, listener: socket.socket) -> None:
        listener.setblocking(False)
        if self.addr.kind == "unix":
            self._unix_path_made = self.addr.host
        self.listener = listener
        self.host.watch(listener, self._on_accept)

    def adopt_connection(self, sock: socket.socket, now_us: int) -> Connection:
        """The predecessor's stream, as it was; the caller restores what it carried."""
        sock.setblocking(False)
        conn = Connection(self.host, self, sock, now_us)
        self.conn = conn
        self.host.call_at(now_us + ECHO_INTERVAL_US, lambda now: self._keepalive(conn, now))
        return conn


def _unlink_socket(path: str) -> None:
    # Only a stale socket: never delete a regular file someone typed by mistake.
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass


__all__ = ["BACKOFF_FIRST_US", "DEAD_AFTER_US", "ECHO_INTERVAL_US", "Transport"]
