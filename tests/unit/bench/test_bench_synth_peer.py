"""The synthetic peer's batched sender (bench/synth_peer.py ``Batch``): every frame of a slot
leaves in order through sendmmsg(2), and a frame the kernel refuses is counted, not lost silently."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "bench"))

import synth_peer  # noqa: E402


def _pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    b.settimeout(2)
    return a, b


def test_a_batch_sends_every_frame_in_order():
    frames = [bytes([k]) * (60 + k) for k in range(7)]
    a, b = _pair()
    with a, b:
        assert synth_peer.Batch(frames).send(a.fileno()) == (7, 0)
        assert [b.recv(256) for _ in frames] == frames


def test_a_batch_can_be_sent_again_and_an_empty_one_sends_nothing():
    a, b = _pair()
    with a, b:
        batch = synth_peer.Batch([b"x" * 64, b"y" * 64])
        assert batch.send(a.fileno()) == (2, 0)
        assert batch.send(a.fileno()) == (2, 0)
        assert [b.recv(64) for _ in range(4)] == [b"x" * 64, b"y" * 64] * 2
        assert synth_peer.Batch([]).send(a.fileno()) == (0, 0)


def test_frames_the_kernel_refuses_are_counted_as_failed():
    a, b = _pair()
    b.close()  # no reader: every send fails (ECONNREFUSED)
    with a:
        assert synth_peer.Batch([b"z" * 64] * 3).send(a.fileno()) == (0, 3)
