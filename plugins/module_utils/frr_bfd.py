# -*- coding: utf-8 -*-
# Copyright: xdp_bfd.fastpath developers
# GNU General Public License v2.0 or later (see LICENSE or https://www.gnu.org/licenses/old-licenses/gpl-2.0.txt),
# which includes version 3 of the License (https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-2.0-or-later

"""FRR bfdd peer configuration: parse ``show running-config bfd``, compute vtysh lines.

Pure functions over plain data so the module stays thin and the logic is testable
without FRR. Written against FRR 8.4's output (checked on 8.4.4), which:

* prints a peer header as ``peer ADDR [multihop] [local-address ADDR] [vrf NAME] [interface IFNAME]``;
* omits every setting that has its default value (so an explicit default reads back as absent);
* has no ``no`` form for the timers or the multiplier: they are reset by setting the default;
* resets ``profile`` with ``no profile NAME`` and the flags with ``no echo-mode`` etc.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import json

from ansible_collections.xdp_bfd.fastpath.plugins.module_utils import ifname

# Settings a peer carries, in the order commands are rendered (shutdown is placed
# first or last by render_peer_update, see there).
SETTINGS = (
    "profile",
    "detect_multiplier",
    "transmit_interval",
    "receive_interval",
    "echo_mode",
    "echo_interval",
    "echo_receive_interval",
    "passive_mode",
    "minimum_ttl",
    "shutdown",
)

KEY_FIELDS = ("peer", "multihop", "local_address", "vrf", "interface")

# FRR 8.4 defaults (bfdd.h: BFD_DEFDETECTMULT, BFD_DEFDESIREDMINTX, BFD_DEFREQUIREDMINRX,
# BFD_DEF_DES_MIN_ECHO_TX, BFD_DEF_REQ_MIN_ECHO_RX, BFD_DEF_MHOP_TTL).
DEFAULTS = {
    "profile": None,
    "detect_multiplier": 3,
    "transmit_interval": 300,
    "receive_interval": 300,
    "echo_mode": False,
    "echo_interval": 50,
    "echo_receive_interval": 50,
    "passive_mode": False,
    "shutdown": False,
}
MULTIHOP_MIN_TTL_DEFAULT = 254

RANGES = {
    "detect_multiplier": (2, 255),
    "transmit_interval": (10, 60000),
    "receive_interval": (10, 60000),
    "echo_interval": (10, 60000),
    "echo_receive_interval": (10, 60000),  # or 0: disabled
    "minimum_ttl": (1, 254),
}

DEFAULT_VRF = "default"
PROFILE_NAME_MAX = 64  # FRR's YANG model refuses longer names


class BfdConfigError(ValueError):
    """Input that FRR would refuse, or output we cannot read: the message says which and why."""


# -- keys ---------------------------------------------------------------------------------


def _addr(value, what):
    try:
        return ipaddress.ip_address(str(value).strip())
    except ValueError:
        raise BfdConfigError("%s %r is not an IPv4 or IPv6 address" % (what, value))


def normalize_key(entry):
    """The identity of a peer as a tuple (peer, multihop, local_address, vrf, interface).

    Addresses are compressed (``fd00:bfd:1:0::2`` and ``fd00:bfd:1::2`` are one peer), the
    default VRF is spelled ``default`` whether given or not, absent fields are None.
    """
    peer = _addr(entry.get("peer"), "peer")
    local = entry.get("local_address")
    if local not in (None, ""):
        local_ip = _addr(local, "local_address")
        if local_ip.version != peer.version:
            raise BfdConfigError(
                "peer %s and local_address %s are not the same address family" % (peer, local_ip)
            )
        local = local_ip.compressed
    else:
        local = None
    vrf = entry.get("vrf") or DEFAULT_VRF
    interface = entry.get("interface") or None
    return (peer.compressed, bool(entry.get("multihop")), local, vrf, interface)


def key_dict(key):
    return dict(zip(KEY_FIELDS, key))


def key_text(key):
    """Human form of a key for messages, e.g. ``198.19.0.2 interface eth0``."""
    return peer_header(key)[len("peer "):]


def peer_header(key):
    """The vtysh line that opens (or, prefixed with ``no``, deletes) a peer."""
    peer, multihop, local, vrf, interface = key
    words = ["peer", peer]
    if multihop:
        words.append("multihop")
    if local:
        words += ["local-address", local]
    if vrf and vrf != DEFAULT_VRF:
        words += ["vrf", vrf]
    if interface:
        words += ["interface", interface]
    return " ".join(words)


def defaults_for(key):
    """A complete peer (key fields and every setting) holding FRR's defaults."""
    peer = key_dict(key)
    peer.update(DEFAULTS)
    peer["minimum_ttl"] = MULTIHOP_MIN_TTL_DEFAULT if key[1] else None
    return peer


