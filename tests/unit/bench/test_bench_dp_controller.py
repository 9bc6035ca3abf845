"""bench/dp_controller.py: the bench's bfddp controller adds the sessions and stamps what comes back."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "bench"))

import dp_controller  # noqa: E402

from xdp_bfd.wire.bfddp import (  # noqa: E402
    AddSession,
    EchoReply,
    EchoRequest,
    FrameReader,
    RemoteFlags,
    StateChange,
    encode_message,
)
from xdp_bfd.wire.control import Diag, State  # noqa: E402

BOUND_S = 5.0


def _read_until(sock: socket.socket, reader: FrameReader, count: int) -> list:
    got: list = []
    deadline = time.monotonic() + BOUND_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"{len(got)} of {count} messages within {BOUND_S} s"
        got += reader.feed(sock.recv(1 << 16))
    return got


def test_it_adds_every_session_answers_echoes_and_stamps_state_changes(tmp_path: Path) -> None:
    peers = [f"198.19.{33 + i // 250}.{1 + i % 250}" for i in range(300)]
    adds = [dp_controller.add_session(i + 1, "198.19.32.1", p, "veth-d", 10) for i, p in enumerate(peers)]
    ctl = dp_controller.Controller(tmp_path / "bfddp.sock", adds)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as engine:
            engine.settimeout(BOUND_S)
            engine.connect(ctl.address().removeprefix("unix:"))
            reader = FrameReader()
            got = _read_until(engine, reader, len(adds))  # 42 kB: more than one write of the socket
            assert got == adds and all(isinstance(m, AddSession) for m in got)
            assert (got[0].min_tx, got[0].detect_mult, got[0].ifname) == (10_000, 3, "veth-d")
            before = time.time()
            down = StateChange(7, 0, RemoteFlags(0), 0, 0, 0, State.DOWN, Diag.NONE, 3)
            engine.sendall(encode_message(down) + encode_message(EchoRequest(dp_time=123)))
            (reply,) = _read_until(engine, reader, 1)
            assert isinstance(reply, EchoReply) and reply.dp_time == 123
            (change,) = ctl.recorded()
            assert (change.lid, change.state, change.diag) == (7, int(State.DOWN), 0)
            assert before <= change.at <= time.time()
            ctl.close()  # while the engine's end is still open: a clean stop, no error
            assert ctl.error is None
    finally:
        ctl.close()
    assert not (tmp_path / "bfddp.sock").exists()
