"""``--pin``: a hitless handover from a running engine to its successor.

The successor (started with the same arguments while the old engine runs)
compiles and verifies its programs against the pinned maps, names itself the
service's main process, and sends the old engine SIGUSR2. The old engine
writes its userspace state (per session: configuration, state machine,
discriminators, timers, authentication sequence numbers, fast-path slot and
source port) into the pinned ``handover`` map, marks the owner record handed
over and exits 75 at once, leaving its XDP program attached and answering
peers. The successor then swaps its own program in over the same maps (one
atomic replace), restores the sessions and serves. Nothing is written outside
the bpffs directory, so SIGUSR2 alone leaves the state for a later successor.

Two things keep builds apart: the maps live under a directory named by the
layout id (bfd_abi.h, maps.h and the compile flags hashed), and the state
carries a fingerprint of the session fields (:mod:`.state`). Either differing
means the successor discards the pinned state and starts fresh, and says so.

This module is the signals between the two engines; :mod:`.directory` the
pinned directory, :mod:`.state` the format.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import operator
import os
import select
import signal
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..core import departure, sched
from ..core.host import Host
from ..fastpath.abi import Abi
from ..fastpath.clock import Clock
from ..fastpath.errors import KernelError
from ..fastpath.kernel import FastPath
from ..fastpath.observer import Offload
from ..session import SessionConfig
from . import bpfsys, fdpass, packet_sockets, session_sockets, state
from .directory import read_owner
from .errors import HandoverError
from .fdpass import PassError

log = logging.getLogger("xdp_bfd")

HANDOVER_TIMEOUT_S = 5.0
# How often the successor looks at the owner record while the old engine writes its state.
HANDED_POLL_MS = 1
# Once the state is written, the successor waits this long for the exit before it decodes meanwhile.
EXIT_WAIT_MS = 10
# Before SIGUSR2 the successor sends this and waits (at most PREPARE_WAIT_S)
# until the running engine says it has encoded its state once for nothing:
# an engine idle behind its fast path has every cache cold, and its first
# encoding runs several times slower than the next. The default action of
# SIGWINCH is to ignore it, so an engine of an older build is not harmed by
# it; the successor then asks after the wait, as before.
PREPARE_SIGNAL = signal.SIGWINCH
PREPARE_WAIT_S = 2.0  # room for the paced warm-up of a large table under a reservation
# The warm-up encodes this many sessions per step of the loop's background work.
WARM_UP_SLICE_SESSIONS = 64


@dataclass(frozen=True)
class Departure:
    """How long the old engine took to leave: all of it, and its own part when it recorded one."""

    gone_ms: float
    own_ms: float | None = None  # request -> state written (the old engine's work)
    request_ns: int = 0  # CLOCK_MONOTONIC of the request, to time the rest of the takeover
    prepared_ms: float | None = None  # before the request: the old engine's warm-up, serving meanwhile

    def __str__(self) -> str:
        text = f"was gone {self.gone_ms:.1f} ms after the request"
        if self.own_ms is not None:
            text += f" (own part {self.own_ms:.1f} ms, exit {self.gone_ms - self.own_ms:.1f} ms)"
        if self.prepared_ms is not None:
            text += f"; it had prepared in {self.prepared_ms:.1f} ms"
        else:
            text += "; it did not prepare (an older build?)"
        return text


# --- the successor ----------------------------------------------------------------------


def _owner_done_ns(root: Path, abi: Abi) -> int:
    with contextlib.suppress(OSError):
        owner = read_owner(root, abi)
        return owner.done_ns if owner else 0
    return 0


def _prepare(pid: int, root: Path, abi: Abi) -> float | None:
    """PREPARE_SIGNAL, then wait for the owner record's mark; ms taken, None if it never came."""
    before = _owner_done_ns(root, abi)
    t0 = time.monotonic_ns()
    os.kill(pid, PREPARE_SIGNAL)
    deadline = t0 + int(PREPARE_WAIT_S * 1e9)
    while time.monotonic_ns() < deadline:
        if _owner_done_ns(root, abi) != before:
            return (time.monotonic_ns() - t0) / 1e6
        time.sleep(0.0005)
    return None


