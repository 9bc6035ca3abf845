"""bfddp data plane logic: message → session mapping, lid ↔ discriminator bookkeeping, --dp-hold.

The engine is replaced by the fake Host of harness/fakehost.py (real
sessions in a dict table, a call heap the test advances, a real selector),
so every sequence bfdd can produce is played here without root, sockets to
FRR or timers; the last tests use real loopback sockets for the framing and
buffering paths.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import logging
import os
import socket
import time
from typing import Any

import pytest

from harness.fakehost import FakeHost
from xdp_bfd.core.host import Entry, PacketCounts
from xdp_bfd.dplane import Dataplane, connection, dispatch
from xdp_bfd.dplane.address import DplaneAddress
from xdp_bfd.dplane.mapping import counters_reply, describe, same_path, session_config
from xdp_bfd.dplane.registry import DpSession, Registry
from xdp_bfd.session import SessionConfig
from xdp_bfd.session.timers import echo_tx_interval_us
from xdp_bfd.wire.bfddp import (
    AddSession,
    CountersReply,
    CountersRequest,
    DeleteSession,
    EchoReply,
    EchoRequest,
    FrameReader,
    SessionFlags,
    StateChange,
    encode_message,
)
from xdp_bfd.wire.control import Diag, State

V4 = ipaddress.IPv4Address
V6 = ipaddress.IPv6Address
LOCAL, PEER = V4("198.19.1.1"), V4("198.19.1.2")

# Real loopback sockets: the client is this process, whoever runs the tests (no root needed).
ME = (os.geteuid(),)


NO_FLAGS = SessionFlags(0)


def add(lid: int = 1001, *, src=LOCAL, dst=PEER, flags: SessionFlags = NO_FLAGS, **kw: Any) -> AddSession:
    fields = {"min_tx": 10_000, "min_rx": 10_000, "min_echo_tx": 0, "min_echo_rx": 50_000, "ifname": "veth-d"}
    fields.update(kw)
    return AddSession(flags=flags, src=src, dst=dst, lid=lid, **fields)


# --- the pure mapping ------------------------------------------------------------------


def test_single_hop_ipv4_maps_field_by_field():
    c = session_config(add(min_tx=20_000, min_rx=30_000, detect_mult=5))
    assert c == SessionConfig(
        local=LOCAL,
        peer=PEER,
        interface="veth-d",
        multihop=False,
        min_tx_us=20_000,
        min_rx_us=30_000,
        detect_mult=5,
        echo_us=0,
        minimum_ttl=254,
    )


def test_flags_map_to_session_options():
    c = session_config(
        add(
            src=V6("fd00:bfd:1::1"),
            dst=V6("fd00:bfd:1::2"),
            flags=SessionFlags.IPV6
            | SessionFlags.MULTIHOP
            | SessionFlags.PASSIVE
            | SessionFlags.SHUTDOWN
            | SessionFlags.DEMAND,
            ttl=250,
            ifname="",
        )
    )
    assert (c.multihop, c.passive, c.shutdown, c.demand) == (True, True, True, True)
    # Multihop: bfdd's ttl is the minimum accepted TTL; an empty ifname is no interface.
    assert (c.minimum_ttl, c.interface, c.peer) == (250, None, V6("fd00:bfd:1::2"))


def test_no_source_address_is_a_wildcard_local():
    assert session_config(add(src=None)).local is None


def test_echo_rx_is_advertised_only_when_something_reflects():
    # Advertising a Required Min Echo RX invites echoes; without a reflector
    # an echo-mode peer would time its session out on them.
    assert session_config(add(flags=SessionFlags.ECHO)).echo_us == 0
    assert session_config(add(), reflect_echo=True).echo_us == 50_000


def test_bfdds_echo_mode_is_our_echo_at_its_transmit_interval_single_hop_only():
    assert session_config(add(flags=SessionFlags.ECHO, min_echo_tx=20_000)).echo_tx_us == 20_000
    assert session_config(add(min_echo_tx=20_000)).echo_tx_us == 0  # echo-mode off
    # RFC 5883 §4: no echo over multiple hops, whatever bfdd asks.
    multihop = SessionFlags.ECHO | SessionFlags.MULTIHOP
    assert session_config(add(flags=multihop, min_echo_tx=20_000, ifname="")).echo_tx_us == 0


@pytest.mark.parametrize(
    ("msg", "why"),
    [
        (add(lid=0), "id 0"),
        (add(dst=V4("0.0.0.0")), "no peer"),
        (add(detect_mult=0), "detect_mult"),
        (add(min_tx=0), "min_tx"),
        (add(flags=SessionFlags.MULTIHOP, ttl=0), "minimum_ttl"),
        (add(src=PEER), "unusable local"),
    ],
)
def test_unusable_sessions_are_refused_with_a_reason(msg, why):
    with pytest.raises(ValueError, match=why):
        session_config(msg)


@pytest.mark.parametrize(
    ("ours", "theirs", "want"),
    [(50_000, 0, 0), (50_000, 20_000, 50_000), (50_000, 200_000, 200_000), (0, 20_000, 0)],
)
def test_echo_interval_is_the_slower_side_and_zero_stops_it(ours, theirs, want):
    assert echo_tx_interval_us(ours, theirs) == want


def test_same_path_ignores_a_missing_interface_only():
    a = session_config(add())
    assert same_path(a, session_config(add(ifname="")))
    assert not same_path(a, session_config(add(ifname="veth-x")))
    assert not same_path(a, session_config(add(flags=SessionFlags.MULTIHOP)))
    assert not same_path(a, session_config(add(src=V4("198.19.1.3"))))


# --- Registry ----------------------------------------------------------------------------


def test_registry_holds_adopts_under_a_new_lid_and_expires():
    r = Registry()
    one = DpSession(7, session_config(add(lid=7)))
    two = DpSession(8, session_config(add(lid=8, dst=V4("198.19.1.3"))))
    r.add(one, 7)
    r.add(two, 8)
    assert r.hold_all(5_000) == [one, two]
    assert r.by_lid == {} and (one.lid, one.held_until_us) == (None, 5_000)
    # bfdd restarted: the same path comes back under a different id, without its interface.
    found = r.find_held(session_config(add(lid=99, ifname="")))
    assert found is one
    r.adopt(one, 99)
    assert r.by_lid == {99: one} and one.discr == 7 and one.held_until_us is None
    assert r.held() == [two]
    assert r.expired(4_999) == [] and r.expired(5_000) == [two]
    r.remove(two)
    assert r.held() == [] and 8 not in r.by_discr


# --- the protocol against a fake engine ------------------------------------------------------


class KernelTx:
    """What the fast path's maps add to a session's counts (a SessionObserver, as the fast path is)."""

    def __init__(self, *, packets: int, bytes_: int) -> None:
        self.packets, self.bytes = packets, bytes_

    def added(self, entry: Entry) -> None: ...

    def removed(self, entry: Entry) -> None: ...

    def serviced(self, entry: Entry) -> None: ...

    def counts(self, entry: Entry, counts: PacketCounts) -> PacketCounts:
        return PacketCounts(
            counts.rx_packets, counts.rx_bytes, counts.tx_packets + self.packets, counts.tx_bytes + self.bytes
        )

    def session_stats(self, entry: Entry, out: dict[str, Any], now_ns: int) -> None: ...

    def document(self, doc: dict[str, Any]) -> None: ...


class FakeConn:
    def __init__(self) -> None:
        self.sent: list = []
        self.open = True
        self.failed = None
        self.barrier: int | None = None
        self.proven = False
        self.last_reply_us = 0

    def send(self, *msgs) -> None:
        self.sent.extend(msgs)

    def close(self) -> None:
        self.open = False

    def take(self, kind=None) -> list:
        out = [m for m in self.sent if kind is None or isinstance(m, kind)]
        self.sent.clear()
        return out


def dataplane(hold_s: int = 0) -> tuple[Dataplane, FakeHost]:
    eng = FakeHost()
    dp = Dataplane(eng, DplaneAddress("ipv4", "127.0.0.1", 50700), mode="listen", hold_s=hold_s)  # type: ignore[arg-type]
    return dp, eng


def connect(dp: Dataplane) -> FakeConn:
    conn = FakeConn()
    dp.transport.conn = conn  # type: ignore[assignment]
    conn.barrier = dp.transport.echo(conn)  # type: ignore[arg-type]
    return conn


def feed(dp: Dataplane, conn: FakeConn, *msgs, now: int = 0) -> None:
    for m in msgs:
        dp.handle(conn, m, now)  # type: ignore[arg-type]


def barrier(dp: Dataplane, conn: FakeConn) -> None:
    assert conn.barrier is not None
    feed(dp, conn, EchoReply(conn.barrier, 0))


def test_add_uses_bfdds_id_as_discriminator_and_repeats_are_idempotent():
    dp, eng = dataplane()
    conn = connect(dp)
    feed(dp, conn, add(1001), add(1001), add(1001))
    assert list(eng.sessions) == [1001] and eng.sessions[1001].origin == "dplane"
    assert eng.updates == []
    # A registration in Down says nothing bfdd does not already assume.
    assert conn.take(StateChange) == []


def test_changed_timers_update_the_running_session():
    dp, eng = dataplane()
    conn = connect(dp)
    feed(dp, conn, add(1001), add(1001, min_tx=50_000))
    assert [(d, c.min_tx_us) for d, c in eng.updates] == [(1001, 50_000)]


def test_an_id_already_used_as_a_discriminator_gets_a_fresh_one():
    dp, eng = dataplane()
    eng.add_session(session_config(add(dst=V4("198.19.9.9"))), "file", discr=1001)
    conn = connect(dp)
    feed(dp, conn, add(1001))
    (rec,) = dp.registry.registered()
    assert rec.lid == 1001 and rec.discr != 1001 and rec.discr in eng.sessions
    eng.sessions[rec.discr].rx_bytes = 240
    feed(dp, conn, CountersRequest(7, 1001))
    assert conn.take(CountersReply)[0].control_in_bytes == 240


def test_a_path_owned_by_another_origin_is_left_alone():
    dp, eng = dataplane()
    eng.add_session(session_config(add()), "file", discr=5)
    conn = connect(dp)
    feed(dp, conn, add(1001))
    assert list(eng.sessions) == [5] and dp.registry.by_lid == {}


def test_delete_removes_with_admin_down_and_unknown_ids_are_ignored():
    dp, eng = dataplane()
    conn = connect(dp)
    feed(dp, conn, add(1001), DeleteSession(**vars(add(4242))))
    assert 1001 in eng.sessions
    feed(dp, conn, DeleteSession(**vars(add(1001))))
    assert eng.sessions == {} and eng.removed == [(1001, True)]


def test_counters_come_from_the_entry_echoes_first_and_unknown_ids_get_zeros():
    dp, eng = dataplane()
    conn = connect(dp)
    conn.take()
    feed(dp, conn, add(1001))
    for _ in range(100):  # the peer's packets, 24 bytes each (2400 bytes in)
        eng.retime(1001, 0)
    e = eng.sessions[1001]
    e.user_tx_bytes, e.user_tx_packets = 480, 20
    eng.add_observer(KernelTx(packets=80, bytes_=1920))
    feed(dp, conn, CountersRequest(9, 1001))
    sent = conn.take()
    # Two ECHO_REQUESTs in front: they make bfdd reclaim its input buffer.
    assert [type(m) for m in sent] == [EchoRequest, EchoRequest, CountersReply]
    assert sent[2] == CountersReply(9, 1001, 2400, 100, 480 + 1920, 20 + 80)
    feed(dp, conn, CountersRequest(10, 77))
    assert conn.take(CountersReply) == [CountersReply(10, 77)]
    assert counters_reply(CountersRequest(1, 2), None) == CountersReply(1, 2)


def test_state_changes_are_reported_with_bfdds_id_our_state_and_the_peers_values():
    dp, eng = dataplane()
    conn = connect(dp)
    feed(dp, conn, add(1001))
    conn.take()
    eng.change(
        1001,
        State.UP,
        remote_discr=0xABC,
        remote_desired_tx_us=10_000,
        remote_min_rx_us=20_000,
        remote_min_echo_rx_us=50_000,
        remote_diag=Diag.NEIGHBOR_SIGNALED_SESSION_DOWN,
        remote_detect_mult=4,
        remote_demand=True,
    )
    (msg,) = conn.take()
    assert msg == StateChange(1001, 0xABC, 2, 10_000, 20_000, 50_000, State.UP, 3, 4)
    assert len(encode_message(msg)) == 36
    # Sessions bfdd did not create are none of its business.
    eng.add_session(session_config(add(dst=V4("198.19.9.9"))), "file", discr=5)
    eng.change(5, State.UP)
    assert conn.take() == []


def test_without_hold_a_disconnect_removes_every_dplane_session():
    dp, eng = dataplane(hold_s=0)
    conn = connect(dp)
    feed(dp, conn, add(1001), add(1002, dst=V4("198.19.1.3")))
    dp.transport.disconnected(conn, 1_000)  # type: ignore[arg-type]
    assert eng.sessions == {} and sorted(eng.removed) == [(1001, True), (1002, True)]
    # bfdd re-adds them: fresh sessions again.
    conn = connect(dp)
    feed(dp, conn, add(2001))
    assert list(eng.sessions) == [2001]


def test_hold_adopts_under_a_new_id_keeping_the_discriminator_and_reports_up_once():
    dp, eng = dataplane(hold_s=5)
    conn = connect(dp)
    feed(dp, conn, add(1001))
    eng.change(1001, State.UP, remote_discr=0xABC)
    dp.transport.disconnected(conn, 1_000_000)  # type: ignore[arg-type]
    assert 1001 in eng.sessions and eng.removed == []
    assert dp.stats()["held"] == 1 and dp.stats()["connected"] is False
    # Held sessions keep running; their changes wait for bfdd.
    eng.change(1001, State.UP)
    conn = connect(dp)
    conn.take()
    # Restarted bfdd: a new random id, and no interface yet (frr.conf read before zebra).
    feed(dp, conn, add(0x7777, ifname=""))
    assert list(eng.sessions) == [1001] and eng.removed == []
    assert eng.sessions[1001].session.config.interface == "veth-d"  # the running session keeps it
    assert dp.registry.by_lid[0x7777].discr == 1001
    (report,) = conn.take()
    assert (report.lid, report.state, report.rid) == (0x7777, State.UP, 0xABC)
    # From now on everything about it speaks bfdd's new id.
    feed(dp, conn, add(0x7777, ifname=""), CountersRequest(3, 0x7777))
    assert conn.take(StateChange) == []
    eng.change(1001, State.DOWN)
    assert conn.take(StateChange)[0].lid == 0x7777
    barrier(dp, conn)
    assert eng.removed == [] and dp.registry.held() == []


def test_the_barrier_is_no_verdict_a_held_session_waits_for_its_re_add():
    # Issue 20: under watchfrr bfdd connects before its peers are configured; the
    # integrated config arrives seconds later through vtysh. The end of the burst
    # tears nothing down: the held session is adopted when its re-add comes.
    dp, eng = dataplane(hold_s=5)
    conn = connect(dp)
    feed(dp, conn, add(1001), add(1002, dst=V4("198.19.1.3")))
    dp.transport.disconnected(conn, 0)  # type: ignore[arg-type]
    conn = connect(dp)
    feed(dp, conn, add(3001))  # only the first path comes back in the burst
    barrier(dp, conn)
    assert eng.removed == [] and sorted(eng.sessions) == [1001, 1002]
    eng.run_calls(2_000_000)
    feed(dp, conn, add(3002, dst=V4("198.19.1.3")))  # vtysh configures the second peer
    assert eng.removed == [] and sorted(eng.sessions) == [1001, 1002]
    assert dp.registry.held() == [] and dp.registry.by_lid[3002].discr == 1002
    eng.run_calls(10_000_000)  # the old deadline passes: nothing is held any more
    assert eng.removed == []


def test_connect_reset_connect_keeps_the_first_deadline():
    # bfdd connects with no peers, is reset, connects again: the hold runs from the
    # disconnect that orphaned the sessions, whatever happens in between.
    dp, eng = dataplane(hold_s=5)
    conn = connect(dp)
    feed(dp, conn, add(1001), add(1002, dst=V4("198.19.1.3")))
    dp.transport.disconnected(conn, 1_000_000)  # type: ignore[arg-type]
    conn = connect(dp)
    barrier(dp, conn)  # an empty burst
    dp.transport.lost(conn, "Connection reset by peer", 1_500_000)  # type: ignore[arg-type]
    conn = connect(dp)
    barrier(dp, conn)
    eng.run_calls(4_000_000)
    feed(dp, conn, add(4001))  # 1001's peer configured at last
    assert eng.removed == []
    eng.run_calls(5_999_999)
    assert eng.removed == []
    eng.run_calls(6_000_000)  # 5 s after the first disconnect: only the one never re-added goes
    assert eng.removed == [(1002, True)] and list(eng.sessions) == [1001]


def test_a_session_orphaned_again_gets_a_new_deadline():
    dp, eng = dataplane(hold_s=5)
    conn = connect(dp)
    feed(dp, conn, add(1001))
    dp.transport.disconnected(conn, 0)  # type: ignore[arg-type]
    conn = connect(dp)
    feed(dp, conn, add(2001))
    dp.transport.disconnected(conn, 4_000_000)  # type: ignore[arg-type]
    eng.run_calls(8_999_999)
    assert eng.removed == []
    eng.run_calls(9_000_000)
    assert eng.removed == [(1001, True)]


def test_a_later_reply_stands_in_for_a_lost_barrier_reply():
    dp, _eng = dataplane(hold_s=5)
    conn = connect(dp)
    later = dp.transport.echo(conn)  # type: ignore[arg-type]
    feed(dp, conn, EchoReply(later + 1_000_000, 0))  # never sent: proves nothing
    assert not conn.proven
    feed(dp, conn, EchoReply(later, 0))
    assert conn.proven and conn.barrier is None


def test_the_hold_deadline_tears_down_what_nobody_re_added():
    dp, eng = dataplane(hold_s=5)
    conn = connect(dp)
    feed(dp, conn, add(1001))
    dp.transport.disconnected(conn, 1_000_000)  # type: ignore[arg-type]
    # A client that connects but never answers the barrier does not extend the hold.
    conn2 = connect(dp)
    dp.transport.disconnected(conn2, 3_000_000)  # type: ignore[arg-type]
    eng.run_calls(5_999_999)
    assert eng.removed == []
    eng.run_calls(6_000_000)
    assert eng.removed == [(1001, True)] and eng.sessions == {}


def test_a_new_id_for_a_registered_path_renames_it():
    dp, eng = dataplane()
    conn = connect(dp)
    feed(dp, conn, add(1001), add(1002))
    assert list(eng.sessions) == [1001] and list(dp.registry.by_lid) == [1002]


def test_a_moved_path_restarts_the_session_under_the_same_discriminator():
    dp, eng = dataplane()
    conn = connect(dp)
    feed(dp, conn, add(1001), add(1001, src=V4("198.19.1.5")))
    assert eng.removed == [(1001, True)]
    assert eng.sessions[1001].session.config.local == V4("198.19.1.5")


def test_shutdown_registration_is_reported_as_admin_down():
    dp, _ = dataplane()
    conn = connect(dp)
    conn.take()
    feed(dp, conn, add(1001, flags=SessionFlags.SHUTDOWN))
    assert [m.state for m in conn.take(StateChange)] == [State.ADMIN_DOWN]


# --- the peer's timers reach bfdd's CLI -------------------------------------------------------

SETTLE, GAP = dispatch.TIMERS_SETTLE_US, dispatch.TIMERS_REPORT_GAP_US
# A peer that came Up on its 1 s slow start, as the first Up report told bfdd.
SLOW = {"remote_discr": 0xABC, "remote_desired_tx_us": 1_000_000, "remote_min_rx_us": 1_000_000}
FAST = {"remote_desired_tx_us": 10_000, "remote_min_rx_us": 10_000}


def up_session(lid: int = 1001) -> tuple[Dataplane, FakeHost, FakeConn]:
    dp, eng = dataplane()
    conn = connect(dp)
    feed(dp, conn, add(lid))
    eng.change(lid, State.UP, remote_detect_mult=3, **SLOW)
    (report,) = conn.take(StateChange)
    assert (report.state, report.desired_tx, report.required_rx) == (State.UP, 1_000_000, 1_000_000)
    conn.take()
    return dp, eng, conn


def test_new_timers_on_an_up_session_reach_bfdd_once_they_settle():
    dp, eng, conn = up_session()
    eng.retime(1001, 5_000_000, **FAST)
    eng.run_calls(5_000_000 + SETTLE - 1)
    assert conn.take() == []
    eng.run_calls(5_000_000 + SETTLE)
    # The state bfdd already has, so bfdd counts no transition; the peer's values as they are now.
    assert conn.take() == [StateChange(1001, 0xABC, 0, 10_000, 10_000, 0, State.UP, 0, 3)]
    assert dp.stats()["timers_reports"] == 1
    eng.run_calls(60_000_000)
    assert conn.take() == []


def test_a_poll_and_a_second_one_behind_it_are_one_report_with_the_last_values():
    dp, eng, conn = up_session()
    eng.retime(1001, 5_000_000, remote_desired_tx_us=10_000)
    eng.retime(1001, 5_050_000, remote_min_rx_us=20_000, remote_detect_mult=5)
    eng.run_calls(5_000_000 + SETTLE)
    (report,) = conn.take()
    assert (report.desired_tx, report.required_rx, report.detect_mult) == (10_000, 20_000, 5)
    assert dp.stats()["timers_reports"] == 1


def test_a_peer_that_keeps_changing_is_reported_at_most_once_a_gap():
    dp, eng, conn = up_session()
    now, sent_at = 5_000_000, []
    for i in range(400):  # a new value every 10 ms for 4 s
        eng.retime(1001, now, remote_desired_tx_us=10_000 + i)
        eng.run_calls(now)
        sent_at += [now] * len(conn.take(StateChange))
        now += 10_000
    eng.run_calls(now + GAP)
    sent_at += [now + GAP] * len(conn.take(StateChange))
    assert sent_at[0] == 5_000_000 + SETTLE
    assert all(b - a >= GAP for a, b in itertools.pairwise(sent_at)), sent_at
    assert 4 <= len(sent_at) <= 5 and dp.stats()["timers_reports"] == len(sent_at)
    assert eng.sessions[1001].session.remote_desired_tx_us == 10_399


def test_no_report_when_bfdd_already_has_the_values():
    dp, eng, conn = up_session()
    # A state change while the report waits carries the new values itself.
    eng.retime(1001, 5_000_000, **FAST)
    eng.change(1001, State.DOWN)
    eng.change(1001, State.UP)
    assert [m.desired_tx for m in conn.take(StateChange)] == [10_000, 10_000]
    # And a change that comes back before the report is due is no change to bfdd.
    eng.retime(1001, 6_000_000, remote_desired_tx_us=20_000)
    eng.retime(1001, 6_001_000, remote_desired_tx_us=10_000)
    eng.run_calls(60_000_000)
    assert conn.take() == [] and dp.stats()["timers_reports"] == 0


@pytest.mark.parametrize("state", [State.DOWN, State.INIT, State.ADMIN_DOWN], ids=lambda s: s.name)
def test_only_an_up_session_is_re_reported(state):
    _, eng, conn = up_session()
    eng.change(1001, state)
    conn.take()
    eng.retime(1001, 5_000_000, **FAST)
    eng.run_calls(60_000_000)
    assert conn.take() == []
    # A report due when the session left Up: the transition told bfdd, and
    # what the peer advertises after it is its slow start again.
    eng.change(1001, State.UP)
    conn.take()
    eng.retime(1001, 61_000_000, remote_desired_tx_us=20_000)
    eng.change(1001, state)
    assert [m.desired_tx for m in conn.take(StateChange)] == [20_000]
    eng.retime(1001, 61_100_000, remote_desired_tx_us=1_000_000)
    eng.run_calls(120_000_000)
    assert conn.take() == []


def test_sessions_bfdd_does_not_run_or_cannot_hear_about_are_left_alone():
    dp, eng, conn = up_session()
    eng.add_session(session_config(add(dst=V4("198.19.9.9"))), "file", discr=5)
    eng.change(5, State.UP)
    eng.retime(5, 5_000_000, **FAST)
    eng.run_calls(60_000_000)
    assert conn.take() == []
    # Gone before the report was due: the stale call sends nothing on the next connection.
    eng.retime(1001, 70_000_000, **FAST)
    dp.transport.disconnected(conn, 70_000_001)  # type: ignore[arg-type]
    conn = connect(dp)
    conn.take()
    feed(dp, conn, add(2002))
    eng.run_calls(80_000_000)
    assert conn.take(StateChange) == [] and dp.stats()["timers_reports"] == 0


def test_a_held_session_re_added_tells_bfdd_the_values_in_force():
    dp, eng = dataplane(hold_s=5)
    conn = connect(dp)
    feed(dp, conn, add(1001))
    eng.change(1001, State.UP, remote_detect_mult=3, **SLOW)
    dp.transport.disconnected(conn, 1_000_000)  # type: ignore[arg-type]
    eng.retime(1001, 1_500_000, **FAST)  # nobody to tell
    conn = connect(dp)
    conn.take()
    feed(dp, conn, add(0x7777))
    (report,) = conn.take(StateChange)
    assert (report.lid, report.state, report.desired_tx) == (0x7777, State.UP, 10_000)
    eng.run_calls(60_000_000)
    assert conn.take() == [] and dp.stats()["timers_reports"] == 0


# --- real sockets: framing, refusal, buffering -------------------------------------------------


class Client:
    """A stand-in bfdd on a real TCP connection, reading while the fake loop runs."""

    def __init__(self, eng: FakeHost, port: int) -> None:
        self.eng = eng
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setblocking(False)
        self.reader = FrameReader()
        self.got: list = []
        self.eof = False

    def send(self, data: bytes) -> None:
        self.sock.setblocking(True)
        self.sock.sendall(data)
        self.sock.setblocking(False)

    def _poll(self) -> None:
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return
        if not data:
            self.eof = True
            return
        self.got += self.reader.feed(data)

    def wait(self, pred, seconds: float = 2.0) -> bool:
        def check() -> bool:
            self._poll()
            return bool(pred())

        return self.eng.spin(seconds, check)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def listening():
    eng = FakeHost()
    dp = Dataplane(eng, DplaneAddress("ipv4", "127.0.0.1", 0), mode="listen", hold_s=30, allow=ME)  # type: ignore[arg-type]
    dp.start()
    port = dp.transport.listener.getsockname()[1]  # type: ignore[union-attr]
    clients: list[Client] = []

    def client() -> Client:
        c = Client(eng, port)
        clients.append(c)
        return c

    try:
        yield dp, eng, client
    finally:
        for c in clients:
            c.close()
        dp.close()


def test_a_framing_error_drops_only_the_connection_and_holds_the_sessions(listening, caplog):
    dp, eng, client = listening
    caplog.set_level(logging.INFO, logger="xdp_bfd")
    c = client()
    assert c.wait(lambda: c.got), "no barrier ECHO_REQUEST after connecting"
    assert isinstance(c.got[0], EchoRequest)
    c.send(encode_message(add(1001)))
    assert c.wait(lambda: 1001 in eng.sessions)
    c.send(b"\x02" + bytes(30))  # version 2: the stream is out of step
    assert c.wait(lambda: c.eof), "the engine kept the connection"
    drops = [r.getMessage() for r in caplog.records if "dropping" in r.getMessage()]
    assert drops == ["dplane: dropping connection: framing error: version: version 2"]
    assert 1001 in eng.sessions and dp.stats()["held"] == 1 and eng.removed == []
    # A fresh connection is served at once.
    c2 = client()
    c2.send(encode_message(EchoRequest(12345)))
    assert c2.wait(lambda: any(isinstance(m, EchoReply) and m.dp_time == 12345 for m in c2.got))


def test_one_bfdd_at_a_time_but_a_closed_one_is_replaced_at_once(listening):
    dp, _, client = listening
    first = client()
    assert first.wait(lambda: first.got)
    second = client()
    assert second.wait(lambda: second.eof), "a second connection was accepted beside the first"
    assert dp.stats()["connections"] == 1
    # The first goes away; its end of file may still be unread when the next
    # connection arrives, and must not get that one refused.
    first.close()
    third = client()
    assert third.wait(lambda: third.got and isinstance(third.got[0], EchoRequest))
    assert dp.stats()["connections"] == 2 and not third.eof


def test_a_bfdd_that_stops_reading_is_dropped_not_waited_for(listening, monkeypatch, caplog):
    dp, eng, client = listening
    monkeypatch.setattr(connection, "OUTPUT_LIMIT", 64 * 1024)
    c = client()
    assert eng.spin(1, lambda: dp.transport.conn is not None)
    # Counters requests without ever reading a reply: the loop must keep
    # running while our output piles up (past the kernel's own buffers, a
    # few MB on loopback), until the bound cuts the connection off.
    chunk = b"".join(encode_message(CountersRequest(i + 1, 1)) for i in range(1000))
    sent = 0

    def push() -> bool:
        nonlocal sent
        with contextlib.suppress(BlockingIOError, ConnectionError):
            sent += c.sock.send(chunk)
        return dp.transport.conn is None or sent > 50_000_000

    assert eng.spin(20, push) and dp.transport.conn is None, (
        f"output grew without bound ({sent} bytes of requests)"
    )
    assert any("output buffer over 65536 bytes" in r.getMessage() for r in caplog.records)


def test_stats_section_is_the_contract_shape(listening):
    dp, eng, _ = listening
    assert eng.stats_sections["dplane"]() == {
        "mode": "listen",
        "address": dp.addr.display,
        "connected": False,
        "sessions": 0,
        "held": 0,
        "connections": 0,
        "timers_reports": 0,
        "refused": 0,
    }


def test_connect_mode_backs_off_connects_and_comes_straight_back(caplog):
    caplog.set_level(logging.INFO, logger="xdp_bfd")
    # A port nobody listens on yet (bound, not listening, so nothing else takes it).
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    port = holder.getsockname()[1]
    eng = FakeHost()
    dp = Dataplane(eng, DplaneAddress("ipv4", "127.0.0.1", port), mode="connect", hold_s=0, allow=ME)  # type: ignore[arg-type]
    try:
        dp.start()
        eng.spin(0.8)
        delays = sorted(d for d, _, _ in eng.calls)
        assert dp.transport.conn is None and len(delays) == 1  # one retry pending at a time
        assert [r.getMessage() for r in caplog.records].count(f"dplane: connecting to 127.0.0.1:{port}") == 1
        holder.listen(4)  # bfdd comes up
        assert eng.spin(4, lambda: dp.transport.conn is not None), "never connected"
        server, _ = holder.accept()
        bfdd = FrameReader()
        server.settimeout(2)
        (hello,) = bfdd.feed(server.recv(4096))
        assert isinstance(hello, EchoRequest)
        server.sendall(encode_message(EchoReply(hello.dp_time, 0)))  # a working bfdd
        assert eng.spin(1, lambda: dp.transport.conn.proven)  # type: ignore[union-attr]
        server.close()  # bfdd drops the connection: we are back at once, not after a backoff
        assert eng.spin(1, lambda: dp.transport.conn is None)
        t0 = time.monotonic()
        assert eng.spin(1, lambda: dp.transport.conn is not None), "no immediate reconnect"
        assert time.monotonic() - t0 < 0.05
        assert dp.stats()["connections"] == 2
    finally:
        dp.close()
        holder.close()


def test_an_adopted_session_bfdd_shuts_down_is_reported_once():
    dp, eng = dataplane(hold_s=5)
    conn = connect(dp)
    feed(dp, conn, add(1001))
    eng.change(1001, State.UP)
    dp.transport.disconnected(conn, 0)  # type: ignore[arg-type]
    conn = connect(dp)
    conn.take()
    # The re-add's configuration reaches the session, which goes AdminDown itself.
    feed(dp, conn, add(2002, flags=SessionFlags.SHUTDOWN))
    # Not "Up" and then "AdminDown": bfdd would tell its clients the session came up.
    assert [(m.lid, m.state) for m in conn.take(StateChange)] == [(2002, State.ADMIN_DOWN)]


@pytest.mark.parametrize("kind", ["ipv6", "unix"])
def test_other_transports_connect(kind, tmp_path):
    """bfdd's ``ipv6:`` and ``unix:`` listeners, reached with --dplane-connect."""
    if kind == "unix":
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        path = str(tmp_path / "bfdd-dp.sock")
        server.bind(path)
        addr = DplaneAddress("unix", path, 0)
    else:
        server = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        try:
            server.bind(("::1", 0))
        except OSError:
            server.close()
            pytest.skip("no IPv6 loopback here")
        addr = DplaneAddress("ipv6", "::1", server.getsockname()[1])
    server.listen(1)
    eng = FakeHost()
    dp = Dataplane(eng, addr, mode="connect", allow=ME)  # type: ignore[arg-type]
    try:
        dp.start()
        assert eng.spin(2, lambda: dp.transport.conn is not None)
        peer, _ = server.accept()
        peer.settimeout(2)
        (hello,) = FrameReader().feed(peer.recv(4096))
        assert isinstance(hello, EchoRequest)
        peer.sendall(encode_message(add(1001)))
        assert eng.spin(2, lambda: 1001 in eng.sessions)
        peer.close()
    finally:
        dp.close()
        server.close()


def test_log_lines_name_the_hop_mode():
    # One address pair, two sessions: every line says which one it means.
    single, multi = add(1001), add(1002, flags=SessionFlags.MULTIHOP, ifname="")
    assert describe(single) == f"{LOCAL} -> {PEER} on veth-d single-hop"
    assert describe(multi) == f"{LOCAL} -> {PEER} multihop"
