"""A small :class:`xdp_bfd.core.host.Host` for unit tests: what a plugin sees of the engine, without one.

Not a mock: the table is a dict of real :class:`~xdp_bfd.core.host.Entry`
objects around real :class:`~xdp_bfd.session.Session` objects, serviced the
way the engine services them (what they queue is sent, their events reach
the listeners, the observers are told); timed callbacks sit in a heap that
the test advances (:meth:`FakeHost.run_calls`), sockets in a real selector
(:meth:`FakeHost.spin`). The loop is its own rather than the engine's
reactor, which opens a signal wake-up socket pair that it never closes.
tests/unit/harness/test_fakehost.py holds every member to the protocol's
signature, so a Host that grows or changes fails there first.

What it leaves out, on purpose: no packet reaches a wire (each session's
:class:`Wire` records what it would send), and the sessions' own timers do
not run — a session moves only on what the test feeds it, so a test that
advances the calls by a minute does not see its sessions time out.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import random
import selectors
import socket
import time
from collections import Counter
from collections.abc import Callable, Generator, Mapping
from types import MappingProxyType
from typing import Any

from xdp_bfd.core.handoff import Handoff
from xdp_bfd.core.host import Callback, DocWaiter, Entry, PacketCounts, SessionObserver
from xdp_bfd.session import (
    Rejected,
    RemoteParamsChanged,
    Session,
    SessionConfig,
    SessionKey,
    StateChanged,
)
from xdp_bfd.wire.control import ControlPacket, State, encode_control

# The peer state whose packet leaves ours where it is (RFC 5880 §6.8.6), for
# a packet that only carries new timers.
_UNMOVED_BY = {State.UP: State.UP, State.INIT: State.DOWN, State.DOWN: State.ADMIN_DOWN}
_REMOTE = (
    "remote_discr",
    "remote_diag",
    "remote_demand",
    "remote_desired_tx_us",
    "remote_min_rx_us",
    "remote_min_echo_rx_us",
    "remote_detect_mult",
)


class Wire:
    """Stands in for a session's :class:`~xdp_bfd.core.netio.Transmitter`: it keeps what is sent."""

    def __init__(self, sport: int) -> None:
        self.sport = sport
        self.dport = 3784
        self.sent: list[bytes] = []
        self.closed = False
        self.adopted: Any = None

    def send(self, data: bytes) -> bool:
        self.sent.append(data)
        return True

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        self.closed = True


