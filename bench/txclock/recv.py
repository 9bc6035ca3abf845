#!/usr/bin/python3
"""Peer side (netns txc-b): a UDP socket bound to 3784 that drains and counts what arrives.

    recv.py SECONDS OUT.json

Bounded in time (SECONDS); OUT.json is rewritten every 1000 datagrams and on exit (SIGTERM included):
received, sessions seen (distinct My Discriminators), and bad payloads (not 24 bytes of BFD version 1).
The witness (witness.c) sits before this socket: the socket only keeps the peer's stack honest.
"""

from __future__ import annotations

import json
import signal
import socket
import sys
import time
from pathlib import Path

SO_RCVBUFFORCE = 33  # not in Python's socket module
BFD_PORT = 3784


def _terminate(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    limit = float(sys.argv[1]) if len(sys.argv) > 1 else 900
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    signal.signal(signal.SIGTERM, _terminate)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 16 << 20)
    s.bind(("0.0.0.0", BFD_PORT))
    s.settimeout(0.5)
    n, discrs, bad, end = 0, set(), 0, time.monotonic() + limit

    def dump() -> None:
        if out:
            out.write_text(json.dumps({"received": n, "sessions_seen": len(discrs), "bad_payload": bad}))

    try:
        while time.monotonic() < end:
            try:
                d, _ = s.recvfrom(2048)
            except TimeoutError:
                continue
            n += 1
            if len(d) != 24 or d[0] >> 5 != 1:
                bad += 1
            else:
                discrs.add(int.from_bytes(d[4:8], "big"))
            if n % 1000 == 1:
                dump()
    finally:
        dump()
    return 0


if __name__ == "__main__":
    sys.exit(main())
