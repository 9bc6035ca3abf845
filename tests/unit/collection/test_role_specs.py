"""Each role's argument spec and its defaults say the same thing.

``meta/argument_specs.yml`` is what validates a run before any change (and what
``ansible-doc -t role`` shows); ``defaults/main.yml`` is what a run gets. A
variable in one and not the other, or two different defaults, is a variable the
preflight does not check or documents wrongly.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[3] / "roles"
# Defined once for every role, in roles/common (a dependency of each).
SHARED = yaml.safe_load((ROLES / "common" / "defaults" / "main.yml").read_text())
SPEC_ROLES = sorted(p.parent.parent.name for p in ROLES.glob("*/meta/argument_specs.yml"))


def _spec(role: str, entry: str = "main") -> dict:
    return yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())["argument_specs"][entry]


@pytest.mark.parametrize("role", SPEC_ROLES)
def test_every_default_is_in_the_spec_with_the_same_value(role: str) -> None:
    defaults = yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text()) or {}
    options = _spec(role)["options"]
    for name, value in defaults.items():
        assert name in options, f"{role}: {name} has a default but no argument spec"
        assert options[name].get("default") == value, f"{role}: {name} defaults differ"


@pytest.mark.parametrize("role", SPEC_ROLES)
def test_every_spec_option_has_a_default(role: str) -> None:
    defaults = (yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text()) or {}) | SHARED
    for name, option in _spec(role)["options"].items():
        if option.get("required"):
            continue
        assert name in defaults, f"{role}: {name} is in the argument spec but has no default"
        assert option.get("default") == defaults[name], f"{role}: {name}: spec {option.get('default')!r}"


@pytest.mark.parametrize("role", SPEC_ROLES)
def test_the_preflight_entry_point_takes_the_main_options(role: str) -> None:
    assert _spec(role, "preflight")["options"] == _spec(role)["options"]
