"""What a successor does after its compile and before it asks the running engine to leave.

Whatever is done there is off a takeover's critical path (request -> serving):
at 1024 sessions the netlink library's import, the collection of the compile's
garbage and the trim took 0.25-0.35 s of it when done after the request
(docs/operations.md). Each test runs in a fresh interpreter: the import must
be seen to happen, not found done by an earlier test.
"""

from __future__ import annotations

import pytest

from harness.fresh import probe_json

PROBE = """
import gc, json, sys
from xdp_bfd.pin.startup import settle_after_compile
before = ("pyroute2" in sys.modules, gc.get_freeze_count())
settle_after_compile({clock})
print(json.dumps([before, ["pyroute2" in sys.modules, gc.get_freeze_count()]]))
"""


def _probe(clock: bool) -> tuple[list, list]:
    before, after = probe_json(PROBE.format(clock=clock))
    return before, after


@pytest.mark.parametrize("clock", [True, False])
def test_the_netlink_library_is_loaded_and_the_compile_frozen_before_the_request(clock: bool) -> None:
    before, after = _probe(clock)
    assert before == [False, 0]  # the witness: nothing loaded or frozen by the imports themselves
    assert after[0] is clock  # the loop's library only for the transmit clock
    assert after[1] > 0  # what exists now is out of the last collection's walk
