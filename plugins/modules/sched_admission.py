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
module: sched_admission
short_description: Say whether the kernel admits the engine unit's real-time scheduling, and give its cgroup runtime
version_added: 0.1.0
description:
  - Answers two questions for a systemd unit (by default the engine's, C(xdp-bfd.service)) -
    would the kernel admit its C(CPUSchedulingPolicy=fifo) (RV(fifo_admitted)), and the
    engine's SCHED_DEADLINE reservation (RV(deadline_admitted)); RV(reasons) says why not.
  - On a cgroup v1 host with C(CONFIG_RT_GROUP_SCHED=y) a child cpu cgroup starts with
    C(cpu.rt_runtime_us) 0, which makes C(sched_setscheduler(SCHED_FIFO)) fail with EPERM and
    systemd report the unit as C(214/SETSCHEDULER). The module finds the cgroup the unit runs in
    (its main pid's) or would run in (C(system.slice/UNIT), else C(system.slice), else PID 1's),
    and reads C(cpu.rt_runtime_us) at every level from the hierarchy's mount point down
    (RV(rt_runtime_chain)).
  - With O(fix=true) it writes O(rt_runtime_us) into each level that has less, parents first (a
    child may never hold more than its parent, so each level gets at most its parent's value).
    The hierarchy's real root holds the global bandwidth and is left alone. A write that fails
    is reported in RV(errors), with the levels above it written; the module does not fail on it,
    so that the play can report it with the reasons.
  - SCHED_DEADLINE is admitted in such a cgroup (seen on kernel 6.18) but needs the task's CPU
    affinity to span its root domain, so a cpuset narrower than the online CPUs is a reason too.
  - The writes last until the cgroup is rebuilt (boot, container start); run it again then.
author:
  - xdp_bfd.fastpath developers (@xdp-bfd)
extends_documentation_fragment:
  - xdp_bfd.fastpath.attributes
attributes:
  check_mode:
    support: full
    details:
      - Reports the writes O(fix=true) would make in RV(changes), and the admission as it would be
        after them, without writing.
  diff_mode:
    support: full
    details:
      - Returns C(cpu.rt_runtime_us) per cgroup level before and after.
options:
  unit:
    description: The systemd unit whose cgroup is looked at.
    type: str
    default: xdp-bfd.service
  fix:
    description: Give the unit's cpu cgroup real-time runtime (cgroup v1), parents first.
    type: bool
    default: false
  rt_runtime_us:
    description: C(cpu.rt_runtime_us) that O(fix=true) writes (capped by each parent's).
    type: int
    default: 500000
notes:
  - On cgroup v2, and on cgroup v1 without C(CONFIG_RT_GROUP_SCHED), no per-cgroup real-time
    limit applies; the module says so in RV(reasons) and O(fix) has nothing to do.
  - Inside a container the hierarchy is seen from the container's cgroup down; its parents
    must be given runtime by the host (e.g. C(podman --cpu-rt-runtime)).
requirements:
  - systemd (to find the running unit's main pid; without it the unit is taken as not running)
seealso:
  - name: Real-time group scheduling
    description: The kernel's documentation of C(cpu.rt_runtime_us).
    link: https://docs.kernel.org/scheduler/sched-rt-group.html
"""

EXAMPLES = r"""
- name: Would xdp-bfd.service start at SCHED_FIFO here?
  xdp_bfd.fastpath.sched_admission:
  register: sched

- name: Give the unit's cgroup real-time runtime (cgroup v1, CONFIG_RT_GROUP_SCHED)
  xdp_bfd.fastpath.sched_admission:
    fix: true
    rt_runtime_us: 500000
  register: sched

- name: Refuse to go on when SCHED_FIFO would be refused
  ansible.builtin.assert:
    that: sched.fifo_admitted
    fail_msg: "{{ sched.reasons | join('; ') }}"
"""

RETURN = r"""
fifo_admitted:
  description: Whether the unit's SCHED_FIFO would be admitted (after the writes, in check mode).
  returned: always
  type: bool
  sample: true
deadline_admitted:
  description: Whether the engine's SCHED_DEADLINE reservation would be admitted.
  returned: always
  type: bool
  sample: true
reasons:
  description: One sentence per reason either is refused, or a rule does not apply.
  returned: always
  type: list
  elements: str
  sample: ["no cgroup v1 cpu hierarchy: no per-cgroup real-time limit applies (cgroup v2 has none)"]
sched_rt_runtime_us:
  description: C(kernel.sched_rt_runtime_us).
  returned: always
  type: int
  sample: 950000
sched_rt_period_us:
  description: C(kernel.sched_rt_period_us).
  returned: always
  type: int
  sample: 1000000
cgroup:
  description:
    - The cpu cgroup directory looked at (C(path)) and why it was chosen (C(chosen_as)); null
      without a cgroup v1 cpu hierarchy.
  returned: always
  type: dict
  sample: {path: /sys/fs/cgroup/cpu,cpuacct/system.slice, chosen_as: system.slice}
rt_runtime_chain:
  description: C(cpu.rt_runtime_us) of each level from the mount point down (null where unreadable).
  returned: always
  type: list
  elements: dict
  sample:
    - {path: /sys/fs/cgroup/cpu,cpuacct, rt_runtime_us: 950000}
    - {path: /sys/fs/cgroup/cpu,cpuacct/system.slice, rt_runtime_us: 0}
changes:
  description: The writes made (in check mode, that would be), parents first.
  returned: always
  type: list
  elements: dict
  sample: [{path: /sys/fs/cgroup/cpu,cpuacct/system.slice, from: 0, to: 500000}]
errors:
  description: Writes that failed, with the kernel's words.
  returned: always
  type: list
  elements: str
  sample: ["cannot write /sys/fs/cgroup/cpu,cpuacct/system.slice/cpu.rt_runtime_us = 500000: Invalid argument"]
cpuset:
  description: The CPUs the unit may run on (C(allowed)) and the online ones (C(online)), as lists.
  returned: always
  type: dict
  sample: {allowed: "0,1", online: "0,1"}
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.xdp_bfd.fastpath.plugins.module_utils.command import CommandError, Runner

# Unit tests point this at a fake tree holding proc/, sys/ and run/. Every path
# the module reports is the host's; only reads and writes go through here.
ROOT = "/"


def _fs(path):
    return os.path.join(ROOT, path.lstrip("/"))


def read(path):
    try:
        with open(_fs(path)) as f:
            return f.read().strip()
    except (IOError, OSError):
        return None


def read_int(path):
    value = read(path)
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def v1_mount(controller):
    """(mount point, mount root) of the cgroup v1 hierarchy carrying controller."""
    for line in (read("/proc/self/mountinfo") or "").splitlines():
        left, _sep, right = line.partition(" - ")
        fields = left.split()
        rfields = right.split()
        if len(fields) >= 5 and len(rfields) >= 3 and rfields[0] == "cgroup" and controller in rfields[2].split(","):
            return fields[4], fields[3]
    return None, None


def v1_path(pid, controller):
    for line in (read("/proc/%s/cgroup" % pid) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and controller in parts[1].split(","):
            return parts[2]
    return None


def visible_dir(mount, root, path):
    """Directory of cgroup path under a mount whose root is root (a container sees only its part)."""
    if path is None:
        return None
    if root != "/" and (path == root or path.startswith(root + "/")):
        path = path[len(root):] or "/"
    return os.path.normpath(mount + "/" + path.lstrip("/"))


def main_pid(runner, unit):
    """The unit's main pid from systemd, or None (not running, or no systemd)."""
    if not os.path.isdir(_fs("/run/systemd/system")):
        return None
    systemctl = runner.module.get_bin_path("systemctl")
    if systemctl is None:
        return None
    try:
        text = runner.run([systemctl, "show", "-p", "MainPID", "--value", unit]).strip()
    except CommandError:
        return None
    return text if text.isdigit() and text != "0" else None


def unit_dir(runner, mount, root, unit):
    """Where the unit runs (its main pid) or, if not running, where systemd would put it."""
    pid = main_pid(runner, unit)
    if pid:
        d = visible_dir(mount, root, v1_path(pid, "cpu"))
        if d and os.path.isdir(_fs(d)):
            return d, "the running unit's cgroup"
    base = visible_dir(mount, root, v1_path(1, "cpu")) or mount
    best = base
    how = "PID 1's cgroup (systemd keeps services there unless a unit asks for the cpu controller)"
    for sub, why in (("system.slice", "system.slice"), ("system.slice/" + unit, "the unit's own cgroup")):
        d = os.path.join(base, sub)
        if os.path.isdir(_fs(d)):
            best, how = d, why
    return best, how


def chain(mount, target):
    """Directories from the mount point down to target, inclusive."""
    out = [mount]
    rel = os.path.relpath(target, mount)
    if rel != ".":
        cur = mount
        for part in rel.split(os.sep):
            cur = os.path.join(cur, part)
            out.append(cur)
    return out


def cpus(text):
    """Set of CPU numbers from a list such as 0-3,6."""
    result = set()
    for raw in (text or "").split(","):
        part = raw.strip()
        if not part:
            continue
        lo, _sep, hi = part.partition("-")
        result.update(range(int(lo), int(hi or lo) + 1))
    return result


def fix_chain(report, root, fix, dry_run):
    """Give each level at least ``fix`` (at most its parent's), parents first."""
    # The hierarchy's real root holds the global bandwidth and is not writable;
    # a container's view starts below it, bounded by the global value.
    parent = report["sched_rt_runtime_us"]
    for i, entry in enumerate(report["rt_runtime_chain"]):
        cur = entry["rt_runtime_us"]
        if cur is None:
            break
        if i == 0 and root == "/":
            parent = cur if cur >= 0 else parent
            continue
        want = min(fix, parent) if parent >= 0 else fix
        if cur < want and cur != -1:
            change = {"path": entry["path"], "from": cur, "to": want}
            if not dry_run:
                try:
                    with open(_fs(os.path.join(entry["path"], "cpu.rt_runtime_us")), "w") as f:
                        f.write(str(want))
                except (IOError, OSError) as e:
                    report["errors"].append(
                        "cannot write %s/cpu.rt_runtime_us = %d: %s" % (entry["path"], want, e.strerror)
                    )
                    break
                entry["rt_runtime_us"] = want
            cur = want
            report["changes"].append(change)
        parent = cur


def check(runner, unit, fix, dry_run):
    report = {
        "sched_rt_runtime_us": read_int("/proc/sys/kernel/sched_rt_runtime_us") or 0,
        "sched_rt_period_us": read_int("/proc/sys/kernel/sched_rt_period_us") or 0,
        "cgroup": None,
        "rt_runtime_chain": [],
        "fifo_admitted": True,
        "deadline_admitted": True,
        "reasons": [],
        "changes": [],
        "errors": [],
    }
    if report["sched_rt_runtime_us"] == 0:
        report["fifo_admitted"] = False
        report["deadline_admitted"] = False
        report["reasons"].append("kernel.sched_rt_runtime_us is 0: no real-time or deadline bandwidth at all")

    mount, root = v1_mount("cpu")
    if mount is None:
        report["reasons"].append(
            "no cgroup v1 cpu hierarchy: no per-cgroup real-time limit applies (cgroup v2 has none)"
        )
    else:
        target, how = unit_dir(runner, mount, root, unit)
        report["cgroup"] = {"path": target, "chosen_as": how}
        for d in chain(mount, target):
            report["rt_runtime_chain"].append(
                {"path": d, "rt_runtime_us": read_int(os.path.join(d, "cpu.rt_runtime_us"))}
            )
        if fix is not None:
            fix_chain(report, root, fix, dry_run)
        last = report["rt_runtime_chain"][-1]["rt_runtime_us"] if report["rt_runtime_chain"] else None
        if last == 0 and not (dry_run and report["changes"]):
            report["fifo_admitted"] = False
            report["reasons"].append(
                "cpu.rt_runtime_us is 0 in %s: SCHED_FIFO is refused there (the unit fails "
                "with 214/SETSCHEDULER); set xdp_bfd_sched_fix: true (fix=true), or give the cgroup real-time runtime"
                % target
            )
        if report["errors"] and root != "/":
            report["reasons"].append(
                "this host sees its cpu cgroup from %s down only (a container): its parents outside "
                "must be given real-time runtime by the host (e.g. podman --cpu-rt-runtime)" % root
            )

    cmount, croot = v1_mount("cpuset")
    online = cpus(read("/sys/devices/system/cpu/online"))
    if cmount is not None:
        d = visible_dir(cmount, croot, v1_path(1, "cpuset")) or cmount
        allowed = cpus(read(os.path.join(d, "cpuset.effective_cpus")) or read(os.path.join(d, "cpuset.cpus")))
    else:
        allowed = cpus(read("/sys/fs/cgroup/cpuset.cpus.effective")) or online
    report["cpuset"] = {
        "allowed": ",".join(str(c) for c in sorted(allowed)),
        "online": ",".join(str(c) for c in sorted(online)),
    }
    if allowed and online and allowed != online:
        report["deadline_admitted"] = False
        report["reasons"].append(
            "the unit's cpuset (%s) is narrower than the online CPUs (%s): SCHED_DEADLINE admission "
            "needs the whole root domain, so the engine will stay at SCHED_FIFO"
            % (report["cpuset"]["allowed"], report["cpuset"]["online"])
        )
    return report


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", default="xdp-bfd.service"),
            fix=dict(type="bool", default=False),
            rt_runtime_us=dict(type="int", default=500000),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not p["unit"] or "/" in p["unit"]:
        module.fail_json(msg="unit %r is not a unit name" % p["unit"])
    if p["rt_runtime_us"] < 0:
        module.fail_json(msg="rt_runtime_us must not be negative, got %d" % p["rt_runtime_us"])
    runner = Runner(module)
    try:
        report = check(runner, p["unit"], p["rt_runtime_us"] if p["fix"] else None, module.check_mode)
    except ValueError as e:
        module.fail_json(msg="cannot read the scheduling limits: %s" % e)
    result = dict(changed=bool(report["changes"]), **report)
    if module._diff:
        after = dict((e["path"], e["rt_runtime_us"]) for e in report["rt_runtime_chain"])
        before = dict(after)
        for c in report["changes"]:
            before[c["path"]] = c["from"]
            after[c["path"]] = c["to"]
        result["diff"] = dict(before=before, after=after)
    module.exit_json(**result)


def main():
    run_module()


if __name__ == "__main__":
    main()
