"""The one place that knows every part: builds the engine, plugs the options' plugins in, runs it.

Plugins (the fast path, ``--pin``, the dataplane, metrics) are handed the
engine as a :class:`~.core.host.Host` and know nothing of each other.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import logging
import resource
import signal
from dataclasses import dataclass
from pathlib import Path

from .core import footprint
from .core.config import ConfigError, ReflectorConfig, load_config
from .core.engine import Engine
from .core.errors import EXIT_HANDED_OVER, EXIT_OK, EngineError
from .core.sched import reserve as reserve_scheduling
from .dplane.address import DplaneAddress
from .pin.succession import Predecessor
from .session import SessionConfig
from .session.config import IPAddress

log = logging.getLogger("xdp_bfd")


@dataclass(frozen=True)
class Options:
    """What the command line asks for (``cli.parse_args``), checked; nothing else configures a run."""

    local: IPAddress | None
    peer: IPAddress | None
    sessions: Path | None
    dplane_mode: str | None  # "listen", "connect" or None
    dplane_addr: DplaneAddress | None
    kernel_tx: tuple[str, ...]
    xdp_mode: str
    stats_dump: Path
    metrics: str | None
    dp_hold: int
    dplane_allow: tuple[int, ...]  # the uids that may be the dataplane (--dplane-allow), resolved
    dplane_allow_names: tuple[str, ...]  # its names, honoured in the peer's own root too
    pin: Path | None
    deadman_us: int
    demand_poll_us: int
    sched_deadline: tuple[int, int] | None
    spread_pass: bool
    kernel_clock: bool  # --kernel-clock: the tick program sends what no peer asks for
    kernel_clock_budget: int  # --kernel-clock-budget: releases/s the clock may cost
    sbfd_reflectors: tuple[ReflectorConfig, ...]  # --sbfd-reflector: answered in XDP (defaults)
    succeed: int | None  # --succeed PID: the unpinned engine this one replaces once it has compiled
    log_level: str


def _raise_nofile() -> None:
    # One socket per session: 4096 sessions need more than the default 1024 fds.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def initial_config(args: Options) -> tuple[list[tuple[SessionConfig, str]], list[ReflectorConfig]]:
    """The sessions (with their origin) and the sessions file's S-BFD reflector discriminators."""
    out: list[tuple[SessionConfig, str]] = []
    reflectors: list[ReflectorConfig] = []
    if args.local is not None and args.peer is not None:  # the command line gives both or neither
        out.append((SessionConfig(local=args.local, peer=args.peer), "cli"))
    if args.sessions is not None:
        try:
            loaded = load_config(args.sessions)
        except ConfigError as e:
            raise EngineError(str(e)) from None
        out += [(c, "file") for c in loaded.sessions]
        reflectors = loaded.reflectors
    return out, reflectors


