"""Find the running engine and its stats file, and ask it for a fresh dump (``xdp-bfd show``).

The engine is a process named ``xdp-bfd`` (``cli.set_process_name``); it writes
no pid file. Its stats path is whatever its own command line says
(``--stats-dump PATH``, else ``DEFAULT_STATS_PATH``); only when the command
line cannot be read is ``/etc/xdp-bfd/engine.conf`` (the role's
``XDP_BFD_ARGS=`` / ``XDP_BFD_SCHED=``, which the unit expands into that very
command line) consulted. The file is read through ``/proc/PID/root``, so the
path resolves in the engine's mount namespace: the unit's PrivateTmp /tmp, or
the mounts ``ip netns exec`` or a container gave it.

Fresh means: the file at that path was replaced after our SIGUSR1 (a new
(inode, mtime): every dump renames a new file into place), it was generated
after the signal, and it was written by the engine we signalled.

Nothing here imports the engine loop; ``plugins/module_utils/locate.py``
holds the same rules for the Ansible modules, which cannot import this
package (keep the two in step).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_STATS_PATH = "/tmp/bfd_tx_stats.json"  # the operator manual reads it from here
PROC = Path("/proc")
PROCESS_NAME = "xdp-bfd"
ENGINE_CONF = Path("/etc/xdp-bfd/engine.conf")
CONF_VARIABLES = ("XDP_BFD_ARGS", "XDP_BFD_SCHED")  # in ExecStart's order
STATS_OPTION = "--stats-dump"
# argparse accepts any unambiguous prefix: "--st" is the shortest for --stats-dump.
STATS_OPTION_MIN_PREFIX = 4
# generated_at is rounded to the millisecond by the engine.
GENERATED_AT_SLACK_S = 0.001
POLL_INTERVAL_S = 0.02
DEFAULT_TIMEOUT_S = 5.0


class LocateError(Exception):
    """Why there is nothing to show, in one line; ``exit_code`` for the command."""

    exit_code = 1


class NoEngine(LocateError):
    exit_code = 3  # LSB's "program is not running", as `systemctl status` uses it


class SeveralEngines(LocateError):
    exit_code = 2  # the operator has to choose: --pid


@dataclass(frozen=True)
class EngineProc:
    pid: int
    argv: tuple[str, ...]
    unit: str | None = None  # the systemd unit (or scope) its cgroup names

    def describe(self) -> str:
        return f"pid {self.pid}" + (f" ({self.unit})" if self.unit else "")


@dataclass(frozen=True)
class StatsLocation:
    path: str  # as the engine names it, in its own mount namespace
    source: str  # "command line", "engine.conf" or "default"
    read_path: Path  # where this process reads it (through /proc/PID/root)


# -- parsing (pure) -----------------------------------------------------------------


def engine_args(argv: Sequence[str]) -> list[str]:
    """The engine's own arguments from its full argv (interpreter, script, arguments)."""
    for i, word in enumerate(argv):
        if os.path.basename(word) == PROCESS_NAME:
            return list(argv[i + 1 :])
        if word == "-m" and i + 1 < len(argv) and argv[i + 1] in ("xdp_bfd", "xdp_bfd.cli"):
            return list(argv[i + 2 :])
    return list(argv[1:])


def stats_path_from_args(args: Sequence[str]) -> str | None:
    """The value of ``--stats-dump`` as argparse reads it (last one wins, prefixes, ``=``)."""
    found = None
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            break
        name, eq, value = word.partition("=")
        if len(name) >= STATS_OPTION_MIN_PREFIX and STATS_OPTION.startswith(name):
            if eq:
                found = value
            elif i + 1 < len(args):
                found = args[i + 1]
                i += 1
        i += 1
    return found


