"""The gate: the one map entry by which the engine lets the programs act for it, and how.

XDP answers peers only while the engine's heartbeat is younger than the
dead-man bound (a hung engine must not look alive to them); the entry also
says which slots the sweep looks at, how often it sweeps them and over how
many CPUs ``--spread-pass`` spreads other traffic.
"""

from __future__ import annotations

from typing import Any

# The sweep's timer on every CPU. A walk runs when the earliest expiry it
# foresaw is due, and at least every sweep_ns for what it could not foresee (a
# session heard for the first time): short for few sessions, growing with the
# table so that those walks cost at most about 1 % of a core (sweep.c).
SWEEP_TICK_NS = 500_000
SWEEP_MIN_NS = SWEEP_TICK_NS
SWEEP_MAX_NS = 5_000_000
SWEEP_NS_PER_SLOT = 2_000


def sweep_period_ns(nslots: int) -> int:
    return max(SWEEP_MIN_NS, min(SWEEP_MAX_NS, nslots * SWEEP_NS_PER_SLOT))


class Gate:
    """The ``gate`` map's one entry, as this engine last wrote it."""

    def __init__(self, table: Any, deadman_ns: int, *, shared: bool) -> None:
        """``shared``: the map is pinned and may be a running engine's, whose gate stays as it wrote it."""
        self.table = table
        self.deadman_ns = deadman_ns
        self.heartbeat_ns = 0
        self.nslots = 0  # the sweep looks at slots [0, nslots)
        self.spread_cpus = 0
        if shared:
            self.heartbeat_ns = self._read().heartbeat_ns
        else:
            self.write()

    def _read(self) -> Any:
        return self.table[self.table.Key(0)]

    def heartbeat(self, now_ns: int) -> None:
        self.heartbeat_ns = now_ns
        self.write()

    def keep_predecessors(self) -> None:
        """Before an adoption the pinned gate is the old engine's: keep its heartbeat and sweep range."""
        g = self._read()
        self.heartbeat_ns, self.nslots = g.heartbeat_ns, g.nslots

    def write(self) -> None:
        g = self.table.Leaf()
        g.heartbeat_ns = self.heartbeat_ns
        g.deadman_ns = self.deadman_ns
        g.nslots = self.nslots
        g.spread_cpus = self.spread_cpus
        g.sweep_ns = sweep_period_ns(self.nslots)
        self.table[self.table.Key(0)] = g


__all__ = ["SWEEP_TICK_NS", "Gate", "sweep_period_ns"]
