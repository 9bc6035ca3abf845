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
module: offload_info
short_description: Ask the xdp-bfd engine for fresh stats and say whether the XDP offload is live
version_added: 0.1.0
description:
  - Sends SIGUSR1 to the engine (C(pkill -USR1 -x xdp-bfd), or C(kill -USR1 PID) with the pid
    from O(pidfile)), waits at most O(timeout) seconds for the stats JSON at O(path) to be
    rewritten with a C(generated_at) after the signal, and returns the stats with a verdict.
  - Without O(path), the stats file is found from the running engine itself (see O(path)), so an
    ad-hoc run against a router deployed by the engine role needs no options.
  - The offload is live (RV(offload_live)) when all of these hold, and RV(reasons) lists each
    one that does not
  - C(kernel_tx) is true (the XDP fast path is attached);
  - the dataplane is connected to bfdd, when one is configured (C(dplane) not null);
  - C(sessions_up) equals C(sessions_configured), and at least O(min_sessions) are configured;
  - the stats were written after this module's signal (a stale file proves nothing);
  - every Up session has kernel transmissions (C(kernel_tx_packets) > 0) and its last one is
    recent (C(last_ktx_age_us) at most O(max_ktx_age_us), by default three times the session's
    C(detect_time_us)). An Up session without recent kernel TX is being answered by userspace.
  - with O(frr_peers), every BFD peer bfdd is configured with and has not shut down is Up in
    FRR and has an Up session in the engine that the kernel answers (RV(frr_peers)). The
    engine's own counts cannot show a peer bfdd never handed to it, such as one on a mistyped
    interface.
  - Changes nothing on the host; the stats dump the signal triggers is the engine's normal
    reporting path.
author:
  - xdp_bfd.fastpath developers (@xdp-bfd)
extends_documentation_fragment:
  - xdp_bfd.fastpath.attributes
attributes:
  check_mode:
    support: full
    details:
      - Runs normally in check mode (it only reads; the signal only makes the engine write its stats).
  diff_mode:
    support: none
    details:
      - Nothing is changed, so there is no diff.
options:
  path:
    description:
      - Stats JSON the engine writes on SIGUSR1 (its C(--stats-dump)), read as is.
      - When not given, it is found from the running engine (the one in O(pidfile), else the
        only process named O(process_name)) - the C(--stats-dump) on its command line
        (C(/proc/PID/cmdline)), else the engine's default C(/tmp/bfd_tx_stats.json) - and read
        through C(/proc/PID/root), so that it resolves in the engine's mount namespace (the
        unit's C(PrivateTmp=yes) /tmp, a container's). C(/etc/xdp-bfd/engine.conf) (the engine
        role's C(XDP_BFD_ARGS=)) is read only when the command line cannot be, or when no engine
        runs (then the last dump there is returned as RV(stats), for the operator).
      - When several engines run and neither O(path) nor O(pidfile) says which, nothing is
        signalled and RV(reasons) says so.
    type: path
  pidfile:
    description:
      - File holding the engine's process id. Without it, the engine is found by O(process_name).
    type: path
  process_name:
    description: Exact process name to signal with C(pkill -x) when O(pidfile) is not given.
    type: str
    default: xdp-bfd
  timeout:
    description: Seconds to wait for stats written after the signal.
    type: float
    default: 5
  max_ktx_age_us:
    description:
      - Largest C(last_ktx_age_us) (microseconds) an Up session may report and still count as
        answered by the kernel.
      - By default each session's bound is three times its C(detect_time_us) (3 s when the
        session reports none). The fast path answers every packet from the peer, so a healthy
        session's age stays below one receive interval; three detection times leaves room for
        replies skipped as early without flagging them.
    type: int
  min_sessions:
    description:
      - Fewest configured sessions for the offload to count as live. The default, 1, makes an
        engine with no sessions "not live" (nothing is offloaded); set 0 to accept it.
    type: int
    default: 1
  frr_peers:
    description:
      - Also judge the peers bfdd is configured with (C(vtysh -c 'show bfd peers json')).
      - V(auto) does when the engine has a dataplane (bfdd drives it; C(dplane) in the stats is
        not null) and vtysh is installed; V(always) does whatever the engine runs, and counts a
        missing vtysh as a reason; V(never) does not.
    type: str
    choices: [auto, always, never]
    default: auto
  vtysh_socket:
    description: Directory of FRR's vty sockets (C(vtysh --vty_socket)), for an FRR not in the default place.
    type: path
notes:
  - The module never fails because the offload is not live; assert on RV(offload_live) (and show
    RV(reasons)) in the play. It fails only on invalid parameters.
  - C(generated_at) is compared with the time of the signal on the managed host's clock, with one
    millisecond of slack for the engine's rounding.
seealso:
  - module: xdp_bfd.fastpath.bfd_session
