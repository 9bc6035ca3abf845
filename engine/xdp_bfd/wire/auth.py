"""RFC 5880 §4.2-§4.4 and §6.7 authentication sections: layout and digests.

This module works on raw wire values (auth type codes as ints, byte strings) so
that :mod:`.control`, which owns the value types, can import it without a cycle.
Sequence-number rules (§6.7.3/§6.7.4 replay windows) belong to the session, not here.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass

__all__ = [
    "KEYED",
    "KEYED_HEADER",
    "SIMPLE",
    "SIMPLE_MAX_PASSWORD",
    "SIMPLE_MIN_PASSWORD",
    "KeyedSpec",
    "keyed_digest",
    "max_secret_len",
    "pad_key",
    "password_matches",
    "section_problem",
]

SIMPLE = 1
SIMPLE_MIN_PASSWORD = 1
SIMPLE_MAX_PASSWORD = 16

# Type, Len, Key ID, Reserved, Sequence Number: the part before the digest (§4.3, §4.4).
KEYED_HEADER = struct.Struct("!BBBxI")


@dataclass(frozen=True)
class KeyedSpec:
    """Fixed layout of one keyed auth type."""

    section_len: int
    digest_len: int
    hash_name: str


_MD5 = KeyedSpec(section_len=24, digest_len=16, hash_name="md5")
_SHA1 = KeyedSpec(section_len=28, digest_len=20, hash_name="sha1")

# Keyed by the RFC's Auth Type codes; meticulous variants differ only in sequence rules.
KEYED: dict[int, KeyedSpec] = {2: _MD5, 3: _MD5, 4: _SHA1, 5: _SHA1}


def section_problem(auth_type: int, auth_len: int, available: int) -> str | None:
    """Why an auth section with this type and Auth Len is malformed, or None if it is fine.

    ``available`` is how many bytes the Length field leaves for the section.
    """
    if auth_type == SIMPLE:
        password_len = auth_len - 3
        if not SIMPLE_MIN_PASSWORD <= password_len <= SIMPLE_MAX_PASSWORD:
            return f"simple password length {password_len}"
    elif auth_type in KEYED:
        expected = KEYED[auth_type].section_len
        if auth_len != expected:
            return f"auth len {auth_len} for type {auth_type}, expected {expected}"
    else:
        return f"unknown auth type {auth_type}"
    if auth_len > available:
        return f"auth len {auth_len} beyond the length field ({available} bytes left)"
    return None


def max_secret_len(auth_type: int) -> int:
    """Longest secret usable with ``auth_type`` (for configuration checks)."""
    if auth_type == SIMPLE:
        return SIMPLE_MAX_PASSWORD
    return KEYED[auth_type].digest_len


def pad_key(secret: bytes, size: int) -> bytes:
    """The key as placed in the digest field before hashing (§6.7.3: trailing zeros)."""
    if len(secret) > size:
        raise ValueError(f"secret of {len(secret)} bytes does not fit a {size}-byte key field")
    return secret.ljust(size, b"\0")


def keyed_digest(packet: bytes, section_offset: int, auth_type: int, secret: bytes) -> bytes:
    """Digest of ``packet`` per §6.7.3/§6.7.4.

    The digest field is overwritten with the zero-padded secret and the hash is
    taken over the whole packet, whatever the field held before (so this serves
    both for signing and for checking a received packet).
    """
    spec = KEYED[auth_type]
    start = section_offset + KEYED_HEADER.size
    keyed = packet[:start] + pad_key(secret, spec.digest_len) + packet[start + spec.digest_len :]
    return hashlib.new(spec.hash_name, keyed).digest()


def password_matches(password: bytes, secret: bytes) -> bool:
    """Constant-time comparison of a received simple password with the configured one."""
    return hmac.compare_digest(password, secret)
