"""Who is on the other end of a bfddp socket, and whether that user may be the dataplane.

bfddp has no authentication: whoever reaches the port can add and delete
sessions, or hold the one dataplane slot and keep bfdd out. The kernel knows
who owns each end of a local socket, so the engine asks it before a
connection counts as bfdd:

* TCP (loopback): the socket diagnostics of the other end, looked up by the
  exact 4-tuple over ``NETLINK_SOCK_DIAG`` (``inet_diag``, IPv4 and IPv6):
  its owner's uid and its inode, from which the process is found in
  ``/proc``. In connect mode the other end is bfdd's accepted socket (whose
  owner is its listener's); while the kernel still holds it as a request
  (a SYN_RECV entry carries no owner) the listener on that port answers.
* unix: ``SO_PEERCRED`` (the peer's uid and pid at connect or listen time).

The netlink messages are built and parsed here with :mod:`struct` — a few
dozen bytes each way — so the engine needs no netlink library (pyroute2 is a
test-only dependency). A lookup that gets no usable answer refuses.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import pwd
import socket
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..core.errors import UsageError

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1

# include/net/tcp_states.h
TCP_ESTABLISHED, TCP_SYN_SENT, TCP_SYN_RECV, TCP_FIN_WAIT1, TCP_FIN_WAIT2 = 1, 2, 3, 4, 5
TCP_TIME_WAIT, TCP_CLOSE, TCP_CLOSE_WAIT, TCP_LAST_ACK, TCP_LISTEN, TCP_CLOSING = 6, 7, 8, 9, 10, 11
# States of a full socket, whose owner the kernel reports. A TIME_WAIT or a
# SYN_RECV (request) entry reports uid 0 for want of an owner: never root.
OWNED_STATES = frozenset(
    {TCP_ESTABLISHED, TCP_FIN_WAIT1, TCP_FIN_WAIT2, TCP_CLOSE_WAIT, TCP_LAST_ACK, TCP_CLOSING}
)
INET_DIAG_NOCOOKIE = 0xFFFFFFFF

NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid (host order)
# inet_diag_sockid: ports and addresses in network order, ifindex and cookie in host order.
SOCKID = struct.Struct("!HH16s16s")
SOCKID_TAIL = struct.Struct("=III")  # if, cookie[2]
REQ_HEAD = struct.Struct("=BBBxI")  # family, protocol, ext, pad, states
MSG_HEAD = struct.Struct("=BBBB")  # family, state, timer, retrans
MSG_TAIL = struct.Struct("=IIIII")  # expires, rqueue, wqueue, uid, inode
SOCKID_LEN = SOCKID.size + SOCKID_TAIL.size  # 48
DIAG_MSG_LEN = MSG_HEAD.size + SOCKID_LEN + MSG_TAIL.size  # 72

DIAG_TIMEOUT_S = 0.5  # the kernel answers at once; this only bounds a broken one
DEFAULT_ALLOWED = ("frr", "root")


class CredentialError(Exception):
    """No trustworthy answer about the other end: the connection is refused."""


@dataclass(frozen=True)
class Endpoint:
    """One end of a TCP connection."""

    addr: ipaddress.IPv4Address | ipaddress.IPv6Address
    port: int

    @classmethod
    def of(cls, sockaddr: tuple[object, ...]) -> Endpoint:
        addr = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        port = sockaddr[1]
        assert isinstance(port, int)
        return cls(_unmapped(addr), port)

    def __str__(self) -> str:
        return f"[{self.addr}]:{self.port}" if self.addr.version == 6 else f"{self.addr}:{self.port}"


@dataclass(frozen=True)
class DiagAnswer:
    """What ``inet_diag`` says of one socket."""

    family: int
    state: int
    local: Endpoint  # the socket's own address (idiag_src)
    remote: Endpoint  # its peer (idiag_dst)
    uid: int
    inode: int


@dataclass(frozen=True)
class Peer:
    """Who owns the other end: a uid and, when it can be read, the process."""

    uid: int
    pid: int | None = None
    comm: str | None = None
    inode: int = 0  # the TCP socket's inode, to find the process by (0: none, or unix)
    root_name: str | None = None  # the uid's name in the process's own root (a chroot's frr)

    def describe(self) -> str:
        """``uid 65534 (pid 1234, python3)``: for a refusal."""
        if self.pid is None:
            return f"uid {self.uid} (pid unknown)"
        return f"uid {self.uid} (pid {self.pid}, {self.comm or '?'})"

    def user(self) -> str:
        """``frr (uid 103)`` (``uid 997`` without a name), with the pid when known: for an accepted peer."""
        pid = f", pid {self.pid}" if self.pid is not None else ""
        if self.root_name is not None:
            return f"{self.root_name} (uid {self.uid} in its own root{pid})"
        name = user_name(self.uid)
        return f"uid {self.uid}{pid}" if name == str(self.uid) else f"{name} (uid {self.uid}{pid})"


# --- the allow list ------------------------------------------------------------------------


def parse_allow_users(text: str) -> tuple[int, ...]:
    """``--dplane-allow USER[,USER...]``: names or numeric uids, resolved now (unknown name: usage error)."""
    uids: list[int] = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            raise UsageError(f"--dplane-allow {text!r}: empty user name")
        uid = resolve_user(item)
        if uid not in uids:
            uids.append(uid)
    return tuple(uids)


def resolve_user(name: str) -> int:
    if name.isdigit():
        return int(name)
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        raise UsageError(f"--dplane-allow: no such user {name!r}") from None


def allowed_names(text: str | None) -> tuple[str, ...]:
    """The user names of ``--dplane-allow`` (default ``frr`` and root): also honoured in a peer's own root."""
    if text is None:
        return DEFAULT_ALLOWED
    return tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip() and not x.strip().isdigit()))


