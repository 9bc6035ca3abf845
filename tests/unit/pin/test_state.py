"""--pin state, format 3: data only, bounded, total; secrets stay in the configuration.

What the old engine writes is what the successor restores, field for field;
anything else (a truncated blob, another version, a pickle that would run a
command, random bytes) is refused with a reason and a fresh start, and
nothing in it runs.
"""

from __future__ import annotations

import ast
import contextlib
import ipaddress
import json
import logging
import os
import pickle
import random
import zlib
from collections import Counter
from dataclasses import fields, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.fakehost import FakeHost
from xdp_bfd.core.handoff import DPLANE_SESSIONS, Handoff
from xdp_bfd.core.host import Entry
from xdp_bfd.pin import state
from xdp_bfd.session import AuthConfig, Session, SessionConfig
from xdp_bfd.wire.control import (
    Auth,
    AuthType,
    ControlPacket,
    State,
    decode_control,
    encode_control,
    verify_auth,
)

SECRET = b"s3cret-marker-0123456"[:20]
PASSWORD = b"pw-marker-012345"  # a simple password: 16 bytes, in clear in every packet


def _cfg(i: int, auth: AuthConfig | None = None) -> SessionConfig:
    return SessionConfig(
        local=ipaddress.ip_address(f"198.19.{i}.1"),
        peer=ipaddress.ip_address(f"198.19.{i}.2"),
        interface="eth0",
        min_tx_us=10_000,
        min_rx_us=10_000,
        auth=auth,
    )


def _peer_packets(s: Session, auth: AuthConfig | None) -> bytes:
    """Bring ``s`` Up as its peer would (Down, then Up), authenticated as ``auth`` says; the last packet."""
    raw = b""
    for n, peer_state in enumerate((State.DOWN, State.UP)):
        wire_auth = None
        if auth is not None:
            wire_auth = Auth(auth.type, auth.key_id, b"", None if auth.type == AuthType.SIMPLE else 100 + n)
        pkt = ControlPacket(
            state=peer_state,
            my_discr=99,
            your_discr=s.local_discr if peer_state == State.UP else 0,
            auth=wire_auth,
        )
        raw = encode_control(pkt, secret=auth.secret if auth else None)
        s.receive(decode_control(raw), raw, 2_000 + n, ttl=255)
    return raw


RAW: dict[int, bytes] = {}  # the last packet each test session accepted, by discriminator


def _session(i: int, auth: AuthConfig | None = None, *, poll: bool = False) -> Session:
    s = Session(_cfg(i, auth), 7 + i, now_us=1_000, rng=random.Random(i))
    RAW[s.local_discr] = _peer_packets(s, auth)
    assert s.state == State.UP
    s.datagrams_to_send(3_000)
    if poll:
        s.set_config(replace(s.config, min_tx_us=20_000), 4_000)
        s.datagrams_to_send(4_000)
        assert s.poll_active
    return s


def _entry(s: Session, slot: int) -> Entry:
    return Entry(
        session=s, tx=SimpleNamespace(sport=49152 + slot), origin="file", user_tx_packets=3,
        user_tx_bytes=72, rx_bytes=48, slot=slot, offloaded=True, epoch=4, detect_armed=True,
        last_detection_us=None, last_detection_overshoot_us=-5, drops=Counter(ttl=1),
        last_rx_raw=RAW[s.local_discr],
    )  # fmt: skip


def _host(*sessions: Session) -> SimpleNamespace:
    entries = {s.local_discr: _entry(s, i) for i, s in enumerate(sessions)}
    return SimpleNamespace(sessions=entries, handoff=Handoff())


KEYED = AuthConfig(AuthType.METICULOUS_KEYED_SHA1, 3, SECRET)
SIMPLE = AuthConfig(AuthType.SIMPLE, 4, PASSWORD)


def _three() -> tuple[list[Session], SimpleNamespace]:
    sessions = [_session(0), _session(1, poll=True), _session(2, KEYED), _session(3, SIMPLE)]
    return sessions, _host(*sessions)


