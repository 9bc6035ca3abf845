"""bfddp messages ↔ the engine's sessions: pure functions, no state, no I/O."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..session import SessionConfig
from ..wire.bfddp import (
    AddSession,
    CountersReply,
    CountersRequest,
    DeleteSession,
    RemoteFlags,
    SessionFlags,
    StateChange,
)

if TYPE_CHECKING:
    from ..core.host import PacketCounts
    from ..session import Session
    from ..wire.control import State

# The origin the engine's table records for the sessions bfdd created.
ORIGIN = "dplane"

DEFAULT_MINIMUM_TTL = 254


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
        # bfdd's echo-mode: our own echo at its echo transmit interval (single hop only, RFC 5883 §4).
        echo_tx_us=msg.min_echo_tx if msg.flags & SessionFlags.ECHO and not multihop else 0,
    )


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


def describe(msg: AddSession | DeleteSession) -> str:
    """A session message's path, as the log lines name it: the hop mode always, since a
    single-hop and a multihop session on one address pair are two sessions."""
    hop = "multihop" if msg.flags & SessionFlags.MULTIHOP else "single-hop"
    where = f" on {msg.ifname}" if msg.ifname else ""
    return f"{msg.src or '*'} -> {msg.dst}{where} {hop}"


__all__ = [
    "DEFAULT_MINIMUM_TTL",
    "ORIGIN",
    "counters_reply",
    "describe",
    "path_of",
    "remote_params",
    "same_path",
    "session_config",
    "state_change",
]
