"""Sockets for BFD in software: receive on 3784/4784 with the TTL, send per session.

RFC 5881/5883: control packets go out with TTL (hop limit) 255 from a source
port in 49152-65535 that stays fixed for the session; single-hop sessions
are bound to their interface. Receive sockets report the TTL and the arrival
interface and local address of every datagram so the engine can apply GTSM and
demultiplex without trusting anything in the payload.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import ipaddress
import itertools
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass

PORT_SINGLE_HOP = 3784
PORT_MULTIHOP = 4784
PORT_ECHO = 3785
PORT_SBFD = 7784  # RFC 7881: S-BFD control packets to a reflector (answered in XDP only)
# The operator manual keeps 65472-65535 free of ip_local_reserved_ports for us:
# allocate from the top so the first 64 sessions land there, then go below.
SOURCE_PORT_FIRST, SOURCE_PORT_LAST = 49152, 65535

# Linux values; older Pythons lack some of these names.
IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)
IP_RECVTTL = getattr(socket, "IP_RECVTTL", 12)
IP_TTL = socket.IP_TTL
IPV6_RECVPKTINFO = getattr(socket, "IPV6_RECVPKTINFO", 49)
IPV6_PKTINFO = getattr(socket, "IPV6_PKTINFO", 50)
IPV6_RECVHOPLIMIT = getattr(socket, "IPV6_RECVHOPLIMIT", 51)
IPV6_HOPLIMIT = getattr(socket, "IPV6_HOPLIMIT", 52)
SO_BINDTODEVICE = getattr(socket, "SO_BINDTODEVICE", 25)
IFNAMSIZ = 16
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
RCVBUF_BYTES = 4 << 20
TOS_CS6 = 0xC0  # network control, as bfdd sends

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
RECV_BATCH = 256  # datagrams per wake-up, so one flooded socket cannot starve the timers
# A router has a few thousand peers and addresses: each is parsed once, not per datagram (a
# meticulous key has every datagram reach the loop). Bounded, so a spray of sources costs no memory.
_ADDRESSES = 8192


@functools.lru_cache(maxsize=_ADDRESSES)
def _source(host: str) -> Address:
    """A sender's address as recvmsg gives it (an IPv6 link-local one may carry ``%zone``)."""
    return ipaddress.ip_address(host.split("%", 1)[0])


@functools.lru_cache(maxsize=_ADDRESSES)
def _v4(raw: bytes) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(raw)


@functools.lru_cache(maxsize=_ADDRESSES)
def _v6(raw: bytes) -> ipaddress.IPv6Address:
    return ipaddress.IPv6Address(raw)


@dataclass(frozen=True)
class Datagram:
    data: bytes
    src: Address
    sport: int
    dst: Address
    ifindex: int
    ttl: int | None
    multihop: bool


class Receiver:
    """One wildcard socket for (family, port); :meth:`datagrams` reads what has arrived."""

    def __init__(self, family: int, port: int) -> None:
        self.family, self.port = family, port
        s = socket.socket(family, socket.SOCK_DGRAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            # Bring-up of thousands of sessions arrives in bursts; the default
            # buffer overflowed (UDP RcvbufErrors, docs/benchmarks.md), and a
            # lost packet there is a lost handshake.
            try:
                s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)
            except OSError:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                s.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVPKTINFO, 1)
                s.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVHOPLIMIT, 1)
                s.bind(("::", port))
            else:
                s.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
                s.setsockopt(socket.IPPROTO_IP, IP_RECVTTL, 1)
                s.bind(("0.0.0.0", port))
            s.setblocking(False)
        except OSError:
            s.close()
            raise
        self.sock = s

    def fileno(self) -> int:
        return self.sock.fileno()

    def datagrams(self) -> Iterator[Datagram]:
        """What has arrived, up to RECV_BATCH, each read from the socket only when asked for:
        what the caller does not take waits in the socket for the next wake-up."""
        for _ in range(RECV_BATCH):
            try:
                data, anc, _flags, addr = self.sock.recvmsg(512, 256)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                # ICMP errors surface on the next recv; they say nothing about BFD.
                if e.errno in (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH):
                    continue
                raise
            yield self._datagram(data, anc, addr)

    def _datagram(self, data: bytes, anc: list, addr: tuple) -> Datagram:
        ttl: int | None = None
        dst: Address | None = None
        ifindex = 0
        for level, kind, value in anc:
            if level == socket.IPPROTO_IP and kind == IP_TTL:
                ttl = int.from_bytes(value[:4], "little") if len(value) >= 4 else value[0]
            elif level == socket.IPPROTO_IP and kind == IP_PKTINFO and len(value) >= 12:
                ifindex = struct.unpack_from("=i", value)[0]
                dst = _v4(value[8:12])
            elif level == socket.IPPROTO_IPV6 and kind == IPV6_HOPLIMIT:
                ttl = struct.unpack_from("=i", value)[0]
            elif level == socket.IPPROTO_IPV6 and kind == IPV6_PKTINFO and len(value) >= 20:
                dst = _v6(value[:16])
                ifindex = struct.unpack_from("=I", value, 16)[0]
        src = _source(addr[0])
        if dst is None:
            dst = _source("::" if self.family == socket.AF_INET6 else "0.0.0.0")
        return Datagram(data, src, addr[1], dst, ifindex, ttl, self.port == PORT_MULTIHOP)

    def close(self) -> None:
        self.sock.close()


