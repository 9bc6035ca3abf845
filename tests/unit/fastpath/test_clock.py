"""The transmit clock's decisions: which sessions the kernel clocks, and what it writes when.

The maps and the loop are replaced by recorders (their kernel side is proven
in tests/integration/test_fastpath_engine_pair.py and the bench); the ABI
values come from the real header.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from harness.inject import keyed_digest, seq_of
from harness.sessions import bring_up, deliver, make, packet, run_until, sent
from xdp_bfd.core.host import Entry
from xdp_bfd.fastpath.abi import load as load_abi
from xdp_bfd.fastpath.clock import (
    COURIER_PERIOD_NS,
    JITTER_HIGH,
    JITTER_HIGH_MULT1,
    JITTER_LOW,
    SHARE_HOLD_NS,
    Clock,
)
from xdp_bfd.session import AuthConfig
from xdp_bfd.wire import control

ABI = load_abi()


class _Map:
    """An array map as the Clock reaches it: Key(slot), Leaf(), [key] get/set."""

    def __init__(self, leaf: Any) -> None:
        self.data: dict[int, Any] = {}
        self.Leaf = leaf

    @staticmethod
    def Key(slot: int) -> int:
        return slot

    def __getitem__(self, key: int) -> Any:
        return self.data.get(key) or self.Leaf()

    def __setitem__(self, key: int, leaf: Any) -> None:
        self.data[key] = leaf


COURIER = ABI.max_sessions  # the courier's entry: the one after the last slot's


class _Loop:
    a = 77

    def __init__(self, *, adopted: bool = False) -> None:
        self.adopted = adopted  # a --pin successor's: the loop, its classes and frames were there
        self.classes: dict[int, int] = {}  # slot -> period_ns
        self.injected: list[tuple[int, int]] = []  # (slot, gen)
        self.dropped: list[int] = []
        self.fresh: list[bool] = []  # per set_class: a new class (empty, full bucket) or a changed one

    @staticmethod
    def classid(slot: int) -> int:
        return 0x10000 | (slot + 1)

    def set_class(self, slot: int, period_ns: int, len_full: int, *, fresh: bool = False) -> None:
        assert len_full == ABI.tick_len_full
        self.classes[slot] = period_ns
        self.fresh.append(fresh)

    def drop_class(self, slot: int) -> None:
        self.dropped.append(slot)

    def inject(self, slot: int, gen: int, length: int, ethertype: int, magic: int) -> None:
        want = ABI.courier_magic if slot == COURIER else ABI.tick_magic
        assert (length, ethertype, magic) == (ABI.tick_len_min, ABI.tick_ethertype, want)
        self.injected.append((slot, gen))


def _cfg_leaf() -> SimpleNamespace:
    return SimpleNamespace(
        flags=0, gen=0, classid=0, loop_ifindex=0, len_min=0, len_max=0, period_ns=0, lost_ns=0, armed_ns=0,
        pkt_len=0,
        pkt=(ctypes.c_ubyte * ABI.control_len)(),
    )  # fmt: skip


def _state_leaf() -> SimpleNamespace:
    return SimpleNamespace(last_tick_ns=0, ticks=0, sent=0, skipped=0, gated=0, gen_seen=0, lost_gen=0)


def _fast_path(tick_cfg: _Map, handlers: dict) -> SimpleNamespace:
    """A FastPath's parts as the Clock reaches them; ``handlers`` gets what it registers."""
    return SimpleNamespace(
        abi=ABI,
        max_sessions=ABI.max_sessions,
        tick_cfg=tick_cfg,
        tick_state=_Map(_state_leaf),
        events=SimpleNamespace(on=handlers.__setitem__),
        tick_counters=SimpleNamespace(totals=dict),
    )


def _clock(
    budget: int = 25_000, tick_cfg: _Map | None = None, *, adopted: bool = False
) -> tuple[Clock, _Loop, _Map]:
    """``tick_cfg``: the map a predecessor left (a --pin successor's clock), ``adopted`` its loop.

    The courier's start (its own tests below) is taken out of the loop's records.
    """
    handlers: dict = {}
    fp = _fast_path(tick_cfg or _Map(_cfg_leaf), handlers)
    loop = _Loop(adopted=adopted)
    clock = Clock(SimpleNamespace(), fp, loop, budget=budget)  # type: ignore[arg-type]
    assert handlers == {ABI.Event.TICK_LOST: clock.on_lost}
    loop.injected = [i for i in loop.injected if i[0] != COURIER]
    loop.classes.pop(COURIER, None)
    loop.fresh.clear()
    return clock, loop, fp.tick_cfg


