"""The session table's demultiplexer (RFC 5880 §6.8.6): Your Discriminator on its own path, else the path."""

from __future__ import annotations

import ipaddress
import random

from xdp_bfd.core.host import Entry
from xdp_bfd.core.netio import Datagram
from xdp_bfd.core.table import SessionTable
from xdp_bfd.session import Session, SessionConfig

A = ipaddress.ip_address


class _Tx:  # a transmitter that is never used: the table only files entries
    sport = 49152


def _entry(table: SessionTable, **cfg) -> Entry:
    config = SessionConfig(**cfg)
    e = Entry(Session(config, table.allocate_discr(), now_us=0), _Tx(), "file")  # type: ignore[arg-type]
    table.insert(e)
    return e


def _dg(src: str, dst: str, *, multihop: bool = False, ifindex: int = 0) -> Datagram:
    return Datagram(
        data=b"", src=A(src), dst=A(dst), sport=49152, ttl=255, ifindex=ifindex, multihop=multihop
    )


def test_discriminators_are_unique_nonzero_and_index_the_smallest_free_slot() -> None:
    t = SessionTable(random.Random(3))
    first = [_entry(t, local=None, peer=A(f"198.19.0.{i}")) for i in range(2, 6)]
    discrs = [e.session.local_discr for e in first]
    assert len(set(discrs)) == 4 and 0 not in discrs
    assert [d & 0xFFFF for d in discrs] == [0, 1, 2, 3]
    assert len({d >> 16 for d in discrs}) > 1  # the high halves are drawn, not counted
    t.pop(discrs[1])
    t.pop(discrs[2])
    assert t.allocate_discr() & 0xFFFF == 1  # the smallest given back first
    # A discriminator we did not choose (bfdd's) takes its index too.
    _entry_with(t, (7 << 16) | 1, peer=A("198.19.0.9"))
    assert t.allocate_discr() & 0xFFFF == 2
    _entry_with(t, (9 << 16) | 2, peer=A("198.19.0.10"))
    assert t.allocate_discr() & 0xFFFF == 4


def _entry_with(table: SessionTable, discr: int, **cfg) -> Entry:
    e = Entry(Session(SessionConfig(local=None, **cfg), discr, now_us=0), _Tx(), "dplane")  # type: ignore[arg-type]
    table.insert(e)
    return e


def test_your_discriminator_finds_the_session_only_from_its_own_peer() -> None:
    t = SessionTable(random.Random(1))
    e = _entry(t, local=A("198.19.0.1"), peer=A("198.19.0.2"))
    d = e.session.local_discr
    assert t.find(_dg("198.19.0.2", "198.19.0.1"), d) is e
    assert t.find(_dg("198.19.0.9", "198.19.0.1"), d) is None  # a stranger who learned it
    assert t.find(_dg("198.19.0.2", "198.19.0.1", multihop=True), d) is None  # another hop mode
    assert t.find(_dg("198.19.0.2", "198.19.0.1"), d + 1) is None


def test_without_a_discriminator_the_most_specific_path_wins() -> None:
    t = SessionTable(random.Random(2))
    wildcard = _entry(t, local=None, peer=A("198.19.0.2"))
    exact = _entry(t, local=A("198.19.0.1"), peer=A("198.19.0.2"))
    assert t.find(_dg("198.19.0.2", "198.19.0.1"), 0) is exact
    assert t.find(_dg("198.19.0.2", "198.19.0.5"), 0) is wildcard
    assert t.lookup(exact.session.config.key()) is exact
    assert t.pop(exact.session.local_discr) is exact
    assert t.find(_dg("198.19.0.2", "198.19.0.1"), 0) is wildcard
    assert t.lookup(exact.session.config.key()) is None


def test_the_table_counts_its_sessions_by_origin() -> None:
    """What lets an origin with nothing given and nothing held skip the walk (apply_session_list)."""
    t = SessionTable(random.Random(5))
    files = [_entry(t, local=None, peer=A(f"198.19.0.{i}")) for i in range(2, 5)]
    cli = Entry(
        Session(SessionConfig(local=None, peer=A("198.19.0.9")), t.allocate_discr(), now_us=0), _Tx(), "cli"
    )  # type: ignore[arg-type]
    t.insert(cli)
    assert t.origins == {"file": 3, "cli": 1}
    t.pop(cli.session.local_discr)
    t.pop(files[0].session.local_discr)
    t.pop(files[0].session.local_discr)  # gone already: counted once
    assert t.origins == {"file": 2} and "cli" not in t.origins
