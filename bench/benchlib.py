"""What the bench scripts share: machine facts, result files, tables, CPU and BPF run stats.

Benchmarks are measurements, not tests: nothing here asserts a timing. Every
script writes one JSON file under ``bench/out/`` (git-ignored) holding the
machine facts, the exact command line, the durations and the figures, and
prints a small table.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import json
import math
import os
import platform
import shlex
import struct
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out"
sys.path.insert(0, str(REPO / "tests"))  # the integration harness: harness.netns, harness.frr…

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _run(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def machine_facts() -> dict[str, Any]:
    from harness.frr import frr_version  # noqa: PLC0415

    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        frr = ".".join(map(str, frr_version()))
    except (OSError, subprocess.CalledProcessError, RuntimeError):
        frr = None
    return {
        "kernel": platform.release(),
        "nproc": os.cpu_count(),
        "cpu_model": cpu,
        "bcc": _run(["dpkg-query", "-W", "-f", "${Version}", "python3-bpfcc"]) or None,
        "frr": frr,
        "python": platform.python_version(),
        "engine_commit": _run(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"]) or None,
        "loadavg_at_start": Path("/proc/loadavg").read_text().split()[:3],
        "bpf_stats_enabled_at_start": sysctl_get("kernel.bpf_stats_enabled"),
        # Set to run the engine against another copy of bpf/ (an experiment); None: the checkout's.
        "xdp_bfd_bpf_dir": os.environ.get("XDP_BFD_BPF_DIR"),
    }


def command_line() -> str:
    return shlex.join([sys.executable, *sys.argv])


def utc_stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def workdir(name: str, stamp: str) -> Path:
    """Per-run directory for logs, session files and stats dumps (kept for post-mortems)."""
    d = OUT / "work" / f"{name}-{stamp}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def write_result(name: str, stamp: str, doc: dict[str, Any]) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}-{stamp}.json"
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return path


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers], *[[_fmt(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}" if abs(v) >= 1 or v == 0 else f"{v:.3f}"
    return str(v)


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest rank (rank = ceil(q*n)), as the capture harness reports gaps: a value that happened."""
    idx = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values) - 1e-9) - 1))
    return sorted_values[idx]


def need_root() -> None:
    if os.geteuid() != 0:
        sys.exit("bench: needs root (network namespaces, XDP, FRR)")


def begin(bench: str, params: dict[str, Any]) -> tuple[str, Path, dict[str, Any]]:
    """Start a run: root checked, a work directory, and the result document's header."""
    need_root()
    stamp = utc_stamp()
    doc: dict[str, Any] = {
        "bench": bench,
        "command": command_line(),
        "machine": machine_facts(),
        "started_at": stamp,
        "params": params,
    }
    return stamp, workdir(bench, stamp), doc


def require_clean_netns(prefix: str) -> list[str]:
    """Namespaces of this process still present (should be none after cleanup)."""
    out = _run(["ip", "netns", "list"])
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix)]


# -- links, without pyroute2 ---------------------------------------------------
# In a long-lived process (bench/suite.py) pyroute2's NetNS get_links twice waited
# forever for a netlink reply; iproute2 in a subprocess is bounded by a timeout.


