"""Fixtures only integration tests need (the shared ones live in tests/conftest.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import trixie
from harness.ansible import collection_env


@pytest.fixture(scope="session")
def trixie_root() -> Iterator[str]:
    """A trixie root file system with FRR 10.3, /proc and /dev bound in for the session.

    Built on first use (about 30 s, cached under /var/cache/xdp-bfd-tests),
    then reused; unmounted when the session ends, whatever the tests did.
    A machine that cannot build it fails here rather than skipping quietly.
    """
    if os.geteuid() != 0:
        pytest.fail("the trixie root needs root (debootstrap, chroot, bind mounts)")
    with trixie.trixie_root() as root:
        yield str(root)


@pytest.fixture
def ansible_env(tmp_path: Path) -> dict[str, str]:
    """Environment for running the collection's modules with the ``ansible`` CLI."""
    return collection_env(tmp_path)


SMALL_FASTPATH_SESSIONS = 64


@pytest.fixture
def small_fastpath() -> Iterator[Any]:
    """The fast path compiled and loaded for 64 sessions, attached nowhere: its maps to read and write."""
    from xdp_bfd.fastpath.kernel import FastPath  # noqa: PLC0415 (bcc: only for the tests that use it)

    f = FastPath(3_000_000, max_sessions=SMALL_FASTPATH_SESSIONS)
    yield f
    f.close()
