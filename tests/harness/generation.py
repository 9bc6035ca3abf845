"""Holding :class:`Session`'s methods to :attr:`Session.generation` (tests/unit/session/conftest.py).

A ``--pin`` handover encodes again only the sessions whose generation moved
(pin/state.py): a method that changed what :meth:`Session.export` returns
without moving it would hand a successor a stale session.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from xdp_bfd.session import Session

# Reads the state itself: wrapping it would check it with itself.
UNCHECKED = frozenset({"export"})


class GenerationStood(AssertionError):
    pass


def checked(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: Session, *args: Any, **kwargs: Any) -> Any:
        gen, before = self.generation, self.export()
        try:
            return method(self, *args, **kwargs)
        finally:
            if self.generation == gen and self.export() != before:
                changed = [
                    f for f, a, b in zip(Session.STATE_FIELDS, before, self.export(), strict=True) if a != b
                ]
                raise GenerationStood(f"Session.{name} changed {changed} without moving the generation")

    return call


def public_methods() -> list[str]:
    return sorted(
        name
        for name, value in vars(Session).items()
        if not name.startswith("_") and callable(value) and name not in UNCHECKED
    )
