"""bfddp: an unmodified FRR bfdd drives the engine's sessions (docs/bfddp.md in the shared docs).

The pieces, each in its module: what bfdd's messages mean and what goes
back (:mod:`.dispatch`, with the pure mapping in :mod:`.mapping` and the
bookkeeping in :mod:`.registry`), how the two meet (:mod:`.transport`, one
stream in :mod:`.connection`), what becomes of bfdd's sessions while it is
away (:mod:`.hold`) and how all of it survives a ``--pin`` takeover
(:mod:`.resume`).

Nothing here blocks the event loop. bfdd blocks (the whole daemon, vtysh
included) while it waits for a counters reply and when we stop reading, so
input is read whenever it arrives and requests are answered at once; we must
not block when bfdd stops reading, so output is buffered, bounded, and the
connection is dropped when the buffer outgrows
:data:`~.connection.OUTPUT_LIMIT`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.clock import now_us
from ..core.handoff import DPLANE_CONNECTION
from .connection import Connection, EchoStamps
from .dispatch import Dispatch
from .gate import Gate
from .hold import Hold
from .peer import DEFAULT_ALLOWED, default_allowed
from .registry import Registry
from .resume import Takeover
from .transport import Transport

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..core.host import Host
    from ..wire.bfddp import Message
    from .address import DplaneAddress


class Dataplane:
    """bfddp for one engine: ``start()`` once, ``close()`` at exit (the engine then AdminDowns)."""

    def __init__(
        self,
        host: Host,
        addr: DplaneAddress,
        *,
        mode: str,
        hold_s: int = 0,
        allow: Iterable[int] | None = None,
        allow_names: Iterable[str] = DEFAULT_ALLOWED,
    ) -> None:
        """``allow``: the uids that may be the dataplane (``--dplane-allow``; default ``frr`` and root);
        ``allow_names``: its names, honoured also in the peer's own root (FRR in a chroot of its own)."""
        if mode not in ("listen", "connect"):
            raise ValueError(f"dataplane mode {mode!r}")
        self.host = host
        self.addr = addr
        self.mode = mode
        self.registry = Registry()
        self.stamps = EchoStamps()
        self.hold = Hold(host, self.registry, hold_s)
        self.gate = Gate(
            default_allowed() if allow is None else allow,
            kind=addr.kind,
            mode=mode,
            display=addr.display,
            names=allow_names,
        )
        self.transport = Transport(
            host, addr, mode=mode, hold=self.hold, stamps=self.stamps, handler=self.handle, gate=self.gate
        )
        self.dispatch = Dispatch(host, self.registry, self.stamps, self.transport)
        host.add_stats_section("dplane", self.stats)
        self.takeover = Takeover(
            host,
            self.registry,
            hold=self.hold,
            stamps=self.stamps,
            transport=self.transport,
            dispatch=self.dispatch,
        )

    def start(self) -> None:
        parcel = self.host.handoff.take(DPLANE_CONNECTION)
        if parcel is not None:
            self.takeover.resume(parcel, now_us())
        self.takeover.adopt(now_us())
        self.transport.start(now_us())

    def close(self) -> None:
        """Stop talking to bfdd. Sessions are left to the engine (whose shutdown AdminDowns them)."""
        self.transport.close()

    def handle(self, conn: Connection, msg: Message, now_us: int) -> None:
        """One message from bfdd."""
        self.dispatch.handle(conn, msg, now_us)

    def stats(self) -> dict[str, Any]:
        conn = self.transport.conn
        return {
            "mode": self.mode,
            "address": self.addr.display,
            "connected": conn is not None and conn.open and not conn.failed,
            "sessions": len(self.registry.by_lid),
            "held": len(self.registry.held()),
            "connections": self.transport.connections,
            "timers_reports": self.dispatch.timers_reports,
            # Connections refused since start: their owner is not an allowed user (gate.py).
            "refused": self.gate.refused,
        }


__all__ = ["Dataplane"]
