"""The fast path as one object: a bcc module's programs and the maps they share with the engine.

Map layouts come from ``bpf/bfd_abi.h`` through bcc's generated ctypes
(``table.Leaf``/``table.Key``), and every shared value (flags, events, sizes,
the counter names) from the same header through :mod:`.abi`: nothing here
restates a C layout or constant. Each part wraps its own maps; this class
builds them from one compiled module and does what needs two of them.
"""

from __future__ import annotations

import contextlib
from typing import Any

from . import abi as _abi
from .gate import Gate
from .layout import PinPaths
from .pinned import Pinned
from .program import Program
from .reports import Counters, Events
from .slots import Slots
from .sysinfo import online_cpus


class FastPath:
    """One bcc module: the XDP program, the sweep programs, their maps."""

    def __init__(
        self, deadman_us: int, *, max_sessions: int | None = None, pin: PinPaths | None = None
    ) -> None:
        # Read before compiling: the values must describe the header this build compiles.
        self.abi = _abi.load()
        self.max_sessions = max_sessions or self.abi.max_sessions
        self.pin = pin
        self.program = Program(self.abi, max_sessions=self.max_sessions, pin=pin)
        # Every table is looked up here (bcc builds a table's ctypes types on
        # first access), not inside a handover.
        bpf = self.program.bpf
        # With --pin the gate is shared with a running engine until it hands over.
        self.gate = Gate(bpf["gate"], deadman_us * 1000, shared=pin is not None)
        self.slots = Slots(bpf, self.gate, self.max_sessions, self.abi.discr_slot_mask)
        self.counters = Counters(bpf, self.abi.counters)
        self.events = Events(bpf)
        self.tick_counters = Counters(bpf, self.abi.tick_counters, "tick_counters")
        self.tick_cfg, self.tick_state = bpf["tick_cfg"], bpf["tick_state"]
        # A meticulous key's packets signed ahead for its clock, keyed by slot (struct bfd_series).
        self.series = bpf["series"]
        # A frame of Downs for the tick program is one value of this map's (struct bfd_down_frame).
        self.down_frame: Any = bpf["down_scratch"].sLeaf
        self.pinned = Pinned(bpf, self.abi) if pin is not None else None

    def enable_spread(self) -> int:
        """--spread-pass: one cpumap entry per online CPU; returns how many take traffic."""
        cpus = online_cpus()[: self.abi.spread_max_cpus]
        self.program.fill_cpumap(cpus)
        if self.pin is not None:
            self.gate.keep_predecessors()  # it has left, but its sessions are not adopted yet
        self.gate.spread_cpus = len(cpus)
        self.gate.write()
        return len(cpus)

    def close(self) -> None:
        if self.pinned is not None:
            # A clean stop leaves nothing to adopt: the next start begins fresh.
            with contextlib.suppress(Exception):
                self.pinned.clear_owner()
        self.program.close()


__all__ = ["FastPath"]
