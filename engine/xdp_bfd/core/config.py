"""The sessions file (contract in DESIGN.md): a YAML list, only ``local`` and ``peer`` required.

An entry with ``sbfd_reflector`` instead is an S-BFD reflector discriminator
(RFC 7880), answered entirely in XDP (docs/fastpath.md, "S-BFD reflector").

Parsing is all-or-nothing: one bad entry rejects the whole file with one line
naming the entry and the field, so a bad SIGHUP reload changes nothing.

Secrets: no message here quotes an ``auth.secret`` value (the tests feed
every refusal a marked secret), and a file that holds one must be readable by
its owner only — refused otherwise, as ssh refuses a private key (docs/security.md).
"""

from __future__ import annotations

import ipaddress
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..session import AuthConfig, SessionConfig
from ..wire.control import AuthType


class ConfigError(Exception):
    """A sessions file that cannot be used; the message is the one line to log."""


AUTH_TYPES = {
    "simple": AuthType.SIMPLE,
    "keyed-md5": AuthType.KEYED_MD5,
    "meticulous-keyed-md5": AuthType.METICULOUS_KEYED_MD5,
    "keyed-sha1": AuthType.KEYED_SHA1,
    "meticulous-keyed-sha1": AuthType.METICULOUS_KEYED_SHA1,
}
_SECRET_MAX = {AuthType.SIMPLE: 16, AuthType.KEYED_MD5: 16, AuthType.METICULOUS_KEYED_MD5: 16}

# field: (type, default, lowest, highest); the defaults are FRR's.
_INTS = {
    "min_tx_ms": (300, 1, 60_000),
    "min_rx_ms": (300, 0, 60_000),
    "detect_mult": (3, 1, 255),
    "echo_ms": (0, 0, 60_000),
    "echo_tx_ms": (0, 0, 60_000),
    "minimum_ttl": (254, 1, 255),
}
_BOOLS = {"multihop": False, "passive": False, "shutdown": False, "demand": False}
_KNOWN = {"local", "peer", "interface", "auth", *_INTS, *_BOOLS}


# S-BFD reflector defaults. 3.3 ms is the fastest interval the tests prove; the
# rate covers 30 initiators at 3.3 ms or 100 at 10 ms per discriminator, and
# the burst (rate / 10: 100 ms of the rate) absorbs initiators that start together.
SBFD_MIN_RX_US = 3300
SBFD_RATE_PPS = 10_000
DISCR_MAX = 0xFFFFFFFF
_SBFD_INTS = {
    "min_rx_us": (SBFD_MIN_RX_US, 1, 60_000_000),
    "rate_pps": (SBFD_RATE_PPS, 1, 10_000_000),
    "burst": (0, 0, 10_000_000),
}
_SBFD_STATES = ("up", "admin-down")
_SBFD_KNOWN = {"sbfd_reflector", "state", *_SBFD_INTS}


