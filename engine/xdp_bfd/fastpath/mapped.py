"""Array maps reached through their memory: a session's slot without a system call.

``slots`` and ``tick_state`` are created with ``BPF_F_MMAPABLE`` (bpf/maps.h),
so the engine maps them once and copies an element out of the mapping where
bcc would make a ``BPF_MAP_LOOKUP_ELEM`` call: a stats walk reads two or three
per session (docs/benchmarks.md, session 25). A copy, never a view: what a
caller keeps must not change under it. The kernel copies an array element
without a lock either way, so a copy from the mapping is no less consistent
than one from the system call.

A slot holds two halves (bfd_abi.h, ``struct bfd_slot``): the engine's
configuration and the kernel's view. The engine writes its half through a
writable mapping, bytes of that half only: a ``BPF_MAP_UPDATE_ELEM`` writes the
whole element, and would put back whatever the kernel's half held when it was
read.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
from typing import Any

log = logging.getLogger("xdp_bfd")

# An array map's elements lie round_up(value_size, 8) apart (kernel/bpf/arraymap.c).
ELEMENT_ALIGN = 8


def _member(table: Any, member: str | None) -> tuple[Any, int]:
    """The type of ``member`` of the table's element and its offset (the whole element when None)."""
    if member is None:
        return table.Leaf, 0
    kinds = dict(table.Leaf._fields_)
    if member not in kinds:
        raise ValueError(f"the element has no member {member!r}")
    return kinds[member], getattr(table.Leaf, member).offset


class MappedArray:
    """One array map's elements (or one member of each), through a shared mapping of the map."""

    def __init__(self, table: Any, *, member: str | None = None, writable: bool = False) -> None:
        self.Leaf, self._offset = _member(table, member)
        self._size = ctypes.sizeof(self.Leaf)
        self.entries = int(table.max_entries)
        self.stride = -(-ctypes.sizeof(table.Leaf) // ELEMENT_ALIGN) * ELEMENT_ALIGN
        length = -(-self.entries * self.stride // mmap.PAGESIZE) * mmap.PAGESIZE
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        self._map = mmap.mmap(table.map_fd, length, mmap.MAP_SHARED, prot)

    def _at(self, index: int) -> int:
        if not 0 <= index < self.entries:
            raise IndexError(f"element {index} of an array of {self.entries}")
        return index * self.stride + self._offset

    def __getitem__(self, index: int) -> Any:
        return self.Leaf.from_buffer_copy(self._map, self._at(index))

    def __setitem__(self, index: int, value: Any) -> None:
        at = self._at(index)
        self._map[at : at + self._size] = bytes(value)


class LookedUpArray:
    """The same reads and writes, one system call each: for what cannot be mapped.

    A member written this way is a read of the whole element, the member
    replaced, and the whole written back: what the kernel wrote to the rest in
    between is lost (a stamp, a count). Slower and less exact, never wrong
    about the member itself.
    """

    def __init__(self, table: Any, *, member: str | None = None) -> None:
        self._table = table
        self.Leaf, self._offset = _member(table, member)
        self._whole = member is None

    def __getitem__(self, index: int) -> Any:
        element = self._table[self._table.Key(index)]
        return element if self._whole else self.Leaf.from_buffer_copy(element, self._offset)

    def __setitem__(self, index: int, value: Any) -> None:
        key = self._table.Key(index)
        if self._whole:
            self._table[key] = value
            return
        element = self._table[key]
        ctypes.memmove(ctypes.addressof(element) + self._offset, bytes(value), ctypes.sizeof(self.Leaf))
        self._table[key] = element


def element_reader(
    table: Any, name: str, *, member: str | None = None, writable: bool = False
) -> MappedArray | LookedUpArray:
    """Element ``i`` of ``table`` (or its ``member``) as ``reader[i]``, through its mapping if it maps.

    A table without a descriptor (a test's stand-in) is read by lookup. A real
    map that cannot be mapped (a build whose maps.h lost the flag, a kernel
    that refuses) is said once and reached by lookup too: slower, not wrong.
    """
    if getattr(table, "map_fd", None) is not None:
        try:
            return MappedArray(table, member=member, writable=writable)
        except (OSError, ValueError) as e:
            log.warning("fast path: cannot map %s (%s); reaching it an element at a time", name, e)
    return LookedUpArray(table, member=member)


__all__ = ["ELEMENT_ALIGN", "LookedUpArray", "MappedArray", "element_reader"]
