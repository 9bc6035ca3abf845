"""A ``--pin`` takeover: bfdd's connection and bookkeeping pass from the old engine to its successor.

The old engine hands over, beside each session, what it knows of bfdd's
(:meth:`Takeover.handover_doc`), and once its state is written, its bfddp
sockets (pin/fdpass.py). The successor carries on the same stream when it
adopted every session bfdd believes it runs; otherwise bfdd sees the stream
close and re-adds its sessions, which wait for it, held, as after a bfdd
restart.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.handoff import DPLANE_SESSIONS
from ..pin import fdpass
from ..wire.control import State
from ..wire.errors import CodecError
from .mapping import remote_params
from .registry import DpSession

if TYPE_CHECKING:
    from ..core.host import Host
    from .connection import EchoStamps
    from .dispatch import Dispatch
    from .hold import Hold
    from .registry import Registry
    from .transport import Transport

log = logging.getLogger("xdp_bfd.dplane")


class Takeover:
    def __init__(
        self,
        host: Host,
        registry: Registry,
        *,
        hold: Hold,
        stamps: EchoStamps,
        transport: Transport,
        dispatch: Dispatch,
    ) -> None:
        self.host = host
        self.registry = registry
        self.hold = hold
        self.stamps = stamps
        self.transport = transport
        self.dispatch = dispatch
        host.handoff.add_section(DPLANE_SESSIONS, self.handover_doc)
        host.handoff.add_departure(self.pass_to_successor)
        # What a --pin predecessor handed over: bfdd's bookkeeping by discriminator.
        self.adopted: dict[int, dict[str, Any]] = host.handoff.take(DPLANE_SESSIONS) or {}

    def handover_doc(self) -> dict[int, dict[str, Any]]:
        """What a --pin successor needs to know of bfdd's sessions, by discriminator."""
        return {
            rec.discr: {
                "min_echo_tx_us": rec.min_echo_tx_us,
                "cbit": rec.cbit,
                "held_until_us": rec.held_until_us,
                # For a successor that resumes this very connection: bfdd's id,
                # and the state bfdd last heard (it hears nothing from the gap).
                "lid": rec.lid,
                "reported": rec.reported,
                "told": list(rec.told) if rec.told is not None else None,
                "state": int(entry.session.state) if (entry := self.host.sessions.get(rec.discr)) else None,
            }
            for rec in self.registry.by_discr.values()
        }

    # -- --pin: the connection changes hands (fdpass.py) ---------------------------------

    def pass_to_successor(self, root: Path) -> None:
        """Old engine, state written, about to exit: give the successor our bfddp sockets.

        Called from the loop between two events, so every whole message read
        so far has been handled: what the reader holds is part of one frame.
        Nothing here touches the sockets after the send; we exit next.
        """
        t = self.transport
        conn = t.conn if t.conn is not None and t.conn.open and not t.conn.failed else None
        socks = {}
        if conn is not None:
            socks["conn"] = conn.sock
        if t.listener is not None:
            socks["listener"] = t.listener
        if not socks:
            return  # connect mode between connections: the successor connects itself
        header = {
            "pid": os.getpid(),
            "mode": t.mode,
            "address": t.addr.display,
            "lids": sorted(self.registry.by_lid),
            "proven": conn.proven if conn else False,
            "barrier": conn.barrier if conn else None,
            "last_dp_time": self.stamps.last,
            "connections": t.connections,
        }
        pending_in = conn.reader.pending() if conn else b""
        pending_out = bytes(conn.out) if conn else b""
        try:
            pid = fdpass.send(root, header, pending_in, pending_out, socks)
        except Exception as e:  # whatever it is, the handover itself must go on
            log.warning("dplane: cannot pass the bfddp connection to the successor: %s; "
                        "bfdd will see it close and reconnect", e)  # fmt: skip
            return
        log.info(
            "dplane: passed the bfddp %s to engine %d (%d bytes unread, %d unsent)",
            " and ".join("connection" if n == "conn" else "listening socket" for n in socks),
            pid,
            len(pending_in),
            len(pending_out),
        )

    def resume(self, parcel: fdpass.Parcel, now_us: int) -> None:
        """Successor: carry on the old engine's bfddp stream, or close it (bfdd reconnects)."""
        h = parcel.header
        why = self._cannot_resume(h)
        if why:
            log.warning("dplane: not resuming the handed-over bfddp connection (%s); "
                        "bfdd will see it close and reconnect", why)  # fmt: skip
            parcel.close()
            return
        docs = self.adopted
        bound = []
        for discr, doc in list(docs.items()):
            entry = self.host.sessions.get(discr)
            lid = doc.get("lid")
            if entry is None or (lid is None and doc.get("held_until_us") is None):
                continue
            del docs[discr]
            rec = DpSession(
                discr, entry.session.config, min_echo_tx_us=doc["min_echo_tx_us"], cbit=doc["cbit"]
            )
            if lid is None:
                # Held by the old engine for a bfdd that had reconnected: same deadline.
                self.hold.keep([rec], doc["held_until_us"])
                continue
            self.registry.add(rec, lid)
            rec.reported = bool(doc.get("reported"))
            # An older engine does not say: None, so an Up session is reported once.
            told = doc.get("told")
            rec.told = tuple(told) if told is not None else None  # type: ignore[assignment]
            bound.append((rec, entry, doc.get("state")))
        t = self.transport
        listener = parcel.sockets.get("listener")
        if listener is not None:
            t.adopt_listener(listener)
            log.info("dplane: listening on %s (bfdd: %s), socket handed over by engine %d",
                     t.addr.display, t.addr.bfdd_client_form(), h["pid"])  # fmt: skip
        t.connections = int(h.get("connections") or 0)
        self.stamps.last = max(self.stamps.last, int(h.get("last_dp_time") or 0))
        sock = parcel.sockets.get("conn")
        if sock is None:
            return
        conn = t.adopt_connection(sock, now_us)
        conn.proven = bool(h.get("proven"))
        conn.barrier = h.get("barrier")
        conn.out += parcel.pending_out
        log.info(
            "dplane: bfdd connected (handed over by engine %d: %d sessions, %d bytes unread, %d unsent)",
            h["pid"],
            len(bound),
            len(parcel.pending_in),
            len(parcel.pending_out),
        )
        # bfdd heard nothing of what changed while no engine ran: tell it now
        # (and the peer's timers, as the old engine would have once they settled).
        for rec, entry, told in bound:
            if entry.session.state != told:
                self.dispatch.tell(conn, rec, entry.session, entry.session.state)
            elif entry.session.state == State.UP and remote_params(entry.session) != rec.told:
                self.dispatch.timers_changed(rec, now_us)
        conn.flush()
        if parcel.pending_in:
            try:
                msgs = conn.reader.feed(parcel.pending_in)
            except CodecError as e:
                t.drop(conn, f"framing error: {e}", now_us)
                return
            for m in msgs:
                self.dispatch.handle(conn, m, now_us)

    def _cannot_resume(self, h: dict[str, Any]) -> str:
        """Why the successor may not carry on the old stream ('' when it may)."""
        mode, address = self.transport.mode, self.transport.addr.display
        if (h.get("mode"), h.get("address")) != (mode, address):
            return f"it was {h.get('mode')} {h.get('address')}, we are {mode} {address}"
        lids = set(h.get("lids") or ())
        adopted = {doc.get("lid") for discr, doc in self.adopted.items() if discr in self.host.sessions}
        missing = lids - adopted
        if missing:
            # bfdd would believe us to run sessions we do not have (state not adopted).
            return f"{len(missing)} of bfdd's {len(lids)} sessions were not adopted"
        return ""

    def adopt(self, now_us: int) -> None:
        # bfdd lost its connection with the engine we replaced; like a bfdd
        # restart, its sessions wait (held) for it to re-add them.
        docs = self.adopted
        recs = []
        for discr, doc in docs.items():
            entry = self.host.sessions.get(discr)
            if entry is None:
                continue
            rec = DpSession(
                discr, entry.session.config, min_echo_tx_us=doc["min_echo_tx_us"], cbit=doc["cbit"]
            )
            recs.append(rec)
        docs.clear()
        if not recs:
            return
        if self.hold.hold_us <= 0:
            log.info("dplane: removing %d handed-over bfdd sessions (no --dp-hold)", len(recs))
            for rec in recs:
                self.host.remove_session(rec.discr, admin_down=True)
            return
        self.hold.keep(recs, now_us + self.hold.hold_us)
        log.info(
            "dplane: holding %d handed-over sessions for %d s for bfdd to re-add them",
            len(recs),
            self.hold.hold_us // 1_000_000,
        )


__all__ = ["Takeover"]