"""

EXAMPLES = r"""
- name: Ask the engine for fresh stats
  xdp_bfd.fastpath.offload_info:
  register: offload

- name: The XDP fast path answers every session
  ansible.builtin.assert:
    that: offload.offload_live
    fail_msg: "{{ offload.reasons | join('; ') }}"

- name: Stats from a given file (read as is, not through the engine's mount namespace)
  xdp_bfd.fastpath.offload_info:
    path: /run/xdp-bfd/stats.json

- name: An engine started with its own pid file and stats path, stricter on kernel TX age
  xdp_bfd.fastpath.offload_info:
    pidfile: /run/xdp-bfd.pid
    path: /run/xdp-bfd/stats.json
    timeout: 10
    max_ktx_age_us: 100000
"""

RETURN = r"""
offload_live:
  description: Whether the offload is live by the rules above.
  returned: always
  type: bool
  sample: true
reasons:
  description: One sentence per rule that does not hold; empty when RV(offload_live) is true.
  returned: always
  type: list
  elements: str
  sample:
    - "session 198.19.0.1->198.19.0.2 on eth1 is up but the kernel has sent nothing for it (userspace is answering)"
stats:
  description:
    - The stats JSON as the engine wrote it (see the engine documentation for its fields); null
      when it could not be read. When the signal could not be sent, the last dump, if any.
  returned: always
  type: dict
  sample:
    version: 1
    generated_at: 1764470000.123
    pid: 1234
    kernel_tx: true
    sessions_configured: 1
    sessions_up: 1
stats_path:
  description:
    - The stats file as the engine names it (O(path) when given); null when several engines run
      and none was chosen.
  returned: always
  type: str
  sample: /run/xdp-bfd/stats.json
stats_path_from:
  description:
    - Where RV(stats_path) came from - C(path) (the option), C(cmdline) (the engine's command
      line), C(engine.conf) (C(/etc/xdp-bfd/engine.conf)) or C(default) (the engine's default);
      null with RV(stats_path).
  returned: always
  type: str
  sample: cmdline
signaled:
  description: Whether the signal was delivered.
  returned: always
  type: bool
signal_command:
  description: The command that sent the signal (null when none could be built).
  returned: always
  type: list
  elements: str
  sample: [/usr/bin/pkill, -USR1, -x, xdp-bfd]
frr_peers:
  description:
    - The peers bfdd is configured with, not counting those shut down - C(configured), C(up)
      (Up in FRR) and C(offloaded) (also Up in the engine and answered by the kernel); null
      when they were not judged (see O(frr_peers)).
  returned: always
  type: dict
  sample: {configured: 2, up: 1, offloaded: 1}
links:
  description:
    - One item per engine session - C(session) (C(local->peer on if)), C(state), and C(clock),
      who clocks its packets - V(kernel) (the kernel's transmit clock runs for it, C(kernel_clock)
      in the stats), V(peer-clocked) (XDP answers the peer's packets, C(kernel_tx_active)) or
      V(userspace). Engines without C(kernel_clock) in their stats show V(peer-clocked) or V(userspace).
  returned: always
  type: list
  elements: dict
  sample: [{session: "198.19.0.1->198.19.0.2 on eth0", state: up, clock: peer-clocked}]
waited:
  description: Seconds spent waiting for the stats after the signal.
  returned: always
  type: float
  sample: 0.2
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.xdp_bfd.fastpath.plugins.module_utils import offload


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path"),
            pidfile=dict(type="path"),
            process_name=dict(type="str", default=offload.DEFAULT_PROCESS_NAME),
            timeout=dict(type="float", default=5),
            max_ktx_age_us=dict(type="int"),
            min_sessions=dict(type="int", default=1),
            frr_peers=dict(type="str", default="auto", choices=["auto", "always", "never"]),
            vtysh_socket=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["timeout"] < 0:
        module.fail_json(msg="timeout must not be negative, got %s" % p["timeout"])
    if p["max_ktx_age_us"] is not None and p["max_ktx_age_us"] <= 0:
        module.fail_json(msg="max_ktx_age_us must be positive, got %s" % p["max_ktx_age_us"])
    if p["min_sessions"] < 0:
        module.fail_json(msg="min_sessions must not be negative, got %s" % p["min_sessions"])
    if not p["process_name"]:
        module.fail_json(msg="process_name must not be empty")

    result = offload.collect(
        module,
        path=p["path"],
        pidfile=p["pidfile"],
        process_name=p["process_name"],
        timeout=p["timeout"],
        max_ktx_age_us=p["max_ktx_age_us"],
        min_sessions=p["min_sessions"],
        frr_peers=p["frr_peers"],
        vtysh_socket=p["vtysh_socket"],
    )
    module.exit_json(changed=False, **result)


def main():
    run_module()


if __name__ == "__main__":
    main()