@dataclass(frozen=True)
class ReflectorConfig:
    """One S-BFD reflector discriminator (RFC 7880): what the XDP reflector answers for it."""

    discr: int
    admin_down: bool = False  # answer AdminDown (diag 7): the reflector is out of service and says so
    min_rx_us: int = SBFD_MIN_RX_US  # the Required Min RX Interval we advertise to initiators
    rate_pps: int = SBFD_RATE_PPS  # answers a second, across every initiator of this discriminator
    burst: int = 0  # answers at once before the rate applies; 0: rate_pps / 10 (at least 1)

    @property
    def burst_packets(self) -> int:
        return self.burst or max(1, self.rate_pps // 10)

    def describe(self) -> str:
        return f"S-BFD reflector {self.discr}"


def parse_discr(text: Any, where: str) -> int:
    """A discriminator: an integer 1-4294967295 (RFC 5880 §6.8.1: never 0)."""
    if isinstance(text, bool) or not isinstance(text, int | str):
        raise ConfigError(f"{where}: expected a discriminator 1-{DISCR_MAX}, got {text!r}")
    try:
        v = int(text)
    except ValueError:
        raise ConfigError(f"{where}: expected a discriminator 1-{DISCR_MAX}, got {text!r}") from None
    if not 1 <= v <= DISCR_MAX:
        raise ConfigError(f"{where}: expected a discriminator 1-{DISCR_MAX}, got {text!r}")
    return v


def reflector_from_dict(entry: dict, where: str) -> ReflectorConfig:
    unknown = sorted(set(map(str, entry)) - _SBFD_KNOWN)
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r} for an S-BFD reflector")
    discr = parse_discr(entry["sbfd_reflector"], f"{where}.sbfd_reflector")
    ints = {}
    for name, (default, lo, hi) in _SBFD_INTS.items():
        v = entry.get(name, default)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ConfigError(f"{where}.{name}: expected an integer {lo}-{hi}, got {v!r}")
        ints[name] = v
    state = entry.get("state", "up")
    if state not in _SBFD_STATES:
        raise ConfigError(f"{where}.state: expected one of {', '.join(_SBFD_STATES)}, got {state!r}")
    return ReflectorConfig(discr=discr, admin_down=state == "admin-down", **ints)


def check_reflectors(reflectors: list[tuple[ReflectorConfig, str]]) -> None:
    """Each discriminator once: ``reflectors`` pairs each with where it was given."""
    seen: dict[int, str] = {}
    for r, where in reflectors:
        if r.discr in seen:
            raise ConfigError(
                f"{where}: S-BFD reflector discriminator {r.discr} is already given by {seen[r.discr]}"
            )
        seen[r.discr] = where


@dataclass(frozen=True)
class SessionsFile:
    """What a sessions file holds: sessions, and S-BFD reflector discriminators."""

    sessions: list[SessionConfig] = field(default_factory=list)
    reflectors: list[ReflectorConfig] = field(default_factory=list)


def session_from_dict(entry: Any, where: str) -> SessionConfig:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected a mapping with local and peer, got {type(entry).__name__}")
    unknown = sorted(set(map(str, entry)) - _KNOWN)
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r}")
    for need in ("local", "peer"):
        if need not in entry:
            raise ConfigError(f"{where}: missing required field {need!r}")
    local, peer = _addr(entry["local"], f"{where}.local"), _addr(entry["peer"], f"{where}.peer")
    if local.version != peer.version:
        raise ConfigError(f"{where}: local {local} and peer {peer} are different address families")
    ints = {}
    for name, (default, lo, hi) in _INTS.items():
        v = entry.get(name, default)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ConfigError(f"{where}.{name}: expected an integer {lo}-{hi}, got {v!r}")
        ints[name] = v
    bools = {}
    for name, default in _BOOLS.items():
        v = entry.get(name, default)
        if not isinstance(v, bool):
            raise ConfigError(f"{where}.{name}: expected true or false, got {v!r}")
        bools[name] = v
    interface = entry.get("interface")
    if interface is not None and (not isinstance(interface, str) or not 0 < len(interface) < 16):
        raise ConfigError(f"{where}.interface: expected an interface name, got {interface!r}")
    if not bools["multihop"] and interface is None and peer.version == 6 and peer.is_link_local:
        raise ConfigError(f"{where}: a link-local peer needs an interface")
    try:
        auth = _auth(entry.get("auth"), f"{where}.auth")
        return _build(local=local, peer=peer, interface=interface, ints=ints, bools=bools, auth=auth)
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from None


