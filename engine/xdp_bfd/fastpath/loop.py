"""The shaped loop the transmit clock's tick frames circulate in (bpf/tick.c, docs/fastpath.md).

A private veth pair in the engine's namespace: the sending end ``A`` has an
``htb`` root with one class per clocked session (rate: BFD_TICK_LEN_FULL bytes
per interval, so a frame's length is its period), the far end ``B`` runs the
tick program on ingress (clsact). Frames enter once per clock start through
an AF_PACKET socket on ``A``; unclassified (htb default 0), the first one goes
straight through, and the tick program classifies every later round by
``skb->priority``. Everything here is rtnetlink (pyroute2), no ``tc`` exec:
a class change must not cost a fork per session.

The loop is a network device: it outlives the engine. With ``--pin`` a
successor adopts it as it is (classes, frames in flight) and only swaps the
program; a fresh start removes a stale one first.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import KernelError

log = logging.getLogger("xdp_bfd")

# An interface index -> a socket already bound to it (a predecessor's), or None.
TakeSocket = Callable[[int], "socket.socket | None"]

LOOP_A, LOOP_B = "xbfd-tick-a", "xbfd-tick-b"
HTB_HANDLE = 0x10000  # 1:
CLSACT_INGRESS = "ffff:fff2"
SO_SNDBUFFORCE = 32  # not in Python's socket module
# Frames in flight keep their socket's send buffer charged: room for every session's frame.
SNDBUF_BYTES = 64 << 20
# The class may run this far ahead (its bucket): absorbs the loop's own transit without
# adding it to the period.
BURST_NS = 200_000
QUANTUM = 1514


def _disable_ipv6(ifname: str) -> None:
    # Nothing but tick frames may cross the loop (the program drops and counts anything else).
    with contextlib.suppress(OSError):
        Path(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6").write_text("1\n")


def load_netlink() -> None:
    """Import the netlink library now: its import is slow enough to show on a takeover's critical path."""
    with contextlib.suppress(ImportError):  # ShapedLoop says it is missing
        import pyroute2  # noqa: F401, PLC0415


def _exists(ipr: Any) -> bool:
    return bool(ipr.link_lookup(ifname=LOOP_A)) and bool(ipr.link_lookup(ifname=LOOP_B))


def _index(ipr: Any, ifname: str) -> int:
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        raise KernelError(f"kernel clock: {ifname} is gone")
    return int(found[0])


def _mac(ipr: Any, index: int) -> bytes:
    link = ipr.get_links(index)[0]
    return bytes.fromhex(link.get_attr("IFLA_ADDRESS").replace(":", ""))


def _netlink() -> Any:
    try:
        from pyroute2 import IPRoute  # noqa: PLC0415  (only with --kernel-tx)
    except ImportError:
        raise KernelError("kernel clock: pyroute2 is not installed (python3-pyroute2)") from None
    return IPRoute()


@dataclass
class Found:
    """A running engine's loop as looked up before a takeover's request, for the successor to adopt."""

    ipr: Any  # the netlink socket it was looked up on, the ShapedLoop's from then on
    a: int
    b: int
    a_mac: bytes
    b_mac: bytes


def find_loop() -> Found | None:
    """The loop's ends and addresses, read only: a takeover's successor looks them up before its
    request, where they cost nothing of the request -> serving path (several netlink round trips,
    most of 15 ms there at 1024 sessions; docs/benchmarks.md). None: no loop (a ShapedLoop then
    makes one), or it cannot be read now (the ShapedLoop looks again and says why)."""
    try:
        ipr = _netlink()
    except KernelError:
        return None
    try:
        if _exists(ipr):
            a, b = _index(ipr, LOOP_A), _index(ipr, LOOP_B)
            return Found(ipr, a, b, _mac(ipr, a), _mac(ipr, b))
    except Exception as e:  # pyroute2's own errors: the ShapedLoop's look says what they mean
        log.debug("kernel-tx: the transmit clock's loop was not looked up ahead (%s)", e)
    ipr.close()
    return None


