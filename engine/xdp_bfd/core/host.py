"""The seam between the loop and what plugs into it: the one interface plugins receive.

The dataplane, the fast path, ``--pin``, metrics and every later capability
are handed a :class:`Host` — never the engine's class — and reach the loop,
the session table and the stats document only through it. ``app`` builds the
engine and passes it on as a ``Host``; a test passes a fake that satisfies the
same protocol (``tests/harness/fakehost.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import socket

    from ..session import RemoteParamsChanged, Session, SessionConfig, SessionKey, StateChanged
    from .handoff import Handoff

# Takes a stats document; may return the generator of its further paced steps.
DocWaiter = Callable[[dict[str, Any]], Generator[None, None, None] | None]
Callback = Callable[[int], None]  # called with the monotonic time in µs


@dataclass(frozen=True)
class PacketCounts:
    """A session's control packets both ways, whichever path carried them."""

    rx_packets: int
    rx_bytes: int
    tx_packets: int
    tx_bytes: int


class Tx(Protocol):
    """A session's way out (core.netio.Transmitter): one socket, its source port fixed for life."""

    sport: int
    dport: int

    def send(self, data: bytes) -> bool:
        """Send one packet; False when the kernel refused it (counted, never raised)."""

    def fileno(self) -> int:
        """The socket's descriptor (a ``--pin`` successor is passed it); -1 when there is none."""

    def close(self) -> None: ...


@dataclass
class Entry:
    """One live session and what the shell keeps beside it.

    The fields after ``last_rx_raw`` belong to the fast path; they live here
    because a ``--pin`` handover carries them with the session.
    """

    session: Session
    tx: Tx
    origin: str  # "cli", "file" or "dplane"
    scheduled: int | None = None
    user_tx_packets: int = 0
    user_tx_bytes: int = 0
    rx_bytes: int = 0
    drops: Counter = field(default_factory=Counter)
    last_rx_raw: bytes = b""  # the last packet the session accepted (the fast path's "expect")
    slot: int | None = None  # None without --kernel-tx
    offloaded: bool = False
    epoch: int = 0
    detect_armed: bool = False
    kcfg: dict[str, Any] | None = None
    last_detection_us: int | None = None  # silence the kernel measured at its last expiry report
    last_detection_overshoot_us: int | None = None  # ... less the detection time then in force
    # Set by a plugin that must see the session's own packets before they leave (a meticulous
    # key's, numbered after what the kernel sent for it: fastpath/series.py); returns what to send.
    outgoing: Callable[[Entry, list[bytes]], list[bytes]] | None = None
    # Transitions the controller heard of ahead of the session's service (Host.announce), whose
    # log line that service still writes. Never outlives the turn of the loop: not handed over.
    announced: list[StateChanged] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Here rather than where sessions are added, so that sessions a --pin
        # successor recreates are watched too: the dataplane keeps bfdd's copy
        # of the peer's timers true.
        self.session.remote_events = True

    def send(self, data: bytes) -> bool:
        """Send one datagram of the session's now, counted as user-sent; False if it did not leave."""
        if not self.tx.send(data):
            return False
        self.user_tx_packets += 1
        self.user_tx_bytes += len(data)
        return True


class SessionObserver(Protocol):
    """A plugin that mirrors every session somewhere else (the fast path's maps)."""

    def added(self, entry: Entry) -> None:
        """A new session is in the table (not yet serviced)."""

    def removed(self, entry: Entry) -> None:
        """The session left the table (its AdminDown, if any, not sent yet); observers in reverse order."""

    def serviced(self, entry: Entry) -> None:
        """The session took an input and sent what it queued: mirror its new state."""

    def counts(self, entry: Entry, counts: PacketCounts) -> PacketCounts:
        """The session's packet counts with what this observer carried added in."""

    def session_stats(self, entry: Entry, out: dict[str, Any], now_ns: int) -> None:
        """Add this observer's view to the session's part of the stats document."""

    def document(self, doc: dict[str, Any]) -> None:
        """Add this observer's view to the whole stats document (its counters, its program)."""


