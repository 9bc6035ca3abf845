"""sched_admission against a fake /proc, /sys and /run tree and a faked systemctl.

Each case describes the host (its files), the exact commands the module runs,
and its answer; ``after`` lists files the module must have written (or, in
check mode, left alone).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.xdp_bfd.fastpath.plugins.modules import sched_admission
from fastpath_modtest import Cmd, run_case

SYSTEMCTL = "/usr/bin/systemctl"
SHOW = [SYSTEMCTL, "show", "-p", "MainPID", "--value", "xdp-bfd.service"]
CPU = "/sys/fs/cgroup/cpu,cpuacct"
SLICE = CPU + "/system.slice"
UNIT = SLICE + "/xdp-bfd.service"

# /proc/self/mountinfo lines (kernel 6.1): a cgroup v1 cpu hierarchy seen from its
# root, the same from inside a container, and a pure cgroup v2 host.
MOUNT_V1_CPU = (
    "35 25 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec shared:15"
    " - cgroup cgroup rw,cpu,cpuacct\n"
)
MOUNT_V1_CPU_CONTAINER = (
    "612 600 0:30 /libpod_parent/libpod-abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid"
    " - cgroup cgroup rw,cpu,cpuacct\n"
)
MOUNT_V2 = "30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
NO_LIMIT = "no cgroup v1 cpu hierarchy: no per-cgroup real-time limit applies (cgroup v2 has none)"
REFUSED = (
    "cpu.rt_runtime_us is 0 in {}: SCHED_FIFO is refused there (the unit fails with 214/SETSCHEDULER); "
    "set xdp_bfd_sched_fix: true (fix=true), or give the cgroup real-time runtime"
)


def v1_host(**levels: str) -> dict[str, Any]:
    """A cgroup v1 host with systemd, where PID 1 sits in the hierarchy's root."""
    files = {
        "proc/self/mountinfo": MOUNT_V1_CPU,
        "proc/1/cgroup": "4:cpu,cpuacct:/\n1:name=systemd:/init.scope\n",
        "proc/sys/kernel/sched_rt_runtime_us": "950000\n",
        "proc/sys/kernel/sched_rt_period_us": "1000000\n",
        "sys/devices/system/cpu/online": "0-1\n",
        "sys/fs/cgroup/cpuset.cpus.effective": "0-1\n",
        "run/systemd/system/": None,
        CPU.lstrip("/") + "/cpu.rt_runtime_us": "950000\n",
    }
    for path, value in levels.items():
        files[path] = value
    return files


V2_HOST = {
    "proc/self/mountinfo": MOUNT_V2,
    "proc/1/cgroup": "0::/init.scope\n",
    "proc/sys/kernel/sched_rt_runtime_us": "950000\n",
    "proc/sys/kernel/sched_rt_period_us": "1000000\n",
    "sys/devices/system/cpu/online": "0-1\n",
    "sys/fs/cgroup/cpuset.cpus.effective": "0-1\n",
}
SLICE_ZERO = v1_host(**{SLICE.lstrip("/") + "/cpu.rt_runtime_us": "0\n"})

