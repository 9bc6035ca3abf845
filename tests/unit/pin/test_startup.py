"""What a successor does after its compile and before it asks the running engine to leave.

Whatever is done there is off a takeover's critical path (request -> serving):
at 1024 sessions the netlink library's import, the collection of the compile's
garbage and the trim took 0.25-0.35 s of it when done after the request
(docs/operations.md). Each test runs in a fresh interpreter: the import must
be seen to happen, not found done by an earlier test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[3] / "engine"

PROBE = """
import gc, json, sys
from xdp_bfd.pin.startup import settle_after_compile
before = ("pyroute2" in sys.modules, gc.get_freeze_count())
settle_after_compile({clock})
print(json.dumps([before, ["pyroute2" in sys.modules, gc.get_freeze_count()]]))
"""


def _probe(clock: bool) -> tuple[list, list]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(clock=clock)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ENGINE)},
        check=True,
    )
    before, after = json.loads(out.stdout.strip().splitlines()[-1])
    return before, after


@pytest.mark.parametrize("clock", [True, False])
def test_the_netlink_library_is_loaded_and_the_compile_frozen_before_the_request(clock: bool) -> None:
    before, after = _probe(clock)
    assert before == [False, 0]  # the witness: nothing loaded or frozen by the imports themselves
    assert after[0] is clock  # the loop's library only for the transmit clock
    assert after[1] > 0  # what exists now is out of the last collection's walk
