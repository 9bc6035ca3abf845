"""Every test of the session machine also holds its methods to :attr:`Session.generation`.

Wrapped here, each public method's every call in these tests checks that it
moved the generation if it changed the state (harness/generation.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.generation import checked, public_methods
from xdp_bfd.session import Session


@pytest.fixture(autouse=True, scope="module")
def generation_checked() -> Iterator[None]:
    # Module-scoped (and by hand): hypothesis refuses function-scoped fixtures around @given.
    saved = {name: vars(Session)[name] for name in public_methods()}
    for name, method in saved.items():
        setattr(Session, name, checked(name, method))
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(Session, name, method)
