"""The echo originator's userspace half, against stand-ins for its two maps (no kernel needed).

Loss is judged from the returns ring alone (by sequence number, once per probe, after the
timeout); a socket that cannot be had is a counted send error, never an exception in the loop.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

from harness.fakehost import FakeHost
from xdp_bfd.fastpath.echo import EchoOriginator, _Echo
from xdp_bfd.wire.control import State

RING = 64


class Table(dict):
    """A bcc table's shape as the originator uses it: Key(slot), Leaf(), item get and set."""

    Key = staticmethod(lambda slot: slot)

    @staticmethod
    def Leaf() -> Any:
        ring = [SimpleNamespace(seq=0, rtt_us=0) for _ in range(RING)]
        return SimpleNamespace(
            gen=0, returned=0, rtt_sum_ns=0, rtt_min_ns=0, rtt_max_ns=0, last_ns=0, ring=ring
        )


def originator(state: Any) -> tuple[EchoOriginator, Table, FakeHost]:
    rtt = Table()
    fp = SimpleNamespace(
        program=SimpleNamespace(bpf={"echo_rtt": rtt}),
        slots=SimpleNamespace(read_state=lambda slot: state),
        abi=SimpleNamespace(echo_ring=RING),
    )
    host = FakeHost()
    return EchoOriginator(host, fp), rtt, host  # type: ignore[arg-type]


def probe_state() -> Any:
    return SimpleNamespace(
        rx_eth=bytes(range(1, 13)), rx_ifindex=7, rx_local=bytes(10) + b"\xff\xff" + bytes(4)
    )


def test_each_probe_is_judged_once_back_if_its_sequence_is_in_the_ring_else_lost() -> None:
    o, rtt, _host = originator(probe_state())
    e = _Echo(slot=3, discr=9, sport=49152, interval_us=20_000, timeout_ns=60_000_000, generation=5)
    leaf = rtt.Leaf()
    rtt[3] = leaf
    for seq in range(1, 11):
        e.pending.append((seq, seq * 20_000_000))
    for seq in (1, 2, 4, 7, 10):
        leaf.ring[seq % RING].seq = seq
    # At 150 ms: probes sent at or before 90 ms are due (1..4); 5..10 wait.
    o._judge(e, 150_000_000)
    assert (e.judged_back, e.lost, len(e.pending)) == (3, 1, 6)
    o._judge(e, 150_000_000)  # nothing judged twice
    assert (e.judged_back, e.lost, len(e.pending)) == (3, 1, 6)
    o._judge(e, 10**12)
    assert (e.judged_back, e.lost, len(e.pending)) == (5, 5, 0)
    # A ring slot that a later probe overwrote is not a return of the earlier one.
    e.pending.append((11, 0))
    leaf.ring[11 % RING].seq = 11 + RING
    o._judge(e, 10**12)
    assert e.lost == 6


def test_a_socket_that_cannot_be_had_is_a_counted_error_and_the_next_probe_is_still_scheduled(
    monkeypatch, caplog
) -> None:
    o, rtt, host = originator(probe_state())
    rtt[3] = rtt.Leaf()
    e = _Echo(slot=3, discr=9, sport=49152, interval_us=20_000, timeout_ns=60_000_000, generation=5)

    def gone(_ifindex: int) -> None:
        raise OSError(19, "No such device")

    monkeypatch.setattr(o, "_sock", gone)
    with caplog.at_level(logging.WARNING, logger="xdp_bfd"):
        o._send(e, 1_000)
        o._send(e, 21_000)
    assert (e.send_errors, e.sent, o.totals["send_errors"]) == (2, 0, 2)
    assert [c[0] for c in sorted(host.calls)] == [21_000, 41_000]
    warnings = [r.getMessage() for r in caplog.records if "cannot send our echo" in r.getMessage()]
    assert warnings == ["echo: discriminator 9: cannot send our echo: no socket on ifindex 7: No such device"]


def test_no_way_out_yet_is_skipped_not_sent() -> None:
    st = probe_state()
    st.rx_eth = bytes(12)  # XDP has not seen the peer's packet
    o, rtt, host = originator(st)
    rtt[3] = rtt.Leaf()
    e = _Echo(slot=3, discr=9, sport=49152, interval_us=20_000, timeout_ns=60_000_000, generation=5)
    o._send(e, 1_000)
    assert (e.skipped, e.sent, e.send_errors, len(host.calls)) == (1, 0, 0, 1)


def _entry(state: State, remote: State, *, multihop: bool = False) -> Any:
    cfg = SimpleNamespace(multihop=multihop, echo_tx_us=10_000)
    both_up = state == State.UP and remote == State.UP  # Session.both_up, tested with the session
    session = SimpleNamespace(config=cfg, both_up=both_up, remote_min_echo_rx_us=20_000)
    return SimpleNamespace(slot=1, offloaded=True, session=session)


def test_echo_starts_only_once_both_ends_say_up_and_never_over_multihop() -> None:
    # The slower of ours (10 ms) and the peer's Required Min Echo RX (20 ms), §6.8.9.
    assert EchoOriginator.interval_us(_entry(State.UP, State.UP)) == 20_000
    # A peer still in Init does not loop echo yet: nothing to send, nothing to count lost.
    assert EchoOriginator.interval_us(_entry(State.UP, State.INIT)) == 0
    assert EchoOriginator.interval_us(_entry(State.INIT, State.UP)) == 0
    assert EchoOriginator.interval_us(_entry(State.UP, State.UP, multihop=True)) == 0