# -- validation ---------------------------------------------------------------------------


def validate(entry):
    """Refuse, before anything runs, what FRR 8.4 would refuse half-way through a batch."""
    key = normalize_key(entry)
    _peer, multihop, local, _vrf, interface = key
    name = key_text(key)
    if multihop and not local:
        raise BfdConfigError("peer %s: multihop needs local_address (FRR: local-address is required)" % name)
    if multihop and interface:
        raise BfdConfigError("peer %s: interface cannot be set on a multihop peer (FRR refuses it)" % name)
    if not multihop:
        if entry.get("minimum_ttl") is not None:
            raise BfdConfigError("peer %s: minimum_ttl applies to multihop peers only" % name)
    else:
        if entry.get("echo_mode"):
            raise BfdConfigError("peer %s: echo_mode is only available for single-hop peers" % name)
        # FRR's defaults are what gathered reports for a multihop peer too: fed
        # back (the resource-module round trip) they ask for nothing.
        for field in ("echo_interval", "echo_receive_interval"):
            if entry.get(field) not in (None, DEFAULTS[field]):
                raise BfdConfigError("peer %s: %s is only available for single-hop peers" % (name, field))
    for field, (low, high) in RANGES.items():
        value = entry.get(field)
        if value is None:
            continue
        if field == "echo_receive_interval" and value == 0:
            continue
        if not low <= int(value) <= high:
            extra = " (or 0 to disable)" if field == "echo_receive_interval" else ""
            raise BfdConfigError(
                "peer %s: %s %s is outside %d-%d%s" % (name, field, value, low, high, extra)
            )
    peer_ip = ipaddress.ip_address(key[0])
    if peer_ip.is_link_local and peer_ip.version == 6:
        if multihop:
            raise BfdConfigError("peer %s: a link-local address cannot be used for multihop" % name)
        if not interface:
            raise BfdConfigError("peer %s: a link-local peer needs interface" % name)
    vrf = entry.get("vrf")
    if vrf is not None and _bad_word(vrf):
        raise BfdConfigError("peer %s: vrf %r is not a valid VRF name" % (name, vrf))
    if interface is not None and not ifname.valid(interface):
        raise BfdConfigError("peer %s: interface %r is not a valid interface name" % (name, interface))
    profile = entry.get("profile")
    if profile is not None and (not 1 <= len(profile) <= PROFILE_NAME_MAX or _bad_word(profile)):
        raise BfdConfigError(
            "peer %s: profile %r is not a valid profile name (1-%d characters, no spaces)"
            % (name, profile, PROFILE_NAME_MAX)
        )
    return key


def _bad_word(word):
    return not word or any(c.isspace() for c in word)


def validate_all(entries):
    """Validate a config list; returns {key: entry}, refusing the same peer twice."""
    seen = {}
    for entry in entries or []:
        key = validate(entry)
        if key in seen:
            raise BfdConfigError("peer %s is listed twice in config" % key_text(key))
        seen[key] = entry
    return seen


# -- parsing --------------------------------------------------------------------------------


