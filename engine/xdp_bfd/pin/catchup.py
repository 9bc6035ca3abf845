"""Adopted sessions the kernel carries whole, serviced once the successor's loop runs.

A takeover's successor services every session it adopts (its kernel
configuration, its clock, its timers): about a hundred microseconds of CPU a
session, a tenth of a second at 1024, which kept the successor from serving
(READY, the controller, every session userspace times) for that long after
the request (docs/benchmarks.md). For most sessions nothing in that service
is due: the kernel sends their packets (XDP's replies or the transmit clock),
the sweep watches their peers, the maps hold what the predecessor wrote, and
the session has no timer of its own. Those wait here and are serviced as
the loop's background work after READY, one a step, in the bounded and
paced turns a stats dump has; every other session is serviced before. A
packet or a kernel report for a waiting session services it at once as for
any other. A handover before the end hands a waiting session on as it came
(its state is the predecessor's, which the next successor adopts the same
way): servicing the rest first would lengthen the request by as much.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Generator

from ..core.clock import now_us
from ..core.host import Entry, Host
from ..fastpath.clock import Clock
from ..fastpath.observer import Offload
from ..wire.control import State

log = logging.getLogger("xdp_bfd")


def carried(entry: Entry, offload: Offload, clock: Clock | None) -> bool:
    """Nothing in the session's service is due until an input: the kernel sends and detects for it.

    Up, its periodic packets and its detection external as the predecessor
    left them and as this engine would decide them too (XDP answers it or
    the clock's frame runs, the sweep watches it), no Poll of ours under way,
    no echo of ours to time, no authentication (every packet is the
    session's), and no deadline of the session's own.
    """
    s = entry.session
    if s.state != State.UP or s.config.auth is not None or s.config.echo_tx_us:
        return False
    if not (s.periodic_tx_external and s.detection_external and entry.detect_armed):
        return False
    if s.poll_active or not offload.kernel_detects(entry):
        return False
    if not (offload.answers(entry) or (clock is not None and clock.clocking(entry))):
        return False
    return s.get_timer() is None


class Catchup:
    """The adopted sessions whose service waits for the loop: a background job, a session a step."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.pending: deque[Entry] = deque()
        self.waited = 0
        self.cpu_ns = 0  # the services' own, not the loop's between them
        self._t0_ns = 0

    def defer(self, entries: list[Entry]) -> None:
        """Service these as the loop's background work (it runs after READY), paced as a stats dump is."""
        if not entries:
            return
        self.pending.extend(entries)
        self.waited += len(entries)
        self._t0_ns = time.monotonic_ns()
        self.host.in_background(self._steps())

    def _service(self, entry: Entry) -> None:
        # Removed meanwhile (the arguments, the controller): its service went with it.
        if self.host.sessions.get(entry.session.local_discr) is entry:
            self.host.service(entry, now_us())

    def _steps(self) -> Generator[None, None, None]:
        while self.pending:
            cpu0 = time.thread_time_ns()
            self._service(self.pending.popleft())
            self.cpu_ns += time.thread_time_ns() - cpu0
            if not self.pending:
                self._done()
            yield

    def _done(self) -> None:
        log.info(
            "pin: the %d adopted sessions the kernel carried serviced in the loop, %.1f ms after the "
            "restore (%.1f ms of CPU)",
            self.waited,
            (time.monotonic_ns() - self._t0_ns) / 1e6,
            self.cpu_ns / 1e6,
        )


__all__ = ["Catchup", "carried"]