def _doc(blob: bytes) -> list[Any]:
    return json.loads(blob[10:])


def _blob(doc: Any, version: int = state.FORMAT_VERSION) -> bytes:
    return _framed(json.dumps(doc).encode(), version)


def _framed(text: bytes, version: int = state.FORMAT_VERSION) -> bytes:
    return b"XBFS" + version.to_bytes(2, "big") + len(text).to_bytes(4, "big") + text


# --- the round trip -----------------------------------------------------------------


def test_round_trip_up_polling_and_authenticated_sessions() -> None:
    sessions, host = _three()
    blob = state.encode(host, 16)
    assert blob.startswith(b"XBFS\x00\x03")
    handed = state.parse(blob)
    assert handed.nslots == 16 and handed.pid == os.getpid() and len(handed.sessions) == 4
    for s, r in zip(sessions, handed.sessions, strict=True):
        e = host.sessions[s.local_discr]
        assert r.entry == {n: getattr(e, n) for n in state._ENTRY_FIELDS}
        assert (r.drops, r.sport) == ({"ttl": 1}, e.tx.sport)
        assert r.config == replace(s.config, auth=None)
        assert r.auth == (None if s.config.auth is None else (s.config.auth.type, s.config.auth.key_id))
        # Every state value, type and all (enums stay enums, tuples tuples, packets packets).
        want = dict(zip(Session.STATE_FIELDS, s.export(), strict=True))
        assert r.state == want
        assert [type(v) for v in r.state.values()] == [type(v) for v in want.values()]
        restored = Session.restore(replace(r.config, auth=s.config.auth), r.state)
        assert restored._xmit_seq == s._xmit_seq  # the authentication sequence carries over
    assert handed.sessions[1].state["_poll_active"] is True
    assert handed.sessions[0].last_rx_raw == host.sessions[7].last_rx_raw  # no auth: kept


def test_no_secret_reaches_the_state() -> None:
    _sessions, host = _three()
    simple_raw = host.sessions[10].last_rx_raw
    assert PASSWORD in simple_raw  # the peer's packet carries the password in clear...
    blob = state.encode(host, 16)
    for secret in (SECRET, PASSWORD):
        assert secret not in blob
        assert secret.hex().encode() not in blob
    assert state.parse(blob).sessions[3].last_rx_raw == b""  # ...so it is not kept


def test_encode_is_json_of_lists_behind_the_header() -> None:
    _sessions, host = _three()
    fp, pid, nslots, sessions = _doc(state.encode(host, 16))
    assert (fp, pid, nslots) == (state.fingerprint(), os.getpid(), 16)
    assert all(isinstance(x, list) for x in sessions)


# --- restoring: secrets come from the successor's configuration ------------------------


class _Offload:
    def __init__(self) -> None:
        self.slots = SimpleNamespace(adopt=self._adopt, batched=contextlib.nullcontext)
        self.adopted_slots: list[int] = []
        self.removed_slots: list[int] = []
        self.nslots: int | None = None

    def _adopt(self, nslots: int, used: set[int]) -> None:
        self.nslots, self.used = nslots, used

    def adopted(self, entry: Any) -> None:
        self.adopted_slots.append(entry.slot)

    def removed(self, entry: Any) -> None:
        self.removed_slots.append(entry.slot)


