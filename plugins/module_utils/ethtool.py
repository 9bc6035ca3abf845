# -*- coding: utf-8 -*-
# Copyright: xdp_bfd.fastpath developers
# GNU General Public License v2.0 or later (see LICENSE or https://www.gnu.org/licenses/old-licenses/gpl-2.0.txt),
# which includes version 3 of the License (https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-2.0-or-later

"""Parse and build ethtool 6.1 commands: pause (-a/-A), rx-flow-hash (-n/-N), coalesce (-c/-C)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# ethtool -N rx-flow-hash letters in the order ethtool prints their fields.
HASH_FIELDS = (
    ("m", "L2DA"),
    ("v", "VLAN tag"),
    ("t", "L3 proto"),
    ("s", "IP SA"),
    ("d", "IP DA"),
    ("f", "L4 bytes 0 & 1 [TCP/UDP src port]"),
    ("n", "L4 bytes 2 & 3 [TCP/UDP dst port]"),
    ("e", "GTP TEID"),
)
HASH_LETTERS = "".join(field[0] for field in HASH_FIELDS) + "r"
FLOW_TYPES = ("tcp4", "udp4", "sctp4", "ah4", "esp4", "tcp6", "udp6", "sctp6", "ah6", "esp6")

PAUSE_FIELDS = ("autoneg", "rx", "tx")
COALESCE_FIELDS = ("adaptive_rx", "adaptive_tx", "rx_usecs", "rx_frames", "tx_usecs", "tx_frames")

UNSUPPORTED = "Operation not supported"


class EthtoolParseError(ValueError):
    pass


def is_unsupported(text):
    return UNSUPPORTED in (text or "")


def _onoff(value):
    return "on" if value else "off"


# -- pause ----------------------------------------------------------------------------------


def parse_pause(text):
    """``ethtool -a IF`` → {autoneg, rx, tx} as booleans."""
    names = {"Autonegotiate": "autoneg", "RX": "rx", "TX": "tx"}
    found = {}
    for line in (text or "").splitlines():
        m = re.match(r"^(Autonegotiate|RX|TX):\s+(on|off)\s*$", line)
        if m:
            found[names[m.group(1)]] = m.group(2) == "on"
    if set(found) != set(PAUSE_FIELDS):
        raise EthtoolParseError("cannot read pause parameters from ethtool output %r" % (text or "")[:200])
    return found


def pause_args(current, want):
    """Arguments after ``-A IF`` for the fields of ``want`` (not None) that differ."""
    args = []
    for field in PAUSE_FIELDS:
        value = want.get(field)
        if value is not None and current.get(field) != value:
            args += [field, _onoff(value)]
    return args


# -- rx-flow-hash ------------------------------------------------------------------------------


def normalize_hash(letters):
    """Canonical letters (ethtool's field order) for a user-given string such as ``sdfn``."""
    letters = (letters or "").strip()
    if not letters:
        raise EthtoolParseError("an rx-flow-hash needs at least one field letter")
    bad = sorted(set(c for c in letters if c not in HASH_LETTERS))
    if bad:
        raise EthtoolParseError(
            "rx-flow-hash letters %r are not ethtool fields (use %s)" % ("".join(bad), HASH_LETTERS)
        )
    if "r" in letters and letters.replace("r", ""):
        raise EthtoolParseError("rx-flow-hash 'r' (discard) cannot be combined with other fields")
    return "".join(c for c in HASH_LETTERS if c in letters)


def parse_flow_hash(text):
    """``ethtool -n IF rx-flow-hash FLOW`` → canonical letters ('' when ethtool prints None).

    ethtool 6.1 prints ``UDP over IPV4 flows use these fields for computing Hash flow key:``
    then one line per field, or ``None``; or ``... flows - All matching flows discarded on RX``.
    """
    text = text or ""
    if "All matching flows discarded" in text:
        return "r"
    if "use these fields for computing Hash flow key" not in text:
        raise EthtoolParseError("cannot read the rx-flow-hash from ethtool output %r" % text[:200])
    by_name = dict((name, letter) for letter, name in HASH_FIELDS)
    letters = set()
    body = text.split("Hash flow key:", 1)[1]
    for line in body.splitlines():
        line = line.strip()
        if not line or line == "None":
            continue
        if line not in by_name:
            raise EthtoolParseError("unknown rx-flow-hash field %r in ethtool output" % line)
        letters.add(by_name[line])
    return "".join(c for c in HASH_LETTERS if c in letters)


# -- coalesce -----------------------------------------------------------------------------------


def parse_coalesce(text):
    """``ethtool -c IF`` → {adaptive_rx, adaptive_tx: bool|None, rx_usecs, ...: int|None}.

    None is ethtool's ``n/a``: the driver does not report (and cannot set) that parameter.
    """
    text = text or ""
    if "Coalesce parameters for" not in text:
        raise EthtoolParseError("cannot read coalesce parameters from ethtool output %r" % text[:200])
    out = dict((f, None) for f in COALESCE_FIELDS)
    m = re.search(r"^Adaptive RX:\s*(\S+)\s+TX:\s*(\S+)", text, re.M)
    if m:
        for field, value in zip(("adaptive_rx", "adaptive_tx"), m.groups()):
            out[field] = {"on": True, "off": False}.get(value)
    for field in ("rx_usecs", "rx_frames", "tx_usecs", "tx_frames"):
        m = re.search(r"^%s:\s*(\S+)\s*$" % field.replace("_", "-"), text, re.M)
        if m and m.group(1).isdigit():
            out[field] = int(m.group(1))
    return out


def coalesce_args(current, want):
    """Arguments after ``-C IF`` for the fields of ``want`` (not None) that differ."""
    args = []
    for field in COALESCE_FIELDS:
        value = want.get(field)
        if value is None or current.get(field) == value:
            continue
        name = field.replace("_", "-")
        args += [name, _onoff(value) if isinstance(value, bool) else str(value)]
    return args
