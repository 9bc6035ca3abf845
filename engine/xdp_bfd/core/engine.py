"""The engine: the session table served by the reactor, and the :class:`~.host.Host` plugins receive.

Input reaches a session, what it queued goes out, its events go to the
listeners and its new state to the observers (the fast path's maps), then
it is rescheduled. Nothing here knows what plugs in.
"""

from __future__ import annotations

import functools
import logging
import random
import signal
import socket
from collections import Counter, deque
from collections.abc import Callable, Generator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..session import Rejected, RemoteParamsChanged, Session, SessionConfig, SessionKey, StateChanged
from ..wire.control import CodecError, State, decode_control
from .clock import now_us
from .config import ConfigError, ReflectorConfig, check_reflectors, load_config
from .document import StatsDocument, file_writer
from .errors import EngineError
from .handoff import Handoff
from .host import Callback, DocWaiter, Entry, PacketCounts, SessionObserver
from .netio import PORT_MULTIHOP, PORT_SINGLE_HOP, Datagram, Receiver, SourcePorts, Transmitter
from .notify import Notifier
from .reactor import Reactor
from .stats_format import DIAG_NAMES, STATE_NAMES
from .table import SessionTable

log = logging.getLogger("xdp_bfd")


class Engine:
    """Satisfies :class:`~.host.Host`; ``app`` builds it and hands it to the plugins as one."""

    def __init__(
        self,
        *,
        stats_path: Path,
        sessions_file: Path | None = None,
        demand_poll_us: int = 0,
        deadman_us: int = 0,
        sbfd_cli: tuple[ReflectorConfig, ...] = (),
    ) -> None:
        self.stats_path = stats_path
        # S-BFD reflector discriminators: the command line's, then the file's;
        # the XDP reflector (fastpath.sbfd) answers them once reflector_sink is set.
        self.sbfd_cli = sbfd_cli
        self.reflectors: dict[int, ReflectorConfig] = {}
        self.reflector_sink: Callable[[Mapping[int, ReflectorConfig]], None] | None = None
        self.reflector_limit = 0
        self.sessions_file = sessions_file
        self.demand_poll_us = demand_poll_us
        self.rng = random.Random()
        self.reactor = Reactor()
        self.table = SessionTable(self.rng)
        self._sessions_view = MappingProxyType(self.table.sessions)
        self.observers: list[SessionObserver] = []
        self.state_listeners: list[Callable[[Entry, StateChanged], None]] = []
        self.remote_listeners: list[Callable[[Entry, RemoteParamsChanged], None]] = []
        self.drops: Counter = Counter()
        self.ports = SourcePorts()
        self.receivers: list[Receiver] = []
        self.notifier = Notifier()
        self.handoff = Handoff()
        self.reflects_echo = False
        self.document = StatsDocument(
            self.table.sessions,
            self.observers,
            drops=self.drops,
            lag=self.reactor.lag,
            deadman_us=deadman_us,
        )
        self.reactor.fire_timer = self._fire
        # Jobs handed in (pin's catch-up) come before the next stats document; one runs at a time.
        self.jobs: deque[Generator[None, None, None]] = deque()
        self.reactor.next_background = self._next_job
        self.on_signal(signal.SIGTERM, self._stop)
        self.on_signal(signal.SIGINT, self._stop)
        self.on_signal(signal.SIGUSR1, self.dump_stats)
        self.on_signal(signal.SIGHUP, self.reload)

    # -- the loop (core.host.Loop): the reactor's ------------------------------------

    def watch(self, sock: Any, callback: Callback, *, read: bool = True, write: bool = False) -> None:
        self.reactor.watch(sock, callback, read=read, write=write)

    def unwatch(self, sock: Any) -> None:
        self.reactor.unwatch(sock)

    def call_at(self, deadline_us: int, callback: Callback) -> None:
        self.reactor.call_at(deadline_us, callback)

    def on_signal(self, signum: int, handler: Callable[[], None]) -> None:
        self.reactor.on_signal(signum, handler)

    def add_closer(self, close: Callable[[], None]) -> None:
        self.reactor.add_closer(close)

    def mark(self, phase: str) -> None:
        self.reactor.mark(phase)

    def end_turn(self) -> None:
        self.reactor.end_turn()

    def in_background(self, job: Generator[None, None, None]) -> None:
        self.jobs.append(job)
        self.reactor.start_background()

    def _next_job(self) -> Generator[None, None, None] | None:
        return self.jobs.popleft() if self.jobs else self.document.next_job()

    def stop_pending(self) -> bool:
        r = self.reactor
        return r.stop_requested or any(s in (signal.SIGTERM, signal.SIGINT) for s in r.pending_signals)

    # -- setup -----------------------------------------------------------------

    def open_receivers(self) -> None:
        for family in (socket.AF_INET, socket.AF_INET6):
            for port in (PORT_SINGLE_HOP, PORT_MULTIHOP):
                try:
                    r = Receiver(family, port)
                except OSError as e:
                    if family == socket.AF_INET6 and e.errno in (97, 99):  # no IPv6 on this host
                        log.warning("bfd: IPv6 unavailable (%s); serving IPv4 only", e.strerror)
                        continue
                    raise EngineError(f"cannot bind UDP port {port}: {e.strerror}") from None
                self.receivers.append(r)
                self.reactor.watch(r.sock, functools.partial(self._drain, r))

    # -- sessions (core.host.Sessions) -----------------------------------------------

    @property
    def sessions(self) -> Mapping[int, Entry]:
        return self._sessions_view

    def lookup(self, key: SessionKey) -> Entry | None:
        return self.table.lookup(key)

    def allocate_discr(self) -> int:
        return self.table.allocate_discr()

    def discr_free(self, discr: int) -> bool:
        return self.table.free(discr)

    # -- S-BFD reflector discriminators ---------------------------------------------

    def check_reflectors(
        self, from_file: list[ReflectorConfig], where: str = ""
    ) -> dict[int, ReflectorConfig]:
        """The reflectors the command line and ``from_file`` give, or one line (EngineError) saying why not.

        Nothing changes here: a reload checks everything before it touches anything.
        """
        given = [(r, "--sbfd-reflector") for r in self.sbfd_cli]
        given += [(r, where or "the sessions file") for r in from_file]
        try:
            check_reflectors(given)
        except ConfigError as e:
            raise EngineError(str(e)) from None
        if given and self.reflector_sink is None:
            r, origin = given[0]
            raise EngineError(
                f"{origin}: S-BFD reflector {r.discr} is answered in XDP only; give --kernel-tx"
            )
        if self.reflector_limit and len(given) > self.reflector_limit:
            raise EngineError(f"{len(given)} S-BFD reflector discriminators; at most {self.reflector_limit}")
        for r, origin in given:
            entry = self.table.sessions.get(r.discr)
            if entry is not None:
                raise EngineError(
                    f"{origin}: S-BFD reflector discriminator {r.discr} is the local discriminator of "
                    f"session {entry.session.config.describe()}; a reflector's must be no session's"
                )
        return {r.discr: r for r, _origin in given}

    def set_reflectors(self, reflectors: dict[int, ReflectorConfig]) -> None:
        """Reserve the discriminators (no new session takes one) and hand them to the XDP reflector."""
        self.reflectors = reflectors
        self.table.reserved = frozenset(reflectors)
        if self.reflector_sink is not None:
            self.reflector_sink(reflectors)

    def add_observer(self, observer: SessionObserver) -> None:
        self.observers.append(observer)

    def on_state_change(self, listener: Callable[[Entry, StateChanged], None]) -> None:
        self.state_listeners.append(listener)

    def on_remote_change(self, listener: Callable[[Entry, RemoteParamsChanged], None]) -> None:
        self.remote_listeners.append(listener)

    def count_drop(self, reason: str) -> None:
        self.drops[reason] += 1

    def _transmitter(
        self,
        config: SessionConfig,
        sport: int | None = None,
        sock: socket.socket | None = None,
        ifindex: int | None = None,
    ) -> Transmitter:
        return Transmitter(
            self.ports,
            local=config.local,
            peer=config.peer,
            interface=config.interface,
            multihop=config.multihop,
            sport=sport,
            sock=sock,
            ifindex=ifindex,
        )

    def add_session(self, config: SessionConfig, origin: str, *, discr: int | None = None) -> Entry:
        now = now_us()
        tx = self._transmitter(config)
        d = discr if discr is not None else self.allocate_discr()
        entry = Entry(Session(config, d, now_us=now, rng=self.rng), tx, origin)
        entry.session.demand_poll_us = self.demand_poll_us
        self.table.insert(entry)
        for observer in self.observers:
            observer.added(entry)
        log.info("session: %s added (discriminator %d, source port %d)", config.describe(), d, tx.sport)
        self.service(entry, now)
        return entry

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
        session = Session.restore(config, state, rng=self.rng)
        session.demand_poll_us = self.demand_poll_us
        entry = Entry(session, self._transmitter(config, sport, sock, ifindex), origin)
        self.join_restored(entry)
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
        session = Session.restore(config, state, rng=self.rng)
        session.demand_poll_us = self.demand_poll_us
        return Entry(session, self._transmitter(config, sport, sock, ifindex), origin)

    def join_restored(self, entry: Entry) -> None:
        # An adopted socket's port is taken here, not by its Transmitter: one made ahead and
        # never joined must leave the port free (netio.Transmitter).
        self.ports.used.add(entry.tx.sport)
        self.table.insert(entry)

    def remove_session(self, discr: int, *, admin_down: bool = True) -> None:
        entry = self.table.pop(discr)
        if entry is None:
            return
        s = entry.session
        # Last added first, as closers: an observer built on an earlier one's view
        # (the clock on the Offload's slot) lets go of it before that view goes.
        for observer in reversed(self.observers):
            observer.removed(entry)
        if admin_down and s.state != State.ADMIN_DOWN:
            # Tell the peer this is deliberate (§6.8.16) rather than let it time out.
            s.admin_down(now_us())
            for pkt in s.datagrams_to_send(now_us()):
                entry.tx.send(pkt)
        entry.tx.close()
        log.info("session: %s removed", s.config.describe())

    def update_session(self, discr: int, config: SessionConfig) -> None:
        entry = self.table.sessions[discr]
        if entry.session.config == config:
            return
        now = now_us()
        if config.auth != entry.session.config.auth:
            entry.last_rx_raw = b""  # verified with another key: the fast path must not accept its repeats
        entry.session.set_config(config, now)
        self.service(entry, now)

    def apply_session_list(self, configs: list[SessionConfig], origin: str) -> None:
        """Make the sessions of ``origin`` exactly ``configs``: add, change, remove; leave the rest alone."""
        # A configuration a session of this origin holds as that very object (a
        # takeover's restore hands the configured ones over) is passed by identity:
        # hashing and comparing each of a thousand was milliseconds of a takeover's
        # request -> serving path (docs/benchmarks.md). Keys are unique in the table,
        # so a session holding one of them cannot share a key with any other.
        if not configs and not self.table.origins[origin]:
            return  # nothing given, nothing held: no walk of the table
        given = {id(c) for c in configs}
        held: set[int] = set()
        others = []
        for entry in self.table.sessions.values():
            if entry.origin == origin:
                if id(entry.session.config) in given:
                    held.add(id(entry.session.config))
                else:
                    others.append(entry)
        wanted = {c.key(): c for c in configs if id(c) not in held}
        for entry in others:
            if entry.session.config.key() not in wanted:
                self.remove_session(entry.session.local_discr)
        for key, cfg in wanted.items():
            found = self.table.lookup(key)
            if found is None:
                self.add_session(cfg, origin)
            elif found.origin == origin:
                self.update_session(found.session.local_discr, cfg)
            else:
                log.warning("session: %s already comes from %s; ignored", cfg.describe(), found.origin)

    def service(self, entry: Entry, now: int) -> None:
        s = entry.session
        pkts = s.datagrams_to_send(now)
        if pkts and entry.outgoing is not None:
            pkts = entry.outgoing(entry, pkts)
        for pkt in pkts:
            entry.send(pkt)
        if entry.announced:
            for told in entry.announced:
                self._log_change(entry, told)
            entry.announced.clear()
        while (ev := s.next_event()) is not None:
            # The controller hears of a change before the log does.
            self._tell(entry, ev)
            if isinstance(ev, StateChanged):
                self._log_change(entry, ev)
        for observer in self.observers:
            observer.serviced(entry)
        deadline = s.get_timer()
        if deadline is not None and deadline != entry.scheduled:
            entry.scheduled = deadline
            self.reactor.schedule(s.local_discr, deadline)

    def _fire(self, discr: int, deadline: int, now: int) -> None:
        entry = self.table.sessions.get(discr)
        if entry is None or entry.scheduled != deadline:
            return  # stale heap entry: the session was rescheduled or removed
        entry.scheduled = None
        entry.session.handle_timer(now)
        self.service(entry, now)

    def packet_counts(self, entry: Entry) -> PacketCounts:
        counts = PacketCounts(
            entry.session.rx_packets, entry.rx_bytes, entry.user_tx_packets, entry.user_tx_bytes
        )
        for observer in self.observers:
            counts = observer.counts(entry, counts)
        return counts

    def announce(self, entry: Entry) -> None:
        while (ev := entry.session.next_event()) is not None:
            self._tell(entry, ev)
            if isinstance(ev, StateChanged):
                entry.announced.append(ev)

    def _tell(self, entry: Entry, ev: StateChanged | RemoteParamsChanged) -> None:
        """Hand one of the session's events to its listeners (the controller)."""
        if isinstance(ev, StateChanged):
            for listener in self.state_listeners:
                listener(entry, ev)
        else:
            for remote in self.remote_listeners:
                remote(entry, ev)

    @staticmethod
    def _log_change(entry: Entry, ev: StateChanged) -> None:
        log.info(
            "session: %s %s -> %s (diag %s)",
            entry.session.config.describe(),
            STATE_NAMES[ev.old],
            STATE_NAMES[ev.new],
            DIAG_NAMES.get(ev.diag, str(int(ev.diag))),
        )

    # -- input -----------------------------------------------------------------

    def on_datagram(self, dg: Datagram, now: int) -> None:
        try:
            pkt = decode_control(dg.data)
        except CodecError as e:
            self.drops[e.reason] += 1
            return
        entry = self.table.find(dg, pkt.your_discr)
        if entry is None:
            self.drops["your_discr" if pkt.your_discr else "no_session"] += 1
            return
        try:
            entry.session.receive(pkt, dg.data, now, ttl=dg.ttl)
        except Rejected as e:
            self.drops[e.reason] += 1
            entry.drops[e.reason] += 1
            return
        entry.rx_bytes += len(dg.data)
        entry.last_rx_raw = dg.data
        self.service(entry, now)

    def _drain(self, receiver: Receiver, now: int) -> None:
        for dg in receiver.datagrams():
            # Each stamped as it is read, not at the wake-up: after a stall a backlog of a
            # meticulous key's packets (each verified here) took 30 ms to read, and the peer's
            # last packet, stamped with the wake-up, was a detection time old when the timers
            # ran after it (docs/engine.md).
            self.on_datagram(dg, now)
            now = now_us()
            if self.reactor.pending_signals:
                # A signal waits (a takeover's request, a stop): it goes before the rest of a
                # burst, which waits in the socket (docs/benchmarks.md, "A signal ends the
                # loop's turn").
                return

    # -- signals -----------------------------------------------------------------

    def _stop(self) -> None:
        if not self.reactor.stop_requested:
            self.notifier.stopping()
        self.reactor.stop_requested = True

    def reload(self) -> None:
        if self.sessions_file is None:
            log.info("reload: no --sessions file to reload")
            return
        try:
            loaded = load_config(self.sessions_file)
            reflectors = self.check_reflectors(loaded.reflectors, str(self.sessions_file))
        except (ConfigError, EngineError) as e:
            log.error("reload: %s; keeping the running sessions unchanged", e)
            return
        configs = loaded.sessions
        # Reserved first: a session the file adds must not take a new reflector's discriminator.
        self.table.reserved = frozenset(reflectors)
        self.apply_session_list(configs, "file")
        self.set_reflectors(reflectors)
        log.info(
            "reload: %s applied (%d sessions%s)",
            self.sessions_file,
            len(configs),
            f", {len(reflectors)} S-BFD reflector discriminators" if reflectors else "",
        )

    # -- stats (core.host.Stats) ---------------------------------------------------

    def add_stats_section(self, name: str, section: Callable[[], Any]) -> None:
        self.document.sections[name] = section

    def want_stats(self, waiter: DocWaiter) -> None:
        self.document.want(waiter)
        self.reactor.start_background()

    def stats(self) -> dict[str, Any]:
        """The stats document, built in one go (the start-up warm-up; tests)."""
        return self.document.build()

    def dump_stats(self) -> None:
        """SIGUSR1: write the stats file from the next document built."""
        self.want_stats(file_writer(self.stats_path))

    # -- run ---------------------------------------------------------------------

    def loop(self) -> None:
        self.reactor.loop()

    def shutdown(self) -> None:
        # Sessions first: their AdminDown leaves while the maps still exist;
        # then the dataplane and the fast path (which detaches XDP).
        for d in list(self.table.sessions):
            self.remove_session(d, admin_down=True)
        self.reactor.close()
        for r in self.receivers:
            r.close()
