"""The ``--pin`` directory: who owns it, what a starting engine does with it, what it clears.

``ROOT/owner`` is every build's: the owner record (which engine, running or
handed over, how long its state is). ``ROOT/<layout id>/`` holds one build's
maps. A starting engine checks that only root can have written any of it
(:func:`check_trusted`), reads the record before it compiles (:func:`plan`),
clears what it must not open (:func:`prepare`) and, once it owns the
directory, what other builds left (:func:`finish`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..fastpath.abi import Abi
from . import bpfsys
from .errors import HandoverError

log = logging.getLogger("xdp_bfd")


def check_bpffs(root: Path) -> None:
    try:
        on_bpffs = bpfsys.is_bpffs(root)
    except OSError as e:
        raise HandoverError(f"--pin {root}: {e.strerror}") from None
    if not on_bpffs:
        raise HandoverError(f"--pin {root} is not a bpffs (mount -t bpf bpf {root})")
    if '"' in str(root) or "\\" in str(root):
        raise HandoverError(f"--pin {root}: the path may not contain quotes or backslashes")


def _check_owned_by_root(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return  # nothing there to trust (yet)
    except OSError as e:
        raise HandoverError(f"--pin: {path}: {e.strerror}") from None
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        raise HandoverError(f"--pin: {path} is a symbolic link (owner uid {st.st_uid}); refusing to use it")
    if st.st_uid != 0 or mode & 0o022:
        raise HandoverError(
            f"--pin: {path} is owned by uid {st.st_uid} with mode {mode:04o}: it must be owned by root "
            "and not writable by group or others (mount -t bpf -o mode=0700); refusing to use it"
        )


def check_trusted(root: Path, layout: str) -> None:
    """Refuse (HandoverError, one line) a pin directory someone other than root could have written.

    The directory, the owner record, this build's layout directory and every
    map in it: what the engine opens by path and reads. Other builds' layout
    directories are only ever removed.
    """
    ours = root / layout
    paths = [root, root / "owner", ours]
    if ours.is_dir() and not ours.is_symlink():
        try:
            paths += sorted(ours.iterdir())
        except OSError as e:
            raise HandoverError(f"--pin: {ours}: {e.strerror}") from None
    for path in paths:
        _check_owned_by_root(path)


def make_layout_dir(root: Path, layout: str) -> None:
    """This build's map directory, root's only (0700 whatever the umask), unless it is there."""
    ours = root / layout
    try:
        ours.mkdir(mode=0o700)
    except FileExistsError:
        return  # checked by check_trusted
    except OSError as e:
        raise HandoverError(f"--pin: {ours}: {e.strerror}") from None
    os.chmod(ours, 0o700)


@dataclass(frozen=True)
class Owner:
    """The owner record, as any build wrote it."""

    pid: int
    state: int  # abi.OwnerState (0: nobody)
    blob_len: int
    done_ns: int  # CLOCK_MONOTONIC when the state was last written; 0 from a build that did not record it


def read_owner(root: Path, abi: Abi) -> Owner | None:
    """The owner record of ``root`` (any build's), read before we compile anything."""
    path = root / "owner"
    if not path.exists():
        return None
    fd = bpfsys.open_pinned(path)
    try:
        values = [bpfsys.lookup_u64(fd, i) for i in range(abi.owner_slots)]
    finally:
        os.close(fd)
    slot = abi.Owner
    return Owner(values[slot.PID], values[slot.STATE], values[slot.BLOB_LEN], values[slot.DONE_NS])


def is_engine(pid: int) -> bool:
    """A live xdp-bfd process (the name guards against a recycled pid)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "xdp-bfd" and pid != os.getpid()
    except OSError:
        return False


def layout_dirs(root: Path) -> list[Path]:
    return [p for p in root.iterdir() if p.is_dir() and len(p.name) == 16 and _is_hex(p.name)]


def _is_hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


def remove_pins(directory: Path) -> None:
    for p in directory.iterdir():
        with contextlib.suppress(OSError):
            p.unlink()
    with contextlib.suppress(OSError):
        directory.rmdir()


@dataclass(frozen=True)
class Plan:
    """What a starting engine does with ``--pin``: fresh, takeover (pid), replace (pid), adopt."""

    kind: str
    pid: int = 0
    why: str = ""


def plan(root: Path, layout: str, abi: Abi) -> Plan:
    owner = read_owner(root, abi)
    ours = root / layout
    same = ours.is_dir() and any(ours.iterdir())
    if owner and owner.pid and is_engine(owner.pid):
        if same:
            return Plan("takeover", owner.pid)
        return Plan("replace", owner.pid, "its maps were built with a different layout")
    if owner and owner.state == abi.OwnerState.HANDED_OVER:
        if same:
            return Plan("adopt", owner.pid)
        return Plan("fresh", why="the state left there was built with a different map layout")
    if same:
        return Plan("fresh", why="no engine handed it over (it stopped or crashed)")
    return Plan("fresh")


def prepare(root: Path, layout: str, p: Plan) -> None:
    """Before compiling: a fresh start must not open stale maps of our own layout."""
    if p.kind in ("fresh", "replace") and (root / layout).is_dir():
        remove_pins(root / layout)
    if p.why:
        log.warning("pin: discarding the pinned state in %s (%s); starting fresh", root, p.why)


def finish(root: Path, layout: str) -> None:
    """Once we own the directory: what other builds left there goes."""
    for d in layout_dirs(root):
        if d.name != layout:
            remove_pins(d)


__all__ = [
    "Owner",
    "Plan",
    "check_bpffs",
    "check_trusted",
    "finish",
    "is_engine",
    "layout_dirs",
    "make_layout_dir",
    "plan",
    "prepare",
    "read_owner",
    "remove_pins",
]
