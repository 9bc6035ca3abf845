"""The engine tells its observers of a session in the order they were added, and of its end in reverse.

The kernel transmit clock (fastpath.clock) is built on the Offload's slot:
it must let go of the slot's clock before the Offload frees the slot.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from harness.sessions import deliver, packet
from xdp_bfd.core.engine import Engine
from xdp_bfd.session import SessionConfig
from xdp_bfd.wire.control import State


class _Recorder:
    def __init__(self, name: str, calls: list[tuple[str, str]]) -> None:
        self.name, self.calls = name, calls

    def added(self, entry: Any) -> None:
        self.calls.append(("added", self.name))

    def removed(self, entry: Any) -> None:
        self.calls.append(("removed", self.name))

    def serviced(self, entry: Any) -> None:
        self.calls.append(("serviced", self.name))

    def counts(self, entry: Any, counts: Any) -> Any:
        return counts

    def session_stats(self, entry: Any, out: dict, now_ns: int) -> None:
        pass

    def document(self, doc: dict) -> None:
        pass


def test_removal_runs_the_observers_last_added_first(tmp_path: Path) -> None:
    engine = Engine(stats_path=tmp_path / "stats.json")
    calls: list[tuple[str, str]] = []
    for name in ("offload", "clock"):
        engine.add_observer(_Recorder(name, calls))
    try:
        cfg = SessionConfig(local=ipaddress.ip_address("127.0.0.1"), peer=ipaddress.ip_address("127.0.0.2"))
        entry = engine.add_session(cfg, "cli")
        assert [c for c in calls if c[0] == "added"] == [("added", "offload"), ("added", "clock")]
        engine.remove_session(entry.session.local_discr, admin_down=False)
        assert [c for c in calls if c[0] == "removed"] == [("removed", "clock"), ("removed", "offload")]
    finally:
        engine.shutdown()


def test_an_announced_transition_reaches_the_controller_once_and_the_log_at_the_service(
    tmp_path: Path, caplog
) -> None:
    """Host.announce: the listeners (bfddp) hear the transition at once; the session's service,
    later in the turn, writes its log line and does not tell the listeners a second time."""
    engine = Engine(stats_path=tmp_path / "stats.json")
    heard: list[State] = []
    engine.on_state_change(lambda _entry, ev: heard.append(ev.new))
    try:
        cfg = SessionConfig(local=ipaddress.ip_address("127.0.0.1"), peer=ipaddress.ip_address("127.0.0.2"))
        entry = engine.add_session(cfg, "cli")
        deliver(entry.session, packet(State.DOWN, your=0), 1_000)  # Down -> Init
        with caplog.at_level("INFO", logger="xdp_bfd"):
            engine.announce(entry)
            assert heard == [State.INIT]
            assert not [r for r in caplog.records if "-> init" in r.getMessage()]
            engine.service(entry, 1_000)
        assert heard == [State.INIT]
        assert [r.getMessage() for r in caplog.records if "-> init" in r.getMessage()] == [
            "session: 127.0.0.1 -> 127.0.0.2 single-hop down -> init (diag none)"
        ]
        assert entry.announced == []
    finally:
        engine.shutdown()


def test_a_job_handed_in_runs_as_background_work_before_the_next_stats_document(tmp_path: Path) -> None:
    """Host.in_background (pin's catch-up): a step per background step, ahead of a document asked after it."""
    engine = Engine(stats_path=tmp_path / "stats.json")
    order: list[str] = []

    def job() -> Any:
        for i in range(3):
            order.append(f"job {i}")
            yield

    try:
        engine.in_background(job())
        engine.want_stats(lambda doc: order.append("document") and None)
        r = engine.reactor
        for _ in range(100):
            if r.background is None:
                break
            r.step_background()
        assert order == ["job 0", "job 1", "job 2", "document"]
        assert r.background is None and not engine.jobs
    finally:
        engine.shutdown()
