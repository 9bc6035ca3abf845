"""sd_notify: the datagrams systemd reads, built and sent over a real AF_UNIX socket."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from xdp_bfd.core.notify import Notifier, build_message, socket_address


def test_ready_is_one_line() -> None:
    assert build_message(READY=1) == b"READY=1\n"


def test_takeover_names_the_main_pid_before_ready() -> None:
    # systemd must learn the new main process in the same datagram that says ready.
    assert build_message(MAINPID=4242, READY=1) == b"MAINPID=4242\nREADY=1\n"


@pytest.mark.parametrize("bad", [{"ready": 1}, {"STATUS": "two\nlines"}])
def test_malformed_fields_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        build_message(**bad)


def test_addresses() -> None:
    assert socket_address("@sd/notify") == b"\0sd/notify"
    assert socket_address("/run/systemd/notify") == "/run/systemd/notify"
    assert socket_address("relative") is None


def test_unset_socket_sends_nothing() -> None:
    n = Notifier({})
    assert not n.enabled
    assert n.ready() is False


@pytest.mark.parametrize("abstract", [False, True])
def test_sends_to_a_real_socket(tmp_path: Path, abstract: bool) -> None:
    name = f"@xdp-bfd-test-{os.getpid()}" if abstract else str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as rx:
        rx.bind(socket_address(name))
        rx.settimeout(2)
        n = Notifier({"NOTIFY_SOCKET": name})
        assert n.ready() and n.stopping() and n.request_sent(42) and n.ready(takeover=True)
        got = [rx.recv(256) for _ in range(4)]
    assert got == [
        b"READY=1\n",
        b"STOPPING=1\n",
        b"STATUS=taking over from engine 42\n",
        f"MAINPID={os.getpid()}\nSTATUS=serving\nREADY=1\n".encode(),
    ]


def test_a_vanished_manager_is_not_fatal(tmp_path: Path) -> None:
    assert Notifier({"NOTIFY_SOCKET": str(tmp_path / "gone")}).ready() is False