def default_allowed() -> tuple[int, ...]:
    """FRR's ``frr`` user (when it exists: a host without FRR has none) and root."""
    uids = []
    for name in DEFAULT_ALLOWED:
        with contextlib.suppress(KeyError):
            uids.append(pwd.getpwnam(name).pw_uid)
    return tuple(dict.fromkeys([*uids, 0]))


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


# --- inet_diag: build and parse --------------------------------------------------------------


def _unmapped(
    addr: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def _packed(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bytes:
    return addr.packed.ljust(16, b"\0")


def build_request(local: Endpoint, remote: Endpoint, *, seq: int = 1) -> bytes:
    """A SOCK_DIAG_BY_FAMILY request for the one TCP socket bound to ``local`` and connected to ``remote``.

    Without NLM_F_DUMP the kernel looks the socket up exactly, as a packet
    from ``remote`` to ``local`` would find it (an established socket, else
    the listener on ``local``); ``remote`` ``0.0.0.0:0`` asks for the listener.
    """
    if local.addr.version != remote.addr.version:
        raise ValueError(f"{local} and {remote} are not one family")
    family = socket.AF_INET if local.addr.version == 4 else socket.AF_INET6
    body = (
        REQ_HEAD.pack(family, socket.IPPROTO_TCP, 0, 0xFFFFFFFF)
        + SOCKID.pack(local.port, remote.port, _packed(local.addr), _packed(remote.addr))
        + SOCKID_TAIL.pack(0, INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE)
    )
    return NLMSGHDR.pack(NLMSGHDR.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, seq, 0) + body


def parse_answer(data: bytes, *, seq: int = 1) -> DiagAnswer:
    """The kernel's answer to :func:`build_request`: one inet_diag_msg, or an error (CredentialError)."""
    off = 0
    while off + NLMSGHDR.size <= len(data):
        length, mtype, _flags, mseq, _pid = NLMSGHDR.unpack_from(data, off)
        if length < NLMSGHDR.size or off + length > len(data):
            raise CredentialError(f"malformed netlink answer (length {length})")
        body = data[off + NLMSGHDR.size : off + length]
        off += (length + 3) & ~3
        if mseq != seq:
            continue
        if mtype == NLMSG_ERROR:
            code = -struct.unpack_from("=i", body)[0] if len(body) >= 4 else errno.EIO
            if code == 0:
                continue  # an acknowledgement, not an answer
            raise CredentialError(f"socket diagnostics: {os.strerror(code)}")
        if mtype == NLMSG_DONE:
            break
        if mtype != SOCK_DIAG_BY_FAMILY or len(body) < DIAG_MSG_LEN:
            raise CredentialError(f"unexpected netlink message type {mtype} ({len(body)} bytes)")
        return _diag_msg(body)
    raise CredentialError("no socket diagnostics answer")


def _diag_msg(body: bytes) -> DiagAnswer:
    family, state, _timer, _retrans = MSG_HEAD.unpack_from(body, 0)
    sport, dport, src, dst = SOCKID.unpack_from(body, MSG_HEAD.size)
    _expires, _rq, _wq, uid, inode = MSG_TAIL.unpack_from(body, MSG_HEAD.size + SOCKID_LEN)
    if family == socket.AF_INET:
        s: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.IPv4Address(src[:4])
        d: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.IPv4Address(dst[:4])
    elif family == socket.AF_INET6:
        s, d = _unmapped(ipaddress.IPv6Address(src)), _unmapped(ipaddress.IPv6Address(dst))
    else:
        raise CredentialError(f"socket diagnostics answer for address family {family}")
    return DiagAnswer(family, state, Endpoint(s, sport), Endpoint(d, dport), uid, inode)


def diag_query(local: Endpoint, remote: Endpoint) -> DiagAnswer:
    """Ask the kernel (this network namespace's) about one TCP socket; CredentialError when it cannot say."""
    try:
        nl = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG)
    except OSError as e:
        raise CredentialError(f"no socket diagnostics: {e.strerror or e}") from None
    with nl:
        try:
            nl.settimeout(DIAG_TIMEOUT_S)
            nl.send(build_request(local, remote))
            data = nl.recv(8192)
        except OSError as e:
            raise CredentialError(f"socket diagnostics: {e.strerror or e}") from None
    return parse_answer(data)


# --- the two ends of a TCP connection ------------------------------------------------------


Query = Callable[[Endpoint, Endpoint], DiagAnswer]


def connecting_tcp_peer(ours: Endpoint, theirs: Endpoint, query: Query = diag_query) -> Peer:
    """Listen mode: the owner of the socket that connected to us (``theirs`` → ``ours``).

    ``query`` is the kernel's (:func:`diag_query`); the tests give answers captured from it.
    """
    a = query(theirs, ours)
    _check_end(a, theirs, ours)
    return Peer(a.uid, inode=a.inode)


def listening_tcp_peer(ours: Endpoint, theirs: Endpoint, query: Query = diag_query) -> Peer:
    """Connect mode: the owner of what accepted our connection (bfdd's socket, or its listener)."""
    a = query(theirs, ours)
    zero = Endpoint(ipaddress.ip_address("::" if theirs.addr.version == 6 else "0.0.0.0"), 0)
    if a.state == TCP_SYN_RECV:
        # Not accepted by the kernel's count yet: the listener it belongs to owns it.
        a = query(theirs, zero)
        if a.state != TCP_LISTEN or a.local not in (theirs, Endpoint(zero.addr, theirs.port)):
            raise CredentialError(f"no listener found on {theirs}")
        return Peer(a.uid, inode=a.inode)
    _check_end(a, theirs, ours)
    # The listener's inode names the process (an accepted socket has none until
    # bfdd accept()s it) and stays the same from one connection to the next.
    inode = a.inode
    with contextlib.suppress(CredentialError):
        lst = query(theirs, zero)
        if lst.state == TCP_LISTEN and lst.uid == a.uid and lst.inode:
            inode = lst.inode
    return Peer(a.uid, inode=inode)


def _check_end(a: DiagAnswer, local: Endpoint, remote: Endpoint) -> None:
    if (a.local, a.remote) != (local, remote):
        raise CredentialError(f"socket diagnostics answered for {a.local} -> {a.remote}")
    if a.state not in OWNED_STATES:
        raise CredentialError(f"the socket {local} -> {remote} is in TCP state {a.state}, without an owner")


# --- unix sockets ----------------------------------------------------------------------------

UCRED = struct.Struct("=iII")  # pid, uid, gid


def unix_peer(sock: socket.socket) -> Peer:
    """``SO_PEERCRED``: who connected (listen mode) or who listens (connect mode)."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, UCRED.size)
    except OSError as e:
        raise CredentialError(f"SO_PEERCRED: {e.strerror or e}") from None
    pid, uid, _gid = UCRED.unpack(raw)
    if uid == 0xFFFFFFFF:  # the kernel's overflow uid for a peer without credentials
        raise CredentialError("SO_PEERCRED: the peer has no credentials")
    return Peer(uid, pid=pid or None, comm=process_name(pid) if pid else None)


# --- the process behind a socket -------------------------------------------------------------

PROC = "/proc"


def process_name(pid: int, proc: str = PROC) -> str | None:
    try:
        with open(f"{proc}/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip() or None
    except OSError:
        return None


def socket_owner_pid(inode: int, proc: str = PROC, *, limit: int = 100_000) -> int | None:
    """The first process holding socket ``inode`` open (a scan of ``/proc/*/fd``, at most ``limit`` fds).

    None when no process holds it, or when we may not look (another user's
    fds need CAP_SYS_PTRACE). Run only once per connection, and rate-limited
    for refused ones (see :class:`~.gate.Gate`).
    """
    if inode <= 0:
        return None
    target = f"socket:[{inode}]"
    seen = 0
    for pid in _pids(proc):
        fds = f"{proc}/{pid}/fd"
        try:
            names = os.listdir(fds)
        except OSError:
            continue
        for fd in names:
            seen += 1
            if seen > limit:
                return None
            with contextlib.suppress(OSError):
                if os.readlink(f"{fds}/{fd}") == target:
                    return pid
    return None


def _pids(proc: str) -> Iterable[int]:
    try:
        names = os.listdir(proc)
    except OSError:
        return ()
    return sorted(int(n) for n in names if n.isdigit())


def name_in_own_root(pid: int, uid: int, proc: str = PROC) -> str | None:
    """``uid``'s name in the root filesystem process ``pid`` runs in, when that root can be trusted.

    FRR run from a root of its own (a chroot, as a second release is run
    beside the host's) drops to *that* root's frr user, whose uid the host
    may not know or may give to someone else. The name counts only when the
    process runs in a root other than ours, shares our user namespace (an unprivileged user cannot make a
    namespace of its own) and its root and that root's /etc/passwd belong to
    root and nobody else may write them (so only root could have written
    the name): otherwise None.
    """
    try:
        if os.readlink(f"{proc}/{pid}/ns/user") != os.readlink(f"{proc}/self/ns/user"):
            return None
        root = os.stat(f"{proc}/{pid}/root")
        ours = os.stat(f"{proc}/self/root")
        if (root.st_dev, root.st_ino) == (ours.st_dev, ours.st_ino):
            return None  # our own root: the uid was judged by its number already
        if not _root_only(root):
            return None
        with open(f"{proc}/{pid}/root/etc/passwd", encoding="utf-8", errors="replace") as f:
            if not _root_only(os.fstat(f.fileno())):
                return None
            text = f.read(1 << 20)
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) > 2 and parts[2] == str(uid):
            return parts[0] or None
    return None


def _root_only(st: os.stat_result) -> bool:
    return st.st_uid == 0 and not st.st_mode & 0o022


def with_process(peer: Peer, proc: str = PROC) -> Peer:
    """``peer`` with its pid and process name filled in from its socket's inode, where they can be read."""
    if peer.pid is not None or not peer.inode:
        return peer
    pid = socket_owner_pid(peer.inode, proc)
    if pid is None:
        return peer
    return Peer(peer.uid, pid=pid, comm=process_name(pid, proc), inode=peer.inode)


__all__ = [
    "DEFAULT_ALLOWED",
    "CredentialError",
    "DiagAnswer",
    "Endpoint",
    "Peer",
    "allowed_names",
    "build_request",
    "connecting_tcp_peer",
    "default_allowed",
    "diag_query",
    "listening_tcp_peer",
    "name_in_own_root",
    "parse_allow_users",
    "parse_answer",
    "resolve_user",
    "unix_peer",
    "user_name",
    "with_process",
]
