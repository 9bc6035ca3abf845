"""What the programs tell the engine: their counters, and the events ring (expiries, Polls, lost ticks)."""

from __future__ import annotations

import ctypes
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger("xdp_bfd")

# How long one turn of the loop hands reports on to their handlers; past this
# the loop's other work goes first and the rest waits for the next turn. What
# must not wait (each expiry's Down and its machine's transition) runs in the
# ahead handlers as each read comes in, whatever the time.
TURN_S = 0.05


class Counters:
    """A per-CPU counter array (``counters``: BFD_COUNTERS; ``tick_counters``: BFD_TICK_COUNTERS) by name."""

    def __init__(self, bpf: Any, names: tuple[str, ...], table: str = "counters") -> None:
        self.table = bpf[table]
        self.names = names

    def totals(self) -> dict[str, int]:
        """Every counter summed over the CPUs, in one batch lookup (a third of the time of a lookup
        a counter, in the stats document's step that reads them)."""
        try:
            items = list(self.table.items_lookup_batch())
        except Exception:  # bcc raises a bare Exception: a kernel without batch lookups for this map
            return {name: int(sum(self.table[self.table.Key(i)])) for i, name in enumerate(self.names)}
        got = {int(k): sum(v) for k, v in items}
        return {name: int(got.get(i, 0)) for i, name in enumerate(self.names)}


class Events:
    """The ``events`` ring buffer; each event arrives as a ``struct bfd_event``, handed on by its type.

    A read drains the ring and then hands the batch on in three stages: every
    event of a type with an ``ahead`` handler to it, all at once; then each
    event of a type with a ``next`` handler to that, in ring order; then each
    event to its own (``on``) handler, in ring order. The ring is read again
    after every ``next`` and ``on`` handler, and what it brings goes through
    its ``ahead`` stage at once and joins the queues, ``next`` before any
    ``on``. When many peers fall silent together, each session's Down (ahead)
    leaves for every reported one before the controller hears of any (next),
    and the controller hears of every one before any session's slower work
    (on); a report read meanwhile has its Down sent before the next session's
    report (docs/fastpath.md, "Many expiries at once"). The ``on`` handlers
    of one turn stop after TURN_S, once no ``next`` handler is due; the
    events left (their earlier stages run) go first at the next :meth:`consume`.
    """

    def __init__(self, bpf: Any) -> None:
        self.bpf = bpf
        self.event_type = bpf["event_layout"].Leaf
        self.handlers: dict[int, Callable[[Any], None]] = {}
        self.ahead_handlers: dict[int, Callable[[Sequence[Any]], None]] = {}
        self.next_handlers: dict[int, Callable[[Any], None]] = {}
        self._batch: list[Any] = []
        self._next: deque[Any] = deque()  # read, handed ahead, waiting for their next handler
        self._left: deque[Any] = deque()  # read, handed ahead, waiting for their own handler
        self._open = False

    def on(self, event_type: int, callback: Callable[[Any], None]) -> None:
        """Hand every event of ``event_type`` to ``callback`` (events of no handler are dropped)."""
        self.handlers[int(event_type)] = callback

    def ahead(self, event_type: int, callback: Callable[[Sequence[Any]], None]) -> None:
        """Hand the events of ``event_type`` in a read to ``callback`` at once, before any other handler."""
        self.ahead_handlers[int(event_type)] = callback

    def next(self, event_type: int, callback: Callable[[Any], None]) -> None:
        """Hand each event of ``event_type`` to ``callback`` after the ahead stage, before any ``on``."""
        self.next_handlers[int(event_type)] = callback

    def open(self) -> int:
        """Start delivering events; returns the fd to poll for readability."""
        table = self.bpf["events"]
        etype = self.event_type
        size = ctypes.sizeof(etype)
        batch = self._batch

        def cb(_ctx: Any, data: Any, _size: int) -> int:
            # The ring's memory is the kernel's again once this returns: keep a copy.
            batch.append(etype.from_buffer_copy(ctypes.string_at(data, size)))
            return 0

        table.open_ring_buffer(cb)
        self._open = True
        return table.map_fd

    def consume(self) -> bool:
        """Read the ring and hand its reports on; True when some are left for another call."""
        if not self._open:
            return False
        return self.dispatch(self._read(), self._read)

    def _read(self) -> list[Any]:
        self.bpf.ring_buffer_consume()
        batch = self._batch[:]
        self._batch.clear()
        return batch

    def dispatch(self, batch: Sequence[Any], read: Callable[[], list[Any]] | None = None) -> bool:
        """Hand a drained batch on: the ``ahead`` handlers first, then ``next``, then ``on``.

        With ``read``, the ring is read again after each ``next`` or ``on``
        handler (a read of the mapped ring, no system call): what the kernel
        reported meanwhile has its ``ahead`` handlers run at once and joins the
        queues. Events left from an earlier call come first in theirs. After
        TURN_S, once every due ``next`` handler ran, the rest is left for the
        next call: True.
        """
        self._arrive(batch)
        nxt, pending = self._next, self._left
        until = time.monotonic() + TURN_S
        while nxt or pending:
            if nxt:
                ev = nxt.popleft()
                self._call(self.next_handlers[ev.type], ev)
            else:
                ev = pending.popleft()
                handler = self.handlers.get(ev.type)
                if handler is not None:
                    self._call(handler, ev)
            if read is not None:
                self._arrive(read())
            # A next handler never waits for a later turn: the Down its ahead stage sent and what it
            # does (the machine's transition) are one step, with no timer of the session between.
            if not nxt and pending and time.monotonic() >= until:
                return True
        return False

    def _arrive(self, batch: Sequence[Any]) -> None:
        self._ahead(batch)
        self._next.extend(ev for ev in batch if ev.type in self.next_handlers)
        self._left.extend(batch)

    def _ahead(self, batch: Sequence[Any]) -> None:
        for event_type, callback in self.ahead_handlers.items():
            of_type = [ev for ev in batch if ev.type == event_type]
            if of_type:
                self._call(callback, of_type)

    @staticmethod
    def _call(callback: Callable[[Any], None], arg: Any) -> None:
        # One report's failure must not cost the rest of the batch their handling.
        try:
            callback(arg)
        except Exception:
            log.exception("kernel-tx: handling a kernel report failed")


__all__ = ["Counters", "Events"]
