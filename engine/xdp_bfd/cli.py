"""``xdp-bfd`` command line (the contract in DESIGN.md) and process setup.

Exit codes: 0 clean, 2 usage, 75 handed over, 1 anything else — always with
one line on stderr saying why.
"""

from __future__ import annotations

import argparse
import ctypes
import ipaddress
import json
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from . import __version__
from .app import Options, run
from .core.config import ConfigError, ReflectorConfig, check_reflectors, parse_discr
from .core.errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, EngineError, UsageError
from .dplane.address import DplaneAddress, parse_dplane_address
from .dplane.peer import allowed_names, default_allowed, parse_allow_users
from .stats import locate, show
from .stats.locate import DEFAULT_STATS_PATH

log = logging.getLogger("xdp_bfd")

# What one loop (one htb qdisc, one CPU's softirq at a time) took here without harm
# (docs/benchmarks.md, scale): 256 sessions at 10 ms (~29 000 releases/s) ran clean,
# 1024 (~117 000) saturated the machine and took the fast path down with it.
DEFAULT_CLOCK_BUDGET = 25_000


def _positive_int(name: str, allow_zero: bool = True) -> Callable[[str], int]:
    def conv(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, not {text!r}") from None
        if v < 0 or (v == 0 and not allow_zero):
            raise argparse.ArgumentTypeError(f"{name} must be {'≥ 0' if allow_zero else '> 0'}")
        return v

    return conv


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # One line, exit 2 (argparse prints the whole usage block otherwise).
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="xdp-bfd",
        description="BFD engine with an XDP fast path",
        epilog="xdp-bfd show [sessions|counters] [--json] [--pid PID]: the running engine's sessions "
        "or counters (xdp-bfd show --help)",
    )
    p.add_argument("local", nargs="?", help="local address of a standalone session")
    p.add_argument("peer", nargs="?", help="peer address of a standalone session")
    p.add_argument("--sessions", type=Path, metavar="FILE", help="YAML list of sessions (SIGHUP reloads)")
    dp = p.add_mutually_exclusive_group()
    dp.add_argument("--dplane", type=_positive_int("--dplane", False), metavar="PORT",
                    help="short for --dplane-listen ipv4:127.0.0.1:PORT")  # fmt: skip
    dp.add_argument("--dplane-listen", metavar="ADDR", help="listen for bfdd (bfdd: ipv4c:ADDR)")
    dp.add_argument("--dplane-connect", metavar="ADDR", help="connect to a listening bfdd (bfdd: ipv4:ADDR)")
    p.add_argument("--kernel-tx", metavar="IF[,IF...]", help="attach the XDP fast path to these interfaces")
    p.add_argument("--xdp-mode", choices=("auto", "native", "generic"), default="auto")
    p.add_argument(
        "--kernel-clock",
        choices=("on", "off"),
        default="on",
        help="with --kernel-tx: the kernel sends the periodic packets no peer asks for",
    )
    p.add_argument(
        "--kernel-clock-budget",
        type=_positive_int("--kernel-clock-budget", False),
        default=DEFAULT_CLOCK_BUDGET,
        metavar="PER_S",
        help="releases per second the kernel clock may cost (sessions past it are not clocked)",
    )
    p.add_argument(
        "--sbfd-reflector",
        metavar="DISCR[,DISCR...]",
        help="with --kernel-tx: answer S-BFD (RFC 7880) initiators naming these discriminators, in XDP "
        "(UDP 7784; state Up, Required Min RX 3300 us, 10000 answers/s each; the sessions file tunes them)",
    )
    p.add_argument("--stats-dump", type=Path, default=Path(DEFAULT_STATS_PATH), metavar="PATH",
                   help=f"where SIGUSR1 writes the stats JSON (default {DEFAULT_STATS_PATH})")  # fmt: skip
    p.add_argument("--metrics", metavar="HOST:PORT", help="serve Prometheus metrics")
    p.add_argument("--dp-hold", type=_positive_int("--dp-hold"), default=0, metavar="SEC")
    p.add_argument("--dplane-allow", metavar="USER[,USER...]",
                   help="who may be the dataplane (names or uids; default frr,root)")  # fmt: skip
    p.add_argument("--pin", type=Path, metavar="BPFFS_DIR")
    p.add_argument("--succeed", type=_positive_int("--succeed", False), metavar="PID",
                   help="replace engine PID (one without --pin): compile first, then stop it")  # fmt: skip
    p.add_argument("--deadman-us", type=_positive_int("--deadman-us"), default=3_000_000, metavar="USEC")
    p.add_argument(
        "--demand-poll-us", type=_positive_int("--demand-poll-us"), default=1_000_000, metavar="USEC"
    )
    p.add_argument("--sched-deadline", metavar="RUNTIME_US/PERIOD_US")
    p.add_argument("--spread-pass", action="store_true")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.add_argument("--version", action="version", version=f"xdp-bfd {__version__}")
    return p