def request(
    pid: int,
    root: Path,
    abi: Abi,
    *,
    meanwhile: Callable[[Callable[[], None]], None] | None = None,
    on_request: Callable[[], object] | None = None,
    prepared: Callable[[], object] | None = None,
) -> Departure:
    """SIGUSR2 to the running engine; returns when it was gone (raises HandoverError).

    ``meanwhile`` runs once the old engine has marked its state written (the
    owner record says handed over) while it exits: the successor decodes the
    state then, instead of after the exit (docs/operations.md). Nothing in it
    may touch what the old engine still holds until it is gone: its sweep runs
    and its sockets are open until the kernel closes them. It is given a
    function to call now and then, which notes when the old engine is gone:
    the departure's time is that note, not the end of the decoding.
    ``on_request`` runs just before SIGUSR2 (after the warm-up), ``prepared``
    before it once the old engine said it had prepared (the successor decodes
    the warm-up's state there: :meth:`Preload.rehearse`).
    """
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return Departure(0.0, request_ns=time.monotonic_ns())
    try:
        prepared_ms = _prepare(pid, root, abi)
        if prepared_ms is not None and prepared is not None:
            prepared()
        if on_request is not None:
            on_request()
        t0 = time.monotonic_ns()
        os.kill(pid, signal.SIGUSR2)
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        t1 = _wait_exit(poller, root, abi, t0, meanwhile)
        if t1 is None:
            raise HandoverError(f"pin: engine {pid} did not hand over within {HANDOVER_TIMEOUT_S:.0f} s")
    finally:
        os.close(pidfd)
    done = _owner_done_ns(root, abi)
    return Departure((t1 - t0) / 1e6, (done - t0) / 1e6 if t0 <= done <= t1 else None, t0, prepared_ms)


