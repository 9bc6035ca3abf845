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
from xdp_bfd.fastpath.series import START_COUNT
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
        pkt_len=0, series_idx=0,
        pkt=(ctypes.c_ubyte * ABI.control_len)(),
    )  # fmt: skip


def _state_leaf() -> SimpleNamespace:
    return SimpleNamespace(
        last_tick_ns=0, ticks=0, sent=0, skipped=0, gated=0, gen_seen=0, lost_gen=0,
        series_next=0, series_epoch=0,
    )  # fmt: skip


def _series_leaf() -> SimpleNamespace:
    return SimpleNamespace(
        slot=0, epoch=0, first_seq=0, count=0, pkt_len=0, not_before_ns=0,
        pkt=(ctypes.c_ubyte * (ABI.series_depth * ABI.pkt_max))(),
    )  # fmt: skip


def _fast_path(tick_cfg: _Map, handlers: dict, kernel: SimpleNamespace | None = None) -> SimpleNamespace:
    """A FastPath's parts as the Clock reaches them; ``handlers`` gets what it registers;
    ``kernel``: the maps a predecessor left (tick_state, series), else new ones."""
    return SimpleNamespace(
        abi=ABI,
        max_sessions=ABI.max_sessions,
        tick_cfg=tick_cfg,
        tick_state=kernel.tick_state if kernel else _Map(_state_leaf),
        series=kernel.series if kernel else _Map(_series_leaf),
        events=SimpleNamespace(on=handlers.__setitem__),
        tick_counters=SimpleNamespace(totals=dict),
    )


def _clock(
    budget: int = 25_000, tick_cfg: _Map | None = None, *, adopted: bool = False, after: Clock | None = None
) -> tuple[Clock, _Loop, _Map]:
    """``tick_cfg``: the map a predecessor left (a --pin successor's clock), ``adopted`` its loop,
    ``after``: the predecessor, whose kernel state (tick_state, series) this one finds.

    The courier's start (its own tests below) is taken out of the loop's records. The host
    records what is asked to be called when (``clock.host.calls``).
    """
    handlers: dict = {}
    fp = _fast_path(tick_cfg or _Map(_cfg_leaf), handlers, after.fp if after else None)
    loop = _Loop(adopted=adopted)
    calls: list = []
    host = SimpleNamespace(calls=calls, call_at=lambda deadline, cb: calls.append((deadline, cb)))
    clock = Clock(host, fp, loop, budget=budget)  # type: ignore[arg-type]
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


# --- a meticulous key: its clock sends a series the engine signs ahead ------------------------

SECRET = b"series-key"
U32 = 2**32


def _meticulous_up(auth_type: control.AuthType = control.AuthType.METICULOUS_KEYED_SHA1) -> Entry:
    """An Up session of a meticulous key, no clock told yet; the peer's packets signed as §6.7.4."""
    auth = AuthConfig(auth_type, 5, SECRET)
    e = _entry(auth=auth)
    s = e.session
    for i, (state, your) in enumerate(((control.State.DOWN, 0), (control.State.UP, s.local_discr))):
        pkt = packet(state, your=your, desired_min_tx_us=10_000, required_min_rx_us=10_000,
                     auth=control.Auth(auth.type, auth.key_id, b"", 100 + i))  # fmt: skip
        deliver(s, pkt, i * 1_000, secret=SECRET)
    assert s.both_up
    sent(s, 1_000)
    return e


def _meticulous(clock: Clock, auth_type: control.AuthType = control.AuthType.METICULOUS_KEYED_SHA1) -> Entry:
    """:func:`_meticulous_up`, serviced by ``clock``."""
    e = _meticulous_up(auth_type)
    clock.serviced(e)
    return e


def _held(clock: Clock, first: int, count: int, auth_type: int) -> list[bytes]:
    """The packets the slot's element holds for numbers first .. first + count - 1, each checked:
    at its number's row, signed right, Up."""
    leaf = clock.fp.series[clock.series.runs[3].idx]
    raw, out = bytes(leaf.pkt), []
    for n in range(first, first + count):
        row = (n % ABI.series_depth) * ABI.pkt_max
        p = raw[row : row + leaf.pkt_len]
        assert p[24] == auth_type and seq_of(p) == n % U32, (n, seq_of(p))
        assert p[32:] == keyed_digest(p, auth_type, SECRET)
        assert control.decode_control(p).state == control.State.UP
        out.append(p)
    return out


def _kernel_at(clock: Clock, n: int) -> None:
    """The clock sent up to n - 1 of the slot's running series (tick.c writes these two)."""
    st = clock.fp.tick_state[3]
    st.series_epoch, st.series_next = clock.series.runs[3].epoch, n % U32
    clock.fp.tick_state[3] = st