def _parse_header(words, line):
    # words: everything after "peer"
    if not words:
        raise BfdConfigError("cannot parse bfd peer line %r" % line)
    entry = {"peer": words[0], "multihop": False}
    i = 1
    names = {"local-address": "local_address", "vrf": "vrf", "interface": "interface"}
    while i < len(words):
        word = words[i]
        if word == "multihop":
            entry["multihop"] = True
            i += 1
        elif word in names and i + 1 < len(words):
            entry[names[word]] = words[i + 1]
            i += 2
        else:
            raise BfdConfigError("cannot parse bfd peer line %r (at %r)" % (line, word))
    return normalize_key(entry)


def _int(value, line):
    try:
        return int(value)
    except ValueError:
        raise BfdConfigError("cannot parse bfd setting %r" % line)


def _apply_setting(peer, words, line):
    """Fold one indented line of a peer block into ``peer``; unknown lines are ignored."""
    negate = words[0] == "no"
    if negate:
        words = words[1:]
    if not words:
        return
    head = words[0]
    flags = {"echo-mode": "echo_mode", "passive-mode": "passive_mode", "shutdown": "shutdown"}
    numbers = {
        "detect-multiplier": "detect_multiplier",
        "transmit-interval": "transmit_interval",
        "receive-interval": "receive_interval",
        "minimum-ttl": "minimum_ttl",
    }
    if head in flags and len(words) == 1:
        peer[flags[head]] = not negate
    elif negate:
        return
    elif head in numbers and len(words) == 2:
        peer[numbers[head]] = _int(words[1], line)
    elif head == "profile" and len(words) == 2:
        peer["profile"] = words[1]
    elif head == "echo-interval" and len(words) == 2:  # older spelling: both directions
        peer["echo_interval"] = peer["echo_receive_interval"] = _int(words[1], line)
    elif head == "echo" and len(words) == 3 and words[1] == "transmit-interval":
        peer["echo_interval"] = _int(words[2], line)
    elif head == "echo" and len(words) == 3 and words[1] == "receive-interval":
        peer["echo_receive_interval"] = 0 if words[2] == "disabled" else _int(words[2], line)


def _bfd_node(text):
    """``(indent, words, line)`` for each ``bfd`` line (indent 0) of ``show running-config bfd`` and each
    line inside its block.

    FRR indents a block's header by one space and its settings by two; that, not the
    ``exit`` lines (which older releases do not print), delimits the blocks.
    """
    in_bfd = False
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line.startswith("!"):
            continue
        indent = len(raw) - len(raw.lstrip())
        if indent == 0:
            in_bfd = line == "bfd"
        if in_bfd:
            yield indent, line.split(), line


def parse_running_config(text):
    """Peers of the ``bfd`` block of ``show running-config bfd``, as complete dicts.

    Every setting is present; FRR omits defaults, so those are filled in. Profiles
    (``profile NAME`` blocks directly under ``bfd``) are skipped: this manages peers.
    """
    peers = []
    current = None  # the peer whose settings follow, None inside a profile
    for indent, words, line in _bfd_node(text):
        if indent <= 1:
            current = None
            if indent == 1 and words[0] == "peer":
                current = defaults_for(_parse_header(words[1:], line))
                peers.append(current)
        elif current is not None:
            _apply_setting(current, words, line)
    return peers


def parse_profiles(text):
    """The names of the ``profile NAME`` blocks of ``show running-config bfd``."""
    return {
        words[1]
        for indent, words, _line in _bfd_node(text)
        if indent == 1 and words[0] == "profile" and len(words) == 2
    }


def check_profiles(config, profiles):
    """Refuse a peer naming a profile FRR does not define: FRR takes the name and applies nothing."""
    for entry in config or []:
        name = entry.get("profile")
        if name is not None and name not in profiles:
            raise BfdConfigError(
                "peer %s: profile %r is not defined in FRR's bfd configuration (defined: %s)"
                % (key_text(normalize_key(entry)), name, ", ".join(sorted(profiles)) or "none")
            )