def test_restore_takes_secrets_from_the_configuration(caplog) -> None:
    sessions, old = _three()
    handed = state.parse(state.encode(old, 16))
    host, offload = FakeHost(), _Offload()
    # The successor's configuration: the keyed session's key, not the simple one's.
    configs = [s.config for s in sessions[:3]]
    with caplog.at_level(logging.INFO, "xdp_bfd"):
        out = state.restore(host, offload, handed, configs)
    assert [e.session.local_discr for e in out] == [7, 8, 9]
    assert host.sessions[9].session.config.auth == KEYED
    # Serviced on the real clock (its peer long silent: it went Down), it signs with our key.
    sent = host.sessions[9].tx.sent
    assert sent and verify_auth(sent[-1], decode_control(sent[-1]), SECRET)
    assert offload.adopted_slots == [0, 1, 2] and offload.removed_slots == [3]  # the kernel forgets it
    lines = [r.getMessage() for r in caplog.records if "not restored" in r.getMessage()]
    assert len(lines) == 1 and "198.19.3.2" in lines[0] and "SIMPLE key 4" in lines[0], lines
    assert "adopted 3 sessions" in caplog.text


def test_restore_refuses_another_key_for_the_session() -> None:
    sessions, old = _three()
    handed = state.parse(state.encode(old, 16))
    rotated = replace(sessions[2].config, auth=replace(KEYED, key_id=9))
    host, offload = FakeHost(), _Offload()
    out = state.restore(host, offload, handed, [rotated])
    assert 9 not in host.sessions and len(out) == 2  # the unauthenticated two only


def test_dplane_bookkeeping_round_trips() -> None:
    s = _session(0)
    old = _host(s)
    doc = {"min_echo_tx_us": 0, "cbit": True, "held_until_us": None, "lid": 12, "reported": True,
           "told": [1, 2, 3, 4], "state": 3}  # fmt: skip
    old.handoff.add_section(DPLANE_SESSIONS, lambda: {7: doc})
    handed = state.parse(state.encode(old, 4))
    host = FakeHost()
    state.restore(host, _Offload(), handed, [])
    assert host.handoff.take(DPLANE_SESSIONS) == {7: {**doc, "state": State.UP}}


def test_the_dplane_keys_are_what_the_dataplane_hands_over() -> None:
    # dplane/resume.py writes the doc; the format checks exactly its keys.
    src = Path(state.__file__).parent.parent / "dplane" / "resume.py"
    tree = ast.parse(src.read_text())
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "handover_doc")
    inner = next(n for n in ast.walk(fn) if isinstance(n, ast.DictComp)).value
    assert isinstance(inner, ast.Dict)
    assert {k.value for k in inner.keys if isinstance(k, ast.Constant)} == set(state._DP_KEYS)


# --- the schema follows the code ----------------------------------------------------


def test_every_attribute_of_a_live_session_is_in_the_format() -> None:
    s = _session(0)
    assert set(vars(s)) - Session._NOT_STATE == set(Session.STATE_FIELDS)
    assert set(state._STATE_CHECKS) == set(Session.STATE_FIELDS)


def test_the_config_record_follows_session_config() -> None:
    assert tuple(f.name for f in fields(SessionConfig)) == state._CONFIG_FIELDS
    assert len(state._config_record(_cfg(0))) == len(state._CONFIG_FIELDS)


def test_the_fingerprint_is_format_3s() -> None:
    # A change here is a change of format: a new version, and the successor starts fresh.
    assert state.fingerprint() == "3303fa8e1b2592f7"
    assert state.fingerprint() != state.fingerprint(2)


# --- bounds -------------------------------------------------------------------------


def test_bounds_are_stated_and_enforced() -> None:
    assert (state.MAX_BLOB, state.MAX_SESSIONS) == (4 << 20, 4096)
    s = _session(0)
    old = _host(s)
    old.sessions.update({i: old.sessions[7] for i in range(10_000, 10_000 + state.MAX_SESSIONS)})
    with pytest.raises(ValueError, match="at most 4096"):
        state.encode(old, 16)
    blob = state.encode(_host(_session(0)), 16)
    with pytest.raises(state.Refused, match="nslots"):
        state.parse(blob, max_sessions=8)
    fp, pid, _n, sessions = _doc(blob)
    with pytest.raises(state.Refused, match="at most 2"):
        state.parse(_blob([fp, pid, 1, sessions * 3]), max_sessions=2)


# --- refusals: each starts fresh, with its reason --------------------------------------

