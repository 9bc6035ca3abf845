"""The transmit clock in the kernel, as a session observer beside :class:`.observer.Offload`.

Which sessions the kernel clocks (docs/fastpath.md): every offloaded session
that is Up and sends periodic packets, without a guess about the peer. The
tick program sends only when nothing left for the session within 0.75 x the
interval, so against a peer that keeps its own clock XDP's replies carry the
session and a tick costs one look at the maps; against one that does not
(another fast path, a peer slower than we must be, a peer in Demand mode's
silence) the ticks send. A wrong guess cannot happen: at worst the kernel
clocks a session it could have answered.

Not clocked, so still sent by the session itself: sessions not Up or whose
peer is not Up yet (bring-up at the slow rate), a peer in Demand mode
(nothing periodic is sent at all), and sessions the kernel does not see the
packets of. A meticulous authenticated type (a new digest per packet; the
others' packet is signed once per change, Session.template) is clocked all
the same: its clock sends the packets the engine keeps signed ahead of it (a
series, fastpath/series.py), refilled well before they run out and topped up
as a --pin handover begins, so the session's peer hears from the kernel
while the engine is late, stopped or being replaced.

Per session the engine writes ``tick_cfg`` once per change (the packet, the
period, the generation) and changes the htb class when the interval does;
its only other work is sending a frame in when a clock starts or a frame is
lost (the sweep's TICK_LOST report): O(1) per event, never per packet.

Registered after the Offload: it owns the slot and says whether XDP replies,
this observer may add that the kernel also sends unasked
(``periodic_tx_external``), never take that away.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import logging
import math
import os
import socket
import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.host import Entry, Host, PacketCounts
from .kernel import FastPath
from .loop import LOOP_A, ShapedLoop
from .mapped import element_reader, read_all
from .series import Series

log = logging.getLogger("xdp_bfd")

# RFC 5880 §6.8.7: each interval 75-100 % of nominal, at most 90 % with Detect Mult 1.
# Two points inside each end: the qdisc's timer is exact to about 20 µs, and the
# last frame's resize and transit add a little.
JITTER_LOW, JITTER_HIGH, JITTER_HIGH_MULT1 = 0.77, 0.98, 0.88
# A frame not seen for this many periods is lost (the sweep's report), never less than the floor.
LOST_PERIODS, LOST_FLOOR_NS = 2, 5_000_000
# A clock stopped by its session leaving Up keeps its share of the budget this long: a flapping
# session comes back to its own class, and a flap storm past the budget does not hand shares
# round (each new holder a class change, two netlink round trips: docs/benchmarks.md).
SHARE_HOLD_NS = 10_000_000_000
# The courier's class: its longest round. Its rounds are aimed at the earliest expiry the sweep
# foresaw (bpf/tick.c), so this bounds only how stale that aim may get; its shortest round is the
# header's BFD_COURIER_SHORT_NS.
COURIER_PERIOD_NS = 4_000_000
# How often the series are looked at for a refill: far less than what one holds (the header's
# BFD_SERIES_DEPTH packets, a refill due at a quarter of them sent: about a second at 3x10 ms).
REFILL_US = 100_000


def ticks_per_s(period_ns: int) -> float:
    """Releases a clock costs: one per jittered period (0.875 of nominal on average)."""
    return 1e9 / (period_ns * (JITTER_LOW + JITTER_HIGH) / 2)


@dataclass
class Tick:
    """What the engine last wrote for one slot's clock."""

    gen: int = 0
    running: bool = False
    period_ns: int = 0
    lengths: tuple[int, int] = (0, 0)
    pkt: bytes = b""
    armed_ns: int = 0  # CLOCK_MONOTONIC when this generation's frame was sent in
    restarts: int = 0  # frames sent in again after a loss
    class_ns: int = 0  # the period of the slot's htb class as last set, 0 when it has none
    held_ns: int = 0  # stopped but keeping its share until then (CLOCK_MONOTONIC), 0 when not
    series: bool = False  # a meticulous key: sends only what a series holds (BFD_TICK_SERIES)
    series_idx: int = 0  # ... the element of the series array that is the slot's


_U32 = struct.Struct("=I")