def parse_env_file(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines as systemd's EnvironmentFile= reads them (the subset the role writes:
    comments, blank lines, single or double quotes, backslash escapes, continued lines)."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        while line.endswith("\\") and i < len(lines):
            line = line[:-1] + lines[i].strip()
            i += 1
        if not line or line[0] in "#;" or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = _unquote(value.strip())
    return out


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        inner = value[1:-1]
        if value[0] == "'":
            return inner
        out, escaped = [], False
        for ch in inner:
            if escaped:
                out.append(ch)
                escaped = False
            elif ch == "\\":
                escaped = True
            else:
                out.append(ch)
        return "".join(out)
    return value


def stats_path_from_conf(text: str) -> str | None:
    """``--stats-dump`` from engine.conf: ExecStart's ``$XDP_BFD_ARGS $XDP_BFD_SCHED``, split on
    whitespace as systemd splits an unbraced variable."""
    env = parse_env_file(text)
    words: list[str] = []
    for key in CONF_VARIABLES:
        words += env.get(key, "").split()
    return stats_path_from_args(words)


def unit_of(cgroup_text: str) -> str | None:
    """The systemd unit or scope a /proc/PID/cgroup names (cgroup v2 line first)."""
    paths: list[str] = []
    for line in cgroup_text.splitlines():
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hier == "0" and not controllers:
            paths.insert(0, path)
        elif controllers == "name=systemd":
            paths.append(path)
    for path in paths:
        for part in reversed(path.split("/")):
            if part.endswith((".service", ".scope")):
                return part
    return None


def sigusr1_caught(status_text: str) -> bool | None:
    """Whether /proc/PID/status says SIGUSR1 has a handler (None: no SigCgt line)."""
    for line in status_text.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split(":", 1)[1].strip(), 16) >> (signal.SIGUSR1 - 1) & 1)
    return None


def own_pid(status_text: str, pid: int) -> int:
    """The pid the process sees itself as (innermost of NSpid): what its stats call ``pid``."""
    for line in status_text.splitlines():
        if line.startswith("NSpid:"):
            fields = line.split()[1:]
            if fields and fields[-1].isdigit():
                return int(fields[-1])
    return pid


# -- the process table --------------------------------------------------------------


def _read(path: Path) -> str | None:
    try:
        return path.read_bytes().decode(errors="replace")
    except OSError:
        return None


def read_argv(pid: int, proc: Path = PROC) -> tuple[str, ...]:
    raw = _read(proc / str(pid) / "cmdline") or ""
    raw = raw.removesuffix("\0")
    return tuple(raw.split("\0")) if raw else ()


def find_engines(
    proc: Path = PROC, name: str = PROCESS_NAME, exclude: Sequence[int] | None = None
) -> list[EngineProc]:
    """Every live process named ``name`` that is an engine (not an ``xdp-bfd show``), by pid."""
    skip = {os.getpid()} if exclude is None else set(exclude)
    found = []
    try:
        entries = list(proc.iterdir())
    except OSError:
        return []
    for entry in entries:
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        if (_read(entry / "comm") or "").rstrip("\n") != name:
            continue
        if _dead(entry):
            continue
        argv = read_argv(int(entry.name), proc)
        if engine_args(argv)[:1] == ["show"]:
            continue  # another operator's `xdp-bfd show`, before it renamed itself
        found.append(EngineProc(int(entry.name), argv, unit_of(_read(entry / "cgroup") or "")))
    return sorted(found, key=lambda e: e.pid)


def _dead(pid_dir: Path) -> bool:
    """A zombie (exited, not yet reaped) or a process going away."""
    state = (_read(pid_dir / "stat") or "").rpartition(")")[2].split()[:1]
    return bool(state) and state[0] in ("Z", "X")


def engine_by_pid(pid: int, proc: Path = PROC, name: str = PROCESS_NAME) -> EngineProc:
    comm = _read(proc / str(pid) / "comm")
    if comm is None or _dead(proc / str(pid)):
        raise NoEngine(f"no process with pid {pid}" + ("" if comm is None else " (it has exited)"))
    if comm.rstrip("\n") != name:
        raise LocateError(f"pid {pid} is {comm.strip()!r}, not the engine ({name})")
    return EngineProc(pid, read_argv(pid, proc), unit_of(_read(proc / str(pid) / "cgroup") or ""))


