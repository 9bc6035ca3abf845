#!/usr/bin/python3
# Copyright: xdp_bfd.fastpath developers
# SPDX-License-Identifier: GPL-2.0-or-later
"""Would the kernel admit xdp-bfd.service at SCHED_FIFO and its SCHED_DEADLINE reservation?

Run by the host_tuning role on the managed host; prints one JSON object.

    xdp_bfd_sched_check.py UNIT [--fix RT_RUNTIME_US] [--dry-run]

Why a script: the answer depends on the cgroup the unit would run in, and on
a cgroup v1 host with CONFIG_RT_GROUP_SCHED=y a child cpu cgroup starts with
cpu.rt_runtime_us 0, which makes sched_setscheduler(SCHED_FIFO) fail with
EPERM (systemd reports the unit as 214/SETSCHEDULER). Measured on kernel 6.18:
SCHED_DEADLINE is still admitted in such a cgroup; it needs the task's CPU
affinity to span its root domain instead, so the cpuset matters for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def v1_mount(controller: str) -> tuple[str, str] | tuple[None, None]:
    """(mount point, mount root) of the cgroup v1 hierarchy carrying controller."""
    for line in (read("/proc/self/mountinfo") or "").splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        rfields = right.split()
        if len(rfields) >= 3 and rfields[0] == "cgroup" and controller in rfields[2].split(","):
            return fields[4], fields[3]
    return None, None


def v1_path(pid: int | str, controller: str) -> str | None:
    text = read(f"/proc/{pid}/cgroup") or ""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and controller in parts[1].split(","):
            return parts[2]
    return None


def visible_dir(mount: str, root: str, path: str | None) -> str | None:
    """Directory of cgroup path under a mount whose root is root (a container sees only its part)."""
    if path is None:
        return None
    if root != "/" and (path == root or path.startswith(root + "/")):
        path = path[len(root) :] or "/"
    return os.path.normpath(mount + "/" + path.lstrip("/"))


def unit_dir(mount: str, root: str, unit: str) -> tuple[str, str]:
    """Where the unit runs (its main pid) or, if not running, where systemd would put it."""
    pid_text = ""
    if os.path.isdir("/run/systemd/system"):
        cmd = ["systemctl", "show", "-p", "MainPID", "--value", unit]
        pid_text = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
    main_pid = pid_text if pid_text.isdigit() and pid_text != "0" else None
    if main_pid:
        d = visible_dir(mount, root, v1_path(main_pid, "cpu"))
        if d and os.path.isdir(d):
            return d, "the running unit's cgroup"
    base = visible_dir(mount, root, v1_path(1, "cpu")) or mount
    best = base
    how = "PID 1's cgroup (systemd keeps services there unless a unit asks for the cpu controller)"
    for sub, why in (("system.slice", "system.slice"), ("system.slice/" + unit, "the unit's own cgroup")):
        d = os.path.join(base, sub)
        if os.path.isdir(d):
            best, how = d, why
    return best, how


def chain(mount: str, target: str) -> list[str]:
    """Directories from the mount point down to target, inclusive."""
    out = [mount]
    rel = os.path.relpath(target, mount)
    if rel != ".":
        cur = mount
        for part in rel.split(os.sep):
            cur = os.path.join(cur, part)
            out.append(cur)
    return out


def cpus(text: str | None) -> set[int]:
    """Set of CPU numbers from a list such as 0-3,6."""
    result: set[int] = set()
    for raw in (text or "").split(","):
        part = raw.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        result.update(range(int(lo), int(hi or lo) + 1))
    return result


def main(argv: list[str]) -> int:
    unit = argv[1] if len(argv) > 1 else "xdp-bfd.service"
    fix = None
    if "--fix" in argv:
        fix = int(argv[argv.index("--fix") + 1])
    dry_run = "--dry-run" in argv
    report = {
        "sched_rt_runtime_us": int(read("/proc/sys/kernel/sched_rt_runtime_us") or 0),
        "sched_rt_period_us": int(read("/proc/sys/kernel/sched_rt_period_us") or 0),
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
        target, how = unit_dir(mount, root, unit)
        report["cgroup"] = {"path": target, "chosen_as": how}
        levels = chain(mount, target)
        for d in levels:
            value = read(os.path.join(d, "cpu.rt_runtime_us"))
            runtime = None if value is None else int(value)
            report["rt_runtime_chain"].append({"path": d, "rt_runtime_us": runtime})
        if fix is not None:
            # Parents first: a child may never hold more than its parent.
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
                            with open(os.path.join(entry["path"], "cpu.rt_runtime_us"), "w") as f:
                                f.write(str(want))
                            entry["rt_runtime_us"] = want
                            cur = want
                        except OSError as e:
                            path = entry["path"]
                            report["errors"].append(
                                f"cannot write {path}/cpu.rt_runtime_us = {want}: {e.strerror}"
                            )
                            break
                    else:
                        cur = want
                    report["changes"].append(change)
                parent = cur
        last = report["rt_runtime_chain"][-1]["rt_runtime_us"] if report["rt_runtime_chain"] else None
        if last == 0 and not (dry_run and report["changes"]):
            report["fifo_admitted"] = False
            report["reasons"].append(
                f"cpu.rt_runtime_us is 0 in {target}: SCHED_FIFO is refused there (the unit fails "
                "with 214/SETSCHEDULER); set xdp_bfd_sched_fix: true, or give the cgroup real-time runtime"
            )
        if report["errors"] and root != "/":
            report["reasons"].append(
                f"this host sees its cpu cgroup from {root} down only (a container): its parents outside "
                "must be given real-time runtime by the host (e.g. podman --cpu-rt-runtime)"
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
            f"the unit's cpuset ({report['cpuset']['allowed']}) is narrower than the online CPUs "
            f"({report['cpuset']['online']}): SCHED_DEADLINE admission needs the whole root domain, "
            "so the engine will stay at SCHED_FIFO"
        )
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
