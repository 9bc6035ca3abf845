"""What a session reports back: rejected packets and state changes."""

from __future__ import annotations

from dataclasses import dataclass

from ..wire.control import Diag, State

__all__ = ["Rejected", "StateChanged"]


class Rejected(Exception):
    """A packet the session discarded (RFC 5880 §6.8.6, RFC 5881 §5, RFC 5883 §5).

    ``reason`` names the drop counter the caller charges the packet to, so it is
    a short stable token: ``ttl``, ``your_discr``, ``auth_missing``,
    ``auth_unexpected``, ``auth_type``, ``auth_key_id``, ``auth_digest`` or
    ``auth_sequence``. The session is left exactly as it was before the packet.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class StateChanged:
    """bfd.SessionState moved from ``old`` to ``new``; ``diag`` is bfd.LocalDiag afterwards."""

    old: State
    new: State
    diag: Diag
    at_us: int
