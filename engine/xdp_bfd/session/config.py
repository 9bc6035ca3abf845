"""Per-session configuration: what the operator (or bfdd) asked for."""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address

from ..wire import auth as wire_auth
from ..wire.control import AuthType

__all__ = ["AuthConfig", "SessionConfig", "SessionKey"]

IPAddress = IPv4Address | IPv6Address
SessionKey = tuple[IPAddress | None, IPAddress, str | None, bool]

_U32_MAX = (1 << 32) - 1


@dataclass(frozen=True)
class AuthConfig:
    """One key (bfd.AuthType plus the key ID and secret both ends share, §6.7)."""

    type: AuthType
    key_id: int
    secret: bytes

    def __repr__(self) -> str:
        # Never the secret: a config's repr reaches log lines and exception messages
        # (SessionConfig's repr holds this one). Equality still compares the secret.
        return f"AuthConfig(type={self.type!r}, key_id={self.key_id}, secret=<redacted>)"

    def __post_init__(self) -> None:
        if self.type == AuthType.NONE:
            raise ValueError("AuthType.NONE is expressed as auth=None")
        if not 0 <= self.key_id <= 255:
            raise ValueError(f"key_id {self.key_id} does not fit 8 bits")
        if not 1 <= len(self.secret) <= wire_auth.max_secret_len(self.type):
            raise ValueError(
                f"{self.type.name} secret must be 1-{wire_auth.max_secret_len(self.type)} bytes, "
                f"got {len(self.secret)}"
            )

    @property
    def keyed(self) -> bool:
        """Carries a sequence number (§6.7.3, §6.7.4), unlike simple passwords."""
        return self.type in wire_auth.KEYED

    @property
    def meticulous(self) -> bool:
        """Sequence must strictly increase on every packet (§6.7.3)."""
        return self.type in (AuthType.METICULOUS_KEYED_MD5, AuthType.METICULOUS_KEYED_SHA1)


@dataclass(frozen=True)
class SessionConfig:
    """Desired behaviour of one session; all intervals in microseconds.

    ``min_tx_us`` and ``min_rx_us`` are the values used once the session is Up
    (bfd.DesiredMinTxInterval is held at 1 s or more otherwise, §6.8.3).
    ``echo_us`` is the Required Min Echo RX Interval we advertise; 0 means we do
    not loop echo packets back. ``echo_tx_us`` is how often we would send our
    own echo (never faster than the peer's Required Min Echo RX, §6.8.9); 0
    means we send none.
    """

    local: IPAddress | None
    peer: IPAddress
    interface: str | None = None
    multihop: bool = False
    min_tx_us: int = 300_000
    min_rx_us: int = 300_000
    detect_mult: int = 3
    echo_us: int = 0
    passive: bool = False
    minimum_ttl: int = 254
    shutdown: bool = False
    demand: bool = False
    auth: AuthConfig | None = None
    echo_tx_us: int = 0

    def __post_init__(self) -> None:
        if self.local is not None and self.local.version != self.peer.version:
            raise ValueError(f"local {self.local} and peer {self.peer} are different families")
        # Desired Min TX of zero is reserved (§4.1); Required Min RX may be zero (§6.8.1).
        if not 1 <= self.min_tx_us <= _U32_MAX:
            raise ValueError(f"min_tx_us {self.min_tx_us} out of range 1..{_U32_MAX}")
        for name in ("min_rx_us", "echo_us", "echo_tx_us"):
            value = getattr(self, name)
            if not 0 <= value <= _U32_MAX:
                raise ValueError(f"{name} {value} out of range 0..{_U32_MAX}")
        # bfd.DetectMult MUST be nonzero (§6.8.1) and fits 8 bits on the wire (§4.1).
        if not 1 <= self.detect_mult <= 255:
            raise ValueError(f"detect_mult {self.detect_mult} out of range 1..255")
        if not 1 <= self.minimum_ttl <= 255:
            raise ValueError(f"minimum_ttl {self.minimum_ttl} out of range 1..255")

    def key(self) -> SessionKey:
        """The demultiplexing key for packets whose Your Discriminator is zero (§6.3)."""
        return (self.local, self.peer, self.interface, self.multihop)

    def describe(self) -> str:
        """The session as log lines name it: the hop mode always, since a single-hop and a
        multihop session on one address pair are two sessions."""
        where = f" on {self.interface}" if self.interface else ""
        hop = "multihop" if self.multihop else "single-hop"
        return f"{self.local or '*'} -> {self.peer}{where} {hop}"