def _entry(**kw: Any) -> Entry:
    kw.setdefault("min_tx_us", 10_000)
    kw.setdefault("min_rx_us", 10_000)
    session = make(**kw)
    return Entry(session, SimpleNamespace(sport=49152, dport=3784), "cli", slot=3, offloaded=True)


def _up(entry: Entry, **peer: Any) -> None:
    peer.setdefault("desired_min_tx_us", 10_000)
    peer.setdefault("required_min_rx_us", 10_000)
    bring_up(entry.session, 0, **peer)


def test_the_clocks_packet_carries_our_poll_only_once_the_session_sent_its_first_p() -> None:
    clock, _loop, cfg = _clock()
    e = _entry()
    clock.added(e)
    _up(e)
    s = e.session
    deliver(
        s, packet(control.State.UP, final=True, desired_min_tx_us=10_000, required_min_rx_us=10_000), 2_000
    )
    deliver(s, packet(control.State.UP, desired_min_tx_us=10_000, required_min_rx_us=10_000), 3_000)
    sent(s, 3_000)
    assert not s.poll_active
    clock.serviced(e)
    s.set_config(replace(s.config, min_tx_us=20_000), 4_000)
    assert s.poll_active and not s.poll_announced
    clock.serviced(e)
    # The peer's Final to a P of the clock's would reach a session that must ignore it.
    assert not control.decode_control(bytes(cfg.data[3].pkt)[: cfg.data[3].pkt_len]).poll
    s.detection_external = True  # the kernel watches the peer; the test sends it nothing more
    _now, out = run_until(s, 4_000, 30_000)  # the session's own first P, at its slot
    assert out and out[0][1].poll and s.poll_announced
    clock.serviced(e)
    assert control.decode_control(bytes(cfg.data[3].pkt)[: cfg.data[3].pkt_len]).poll


def test_an_up_session_is_clocked_from_one_frame_at_its_interval() -> None:
    clock, loop, cfg = _clock()
    e = _entry()
    clock.added(e)
    assert not loop.injected and not e.session.periodic_tx_external  # Down: the session sends itself
    _up(e)
    clock.serviced(e)
    assert loop.classes == {3: 10_000_000} and loop.injected == [(3, 1)]
    c = cfg.data[3]
    assert (c.flags, c.gen, c.classid, c.loop_ifindex, c.period_ns) == (
        ABI.TickFlag.RUN,
        1,
        0x10004,
        77,
        10**7,
    )
    assert c.lost_ns >= 2 * c.period_ns and c.armed_ns > 0
    # The packet the tick sends is the one the session would send now (here: the Poll to its fast timers).
    assert e.session.poll_active
    assert bytes(c.pkt) == control.encode_control(replace(e.session.current_packet(), poll=True))
    assert e.session.periodic_tx_external
    clock.serviced(e)  # nothing changed: nothing written, no second frame
    assert loop.injected == [(3, 1)] and cfg.data[3] is c
    out: dict = {}
    clock.session_stats(e, out, 0)
    assert out["kernel_clock"] is True


@pytest.mark.parametrize(
    ("what", "entry_kw", "peer_kw", "offloaded"),
    [
        ("authenticated", {"auth": AuthConfig(control.AuthType.KEYED_SHA1, 1, b"secret")}, {}, True),
        ("not seen by XDP", {}, {}, False),
    ],
)
def test_sessions_the_kernel_cannot_clock_stay_with_the_session(what, entry_kw, peer_kw, offloaded) -> None:
    clock, loop, _cfg = _clock()
    e = _entry(**entry_kw)
    e.offloaded = offloaded
    if entry_kw.get("auth"):
        e.session._state = control.State.UP
    else:
        _up(e, **peer_kw)
    clock.serviced(e)
    assert not loop.injected, what
    assert not e.session.periodic_tx_external


def test_a_peer_in_demand_mode_gets_no_periodic_packets() -> None:
    clock, loop, cfg = _clock()
    e = _entry()
    _up(e)
    clock.serviced(e)
    assert loop.injected == [(3, 1)]
    # §6.6: the peer sets D while both are Up; we must stop our periodic packets.
    deliver(e.session, packet(control.State.UP, demand=True, desired_min_tx_us=10_000,
                              required_min_rx_us=10_000), 5_000)  # fmt: skip
    assert e.session.remote_demand
    clock.serviced(e)
    assert cfg.data[3].flags == 0  # the frame dies at its next round


