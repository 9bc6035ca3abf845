"""The event loop: sockets, signals and timers around the sans-I/O sessions.

One thread, one ``selectors`` loop. Session timers sit in a heap keyed by
deadline, so a wake-up costs O(log n) in the sessions that are due, never a
scan of all of them.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import gc
import heapq
import itertools
import logging
import os
import random
import resource
import selectors
import signal
import socket
import time
from collections import Counter
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import __version__, footprint, links
from .cli import EXIT_OK
from .clock import now_us
from .config import ConfigError, load_sessions
from .netio import PORT_MULTIHOP, PORT_SINGLE_HOP, Datagram, Receiver, SourcePorts, Transmitter
from .notify import Notifier
from .offload import Offload
from .sched import describe as sched_description
from .sched import reserve as reserve_scheduling
from .session import Rejected, RemoteParamsChanged, Session, SessionConfig, SessionKey, StateChanged
from .stats import DIAG_NAMES, STATE_NAMES, wall_clock_of, write_atomic
from .stats import encode as encode_stats
from .wire.control import CodecError, State, decode_control

log = logging.getLogger("xdp_bfd")

# Takes a stats document; may return the generator of its further paced steps.
DocWaiter = Callable[[dict[str, Any]], Generator[None, None, None] | None]


# Sessions per slice of a stats dump (about half a millisecond of Python).
STATS_SLICE_SESSIONS = 32
# Loop lag histogram bounds (µs): how late the loop ran what was due. A starved
# loop shows here as a tail that a percentile of packet gaps would hide.
LAG_BUCKETS_US = (100, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 250_000, 500_000, 1_000_000)


class LoopLag:
    """Cumulative histogram of loop lateness, one sample per wake-up (O(1))."""

    def __init__(self) -> None:
        self.counts = [0] * (len(LAG_BUCKETS_US) + 1)
        self.sum_us = 0
        self.max_us = 0

    def add(self, lag_us: int) -> None:
        self.sum_us += lag_us
        self.max_us = max(self.max_us, lag_us)
        self.counts[bisect.bisect_left(LAG_BUCKETS_US, lag_us)] += 1

    def doc(self) -> dict[str, Any]:
        cumulative, total = [], 0
        for le, n in zip((*LAG_BUCKETS_US, "+Inf"), self.counts, strict=True):
            total += n
            cumulative.append([le, total])
        return {"buckets": cumulative, "count": total, "sum_us": self.sum_us, "max_us": self.max_us}


@dataclass(frozen=True)
class PacketCounts:
    """A session's control packets both ways, whichever path carried them."""

    rx_packets: int
    rx_bytes: int
    tx_packets: int
    tx_bytes: int


class EngineError(Exception):
    """A reason to stop, reported as one line."""


@dataclass
class Entry:
    """One live session and what the shell keeps beside it."""

    session: Session
    tx: Transmitter
    origin: str  # "cli", "file" or "dplane"
    scheduled: int | None = None
    user_tx_packets: int = 0
    user_tx_bytes: int = 0
    rx_bytes: int = 0
    drops: Counter = field(default_factory=Counter)
    last_rx_raw: bytes = b""  # the last packet the session accepted (the fast path's "expect")
    # Fast-path bookkeeping (see offload.py); slot is None without --kernel-tx.
    slot: int | None = None
    offloaded: bool = False
    epoch: int = 0
    detect_armed: bool = False
    kcfg: dict[str, Any] | None = None
    last_detection_us: int | None = None  # silence the kernel measured at its last expiry report
    last_detection_overshoot_us: int | None = None  # ... less the detection time then in force

    def __post_init__(self) -> None:
        # Here rather than in add_session so that sessions a --pin successor
        # recreates are watched too: the dataplane keeps bfdd's copy of the
        # peer's timers true.
        self.session.remote_events = True