class _StepDown:
    """SIGUSR2 without ``--pin``: a ``--succeed`` successor has compiled and takes this engine's place.

    The shutdown is SIGTERM's (AdminDown to every session, XDP detached, bfddp
    closed) but without ``STOPPING=1``: the successor is the unit's main
    process by now, and systemd would take a stopping notice from anyone in
    the unit as the unit's own (systemd 257 then fails the reload and stops
    the successor with it). Exit status 75, as after a ``--pin`` handover.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine, self.done = engine, False

    def __call__(self) -> None:
        if not self.done:
            log.info("succeed: SIGUSR2: a successor takes this engine's place; stopping (AdminDown)")
        self.done = True
        self.engine.reactor.stop_requested = True


def run(args: Options) -> int:
    sessions, file_reflectors = initial_config(args)  # a bad file fails before anything is bound
    _raise_nofile()
    engine = Engine(
        stats_path=args.stats_dump,
        sessions_file=args.sessions,
        demand_poll_us=args.demand_poll_us,
        deadman_us=args.deadman_us,
        sbfd_cli=args.sbfd_reflectors,
    )
    if file_reflectors and not args.kernel_tx:
        # Refused before anything is compiled or bound (the reload says the same).
        engine.check_reflectors(file_reflectors, str(args.sessions))
    engine.reactor.install_signals()
    step_down = _StepDown(engine)
    engine.on_signal(signal.SIGUSR2, step_down)  # --pin replaces it with the handover
    # No automatic collection from here to the freeze below. What the start
    # makes (the compile's objects, a takeover's decoded state and restored
    # sessions) lives as long as the engine: a full collection in the middle
    # walks all of it for nothing, and in a takeover that falls between the
    # request and READY (docs/benchmarks.md, "A takeover without a collection").
    # The collections below that must run are called explicitly.
    gc.disable()
    try:
        started = None
        # Checked before the compile: a wrong pid fails the start, not the old engine.
        predecessor = Predecessor(args.succeed) if args.succeed is not None else None
        if args.kernel_tx:
            from .pin.startup import start_fast_path  # noqa: PLC0415  (bcc only with --kernel-tx)

            started = start_fast_path(
                engine, engine.notifier, args, succeed=predecessor, configs=[cfg for cfg, _origin in sessions]
            )
            engine.reactor.takeover_marks = started.marks
            engine.reflector_sink = started.reflector.apply
            engine.reflector_limit = started.reflector.limit
        else:
            if args.pin is not None:
                log.warning("pin: --pin keeps the fast path's state; without --kernel-tx it does nothing")
            if predecessor is not None:  # nothing to compile: it goes before our sockets are bound
                engine.notifier.main_pid()
                log.info("succeed: engine %d stopped in %.0f ms", predecessor.pid, predecessor.retire())
        engine.open_receivers()
        if started is not None and started.state is not None:
            started.restore([cfg for cfg, _origin in sessions])
            engine.mark("sessions restored")
        if started is not None:
            started.attached()  # a takeover's swap ran beside the restore
        # After a takeover's sessions are back (a reflector that names one of them is
        # refused), before any new session allocates a discriminator.
        engine.set_reflectors(engine.check_reflectors(file_reflectors, str(args.sessions or "")))
        if started is not None and started.state is not None:
            # The arguments may have changed with the upgrade: the file and the
            # command line say what runs now; adopted sessions they no longer
            # name leave with AdminDown.
            for origin in ("cli", "file"):
                engine.apply_session_list([c for c, o in sessions if o == origin], origin)
            engine.mark("arguments applied")
        for cfg, origin in sessions if started is None or started.state is None else ():
            if engine.lookup(cfg.key()) is not None:
                raise EngineError(f"session {cfg.local} -> {cfg.peer} given twice")
            try:
                engine.add_session(cfg, origin)
            except OSError as e:
                raise EngineError(f"session {cfg.local} -> {cfg.peer}: {e.strerror or e}") from None
        log.info(
            "bfd: serving %d sessions %s",
            len(engine.sessions),
            "with the XDP fast path" if started is not None else "in software",
        )
        if args.dplane_mode is not None and args.dplane_addr is not None:  # set together by cli
            from .dplane import Dataplane  # noqa: PLC0415  (only with a dataplane option)

            dataplane = Dataplane(
                engine,
                args.dplane_addr,
                mode=args.dplane_mode,
                hold_s=args.dp_hold,
                allow=args.dplane_allow,
                allow_names=args.dplane_allow_names,
            )
            dataplane.start()
            engine.add_closer(dataplane.close)
        if args.metrics:
            from .stats.metrics import MetricsServer  # noqa: PLC0415  (prometheus_client only with --metrics)

            try:
                engine.add_closer(MetricsServer(engine, args.metrics).close)
            except (OSError, ValueError) as e:
                raise EngineError(f"--metrics {args.metrics}: {getattr(e, 'strerror', None) or e}") from None
        took_over = started is not None and started.state is not None
        if not took_over:
            # One stats document built now: first calls (bcc's table objects,
            # /proc reads, lazy imports) would otherwise fall on the first
            # SIGUSR1, under the reservation. Not in a takeover: there it cost
            # a whole document on the request -> serving path for a first build
            # that costs hardly more than the next (docs/benchmarks.md).
            engine.stats()
        # Everything made so far (bcc's tables, the compiled program's
        # metadata, the sessions) lives as long as the engine: out of the
        # collector's sight, a full collection scans only what came since.
        # Without it one collection took tens of milliseconds of loop time
        # under the reservation (docs/benchmarks.md), enough for a
        # userspace-sent session to miss its detection time. With the fast
        # path, what the compile made was collected and frozen before a
        # takeover's request (pin.startup.settle_after_compile); after the
        # request a collection walks every restored session to find a few
        # dozen unreachable objects, so a takeover freezes those with the rest.
        if not took_over:
            gc.collect()
        gc.freeze()
        gc.enable()
        footprint.trim_heap()
        engine.mark("memory settled")
        # Last: bcc has compiled (compiling under a real-time class trips RT
        # throttling), and nothing forks from here on.
        reserved = reserve_scheduling(args.sched_deadline)
        if reserved is not None:
            engine.reactor.pace_background(*reserved)
        if started is not None:
            started.resume_series()  # what a series sent until now, the sessions send from here
        engine.notifier.ready(takeover=started is not None and started.predecessor is not None)
        engine.mark("ready")
        if engine.reactor.takeover_marks:
            marks = engine.reactor.takeover_marks
            log.info(
                "%s: serving again %.1f ms after the request at %.6f (%s)",
                "succeed" if args.succeed is not None else "pin",
                (marks[-1][1] - marks[0][1]) / 1e6,
                marks[0][1] / 1e9,
                ", ".join(f"{b[0]} +{(b[1] - a[1]) / 1e6:.1f}" for a, b in itertools.pairwise(marks)),
            )
        engine.loop()
    finally:
        gc.enable()  # a start that failed before the freeze
        engine.shutdown()
    return EXIT_HANDED_OVER if step_down.done else EXIT_OK
