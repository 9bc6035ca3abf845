"""A meticulous key's packets, signed ahead for the kernel's clock to send (bfd_abi.h, struct bfd_series).

Such a key puts a new Sequence Number, so a new digest, in every packet
(RFC 5880 §6.7.3), which no program can compute. So the engine keeps the next
packets of each such session signed in an element of the ``series`` array and
the clock sends them (bpf/tick.c): no periodic packet waits for the engine,
which only has to refill the element a second or more ahead of the clock.

Three rules keep the numbers and the bytes right without a lock:

- The element is rewritten in place and number n always sits at n mod
  ``BFD_SERIES_DEPTH``: a refill writes the same bytes where the clock may be
  reading, new packets only where numbers already sent were.
- The kernel keeps where it is (``tick_state.series_next``, with the epoch it
  sent from); a refill goes on from there. A stale series (the session's
  packet changed) is signed again from the number after the kernel's next one,
  which is left as it was: that packet may be leaving as the element is
  written.
- A packet the session sends itself (a Final, its Poll's first P, a change of
  state) stops the series first and takes the number after the kernel's next
  one (a tick may be sending that one); the series starts again after it, in a
  new epoch. A step of 2 at most, inside the §6.7.3 window of 3 x Detect Mult.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass
from typing import Any

from ..core.host import Entry
from ..session.config import AuthConfig
from ..wire.control import ControlPacket
from .kernel import FastPath
from .mapped import element_reader

log = logging.getLogger("xdp_bfd")

_U32 = 2**32
# A new series holds this many packets at once (signing each costs the loop a few µs); the next
# refill fills the rest.
START_COUNT = 64
# A refill is due when fewer than this share of the depth is left ahead of the clock.
REFILL_BELOW = 0.75


@dataclass
class Run:
    """One session's series as last written."""

    idx: int  # its element of the series array
    epoch: int
    first: int  # the numbers it holds: first .. end - 1 (end may pass 2**32; written modulo)
    end: int
    # What its packets carry but the number, and the key that signs them; None: not known.
    content: tuple[ControlPacket, AuthConfig | None] | None
    not_before_ns: int = 0
    running: bool = False  # count > 0 in the kernel's element


