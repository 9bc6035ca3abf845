"""--pin state: what the old engine writes is what the successor restores, field for field."""

from __future__ import annotations

import ipaddress
import pickle
import random
import zlib
from collections import Counter
from types import SimpleNamespace

from xdp_bfd.core.handoff import Handoff
from xdp_bfd.pin import handover
from xdp_bfd.session import Session, SessionConfig
from xdp_bfd.wire.control import ControlPacket, State, encode_control


def _up_session() -> Session:
    cfg = SessionConfig(
        local=ipaddress.ip_address("198.19.0.1"), peer=ipaddress.ip_address("198.19.0.2"), interface="eth0"
    )
    s = Session(cfg, 7, now_us=1_000, rng=random.Random(1))
    for state in (State.DOWN, State.UP):
        pkt = ControlPacket(state=state, my_discr=99, your_discr=7 if state == State.UP else 0)
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


_OFFLOAD = SimpleNamespace(fp=SimpleNamespace(nslots=16))


def test_state_round_trips() -> None:
    s = _up_session()
    state = handover.decode(handover.encode(_engine(s), _OFFLOAD))
    assert state is not None
    (fields_, drops, raw, sport, config, session_vars, dp) = state["sessions"][0]
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
    assert handover.decode(blob) is None
    assert "starting fresh" in caplog.text


def test_garbage_means_a_fresh_start(caplog) -> None:
    assert handover.decode(b"not zlib") is None
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
    assert set(vars(s)) - Session._NOT_STATE == set(handover.session_fields())


def test_a_format_1_state_from_an_older_engine_is_still_adopted() -> None:
    s = _up_session()
    old = {
        "format": handover.fingerprint(1),
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
    state = handover.decode(zlib.compress(pickle.dumps(old)))
    assert state is not None
    assert state["sessions"][0][0]["slot"] == 5 and state["sessions"][0][5]["_state"] == State.UP
    assert handover.fingerprint(1) != handover.fingerprint()
