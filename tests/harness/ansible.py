"""Run one of the collection's modules through the real ``ansible`` CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

VENV_BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]


def collection_env(tmp_path: Path) -> dict[str, str]:
    """An environment in which ``xdp_bfd.fastpath`` resolves to this checkout, isolated from the host's."""
    tree = tmp_path / "collections" / "ansible_collections" / "xdp_bfd"
    tree.mkdir(parents=True)
    (tree / "fastpath").symlink_to(REPO, target_is_directory=True)
    env = dict(os.environ)
    env.update(
        ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "collections"),
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-local"),
        ANSIBLE_REMOTE_TEMP=str(tmp_path / "ansible-remote"),
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
    )
    env.pop("ANSIBLE_CONFIG", None)
    return env


def run_module(
    env: dict[str, str], module: str, args: dict[str, Any], *, check: bool = False, diff: bool = False
) -> dict:
    """The module's result for localhost, as the json callback reports it."""
    argv = [
        str(VENV_BIN / "ansible"), "localhost", "-i", "localhost,", "-c", "local",
        "-m", f"xdp_bfd.fastpath.{module}", "-a", json.dumps(args),
    ]  # fmt: skip
    if check:
        argv.append("--check")
    if diff:
        argv.append("--diff")
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    try:
        doc = json.loads(out.stdout)
    except ValueError:
        raise AssertionError(
            f"ansible printed no JSON (rc {out.returncode}):\n{out.stdout}\n{out.stderr}"
        ) from None
    return doc["plays"][0]["tasks"][0]["hosts"]["localhost"]
