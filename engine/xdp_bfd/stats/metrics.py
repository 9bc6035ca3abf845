"""Prometheus exposition (``--metrics HOST:PORT``), served from the engine's own loop.

No thread: a scrape is accepted and answered between two turns of the loop,
from the same stats document SIGUSR1 writes, so metrics and stats JSON cannot
disagree and nothing reads engine state concurrently with the loop. The
document, and then the exposition, are built a slice at a time between the
timers (a turn of steps per period under a deadline reservation): at
thousands of sessions either is tens of milliseconds of Python, which in one
piece would hold the loop past its transmissions. The scraper waits those
periods for its answer.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import functools
import ipaddress
import logging
import socket
from collections.abc import Generator, Iterator
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from ..core.clock import now_us
from ..core.host import Loop, Stats
from ..core.stats_format import run_steps
from .exposition import session_series

log = logging.getLogger("xdp_bfd")

MAX_REQUEST = 8192
MAX_CLIENTS = 8
SEND_DEADLINE_US = 5_000_000  # a client must have read its answer by then
SEND_SLICE = 64 * 1024  # bytes of an answer sent per turn of the loop
ENCODE_SLICE_PARTS = 64  # exposition pieces (a family's slice of sessions each) encoded per step
ENGINE_FAMILIES_PER_STEP = 6  # engine-wide families written per step by prometheus_client
LOOPBACK = "127.0.0.1"  # where an empty HOST binds


def parse_listen(text: str) -> tuple[str, int]:
    """``[HOST]:PORT`` or ``PORT`` → (host, port). No host means loopback: ``:9100`` and ``9100``
    serve 127.0.0.1 only; every address must be asked for, ``0.0.0.0:9100`` or ``[::]:9100``."""
    bad = ValueError(f"--metrics wants [HOST]:PORT or PORT, got {text!r}")
    t = text.strip()
    host, sep, port = t.rpartition(":")
    if not sep:
        host, port = "", t
    if not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise bad
    if host.startswith("[") or host.endswith("]"):
        if not (host.startswith("[") and host.endswith("]") and len(host) >= 2):
            raise bad
        host = host[1:-1]
    return host or LOOPBACK, int(port)


def reach(addr: str) -> str:
    """Who can reach a listening address, for the log line."""
    try:
        ip = ipaddress.ip_address(addr.split("%", maxsplit=1)[0])
    except ValueError:
        return "reachable at that address"
    if ip.is_unspecified:
        return "all addresses"
    if ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback):
        return "loopback only"
    return "this address only, not loopback"


class StatsCollector(Collector):
    """Turns one stats document into metric families."""

    def __init__(self) -> None:
        self.doc: dict[str, Any] | None = None  # set just before each exposition

    def collect(self) -> Iterator[Metric]:
        doc = self.doc
        if doc is None:
            return
        yield GaugeMetricFamily(
            "xdp_bfd_sessions_configured", "Sessions the engine holds", doc["sessions_configured"]
        )
        yield GaugeMetricFamily("xdp_bfd_sessions_up", "Sessions in state Up", doc["sessions_up"])
        yield GaugeMetricFamily(
            "xdp_bfd_kernel_tx", "1 when the XDP fast path is attached", int(doc["kernel_tx"])
        )
        dp = doc.get("dplane")
        if dp is not None:
            yield GaugeMetricFamily(
                "xdp_bfd_dplane_connected",
                "1 while bfdd is connected over bfddp",
                int(bool(dp.get("connected"))),
            )
            if "timers_reports" in dp:
                yield CounterMetricFamily(
                    "xdp_bfd_dplane_timers_reports",
                    "Same-state reports that told bfdd a peer's changed timers",
                    dp["timers_reports"],
                )
            if "refused" in dp:
                yield CounterMetricFamily(
                    "xdp_bfd_dplane_refused",
                    "Dataplane connections refused (a peer not allowed to speak bfddp)",
                    dp["refused"],
                )
        sched = GaugeMetricFamily(
            "xdp_bfd_sched_info", "Scheduling class of the engine loop", labels=["sched"]
        )
        sched.add_metric([doc["sched"]], 1)
        yield sched

        drops = CounterMetricFamily("xdp_bfd_drops", "Packets discarded, by reason", labels=["reason"])
        for reason, n in sorted(doc["counters"]["drop"].items()):
            drops.add_metric([reason], n)
        yield drops
        for name in (
            "xdp_tx",
            "xdp_pass",
            "pass_repeat",
            "poll_repeat",
            "discr_by_hash",
            "auth_steady",
            "echo_tx",
            "echo_rx",
            "tx_early",
            "spread",
            "sbfd_tx",
        ):
            if name in doc["counters"]:
                yield CounterMetricFamily(
                    f"xdp_bfd_{name}", f"Fast-path verdicts: {name}", doc["counters"][name]
                )
        sbfd = doc.get("sbfd_reflector")
        if sbfd is not None:
            yield from _sbfd_families(sbfd)
        clock = doc.get("kernel_clock")
        if clock:
            ticks = CounterMetricFamily(
                "xdp_bfd_kernel_clock_ticks", "Tick frames the kernel transmit clock saw, by outcome",
                labels=["outcome"],
            )  # fmt: skip
            for name, n in sorted(clock["counters"].items()):
                ticks.add_metric([name.removeprefix("tick_") if name != "tick" else "all"], n)
            yield ticks
            yield GaugeMetricFamily(
                "xdp_bfd_kernel_clock_sessions", "Sessions the kernel transmit clock runs for",
                clock["clocked_sessions"],
            )  # fmt: skip

        lag = doc.get("loop_lag")
        if lag:
            buckets = [(str(le / 1e6) if le != "+Inf" else "+Inf", n) for le, n in lag["buckets"]]
            yield HistogramMetricFamily(
                "xdp_bfd_loop_lag_seconds",
                "How late the engine loop ran its timers (starvation shows here, not in a p99)",
                buckets=buckets,
                sum_value=lag["sum_us"] / 1e6,
            )
            if "background" in lag:
                yield GaugeMetricFamily(
                    "xdp_bfd_background_step_max_seconds",
                    "Longest step of background work (stats, exposition) that held the engine loop",
                    lag["background"]["step_max_us"] / 1e6,
                )


def _sbfd_families(sbfd: dict[str, Any]) -> Iterator[Metric]:
    """The S-BFD reflector, per discriminator (its rejects are in xdp_bfd_drops_total, sbfd_* reasons)."""
    answered = CounterMetricFamily(
        "xdp_bfd_sbfd_reflector_answered", "S-BFD packets answered in XDP, by reflector discriminator",
        labels=["discr"],
    )  # fmt: skip
    limited = CounterMetricFamily(
        "xdp_bfd_sbfd_reflector_rate_limited",
        "S-BFD packets dropped by the discriminator's rate limit",
        labels=["discr"],
    )
    up = GaugeMetricFamily(
        "xdp_bfd_sbfd_reflector_up", "1 when the reflector answers Up, 0 AdminDown", labels=["discr"]
    )
    for r in sbfd["reflectors"]:
        labels = [str(r["discr"])]
        answered.add_metric(labels, r["answered"])
        limited.add_metric(labels, r["rate_limited"])
        up.add_metric(labels, int(r["state"] == "up"))
    yield from (answered, limited, up)


class _Families(Collector):
    """Families already built, for prometheus_client to write a few at a time."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def exposition(doc: dict[str, Any], out: list[str]) -> Generator[None, None, None]:
    """One document's exposition into ``out``: the engine-wide families through
    prometheus_client, ENGINE_FAMILIES_PER_STEP a step, then every session's a slice at a time.

    All the engine-wide families in one step were 0.5-1 ms of it (docs/benchmarks.md).
    """
    collector = StatsCollector()
    collector.doc = doc
    families = list(collector.collect())
    for i in range(0, len(families), ENGINE_FAMILIES_PER_STEP):
        yield
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(families[i : i + ENGINE_FAMILIES_PER_STEP]))
        out.append(generate_latest(registry).decode())
    yield
    yield from session_series(doc["sessions"], out)