class Engine:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random()
        self.sessions: dict[int, Entry] = {}
        self.by_key: dict[SessionKey, int] = {}
        self.timers: list[tuple[int, int]] = []
        # Callbacks at a time (dataplane reconnects, hold deadlines…): (deadline, seq, fn).
        self.calls: list[tuple[int, int, Callable[[int], None]]] = []
        self._call_seq = 0
        # Told of every state change; the dataplane reports them to bfdd.
        self.state_listeners: list[Callable[[Entry, StateChanged], None]] = []
        # Told when a peer starts advertising other timers or another multiplier.
        self.remote_listeners: list[Callable[[Entry, RemoteParamsChanged], None]] = []
        # Extra top-level sections of the stats JSON (the dataplane's), filled at dump time.
        self.stats_sections: dict[str, Callable[[], Any]] = {}
        self.closers: list[Callable[[], None]] = []
        # --pin: what other parts add to the handed-over state, and what a
        # successor adopted for them (the dataplane's bfdd bookkeeping, by discriminator).
        self.handover_sections: dict[str, Callable[[], Any]] = {}
        self.adopted_dplane: dict[int, dict[str, Any]] = {}
        # Run with the pin directory once the state is written, just before the
        # exit; and what the old engine passed us (the bfddp sockets, fdpass.py).
        self.departures: list[Callable[[Path], None]] = []
        self.inherited_dplane: Any = None
        self.offload: Offload | None = None
        # True once the XDP echo reflector is attached: only then may we invite
        # a peer's echo (Required Min Echo RX > 0).
        self.reflects_echo = False
        self.lag = LoopLag()
        self.drops: Counter = Counter()
        self.ports = SourcePorts()
        self.receivers: list[Receiver] = []
        self.selector = selectors.DefaultSelector()
        self.stop_requested = False
        self.pending_signals: list[int] = []
        # The stats document under construction, and who waits for it: the
        # SIGUSR1 file, metrics scrapes. Who asks while one is being built
        # waits for the next (it must describe a moment after the request).
        self._dump: Generator[None, None, None] | None = None
        self._doc_waiters: list[DocWaiter] = []
        # Under a deadline reservation one dump step per period: a step is
        # milliseconds of Python with cold caches (after a CPU hog), and
        # steps back to back overran the period's runtime and throttled the
        # loop past the next transmission. Each step in a period of its own
        # starts with the period's budget, after the timers due in it.
        self.dump_pace_us = 0
        self._dump_next_us = 0
        self._next_discr = self.rng.randrange(1, 1 << 31)
        self._wake_r, self._wake_w = socket.socketpair()
        self.notifier = Notifier()
        self.handed_over_from: int | None = None
        # A takeover's phases, (name, CLOCK_MONOTONIC ns) from the request on: logged once serving.
        self.takeover_marks: list[tuple[str, int]] = []

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
                self.add_reader(r.sock, lambda now, r=r: self._drain(r, now))

    def install_signals(self) -> None:
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        for sig in (
            signal.SIGTERM,
            signal.SIGINT,
            signal.SIGHUP,
            signal.SIGUSR1,
            signal.SIGUSR2,
            signal.SIGWINCH,
        ):
            signal.signal(sig, self._on_signal)
        self.add_reader(self._wake_r, lambda _now: self.handle_signals())

    # -- hooks for the other parts of the engine ---------------------------------

    def add_reader(self, sock: Any, callback: Callable[[int], None]) -> None:
        """Call ``callback(now_us)`` whenever ``sock`` is readable."""
        self.selector.register(sock, selectors.EVENT_READ, callback)

    def remove_reader(self, sock: Any) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(sock)

    def call_at(self, deadline_us: int, callback: Callable[[int], None]) -> None:
        """Call ``callback(now_us)`` once, at or after ``deadline_us`` (monotonic µs)."""
        self._call_seq += 1
        heapq.heappush(self.calls, (deadline_us, self._call_seq, callback))

    def mark(self, phase: str) -> None:
        """Time a phase of a takeover (nothing outside one)."""
        if self.takeover_marks:
            self.takeover_marks.append((phase, time.monotonic_ns()))

    def _on_signal(self, signum: int, _frame: object) -> None:
        # Handlers only record; the loop acts, so no handler races a half-done update.
        self.pending_signals.append(signum)

    # -- sessions --------------------------------------------------------------

    def allocate_discr(self) -> int:
        while True:
            d = self._next_discr
            self._next_discr = self._next_discr % 0xFFFFFFFF + 1
            if d not in self.sessions:
                return d

    def add_session(self, config: SessionConfig, origin: str, *, discr: int | None = None) -> Entry:
        now = now_us()
        tx = Transmitter(
            self.ports,
            local=config.local,
            peer=config.peer,
            interface=config.interface,
            multihop=config.multihop,
        )
        d = discr if discr is not None else self.allocate_discr()
        entry = Entry(Session(config, d, now_us=now, rng=self.rng), tx, origin)
        entry.session.demand_poll_us = self.args.demand_poll_us
        self.sessions[d] = entry
        self.by_key[config.key()] = d
        if self.offload is not None:
            self.offload.added(entry)
        log.info(
            "session: %s -> %s%s%s added (discriminator %d, source port %d)",
            config.local or "*",
            config.peer,
            f" on {config.interface}" if config.interface else "",
            " multihop" if config.multihop else "",
            d,
            tx.sport,
        )
        self.service(entry, now)
        return entry

    def remove_session(self, discr: int, *, admin_down: bool = True) -> None:
        entry = self.sessions.pop(discr, None)
        if entry is None:
            return
        s = entry.session
        self.by_key.pop(s.config.key(), None)
        if self.offload is not None:
            self.offload.removed(entry)
        if admin_down and s.state != State.ADMIN_DOWN:
            # Tell the peer this is deliberate (§6.8.16) rather than let it time out.
            s.admin_down(now_us())
            for pkt in s.datagrams_to_send(now_us()):
                entry.tx.send(pkt)
        entry.tx.close()
        log.info("session: %s -> %s removed", s.config.local or "*", s.config.peer)

    def update_session(self, discr: int, config: SessionConfig) -> None:
        entry = self.sessions[discr]
        if entry.session.config == config:
            return
        now = now_us()
        entry.session.set_config(config, now)
        self.service(entry, now)

    def apply_session_list(self, configs: list[SessionConfig], origin: str) -> None:
        """Make the sessions of ``origin`` exactly ``configs``: add, change, remove; leave the rest alone."""
        wanted = {c.key(): c for c in configs}
        for d, entry in list(self.sessions.items()):
            if entry.origin == origin and entry.session.config.key() not in wanted:
                self.remove_session(d)
        for key, cfg in wanted.items():
            d = self.by_key.get(key)
            if d is None:
                self.add_session(cfg, origin)
            elif self.sessions[d].origin == origin:
                self.update_session(d, cfg)
            else:
                log.warning("session: %s -> %s already comes from %s; ignored", cfg.local, cfg.peer, origin)

    def service(self, entry: Entry, now: int) -> None:
        """After any input to a session: send what it queued, report events, reschedule."""
        s = entry.session
        for pkt in s.datagrams_to_send(now):
            if entry.tx.send(pkt):
                entry.user_tx_packets += 1
                entry.user_tx_bytes += len(pkt)
        while (ev := s.next_event()) is not None:
            if isinstance(ev, StateChanged):
                self.on_state_change(entry, ev)
            else:
                for listener in self.remote_listeners:
                    listener(entry, ev)
        if self.offload is not None:
            self.offload.sync(entry)
        deadline = s.get_timer()
        if deadline is not None and deadline != entry.scheduled:
            entry.scheduled = deadline
            heapq.heappush(self.timers, (deadline, s.local_discr))

    def kernel_state(self, entry: Entry) -> Any:
        """The fast path's view of the session (bcc's ctypes struct), or None without one."""
        if self.offload is None or entry.slot is None:
            return None
        return self.offload.fp.read_state(entry.slot)

    def packet_counts(self, entry: Entry, st: Any = None) -> PacketCounts:
        """``st``: the kernel state if the caller already read it (one map read per dump)."""
        rx_p, rx_b = entry.session.rx_packets, entry.rx_bytes
        tx_p, tx_b = entry.user_tx_packets, entry.user_tx_bytes
        st = st if st is not None else self.kernel_state(entry)
        if st is not None:
            # Every packet of an offloaded session crosses XDP, including those
            # passed up to the socket, so the kernel's count is the whole count.
            if entry.offloaded:
                rx_p, rx_b = int(st.rx_packets), int(st.rx_bytes)
            tx_p, tx_b = tx_p + int(st.ktx_packets), tx_b + int(st.ktx_bytes)
        return PacketCounts(rx_p, rx_b, tx_p, tx_b)

    def on_state_change(self, entry: Entry, ev: StateChanged) -> None:
        c = entry.session.config
        log.info(
            "session: %s -> %s%s %s -> %s (diag %s)",
            c.local or "*",
            c.peer,
            f" on {c.interface}" if c.interface else "",
            STATE_NAMES[ev.old],
            STATE_NAMES[ev.new],
            DIAG_NAMES.get(ev.diag, str(int(ev.diag))),
        )
        for listener in self.state_listeners:
            listener(entry, ev)

    # -- input -----------------------------------------------------------------

    def find(self, dg: Datagram, your_discr: int) -> Entry | None:
        ifname = links.name_of(dg.ifindex) if not dg.multihop else None
        if your_discr:
            entry = self.sessions.get(your_discr)
            if entry is None:
                return None
            # The discriminator finds the session; the path must still be its
            # own (peer address, hop mode, interface), or anyone who learned a
            # discriminator could drive the session from elsewhere.
            c = entry.session.config
            if c.peer != dg.src or c.multihop != dg.multihop or (c.interface and c.interface != ifname):
                return None
            return entry
        for key in (
            (dg.dst, dg.src, ifname, dg.multihop),
            (None, dg.src, ifname, dg.multihop),
            (dg.dst, dg.src, None, dg.multihop),
            (None, dg.src, None, dg.multihop),
        ):
            d = self.by_key.get(key)
            if d is not None:
                return self.sessions[d]
        return None

    def on_datagram(self, dg: Datagram, now: int) -> None:
        try:
            pkt = decode_control(dg.data)
        except CodecError as e:
            self.drops[e.reason] += 1
            return
        entry = self.find(dg, pkt.your_discr)
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

    # -- the loop --------------------------------------------------------------

    def _drain(self, receiver: Receiver, now: int) -> None:
        for dg in receiver.drain():
            self.on_datagram(dg, now)

    def run_timers(self, now: int) -> None:
        while self.calls and self.calls[0][0] <= now:
            _, _, fn = heapq.heappop(self.calls)
            fn(now)
        while self.timers and self.timers[0][0] <= now:
            deadline, d = heapq.heappop(self.timers)
            entry = self.sessions.get(d)
            if entry is None or entry.scheduled != deadline:
                continue  # stale heap entry: the session was rescheduled or removed
            entry.scheduled = None
            entry.session.handle_timer(now)
            self.service(entry, now)

    def next_due(self) -> int | None:
        heads = [h[0][0] for h in (self.timers, self.calls) if h]
        return min(heads) if heads else None

    def timeout_s(self, now: int) -> float | None:
        due = self.next_due()
        return None if due is None else max(0.0, (due - now) / 1e6)

    def handle_signals(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while self._wake_r.recv(64):
                pass
        sigs, self.pending_signals = self.pending_signals, []
        for sig in sigs:
            if sig in (signal.SIGTERM, signal.SIGINT):
                if not self.stop_requested:
                    self.notifier.stopping()
                self.stop_requested = True
            elif sig == signal.SIGUSR1:
                self.dump_stats()
            elif sig == signal.SIGHUP:
                self.reload()
            elif sig == signal.SIGUSR2:
                from .handover import hand_over  # noqa: PLC0415

                hand_over(self)
            elif sig == signal.SIGWINCH:
                from .handover import warm_up  # noqa: PLC0415

                warm_up(self)  # a successor is about to ask for a handover

    def reload(self) -> None:
        if self.args.sessions is None:
            log.info("reload: no --sessions file to reload")
            return
        try:
            configs = load_sessions(self.args.sessions)
        except ConfigError as e:
            log.error("reload: %s; keeping the running sessions unchanged", e)
            return
        self.apply_session_list(configs, "file")
        log.info("reload: %s applied (%d sessions)", self.args.sessions, len(configs))

    def loop(self) -> None:
        while not self.stop_requested:
            # Input before timers: after a stall, packets waiting in a socket
            # prove the peer was talking, and must reach the session before its
            # detection timer is judged (timers first would declare a live
            # peer dead for our own lateness).
            timeout = self.timeout_s(now_us())
            if self._dump is not None:
                step_in = max(0.0, (self._dump_next_us - now_us()) / 1e6)
                timeout = step_in if timeout is None else min(timeout, step_in)
            for key, _ in self.selector.select(timeout):
                key.data(now_us())
            now = now_us()
            due = self.next_due()
            if due is not None and now >= due:
                self.lag.add(now - due)
            self.run_timers(now)
            # Signals last, and a stats dump one step per turn (one per period
            # under a reservation): a dump is milliseconds of Python, and under
            # a deadline reservation work beyond the period's runtime waits for
            # the next period, so what is due goes out first, and again
            # between steps.
            if self.pending_signals:
                self.handle_signals()
            if self._dump is not None and now_us() >= self._dump_next_us:
                self.step_dump()
                self._dump_next_us = now_us() + self.dump_pace_us

    def shutdown(self) -> None:
        # Sessions first: their AdminDown leaves while the maps still exist;
        # then the dataplane and the fast path (which detaches XDP).
        for d in list(self.sessions):
            self.remove_session(d, admin_down=True)
        for close in reversed(self.closers):
            close()
        for r in self.receivers:
            r.close()

    # -- stats -----------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """The stats document, built in one go (the start-up warm-up; tests)."""
        steps = self.stats_steps()
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    def stats_steps(self) -> Generator[None, None, dict[str, Any]]:
        """The stats document, built a slice at a time: it yields between slices.

        A dump is milliseconds of Python at a few sessions and tens at a
        thousand; under the deadline reservation work beyond the period's
        runtime waits for the next period, so a dump in one piece would hold
        back every transmission due meanwhile. The loop runs the timers
        between slices (``dump_stats``).
        """
        now_ns = time.monotonic_ns()
        now = now_ns // 1000
        generated_at = round(time.time(), 3)
        sessions = []
        for i, entry in enumerate(list(self.sessions.values()), 1):
            if i % STATS_SLICE_SESSIONS == 0:
                yield
            if self.sessions.get(entry.session.local_discr) is not entry:
                continue  # removed while the dump was under way
            s = entry.session
            c = s.config
            st = self.kernel_state(entry)
            sessions.append(
                {
                    "local": str(c.local) if c.local else None,
                    "peer": str(c.peer),
                    "ifname": c.interface,
                    "multihop": c.multihop,
                    "local_discr": s.local_discr,
                    "remote_discr": s.remote_discr,
                    "state": STATE_NAMES[s.state],
                    "remote_state": STATE_NAMES[s.remote_state],
                    "diag": DIAG_NAMES.get(s.local_diag, str(int(s.local_diag))),
                    "tx_interval_us": s.tx_interval_us,
                    "detect_time_us": s.detect_time_us,
                    "rx_packets": self.packet_counts(entry, st).rx_packets,
                    "kernel_tx_packets": 0,
                    "user_tx_packets": entry.user_tx_packets,
                    "last_rx_age_us": (now - s.last_rx_us) if s.last_rx_us else None,
                    "last_ktx_age_us": None,
                    "flaps": s.flaps,
                    "up_since": round(wall_clock_of(s.up_since_us), 3) if s.up_since_us else 0,
                    "origin": entry.origin,
                    "drops": dict(entry.drops),
                }
            )
            if self.offload is not None and st is not None:
                self.offload.session_stats(entry, st, sessions[-1], now_ns)
        yield
        doc = {
            "version": 1,
            "generated_at": generated_at,
            "pid": os.getpid(),
            "engine_version": __version__,
            "kernel_tx": False,
            "xdp": None,
            "dplane": None,
            "deadman_us": self.args.deadman_us,
            "sched": sched_description(),
            "sessions_configured": len(self.sessions),
            "sessions_up": sum(1 for e in self.sessions.values() if e.session.state == State.UP),
            "counters": {"xdp_tx": 0, "xdp_pass": 0, "drop": dict(self.drops)},
            "sessions": sessions,
            "loop_lag": self.lag.doc(),
        }
        yield
        doc |= {name: fn() for name, fn in self.stats_sections.items()}
        if self.offload is not None:
            yield  # the kernel's counters: a map lookup per counter and CPU, and the program's fdinfo
            self.offload.stats(doc)
        return doc

    def dump_stats(self) -> None:
        """SIGUSR1: write the stats file from the next document built."""
        self.want_stats(self._write_stats)

    def want_stats(self, waiter: DocWaiter) -> None:
        """Hand ``waiter`` the next document the loop builds (step by step, between timers).

        A waiter may return a generator: its further steps (encoding, writing)
        are paced like the build.
        """
        self._doc_waiters.append(waiter)
        if self._dump is None:
            self._dump = self._doc_steps()

    def _doc_steps(self) -> Generator[None, None, None]:
        waiters, self._doc_waiters = self._doc_waiters, []
        doc = yield from self.stats_steps()
        for waiter in waiters:
            yield
            try:
                more = waiter(doc)
                if more is not None:
                    yield from more
            except Exception as e:  # a consumer's bug must not stop the loop that serves sessions
                log.error("stats: a consumer of the stats document failed: %r", e)

    def _write_stats(self, doc: dict[str, Any]) -> Generator[None, None, None]:
        data = encode_stats(doc)
        yield
        path: Path = self.args.stats_dump
        try:
            write_atomic(path, data)
        except OSError as e:
            log.error("stats: cannot write %s: %s", path, e.strerror)

    def step_dump(self) -> None:
        assert self._dump is not None
        try:
            next(self._dump)
        except StopIteration:
            self._dump = self._doc_steps() if self._doc_waiters else None


def _raise_nofile() -> None:
    # One socket per session: 4096 sessions need more than the default 1024 fds.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def initial_sessions(args: argparse.Namespace) -> list[tuple[SessionConfig, str]]:
    out: list[tuple[SessionConfig, str]] = []
    if args.local is not None:
        out.append((SessionConfig(local=args.local, peer=args.peer), "cli"))
    if args.sessions is not None:
        try:
            out += [(c, "file") for c in load_sessions(args.sessions)]
        except ConfigError as e:
            raise EngineError(str(e)) from None
    return out


def start_fast_path(engine: Engine, args: argparse.Namespace) -> dict[str, Any] | None:
    """Compile, (with --pin) take over from a running engine, attach; returns handed-over state."""
    from . import fdpass, handover  # noqa: PLC0415
    from .kernel import FastPath, KernelError, PinPaths, abi_constants, bpf_dir, layout_cflags, layout_id  # noqa: PLC0415

    log.info("kernel-tx: dead-man gate at %dus", args.deadman_us)
    pin = plan = None
    if args.pin is not None:
        try:
            handover.check_bpffs(args.pin)
            src = bpf_dir()
            consts = abi_constants(src / "bfd_abi.h")
            pin = PinPaths(args.pin.resolve(), layout_id(src, layout_cflags(consts["BFD_MAX_SESSIONS"])))
            plan = handover.plan(pin.root, pin.layout, consts)
            handover.prepare(pin.root, pin.layout, plan)
        except (handover.HandoverError, KernelError, OSError) as e:
            raise EngineError(str(e)) from None
    state = None
    try:
        fp = FastPath(args.deadman_us, pin=pin)
        engine.closers.append(fp.close)
        if plan is not None and plan.kind in ("takeover", "replace"):
            # systemd must see its main process change before the old one exits.
            engine.notifier.main_pid()
            assert pin is not None
            inbox = fdpass.open_inbox(pin.root) if plan.kind == "takeover" and args.dplane_mode else None
            gone = handover.request(plan.pid, pin.root, consts)
            engine.inherited_dplane = fdpass.collect(inbox, plan.pid)
            log.info("pin: engine %d handed over and %s", plan.pid, gone)
            engine.handed_over_from = plan.pid
            engine.takeover_marks = [("request", gone.request_ns), ("old engine gone", time.monotonic_ns())]
        if plan is not None and plan.kind in ("takeover", "adopt"):
            state = handover.load(fp)
            if state is None:
                fp.reset_tables()
            engine.mark("state read")
        if pin is not None:
            handover.finish(pin.root, pin.layout)
        if args.spread_pass:
            # Before the attach: the program must find its cpumap filled.
            try:
                n = fp.enable_spread()
                log.info("kernel-tx: spread-pass: non-BFD traffic spread over %d CPUs by flow hash", n)
            except KernelError as e:
                log.warning("kernel-tx: spread-pass unavailable (%s); non-BFD traffic stays on the RX CPU", e)
        for ifname in args.kernel_tx:
            fp.attach(ifname, args.xdp_mode, replace=plan is not None and plan.kind != "fresh")
        fp.start_sweep()
        engine.mark("attached")
        if pin is not None:
            fp.set_owner(os.getpid(), fp.consts["BFD_OWNER_RUNNING"], 0)
    except (KernelError, handover.HandoverError) as e:
        raise EngineError(str(e)) from None
    engine.offload = Offload(engine, fp)
    engine.reflects_echo = True
    return state


def run(args: argparse.Namespace) -> int:
    sessions = initial_sessions(args)  # a bad file fails before anything is bound
    _raise_nofile()
    engine = Engine(args)
    engine.install_signals()
    try:
        state = None
        if args.kernel_tx:
            state = start_fast_path(engine, args)
        elif args.pin is not None:
            log.warning("pin: --pin keeps the fast path's state; without --kernel-tx it does nothing")
        engine.open_receivers()
        if state is not None:
            from .handover import restore  # noqa: PLC0415

            restore(engine, state)
            engine.mark("sessions restored")
            # The arguments may have changed with the upgrade: the file and the
            # command line say what runs now; adopted sessions they no longer
            # name leave with AdminDown.
            for origin in ("cli", "file"):
                engine.apply_session_list([c for c, o in sessions if o == origin], origin)
            engine.mark("arguments applied")
        for cfg, origin in sessions if state is None else ():
            if cfg.key() in engine.by_key:
                raise EngineError(f"session {cfg.local} -> {cfg.peer} given twice")
            try:
                engine.add_session(cfg, origin)
            except OSError as e:
                raise EngineError(f"session {cfg.local} -> {cfg.peer}: {e.strerror or e}") from None
        log.info(
            "bfd: serving %d sessions %s",
            len(engine.sessions),
            "with the XDP fast path" if engine.offload else "in software",
        )
        if args.dplane_mode is not None:
            from .dplane import Dataplane  # noqa: PLC0415

            dataplane = Dataplane(engine, args.dplane_addr, mode=args.dplane_mode, hold_s=args.dp_hold)
            dataplane.start()
            engine.closers.append(dataplane.close)
        if args.metrics:
            from .metrics import MetricsServer  # noqa: PLC0415

            try:
                engine.closers.append(MetricsServer(engine, args.metrics).close)
            except (OSError, ValueError) as e:
                raise EngineError(f"--metrics {args.metrics}: {getattr(e, 'strerror', None) or e}") from None
        # One stats document built now: first calls (bcc's table objects,
        # /proc reads, lazy imports) cost most, and would otherwise fall on
        # the first SIGUSR1, under the reservation.
        engine.stats()
        # Everything made so far (bcc's tables, the compiled program's
        # metadata, the sessions) lives as long as the engine: out of the
        # collector's sight, a full collection scans only what came since.
        # Without it one took 10-60 ms of loop time under the reservation,
        # enough for a userspace-sent session to miss its detection time.
        gc.collect()
        gc.freeze()
        footprint.trim_heap()
        if engine.offload is not None:
            log.debug("memory: %d kB of the compiler's pages unmapped", footprint.shed_compiler_pages())
        # Last: bcc has compiled (compiling under a real-time class trips RT
        # throttling), and nothing forks from here on.
        engine.dump_pace_us = reserve_scheduling(args.sched_deadline)
        engine.notifier.ready(takeover=engine.handed_over_from is not None)
        engine.mark("ready")
        if engine.takeover_marks:
            marks = engine.takeover_marks
            log.info(
                "pin: serving again %.1f ms after the request at %.6f (%s)",
                (marks[-1][1] - marks[0][1]) / 1e6,
                marks[0][1] / 1e9,
                ", ".join(f"{b[0]} +{(b[1] - a[1]) / 1e6:.1f}" for a, b in itertools.pairwise(marks)),
            )
        engine.loop()
    finally:
        engine.shutdown()
    return EXIT_OK


__all__ = ["Engine", "EngineError", "run"]
