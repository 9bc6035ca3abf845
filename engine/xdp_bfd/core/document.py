"""The stats document (the contract in DESIGN.md), built a slice at a time between timers.

A dump is milliseconds of Python at a few sessions and tens at a thousand;
under the deadline reservation work beyond the period's runtime waits for the
next period, so a document built in one piece would hold back every
transmission due meanwhile. The builder yields between slices and the reactor
runs the timers in between (one step per period under a reservation).

Who asks while a document is being built waits for the next one: it must
describe a moment after the request.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Generator, Mapping
from pathlib import Path
from typing import Any

from .. import __version__
from ..wire.control import State
from .host import DocWaiter, Entry, SessionObserver
from .lag import LoopLag
from .sched import describe as sched_description
from .stats_format import DIAG_NAMES, STATE_NAMES, encode_steps, run_steps, wall_clock_of, write_atomic_steps

log = logging.getLogger("xdp_bfd")

# Sessions per step of a stats dump: tens of µs of Python each, so that a turn of
# background work (core/reactor.py) overruns its budget by little.
STATS_SLICE_SESSIONS = 8
# Sessions' entries of a document freed per step once its consumers are done.
RELEASE_SLICE_SESSIONS = 256


class StatsDocument:
    def __init__(
        self,
        sessions: Mapping[int, Entry],
        observers: list[SessionObserver],
        *,
        drops: Counter,
        lag: LoopLag,
        deadman_us: int,
    ) -> None:
        self.sessions = sessions
        self.observers = observers
        self.drops = drops
        self.lag = lag
        self.deadman_us = deadman_us
        # Extra top-level sections (the dataplane's), filled at dump time.
        self.sections: dict[str, Callable[[], Any]] = {}
        self.waiters: list[DocWaiter] = []

    def build(self) -> dict[str, Any]:
        """The document in one go (the start-up warm-up; tests)."""
        return run_steps(self.steps())

    def steps(self) -> Generator[None, None, dict[str, Any]]:
        """The document, built a slice at a time: it yields between slices."""
        now_ns = time.monotonic_ns()
        now = now_ns // 1000
        generated_at = round(time.time(), 3)
        sessions = []
        up = 0
        started_ns = time.monotonic_ns()
        for i, entry in enumerate(list(self.sessions.values()), 1):
            if i % STATS_SLICE_SESSIONS == 0:
                yield
            if self.sessions.get(entry.session.local_discr) is not entry:
                continue  # removed while the dump was under way
            sessions.append(self._session(entry, now, now_ns))
            up += entry.session.state == State.UP
        sessions_span_ms = (time.monotonic_ns() - started_ns) / 1e6
        yield
        doc = {
            "version": 1,
            "generated_at": generated_at,
            "pid": os.getpid(),
            "engine_version": __version__,
            "kernel_tx": False,
            "xdp": None,
            "dplane": None,
            "deadman_us": self.deadman_us,
            "sched": sched_description(),
            "sessions_configured": len(self.sessions),
            # Counted from the list, not the table: the loop runs between slices, so a count taken
            # now would disagree with the states listed (a mass failure under way: "0 up" above
            # sessions listed Up). How long the list took to take is said beside it.
            "sessions_up": up,
            "sessions_span_ms": round(sessions_span_ms, 3),
            "counters": {"xdp_tx": 0, "xdp_pass": 0, "drop": dict(self.drops)},
            "sessions": sessions,
            "loop_lag": self.lag.doc(),
        }
        yield
        doc |= {name: fn() for name, fn in self.sections.items()}
        for observer in self.observers:
            yield  # the kernel's counters: a map lookup per counter and CPU, and the program's fdinfo
            observer.document(doc)
        return doc

    def _session(self, entry: Entry, now: int, now_ns: int) -> dict[str, Any]:
        s = entry.session
        c = s.config
        out = {
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
            "poll_active": s.poll_active,
            "rx_packets": s.rx_packets,
            "kernel_tx_packets": 0,
            "user_tx_packets": entry.user_tx_packets,
            "last_rx_age_us": (now - s.last_rx_us) if s.last_rx_us else None,
            "last_ktx_age_us": None,
            "flaps": s.flaps,
            "up_since": round(wall_clock_of(s.up_since_us), 3) if s.up_since_us else 0,
            "origin": entry.origin,
            "drops": dict(entry.drops),
        }
        for observer in self.observers:
            observer.session_stats(entry, out, now_ns)
        return out

    # -- who waits for a document ------------------------------------------------

    def want(self, waiter: DocWaiter) -> None:
        self.waiters.append(waiter)

    def next_job(self) -> Generator[None, None, None] | None:
        """The reactor's next background job: a document for those waiting, or None."""
        return self._job() if self.waiters else None

    def _job(self) -> Generator[None, None, None]:
        waiters, self.waiters = self.waiters, []
        doc = yield from self.steps()
        for waiter in waiters:
            yield
            try:
                more = waiter(doc)
                if more is not None:
                    yield from more
            except Exception as e:  # a consumer's bug must not stop the loop that serves sessions
                log.error("stats: a consumer of the stats document failed: %r", e)
        # Let go of a slice of sessions a step: the whole document at once (a hundred thousand
        # objects at 4096 sessions) was a step of 2-4 ms of deallocation (docs/benchmarks.md).
        sessions = doc.pop("sessions", None)
        del doc, waiters
        while sessions:
            yield
            del sessions[-RELEASE_SLICE_SESSIONS:]


def file_writer(path: Path) -> DocWaiter:
    """SIGUSR1's consumer: the document, encoded and renamed into place (paced: encode, then write)."""

    def write(doc: dict[str, Any]) -> Generator[None, None, None]:
        data = yield from encode_steps(doc)
        yield
        try:
            yield from write_atomic_steps(path, data)
        except OSError as e:
            log.error("stats: cannot write %s: %s", path, e.strerror)

    return write
