"""The reactor: one thread, one ``selectors`` loop, timed callbacks and signals.

Session timers sit in a heap of their own keyed by deadline, so a wake-up
costs O(log n) in the sessions that are due, never a scan of all of them;
stale heap entries (a session rescheduled or gone) are skipped when popped.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import selectors
import signal
import socket
import time
from collections.abc import Callable, Generator
from typing import Any

from .clock import now_us
from .host import Callback
from .lag import LoopLag
from .signals import CAUGHT_SIGNALS
from .timerfd import TimerFd

# Background work per turn of the loop without a reservation (µs): input and
# due timers wait at most this long, plus one step, behind a stats dump.
BACKGROUND_TURN_US = 1000


class Reactor:
    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        # Callbacks at a time (dataplane reconnects, hold deadlines…): (deadline, seq, fn).
        self.calls: list[tuple[int, int, Callback]] = []
        self._call_seq = 0
        # Session timers: (deadline, key); fired through ``fire_timer(key, deadline, now)``.
        self.timers: list[tuple[int, int]] = []
        self.fire_timer: Callable[[int, int, int], None] = lambda _k, _d, _now: None
        self.signal_handlers: dict[int, Callable[[], None]] = {}
        self.pending_signals: list[int] = []
        self.closers: list[Callable[[], None]] = []
        self.lag = LoopLag()
        self.stop_requested = False
        # Background work (the stats document, its encoding and exposition) in
        # small steps: a turn of the loop runs steps for up to ``turn_us``,
        # stopping early when a timer falls due, and the next turn of them
        # comes no sooner than ``pace_us`` after (pace_background()).
        self.background: Generator[None, None, None] | None = None
        self.next_background: Callable[[], Generator[None, None, None] | None] = lambda: None
        self.pace_us = 0
        self.turn_us = BACKGROUND_TURN_US
        self._background_at = 0
        self._turn_ended = False  # end_turn() during the step that runs
        self._gc_held: bool | None = None  # the collector's state before the jobs, while they run
        self._wake_r, self._wake_w = socket.socketpair()
        # What wakes the loop at a deadline: epoll's own timeout is whole milliseconds (wait()).
        self._deadline = TimerFd()
        self.selector.register(self._deadline, selectors.EVENT_READ, self._deadline.expired)
        self._signals_installed = False
        # A takeover's phases, (name, CLOCK_MONOTONIC ns) from the request on.
        self.takeover_marks: list[tuple[str, int]] = []

    # -- what plugins use (core.host.Loop) ---------------------------------------

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
        self._call_seq += 1
        heapq.heappush(self.calls, (deadline_us, self._call_seq, callback))

    def on_signal(self, signum: int, handler: Callable[[], None]) -> None:
        self.signal_handlers[signum] = handler

    def add_closer(self, close: Callable[[], None]) -> None:
        self.closers.append(close)

    def mark(self, phase: str) -> None:
        if self.takeover_marks:
            self.takeover_marks.append((phase, time.monotonic_ns()))

    # -- what the engine uses ----------------------------------------------------

    def schedule(self, key: int, deadline_us: int) -> None:
        """Fire ``fire_timer(key, deadline, now)`` at ``deadline_us`` (unless it is stale by then)."""
        heapq.heappush(self.timers, (deadline_us, key))

    def install_signals(self) -> None:
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        self._signals_installed = True
        for sig in CAUGHT_SIGNALS:
            signal.signal(sig, self._on_signal)
        self.watch(self._wake_r, lambda _now: self.handle_signals())

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.pending_signals.append(signum)

    def handle_signals(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while self._wake_r.recv(64):
                pass
        sigs, self.pending_signals = self.pending_signals, []
        for sig in sigs:
            handler = self.signal_handlers.get(sig)
            if handler is not None:
                handler()

    def run_timers(self, now: int) -> None:
        """Fire what is due at ``now``; a signal that arrives meanwhile ends the run, the rest
        staying due for the loop's next turn, right after the signal's handler."""
        while self.calls and self.calls[0][0] <= now and not self.pending_signals:
            _, _, fn = heapq.heappop(self.calls)
            fn(now)
        while self.timers and self.timers[0][0] <= now and not self.pending_signals:
            deadline, key = heapq.heappop(self.timers)
            self.fire_timer(key, deadline, now)

    def next_due(self) -> int | None:
        heads = [h[0][0] for h in (self.timers, self.calls) if h]
        return min(heads) if heads else None

    def timeout_s(self, now: int) -> float | None:
        due = self.next_due()
        return None if due is None else max(0.0, (due - now) / 1e6)

    def pace_background(self, runtime_us: int, period_us: int, reclaiming: bool) -> None:
        """Under a deadline reservation: one turn of background work a period, of the period's
        runtime when the kernel reclaims idle bandwidth for us, else of half of it.

        Without reclaiming, work beyond the runtime waits for the next period,
        and so would the timers due meanwhile: the other half is theirs.
        Reclaiming (GRUB) lets the loop run on the bandwidth no deadline task
        reserved, which real-time CPU hogs do not take (they are not deadline
        tasks), so a full turn still leaves the timers room
        (test_engine_sched_stress.py judges the dump after such hogs). A step
        that overruns the turn (cold caches after a hog make Python several
        times slower) eats into that room; steps stay small.
        """
        self.pace_us = period_us
        self.turn_us = max(1, runtime_us if reclaiming else runtime_us // 2)

    def start_background(self) -> None:
        """Begin the next background job now, if none is under way."""
        if self.background is None:
            self._next_job()

    def _next_job(self) -> None:
        """The next background job, with the cyclic collector held off until it ends.

        A document is thousands of new dicts that live until it is sent: their
        allocation set off the collector inside the job's steps, and a full
        collection held the loop for milliseconds at thousands of sessions
        (docs/benchmarks.md). Freed by reference counting afterwards, they leave
        nothing for the collector to find; it runs again once the jobs are done.
        """
        self.background = self.next_background()
        if self.background is not None:
            self.lag.background.started(now_us())
            if self._gc_held is None:
                self._gc_held = gc.isenabled()
                gc.disable()
        elif self._gc_held is not None:
            if self._gc_held:
                gc.enable()
            self._gc_held = None

    def step_background(self) -> None:
        assert self.background is not None
        t0, c0 = now_us(), time.thread_time_ns()
        try:
            next(self.background)
            done = False
        except StopIteration:
            done = True
        t1 = now_us()
        self.lag.background.step(t1 - t0, (time.thread_time_ns() - c0) // 1000)
        if done:
            self.lag.background.finished(t1)
            self._next_job()

    def run_background(self) -> None:
        """Background steps for up to ``turn_us``, ending early when a timer falls due or a step
        called :meth:`end_turn`."""
        start = now_us()
        while self.background is not None:
            self._turn_ended = False
            self.step_background()
            now = now_us()
            due = self.next_due()
            if self._turn_ended or now - start >= self.turn_us or (due is not None and due <= now):
                return

    def end_turn(self) -> None:
        """The background step running now is the last of this turn; the job's next comes with the next.

        Under a reservation the next turn is a period later, when the kernel
        has given the thread that period's runtime again: a step that must find
        the loop with CPU left after it (the warm-up's stamp, which a takeover's
        request follows within a millisecond) opens a turn of its own.
        """
        self._turn_ended = True

    def wait(self, timeout: float | None) -> list[tuple[selectors.SelectorKey, int]]:
        """Input ready within ``timeout`` seconds; returns at the deadline, not up to 1 ms after it.

        epoll counts in milliseconds and Python rounds a timeout up to the next
        one, so a timer due in 0.3 ms fired 1 ms late, and every packet the loop
        sends went out up to 1 ms past its jittered interval (docs/benchmarks.md).
        The deadline is a timerfd's instead, in the same epoll set, so input
        still wakes the loop at once.
        """
        if timeout is None or timeout <= 0:
            self._deadline.arm(0)
            return self.selector.select(timeout)
        self._deadline.arm(max(1, int(timeout * 1e9)))
        return self.selector.select(None)

    def loop(self) -> None:
        while not self.stop_requested:
            # Input before timers: after a stall, packets waiting in a socket
            # prove the peer was talking, and must reach the session before its
            # detection timer is judged (timers first would declare a live
            # peer dead for our own lateness).
            timeout = self.timeout_s(now_us())
            if self.background is not None:
                step_in = max(0.0, (self._background_at - now_us()) / 1e6)
                timeout = step_in if timeout is None else min(timeout, step_in)
            for key, _ in self.wait(timeout):
                key.data(now_us())
                if self.pending_signals:
                    # The signal first; what else was ready is still ready next turn (epoll
                    # is level-triggered), and so are the timers run_timers leaves due.
                    break
            now = now_us()
            due = self.next_due()
            if due is not None and now >= due:
                self.lag.add(now - due)
            self.run_timers(now)
            # Signals last, and background work last of all, in a bounded turn
            # (paced once a period under a reservation): a stats dump is
            # milliseconds of Python, so what is due goes out first, and again
            # whenever it falls due between steps.
            if self.pending_signals:
                self.handle_signals()
            if self.background is not None and now_us() >= self._background_at:
                self.run_background()
                self._background_at = now_us() + self.pace_us

    def close(self) -> None:
        if self._gc_held:  # stopped in the middle of a job
            gc.enable()
        self._gc_held = None
        for close in reversed(self.closers):
            close()
        # The kernel must stop writing to the wake-up fd before it is closed
        # (a later fd of the same number would receive the signal bytes).
        if self._signals_installed:
            signal.set_wakeup_fd(-1)
        self._wake_r.close()
        self._wake_w.close()
        self.selector.unregister(self._deadline)
        self._deadline.close()
