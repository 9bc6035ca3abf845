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
module: pcie_aspm
short_description: Disable PCIe ASPM L1 on a NIC's link with setpci
version_added: 0.1.0
description:
  - Finds the PCI function behind a network interface (the C(/sys/class/net/IF/device) link,
    resolved) and the port at the other end of its PCIe link (the bridge above it in the sysfs
    path - the root port when the NIC sits directly on one), reads each one's Link Control with
    C(lspci -vvv -s BDF) (C(LnkCtl:) C(ASPM L1 Enabled) / C(ASPM L0s L1 Enabled) / C(ASPM Disabled)),
    and where the state asks for it clears the ASPM Control bits with setpci.
  - The write is C(setpci -s BDF CAP_EXP+10.w=0:2) (value 0 under mask 2 - only bit 1, L1, of
    the Link Control register changes; mask 3 for O(state=disabled)). The register is read with
    C(setpci -s BDF CAP_EXP+10.w) first and reported, and lspci is read again afterwards to
    check the link took it. The NIC is written before its upstream port, the order the kernel
    uses to disable ASPM.
  - Why - on the seed testbed (Intel I210) the NIC's link waking from L1 was most of the reply
    latency (118 us p50 with L1, 33 us without). Where the firmware keeps ASPM to itself
    (C(FADT indicates ASPM is unsupported)), the kernel's C(pcie_aspm) options do nothing and
    this is the way to clear it.
  - An interface without a device link (veth, bridge, VLAN, loopback) or whose device is not on
    PCI returns C(changed=false) and RV(pci) null with a message; it is not an error.
  - The setting does not survive a reboot or a link reset; run it at boot.
author:
  - xdp_bfd.fastpath developers (@xdp-bfd)
extends_documentation_fragment:
  - xdp_bfd.fastpath.attributes
attributes:
  check_mode:
    support: full
    details:
      - Reads lspci and the register and reports what would change; never writes.
  diff_mode:
    support: full
    details:
      - Returns each device's ASPM state before and after.
options:
  interface:
    description: The network interface whose PCIe link to change, e.g. V(eth1).
    type: str
    required: true
  state:
    description:
      - V(l1_disabled) clears ASPM L1 where it is enabled and leaves L0s as it is.
      - V(disabled) clears both L0s and L1.
    type: str
    choices: [l1_disabled, disabled]
    default: l1_disabled
  upstream:
    description:
      - Also change the port at the other end of the NIC's link (its root port, or a switch's
        downstream port). Both ends must agree for the link to enter L1; clearing both is what
        the operator's manual asks for.
    type: bool
    default: true
notes:
  - Needs root; lspci shows C(Capabilities - <access denied>) otherwise, and the module fails
    saying so.
  - On a multi-function NIC only the interface's own function is changed; PCIe lets the link
    enter L1 only when every function permits it, and the upstream port refuses it anyway.
requirements:
  - pciutils (lspci, setpci)
seealso:
  - module: xdp_bfd.fastpath.nic_tuning
"""

EXAMPLES = r"""
- name: No ASPM L1 on the BFD port's link (NIC and root port)
  xdp_bfd.fastpath.pcie_aspm:
    interface: eth1

- name: Neither L0s nor L1, NIC side only
  xdp_bfd.fastpath.pcie_aspm:
    interface: eth1
    state: disabled
    upstream: false
"""

RETURN = r"""
pci:
  description:
    - Where the interface sits on PCI; null for an interface that is not a PCI device.
    - C(function) is the NIC's function, C(upstream) the port at the other end of its link,
      C(root_port) the first bridge under the host bridge (null when the NIC is on the root bus).
  returned: always
  type: dict
  sample: {function: "0000:03:00.0", upstream: "0000:00:1c.0", root_port: "0000:00:1c.0"}
devices:
  description:
    - One entry per device looked at, NIC first. C(aspm_before)/C(aspm_after) are lspci's words
      (V(L1 Enabled), V(L0s L1 Enabled), V(L0s Enabled), V(Disabled)); C(lnkctl_before) and
      C(lnkctl_after) the Link Control register (hex) where it was read; C(supported) false for
      a device without a PCIe capability.
  returned: always
  type: list
  elements: dict
  sample:
    - {bdf: "0000:03:00.0", role: function, supported: true, changed: true,
       aspm_before: L1 Enabled, aspm_after: Disabled, lnkctl_before: "0x0042", lnkctl_after: "0x0040"}
    - {bdf: "0000:00:1c.0", role: upstream, supported: true, changed: true,
       aspm_before: L1 Enabled, aspm_after: Disabled, lnkctl_before: "0x0042", lnkctl_after: "0x0040"}
commands:
  description: The setpci writes run (in check mode, that would be run).
  returned: always
  type: list
  elements: list
  sample: [[/usr/bin/setpci, -s, "0000:03:00.0", "CAP_EXP+10.w=0:2"]]
msg:
  description: Why nothing was done, for an interface that is not a PCI device.
  returned: when RV(pci) is null
  type: str
  sample: veth0 has no device link in /sys/class/net (a virtual interface); no PCIe link to change
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.xdp_bfd.fastpath.plugins.module_utils import ifname
from ansible_collections.xdp_bfd.fastpath.plugins.module_utils.command import Runner

# Unit tests point this at a fake sysfs tree.
SYS_CLASS_NET = "/sys/class/net"