CASES = [
    {
        "id": "cgroup-v2-no-limit-applies",
        "host": V2_HOST,
        "params": {},
        "commands": [],
        "expect": {
            "changed": False,
            "fifo_admitted": True,
            "deadline_admitted": True,
            "cgroup": None,
            "rt_runtime_chain": [],
            "reasons": [NO_LIMIT],
            "changes": [],
            "errors": [],
            "sched_rt_runtime_us": 950000,
            "sched_rt_period_us": 1000000,
            "cpuset": {"allowed": "0,1", "online": "0,1"},
        },
    },
    {
        "id": "v1-slice-without-runtime-refuses-fifo",
        "host": SLICE_ZERO,
        "params": {},
        "commands": [Cmd(SHOW, out="0\n")],
        "expect": {
            "changed": False,
            "fifo_admitted": False,
            "deadline_admitted": True,
            "cgroup": {"path": SLICE, "chosen_as": "system.slice"},
            "rt_runtime_chain": [
                {"path": CPU, "rt_runtime_us": 950000},
                {"path": SLICE, "rt_runtime_us": 0},
            ],
            "reasons": [REFUSED.format(SLICE)],
            "changes": [],
        },
    },
    {
        "id": "fix-writes-the-slice-capped-by-its-parent",
        "host": SLICE_ZERO,
        "params": {"fix": True, "rt_runtime_us": 990000},
        "commands": [Cmd(SHOW, out="0\n")],
        "expect": {
            "changed": True,
            "fifo_admitted": True,
            "rt_runtime_chain": [
                {"path": CPU, "rt_runtime_us": 950000},
                {"path": SLICE, "rt_runtime_us": 950000},
            ],
            "changes": [{"path": SLICE, "from": 0, "to": 950000}],
            "errors": [],
            "reasons": [],
        },
        "after": {SLICE.lstrip("/") + "/cpu.rt_runtime_us": "950000"},
    },
    {
        "id": "fix-in-check-mode-predicts-and-writes-nothing",
        "host": SLICE_ZERO,
        "params": {"fix": True},
        "check_mode": True,
        "commands": [Cmd(SHOW, out="0\n")],
        "expect": {
            "changed": True,
            "fifo_admitted": True,
            "changes": [{"path": SLICE, "from": 0, "to": 500000}],
            "reasons": [],
        },
        "after": {SLICE.lstrip("/") + "/cpu.rt_runtime_us": "0\n"},
    },
    {
        "id": "fix-with-enough-runtime-changes-nothing",
        "host": v1_host(**{SLICE.lstrip("/") + "/cpu.rt_runtime_us": "500000\n"}),
        "params": {"fix": True},
        "commands": [Cmd(SHOW, out="0\n")],
        "expect": {"changed": False, "fifo_admitted": True, "changes": [], "reasons": []},
    },
    {
        "id": "running-unit-is-looked-at-in-its-own-cgroup",
        "host": v1_host(
            **{
                SLICE.lstrip("/") + "/cpu.rt_runtime_us": "0\n",
                UNIT.lstrip("/") + "/cpu.rt_runtime_us": "0\n",
                "proc/4242/cgroup": "4:cpu,cpuacct:/system.slice/xdp-bfd.service\n",
            }
        ),
        "params": {"fix": True},
        "commands": [Cmd(SHOW, out="4242\n")],
        "expect": {
            "changed": True,
            "cgroup": {"path": UNIT, "chosen_as": "the running unit's cgroup"},
            "changes": [
                {"path": SLICE, "from": 0, "to": 500000},
                {"path": UNIT, "from": 0, "to": 500000},
            ],
            "fifo_admitted": True,
        },
        "after": {
            SLICE.lstrip("/") + "/cpu.rt_runtime_us": "500000",
            UNIT.lstrip("/") + "/cpu.rt_runtime_us": "500000",
        },
    },
    {
        "id": "container-write-refused-is-reported-not-failed",
        "host": dict(
            SLICE_ZERO,
            **{
                "proc/self/mountinfo": MOUNT_V1_CPU_CONTAINER,
                "proc/1/cgroup": "4:cpu,cpuacct:/libpod_parent/libpod-abc\n",
                CPU.lstrip("/") + "/cpu.rt_runtime_us": "0\n",
            },
        ),
        # The container's cgroupfs is mounted read-only.
        "readonly": [CPU.lstrip("/") + "/cpu.rt_runtime_us"],
        "params": {"fix": True},
        "commands": [Cmd(SHOW, out="0\n")],
        "expect": {
            "changed": False,
            "fifo_admitted": False,
            "errors": [f"cannot write {CPU}/cpu.rt_runtime_us = 500000: Read-only file system"],
            "reasons": [
                REFUSED.format(SLICE),
                "this host sees its cpu cgroup from /libpod_parent/libpod-abc down only (a container): its "
                "parents outside must be given real-time runtime by the host (e.g. podman --cpu-rt-runtime)",
            ],
        },
    },
    {
        "id": "no-global-bandwidth-refuses-both",
        "host": dict(V2_HOST, **{"proc/sys/kernel/sched_rt_runtime_us": "0\n"}),
        "params": {},
        "commands": [],
        "expect": {
            "fifo_admitted": False,
            "deadline_admitted": False,
            "reasons": [
                "kernel.sched_rt_runtime_us is 0: no real-time or deadline bandwidth at all",
                NO_LIMIT,
            ],
        },
    },
    {
        "id": "narrow-cpuset-refuses-deadline",
        "host": dict(V2_HOST, **{"sys/fs/cgroup/cpuset.cpus.effective": "1\n"}),
        "params": {},
        "commands": [],
        "expect": {
            "fifo_admitted": True,
            "deadline_admitted": False,
            "cpuset": {"allowed": "1", "online": "0,1"},
            "reasons": [
                NO_LIMIT,
                "the unit's cpuset (1) is narrower than the online CPUs (0,1): SCHED_DEADLINE admission "
                "needs the whole root domain, so the engine will stay at SCHED_FIFO",
            ],
        },
    },
    {
        "id": "no-systemd-takes-the-unit-as-not-running",
        "host": dict((k, v) for k, v in SLICE_ZERO.items() if not k.startswith("run/")),
        "params": {},
        "commands": [],
        "expect": {"cgroup": {"path": SLICE, "chosen_as": "system.slice"}, "fifo_admitted": False},
    },
    {
        "id": "unit-with-a-slash-fails",
        "host": V2_HOST,
        "params": {"unit": "../x.service"},
        "commands": [],
        "fail": "unit '../x.service' is not a unit name",
    },
]


def readonly(root: Path, paths: list[str]) -> Any:
    """An ``open`` that refuses to write ``paths`` under root with EROFS."""
    refused = {str(root / p) for p in paths}

    def fake_open(path: str, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if "w" in mode and str(path) in refused:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return open(path, mode, *args, **kwargs)

    return fake_open


def make_tree(root: Path, files: dict[str, str | None]) -> None:
    for rel, content in files.items():
        path = root / rel
        if content is None:  # a directory
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_sched_admission(tmp_path, monkeypatch, case):
    make_tree(tmp_path, case["host"])
    monkeypatch.setattr(sched_admission, "ROOT", str(tmp_path))
    if case.get("readonly"):
        monkeypatch.setattr(sched_admission, "open", readonly(tmp_path, case["readonly"]), raising=False)
    run_case(sched_admission, case, item_subsets=True)
    for rel, content in case.get("after", {}).items():
        assert (tmp_path / rel).read_text() == content, rel


def test_diff_mode(tmp_path, monkeypatch, run_module):
    make_tree(tmp_path, SLICE_ZERO)
    monkeypatch.setattr(sched_admission, "ROOT", str(tmp_path))
    res = run_module(sched_admission, {"fix": True}, [Cmd(SHOW, out="0\n")], check_mode=True, diff=True)
    assert res["diff"] == {
        "before": {CPU: 950000, SLICE: 0},
        "after": {CPU: 950000, SLICE: 500000},
    }
