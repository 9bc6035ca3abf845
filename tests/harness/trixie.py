"""A Debian trixie root file system with FRR 10.3, for running a second FRR release.

Debian 12 ships FRR 8.4, whose bfdd cannot be a dataplane client (``ipv4c:``);
trixie's 10.3 can. The root is built once with debootstrap in two steps
(bookworm's debootstrap fails when asked to ``--include=frr`` for trixie),
cached at a fixed path and reused when complete: the stamp file is written
last, so a build killed halfway is detected and redone, never half-used.

While tests run, /proc and /dev are bind-mounted into the root (the daemons
need them) and unmounted afterwards. Several test runs may share the root:
each holds a shared lock for as long as it uses the mounts, and only the last
one out unmounts. A run that was killed outright leaves its mounts; the next
run reuses them and removes them when it finishes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

CACHE = Path(os.environ.get("XDP_BFD_TRIXIE_ROOT", "/var/cache/xdp-bfd-tests/trixie-frr"))
STAMP = ".xdp-bfd-tests-complete"
SUITE = "trixie"
PACKAGES = ("frr", "iproute2")
BIND_MOUNTS = ("proc", "dev")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))


def debian_mirror(sources: tuple[Path, ...] = SOURCES) -> str:
    """The Debian archive this machine already uses (the only one CI can be assumed to reach)."""
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":
            # deb822: blank-line separated stanzas; take the main archive, not security.
            for stanza in text.split("\n\n"):
                fields = {}
                for line in stanza.splitlines():
                    key, sep, value = line.partition(":")
                    if sep and not line.startswith((" ", "#")):
                        fields[key.strip().lower()] = value.strip()
                uris, suites = fields.get("uris", "").split(), fields.get("suites", "").split()
                if uris and any("security" not in s for s in suites) and "security" not in uris[0]:
                    return uris[0].rstrip("/")
        else:
            for line in text.splitlines():
                parts = line.split()
                if len(parts) >= 3 and parts[0] == "deb" and "security" not in parts[1]:
                    url = next((p for p in parts[1:] if "://" in p), None)
                    if url:
                        return url.rstrip("/")
    return DEFAULT_MIRROR


def complete(root: Path = CACHE) -> bool:
    return (root / STAMP).exists()


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root`` in this mount namespace."""
    prefix = str(root.resolve()) if root.exists() else str(root)
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mnt = line.split()[4].replace("\\040", " ")
        if mnt == prefix or mnt.startswith(prefix + "/"):
            out.append(mnt)
    return out


@contextlib.contextmanager
def _flock(path: Path, mode: int) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)


def _run(argv: list[str], *, timeout: float, env: dict[str, str] | None = None) -> None:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()[-15:]
        raise RuntimeError(f"{' '.join(argv[:4])}… failed ({out.returncode}):\n" + "\n".join(tail))


def build(root: Path = CACHE, *, mirror: str | None = None, timeout: float = 900.0) -> Path:
    """Make ``root`` a trixie root with FRR 10.3 unless it already is one; returns it."""
    if complete(root):
        return root
    with _flock(root.parent / f"{root.name}.lock", fcntl.LOCK_EX):
        if complete(root):  # another run built it while we waited
            return root
        if root.exists():
            # A half-built root. Never delete through a bind mount: that would
            # delete the host's /dev.
            left = mounts_under(root)
            if left:
                raise RuntimeError(f"refusing to rebuild {root}: still mounted: {' '.join(left)}")
            shutil.rmtree(root)
        started = time.monotonic()
        _run(
            ["debootstrap", "--variant=minbase", SUITE, str(root), mirror or debian_mirror()],
            timeout=timeout,
        )
        # Package scripts must not try to start services inside the chroot.
        policy = root / "usr/sbin/policy-rc.d"
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
        _run(
            ["chroot", str(root), "apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES],
            timeout=timeout,
            env=env,
        )
        _run(["chroot", str(root), "apt-get", "clean"], timeout=60, env=env)
        if not (root / "usr/lib/frr/bfdd").exists():
            raise RuntimeError(f"{root}: apt-get succeeded but there is no /usr/lib/frr/bfdd")
        (root / STAMP).write_text(f"built in {time.monotonic() - started:.0f}s\n")
    return root


def _mount(root: Path) -> None:
    present = set(mounts_under(root))
    for name in BIND_MOUNTS:
        target = root / name
        if str(target.resolve()) not in present:
            _run(["mount", "--bind", f"/{name}", str(target)], timeout=30)


def unmount(root: Path) -> None:
    """Unmount everything below ``root``, deepest first; lazily if a straggler keeps one busy."""
    for mnt in sorted(mounts_under(root), key=len, reverse=True):
        out = subprocess.run(["umount", mnt], capture_output=True, text=True, check=False)
        if out.returncode != 0:
            subprocess.run(["umount", "-l", mnt], capture_output=True, text=True, check=True)
    left = mounts_under(root)
    if left:
        raise RuntimeError(f"still mounted after unmount: {' '.join(left)}")


@contextlib.contextmanager
def mounted(root: Path = CACHE) -> Iterator[Path]:
    """/proc and /dev bound into ``root`` for the body; the last user unmounts."""
    users = root.parent / f"{root.name}.users"
    users.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(users, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        with _flock(root.parent / f"{root.name}.lock", fcntl.LOCK_EX):
            _mount(root)
        try:
            yield root
        finally:
            try:
                # Exclusive succeeds only when no other run holds its shared lock.
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pass
            else:
                with _flock(root.parent / f"{root.name}.lock", fcntl.LOCK_EX):
                    unmount(root)
    finally:
        os.close(fd)


@contextlib.contextmanager
def trixie_root(root: Path = CACHE) -> Iterator[Path]:
    """Build (or reuse) the root and keep it mounted for the body."""
    build(root)
    with mounted(root) as r:
        yield r
