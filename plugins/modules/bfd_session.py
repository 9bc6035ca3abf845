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
module: bfd_session
short_description: Manage FRR bfdd peers through vtysh
version_added: 0.1.0
description:
  - Manages the C(peer) entries of FRR's C(bfd) configuration node with the network-resource
    states C(merged), C(replaced), C(overridden), C(deleted) and C(gathered) (plus C(rendered)
    and C(parsed), which touch nothing).
  - Reads the current configuration with C(vtysh -c 'show running-config bfd'), computes the
    vtysh lines that take it to the wanted state, and applies them in one vtysh call
    (C(configure terminal), C(bfd), C(peer ...), settings, C(exit)).
  - A peer is identified by its key C(peer), C(local_address), C(interface), C(vrf) and
    C(multihop); two entries that differ in any of them are two peers, as for FRR.
  - Can wait until the configured peers are Up (O(wait=up)), or Up and answered by the
    xdp-bfd XDP fast path (O(wait=offloaded)), using the same liveness rules as
    M(xdp_bfd.fastpath.offload_info).
  - Written against FRR 8.4. FRR omits settings that hold their default from its running
    configuration, so an explicit default and an absent setting are the same thing here, and
    a setting is reset by writing its default (FRR 8.4 has no C(no) form for the timers).
author:
  - xdp_bfd.fastpath developers (@xdp-bfd)
extends_documentation_fragment:
  - xdp_bfd.fastpath.attributes
attributes:
  check_mode:
    support: full
    details:
      - Computes and returns the commands and the predicted RV(after) without running them.
  diff_mode:
    support: full
    details:
      - Returns the peers before and after as FRR configuration text.
