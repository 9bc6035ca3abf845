"""``--pin``'s one error: the handover cannot happen."""

from __future__ import annotations


class HandoverError(Exception):
    """The handover cannot happen; the message is the line to log."""


__all__ = ["HandoverError"]
