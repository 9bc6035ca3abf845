"""--metrics: a real scrape, parsed by prometheus-client's own parser."""

from __future__ import annotations

import socket

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.frr import bfd_peer_block
from harness.wait import wait_until


def _scrape(ns, port: int, path: str = "/metrics") -> tuple[str, str]:
    s = ns.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.settimeout(5)
        s.connect(("127.0.0.1", port))
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    finally:
        s.close()
    head, _, body = data.decode().partition("\r\n\r\n")
    return head.splitlines()[0], body


def test_scrape_lists_every_session_and_drop_reason(topo, frr_factory, engine_factory, tmp_path):
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    frr = frr_factory(p, "p").start()
    for ours, theirs in ((a.ip4, b.ip4), (a.ip6, b.ip6)):
        frr.configure(*bfd_peer_block(str(ours), local=str(theirs), interface="veth-p", rx_ms=10, tx_ms=10))
    sessions = tmp_path / "s.yml"
    sessions.write_text(
        "".join(
            f"- {{local: {o}, peer: {t}, interface: veth-d, min_tx_ms: 10, min_rx_ms: 10}}\n"
            for o, t in ((a.ip4, b.ip4), (a.ip6, b.ip6))
        )
    )
    eng = engine_factory(
        d, ["--sessions", str(sessions), "--kernel-tx", "veth-d", "--metrics", "127.0.0.1:9477"]
    )
    eng.wait_log("metrics: serving on 127.0.0.1:9477")
    wait_until(lambda: eng.stats()["sessions_up"] == 2, timeout=15, what="both sessions up")

    status, body = _scrape(d, 9477)
    assert status == "HTTP/1.0 200 OK"
    families = {f.name: f for f in text_string_to_metric_families(body)}
    up = {(s.labels["peer"], s.value) for s in families["xdp_bfd_session_up"].samples}
    assert up == {(str(b.ip4), 1.0), (str(b.ip6), 1.0)}
    reasons = {s.labels["reason"] for s in families["xdp_bfd_drops"].samples if s.name.endswith("_total")}
    doc = eng.stats()
    assert reasons == set(doc["counters"]["drop"]) and {"ttl", "your_discr", "ip_options"} <= reasons
    paths = {s.labels["path"] for s in families["xdp_bfd_session_tx_packets"].samples}
    assert paths == {"kernel", "user"}
    kernel_tx = [
        s.value for s in families["xdp_bfd_session_tx_packets"].samples if s.labels["path"] == "kernel"
    ]
    assert all(v > 0 for v in kernel_tx)
    sched = [s.labels["sched"] for s in families["xdp_bfd_sched_info"].samples]
    assert sched == [doc["sched"]]
    lag = families["xdp_bfd_loop_lag_seconds"]
    assert any(s.name.endswith("_count") and s.value > 0 for s in lag.samples)
    assert _scrape(d, 9477, "/other")[0] == "HTTP/1.0 404 Not Found"


def _listening(ns, port: int) -> list[str]:
    """The local addresses of the TCP sockets listening on ``port`` in ``ns`` (ss's view)."""
    out = ns.run(["ss", "-Htln", f"sport = :{port}"]).stdout
    return sorted(line.split()[3].rsplit(":", 1)[0] for line in out.splitlines() if line.strip())


def _reachable(ns, host: str, port: int) -> bool:
    s = ns.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.settimeout(2)
        s.connect((host, port))
        return True
    except (ConnectionRefusedError, TimeoutError):
        return False
    finally:
        s.close()


@pytest.mark.parametrize(
    "case",
    [
        (":9478", "metrics: serving on 127.0.0.1:9478 (loopback only)", ["127.0.0.1"], False),
        ("9478", "metrics: serving on 127.0.0.1:9478 (loopback only)", ["127.0.0.1"], False),
        ("0.0.0.0:9478", "metrics: serving on 0.0.0.0:9478 (all addresses)", ["0.0.0.0"], True),
        ("[::]:9478", "metrics: serving on [::]:9478 (all addresses)", ["*", "[::]"], True),
    ],
    ids=["colon-port", "port", "ipv4-any", "ipv6-any"],
)
def test_an_empty_host_serves_loopback_only(topo, engine_factory, case):
    listen, line, bound, from_peer = case
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    eng = engine_factory(d, [str(a.ip4), str(b.ip4), "--metrics", listen])
    eng.wait_log(line)
    eng.wait_log("bfd: serving")
    got = _listening(d, 9478)
    assert got and set(got) <= set(bound), (got, bound)
    assert _scrape(d, 9478)[0] == "HTTP/1.0 200 OK"
    # From the peer's namespace, over the link: only when every address was asked for.
    assert _reachable(p, str(a.ip4), 9478) is from_peer