@pytest.mark.parametrize(
    "auth_type", [control.AuthType.METICULOUS_KEYED_MD5, control.AuthType.METICULOUS_KEYED_SHA1]
)
def test_a_meticulous_key_is_clocked_from_a_series_signed_ahead(auth_type: control.AuthType) -> None:
    """Its packets need a new digest each, which the kernel cannot compute: the engine signs the
    next ones into the slot's element of the series array and the clock sends them, the session
    none of its own."""
    clock, loop, cfg = _clock()
    e = _meticulous(clock, auth_type)
    s = e.session
    run = clock.series.runs[3]
    assert loop.injected == [(3, 1)]
    c = cfg.data[3]
    assert c.flags == ABI.TickFlag.RUN | ABI.TickFlag.SERIES and c.pkt_len == 0 and c.series_idx == run.idx
    leaf = clock.fp.series[run.idx]
    first = s.xmit_seq
    assert (leaf.slot, leaf.epoch, leaf.first_seq, leaf.count) == (3, 1, first, START_COUNT)
    assert leaf.not_before_ns == s.last_tx_us * 1000 + math.ceil(10_000_000 * JITTER_LOW)
    _held(clock, first, START_COUNT, auth_type)
    assert s.periodic_tx_external
    _now, pkts = run_until(s, 1_000, 25_000)  # within the detection time: the peer says nothing here
    assert pkts == []  # nothing periodic of the session's own
    out: dict = {}
    clock.session_stats(e, out, 0)
    assert (out["kernel_clock"], out["kernel_clock_standby"]) == (True, False)
    assert out["series_left"] == START_COUNT
    doc: dict = {}
    clock.document(doc)
    k = doc["kernel_clock"]
    assert (k["clocked_sessions"], k["series_sessions"], k["standby_sessions"]) == (1, 1, 0)
    # A refill is asked for: the engine signs ahead of the clock, the clock never waits for it.
    assert [cb for _, cb in clock.host.calls] == [clock._refill]


def test_a_refill_goes_on_from_where_the_kernel_is_and_rewrites_nothing_it_may_be_reading() -> None:
    clock, _loop, _cfg = _clock()
    e = _meticulous(clock)
    first = e.session.xmit_seq
    before = _held(clock, first, START_COUNT, control.AuthType.METICULOUS_KEYED_SHA1)
    _kernel_at(clock, first + 10)
    clock._refill(200_000)
    leaf = clock.fp.series[clock.series.runs[3].idx]
    assert (leaf.epoch, leaf.first_seq, leaf.count) == (1, first + 10, ABI.series_depth)
    after = _held(clock, first + 10, ABI.series_depth, control.AuthType.METICULOUS_KEYED_SHA1)
    assert after[: START_COUNT - 10] == before[10:]  # the same bytes where they were
    assert clock.series.left(3) == ABI.series_depth
    # Nothing due while most of the depth is ahead: the element is left alone.
    _kernel_at(clock, first + 20)
    assert not clock.series.refill(3, e)
    assert clock.host.calls[-1] == (300_000, clock._refill)  # and looked at again


def test_a_packet_of_the_sessions_own_stops_the_series_and_takes_the_number_after_the_kernels() -> None:
    """A Final to the peer's Poll: the series stops before it leaves; it carries one past the
    kernel's next number (a tick may be sending that one), and a new epoch starts after it."""
    clock, _loop, _cfg = _clock()
    e = _meticulous(clock)
    s = e.session
    first = s.xmit_seq
    _kernel_at(clock, first + 10)
    poll = packet(control.State.UP, your=s.local_discr, desired_min_tx_us=10_000, required_min_rx_us=10_000,
                  poll=True, auth=control.Auth(s.config.auth.type, 5, b"", 102))  # fmt: skip
    deliver(s, poll, 2_000, secret=SECRET)
    own = s.datagrams_to_send(2_000)
    assert [control.decode_control(p).final for p in own] == [True]
    assert e.outgoing is not None
    out = e.outgoing(e, own)
    leaf = clock.fp.series[clock.series.runs[3].idx]
    assert leaf.count == 0  # stopped before the Final leaves
    assert seq_of(out[0]) == first + 11 and out[0][32:] == keyed_digest(out[0], out[0][24], SECRET)
    assert control.decode_control(out[0]).final
    clock.serviced(e)
    assert (leaf.epoch, leaf.first_seq, leaf.count) == (2, first + 12, START_COUNT)
    _held(clock, first + 12, START_COUNT, control.AuthType.METICULOUS_KEYED_SHA1)
    # Without a series running, the session's packets go as they are.
    clock.series.stop(3)
    assert e.outgoing(e, own) == own


