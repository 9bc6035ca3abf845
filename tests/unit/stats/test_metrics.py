"""The stats document as Prometheus families: the dataplane's counters."""

from __future__ import annotations

import logging
import socket
import time

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from xdp_bfd.core.stats_format import run_steps
from xdp_bfd.stats import metrics
from xdp_bfd.stats.exposition import session_series
from xdp_bfd.stats.metrics import exposition_text, parse_listen, reach


def _samples(doc: dict) -> list:
    text = exposition_text(doc)
    return [s for f in text_string_to_metric_families(text) for s in f.samples]


def _exposed(doc: dict) -> dict:
    return {s.name: s.value for s in _samples(doc)}


def _doc(dplane: dict | None) -> dict:
    return {
        "sessions_configured": 0,
        "sessions_up": 0,
        "kernel_tx": False,
        "dplane": dplane,
        "sched": "other",
        "counters": {"drop": {}},
        "sessions": [],
        "loop_lag": None,
    }


def test_timers_reports_are_a_counter_beside_the_connection():
    got = _exposed(_doc({"connected": True, "timers_reports": 3}))
    assert (got["xdp_bfd_dplane_connected"], got["xdp_bfd_dplane_timers_reports_total"]) == (1.0, 3.0)


def test_without_a_dataplane_neither_is_exposed():
    got = _exposed(_doc(None))
    assert "xdp_bfd_dplane_connected" not in got and "xdp_bfd_dplane_timers_reports_total" not in got


def test_dplane_refused_is_a_counter_when_the_section_has_it():
    got = _exposed(_doc({"connected": False, "refused": 4}))
    assert got["xdp_bfd_dplane_refused_total"] == 4.0
    assert got["xdp_bfd_dplane_connected"] == 0.0


def _exposed_labelled(doc: dict) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in _samples(doc)}


def test_the_kernel_clock_is_exposed_by_outcome_and_per_session():
    doc = _doc(None)
    doc["kernel_clock"] = {
        "loop": "xbfd-tick-a",
        "clocked_sessions": 1,
        "counters": {"tick": 10, "tick_sent": 7, "tick_skipped": 3},
    }
    doc["sessions"] = [
        {"local": "198.19.1.1", "peer": "198.19.1.3", "ifname": "veth-a", "multihop": False, "state": "up",
         "flaps": 0, "kernel_tx_packets": 7, "user_tx_packets": 0, "rx_packets": 9, "kernel_clock": True}
    ]  # fmt: skip
    got = _exposed_labelled(doc)
    assert got[("xdp_bfd_kernel_clock_ticks_total", (("outcome", "all"),))] == 10.0
    assert got[("xdp_bfd_kernel_clock_ticks_total", (("outcome", "sent"),))] == 7.0
    assert got[("xdp_bfd_kernel_clock_ticks_total", (("outcome", "skipped"),))] == 3.0
    assert got[("xdp_bfd_kernel_clock_sessions", ())] == 1.0
    labels = (("ifname", "veth-a"), ("local", "198.19.1.1"), ("multihop", "false"), ("peer", "198.19.1.3"))
    assert got[("xdp_bfd_session_kernel_clock", labels)] == 1.0
    # Without the clock (--kernel-clock off, no --kernel-tx) no clock family but the per-session 0.
    doc.pop("kernel_clock")
    doc["sessions"][0]["kernel_clock"] = False
    got = _exposed_labelled(doc)
    assert not any(name.startswith("xdp_bfd_kernel_clock") for name, _ in got)
    assert got[("xdp_bfd_session_kernel_clock", labels)] == 0.0


