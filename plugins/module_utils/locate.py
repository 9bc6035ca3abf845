# -*- coding: utf-8 -*-
# Copyright: xdp_bfd.fastpath developers
# GNU General Public License v2.0 or later (see LICENSE or https://www.gnu.org/licenses/old-licenses/gpl-2.0.txt),
# which includes version 3 of the License (https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-2.0-or-later

"""Where the running xdp-bfd engine writes its stats, found from the engine itself.

The engine is a process named ``xdp-bfd`` (or the pid in a pid file); it writes no pid
file of its own. Its stats path is what its command line says (``--stats-dump PATH``,
argparse's ``--stats-dump=PATH`` and unambiguous prefixes included), else the engine's
default ``/tmp/bfd_tx_stats.json``. Only when no engine runs or its command line cannot
be read is ``/etc/xdp-bfd/engine.conf`` consulted (the engine role's ``XDP_BFD_ARGS=``
and ``XDP_BFD_SCHED=``, which the unit expands into that command line). The file is read
through ``/proc/PID/root``: the path then resolves in the engine's mount namespace, so the
unit's private /tmp (PrivateTmp=yes) and ``ip netns exec``'s mounts are reached.

The same rules as the engine's ``xdp_bfd/locate.py`` (``xdp-bfd show``), which a module
cannot import: the engine may live in a venv of its own on the managed host. Keep the two
in step.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

PROC = "/proc"
ENGINE_CONF = "/etc/xdp-bfd/engine.conf"
CONF_VARIABLES = ("XDP_BFD_ARGS", "XDP_BFD_SCHED")
# The engine's own default (xdp_bfd.stats.locate.DEFAULT_STATS_PATH), used when its command line has none.
ENGINE_DEFAULT_STATS_PATH = "/tmp/bfd_tx_stats.json"
STATS_OPTION = "--stats-dump"
STATS_OPTION_MIN_PREFIX = 4  # "--st": the shortest prefix argparse takes for --stats-dump


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except (IOError, OSError):
        return None


def engine_args(argv, process_name="xdp-bfd"):
    """The engine's own arguments from its full argv (interpreter, script, arguments)."""
    for i, word in enumerate(argv):
        if os.path.basename(word) == process_name:
            return list(argv[i + 1:])
        if word == "-m" and i + 1 < len(argv) and argv[i + 1] in ("xdp_bfd", "xdp_bfd.cli"):
            return list(argv[i + 2:])
    return list(argv[1:])


def stats_path_from_args(args):
    """The value of ``--stats-dump`` as argparse reads it (last one wins), or None."""
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


def _unquote(value):
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


def parse_env_file(text):
    """``KEY=VALUE`` lines as systemd's EnvironmentFile= reads them (comments, quotes,
    backslash escapes, continued lines)."""
    out = {}
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
        key, value = line.split("=", 1)
        out[key.strip()] = _unquote(value.strip())
    return out


def stats_path_from_conf(text):
    """``--stats-dump`` from engine.conf: ExecStart's ``$XDP_BFD_ARGS $XDP_BFD_SCHED``,
    split on whitespace as systemd splits an unbraced variable."""
    env = parse_env_file(text)
    words = []
    for key in CONF_VARIABLES:
        words += env.get(key, "").split()
    return stats_path_from_args(words)


def read_argv(pid, proc=None):
    proc = proc or PROC
    raw = _read(os.path.join(proc, str(pid), "cmdline")) or ""
    if raw.endswith("\0"):
        raw = raw[:-1]
    return raw.split("\0") if raw else []


def find_engines(process_name="xdp-bfd", proc=None):
    """Pids of the live processes named ``process_name`` that are engines (not ``xdp-bfd show``)."""
    proc = proc or PROC
    try:
        entries = os.listdir(proc)
    except (IOError, OSError):
        return []
    pids = []
    for entry in entries:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        comm = _read(os.path.join(proc, entry, "comm"))
        if comm is None or comm.rstrip("\n") != process_name:
            continue
        stat = _read(os.path.join(proc, entry, "stat")) or ""
        state = stat.rpartition(")")[2].split()[:1]
        if state and state[0] in ("Z", "X"):
            continue
        if engine_args(read_argv(entry, proc), process_name)[:1] == ["show"]:
            continue
        pids.append(int(entry))
    return sorted(pids)


def in_root(pid, path, proc=None):
    """``path`` (absolute, as the process sees it) as this process can read it: through
    /proc/PID/root when that is open to us (root), else as is."""
    proc = proc or PROC
    root = os.path.join(proc, str(pid), "root")
    try:
        os.stat(root)
    except (IOError, OSError):
        return path
    return os.path.join(root, path.lstrip("/"))


def engine_stats_path(pid, process_name="xdp-bfd", proc=None, conf=None):
    """(path as the engine names it, where it came from: cmdline, engine.conf or default)."""
    proc = proc or PROC
    conf = conf or ENGINE_CONF
    argv = read_argv(pid, proc)
    path, source = None, None
    if argv:
        path, source = stats_path_from_args(engine_args(argv, process_name)), "cmdline"
    else:
        text = _read(conf)
        if text is not None:
            path, source = stats_path_from_conf(text), "engine.conf"
    if not path:
        return ENGINE_DEFAULT_STATS_PATH, "default"
    if not path.startswith("/"):
        try:
            cwd = os.readlink(os.path.join(proc, str(pid), "cwd"))
        except (IOError, OSError):
            cwd = "/"
        path = os.path.join(cwd, path)
    return path, source


def engine_pids(pid=None, process_name="xdp-bfd", proc=None):
    """The engines to consider: ``pid`` (from a pid file) if it is a live process, else
    every process named ``process_name``."""
    proc = proc or PROC
    if pid is not None:
        return [int(pid)] if os.path.isdir(os.path.join(proc, str(pid))) else []
    return find_engines(process_name, proc)


def discover(pids, process_name="xdp-bfd", proc=None, conf=None):
    """Find the stats file of the one engine in ``pids`` (see :func:`engine_pids`).

    Returns a dict: ``path`` (as the engine names it), ``read_path`` (where this process
    reads it), ``source`` (cmdline, engine.conf or default) and ``error`` (a sentence, with
    ``path`` None, when several engines run). With no engine running, ``path`` is still
    engine.conf's (or the default), so that the last dump can be shown.
    """
    proc = proc or PROC
    conf = conf or ENGINE_CONF
    result = {"path": None, "read_path": None, "source": None, "error": None}
    if len(pids) > 1:
        result["error"] = (
            "%d engines named %s are running (pids %s): give the stats path or a pid file"
            % (len(pids), process_name, ", ".join(str(p) for p in pids))
        )
        return result
    if pids:
        path, source = engine_stats_path(pids[0], process_name, proc, conf)
        result.update(path=path, source=source, read_path=in_root(pids[0], path, proc))
        return result
    text = _read(conf)
    path = stats_path_from_conf(text) if text is not None else None
    if path and path.startswith("/"):
        result.update(path=path, source="engine.conf", read_path=path)
    else:
        result.update(path=ENGINE_DEFAULT_STATS_PATH, source="default", read_path=ENGINE_DEFAULT_STATS_PATH)
    return result
