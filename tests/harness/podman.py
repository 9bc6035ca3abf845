"""Podman containers with systemd as managed hosts, and ansible-playbook runs against them.

The containers are the lab's images (scripts/images builds or reuses them)
made with the project's containers.conf. Names start with ``xbt-<pid>-`` like
every other object the integration tests create, so a run's leftovers are
recognisable, and ``Container`` removes its container on exit whatever the
body did.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.ansible import VENV_BIN, collection_env
from harness.wait import wait_until

REPO = Path(__file__).resolve().parents[2]
CONTAINERS_CONF = REPO / "molecule" / "images" / "containers.conf"
LABEL = "io.xdp-bfd.test"


def podman_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CONTAINERS_CONF"] = str(CONTAINERS_CONF)
    return env


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *args], env=podman_env(), capture_output=True, text=True, timeout=timeout, check=check
    )


def ensure_images(*suites: str) -> None:
    """Build the images that are missing or stale (seconds when they are current)."""
    out = subprocess.run(
        [str(REPO / "scripts" / "images"), *suites],
        env=podman_env(),
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"scripts/images failed:\n{out.stderr[-3000:]}")


CGROUP_V1_CPU = Path("/sys/fs/cgroup/cpu/libpod_parent")


def remove_cgroups(cid: str) -> None:
    """Remove what runc leaves of a removed container's cpu cgroup on cgroup v1.

    The systemd inside made sub-groups, so runc's rmdir fails and the group
    stays with whatever real-time runtime it held (scripts/lib/podman.sh,
    podman_rt_reclaim, does the same for the shell scripts).
    """
    top = CGROUP_V1_CPU / f"libpod-{cid}"
    if not top.is_dir():
        return
    # Deepest first; a group that still has tasks refuses and stays.
    groups = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
    for d in [*groups, top]:
        with contextlib.suppress(OSError):
            d.rmdir()


class Container:
    """A privileged container booting systemd, removed on exit."""

    def __init__(self, name: str, image: str, *, network: str = "none") -> None:
        self.name = name
        self.image = image
        self.network = network

    def __enter__(self) -> Container:
        podman("rm", "-f", self.name, check=False)
        podman(
            "run", "-d", "--name", self.name, "--hostname", self.name,
            "--privileged", "--systemd=always", f"--network={self.network}",
            "--label", f"{LABEL}={os.getpid()}", self.image, "/sbin/init",
        )  # fmt: skip
        try:
            wait_until(self._booted, timeout=60, interval=0.5, what=f"systemd booted in {self.name}")
        except BaseException:
            self.remove()
            raise
        return self

    def _booted(self) -> bool:
        out = self.exec("systemctl", "is-system-running", check=False)
        return out.stdout.strip() in ("running", "degraded")

    def exec(self, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return podman("exec", self.name, *argv, check=check, timeout=timeout)

    def remove(self) -> None:
        cid = podman("inspect", "--format", "{{.Id}}", self.name, check=False).stdout.strip()
        podman("rm", "-f", "-t", "2", self.name, check=False)
        if cid:
            remove_cgroups(cid)

    def __exit__(self, *exc: object) -> None:
        self.remove()


@dataclass
class PlayResult:
    rc: int
    stats: dict[str, int]
    failures: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    output: str = ""


def run_playbook(
    tmp_path: Path,
    host: str,
    playbook: str,
    extra_vars: dict[str, Any],
    *,
    groups: tuple[str, ...] = ("bfd_routers",),
) -> PlayResult:
    """ansible-playbook ``playbook`` (text or a path) on one container, as the json callback reports it."""
    env = collection_env(tmp_path)
    # The managed host's python, not the controller's that collection_env sets...
    env.pop("ANSIBLE_PYTHON_INTERPRETER", None)
    # ...and the managed host's temporary directory, not a controller path.
    env.pop("ANSIBLE_REMOTE_TEMP", None)
    env["CONTAINERS_CONF"] = str(CONTAINERS_CONF)
    inventory = {g: {"hosts": {host: {}}} for g in groups}
    inventory["all"] = {
        "vars": {
            "ansible_connection": "containers.podman.podman",
            "ansible_python_interpreter": "/usr/bin/python3",
        }
    }
    inv = tmp_path / "inventory.yml"
    inv.write_text(json.dumps(inventory))
    if "\n" in playbook:
        book = tmp_path / "play.yml"
        book.write_text(playbook)
    else:
        book = Path(playbook)
    evars = tmp_path / "vars.json"
    evars.write_text(json.dumps(extra_vars))
    out = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", str(inv), "-e", f"@{evars}", str(book)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    try:
        doc = json.loads(out.stdout)
    except ValueError:
        raise AssertionError(
            f"ansible-playbook printed no JSON (rc {out.returncode}):\n{out.stdout}\n{out.stderr}"
        ) from None
    result = PlayResult(rc=out.returncode, stats=doc.get("stats", {}).get(host, {}), output=out.stdout)
    for play in doc.get("plays", []):
        for task in play.get("tasks", []):
            res = task.get("hosts", {}).get(host)
            if res is None:
                continue
            result.tasks.append(task["task"]["name"])
            if res.get("failed"):
                result.failures.append(str(res.get("msg", res)))
                # A loop fails as "One or more items failed"; the why is per item.
                for item in res.get("results", []):
                    if isinstance(item, dict) and item.get("failed"):
                        result.failures.append(str(item.get("msg", item)))
    return result
