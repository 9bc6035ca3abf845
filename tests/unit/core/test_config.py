"""The sessions file: contract fields, defaults, and one-line errors naming entry and field."""

from __future__ import annotations

import ipaddress

import pytest

from xdp_bfd.core.config import ConfigError, load_sessions
from xdp_bfd.wire.control import AuthType


def _load(tmp_path, text):
    p = tmp_path / "s.yml"
    p.write_text(text)
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