def _wait_exit(
    poller: select.poll, root: Path, abi: Abi, t0: int, meanwhile: Callable[[Callable[[], None]], None] | None
) -> int | None:
    """When the old engine was gone (CLOCK_MONOTONIC ns), or None at the timeout; ``meanwhile`` once it has
    handed over."""
    deadline = t0 + int(HANDOVER_TIMEOUT_S * 1e9)
    gone: list[int] = []

    def look() -> None:
        if not gone and poller.poll(0):
            gone.append(time.monotonic_ns())

    watch = _owner_watch(root, abi) if meanwhile is not None else None
    try:
        while watch is not None:
            if poller.poll(HANDED_POLL_MS):
                return time.monotonic_ns()
            if watch.handed_over():
                # With its sockets passed on, its exit is a few milliseconds: waited for
                # first, the time it was gone is exact, and the decoding follows the exit
                # instead of sharing a CPU with it. Only a longer exit is overlapped.
                if poller.poll(EXIT_WAIT_MS):
                    return time.monotonic_ns()
                assert meanwhile is not None
                meanwhile(look)
                look()
                break
            if time.monotonic_ns() >= deadline:
                return None
        if gone:
            return gone[0]
        left_ms = max(0, (deadline - time.monotonic_ns()) // 1_000_000)
        return time.monotonic_ns() if poller.poll(left_ms) else None
    finally:
        if watch is not None:
            watch.close()


class _OwnerWatch:
    """The owner record's state slot, read through one descriptor while the old engine writes its state."""

    def __init__(self, fd: int, slot: int, handed: int) -> None:
        self.fd, self.slot, self.handed = fd, slot, handed

    def handed_over(self) -> bool:
        try:
            return bpfsys.lookup_u64(self.fd, self.slot) == self.handed
        except OSError:
            return False

    def close(self) -> None:
        os.close(self.fd)


def _owner_watch(root: Path, abi: Abi) -> _OwnerWatch | None:
    try:
        fd = bpfsys.open_pinned(root / "owner")
    except OSError:
        return None
    return _OwnerWatch(fd, abi.Owner.STATE, abi.OwnerState.HANDED_OVER)


def read_state(
    fp: FastPath,
    look: Callable[[], None] | None = None,
    known: state.Known | None = None,
    same: tuple[bytes, state.Handed] | None = None,
) -> state.Handed | None:
    """The state the owner record says was handed over, or None (and why, logged).

    Read as soon as the old engine marked it written (:func:`request`'s
    ``meanwhile``) or after it is gone: the old engine writes the blob, then
    the length, then the state slot (``Pinned.set_owner``), so a record read
    after the state slot said handed over names the whole blob.
    """
    assert fp.pin is not None and fp.pinned is not None
    owner = read_owner(fp.pin.root, fp.abi)
    if not owner or owner.state != fp.abi.OwnerState.HANDED_OVER or not owner.blob_len:
        log.warning("pin: the engine left without handing over its state; starting fresh")
        return None
    limit = _blob_limit(fp)
    if owner.blob_len > limit:
        log.warning(
            "pin: the handed-over state is refused: the owner record says %d bytes, more than the %d "
            "a state may have; starting fresh",
            owner.blob_len,
            limit,
        )
        return None
    return state.decode(
        fp.pinned.read_blob(owner.blob_len),
        max_sessions=fp.slots.max_sessions,
        look=look,
        known=known,
        same=same,
    )


def _blob_limit(fp: FastPath) -> int:
    return min(state.MAX_BLOB, fp.abi.handover_chunk * fp.abi.handover_chunks)


def read_rehearsal(fp: FastPath) -> tuple[bytes, state.Handed, list[tuple[Any, state.Record]]] | None:
    """The state a running engine wrote at its warm-up: its bytes, its decoding and the records as
    state.parse's ``keep`` gives them (None: none, or not usable).

    Decoded and checked in full, as any state, while the old engine still
    serves; the request's state is then checked only where it differs
    (state.parse's ``known``), and not decoded again when it is the same bytes.
    """
    assert fp.pin is not None and fp.pinned is not None
    owner = read_owner(fp.pin.root, fp.abi)
    if not owner or owner.state != fp.abi.OwnerState.RUNNING or not 0 < owner.blob_len <= _blob_limit(fp):
        return None
    keep: list[tuple[Any, state.Record]] = []
    blob = fp.pinned.read_blob(owner.blob_len)
    try:
        handed = state.parse(blob, max_sessions=fp.slots.max_sessions, keep=keep)
    except state.Refused as e:
        log.info("pin: the warm-up's state is not used (%s); the request's is checked in full", e)
        return None
    return blob, handed, keep


class Preload:
    """The state decoded while the old engine exits, for :func:`load` to take once it is gone; and
    the warm-up's state, decoded before the request, that spares checking what did not change."""

    def __init__(
        self,
        fp: FastPath,
        configs: Sequence[SessionConfig] = (),
        sockets: fdpass.Inbox | None = None,
        sender: int = 0,
        host: Host | None = None,
    ) -> None:
        self.fp, self.host = fp, host
        self.configs = configs  # this engine's own: what the arguments say
        self.sockets, self.sender = sockets, sender  # the sessions' sockets' inbox, and from whom
        self.done = False
        self.handed: state.Handed | None = None
        self.known: list[tuple[Any, state.Record]] | None = None
        self.warm: tuple[bytes, state.Handed] | None = None  # the warm-up's bytes and their decoding
        self.early: session_sockets.Passed | None = None  # the sockets the warm-up passed
        self.ahead: state.Ahead | None = None  # the warm-up's sessions made for the restore to join

    def rehearse(self) -> None:
        """Before the request: decode the state the old engine wrote at its warm-up, check the
        sockets it passed then against it, and make its sessions for the restore to join."""
        t0 = time.monotonic_ns()
        got = read_rehearsal(self.fp)
        if got is None:
            return
        blob, handed, known = got
        self.known = state.configured_as(known, self.configs)
        self.warm = blob, replace(handed, sessions=[r for _v, r in self.known])
        t1 = time.monotonic_ns()
        sockets = ""
        if self.sockets is not None:
            self.early = session_sockets.receive_early(self.sockets, self.sender)
            good = state.check_early(self.early, self.known)
            took = (time.monotonic_ns() - t1) / 1e6
            sockets = f"; checked {good} of its sessions' sockets in {took:.1f} ms"
            if self.host is not None:
                t2 = time.monotonic_ns()
                self.ahead = state.build_ahead(self.host, self.known, self.configs, self.early, self.fp.slots)
                took = (time.monotonic_ns() - t2) / 1e6
                sockets += f", made {len(self.ahead)} of its sessions in {took:.1f} ms"
        log.info(
            "pin: read the warm-up's state of %d sessions in %.1f ms before the request%s",
            len(self.known),
            (t1 - t0) / 1e6,
            sockets,
        )

    def __call__(self, look: Callable[[], None] | None = None) -> None:
        self.read(look, " while the old engine exits")

    def read(self, look: Callable[[], None] | None = None, when: str = "") -> None:
        """The handed-over state, checked where it differs from the warm-up's; timed in the log."""
        t0 = time.monotonic_ns()
        self.handed, self.done = read_state(self.fp, look, self.known, self.warm), True
        if self.handed is not None:
            again = ""
            if self.warm is not None and self.handed is self.warm[1]:
                again = " (0 checked again since the warm-up's: its very bytes, not decoded again)"
            elif self.known is not None:
                again = f" ({state.decoded_afresh()} checked again since the warm-up's)"
            log.info(
                "pin: read the state of %d sessions in %.1f ms%s%s",
                len(self.handed.sessions),
                (time.monotonic_ns() - t0) / 1e6,
                when,
                again,
            )


def load(fp: FastPath, preload: Preload | None = None) -> state.Handed | None:
    """Once the old engine is gone: the state it handed over, or None (and why, logged)."""
    if preload is None:
        return read_state(fp)
    if not preload.done:
        preload.read()
    return preload.handed


# --- the running engine -----------------------------------------------------------------


@dataclass
class Prepared:
    """What the warm-up did ahead of the request, for the request to do only the rest."""

    blob: bytes = b""  # the state the warm-up wrote to the pinned map (whole), else b""
    sender: session_sockets.Sender | None = None  # the connection the sessions' sockets went over
    packets: packet_sockets.Sender | None = None  # ... and the packet sockets


def warm_up(
    host: Host,
    offload: Offload,
    prepared: Prepared | None = None,
    packet_sockets: Callable[[], list[tuple[int, int]]] = list,
) -> None:
    """PREPARE_SIGNAL: encode the state once for nothing (warm caches), then say so in the owner record.

    The engine still serves meanwhile, so this goes in paced steps like a stats
    dump (a stats document, then the sessions encoded a slice at a time): in
    one piece, with cold caches, it would hold the loop far longer than a step
    of a dump may, and many times longer under a reservation. The sessions'
    sockets go to the successor here too, a message a step (``prepared``
    remembers them and the state written, for :func:`hand_over`).
    """
    fp = offload.fp
    assert fp.pinned is not None
    pinned, running = fp.pinned, fp.abi.OwnerState.RUNNING
    prepared = prepared if prepared is not None else Prepared()

    def encode_slices(_doc: dict[str, Any]) -> Generator[None, None, None]:
        yield from state.rehearse(host, WARM_UP_SLICE_SESSIONS)
        # What was just encoded goes to the pinned map too: the successor decodes it before its
        # request and, after it, checks only the sessions whose record changed.
        try:
            blob = state.rehearsed(host, fp.slots.nslots)
        except ValueError:
            blob = b""
        yield
        prepared.blob = b""
        written = _write_rehearsal(pinned, blob)
        if written:
            prepared.blob = blob
        if fp.pin is not None:
            yield from _pass_sockets_early(host, fp.pin.root, prepared)
            _pass_packet_sockets_early(packet_sockets(), fp.pin.root, prepared)
        # The stamp opens a turn of its own. The request follows it soon after, and under a
        # reservation the encoding's last turn can have used the period's runtime: the handover
        # would then wait, throttled, for the next period (docs/benchmarks.md, session 31).
        host.end_turn()
        yield
        pinned.set_owner(os.getpid(), running, written, done_ns=time.monotonic_ns())

    host.want_stats(encode_slices)


def _write_rehearsal(pinned: Any, blob: bytes) -> int:
    """The warm-up's state into the pinned map: its length, or 0 when it cannot be written."""
    if not blob:
        return 0
    try:
        pinned.write_blob(blob)
    except (KernelError, OSError) as e:
        log.info("pin: the warm-up's state was not written (%s); a successor checks the request's in full", e)
        return 0
    return len(blob)


def hand_over(
    host: Host,
    offload: Offload,
    packet_sockets: Callable[[], list[tuple[int, int]]] = list,
    clock: Clock | None = None,
    prepared: Prepared | None = None,
) -> None:
    """SIGUSR2: write the state for a successor and exit 75 without a word to the peers.

    ``packet_sockets``: the (interface index, descriptor) of each AF_PACKET
    socket the engine holds, passed on so that the exit waits for no grace
    period (packet_sockets.py). ``clock``: the kernel transmit clock, which
    sends the meticulous keys' packets signed ahead until the successor does.
    ``prepared``: what the warm-up did (the state it wrote, the sockets it
    passed): only what differs is written and passed again.
    """
    fp = offload.fp
    assert fp.pin is not None and fp.pinned is not None
    prepared = prepared if prepared is not None else Prepared()
    t0 = time.monotonic_ns()
    # First: the series topped up (a meticulous key's packets), before the encoding delays it.
    prepaid = _prepay(clock)
    # From here the engine serves nothing (the kernel does): its reservation would only stretch the
    # encoding and the exit, 1 ms of CPU in 10, to several times their length (docs/benchmarks.md).
    left = sched.leave_deadline()
    # No collection while the state is encoded: thousands of fresh containers
    # would trigger several, and this process either exits in a moment or
    # goes back to serving (then the collector comes back).
    gc.disable()
    # The CPU beside the wall clock: on a busy machine an engine left without its reservation
    # waits for a CPU, and the two tell that from work of its own.
    t_signed, cpu_signed = time.monotonic_ns(), time.thread_time_ns()
    try:
        blob = state.encode(host, fp.slots.nslots)
        t_encoded, cpu_encoded = time.monotonic_ns(), time.thread_time_ns()
        # The chunks the warm-up wrote with the same bytes are left as they are.
        previous, prepared.blob = prepared.blob, b""
        rewritten = fp.pinned.write_blob(blob, previous)
    except Exception as e:
        gc.enable()
        log.error(
            "pin: cannot hand over: %s; still serving%s",
            e,
            " without its SCHED_DEADLINE reservation (a restart takes it again)" if left else "",
        )
        return
    t_written = time.monotonic_ns()
    _pass_sockets(host, fp.pin.root, prepared)
    t_sessions = time.monotonic_ns()
    _pass_packet_sockets(packet_sockets(), fp.pin.root, prepared)
    t_packet = time.monotonic_ns()
    host.handoff.depart(fp.pin.root)  # the bfddp sockets go to the successor (fdpass.py)
    t_departed = time.monotonic_ns()
    fp.pinned.set_owner(os.getpid(), fp.abi.OwnerState.HANDED_OVER, len(blob), done_ns=time.monotonic_ns())
    chunks = -(-len(blob) // fp.abi.handover_chunk)
    log.info(
        "pin: handed over %d sessions (%d bytes of state) in %.1f ms (encoding %.1f, %.1f of CPU, "
        "%d sessions encoded again since the warm-up, %d compared, %d read; writing %.1f, %d of %d chunks; "
        "sockets %.1f (the sessions' %.1f, packet %.1f, bfddp %.1f)%s%s); exiting 75",
        len(host.sessions),
        len(blob),
        (time.monotonic_ns() - t0) / 1e6,
        (t_encoded - t_signed) / 1e6,
        (cpu_encoded - cpu_signed) / 1e6,
        state.encoded_afresh(),
        state.compared(),
        state.read(),
        (t_written - t_encoded) / 1e6,
        rewritten,
        chunks,
        (time.monotonic_ns() - t_written) / 1e6,
        (t_sessions - t_written) / 1e6,
        (t_packet - t_sessions) / 1e6,
        (t_departed - t_packet) / 1e6,
        f", {prepaid} series topped up in {(t_signed - t0) / 1e6:.1f} ms" if prepaid else "",
        f", out of the {left[0]}/{left[1]}us reservation" if left else "",
    )
    for h in logging.getLogger().handlers:
        h.flush()
    # No shutdown: the XDP program stays attached and answering, the maps stay
    # pinned, and no AdminDown goes out. Every descriptor is closed on the way
    # out; the address space is freed by a child after the successor has it all.
    departure.exit_now(75)


def _prepay(clock: Clock | None) -> int:
    """The meticulous keys' series topped up (fastpath.clock); a failure leaves them as they are
    (a second or more of packets ahead of the clock)."""
    if clock is None or not clock.signing:
        return 0
    try:
        return clock.prepay()
    except Exception as e:  # the handover goes on without them
        log.warning("pin: the meticulous sessions' series were not topped up (%s)", e)
        return 0


def _pass_sockets_early(host: Host, root: Path, prepared: Prepared) -> Generator[None, None, None]:
    """The warm-up: the sessions' sockets to the successor listening, a message a step.

    Over a new connection each time: the one a successor asks from (an earlier
    warm-up's was to a successor that went away, or to this one, which then
    reads the first and finds the same sockets there).
    """
    if prepared.sender is not None:
        prepared.sender.close()
        prepared.sender = None
    try:
        sender = session_sockets.Sender(root)
    except PassError as e:
        log.info("pin: the sessions' sockets were not passed at the warm-up (%s)", e)
        return
    prepared.sender = sender
    items = [(discr, e.tx) for discr, e in host.sessions.items()]
    sent = 0
    for i in range(0, len(items), session_sockets.PER_MESSAGE):
        yield
        n, _new = sender.pass_sessions(items[i : i + session_sockets.PER_MESSAGE])
        sent += n
        if sender.broken:
            break
    log.info(
        "pin: passed %d of %d sessions' sockets to engine %d at the warm-up", sent, len(items), sender.pid
    )


_TX = operator.attrgetter("tx")


def _pass_sockets(host: Host, root: Path, prepared: Prepared) -> None:
    """Give the successor every session's socket (session_sockets.py); it makes afresh what it lacks.

    Over the warm-up's connection only those it did not carry; over a new one
    (no warm-up, or its connection failed) all of them.
    """
    discrs = list(host.sessions)
    if not discrs:
        return
    txs = list(map(_TX, host.sessions.values()))
    sender = prepared.sender
    if sender is not None and sender.broken:
        sender.close()
        sender = None
    if sender is None:
        try:
            sender = session_sockets.Sender(root)
        except PassError as e:
            log.info("pin: the sessions' sockets were not passed (%s); a successor makes its own", e)
            return
    sent, new = (0, 0) if sender.carried(discrs, txs) else sender.pass_sessions(zip(discrs, txs, strict=True))
    early = len(discrs) - new
    log.info(
        "pin: passed %d of %d sessions' sockets to engine %d (%d at the warm-up, %d now)",
        early + sent,
        len(discrs),
        sender.pid,
        early,
        sent,
    )
    if sent < new:
        log.info("pin: %d sessions' sockets were not passed; the successor makes them afresh", new - sent)


def _pass_packet_sockets_early(items: list[tuple[int, int]], root: Path, prepared: Prepared) -> None:
    """The warm-up: the packet sockets over a connection kept for the request (a new one each time,
    as for the sessions' sockets)."""
    if prepared.packets is not None:
        prepared.packets.close()
        prepared.packets = None
    if not items:
        return
    try:
        sender = packet_sockets.Sender(root)
    except (PassError, OSError) as e:
        log.info("pin: the packet sockets were not passed at the warm-up (%s)", e)
        return
    prepared.packets = sender
    sent, _new = sender.pass_new(items)
    log.info("pin: passed %d packet sockets to engine %d at the warm-up", sent, sender.pid)


def _pass_packet_sockets(items: list[tuple[int, int]], root: Path, prepared: Prepared | None = None) -> None:
    """The request: over the warm-up's connection only what is new (as a rule nothing, and no message);
    without one, all of them over a new connection."""
    if not items:
        return
    sender = prepared.packets if prepared is not None else None
    if sender is not None:
        sent, new = sender.pass_new(items)
        if not sender.broken:
            log.info(
                "pin: passed %d packet sockets to engine %d (%d at the warm-up, %d now)",
                len(items) - new + sent,
                sender.pid,
                len(items) - new,
                sent,
            )
            return
        # The successor reads the one connection the warm-up made: a second would not be read.
        log.info("pin: %d packet sockets were not passed; the exit waits for their release", new - sent)
        return
    try:
        pid = packet_sockets.send(root, items)
    except PassError as e:
        log.info("pin: the packet sockets were not passed (%s); the exit waits for their release", e)
        return
    log.info("pin: passed %d packet sockets to engine %d", len(items), pid)


__all__ = [
    "PREPARE_SIGNAL",
    "Departure",
    "Preload",
    "Prepared",
    "hand_over",
    "load",
    "request",
    "warm_up",
]
