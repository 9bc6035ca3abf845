"""--pin: the packet sockets pass to the successor (pin/packet_sockets.py).

Real AF_PACKET sockets bound to loopback (nothing is sent), passed over the
real rendezvous: what arrives is the very socket, for the interface it was
named for, and every descriptor that is not a raw packet socket bound to
that interface is closed at once.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from xdp_bfd.pin import fdpass, packet_sockets

LO = socket.if_nametoindex("lo")


@pytest.fixture
def as_engine(monkeypatch):
    """This test process passes for the successor engine the old one checks for."""
    monkeypatch.setattr(fdpass, "_comm", lambda pid: "xdp-bfd")


def _packet(ifname: str | None = "lo") -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    if ifname is not None:
        s.bind((ifname, 0))
    return s


def _open_fds() -> set[int]:
    out = set()
    for n in os.listdir("/proc/self/fd"):
        try:
            os.fstat(int(n))
        except OSError:
            continue
        out.add(int(n))
    return out


def test_a_packet_socket_arrives_for_its_interface_and_nothing_else_kept(tmp_path: Path, as_engine) -> None:
    good, unbound, other = _packet(), _packet(None), _packet()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    before = _open_fds()
    inbox = packet_sockets.open_inbox(tmp_path)
    assert inbox is not None
    items = [(LO, good.fileno()), (LO, unbound.fileno()), (LO + 1000, other.fileno()), (LO + 1, udp.fileno())]
    assert packet_sockets.send(tmp_path, items) == os.getpid()
    passed = packet_sockets.collect(inbox, os.getpid())
    # The first is kept; the second names lo again, the others are not what they are named for.
    assert list(passed.socks) == [LO] and passed.refused == 3
    got = passed.take(LO)
    assert got is not None and got.fileno() != good.fileno()
    assert os.fstat(got.fileno()).st_ino == os.fstat(good.fileno()).st_ino  # the same socket
    assert passed.take(LO) is None
    got.close()
    passed.close()
    assert _open_fds() == before  # every refused descriptor closed, the inbox too
    for s in (good, unbound, other, udp):
        s.close()


def test_a_header_that_does_not_add_up_refuses_every_descriptor(tmp_path: Path, as_engine) -> None:
    good = _packet()
    inbox = packet_sockets.open_inbox(tmp_path)
    assert inbox is not None
    s, _pid = fdpass.connect(tmp_path, packet_sockets.CHANNEL)
    with s:
        header = {"pid": os.getpid(), "fds": [LO, LO + 1]}  # two names, one descriptor
        socket.send_fds(s, [fdpass.pack(header, b"", b"")], [good.fileno()])
    passed = packet_sockets.collect(inbox, os.getpid())
    assert passed.socks == {} and passed.refused == 1
    good.close()


def test_nobody_listening_is_one_error(tmp_path: Path, as_engine) -> None:
    with _packet() as s, pytest.raises(fdpass.PassError, match="no successor listening"):
        packet_sockets.send(tmp_path, [(LO, s.fileno())])


def test_the_echo_sends_on_a_passed_socket(tmp_path: Path, as_engine) -> None:
    """The echo takes the predecessor's socket for an interface before it makes one."""
    from xdp_bfd.fastpath.echo import EchoOriginator  # noqa: PLC0415  (bcc's module, imported late)

    good = _packet()
    inbox = packet_sockets.open_inbox(tmp_path)
    assert inbox is not None
    packet_sockets.send(tmp_path, [(LO, good.fileno())])
    passed = packet_sockets.collect(inbox, os.getpid())
    echo = EchoOriginator.__new__(EchoOriginator)  # its sockets only: no fast path behind it
    echo.socks, echo.take = {}, passed.take
    sock = echo._sock(LO)
    assert sock is not None and os.fstat(sock.fileno()).st_ino == os.fstat(good.fileno()).st_ino
    assert not sock.getblocking()
    assert echo.packet_sockets() == [(LO, sock.fileno())]
    echo.close()
    good.close()


def _ino(s: socket.socket) -> int:
    return os.fstat(s.fileno()).st_ino


def test_the_warm_ups_connection_carries_them_and_the_request_sends_only_what_is_new(
    tmp_path: Path, as_engine
) -> None:
    first, later = _packet(), _packet()
    before = _open_fds()
    inbox = packet_sockets.open_inbox(tmp_path)
    sender = packet_sockets.Sender(tmp_path)
    assert sender.pass_new([(LO, first.fileno())]) == (1, 1)  # the warm-up
    assert sender.pass_new([(LO, first.fileno())]) == (0, 0)  # a request after which nothing changed
    # The socket of lo made again (another socket, maybe under the same number): passed at the request.
    assert sender.pass_new([(LO, later.fileno())]) == (1, 1)
    sender.close()
    passed = packet_sockets.collect(inbox, os.getpid())
    got = passed.take(LO)
    assert got is not None and _ino(got) == _ino(later)  # the later message's replaces the earlier's
    assert passed.refused == 0
    got.close()
    passed.close()
    assert _open_fds() == before  # the earlier one's copy closed, the connection and inbox too
    first.close()
    later.close()


def test_a_connection_that_failed_passes_nothing_more(tmp_path: Path, as_engine) -> None:
    s = _packet()
    inbox = packet_sockets.open_inbox(tmp_path)
    sender = packet_sockets.Sender(tmp_path)
    assert inbox is not None
    inbox.close()  # the successor went away before reading it
    assert sender.pass_new([(LO, s.fileno())]) == (0, 1) and sender.broken
    assert sender.pass_new([(LO, s.fileno())]) == (0, 1)  # and stays so
    sender.close()
    s.close()