def test_our_echo_is_exposed_per_session_by_outcome_and_round_trip():
    doc = _doc(None)
    doc["counters"]["echo_rx"] = 41
    base = {"local": "198.19.1.1", "peer": "198.19.1.2", "ifname": "veth-d", "multihop": False, "state": "up",
            "flaps": 0, "kernel_tx_packets": 7, "user_tx_packets": 0, "rx_packets": 9}  # fmt: skip
    echo = {"active": True, "interval_ms": 20.0, "sent": 45, "returned": 41, "lost": 2, "pending": 2,
            "skipped": 0, "send_errors": 0, "rtt_us": {"min": 50.0, "mean": 80.5, "p99": 300.0, "max": 900.0},
            "last_return_age_ms": 3.0, "alive": True}  # fmt: skip
    doc["sessions"] = [{**base, "echo": echo}, {**base, "peer": "198.19.1.3"}]
    got = _exposed_labelled(doc)
    labels = {"ifname": "veth-d", "local": "198.19.1.1", "multihop": "false", "peer": "198.19.1.2"}

    def key(**more: str) -> tuple:
        return tuple(sorted({**labels, **more}.items()))

    for outcome, n in (("sent", 45), ("returned", 41), ("lost", 2)):
        assert got[("xdp_bfd_session_echo_probes_total", key(outcome=outcome))] == n
    assert got[("xdp_bfd_session_echo_rtt_seconds", key(stat="p99"))] == pytest.approx(300e-6)
    assert got[("xdp_bfd_session_echo_alive", key())] == 1.0
    assert got[("xdp_bfd_echo_rx_total", ())] == 41.0
    # A session without echo has no echo series at all (not a zero that would read as "all lost").
    assert not any(dict(k).get("peer") == "198.19.1.3" for name, k in got if "echo" in name)


def test_the_sbfd_reflector_is_exposed_per_discriminator_and_its_rejects_by_reason():
    doc = _doc(None)
    doc["counters"] = {"sbfd_tx": 12, "drop": {"sbfd_unknown": 2, "sbfd_rate_limited": 5}}
    doc["sbfd_reflector"] = {
        "port": 7784,
        "reflectors": [
            {"discr": 456, "state": "up", "answered": 12, "rate_limited": 5},
            {"discr": 7, "state": "admin_down", "answered": 0, "rate_limited": 0},
        ],
    }
    got = _exposed_labelled(doc)
    assert got[("xdp_bfd_sbfd_reflector_answered_total", (("discr", "456"),))] == 12.0
    assert got[("xdp_bfd_sbfd_reflector_rate_limited_total", (("discr", "456"),))] == 5.0
    assert got[("xdp_bfd_sbfd_reflector_up", (("discr", "456"),))] == 1.0
    assert got[("xdp_bfd_sbfd_reflector_up", (("discr", "7"),))] == 0.0
    assert got[("xdp_bfd_sbfd_tx_total", ())] == 12.0
    assert got[("xdp_bfd_drops_total", (("reason", "sbfd_unknown"),))] == 2.0
    # Without the fast path there is no reflector, and no family for it.
    doc.pop("sbfd_reflector")
    assert not any(name.startswith("xdp_bfd_sbfd_reflector") for name, _ in _exposed_labelled(doc))


def test_dplane_refused_is_absent_without_the_key():
    got = _exposed(_doc({"connected": True, "timers_reports": 0}))
    assert "xdp_bfd_dplane_refused_total" not in got
    assert "xdp_bfd_dplane_refused_total" not in _exposed(_doc(None))


# --- where the endpoint listens ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("9100", ("127.0.0.1", 9100)),
        (":9100", ("127.0.0.1", 9100)),
        ("[]:9100", ("127.0.0.1", 9100)),
        (" :9100 ", ("127.0.0.1", 9100)),
        ("127.0.0.1:9100", ("127.0.0.1", 9100)),
        ("0.0.0.0:9100", ("0.0.0.0", 9100)),
        ("[::]:9100", ("::", 9100)),
        ("[::1]:9464", ("::1", 9464)),
        ("192.0.2.7:9100", ("192.0.2.7", 9100)),
        ("localhost:65535", ("localhost", 65535)),
    ],
)
def test_parse_listen_defaults_to_loopback(text, want):
    assert parse_listen(text) == want


