"""The stats document is built a slice at a time while the loop runs: its fields must agree."""

from __future__ import annotations

import ipaddress
from collections import Counter

from harness.sessions import packet
from xdp_bfd.core.document import STATS_SLICE_SESSIONS, StatsDocument
from xdp_bfd.core.host import Entry
from xdp_bfd.core.lag import LoopLag
from xdp_bfd.session import Session, SessionConfig
from xdp_bfd.wire.control import State, encode_control


def _entries(n: int) -> dict[int, Entry]:
    out = {}
    for k in range(1, n + 1):
        cfg = SessionConfig(
            local=ipaddress.ip_address("192.0.2.1"), peer=ipaddress.ip_address(f"192.0.2.{k + 1}")
        )
        out[k] = Entry(session=Session(cfg, k, now_us=0), tx=None, origin="cli")  # type: ignore[arg-type]
    return out


def test_the_up_count_agrees_with_the_states_listed_while_they_change_between_slices() -> None:
    """A session listed in the first slice comes Up before the count: the count follows the list."""
    sessions = _entries(2 * STATS_SLICE_SESSIONS)
    doc_steps = StatsDocument(sessions, [], drops=Counter(), lag=LoopLag(), deadman_us=0).steps()
    next(doc_steps)  # the first slice is listed, every session Down
    first = sessions[1].session
    raw = encode_control(packet(State.INIT, your=1))
    first.receive(packet(State.INIT, your=1), raw, 1_000)  # Down + Init -> Up, between two slices
    assert first.state == State.UP
    try:
        while True:
            next(doc_steps)
    except StopIteration as done:
        doc = done.value
    listed = sum(1 for x in doc["sessions"] if x["state"] == "up")
    assert (doc["sessions_up"], listed) == (0, 0)
    assert doc["sessions_span_ms"] >= 0