def parse_interfaces_json(text):
    """``show interface vrf all json`` as {name: vrf}: the interfaces zebra has from the kernel.

    Pseudo interfaces (named in FRR's configuration, absent from the kernel) are left out.
    """
    text = (text or "").strip()
    try:
        data = json.loads(text or "{}")
    except ValueError as e:
        raise BfdConfigError("cannot parse 'show interface vrf all json' output: %s" % e)
    if not isinstance(data, dict):
        raise BfdConfigError("'show interface vrf all json' did not return an object")
    return dict(
        (name, info.get("vrfName") or "default")
        for name, info in data.items()
        if isinstance(info, dict) and not info.get("pseudoInterface")
    )


def check_interfaces(config, interfaces):
    """Refuse a peer on an interface the host does not have (in the peer's VRF).

    FRR takes the name, never brings the session up, and bfdd never hands it to the engine.
    """
    for entry in config or []:
        name = entry.get("interface")
        if not name:
            continue
        vrf = entry.get("vrf") or "default"
        where = interfaces.get(name)
        if where is None:
            raise BfdConfigError(
                "peer %s: interface %s does not exist on this host (interfaces: %s); FRR would take the "
                "peer, never bring it up, and bfdd would never hand it to the engine"
                % (key_text(normalize_key(entry)), name, ", ".join(sorted(interfaces)) or "none")
            )
        if where != vrf:
            raise BfdConfigError(
                "peer %s: interface %s is in vrf %s, not in vrf %s" % (key_text(normalize_key(entry)), name, where, vrf)
            )


def parse_peers_json(text):
    """``show bfd peers json`` as a list (FRR prints nothing at all when there are none)."""
    text = (text or "").strip()
    if not text:
        return []
    try:
        data = json.loads(text)
    except ValueError as e:
        raise BfdConfigError("cannot parse 'show bfd peers json' output: %s" % e)
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise BfdConfigError("'show bfd peers json' did not return a list")
    return data


def status_key(status):
    """The key of a ``show bfd peers json`` entry (same shape as normalize_key)."""
    return normalize_key(
        {
            "peer": status.get("peer"),
            "multihop": status.get("multihop", False),
            "local_address": status.get("local"),
            "vrf": status.get("vrf"),
            "interface": status.get("interface"),
        }
    )


# -- rendering ------------------------------------------------------------------------------


def setting_line(field, value, old=None):
    """The vtysh line that sets ``field`` to ``value`` (``old``: the value it replaces)."""
    if field == "profile":
        return "profile %s" % value if value is not None else "no profile %s" % old
    if field in ("echo_mode", "passive_mode", "shutdown"):
        word = field.replace("_", "-")
        return word if value else "no %s" % word
    if field == "echo_interval":
        return "echo transmit-interval %d" % value
    if field == "echo_receive_interval":
        return "echo receive-interval %s" % ("disabled" if value == 0 else "%d" % value)
    if field == "minimum_ttl":
        return "minimum-ttl %d" % value
    return "%s %d" % (field.replace("_", "-"), value)


def peer_update_lines(have, target):
    """Lines (inside the peer node) taking ``have`` to ``target``; fields None in target are left.

    Shutting down goes first (no packets with half-applied timers), coming back up goes last
    (the session restarts with its final settings).
    """
    lines = []
    first = []
    last = []
    for field in SETTINGS:
        want = target.get(field)
        if want is None and field != "profile":
            continue
        if field == "profile" and "profile" not in target:
            continue
        cur = have.get(field)
        if want == cur:
            continue
        if field == "profile" and want is None and cur is None:
            continue
        line = setting_line(field, want, cur)
        if field == "shutdown":
            (first if want else last).append(line)
        else:
            lines.append(line)
    return first + lines + last


