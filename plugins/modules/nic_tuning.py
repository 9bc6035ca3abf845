#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: xdp_bfd.fastpath developers
# GNU General Public License v2.0 or later (see LICENSE or https://www.gnu.org/licenses/old-licenses/gpl-2.0.txt),
# which includes version 3 of the License (https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-2.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nic_tuning
short_description: Set NIC flow control, RSS hash fields and interrupt coalescing with ethtool
version_added: 0.1.0
description:
  - Tunes one network interface for BFD under load, as the operator's manual describes for igb
    ports - flow control off (C(ethtool -A IF autoneg off rx off tx off)), so one queue that falls
    behind cannot make every queue drop; UDP hashed on ports as well as addresses
    (C(ethtool -N IF rx-flow-hash udp4 sdfn), and C(udp6)), so a flood from one address spreads
    over the queues; and, where microseconds of reply latency matter, interrupt coalescing
    (C(ethtool -C IF rx-usecs 0)).
  - Reads each setting first (C(ethtool -a), C(ethtool -n IF rx-flow-hash FLOW), C(ethtool -c)),
    changes only what differs, then reads it back and fails if the driver did not take it.
  - A setting the driver does not support (ethtool says C(Operation not supported), or, for
    rx-flow-hash, the driver refuses the field set) is reported with C(supported=false) instead of
    failing, unless O(strict=true). So is a coalescing parameter the driver reports as C(n/a).
  - Leaving a parameter out (or null) leaves that setting alone.
author:
  - xdp_bfd.fastpath developers (@xdp-bfd)
extends_documentation_fragment:
  - xdp_bfd.fastpath.attributes
attributes:
  check_mode:
    support: full
    details:
      - Reads the current values and reports what would change without running any C(ethtool -A/-N/-C).
  diff_mode:
    support: full
    details:
      - Returns the requested settings before and after.
options:
  interface:
    description: The network interface, e.g. V(eth1).
    type: str
    required: true
  pause:
    description: Ethernet flow control (pause frames), C(ethtool -A).
    type: dict
    suboptions:
      autoneg:
        description: Negotiate pause with the link partner.
        type: bool
      rx:
        description: Honour received pause frames.
        type: bool
      tx:
        description: Send pause frames.
        type: bool
  rx_flow_hash:
    description:
      - Fields the NIC hashes to pick a receive queue, per flow type (C(ethtool -N IF rx-flow-hash FLOW LETTERS)).
      - Values are ethtool's letters - V(m) L2 destination address, V(v) VLAN tag, V(t) L3 protocol,
        V(s) IP source, V(d) IP destination, V(f) L4 bytes 0-1 (source port), V(n) L4 bytes 2-3
        (destination port), V(e) GTP TEID, or V(r) alone to discard the flow type. V(sdfn) hashes
        addresses and ports. Order does not matter.
    type: dict
    suboptions:
      tcp4:
        description: TCP over IPv4.
        type: str
      udp4:
        description: UDP over IPv4 (BFD single-hop and multihop).
        type: str
      sctp4:
        description: SCTP over IPv4.
        type: str
      ah4:
        description: IPsec AH over IPv4.
        type: str
      esp4:
        description: IPsec ESP over IPv4.
        type: str
      tcp6:
        description: TCP over IPv6.
        type: str
      udp6:
        description: UDP over IPv6.
        type: str
      sctp6:
        description: SCTP over IPv6.
        type: str
      ah6:
        description: IPsec AH over IPv6.
        type: str
      esp6:
        description: IPsec ESP over IPv6.
        type: str
  coalesce:
    description: Interrupt coalescing (C(ethtool -C)).
    type: dict
    suboptions:
      adaptive_rx:
        description: Adaptive RX coalescing.
        type: bool
      adaptive_tx:
        description: Adaptive TX coalescing.
        type: bool
      rx_usecs:
        description: Microseconds to delay an RX interrupt after a packet arrives (V(0) for none).
        type: int
      rx_frames:
        description: Packets to wait for before an RX interrupt.
        type: int
      tx_usecs:
        description: Microseconds to delay a TX completion interrupt.
        type: int
      tx_frames:
        description: Packets to wait for before a TX completion interrupt.
        type: int
  strict:
    description: Fail instead of reporting C(supported=false) when the driver does not support a setting.
    type: bool
    default: false
notes:
  - Settings made with ethtool last until the driver is reloaded or the host reboots; run this
    at every boot (for example from a role) to keep them.
  - ethtool 6.1 prints rx-flow-hash errors with exit status 0; the module reads the error text
    and the value back, so a refused change is never reported as made.
requirements:
  - ethtool
