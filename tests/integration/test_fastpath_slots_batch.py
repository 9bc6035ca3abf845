"""Slots.batched: a takeover's configuration and index writes, held and made in one batch a map."""

from __future__ import annotations

import ipaddress

import pytest

from xdp_bfd.fastpath.kernel import FastPath

SESSIONS = 64  # the small_fastpath fixture's (conftest.py)


@pytest.fixture
def fp(small_fastpath):
    return small_fastpath


def _kcfg(discr: int) -> dict:
    return {
        "flags": 1,
        "local_discr": discr,
        "epoch": 3,
        "min_gap_ns": 7_500_000,
        "reply": bytes([discr & 0xFF]) * 24,
    }


def _discr(fp: FastPath, slot: int) -> int:
    cfg = fp.slots.cfg
    return int(cfg[cfg.Key(slot)].local_discr)


def test_the_writes_land_together_when_the_block_ends(fp):
    slots = fp.slots
    last = SESSIONS - 1
    with slots.batched():
        for slot in (0, 5, last):
            slots.write_cfg(slot, _kcfg(100 + slot))
        slots.write_cfg(5, _kcfg(206))  # written twice in the block: the last one counts
        slots.write_cfg(7, _kcfg(107))
        slots.uninstall(
            7, local=None, peer=ipaddress.ip_address("10.0.0.7"), ifindex=0, multihop=False, discr=107
        )
        # Held: the kernel still has what the slots had (the predecessor's, here nothing).
        assert [_discr(fp, s) for s in (0, 5, 7, last)] == [0, 0, 0, 0]
    assert [_discr(fp, s) for s in (0, 5, 7, last)] == [100, 206, 0, 100 + last]
    cfg = slots.cfg
    assert bytes(cfg[cfg.Key(0)].reply)[:24] == bytes([100]) * 24
    # Outside a block a write is made at once.
    slots.write_cfg(1, _kcfg(101))
    assert _discr(fp, 1) == 101


def test_the_writes_are_made_when_the_block_raises(fp):
    with pytest.raises(RuntimeError), fp.slots.batched():
        fp.slots.write_cfg(2, _kcfg(102))
        raise RuntimeError("a restore that failed half-way")
    assert _discr(fp, 2) == 102


def _index(fp: FastPath, peer: str, discr: int) -> list[int | None]:
    """The slot each of the three indexes gives for a single-hop session to ``peer`` (None: no entry)."""
    keys = fp.slots._index_keys(
        local=None, peer=ipaddress.ip_address(peer), ifindex=0, multihop=False, discr=discr
    )
    out: list[int | None] = []
    for table, key in keys:
        try:
            out.append(int(table[key].value))
        except KeyError:
            out.append(None)
    return out


def test_index_writes_are_held_too_and_an_uninstall_drops_its_own(fp):
    slots = fp.slots
    with slots.batched():
        slots.install(3, local=None, peer=ipaddress.ip_address("10.0.0.3"), ifindex=0, multihop=False,
                      discr=103)  # fmt: skip
        slots.install(4, local=None, peer=ipaddress.ip_address("10.0.0.4"), ifindex=0, multihop=False,
                      discr=104)  # fmt: skip
        slots.uninstall(4, local=None, peer=ipaddress.ip_address("10.0.0.4"), ifindex=0, multihop=False,
                        discr=104)  # fmt: skip
        assert _index(fp, "10.0.0.3", 103) == [None, None, None]  # held
    assert _index(fp, "10.0.0.3", 103) == [3, 3, 3]
    assert _index(fp, "10.0.0.4", 104) == [None, None, None]  # uninstalled in the block: not brought back
    # Outside a block an install is made at once.
    slots.install(5, local=None, peer=ipaddress.ip_address("10.0.0.5"), ifindex=0, multihop=False, discr=105)
    assert _index(fp, "10.0.0.5", 105) == [5, 5, 5]


def test_an_array_read_whole_is_what_each_element_reads(fp):
    """mapped.read_all: tick_cfg in one batch lookup (a takeover's Clock.adopting) gives element for
    element what a lookup each gives."""
    from xdp_bfd.fastpath.mapped import read_all  # noqa: PLC0415

    table = fp.tick_cfg
    for slot, period in ((0, 10_000_000), (3, 20_000_000), (SESSIONS - 1, 1_000_000_000)):
        leaf = table.Leaf()
        leaf.gen, leaf.period_ns, leaf.pkt_len = slot + 1, period, 24
        leaf.pkt[0] = slot
        table[table.Key(slot)] = leaf
    whole = read_all(table)
    assert whole is not None and len(whole) == int(table.max_entries)
    for slot in (0, 1, 3, SESSIONS - 1):
        one = table[table.Key(slot)]
        assert bytes(whole[slot]) == bytes(one), slot
    assert (whole[3].gen, whole[3].period_ns, whole[3].pkt[0]) == (4, 20_000_000, 3)
