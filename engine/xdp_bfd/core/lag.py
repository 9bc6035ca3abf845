"""How late the loop ran what was due (a cumulative histogram, one sample per wake-up), and how
long its background work held it (the longest step, and the last whole job's steps)."""

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
        self.background = BackgroundSteps()

    def add(self, lag_us: int) -> None:
        self.sum_us += lag_us
        self.max_us = max(self.max_us, lag_us)
        self.counts[bisect.bisect_left(LAG_BUCKETS_US, lag_us)] += 1

    def doc(self) -> dict[str, Any]:
        cumulative, total = [], 0
        for le, n in zip((*LAG_BUCKETS_US, "+Inf"), self.counts, strict=True):
            total += n
            cumulative.append([le, total])
        return {
            "buckets": cumulative,
            "count": total,
            "sum_us": self.sum_us,
            "max_us": self.max_us,
            "background": self.background.doc(),
        }


class BackgroundSteps:
    """The loop's background steps (a stats document, its encoding or exposition): how long the
    longest held the loop, and for the last job that ran to its end, how many steps over how long.

    Each step is measured twice: on the clock (``step_max_us``: what the loop's
    timers waited) and in the thread's CPU time (``step_cpu_max_us``). A step
    whose clock time is far above its CPU time was kept from running (its
    reservation's runtime used up, a higher class on the CPU), not slow itself;
    interrupts served meanwhile count in both. A job's own document reports
    the job before it (it is not over while it is being built).
    """

    def __init__(self) -> None:
        self.steps = 0
        self.step_max_us = 0
        self.step_cpu_max_us = 0
        self.jobs = 0
        self.last_job: dict[str, Any] | None = None
        self._job_start_us = 0
        self._job = [0, 0, 0, 0, 0]  # steps, busy, CPU, longest, longest in CPU (µs)

    def started(self, now_us: int) -> None:
        self._job_start_us = now_us
        self._job = [0, 0, 0, 0, 0]

    def step(self, took_us: int, cpu_us: int) -> None:
        self.steps += 1
        self.step_max_us = max(self.step_max_us, took_us)
        self.step_cpu_max_us = max(self.step_cpu_max_us, cpu_us)
        job = self._job
        job[0] += 1
        job[1] += took_us
        job[2] += cpu_us
        job[3] = max(job[3], took_us)
        job[4] = max(job[4], cpu_us)

    def finished(self, now_us: int) -> None:
        self.jobs += 1
        steps, busy, cpu, longest, longest_cpu = self._job
        self.last_job = {
            "steps": steps,
            "step_max_us": longest,
            "step_cpu_max_us": longest_cpu,
            "busy_us": busy,
            "cpu_us": cpu,
            "wall_us": now_us - self._job_start_us,
        }

    def doc(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "step_max_us": self.step_max_us,
            "step_cpu_max_us": self.step_cpu_max_us,
            "jobs": self.jobs,
            "last_job": self.last_job,
        }
