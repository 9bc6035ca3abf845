"""Where bfdd and the engine meet: a bfdd ``--dplaneaddr``-style address, parsed."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from ..core.errors import UsageError

DEFAULT_DPLANE_PORT = 50700


@dataclass(frozen=True)
class DplaneAddress:
    """A bfdd ``--dplaneaddr``-style address: ipv4:/ipv6:/unix: (+ the bfdd-side spelling)."""

    kind: str  # "ipv4", "ipv6" or "unix"
    host: str  # address or socket path
    port: int = DEFAULT_DPLANE_PORT

    @property
    def display(self) -> str:
        if self.kind == "unix":
            return self.host
        if self.kind == "ipv6":
            return f"[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"

    def bfdd_client_form(self) -> str:
        """What bfdd needs to connect to us (listen mode): ``ipv4c:…``."""
        return f"{self.kind}c:{self.display}"


def parse_dplane_address(text: str) -> DplaneAddress:
    kind, sep, rest = text.partition(":")
    if not sep or kind not in ("ipv4", "ipv6", "unix"):
        raise UsageError(
            f"dataplane address {text!r}: expected ipv4:ADDR[:PORT], ipv6:[ADDR][:PORT] or unix:PATH"
        )
    if kind == "unix":
        if not rest:
            raise UsageError(f"dataplane address {text!r}: empty socket path")
        return DplaneAddress("unix", rest, 0)
    port = DEFAULT_DPLANE_PORT
    if kind == "ipv6":
        if not rest.startswith("["):
            raise UsageError(f"dataplane address {text!r}: IPv6 addresses go in brackets, ipv6:[::1]:50700")
        host, _, tail = rest[1:].partition("]")
        if tail:
            if not tail.startswith(":"):
                raise UsageError(f"dataplane address {text!r}: expected ]:PORT")
            port = _port(tail[1:], text)
    else:
        host, sep, p = rest.partition(":")
        if sep:
            port = _port(p, text)
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise UsageError(f"dataplane address {text!r}: {host!r} is not an IP address") from None
    if addr.version != (6 if kind == "ipv6" else 4):
        raise UsageError(f"dataplane address {text!r}: {host} is not an {kind} address")
    return DplaneAddress(kind, str(addr), port)


def _port(text: str, whole: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise UsageError(f"dataplane address {whole!r}: port must be 1-65535")
    return int(text)