BDF_RE = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
LNKCTL_RE = re.compile(r"^\s*LnkCtl:\s+ASPM (Disabled|L0s Enabled|L1 Enabled|L0s L1 Enabled)", re.M)
LINK_CONTROL = "CAP_EXP+10.w"
ASPM_L0S = 0x1
ASPM_L1 = 0x2


def pci_location(interface):
    """{function, upstream, root_port} for an interface, or (None, why) when it is not on PCI."""
    base = os.path.join(SYS_CLASS_NET, interface)
    if not os.path.lexists(base):
        return None, None
    device = os.path.join(base, "device")
    if not os.path.lexists(device):
        return None, "%s has no device link in %s (a virtual interface); no PCIe link to change" % (
            interface, SYS_CLASS_NET)
    real = os.path.realpath(device)
    bdfs = [part for part in real.split(os.sep) if BDF_RE.match(part)]
    if not bdfs:
        return None, "%s is not a PCI device (%s); no PCIe link to change" % (interface, real)
    return {
        "function": bdfs[-1],
        "upstream": bdfs[-2] if len(bdfs) > 1 else None,
        "root_port": bdfs[0] if len(bdfs) > 1 else None,
    }, None


def words_to_bits(words):
    return {"Disabled": 0, "L0s Enabled": ASPM_L0S, "L1 Enabled": ASPM_L1, "L0s L1 Enabled": ASPM_L0S | ASPM_L1}[words]


def bits_to_words(bits):
    return {0: "Disabled", ASPM_L0S: "L0s Enabled", ASPM_L1: "L1 Enabled", ASPM_L0S | ASPM_L1: "L0s L1 Enabled"}[bits]


class Aspm(object):
    def __init__(self, module):
        self.module = module
        self.runner = Runner(module)
        self.lspci = self.runner.binary("lspci")
        self.setpci = self.runner.binary("setpci")
        self.mask = ASPM_L1 if module.params["state"] == "l1_disabled" else ASPM_L0S | ASPM_L1
        self.commands = self.runner.commands

    def read_aspm(self, bdf):
        """lspci's words for the device's ASPM control, or None without a PCIe capability."""
        out = self.runner.run_or_fail([self.lspci, "-vvv", "-s", bdf])
        if not out.strip():
            self.runner.fail("lspci -vvv -s %s printed nothing: no such PCI device" % bdf)
        m = LNKCTL_RE.search(out)
        if m:
            return m.group(1)
        if "<access denied>" in out:
            self.runner.fail("lspci cannot read the capabilities of %s (<access denied>): run as root" % bdf)
        return None

    def read_lnkctl(self, bdf):
        out = self.runner.run_or_fail([self.setpci, "-s", bdf, LINK_CONTROL]).strip()
        if not re.match(r"^[0-9a-fA-F]{1,4}$", out):
            self.runner.fail("setpci -s %s %s returned %r, not a 16-bit value" % (bdf, LINK_CONTROL, out))
        return int(out, 16)

    def device(self, bdf, role):
        report = {"bdf": bdf, "role": role, "supported": True, "changed": False,
                  "aspm_before": None, "aspm_after": None, "lnkctl_before": None, "lnkctl_after": None}
        words = self.read_aspm(bdf)
        if words is None:
            report.update(supported=False, msg="%s has no PCIe Link Control (no LnkCtl in lspci)" % bdf)
            return report
        report["aspm_before"] = report["aspm_after"] = words
        bits = words_to_bits(words)
        if not bits & self.mask:
            return report
        value = self.read_lnkctl(bdf)
        if (value & 0x3) != bits:
            self.runner.fail("%s: lspci says ASPM %s but Link Control reads 0x%04x" % (bdf, words, value))
        new = value & ~self.mask
        argv = [self.setpci, "-s", bdf, "%s=0:%x" % (LINK_CONTROL, self.mask)]
        self.commands.append(argv)
        report.update(changed=True, lnkctl_before="0x%04x" % value, lnkctl_after="0x%04x" % new,
                      aspm_after=bits_to_words(bits & ~self.mask))
        if self.module.check_mode:
            return report
        self.runner.run_or_fail(argv)
        after = self.read_aspm(bdf)
        report["aspm_after"] = after
        if after is None or words_to_bits(after) & self.mask:
            self.runner.fail("setpci wrote %s on %s but lspci still shows ASPM %s" % (LINK_CONTROL, bdf, after))
        return report


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            interface=dict(type="str", required=True),
            state=dict(type="str", default="l1_disabled", choices=["l1_disabled", "disabled"]),
            upstream=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    iface = module.params["interface"]
    if not ifname.valid(iface):
        module.fail_json(msg="interface %r is not a valid interface name" % iface)

    pci, why = pci_location(iface)
    if pci is None and why is None:
        module.fail_json(msg="no network interface named %s (nothing in %s)" % (iface, SYS_CLASS_NET))
    if pci is None:
        module.exit_json(changed=False, interface=iface, pci=None, devices=[], commands=[], msg=why)

    aspm = Aspm(module)
    devices = [aspm.device(pci["function"], "function")]
    if module.params["upstream"] and pci["upstream"]:
        devices.append(aspm.device(pci["upstream"], "upstream"))

    result = dict(
        changed=any(d["changed"] for d in devices),
        interface=iface,
        pci=pci,
        devices=devices,
        commands=aspm.commands,
    )
    if module._diff:
        result["diff"] = dict(
            before=dict((d["bdf"], d["aspm_before"]) for d in devices),
            after=dict((d["bdf"], d["aspm_after"]) for d in devices),
        )
    module.exit_json(**result)


def main():
    run_module()


if __name__ == "__main__":
    main()