@pytest.mark.parametrize(
    "text", ["", ":", "host:", "9100:x", ":0", "0", "65536", ":99999", "[::1:9100", "::1]:9100", "٩١٠٠"]
)
def test_parse_listen_refuses_with_the_text(text):
    with pytest.raises(ValueError, match=r"--metrics wants \[HOST\]:PORT or PORT, got "):
        parse_listen(text)


@pytest.mark.parametrize(
    ("addr", "want"),
    [
        ("127.0.0.1", "loopback only"),
        ("127.0.0.53", "loopback only"),
        ("::1", "loopback only"),
        ("::ffff:127.0.0.1", "loopback only"),
        ("0.0.0.0", "all addresses"),
        ("::", "all addresses"),
        ("192.0.2.7", "this address only, not loopback"),
        ("fe80::1%eth0", "this address only, not loopback"),
    ],
)
def test_reach_names_who_can_connect(addr, want):
    assert reach(addr) == want


class _Loop:
    def __init__(self) -> None:
        self.watched: list = []

    def watch(self, sock, cb, *, read=True, write=False) -> None:
        self.watched.append(sock)

    def unwatch(self, sock) -> None:
        self.watched.remove(sock)


@pytest.mark.parametrize(
    ("listen", "bound", "line"),
    [
        (":0", "127.0.0.1", "metrics: serving on 127.0.0.1:{port} (loopback only)"),
        ("0", None, None),  # port 0 is refused: an operator means a port
        ("127.0.0.1:0", "127.0.0.1", "metrics: serving on 127.0.0.1:{port} (loopback only)"),
        ("0.0.0.0:0", "0.0.0.0", "metrics: serving on 0.0.0.0:{port} (all addresses)"),
        ("[::1]:0", "::1", "metrics: serving on [::1]:{port} (loopback only)"),
        ("[::]:0", "::", "metrics: serving on [::]:{port} (all addresses)"),
    ],
)
def test_server_binds_and_logs_where(listen, bound, line, caplog):
    # Port 0 is refused by parse_listen: pick a free port and ask for it by number.
    if bound is None:
        with pytest.raises(ValueError):
            metrics.MetricsServer(_Loop(), listen)
        return
    fam = socket.AF_INET6 if ":" in bound else socket.AF_INET
    probe = socket.socket(fam, socket.SOCK_STREAM)
    probe.bind((bound, 0))
    port = probe.getsockname()[1]
    probe.close()
    loop = _Loop()
    with caplog.at_level(logging.INFO, logger="xdp_bfd"):
        server = metrics.MetricsServer(loop, listen.replace(":0", f":{port}"))
    try:
        assert server.sock.getsockname()[:2] == (bound, port)
        if bound == "::":
            assert server.sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0
        assert line.format(port=port) in caplog.messages, caplog.messages
        assert loop.watched == [server.sock]
    finally:
        server.close()
    assert loop.watched == []


