"""Only allowed users may be the dataplane: every bfddp socket is vetted before it counts as bfdd.

Listen mode: each accepted connection's owner (:mod:`.peer`) must be an
allowed user (``--dplane-allow``, default FRR's ``frr`` and root); anyone
else is refused before the transport sees it — the socket closed, one log
line, the ``refused`` counter — so a stranger can neither drive sessions nor
take the one-bfdd slot, nor end a ``--dp-hold`` window by answering the
barrier. Connect mode: the listener we reached must be owned by an allowed
user, or a local user who bound bfdd's port first would receive the
engine's session state; the transport closes and retries with its backoff.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from .peer import (
    DEFAULT_ALLOWED,
    CredentialError,
    Endpoint,
    Peer,
    connecting_tcp_peer,
    listening_tcp_peer,
    name_in_own_root,
    unix_peer,
    with_process,
)

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger("xdp_bfd.dplane")

# Listen mode, a stranger hammering the port: at most this many refusals are
# logged (each with a /proc scan for the pid) per window; the rest are only
# counted, and the next line that is logged says how many went unlogged.
LOG_BURST = 10
LOG_WINDOW_US = 60_000_000

NOT_ALLOWED = "not an allowed dataplane user"


class Gate:
    """The allowed uids, the vetting of one socket, and the count of refusals."""

    def __init__(
        self,
        allowed: Iterable[int],
        *,
        kind: str,
        mode: str,
        display: str,
        names: Iterable[str] = DEFAULT_ALLOWED,
        lookup_process: Callable[[Peer], Peer] = with_process,
        lookup_root_name: Callable[[int, int], str | None] = name_in_own_root,
    ) -> None:
        self.allowed = frozenset(allowed)
        # Allowed by name in the peer's own root (FRR run from a chroot of its own).
        self.names = frozenset(names)
        self._root_name = lookup_root_name
        self._root_checks_in_window = 0
        self.kind = kind  # "ipv4", "ipv6" or "unix"
        self.mode = mode  # "listen" or "connect"
        self.display = display
        self.refused = 0
        self._process = lookup_process
        self._window_start_us: int | None = None
        self._logged_in_window = 0
        self._unlogged = 0
        self._last_connect_refusal: tuple[object, ...] | None = None

    def vet(self, sock: socket.socket, now_us: int) -> Peer | None:
        """The peer when it may be the dataplane; None when refused (logged, counted; the caller closes)."""
        try:
            peer = self.credentials(sock)
        except CredentialError as e:
            self._refuse(
                now_us, ("unknown", str(e)), lambda: self._where(sock), f"cannot establish who it is ({e})"
            )
            return None
        if peer.uid not in self.allowed:
            full = self._with_process_if_named(peer, now_us)
            name = self._root_name(full.pid, full.uid) if full is not None and full.pid is not None else None
            if full is not None and name in self.names:
                self._last_connect_refusal = None
                return replace(full, root_name=name)

            def who() -> str:
                # The process is looked up only for a line that is logged (the root check's is reused).
                return (full or self._process(peer)).describe()

            self._refuse(now_us, (peer.uid, peer.inode, peer.pid), who, NOT_ALLOWED)
            return None
        self._last_connect_refusal = None
        # No /proc scan for an allowed peer: reconnecting stays as quick as it was.
        return peer

    def _with_process_if_named(self, peer: Peer, now_us: int) -> Peer | None:
        """``peer`` with its process, for the own-root name check (peer.name_in_own_root); None: no check.

        A TCP peer's pid takes a /proc scan, so a stranger hammering the port
        gets at most LOG_BURST of them per window, as for the log lines.
        """
        if not self.names:
            return None
        if self._window_start_us is None or now_us - self._window_start_us >= LOG_WINDOW_US:
            self._window_start_us, self._logged_in_window, self._root_checks_in_window = now_us, 0, 0
        if self._root_checks_in_window >= LOG_BURST:
            return None
        self._root_checks_in_window += 1
        return self._process(peer)

    def credentials(self, sock: socket.socket) -> Peer:
        if self.kind == "unix":
            return unix_peer(sock)
        try:
            ours, theirs = Endpoint.of(sock.getsockname()), Endpoint.of(sock.getpeername())
        except OSError as e:
            raise CredentialError(f"the socket has no address: {e.strerror or e}") from None
        if self.mode == "listen":
            return connecting_tcp_peer(ours, theirs)
        return listening_tcp_peer(ours, theirs)

    def _where(self, sock: socket.socket) -> str:
        if self.mode == "connect":
            return "owner unknown"  # the line names the listener's address already
        if self.kind == "unix":
            return self.display
        try:
            return str(Endpoint.of(sock.getpeername()))
        except (OSError, ValueError):
            return "an unknown address"

    def _refuse(self, now_us: int, key: tuple[object, ...], who: Callable[[], str], why: str) -> None:
        self.refused += 1
        if self.mode == "connect":
            # The same listener refused at every retry: said once, until something changes.
            if key == self._last_connect_refusal:
                return
            self._last_connect_refusal = key
            log.warning("dplane: refused the listener on %s, %s: %s; retrying", self.display, who(), why)
            return
        if self._window_start_us is None or now_us - self._window_start_us >= LOG_WINDOW_US:
            self._window_start_us, self._logged_in_window = now_us, 0
        if self._logged_in_window >= LOG_BURST:
            self._unlogged += 1
            return
        self._logged_in_window += 1
        extra = f" ({self._unlogged} more refused without a line before this one)" if self._unlogged else ""
        self._unlogged = 0
        log.warning("dplane: refused a connection from %s: %s%s", who(), why, extra)


__all__ = ["LOG_BURST", "LOG_WINDOW_US", "NOT_ALLOWED", "Gate"]
