"""bench/takeover.py reads the old engine's handover line: this build's parts, and an older build's line."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "bench"))

import takeover  # noqa: E402

THIS = (
    "pin: handed over 1024 sessions (515489 bytes of state) in 5.8 ms (encoding 4.4, 3.9 of CPU, 0 sessions "
    "encoded again since the warm-up, 2 compared, 3 read; writing 0.1, 1 of 32 chunks; sockets 1.0 (the "
    "sessions' 0.6, packet 0.3, bfddp 0.0), out of the 1000/10000us reservation); exiting 75"
)
# Before the request read only the sessions touched (2026-12-07): no "read".
READ_ALL = THIS.replace(", 3 read;", ";")
OLDER = (
    "pin: handed over 1024 sessions (515487 bytes of state) in 7.0 ms (encoding 4.7, 3 sessions encoded "
    "again since the warm-up, out of the 1000/10000us reservation); exiting 75"
)


def test_this_builds_line_gives_every_part() -> None:
    h = takeover.HANDED_RE.search(THIS)
    assert h is not None and h.groups() == ("1024", "515489", "5.8", "4.4", "0")
    assert takeover._handover_parts(THIS) == {
        "encoding_cpu_ms_old_log": 3.9,
        "compared": 2,
        "read": 3,
        "write_ms_old_log": 0.1,
        "chunks_written": [1, 32],
        "sockets_ms_old_log": 1.0,
    }
    assert takeover._handover_parts(READ_ALL) == {**takeover._handover_parts(THIS), "read": None}


def test_an_older_builds_line_gives_what_it_has() -> None:
    h = takeover.HANDED_RE.search(OLDER)
    assert h is not None and h.groups() == ("1024", "515487", "7.0", "4.7", "3")
    assert takeover._handover_parts(OLDER) == {}
