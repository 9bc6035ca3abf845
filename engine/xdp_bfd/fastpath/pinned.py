"""What ``--pin`` keeps in the kernel between two engines: the owner record and the handover blob.

The owner record (``ROOT/owner``, shared by every build) says which engine
owns the directory and whether it handed its state over; the blob is that
state, in chunks of the size the header defines. A successor reads the
record before it compiles anything (``pin/directory.py``, raw bpf(2)); this
is the side that writes them.
"""

from __future__ import annotations

import ctypes
from typing import Any

from .abi import Abi
from .errors import KernelError


class Pinned:
    """The ``owner`` and ``handover`` maps of one bcc module compiled with ``--pin``."""

    def __init__(self, bpf: Any, abi: Abi) -> None:
        self.owner = bpf["owner"]
        self.blob = bpf["handover"]
        self.abi = abi

    def set_owner(self, pid: int, state: int, blob_len: int, *, done_ns: int = 0) -> None:
        slot = self.abi.Owner
        # The length first: a reader that sees the new DONE_NS (a warm-up's stamp) or STATE (handed
        # over) finds the length of the blob they announce.
        for idx, value in (
            (slot.BLOB_LEN, blob_len),
            (slot.DONE_NS, done_ns),
            (slot.STATE, state),
            (slot.PID, pid),
        ):
            self.owner[self.owner.Key(idx)] = ctypes.c_uint64(value)

    def clear_owner(self) -> None:
        """Nothing left to adopt: the next start begins fresh."""
        self.set_owner(0, 0, 0)

    def write_blob(self, blob: bytes, previous: bytes = b"") -> int:
        """Write ``blob`` over the map's chunks; how many were written. ``previous``: what the map
        holds (the caller wrote it whole): a chunk with the same bytes there is left as it is."""
        table, size = self.blob, self.abi.handover_chunk
        if len(blob) > size * self.abi.handover_chunks:
            raise KernelError(f"handover state of {len(blob)} bytes does not fit the pinned map")
        written = 0
        for i in range(0, len(blob), size):
            part = blob[i : i + size]
            if previous[i : i + size] == part:
                continue
            leaf = table.Leaf()
            ctypes.memmove(leaf.data, part, len(part))
            table[table.Key(i // size)] = leaf
            written += 1
        return written

    def read_blob(self, length: int) -> bytes:
        table, size = self.blob, self.abi.handover_chunk
        out = bytearray()
        for i in range(0, length, size):
            out += bytes(table[table.Key(i // size)].data)[: min(size, length - i)]
        return bytes(out)


__all__ = ["Pinned"]
