"""The fake Host of harness/fakehost.py is the Host of core/host.py: every member, the same signatures.

The plugins' unit tests run against the fake, so a fake that drifted from the
protocol would let them pass against an interface the engine no longer has.
Each member of ``Host`` and of the protocols it is made of is compared with
the fake's (names, kinds, defaults and annotations, as written); a member
added to the protocol or a signature changed fails here until the fake
follows. The last tests show the check itself fails when it should.
"""

from __future__ import annotations

import inspect
import ipaddress
from typing import Any, Protocol

import pytest

from harness.fakehost import FakeHost
from xdp_bfd.core.host import Callback, Entry, Host
from xdp_bfd.session import SessionConfig, StateChanged
from xdp_bfd.wire.control import ControlPacket, State


def protocol_members(proto: type) -> dict[str, tuple[str, Any]]:
    """Every member ``proto`` declares, itself or through the protocols it extends: name → (kind, what)."""
    members: dict[str, tuple[str, Any]] = {}
    for cls in reversed(proto.__mro__):
        if cls is Protocol or not getattr(cls, "_is_protocol", False):
            continue
        for name, value in vars(cls).items():
            if name.startswith("_"):
                continue
            if isinstance(value, property):
                members[name] = ("property", value)
            elif inspect.isfunction(value):
                members[name] = ("method", value)
        for name, annotation in vars(cls).get("__annotations__", {}).items():
            members[name] = ("attribute", annotation)
    return members


def _signature(member: Any) -> str:
    """As written: names, kinds, defaults and the annotations' text (a property's getter for a property)."""
    fn: Any = member.fget if isinstance(member, property) else member
    return str(inspect.signature(fn))


def mismatches(proto: type, impl: type) -> list[str]:
    """How ``impl`` differs from ``proto``, one line a member (empty when it satisfies it)."""
    out = []
    for name, (kind, want) in sorted(protocol_members(proto).items()):
        got = inspect.getattr_static(impl, name, None)
        if kind == "attribute":
            have = inspect.get_annotations(impl).get(name)
            if have != want:
                out.append(f"{name}: annotated {have!r}, the protocol says {want!r}")
            elif name not in vars(impl()):
                out.append(f"{name}: annotated but not set by the constructor")
            continue
        if got is None:
            out.append(f"{name}: missing")
            continue
        if kind == "property" and not isinstance(got, property):
            out.append(f"{name}: a property in the protocol, {type(got).__name__} here")
            continue
        if kind == "method" and not inspect.isfunction(got):
            out.append(f"{name}: a method in the protocol, {type(got).__name__} here")
            continue
        have, says = _signature(got), _signature(want)
        if have != says:
            out.append(f"{name}{have}: the protocol says {name}{says}")
    return out


def test_the_fake_has_every_member_of_host_with_its_signature() -> None:
    members = protocol_members(Host)
    # The walk reaches the protocols Host is made of, and Host's own attributes.
    assert {"watch", "call_at", "sessions", "add_session", "service", "want_stats", "handoff"} <= set(members)
    assert mismatches(Host, FakeHost) == []


def test_a_static_checker_sees_the_same() -> None:
    host: Host = FakeHost()  # what mypy checks structurally; at run time, only that it builds
    assert host.sessions == {}


# --- the check fails when it should ---------------------------------------------------


class Grown(Host, Protocol):
    later: int

    def added_later(self, discr: int) -> None: ...


class Changed(Host, Protocol):
    def call_at(self, deadline_us: int, callback: Callback, *, late: bool = False) -> None: ...

    def allocate_discr(self, hint: int) -> int: ...  # type: ignore[override]  # the point


def test_a_member_added_to_the_protocol_is_missed() -> None:
    assert mismatches(Grown, FakeHost) == [
        "added_later: missing",
        "later: annotated None, the protocol says 'int'",
    ]


def test_a_changed_signature_is_named() -> None:
    assert mismatches(Changed, FakeHost) == [
        "allocate_discr(self) -> 'int': the protocol says allocate_discr(self, hint: 'int') -> 'int'",
        "call_at(self, deadline_us: 'int', callback: 'Callback') -> 'None': the protocol says "
        "call_at(self, deadline_us: 'int', callback: 'Callback', *, late: 'bool' = False) -> 'None'",
    ]


# --- the fake is a small engine, not a recording ----------------------------------------------


def _config() -> SessionConfig:
    return SessionConfig(local=ipaddress.ip_address("198.19.1.1"), peer=ipaddress.ip_address("198.19.1.2"))


def test_sessions_are_real_and_their_events_reach_the_listeners() -> None:
    host = FakeHost()
    heard: list[tuple[int, State, State]] = []

    def listener(entry: Entry, ev: StateChanged) -> None:
        heard.append((entry.session.local_discr, ev.old, ev.new))

    host.on_state_change(listener)
    entry = host.add_session(_config(), "cli")
    assert host.lookup(_config().key()) is entry and entry.tx.sent  # type: ignore[attr-defined]
    # The peer's Down packet moves a real session to Init (RFC 5880 §6.8.6).
    host.receive(entry.session.local_discr, ControlPacket(State.DOWN, my_discr=77), 1_000)
    assert heard == [(entry.session.local_discr, State.DOWN, State.INIT)]
    assert host.packet_counts(entry).rx_packets == 1 and entry.rx_bytes == 24
    host.remove_session(entry.session.local_discr)
    assert host.sessions == {} and host.removed == [(entry.session.local_discr, True)]


def test_calls_run_in_deadline_order_and_only_when_due() -> None:
    host, ran = FakeHost(), []
    host.call_at(30, lambda now: ran.append(("b", now)))

    def first(now: int) -> None:
        ran.append(("a", now))
        host.call_at(20, lambda n: ran.append(("c", n)))

    host.call_at(10, first)
    host.run_calls(25)
    assert ran == [("a", 25), ("c", 25)]
    host.run_calls(30)
    assert ran[-1] == ("b", 30) and host.calls == []


def test_a_change_is_any_state_in_one_step() -> None:
    host = FakeHost()
    entry = host.add_session(_config(), "cli")
    host.change(entry.session.local_discr, State.UP, remote_discr=5)
    host.change(entry.session.local_discr, State.INIT)
    assert (entry.session.state, entry.session.remote_discr) == (State.INIT, 5)
    with pytest.raises(AttributeError, match="not session state"):
        host.change(entry.session.local_discr, State.UP, colour="red")
