#!/usr/bin/python3
# Copyright: xdp_bfd.fastpath developers
# SPDX-License-Identifier: GPL-2.0-or-later
"""The reserved-port list with the dplane port added, spelled the way the kernel prints it.

    xdp_bfd_reserved_ports.py PORT [FORBIDDEN_LO FORBIDDEN_HI]

Prints JSON: live (what /proc holds now), merged (live plus PORT), conflicts
(live entries overlapping the forbidden range). The merged list is normalised
exactly like the kernel's bitmap printer (ascending, adjacent ports joined into
ranges), so once applied the next run reads back the same text and writes
nothing: that is what keeps the role idempotent.
"""

from __future__ import annotations

import json
import sys

PROC = "/proc/sys/net/ipv4/ip_local_reserved_ports"


def parse(text: str) -> list[tuple[int, int]]:
    ranges = []
    for raw in text.replace("\n", "").split(","):
        part = raw.strip()
        if part:
            lo, _, hi = part.partition("-")
            ranges.append((int(lo), int(hi or lo)))
    return ranges


def spell(ranges: list[tuple[int, int]]) -> str:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in merged)


def main(argv: list[str]) -> int:
    port = int(argv[1])
    lo_forbidden, hi_forbidden = (int(argv[2]), int(argv[3])) if len(argv) > 3 else (65472, 65535)
    try:
        with open(PROC) as f:
            live_text = f.read().strip()
    except OSError as e:
        print(json.dumps({"failed": True, "msg": f"cannot read {PROC}: {e.strerror}"}))
        return 1
    live = parse(live_text)
    conflicts = [spell([r]) for r in live if r[0] <= hi_forbidden and r[1] >= lo_forbidden]
    print(json.dumps({"live": spell(live), "merged": spell([*live, (port, port)]), "conflicts": conflicts}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
