"""The cyclic collector during the engine's start: held off until what the start made is frozen.

A full collection between a takeover's request and READY walked every decoded
record and restored session for nothing (docs/benchmarks.md, "A takeover
without a collection"). Run in a fresh interpreter: the collector's switch is
process-wide, and a test before this one must not have left it either way.
"""

from __future__ import annotations

from pathlib import Path

from harness.fresh import probe_json

# The start as app.run makes it, in software and with no session (no compile, nothing bound):
# what the collector's switch is where the sessions would be made, and when
# the loop would run.
PROBE = """
import gc, json, sys
from xdp_bfd import app, cli
from xdp_bfd.core.engine import Engine
seen = {{}}
def receivers(self):
    seen["start"] = [gc.isenabled(), gc.get_freeze_count()]
    {fail}
def loop(self):
    seen["loop"] = [gc.isenabled(), gc.get_freeze_count()]
Engine.open_receivers = receivers
Engine.loop = loop
seen["before"] = gc.isenabled()
try:
    app.run(cli.parse_args(["--stats-dump", sys.argv[1], "--sessions", sys.argv[2]]))
except RuntimeError:
    pass
seen["after"] = gc.isenabled()
print(json.dumps(seen))
"""


def _probe(tmp_path: Path, fail: bool) -> dict:
    (tmp_path / "sessions.yml").write_text("[]\n")  # a file without sessions: nothing bound, nothing sent
    code = PROBE.format(fail='raise RuntimeError("stopped")' if fail else "pass")
    return probe_json(code, str(tmp_path / "stats.json"), str(tmp_path / "sessions.yml"))


def test_no_collection_runs_by_itself_during_the_start_and_the_loop_has_the_collector(tmp_path: Path) -> None:
    seen = _probe(tmp_path, fail=False)
    assert seen["before"] is True  # the witness: the interpreter starts with it on
    assert seen["start"][0] is False  # held off where the sessions are made
    assert seen["loop"][0] is True  # and back once the loop runs
    assert seen["loop"][1] > seen["start"][1]  # after the freeze of what the start made


def test_a_start_that_fails_before_the_freeze_gives_the_collector_back(tmp_path: Path) -> None:
    seen = _probe(tmp_path, fail=True)
    assert seen["start"][0] is False
    assert "loop" not in seen  # the witness: it failed before the freeze
    assert seen["after"] is True
