"""What the programs tell the engine: their counters, and the events ring (expiries, Polls, lost ticks)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any


class Counters:
    """A per-CPU counter array (``counters``: BFD_COUNTERS; ``tick_counters``: BFD_TICK_COUNTERS) by name."""

    def __init__(self, bpf: Any, names: tuple[str, ...], table: str = "counters") -> None:
        self.table = bpf[table]
        self.names = names

    def totals(self) -> dict[str, int]:
        """Every counter summed over the CPUs."""
        return {name: int(sum(self.table[self.table.Key(i)])) for i, name in enumerate(self.names)}


class Events:
    """The ``events`` ring buffer; each event arrives as a ``struct bfd_event``, handed on by its type."""

    def __init__(self, bpf: Any) -> None:
        self.bpf = bpf
        self.event_type = bpf["event_layout"].Leaf
        self.handlers: dict[int, Callable[[Any], None]] = {}
        self._open = False

    def on(self, event_type: int, callback: Callable[[Any], None]) -> None:
        """Hand every event of ``event_type`` to ``callback`` (events of no handler are dropped)."""
        self.handlers[int(event_type)] = callback

    def open(self) -> int:
        """Start delivering events; returns the fd to poll for readability."""
        table = self.bpf["events"]
        etype = self.event_type
        handlers = self.handlers

        def cb(_ctx: Any, data: Any, _size: int) -> int:
            ev = ctypes.cast(data, ctypes.POINTER(etype)).contents
            handler = handlers.get(ev.type)
            if handler is not None:
                handler(ev)
            return 0

        table.open_ring_buffer(cb)
        self._open = True
        return table.map_fd

    def consume(self) -> None:
        if self._open:
            self.bpf.ring_buffer_consume()


__all__ = ["Counters", "Events"]