class _RecordingLoop(_Loop):
    """Also records what is watched for writing and the calls asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.callbacks: dict = {}
        self.calls: list = []

    def watch(self, sock, cb, *, read=True, write=False) -> None:
        if sock not in self.watched:
            self.watched.append(sock)
        self.callbacks[sock] = (cb, read, write)

    def unwatch(self, sock) -> None:
        if sock in self.watched:
            self.watched.remove(sock)
        self.callbacks.pop(sock, None)

    def call_at(self, deadline_us, cb) -> None:
        self.calls.append((deadline_us, cb))


def _connected(server: metrics.MetricsServer, rcvbuf: int = 4096) -> tuple[socket.socket, socket.socket]:
    client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    client.connect(server.sock.getsockname())
    server._accept(0)
    (conn,) = server.pending
    return client, conn


def test_a_client_that_does_not_read_never_holds_the_loop():
    loop = _RecordingLoop()
    server = metrics.MetricsServer(loop, "127.0.0.1:" + str(_free_port()))
    try:
        client, conn = _connected(server)
        big = b"x" * (8 << 20)  # far more than both socket buffers hold
        started = time.monotonic()
        server._send(conn, big)
        assert time.monotonic() - started < 0.2  # returned at once, the rest pending
        assert conn in server.sending and loop.callbacks[conn][1:] == (False, True)
        ((deadline, give_up),) = loop.calls
        assert deadline - metrics.now_us() > 4_000_000
        # The client reads everything, the loop writing whenever the socket takes more.
        client.settimeout(5)
        got = bytearray()
        while len(got) < len(big):
            got += client.recv(1 << 16)
            if conn in server.sending:
                loop.callbacks[conn][0](0)
        assert bytes(got) == big and conn not in server.sending and conn not in loop.watched
        assert client.recv(1) == b""  # closed after the answer
        give_up(0)  # the deadline, after the answer: nothing left to do
        client.close()
    finally:
        server.close()


def test_a_client_that_never_reads_is_dropped_at_the_deadline():
    loop = _RecordingLoop()
    server = metrics.MetricsServer(loop, "127.0.0.1:" + str(_free_port()))
    try:
        client, conn = _connected(server)
        server._send(conn, b"x" * (8 << 20))
        ((_deadline, give_up),) = loop.calls
        give_up(0)
        assert server.sending == {} and conn.fileno() == -1 and conn not in loop.watched
        client.close()
    finally:
        server.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_answer_in_pieces_goes_a_slice_a_turn_and_arrives_whole_in_order():
    """A client that reads at once still gets no more than SEND_SLICE a turn of the loop."""
    loop = _RecordingLoop()
    server = metrics.MetricsServer(loop, "127.0.0.1:" + str(_free_port()))
    try:
        client, conn = _connected(server, rcvbuf=8 << 20)
        pieces = [bytes([65 + i]) * (100_000 + i) for i in range(6)] + [b"", b"end"]
        server._send(conn, pieces)
        client.settimeout(5)
        got, turns = bytearray(), 0
        while conn in server.sending:
            assert turns < 100
            turns += 1
            got += _drain(client)
            loop.callbacks[conn][0](0)
        got += _drain(client)
        while not got.endswith(b"end"):
            got += client.recv(1 << 20)
        assert bytes(got) == b"".join(pieces)
        assert turns >= len(got) // metrics.SEND_SLICE  # one slice a turn, not everything at once
        assert client.recv(1) == b""
        client.close()
    finally:
        server.close()


def _drain(client: socket.socket) -> bytes:
    """What the client has been sent so far, without waiting for more."""
    out = bytearray()
    client.setblocking(False)
    try:
        while chunk := client.recv(1 << 20):
            out += chunk
    except BlockingIOError:
        pass
    finally:
        client.settimeout(5)
    return bytes(out)


def test_the_engine_wide_families_written_a_few_a_step_are_prometheus_clients_own_text():
    doc = _doc({"connected": True, "timers_reports": 3, "refused": 1}) | {
        "counters": {"drop": {"bad_ttl": 2, "short": 1}, "xdp_tx": 5, "xdp_pass": 6, "echo_tx": 7},
        "kernel_clock": {"counters": {"tick": 9, "tick_sent": 8}, "clocked_sessions": 2},
        "loop_lag": {"buckets": [[100, 1], ["+Inf", 2]], "sum_us": 300, "background": {"step_max_us": 900}},
    }
    collector = metrics.StatsCollector()
    collector.doc = doc
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    whole = generate_latest(registry).decode()
    assert len(list(collector.collect())) > metrics.ENGINE_FAMILIES_PER_STEP  # more than one step's worth
    out: list[str] = []
    steps = metrics.exposition(doc, out)
    n = sum(1 for _ in steps)
    sessions: list[str] = []
    run_steps(session_series([], sessions))
    assert "".join(out) == whole + "".join(sessions) and n > 2
