"""What the programs tell the engine: their counters, and the events ring (expiries, Polls answered)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any


class Counters:
    """The per-CPU ``counters`` array, by the names BFD_COUNTERS gives its indexes."""

    def __init__(self, bpf: Any, names: tuple[str, ...]) -> None:
        self.table = bpf["counters"]
        self.names = names

    def totals(self) -> dict[str, int]:
        """Every counter summed over the CPUs."""
        return {name: int(sum(self.table[self.table.Key(i)])) for i, name in enumerate(self.names)}


class Events:
    """The ``events`` ring buffer; each event arrives as a ``struct bfd_event``."""

    def __init__(self, bpf: Any) -> None:
        self.bpf = bpf
        self.event_type = bpf["event_layout"].Leaf
        self._open = False

    def open(self, callback: Callable[[Any], None]) -> int:
        """Start delivering events to ``callback``; returns the fd to poll for readability."""
        table = self.bpf["events"]
        etype = self.event_type

        def cb(_ctx: Any, data: Any, _size: int) -> int:
            callback(ctypes.cast(data, ctypes.POINTER(etype)).contents)
            return 0

        table.open_ring_buffer(cb)
        self._open = True
        return table.map_fd

    def consume(self) -> None:
        if self._open:
            self.bpf.ring_buffer_consume()


__all__ = ["Counters", "Events"]
