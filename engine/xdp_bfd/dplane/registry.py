"""bfdd's sessions as the data plane keeps them: bfdd's ids → engine discriminators, and the held ones.

Pure bookkeeping: nothing here touches the engine, a socket or a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..session import SessionConfig
from .mapping import path_of, same_path


@dataclass(eq=False)
class DpSession:
    """One engine session bfdd created: registered under ``lid``, or held (``lid`` None)."""

    discr: int
    config: SessionConfig
    lid: int | None = None
    held_until_us: int | None = None
    # Carried for the echo originator (§6.8.9 with the peer's value) and the
    # C bit, which the session machine cannot advertise yet.
    min_echo_tx_us: int = 0
    cbit: bool = False
    # A state change went to bfdd since this registration (no second report needed).
    reported: bool = False
    # The peer's values as bfdd last heard them from us (None: nothing since
    # this registration); when a timers-only report is due, and when the last went.
    told: tuple[int, int, int, int] | None = None
    timers_due_us: int | None = None
    last_timers_us: int | None = None


@dataclass
class Registry:
    """bfdd's ids → engine discriminators, and the sessions held for a returning bfdd."""

    by_lid: dict[int, DpSession] = field(default_factory=dict)
    by_discr: dict[int, DpSession] = field(default_factory=dict)
    _held: dict[tuple[Any, Any, bool], list[DpSession]] = field(default_factory=dict)

    def add(self, rec: DpSession, lid: int) -> None:
        rec.lid = lid
        rec.reported = False
        rec.told = None
        self.by_lid[lid] = rec
        self.by_discr[rec.discr] = rec

    def remove(self, rec: DpSession) -> None:
        self.by_discr.pop(rec.discr, None)
        if rec.lid is not None and self.by_lid.get(rec.lid) is rec:
            del self.by_lid[rec.lid]
        self._unhold(rec)

    def registered(self) -> list[DpSession]:
        return list(self.by_lid.values())

    def held(self) -> list[DpSession]:
        return [r for recs in self._held.values() for r in recs]

    def hold_all(self, until_us: int) -> list[DpSession]:
        """Every registered session becomes held until ``until_us``; returns them."""
        recs = self.registered()
        self.by_lid.clear()
        for rec in recs:
            rec.lid = None
            rec.held_until_us = until_us
            self._held.setdefault(path_of(rec.config), []).append(rec)
        return recs

    def hold(self, rec: DpSession, until_us: int) -> None:
        """A session that comes without a bfdd id (handed over by another engine)."""
        self.by_discr[rec.discr] = rec
        rec.lid = None
        rec.held_until_us = until_us
        self._held.setdefault(path_of(rec.config), []).append(rec)

    def find_held(self, config: SessionConfig) -> DpSession | None:
        return next((r for r in self._held.get(path_of(config), ()) if same_path(r.config, config)), None)

    def adopt(self, rec: DpSession, lid: int) -> None:
        self._unhold(rec)
        rec.held_until_us = None
        self.add(rec, lid)

    def rename(self, rec: DpSession, lid: int) -> None:
        """bfdd registered the same path under a new id: the old id is gone."""
        if rec.lid is not None and self.by_lid.get(rec.lid) is rec:
            del self.by_lid[rec.lid]
        self.add(rec, lid)

    def expired(self, now_us: int) -> list[DpSession]:
        return [r for r in self.held() if r.held_until_us is not None and r.held_until_us <= now_us]

    def _unhold(self, rec: DpSession) -> None:
        recs = self._held.get(path_of(rec.config))
        if recs and rec in recs:
            recs.remove(rec)
            if not recs:
                del self._held[path_of(rec.config)]


__all__ = ["DpSession", "Registry"]