def exposition_text(doc: dict[str, Any]) -> str:
    """The same in one go (tests)."""
    out: list[str] = []
    run_steps(exposition(doc, out))
    return "".join(out)


class MetricsHost(Loop, Stats, Protocol):
    """What the metrics server uses of the host: its loop and the stats document."""


class MetricsServer:
    """A tiny HTTP/1.0 responder on the engine's selector."""

    def __init__(self, loop: MetricsHost, listen: str) -> None:
        self.loop = loop
        host, port = parse_listen(listen)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and reach(host) == "all addresses":
                # [::] is every address of both families, whatever net.ipv6.bindv6only says.
                self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            self.sock.bind((host, port))
        except BaseException:
            self.sock.close()
            raise
        self.sock.listen(16)
        self.sock.setblocking(False)
        self.pending: dict[socket.socket, bytes] = {}
        self.answering: set[socket.socket] = set()  # waiting for the document
        self.sending: dict[socket.socket, collections.deque[memoryview]] = {}  # the rest of an answer
        loop.watch(self.sock, self._accept)
        bound = self.sock.getsockname()[0]
        shown = f"[{bound}]" if family == socket.AF_INET6 else bound
        log.info("metrics: serving on %s:%d (%s)", shown, port, reach(bound))

    def _accept(self, _now: int) -> None:
        try:
            conn, _ = self.sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        if len(self.pending) + len(self.answering) + len(self.sending) >= MAX_CLIENTS:
            conn.close()
            return
        conn.setblocking(False)
        self.pending[conn] = b""
        self.loop.watch(conn, lambda _now: self._read(conn))

    def _read(self, conn: socket.socket) -> None:
        # Requests arrive over several turns of the loop if they must: a slow
        # client never holds the loop while it writes its request.
        try:
            chunk = conn.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        request = self.pending.get(conn, b"") + chunk
        if chunk and b"\r\n\r\n" not in request and len(request) < MAX_REQUEST:
            self.pending[conn] = request
            return
        self._finish(conn)
        if not chunk or b"\r\n\r\n" not in request:
            with contextlib.suppress(OSError):
                conn.close()  # gone before it asked, or asked too much
            return
        path = request.split(b" ", 2)[1] if request.count(b" ") >= 2 else b"/"
        if path.split(b"?")[0] != b"/metrics":
            self._send(conn, b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            return
        self.answering.add(conn)
        self.loop.want_stats(functools.partial(self._answer, conn))

    def _answer(self, conn: socket.socket, doc: dict[str, Any]) -> Generator[None, None, None]:
        """The exposition, written a slice at a time like the document (stats.exposition), then sent."""
        if conn not in self.answering:
            return  # closed meanwhile (engine stopping)
        parts: list[str] = []
        yield from exposition(doc, parts)
        # Encoded and sent in pieces: joined, 4096 sessions' answer (4 MB) was one step of
        # several milliseconds (docs/benchmarks.md).
        body: list[bytes] = []
        for i in range(0, len(parts), ENCODE_SLICE_PARTS):
            yield
            body += [part.encode() for part in parts[i : i + ENCODE_SLICE_PARTS]]
        if conn not in self.answering:
            return
        self.answering.discard(conn)
        length = sum(map(len, body))
        head = f"HTTP/1.0 200 OK\r\nContent-Type: {CONTENT_TYPE_LATEST}\r\nContent-Length: {length}\r\n\r\n"
        self._send(conn, [head.encode(), *body])

    def _send(self, conn: socket.socket, response: bytes | list[bytes]) -> None:
        # Never a blocking send: a client that stops reading (a stuck scraper, or
        # any local user on purpose) would hold the loop that serves the sessions.
        # What the socket buffer does not take is written as the client reads,
        # and a client that has not taken it all within SEND_DEADLINE_US is dropped.
        pieces = [response] if isinstance(response, bytes) else response
        self.sending[conn] = collections.deque(memoryview(p) for p in pieces if p)
        self._write(conn)
        if conn in self.sending:
            self.loop.watch(conn, lambda _now: self._write(conn), read=False, write=True)
            self.loop.call_at(now_us() + SEND_DEADLINE_US, lambda _now: self._give_up(conn))

    def _write(self, conn: socket.socket) -> None:
        """Up to SEND_SLICE bytes of the answer, as much as the socket takes: a client that reads
        fast is not a reason to copy megabytes in one turn of the loop."""
        left = self.sending.get(conn)
        if left is None:
            return
        room = SEND_SLICE
        try:
            while left and room:
                n = conn.send(left[0][:room])
                room -= n
                if n == len(left[0]):
                    left.popleft()
                else:
                    left[0] = left[0][n:]
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            if e.errno not in (errno.EPIPE, errno.ECONNRESET, None):
                log.debug("metrics: %s", e)
        else:
            if left:
                return  # the rest when the loop comes round (the socket is still watched)
        self._hang_up(conn)

    def _give_up(self, conn: socket.socket) -> None:
        if conn in self.sending:
            log.debug("metrics: a client took too long to read its answer; closed")
            self._hang_up(conn)

    def _hang_up(self, conn: socket.socket) -> None:
        self.sending.pop(conn, None)
        self.loop.unwatch(conn)
        with contextlib.suppress(OSError):
            conn.close()

    def _finish(self, conn: socket.socket) -> None:
        self.pending.pop(conn, None)
        self.loop.unwatch(conn)

    def close(self) -> None:
        for conn in list(self.pending):
            self._finish(conn)
            conn.close()
        for conn in list(self.answering):
            self.answering.discard(conn)
            conn.close()
        for conn in list(self.sending):
            self._hang_up(conn)
        self.loop.unwatch(self.sock)
        self.sock.close()