def ip_link(ns: str, ifname: str) -> dict[str, Any]:
    """``ip -j -s link show dev IFNAME`` inside namespace ``ns``: address, stats64, …"""
    out = subprocess.run(
        ["ip", "-n", ns, "-j", "-s", "link", "show", "dev", ifname],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return json.loads(out)[0]


def mac(ns: str, ifname: str) -> str:
    return ip_link(ns, ifname)["address"]


def link_counts(ns: str, ifname: str) -> dict[str, int]:
    s = ip_link(ns, ifname).get("stats64", {})
    rx, tx = s.get("rx", {}), s.get("tx", {})
    return {
        "rx_packets": int(rx.get("packets", 0)),
        "tx_packets": int(tx.get("packets", 0)),
        "rx_dropped": int(rx.get("dropped", 0)),
        "tx_dropped": int(tx.get("dropped", 0)),
    }


# -- sysctl ---------------------------------------------------------------------


def sysctl_get(key: str) -> str:
    return Path("/proc/sys", *key.split(".")).read_text().strip()


def sysctl_set(key: str, value: str) -> None:
    Path("/proc/sys", *key.split(".")).write_text(f"{value}\n")


BPF_ENABLE_STATS = 32  # bpf(2) command: run-time stats on while the returned fd is open
BPF_STATS_RUN_TIME = 0
NR_BPF = {"x86_64": 321, "aarch64": 280}


def enable_stats_fd() -> int | None:
    """An fd that keeps the kernel's BPF run-time stats on for as long as it is open.

    The sysctl is one machine-wide switch: another run on the machine that restores
    ``kernel.bpf_stats_enabled=0`` while we measure would zero our windows. The kernel
    counts this fd and the sysctl together (one static key), so with it held the stats
    stay on whatever anyone writes to the sysctl. None where the call is refused.
    """
    nr = NR_BPF.get(platform.machine())
    if nr is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.create_string_buffer(struct.pack("=I", BPF_STATS_RUN_TIME), 8)
    fd = libc.syscall(ctypes.c_long(nr), ctypes.c_int(BPF_ENABLE_STATS), attr, ctypes.c_uint(8))
    return fd if fd >= 0 else None


@contextlib.contextmanager
def bpf_stats_enabled() -> Iterator[str]:
    """kernel.bpf_stats_enabled=1 for the body (and a BPF_ENABLE_STATS fd held, see
    :func:`enable_stats_fd`); the old value is restored whatever happens."""
    old = sysctl_get("kernel.bpf_stats_enabled")
    fd = enable_stats_fd()
    sysctl_set("kernel.bpf_stats_enabled", "1")
    try:
        yield old
    finally:
        sysctl_set("kernel.bpf_stats_enabled", old)
        if fd is not None:
            os.close(fd)


# -- the environment witness -------------------------------------------------------
# The test suite's kernel-paced reference stream (tests/harness/witness.py): when it
# shows a gap, the machine (or the hypervisor under it) was late, and so was everything
# else on it in that moment.


def start_witness(workdir: Path, *, per_cpu: bool = False) -> Any:
    """A started :class:`harness.witness.ReferenceStream` writing under ``workdir``; with
    ``per_cpu`` one stream pinned to each CPU (``ReferenceStreams``: a window's figures are the
    worst CPU's, for work whose softirqs may run on either)."""
    from harness.witness import ReferenceStream, ReferenceStreams  # noqa: PLC0415

    workdir.mkdir(parents=True, exist_ok=True)
    stream = ReferenceStreams(workdir, range(os.cpu_count() or 1)) if per_cpu else ReferenceStream(workdir)
    try:
        return stream.start()
    except BaseException:
        stream.close()
        raise


def witness_window(stream: Any, t0: float, t1: float) -> dict[str, Any] | None:
    """What the reference stream saw between ``t0`` and ``t1`` (wall clock, as pcap stamps);
    None without a stream, ``{"error": ...}`` when it could not say."""
    if stream is None:
        return None
    if t1 <= t0:
        return {"error": f"empty window ({t0:.6f} .. {t1:.6f})"}
    try:
        f = stream.figures(t0, t1)
    except Exception as e:  # a witness that cannot answer must not cost the measurement
        return {"error": f"{type(e).__name__}: {e}"}
    return {
        "stall_ms": round(f.stall_ms, 3),
        "max_gap_ms": round(f.max_gap_ms, 3),
        "max_gap_at_s": round(f.max_gap_at_s, 3),
        "frames": f.frames,
        "expected": f.expected,
        "late_gaps": f.late_gaps,
        "period_ms": f.period_ms,
    }


# -- CPU accounting -------------------------------------------------------------


def proc_cpu(pid: int) -> dict[str, float]:
    """CPU consumed so far by process ``pid`` (all threads).

    ``stat_s``: utime+stime from /proc/PID/stat (clock ticks; this kernel has
    tick-based accounting, so short wake-ups are sampled, not timed).
    ``sched_s``: the scheduler's exact sum_exec_runtime over all threads.
    ``wakeups``: voluntary + involuntary context switches over all threads.
    """
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3 of stat(5)); utime/stime are fields 14/15.
    stat_s = (int(fields[11]) + int(fields[12])) / CLK_TCK
    sched_ns = 0
    switches = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            sched_ns += int((task / "schedstat").read_text().split()[0])
            for line in (task / "status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    switches += int(line.split()[1])
    return {"stat_s": stat_s, "sched_s": sched_ns / 1e9, "wakeups": float(switches), "t": time.monotonic()}


def cpu_delta(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    """Percent of one core over the interval between two :func:`proc_cpu` samples."""
    wall = b["t"] - a["t"]
    return {
        "window_s": round(wall, 3),
        "cpu_pct_stat": round(100 * (b["stat_s"] - a["stat_s"]) / wall, 3),
        "cpu_pct_sched": round(100 * (b["sched_s"] - a["sched_s"]) / wall, 3),
        "wakeups_per_s": round((b["wakeups"] - a["wakeups"]) / wall, 1),
    }


def system_cpu() -> dict[str, int]:
    """/proc/stat 'cpu' line: jiffies by kind, for the softirq share of the machine."""
    parts = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
    return {n: int(v) for n, v in zip(names, parts, strict=False)}


def system_cpu_delta(a: dict[str, int], b: dict[str, int]) -> dict[str, float]:
    d = {k: b[k] - a[k] for k in a}
    total = sum(d.values()) or 1
    ncpu = os.cpu_count() or 1
    # As percent of one core, like the per-process figures.
    return {f"{k}_pct": round(100 * ncpu * v / total, 2) for k, v in d.items()}


def _prog_info(text: str) -> dict[str, Any] | None:
    """The run stats of one fdinfo text, or None when the descriptor is not a BPF program."""
    if "prog_type:" not in text:
        return None
    info: dict[str, Any] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        value = value.strip()
        if key in ("prog_type", "prog_id", "run_time_ns", "run_cnt", "recursion_misses"):
            info[key] = int(value)
        elif key == "prog_tag":
            info[key] = value
    return info if "prog_id" in info else None


def bpf_prog_stats(pid: int) -> list[dict[str, Any]]:
    """run_cnt/run_time_ns of every BPF program a process holds an fd for (from fdinfo)."""
    progs: dict[int, dict[str, Any]] = {}
    fddir = Path(f"/proc/{pid}/fdinfo")
    for fd in fddir.iterdir():
        try:
            info = _prog_info(fd.read_text())
        except OSError:
            continue
        if info is not None:
            progs[info["prog_id"]] = info
    return sorted(progs.values(), key=lambda i: i["prog_id"])


def bpf_prog_fd_stats(pid: int, fd: int) -> tuple[int, int]:
    """(run_cnt, run_time_ns) of the BPF program behind descriptor ``fd`` of process ``pid``."""
    info = _prog_info(Path(f"/proc/{pid}/fdinfo/{fd}").read_text())
    if info is None:
        raise RuntimeError(f"descriptor {fd} of process {pid} is not a BPF program")
    return info["run_cnt"], info["run_time_ns"]


def monotonic_sleep_until(deadline: float) -> None:
    delay = deadline - time.monotonic()
    if delay > 0:
        time.sleep(delay)