class ShapedLoop:
    """The loop's two ends, its qdiscs and classes, and the socket that sends frames in."""

    def __init__(
        self, tick_fd: int, *, adopt: bool, take: TakeSocket | None = None, found: Found | None = None
    ) -> None:
        """``take``: a predecessor's socket bound to an interface index, if it passed one (pin/).
        ``found``: the loop as :func:`find_loop` found it ahead, adopted as it was then."""
        if found is not None and not adopt:
            found.ipr.close()
            found = None
        self.ipr = found.ipr if found is not None else _netlink()
        try:
            if found is not None:
                self.adopted = True
                self.a, self.b, self.a_mac, self.b_mac = found.a, found.b, found.a_mac, found.b_mac
            else:
                self.adopted = adopt and _exists(self.ipr)
                if not self.adopted:
                    self._create()
                self.a = _index(self.ipr, LOOP_A)
                self.b = _index(self.ipr, LOOP_B)
                self.a_mac = _mac(self.ipr, self.a)
                self.b_mac = _mac(self.ipr, self.b)
            self._attach(tick_fd)
            passed = take(self.a) if take is not None and self.adopted else None
            self.sock_adopted = passed is not None
            if passed is None:
                self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
                self.sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, SNDBUF_BYTES)
                self.sock.bind((LOOP_A, 0))
            else:
                self.sock = passed
        except KernelError:
            self.ipr.close()
            raise
        except Exception as e:
            self.ipr.close()
            raise KernelError(f"kernel clock: cannot set up the loop {LOOP_A}/{LOOP_B}: {e}") from None
        log.info(
            "kernel-tx: transmit clock on loop %s -> %s (%s)",
            LOOP_A,
            LOOP_B,
            ("adopted with its frames in flight" + (" and its socket" if self.sock_adopted else ""))
            if self.adopted
            else "new",
        )

    # -- the devices ------------------------------------------------------------

    def _create(self) -> None:
        for ifname in (LOOP_A, LOOP_B):
            for index in self.ipr.link_lookup(ifname=ifname):
                self.ipr.link("del", index=index)  # a crashed engine's: its frames and classes go with it
        self.ipr.link("add", ifname=LOOP_A, kind="veth", peer=LOOP_B)
        for ifname in (LOOP_A, LOOP_B):
            _disable_ipv6(ifname)
            self.ipr.link("set", index=_index(self.ipr, ifname), state="up")
        self.ipr.tc("add", "htb", _index(self.ipr, LOOP_A), HTB_HANDLE, default=0)
        self.ipr.tc("add", "clsact", _index(self.ipr, LOOP_B))

    def _attach(self, fd: int) -> None:
        # "replace": a successor's program takes over from its predecessor's between two frames.
        self.ipr.tc(
            "replace-filter",
            "bpf",
            self.b,
            ":1",
            fd=fd,
            name="bfd_tick",
            parent=CLSACT_INGRESS,
            classid=1,
            direct_action=True,
        )

    # -- classes ------------------------------------------------------------------

    @staticmethod
    def classid(slot: int) -> int:
        return HTB_HANDLE | (slot + 1)

    def set_class(self, slot: int, period_ns: int, len_full: int, *, fresh: bool = False) -> None:
        """The session's class releases ``len_full`` bytes per ``period_ns``.

        ``fresh``: a new class, empty and with a full bucket. A changed class
        keeps its bucket, measured in time: after a slow period its debt would
        hold a faster clock back for as long as the old period (measured: a
        clock that went from 1 s to 10 ms ran at 20 ms for over a second).
        """
        rate = max(1, round(len_full * 1e9 / period_ns))  # bytes per second
        burst = max(1, round(rate * BURST_NS / 1e9))
        if fresh:
            self.drop_class(slot)
        try:
            self.ipr.tc(
                "replace-class",
                "htb",
                self.a,
                self.classid(slot),
                parent=HTB_HANDLE,
                rate=rate,
                ceil=rate,
                burst=burst,
                cburst=burst,
                quantum=QUANTUM,
            )
        except Exception as e:
            raise KernelError(f"kernel clock: cannot set the class of slot {slot}: {e}") from None

    def drop_class(self, slot: int) -> None:
        """Remove the slot's class and whatever frames wait in it (none if it does not exist)."""
        try:
            # No kind: pyroute2 builds htb parameters for "htb" and fails without a rate.
            self.ipr.tc("del-class", index=self.a, handle=self.classid(slot), parent=HTB_HANDLE)
        except Exception as e:  # pyroute2's NetlinkError carries the errno as .code
            if getattr(e, "code", None) != errno.ENOENT:
                raise KernelError(f"kernel clock: cannot remove the class of slot {slot}: {e}") from None

    # -- frames -------------------------------------------------------------------

    def inject(self, slot: int, gen: int, length: int, ethertype: int, magic: int) -> None:
        """Send one tick frame in (its first round goes unshaped, straight to the program)."""
        head = self.b_mac + self.a_mac + struct.pack(">H", ethertype) + struct.pack("=III", magic, slot, gen)
        try:
            self.sock.send(head.ljust(length, b"\0"))
        except OSError as e:
            # Lost like any frame: the sweep reports it and the clock sends another.
            log.warning("kernel-tx: cannot send the tick frame of slot %d in: %s", slot, e.strerror or e)

    def send(self, frame: bytes) -> bool:
        """Send a frame in unclassified (htb's direct queue: straight to the program); False if refused."""
        try:
            self.sock.send(frame)
        except OSError as e:
            log.warning("kernel-tx: cannot send a frame into the loop: %s", e.strerror or e)
            return False
        return True

    def packet_sockets(self) -> list[tuple[int, int]]:
        """(interface index, descriptor) of the socket that sends frames in, for a successor."""
        return [(self.a, self.sock.fileno())] if self.sock.fileno() >= 0 else []

    def close(self, *, remove: bool) -> None:
        """``remove``: take the loop away (a clean stop); else leave it to a successor."""
        with contextlib.suppress(Exception):
            self.sock.close()
        if remove:
            with contextlib.suppress(Exception):
                self.ipr.link("del", index=self.a)
        self.ipr.close()


def remove_loop() -> bool:
    """Take away a loop an engine left (--kernel-clock off now): its frames would go on sending."""
    try:
        from pyroute2 import IPRoute  # noqa: PLC0415
    except ImportError:
        return False  # then no engine of this install made one
    with IPRoute() as ipr:
        found = ipr.link_lookup(ifname=LOOP_A)
        for index in found:
            ipr.link("del", index=index)
    return bool(found)


__all__ = ["LOOP_A", "LOOP_B", "Found", "ShapedLoop", "find_loop", "remove_loop"]
