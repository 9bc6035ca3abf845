"""--pin state: what the old engine writes is what the successor restores, field for field."""

from __future__ import annotations

import ctypes
import ipaddress
import pickle
import random
import zlib
from collections import Counter
from types import SimpleNamespace

import pytest

from xdp_bfd.core.handoff import Handoff
from xdp_bfd.fastpath import abi
from xdp_bfd.fastpath.errors import KernelError
from xdp_bfd.fastpath.pinned import Pinned
from xdp_bfd.pin import directory, handover, state
from xdp_bfd.session import Session, SessionConfig
from xdp_bfd.wire.control import ControlPacket, State, encode_control


def _up_session() -> Session:
    cfg = SessionConfig(
        local=ipaddress.ip_address("198.19.0.1"), peer=ipaddress.ip_address("198.19.0.2"), interface="eth0"
    )
    s = Session(cfg, 7, now_us=1_000, rng=random.Random(1))
    for peer_state in (State.DOWN, State.UP):
        pkt = ControlPacket(state=peer_state, my_discr=99, your_discr=7 if peer_state == State.UP else 0)
        s.receive(pkt, encode_control(pkt), 2_000, ttl=255)
    assert s.state == State.UP
    return s


def _engine(s: Session) -> SimpleNamespace:
    entry = SimpleNamespace(
        session=s, tx=SimpleNamespace(sport=65000), origin="file", user_tx_packets=3, user_tx_bytes=72,
        rx_bytes=48, slot=5, offloaded=True, epoch=4, detect_armed=True, last_detection_us=None,
        last_detection_overshoot_us=None, drops=Counter(ttl=1), last_rx_raw=b"\x20" * 24,
    )  # fmt: skip
    return SimpleNamespace(sessions={7: entry}, handoff=Handoff())


def test_state_round_trips() -> None:
    s = _up_session()
    handed = state.decode(state.encode(_engine(s), 16))
    assert handed is not None
    assert handed["nslots"] == 16
    (fields_, drops, raw, sport, config, session_vars, dp) = handed["sessions"][0]
    assert (fields_["slot"], fields_["epoch"], drops, raw, sport, dp) == (
        5,
        4,
        {"ttl": 1},
        b"\x20" * 24,
        65000,
        None,
    )
    restored = Session.restore(config, session_vars, now_us=3_000)
    for attr in ("state", "remote_discr", "tx_interval_us", "detect_time_us", "flaps", "up_since_us"):
        assert getattr(restored, attr) == getattr(s, attr), attr
    assert restored._xmit_seq == s._xmit_seq  # the authentication sequence carries over


def test_other_session_fields_mean_a_fresh_start(caplog) -> None:
    blob = zlib.compress(pickle.dumps({"format": "0" * 16, "sessions": []}))
    assert state.decode(blob) is None
    assert "starting fresh" in caplog.text


def test_garbage_means_a_fresh_start(caplog) -> None:
    assert state.decode(b"not zlib") is None
    assert "starting fresh" in caplog.text


def test_departure_says_whether_the_old_engine_prepared():
    # The bench and operators read these: gone, own part, exit, and the warm-up (or its absence).
    prepared = str(handover.Departure(9.5, 1.5, 0, 10.8))
    assert prepared == (
        "was gone 9.5 ms after the request (own part 1.5 ms, exit 8.0 ms); it had prepared in 10.8 ms"
    )
    assert str(handover.Departure(20.0)).endswith("; it did not prepare (an older build?)")


def test_format_2_lists_every_attribute_a_live_session_has() -> None:
    # Values go by position: a live session must have exactly the probe's attributes.
    s = _up_session()
    assert set(vars(s)) - Session._NOT_STATE == set(Session.STATE_FIELDS)


def test_the_format_is_the_previous_releases() -> None:
    # A successor of this build takes over from the previous release and the
    # previous release from it: both read the other's fingerprint. These are
    # what 0.1.0 wrote; a change here is a change of format (a new version).
    assert (state.fingerprint(), state.fingerprint(1)) == ("1f87432d8b09e270", "aaed1d92a8957c20")
    # Format 2 lists the values in the order that release took them: sorted names.
    assert list(Session.STATE_FIELDS) == sorted(Session.STATE_FIELDS)


def test_a_format_1_state_from_an_older_engine_is_still_adopted() -> None:
    s = _up_session()
    old = {
        "format": state.fingerprint(1),
        "pid": 1,
        "nslots": 8,
        "sessions": [
            (
                {"slot": 5, "epoch": 4},
                {"ttl": 1},
                b"\x20" * 24,
                65000,
                s.config,
                {k: v for k, v in vars(s).items() if k not in Session._NOT_STATE},
                None,
            )
        ],
    }
    handed = state.decode(zlib.compress(pickle.dumps(old)))
    assert handed is not None
    assert handed["sessions"][0][0]["slot"] == 5 and handed["sessions"][0][5]["_state"] == State.UP
    assert state.fingerprint(1) != state.fingerprint()


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
