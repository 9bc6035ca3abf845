"""Session.generation: what lets a --pin handover skip the sessions that did not change."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

import xdp_bfd
from harness.generation import GenerationStood, checked, public_methods
from harness.sessions import bring_up, make
from xdp_bfd.session import AuthConfig, Session
from xdp_bfd.wire import AuthType


def test_the_check_covers_every_method_that_can_change_the_state() -> None:
    # A new public method is checked by every session test from the day it is written.
    mutators = {"receive", "handle_timer", "datagrams_to_send", "set_config", "admin_down",
                "detection_expired", "note_rx", "start_poll", "resume_sequence"}  # fmt: skip
    assert mutators <= set(public_methods())
    assert all(getattr(getattr(Session, n), "__wrapped__", None) is not None for n in public_methods())


def test_the_check_fails_a_method_that_changes_the_state_unseen() -> None:
    s = make()

    def sneaky(self: Session) -> None:
        self._rcv_seq += 1  # what a method written without the generation would do

    with pytest.raises(GenerationStood, match=r"sneaky changed \['_rcv_seq'\]"):
        checked("sneaky", sneaky)(s)


def test_every_method_once_on_a_live_keyed_session() -> None:
    # The other tests drive the machine through the RFC's cases; this one reaches the methods
    # only a host calls (the fast path's, a takeover's), each under the check (conftest.py).
    s = make()
    now = bring_up(s, 0)
    s.set_config(replace(s.config, auth=AuthConfig(AuthType.METICULOUS_KEYED_SHA1, 3, b"shared")), now)
    calls = {
        "note_rx": lambda: s.note_rx(now + 1),
        "series": lambda: s.series(s.xmit_seq, 3),
        "series_content": s.series_content,
        "renumbered": lambda: s.renumbered(s.template(poll=False), s.xmit_seq + 5),
        "template": lambda: s.template(poll=False),
        "resume_sequence": lambda: s.resume_sequence(s.xmit_seq + 3),
        "expiry_datagram": s.expiry_datagram,
        "resume_reading": lambda: s.resume_reading(now + 2),
        "start_poll": lambda: s.start_poll(now + 3),
        "set_config": lambda: s.set_config(replace(s.config, min_tx_us=s.config.min_tx_us * 2), now + 4),
        "detection_expired": lambda: s.detection_expired(now + 5),
        "admin_down": lambda: s.admin_down(now + 6),
        "datagrams_to_send": lambda: s.datagrams_to_send(now + 7),
    }
    changed = set()
    for name, call in calls.items():
        before = s.export()
        call()
        if s.export() != before:
            changed.add(name)
    # The witness that the calls reached the state: these must have changed it.
    moved = {"note_rx", "resume_sequence", "renumbered", "set_config", "detection_expired", "admin_down"}
    assert moved <= changed
    assert not {"series", "series_content", "template", "expiry_datagram", "resume_reading"} & changed


def test_a_call_that_changes_nothing_may_still_move_it_and_reads_do_not() -> None:
    s = make()
    now = bring_up(s, 0)
    gen = s.generation
    s.get_timer(), s.current_packet(), s.export(), s.tx_packets
    assert s.generation == gen
    s.handle_timer(now)  # servicing may change the transmit state: counted whether or not it did
    assert s.generation > gen


def test_a_restored_session_starts_its_own_count() -> None:
    s = make()
    bring_up(s, 0)
    restored = Session.restore(s.config, dict(zip(Session.STATE_FIELDS, s.export(), strict=True)))
    assert s.generation > 0 and restored.generation == 0
    assert restored.export() == s.export()


def test_the_caller_fields_are_state_fields() -> None:
    assert set(Session.CALLER_FIELDS) <= set(Session.STATE_FIELDS)


def _assigned_state_fields(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, field) of every ``x.field = …`` / ``x.field += …`` whose field is a session's state
    field, where ``x`` is not ``self``."""
    fields = set(Session.STATE_FIELDS)
    out = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for t in targets:
            for sub in ast.walk(t):
                if (
                    isinstance(sub, ast.Attribute)
                    and isinstance(sub.ctx, ast.Store)
                    and sub.attr in fields
                    and not (isinstance(sub.value, ast.Name) and sub.value.id == "self")
                ):
                    out.append((sub.lineno, sub.attr))
    return out


def test_outside_the_machine_only_the_caller_fields_are_set_directly() -> None:
    # What the generation does not count must be what the encoder compares: a state field set from
    # outside the session's methods would otherwise reach a successor stale.
    root = Path(xdp_bfd.__file__).parent
    found = {}
    for path in sorted(root.rglob("*.py")):
        if path.parent.name == "session":
            continue
        for line, name in _assigned_state_fields(ast.parse(path.read_text())):
            found[f"{path.relative_to(root)}:{line}"] = name
    assert found, "the scan must see the caller fields the engine does set"
    assert {name for name in found.values()} <= set(Session.CALLER_FIELDS), found


def test_the_scan_sees_a_state_field_set_from_outside() -> None:
    assert _assigned_state_fields(ast.parse("entry.session._xmit_seq = 5\nself._state = 1\n")) == [
        (1, "_xmit_seq")
    ]