def test_a_handover_tops_the_series_up_and_the_successor_goes_on_with_it() -> None:
    old, _loop, cfg = _clock()
    e = _meticulous(old)
    s = e.session
    first = s.xmit_seq
    _kernel_at(old, first + 5)
    assert old.prepay() == 1
    leaf = old.fp.series[old.series.runs[3].idx]
    assert (leaf.first_seq, leaf.count) == (first + 5, ABI.series_depth)
    held = _held(old, first + 5, ABI.series_depth, control.AuthType.METICULOUS_KEYED_SHA1)
    # The successor adopts the clock and its series as they run, the kernel 7 packets further.
    new, loop, _ = _clock(tick_cfg=cfg, adopted=True, after=old)
    st = new.fp.tick_state[3]
    st.series_next = first + 12
    new.adopted(e)
    assert new.series.runs[3].epoch == 1 and new.series.runs[3].idx == old.series.runs[3].idx
    assert new.resume() == [e] and new.prepaid == {}
    new.serviced(e)
    assert loop.injected == [] and new.signing == {3: e} and s.periodic_tx_external
    # The session carries what the series carries (the old engine topped it up just before it
    # encoded it): nothing written, nothing signed again.
    assert (leaf.epoch, leaf.first_seq, leaf.count) == (1, first + 5, ABI.series_depth)
    # Once its packet changes (here: the key), the successor signs from the one after the
    # kernel's next, leaving that one as it is.
    s.set_config(replace(s.config, auth=replace(s.config.auth, secret=b"another-key")), 3_000)
    sent(s, 3_000)
    new.serviced(e)
    assert (leaf.epoch, leaf.first_seq) == (1, first + 12)
    raw = bytes(leaf.pkt)
    row = ((first + 12) % ABI.series_depth) * ABI.pkt_max
    assert raw[row : row + leaf.pkt_len] == held[7]
    row = ((first + 13) % ABI.series_depth) * ABI.pkt_max
    p = raw[row : row + leaf.pkt_len]
    assert seq_of(p) == first + 13 and p[32:] == keyed_digest(p, p[24], b"another-key")


def test_a_session_that_leaves_the_clock_goes_on_after_its_series() -> None:
    clock, _loop, _cfg = _clock()
    e = _meticulous(clock)
    first = e.session.xmit_seq
    idx = clock.series.runs[3].idx
    _kernel_at(clock, first + 5)
    clock.removed(e)
    assert clock.fp.series[idx].count == 0 and 3 not in clock.series.runs and idx in clock.series.free
    assert e.session.xmit_seq == first + 6


def test_a_new_series_starts_past_what_the_kernel_sent_for_the_slot() -> None:
    """A predecessor's series this engine could not adopt went on past the session's own number:
    the peer took those, so the new series goes on after them."""
    clock, _loop, _cfg = _clock()
    e = _meticulous_up(control.AuthType.METICULOUS_KEYED_MD5)
    s = e.session
    st = clock.fp.tick_state[3]
    st.series_epoch, st.series_next = 9, (s.xmit_seq + 40) % U32
    clock.fp.tick_state[3] = st
    clock.serviced(e)
    leaf = clock.fp.series[clock.series.runs[3].idx]
    assert leaf.epoch == 10 and leaf.first_seq == (s.xmit_seq + 41) % U32
    # Behind the session's number (this session's own earlier series), it is not gone back to.
    clock.removed(e)
    st.series_next = (s.xmit_seq - 40) % U32
    clock.serviced(e)
    assert clock.fp.series[clock.series.runs[3].idx].first_seq == s.xmit_seq


def test_without_a_free_element_the_clock_stands_by_and_the_session_sends() -> None:
    clock, _loop, _cfg = _clock()
    clock.series.free.clear()
    e = _meticulous(clock)
    assert not e.session.periodic_tx_external
    out: dict = {}
    clock.session_stats(e, out, 0)
    assert (out["kernel_clock"], out["kernel_clock_standby"], out["series_left"]) == (False, True, 0)
    seq = e.session.xmit_seq
    _now, pkts = run_until(e.session, 1_000, 30_000)
    assert pkts and pkts[0][1].auth.sequence == seq


def test_a_meticulous_key_changed_for_a_repeatable_one_ends_its_series() -> None:
    """The clock then sends the map's packet, signed once per change, and no series speaks for
    the session with the old key."""
    clock, _loop, cfg = _clock()
    e = _meticulous(clock)
    s = e.session
    idx = clock.series.runs[3].idx
    s.set_config(replace(s.config, auth=AuthConfig(control.AuthType.KEYED_SHA1, 5, SECRET)), 3_000)
    sent(s, 3_000)
    clock.serviced(e)
    assert clock.fp.series[idx].count == 0 and 3 not in clock.series.runs and clock.signing == {}
    c = cfg.data[3]
    assert c.flags == ABI.TickFlag.RUN and c.pkt_len == len(s.template(poll=False))
    assert s.periodic_tx_external
