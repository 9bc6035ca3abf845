"""The layout id: what names a build's map layouts, so that ``--pin`` adopts only maps it can read.

The maps live under ``ROOT/<layout id>/``: a successor whose programs changed
but whose maps did not shares them with its predecessor; any change to what
decides a map's layout (the headers, the flags that size the maps) names
another directory, and the successor starts fresh (see bfd_abi.h).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .abi import Abi


def layout_sources(src: Path) -> list[str]:
    """What decides the map layouts: maps.h and every header it includes, transitively.

    Program code (xdp_bfd.c, sweep.c, parse.h) is not among them: a successor
    whose programs changed but whose maps did not adopts the maps (--pin).
    """
    out, todo = [], ["maps.h"]
    while todo:
        name = todo.pop(0)
        if name in out:
            continue
        out.append(name)
        todo += re.findall(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"', (src / name).read_text(), re.M)
    return out


def layout_id(src: Path, cflags: list[str]) -> str:
    """Names a build's map layouts: everything that decides them, hashed."""
    h = hashlib.sha256()
    for name in sorted(layout_sources(src)):
        h.update((src / name).read_bytes())
    for flag in sorted(cflags):
        h.update(flag.encode() + b"\0")
    return h.hexdigest()[:16]


def layout_cflags(max_sessions: int) -> list[str]:
    """The flags that shape the maps (and so the layout id)."""
    flags = [f"-DBFD_MAX_SESSIONS={max_sessions}"]
    if os.environ.get("XDP_BFD_TEST_LAYOUT_CHANGE") == "1":
        # Tests stand in for an upgrade whose maps differ with a real layout change.
        flags.append("-DBFD_TEST_LAYOUT_CHANGE")
    return flags


@dataclass(frozen=True)
class PinPaths:
    """``--pin ROOT``: ROOT/owner for every build, ROOT/<layout id>/ for this build's maps."""

    root: Path
    layout: str

    @classmethod
    def of_build(cls, root: Path, build: Abi) -> PinPaths:
        """Where the maps of the build ``build`` was read from go under ``root`` (its sources' layout id)."""
        return cls(root, layout_id(build.header.parent, layout_cflags(build.max_sessions)))

    @property
    def maps(self) -> Path:
        return self.root / self.layout

    def cflags(self) -> list[str]:
        return [f'-DBFD_PIN_ROOT="{self.root}"', f'-DBFD_PIN_DIR="{self.maps}"']


__all__ = ["PinPaths", "layout_cflags", "layout_id", "layout_sources"]
