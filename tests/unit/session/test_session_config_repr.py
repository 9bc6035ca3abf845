"""A configuration's repr never holds its authentication secret (it reaches logs and exceptions)."""

from __future__ import annotations

import dataclasses
import ipaddress
import logging

import pytest

from xdp_bfd.session import AuthConfig, SessionConfig
from xdp_bfd.wire.control import AuthType

SECRET = b"Zq7-never-logged"


@pytest.mark.parametrize("kind", [t for t in AuthType if t != AuthType.NONE])
def test_auth_repr_redacts_the_secret(kind):
    a = AuthConfig(type=kind, key_id=9, secret=SECRET)
    for text in (repr(a), str(a), f"{a}", f"{a!r}", "%s %r" % (a, a)):  # noqa: UP031
        assert SECRET.decode() not in text and str(SECRET) not in text, text
        assert "secret=<redacted>" in text and "key_id=9" in text and kind.name in text, text


def test_session_repr_and_logged_config_redact_the_secret(caplog):
    a = AuthConfig(type=AuthType.KEYED_SHA1, key_id=1, secret=SECRET)
    s = SessionConfig(local=None, peer=ipaddress.ip_address("198.19.0.2"), auth=a)
    assert SECRET.decode() not in repr(s) and "secret=<redacted>" in repr(s)
    with caplog.at_level(logging.DEBUG, logger="xdp_bfd"):
        logging.getLogger("xdp_bfd").warning("session %s, %r", s, s)
        try:
            raise ValueError(f"bad {s}")
        except ValueError:
            logging.getLogger("xdp_bfd").exception("failed")
    assert caplog.text and SECRET.decode() not in caplog.text


def test_redaction_changes_neither_equality_nor_the_value():
    a = AuthConfig(type=AuthType.KEYED_MD5, key_id=1, secret=SECRET)
    assert a.secret == SECRET
    assert a == AuthConfig(type=AuthType.KEYED_MD5, key_id=1, secret=SECRET)
    assert a != AuthConfig(type=AuthType.KEYED_MD5, key_id=1, secret=b"other")
    assert dataclasses.replace(a, key_id=2).secret == SECRET
