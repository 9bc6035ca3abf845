"""Network namespaces and veth pairs for integration tests.

Names carry the creating pid (``xbt-<pid>-<n>-<role>``) so that two test runs
never collide and a later run can tell a leftover of a dead run from a live
one (:func:`sweep_stale`). Interfaces are created directly inside the test
namespaces, never in the host namespace.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from pyroute2 import NetNS, netns

from xdp_bfd.fastpath.loop import LOOP_A

from .wait import wait_until

PREFIX = "xbt-"
TICK_LOOP = LOOP_A  # the engine's transmit-clock loop (fastpath/loop.py)
CLONE_NEWNET = 0x40000000
_counter = itertools.count(1)
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


@contextlib.contextmanager
def entered(name: str) -> Iterator[None]:
    """Run the body with this thread inside namespace ``name``.

    Sockets created in the body stay in that namespace after it returns, which
    is how tests send and receive from a namespace without a subprocess.
    """
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)
        os.close(target)


def pids_in(name: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, check=False)
    return [int(p) for p in out.stdout.split()]


def _kill_all(name: str, timeout: float = 5.0) -> None:
    """SIGKILL every process in the namespace and wait (bounded) for them to go."""
    pids = pids_in(name)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if pids:
        wait_until(lambda: not pids_in(name), timeout=timeout, what=f"processes in {name} to exit")


def remove(name: str) -> None:
    _kill_all(name)
    # An engine killed with its kernel clock running leaves the loop behind
    # (by design: a --pin successor adopts it). Its frames in flight hold the
    # socket that sent them, and the socket holds this namespace: deleted
    # with the loop in it, the namespace is never freed and the frames
    # circulate for the machine's lifetime, a softirq load on one CPU that
    # every later timing test pays for. The loop goes first.
    subprocess.run(["ip", "-n", name, "link", "del", TICK_LOOP], capture_output=True, check=False)
    with contextlib.suppress(FileNotFoundError, OSError):
        netns.remove(name)


def ours() -> list[str]:
    return [n for n in netns.listnetns() if n.startswith(PREFIX)]


def _dead_run(name: str) -> bool:
    try:
        pid = int(name[len(PREFIX) :].split("-", 1)[0])
    except ValueError:
        return False
    return pid != os.getpid() and not os.path.exists(f"/proc/{pid}")


def sweep_stale(private_dirs: str = "/run/xdp-bfd-tests") -> list[str]:
    """Remove namespaces (and FRR's private directories) left by runs whose process is gone."""
    removed = []
    for name in ours():
        if _dead_run(name):
            remove(name)
            removed.append(name)
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(private_dirs):
            if entry.name.startswith(PREFIX) and _dead_run(entry.name):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
    return removed


@dataclass
class Namespace:
    name: str

    def run(
        self, argv: list[str], *, check: bool = True, timeout: float = 30.0
    ) -> subprocess.CompletedProcess:
        # Output goes through files, not pipes: a daemon that detaches but
        # keeps the stdout it was started with (FRR 10.x) would otherwise hold
        # the pipe open and make this wait for an end of file that never comes.
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            proc = subprocess.run(
                ["ip", "netns", "exec", self.name, *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                text=True,
                check=False,
                timeout=timeout,
            )
            out.seek(0)
            err.seek(0)
            proc.stdout, proc.stderr = out.read(), err.read()
        if check:
            proc.check_returncode()
        return proc

    def popen(self, argv: list[str], **kw: object) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.name, *argv], **kw)  # type: ignore[call-overload]

    def sysctl(self, key: str, value: str | int) -> None:
        self.run(["sysctl", "-qw", f"{key}={value}"])

    def ipr(self) -> NetNS:
        return NetNS(self.name)

    def index(self, ifname: str) -> int:
        with self.ipr() as ns:
            found = ns.link_lookup(ifname=ifname)
        if not found:
            raise LookupError(f"no interface {ifname} in {self.name}")
        return found[0]

    def mac(self, ifname: str) -> str:
        with self.ipr() as ns:
            return ns.get_links(self.index(ifname))[0].get_attr("IFLA_ADDRESS")

    def link_stats(self, ifname: str) -> dict[str, int]:
        with self.ipr() as ns:
            return dict(ns.get_links(self.index(ifname))[0].get_attr("IFLA_STATS64"))

    def snmp(self) -> dict[str, int]:
        """Counters of /proc/net/snmp and snmp6 in this namespace (``Udp.InCsumErrors``…)."""
        out: dict[str, int] = {}
        text = self.run(["cat", "/proc/net/snmp", "/proc/net/snmp6"]).stdout.splitlines()
        it = iter(text)
        for line in it:
            if ":" in line and not line.split(":", 1)[1].strip()[:1].isdigit():
                proto, names = line.split(":", 1)
                values = next(it).split(":", 1)[1].split()
                out.update({f"{proto}.{n}": int(v) for n, v in zip(names.split(), values, strict=False)})
            elif line.strip():
                key, _, value = line.partition(" ")
                with contextlib.suppress(ValueError):
                    out[key] = int(value.strip())
        return out

    def socket(self, family: int, kind: int, proto: int = 0) -> socket.socket:
        with entered(self.name):
            return socket.socket(family, kind, proto)


