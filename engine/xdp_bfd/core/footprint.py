"""What bcc's compile leaves in the engine's address space, given back after start-up.

The engine compiles its programs once, with LLVM and clang in-process, and
never again; what they leave mapped is paid for when the process exits, and
a handover (--pin) waits on the old engine's exit. Both run right after the
compile, before a running engine is asked to leave (the successor's time to
serve would otherwise include them), and the heap is trimmed once more before
the deadline reservation. Best-effort: a failure costs exit time, nothing else.
"""

from __future__ import annotations

import contextlib
import ctypes
import re

MADV_DONTNEED = 4
# The compiler's own libraries: used for the compile only. Python's and libc's
# text stay mapped (the loop would refault them under its reservation).
COMPILER_LIBS = re.compile(r"/lib(LLVM|clang)[^/]*\.so")
# A mapping's header line; anonymous mappings end at the inode, sometimes without a trailing space.
_VMA = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ (\d+)(?:\s+(\S.*?))?\s*$")


def trim_heap() -> None:
    """Give the compiler's freed heap back to the kernel (glibc only).

    bcc's compile leaves tens of megabytes of freed heap mapped; trimmed, the
    engine is a third of the size and exits sooner (docs/benchmarks.md), and
    its exit is what a --pin successor waits on.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def compiler_ranges(smaps: str) -> list[tuple[int, int, int]]:
    """(start, end, resident kB) of the compiler libraries' mappings safe to unmap.

    Only read-only mappings without a single anonymous (written) page: their
    contents are the file's, so dropping the page table entries loses nothing
    and a later touch refaults from the page cache. A written page (relocated
    RELRO) would be lost, so a mapping with any is left alone.
    """
    out: list[tuple[int, int, int]] = []
    cur: dict | None = None
    for line in smaps.splitlines():
        m = _VMA.match(line)
        if m:
            if cur is not None and cur["ok"]:
                out.append((cur["start"], cur["end"], cur["rss"]))
            path = m.group(5) or ""
            cur = {
                "start": int(m.group(1), 16),
                "end": int(m.group(2), 16),
                "rss": 0,
                "anon": None,
                "ok": "w" not in m.group(3) and int(m.group(4)) != 0 and bool(COMPILER_LIBS.search(path)),
            }
        elif cur is not None and line.startswith("Rss:"):
            cur["rss"] = int(line.split()[1])
        elif cur is not None and line.startswith("Anonymous:"):
            if int(line.split()[1]) != 0:
                cur["ok"] = False
            cur["anon"] = 0
    if cur is not None and cur["ok"]:
        out.append((cur["start"], cur["end"], cur["rss"]))
    return [(s, e, rss) for s, e, rss in out if rss > 0]


def shed_compiler_pages() -> int:
    """Unmap LLVM's and clang's resident file pages; returns the kB dropped.

    They stay resident after the compile, and unmapping them at exit was a
    large share of the exit time (docs/benchmarks.md), which is what a
    successor waits on once the old engine has written its state.
    """
    try:
        with open("/proc/self/smaps") as f:
            ranges = compiler_ranges(f.read())
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    except (OSError, AttributeError):
        return 0
    dropped = 0
    for start, end, rss in ranges:
        if libc.madvise(start, end - start, MADV_DONTNEED) == 0:
            dropped += rss
    return dropped
