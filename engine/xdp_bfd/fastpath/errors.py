"""The fast path's one error: it cannot be set up."""

from __future__ import annotations


class KernelError(Exception):
    """The fast path cannot be set up; the message is the one line to log."""


__all__ = ["KernelError"]