@dataclass
class Link:
    """One end of a veth pair, with the addresses assigned to it."""

    ns: Namespace
    ifname: str
    v4: ipaddress.IPv4Interface
    v6: ipaddress.IPv6Interface

    @property
    def ip4(self) -> ipaddress.IPv4Address:
        return self.v4.ip

    @property
    def ip6(self) -> ipaddress.IPv6Address:
        return self.v6.ip

    @property
    def mac(self) -> str:
        return self.ns.mac(self.ifname)


@dataclass
class Topology:
    """Namespaces and veth pairs of one test, torn down by :meth:`close`."""

    namespaces: list[Namespace] = field(default_factory=list)
    _subnet: itertools.count = field(default_factory=lambda: itertools.count(1))

    def namespace(self, role: str) -> Namespace:
        name = f"{PREFIX}{os.getpid()}-{next(_counter)}-{role}"
        netns.create(name)
        ns = Namespace(name)
        self.namespaces.append(ns)
        # Addresses must be usable at once: no duplicate address detection.
        for conf in ("all", "default"):
            ns.sysctl(f"net.ipv6.conf.{conf}.accept_dad", 0)
        with ns.ipr() as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
        return ns

    def veth(self, a: Namespace, a_if: str, b: Namespace, b_if: str) -> tuple[Link, Link]:
        """A veth pair between ``a`` and ``b`` on the next 198.19.N.0/24 and fd00:bfd:N::/64."""
        n = next(self._subnet)
        with a.ipr() as ipr:
            ipr.link("add", ifname=a_if, kind="veth", peer={"ifname": b_if, "net_ns_fd": b.name})
        ends = (
            Link(
                a,
                a_if,
                ipaddress.IPv4Interface(f"198.19.{n}.1/24"),
                ipaddress.IPv6Interface(f"fd00:bfd:{n}::1/64"),
            ),
            Link(
                b,
                b_if,
                ipaddress.IPv4Interface(f"198.19.{n}.2/24"),
                ipaddress.IPv6Interface(f"fd00:bfd:{n}::2/64"),
            ),
        )
        for end in ends:
            end.ns.sysctl(f"net.ipv6.conf.{end.ifname}.accept_dad", 0)
            with end.ns.ipr() as ipr:
                idx = ipr.link_lookup(ifname=end.ifname)[0]
                ipr.addr("add", index=idx, address=str(end.v4.ip), prefixlen=end.v4.network.prefixlen)
                ipr.addr("add", index=idx, address=str(end.v6.ip), prefixlen=end.v6.network.prefixlen)
                ipr.link("set", index=idx, state="up")
        for end in ends:
            wait_until(lambda e=end: _carrier(e), timeout=5, what=f"carrier on {end.ifname}")
        return ends

    def bridged(self, a: Namespace, a_if: str, b: Namespace, b_if: str) -> tuple[Link, Namespace]:
        """``a`` and ``b`` on one plain bridge in a namespace of its own: ``a_if`` and ``b_if``
        keep the addresses of their veth pairs, the bridge ports (``m-a``, ``m-b``) have none.

        Returns ``a_if``'s end and the bridge's namespace: a capture on ``m-a`` sees the wire
        between two XDP interfaces, where one on either would miss what its program consumes.
        """
        m = self.namespace("m")
        a_end, _ = self.veth(a, a_if, m, "m-a")
        self.veth(m, "m-b", b, b_if)
        m.run(["ip", "link", "add", "br0", "type", "bridge"])
        for port in ("m-a", "m-b"):
            m.run(["ip", "addr", "flush", "dev", port])
            m.run(["ip", "link", "set", port, "master", "br0"])
        m.run(["ip", "link", "set", "br0", "up"])
        return a_end, m

    def close(self) -> None:
        # Processes first (all of them, in every namespace), then the namespaces:
        # a daemon killed after its namespace is gone would linger unnoticed.
        for ns in self.namespaces:
            _kill_all(ns.name)
        for ns in reversed(self.namespaces):
            remove(ns.name)
        self.namespaces.clear()


def _carrier(link: Link) -> bool:
    with link.ns.ipr() as ipr:
        attrs = ipr.get_links(ipr.link_lookup(ifname=link.ifname)[0])[0]
        return attrs.get_attr("IFLA_OPERSTATE") == "UP"


def monotonic_us() -> int:
    return time.monotonic_ns() // 1000


XDP_PASS_PROGRAM = "int xdp_pass(struct xdp_md *ctx) { return XDP_PASS; }"


def attach_xdp_pass(ns: Namespace, ifname: str) -> None:
    """Attach a native XDP_PASS program to ``ifname`` in ``ns``.

    Native XDP_TX on veth only delivers to a peer end that runs XDP itself
    (testbed.md); this is that program. It stays attached until the veth is
    deleted with its namespace.
    """
    code = (
        "from bcc import BPF\n"
        f"b = BPF(text={XDP_PASS_PROGRAM!r})\n"
        f"b.attach_xdp({ifname!r}, b.load_func(b'xdp_pass', BPF.XDP), BPF.XDP_FLAGS_DRV_MODE)\n"
    )
    import sys  # noqa: PLC0415

    ns.run([sys.executable, "-c", code], timeout=60)


def xdp_attached(ns: Namespace, ifname: str) -> bool:
    return "prog/xdp" in ns.run(["ip", "-d", "link", "show", "dev", ifname]).stdout
