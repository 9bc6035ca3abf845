"""Helpers to run the collection's modules in-process against faked commands.

Imported by the tests under tests/unit/plugins (``from fastpath_modtest import Cmd``);
the ``run_module`` fixture in conftest.py wraps :func:`run`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from ansible.module_utils import basic
from ansible.module_utils.common import warnings as ansible_warnings

try:
    from ansible.module_utils.testing import patch_module_args  # ansible-core >= 2.19
except ImportError:
    patch_module_args = None

BINARIES = {
    "ethtool": "/usr/sbin/ethtool",
    "vtysh": "/usr/bin/vtysh",
    "lspci": "/usr/bin/lspci",
    "setpci": "/usr/bin/setpci",
    "pkill": "/usr/bin/pkill",
    "kill": "/usr/bin/kill",
    "systemctl": "/usr/bin/systemctl",
}


@dataclass
class Cmd:
    """One expected command and what the fake returns for it."""

    argv: list[str]
    rc: int = 0
    out: str = ""
    err: str = ""
    effect: Callable[[], None] | None = None  # e.g. the engine writing its stats file


@dataclass
class Result:
    data: dict[str, Any]
    ran: list[list[str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.data.get("failed"))

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)


class _Exit(Exception):
    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__(data.get("msg", ""))
        self.data = data


def _patch_args(args: dict[str, Any]) -> Any:
    if patch_module_args is None:  # older cores read the serialized args from basic._ANSIBLE_ARGS
        payload = json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode()
        return mock.patch.object(basic, "_ANSIBLE_ARGS", payload)
    return patch_module_args(args)


def run(
    module: Any,
    params: dict[str, Any],
    commands: list[Cmd],
    *,
    check_mode: bool = False,
    diff: bool = False,
    binaries: dict[str, str | None] | None = None,
) -> Result:
    expected = list(commands)
    ran: list[list[str]] = []
    bins = dict(BINARIES, **(binaries or {}))

    def run_command(self: basic.AnsibleModule, args: Any, **kwargs: Any) -> tuple[int, str, str]:
        assert isinstance(args, list), f"commands must be argv lists, got {args!r}"
        ran.append(list(args))
        assert expected, f"unexpected command {args!r} (all expected commands already ran)"
        want = expected.pop(0)
        assert list(args) == want.argv, f"command {args!r}, expected {want.argv!r}"
        if want.effect is not None:
            want.effect()
        return want.rc, want.out, want.err

    def get_bin_path(
        self: basic.AnsibleModule, name: str, required: bool = False, opt_dirs: Any = None
    ) -> Any:
        path = bins.get(name)
        if path is None and required:
            self.fail_json(msg=f"Failed to find required executable {name!r} in paths")
        return path

    def exit_json(self: basic.AnsibleModule, **kwargs: Any) -> None:
        kwargs.setdefault("changed", False)
        raise _Exit(kwargs)

    def fail_json(self: basic.AnsibleModule, msg: str, **kwargs: Any) -> None:
        kwargs.update(failed=True, msg=msg)
        raise _Exit(kwargs)

    args = dict(params, _ansible_check_mode=check_mode, _ansible_diff=diff)
    with (
        _patch_args(args),
        mock.patch.object(basic.AnsibleModule, "run_command", run_command),
        mock.patch.object(basic.AnsibleModule, "get_bin_path", get_bin_path),
        mock.patch.object(basic.AnsibleModule, "exit_json", exit_json),
        mock.patch.object(basic.AnsibleModule, "fail_json", fail_json),
        # Warnings are process-global (and deduplicated): give each run its own.
        mock.patch.object(ansible_warnings, "_global_warnings", type(ansible_warnings._global_warnings)()),
    ):
        try:
            module.main()
        except _Exit as e:
            data = e.data
        else:
            raise AssertionError("the module returned without exit_json or fail_json")
        warnings = list(ansible_warnings.get_warning_messages())
    if not data.get("failed"):
        assert not expected, f"commands expected but not run: {[c.argv for c in expected]!r}"
    else:
        msg = data["msg"]
        assert isinstance(msg, str) and msg, "a failure must say why"
        assert "Traceback" not in msg
    return Result(data=data, ran=ran, warnings=[str(w) for w in warnings])


def assert_subset(expected: Any, actual: Any, path: str = "result", *, item_subsets: bool = False) -> None:
    """Every key of ``expected`` is in ``actual`` with that value (recursively).

    Lists compare exactly, unless ``item_subsets``: then a list of dicts
    matches item by item, each as a subset.
    """
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: {actual!r} is not a dict"
        for k, v in expected.items():
            assert k in actual, f"{path}.{k} missing from {actual!r}"
            assert_subset(v, actual[k], f"{path}.{k}", item_subsets=item_subsets)
    elif item_subsets and isinstance(expected, list) and expected and isinstance(expected[0], dict):
        assert len(actual) == len(expected), f"{path}: {actual!r}"
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            assert_subset(e, a, f"{path}[{i}]", item_subsets=True)
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def run_case(
    module: Any,
    case: dict[str, Any],
    *,
    fail_format: dict[str, Any] | None = None,
    item_subsets: bool = False,
) -> Result:
    """Run one data-driven case and check it.

    A case has ``params`` and ``commands`` (the exact argv expected), optionally
    ``check_mode`` and ``binaries``; then either ``fail`` (the exact msg, with
    ``fail_format`` substituted) and ``fail_has``, or ``expect`` and ``msg_contains``.
    """
    res = run(
        module,
        case["params"],
        case["commands"],
        check_mode=case.get("check_mode", False),
        binaries=case.get("binaries"),
    )
    if "fail" in case:
        assert res.failed, res.data
        want = case["fail"].format(**fail_format) if fail_format else case["fail"]
        assert res["msg"] == want
        assert_subset(case.get("fail_has", {}), res.data)
    else:
        assert not res.failed, res.data
        assert_subset(case["expect"], res.data, item_subsets=item_subsets)
        if "msg_contains" in case:
            assert case["msg_contains"] in res["msg"]
    return res
