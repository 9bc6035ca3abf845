"""--pin handover: the signals' record, the blob in the pinned map, the plan (the format: test_state.py)."""

from __future__ import annotations

import ctypes
import ipaddress
import os
import select
import socket
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.fakehost import FakeHost
from xdp_bfd.core.netio import SourcePorts, Transmitter
from xdp_bfd.fastpath import abi
from xdp_bfd.fastpath.errors import KernelError
from xdp_bfd.fastpath.pinned import Pinned
from xdp_bfd.pin import directory, fdpass, handover, packet_sockets, session_sockets, state
from xdp_bfd.session import SessionConfig

LOCAL = ipaddress.ip_address("127.0.0.1")


def test_departure_says_whether_the_old_engine_prepared():
    # The bench and operators read these: gone, own part, exit, and the warm-up (or its absence).
    prepared = str(handover.Departure(9.5, 1.5, 0, 10.8))
    assert prepared == (
        "was gone 9.5 ms after the request (own part 1.5 ms, exit 8.0 ms); it had prepared in 10.8 ms"
    )
    assert str(handover.Departure(20.0)).endswith("; it did not prepare (an older build?)")


class _Array(dict):
    """A bcc array table as Pinned uses one: Key/Leaf types, item access."""

    def __init__(self, leaf: type) -> None:
        super().__init__()
        self.Key = ctypes.c_uint32
        self.Leaf = leaf

    def __setitem__(self, key: ctypes.c_uint32, value: object) -> None:
        super().__setitem__(key.value, value)

    def __getitem__(self, key: ctypes.c_uint32) -> object:
        return super().__getitem__(key.value)


def _pinned(a: abi.Abi) -> tuple[Pinned, _Array, _Array]:
    chunk = type("Chunk", (ctypes.Structure,), {"_fields_": [("data", ctypes.c_ubyte * a.handover_chunk)]})
    owner, blob = _Array(ctypes.c_uint64), _Array(chunk)
    return Pinned({"owner": owner, "handover": blob}, a), owner, blob


