"""fastpath.loop: a takeover's successor finds the running engine's loop before its request.

``find_loop`` reads the loop's ends and addresses over netlink ahead; a
ShapedLoop given what it found adopts it with one netlink request (the tick
program's filter), where it made every look itself after the request. The
netlink socket is a stand-in: the loop's real devices are the integration
tests' (tests/integration/test_engine_pin.py adopts a running loop).
"""

from __future__ import annotations

import socket

import pytest

from xdp_bfd.fastpath import loop
from xdp_bfd.fastpath.loop import LOOP_A, LOOP_B, Found, ShapedLoop, find_loop


class _Link:
    def __init__(self, mac: str) -> None:
        self.mac = mac

    def get_attr(self, name: str) -> str:
        assert name == "IFLA_ADDRESS"
        return self.mac


class _Netlink:
    """What ShapedLoop asks of pyroute2's IPRoute, each request recorded."""

    def __init__(self, links: dict[str, int]) -> None:
        self.links = links
        self.asked: list[str] = []
        self.closed = False

    def link_lookup(self, *, ifname: str) -> list[int]:
        self.asked.append(f"lookup {ifname}")
        return [self.links[ifname]] if ifname in self.links else []

    def get_links(self, index: int) -> list[_Link]:
        self.asked.append(f"link {index}")
        return [_Link(f"02:00:00:00:00:{index:02x}")]

    def tc(self, command: str, *args, **kw) -> None:
        self.asked.append(f"tc {command}")

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def netlink(monkeypatch) -> list[_Netlink]:
    made: list[_Netlink] = []

    def make() -> _Netlink:
        made.append(_Netlink({LOOP_A: 7, LOOP_B: 8}))
        return made[-1]

    monkeypatch.setattr(loop, "_netlink", make)
    return made


def test_a_loop_found_ahead_is_adopted_with_one_request(netlink: list[_Netlink]) -> None:
    found = find_loop()
    assert found == Found(netlink[0], 7, 8, bytes.fromhex("020000000007"), bytes.fromhex("020000000008"))
    ahead = len(netlink[0].asked)
    passed = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # stands for the AF_PACKET socket passed on
    shaped = ShapedLoop(3, adopt=True, take=lambda index: passed if index == 7 else None, found=found)
    assert netlink[0].asked[ahead:] == ["tc replace-filter"]  # after the request: the program only
    assert len(netlink) == 1 and shaped.ipr is netlink[0]  # the same netlink socket, kept
    assert (shaped.adopted, shaped.a, shaped.b, shaped.sock) == (True, 7, 8, passed)
    passed.close()


def test_without_a_running_loop_nothing_is_found_and_the_socket_is_closed(monkeypatch) -> None:
    half = _Netlink({LOOP_A: 7})  # one end only: a loop being made or taken away
    monkeypatch.setattr(loop, "_netlink", lambda: half)
    assert find_loop() is None
    assert half.closed and half.asked == [f"lookup {LOOP_A}", f"lookup {LOOP_B}"]
