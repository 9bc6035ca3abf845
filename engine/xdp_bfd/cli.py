"""Command line entry point (placeholder until the engine lands)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("xdp-bfd: engine not built yet", file=sys.stderr)
    return 1