seealso:
  - module: xdp_bfd.fastpath.pcie_aspm
"""

EXAMPLES = r"""
- name: igb port tuned for BFD under a flood (operator's manual)
  xdp_bfd.fastpath.nic_tuning:
    interface: eth1
    pause:
      autoneg: false
      rx: false
      tx: false
    rx_flow_hash:
      udp4: sdfn
      udp6: sdfn

- name: Lowest reply latency, for half a watt
  xdp_bfd.fastpath.nic_tuning:
    interface: eth1
    coalesce:
      rx_usecs: 0

- name: Refuse to carry on on a NIC that cannot turn flow control off
  xdp_bfd.fastpath.nic_tuning:
    interface: eth1
    pause:
      rx: false
      tx: false
    strict: true
"""

RETURN = r"""
interface:
  description: The interface.
  returned: always
  type: str
  sample: eth1
pause:
  description:
    - The flow-control result; C(before) and C(after) are C(ethtool -a)'s values.
    - C(supported) false means the driver has no flow control to set; C(msg) then says what ethtool said.
  returned: when O(pause) is given
  type: dict
  sample:
    supported: true
    changed: true
    before: {autoneg: true, rx: true, tx: true}
    after: {autoneg: false, rx: false, tx: false}
rx_flow_hash:
  description: Per requested flow type, its result; C(before)/C(after) are letter strings (V("") for none).
  returned: when O(rx_flow_hash) is given
  type: dict
  sample:
    udp4: {supported: true, changed: true, before: sd, after: sdfn}
    udp6: {supported: true, changed: false, before: sdfn, after: sdfn}
coalesce:
  description: The coalescing result; C(before)/C(after) hold every parameter the module knows (null for n/a).
  returned: when O(coalesce) is given
  type: dict
  sample:
    supported: true
    changed: true
    before: {adaptive_rx: false, adaptive_tx: null, rx_usecs: 3, rx_frames: null, tx_usecs: 3, tx_frames: null}
    after: {adaptive_rx: false, adaptive_tx: null, rx_usecs: 0, rx_frames: null, tx_usecs: 3, tx_frames: null}
unsupported:
  description: Names of the requested settings the driver does not support (e.g. V(pause), V(rx_flow_hash.udp6)).
  returned: always
  type: list
  elements: str
  sample: [pause]
commands:
  description: The ethtool commands that changed something (in check mode, that would have).
  returned: always
  type: list
  elements: list
  sample: [[/usr/sbin/ethtool, -A, eth1, autoneg, "off", rx, "off", tx, "off"]]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.xdp_bfd.fastpath.plugins.module_utils import ethtool as et
from ansible_collections.xdp_bfd.fastpath.plugins.module_utils import ifname
from ansible_collections.xdp_bfd.fastpath.plugins.module_utils.command import CommandError, Runner


class Unsupported(Exception):
    pass


def _ethtool_refused(rc, out, err):
    # ethtool 6.1 -N reports "Cannot change RX network flow hashing options: ..." with rc 0.
    return err.startswith("Cannot ")


class Tuner(object):
    def __init__(self, module, runner):
        self.module = module
        self.runner = runner
        self.ethtool = runner.binary("ethtool")
        self.interface = module.params["interface"]
        self.strict = module.params["strict"]
        self.commands = runner.commands
        self.unsupported = []

    def run(self, args, refused_is_unsupported=False):
        argv = [self.ethtool] + args
        try:
            return self.runner.run(argv, refused=_ethtool_refused)
        except CommandError as e:
            unsupported = et.is_unsupported(e.text) or (refused_is_unsupported and "Invalid argument" in e.text)
            if unsupported:
                raise Unsupported("%s: %s" % (" ".join(args), e.text))
            self.runner.fail(e.describe("ethtool %s" % " ".join(args)))

    def item(self, name, read, parse, build, want, predict, refused_is_unsupported=False):
        """Read, compare, set, read back one setting. Returns its report dict."""
        report = {"supported": True, "changed": False, "before": None, "after": None}
        try:
            before = self._parse(parse, self.run(read))
            report["before"] = report["after"] = before
            args, skipped = build(before, want)
            if skipped:
                raise Unsupported(skipped)
            if not args:
                return report
            if self.module.check_mode:
                report.update(changed=True, after=predict(before, want))
                self.commands.append([self.ethtool] + args)
                return report
            self.run(args, refused_is_unsupported)
            report["changed"] = True
            self.commands.append([self.ethtool] + args)
            after = self._parse(parse, self.run(read))
            report["after"] = after
            expected = predict(before, want)
            if after != expected:
                self.runner.fail(
                    "ethtool %s succeeded but %s now reads %r, not %r"
                    % (" ".join(args), name, after, expected)
                )
        except Unsupported as e:
            if self.strict:
                self.runner.fail("%s is not supported by the driver of %s: %s" % (name, self.interface, e))
            self.unsupported.append(name)
            report.update(supported=False, changed=False, after=report["before"], msg=str(e))
        return report

    def _parse(self, parse, text):
        try:
            return parse(text)
        except et.EthtoolParseError as e:
            self.runner.fail(str(e))


def _given(d):
    return dict((k, v) for k, v in (d or {}).items() if v is not None)


def _with_args(head, args):
    """(argv tail, None): ``head + args``, or nothing to run when there are no args."""
    return (head + args if args else []), None


def _update(before, want):
    after = dict(before)
    after.update(want)
    return after


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            interface=dict(type="str", required=True),
            pause=dict(type="dict", options=dict((f, dict(type="bool")) for f in et.PAUSE_FIELDS)),
            rx_flow_hash=dict(type="dict", options=dict((f, dict(type="str")) for f in et.FLOW_TYPES)),
            coalesce=dict(
                type="dict",
                options=dict(
                    adaptive_rx=dict(type="bool"),
                    adaptive_tx=dict(type="bool"),
                    rx_usecs=dict(type="int"),
                    rx_frames=dict(type="int"),
                    tx_usecs=dict(type="int"),
                    tx_frames=dict(type="int"),
                ),
            ),
            strict=dict(type="bool", default=False),
        ),
        required_one_of=[("pause", "rx_flow_hash", "coalesce")],
        supports_check_mode=True,
    )
    p = module.params
    iface = p["interface"]
    if not ifname.valid(iface):
        module.fail_json(msg="interface %r is not a valid interface name" % iface)

    hashes = {}
    for flow, letters in _given(p["rx_flow_hash"]).items():
        try:
            hashes[flow] = et.normalize_hash(letters)
        except et.EthtoolParseError as e:
            module.fail_json(msg="rx_flow_hash.%s: %s" % (flow, e))
    coalesce = _given(p["coalesce"])
    for field, value in coalesce.items():
        if not isinstance(value, bool) and value < 0:
            module.fail_json(msg="coalesce.%s must not be negative, got %d" % (field, value))

    t = Tuner(module, Runner(module, interface=iface))
    result = dict(changed=False, interface=iface)
    diff_before, diff_after = {}, {}

    pause = _given(p["pause"])
    if pause:
        result["pause"] = t.item(
            "pause",
            ["-a", iface],
            et.parse_pause,
            lambda cur, want: _with_args(["-A", iface], et.pause_args(cur, want)),
            pause,
            _update,
        )
        diff_before["pause"], diff_after["pause"] = result["pause"]["before"], result["pause"]["after"]

    if hashes:
        result["rx_flow_hash"] = {}
        for flow in et.FLOW_TYPES:
            if flow not in hashes:
                continue

            def build(cur, want, flow=flow):
                return ((["-N", iface, "rx-flow-hash", flow, want]) if cur != want else [], None)

            report = t.item(
                "rx_flow_hash.%s" % flow,
                ["-n", iface, "rx-flow-hash", flow],
                et.parse_flow_hash,
                build,
                hashes[flow],
                lambda cur, want: want,
                refused_is_unsupported=True,
            )
            result["rx_flow_hash"][flow] = report
            diff_before.setdefault("rx_flow_hash", {})[flow] = report["before"]
            diff_after.setdefault("rx_flow_hash", {})[flow] = report["after"]

    if coalesce:

        def build_coalesce(cur, want):
            na = [f for f in et.COALESCE_FIELDS if f in want and cur.get(f) is None]
            if na:
                return [], "ethtool -c %s reports %s as n/a" % (iface, ", ".join(f.replace("_", "-") for f in na))
            return _with_args(["-C", iface], et.coalesce_args(cur, want))

        result["coalesce"] = t.item("coalesce", ["-c", iface], et.parse_coalesce, build_coalesce, coalesce, _update)
        diff_before["coalesce"], diff_after["coalesce"] = result["coalesce"]["before"], result["coalesce"]["after"]

    reports = [result.get("pause"), result.get("coalesce")] + list((result.get("rx_flow_hash") or {}).values())
    result["changed"] = any(r and r["changed"] for r in reports)
    result["unsupported"] = t.unsupported
    result["commands"] = t.commands
    if module._diff:
        result["diff"] = dict(before=diff_before, after=diff_after)
    module.exit_json(**result)


def main():
    run_module()


if __name__ == "__main__":
    main()
