"""No secret in Ansible output: an option or a role variable that carries one must be ``no_log``.

Today none does: the engine's only secrets are the ``auth.secret`` values of
the sessions file, which no module and no role writes (bfd_session manages
FRR peers, and FRR 8.4's bfdd has no authentication). These tests keep it so:
a module option named like a secret without ``no_log=True``, or a role
variable named like one, fails here until it is handled (docs/security.md).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
SECRET_NAME = re.compile(r"secret|passw|passphrase|token|credential|private_key|api_key|psk|(^|_)key$")
# Role variables that carry a secret, with every task using them ``no_log: true``. None yet.
HANDLED_ROLE_VARS: set[str] = set()


def _options(call: ast.AST, names: dict[str, ast.AST], prefix: str = "") -> list[tuple[str, ast.Call]]:
    """(dotted name, its dict(...) call) for every option of an argument_spec, suboptions included;
    ``names``: the module's top-level assignments, for ``options=PEER_OPTIONS``."""
    if isinstance(call, ast.Name):
        call = names.get(call.id, call)
    if not isinstance(call, ast.Call):
        return []
    out = []
    for kw in call.keywords:
        value = names.get(kw.value.id, kw.value) if isinstance(kw.value, ast.Name) else kw.value
        if kw.arg is None or not isinstance(value, ast.Call):
            continue
        name = f"{prefix}{kw.arg}"
        out.append((name, value))
        for sub in value.keywords:
            if sub.arg == "options":
                out += _options(sub.value, names, f"{name}.")
    return out


def unlogged_secret_options(source: str) -> list[str]:
    """Options named like a secret whose spec lacks ``no_log=True``, in a module's source."""
    bad = []
    tree = ast.parse(source)
    names = {
        t.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "AnsibleModule"):
            continue
        for kw in node.keywords:
            if kw.arg != "argument_spec":
                continue
            for name, spec in _options(kw.value, names):
                if not SECRET_NAME.search(name.rsplit(".", 1)[-1]):
                    continue
                no_log = next((k.value for k in spec.keywords if k.arg == "no_log"), None)
                if not (isinstance(no_log, ast.Constant) and no_log.value is True):
                    bad.append(name)
    return bad


MODULES = sorted((ROOT / "plugins" / "modules").glob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_no_module_option_carries_a_secret_unlogged(path):
    source = path.read_text()
    assert "argument_spec" in source, f"{path.name}: no argument_spec found to check"
    assert unlogged_secret_options(source) == [], f"{path.name}: set no_log=True on these options"


def test_the_check_finds_an_unlogged_secret_option():
    source = """
AUTH = dict(key_id=dict(type='int'), secret=dict(type='str'))
module = AnsibleModule(argument_spec=dict(
    peer=dict(type='str'),
    auth=dict(type='dict', options=AUTH),
    password=dict(type='str', no_log=False),
    api_token=dict(type='str', no_log=True),
))
"""
    assert unlogged_secret_options(source) == ["auth.secret", "password"]


def _role_vars(spec: dict, prefix: str = "") -> list[str]:
    out = []
    for name, opt in (spec or {}).items():
        out.append(f"{prefix}{name}")
        if isinstance(opt, dict) and isinstance(opt.get("options"), dict):
            out += _role_vars(opt["options"], f"{prefix}{name}.")
    return out


SPECS = sorted((ROOT / "roles").glob("*/meta/argument_specs.yml"))


@pytest.mark.parametrize("path", SPECS, ids=[p.parts[-3] for p in SPECS])
def test_no_role_variable_carries_a_secret_unhandled(path):
    spec = yaml.safe_load(path.read_text())["argument_specs"]
    names = {n for entry in spec.values() for n in _role_vars(entry.get("options", {}))}
    secretish = sorted(n for n in names if SECRET_NAME.search(n.rsplit(".", 1)[-1]))
    assert set(secretish) <= HANDLED_ROLE_VARS, (
        f"{path}: {secretish} look like secrets: mark every task that uses them `no_log: true`, "
        "then list them in HANDLED_ROLE_VARS"
    )
    assert names, f"{path}: no options read"