def test_a_shorter_interval_starts_a_new_frame_a_longer_one_only_slows_the_class() -> None:
    clock, loop, cfg = _clock()
    e = _entry(min_tx_us=50_000, min_rx_us=50_000)
    _up(e, desired_min_tx_us=50_000, required_min_rx_us=50_000)
    clock.serviced(e)
    assert loop.classes[3] == 50_000_000 and loop.injected == [(3, 1)]
    s = e.session
    s._eff_tx_us = 10_000
    s._remote_min_rx_us = 10_000
    clock.serviced(e)
    # htb's debt at the old rate would hold the old frame back: a new generation starts at once.
    assert loop.classes[3] == 10_000_000 and loop.injected == [(3, 1), (3, 2)]
    assert cfg.data[3].gen == 2 and cfg.data[3].period_ns == 10_000_000
    s._eff_tx_us = 100_000
    clock.serviced(e)
    assert loop.classes[3] == 100_000_000 and loop.injected == [(3, 1), (3, 2)]
    assert loop.fresh == [True, True, False]
    assert cfg.data[3].gen == 2 and cfg.data[3].period_ns == 100_000_000


def test_a_lost_frame_is_replaced_once_and_a_stale_report_is_ignored() -> None:
    clock, loop, cfg = _clock()
    e = _entry()
    _up(e)
    clock.serviced(e)
    lost = SimpleNamespace(
        slot=3, epoch=1, local_discr=e.session.local_discr, now_ns=30_000_000, last_rx_ns=0
    )
    clock.on_lost(lost)
    assert loop.injected == [(3, 1), (3, 2)] and cfg.data[3].gen == 2
    clock.on_lost(lost)  # the second CPU's report of the same generation
    assert loop.injected == [(3, 1), (3, 2)]
    out: dict = {}
    clock.session_stats(e, out, 0)
    assert out["tick_restarts"] == 1


def test_down_and_removal_stop_the_clock_and_keep_the_generation() -> None:
    clock, loop, cfg = _clock()
    e = _entry()
    _up(e)
    clock.serviced(e)
    e.session.detection_expired(100_000)
    e.session.periodic_tx_external = False  # as the Offload writes it for a session not Up
    clock.serviced(e)
    assert cfg.data[3].flags == 0 and not e.session.periodic_tx_external
    clock.removed(e)
    assert loop.dropped == [3] and cfg.data[3].gen == 1
    # The slot's next session starts a generation no frame still in flight carries.
    e2 = replace(e, session=make(min_tx_us=10_000, min_rx_us=10_000))
    _up(e2)
    clock.serviced(e2)
    assert loop.injected[-1] == (3, 2)


def test_a_session_back_up_at_its_period_keeps_its_class_and_starts_a_new_frame() -> None:
    """A flap costs no netlink: the stopped slot's class (same period, no debt) is kept."""
    clock, loop, cfg = _clock()
    e = _entry()
    _up(e)
    clock.serviced(e)
    assert loop.fresh == [True] and loop.injected == [(3, 1)]
    for n in (2, 3):
        e.session.detection_expired(100_000 * n)
        clock.serviced(e)
        assert cfg.data[3].flags == 0
        _up(e)
        clock.serviced(e)
        # A new generation: a frame of the old one still queued in the class dies as stale.
        assert loop.injected[-1] == (3, n) and cfg.data[3].gen == n
    assert loop.fresh == [True] and loop.dropped == []
    # At another period the class is made anew (its bucket is measured at the old rate).
    e.session.detection_expired(400_000)
    clock.serviced(e)
    _up(e, desired_min_tx_us=20_000)
    e.session._eff_tx_us = 20_000
    clock.serviced(e)
    assert loop.fresh == [True, True] and loop.classes[3] == 20_000_000


