"""What plugins hand a ``--pin`` successor, and what a predecessor handed this engine.

A board between plugins that must not know each other: the dataplane puts
its bfdd bookkeeping here, ``pin`` carries it across the takeover and leaves
the predecessor's for the dataplane to take. Nothing here knows the format.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

# The names on the board. The dataplane's bfdd bookkeeping, by discriminator:
# the handover format (version 2) carries it beside each session. And the
# predecessor's bfddp connection (pin/fdpass.py passes its sockets).
DPLANE_SESSIONS = "dplane"
DPLANE_CONNECTION = "dplane.connection"


class Handoff:
    def __init__(self) -> None:
        self._sections: dict[str, Callable[[], Any]] = {}
        self._inherited: dict[str, Any] = {}
        self._departures: list[Callable[[Path], None]] = []

    # -- a plugin that carries state ---------------------------------------------

    def add_section(self, name: str, section: Callable[[], Any]) -> None:
        """``section()`` is called when the state is written: what a successor should receive."""
        self._sections[name] = section

    def add_departure(self, depart: Callable[[Path], None]) -> None:
        """``depart(pin_root)`` runs once the state is written, just before the exit."""
        self._departures.append(depart)

    def take(self, name: str) -> Any:
        """What the predecessor left under ``name`` (None when nothing), handed out once."""
        return self._inherited.pop(name, None)

    # -- the carrier (pin) ---------------------------------------------------------

    def section(self, name: str) -> Any:
        """The current value of a section, or None when no plugin adds one."""
        make = self._sections.get(name)
        return make() if make is not None else None

    def leave(self, name: str, value: Any) -> None:
        """What the predecessor handed over for ``name``, for its plugin to take."""
        self._inherited[name] = value

    def depart(self, root: Path) -> None:
        for depart in self._departures:
            depart(root)
