"""systemd's readiness protocol (sd_notify), spoken directly: one datagram per message.

The packaged unit is ``Type=notify``: ``systemctl start`` returns only once the
engine says ``READY=1``, that is after XDP is attached, the dataplane listens
and the sessions are loaded. After a ``--pin`` takeover the successor names
itself the main process (``MAINPID=``) before the old engine leaves, so systemd
never sees its main process exit during a reload. No libsystemd: the protocol
is a datagram on an AF_UNIX socket named by ``$NOTIFY_SOCKET`` (a path, or an
abstract name written with a leading ``@``).
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger("xdp_bfd")


def build_message(**fields: str | int) -> bytes:
    """``KEY=value`` lines, in the order given (systemd reads MAINPID before READY)."""
    lines = []
    for key, value in fields.items():
        text = str(value)
        if not key.isupper() or "\n" in text:
            raise ValueError(f"sd_notify field {key}={text!r}")
        lines.append(f"{key}={text}")
    return ("\n".join(lines) + "\n").encode()


def socket_address(value: str) -> str | bytes | None:
    """The address ``$NOTIFY_SOCKET`` names, or None when it names nothing usable."""
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    if value.startswith("/"):
        return value
    return None


class Notifier:
    """Sends to ``$NOTIFY_SOCKET`` when set; otherwise every call does nothing."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        value = (env if env is not None else os.environ).get("NOTIFY_SOCKET", "")
        self.address = socket_address(value) if value else None
        if value and self.address is None:
            log.warning("notify: ignoring NOTIFY_SOCKET=%r (neither a path nor @abstract)", value)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, **fields: str | int) -> bool:
        if self.address is None:
            return False
        msg = build_message(**fields)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
                s.sendto(msg, self.address)
        except OSError as e:
            # The service manager going away must not take the engine with it.
            log.warning("notify: cannot reach the service manager: %s", e.strerror or e)
            return False
        return True

    def ready(self, *, takeover: bool = False) -> bool:
        if takeover:
            # STATUS replaces the takeover's (request_sent), which systemctl status would go on showing.
            return self.send(MAINPID=os.getpid(), STATUS="serving", READY=1)
        return self.send(READY=1)

    def request_sent(self, pid: int) -> bool:
        """A ``--pin`` takeover's request has gone to engine ``pid``: from now on only the kernel
        serves until READY (a bench reads the two datagrams' arrival as the takeover's length)."""
        return self.send(STATUS=f"taking over from engine {pid}")

    def main_pid(self) -> bool:
        return self.send(MAINPID=os.getpid())

    def stopping(self) -> bool:
        return self.send(STOPPING=1)
