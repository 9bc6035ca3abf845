"""Run the collection's modules in-process against faked commands.

Modules import ``ansible_collections.xdp_bfd.fastpath...``, which only resolves from a
directory that holds ``ansible_collections/xdp_bfd/fastpath``. This conftest makes such a
directory in a temporary place (a symlink to this checkout), puts it on ``sys.path`` before
the test modules are collected, and removes it when the run ends.

The ``run_module`` fixture is the data-driven harness (``fastpath_modtest.run``): give it
the module, its parameters and the exact commands expected (argv, rc, stdout, stderr, in
order); it fakes ``AnsibleModule.run_command`` with them, fails on any other or missing
command, and returns the module's result (``failed`` set when it called ``fail_json``).
"""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

_tmp = Path(tempfile.mkdtemp(prefix="xdp-bfd-collection-"))
(_tmp / "ansible_collections" / "xdp_bfd").mkdir(parents=True)
(_tmp / "ansible_collections" / "xdp_bfd" / "fastpath").symlink_to(REPO, target_is_directory=True)
sys.path.insert(0, str(_tmp))
# The helpers next to this file (fastpath_modtest, frr_fixtures), whatever pytest's import mode.
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))


def _cleanup() -> None:
    if str(_tmp) in sys.path:
        sys.path.remove(str(_tmp))
    shutil.rmtree(_tmp, ignore_errors=True)


atexit.register(_cleanup)


def pytest_unconfigure(config: pytest.Config) -> None:
    _cleanup()


import fastpath_modtest  # noqa: E402  (needs the path set up above)


@pytest.fixture
def run_module() -> Callable[..., fastpath_modtest.Result]:
    """``run_module(module, params, [Cmd(argv, rc, out, err), ...], check_mode=, diff=)``."""
    return fastpath_modtest.run
