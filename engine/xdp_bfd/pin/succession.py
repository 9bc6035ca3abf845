"""``--succeed PID``: replacing an engine that runs without ``--pin``, compiled before it stops.

Without a pin directory there is no state to hand over, so the peers see the
sessions start again (one AdminDown each, then Down, Init, Up under bfdd's
re-adds). What must not happen is what a plain stop-then-start does: the
sessions left with nobody, or with bfdd's software fallback, for as long as
bcc compiles. FRR 8.4's bfdd serves a session it got back from the dataplane
with the slow timers it had before the hand-off and does not hear the peer,
so every three seconds of that the peer counts another down event
(docs/frr.md, "Restarting the engine"). The successor therefore compiles and
loads its programs while the old engine still serves, then has it step down
(SIGUSR2, which an unpinned engine takes as "a successor is here": its
AdminDown leaves, it detaches and exits 75 without telling systemd it stops)
and only then attaches, binds and connects — the gap is the old engine's
shutdown, not the compile.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import time
from pathlib import Path

from ..core.errors import EngineError

log = logging.getLogger("xdp_bfd")

# What cli.set_process_name calls every engine (/proc/PID/comm).
ENGINE_NAME = "xdp-bfd"
# The old engine's shutdown: AdminDown to every session, the bfddp connection
# closed, XDP detached. systemd's TimeoutStopSec for the unit is 10 s too.
STOP_TIMEOUT_S = 10.0


class Predecessor:
    """The engine to replace, held by a pidfd from the start: a recycled pid cannot be hit."""

    def __init__(self, pid: int, proc: Path = Path("/proc")) -> None:
        self.pid = pid
        try:
            self._fd = os.pidfd_open(pid)
        except ProcessLookupError:
            raise EngineError(f"--succeed {pid}: no such process") from None
        except OSError as e:
            raise EngineError(f"--succeed {pid}: {e.strerror or e}") from None
        try:
            comm = (proc / str(pid) / "comm").read_text().strip()
        except OSError:
            comm = ""
        if comm != ENGINE_NAME:
            os.close(self._fd)
            raise EngineError(
                f"--succeed {pid}: that process is {comm or 'gone'!r}, not an engine ({ENGINE_NAME})"
            )

    def retire(self, timeout_s: float = STOP_TIMEOUT_S) -> float:
        """SIGUSR2 it and wait until it is gone; returns the milliseconds that took.

        An engine that outlives ``timeout_s`` (one from before ``--succeed``
        ignores SIGUSR2 without ``--pin``) is killed: no AdminDown then, its
        programs stay attached (the dead-man gate silences them) and the
        successor's attach replaces them. Not SIGTERM: its ``STOPPING=1``
        would stop the unit the successor now is the main process of.
        """
        t0 = time.monotonic()
        try:
            signal.pidfd_send_signal(self._fd, signal.SIGUSR2)
            if not self._wait(timeout_s):
                log.warning("succeed: engine %d still running %.0f s after SIGUSR2; killing it", self.pid,
                            timeout_s)  # fmt: skip
                signal.pidfd_send_signal(self._fd, signal.SIGKILL)
                if not self._wait(timeout_s):
                    raise EngineError(f"--succeed {self.pid}: it survived SIGKILL for {timeout_s:.0f} s")
        except ProcessLookupError:
            pass  # it had exited on its own
        finally:
            os.close(self._fd)
        return (time.monotonic() - t0) * 1e3

    def _wait(self, timeout_s: float) -> bool:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)  # readable once the process has exited
        return bool(poller.poll(int(timeout_s * 1000)))