MARKER = Path("/tmp/xdp-bfd-test-pickle-ran")


class _RunsACommand:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {MARKER}",))


def _valid() -> bytes:
    _sessions, host = _three()
    return state.encode(host, 16)


def _edit(path: tuple[int, ...], value: Any) -> bytes:
    doc = _doc(_valid())
    at = doc
    for i in path[:-1]:
        at = at[i]
    at[path[-1]] = value
    return _blob(doc)


_STATE = 3, 0, 5  # session 0's state values
_F = Session.STATE_FIELDS.index


MALFORMED = {
    "empty": (lambda: b"", "no header"),
    "random bytes": (lambda: random.Random(1).randbytes(300), "no header"),
    "format 2 pickle": (
        lambda: zlib.compress(pickle.dumps({"format": "x", "sessions": []})),
        "no longer reads",
    ),
    "code-carrying pickle (format 2)": (
        lambda: zlib.compress(pickle.dumps(_RunsACommand())),
        "no longer reads",
    ),
    "code-carrying pickle, bare": (lambda: pickle.dumps(_RunsACommand()), "no header"),
    "code-carrying pickle, protocol 0": (lambda: pickle.dumps(_RunsACommand(), protocol=0), "no header"),
    "code-carrying pickle behind our header": (
        lambda: b"XBFS\x00\x03" + len(p := pickle.dumps(_RunsACommand())).to_bytes(4, "big") + p,
        "not valid JSON",
    ),
    "truncated": (lambda: _valid()[:-7], "truncated"),
    "header only": (lambda: _valid()[:8], "shorter than its header"),
    "wrong version": (lambda: b"XBFS\x00\x02" + _valid()[6:], "format 2, this build reads format 3"),
    "oversize": (lambda: b"XBFS" + bytes(state.MAX_BLOB), "more than the"),
    "wrong fingerprint": (lambda: _edit((0,), "0" * 16), "other session fields"),
    "not a list": (lambda: _blob({"format": 3}), "top level"),
    "pid a string": (lambda: _edit((1,), "1"), "pid"),
    "session not a list": (lambda: _edit((3, 0), {}), "session 0: expected a list of 7"),
    "state a bool for an int": (lambda: _edit((*_STATE, _F("_rx_packets")), True), "session 0._rx_packets"),
    "state int out of range": (lambda: _edit((*_STATE, _F("_xmit_seq")), 1 << 32), "session 0._xmit_seq"),
    "state a float": (lambda: _edit((*_STATE, _F("_adv_tx_us")), 1.5), "session 0._adv_tx_us"),
    "state NaN": (lambda: _framed(_valid()[10:].replace(b'"file",3', b'"file",NaN')), "not valid JSON"),
    "enum not a member": (lambda: _edit((*_STATE, _F("_state")), 7), "session 0._state: expected a State"),
    "zero discriminator": (lambda: _edit((*_STATE, _F("_local_discr")), 0), "session 0._local_discr"),
    "packet field": (
        lambda: _edit((*_STATE, _F("_last_content"), 0), 9),
        "session 0._last_content.state: expected a State",
    ),
    "short state": (lambda: _edit(_STATE, [1, 2]), "session 0: expected a list of 37"),
    "origin": (lambda: _edit((3, 0, 0, 0), "evil"), "session 0.origin"),
    "slot beyond nslots": (lambda: _edit((3, 0, 0, 4), 16), "not below nslots"),
    "no slot": (lambda: _edit((3, 0, 0, 4), None), "session 0.slot: expected an integer 0..4095"),
    "two sessions one slot": (lambda: _edit((3, 1, 0, 4), 0), "another session's"),
    "sport": (lambda: _edit((3, 0, 3), 0), "session 0.sport"),
    "address": (lambda: _edit((3, 0, 4, 1), "zz" * 4), "session 0.config.peer: expected an IPv4"),
    "address family mix": (lambda: _edit((3, 0, 4, 1), "00" * 16), "different families"),
    "config range (reused)": (lambda: _edit((3, 0, 4, 6), 0), "detect_mult 0 out of range"),
    "auth NONE": (lambda: _edit((3, 2, 4, 12), [0, 1]), "session 2.config.auth: AuthType.NONE"),
    "raw not hex": (lambda: _edit((3, 0, 2), "xyz"), "session 0.last_rx_raw"),
    "raw too long": (lambda: _edit((3, 0, 2), "00" * 256), "session 0.last_rx_raw"),
    "drops": (lambda: _edit((3, 0, 1), {"ttl": -1}), "session 0.drops"),
    "dplane doc": (lambda: _edit((3, 0, 6), {"cbit": True}), "session 0.dplane"),
    "deep nesting": (lambda: _framed(b"[" * 100_000 + b"]" * 100_000), "not valid JSON"),
    "huge integer": (
        lambda: _framed(_valid()[10:].replace(b'"file",3', b'"file",' + b"9" * 5000)),
        "not valid JSON",
    ),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_input_starts_fresh_with_its_reason(name: str, caplog) -> None:
    make, reason = MALFORMED[name]
    MARKER.unlink(missing_ok=True)
    blob = make()
    with pytest.raises(state.Refused, match=None) as refused:
        state.parse(blob)
    assert reason in str(refused.value)
    caplog.clear()
    assert state.decode(blob) is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and reason in lines[0] and lines[0].endswith("; starting fresh"), lines
    assert not MARKER.exists()  # nothing ran


def test_the_code_carrying_pickle_would_have_run() -> None:
    # The control: the same bytes fed to pickle do run the command.
    MARKER.unlink(missing_ok=True)
    try:
        pickle.loads(zlib.decompress(MALFORMED["code-carrying pickle (format 2)"][0]()))
        assert MARKER.exists()
    finally:
        MARKER.unlink(missing_ok=True)


def test_nothing_the_pin_package_reads_can_run_code() -> None:
    # No deserializer that builds objects from the input, no eval: data only.
    for src in sorted(Path(state.__file__).parent.glob("*.py")):
        tree = ast.parse(src.read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not imported & {"pickle", "marshal", "shelve", "dill", "yaml"}, src.name
        calls = {
            n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        }
        assert not calls & {"eval", "exec", "compile", "__import__"}, src.name


# --- totality -----------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(1 << 70), max_value=1 << 70) | st.text(max_size=40)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=8) | st.dictionaries(st.text(max_size=8), inner, max_size=8),
    max_leaves=30,
)  # fmt: skip


def _total(blob: bytes) -> None:
    try:
        handed = state.parse(blob)
    except state.Refused:
        return
    assert isinstance(handed, state.Handed)


@settings(max_examples=400, deadline=None, database=None)
@given(st.binary(max_size=2000))
def test_decode_is_total_on_bytes(blob: bytes) -> None:
    _total(blob)
    _total(b"XBFS\x00\x03" + len(blob).to_bytes(4, "big") + blob)


@settings(max_examples=300, deadline=None, database=None)
@given(json_values)
def test_decode_is_total_on_any_json(doc: Any) -> None:
    _total(_blob(doc))


VALID_DOC = _doc(_valid())


def _leaves(doc: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(doc, list):
        return [p for i, x in enumerate(doc) for p in _leaves(x, (*path, i))] or [path]
    if isinstance(doc, dict):
        return [p for k, x in doc.items() for p in _leaves(x, (*path, k))] or [path]
    return [path]


LEAVES = _leaves(VALID_DOC)


@settings(max_examples=500, deadline=None, database=None)
@given(st.lists(st.tuples(st.sampled_from(LEAVES), json_values), min_size=1, max_size=3))
def test_decode_is_total_on_a_valid_state_with_fields_replaced(edits: list[tuple[tuple, Any]]) -> None:
    doc = json.loads(json.dumps(VALID_DOC))
    for path, value in edits:
        at = doc
        try:
            for k in path[:-1]:
                at = at[k]
            at[path[-1]] = value
        except (IndexError, KeyError, TypeError):
            continue  # an earlier edit changed the shape above this leaf
    _total(_blob(doc))


def test_a_decoding_looks_now_and_then_and_reads_the_same() -> None:
    sessions = [_session(i) for i in range(state.LOOK_EVERY + 3)]
    blob = state.encode(_host(*sessions), 256)
    looks: list[int] = []
    handed = state.parse(blob, look=lambda: looks.append(1))
    # After the JSON, then after each run of LOOK_EVERY sessions and the rest.
    assert len(looks) == 3
    plain = state.parse(blob)
    assert [r.state for r in handed.sessions] == [r.state for r in plain.sessions]
    assert [r.config for r in handed.sessions] == [r.config for r in plain.sessions]


def _whole_dump(host: Any, nslots: int) -> bytes:
    """The state as one json.dumps of the whole document: what encode must produce, cached or not."""
    dp = state._bookkeeping(host)
    records = [state._record(e, dp.get(d)) for d, e in host.sessions.items()]
    return state._dump([state.fingerprint(), os.getpid(), nslots, records])


def test_an_encoding_reuses_unchanged_records_and_is_the_whole_documents_dump() -> None:
    sessions, host = _three()
    first = state.encode(host, 16)
    assert first == _whole_dump(host, 16)
    texts = {d: state._kept[d].text for d in host.sessions}
    assert state.encode(host, 16) == first
    assert all(state._kept[d].text is texts[d] for d in host.sessions)  # none encoded again
    del host.sessions[sessions[0].local_discr]
    assert state.encode(host, 16) == _whole_dump(host, 16)
    assert sessions[0].local_discr not in state._kept  # a session gone is forgotten


@pytest.mark.parametrize("n", [0, 1, 2])
def test_the_framing_around_none_one_or_two_records_is_the_whole_documents_dump(n: int) -> None:
    _sessions, host = _three()
    for discr in list(host.sessions)[n:]:
        del host.sessions[discr]
    assert state.encode(host, 16) == _whole_dump(host, 16)
    assert len(state.parse(state.encode(host, 16)).sessions) == n


def _changes(host: Any, s: Session) -> list[tuple[str, Any]]:
    entry = host.sessions[s.local_discr]

    def in_place_drop() -> None:
        entry.drops["ttl"] += 1  # the Counter itself, not a new one

    return [
        ("a drop counted in place", in_place_drop),
        ("a packet the engine sent", lambda: setattr(entry, "user_tx_packets", entry.user_tx_packets + 1)),
        ("the last packet received", lambda: setattr(entry, "last_rx_raw", entry.last_rx_raw[:-1] + b"\x01")),
        ("the machine (a Poll started)", lambda: s.set_config(replace(s.config, min_tx_us=30_000), 5_000)),
        # A transmitter keeps its port for its life (its socket is bound to it): another one.
        ("the source port", lambda: setattr(entry, "tx", SimpleNamespace(sport=entry.tx.sport + 1))),
        ("another configuration object", lambda: setattr(s, "_config", replace(s.config, detect_mult=5))),
        # Set by the caller, not counted by the generation (Session.CALLER_FIELDS).
        (
            "the kernel sends its packets",
            lambda: setattr(s, "periodic_tx_external", not s.periodic_tx_external),
        ),
        ("the kernel detects", lambda: setattr(s, "detection_external", not s.detection_external)),
        ("the demand polls", lambda: setattr(s, "demand_poll_us", s.demand_poll_us + 1_000_000)),
        ("the machine's own timer (a packet due)", lambda: s.handle_timer(s.get_timer() or 0)),
    ]


@pytest.mark.parametrize("which", range(10))
def test_every_change_to_a_session_is_encoded_again(which: int) -> None:
    sessions, host = _three()
    for _ in state.rehearse(host, 2):  # the warm-up keeps every record
        pass
    before = state.encode(host, 16)
    assert state.read() == 0  # nothing touched since the warm-up: no session read
    what, change = _changes(host, sessions[1])[which]
    change()
    after = state.encode(host, 16)
    assert after == _whole_dump(host, 16), what
    assert after != before, what
    assert state.read() == 1, what  # the one session touched, and only it


def test_a_session_made_again_under_its_discriminator_is_encoded_again() -> None:
    sessions, host = _three()
    for _ in state.rehearse(host, 2):
        pass
    entry = host.sessions[sessions[1].local_discr]
    twin = Session.restore(
        sessions[1].config, dict(zip(Session.STATE_FIELDS, sessions[1].export(), strict=True))
    )
    twin._remote_discr += 1  # another session, whose generation says nothing about the kept one's
    twin._gen = sessions[1].generation  # even when it happens to be the same number
    entry.session = twin
    assert state.encode(host, 16) == _whole_dump(host, 16)
    assert state.encoded_afresh() == 1


def test_only_sessions_whose_generation_moved_are_compared() -> None:
    sessions, host = _three()
    for _ in state.rehearse(host, 2):
        pass
    assert state.encode(host, 16) == _whole_dump(host, 16)
    assert (state.encoded_afresh(), state.compared()) == (0, 0)
    s = sessions[2]
    s.note_rx(s.last_rx_us)  # called, changed nothing: compared, found the same, kept
    assert state.encode(host, 16) == _whole_dump(host, 16)
    assert (state.encoded_afresh(), state.compared()) == (0, 1)
    assert state.encode(host, 16) == _whole_dump(host, 16)  # the kept record took the new generation
    assert (state.encoded_afresh(), state.compared()) == (0, 0)
    s.note_rx(s.last_rx_us + 1)
    assert state.encode(host, 16) == _whole_dump(host, 16)
    assert (state.encoded_afresh(), state.compared()) == (1, 1)


def _immutable(v: Any) -> bool:
    if v is None or isinstance(v, (int, float, str, bytes)):  # bool and the enums are ints
        return True
    if isinstance(v, tuple):
        return all(_immutable(x) for x in v)
    params = getattr(type(v), "__dataclass_params__", None)
    return params is not None and params.frozen and all(_immutable(getattr(v, f.name)) for f in fields(v))


def test_what_the_encoder_compares_is_immutable() -> None:
    """A kept record is used again when what it was made from compares equal: a mutable value
    (a list, a dict) kept by reference would compare equal to itself after a change."""
    sessions, host = _three()
    for s in sessions:
        values = s.export()
        bad = [n for n, v in zip(Session.STATE_FIELDS, values, strict=True) if not _immutable(v)]
        assert not bad, bad
        entry_values = state._entry_values(host.sessions[s.local_discr])
        assert all(_immutable(v) for v in entry_values)


# --- the warm-up's state, decoded before the request ------------------------------------


def _rehearsed(host: Any, nslots: int) -> bytes:
    for _ in state.rehearse(host, 2):
        pass
    return state.rehearsed(host, nslots)


def test_the_warm_ups_state_is_what_the_request_would_encode_unchanged() -> None:
    _sessions, host = _three()
    assert _rehearsed(host, 16) == _whole_dump(host, 16) == state.encode(host, 16)


@pytest.mark.parametrize("which", range(6))
def test_a_known_record_is_taken_and_a_changed_one_checked_again(which: int) -> None:
    sessions, host = _three()
    keep: list[Any] = []
    state.parse(_rehearsed(host, 16), keep=keep)
    what, change = _changes(host, sessions[1])[which]
    change()
    blob = state.encode(host, 16)
    got = state.parse(blob, known=keep)
    assert state.decoded_afresh() == 1, what
    assert got == state.parse(blob), what  # the same state as a decoding from nothing
    assert [r is k[1] for r, k in zip(got.sessions, keep, strict=True)] == [True, False, True, True]


def test_a_changed_record_is_refused_as_any_would_be() -> None:
    """Only a record equal to a known one is spared the checks: a bad value at a known position is refused."""
    _sessions, host = _three()
    keep: list[Any] = []
    state.parse(_rehearsed(host, 16), keep=keep)
    doc = _doc(state.encode(host, 16))
    doc[3][2][3] = 70_000  # the third session's source port: not a port
    with pytest.raises(state.Refused, match="session 2"):
        state.parse(_blob(doc), known=keep)


def test_the_whole_is_checked_even_when_every_record_is_known() -> None:
    _sessions, host = _three()
    keep: list[Any] = []
    blob = _rehearsed(host, 16)
    state.parse(blob, keep=keep)
    doc = _doc(blob)
    doc[2] = 1  # nslots: fewer than the slots the known sessions hold
    with pytest.raises(state.Refused):
        state.parse(_blob(doc), known=keep)
    assert state.parse(blob, known=keep).sessions == [k[1] for k in keep]
    assert state.decoded_afresh() == 0


def test_the_warm_ups_records_hold_the_configured_objects_and_the_request_restores_them() -> None:
    """state.configured_as: a record whose configuration equals one of ours holds ours (that object),
    through the request's decoding and into the restored session; the others keep their own."""
    sessions, host = _three()
    keep: list[Any] = []
    state.parse(_rehearsed(host, 16), keep=keep)
    # Ours: the first two as equal copies (other objects), the third's key, an unrelated fourth.
    ours = [replace(s.config) for s in sessions[:3]] + [_cfg(9)]
    assert all(a is not b.config for a, b in zip(ours, sessions, strict=False))
    known = state.configured_as(keep, ours)
    assert [r.config is c for (_v, r), c in zip(known, ours, strict=False)] == [True, True, False, False]
    # The authenticated records (keyed, simple) keep the decoded configuration, without the secret.
    assert [r.config.auth for _v, r in known] == [None] * 4
    assert [v for v, _r in known] == [v for v, _r in keep]  # the values the request's are matched by
    blob = state.encode(host, 16)
    handed = state.parse(blob, known=known)
    assert state.decoded_afresh() == 0
    out = state.restore(FakeHost(), _Offload(), handed, ours)
    assert [e.session.config is c for e, c in zip(out, ours, strict=False)] == [True, True, False]
    assert out[2].session.config.auth == KEYED  # the keyed one restored with our secret all the same
    # A changed configuration is not ours: the record keeps its own.
    other = [replace(ours[0], min_tx_us=20_000), ours[1]]
    assert [r.config is c for (_v, r), c in zip(state.configured_as(keep, other), other, strict=False)] == [
        False,
        True,
    ]


def test_the_warm_ups_very_bytes_are_its_decoding_and_any_other_bytes_are_decoded() -> None:
    """parse's ``same``: the request's blob byte for byte the warm-up's is that decoding (what a
    request after which nothing changed writes); one byte else and it is decoded as ever."""
    sessions, host = _three()
    keep: list[Any] = []
    warm_blob = _rehearsed(host, 16)
    warm = state.parse(warm_blob, keep=keep)
    blob = state.encode(host, 16)
    assert blob is warm_blob  # nothing touched since the warm-up: its very bytes
    copy = bytes(bytearray(blob))  # the same bytes in another object: compared, not identified
    assert state.parse(copy, known=keep, same=(warm_blob, warm)) is warm
    assert state.decoded_afresh() == 0
    sessions[1].set_config(replace(sessions[1].config, min_tx_us=30_000), 5_000)
    changed = state.encode(host, 16)
    got = state.parse(changed, known=keep, same=(warm_blob, warm))
    assert state.decoded_afresh() == 1
    assert got is not warm and got == state.parse(changed)
    # The shortcut never vouches for bytes it was not given: a refused blob is refused.
    with pytest.raises(state.Refused):
        state.parse(warm_blob[:-1], known=keep, same=(warm_blob, warm))