@pytest.mark.parametrize(("mult", "high"), [(3, JITTER_HIGH), (1, JITTER_HIGH_MULT1)])
def test_the_frame_lengths_keep_the_rfc_jitter_band(mult: int, high: float) -> None:
    clock, _loop, _cfg = _clock()
    lo, hi = clock.lengths(mult)
    full = ABI.tick_len_full
    # RFC 5880 §6.8.7: 75-100 % of the interval, at most 90 % with Detect Mult 1.
    assert 0.75 * full < lo <= JITTER_LOW * full + 1 and hi <= high * full
    assert hi <= (0.9 if mult == 1 else 1.0) * full and lo < hi


def _three_up(clock: Clock) -> list[Entry]:
    """Three sessions at 10 ms in slots 0-2 come Up, in that order."""
    entries = []
    for slot in range(3):
        e = _entry()
        e.slot = slot
        _up(e)
        clock.serviced(e)
        entries.append(e)
    return entries


def test_past_its_budget_the_clock_leaves_sessions_as_they_were_and_says_so_once(caplog) -> None:
    # 10 ms: about 114 releases/s a session; a budget of 250 takes two of them.
    clock, loop, cfg = _clock(budget=250)
    entries = _three_up(clock)
    assert [s for s, _gen in loop.injected] == [0, 1]
    assert [e.session.periodic_tx_external for e in entries] == [True, True, False]
    doc: dict = {}
    clock.document(doc)
    assert (doc["kernel_clock"]["clocked_sessions"], doc["kernel_clock"]["over_budget"]) == (2, 1)
    clock.serviced(entries[2])  # refused again: still one session over the budget
    clock.document(doc)
    assert doc["kernel_clock"]["over_budget"] == 1
    assert sum("budget of 250 releases/s is spent" in r.message for r in caplog.records) == 1
    # A clock that stops keeps its share for SHARE_HOLD_NS, then gives it back: the third
    # session gets one at its first service after that.
    now = [1_000]
    clock.now_ns = lambda: now[0]
    entries[0].session.detection_expired(100_000)
    clock.serviced(entries[0])
    clock.serviced(entries[2])
    assert [s for s, _gen in loop.injected] == [0, 1] and not entries[2].session.periodic_tx_external
    clock.document(doc)
    assert (doc["kernel_clock"]["held_shares"], doc["kernel_clock"]["over_budget"]) == (1, 1)
    now[0] += SHARE_HOLD_NS
    clock.serviced(entries[2])
    assert loop.injected[-1] == (2, 1) and cfg.data[2].flags == ABI.TickFlag.RUN
    clock.document(doc)
    assert (doc["kernel_clock"]["held_shares"], doc["kernel_clock"]["over_budget"]) == (0, 0)


def test_a_successor_keeps_the_clocks_its_predecessor_ran_whatever_order_it_adopts_in() -> None:
    """Past the budget, a --pin successor clocks the sessions its predecessor clocked: none swapped.

    It adopts in the order of the handed-over table, not the order the sessions
    came Up in. Deciding each session as it came would give the budget to the
    first unclocked ones and refuse clocks already running: each swap two class
    changes (netlink round trips: 0.8 s of a takeover at 1024 sessions) and a
    frame restarted.
    """
    old, _old_loop, cfg = _clock(budget=250)  # two sessions at 10 ms
    entries = _three_up(old)
    assert [e.session.periodic_tx_external for e in entries] == [True, True, False]
    clock, loop, _ = _clock(budget=250, tick_cfg=cfg)
    adopted = [entries[2], entries[0], entries[1]]  # the refused one first
    for e in adopted:
        e.session.periodic_tx_external = False  # as the Offload's service leaves it, before the clock's
        clock.adopted(e)
    # What pin's catch-up asks before any service: the frames the predecessor left running.
    assert [clock.clocking(e) for e in entries] == [True, True, False]
    for e in adopted:
        clock.serviced(e)  # the host services every adopted session once all are in
    assert [e.session.periodic_tx_external for e in entries] == [True, True, False]
    assert (loop.fresh, loop.dropped, loop.injected) == ([], [], [])
    assert [bool(cfg[slot].flags & ABI.TickFlag.RUN) for slot in range(3)] == [True, True, False]
    doc: dict = {}
    clock.document(doc)
    assert (doc["kernel_clock"]["clocked_sessions"], doc["kernel_clock"]["over_budget"]) == (2, 1)