def _build(
    *,
    local: ipaddress.IPv4Address | ipaddress.IPv6Address,
    peer: ipaddress.IPv4Address | ipaddress.IPv6Address,
    interface: str | None,
    ints: dict[str, int],
    bools: dict[str, bool],
    auth: AuthConfig | None,
) -> SessionConfig:
    return SessionConfig(
        local=local,
        peer=peer,
        interface=interface,
        multihop=bools["multihop"],
        min_tx_us=ints["min_tx_ms"] * 1000,
        min_rx_us=ints["min_rx_ms"] * 1000,
        detect_mult=ints["detect_mult"],
        echo_us=ints["echo_ms"] * 1000,
        passive=bools["passive"],
        minimum_ttl=ints["minimum_ttl"],
        shutdown=bools["shutdown"],
        demand=bools["demand"],
        auth=auth,
        echo_tx_us=ints["echo_tx_ms"] * 1000,
    )


def _addr(v: Any, where: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    try:
        return ipaddress.ip_address(str(v))
    except ValueError:
        raise ConfigError(f"{where}: {v!r} is not an IP address") from None


def _auth(v: Any, where: str) -> AuthConfig | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        raise ConfigError(f"{where}: expected a mapping with type, key_id and secret")
    unknown = sorted(set(map(str, v)) - {"type", "key_id", "secret"})
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r}")
    kind = AUTH_TYPES.get(str(v.get("type")))
    if kind is None:
        raise ConfigError(f"{where}.type: expected one of {', '.join(AUTH_TYPES)}, got {v.get('type')!r}")
    key_id = v.get("key_id", 1)
    if isinstance(key_id, bool) or not isinstance(key_id, int) or not 0 <= key_id <= 255:
        raise ConfigError(f"{where}.key_id: expected an integer 0-255, got {key_id!r}")
    secret = v.get("secret")
    if not isinstance(secret, str) or not secret:
        raise ConfigError(f"{where}.secret: expected a non-empty string")
    raw = secret.encode()
    limit = _SECRET_MAX.get(kind, 20)
    if len(raw) > limit:
        raise ConfigError(f"{where}.secret: at most {limit} bytes for {v['type']}, got {len(raw)}")
    return AuthConfig(type=kind, key_id=key_id, secret=raw)


def _read(path: Path) -> tuple[str, int]:
    """The file's text and its mode, from one open file (the mode is the one of what was read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read()
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror}") from None
    finally:
        os.close(fd)
    try:
        return raw.decode(), mode
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not valid UTF-8") from None


def check_secret_mode(path: Path, mode: int, sessions: list[SessionConfig]) -> None:
    """A file holding a secret readable by group or others is refused (the owner is who wrote it)."""
    if stat.S_ISREG(mode) and mode & 0o044 and any(s.auth is not None for s in sessions):
        raise ConfigError(
            f"{path}: holds authentication secrets but is readable by others "
            f"(mode {stat.S_IMODE(mode):04o}); chmod 600 it"
        )


def load_sessions(path: Path) -> list[SessionConfig]:
    return load_config(path).sessions


def load_config(path: Path) -> SessionsFile:
    text, mode = _read(path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        # Only the line and the problem: str(e) would quote the file around the mark.
        mark = getattr(e, "problem_mark", None)
        at = f" line {mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise ConfigError(f"{path}:{at} not valid YAML ({problem})") from None
    if data is None:
        return SessionsFile()
    if not isinstance(data, list):
        raise ConfigError(f"{path}: expected a YAML list of sessions")
    sessions: list[tuple[int, SessionConfig]] = []
    reflectors: list[tuple[ReflectorConfig, str]] = []
    for i, item in enumerate(data):
        where = f"{path}[{i}]"
        if isinstance(item, dict) and "sbfd_reflector" in item:
            reflectors.append((reflector_from_dict(item, where), where))
        else:
            sessions.append((i, session_from_dict(item, where)))
    seen: dict[tuple, int] = {}
    for i, s in sessions:
        key = s.key()
        if key in seen:
            raise ConfigError(
                f"{path}[{i}]: same session as entry {seen[key]} (local, peer, interface, multihop)"
            )
        seen[key] = i
    check_reflectors(reflectors)
    configs = [s for _i, s in sessions]
    check_secret_mode(path, mode, configs)
    return SessionsFile(configs, [r for r, _where in reflectors])
