"""``--dp-hold SEC``: what becomes of bfdd's sessions while no bfdd is connected.

When bfdd goes away its sessions stay on the wire, held, each until its own
deadline: ``SEC`` after the disconnect that orphaned it. Whatever bfdd does in
between does not shorten that: a held session is adopted when a bfdd re-adds
one with the same address pair, on this connection or a later one, and torn
down (AdminDown) only when its deadline passes. Under watchfrr a restarted
bfdd connects to the data plane before its peers are configured (the
integrated config arrives seconds later through vtysh), and it may connect,
be reset and connect again first: none of that is a verdict. The end of
bfdd's registration burst (the reply to the ECHO_REQUEST sent right after
connecting) is only logged, with what is still held. A session that was
re-added and is orphaned again gets a new deadline from that disconnect.
Without ``--dp-hold`` a disconnect removes every bfdd session with
AdminDown, and bfdd's re-adds recreate them.
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

    def barrier_passed(self, now_us: int) -> None:
        """bfdd's registration burst is over. What it did not re-add stays held until its
        deadline: its configuration may still come (vtysh, seconds later under watchfrr)."""
        held = self.registry.held()
        if held:
            first = min(r.held_until_us for r in held if r.held_until_us is not None)
            log.info(
                "dplane: bfdd connected with %d sessions still held; they stay on the wire until bfdd "
                "re-adds them or their hold expires (the first in %.1f s)",
                len(held),
                max(0, first - now_us) / 1e6,
            )

    def teardown(self, recs: Iterable[DpSession]) -> None:
        for rec in recs:
            self.registry.remove(rec)
            self.host.remove_session(rec.discr, admin_down=True)


__all__ = ["Hold"]