class FakeHost:
    """Satisfies :class:`~xdp_bfd.core.host.Host`; records what the plugin asked of the table."""

    reflects_echo: bool
    handoff: Handoff

    def __init__(self) -> None:
        self.reflects_echo = False
        self.stopping = False  # stop_pending(): a test sets it as SIGTERM would
        self.handoff = Handoff()
        self.now = 0  # the latest time the test ran the host at (µs, its own clock)
        self.rng = random.Random(0)
        self.made_ahead = 0  # sessions made by restored() (a takeover's, ahead of its request)
        self.table: dict[int, Entry] = {}
        self.by_key: dict[SessionKey, int] = {}
        self._view = MappingProxyType(self.table)
        self._next_discr = 500_000
        self._sports = itertools.count(49152)
        self.calls: list[tuple[int, int, Callback]] = []  # a heap: (deadline, order, callback)
        self._order = itertools.count()
        self.selector = selectors.DefaultSelector()
        self.signal_handlers: dict[int, Callable[[], None]] = {}
        self.closers: list[Callable[[], None]] = []
        self.marks: list[str] = []
        self.turns_ended = 0
        self.jobs: list[Generator[None, None, None]] = []  # in_background(): run by run_jobs()
        self.observers: list[SessionObserver] = []
        self.state_listeners: list[Callable[[Entry, StateChanged], None]] = []
        self.remote_listeners: list[Callable[[Entry, RemoteParamsChanged], None]] = []
        self.drops: Counter = Counter()
        self.stats_sections: dict[str, Callable[[], Any]] = {}
        # What the plugin did to the table, for the tests' assertions.
        self.removed: list[tuple[int, bool]] = []
        self.updates: list[tuple[int, SessionConfig]] = []

    # -- Loop ------------------------------------------------------------------------

    def watch(self, sock: Any, callback: Callback, *, read: bool = True, write: bool = False) -> None:
        events = (selectors.EVENT_READ if read else 0) | (selectors.EVENT_WRITE if write else 0)
        try:
            self.selector.modify(sock, events, callback)
        except KeyError:
            self.selector.register(sock, events, callback)

    def unwatch(self, sock: Any) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(sock)

    def call_at(self, deadline_us: int, callback: Callback) -> None:
        heapq.heappush(self.calls, (deadline_us, next(self._order), callback))

    def on_signal(self, signum: int, handler: Callable[[], None]) -> None:
        self.signal_handlers[signum] = handler

    def add_closer(self, close: Callable[[], None]) -> None:
        self.closers.append(close)

    def mark(self, phase: str) -> None:
        self.marks.append(phase)

    def end_turn(self) -> None:
        self.turns_ended += 1

    def in_background(self, job: Generator[None, None, None]) -> None:
        self.jobs.append(job)

    def run_jobs(self, steps: int | None = None) -> int:
        """Run up to ``steps`` steps of the background jobs (all when None); the steps run."""
        done = 0
        while self.jobs and (steps is None or done < steps):
            try:
                next(self.jobs[0])
                done += 1
            except StopIteration:
                self.jobs.pop(0)
        return done

    def stop_pending(self) -> bool:
        return self.stopping

    # -- Sessions --------------------------------------------------------------------

    @property
    def sessions(self) -> Mapping[int, Entry]:
        return self._view

    def lookup(self, key: SessionKey) -> Entry | None:
        d = self.by_key.get(key)
        return self.table[d] if d is not None else None

    def allocate_discr(self) -> int:
        self._next_discr += 1
        while self._next_discr in self.table:
            self._next_discr += 1
        return self._next_discr

    def discr_free(self, discr: int) -> bool:
        return discr not in self.table

    def add_session(self, config: SessionConfig, origin: str, *, discr: int | None = None) -> Entry:
        d = discr if discr is not None else self.allocate_discr()
        session = Session(config, d, now_us=self.now, rng=self.rng)
        entry = Entry(session, Wire(next(self._sports)), origin)
        self._insert(entry)
        for observer in self.observers:
            observer.added(entry)
        self.service(entry, self.now)
        return entry

    def update_session(self, discr: int, config: SessionConfig) -> None:
        entry = self.table[discr]
        if entry.session.config == config:
            return
        self.updates.append((discr, config))
        entry.session.set_config(config, self.now)
        self.service(entry, self.now)

    def remove_session(self, discr: int, *, admin_down: bool = True) -> None:
        entry = self.table.pop(discr, None)
        if entry is None:
            return
        self.by_key.pop(entry.session.config.key(), None)
        self.removed.append((discr, admin_down))
        for observer in reversed(self.observers):  # as the engine: last added first
            observer.removed(entry)
        s = entry.session
        if admin_down and s.state != State.ADMIN_DOWN:
            s.admin_down(self.now)
            for pkt in s.datagrams_to_send(self.now):
                entry.tx.send(pkt)
        entry.tx.close()

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
        entry = self._made(config, origin, sport, state, sock)
        self._insert(entry)
        return entry

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
        self.made_ahead += 1
        return self._made(config, origin, sport, state, sock)

    def join_restored(self, entry: Entry) -> None:
        self._insert(entry)

    def _made(
        self,
        config: SessionConfig,
        origin: str,
        sport: int,
        state: dict[str, Any],
        sock: socket.socket | None,
    ) -> Entry:
        session = Session.restore(config, state, rng=self.rng)
        wire = Wire(sport)
        wire.adopted = sock  # the predecessor's socket it was given, if any
        return Entry(session, wire, origin)

    def service(self, entry: Entry, now: int) -> None:
        s = entry.session
        for pkt in s.datagrams_to_send(now):
            entry.send(pkt)
        entry.announced.clear()  # their listeners heard them in announce(); the engine logs them here
        while (ev := s.next_event()) is not None:
            self._deliver(entry, ev)
        for observer in self.observers:
            observer.serviced(entry)
        entry.scheduled = s.get_timer()  # noted, never run (see the module's docstring)

    def announce(self, entry: Entry) -> None:
        while (ev := entry.session.next_event()) is not None:
            self._deliver(entry, ev)
            if isinstance(ev, StateChanged):
                entry.announced.append(ev)

    def packet_counts(self, entry: Entry) -> PacketCounts:
        counts = PacketCounts(
            entry.session.rx_packets, entry.rx_bytes, entry.user_tx_packets, entry.user_tx_bytes
        )
        for observer in self.observers:
            counts = observer.counts(entry, counts)
        return counts

    def count_drop(self, reason: str) -> None:
        self.drops[reason] += 1

    def on_state_change(self, listener: Callable[[Entry, StateChanged], None]) -> None:
        self.state_listeners.append(listener)

    def on_remote_change(self, listener: Callable[[Entry, RemoteParamsChanged], None]) -> None:
        self.remote_listeners.append(listener)

    def add_observer(self, observer: SessionObserver) -> None:
        self.observers.append(observer)

    # -- Stats -----------------------------------------------------------------------

    def add_stats_section(self, name: str, section: Callable[[], Any]) -> None:
        self.stats_sections[name] = section

    def want_stats(self, waiter: DocWaiter) -> None:
        steps = waiter(self.stats())
        for _ in steps or ():
            pass

    def stats(self) -> dict[str, Any]:
        """The sections and the observers' views, built in one go."""
        doc: dict[str, Any] = {name: section() for name, section in self.stats_sections.items()}
        for observer in self.observers:
            observer.document(doc)
        return doc

    # -- the test's side: time, sockets ----------------------------------------------

    def run_calls(self, now: int) -> None:
        """Run every timed callback due at ``now``, in order (those they add included)."""
        self.now = max(self.now, now)
        while self.calls and self.calls[0][0] <= now:
            heapq.heappop(self.calls)[2](now)

    def spin(self, seconds: float, until: Callable[[], object] = lambda: False) -> bool:
        """Run the loop on the real clock (calls and sockets) until ``until()`` or ``seconds`` pass."""
        deadline = time.monotonic() + seconds
        while not until():
            if time.monotonic() >= deadline:
                return False
            self.run_calls(time.monotonic_ns() // 1000)
            for key, _ in self.selector.select(0.01):
                key.data(time.monotonic_ns() // 1000)
        return True

    # -- the test's side: what happens to a session -------------------------------------

    def receive(self, discr: int, pkt: ControlPacket, now: int) -> None:
        """A packet from the peer reaches the session, as the engine hands it over."""
        entry = self.table[discr]
        raw = encode_control(pkt)
        self.now = max(self.now, now)
        try:
            entry.session.receive(pkt, raw, now)
        except Rejected as e:
            self.drops[e.reason] += 1
            entry.drops[e.reason] += 1
            return
        entry.rx_bytes += len(raw)
        entry.last_rx_raw = raw
        self.service(entry, now)

    def retime(self, discr: int, now: int, **remote: Any) -> None:
        """The peer's packet at ``now`` advertises other timers (``remote_*`` names), its state unchanged."""
        s = self.table[discr].session
        peer = {name: getattr(s, name) for name in _REMOTE} | remote
        pkt = ControlPacket(
            state=_UNMOVED_BY.get(s.state, State.ADMIN_DOWN),
            my_discr=peer["remote_discr"],
            your_discr=s.local_discr,
            diag=peer["remote_diag"],
            demand=peer["remote_demand"],
            detect_mult=peer["remote_detect_mult"],
            desired_min_tx_us=peer["remote_desired_tx_us"],
            required_min_rx_us=peer["remote_min_rx_us"],
            required_min_echo_rx_us=peer["remote_min_echo_rx_us"],
        )
        self.receive(discr, pkt, now)

    def change(self, discr: int, state: State, *, at_us: int = 0, **remote: Any) -> None:
        """The session is now in ``state`` with these peer values (``remote_*`` names).

        Any state, in one step (Up straight to Init too), which packets could
        not always do: the session's fields are set as a ``--pin`` restore
        sets them (``Session.STATE_FIELDS``), then the listeners and observers
        hear of the transition as from :meth:`service`.
        """
        entry = self.table[discr]
        s = entry.session
        fields = {f"_{name}": value for name, value in remote.items()} | {"_state": state}
        unknown = set(fields) - set(Session.STATE_FIELDS)
        if unknown:
            raise AttributeError(f"not session state: {sorted(unknown)}")
        old = s.state
        vars(s).update(fields)
        if state != old:
            self._deliver(entry, StateChanged(old, state, s.local_diag, at_us))
        for observer in self.observers:
            observer.serviced(entry)

    # -- inside ------------------------------------------------------------------------

    def _insert(self, entry: Entry) -> None:
        d = entry.session.local_discr
        self.table[d] = entry
        self.by_key[entry.session.config.key()] = d

    def _deliver(self, entry: Entry, ev: StateChanged | RemoteParamsChanged) -> None:
        if isinstance(ev, StateChanged):
            for state_listener in self.state_listeners:
                state_listener(entry, ev)
        else:
            for remote_listener in self.remote_listeners:
                remote_listener(entry, ev)


__all__ = ["FakeHost", "Wire"]
