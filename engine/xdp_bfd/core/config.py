"""The sessions file (contract in DESIGN.md): a YAML list, only ``local`` and ``peer`` required.

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
    "minimum_ttl": (254, 1, 255),
}
_BOOLS = {"multihop": False, "passive": False, "shutdown": False, "demand": False}
_KNOWN = {"local", "peer", "interface", "auth", *_INTS, *_BOOLS}


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
        return []
    if not isinstance(data, list):
        raise ConfigError(f"{path}: expected a YAML list of sessions")
    sessions = [session_from_dict(e, f"{path}[{i}]") for i, e in enumerate(data)]
    seen: dict[tuple, int] = {}
    for i, s in enumerate(sessions):
        key = s.key()
        if key in seen:
            raise ConfigError(
                f"{path}[{i}]: same session as entry {seen[key]} (local, peer, interface, multihop)"
            )
        seen[key] = i
    check_secret_mode(path, mode, sessions)
    return sessions
