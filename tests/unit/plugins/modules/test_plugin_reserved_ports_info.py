"""reserved_ports_info against a faked /proc/sys/net/ipv4/ip_local_reserved_ports (kernel 6.1 spelling)."""

from __future__ import annotations

import pytest
from ansible_collections.xdp_bfd.fastpath.plugins.modules import reserved_ports_info
from fastpath_modtest import run_case

# live: what the file holds (None: no file); then the module's answer. No command runs.
CASES = [
    {
        "id": "empty-adds-the-port",
        "live": "\n",
        "params": {"port": 50700},
        "expect": {"changed": False, "live": "", "merged": "50700", "conflicts": []},
    },
    {
        "id": "already-reserved-reads-back-the-same",
        "live": "50700\n",
        "params": {"port": 50700},
        "expect": {"live": "50700", "merged": "50700", "conflicts": []},
    },
    {
        "id": "adjacent-port-joins-a-range-as-the-kernel-prints-it",
        "live": "4000-4010,50701\n",
        "params": {"port": 50700},
        "expect": {"live": "4000-4010,50701", "merged": "4000-4010,50700-50701", "conflicts": []},
    },
    {
        "id": "unsorted-overlapping-input-is-normalised",
        "live": "9000, 8000-8100,8050-8200\n",
        "params": {"port": 50700},
        "expect": {"live": "8000-8200,9000", "merged": "8000-8200,9000,50700"},
    },
    {
        "id": "reservation-in-the-engine-source-ports-is-a-conflict",
        "live": "50700,65000-65480,65500\n",
        "params": {"port": 50700},
        "expect": {"merged": "50700,65000-65480,65500", "conflicts": ["65000-65480", "65500"]},
    },
    {
        "id": "forbidden-range-is-a-parameter",
        "live": "8000\n",
        "params": {"port": 50700, "forbidden": [7000, 8000]},
        "expect": {"conflicts": ["8000"]},
    },
    {
        "id": "port-out-of-range-fails",
        "live": "",
        "params": {"port": 70000},
        "fail": "port must be 1-65535, got 70000",
    },
    {
        "id": "forbidden-not-a-range-fails",
        "live": "",
        "params": {"port": 50700, "forbidden": [65535, 65472]},
        "fail": "forbidden must be [FIRST, LAST] with FIRST <= LAST, got [65535, 65472]",
    },
    {
        "id": "unreadable-file-fails",
        "live": None,
        "params": {"port": 50700},
        "fail": "cannot read {proc}: No such file or directory",
    },
    {
        "id": "garbage-fails",
        "live": "fifty\n",
        "params": {"port": 50700},
        "fail": "cannot read {proc}: 'fifty' is not a port list",
    },
]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_reserved_ports_info(tmp_path, monkeypatch, case):
    proc = tmp_path / "ip_local_reserved_ports"
    if case["live"] is not None:
        proc.write_text(case["live"])
    monkeypatch.setattr(reserved_ports_info, "PROC", str(proc))
    res = run_case(reserved_ports_info, dict(case, commands=[]), fail_format={"proc": proc})
    if not res.failed:
        assert res["changed"] is False


def test_check_mode_reads_the_same(tmp_path, monkeypatch, run_module):
    proc = tmp_path / "ip_local_reserved_ports"
    proc.write_text("50700\n")
    monkeypatch.setattr(reserved_ports_info, "PROC", str(proc))
    res = run_module(reserved_ports_info, {"port": 50711}, [], check_mode=True)
    assert (res["changed"], res["merged"]) == (False, "50700,50711")
