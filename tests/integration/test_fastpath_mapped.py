"""The kernel's per-session view is read from the maps' memory, and it reads what the map holds."""

from __future__ import annotations

import ctypes
import random

import pytest

from xdp_bfd.fastpath.mapped import LookedUpArray, MappedArray, element_reader

SESSIONS = 64  # the small_fastpath fixture's (conftest.py)


@pytest.fixture
def fp(small_fastpath):
    return small_fastpath


def _fill(leaf: ctypes.Structure, rng: random.Random) -> None:
    raw = bytes(rng.getrandbits(8) for _ in range(ctypes.sizeof(leaf)))
    ctypes.memmove(ctypes.addressof(leaf), raw, len(raw))


# tick_state has one entry past the slots': the courier's (bfd_abi.h, BFD_COURIER_SLOT).
@pytest.mark.parametrize(("name", "entries"), [("slot_state", SESSIONS), ("tick_state", SESSIONS + 1)])
def test_a_mapped_element_is_the_element_a_lookup_returns(fp, name, entries):
    """Every element written by the bpf(2) call reads back the same, the first and last included.

    A stride other than the kernel's would shift every element after the first; a map
    created without BPF_F_MMAPABLE would refuse the mapping (MappedArray raises).
    """
    table = fp.program.bpf[name]
    mapped = MappedArray(table)
    assert mapped.entries == entries
    rng = random.Random(25)
    written = {}
    for i in (0, 1, entries // 2, entries - 1):
        leaf = table.Leaf()
        _fill(leaf, rng)
        table[table.Key(i)] = leaf
        written[i] = bytes(table[table.Key(i)])
    for i, raw in written.items():
        assert bytes(mapped[i]) == raw, i
    untouched = next(i for i in range(entries) if i not in written)
    assert bytes(mapped[untouched]) == bytes(ctypes.sizeof(table.Leaf))
    with pytest.raises(IndexError):
        mapped[entries]
    # A copy: a write after the read does not reach what the caller holds.
    before = mapped[0]
    table[table.Key(0)] = table.Leaf()
    assert bytes(before) == written[0] and not any(bytes(mapped[0]))


def test_the_engine_reads_both_through_their_mappings(fp):
    """What the stats walk uses is the mapping, not a lookup that silently took its place."""
    assert isinstance(fp.slots.state_reader, MappedArray)
    assert isinstance(element_reader(fp.tick_state, "tick_state"), MappedArray)
    # And a map created without the flag is read by lookup: slower, still right.
    plain = fp.program.bpf["slot_cfg"]
    assert isinstance(element_reader(plain, "slot_cfg"), LookedUpArray)
