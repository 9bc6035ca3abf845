"""Slots: a session lives where its discriminator's low bits point, and the range stays dense."""

from __future__ import annotations

import ctypes
import ipaddress
import random
from types import SimpleNamespace

import pytest

from xdp_bfd.core.host import Entry
from xdp_bfd.core.table import DISCR_INDEX_BITS, SessionTable
from xdp_bfd.fastpath.abi import bpf_dir
from xdp_bfd.fastpath.abi import load as load_abi
from xdp_bfd.fastpath.errors import KernelError
from xdp_bfd.fastpath.slots import Slots
from xdp_bfd.session import Session, SessionConfig


class _PathKey(ctypes.Structure):
    _fields_ = [
        ("local", ctypes.c_uint8 * 16),
        ("peer", ctypes.c_uint8 * 16),
        ("ifindex", ctypes.c_uint32),
        ("multihop", ctypes.c_uint32),
    ]


class _EchoKey(ctypes.Structure):
    _fields_ = [("peer", ctypes.c_uint8 * 16), ("ifindex", ctypes.c_uint32)]


class _Table(dict):
    """A bcc table as Slots uses it: Key and Leaf constructors, items by key value."""

    def __init__(self, key: type = ctypes.c_uint32) -> None:
        super().__init__()
        self.Key = key

    @staticmethod
    def Leaf() -> object:
        return object()

    @staticmethod
    def _k(key: object) -> bytes:
        return bytes(key) if isinstance(key, ctypes.Structure) else bytes(ctypes.c_uint32(key.value))  # type: ignore[attr-defined]

    def __setitem__(self, key: object, value: object) -> None:
        super().__setitem__(self._k(key), value)

    def __delitem__(self, key: object) -> None:
        super().__delitem__(self._k(key))


class _Gate(SimpleNamespace):
    def write(self) -> None:
        self.writes += 1


def _slots(max_sessions: int = 8) -> Slots:
    bpf = {name: _Table() for name in ("slot_cfg", "slot_state", "by_discr", "discr_slot", "down_pkt")}
    bpf["sessions"], bpf["echo_peers"] = _Table(_PathKey), _Table(_EchoKey)
    return Slots(bpf, _Gate(nslots=0, writes=0), max_sessions, 0xFFFF)  # type: ignore[arg-type]


def _path(i: int) -> dict:
    return {
        "local": ipaddress.ip_address("198.19.0.1"),
        "peer": ipaddress.ip_address(f"198.19.1.{i}"),
        "ifindex": 0,
        "multihop": False,
        "discr": 1000 + i,
    }


def _take(s: Slots, discr: int) -> int:
    slot = s.alloc(discr)
    s.install(slot, **_path(slot))
    return slot


def _named(s: Slots) -> dict[int, int]:
    """discr_slot as XDP reads it: low bits -> slot, without the empty entries."""
    table = s.discr_slot
    return {int.from_bytes(k, "little"): v.value - 1 for k, v in table.items() if v.value}


def test_the_core_numbers_discriminators_in_the_bits_the_kernel_reads() -> None:
    assert load_abi(bpf_dir() / "bfd_abi.h").discr_slot_mask == (1 << DISCR_INDEX_BITS) - 1


def test_the_preferred_slot_is_taken_when_free_and_never_past_the_end() -> None:
    s = _slots()
    assert [_take(s, i) for i in range(3)] == [0, 1, 2]
    assert s.nslots == 3
    assert _take(s, 7) == 3  # past the end: the next slot, the range stays dense
    assert _take(s, 1) == 4  # taken: the next one
    s.uninstall(1, **_path(1))
    s.uninstall(3, **_path(3))
    assert _take(s, 1) == 1  # given back: taken again although 3 was given back after it
    assert _take(s, 6) == 3
    assert s.nslots == 5


def test_a_full_table_gives_a_freed_slot_and_then_refuses() -> None:
    s = _slots(max_sessions=2)
    assert (_take(s, 0), _take(s, 1)) == (0, 1)
    s.uninstall(0, **_path(0))
    assert _take(s, 0) == 0  # inside the range although the range is full
    with pytest.raises(KernelError):
        s.alloc(2)


def test_discriminators_the_core_chooses_land_in_their_slots() -> None:
    t, s = SessionTable(random.Random(5)), _slots(max_sessions=64)
    mask = (1 << DISCR_INDEX_BITS) - 1
    landed = []
    for i in range(20):
        d = t.allocate_discr()
        config = SessionConfig(local=None, peer=ipaddress.ip_address(f"198.19.1.{i}"))
        t.insert(Entry(Session(config, d, now_us=0), None, "file"))  # type: ignore[arg-type]
        landed.append(s.alloc(d) == d & mask)
    assert all(landed) and s.nslots == 20


def test_a_number_the_engine_did_not_choose_is_led_to_its_slot_by_its_low_bits() -> None:
    s = _slots()
    bfdd = [0x5EED0001, 0x0BAD0007, 0x77770007]  # the last two share their low bits
    slots = []
    for d in bfdd:
        slot = s.alloc(d)
        s.install(slot, **{**_path(slot), "discr": d})
        slots.append(slot)
    assert slots == [0, 1, 2]  # 1 and 7 lay past the end: the range stays dense
    assert _named(s) == {1: 0, 7: 1}  # the first with low bits 7 has them; the other stays on the hash
    s.uninstall(1, **{**_path(1), "discr": bfdd[1]})
    assert _named(s) == {1: 0}
    s.uninstall(2, **{**_path(2), "discr": bfdd[2]})  # never named: nothing of another's is cleared
    assert _named(s) == {1: 0}
    # The engine's own numbers sit in their slots and need no entry.
    own = s.alloc(0x12340001 & ~0xFFFF | 1)
    assert own == 1 and _named(s) == {1: 0}


def test_index_writes_prepared_ahead_are_the_ones_an_install_makes(monkeypatch) -> None:
    """Slots.prepare (a takeover's successor, before its request): an install with that very index
    uses the writes made then and builds no key; one with another index builds its own."""
    s = _slots()
    same, other = _path(1), _path(2)
    s.prepare(1, **same)
    s.prepare(2, **other)
    built: list[int] = []
    real = Slots._index_keys

    def counted(self, **kw):
        built.append(kw["discr"])
        return real(self, **kw)

    monkeypatch.setattr(Slots, "_index_keys", counted)
    s.install(1, **same)
    moved = {**other, "peer": ipaddress.ip_address("198.19.1.99")}  # the session changed meanwhile
    s.install(2, **moved)
    assert built == [moved["discr"]]  # only the changed one's keys were built at the install
    fresh = _slots()
    fresh.install(1, **same)
    fresh.install(2, **moved)
    for name in ("sessions", "by_discr", "echo_peers"):
        got, want = ({k: v.value for k, v in t.__dict__[name].items()} for t in (s, fresh))
        assert got == want and len(got) == 2  # the same writes, key for key
    with s.batched():
        pass
    assert s._prepared == {}  # what no install took is dropped with the restore's batch