def test_the_blob_goes_in_chunks_of_the_headers_size() -> None:
    a = abi.load()
    pinned, _owner, table = _pinned(a)
    blob = bytes(range(256)) * (a.handover_chunk // 256 * 2 + 1)  # two chunks and a part
    pinned.write_blob(blob)
    assert sorted(table) == [0, 1, 2]
    assert pinned.read_blob(len(blob)) == blob
    with pytest.raises(KernelError, match="does not fit"):
        pinned.write_blob(bytes(a.handover_chunk * a.handover_chunks + 1))


def test_chunks_the_map_already_holds_are_not_written_again() -> None:
    a = abi.load()
    pinned, _owner, table = _pinned(a)
    first = bytes(range(256)) * (a.handover_chunk // 256 * 3)  # three chunks
    assert pinned.write_blob(first) == 3
    leaves = {k: table[ctypes.c_uint32(k)] for k in table}
    second = bytearray(first)
    second[a.handover_chunk + 5] ^= 0xFF  # the middle chunk differs
    second += b"tail"  # and a fourth, partly filled
    assert pinned.write_blob(bytes(second), first) == 2
    assert table[ctypes.c_uint32(0)] is leaves[0] and table[ctypes.c_uint32(2)] is leaves[2]
    assert pinned.read_blob(len(second)) == bytes(second)


def test_the_owner_record_goes_in_the_headers_slots() -> None:
    a = abi.load()
    pinned, owner, _blob = _pinned(a)
    pinned.set_owner(42, a.OwnerState.HANDED_OVER, 1000, done_ns=7)
    got = {slot: owner[ctypes.c_uint32(slot)].value for slot in a.Owner}
    assert got == {
        a.Owner.PID: 42,
        a.Owner.STATE: a.OwnerState.HANDED_OVER,
        a.Owner.BLOB_LEN: 1000,
        a.Owner.DONE_NS: 7,
    }
    pinned.clear_owner()
    assert {owner[ctypes.c_uint32(slot)].value for slot in a.Owner} == {0}


@pytest.mark.parametrize(
    ("owner", "alive", "ours", "want"),
    [
        (None, False, False, directory.Plan("fresh")),
        ("RUNNING", True, True, directory.Plan("takeover", 42)),
        (
            "RUNNING",
            True,
            False,
            directory.Plan("replace", 42, "its maps were built with a different layout"),
        ),
        ("HANDED_OVER", False, True, directory.Plan("adopt", 42)),
        (
            "HANDED_OVER",
            False,
            False,
            directory.Plan("fresh", why="the state left there was built with a different map layout"),
        ),
        (
            "RUNNING",
            False,
            True,
            directory.Plan("fresh", why="no engine handed it over (it stopped or crashed)"),
        ),
    ],
)
def test_the_plan_follows_the_owner_record(tmp_path, monkeypatch, owner, alive, ours, want) -> None:  # noqa: PLR0917
    # Engine 42 left the record in state ``owner``; ``alive``: it still runs; ``ours``: our maps are there.
    a = abi.load()
    record = None if owner is None else directory.Owner(42, a.OwnerState[owner], 0, 0)
    monkeypatch.setattr(directory, "read_owner", lambda _root, _abi: record)
    monkeypatch.setattr(directory, "is_engine", lambda pid: alive and pid == 42)
    layout = "0123456789abcdef"
    if ours:
        (tmp_path / layout).mkdir()
        (tmp_path / layout / "gate").touch()
    assert directory.plan(tmp_path, layout, a) == want


def test_an_owner_record_announcing_more_than_a_state_may_have_is_refused(monkeypatch, caplog) -> None:
    a = abi.load()
    pinned, _owner, _blob = _pinned(a)
    fp = SimpleNamespace(
        pin=SimpleNamespace(root="/nowhere"), pinned=pinned, abi=a, slots=SimpleNamespace(max_sessions=8)
    )
    announced = directory.Owner(42, a.OwnerState.HANDED_OVER, a.handover_chunk * a.handover_chunks + 1, 0)
    monkeypatch.setattr(handover, "read_owner", lambda _root, _abi: announced)
    assert handover.load(fp) is None  # and nothing was read: the table is empty
    assert "the owner record says" in caplog.text and "starting fresh" in caplog.text


# --- the successor reads the state while the old engine exits --------------------------


class _Watch:
    """The owner record's state slot as the successor polls it: handed over from the ``after``-th look."""

    def __init__(self, after: int | None) -> None:
        self.after, self.looks, self.closed = after, 0, False

    def handed_over(self) -> bool:
        self.looks += 1
        return self.after is not None and self.looks >= self.after

    def close(self) -> None:
        self.closed = True


def _old_engine() -> tuple[int, int, int]:
    """A child standing in for the old engine: it exits 75 when its pipe is written. (pid, pidfd, pipe)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        os.read(r, 1)
        os._exit(75)
    os.close(r)
    return pid, os.pidfd_open(pid), w


def _poller(pidfd: int) -> select.poll:
    p = select.poll()
    p.register(pidfd, select.POLLIN)
    return p


def test_the_state_is_read_once_handed_over_while_the_old_engine_still_runs(monkeypatch) -> None:
    watch = _Watch(after=3)
    monkeypatch.setattr(handover, "_owner_watch", lambda _root, _abi: watch)
    pid, pidfd, w = _old_engine()
    alive_then = []

    def meanwhile(_look) -> None:
        alive_then.append(os.waitpid(pid, os.WNOHANG) == (0, 0))
        os.write(w, b"x")  # now it may go

    try:
        assert handover._wait_exit(_poller(pidfd), Path("/x"), abi.load(), time.monotonic_ns(), meanwhile)
    finally:
        os.close(pidfd)
        os.close(w)
    assert alive_then == [True]  # read before the exit, not after it
    assert watch.looks == 3 and watch.closed
    assert os.waitpid(pid, 0)[1] >> 8 == 75


def test_the_old_engine_is_gone_when_a_look_saw_it_not_when_the_decoding_ended(monkeypatch) -> None:
    watch = _Watch(after=1)
    monkeypatch.setattr(handover, "_owner_watch", lambda _root, _abi: watch)
    pid, pidfd, w = _old_engine()
    seen: list[int] = []

    def meanwhile(look) -> None:
        look()  # still there: notes nothing
        os.write(w, b"x")
        os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOWAIT)  # exited (not reaped): the pidfd reads
        before = time.monotonic_ns()
        look()
        seen.append(before)
        seen.append(time.monotonic_ns())
        time.sleep(0.05)  # the rest of a decoding

    try:
        t_gone = handover._wait_exit(_poller(pidfd), Path("/x"), abi.load(), time.monotonic_ns(), meanwhile)
    finally:
        os.close(pidfd)
        os.close(w)
    assert os.waitpid(pid, 0)[1] >> 8 == 75
    assert t_gone is not None and seen[0] <= t_gone <= seen[1]  # the look's time, 50 ms before the end


def test_a_prompt_exit_is_waited_for_and_the_state_read_after_it(monkeypatch) -> None:
    pid, pidfd, w = _old_engine()

    class Handed(_Watch):
        def handed_over(self) -> bool:
            os.write(w, b"x")  # it exits once the state is written, as an engine does
            return super().handed_over()

    watch = Handed(after=1)
    monkeypatch.setattr(handover, "_owner_watch", lambda _root, _abi: watch)
    monkeypatch.setattr(handover, "EXIT_WAIT_MS", 5000)  # its exit comes well within the wait
    ran: list[int] = []
    try:
        t0 = time.monotonic_ns()
        t_gone = handover._wait_exit(_poller(pidfd), Path("/x"), abi.load(), t0, lambda _look: ran.append(1))
    finally:
        os.close(pidfd)
        os.close(w)
    assert os.waitpid(pid, 0)[1] >> 8 == 75
    assert ran == [] and t_gone is not None and t_gone >= t0  # no decoding beside the exit: load() reads


def test_an_engine_that_exits_without_handing_over_is_not_read_early(monkeypatch) -> None:
    watch = _Watch(after=None)
    monkeypatch.setattr(handover, "_owner_watch", lambda _root, _abi: watch)
    pid, pidfd, w = _old_engine()
    ran = []
    os.write(w, b"x")
    try:
        assert handover._wait_exit(
            _poller(pidfd), Path("/x"), abi.load(), time.monotonic_ns(), lambda _look: ran.append(1)
        )
    finally:
        os.close(pidfd)
        os.close(w)
    os.waitpid(pid, 0)
    assert ran == [] and watch.closed


def test_an_engine_that_neither_hands_over_nor_exits_times_out(monkeypatch) -> None:
    monkeypatch.setattr(handover, "HANDOVER_TIMEOUT_S", 0.05)
    for after in (None, 1):  # never handed over; handed over but never gone
        watch = _Watch(after=after)
        monkeypatch.setattr(handover, "_owner_watch", lambda _root, _abi, watch=watch: watch)
        pid, pidfd, w = _old_engine()
        t0 = time.monotonic_ns()
        try:
            assert not handover._wait_exit(_poller(pidfd), Path("/x"), abi.load(), t0, lambda _look: None)
            assert (time.monotonic_ns() - t0) / 1e9 < 1.0
        finally:
            os.write(w, b"x")
            os.close(pidfd)
            os.close(w)
            os.waitpid(pid, 0)


def test_load_takes_the_preloaded_state_and_reads_only_without_one(monkeypatch) -> None:
    reads: list[SimpleNamespace] = []

    def read_state(_fp, _look=None, known=None, same=None):
        reads.append(SimpleNamespace(sessions=[1, 2], known=known, same=same))
        return reads[-1]

    monkeypatch.setattr(handover, "read_state", read_state)
    fp = object()
    preload = handover.Preload(fp)  # type: ignore[arg-type]
    preload.known = [("value", "record")]  # as rehearse() leaves it
    preload.warm = (b"bytes", SimpleNamespace(sessions=["record"]))  # type: ignore[assignment]
    first = handover.load(fp, preload)  # type: ignore[arg-type]
    assert first is reads[0]  # it never ran: read now
    preload()
    assert [r.known for r in reads] == [preload.known] * 2  # both readings spared what the warm-up checked
    assert [r.same for r in reads] == [preload.warm] * 2  # and its bytes, decoded once
    assert handover.load(fp, preload) is reads[1] and len(reads) == 2  # type: ignore[arg-type]
    assert handover.load(fp, preload) is reads[1] and len(reads) == 2  # type: ignore[arg-type]


# --- the warm-up: its stamp opens a turn of its own ------------------------------------


class _SteppingHost(FakeHost):
    """Runs a stats waiter a step at a time, noting after each step how many turns had ended."""

    def want_stats(self, waiter) -> None:
        self.after_step: list[int] = []
        for _ in waiter(self.stats()) or ():
            self.after_step.append(self.turns_ended)


def test_the_warm_up_stamps_in_a_turn_after_its_encoding():
    """Under a reservation the request follows the stamp at once: the stamp must not share the encoding's
    last turn (whose runtime may be spent), so a turn ends between them."""
    stamps: list[int] = []
    turns_at_stamp: list[int] = []
    host = _SteppingHost()

    written: list[bytes] = []
    lengths: list[int] = []

    def set_owner(pid: int, state: int, blob_len: int, done_ns: int) -> None:
        stamps.append(done_ns)
        lengths.append(blob_len)
        turns_at_stamp.append(host.turns_ended)

    pinned = SimpleNamespace(set_owner=set_owner, write_blob=written.append)
    fp = SimpleNamespace(pinned=pinned, abi=abi.load(), slots=SimpleNamespace(nslots=4), pin=None)
    handover.warm_up(host, SimpleNamespace(fp=fp))
    assert len(stamps) == 1
    # The step before the stamp ended the turn, and nothing after the stamp did.
    assert host.after_step and host.after_step[-1] == 1
    assert turns_at_stamp == [1]
    # The warm-up's state was written before the stamp, which gives its length.
    [blob] = written
    assert lengths == [len(blob)] and state.parse(blob).nslots == 4


def test_a_warm_up_state_that_cannot_be_written_is_stamped_without_one():
    lengths: list[int] = []

    def refuse(blob: bytes) -> None:
        raise KernelError("does not fit")

    pinned = SimpleNamespace(set_owner=lambda pid, st, n, done_ns: lengths.append(n), write_blob=refuse)
    fp = SimpleNamespace(pinned=pinned, abi=abi.load(), slots=SimpleNamespace(nslots=4), pin=None)
    handover.warm_up(FakeHost(), SimpleNamespace(fp=fp))
    assert lengths == [0]


def _with_sockets(host: FakeHost, n: int) -> list[Transmitter]:
    """``n`` sessions on ``host``, each with a real socket (a Transmitter on loopback)."""
    ports = SourcePorts()
    txs = []
    for i in range(n):
        cfg = SessionConfig(local=LOCAL, peer=ipaddress.ip_address(0x7F010001 + i), interface=None)
        entry = host.add_session(cfg, "cli")
        entry.tx = Transmitter(ports, local=LOCAL, peer=cfg.peer, interface=None, multihop=False)
        txs.append(entry.tx)
    return txs


def _offload_fp(root: Path, nslots: int) -> SimpleNamespace:
    """What warm_up reads of the fast path: the pinned map (writes dropped), the ABI, the slots, the pin."""
    pinned = SimpleNamespace(set_owner=lambda *a, **k: None, write_blob=lambda blob: None)
    return SimpleNamespace(
        pinned=pinned, abi=abi.load(), slots=SimpleNamespace(nslots=nslots), pin=SimpleNamespace(root=root)
    )


def test_the_warm_up_passes_the_sessions_sockets_and_the_request_only_the_new(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(fdpass, "_comm", lambda pid: "xdp-bfd")  # this process passes for the successor
    host = _SteppingHost()
    txs = _with_sockets(host, 300)
    fp = _offload_fp(tmp_path, 512)
    inbox = session_sockets.open_inbox(tmp_path)
    prepared = handover.Prepared()
    handover.warm_up(host, SimpleNamespace(fp=fp), prepared)
    assert prepared.sender is not None and len(prepared.sender.passed) == 300
    added = _with_sockets(host, 1)
    handover._pass_sockets(host, tmp_path, prepared)  # the request
    assert len(prepared.sender.passed) == 301
    prepared.sender.close()
    passed = session_sockets.collect(inbox, os.getpid())
    assert len(passed.fds) == 301 and passed.refused == 0
    passed.close()
    for tx in [*txs, *added]:
        tx.close()


def test_a_request_after_which_nothing_was_added_sends_no_message(tmp_path: Path, monkeypatch, caplog):
    monkeypatch.setattr(fdpass, "_comm", lambda pid: "xdp-bfd")
    host = _SteppingHost()
    txs = _with_sockets(host, 300)
    fp = _offload_fp(tmp_path, 512)
    inbox = session_sockets.open_inbox(tmp_path)
    packet_inbox = packet_sockets.open_inbox(tmp_path)
    lo = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    lo.bind(("lo", 0))
    held = [(socket.if_nametoindex("lo"), lo.fileno())]
    prepared = handover.Prepared()
    handover.warm_up(host, SimpleNamespace(fp=fp), prepared, lambda: held)
    assert prepared.sender is not None and prepared.packets is not None
    sent: list[object] = []
    monkeypatch.setattr(prepared.sender, "send", lambda sockets: sent.append(sockets) or len(sockets))
    monkeypatch.setattr(packet_sockets, "_message", lambda sock, items: sent.append(items))
    with caplog.at_level("INFO", "xdp_bfd"):
        handover._pass_sockets(host, tmp_path, prepared)  # the request
        handover._pass_packet_sockets(held, tmp_path, prepared)
    assert sent == [] and "passed 300 of 300 sessions' sockets" in caplog.text
    assert "(300 at the warm-up, 0 now)" in caplog.text
    assert "passed 1 packet sockets to engine" in caplog.text and "(1 at the warm-up, 0 now)" in caplog.text
    prepared.sender.close()
    prepared.packets.close()
    passed = session_sockets.collect(inbox, os.getpid())
    assert len(passed.fds) == 300
    passed.close()
    packets = packet_sockets.collect(packet_inbox, os.getpid())
    assert list(packets.socks) == [held[0][0]]  # the warm-up's message
    packets.close()
    lo.close()
    for tx in txs:
        tx.close()


def test_without_the_warm_ups_connection_the_request_passes_them_all(tmp_path: Path, monkeypatch, caplog):
    monkeypatch.setattr(fdpass, "_comm", lambda pid: "xdp-bfd")
    host = _SteppingHost()
    txs = _with_sockets(host, 3)
    fp = _offload_fp(tmp_path, 8)
    prepared = handover.Prepared()
    with caplog.at_level("INFO", "xdp_bfd"):
        handover.warm_up(host, SimpleNamespace(fp=fp), prepared)  # nobody listens yet
    assert prepared.sender is None and "not passed at the warm-up (no successor listening" in caplog.text
    inbox = session_sockets.open_inbox(tmp_path)
    handover._pass_sockets(host, tmp_path, prepared)
    passed = session_sockets.collect(inbox, os.getpid())
    assert len(passed.fds) == 3
    passed.close()
    for tx in txs:
        tx.close()
