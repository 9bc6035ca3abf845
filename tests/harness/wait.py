"""Bounded waiting: the only way tests wait for something to happen."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """The condition did not hold within the bound; the message says what was awaited."""


def wait_until(
    predicate: Callable[[], T],
    *,
    timeout: float,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Poll ``predicate`` until it returns a truthy value, at most ``timeout`` seconds.

    Returns that value. Exceptions from the predicate propagate: a broken probe
    must not look like a slow system.
    """
    deadline = time.monotonic() + timeout
    last: T = predicate()
    while not last:
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:.1f}s waiting for {what} (last value: {last!r})")
        time.sleep(interval)
        last = predicate()
    return last