def choose(engines: Sequence[EngineProc], name: str = PROCESS_NAME) -> EngineProc:
    if not engines:
        raise NoEngine(f"no engine running (no process named {name})")
    if len(engines) > 1:
        listed = ", ".join(e.describe() for e in engines)
        raise SeveralEngines(f"{len(engines)} engines are running: {listed}; choose one with --pid")
    return engines[0]


def stats_location(engine: EngineProc, proc: Path = PROC, conf: Path = ENGINE_CONF) -> StatsLocation:
    """Where ``engine`` writes its stats, and where this process can read them."""
    pid_dir = proc / str(engine.pid)
    if engine.argv:
        path, source = stats_path_from_args(engine_args(engine.argv)), "command line"
    else:  # a command line we cannot read: what the unit would have passed
        text = _read(conf)
        path, source = (stats_path_from_conf(text), "engine.conf") if text is not None else (None, "")
    if not path:
        path, source = DEFAULT_STATS_PATH, "default"
    if not path.startswith("/"):
        try:
            cwd = os.readlink(pid_dir / "cwd")
        except OSError:
            cwd = "/"
        path = os.path.join(cwd, path)
    root = pid_dir / "root"
    try:
        os.stat(root)
    except OSError:
        read_path = Path(path)  # not ours to look into (not root): the path as we see it
    else:
        read_path = root / path.lstrip("/")
    return StatsLocation(path, source, read_path)


# -- asking for a dump ---------------------------------------------------------------


def file_identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def request_stats(
    engine: EngineProc,
    where: StatsLocation,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    proc: Path = PROC,
    kill: Callable[[int, int], None] = os.kill,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[dict[str, Any], float]:
    """SIGUSR1 ``engine``, wait at most ``timeout`` s for a fresh file; (document, seconds waited)."""
    status = _read(proc / str(engine.pid) / "status") or ""
    if sigusr1_caught(status) is False:
        raise LocateError(f"engine {engine.describe()} is still starting (it does not handle SIGUSR1 yet)")
    expect_pid = own_pid(status, engine.pid)
    before = file_identity(where.read_path)
    sent = clock()
    try:
        kill(engine.pid, signal.SIGUSR1)
    except ProcessLookupError:
        raise NoEngine(f"engine {engine.describe()} exited") from None
    except PermissionError:
        raise LocateError(f"not allowed to signal engine {engine.describe()} (run as root)") from None
    deadline = sent + timeout
    last = "the file was not replaced"
    while True:
        now = file_identity(where.read_path)
        if now is not None and now != before:
            doc, why = _fresh(where.read_path, sent, expect_pid)
            if doc is not None:
                return doc, round(clock() - sent, 3)
            last = why
        if clock() >= deadline:
            break
        sleep(POLL_INTERVAL_S)
    raise LocateError(
        f"no fresh stats from engine {engine.describe()} at {where.path} ({where.source}) "
        f"within {timeout:g} s of SIGUSR1: {last}; refusing to show old data"
    )


def _fresh(path: Path, sent: float, expect_pid: int) -> tuple[dict[str, Any] | None, str]:
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError) as e:
        return None, f"cannot read it: {e}"
    if not isinstance(doc, dict):
        return None, "it does not hold a JSON object"
    generated = doc.get("generated_at")
    if not isinstance(generated, (int, float)) or generated + GENERATED_AT_SLACK_S < sent:
        return None, f"it was generated at {generated}, before the signal at {sent:.3f}"
    if doc.get("pid") != expect_pid:
        return None, f"it was written by pid {doc.get('pid')}, not by the engine signalled"
    return doc, ""
