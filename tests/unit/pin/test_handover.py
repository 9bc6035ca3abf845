"""--pin handover: the signals' record, the blob in the pinned map, the plan (the format: test_state.py)."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import pytest

from xdp_bfd.fastpath import abi
from xdp_bfd.fastpath.errors import KernelError
from xdp_bfd.fastpath.pinned import Pinned
from xdp_bfd.pin import directory, handover


def test_departure_says_whether_the_old_engine_prepared():
    # The bench and operators read these: gone, own part, exit, and the warm-up (or its absence).
    prepared = str(handover.Departure(9.5, 1.5, 0, 10.8))
    assert prepared == (
        "was gone 9.5 ms after the request (own part 1.5 ms, exit 8.0 ms); it had prepared in 10.8 ms"
    )
    assert str(handover.Departure(20.0)).endswith("; it did not prepare (an older build?)")


class _Array(dict):
    """A bcc array table as Pinned uses one: Key/Leaf types, item access."""

    def __init__(self, leaf: type) -> None:
        super().__init__()
        self.Key = ctypes.c_uint32
        self.Leaf = leaf

    def __setitem__(self, key: ctypes.c_uint32, value: object) -> None:
        super().__setitem__(key.value, value)

    def __getitem__(self, key: ctypes.c_uint32) -> object:
        return super().__getitem__(key.value)


def _pinned(a: abi.Abi) -> tuple[Pinned, _Array, _Array]:
    chunk = type("Chunk", (ctypes.Structure,), {"_fields_": [("data", ctypes.c_ubyte * a.handover_chunk)]})
    owner, blob = _Array(ctypes.c_uint64), _Array(chunk)
    return Pinned({"owner": owner, "handover": blob}, a), owner, blob


def test_the_blob_goes_in_chunks_of_the_headers_size() -> None:
    a = abi.load()
    pinned, _owner, table = _pinned(a)
    blob = bytes(range(256)) * (a.handover_chunk // 256 * 2 + 1)  # two chunks and a part
    pinned.write_blob(blob)
    assert sorted(table) == [0, 1, 2]
    assert pinned.read_blob(len(blob)) == blob
    with pytest.raises(KernelError, match="does not fit"):
        pinned.write_blob(bytes(a.handover_chunk * a.handover_chunks + 1))


def test_the_owner_record_goes_in_the_headers_slots() -> None:
    a = abi.load()
    pinned, owner, _blob = _pinned(a)
    pinned.set_owner(42, a.OwnerState.HANDED_OVER, 1000, done_ns=7)
    got = {slot: owner[ctypes.c_uint32(slot)].value for slot in a.Owner}
    assert got == {
        a.Owner.PID: 42,
        a.Owner.STATE: a.OwnerState.HANDED_OVER,
        a.Owner.BLOB_LEN: 1000,
        a.Owner.DONE_NS: 7,
    }
    pinned.clear_owner()
    assert {owner[ctypes.c_uint32(slot)].value for slot in a.Owner} == {0}


@pytest.mark.parametrize(
    ("owner", "alive", "ours", "want"),
    [
        (None, False, False, directory.Plan("fresh")),
        ("RUNNING", True, True, directory.Plan("takeover", 42)),
        (
            "RUNNING",
            True,
            False,
            directory.Plan("replace", 42, "its maps were built with a different layout"),
        ),
        ("HANDED_OVER", False, True, directory.Plan("adopt", 42)),
        (
            "HANDED_OVER",
            False,
            False,
            directory.Plan("fresh", why="the state left there was built with a different map layout"),
        ),
        (
            "RUNNING",
            False,
            True,
            directory.Plan("fresh", why="no engine handed it over (it stopped or crashed)"),
        ),
    ],
)
def test_the_plan_follows_the_owner_record(tmp_path, monkeypatch, owner, alive, ours, want) -> None:  # noqa: PLR0917
    # Engine 42 left the record in state ``owner``; ``alive``: it still runs; ``ours``: our maps are there.
    a = abi.load()
    record = None if owner is None else directory.Owner(42, a.OwnerState[owner], 0, 0)
    monkeypatch.setattr(directory, "read_owner", lambda _root, _abi: record)
    monkeypatch.setattr(directory, "is_engine", lambda pid: alive and pid == 42)
    layout = "0123456789abcdef"
    if ours:
        (tmp_path / layout).mkdir()
        (tmp_path / layout / "gate").touch()
    assert directory.plan(tmp_path, layout, a) == want


def test_an_owner_record_announcing_more_than_a_state_may_have_is_refused(monkeypatch, caplog) -> None:
    a = abi.load()
    pinned, _owner, _blob = _pinned(a)
    fp = SimpleNamespace(
        pin=SimpleNamespace(root="/nowhere"), pinned=pinned, abi=a, slots=SimpleNamespace(max_sessions=8)
    )
    announced = directory.Owner(42, a.OwnerState.HANDED_OVER, a.handover_chunk * a.handover_chunks + 1, 0)
    monkeypatch.setattr(handover, "read_owner", lambda _root, _abi: announced)
    assert handover.load(fp) is None  # and nothing was read: the table is empty
    assert "the owner record says" in caplog.text and "starting fresh" in caplog.text