@dataclass(frozen=True)
class DownLayout:
    """Where a frame of Downs (struct bfd_down_frame) holds what, from bcc's ctypes of it."""

    head: bytes  # the frame with its header filled in and no entry
    count: int
    first: int  # the first entry's offset
    entry: int  # an entry's size
    slot: int  # offsets inside an entry
    pkt_len: int
    pkt: int
    pkt_max: int


class Clock:
    """The kernel transmit clock as a session observer (core.host.SessionObserver)."""

    def __init__(self, host: Host, fp: FastPath, loop: ShapedLoop, *, budget: int) -> None:
        self.host, self.fp, self.loop = host, fp, loop
        # Releases per second the running clocks may cost together (--kernel-clock-budget).
        self.budget, self.load = budget, 0.0
        self.refused: set[int] = set()  # slots whose clock the budget refused (until it starts or leaves)
        self._budget_said = False
        self.now_ns = time.monotonic_ns
        self.holds: collections.deque[tuple[int, int]] = collections.deque()  # (until_ns, slot), oldest first
        abi = fp.abi
        self.run_flag, self.series_flag = int(abi.TickFlag.RUN), int(abi.TickFlag.SERIES)
        self.series = Series(fp)
        # Clocked sessions of a meticulous key, by slot: their packets are signed ahead.
        self.signing: dict[int, Entry] = {}
        # Adopted with a predecessor's series possibly running: serviced once the loop is about to run.
        self.prepaid: dict[int, Entry] = {}
        self._refill_at: int | None = None
        self._series_said = False
        self.len_full, self.len_min = abi.tick_len_full, abi.tick_len_min
        self.ethertype, self.magic = abi.tick_ethertype, abi.tick_magic
        self.down_magic, self.down_batch = abi.down_magic, abi.down_batch
        # The courier's frame has the entry after the last slot's (bfd_abi.h).
        self.courier_slot, self.courier_magic = fp.max_sessions, abi.courier_magic
        self.courier_lengths = (
            max(self.len_min, math.ceil(self.len_full * abi.courier_short_ns / COURIER_PERIOD_NS)),
            self.len_full,
        )
        self._layout: DownLayout | None = None
        self.cfg = fp.tick_cfg
        self._read_whole: Any = None  # tick_cfg read whole while adopting()
        self.state_reader = element_reader(fp.tick_state, "tick_state")
        self.ticks: dict[int, Tick] = {}
        # The sessions' slots whose clock runs, and those stopped but holding their share: kept as
        # they change, for the stats document (a walk of every Tick at 4096 sessions was 1.5-2.3 ms
        # of one step, its objects cold; docs/benchmarks.md). The courier is in neither.
        self.clocked: set[int] = set()
        self.held: set[int] = set()
        fp.events.on(abi.Event.TICK_LOST, self.on_lost)
        self._courier()

    def _courier(self) -> None:
        """Start the courier, which sends the Downs the sweep queues (bpf/tick.c), or adopt it running."""
        if os.environ.get("XDP_BFD_TEST_NO_COURIER"):
            # Tests of the engine's own Downs (frames, sends): what a loop without a courier does.
            log.warning("kernel-tx: no courier (XDP_BFD_TEST_NO_COURIER): the engine sends every Down")
            return
        slot = self.courier_slot
        c = self.cfg[self.cfg.Key(slot)]
        if self.loop.adopted and c.flags & self.run_flag and int(c.period_ns) == COURIER_PERIOD_NS:
            # A predecessor's, in flight with its class: it goes on as it is.
            self.ticks[slot] = Tick(
                gen=int(c.gen),
                running=True,
                period_ns=COURIER_PERIOD_NS,
                lengths=self.courier_lengths,
                armed_ns=int(c.armed_ns),
                class_ns=COURIER_PERIOD_NS,
            )
            return
        t = Tick(gen=int(c.gen), running=True, period_ns=COURIER_PERIOD_NS, lengths=self.courier_lengths)
        self.loop.set_class(slot, COURIER_PERIOD_NS, self.len_full, fresh=True)
        t.class_ns = COURIER_PERIOD_NS
        self.ticks[slot] = t
        self._start(slot, t)

    # -- who is clocked ---------------------------------------------------------------

    @staticmethod
    def wanted(entry: Entry) -> bool:
        s = entry.session
        if entry.slot is None or not entry.offloaded:
            return False
        # Up before the peer: the session sends once a second until the peer says Up (docs/engine.md).
        # A clock for that moment would cost two class changes per session at bring-up.
        if not s.both_up or s.remote_discr == 0 or s.remote_min_rx_us == 0:
            return False
        # §6.6: a peer in Demand mode asked for no periodic packets (a Poll is the session's own).
        return not s.remote_demand

    def clocking(self, entry: Entry) -> bool:
        """The session's frame runs in the loop (adopted running, or started since)."""
        return entry.slot in self.clocked

    @staticmethod
    def signs_ahead(entry: Entry) -> bool:
        """A meticulous type: a new Sequence Number, so a new digest, in every packet."""
        auth = entry.session.config.auth
        return auth is not None and auth.meticulous

    def lengths(self, detect_mult: int) -> tuple[int, int]:
        high = JITTER_HIGH_MULT1 if detect_mult == 1 else JITTER_HIGH
        return math.ceil(self.len_full * JITTER_LOW), int(self.len_full * high)

    # -- observer ---------------------------------------------------------------------

    def added(self, entry: Entry) -> None:
        self.serviced(entry)

    @contextlib.contextmanager
    def adopting(self) -> Iterator[None]:
        """A restore's :meth:`adopted` calls read the tick configurations from one read of the whole
        map, made now (the old engine is gone; the kernel never writes it), where each read one
        element by a system call (mapped.read_all; by element as before when it cannot)."""
        self._read_whole = read_all(self.cfg)
        try:
            yield
        finally:
            self._read_whole = None

    def adopted(self, entry: Entry) -> None:
        """A session handed over with its slot (--pin): its frame may be in flight, keep it going.

        Only taken in here: the host services every adopted session once all of
        them are in, so the budget holds every clock the predecessor left
        running before any session is decided. Decided one by one in the order
        of the handed-over table, the first unclocked sessions would take the
        budget and running clocks be refused: a swap costs two class changes
        (docs/benchmarks.md) and restarts a frame.
        """
        assert entry.slot is not None
        read = self._read_whole
        c = read[entry.slot] if read is not None else self.cfg[self.cfg.Key(entry.slot)]
        self.ticks[entry.slot] = Tick(
            gen=int(c.gen),
            running=bool(c.flags & self.run_flag),
            period_ns=int(c.period_ns),
            lengths=(int(c.len_min), int(c.len_max)),
            pkt=bytes(c.pkt)[: c.pkt_len],
            armed_ns=int(c.armed_ns),
            class_ns=int(c.period_ns),  # the predecessor's class, left in place
            series=bool(c.flags & self.series_flag),
            series_idx=int(c.series_idx),
        )
        t = self.ticks[entry.slot]
        if t.running:
            self.load += ticks_per_s(int(c.period_ns))
            self.clocked.add(entry.slot)
        if t.series and self.signs_ahead(entry):
            entry.outgoing = self.outgoing
            if t.running:
                self.series.adopt(entry.slot, t.series_idx, entry)
            self.prepaid[entry.slot] = entry

    def removed(self, entry: Entry) -> None:
        if entry.slot is None:
            return
        t = self.ticks.get(entry.slot)
        if t is not None:
            if t.running:
                self._stop(entry.slot, t)
            self._release(entry.slot, t)
            # The generation stays with the slot: a frame still in flight dies as stale.
            self.ticks[entry.slot] = Tick(gen=t.gen)
            self.loop.drop_class(entry.slot)
        self.refused.discard(entry.slot)
        self._unsign(entry)
        self.prepaid.pop(entry.slot, None)

    def serviced(self, entry: Entry) -> None:
        slot = entry.slot
        if slot is None:
            return
        s = entry.session
        t = self.ticks.setdefault(slot, Tick())
        if not self.wanted(entry):
            if t.running:
                self._stop(slot, t, hold=True)
            self._unsign(entry)
            return
        period_ns = s.tx_interval_us * 1000
        series = self.signs_ahead(entry)
        # A series clock sends no packet of the map's (tick.c): written once, not per packet.
        pkt = b"" if series else s.template(poll=s.poll_announced)
        lengths = self.lengths(s.config.detect_mult)
        if not t.running:
            self._expire_holds()
        # A held share is still counted in the load: coming back costs only a change of period.
        cost = ticks_per_s(period_ns) - (ticks_per_s(t.period_ns) if t.running or t.held_ns else 0.0)
        if cost > 0 and self.load + cost > self.budget:
            # Over budget the session stays as it was before the clock: XDP's replies, the loop's packets.
            if t.running:
                self._stop(slot, t)
            self._release(slot, t)
            self._refuse(slot, entry)
            self._unsign(entry)
            return
        if series:
            t.series_idx = self._claim(slot, entry, t)
        elif t.series:
            self._unsign(entry)  # a meticulous key changed for another type: its clock sends the map's
        t.held_ns = 0
        self.held.discard(slot)
        if not t.running or period_ns < t.period_ns:
            # A new class and frame: one waiting out a longer period (htb's debt) must not set the pace.
            # A stopped slot's class at this very period has no debt (its bucket refilled while idle):
            # kept, a session that flaps costs no netlink round trips, which at scale are what a
            # flap costs the engine most (docs/benchmarks.md). A frame of the old generation still
            # queued in it dies as stale.
            if t.running or t.class_ns != period_ns:
                self.loop.set_class(slot, period_ns, self.len_full, fresh=True)
                t.class_ns = period_ns
            self.load += cost
            t.running, t.period_ns, t.lengths, t.pkt, t.series = True, period_ns, lengths, pkt, series
            self.clocked.add(slot)
            self._start(slot, t)
        elif period_ns != t.period_ns or lengths != t.lengths or pkt != t.pkt or series != t.series:
            if period_ns != t.period_ns:
                self.loop.set_class(slot, period_ns, self.len_full)
                t.class_ns = period_ns
                self.load += cost
            t.period_ns, t.lengths, t.pkt, t.series = period_ns, lengths, pkt, series
            self._write(slot, t)
        if not series:
            s.periodic_tx_external = True
        elif slot in self.series.runs:
            self._pay(slot, entry, t)
            s.periodic_tx_external = True

    def _stop(self, slot: int, t: Tick, *, hold: bool = False) -> None:
        t.running = False
        self.clocked.discard(slot)
        if hold:
            t.held_ns = self.now_ns() + SHARE_HOLD_NS
            self.holds.append((t.held_ns, slot))
            self.held.add(slot)
        else:
            self.load = max(0.0, self.load - ticks_per_s(t.period_ns))
        self._write(slot, t)

    def _release(self, slot: int, t: Tick) -> None:
        """A held share goes back to the budget."""
        if t.held_ns:
            t.held_ns = 0
            self.held.discard(slot)
            self.load = max(0.0, self.load - ticks_per_s(t.period_ns))

    def _expire_holds(self) -> None:
        now = self.now_ns()
        while self.holds and self.holds[0][0] <= now:
            until, slot = self.holds.popleft()
            t = self.ticks.get(slot)
            if t is not None and t.held_ns == until and not t.running:  # else restarted or re-held since
                self._release(slot, t)

    def _refuse(self, slot: int, entry: Entry) -> None:
        self.refused.add(slot)
        if not self._budget_said:
            self._budget_said = True  # once: at scale this is every session past the budget
            c = entry.session.config
            log.warning(
                "kernel-tx: the transmit clock's budget of %d releases/s is spent; %s -> %s and any"
                " further session are not clocked (XDP answers them; --kernel-clock-budget)",
                self.budget,
                c.local or "*",
                c.peer,
            )

    def _start(self, slot: int, t: Tick) -> None:
        self.refused.discard(slot)
        t.gen = (t.gen + 1) & 0xFFFFFFFF
        t.armed_ns = time.monotonic_ns()
        self._write(slot, t)
        magic = self.courier_magic if slot == self.courier_slot else self.magic
        self.loop.inject(slot, t.gen, self.len_min, self.ethertype, magic)

    def _write(self, slot: int, t: Tick) -> None:
        leaf = self.cfg.Leaf()
        leaf.flags = (self.run_flag if t.running else 0) | (self.series_flag if t.series else 0)
        leaf.gen = t.gen
        leaf.classid = self.loop.classid(slot)
        leaf.loop_ifindex = self.loop.a
        leaf.len_min, leaf.len_max = t.lengths
        leaf.period_ns = t.period_ns
        leaf.lost_ns = max(LOST_FLOOR_NS, LOST_PERIODS * t.period_ns)
        leaf.armed_ns = t.armed_ns
        ctypes.memmove(leaf.pkt, t.pkt, min(len(t.pkt), ctypes.sizeof(leaf.pkt)))
        leaf.pkt_len = len(t.pkt)
        leaf.series_idx = t.series_idx
        self.cfg[self.cfg.Key(slot)] = leaf

    # -- series: a meticulous key's packets signed ahead (fastpath/series.py) ---------------

    def _claim(self, slot: int, entry: Entry, t: Tick) -> int:
        """The slot's element of the series array; without one (all taken) the clock stands by and
        the session sends its packets itself, as before series existed."""
        self.signing[slot] = entry
        if entry.outgoing is None:
            entry.outgoing = self.outgoing
        idx = self.series.claim(slot)
        if idx is None:
            if not self._series_said:
                self._series_said = True
                log.warning(
                    "kernel-tx: every one of the %d series is taken; %s -> %s and any further"
                    " meticulous session send their own packets",
                    len(self.series.runs),
                    entry.session.config.local or "*",
                    entry.session.config.peer,
                )
            return t.series_idx
        if t.running and idx != t.series_idx:
            t.series_idx = idx
            self._write(slot, t)
        return idx

    def _pay(self, slot: int, entry: Entry, t: Tick) -> None:
        """Keep the session's series running: a new one after a packet of its own, else a refill
        if stale."""
        run = self.series.runs[slot]
        if not run.running:
            s = entry.session
            self.series.start(slot, entry, s.last_tx_us * 1000 + math.ceil(t.period_ns * JITTER_LOW))
        else:
            self.series.refill(slot, entry)
        if self._refill_at is None:
            self._refill_at = self.now_ns() // 1000 + REFILL_US
            self.host.call_at(self._refill_at, self._refill)

    def _refill(self, now_us: int) -> None:
        self._refill_at = None
        for slot, run in list(self.series.runs.items()):
            entry = self.signing.get(slot)
            if entry is not None and run.running:
                self.series.refill(slot, entry)
        if any(run.running for run in self.series.runs.values()):
            self._refill_at = now_us + REFILL_US
            self.host.call_at(self._refill_at, self._refill)

    def outgoing(self, entry: Entry, pkts: list[bytes]) -> list[bytes]:
        """The session's own packets (``Entry.outgoing``): its series stops and they take the
        numbers after the clock's next one."""
        slot = entry.slot
        nxt = self.series.stop(slot) if slot is not None else None
        if nxt is None:
            return pkts
        return [entry.session.renumbered(pkt, nxt + i) for i, pkt in enumerate(pkts)]

    def _unsign(self, entry: Entry) -> None:
        """The session's clock stops or it leaves: its series ends, its next packet after it."""
        slot = entry.slot
        if slot is None or (self.signing.pop(slot, None) is None and slot not in self.series.runs):
            return
        nxt = self.series.release(slot)
        if nxt is not None:
            entry.session.resume_sequence(nxt)

    def prepay(self) -> int:
        """Top every running series up to the whole depth: the engine is about to hand over (--pin)
        and signs nothing until its successor serves. Returns how many there are."""
        topped = 0
        for slot, entry in self.signing.items():
            run = self.series.runs.get(slot)
            if run is not None and run.running:
                self.series.refill(slot, entry, full=True)
                topped += 1
        return topped

    def resume(self) -> list[Entry]:
        """The adopted sessions of a meticulous key, to be serviced now that the loop is about to
        run (the restore leaves them unserviced): their series go on where the kernel is, signed
        again if their packet changed, and their own packets are numbered after it."""
        out = list(self.prepaid.values())
        self.prepaid.clear()
        return out

    # -- Downs ------------------------------------------------------------------------

    def send_downs(self, downs: Sequence[tuple[int, bytes]]) -> list[int]:
        """Hand a run of Downs (slot, packet) to the tick program, ``down_batch`` to a frame.

        One frame is one system call for up to ``down_batch`` Downs: at a mass
        expiry the engine's sends were the larger part of its time before the
        controller heard (docs/fastpath.md, "Many expiries at once"). Returns
        the slots whose frame the loop refused: those the caller sends itself.
        A Down the kernel cannot send (no packet from the peer seen, the
        session gone) is counted there (``down_no_path``, ``down_stale``).
        """
        refused: list[int] = []
        lay, batch = self._down_layout(), self.down_batch
        for i in range(0, len(downs), batch):
            part = downs[i : i + batch]
            # Packed at the offsets bcc's ctypes give the header's struct: a ctypes object per
            # entry cost as much as the send it replaces.
            buf = bytearray(lay.head)
            _U32.pack_into(buf, lay.count, len(part))
            at = lay.first
            for slot, pkt in part:
                n = min(len(pkt), lay.pkt_max)
                _U32.pack_into(buf, at + lay.slot, slot)
                buf[at + lay.pkt_len] = n
                buf[at + lay.pkt : at + lay.pkt + n] = pkt[:n]
                at += lay.entry
            if not self.loop.send(bytes(buf)):
                refused += [slot for slot, _ in part]
        return refused

    def _down_layout(self) -> DownLayout:
        if self._layout is None:
            frame_t = self.fp.down_frame
            f = frame_t()
            f.dst[:] = self.loop.b_mac
            f.src[:] = self.loop.a_mac
            f.proto = socket.htons(self.ethertype)
            f.magic = self.down_magic
            entry_t = dict(frame_t._fields_)["e"]._type_
            self._layout = DownLayout(
                head=bytes(f),
                count=frame_t.count.offset,
                first=frame_t.e.offset,
                entry=ctypes.sizeof(entry_t),
                slot=entry_t.slot.offset,
                pkt_len=entry_t.pkt_len.offset,
                pkt=entry_t.pkt.offset,
                pkt_max=entry_t.pkt.size,
            )
        return self._layout

    # -- kernel reports -----------------------------------------------------------

    def on_lost(self, ev: Any) -> None:
        t = self.ticks.get(ev.slot)
        if t is None or not t.running or ev.epoch != t.gen:
            return  # stopped or restarted since
        t.restarts += 1
        log.info(
            "kernel-tx: the tick frame of slot %d was not seen for %.1f ms; sending another",
            ev.slot,
            (ev.now_ns - ev.last_rx_ns) / 1e6,
        )
        self._start(ev.slot, t)

    # -- stats ------------------------------------------------------------------------

    def counts(self, entry: Entry, counts: PacketCounts) -> PacketCounts:
        return counts  # what the ticks sent is in the slot's ktx counters (the Offload adds them)

    def session_stats(self, entry: Entry, out: dict[str, Any], now_ns: int) -> None:
        if entry.slot is None:
            return
        t = self.ticks.get(entry.slot, Tick())
        st = self.state_reader[entry.slot]
        # A meticulous key's clock sends its series; without one (none free) it stands by.
        left = self.series.left(entry.slot) if t.series else 0
        paid = left > 0
        out["kernel_clock"] = t.running and (not t.series or paid)
        out["kernel_clock_standby"] = t.running and t.series and not paid
        if t.series:
            out["series_left"] = left
        out["tick_sent"] = int(st.sent)
        out["tick_skipped"] = int(st.skipped)
        out["tick_gated"] = int(st.gated)
        out["tick_restarts"] = t.restarts
        out["last_tick_age_us"] = (now_ns - st.last_tick_ns) // 1000 if st.last_tick_ns else None

    def document(self, doc: dict[str, Any]) -> None:
        courier = self.ticks.get(self.courier_slot, Tick())
        series = sum(1 for run in self.series.runs.values() if run.running)
        standby = len([slot for slot in self.signing if slot in self.clocked]) - series
        doc["kernel_clock"] = {
            "loop": LOOP_A,
            "clocked_sessions": len(self.clocked) - standby,
            # Meticulous keys' clocks, sending the packets the engine signs ahead for them.
            "series_sessions": series,
            # ... and those without a series (every element taken): the session sends itself.
            "standby_sessions": standby,
            # The frame that sends the Downs the sweep queues: running, and sent in again after a loss.
            "courier": {"running": courier.running, "restarts": courier.restarts},
            # Stopped when their session left Up, still holding their share (SHARE_HOLD_NS).
            "held_shares": len(self.held),
            "budget_per_s": self.budget,
            "load_per_s": round(self.load),
            "over_budget": len(self.refused),
            "counters": self.fp.tick_counters.totals(),
        }

    def close(self) -> None:
        self.loop.close(remove=True)


__all__ = ["Clock", "Tick"]
