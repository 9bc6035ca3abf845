"""A takeover's request reads only the sessions touched since the warm-up (pin/touched.py).

Each test warms up (``state.rehearse``), changes something, and holds the
request's state to one ``json.dumps`` of the whole document; ``state.read()``
is the witness of how many sessions the request read: it must move by exactly
the sessions touched, and to every session when the table itself changed.
"""

from __future__ import annotations

import copy
import ipaddress
import os
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from xdp_bfd.core.handoff import DPLANE_SESSIONS, Handoff
from xdp_bfd.core.host import Entry
from xdp_bfd.pin import state, touched
from xdp_bfd.session import Session, SessionConfig

N = 6


def _entry(i: int) -> Entry:
    config = SessionConfig(
        local=ipaddress.ip_address(f"198.19.{i}.1"),
        peer=ipaddress.ip_address(f"198.19.{i}.2"),
        interface="eth0",
        min_tx_us=10_000,
        min_rx_us=10_000,
    )
    s = Session(config, 100 + i, now_us=1_000, rng=random.Random(i))
    return Entry(session=s, tx=SimpleNamespace(sport=49152 + i), origin="file", drops=Counter(ttl=i))


def _host(n: int = N) -> SimpleNamespace:
    entries = [_entry(i) for i in range(n)]
    return SimpleNamespace(sessions={e.session.local_discr: e for e in entries}, handoff=Handoff())


def _whole_dump(host: Any, nslots: int = 16) -> bytes:
    dp = state._bookkeeping(host)
    records = [state._record(e, dp.get(d)) for d, e in host.sessions.items()]
    return state._dump([state.fingerprint(), os.getpid(), nslots, records])


def _warmed(host: Any) -> bytes:
    for _ in state.rehearse(host, 4):
        pass
    return state.rehearsed(host, 16)


def _requested(host: Any, reads: int, what: str = "") -> None:
    """The request's state is the whole document's dump, and it read ``reads`` sessions."""
    assert state.encode(host, 16) == _whole_dump(host), what
    assert state.read() == reads, what


def _second(host: Any) -> Entry:
    return list(host.sessions.values())[1]


def test_nothing_touched_reads_nothing_and_hands_over_the_warm_ups_very_bytes() -> None:
    host = _host()
    warm = _warmed(host)
    blob = state.encode(host, 16)
    assert blob is warm and blob == _whole_dump(host)
    assert state.read() == 0
    # Another size of the slot table frames the same records again.
    assert state.encode(host, 32) == _whole_dump(host, 32)


def _drop_changes() -> list[tuple[str, Callable[[Counter], Any]]]:
    def ior(c: Counter) -> None:
        c |= Counter(ttl=99)

    def iadd(c: Counter) -> None:
        c += Counter(auth=1)

    return [
        ("counted", lambda c: c.__setitem__("auth", c["auth"] + 1)),
        ("deleted", lambda c: c.__delitem__("ttl")),
        ("updated", lambda c: c.update(auth=2)),
        ("subtracted", lambda c: c.subtract(ttl=1)),
        ("cleared", lambda c: c.clear()),
        ("popped", lambda c: c.pop("ttl")),
        ("popped an item", lambda c: c.popitem()),
        ("set by default", lambda c: c.setdefault("auth", 3)),
        ("or-ed in place", ior),
        ("added in place", iadd),
    ]


@pytest.mark.parametrize("which", range(len(_drop_changes())))
def test_every_way_of_changing_the_drop_counts_in_place_is_seen(which: int) -> None:
    host = _host()
    _warmed(host)
    what, change = _drop_changes()[which]
    change(_second(host).drops)
    _requested(host, 1, what)


def test_drop_counts_into_an_empty_counter_are_seen() -> None:
    """Counter.update into an empty counter is dict.update, past any __setitem__."""
    host = _host()
    first = next(iter(host.sessions.values()))
    first.drops.clear()
    _warmed(host)
    assert not first.drops
    first.drops.update({"ttl": 5})
    _requested(host, reads=1)


def test_a_copy_of_watched_counts_is_nobodys_until_given() -> None:
    host = _host()
    _warmed(host)
    entry = _second(host)
    copied = entry.drops.copy()  # Counter.copy makes one of the counts' own class
    copied["ttl"] += 5
    _requested(host, reads=0)  # nobody's counts changed
    entry.drops = copied
    copied["ttl"] += 1
    _requested(host, reads=1)


def test_counts_given_to_an_entry_are_watched_in_turn() -> None:
    host = _host()
    _warmed(host)
    entry = _second(host)
    entry.drops = Counter(ttl=7)  # a new counter, as a restore gives one
    _requested(host, reads=1)
    entry.drops["ttl"] += 1  # in place, in the new counter
    _requested(host, reads=1)


