"""The collection tarball holds the collection, not what tools left in the working tree.

Built from a copy of the tree's own files (what git tracks or would track) into
which every kind of cache and build output is seeded, so that a gap in
galaxy.yml's build_ignore shows up here rather than in a published artifact.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
ANSIBLE_GALAXY = Path(sys.executable).with_name("ansible-galaxy")

# What pytest, hypothesis, ruff, mypy, ansible-lint, ansible-core, setuptools
# and pip write, at the top and one level down (tools run from engine/ too).
SEEDED = [
    ".pytest_cache/v/cache/lastfailed",
    ".hypothesis/examples/0a/1b",
    ".ruff_cache/0.6.0/123",
    ".mypy_cache/3.11/xdp_bfd/kernel.meta.json",
    ".ansible/collections/ansible_collections/x/y/MANIFEST.json",
    ".cache/pip/http/a",
    ".coverage",
    "htmlcov/index.html",
    ".venv/bin/python",
    "engine/.venv/bin/python",
    "engine/.ruff_cache/0.6.0/123",
    "engine/.pytest_cache/v/cache/lastfailed",
    "engine/.hypothesis/examples/0a/1b",
    "engine/.mypy_cache/3.11/x.json",
    "roles/engine/.ansible/tmp/x",
    "engine/xdp_bfd/__pycache__/kernel.cpython-311.pyc",
    "plugins/modules/__pycache__/bfd_session.cpython-311.pyc",
    "plugins/module_utils/stray.pyc",
    "engine/xdp_bfd.egg-info/PKG-INFO",
    "engine/.eggs/README.txt",
    "engine/build/lib/xdp_bfd/__init__.py",
    "engine/build/bdist.linux-x86_64/wheel/x",
    "engine/dist/xdp_bfd-0.1.0-py3-none-any.whl",
    "engine/dist/xdp_bfd-0.1.0.tar.gz",
    "build/lib/x.py",
    "dist/x.whl",
    "xdp_bfd-fastpath-0.0.1.tar.gz",
    "tests/output/junit/x.xml",
    "bench/out/20260101T000000Z/run.json",
    "changelogs/.plugin-cache.yaml",
]

# Any member with one of these path components is a cache or build output.
CACHE_PARTS = {
    ".pytest_cache", ".hypothesis", ".ruff_cache", ".mypy_cache", ".ansible", ".cache", ".venv",
    "__pycache__", ".eggs", "htmlcov", "build", "dist",
}  # fmt: skip
CACHE_SUFFIXES = (".pyc", ".pyo", ".egg-info", ".whl", ".coverage")


def _working_tree_files() -> list[str]:
    """The tree's own files: tracked plus untracked-but-not-ignored, as they are now."""
    out = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=False,
    )
    if out.returncode != 0:
        pytest.skip(f"not a git checkout ({out.stderr.decode().strip()})")
    return [p for p in out.stdout.decode().split("\0") if p]


def _copy_tree(dest: Path) -> None:
    for rel in _working_tree_files():
        src = REPO / rel
        if not os.path.lexists(src):  # deleted in the work tree, not yet in the index
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        # Symlinks stay links (engine/xdp_bfd/bpf -> ../../bpf): the build must keep them.
        shutil.copy2(src, target, follow_symlinks=False)


def _seed(dest: Path) -> None:
    for rel in SEEDED:
        p = dest / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("seeded cache or build output\n")


def _galaxy(args: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(
        [str(ANSIBLE_GALAXY), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The tarball built from the seeded copy, and the environment ansible-galaxy ran in."""
    top = tmp_path_factory.mktemp("collection")
    tree, out = top / "tree", top / "out"
    _copy_tree(tree)
    _seed(tree)
    env = dict(os.environ, ANSIBLE_HOME=str(top / "ansible-home"), ANSIBLE_LOCAL_TEMP=str(top / "tmp"))
    env.pop("ANSIBLE_CONFIG", None)
    _galaxy(["collection", "build", "--output-path", str(out), str(tree)], env)
    (tarball,) = out.glob("xdp_bfd-fastpath-*.tar.gz")
    return tarball, env


@pytest.fixture(scope="module")
def members(built: tuple[Path, dict[str, str]]) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(built[0]) as tf:
        return {m.name.removeprefix("./").rstrip("/"): m for m in tf.getmembers()}


def test_no_cache_or_build_output_is_packed(members: dict[str, tarfile.TarInfo]) -> None:
    seeded = [m for m in members if any(m == s or m.startswith(s + "/") for s in SEEDED)]
    assert not seeded, f"seeded caches in the tarball: {seeded}"
    by_part = [
        m
        for m in members
        if CACHE_PARTS & set(m.split("/")) or any(part.endswith(CACHE_SUFFIXES) for part in m.split("/"))
    ]
    assert not by_part, f"caches or build output in the tarball: {by_part}"


def test_the_collection_itself_is_packed(members: dict[str, tarfile.TarInfo]) -> None:
    for want in (
        "MANIFEST.json",
        "FILES.json",
        "plugins/modules/bfd_session.py",
        "plugins/modules/offload_info.py",
        "roles/engine/tasks/main.yml",
        "roles/frr",
        "roles/host_tuning",
        "playbooks/site.yml",
        "meta/runtime.yml",
        # The engine role installs the engine from these.
        "engine/pyproject.toml",
        "engine/xdp_bfd/fastpath/kernel.py",
        "bpf/bfd_abi.h",
        "bpf/xdp_bfd.c",
    ):
        assert want in members, f"{want} missing from the tarball"


def test_the_packaged_bpf_link_survives(members: dict[str, tarfile.TarInfo]) -> None:
    # The engine package's copy of the C sources is a link to bpf/; the role
    # builds the wheel from the installed collection, so the link must arrive.
    link = members["engine/xdp_bfd/bpf"]
    assert link.issym() and link.linkname == "../../bpf", (link.type, link.linkname)


def test_the_installed_collection_resolves_the_link(
    built: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    tarball, env = built
    _galaxy(["collection", "install", "--offline", "--no-deps", "-p", str(tmp_path), str(tarball)], env)
    top = tmp_path / "ansible_collections" / "xdp_bfd" / "fastpath"
    packaged = top / "engine" / "xdp_bfd" / "bpf" / "bfd_abi.h"
    assert packaged.resolve() == (top / "bpf" / "bfd_abi.h").resolve()
    assert packaged.read_bytes() == (REPO / "bpf" / "bfd_abi.h").read_bytes()