class Series:
    """The series array, element by element: who holds which, and what each holds."""

    def __init__(self, fp: FastPath) -> None:
        self.table = fp.series
        self.depth, self.row = fp.abi.series_depth, fp.abi.pkt_max
        self.state = element_reader(fp.tick_state, "tick_state")
        self.runs: dict[int, Run] = {}  # by slot
        self.free = list(range(int(fp.abi.series_max) - 1, -1, -1))
        self._leaves: dict[int, Any] = {}  # by element: the bytes last written, kept to write again

    # -- where the kernel is --------------------------------------------------------------

    def position(self, slot: int, run: Run) -> int:
        """The number the clock sends next from this run (it may be sending it now)."""
        st = self.state[slot]
        if int(st.series_epoch) != run.epoch:
            return run.first  # none of this epoch sent yet
        return run.first + ((int(st.series_next) - run.first) % _U32)

    def left(self, slot: int) -> int:
        """Packets of the slot's series the clock has not sent yet."""
        run = self.runs.get(slot)
        if run is None or not run.running:
            return 0
        return max(0, run.end - self.position(slot, run))

    # -- a session's series -----------------------------------------------------------

    def claim(self, slot: int) -> int | None:
        """The slot's element (kept while the session is clocked), or None when all are taken."""
        run = self.runs.get(slot)
        if run is not None:
            return run.idx
        if not self.free:
            return None
        idx = self.free.pop()
        self.runs[slot] = Run(idx=idx, epoch=0, first=0, end=0, content=None)
        return idx

    def start(self, slot: int, entry: Entry, not_before_ns: int) -> None:
        """A new epoch from the session's own next number (nothing of the slot's is running)."""
        run = self.runs[slot]
        st = self.state[slot]
        last = int(st.series_epoch)
        run.epoch = (max(last, run.epoch) % (_U32 - 1)) + 1  # never 0, never the kernel's last one
        first = entry.session.xmit_seq
        if last and 0 < (int(st.series_next) - first) % _U32 < _U32 // 2:
            # The kernel sent past the session's own number (a series another engine kept going
            # that this one could not adopt): the peer took those, so go on after them.
            first = int(st.series_next) + 1
        run.first = run.end = first
        run.content, run.not_before_ns = entry.session.series_content(), not_before_ns
        self._sign(slot, entry, run.first, START_COUNT)

    def refill(self, slot: int, entry: Entry, *, full: bool = False) -> bool:
        """Go on from where the clock is: the rest of the depth signed (or ``full``: topped up now),
        a stale series signed again. Returns whether the element was written."""
        run = self.runs[slot]
        s = entry.session
        pos = self.position(slot, run)
        content = s.series_content()
        if content != run.content:
            run.content = content
            run.first, run.end = pos, pos + 1  # the one at pos may be leaving: left as it was
            self._sign(slot, entry, pos + 1, START_COUNT - 1 if not full else self.depth - 1)
            return True
        if not full and run.end - pos >= self.depth * REFILL_BELOW:
            return False
        run.first = pos
        self._sign(slot, entry, run.end, pos + self.depth - run.end)
        return True

    def stop(self, slot: int) -> int | None:
        """Stop the slot's series; the number a packet of the session's may carry next (one past
        the clock's next: a tick may be sending that one), or None when none ran."""
        run = self.runs.get(slot)
        if run is None or not run.running:
            return None
        leaf = self._leaves[run.idx]
        leaf.count = 0
        self.table[self.table.Key(run.idx)] = leaf
        run.running = False
        return self.position(slot, run) + 1

    def release(self, slot: int) -> int | None:
        """The session leaves the clock: its series stops and its element is free again."""
        nxt = self.stop(slot)
        run = self.runs.pop(slot, None)
        if run is not None:
            self.free.append(run.idx)
        return nxt

    def adopt(self, slot: int, idx: int, entry: Entry) -> bool:
        """A predecessor's series in element ``idx`` (the slot's tick_cfg said so): it goes on as it
        runs, carrying what the handed-over session carries (the predecessor topped it up just
        before it encoded the session). False when the element holds nothing of this slot's (then
        one is claimed anew)."""
        if idx not in self.free:
            return False
        leaf = self.table[self.table.Key(idx)]
        if int(leaf.slot) != slot or not int(leaf.count):
            return False
        self.free.remove(idx)
        first = int(leaf.first_seq)
        self.runs[slot] = Run(
            idx=idx,
            epoch=int(leaf.epoch),
            first=first,
            end=first + int(leaf.count),
            content=entry.session.series_content(),
            not_before_ns=int(leaf.not_before_ns),
            running=True,
        )
        self._leaves[idx] = leaf
        return True

    # -- the element --------------------------------------------------------------------

    def _sign(self, slot: int, entry: Entry, first: int, count: int) -> None:
        """Sign ``count`` packets from number ``first`` into the run's element and write it whole."""
        run = self.runs[slot]
        leaf = self._leaves.get(run.idx)
        if leaf is None:
            leaf = self._leaves[run.idx] = self.table.Leaf()
        base = ctypes.addressof(leaf.pkt)
        pkts = entry.session.series(first, count) if count > 0 else []
        for i, pkt in enumerate(pkts):
            if len(pkt) > self.row:
                raise ValueError(f"a packet of {len(pkt)} bytes does not fit a series row of {self.row}")
            ctypes.memmove(base + ((first + i) % self.depth) * self.row, pkt, len(pkt))
            leaf.pkt_len = len(pkt)
        run.end = first + len(pkts)
        leaf.slot, leaf.epoch = slot, run.epoch
        leaf.first_seq, leaf.count = run.first % _U32, run.end - run.first
        leaf.not_before_ns = run.not_before_ns
        self.table[self.table.Key(run.idx)] = leaf
        run.running = True


__all__ = ["Run", "Series"]
