"""bfdd's messages to the engine, and what the engine reports back (state changes, the peer's timers).

bfdd owns the configuration (it sends DP_ADD_SESSION / DP_DELETE_SESSION),
the engine owns the wire: it runs the sessions, reports every state change
(and, coalesced, a peer's new timers: :data:`TIMERS_SETTLE_US`) and answers
counters requests.

Discriminators. bfdd's id for a session (``lid``) is used as our My
Discriminator when it is free, so bfdd's ``show bfd peers`` and the wire agree.
The engine's discriminator and bfdd's id are nevertheless kept apart, in a
lid → discriminator map (:class:`~.registry.Registry`): after a bfdd restart
under ``--dp-hold`` bfdd re-adds a held session under a new random id, and the
session keeps the discriminator the peer already knows. The map, not the
session, changes.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from ..wire.bfddp import (
    AddSession,
    CountersRequest,
    DeleteSession,
    EchoReply,
    EchoRequest,
    Message,
    SessionFlags,
)
from ..wire.control import State
from .connection import Connection, EchoStamps, error_text
from .mapping import ORIGIN, counters_reply, describe, remote_params, same_path, session_config, state_change
from .registry import DpSession, Registry

if TYPE_CHECKING:
    from ..core.host import Entry, Host
    from ..session import RemoteParamsChanged, Session, SessionConfig, StateChanged

log = logging.getLogger("xdp_bfd.dplane")

# bfdd (8.4-10.7) reclaims its input buffer only after three messages in one
# read loop; a counters reply alone never triggers it, so replies alone fill
# the buffer until bfdd misreads it as a closed connection. Two ECHO_REQUESTs
# in front of every reply make three.
ECHOS_BEFORE_COUNTERS = 2

# bfdd learns the peer's timers and multiplier only from BFD_STATE_CHANGE, so
# without a report when they change its CLI keeps those of the last transition
# (typically a peer's 1 s slow start). A report in the state bfdd already has
# updates them without a transition (FRR 8.4 and 10.3, bfdd/dplane.c), but
# bfdd sends zebra a notification for each, which zebra relays to every
# client and the clients drop as "no state change" (lib/bfd.c). So these are
# coalesced: the first change waits TIMERS_SETTLE_US for the rest of a Poll
# (a peer changing TX and RX in two Polls, FRR applying two config lines),
# the report carries the values then in force, and a session reports at most
# once per TIMERS_REPORT_GAP_US however often its peer changes them.
TIMERS_SETTLE_US = 200_000
TIMERS_REPORT_GAP_US = 1_000_000


class Link(Protocol):
    """The connection to bfdd as the transport keeps it."""

    @property
    def conn(self) -> Connection | None:
        """The current connection (None between connections)."""

    def barrier_passed(self, conn: Connection, now_us: int) -> None: ...


class Dispatch:
    def __init__(self, host: Host, registry: Registry, stamps: EchoStamps, link: Link) -> None:
        self.host = host
        self.registry = registry
        self.stamps = stamps
        self.link = link
        self.timers_reports = 0
        host.on_state_change(self._on_state_change)
        host.on_remote_change(self._on_remote_change)

    def handle(self, conn: Connection, msg: Message, now_us: int) -> None:
        if isinstance(msg, AddSession):
            self._on_add(conn, msg)
        elif isinstance(msg, DeleteSession):
            self._on_delete(msg)
        elif isinstance(msg, CountersRequest):
            reqs = [EchoRequest(self.stamps.next()) for _ in range(ECHOS_BEFORE_COUNTERS)]
            entry = self._entry_for_lid(msg.lid)
            conn.send(*reqs, counters_reply(msg, self.host.packet_counts(entry) if entry else None))
        elif isinstance(msg, EchoReply):
            conn.last_reply_us = now_us
            # Any reply to the barrier request or a later one of ours: bfdd
            # answers in order, and drops a reply when its output buffer is
            # full (the registration burst can fill it), so a later keepalive
            # reply stands in for a lost barrier reply.
            if conn.barrier is not None and conn.barrier <= msg.dp_time <= self.stamps.last:
                self.link.barrier_passed(conn, now_us)
        elif isinstance(msg, EchoRequest):
            # bfdd never asks, but answering costs nothing and lets anyone check we are alive.
            conn.send(EchoReply(msg.dp_time, time.time_ns() // 1000))
        else:
            log.debug("dplane: ignoring %s from bfdd", type(msg).__name__)

    def _entry_for_lid(self, lid: int) -> Entry | None:
        rec = self.registry.by_lid.get(lid)
        return None if rec is None else self.host.sessions.get(rec.discr)

    def _on_add(self, conn: Connection, msg: AddSession) -> None:
        try:
            config = session_config(msg, reflect_echo=self.host.reflects_echo)
        except ValueError as e:
            log.warning("dplane: ignoring session %s from bfdd (id %d): %s", describe(msg), msg.lid, e)
            return
        rec = self.registry.by_lid.get(msg.lid)
        if rec is not None:
            self._update(rec, msg, config)
            return
        rec = self.registry.find_held(config)
        if rec is not None:
            self.registry.adopt(rec, msg.lid)
            log.info(
                "dplane: adopted held session %s (discriminator %d, bfdd id %d)",
                describe(msg),
                rec.discr,
                msg.lid,
            )
            self._update(rec, msg, config)
            self._report_registration(conn, rec)
            return
        existing = self.host.lookup(config.key())
        if existing is not None:
            other = self.registry.by_discr.get(existing.session.local_discr)
            if other is None:
                origin = existing.origin
                log.warning("dplane: session %s already comes from %s; ignored", describe(msg), origin)
                return
            # bfdd cannot have two sessions on one path: it replaced the old id.
            log.info("dplane: bfdd id %d now names session %s (was %s)", msg.lid, describe(msg), other.lid)
            self.registry.rename(other, msg.lid)
            self._update(other, msg, config)
            self._report_registration(conn, other)
            return
        self._create(conn, msg, config)

    def _create(
        self, conn: Connection, msg: AddSession, config: SessionConfig, discr: int | None = None
    ) -> None:
        if (taken := self.host.lookup(config.key())) is not None:
            other = taken.origin
            log.warning("dplane: session %s already comes from %s; ignored", describe(msg), other)
            return
        if discr is None:
            # bfdd's id is our discriminator unless something else already uses it
            # (a session, or an S-BFD reflector: its discriminator is never a session's).
            discr = msg.lid if self.host.discr_free(msg.lid) else self.host.allocate_discr()
        rec = DpSession(
            discr, config, min_echo_tx_us=msg.min_echo_tx, cbit=bool(msg.flags & SessionFlags.CBIT)
        )
        # Registered before the engine runs it, so its first state change can be reported.
        self.registry.add(rec, msg.lid)
        try:
            self.host.add_session(config, ORIGIN, discr=discr)
        except (OSError, ValueError) as e:
            self.registry.remove(rec)
            log.warning("dplane: cannot run session %s from bfdd: %s", describe(msg), error_text(e))
            return
        self._report_registration(conn, rec)

    def _update(self, rec: DpSession, msg: AddSession, config: SessionConfig) -> None:
        """An ADD for a session we run: idempotent; changed timers go through a Poll (engine)."""
        rec.min_echo_tx_us = msg.min_echo_tx
        rec.cbit = bool(msg.flags & SessionFlags.CBIT)
        entry = self.host.sessions.get(rec.discr)
        conn = self.link.conn
        if entry is None:  # removed behind our back: run it again
            self.registry.remove(rec)
            if conn is not None:
                self._create(conn, msg, config, discr=None)
            return
        current = entry.session.config
        if config.key() != current.key():
            if same_path(current, config):
                # Only the interface was given or dropped: keep the running
                # session on the interface it has rather than flap it.
                config = replace(config, interface=current.interface)
            else:
                log.info("dplane: bfdd id %s moved to %s; restarting the session", rec.lid, describe(msg))
                lid = rec.lid
                self.registry.remove(rec)
                self.host.remove_session(rec.discr, admin_down=True)
                if conn is not None and lid is not None:
                    self._create(conn, msg, config, discr=rec.discr)
                return
        rec.config = config
        self.host.update_session(rec.discr, config)

    def _on_delete(self, msg: DeleteSession) -> None:
        rec = self.registry.by_lid.get(msg.lid)
        if rec is None:
            log.debug("dplane: delete for unknown bfdd id %d", msg.lid)
            return
        self.registry.remove(rec)
        self.host.remove_session(rec.discr, admin_down=True)

    # -- reports to bfdd ---------------------------------------------------------------------

    def _report_registration(self, conn: Connection, rec: DpSession) -> None:
        # bfdd resets its copy to Down on every registration: tell it otherwise, once.
        entry = self.host.sessions.get(rec.discr)
        if entry is None or rec.lid is None or rec.reported or entry.session.state == State.DOWN:
            return
        self.tell(conn, rec, entry.session, entry.session.state)

    def _on_state_change(self, entry: Entry, ev: StateChanged) -> None:
        conn = self.link.conn
        if entry.origin != ORIGIN or conn is None:
            return
        rec = self.registry.by_discr.get(entry.session.local_discr)
        if rec is None or rec.lid is None:
            return  # held: bfdd hears the state when it re-adds the session
        self.tell(conn, rec, entry.session, ev.new)

    def tell(self, conn: Connection, rec: DpSession, session: Session, state: State) -> None:
        assert rec.lid is not None
        rec.reported = True
        rec.told = remote_params(session)
        conn.send(state_change(rec.lid, session, state))

    def _on_remote_change(self, entry: Entry, ev: RemoteParamsChanged) -> None:
        # Not Up: the transition to Up reports the values (see _report_timers).
        if entry.origin != ORIGIN or self.link.conn is None or entry.session.state != State.UP:
            return
        rec = self.registry.by_discr.get(entry.session.local_discr)
        if rec is None or rec.lid is None:
            return  # held: the registration report will carry the values
        self.timers_changed(rec, ev.at_us)

    def timers_changed(self, rec: DpSession, now_us: int) -> None:
        if rec.timers_due_us is not None:
            return  # coalesced: the report due reads the values when it goes
        due = now_us + TIMERS_SETTLE_US
        if rec.last_timers_us is not None:
            due = max(due, rec.last_timers_us + TIMERS_REPORT_GAP_US)
        rec.timers_due_us = due
        self.host.call_at(due, lambda now: self._report_timers(rec, now))

    def _report_timers(self, rec: DpSession, now_us: int) -> None:
        """The same state again, with the peer's values now: bfdd's CLI shows the timers in force."""
        rec.timers_due_us = None
        conn = self.link.conn
        if conn is None or rec.lid is None or self.registry.by_lid.get(rec.lid) is not rec:
            return  # disconnected or re-registered since: a registration report follows
        entry = self.host.sessions.get(rec.discr)
        # Only while Up: that is when the timers shown are the ones in force;
        # in any other state the peer runs its slow start and the transition
        # out of it reports fresh values anyway, so a report would only cost
        # bfdd, zebra and every client a notification.
        if entry is None or entry.session.state != State.UP or remote_params(entry.session) == rec.told:
            return  # nothing bfdd does not already show (a state report went meanwhile)
        rec.last_timers_us = now_us
        self.timers_reports += 1
        tx, rx, echo, mult = remote_params(entry.session)
        log.debug(
            "dplane: telling bfdd (id %d) the peer's timers: tx %d us, rx %d us, echo rx %d us, mult %d",
            rec.lid,
            tx,
            rx,
            echo,
            mult,
        )
        self.tell(conn, rec, entry.session, State.UP)


__all__ = ["ECHOS_BEFORE_COUNTERS", "TIMERS_REPORT_GAP_US", "TIMERS_SETTLE_US", "Dispatch", "Link"]
