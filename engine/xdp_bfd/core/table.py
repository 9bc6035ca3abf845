"""The session table: sessions by discriminator and by path, and the demultiplexer (RFC 5880 §6.8.6)."""

from __future__ import annotations

import random

from ..session import SessionKey
from . import links
from .host import Entry
from .netio import Datagram


class SessionTable:
    def __init__(self, rng: random.Random) -> None:
        self.sessions: dict[int, Entry] = {}
        self.by_key: dict[SessionKey, int] = {}
        # S-BFD reflector discriminators: never a session's, so an initiator's
        # frame names one thing only (the XDP reflector looks them up first).
        self.reserved: frozenset[int] = frozenset()
        self._next_discr = rng.randrange(1, 1 << 31)

    def allocate_discr(self) -> int:
        while True:
            d = self._next_discr
            self._next_discr = self._next_discr % 0xFFFFFFFF + 1
            if self.free(d):
                return d

    def free(self, discr: int) -> bool:
        return discr not in self.sessions and discr not in self.reserved

    def insert(self, entry: Entry) -> None:
        d = entry.session.local_discr
        self.sessions[d] = entry
        self.by_key[entry.session.config.key()] = d

    def pop(self, discr: int) -> Entry | None:
        entry = self.sessions.pop(discr, None)
        if entry is not None:
            self.by_key.pop(entry.session.config.key(), None)
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
