"""The shell's one clock: monotonic microseconds, the unit the sans-I/O core takes."""

from __future__ import annotations

import time


def now_us() -> int:
    return time.monotonic_ns() // 1000
