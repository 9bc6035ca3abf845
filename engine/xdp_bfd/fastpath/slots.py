"""Session slots: the slot each session has in the maps, and the indexes that lead a packet to it.

A slot holds a session's kernel configuration (``slot_cfg``, written by the
engine) and the kernel's view of it (``slot_state``, written by the
programs); three indexes map what a packet carries (its addresses, Your
Discriminator, an echo's peer) to the slot, and a discriminator the engine
chose names its slot in its low bits besides (bfd_abi.h), when the slot
could be had. The sweep's range is the gate's.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
from collections.abc import Iterator
from typing import Any

from .errors import KernelError
from .gate import Gate
from .mapped import element_reader


def mapped16(addr: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> bytes:
    """The 16-byte form the maps use: IPv4 as ::ffff:a.b.c.d."""
    if addr is None:
        return bytes(16)
    if addr.version == 4:
        return bytes(10) + b"\xff\xff" + addr.packed
    return addr.packed


class Slots:
    """The slot allocator and the per-session maps of one bcc module."""

    def __init__(self, bpf: Any, gate: Gate, max_sessions: int, discr_mask: int) -> None:
        self.cfg = bpf["slot_cfg"]
        self.state = bpf["slot_state"]
        self.state_reader = element_reader(self.state, "slot_state")
        self.sessions = bpf["sessions"]
        self.by_discr = bpf["by_discr"]
        self.discr_slot = bpf["discr_slot"]
        self.echo_peers = bpf["echo_peers"]
        self.down_pkt = bpf["down_pkt"]
        self.gate = gate
        self.max_sessions = max_sessions
        self.discr_mask = discr_mask  # the bits of a discriminator that name a slot (bfd_abi.h)
        self._free: list[int] = []
        self._used: set[int] = set()
        self._named: dict[int, int] = {}  # low bits -> the slot discr_slot gives them to
        self._batch: dict[int, Any] | None = None  # slot -> configuration, while batched() holds them
        self._indexed: list[tuple[Any, Any, Any]] | None = None  # (table, key, value), while batched()
        # slot -> (the index, its writes), made by prepare() for install() to use.
        self._prepared: dict[int, tuple[tuple[Any, ...], list[tuple[Any, Any, Any]]]] = {}

    @property
    def nslots(self) -> int:
        """Slots ever handed out: the sweep's range, kept in the gate."""
        return self.gate.nslots

    def alloc(self, discr: int | None = None) -> int:
        """A free slot: the one ``discr``'s low bits name if free and it keeps the sweep's range dense."""
        n = self.gate.nslots
        prefer = None if discr is None else discr & self.discr_mask
        if (
            prefer is not None
            and prefer not in self._used
            and (prefer < n or prefer == n < self.max_sessions)
        ):
            # The one the discriminator names (bfd_abi.h): XDP finds it without a hash.
            if prefer == n:
                self.gate.nslots += 1
            else:
                self._free.remove(prefer)
            slot = prefer
        elif self._free:
            slot = self._free.pop()
        elif self.gate.nslots < self.max_sessions:
            slot = self.gate.nslots
            self.gate.nslots += 1
        else:
            raise KernelError(f"the fast path holds at most {self.max_sessions} sessions")
        self._used.add(slot)
        self.state[self.state.Key(slot)] = self.state.Leaf()
        self.gate.write()
        return slot

    def _index_keys(self, *, local: Any, peer: Any, ifindex: int, multihop: bool, discr: int) -> list:
        """(table, key) for each index that leads a packet to the session's slot."""
        k = self.sessions.Key()
        ctypes.memmove(k.local, mapped16(local), 16)
        ctypes.memmove(k.peer, mapped16(peer), 16)
        k.ifindex, k.multihop = ifindex, int(multihop)
        e = self.echo_peers.Key()
        ctypes.memmove(e.peer, mapped16(peer), 16)
        e.ifindex = ifindex
        return [(self.sessions, k), (self.by_discr, self.by_discr.Key(discr)), (self.echo_peers, e)]

    def _index_writes(
        self, slot: int, *, local: Any, peer: Any, ifindex: int, multihop: bool, discr: int
    ) -> list[tuple[Any, Any, Any]]:
        return [
            (table, key, ctypes.c_uint32(slot))
            for table, key in self._index_keys(
                local=local, peer=peer, ifindex=ifindex, multihop=multihop, discr=discr
            )
        ]

    def prepare(self, slot: int, *, local: Any, peer: Any, ifindex: int, multihop: bool, discr: int) -> None:
        """The index writes an :meth:`install` of ``slot`` with this very index makes, made now.

        A takeover's successor makes them for the warm-up's sessions before its
        request: the keys are ctypes structures built field by field, a fifth of
        a restore's CPU at 1024 sessions (docs/benchmarks.md). Nothing is written.
        """
        writes = self._index_writes(
            slot, local=local, peer=peer, ifindex=ifindex, multihop=multihop, discr=discr
        )
        self._prepared[slot] = ((local, peer, ifindex, multihop, discr), writes)

    def install(self, slot: int, *, local: Any, peer: Any, ifindex: int, multihop: bool, discr: int) -> None:
        ready = self._prepared.pop(slot, None) if self._prepared else None
        if (
            ready is not None
            # The addresses by identity: the same session's configuration holds the same objects.
            and ready[0][0] is local
            and ready[0][1] is peer
            and ready[0][2:] == (ifindex, multihop, discr)
        ):
            writes = ready[1]
        else:
            writes = self._index_writes(
                slot, local=local, peer=peer, ifindex=ifindex, multihop=multihop, discr=discr
            )
        low = discr & self.discr_mask
        if low != slot and self._named.get(low, slot) == slot:
            # Not its own slot (bfdd numbered it): the low bits lead there unless taken. An
            # entry an engine before us left is harmless: XDP checks the slot's discriminator.
            self._named[low] = slot
            writes.append((self.discr_slot, self.discr_slot.Key(low), ctypes.c_uint32(slot + 1)))
        if self._indexed is not None:
            self._indexed += writes
            return
        for table, key, value in writes:
            table[key] = value

    def uninstall(
        self, slot: int, *, local: Any, peer: Any, ifindex: int, multihop: bool, discr: int
    ) -> None:
        if self._batch is not None:
            self._batch.pop(slot, None)
        self.cfg[self.cfg.Key(slot)] = self.cfg.Leaf()
        keys = self._index_keys(local=local, peer=peer, ifindex=ifindex, multihop=multihop, discr=discr)
        low = discr & self.discr_mask
        if self._indexed:
            # Held writes of these keys would bring them back when the block ends.
            gone = {(id(t), bytes(k)) for t, k in [*keys, (self.discr_slot, self.discr_slot.Key(low))]}
            self._indexed = [w for w in self._indexed if (id(w[0]), bytes(w[1])) not in gone]
        if self._named.get(low) == slot:
            del self._named[low]
            self.discr_slot[self.discr_slot.Key(low)] = ctypes.c_uint32(0)
        for table, key in keys:
            with contextlib.suppress(KeyError):
                del table[key]
        self._used.discard(slot)
        self._free.append(slot)

    def write_cfg(self, slot: int, cfg: dict[str, Any]) -> None:
        leaf = self.cfg.Leaf()
        for name, value in cfg.items():
            if isinstance(value, bytes):
                ctypes.memmove(getattr(leaf, name), value, len(value))
            else:
                setattr(leaf, name, value)
        if self._batch is not None:
            self._batch[slot] = leaf
            return
        self.cfg[self.cfg.Key(slot)] = leaf

    def write_down(self, slot: int, epoch: int, pkt: bytes | None) -> None:
        """The session's Down for the watch ``epoch``, for the kernel's courier (bpf/tick.c); None: none."""
        leaf = self.down_pkt.Leaf()
        leaf.epoch = epoch
        if pkt is not None:
            n = min(len(pkt), ctypes.sizeof(leaf.pkt))
            ctypes.memmove(leaf.pkt, pkt, n)
            leaf.pkt_len = n
        self.down_pkt[self.down_pkt.Key(slot)] = leaf

    @contextlib.contextmanager
    def batched(self) -> Iterator[None]:
        """Configuration and index writes held, made in one ``BPF_MAP_UPDATE_BATCH`` a map at the end.

        A takeover's successor writes the configuration and the indexes of
        every session it adopts: a system call each, four or five a session
        (docs/benchmarks.md). Until the block ends the kernel keeps
        what the maps had (the predecessor's, the same unless something
        changed); the writes are made even if the block raises. An uninstall
        in the block is made at once, and drops what is held for its slot and
        its keys.
        """
        self._batch, self._indexed = {}, []
        try:
            yield
        finally:
            self._prepared.clear()  # made for the sessions of this batch; any left were not installed
            batch, self._batch = self._batch, None
            indexed, self._indexed = self._indexed, None
            self._write_batch(self.cfg, [(self.cfg.Key(slot), leaf) for slot, leaf in batch.items()])
            by_table: dict[int, tuple[Any, list[tuple[Any, Any]]]] = {}
            for table, key, value in indexed:
                by_table.setdefault(id(table), (table, []))[1].append((key, value))
            for table, items in by_table.values():
                self._write_batch(table, items)

    def _write_batch(self, table: Any, items: list[tuple[Any, Any]]) -> None:
        if not items:
            return
        n = len(items)
        keys = (table.Key * n)(*(k for k, _ in items))
        values = (table.Leaf * n)(*(v for _, v in items))
        try:
            table.items_update_batch(keys, values)
        except Exception:  # bcc raises a bare Exception: a kernel without batch operations
            for key, value in items:
                table[key] = value

    def read_state(self, slot: int) -> Any:
        """A copy of the slot's kernel view, read from the mapped map (fastpath/mapped.py)."""
        return self.state_reader[slot]

    def adopt(self, nslots: int, used: set[int]) -> None:
        """Take over the slot table of the engine we replace (its maps are ours now)."""
        self.gate.nslots = nslots
        self._used = set(used)
        self._free = sorted(set(range(nslots)) - self._used, reverse=True)
        self.gate.write()

    def reset(self) -> None:
        """Forget whatever sessions the pinned maps hold (state we could not adopt)."""
        self._prepared.clear()
        for table in (self.sessions, self.by_discr, self.echo_peers):
            table.clear()
        for i in range(self.max_sessions):
            self.cfg[self.cfg.Key(i)] = self.cfg.Leaf()
        self.gate.nslots = 0
        self.gate.write()


__all__ = ["Slots", "mapped16"]
