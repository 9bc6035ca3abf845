"""The synthetic peer's batched sender (bench/synth_peer.py ``Batch``): every frame of a slot
leaves in order through sendmmsg(2), and a frame the kernel refuses is counted, not lost silently."""

from __future__ import annotations

import itertools
import socket
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "bench"))

import synth_peer  # noqa: E402

from xdp_bfd.wire.control import ControlPacket, State, encode_control  # noqa: E402


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


# The silence ledger: 3x10 ms, a Down may arrive up to one detection time after our silence ended.
DETECT, LAG = 0.030, 0.030


def _ledger(sends: list[float], slots: int = 2) -> synth_peer.Silences:
    led = synth_peer.Silences(slots, DETECT, LAG)
    for t in sends:
        led.sent(0, t)
    return led


def test_gaps_are_measured_per_slot_and_only_silences_are_kept():
    led = _ledger([1.000, 1.010, 1.045])
    assert led.sent(1, 1.050) == 0.0  # a slot's first send has no gap
    assert led.gaps[0] == [(1.010, 1.045)] and led.gaps[1] == []
    assert round(led.sent(0, 1.055), 3) == 0.010


def test_a_down_after_our_silence_is_explained_and_one_without_is_the_duts():
    led = _ledger([1.000, 1.010, 1.045, 1.055, 1.065])
    assert led.explains(0, 1.041)  # the DUT expired at 1.040, its Down came 1 ms later
    assert led.explains(0, 1.074)  # still within the lag after the silence ended at 1.045
    assert not led.explains(0, 1.0395)  # before a detection time of silence had passed
    assert not led.explains(0, 1.076)  # too long after it: the DUT's
    assert not led.explains(1, 1.041)  # another slot was never silent
    clean = _ledger([1.000, 1.010, 1.020, 1.030])
    assert not clean.explains(0, 1.035)


def test_a_silence_still_open_explains_a_down_and_only_the_last_few_are_kept():
    led = _ledger([1.000, 1.010])
    assert led.explains(0, 1.041) and not led.explains(0, 1.039)
    sends = [2.0 + 0.05 * k for k in range(8)]  # every gap a silence
    led = _ledger(sends)
    assert len(led.gaps[0]) == synth_peer.Silences.KEEP
    assert led.gaps[0][-1] == (sends[-2], sends[-1])


def _peer_up(n: int = 2) -> synth_peer.Peer:
    """A peer with n sessions Up and no sockets: the input path only (no frame leaves on a Down)."""
    peer = object.__new__(synth_peer.Peer)
    peer.n, peer.interval_us, peer.mult = n, 10_000, 3
    peer.engine = bytes([198, 19, 32, 1])
    peer.addrs = [bytes([198, 19, 33, 1 + i]) for i in range(n)]
    peer.index = {a: i for i, a in enumerate(peer.addrs)}
    peer.state, peer.remote, peer.polling = [synth_peer.UP] * n, [0x100 + i for i in range(n)], [False] * n
    peer.periodic, peer.init_set, peer.up, peer.polls_open = [None] * n, set(), n, 0
    peer.members = [[i] for i in range(n)]
    peer.batches = [None] * n
    peer.counts = {"flaps": 0, "recv": 0, "bad": 0, "flaps_after_silence": 0}
    peer.silences = synth_peer.Silences(n, DETECT, LAG)
    return peer


def _down_from_engine(peer: synth_peer.Peer, i: int, diag: int, t_rx: float) -> None:
    pkt = bytearray(synth_peer.bfd_packet(
        state=synth_peer.DOWN, flags=0, mult=3, my_discr=0x100 + i, your_discr=synth_peer.DISCR_BASE + i,
        tx_us=1_000_000, rx_us=10_000,
    ))  # fmt: skip
    pkt[0] |= diag
    peer.on_packet(bytes(pkt), peer.addrs[i], peer.engine, t_rx)


def test_the_peer_credits_an_expiry_to_its_own_silence_only_when_it_was_silent():
    peer = _peer_up()
    for t in (1.000, 1.010, 1.045):  # slot 0 silent for 35 ms
        peer.silences.sent(0, t)
    for t in (1.000, 1.010, 1.020, 1.030, 1.040):  # slot 1 punctual
        peer.silences.sent(1, t)
    _down_from_engine(peer, 0, 1, 1.046)
    _down_from_engine(peer, 1, 1, 1.046)
    assert (peer.counts["flaps"], peer.counts["flaps_after_silence"]) == (2, 1)
    assert peer.state == [synth_peer.DOWN, synth_peer.DOWN]


def test_a_down_that_is_not_an_expiry_or_has_no_stamp_is_never_the_peers():
    peer = _peer_up()
    peer.silences.sent(0, 1.000)
    _down_from_engine(peer, 0, 3, 1.100)  # diag 3: neighbor signaled down, not a detection
    _down_from_engine(peer, 1, 1, 0.0)  # no receive stamp: cannot be judged, so not excused
    assert (peer.counts["flaps"], peer.counts["flaps_after_silence"]) == (2, 0)


def test_the_steady_filter_drops_only_fast_plain_ups_in_the_kernel():
    """The socket filter on a real UDP socket (loopback): a plain Up at the fast rate dies, and the
    DUT's slow Up before we are Up, a Poll, a Final and every other state reach the reader."""

    def pkt(state: State, tx_us: int, **flags: bool) -> bytes:
        return encode_control(
            ControlPacket(state=state, my_discr=7, your_discr=9, desired_min_tx_us=tx_us, **flags)
        )

    fast = 20_000
    dropped = [pkt(State.UP, fast), pkt(State.UP, synth_peer.SLOW_TX_US - 1)]
    kept = [
        pkt(State.UP, synth_peer.SLOW_TX_US),
        pkt(State.UP, 2 * synth_peer.SLOW_TX_US),
        pkt(State.UP, fast, poll=True),
        pkt(State.UP, fast, final=True),
        pkt(State.INIT, fast),
        pkt(State.DOWN, fast),
        pkt(State.ADMIN_DOWN, fast),
    ]
    flt = synth_peer.Filter()
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with rx, tx:
        rx.bind(("127.0.0.1", 0))
        rx.setsockopt(socket.SOL_SOCKET, synth_peer.SO_ATTACH_FILTER, flt.fprog)
        rx.settimeout(2)
        # Interleaved, and a last marker: everything before it has been filtered or queued.
        for k, d in itertools.zip_longest(kept, dropped):
            for data in (d, k):
                if data is not None:
                    tx.sendto(data, rx.getsockname())
        marker = pkt(State.DOWN, 4242)
        tx.sendto(marker, rx.getsockname())
        got = []
        while (data := rx.recv(256)) != marker:
            got.append(data)
    assert got == kept