def test_a_flapping_session_comes_back_to_its_held_share_and_others_wait() -> None:
    """Past the budget a flap hands no share round: no class change, no netlink, for anyone."""
    clock, loop, cfg = _clock(budget=250)  # two sessions at 10 ms
    now = [1_000]
    clock.now_ns = lambda: now[0]
    entries = _three_up(clock)
    classes = len(loop.fresh)
    for n in range(3):
        entries[0].session.detection_expired(100_000 * (n + 1))
        clock.serviced(entries[0])
        clock.serviced(entries[2])  # the waiting session: refused while the share is held
        now[0] += SHARE_HOLD_NS // 2
        _up(entries[0])
        clock.serviced(entries[0])
        assert cfg.data[0].flags == ABI.TickFlag.RUN and loop.injected[-1] == (0, n + 2)
    assert len(loop.fresh) == classes and not entries[2].session.periodic_tx_external
    assert [s for s, _gen in loop.injected].count(2) == 0
    # Removed while held: the share goes back at once.
    entries[0].session.detection_expired(900_000)
    clock.serviced(entries[0])
    clock.removed(entries[0])
    clock.serviced(entries[2])
    assert loop.injected[-1] == (2, 1)
    doc: dict = {}
    clock.document(doc)
    assert doc["kernel_clock"]["load_per_s"] <= 250 and doc["kernel_clock"]["held_shares"] == 0


# -- the courier (bpf/tick.c: it sends the Downs the sweep queued) ---------------------------