options:
  config:
    description:
      - The BFD peers.
      - For O(state=deleted) only the key fields matter; without O(config), every peer is deleted
        (an empty list deletes none).
      - Leave out for O(state=gathered) and O(state=parsed).
    type: list
    elements: dict
    suboptions:
      peer:
        description: Address of the remote system (IPv4 or IPv6).
        type: str
        required: true
      local_address:
        description:
          - Local address the session is bound to. Required for multihop peers.
        type: str
      interface:
        description:
          - Interface a single-hop session is bound to. FRR refuses it on multihop peers.
          - When the task changes anything (O(state) V(merged), V(replaced) or V(overridden)), every
            O(config[].interface) must be one zebra has from the kernel, in the peer's VRF
            (C(show interface vrf all json)); otherwise the module fails before any change. FRR
            would take the name, never bring the session up, and bfdd would never hand it to the engine.
        type: str
      vrf:
        description: VRF of the session; V(default) and leaving it out are the same.
        type: str
      multihop:
        description: Multihop session (RFC 5883, UDP port 4784) instead of single-hop.
        type: bool
        default: false
      receive_interval:
        description: Required minimum receive interval in milliseconds (10-60000; FRR default 300).
        type: int
      transmit_interval:
        description: Desired minimum transmit interval in milliseconds (10-60000; FRR default 300).
        type: int
      detect_multiplier:
        description: Detection time multiplier (2-255; FRR default 3).
        type: int
      echo_mode:
        description: Send BFD echo packets (single-hop only; FRR default off).
        type: bool
      echo_interval:
        description:
          - Desired minimum echo transmit interval in milliseconds, FRR's C(echo transmit-interval)
            (10-60000; FRR default 50). Single-hop only.
        type: int
      echo_receive_interval:
        description:
          - Required minimum echo receive interval in milliseconds, FRR's C(echo receive-interval)
            (10-60000, or V(0) for C(disabled); FRR default 50). Single-hop only.
        type: int
      passive_mode:
        description: Wait for the peer to start the session instead of sending first (FRR default off).
        type: bool
      minimum_ttl:
        description: Lowest TTL accepted on received packets (multihop only; 1-254, FRR default 254).
        type: int
      shutdown:
        description: Administratively shut the session down (FRR default off).
        type: bool
      profile:
        description:
          - Name of a BFD profile (defined in FRR's C(bfd) node, not by this module) to apply.
          - FRR applies a profile's values wherever the peer itself holds the default.
          - The profile must already be defined; FRR would take an unknown name and apply nothing,
            so the module fails before any change.
          - With O(state=merged) leaving it out keeps the current profile; use O(state=replaced)
            to remove one.
        type: str
  state:
    description:
      - V(merged) sets the given fields and leaves every other setting and peer alone.
      - V(replaced) makes each given peer exactly as described (fields left out go back to FRR's
        defaults); other peers are left alone.
      - V(overridden) is V(replaced) for the given peers and deletes every other peer.
      - V(deleted) deletes the given peers (matched on their key), or all peers without O(config).
      - V(gathered) returns the current peers in RV(gathered) and changes nothing.
      - V(rendered) returns in RV(rendered) the lines V(merged) would send to an empty
        configuration, without contacting FRR.
      - V(parsed) parses O(running_config) into RV(parsed), without contacting FRR.
    type: str
    choices: [merged, replaced, overridden, deleted, gathered, rendered, parsed]
    default: merged
  running_config:
    description: Output of C(show running-config bfd) to parse with O(state=parsed).
    type: str
  vtysh_socket:
    description:
      - Directory of the FRR daemons' vty sockets, passed as C(vtysh --vty_socket DIR), for an
        FRR started with its own C(--vty_socket). Leave out for the system FRR.
    type: path
  save:
    description:
      - After a change, run C(write memory) so the configuration survives an FRR restart.
      - Off by default; the running configuration alone is changed.
    type: bool
    default: false
  wait:
    description:
      - After applying (not in check mode), wait until every configured peer that is not shut
        down reports C(up) in C(show bfd peers json) (V(up)), and in addition until the
        xdp-bfd engine reports the offload live and those peers Up in its stats (V(offloaded)).
      - Fails when O(wait_timeout) passes first, saying which peer is not there yet and why.
    type: str
    choices: [up, offloaded]
  wait_timeout:
    description: Seconds to wait for O(wait).
    type: int
    default: 60
  stats_path:
    description:
      - Stats JSON the engine writes on SIGUSR1 (for O(wait=offloaded)).
      - When not given, found from the running engine as
        O(xdp_bfd.fastpath.offload_info#module:path) describes (its command line, read through
        C(/proc/PID/root)).
    type: path
  engine_pidfile:
    description:
      - Pid file of the engine to signal for O(wait=offloaded); without it the engine is found
        by its process name with C(pkill -USR1 -x xdp-bfd).
    type: path
  max_ktx_age_us:
    description:
      - For O(wait=offloaded), see O(xdp_bfd.fastpath.offload_info#module:max_ktx_age_us).
    type: int
notes:
  - Profiles themselves (C(profile NAME) blocks) are not managed; O(state=overridden) and
    O(state=deleted) never remove them.
  - The module checks what it knows FRR refuses (ranges, multihop and link-local rules, profile
    name length) and what FRR accepts but cannot mean (a profile it does not define) before
    changing anything. Echo settings on a multihop peer are refused unless they hold FRR's defaults,
    which is what O(state=gathered) returns, so gathered output is valid O(config). For the rest, vtysh stops at a line FRR refuses outright
    (exit status 1) but carries on after others (FRR 8.4 YANG errors, exit status 0); either way
    the module fails with FRR's message and returns the configuration it reads back as
    RV(after). Lines before the refused one stay applied.
  - After applying, the configuration is read back; if it still differs from what was asked
    (FRR accepted a line without applying it), the module fails saying what is missing.
  - Messages FRR prints while accepting a line (lines starting with C(%), such as its note on IPv6
    echo) are returned as warnings.
requirements:
  - FRR (vtysh and a running bfdd) on the managed host
seealso:
  - module: xdp_bfd.fastpath.offload_info
  - name: FRR BFD documentation
    description: The bfdd configuration commands this module writes.
    link: https://docs.frrouting.org/en/latest/bfd.html
"""

EXAMPLES = r"""
- name: Two single-hop peers at 3 x 10 ms, waiting until the XDP fast path answers them
  xdp_bfd.fastpath.bfd_session:
    config:
      - peer: 198.19.0.2
        local_address: 198.19.0.1
        interface: eth1
        receive_interval: 10
        transmit_interval: 10
        detect_multiplier: 3
      - peer: fd00:bfd:1::2
        local_address: fd00:bfd:1::1
        interface: eth1
        profile: fast
    state: merged
    wait: offloaded
    wait_timeout: 30

- name: A multihop peer, exactly as given (everything else back to FRR's defaults)
  xdp_bfd.fastpath.bfd_session:
    config:
      - peer: 198.19.9.1
        local_address: 198.19.0.1
        multihop: true
        minimum_ttl: 250
    state: replaced

- name: These peers and no others
  xdp_bfd.fastpath.bfd_session:
    config: "{{ bfd_peers }}"
    state: overridden

- name: Remove one peer
  xdp_bfd.fastpath.bfd_session:
    config:
      - peer: 198.19.0.2
        local_address: 198.19.0.1
        interface: eth1
    state: deleted

- name: Read the peers of an FRR started with its own vty socket directory
  xdp_bfd.fastpath.bfd_session:
    state: gathered
    vtysh_socket: /run/frr-lab
  register: bfd
"""

RETURN = r"""
before:
  description: The peers before the change, every setting filled in (FRR's defaults included).
  returned: when O(state) is merged, replaced, overridden or deleted
  type: list
  elements: dict
  sample:
    - peer: 198.19.0.2
      multihop: false
      local_address: 198.19.0.1
      vrf: default
      interface: eth1
      profile: null
      detect_multiplier: 3
      transmit_interval: 300
      receive_interval: 300
      echo_mode: false
      echo_interval: 50
      echo_receive_interval: 50
      passive_mode: false
      minimum_ttl: null
      shutdown: false
after:
  description:
    - The peers after the change, read back from FRR (in check mode, as predicted).
  returned: when O(state) is merged, replaced, overridden or deleted
  type: list
  elements: dict
  sample:
    - peer: 198.19.0.2
      multihop: false
      local_address: 198.19.0.1
      vrf: default
      interface: eth1
      profile: null
      detect_multiplier: 3
      transmit_interval: 10
      receive_interval: 10
      echo_mode: false
      echo_interval: 50
      echo_receive_interval: 50
      passive_mode: false
      minimum_ttl: null
      shutdown: false
commands:
  description:
    - The vtysh lines sent after C(configure terminal) (in check mode, the ones that would be);
      empty when nothing changes.
  returned: when O(state) is merged, replaced, overridden or deleted
  type: list
  elements: str
  sample:
    - bfd
    - peer 198.19.0.2 local-address 198.19.0.1 interface eth1
    - transmit-interval 10
    - receive-interval 10
    - exit
    - exit
gathered:
  description: The current peers, in the same form as O(config) with every setting filled in.
  returned: when O(state=gathered)
  type: list
  elements: dict
rendered:
  description: The lines O(state=merged) would send to an FRR without peers.
  returned: when O(state=rendered)
  type: list
  elements: str
parsed:
  description: O(running_config) parsed into peers.
  returned: when O(state=parsed)
  type: list
  elements: dict
peers_status:
  description: The C(show bfd peers json) entries of the waited-for peers, as FRR prints them.
  returned: when O(wait) is set and not in check mode
  type: list
  elements: dict
offload:
  description:
    - The offload verdict (O(wait=offloaded)), as M(xdp_bfd.fastpath.offload_info) returns it
      (C(offload_live), C(reasons), C(stats), C(signaled)).
  returned: when O(wait=offloaded) and not in check mode
  type: dict
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.xdp_bfd.fastpath.plugins.module_utils import frr_bfd
from ansible_collections.xdp_bfd.fastpath.plugins.module_utils.command import CommandError, Runner
from ansible_collections.xdp_bfd.fastpath.plugins.module_utils import offload

# Indirection so unit tests can run the wait loop without sleeping.
_sleep = time.sleep
_monotonic = time.monotonic

POLL_S = 0.5

PEER_OPTIONS = dict(
    peer=dict(type="str", required=True),
    local_address=dict(type="str"),
    interface=dict(type="str"),
    vrf=dict(type="str"),
    multihop=dict(type="bool", default=False),
    receive_interval=dict(type="int"),
    transmit_interval=dict(type="int"),
    detect_multiplier=dict(type="int"),
    echo_mode=dict(type="bool"),
    echo_interval=dict(type="int"),
    echo_receive_interval=dict(type="int"),
    passive_mode=dict(type="bool"),
    minimum_ttl=dict(type="int"),
    shutdown=dict(type="bool"),
    profile=dict(type="str"),
)


def _refused(rc, out, err):
    # FRR 8.4 exits 0 after some refusals (YANG errors): its words say so.
    return frr_bfd.refused(out) or frr_bfd.refused(err)


class Vtysh(object):
    def __init__(self, module):
        self.runner = Runner(module)
        self.path = self.runner.binary("vtysh")
        self.socket = module.params["vtysh_socket"]

    def run(self, lines, what):
        try:
            return self.runner.run(frr_bfd.vtysh_argv(self.path, self.socket, lines), refused=_refused)
        except CommandError as e:
            detail = frr_bfd.condense(e.err + "\n" + e.out) or "no output"
            raise VtyshError("vtysh failed (rc %d) %s: %s" % (e.rc, what, detail))

    def running_config(self):
        return self.run(["show running-config bfd"], "reading the bfd configuration")

    def running_peers(self):
        return frr_bfd.sorted_peers(frr_bfd.parse_running_config(self.running_config()))

    def peers_status(self):
        return frr_bfd.parse_peers_json(self.run(["show bfd peers json"], "reading the bfd peers"))

    def interfaces(self):
        """zebra's interfaces, every VRF: the ones a peer's ``interface`` may name."""
        return self.run(["show interface vrf all json"], "reading the interfaces")


class VtyshError(Exception):
    pass


def _warnings(module, out):
    for line in (out or "").splitlines():
        if line.startswith("%"):
            module.warn("vtysh: %s" % line.lstrip("% ").strip())


def _waited_keys(config, after):
    """Keys of the configured peers that should come up (present and not shut down)."""
    wanted = set(frr_bfd.normalize_key(e) for e in config or [])
    keys = []
    for p in after:
        key = frr_bfd.normalize_key(p)
        if key in wanted and not p.get("shutdown"):
            keys.append(key)
    return keys


def wait_up(vty, keys, deadline):
    """Poll until every key is 'up'; returns (statuses, None) or (statuses, reason)."""
    while True:
        by_key = {}
        for s in vty.peers_status():
            try:
                by_key[frr_bfd.status_key(s)] = s
            except frr_bfd.BfdConfigError:
                continue
        statuses = [by_key.get(k) for k in keys]
        missing = []
        for key, s in zip(keys, statuses):
            if s is None:
                missing.append("%s is not in 'show bfd peers'" % frr_bfd.key_text(key))
            elif s.get("status") != "up":
                missing.append(
                    "%s is %s (diagnostic: %s)"
                    % (frr_bfd.key_text(key), s.get("status"), s.get("diagnostic", "unknown"))
                )
        found = [s for s in statuses if s is not None]
        if not missing:
            return found, None
        if _monotonic() >= deadline:
            return found, "; ".join(missing)
        _sleep(POLL_S)


def wait_offloaded(module, keys, deadline):
    p = module.params
    peers = [frr_bfd.key_dict(k) for k in keys]
    while True:
        remaining = max(0.5, deadline - _monotonic())
        verdict = offload.collect(
            module,
            path=p["stats_path"],
            pidfile=p["engine_pidfile"],
            timeout=min(5.0, remaining),
            max_ktx_age_us=p["max_ktx_age_us"],
            min_sessions=1 if keys else 0,
        )
        reasons = list(verdict["reasons"])
        if verdict["stats"] is not None:
            reasons += offload.peer_offload_reasons(verdict["stats"], peers)
        verdict["reasons"] = reasons
        verdict["offload_live"] = not reasons
        if not reasons or _monotonic() >= deadline:
            return verdict
        _sleep(POLL_S)


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            config=dict(type="list", elements="dict", options=PEER_OPTIONS),
            state=dict(
                type="str",
                default="merged",
                choices=["merged", "replaced", "overridden", "deleted", "gathered", "rendered", "parsed"],
            ),
            running_config=dict(type="str"),
            vtysh_socket=dict(type="path"),
            save=dict(type="bool", default=False),
            wait=dict(type="str", choices=["up", "offloaded"]),
            wait_timeout=dict(type="int", default=60),
            stats_path=dict(type="path"),
            engine_pidfile=dict(type="path"),
            max_ktx_age_us=dict(type="int"),
        ),
        required_if=[
            ("state", "parsed", ["running_config"]),
            ("state", "rendered", ["config"]),
            ("state", "merged", ["config"]),
            ("state", "replaced", ["config"]),
            ("state", "overridden", ["config"]),
        ],
        mutually_exclusive=[("config", "running_config")],
        supports_check_mode=True,
    )
    p = module.params
    state = p["state"]
    config = p["config"]

    if state in ("gathered", "parsed") and config:
        module.fail_json(msg="config cannot be used with state=%s" % state)
    if p["running_config"] is not None and state != "parsed":
        module.fail_json(msg="running_config is only used with state=parsed")
    if p["wait"] and state in ("gathered", "rendered", "parsed"):
        module.fail_json(msg="wait cannot be used with state=%s" % state)

    try:
        if state == "parsed":
            parsed = frr_bfd.sorted_peers(frr_bfd.parse_running_config(p["running_config"]))
            module.exit_json(changed=False, parsed=parsed)
        if state == "rendered":
            commands, _after = frr_bfd.compute([], config, "merged")
            module.exit_json(changed=False, rendered=commands)
        # Refuse bad input before touching FRR.
        frr_bfd.validate_all(config)
    except frr_bfd.BfdConfigError as e:
        module.fail_json(msg=str(e))

    vty = Vtysh(module)
    try:
        text = vty.running_config()
        before = frr_bfd.sorted_peers(frr_bfd.parse_running_config(text))
        if state in ("merged", "replaced", "overridden"):
            frr_bfd.check_profiles(config, frr_bfd.parse_profiles(text))
    except (VtyshError, frr_bfd.BfdConfigError) as e:
        module.fail_json(msg=str(e))

    if state == "gathered":
        module.exit_json(changed=False, gathered=before)

    commands, after = frr_bfd.compute(before, config, state)
    if commands and state in ("merged", "replaced", "overridden") and any(e.get("interface") for e in config):
        # Before any change (in check mode too: reading the interfaces changes nothing).
        try:
            frr_bfd.check_interfaces(config, frr_bfd.parse_interfaces_json(vty.interfaces()))
        except (VtyshError, frr_bfd.BfdConfigError) as e:
            module.fail_json(msg=str(e), before=before)
    result = dict(changed=bool(commands), before=before, after=after, commands=commands)
    if module._diff:
        result["diff"] = dict(before=frr_bfd.render_config(before), after=frr_bfd.render_config(after))

    if commands and not module.check_mode:
        try:
            out = vty.run(["configure terminal"] + commands, "applying the bfd configuration")
        except VtyshError as e:
            # Read back what FRR holds now, for the operator.
            try:
                now = vty.running_peers()
            except (VtyshError, frr_bfd.BfdConfigError):
                now = None
            module.fail_json(
                msg="%s (other lines may have been applied)" % e,
                commands=commands,
                before=before,
                after=now,
            )
        _warnings(module, out)
        if p["save"]:
            try:
                vty.run(["write memory"], "saving the configuration")
            except VtyshError as e:
                module.fail_json(msg=str(e), commands=commands, before=before)
        try:
            result["after"] = vty.running_peers()
        except (VtyshError, frr_bfd.BfdConfigError) as e:
            module.fail_json(msg=str(e), commands=commands, before=before)
        # Read back: FRR must now need nothing more (it can accept a line and not apply it).
        missing, _predicted = frr_bfd.compute(result["after"], config, state)
        if missing:
            module.fail_json(
                msg="FRR accepted the commands but its configuration still differs; still needed: %s"
                % "; ".join(line for line in missing if line not in ("bfd", "exit")),
                **result
            )
        if module._diff:
            result["diff"]["after"] = frr_bfd.render_config(result["after"])

    if p["wait"] and not module.check_mode:
        keys = _waited_keys(config, result["after"]) if state != "deleted" else []
        deadline = _monotonic() + p["wait_timeout"]
        try:
            statuses, problem = wait_up(vty, keys, deadline)
        except (VtyshError, frr_bfd.BfdConfigError) as e:
            module.fail_json(msg=str(e), **result)
        result["peers_status"] = statuses
        if problem:
            module.fail_json(
                msg="BFD peers not up after %d s: %s" % (p["wait_timeout"], problem), **result
            )
        if p["wait"] == "offloaded":
            verdict = wait_offloaded(module, keys, deadline)
            result["offload"] = verdict
            if verdict["reasons"]:
                module.fail_json(
                    msg="BFD offload not live after %d s: %s" % (p["wait_timeout"], "; ".join(verdict["reasons"])),
                    **result
                )

    module.exit_json(**result)


def main():
    run_module()


if __name__ == "__main__":
    main()
