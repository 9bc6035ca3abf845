"""Why the engine stops, and the exit status each reason gives (the contract in DESIGN.md).

0 clean, 2 usage, 75 handed over, 1 anything else — always with one line on
stderr saying why.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_HANDED_OVER = 75


class EngineError(Exception):
    """A reason to stop, reported as one line (exit 1)."""


class UsageError(Exception):
    """A bad argument: reported in one line, exit 2."""
