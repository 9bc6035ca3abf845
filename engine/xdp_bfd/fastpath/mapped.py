"""Array maps read through their memory: the kernel's per-session view without a system call a slot.

``slot_state`` and ``tick_state`` are created with ``BPF_F_MMAPABLE``
(bpf/maps.h), so the engine maps them read-only once and copies an element
out of the mapping where bcc would make a ``BPF_MAP_LOOKUP_ELEM`` call: a
stats walk reads two or three per session (docs/benchmarks.md, session 25).
A copy, never a view: what a caller keeps must not change under it. The
kernel copies an array element without a lock either way, so a copy from
the mapping is no less consistent than one from the system call.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
from typing import Any

log = logging.getLogger("xdp_bfd")

# An array map's elements lie round_up(value_size, 8) apart (kernel/bpf/arraymap.c).
ELEMENT_ALIGN = 8


class MappedArray:
    """One array map's elements, read from a shared read-only mapping of the map."""

    def __init__(self, table: Any) -> None:
        self.Leaf = table.Leaf
        self.entries = int(table.max_entries)
        size = ctypes.sizeof(self.Leaf)
        self.stride = -(-size // ELEMENT_ALIGN) * ELEMENT_ALIGN
        length = -(-self.entries * self.stride // mmap.PAGESIZE) * mmap.PAGESIZE
        self._map = mmap.mmap(table.map_fd, length, mmap.MAP_SHARED, mmap.PROT_READ)

    def __getitem__(self, index: int) -> Any:
        if not 0 <= index < self.entries:
            raise IndexError(f"element {index} of an array of {self.entries}")
        return self.Leaf.from_buffer_copy(self._map, index * self.stride)


class LookedUpArray:
    """The same reads, one ``BPF_MAP_LOOKUP_ELEM`` each: for what cannot be mapped."""

    def __init__(self, table: Any) -> None:
        self._table = table

    def __getitem__(self, index: int) -> Any:
        return self._table[self._table.Key(index)]


def element_reader(table: Any, name: str) -> MappedArray | LookedUpArray:
    """Element ``i`` of ``table`` as ``reader[i]``: from its mapping where it can be mapped, else by lookup.

    A table without a descriptor (a test's stand-in) is read by lookup. A real
    map that cannot be mapped (a build whose maps.h lost the flag, a kernel
    that refuses) is said once and read by lookup too: slower, not wrong.
    """
    if getattr(table, "map_fd", None) is not None:
        try:
            return MappedArray(table)
        except (OSError, ValueError) as e:
            log.warning("fast path: cannot map %s (%s); reading it an element at a time", name, e)
    return LookedUpArray(table)


def read_all(table: Any) -> Any | None:
    """Every element of an array map in one ``BPF_MAP_LOOKUP_BATCH``: a ctypes array of its Leaf,
    element ``i`` at ``[i]``; None when it cannot be read so (no descriptor, a kernel or bcc
    without batch lookups, a short read): the caller then reads element by element.

    For a map that cannot be mapped (``tick_cfg``, which XDP and the sweep read
    under no lock) and is read whole at once: a takeover's restore reads a
    thousand elements, a system call each, on its request -> serving path
    (docs/benchmarks.md).
    """
    fd = getattr(table, "map_fd", None)
    if fd is None:
        return None
    try:
        from bcc.libbcc import lib  # noqa: PLC0415  (bcc only with --kernel-tx)
    except ImportError:
        return None
    n = int(table.max_entries)
    keys, values = (table.Key * n)(), (table.Leaf * n)()
    count, out = ctypes.c_uint32(n), ctypes.c_uint32(0)
    try:
        lib.bpf_lookup_batch(
            fd, None, ctypes.byref(out), ctypes.byref(keys), ctypes.byref(values), ctypes.byref(count)
        )
    except AttributeError:  # a libbcc without it
        return None
    # An array's keys are its indexes, all of them, in order: anything else is not a whole read.
    if count.value != n or any(int(keys[i]) != i for i in (0, n - 1)):
        return None
    return values


__all__ = ["ELEMENT_ALIGN", "LookedUpArray", "MappedArray", "element_reader", "read_all"]