class Loop(Protocol):
    """The reactor: file descriptors, timed callbacks, signals, exit hooks."""

    def watch(self, sock: Any, callback: Callback, *, read: bool = True, write: bool = False) -> None:
        """Call ``callback(now_us)`` whenever ``sock`` is ready as asked (registers or changes)."""

    def unwatch(self, sock: Any) -> None:
        """Forget ``sock`` (nothing happens if it was not watched)."""

    def call_at(self, deadline_us: int, callback: Callback) -> None:
        """Call ``callback(now_us)`` once, at or after ``deadline_us`` (monotonic µs)."""

    def on_signal(self, signum: int, handler: Callable[[], None]) -> None:
        """Run ``handler()`` from the loop (never from the signal handler) when ``signum`` arrives."""

    def add_closer(self, close: Callable[[], None]) -> None:
        """Run ``close()`` at shutdown, after every session said AdminDown; last added runs first."""

    def mark(self, phase: str) -> None:
        """Time a phase of a takeover (nothing outside one)."""

    def end_turn(self) -> None:
        """From a background step (a stats waiter's): the loop's turn of background work ends with it,
        and the job's next step comes with the next turn — under a reservation a period later, with
        that period's runtime."""

    def in_background(self, job: Generator[None, None, None]) -> None:
        """Run ``job`` as the loop's background work, as the stats document is built: a step at a
        time, in turns of bounded length after what is due, paced under a reservation. Jobs run
        one after the other; a stats document waits for the one under way."""

    def stop_pending(self) -> bool:
        """Whether SIGTERM or SIGINT arrived, acted on or not.

        A start-up checks it before it asks a running engine to leave: a stop
        that came during the compile (a reload that gave up on us) must leave
        the old engine serving, not take its place and then stop.
        """


class Sessions(Protocol):
    """The session table and the events of its sessions."""

    @property
    def sessions(self) -> Mapping[int, Entry]:
        """Every live session by local discriminator (a read-only view)."""

    def lookup(self, key: SessionKey) -> Entry | None:
        """The session configured for this path, if any."""

    def allocate_discr(self) -> int: ...

    def discr_free(self, discr: int) -> bool:
        """No session has ``discr`` and no S-BFD reflector is configured with it."""

    def add_session(self, config: SessionConfig, origin: str, *, discr: int | None = None) -> Entry: ...

    def update_session(self, discr: int, config: SessionConfig) -> None: ...

    def remove_session(self, discr: int, *, admin_down: bool = True) -> None: ...

    def restore_session(
        self,
        config: SessionConfig,
        origin: str,
        *,
        sport: int,
        state: dict[str, Any],
        sock: socket.socket | None = None,
        ifindex: int | None = None,
    ) -> Entry:
        """Recreate a session a predecessor handed over (``Session.export()``'s ``state``).

        It joins the table without observers being told and without being
        serviced: the caller sets what else it carried, then services it.
        ``sock``: the predecessor's socket for it, checked by
        ``core.netio.adoptable`` (else one is made on ``sport``); ``ifindex``
        its interface's index when the caller looked it up.
        """

    def restored(
        self,
        config: SessionConfig,
        origin: str,
        *,
        sport: int,
        state: dict[str, Any],
        sock: socket.socket,
        ifindex: int | None = None,
    ) -> Entry:
        """The session :meth:`restore_session` would recreate, made but not joined: the host is
        left as it was (not in the table, no source port taken) until :meth:`join_restored`.

        A takeover's successor builds the sessions of the warm-up's state this
        way before its request; one it does not join is dropped as it is
        (``sock`` stays the caller's to close).
        """

    def join_restored(self, entry: Entry) -> None:
        """Put a session :meth:`restored` made into the table (the rest as :meth:`restore_session`)."""

    def service(self, entry: Entry, now: int) -> None:
        """After any input to a session: send what it queued, report events, reschedule."""

    def announce(self, entry: Entry) -> None:
        """Report the session's pending events to the listeners (the controller) now.

        For a batch of transitions (many peers silent at once): the controller
        hears of every one before any session's slower work. The session's
        :meth:`service` must follow in the same turn of the loop; it writes
        the log lines and does the rest.
        """

    def packet_counts(self, entry: Entry) -> PacketCounts: ...

    def count_drop(self, reason: str) -> None:
        """One packet discarded for ``reason`` (the stats' ``counters.drop``)."""

    def on_state_change(self, listener: Callable[[Entry, StateChanged], None]) -> None: ...

    def on_remote_change(self, listener: Callable[[Entry, RemoteParamsChanged], None]) -> None: ...

    def add_observer(self, observer: SessionObserver) -> None: ...


class Stats(Protocol):
    """The stats document (the contract in DESIGN.md), built step by step between timers."""

    def add_stats_section(self, name: str, section: Callable[[], Any]) -> None:
        """A top-level key of the document, filled at dump time."""

    def want_stats(self, waiter: DocWaiter) -> None:
        """Hand ``waiter`` the next document the loop builds."""


class Host(Loop, Sessions, Stats, Protocol):
    """Everything a plugin may use of the engine."""

    reflects_echo: bool  # True once something reflects the peer's echo: only then may we invite it
    handoff: Handoff  # what plugins hand a --pin successor, and what a predecessor handed us


__all__ = [
    "Callback",
    "DocWaiter",
    "Entry",
    "Host",
    "Loop",
    "PacketCounts",
    "SessionObserver",
    "Sessions",
    "Stats",
    "Tx",
]
