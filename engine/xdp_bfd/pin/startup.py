"""Bringing the fast path up: compile, (with ``--pin``) take over from a running engine, attach.

The fast path and the ``--pin`` handover start together because a takeover
decides how the program is loaded (the predecessor's pinned maps, its slots)
and the order is strict: plan, request, read the state, attach, then serve.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import signal
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..core import footprint, signals
from ..core.clock import now_us
from ..core.errors import EngineError
from ..core.handoff import DPLANE_CONNECTION
from ..core.host import Host
from ..core.notify import Notifier
from ..core.sched import outside_real_time
from ..fastpath import abi
from ..fastpath.clock import Clock
from ..fastpath.echo import EchoOriginator
from ..fastpath.errors import KernelError
from ..fastpath.kernel import FastPath
from ..fastpath.layout import PinPaths
from ..fastpath.loop import ShapedLoop, find_loop, load_netlink, remove_loop
from ..fastpath.observer import Offload
from ..fastpath.program import Swap
from ..fastpath.sbfd import Reflector
from ..session import SessionConfig
from . import directory, fdpass, handover, packet_sockets, session_sockets
from . import state as handover_state
from .catchup import Catchup
from .errors import HandoverError
from .succession import Predecessor

log = logging.getLogger("xdp_bfd")


class FastPathOptions(Protocol):
    """The options the bring-up reads (``app.Options`` has them)."""

    @property
    def kernel_tx(self) -> Sequence[str]: ...
    @property
    def xdp_mode(self) -> str: ...
    @property
    def pin(self) -> Path | None: ...
    @property
    def deadman_us(self) -> int: ...
    @property
    def spread_pass(self) -> bool: ...
    @property
    def kernel_clock(self) -> bool: ...
    @property
    def kernel_clock_budget(self) -> int: ...
    @property
    def dplane_mode(self) -> str | None: ...


@dataclass
class Started:
    """The fast path as it came up, and what a predecessor handed over (if one did)."""

    host: Host
    offload: Offload
    clock: Clock | None
    reflector: Reflector
    state: handover_state.Handed | None = None
    predecessor: int | None = None
    # A takeover's phases, (name, CLOCK_MONOTONIC ns) from the request on (empty outside one).
    marks: list[tuple[str, int]] = field(default_factory=list)
    # The predecessor's session sockets (session_sockets.py), taken by the restore.
    sockets: session_sockets.Passed | None = None
    # The program swapped in over the one already attached (fastpath.program.Swap): see attached().
    swap: Swap | None = None
    # Adopted sessions the kernel carries, serviced once the loop runs (pin/catchup.py).
    catchup: Catchup | None = None
    # The warm-up's sessions made before the request, for the restore to join (state.build_ahead).
    ahead: handover_state.Ahead | None = None

    def mark(self, phase: str) -> None:
        if self.marks:
            self.marks.append((phase, time.monotonic_ns()))

    def attached(self) -> None:
        """Once the program is on every interface: the owner record says this engine runs.

        With a swap (a takeover, a replacement) that is when its thread is done,
        which the app waits for once the sessions are in, before it says ready.
        """
        if self.swap is None:
            return
        try:
            self.swap.wait()
        except KernelError as e:
            raise EngineError(str(e)) from None
        fp = self.offload.fp
        if fp.pinned is not None:
            fp.pinned.set_owner(os.getpid(), fp.abi.OwnerState.RUNNING, 0)
        self.mark("attached")

    def resume_series(self) -> None:
        """Last before the loop runs: the sessions a predecessor's series speaks for (a meticulous
        key, fastpath.series) are serviced: their series goes on from where the kernel is, and
        their silence counts from now. Not at the restore: what follows it before the loop (the
        arguments, READY) took up to 0.2 s at 1024 sessions, past a 30 ms detection time, judged
        by the engine itself for these sessions (docs/benchmarks.md).
        """
        if self.clock is None:
            return
        now = now_us()
        for entry in self.clock.resume():
            entry.session.resume_reading(now)
            self.host.service(entry, now)

    def restore(self, configs: Iterable[SessionConfig] = ()) -> None:
        """Recreate the handed-over sessions in the host (same discriminators, slots, ports).

        ``configs`` is this engine's configuration (file and command line): the
        secrets of authenticated sessions come from there, never from the state.
        """
        assert self.state is not None
        try:
            handover_state.restore(
                self.host,
                self.offload,
                self.state,
                configs,
                clock=self.clock,
                sockets=self.sockets,
                catchup=self.catchup,
                ahead=self.ahead,
            )
        finally:
            self.ahead = None  # what was not joined goes now (its sockets are the Passed's)
            if self.sockets is not None:
                self.sockets.close()


def settle_after_compile(kernel_clock: bool) -> None:
    """What follows the compile, done before a running engine is asked to leave.

    Each of these costs a takeover's critical path (request -> serving) when
    done after the request, and none needs the sessions: the netlink library
    the transmit clock's loop is driven with (a slow import), the collection
    of the compile's garbage and the freeze of what survives it (the last
    collection then walks only what came since), the trimmed heap and the
    compiler's unmapped pages (docs/benchmarks.md, "A takeover's critical
    path").
    """
    if kernel_clock:
        load_netlink()
    gc.collect()
    gc.freeze()
    footprint.trim_heap()
    log.debug("memory: %d kB of the compiler's pages unmapped", footprint.shed_compiler_pages())


def start_fast_path(
    host: Host,
    notifier: Notifier,
    args: FastPathOptions,
    succeed: Predecessor | None = None,
    configs: Sequence[SessionConfig] = (),
) -> Started:
    """``succeed``: an unpinned engine to stop once the programs are compiled and loaded.

    ``configs``: the sessions the arguments give; a takeover's restored sessions
    hold these very objects where they are equal (``state.configured_as``).
    """
    log.info("kernel-tx: dead-man gate at %dus", args.deadman_us)
    pin = plan = None
    if args.pin is not None:
        try:
            directory.check_bpffs(args.pin)
            build = abi.load()
            pin = PinPaths.of_build(args.pin.resolve(), build)
            directory.check_trusted(pin.root, pin.layout)  # before anything in it is read
            plan = directory.plan(pin.root, pin.layout, build)
            directory.prepare(pin.root, pin.layout, plan)
            directory.make_layout_dir(pin.root, pin.layout)
        except (HandoverError, KernelError, OSError) as e:
            raise EngineError(str(e)) from None
    handed = None
    predecessor = None
    passed = None
    packets = packet_sockets.PacketSockets()
    preload = None
    found = None
    marks: list[tuple[str, int]] = []
    try:
        # Signals that come meanwhile wait for the end of the load (core/signals.py).
        with outside_real_time("compiled"), signals.held():
            fp = FastPath(args.deadman_us, pin=pin)
        host.add_closer(fp.close)
        settle_after_compile(args.kernel_clock)
        if host.stop_pending() and (
            succeed is not None or (plan is not None and plan.kind in ("takeover", "replace"))
        ):
            # Stopped while compiling (a reload that gave up on the wait): the
            # running engine is left serving, never asked to leave by an engine
            # about to stop.
            raise EngineError("stopped before taking over: the running engine was not asked to leave")
        if succeed is not None:
            # Compiled and loaded while the old engine served; now it goes, and
            # systemd must see its main process change before that.
            notifier.main_pid()
            t0 = time.monotonic_ns()
            gone_ms = succeed.retire()
            log.info("succeed: engine %d stopped in %.0f ms, after this one compiled", succeed.pid, gone_ms)
            predecessor = succeed.pid
            marks = [("request", t0), ("old engine gone", time.monotonic_ns())]
        if plan is not None and plan.kind in ("takeover", "replace"):
            # systemd must see its main process change before the old one exits.
            notifier.main_pid()
            assert pin is not None
            inbox = fdpass.open_inbox(pin.root) if plan.kind == "takeover" and args.dplane_mode else None
            socket_inbox = session_sockets.open_inbox(pin.root) if plan.kind == "takeover" else None
            packet_inbox = packet_sockets.open_inbox(pin.root)
            # The state is decoded once the old engine is gone, or while it exits if that
            # takes longer than handover.EXIT_WAIT_MS (it is written by then).
            if plan.kind == "takeover":
                preload = handover.Preload(fp, configs, socket_inbox, plan.pid, host)
                if args.kernel_clock:
                    found = find_loop()  # the loop the old engine runs, adopted below as it is
            sent = functools.partial(notifier.request_sent, plan.pid)
            gone = handover.request(
                plan.pid,
                pin.root,
                build,
                meanwhile=preload,
                on_request=sent,
                prepared=preload.rehearse if preload is not None else None,
            )
            host.handoff.leave(DPLANE_CONNECTION, fdpass.collect(inbox, plan.pid))
            passed = session_sockets.collect(socket_inbox, plan.pid, preload.early if preload else None)
            packets = packet_sockets.collect(packet_inbox, plan.pid)
            host.add_closer(packets.close)
            log.info("pin: engine %d handed over and %s", plan.pid, gone)
            predecessor = plan.pid
            t_gone = gone.request_ns + int(gone.gone_ms * 1e6)
            marks = [("request", gone.request_ns), ("old engine gone", t_gone)]
            marks.append(("sockets collected", time.monotonic_ns()))
        if plan is not None and plan.kind in ("takeover", "adopt"):
            handed = handover.load(fp, preload)
            if handed is None:
                fp.slots.reset()
                if passed is not None:
                    passed.close()  # no sessions to give them to: their ports are free again
                    passed = None
            if marks:
                marks.append(("state read", time.monotonic_ns()))
        if pin is not None:
            directory.finish(pin.root, pin.layout)
        if args.spread_pass:
            # Before the attach: the program must find its cpumap filled.
            try:
                n = fp.enable_spread()
                log.info("kernel-tx: spread-pass: non-BFD traffic spread over %d CPUs by flow hash", n)
            except KernelError as e:
                log.warning("kernel-tx: spread-pass unavailable (%s); non-BFD traffic stays on the RX CPU", e)
        swap = None
        if plan is not None and plan.kind != "fresh":
            # Over a program already there: started once the transmit clock's loop
            # is taken (below), it runs beside the restore (Started.attached).
            swap = Swap(fp.program, args.kernel_tx, args.xdp_mode)
        else:
            for ifname in args.kernel_tx:
                fp.program.attach(ifname, args.xdp_mode)
            fp.program.start_sweep()
            if fp.pinned is not None:
                fp.pinned.set_owner(os.getpid(), fp.abi.OwnerState.RUNNING, 0)
    except (KernelError, HandoverError) as e:
        raise EngineError(str(e)) from None
    offload = Offload(host, fp)
    host.add_observer(offload)
    # Configured by app once the sessions are known (their discriminators are checked against it).
    reflector = Reflector(host, fp)
    clock = None
    if args.kernel_clock:
        try:
            loop = ShapedLoop(
                fp.program.tick_fn.fd,
                adopt=plan is not None and plan.kind != "fresh",
                take=packets.take,
                found=found,
            )
        except KernelError as e:
            # Sessions still come up and XDP still answers: only what nobody asks for falls
            # back to the engine's loop, as with --kernel-clock off. Said once, loudly.
            log.error("%s; the engine sends what XDP cannot answer (as with --kernel-clock off)", e)
        else:
            # After the Offload: it gives each session its slot and says whether XDP answers.
            clock = Clock(host, fp, loop, budget=args.kernel_clock_budget)
            host.add_observer(clock)
            # A mass expiry's Downs leave through the loop too: one frame per run of them.
            offload.kernel_downs = clock.send_downs
            host.add_closer(clock.close)
    else:
        log.info("kernel-tx: --kernel-clock off: the engine sends what XDP cannot answer")
        if remove_loop():
            log.info("kernel-tx: removed the transmit clock's loop an earlier engine left")
    host.reflects_echo = True
    # After the Offload: it gives each session its slot and says whether XDP sees its packets.
    echo = EchoOriginator(host, fp)
    echo.take = packets.take
    host.add_observer(echo)
    host.add_closer(echo.close)
    catchup = Catchup(host) if handed is not None else None
    if pin is not None:

        def held_packet_sockets() -> list[tuple[int, int]]:
            return [*(clock.loop.packet_sockets() if clock is not None else ()), *echo.packet_sockets()]

        # What the warm-up did ahead (the state written, the sockets passed): the request does the rest.
        # Sessions the catch-up has not serviced yet go on as they came: their state is the one a
        # predecessor handed over, which a successor adopts as this engine did.
        prepared = handover.Prepared()
        host.on_signal(
            signal.SIGUSR2, lambda: handover.hand_over(host, offload, held_packet_sockets, clock, prepared)
        )
        # A successor is about to ask for a handover.
        host.on_signal(
            handover.PREPARE_SIGNAL, lambda: handover.warm_up(host, offload, prepared, held_packet_sockets)
        )
    if swap is not None:
        # Last: the swap holds the kernel's netlink lock while it waits, and the
        # clock's loop is taken over netlink above.
        swap.start()
    return Started(
        host,
        offload,
        clock,
        reflector,
        handed,
        predecessor,
        marks,
        passed,
        swap=swap,
        catchup=catchup,
        ahead=preload.ahead if preload is not None and handed is not None else None,
    )
