"""The session table: sessions by discriminator and by path, and the demultiplexer (RFC 5880 §6.8.6)."""

from __future__ import annotations

import heapq
import random
from collections import Counter

from ..session import SessionKey
from . import links
from .host import Entry
from .netio import Datagram

# A discriminator we choose is an index in its low bits, the smallest no
# session of ours uses, under random high bits (RFC 5880 §6.8.1 asks for
# unique and recommends random). A fast path can keep the session at that
# index and find it from Your Discriminator without a hash (docs/fastpath.md,
# "Slots"); the indexes stay as dense as the sessions.
DISCR_INDEX_BITS = 16
_INDEX_MASK = (1 << DISCR_INDEX_BITS) - 1


class SessionTable:
    def __init__(self, rng: random.Random) -> None:
        self.sessions: dict[int, Entry] = {}
        self.by_key: dict[SessionKey, int] = {}
        # S-BFD reflector discriminators: never a session's, so an initiator's
        # frame names one thing only (the XDP reflector looks them up first).
        self.reserved: frozenset[int] = frozenset()
        self._rng = rng
        self._indexes: Counter[int] = Counter()  # the index bits of every session's discriminator
        self.origins: Counter[str] = Counter()  # sessions by Entry.origin (never changed once inserted)
        self._freed: list[int] = []  # a heap of indexes below _next_index given back (some maybe taken since)
        self._next_index = 0  # every index below is in use or in _freed

    def allocate_discr(self) -> int:
        index = self._free_index()
        while True:
            d = self._rng.randrange(1, 1 << (32 - DISCR_INDEX_BITS)) << DISCR_INDEX_BITS | index
            if self.free(d):
                return d

    def _free_index(self) -> int:
        while self._freed and self._indexes[self._freed[0]]:
            heapq.heappop(self._freed)
        if self._freed:
            return self._freed[0]
        while self._next_index <= _INDEX_MASK and self._indexes[self._next_index]:
            self._next_index += 1
        if self._next_index > _INDEX_MASK:  # every index taken (bfdd's numbers can do that): any will do
            return self._rng.randrange(_INDEX_MASK + 1)
        return self._next_index

    def free(self, discr: int) -> bool:
        return discr not in self.sessions and discr not in self.reserved

    def insert(self, entry: Entry) -> None:
        d = entry.session.local_discr
        self.sessions[d] = entry
        self.by_key[entry.session.config.key()] = d
        self._indexes[d & _INDEX_MASK] += 1
        self.origins[entry.origin] += 1

    def pop(self, discr: int) -> Entry | None:
        entry = self.sessions.pop(discr, None)
        if entry is not None:
            self.by_key.pop(entry.session.config.key(), None)
            self.origins[entry.origin] -= 1
            if not self.origins[entry.origin]:
                del self.origins[entry.origin]
            index = discr & _INDEX_MASK
            self._indexes[index] -= 1
            if not self._indexes[index]:
                del self._indexes[index]
                if index < self._next_index:
                    heapq.heappush(self._freed, index)
        return entry

    def lookup(self, key: SessionKey) -> Entry | None:
        d = self.by_key.get(key)
        return self.sessions[d] if d is not None else None

    def find(self, dg: Datagram, your_discr: int) -> Entry | None:
        """The session a received packet belongs to, or None."""
        ifname = links.name_of(dg.ifindex) if not dg.multihop else None
        if your_discr:
            entry = self.sessions.get(your_discr)
            if entry is None:
                return None
            # The discriminator finds the session; the path must still be its
            # own (peer address, hop mode, interface), or anyone who learned a
            # discriminator could drive the session from elsewhere.
            c = entry.session.config
            if c.peer != dg.src or c.multihop != dg.multihop or (c.interface and c.interface != ifname):
                return None
            return entry
        for key in (
            (dg.dst, dg.src, ifname, dg.multihop),
            (None, dg.src, ifname, dg.multihop),
            (dg.dst, dg.src, None, dg.multihop),
            (None, dg.src, None, dg.multihop),
        ):
            d = self.by_key.get(key)
            if d is not None:
                return self.sessions[d]
        return None
