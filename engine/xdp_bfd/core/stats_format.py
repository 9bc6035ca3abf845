"""The stats JSON (contract in DESIGN.md), written atomically on SIGUSR1."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

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


def encode(doc: dict[str, Any]) -> bytes:
    # One line through the C encoder: with indent, json falls back to its
    # pure-Python encoder, milliseconds of loop time per dump.
    return (json.dumps(doc) + "\n").encode()


def write_atomic(path: Path, data: bytes) -> None:
    """Readers never see a half-written file: a temp file in the same directory, then rename.

    Raw os calls, no tempfile or text I/O: this runs inside the loop, and
    after a CPU hog (cold caches) the Python I/O stack alone held it for
    milliseconds. The temp name is fixed per process; O_EXCL|O_NOFOLLOW so a
    planted file or symlink there is removed, never written through.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, flags, 0o644)
    except FileExistsError:
        os.unlink(tmp)  # left by a write that failed half-way
        fd = os.open(tmp, flags, 0o644)
    try:
        try:
            os.fchmod(fd, 0o644)  # whatever the umask: operators' tools read it
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


# Wall clock minus monotonic clock, read once: ``up_since`` must be the same
# number in every dump. Converting with the clocks read at each dump moved it by
# a millisecond whenever the loop was held between the two reads.
_WALL_MINUS_MONO_S = time.time() - time.monotonic()


def wall_clock_of(mono_us: int) -> float:
    """Epoch seconds of a monotonic timestamp (for ``up_since``)."""
    return _WALL_MINUS_MONO_S + mono_us / 1e6
