"""What a session reports back: rejected packets, state changes and the peer's new parameters."""

from __future__ import annotations

from dataclasses import dataclass

from ..wire.control import Diag, State

__all__ = ["Rejected", "RemoteParamsChanged", "StateChanged"]


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


@dataclass(frozen=True)
class RemoteParamsChanged:
    """The peer advertises other timers or another Detect Mult than in its previous accepted packet.

    Queued (when the session's ``remote_events`` is on) from the packet that
    changed them, before any :class:`StateChanged` the same packet causes; the
    values are those of that packet, in µs as on the wire.
    """

    desired_min_tx_us: int
    required_min_rx_us: int
    required_min_echo_rx_us: int
    detect_mult: int
    at_us: int
