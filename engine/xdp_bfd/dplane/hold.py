"""``--dp-hold SEC``: what becomes of bfdd's sessions while no bfdd is connected.

When bfdd goes away its sessions stay on the wire, held. When it comes back
(any connection), a re-added session with the same address pair is adopted.
The ECHO_REQUEST sent right after connecting is answered after bfdd's
registration burst (bfdd's output is FIFO), so its reply is a barrier: held
sessions not re-added by then are orphans and are torn down (AdminDown). A
deadline ``SEC`` after the disconnect that orphaned them tears down whatever
is still held, so a bfdd that never returns does not leave sessions up
forever — and a client that connects but never answers the barrier cannot
hold them longer either. Without ``--dp-hold`` a disconnect removes every
bfdd session with AdminDown, and bfdd's re-adds recreate them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..core.host import Host
    from .registry import DpSession, Registry

log = logging.getLogger("xdp_bfd.dplane")


class Hold:
    def __init__(self, host: Host, registry: Registry, hold_s: int) -> None:
        self.host = host
        self.registry = registry
        self.hold_us = hold_s * 1_000_000

    def holding(self) -> bool:
        """Sessions wait for bfdd to re-add them."""
        return bool(self.registry.held())

    def bfdd_gone(self, now_us: int) -> None:
        """The connection ended: bfdd's sessions are held, or removed without --dp-hold."""
        recs = self.registry.registered()
        if recs and self.hold_us > 0:
            self.registry.hold_all(now_us + self.hold_us)
            log.info(
                "dplane: holding %d sessions for %d s for bfdd to re-add them",
                len(recs),
                self.hold_us // 1_000_000,
            )
            self.host.call_at(now_us + self.hold_us, self.expire)
        elif recs:
            log.info("dplane: removing %d sessions with bfdd gone (no --dp-hold)", len(recs))
            self.teardown(recs)

    def keep(self, recs: Iterable[DpSession], until_us: int) -> None:
        """Sessions that come without a bfdd id (handed over by another engine), held until ``until_us``."""
        for rec in recs:
            self.registry.hold(rec, until_us)
        self.host.call_at(until_us, self.expire)

    def expire(self, now_us: int) -> None:
        recs = self.registry.expired(now_us)
        if recs:
            log.info("dplane: hold expired: tearing down %d sessions bfdd did not re-add", len(recs))
            self.teardown(recs)

    def barrier_passed(self) -> None:
        """bfdd's registration burst is over: what it did not re-add is orphaned."""
        orphans = self.registry.held()
        if orphans:
            log.info("dplane: bfdd did not re-add %d held sessions; tearing them down", len(orphans))
            self.teardown(orphans)

    def teardown(self, recs: Iterable[DpSession]) -> None:
        for rec in recs:
            self.registry.remove(rec)
            self.host.remove_session(rec.discr, admin_down=True)


__all__ = ["Hold"]
