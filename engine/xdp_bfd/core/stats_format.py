"""The stats JSON (contract in DESIGN.md), written atomically on SIGUSR1."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import time
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..wire.control import Diag, State

STATE_NAMES = {State.ADMIN_DOWN: "admin_down", State.DOWN: "down", State.INIT: "init", State.UP: "up"}
DIAG_NAMES = {
    Diag.NONE: "none",
    Diag.CONTROL_DETECTION_TIME_EXPIRED: "control_detection_time_expired",
    Diag.ECHO_FUNCTION_FAILED: "echo_function_failed",
    Diag.NEIGHBOR_SIGNALED_SESSION_DOWN: "neighbor_signaled_session_down",
    Diag.FORWARDING_PLANE_RESET: "forwarding_plane_reset",
    Diag.PATH_DOWN: "path_down",
    Diag.CONCATENATED_PATH_DOWN: "concatenated_path_down",
    Diag.ADMINISTRATIVELY_DOWN: "administratively_down",
    Diag.REVERSE_CONCATENATED_PATH_DOWN: "reverse_concatenated_path_down",
}


T = TypeVar("T")

# Sessions encoded per step of a dump (json's C encoder: a few µs each).
ENCODE_SLICE_SESSIONS = 32
# Stands in for the session list while the rest is encoded: JSON text can hold it
# only as this escaped string, which no other value of the document encodes to.
_SESSIONS_MARK = "\x00sessions\x00"


def run_steps(steps: Generator[None, None, T]) -> T:
    """A paced job's steps run back to back; its result (start-up, tests)."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def encode_steps(
    doc: dict[str, Any], *, slice_sessions: int = ENCODE_SLICE_SESSIONS
) -> Generator[None, None, list[bytes]]:
    """The document as one line of JSON, the session list a slice at a time (yielding between),
    in pieces: joined, the bytes ``json.dumps(doc)`` gives, without a step that grows with the
    session count.

    One line through the C encoder: with indent, json falls back to its
    pure-Python encoder, milliseconds of loop time per dump. Left in pieces:
    joining and encoding the whole at 4096 sessions (4 MB) was one step of
    2-6 ms (docs/benchmarks.md).
    """
    sessions = doc.get("sessions")
    if not isinstance(sessions, list):
        return [(json.dumps(doc) + "\n").encode()]
    head = json.dumps({**doc, "sessions": _SESSIONS_MARK})
    before, _, after = head.partition(json.dumps(_SESSIONS_MARK))
    pieces = [f"{before}[".encode()]
    for i in range(0, len(sessions), slice_sessions):
        yield
        text = ", ".join(map(json.dumps, sessions[i : i + slice_sessions]))
        pieces.append((f", {text}" if i else text).encode())
    pieces.append(f"]{after}\n".encode())
    return pieces


# Bytes written per step of a dump: thousands of sessions are megabytes of JSON,
# which in one write held the loop for milliseconds (docs/benchmarks.md).
WRITE_CHUNK = 128 * 1024


def write_atomic(path: Path, data: bytes | Sequence[bytes]) -> None:
    """:func:`write_atomic_steps` in one go (tests)."""
    run_steps(write_atomic_steps(path, data))


def write_atomic_steps(
    path: Path, data: bytes | Sequence[bytes], *, chunk: int = WRITE_CHUNK
) -> Generator[None, None, None]:
    """Readers never see a half-written file: a temp file in the same directory, then rename.

    Raw os calls, no tempfile or text I/O: this runs inside the loop, and
    after a CPU hog (cold caches) the Python I/O stack alone held it for
    milliseconds. Everything happens relative to the directory opened once
    (``dir_fd``), so what is checked is what is written into:

    - the directory must be one other users cannot rename files in: not
      writable by group or others unless sticky (``/tmp`` is sticky, a
      ``chmod 777`` directory is not), and owned by root or by us
      (:func:`check_directory`); otherwise ``OSError(EPERM)``, nothing written;
    - the temp name is fixed per process; ``O_EXCL|O_NOFOLLOW``, so a file or
      symlink another user planted there is removed, never written through;
    - the rename replaces a symlink at ``path`` itself, never its target.

    ``data`` is the bytes, or their pieces in order. Written ``chunk`` bytes
    at a time, yielding between (the loop runs its timers); a write abandoned
    half-way (the generator closed) removes its temp file like a failed one.
    """
    pieces = [data] if isinstance(data, bytes | bytearray) else data
    name = path.name
    tmp = f".{name}.{os.getpid()}.tmp"
    try:
        dfd = os.open(path.parent, _DIR_FLAGS)
    except FileNotFoundError:
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        dfd = os.open(path.parent, _DIR_FLAGS)
    try:
        check_directory(path.parent, os.fstat(dfd))
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(tmp, flags, 0o644, dir_fd=dfd)
        except FileExistsError:
            os.unlink(tmp, dir_fd=dfd)  # left by a write that failed half-way, or planted
            fd = os.open(tmp, flags, 0o644, dir_fd=dfd)
        try:
            try:
                os.fchmod(fd, 0o644)  # whatever the umask: operators' tools read it
                room = chunk  # what this step may still write
                for piece in pieces:
                    view = memoryview(piece)
                    while view:
                        if not room:
                            yield
                            room = chunk
                        n = os.write(fd, view[:room])
                        view, room = view[n:], room - n
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dfd)
            raise
    finally:
        os.close(dfd)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def check_directory(where: Path, st: os.stat_result) -> None:
    """Refuse a directory in which another user could replace or remove what we write."""
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022 and not mode & stat.S_ISVTX:
        raise OSError(
            errno.EPERM,
            f"{where} is writable by {'others' if mode & 0o002 else 'its group'} and not sticky "
            f"(mode {mode:04o}); refusing to write there",
        )
    if st.st_uid not in (0, os.geteuid()):
        raise OSError(
            errno.EPERM, f"{where} belongs to uid {st.st_uid}, neither root nor us; refusing to write there"
        )


# Wall clock minus monotonic clock, read once: ``up_since`` must be the same
# number in every dump. Converting with the clocks read at each dump moved it by
# a millisecond whenever the loop was held between the two reads.
_WALL_MINUS_MONO_S = time.time() - time.monotonic()


def wall_clock_of(mono_us: int) -> float:
    """Epoch seconds of a monotonic timestamp (for ``up_since``)."""
    return _WALL_MINUS_MONO_S + mono_us / 1e6