def parse_args(argv: list[str]) -> Options:
    args = build_parser().parse_args(argv)
    if (args.local is None) != (args.peer is None):
        raise UsageError("give both LOCAL_IP and PEER_IP, or neither")
    if args.local is not None:
        for what in ("local", "peer"):
            try:
                setattr(args, what, ipaddress.ip_address(getattr(args, what)))
            except ValueError:
                raise UsageError(f"{getattr(args, what)!r} is not an IP address") from None
        if args.local.version != args.peer.version:
            raise UsageError("LOCAL_IP and PEER_IP must be the same address family")
    args.dplane_mode = None
    if args.dplane is not None:
        args.dplane_mode, args.dplane_addr = "listen", DplaneAddress("ipv4", "127.0.0.1", args.dplane)
    elif args.dplane_listen:
        args.dplane_mode, args.dplane_addr = "listen", parse_dplane_address(args.dplane_listen)
    elif args.dplane_connect:
        args.dplane_mode, args.dplane_addr = "connect", parse_dplane_address(args.dplane_connect)
    if args.dplane_allow is not None and args.dplane_mode is None:
        raise UsageError(
            "--dplane-allow needs a dataplane option (--dplane, --dplane-listen, --dplane-connect)"
        )
    # Resolved now: a name that does not exist is a usage error, not a refusal at connect time.
    allow = parse_allow_users(args.dplane_allow) if args.dplane_allow is not None else default_allowed()
    args.kernel_tx = [i for i in (args.kernel_tx or "").split(",") if i]
    args.sbfd_reflector = _reflectors(args.sbfd_reflector)
    if args.sbfd_reflector and not args.kernel_tx:
        raise UsageError("--sbfd-reflector is answered in XDP only: it needs --kernel-tx")
    if args.sched_deadline is not None:
        runtime, sep, period = args.sched_deadline.partition("/")
        if not (sep and runtime.isdigit() and period.isdigit() and 0 < int(runtime) <= int(period)):
            raise UsageError("--sched-deadline wants RUNTIME_US/PERIOD_US with 0 < runtime ≤ period")
        args.sched_deadline = (int(runtime), int(period))
    if args.succeed is not None and args.pin is not None:
        raise UsageError(
            "--succeed is for engines without --pin: under --pin the successor finds the running "
            "engine in the pin directory and takes its state over"
        )
    if args.local is None and args.sessions is None and args.dplane_mode is None and not args.sbfd_reflector:
        raise UsageError(
            "nothing to do: give LOCAL_IP PEER_IP, --sessions FILE, a dataplane option or --sbfd-reflector"
        )
    return Options(
        local=args.local,
        peer=args.peer,
        sessions=args.sessions,
        dplane_mode=args.dplane_mode,
        dplane_addr=args.dplane_addr if args.dplane_mode else None,
        kernel_tx=tuple(args.kernel_tx),
        xdp_mode=args.xdp_mode,
        stats_dump=args.stats_dump,
        metrics=args.metrics,
        dp_hold=args.dp_hold,
        dplane_allow=allow,
        dplane_allow_names=allowed_names(args.dplane_allow),
        pin=args.pin,
        deadman_us=args.deadman_us,
        demand_poll_us=args.demand_poll_us,
        sched_deadline=args.sched_deadline,
        spread_pass=args.spread_pass,
        kernel_clock=args.kernel_clock == "on",
        kernel_clock_budget=args.kernel_clock_budget,
        sbfd_reflectors=args.sbfd_reflector,
        succeed=args.succeed,
        log_level=args.log_level,
    )


