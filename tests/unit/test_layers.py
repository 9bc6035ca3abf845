"""The engine's layers (.importlinter, docs/architecture.md) hold, and the check can fail.

scripts/test runs the same contracts over the tree; here they also run over a
copy of the package with one forbidden import added, which must be refused.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TOP = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(package_parent: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    return subprocess.run(
        [str(LINT), "--no-cache", str(TOP / ".importlinter")],
        cwd=package_parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _copy_with(tmp_path: Path, module: str, line: str) -> Path:
    shutil.copytree(TOP / "engine" / "xdp_bfd", tmp_path / "xdp_bfd", symlinks=True)
    target = tmp_path / "xdp_bfd" / module
    target.write_text(target.read_text() + f"\n{line}\n")
    return tmp_path


def test_the_tree_keeps_every_contract() -> None:
    r = _lint(TOP / "engine")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 kept, 0 broken" in r.stdout


@pytest.mark.parametrize(
    ("module", "line", "named"),
    [
        # The core importing the wiring: the cycle cli <-> engine that the layers removed.
        ("core/engine.py", "from .. import app  # noqa", "xdp_bfd.core.engine -> xdp_bfd.app"),
        # A plugin reaching for the Engine class instead of the Host protocol.
        (
            "dplane/address.py",
            "from ..core import engine  # noqa",
            "xdp_bfd.dplane.address -> xdp_bfd.core.engine",
        ),
        # Two plugins of one layer knowing each other.
        ("stats/show.py", "from .. import dplane  # noqa", "xdp_bfd.stats.show -> xdp_bfd.dplane"),
    ],
)
def test_a_forbidden_import_is_refused(tmp_path: Path, module: str, line: str, named: str) -> None:
    r = _lint(_copy_with(tmp_path, module, line))
    assert r.returncode != 0
    assert named in r.stdout, r.stdout
