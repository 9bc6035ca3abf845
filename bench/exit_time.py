"""How long the kernel takes to tear down a process like the engine: SIGKILL -> its pidfd readable.

A ``--pin`` takeover waits for the old engine to be gone, and the last part of
that wait is its exit, which no code of ours runs. Each kind of child below is
forked, brought to its state, then killed; the runs alternate between kinds so
that the machine's weather falls on all of them alike.

  plain             a Python process (the floor)
  bcc-import        bcc imported, nothing compiled
  fastpath          the engine's programs compiled and loaded (fastpath.kernel.FastPath), as right
                    after the compile
  fastpath-settled  the same after pin.startup.settle_after_compile (heap trimmed, compiler pages
                    unmapped), as the engine is when a successor asks it to leave
  fastpath-sweep    settled, with the sweep's raw tracepoint and perf events attached
  fastpath-exits    fastpath-sweep, leaving as a handing-over engine did before 2026-12-05: at a
                    signal, every descriptor closed, then os._exit (core.departure, no child)
  fastpath-departs  the same as a handing-over engine leaves now: the address space left to a
                    sleeping child (core.departure.exit_now)

The last two are timed from their signal (SIGUSR1, handled in Python) rather
than SIGKILL. Nothing is attached to an interface and no packet is sent.

    sudo .venv/bin/python bench/exit_time.py [--runs 5] [KIND ...]
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "engine"))

KINDS = (
    "plain",
    "bcc-import",
    "fastpath",
    "fastpath-settled",
    "fastpath-sweep",
    "fastpath-exits",
    "fastpath-departs",
)
# The kinds that leave by the engine's own exit at SIGUSR1 (fastpath-exits without the child).
LEAVING = ("fastpath-exits", "fastpath-departs")
SETTLE_S = 0.3  # after the child says it is ready, before the kill: let its start-up work end


def _become(kind: str) -> object:
    """In the child: reach the state ``kind`` names; what is returned is kept alive until the kill."""
    if kind == "bcc-import":
        import bcc  # noqa: PLC0415

        return bcc
    if kind.startswith("fastpath"):
        from xdp_bfd.fastpath.kernel import FastPath  # noqa: PLC0415
        from xdp_bfd.pin.startup import settle_after_compile  # noqa: PLC0415

        fp = FastPath(3_000_000)
        if kind not in {"fastpath", "fastpath-settled"}:
            fp.program.start_sweep()
        if kind != "fastpath":
            settle_after_compile(kernel_clock=True)
        if kind in LEAVING:
            from xdp_bfd.core import departure  # noqa: PLC0415

            linger_s = 0 if kind == "fastpath-exits" else departure.LINGER_S
            signal.signal(signal.SIGUSR1, lambda *_: departure.exit_now(0, linger_s))
        return fp
    return None


def exit_ms(kind: str) -> float:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            kept = _become(kind)  # noqa: F841  (alive until the kill: a collected FastPath unloads)
            os.write(w, b"x")
            time.sleep(60)
        except BaseException:
            traceback.print_exc()  # os._exit below would swallow it; the parent only sees no "ready"
        finally:
            os._exit(0)
    os.close(w)
    try:
        if os.read(r, 1) != b"x":
            raise RuntimeError(f"the {kind} child failed before it was ready")
    finally:
        os.close(r)
    time.sleep(SETTLE_S)
    fd = os.pidfd_open(pid)
    try:
        t0 = time.monotonic_ns()
        os.kill(pid, signal.SIGUSR1 if kind in LEAVING else signal.SIGKILL)
        if not select.select([fd], [], [], 10)[0]:
            raise RuntimeError(f"the {kind} child was not gone 10 s after its signal")
        ms = (time.monotonic_ns() - t0) / 1e6
    finally:
        os.close(fd)
        os.waitpid(pid, 0)
    return ms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("kinds", nargs="*", metavar="KIND", help=f"any of {', '.join(KINDS)} (default: all)")
    args = ap.parse_args()
    kinds = args.kinds or list(KINDS)
    if unknown := [k for k in kinds if k not in KINDS]:
        ap.error(f"unknown kind {unknown[0]!r}: one of {', '.join(KINDS)}")
    times: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(args.runs):
        for k in kinds:
            times[k].append(exit_ms(k))
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    for k in kinds:
        v = sorted(times[k])
        mid = statistics.median(v)
        print(f"{k:17s} median {mid:6.2f} ms  min {v[0]:6.2f}  max {v[-1]:6.2f}  ({len(v)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