def _reflectors(text: str | None) -> tuple[ReflectorConfig, ...]:
    """--sbfd-reflector 456,789: each with the defaults (the sessions file sets anything else)."""
    if text is None:
        return ()
    items = [t.strip() for t in text.split(",")]
    try:
        if not all(items):
            raise ConfigError(f"--sbfd-reflector: an empty discriminator in {text!r}")
        out = [ReflectorConfig(parse_discr(t, "--sbfd-reflector")) for t in items]
        check_reflectors([(r, "--sbfd-reflector") for r in out])
    except ConfigError as e:
        raise UsageError(str(e)) from None
    return tuple(out)


def set_process_name(name: bytes = b"xdp-bfd") -> None:
    """``pkill -x xdp-bfd`` must reach us however we were started (python -m, a venv shim…)."""
    pr_set_name = 15
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_name, ctypes.c_char_p(name), 0, 0, 0)


def build_show_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="xdp-bfd show",
        description="Ask the running engine for fresh stats (SIGUSR1) and print its sessions or counters. "
        "The engine and its stats file are found by themselves (docs/engine.md, 'xdp-bfd show').",
        epilog="exit status: 0 shown, 1 no fresh stats (or cannot signal or read), "
        "2 usage or several engines without --pid, 3 no engine running",
    )
    p.add_argument("what", nargs="?", choices=("sessions", "counters"), default="sessions",
                   help="sessions (the default) or counters")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print JSON: the stats document (counters: those)")
    p.add_argument("--pid", type=_positive_int("--pid", False), help="the engine to ask, when several run")
    p.add_argument("--timeout", type=float, default=5.0, metavar="SEC",
                   help="wait at most SEC seconds for the dump after the signal (default 5)")  # fmt: skip
    return p


def show_main(argv: list[str]) -> int:
    """``xdp-bfd show …``: one line on stderr and a nonzero status when there is nothing fresh."""
    try:
        args = build_show_parser().parse_args(argv)
        if not 0 <= args.timeout < float("inf"):  # nan and inf would wait forever
            raise UsageError(f"--timeout must be a number of seconds ≥ 0, not {args.timeout}")
    except UsageError as e:
        print(f"xdp-bfd show: {e}", file=sys.stderr)
        return EXIT_USAGE
    # Not an engine: `pkill -USR1 -x xdp-bfd` (offload_info, operators) must neither kill us
    # nor count us; find_engines also skips a `show` that has not renamed itself yet.
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    set_process_name(b"xdp-bfd-show")
    try:
        engine = locate.engine_by_pid(args.pid) if args.pid else locate.choose(locate.find_engines())
        where = locate.stats_location(engine)
        doc, waited = locate.request_stats(engine, where, timeout=args.timeout)
    except locate.LocateError as e:
        print(f"xdp-bfd show: {e}", file=sys.stderr)
        return e.exit_code
    if args.json:
        text = json.dumps(show.counters(doc) if args.what == "counters" else doc, indent=2) + "\n"
    else:
        origin = f"stats {where.path} ({where.source}), {waited:.2f} s after SIGUSR1"
        text = (show.format_counters if args.what == "counters" else show.format_sessions)(doc, origin)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `xdp-bfd show | head`: not an error, and no traceback at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["show"]:  # never an IP address, so never the LOCAL_IP of the engine's own form
        return show_main(argv[1:])
    try:
        args = parse_args(argv)
    except UsageError as e:
        print(f"xdp-bfd: {e}", file=sys.stderr)
        return EXIT_USAGE
    # Until the loop installs its handlers, a stats or reload request must not
    # kill the process (SIGUSR1's and SIGHUP's default action is to terminate).
    for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    logging.basicConfig(level=args.log_level.upper(), format="%(message)s", stream=sys.stderr)
    set_process_name()
    try:
        return run(args)
    except EngineError as e:
        log.error("xdp-bfd: %s", e)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_OK
    except Exception as e:
        log.error("xdp-bfd: internal error: %s: %s", type(e).__name__, e)
        log.debug("traceback", exc_info=True)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
