"""bfddp: an unmodified FRR bfdd drives the engine's sessions (docs/bfddp.md in the shared docs).

bfdd owns the configuration (it sends DP_ADD_SESSION / DP_DELETE_SESSION),
the engine owns the wire: it runs the sessions, reports every state change
(and, coalesced, a peer's new timers: :data:`TIMERS_SETTLE_US`) and answers
counters requests. Either side may listen: ``--dplane-listen``
(bfdd ``ipv4c:``, FRR 10.1.2+/10.2.1+/10.3+) or ``--dplane-connect`` (bfdd
``ipv4:``/``ipv6:``/``unix:``, every release, FRR 8.4 included).

Nothing here blocks the event loop. bfdd blocks (the whole daemon, vtysh
included) while it waits for a counters reply and when we stop reading, so
input is read whenever it arrives and requests are answered at once; we must
not block when bfdd stops reading, so output is buffered, bounded, and the
connection is dropped when the buffer outgrows :data:`OUTPUT_LIMIT`.

Discriminators. bfdd's id for a session (``lid``) is used as our My
Discriminator when it is free, so bfdd's ``show bfd peers`` and the wire agree.
The engine's discriminator and bfdd's id are nevertheless kept apart, in a
lid → discriminator map (:class:`Registry`): after a bfdd restart under
``--dp-hold`` bfdd re-adds a held session under a new random id, and the
session keeps the discriminator the peer already knows. The map, not the
session, changes.

``--dp-hold SEC``: when bfdd goes away its sessions stay on the wire, held.
When it comes back (any connection), a re-added session with the same address
pair is adopted. The ECHO_REQUEST sent right after connecting is answered
after bfdd's registration burst (bfdd's output is FIFO), so its reply is a
barrier: held sessions not re-added by then are orphans and are torn down
(AdminDown). A deadline ``SEC`` after the disconnect that orphaned them tears
down whatever is still held, so a bfdd that never returns does not leave
sessions up forever — and a client that connects but never answers the
barrier cannot hold them longer either. Without ``--dp-hold`` a disconnect
removes every bfdd session with AdminDown, and bfdd's re-adds recreate them.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.clock import now_us
from ..core.errors import EngineError
from ..core.handoff import DPLANE_CONNECTION, DPLANE_SESSIONS
from ..core.host import Entry, Host, PacketCounts
from ..pin import fdpass
from ..session import SessionConfig
from ..wire.bfddp import (
    AddSession,
    CountersReply,
    CountersRequest,
    DeleteSession,
    EchoReply,
    EchoRequest,
    FrameReader,
    Message,
    RemoteFlags,
    SessionFlags,
    StateChange,
    encode_message,
)
from ..wire.control import State
from ..wire.errors import CodecError
from .address import DplaneAddress

if TYPE_CHECKING:
    from ..session import RemoteParamsChanged, Session, StateChanged

log = logging.getLogger("xdp_bfd.dplane")

ORIGIN = "dplane"

# Keepalive: an ECHO_REQUEST every second; any EchoReply proves bfdd alive.
# The limit is generous on purpose: a busy bfdd (a large config load) must not
# cost a reconnect, and a dead bfdd process closes its socket anyway — this
# only catches a wedged one, so that a restarted bfdd can take its place.
ECHO_INTERVAL_US = 1_000_000
DEAD_AFTER_US = 10_000_000

# Connect mode: 0.1 s doubling to 3 s. While held sessions wait for bfdd the
# retry stays at 0.1 s: a restarted bfdd runs the peers of its configuration in
# software until a data plane attaches, and the first Down packet it sends
# takes the peer down — every 100 ms of waiting is a chance for one to leave.
BACKOFF_FIRST_US = 100_000
BACKOFF_MAX_US = 3_000_000
BACKOFF_HOLDING_US = 100_000

# bfdd's own buffers are 8 KiB; 1 MiB is ~29000 state changes, far more than
# any burst we produce, so reaching it means bfdd is not reading at all.
OUTPUT_LIMIT = 1 << 20
# Bounded work per wake-up, so a flood from bfdd cannot starve session timers:
# 16 KiB is twice bfdd's own output buffer and at most ~1400 counters requests
# (a few ms of Python); the selector is level-triggered, so the rest is read on
# the next turn of the loop, after the timers that are due.
READ_CHUNK = 16384
READS_PER_WAKE = 1

# bfdd (8.4-10.7) reclaims its input buffer only after three messages in one
# read loop; a counters reply alone never triggers it, and about 100 replies
# later bfdd misreads the full buffer as a closed connection. Two ECHO_REQUESTs
# in front of every reply make three.
ECHOS_BEFORE_COUNTERS = 2

DEFAULT_MINIMUM_TTL = 254

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


# --- pure mapping ----------------------------------------------------------------


def session_config(msg: AddSession, *, reflect_echo: bool = False) -> SessionConfig:
    """The engine's configuration for a DP_ADD_SESSION; ValueError names what is wrong.

    ``reflect_echo``: advertise bfdd's echo receive interval as our Required
    Min Echo RX (as bfdd itself does, whatever its echo-mode) only when
    something actually loops echo packets back. A non-zero value invites an
    echo-mode peer to send echoes, and if none come back its echo detection
    takes the session down. The ECHO flag is about *our* echo transmission.
    """
    if msg.lid == 0:
        raise ValueError("bfdd id 0 cannot be a discriminator")
    if msg.dst.is_unspecified:
        raise ValueError("no peer address")
    if msg.src is not None and (msg.src.is_multicast or msg.src == msg.dst):
        raise ValueError(f"unusable local address {msg.src}")
    multihop = bool(msg.flags & SessionFlags.MULTIHOP)
    return SessionConfig(
        local=msg.src,
        peer=msg.dst,
        interface=msg.ifname or None,
        multihop=multihop,
        min_tx_us=msg.min_tx,
        min_rx_us=msg.min_rx,
        detect_mult=msg.detect_mult,
        echo_us=msg.min_echo_rx if reflect_echo else 0,
        passive=bool(msg.flags & SessionFlags.PASSIVE),
        # bfdd's ttl is 255 for single hop and the minimum accepted TTL for multihop.
        minimum_ttl=msg.ttl if multihop else DEFAULT_MINIMUM_TTL,
        shutdown=bool(msg.flags & SessionFlags.SHUTDOWN),
        demand=bool(msg.flags & SessionFlags.DEMAND),
    )


def echo_tx_interval_us(min_echo_tx_us: int, remote_min_echo_rx_us: int) -> int:
    """RFC 5880 §6.8.9: echo at the slower of our interval and the peer's; 0 = do not send.

    bfdd 8.4 sends only its configured interval and later ones already apply
    this max(), so the data plane does it itself either way.
    """
    if remote_min_echo_rx_us == 0 or min_echo_tx_us == 0:
        return 0
    return max(min_echo_tx_us, remote_min_echo_rx_us)


def path_of(config: SessionConfig) -> tuple[Any, Any, bool]:
    """What identifies a session across a bfdd restart: the address pair and hop mode."""
    return (config.local, config.peer, config.multihop)


def same_path(a: SessionConfig, b: SessionConfig) -> bool:
    """The same session for adoption: same address pair and hop mode, compatible interface.

    bfdd sends an empty interface for a peer configured before zebra told it
    about the interface (a restart with peers in frr.conf), so "no interface"
    matches any; two different names are two sessions (link-local peers).
    """
    if path_of(a) != path_of(b):
        return False
    return a.interface is None or b.interface is None or a.interface == b.interface


def remote_params(session: Session) -> tuple[int, int, int, int]:
    """What a state change tells bfdd of the peer: desired TX, required RX, required echo RX, Detect Mult."""
    return (
        session.remote_desired_tx_us,
        session.remote_min_rx_us,
        session.remote_min_echo_rx_us,
        session.remote_detect_mult,
    )


def state_change(lid: int, session: Session, state: State) -> StateChange:
    """BFD_STATE_CHANGE: our local state, the rest about the peer (bfdd stores diag as the remote one)."""
    flags = RemoteFlags(0)
    if session.remote_demand:
        flags |= RemoteFlags.DEMAND
    return StateChange(
        lid=lid,
        rid=session.remote_discr,
        remote_flags=flags,
        desired_tx=session.remote_desired_tx_us,
        required_rx=session.remote_min_rx_us,
        required_echo_rx=session.remote_min_echo_rx_us,
        state=state,
        diag=session.remote_diag,
        detect_mult=session.remote_detect_mult,
    )


def counters_reply(request: CountersRequest, counts: PacketCounts | None) -> CountersReply:
    """Real per-session counters (kernel TX included); zeros for an id we do not know (bfdd waits)."""
    if counts is None:
        return CountersReply(request.id, request.lid)
    return CountersReply(
        request.id,
        request.lid,
        control_in_bytes=counts.rx_bytes,
        control_in_packets=counts.rx_packets,
        control_out_bytes=counts.tx_bytes,
        control_out_packets=counts.tx_packets,
    )


# --- bookkeeping (pure) ------------------------------------------------------------


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


# --- the connection -------------------------------------------------------------------


class Connection:
    """One bfdd stream: framing in, a bounded buffer out. The Dataplane decides what it means."""

    def __init__(self, dp: Dataplane, sock: socket.socket, now_us: int) -> None:
        self.dp = dp
        self.sock = sock
        self.reader = FrameReader()
        self.out = bytearray()
        self.open = True
        self.failed: str | None = None
        self._writing = False
        self.barrier: int | None = None
        self.proven = False  # bfdd answered the barrier: this is a working bfdd
        self.last_reply_us = now_us
        dp.host.watch(sock, self.on_ready)

    def send(self, *msgs: Message) -> None:
        if not self.open or self.failed:
            return
        for m in msgs:
            self.out += encode_message(m)
        if len(self.out) > OUTPUT_LIMIT:
            self.fail(f"output buffer over {OUTPUT_LIMIT} bytes: bfdd is not reading")
            return
        self.flush()

    def flush(self) -> None:
        while self.out and self.open and not self.failed:
            try:
                n = self.sock.send(self.out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                self.fail(f"send: {e.strerror or e}")
                return
            del self.out[:n]
        self._want_write(bool(self.out))

    def _want_write(self, on: bool) -> None:
        if on == self._writing or not self.open:
            return
        self._writing = on
        self.dp.host.watch(self.sock, self.on_ready, write=on)

    def fail(self, reason: str) -> None:
        """Stop all I/O now; the disconnect runs from the loop, not from inside a caller."""
        if self.failed or not self.open:
            return
        self.failed = reason
        self.dp.host.call_at(0, lambda now: self.dp.drop(self, reason, now))

    def on_ready(self, now_us: int) -> None:
        if not self.open:
            return
        if self.out:
            self.flush()
        self.pump(now_us)

    def pump(self, now_us: int, reads: int = READS_PER_WAKE) -> None:
        """Read and handle what bfdd sent, a bounded amount per call."""
        for _ in range(reads):
            if not self.open or self.failed:
                return
            try:
                data = self.sock.recv(READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                self.dp.lost(self, e.strerror or str(e), now_us)
                return
            if not data:
                self.dp.lost(self, "connection closed by bfdd", now_us)
                return
            try:
                msgs = self.reader.feed(data)
            except CodecError as e:
                self.dp.drop(self, f"framing error: {e}", now_us)
                return
            for m in msgs:
                self.dp.handle(self, m, now_us)
                if not self.open or self.failed:
                    return

    def close(self) -> None:
        if not self.open:
            return
        self.open = False
        self.dp.host.unwatch(self.sock)
        with contextlib.suppress(OSError):
            self.sock.close()


# --- the data plane ---------------------------------------------------------------------


class Dataplane:
    """bfddp for one engine: ``start()`` once, ``close()`` at exit (the engine then AdminDowns)."""

    def __init__(self, host: Host, addr: DplaneAddress, *, mode: str, hold_s: int = 0) -> None:
        if mode not in ("listen", "connect"):
            raise ValueError(f"dataplane mode {mode!r}")
        self.host = host
        self.addr = addr
        self.mode = mode
        self.hold_us = hold_s * 1_000_000
        self.registry = Registry()
        self.conn: Connection | None = None
        self.listener: socket.socket | None = None
        self.connections = 0
        self._closed = False
        self._connecting: socket.socket | None = None
        self._backoff_us = BACKOFF_FIRST_US
        self._announced = False
        self._last_dp_time = 0
        self._unix_path_made: str | None = None
        self.timers_reports = 0
        host.on_state_change(self._on_state_change)
        host.on_remote_change(self._on_remote_change)
        host.add_stats_section("dplane", self.stats)
        host.handoff.add_section(DPLANE_SESSIONS, self.handover_doc)
        host.handoff.add_departure(self.pass_to_successor)
        # What a --pin predecessor handed over: bfdd's bookkeeping by discriminator.
        self.adopted: dict[int, dict[str, Any]] = host.handoff.take(DPLANE_SESSIONS) or {}

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        parcel = self.host.handoff.take(DPLANE_CONNECTION)
        if parcel is not None:
            self._resume(parcel, now_us())
        self._adopt(now_us())
        if self.mode == "listen":
            if self.listener is None:
                self._listen()
        elif self.conn is None:
            self._try_connect(now_us())

    def close(self) -> None:
        """Stop talking to bfdd. Sessions are left to the engine (whose shutdown AdminDowns them)."""
        self._closed = True
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        for s in (self.listener, self._connecting):
            if s is not None:
                self.host.unwatch(s)
                s.close()
        self.listener = self._connecting = None
        if self._unix_path_made is not None:
            _unlink_socket(self._unix_path_made)
            self._unix_path_made = None

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
        conn = self.conn if self.conn is not None and self.conn.open and not self.conn.failed else None
        socks = {}
        if conn is not None:
            socks["conn"] = conn.sock
        if self.listener is not None:
            socks["listener"] = self.listener
        if not socks:
            return  # connect mode between connections: the successor connects itself
        header = {
            "pid": os.getpid(),
            "mode": self.mode,
            "address": self.addr.display,
            "lids": sorted(self.registry.by_lid),
            "proven": conn.proven if conn else False,
            "barrier": conn.barrier if conn else None,
            "last_dp_time": self._last_dp_time,
            "connections": self.connections,
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

    def _resume(self, parcel: fdpass.Parcel, now_us: int) -> None:
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
                self.registry.hold(rec, doc["held_until_us"])
                self.host.call_at(doc["held_until_us"], self._hold_expired)
                continue
            self.registry.add(rec, lid)
            rec.reported = bool(doc.get("reported"))
            # An older engine does not say: None, so an Up session is reported once.
            told = doc.get("told")
            rec.told = tuple(told) if told is not None else None  # type: ignore[assignment]
            bound.append((rec, entry, doc.get("state")))
        listener = parcel.sockets.get("listener")
        if listener is not None:
            listener.setblocking(False)
            if self.addr.kind == "unix":
                self._unix_path_made = self.addr.host
            self.listener = listener
            self.host.watch(listener, self._on_accept)
            log.info("dplane: listening on %s (bfdd: %s), socket handed over by engine %d",
                     self.addr.display, self.addr.bfdd_client_form(), h["pid"])  # fmt: skip
        self.connections = int(h.get("connections") or 0)
        self._last_dp_time = max(self._last_dp_time, int(h.get("last_dp_time") or 0))
        sock = parcel.sockets.get("conn")
        if sock is None:
            return
        sock.setblocking(False)
        conn = Connection(self, sock, now_us)
        conn.proven = bool(h.get("proven"))
        conn.barrier = h.get("barrier")
        conn.out += parcel.pending_out
        self.conn = conn
        log.info(
            "dplane: bfdd connected (handed over by engine %d: %d sessions, %d bytes unread, %d unsent)",
            h["pid"],
            len(bound),
            len(parcel.pending_in),
            len(parcel.pending_out),
        )
        self.host.call_at(now_us + ECHO_INTERVAL_US, lambda now: self._keepalive(conn, now))
        # bfdd heard nothing of what changed while no engine ran: tell it now
        # (and the peer's timers, as the old engine would have once they settled).
        for rec, entry, told in bound:
            if entry.session.state != told:
                self._tell(conn, rec, entry.session, entry.session.state)
            elif entry.session.state == State.UP and remote_params(entry.session) != rec.told:
                self._timers_changed(rec, now_us)
        conn.flush()
        if parcel.pending_in:
            try:
                msgs = conn.reader.feed(parcel.pending_in)
            except CodecError as e:
                self.drop(conn, f"framing error: {e}", now_us)
                return
            for m in msgs:
                self.handle(conn, m, now_us)

    def _cannot_resume(self, h: dict[str, Any]) -> str:
        """Why the successor may not carry on the old stream ('' when it may)."""
        if (h.get("mode"), h.get("address")) != (self.mode, self.addr.display):
            return f"it was {h.get('mode')} {h.get('address')}, we are {self.mode} {self.addr.display}"
        lids = set(h.get("lids") or ())
        adopted = {doc.get("lid") for discr, doc in self.adopted.items() if discr in self.host.sessions}
        missing = lids - adopted
        if missing:
            # bfdd would believe us to run sessions we do not have (state not adopted).
            return f"{len(missing)} of bfdd's {len(lids)} sessions were not adopted"
        return ""

    def _adopt(self, now_us: int) -> None:
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
        if self.hold_us <= 0:
            log.info("dplane: removing %d handed-over bfdd sessions (no --dp-hold)", len(recs))
            for rec in recs:
                self.host.remove_session(rec.discr, admin_down=True)
            return
        for rec in recs:
            self.registry.hold(rec, now_us + self.hold_us)
        log.info(
            "dplane: holding %d handed-over sessions for %d s for bfdd to re-add them",
            len(recs),
            self.hold_us // 1_000_000,
        )
        self.host.call_at(now_us + self.hold_us, self._hold_expired)

    def stats(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "address": self.addr.display,
            "connected": self.conn is not None and self.conn.open and not self.conn.failed,
            "sessions": len(self.registry.by_lid),
            "held": len(self.registry.held()),
            "connections": self.connections,
            "timers_reports": self.timers_reports,
        }

    # -- sockets ------------------------------------------------------------------------

    def _family(self) -> int:
        return {"ipv4": socket.AF_INET, "ipv6": socket.AF_INET6, "unix": socket.AF_UNIX}[self.addr.kind]

    def _sockaddr(self) -> Any:
        if self.addr.kind == "unix":
            return self.addr.host
        if self.addr.kind == "ipv6":
            return (self.addr.host, self.addr.port, 0, 0)
        return (self.addr.host, self.addr.port)

    def _listen(self) -> None:
        s = socket.socket(self._family(), socket.SOCK_STREAM)
        try:
            if self.addr.kind == "unix":
                _unlink_socket(self.addr.host)
            else:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if self.addr.kind == "ipv6":
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind(self._sockaddr())
            s.listen(8)
            s.setblocking(False)
        except OSError as e:
            s.close()
            raise EngineError(f"dplane: cannot listen on {self.addr.display}: {e.strerror or e}") from None
        if self.addr.kind == "unix":
            self._unix_path_made = self.addr.host
        self.listener = s
        self.host.watch(s, self._on_accept)
        log.info("dplane: listening on %s (bfdd: %s)", self.addr.display, self.addr.bfdd_client_form())

    def _on_accept(self, now_us: int) -> None:
        for _ in range(8):
            if self.listener is None:
                return
            try:
                sock, peer = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                # EMFILE and friends: leave it in the backlog, the loop will come back.
                log.warning("dplane: accept: %s", e.strerror or e)
                return
            if self.conn is not None:
                # A bfdd that went away may have left its EOF unread behind this accept.
                self.conn.pump(now_us, reads=16)
                if self.conn is not None and self.conn.failed:
                    self.drop(self.conn, self.conn.failed, now_us)
            if self.conn is not None:
                # One bfdd at a time: a stray local client must not be able to cut
                # off a working bfdd. A wedged bfdd is dropped by the keepalive,
                # after which its successor's retry (every 3 s) gets in.
                log.warning("dplane: refusing a second connection from %s: bfdd is connected", peer or "unix")
                sock.close()
                continue
            self._attach(sock, now_us)

    def _try_connect(self, now_us: int) -> None:
        if self._closed or self.conn is not None or self._connecting is not None:
            return
        if not self._announced:
            log.info("dplane: connecting to %s", self.addr.display)
            self._announced = True
        try:
            s = socket.socket(self._family(), socket.SOCK_STREAM)
        except OSError as e:  # out of descriptors: try again later
            self._retry(now_us, _oserror(e))
            return
        try:
            s.setblocking(False)
            err = s.connect_ex(self._sockaddr())
        except OSError as e:  # e.g. a unix path too long for sockaddr_un
            err = e.errno or errno.EINVAL
        if err == 0:
            self._attach(s, now_us)
        elif err in (errno.EINPROGRESS, errno.EAGAIN, errno.EALREADY):
            self._connecting = s
            self.host.watch(s, self._on_connect_ready, read=False, write=True)
        else:
            s.close()
            self._retry(now_us, os.strerror(err))

    def _on_connect_ready(self, now_us: int) -> None:
        s = self._connecting
        if s is None:
            return
        self._connecting = None
        self.host.unwatch(s)
        err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            s.close()
            self._retry(now_us, os.strerror(err))
            return
        self._attach(s, now_us)

    def _retry(self, now_us: int, why: str) -> None:
        cap = BACKOFF_HOLDING_US if self.registry.held() else BACKOFF_MAX_US
        delay = min(self._backoff_us, cap)
        self._backoff_us = min(self._backoff_us * 2, cap)
        log.debug("dplane: connect to %s failed (%s); next try in %.1fs", self.addr.display, why, delay / 1e6)
        self.host.call_at(now_us + delay, self._try_connect)

    def _attach(self, sock: socket.socket, now_us: int) -> None:
        sock.setblocking(False)
        if self.addr.kind != "unix":
            # Small messages that bfdd waits for (counters replies): no Nagle delay.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Connection(self, sock, now_us)
        self.conn = conn
        self.connections += 1
        self._announced = False
        log.info("dplane: bfdd connected")
        # bfdd sends its registrations first and answers in order: the reply to
        # this one marks the end of the burst.
        conn.barrier = self._echo(conn)
        self.host.call_at(now_us + ECHO_INTERVAL_US, lambda now: self._keepalive(conn, now))

    def _echo(self, conn: Connection) -> int:
        t = self._next_dp_time()
        conn.send(EchoRequest(t))
        return t

    def _keepalive(self, conn: Connection, now_us: int) -> None:
        if conn is not self.conn or not conn.open or conn.failed:
            return
        if now_us - conn.last_reply_us > DEAD_AFTER_US:
            self.drop(conn, f"no echo reply from bfdd for {DEAD_AFTER_US // 1_000_000} s", now_us)
            return
        self._echo(conn)
        self.host.call_at(now_us + ECHO_INTERVAL_US, lambda now: self._keepalive(conn, now))

    # -- disconnects ---------------------------------------------------------------------

    def drop(self, conn: Connection, reason: str, now_us: int) -> None:
        """We end the connection (framing error, bfdd not reading, no keepalive)."""
        if conn.open:
            log.warning("dplane: dropping connection: %s", reason)
        self._disconnected(conn, now_us)

    def lost(self, conn: Connection, reason: str, now_us: int) -> None:
        """bfdd ended it (closed, reset)."""
        if conn.open:
            log.info("dplane: bfdd disconnected (%s)", reason)
        self._disconnected(conn, now_us)

    def _disconnected(self, conn: Connection, now_us: int) -> None:
        if not conn.open:
            return
        conn.close()
        if self.conn is conn:
            self.conn = None
        recs = self.registry.registered()
        if recs and self.hold_us > 0:
            self.registry.hold_all(now_us + self.hold_us)
            log.info(
                "dplane: holding %d sessions for %d s for bfdd to re-add them",
                len(recs),
                self.hold_us // 1_000_000,
            )
            self.host.call_at(now_us + self.hold_us, self._hold_expired)
        elif recs:
            log.info("dplane: removing %d sessions with bfdd gone (no --dp-hold)", len(recs))
            self._teardown(recs)
        if self.mode == "connect" and not self._closed:
            # A bfdd that had answered the barrier was working: try again at
            # once, it may only have dropped this connection. One that never
            # answered keeps backing off, so a bfdd that accepts and closes
            # cannot make us spin.
            if conn.proven:
                self._backoff_us = BACKOFF_FIRST_US
                self.host.call_at(now_us, self._try_connect)
            else:
                self._retry(now_us, "connection ended before bfdd answered")

    def _hold_expired(self, now_us: int) -> None:
        recs = self.registry.expired(now_us)
        if recs:
            log.info("dplane: hold expired: tearing down %d sessions bfdd did not re-add", len(recs))
            self._teardown(recs)

    def _barrier_passed(self, conn: Connection) -> None:
        conn.barrier = None
        conn.proven = True
        self._backoff_us = BACKOFF_FIRST_US
        orphans = self.registry.held()
        if orphans:
            log.info("dplane: bfdd did not re-add %d held sessions; tearing them down", len(orphans))
            self._teardown(orphans)

    def _teardown(self, recs: Iterable[DpSession]) -> None:
        for rec in recs:
            self.registry.remove(rec)
            self.host.remove_session(rec.discr, admin_down=True)

    # -- messages ----------------------------------------------------------------------

    def handle(self, conn: Connection, msg: Message, now_us: int) -> None:
        if isinstance(msg, AddSession):
            self._on_add(conn, msg)
        elif isinstance(msg, DeleteSession):
            self._on_delete(msg)
        elif isinstance(msg, CountersRequest):
            reqs = [EchoRequest(self._next_dp_time()) for _ in range(ECHOS_BEFORE_COUNTERS)]
            entry = self._entry_for_lid(msg.lid)
            conn.send(*reqs, counters_reply(msg, self.host.packet_counts(entry) if entry else None))
        elif isinstance(msg, EchoReply):
            conn.last_reply_us = now_us
            # Any reply to the barrier request or a later one of ours: bfdd
            # answers in order, and drops a reply when its output buffer is
            # full (the registration burst can fill it), so a later keepalive
            # reply stands in for a lost barrier reply.
            if conn.barrier is not None and conn.barrier <= msg.dp_time <= self._last_dp_time:
                self._barrier_passed(conn)
        elif isinstance(msg, EchoRequest):
            # bfdd never asks, but answering costs nothing and lets anyone check we are alive.
            conn.send(EchoReply(msg.dp_time, time.time_ns() // 1000))
        else:
            log.debug("dplane: ignoring %s from bfdd", type(msg).__name__)

    def _next_dp_time(self) -> int:
        # µs since the epoch as bfddp says, strictly increasing so that a reply
        # names exactly one request.
        t = max(time.time_ns() // 1000, self._last_dp_time + 1)
        self._last_dp_time = t
        return t

    def _entry_for_lid(self, lid: int) -> Entry | None:
        rec = self.registry.by_lid.get(lid)
        return None if rec is None else self.host.sessions.get(rec.discr)

    def _on_add(self, conn: Connection, msg: AddSession) -> None:
        try:
            config = session_config(msg, reflect_echo=self.host.reflects_echo)
        except ValueError as e:
            log.warning("dplane: ignoring session %s from bfdd (id %d): %s", _describe(msg), msg.lid, e)
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
                _describe(msg),
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
                log.warning("dplane: session %s already comes from %s; ignored", _describe(msg), origin)
                return
            # bfdd cannot have two sessions on one path: it replaced the old id.
            log.info("dplane: bfdd id %d now names session %s (was %s)", msg.lid, _describe(msg), other.lid)
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
            log.warning("dplane: session %s already comes from %s; ignored", _describe(msg), other)
            return
        if discr is None:
            # bfdd's id is our discriminator unless something else already uses it.
            discr = msg.lid if msg.lid not in self.host.sessions else self.host.allocate_discr()
        rec = DpSession(
            discr, config, min_echo_tx_us=msg.min_echo_tx, cbit=bool(msg.flags & SessionFlags.CBIT)
        )
        # Registered before the engine runs it, so its first state change can be reported.
        self.registry.add(rec, msg.lid)
        try:
            self.host.add_session(config, ORIGIN, discr=discr)
        except (OSError, ValueError) as e:
            self.registry.remove(rec)
            log.warning("dplane: cannot run session %s from bfdd: %s", _describe(msg), _oserror(e))
            return
        self._report_registration(conn, rec)

    def _update(self, rec: DpSession, msg: AddSession, config: SessionConfig) -> None:
        """An ADD for a session we run: idempotent; changed timers go through a Poll (engine)."""
        rec.min_echo_tx_us = msg.min_echo_tx
        rec.cbit = bool(msg.flags & SessionFlags.CBIT)
        entry = self.host.sessions.get(rec.discr)
        if entry is None:  # removed behind our back: run it again
            self.registry.remove(rec)
            if self.conn is not None:
                self._create(self.conn, msg, config, discr=None)
            return
        current = entry.session.config
        if config.key() != current.key():
            if same_path(current, config):
                # Only the interface was given or dropped: keep the running
                # session on the interface it has rather than flap it.
                config = replace(config, interface=current.interface)
            else:
                log.info("dplane: bfdd id %s moved to %s; restarting the session", rec.lid, _describe(msg))
                lid = rec.lid
                self.registry.remove(rec)
                self.host.remove_session(rec.discr, admin_down=True)
                if self.conn is not None and lid is not None:
                    self._create(self.conn, msg, config, discr=rec.discr)
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
        self._tell(conn, rec, entry.session, entry.session.state)

    def _on_state_change(self, entry: Entry, ev: StateChanged) -> None:
        if entry.origin != ORIGIN or self.conn is None:
            return
        rec = self.registry.by_discr.get(entry.session.local_discr)
        if rec is None or rec.lid is None:
            return  # held: bfdd hears the state when it re-adds the session
        self._tell(self.conn, rec, entry.session, ev.new)

    def _tell(self, conn: Connection, rec: DpSession, session: Session, state: State) -> None:
        assert rec.lid is not None
        rec.reported = True
        rec.told = remote_params(session)
        conn.send(state_change(rec.lid, session, state))

    def _on_remote_change(self, entry: Entry, ev: RemoteParamsChanged) -> None:
        # Not Up: the transition to Up reports the values (see _report_timers).
        if entry.origin != ORIGIN or self.conn is None or entry.session.state != State.UP:
            return
        rec = self.registry.by_discr.get(entry.session.local_discr)
        if rec is None or rec.lid is None:
            return  # held: the registration report will carry the values
        self._timers_changed(rec, ev.at_us)

    def _timers_changed(self, rec: DpSession, now_us: int) -> None:
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
        conn = self.conn
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
        self._tell(conn, rec, entry.session, State.UP)


# --- helpers ---------------------------------------------------------------------------


def _describe(msg: AddSession | DeleteSession) -> str:
    hop = " multihop" if msg.flags & SessionFlags.MULTIHOP else ""
    where = f" on {msg.ifname}" if msg.ifname else ""
    return f"{msg.src or '*'} -> {msg.dst}{where}{hop}"


def _oserror(e: Exception) -> str:
    return e.strerror if isinstance(e, OSError) and e.strerror else str(e)


def _unlink_socket(path: str) -> None:
    # Only a stale socket: never delete a regular file someone typed by mistake.
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass


__all__ = [
    "ORIGIN",
    "Connection",
    "Dataplane",
    "DpSession",
    "Registry",
    "counters_reply",
    "echo_tx_interval_us",
    "path_of",
    "remote_params",
    "same_path",
    "session_config",
    "state_change",
]
