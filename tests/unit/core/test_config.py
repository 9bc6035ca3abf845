"""The sessions file: contract fields, defaults, and one-line errors naming entry and field."""

from __future__ import annotations

import ipaddress

import pytest

from xdp_bfd.core.config import ConfigError, load_sessions
from xdp_bfd.wire.control import AuthType


def _load(tmp_path, text, mode=0o600):
    p = tmp_path / "s.yml"
    p.write_text(text)
    p.chmod(mode)
    return load_sessions(p)


def test_minimal_entry_gets_frr_defaults(tmp_path):
    (s,) = _load(tmp_path, "- {local: 198.19.0.1, peer: 198.19.0.2}\n")
    assert (s.local, s.peer) == (ipaddress.ip_address("198.19.0.1"), ipaddress.ip_address("198.19.0.2"))
    assert (s.min_tx_us, s.min_rx_us, s.detect_mult, s.echo_us) == (300_000, 300_000, 3, 0)
    assert (s.multihop, s.passive, s.shutdown, s.demand, s.minimum_ttl, s.auth) == (
        False, False, False, False, 254, None,
    )  # fmt: skip


def test_full_entry(tmp_path):
    (s,) = _load(
        tmp_path,
        """
- local: fd00:bfd:1::1
  peer: fd00:bfd:1::2
  interface: veth-d
  multihop: true
  min_tx_ms: 10
  min_rx_ms: 20
  detect_mult: 5
  echo_ms: 50
  passive: true
  minimum_ttl: 250
  shutdown: true
  demand: true
  auth: {type: meticulous-keyed-sha1, key_id: 7, secret: "s3cret"}
""",
    )
    assert (s.interface, s.multihop, s.min_tx_us, s.min_rx_us, s.detect_mult, s.echo_us) == (
        "veth-d", True, 10_000, 20_000, 5, 50_000,
    )  # fmt: skip
    assert (s.passive, s.minimum_ttl, s.shutdown, s.demand) == (True, 250, True, True)
    assert (s.auth.type, s.auth.key_id, s.auth.secret) == (AuthType.METICULOUS_KEYED_SHA1, 7, b"s3cret")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("- [unclosed\n", "not valid YAML"),
        ("- {local: 198.19.0.1}\n", "[0]: missing required field 'peer'"),
        ("- {local: 198.19.0.1, peer: 198.19.0.2, colour: red}\n", "unknown field 'colour'"),
        ("- {local: 198.19.0.1, peer: fd00:bfd::2}\n", "different address families"),
        ("- {local: 198.19.0.1, peer: 198.19.0.300}\n", "[0].peer: '198.19.0.300' is not an IP address"),
        ("- {local: 198.19.0.1, peer: 198.19.0.2, min_tx_ms: 0}\n", "[0].min_tx_ms"),
        ("- {local: 198.19.0.1, peer: 198.19.0.2, detect_mult: 256}\n", "[0].detect_mult"),
        ("- {local: 198.19.0.1, peer: 198.19.0.2, multihop: yes please}\n", "[0].multihop"),
        ("- {local: 198.19.0.1, peer: 198.19.0.2, auth: {type: rot13, secret: x}}\n", "[0].auth.type"),
        ("- {local: 198.19.0.1, peer: 198.19.0.2, auth: {type: simple, secret: 12345678901234567}}\n",
         "[0].auth.secret"),
        ("- {local: 198.19.0.1, peer: 198.19.0.2}\n- {local: 198.19.0.1, peer: 198.19.0.2}\n",
         "[1]: same session as entry 0"),
        ("local: 198.19.0.1\n", "expected a YAML list"),
    ],
)  # fmt: skip
def test_errors_name_the_entry_and_field(tmp_path, text, needle):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, text)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg, msg


def test_empty_file_is_no_sessions(tmp_path):
    assert _load(tmp_path, "") == []


# --- secrets -----------------------------------------------------------------------

MARK = "Zq7-marked-secret"  # 17 bytes: too long for simple and MD5, fine for SHA1
AUTHED = f"- {{local: 198.19.0.1, peer: 198.19.0.2, auth: {{type: keyed-sha1, key_id: 1, secret: {MARK}}}}}\n"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o666])
def test_secrets_readable_by_others_are_refused_with_one_line(tmp_path, mode):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, AUTHED, mode)
    assert str(e.value) == (
        f"{tmp_path / 's.yml'}: holds authentication secrets but is readable by others "
        f"(mode {mode:04o}); chmod 600 it"
    )
    assert MARK not in str(e.value)


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o700, 0o620])
def test_secrets_readable_by_the_owner_only_are_accepted(tmp_path, mode):
    (s,) = _load(tmp_path, AUTHED, mode)
    assert s.auth is not None and s.auth.secret == MARK.encode()


def test_a_file_without_secrets_may_be_read_by_anyone(tmp_path):
    (s,) = _load(tmp_path, "- {local: 198.19.0.1, peer: 198.19.0.2}\n", 0o644)
    assert s.auth is None


def test_the_mode_checked_is_the_target_of_a_symlink(tmp_path):
    real = tmp_path / "real.yml"
    real.write_text(AUTHED)
    real.chmod(0o644)
    link = tmp_path / "link.yml"
    link.symlink_to(real)
    with pytest.raises(ConfigError, match="readable by others"):
        load_sessions(link)
    real.chmod(0o600)
    assert load_sessions(link)[0].auth is not None


@pytest.mark.parametrize(
    "text",
    [
        # Every refusal of an entry that carries the marked secret, and of the secret itself.
        f"- {{local: 198.19.0.1, peer: 198.19.0.2, auth: {{type: simple, secret: {MARK}}}}}\n",
        f"- {{local: 198.19.0.1, peer: 198.19.0.2, auth: {{type: keyed-md5, secret: {MARK}}}}}\n",
        f"- {{local: 198.19.0.1, peer: 198.19.0.2, auth: {{type: rot13, secret: {MARK}}}}}\n",
        f"- {{local: 198.19.0.1, peer: 198.19.0.2, auth: {{type: keyed-sha1, key_id: 300, secret: {MARK}}}}}\n",  # noqa: E501
        f"- {{local: 198.19.0.1, peer: 198.19.0.2, auth: {{type: keyed-sha1, secret: {MARK}, extra: 1}}}}\n",
        f"- {{local: 198.19.0.1, peer: 198.19.0.2, auth: {{type: keyed-sha1, secret: [{MARK}]}}}}\n",
        f"- {{local: 198.19.0.1, peer: 198.19.0.2, auth: {MARK}}}\n",
        f"- {{local: 198.19.0.1, peer: 198.19.0.2, detect_mult: 0, auth: {{type: keyed-sha1, secret: {MARK}}}}}\n",  # noqa: E501
        f"- {{local: 198.19.0.1, peer: fd00::2, auth: {{type: keyed-sha1, secret: {MARK}}}}}\n",
        f"- {{local: 198.19.0.1, peer: 198.19.0.2, auth: {{type: keyed-sha1, secret: {MARK}}}}}\n" * 2,
        # Broken YAML right at the secret: the message gives the line, never the text around it.
        f"- {{local: 198.19.0.1, peer: 198.19.0.2, auth: {{type: keyed-sha1, secret: '{MARK}}}}}\n",
        f"- local: 198.19.0.1\n  auth: {{secret: {MARK}\n\t- x\n",
    ],
)
def test_no_refusal_quotes_the_secret(tmp_path, text):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, text)
    assert MARK not in str(e.value) and MARK[:6] not in str(e.value), str(e.value)
    assert MARK not in repr(e.value)