def _with_defaults(key, entry):
    """``entry`` on top of FRR's defaults: what a replaced/overridden peer must end up as."""
    full = defaults_for(key)
    for field in SETTINGS:
        if entry.get(field) is not None:
            full[field] = entry[field]
    return full


def _merged_target(entry):
    """Only what the user gave; a merged profile of None means 'leave the profile alone'."""
    target = {}
    for field in SETTINGS:
        if entry.get(field) is not None:
            target[field] = entry[field]
    return target


def compute(have_list, want_list, state):
    """Commands and the predicted end state.

    Returns (lines, after) where ``lines`` are the vtysh lines to send after
    ``configure terminal`` (empty when nothing is to change) and ``after`` the list of
    peers once they are applied.
    """
    have = {}
    for p in have_list:
        have[normalize_key(p)] = p
    want = validate_all(want_list)
    after = dict((k, dict(v)) for k, v in have.items())
    body = []

    if state == "deleted":
        # Only an absent config means every peer: an empty list (a template that produced no
        # peers to remove) deletes nothing.
        targets = list(want) if want_list is not None else list(have)
        for key in targets:
            if key in have:
                body.append("no " + peer_header(key))
                del after[key]
    else:
        if state == "overridden":
            for key in have:
                if key not in want:
                    body.append("no " + peer_header(key))
                    del after[key]
        for key, entry in want.items():
            current = have.get(key) or defaults_for(key)
            if state == "merged":
                target = _merged_target(entry)
            elif state in ("replaced", "overridden"):
                target = _with_defaults(key, entry)
            else:
                raise BfdConfigError("state %s computes no commands" % state)
            lines = peer_update_lines(current, target)
            if key in have and not lines:
                continue
            body.append(peer_header(key))
            body.extend(lines)
            body.append("exit")
            new = dict(current)
            new.update(target)
            after[key] = new

    commands = ["bfd"] + body + ["exit"] if body else []
    return commands, sorted_peers(after.values())


def sorted_peers(peers):
    return sorted(peers, key=lambda p: _sort_key(normalize_key(p)))


def _sort_key(key):
    peer, multihop, local, vrf, interface = key
    ip = ipaddress.ip_address(peer)
    return (vrf, ip.version, int(ip), multihop, local or "", interface or "")


# The order FRR 8.4 prints a peer's settings in.
DISPLAY_ORDER = (
    "profile",
    "detect_multiplier",
    "transmit_interval",
    "receive_interval",
    "shutdown",
    "passive_mode",
    "echo_mode",
    "echo_interval",
    "echo_receive_interval",
    "minimum_ttl",
)


def render_config(peers):
    """Peers as FRR prints them (non-default settings only): the text used for --diff."""
    out = []
    for p in sorted_peers(peers):
        key = normalize_key(p)
        default = defaults_for(key)
        out.append(peer_header(key))
        for field in DISPLAY_ORDER:
            if p.get(field) != default[field]:
                out.append(" " + setting_line(field, p.get(field), default[field]))
        out.append("exit")
    return "\n".join(out) + ("\n" if out else "")


# What vtysh prints when FRR refuses a line; FRR 8.4 exits 0 after some of them (YANG errors).
REFUSALS = (
    "% Failed to edit configuration",
    "% Configuration failed",
    "% Unknown command",
    "% Command incomplete",
    "% Ambiguous command",
    "YANG error",
)


def refused(output):
    """True when vtysh's output says FRR refused a line, whatever its exit status."""
    return any(marker in (output or "") for marker in REFUSALS)


def condense(output):
    """vtysh's multi-line output as one line for a message."""
    return " ".join(line.strip() for line in (output or "").splitlines() if line.strip())


def vtysh_argv(vtysh, vty_socket, lines):
    """One vtysh invocation running ``lines`` in order (each as ``-c LINE``)."""
    argv = [vtysh]
    if vty_socket:
        argv += ["--vty_socket", vty_socket]
    for line in lines:
        argv += ["-c", line]
    return argv
