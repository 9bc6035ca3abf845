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
module: reserved_ports_info
short_description: Read net.ipv4.ip_local_reserved_ports and merge a port into it, as the kernel spells it
version_added: 0.1.0
description:
  - Reads the reserved-port list in effect (C(/proc/sys/net/ipv4/ip_local_reserved_ports)) and
    returns it (RV(live)), the list with O(port) added (RV(merged)), and the live entries that
    overlap O(forbidden) (RV(conflicts)).
  - Both lists are spelled exactly like the kernel's bitmap printer (ascending, adjacent ports
    joined into ranges), so once RV(merged) is applied (the host_tuning role writes it to
    C(/etc/sysctl.d/)) the next run reads back the same text and changes nothing.
  - The engine binds its per-session source ports in 65472-65535; a reservation there blocks
    even explicit binds, so the role refuses to go on when RV(conflicts) is not empty.
  - Changes nothing.
author:
  - xdp_bfd.fastpath developers (@xdp-bfd)
extends_documentation_fragment:
  - xdp_bfd.fastpath.attributes
  - xdp_bfd.fastpath.attributes.info_module
options:
  port:
    description: The port to add to the reservation (the bfdd <-> engine dataplane port).
    type: int
    required: true
  forbidden:
    description:
      - First and last port of the range nothing may reserve (the engine's source ports).
    type: list
    elements: int
    default: [65472, 65535]
seealso:
  - name: ip_local_reserved_ports
    description: The kernel's documentation of the setting.
    link: https://docs.kernel.org/networking/ip-sysctl.html
"""

EXAMPLES = r"""
- name: Read the reservation in effect, with the dataplane port added
  xdp_bfd.fastpath.reserved_ports_info:
    port: 50700
  register: reserved

- name: Nothing reserves the engine's source ports
  ansible.builtin.assert:
    that: reserved.conflicts | length == 0
"""

RETURN = r"""
live:
  description: What the kernel holds now, as it prints it (V("") for none).
  returned: always
  type: str
  sample: "4000-4010,50700"
merged:
  description: RV(live) with O(port) added, spelled the same way.
  returned: always
  type: str
  sample: "4000-4010,50700"
conflicts:
  description: The entries of RV(live) that overlap O(forbidden), one string each.
  returned: always
  type: list
  elements: str
  sample: ["65500"]
"""

from ansible.module_utils.basic import AnsibleModule

# Unit tests point this at a file of their own.
PROC = "/proc/sys/net/ipv4/ip_local_reserved_ports"


def parse(text):
    """[(lo, hi), ...] from a list such as ``4000-4010,50700``."""
    ranges = []
    for raw in text.replace("\n", "").split(","):
        part = raw.strip()
        if part:
            lo, _sep, hi = part.partition("-")
            ranges.append((int(lo), int(hi or lo)))
    return ranges


def spell(ranges):
    """The kernel's spelling: ascending, overlapping and adjacent ranges joined."""
    merged = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return ",".join(str(lo) if lo == hi else "%d-%d" % (lo, hi) for lo, hi in merged)


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            port=dict(type="int", required=True),
            forbidden=dict(type="list", elements="int", default=[65472, 65535]),
        ),
        supports_check_mode=True,
    )
    port = module.params["port"]
    forbidden = module.params["forbidden"]
    if not 1 <= port <= 65535:
        module.fail_json(msg="port must be 1-65535, got %d" % port)
    if len(forbidden) != 2 or forbidden[0] > forbidden[1]:
        module.fail_json(msg="forbidden must be [FIRST, LAST] with FIRST <= LAST, got %r" % (forbidden,))
    lo_forbidden, hi_forbidden = forbidden
    try:
        with open(PROC) as f:
            live_text = f.read().strip()
    except (IOError, OSError) as e:
        module.fail_json(msg="cannot read %s: %s" % (PROC, e.strerror))
    try:
        live = parse(live_text)
    except ValueError:
        module.fail_json(msg="cannot read %s: %r is not a port list" % (PROC, live_text))
    conflicts = [spell([r]) for r in live if r[0] <= hi_forbidden and r[1] >= lo_forbidden]
    module.exit_json(changed=False, live=spell(live), merged=spell(live + [(port, port)]), conflicts=conflicts)


def main():
    run_module()


if __name__ == "__main__":
    main()