class SourcePorts:
    """Hands out per-session source ports; the kernel arbitrates with EADDRINUSE."""

    def __init__(self) -> None:
        self.used: set[int] = set()

    def candidates(self) -> Iterator[int]:
        return (p for p in range(SOURCE_PORT_LAST, SOURCE_PORT_FIRST - 1, -1) if p not in self.used)

    def release(self, port: int) -> None:
        self.used.discard(port)


class Transmitter:
    """The socket one session sends from: fixed source port, TTL 255, bound to its interface."""

    def __init__(
        self,
        ports: SourcePorts,
        *,
        local: Address | None,
        peer: Address,
        interface: str | None,
        multihop: bool,
        dport: int | None = None,
        sport: int | None = None,
        sock: socket.socket | None = None,
        ifindex: int | None = None,
    ) -> None:
        """``sock``: a socket made for this very session (checked by :func:`adoptable`), kept.

        ``ifindex``: the interface's index when the caller knows it (a restore
        of many sessions looks each interface up once).
        """
        self.family = socket.AF_INET6 if peer.version == 6 else socket.AF_INET
        self.peer = peer
        self.dport = dport or (PORT_MULTIHOP if multihop else PORT_SINGLE_HOP)
        if ifindex is None:
            ifindex = socket.if_nametoindex(interface) if interface else 0
        self.ifindex = ifindex
        self._ports = ports
        if sock is not None:
            if sport is None:
                raise ValueError("an adopted socket comes with its source port")
            # Its hop limit and class as this build sets them, whoever made it. Its port is the
            # caller's to mark used (core.engine's join_restored): a takeover's successor makes
            # these ahead of its request, and joins only those the request's state still has.
            self._set_hops_and_class(sock)
            sock.setblocking(False)
            self.sport, self.sock = sport, sock
            return
        s = socket.socket(self.family, socket.SOCK_DGRAM)
        try:
            if self.family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            self._set_hops_and_class(s)
            if interface and not multihop:
                s.setsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, interface.encode())
            self.sport = self._bind(s, local, sport)
            s.setblocking(False)
        except OSError:
            s.close()
            raise
        self.sock = s

    def _set_hops_and_class(self, s: socket.socket) -> None:
        if self.family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, 255)
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, TOS_CS6)
        else:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 255)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, TOS_CS6)

    def _bind(self, s: socket.socket, local: Address | None, prefer: int | None) -> int:
        host = str(local) if local is not None else ("::" if self.family == socket.AF_INET6 else "0.0.0.0")
        # An adopted session keeps the source port its peer and the fast path's reply already use.
        first = [prefer] if prefer and prefer not in self._ports.used else []
        for port in itertools.chain(first, self._ports.candidates()):
            try:
                if self.family == socket.AF_INET6:
                    s.bind((host, port, 0, self.ifindex if local is not None and local.is_link_local else 0))
                else:
                    s.bind((host, port))
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    continue
                raise
            self._ports.used.add(port)
            return port
        raise OSError(errno.EADDRINUSE, "no free BFD source port in 49152-65535")

    def send(self, data: bytes) -> bool:
        dest: tuple = (str(self.peer), self.dport)
        if self.family == socket.AF_INET6:
            dest = (str(self.peer), self.dport, 0, self.ifindex if self.peer.is_link_local else 0)
        try:
            self.sock.sendto(data, dest)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            # No route / link down: BFD's answer to that is detection, not an exception.
            return False
        return True

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self._ports.release(self.sport)
        with contextlib.suppress(OSError):
            self.sock.close()


def adoptable(
    sock: socket.socket, *, local: Address | None, peer: Address, interface: str | None, multihop: bool,
    sport: int,
) -> str | None:  # fmt: skip
    """Why ``sock`` is not the socket :class:`Transmitter` makes for this session; None when it is.

    For a socket another engine passed: a UDP socket of the peer's family
    (IPv6 only, for IPv6), bound to ``local`` (any address when None) and
    ``sport``, and to the interface when single-hop: what cannot change once
    bound. The hop limit and class the Transmitter sets again. ``sock`` may
    claim the wrong family (it was made from a bare descriptor): what the
    kernel reports is what counts.
    """
    try:
        kind = sock.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE)
        name = sock.getsockname()
        device = sock.getsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, IFNAMSIZ).split(b"\0", 1)[0]
    except OSError as e:
        return f"not a socket we can read ({e.strerror or e})"
    if kind != socket.SOCK_DGRAM:
        return f"socket type {kind}, not a datagram socket"
    family = socket.AF_INET6 if peer.version == 6 else socket.AF_INET
    if not isinstance(name, tuple) or len(name) != (4 if family == socket.AF_INET6 else 2):
        return f"bound to {name!r}, not an IPv{peer.version} address"
    if family == socket.AF_INET6 and not sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY):
        return "an IPv6 socket that takes IPv4 too"
    host, port = name[0], name[1]
    want_host = str(local) if local is not None else ("::" if family == socket.AF_INET6 else "0.0.0.0")
    # The kernel's text and ipaddress's agree for nearly every address (a takeover checks a
    # thousand sockets); where they do not (a scope, an IPv4-mapped form) the addresses decide.
    same_host = host == want_host
    if not same_host:
        try:
            same_host = _source(host) == ipaddress.ip_address(want_host)
        except ValueError:
            same_host = False
    if not same_host or port != sport:
        return f"bound to {host} port {port}, not {want_host} port {sport}"
    want_device = interface.encode() if interface and not multihop else b""
    if device != want_device:
        have = device.decode(errors="replace") or "none"
        return f"bound to device {have!r}, not {want_device.decode() or 'none'!r}"
    return None