def test_the_courier_starts_with_the_clock_in_a_class_of_its_own() -> None:
    handlers: dict = {}
    cfg = _Map(_cfg_leaf)
    fp = _fast_path(cfg, handlers)
    loop = _Loop()
    clock = Clock(SimpleNamespace(), fp, loop, budget=25_000)  # type: ignore[arg-type]
    assert loop.injected == [(COURIER, 1)] and loop.fresh == [True]
    assert loop.classes == {COURIER: COURIER_PERIOD_NS}
    c = cfg.data[COURIER]
    assert c.flags & int(ABI.TickFlag.RUN) and (c.gen, c.period_ns, c.pkt_len) == (1, COURIER_PERIOD_NS, 0)
    # Its shortest round is the header's; its longest its class's period.
    assert c.len_min == -(-ABI.tick_len_full * ABI.courier_short_ns // COURIER_PERIOD_NS)
    assert c.len_max == ABI.tick_len_full
    # Not a session's clock: not in the count, nor in the budget.
    doc: dict = {}
    clock.document(doc)
    assert doc["kernel_clock"]["clocked_sessions"] == 0 and clock.load == 0
    assert doc["kernel_clock"]["courier"] == {"running": True, "restarts": 0}


def test_a_lost_courier_is_sent_again_with_its_own_magic() -> None:
    clock, loop, cfg = _clock()
    clock.on_lost(SimpleNamespace(slot=COURIER, epoch=1, now_ns=9_000_000, last_rx_ns=0))
    assert loop.injected == [(COURIER, 2)] and cfg.data[COURIER].gen == 2
    # A report of the generation before is stale.
    clock.on_lost(SimpleNamespace(slot=COURIER, epoch=1, now_ns=19_000_000, last_rx_ns=0))
    assert loop.injected == [(COURIER, 2)]
    doc: dict = {}
    clock.document(doc)
    assert doc["kernel_clock"]["courier"] == {"running": True, "restarts": 1}


def test_a_successor_keeps_the_courier_its_predecessor_left_running() -> None:
    cfg = _Map(_cfg_leaf)
    left = _cfg_leaf()
    left.flags, left.gen, left.period_ns, left.armed_ns = int(ABI.TickFlag.RUN), 7, COURIER_PERIOD_NS, 5
    cfg.data[COURIER] = left
    handlers: dict = {}
    fp = _fast_path(cfg, handlers)
    loop = _Loop(adopted=True)
    clock = Clock(SimpleNamespace(), fp, loop, budget=25_000)  # type: ignore[arg-type]
    assert loop.injected == [] and loop.classes == {} and cfg.data[COURIER] is left
    # Its frame in flight is the one it watches for: a loss of generation 7 starts generation 8.
    clock.on_lost(SimpleNamespace(slot=COURIER, epoch=7, now_ns=9_000_000, last_rx_ns=0))
    assert loop.injected == [(COURIER, 8)]
    # On a new loop (a crashed engine's leftovers removed) the same map entry starts a new frame.
    loop2 = _Loop()
    Clock(SimpleNamespace(), fp, loop2, budget=25_000)  # type: ignore[arg-type]
    assert loop2.injected == [(COURIER, 9)] and loop2.classes == {COURIER: COURIER_PERIOD_NS}


def _walked(clock: Clock) -> tuple[set[int], set[int]]:
    """What the document counted by walking every Tick before the counts were kept."""
    clocked = {s for s, t in clock.ticks.items() if t.running and s != COURIER}
    return clocked, {s for s, t in clock.ticks.items() if t.held_ns and not t.running}


def test_the_counts_kept_as_clocks_change_agree_with_a_walk_of_every_tick() -> None:
    """Up, Down and back within the hold, Down (held), refused over the budget, held out,
    removed, re-added: after each, the kept sets equal the walk and the document reports
    their sizes."""
    clock, _loop, _cfg = _clock(budget=250)  # two sessions at 10 ms
    now = [1_000]
    clock.now_ns = lambda: now[0]
    entries = _three_up(clock)
    seen = []

    def check() -> None:
        assert (clock.clocked, clock.held) == _walked(clock)
        doc: dict = {}
        clock.document(doc)
        k = doc["kernel_clock"]
        assert (k["clocked_sessions"], k["held_shares"]) == (len(clock.clocked), len(clock.held))
        seen.append((len(clock.clocked), len(clock.held)))

    check()
    # Down and back within the hold: the session takes its held share again.
    entries[0].session.detection_expired(50_000)
    clock.serviced(entries[0])
    check()
    _up(entries[0])
    clock.serviced(entries[0])
    check()
    for n in range(3):
        entries[n % 2].session.detection_expired(100_000 * (n + 1))
        clock.serviced(entries[n % 2])
        check()
        clock.serviced(entries[2])  # refused while the share is held
        check()
        now[0] += SHARE_HOLD_NS
        clock.serviced(entries[2])  # the hold ran out: the waiting session takes the share
        check()
        _up(entries[n % 2])
        clock.serviced(entries[n % 2])  # over the budget now
        check()
        clock.removed(entries[2])
        check()
        entries[2] = _entry()
        entries[2].slot = 2
        _up(entries[2])
        clock.added(entries[2])
        check()
    # The walk moved both ways, so agreeing was not agreeing on nothing.
    assert {c for c, _ in seen} >= {1, 2} and {h for _, h in seen} >= {0, 1}


# --- a meticulous key: a clock standing by, and a handover's series ---------------------------

SECRET = b"series-key"


class _Series:
    """The series hash map as the Clock reaches it: Key(slot), Leaf(), set, delete, items()."""

    def __init__(self) -> None:
        self.data: dict[int, Any] = {}

    @staticmethod
    def Key(slot: int) -> SimpleNamespace:
        return SimpleNamespace(value=slot)

    @staticmethod
    def Leaf() -> SimpleNamespace:
        return SimpleNamespace(
            first_seq=0, count=0, sent=0, pkt_len=0, not_before_ns=0,
            pkt=(ctypes.c_ubyte * (ABI.series_depth * ABI.pkt_max))(),
        )  # fmt: skip

    def __setitem__(self, key: SimpleNamespace, leaf: Any) -> None:
        self.data[key.value] = leaf

    def __delitem__(self, key: SimpleNamespace) -> None:
        del self.data[key.value]  # KeyError for a slot without one, as bcc

    def items(self) -> list[tuple[SimpleNamespace, Any]]:
        return [(self.Key(k), v) for k, v in self.data.items()]


def _meticulous(clock: Clock, auth_type: control.AuthType = control.AuthType.METICULOUS_KEYED_SHA1) -> Entry:
    """An Up session of a meticulous key, serviced by ``clock``; the peer's packets signed as §6.7.4."""
    auth = AuthConfig(auth_type, 5, SECRET)
    e = _entry(auth=auth)
    s = e.session
    for i, (state, your) in enumerate(((control.State.DOWN, 0), (control.State.UP, s.local_discr))):
        pkt = packet(state, your=your, desired_min_tx_us=10_000, required_min_rx_us=10_000,
                     auth=control.Auth(auth.type, auth.key_id, b"", 100 + i))  # fmt: skip
        deliver(s, pkt, i * 1_000, secret=SECRET)
    assert s.both_up
    sent(s, 1_000)
    clock.fp.series = getattr(clock.fp, "series", None) or _Series()
    clock.serviced(e)
    return e


def test_a_meticulous_key_has_a_clock_that_stands_by_and_sends_nothing() -> None:
    """Its packets need a new digest each, which the kernel cannot compute: the clock runs (a
    handover fills it) with the series flag and no packet of the map's, and the session sends."""
    clock, loop, cfg = _clock()
    e = _meticulous(clock)
    assert loop.injected == [(3, 1)]
    assert cfg.data[3].flags == ABI.TickFlag.RUN | ABI.TickFlag.SERIES and cfg.data[3].pkt_len == 0
    assert not e.session.periodic_tx_external
    out: dict = {}
    clock.session_stats(e, out, 0)
    assert (out["kernel_clock"], out["kernel_clock_standby"]) == (False, True)
    doc: dict = {}
    clock.document(doc)
    assert (doc["kernel_clock"]["clocked_sessions"], doc["kernel_clock"]["standby_sessions"]) == (0, 1)
    # The session's own packets still go: a timer, then a packet signed at the next number.
    seq = e.session.xmit_seq
    _now, pkts = run_until(e.session, 1_000, 30_000)
    assert pkts and pkts[0][1].auth.sequence == seq


@pytest.mark.parametrize(
    "auth_type", [control.AuthType.METICULOUS_KEYED_MD5, control.AuthType.METICULOUS_KEYED_SHA1]
)
def test_a_handover_signs_the_next_packets_and_the_successor_goes_on_after_what_the_kernel_sent(
    auth_type: control.AuthType,
) -> None:
    old, _loop, cfg = _clock()
    e = _meticulous(old, auth_type)
    s = e.session
    first = s.xmit_seq
    assert old.prepay() == 1
    leaf = old.fp.series.data[3]
    # 1 s of 10 ms packets does not fit: as many as the map holds, each at the next number.
    assert (leaf.first_seq, leaf.count, leaf.sent) == (first, ABI.series_depth, 0)
    assert leaf.not_before_ns == s.last_tx_us * 1000 + math.ceil(10_000_000 * JITTER_LOW)
    raw = bytes(leaf.pkt)
    for i in range(leaf.count):
        p = raw[i * ABI.pkt_max : i * ABI.pkt_max + leaf.pkt_len]
        assert p[24] == auth_type and seq_of(p) == (first + i) % 2**32
        assert p[32:] == keyed_digest(p, auth_type, SECRET)
        assert control.decode_control(p).state == control.State.UP
    assert s.xmit_seq == first  # signing ahead moves nothing: the successor decides
    # The successor adopts the clock as it runs, the kernel having sent 5 of the series.
    leaf.sent = 5
    new, loop, _ = _clock(tick_cfg=cfg, adopted=True)
    new.fp.series = old.fp.series
    new.adopted(e)
    assert new.resume() == [e]
    assert new.fp.series.data == {}
    # One number skipped: a tick may have been sending the sixth as the map was read.
    assert s.xmit_seq == (first + 6) % 2**32
    assert [d.auth.sequence for d in sent(s, 20_000)] == [(first + 6) % 2**32]  # within detection
    new.serviced(e)
    assert loop.injected == [] and new.signing == {3: e}


def test_a_failed_handover_leaves_the_engine_sending_after_the_series() -> None:
    clock, _loop, _cfg = _clock()
    e = _meticulous(clock)
    first = e.session.xmit_seq
    clock.prepay()
    clock.fp.series.data[3].sent = 2
    clock.unpay()
    assert clock.fp.series.data == {} and e.session.xmit_seq == first + 3


def test_a_series_another_engine_left_in_a_slot_dies_when_a_clock_starts_there() -> None:
    clock, _loop, _cfg = _clock()
    clock.fp.series = _Series()
    clock.fp.series.data[3] = _Series.Leaf()  # a predecessor's, its session not restored
    _meticulous(clock)
    assert clock.fp.series.data == {}


def test_a_session_adopted_with_a_series_then_removed_leaves_no_series_to_resume() -> None:
    """The successor's arguments may drop a session it adopted: its series stops with it, and the
    resumption before the loop finds nobody to go on after it."""
    old, _loop, cfg = _clock()
    e = _meticulous(old)
    old.prepay()
    new, _, _ = _clock(tick_cfg=cfg, adopted=True)
    new.fp.series = old.fp.series
    new.adopted(e)
    new.removed(e)
    assert new.fp.series.data == {} and new.prepaid == {}
    assert new.resume() == []
