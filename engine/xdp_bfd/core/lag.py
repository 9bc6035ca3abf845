"""How late the loop ran what was due: a cumulative histogram, one sample per wake-up."""

from __future__ import annotations

import bisect
from typing import Any

# Loop lag histogram bounds (µs): how late the loop ran what was due. A starved
# loop shows here as a tail that a percentile of packet gaps would hide.
LAG_BUCKETS_US = (100, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 250_000, 500_000, 1_000_000)


class LoopLag:
    """Cumulative histogram of loop lateness, one sample per wake-up (O(1))."""

    def __init__(self) -> None:
        self.counts = [0] * (len(LAG_BUCKETS_US) + 1)
        self.sum_us = 0
        self.max_us = 0

    def add(self, lag_us: int) -> None:
        self.sum_us += lag_us
        self.max_us = max(self.max_us, lag_us)
        self.counts[bisect.bisect_left(LAG_BUCKETS_US, lag_us)] += 1

    def doc(self) -> dict[str, Any]:
        cumulative, total = [], 0
        for le, n in zip((*LAG_BUCKETS_US, "+Inf"), self.counts, strict=True):
            total += n
            cumulative.append([le, total])
        return {"buckets": cumulative, "count": total, "sum_us": self.sum_us, "max_us": self.max_us}
