"""What reading the kernel's per-session view costs the engine: a lookup against a copy from the mapping.

A stats document reads every session's ``slot_state`` and ``tick_state``
element. The engine's own programs are compiled (fastpath.kernel.FastPath,
nothing attached, no packet sent), every element of both maps is written
once, and then each is read ``--rounds`` times over: by ``BPF_MAP_LOOKUP_ELEM``
through bcc (``LookedUpArray``, as the engine read them before) and as a copy
out of the read-only mapping (``MappedArray``, as it reads them now),
alternating round by round. Prints the median microseconds per read.

    sudo .venv/bin/python bench/map_read.py [--sessions 4096] [--rounds 9]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "engine"))


def _round_us(reader: object, n: int, field: str) -> float:
    t0 = time.perf_counter_ns()
    for i in range(n):
        getattr(reader[i], field)  # type: ignore[index]  # a field read, as the stats walk does
    return (time.perf_counter_ns() - t0) / n / 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()

    from xdp_bfd.fastpath.kernel import FastPath  # noqa: PLC0415
    from xdp_bfd.fastpath.mapped import LookedUpArray, MappedArray  # noqa: PLC0415

    fp = FastPath(3_000_000, max_sessions=args.sessions)
    try:
        print(f"{'map':<11} {'sessions':>8} {'lookup us/read':>15} {'mapped us/read':>15} {'ratio':>6}")
        for name, field in (("slot_state", "rx_packets"), ("tick_state", "sent")):
            table = fp.program.bpf[name]
            for i in range(args.sessions):
                table[table.Key(i)] = table.Leaf()
            readers = {"lookup": LookedUpArray(table), "mapped": MappedArray(table)}
            times: dict[str, list[float]] = {k: [] for k in readers}
            for _ in range(args.rounds):
                for kind, reader in readers.items():
                    times[kind].append(_round_us(reader, args.sessions, field))
            lk, mp = statistics.median(times["lookup"]), statistics.median(times["mapped"])
            print(f"{name:<11} {args.sessions:>8} {lk:>15.2f} {mp:>15.2f} {lk / mp:>6.1f}")
    finally:
        fp.close()


if __name__ == "__main__":
    main()