def test_a_machine_given_to_an_entry_is_watched_in_turn() -> None:
    host = _host()
    _warmed(host)
    entry = _second(host)
    exported = dict(zip(Session.STATE_FIELDS, entry.session.export(), strict=True))
    twin = Session.restore(entry.session.config, exported)
    entry.session = twin
    _requested(host, reads=1)
    twin.set_config(replace(twin.config, min_tx_us=30_000), 5_000)  # a method of the new machine
    _requested(host, reads=1)


def test_a_part_that_cannot_be_watched_is_read_at_every_request() -> None:
    host = _host()
    _warmed(host)
    entry = _second(host)
    entry.drops = {"ttl": 1}  # type: ignore[assignment]  # not a Counter: no note can see it change
    assert state.encode(host, 16) == _whole_dump(host)
    entry.drops["ttl"] = 2  # in place, unseen
    _requested(host, reads=1)  # read anyway
    assert entry.session.local_discr in touched.blind()
    entry.drops = Counter(ttl=3)  # a counter again: watched from here, read no more
    assert entry.session.local_discr not in touched.blind()
    _requested(host, reads=1)  # noted: the counter was given
    _requested(host, reads=0)


def _table_changes(host: Any) -> list[tuple[str, Callable[[], None]]]:
    sessions = host.sessions
    keys = list(sessions)

    def removed() -> None:
        del sessions[keys[1]]

    def added() -> None:
        e = _entry(N + 1)
        sessions[e.session.local_discr] = e

    def reordered() -> None:
        sessions[keys[0]] = sessions.pop(keys[0])

    def replaced_by_an_equal_entry() -> None:
        # Equal field by field, yet another object: nothing watches it.
        sessions[keys[1]] = copy.copy(sessions[keys[1]])

    def bookkeeping() -> None:
        host.handoff.add_section(DPLANE_SESSIONS, lambda: {keys[1]: {"min_echo_tx_us": 0, "cbit": False}})

    return [
        ("a session removed", removed),
        ("a session added", added),
        ("the order changed", reordered),
        ("an entry replaced by an equal one", replaced_by_an_equal_entry),
        ("the dataplane's bookkeeping", bookkeeping),
    ]


@pytest.mark.parametrize("which", range(5))
def test_a_changed_table_is_read_whole(which: int) -> None:
    host = _host()
    _warmed(host)
    what, change = _table_changes(host)[which]
    change()
    _requested(host, len(host.sessions), what)


def test_a_warm_up_left_halfway_trusts_nothing() -> None:
    host = _host()
    _warmed(host)
    assert state.encode(host, 16) == _whole_dump(host) and state.read() == 0
    steps = state.rehearse(host, 2)
    next(steps)  # a warm-up begun, never finished: its notes were forgotten at its start
    _second(host).user_tx_packets += 1
    list(host.sessions.values())[-1].user_tx_packets += 1  # not reached by the warm-up
    steps.close()
    _requested(host, reads=N)


def test_a_session_touched_during_the_warm_up_is_read() -> None:
    host = _host()
    steps = state.rehearse(host, 2)
    next(steps)  # the first two encoded and watched
    next(iter(host.sessions.values())).user_tx_packets += 1  # after its record: noted
    list(host.sessions.values())[-1].user_tx_packets += 1  # not yet watched: encoded as it is then
    for _ in steps:
        pass
    _requested(host, reads=1)


def test_entries_that_are_not_the_tables_are_read_whole() -> None:
    host = _host()
    first = next(iter(host.sessions))
    e = host.sessions[first]
    host.sessions[first] = SimpleNamespace(**{f: getattr(e, f) for f in e.__dataclass_fields__})
    _warmed(host)
    _requested(host, reads=N)


def test_a_watched_entry_and_machine_behave_as_before() -> None:
    """Only the class changed: fields, equality with its kind, the machine's methods and state."""
    host, plain = _host(1), _host(1)
    _warmed(host)
    (watched,), (unwatched,) = host.sessions.values(), plain.sessions.values()
    assert isinstance(watched, Entry) and isinstance(watched.session, Session)
    assert type(watched) is not Entry  # the witness that it is watched at all
    for e in (watched, unwatched):
        e.session.set_config(replace(e.session.config, min_tx_us=20_000), 5_000)
        e.session.handle_timer(e.session.get_timer() or 0)
        e.drops["ttl"] += 1
        e.user_tx_packets += 2
    assert watched.session.export() == unwatched.session.export()
    assert watched.session.datagrams_to_send(6_000) == unwatched.session.datagrams_to_send(6_000)
    assert state._record(watched, None) == state._record(unwatched, None)
    assert touched.watch(watched.session.local_discr, watched)  # watching again changes nothing
