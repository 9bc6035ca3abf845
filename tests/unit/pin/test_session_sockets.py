"""--pin: the sessions' sockets pass to the successor (pin/session_sockets.py, core.netio.adoptable).

Real sockets on loopback, passed over the real rendezvous: what arrives is
the very socket (same inode), every descriptor that cannot be used is closed
at once, and a socket is kept only when the kernel says it is the one this
engine would make for the session.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import socket
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.fakehost import FakeHost
from xdp_bfd.core.netio import SourcePorts, Transmitter, adoptable
from xdp_bfd.pin import fdpass, session_sockets, state

LOCAL = ipaddress.ip_address("127.0.0.1")
PEER = ipaddress.ip_address("127.0.0.2")


@pytest.fixture
def as_engine(monkeypatch):
    """This test process passes for the successor engine the old one checks for."""
    monkeypatch.setattr(fdpass, "_comm", lambda pid: "xdp-bfd")


def _send(root: Path, items: list[tuple[int, int, int]]) -> tuple[int, int]:
    """What the old engine does, once: connect, pass ``items`` (their own descriptors), close."""
    sender = session_sockets.Sender(root)
    try:
        return sender.pid, sender.send(items)
    finally:
        sender.close()


def _open_fds() -> set[int]:
    listed = {int(n) for n in os.listdir("/proc/self/fd")}
    return {fd for fd in listed if _is_open(fd)}  # not the listing's own, closed by now


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _bound(n: int, host: str = "127.0.0.1") -> list[socket.socket]:
    """``n`` UDP sockets on BFD source ports (the top of the range down, skipping ports in use)."""
    out: list[socket.socket] = []
    port = 65535
    while len(out) < n:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.bind((host, port))
        except OSError as e:
            s.close()
            if e.errno != errno.EADDRINUSE:
                raise
        else:
            out.append(s)
        port -= 1
        assert port >= 49152, "not enough free source ports"
    return out


def test_every_socket_arrives_with_its_session(tmp_path: Path, as_engine) -> None:
    socks = _bound(600)  # three messages: 253, 253 and 94 descriptors
    items = [(1000 + i, s.getsockname()[1], s.fileno()) for i, s in enumerate(socks)]
    before = _open_fds()
    inbox = session_sockets.open_inbox(tmp_path)
    assert inbox is not None
    pid, n = _send(tmp_path, items)
    assert (pid, n) == (os.getpid(), 600)
    passed = session_sockets.collect(inbox, os.getpid())
    assert len(passed.fds) == 600 and passed.refused == 0
    for discr, sport, fd in items:
        got = passed.take(discr, sport)
        assert got is not None and got != fd
        assert os.fstat(got).st_ino == os.fstat(fd).st_ino  # the same socket, not a copy of it
        os.close(got)
    assert passed.take(1000, items[0][1]) is None  # each is handed out once
    assert _open_fds() == before  # the inbox and every received descriptor are closed
    for s in socks:
        s.close()


def test_a_wrong_port_or_a_header_that_does_not_add_up_closes_what_came(tmp_path: Path, as_engine) -> None:
    socks = _bound(3)
    before = _open_fds()
    inbox = session_sockets.open_inbox(tmp_path)
    assert inbox is not None
    conn, _pid = fdpass.connect(tmp_path, session_sockets.CHANNEL)
    fds = [s.fileno() for s in socks]
    good = [[7, socks[0].getsockname()[1]]]
    bad_headers = [
        [[8, 49152], [9, 49153]],  # two pairs for one descriptor
        [[0, 49152]],  # discriminator 0 is nobody's
        [[8, 3784]],  # not a source port a session may have
        [[8, True]],  # not a number
    ]
    with conn:
        socket.send_fds(conn, [fdpass.pack({"pid": 1, "fds": good}, b"", b"")], fds[:1])
        for header in bad_headers:
            socket.send_fds(conn, [fdpass.pack({"pid": 1, "fds": header}, b"", b"")], fds[1:2])
        socket.send_fds(conn, [b"not a parcel"], fds[2:3])
        socket.send_fds(conn, [fdpass.pack({"pid": 1, "fds": good}, b"", b"")], fds[2:3])  # a duplicate
    passed = session_sockets.collect(inbox, os.getpid())
    assert list(passed.fds) == [7] and passed.refused == len(bad_headers) + 2
    assert passed.take(7, 49152) is None  # asked with another port: refused and closed
    assert passed.refused == len(bad_headers) + 3
    assert _open_fds() == before
    for s in socks:
        s.close()


def test_nobody_listening_passes_nothing(tmp_path: Path, as_engine) -> None:
    (s,) = _bound(1)
    with pytest.raises(fdpass.PassError, match="no successor listening"):
        _send(tmp_path, [(7, s.getsockname()[1], s.fileno())])
    s.close()


def test_only_the_engine_asked_is_heard(tmp_path: Path, as_engine) -> None:
    (s,) = _bound(1)
    before = _open_fds()
    inbox = session_sockets.open_inbox(tmp_path)
    _send(tmp_path, [(7, s.getsockname()[1], s.fileno())])
    passed = session_sockets.collect(inbox, os.getpid() + 1)  # it came from another pid
    assert passed.fds == {}
    assert _open_fds() == before  # what the stranger sent went with its connection
    s.close()


# --- what the kernel says a socket is --------------------------------------------------


def _made(**kw) -> Transmitter:
    kw = {"local": LOCAL, "peer": PEER, "interface": None, "multihop": False} | kw
    return Transmitter(SourcePorts(), **kw)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"interface": "lo"},
        {"interface": "lo", "multihop": True},
        {"local": None},
        {"local": ipaddress.ip_address("::1"), "peer": ipaddress.ip_address("::1")},
    ],
    ids=["plain", "device", "multihop", "any-address", "ipv6"],
)
def test_what_a_transmitter_makes_is_adoptable_for_its_session(kw) -> None:
    tx = _made(**kw)
    args = {"local": LOCAL, "peer": PEER, "interface": None, "multihop": False} | kw
    assert adoptable(tx.sock, sport=tx.sport, **args) is None
    tx.close()


def test_a_socket_made_for_something_else_is_not_adoptable() -> None:
    tx = _made(interface="lo")
    want = {"local": LOCAL, "peer": PEER, "interface": "lo", "multihop": False, "sport": tx.sport}
    cases = {
        "another port": ({**want, "sport": tx.sport - 1}, "port"),
        "another address": ({**want, "local": ipaddress.ip_address("127.0.0.3")}, "127.0.0.1 port"),
        "another family": ({**want, "local": None, "peer": ipaddress.ip_address("::1")}, "not an IPv6"),
        "another device": ({**want, "interface": "eth9"}, "device 'lo', not 'eth9'"),
        "no device": ({**want, "multihop": True}, "not 'none'"),
    }
    for what, (args, says) in cases.items():
        why = adoptable(tx.sock, **args)
        assert why is not None and says in why, (what, why)
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as dual:
        dual.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        dual.bind(("::", 0))
        v6 = {**want, "local": None, "peer": ipaddress.ip_address("::1"), "interface": None}
        why = adoptable(dual, **{**v6, "sport": dual.getsockname()[1]})
        assert why == "an IPv6 socket that takes IPv4 too"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
        tcp.bind(("127.0.0.1", 0))
        why = adoptable(tcp, **{**want, "interface": None, "sport": tcp.getsockname()[1]})
        assert why is not None and "not a datagram socket" in why
    tx.close()


def test_an_adopted_socket_sends_with_this_builds_hop_limit_and_class() -> None:
    (s,) = _bound(1)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 64)  # as some other build might have left it
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 0)
    ports = SourcePorts()
    sport = s.getsockname()[1]
    tx = Transmitter(ports, local=LOCAL, peer=PEER, interface=None, multihop=False, sport=sport, sock=s)
    # The port is the engine's to take when the session joins (made ahead, it may never join).
    assert tx.sock is s and tx.sport == sport and sport not in ports.used
    ports.used.add(sport)
    assert s.getsockopt(socket.IPPROTO_IP, socket.IP_TTL) == 255
    assert s.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) == 0xC0  # CS6
    assert s.getblocking() is False
    tx.close()
    assert sport not in ports.used


# --- the restore keeps what fits, and makes the rest afresh ----------------------------


def _handed(sports: list[int]) -> state.Handed:
    """A predecessor's state of one Up session per source port, on loopback without a device."""
    from test_state import _host, _session  # noqa: PLC0415  (the state tests' sessions)

    sessions = [_session(i) for i in range(len(sports))]
    old = _host(*sessions)
    for e, sport in zip(old.sessions.values(), sports, strict=True):
        e.tx.sport = sport
    handed = state.parse(state.encode(old, 16))
    plain = [replace(r.config, local=LOCAL, peer=PEER, interface=None) for r in handed.sessions]
    return replace(
        handed, sessions=[replace(r, config=c) for r, c in zip(handed.sessions, plain, strict=True)]
    )


class _Offload:
    def __init__(self) -> None:
        self.slots = SimpleNamespace(adopt=lambda n, used: None, batched=contextlib.nullcontext)

    def adopted(self, entry) -> None:
        pass


def test_restore_keeps_the_sockets_that_fit_and_says_how_many(tmp_path: Path, as_engine, caplog) -> None:
    socks = _bound(3)
    sports = [s.getsockname()[1] for s in socks]
    handed = _handed(sports)
    host = FakeHost()
    before = _open_fds()
    discrs = [r.state["_local_discr"] for r in handed.sessions]
    # The second session's is a pipe; the third's is bound to its port on another address.
    r, w = os.pipe()
    elsewhere = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    elsewhere.bind(("127.0.0.5", sports[2]))
    inbox = session_sockets.open_inbox(tmp_path)
    items = [
        (discrs[0], sports[0], socks[0].fileno()),
        (discrs[1], sports[1], r),
        (discrs[2], sports[2], elsewhere.fileno()),
    ]
    _send(tmp_path, items)
    passed = session_sockets.collect(inbox, os.getpid())
    with caplog.at_level("INFO", "xdp_bfd"):
        state.restore(host, _Offload(), handed, [], sockets=passed)
    kept = host.sessions[discrs[0]].tx.adopted
    assert kept is not None and os.fstat(kept.fileno()).st_ino == os.fstat(socks[0].fileno()).st_ino
    assert host.sessions[discrs[1]].tx.adopted is None  # a pipe, not a socket
    assert host.sessions[discrs[2]].tx.adopted is None  # the kernel says: not its address
    assert "adopted 3 sessions" in caplog.text and "kept 1 of their sockets" in caplog.text
    assert "refused 2 (" in caplog.text and "made 2 afresh" in caplog.text
    assert "1 not a socket" in caplog.text
    assert f"1 bound to 127.0.0.5 port {sports[2]}, not 127.0.0.1 port {sports[2]}" in caplog.text
    assert _open_fds() == before | {kept.fileno(), r, w, elsewhere.fileno()}  # the refused ones are closed
    kept.close()
    elsewhere.close()
    os.close(r)
    os.close(w)
    for s in socks:
        s.close()


def test_the_warm_ups_connection_carries_each_socket_once_and_the_request_only_what_is_new(
    tmp_path: Path, as_engine
) -> None:
    before = _open_fds()
    ports = SourcePorts()
    txs = {
        1000 + i: Transmitter(ports, local=LOCAL, peer=PEER, interface=None, multihop=False)
        for i in range(300)
    }
    inbox = session_sockets.open_inbox(tmp_path)
    sender = session_sockets.Sender(tmp_path)
    assert sender.pass_sessions(list(txs.items())) == (300, 300)  # the warm-up: two messages
    assert sender.carried(list(txs), list(txs.values()))  # the request's question, answered in C
    assert not sender.carried([*txs, 2000], [*txs.values(), txs[1000]])  # a session it did not carry
    # Meanwhile a session is added and another's transmitter is made again (a new socket).
    txs[2000] = Transmitter(ports, local=LOCAL, peer=PEER, interface=None, multihop=False)
    old = txs[1005]
    txs[1005] = Transmitter(ports, local=LOCAL, peer=PEER, interface=None, multihop=False)
    assert not sender.carried(list(txs), list(txs.values()))  # 1005's new transmitter, 2000's
    assert sender.pass_sessions(list(txs.items())) == (2, 2)  # the request: only those two
    assert sender.carried(list(txs), list(txs.values()))
    sender.close()
    passed = session_sockets.collect(inbox, os.getpid())
    assert set(passed.fds) == set(txs) and passed.refused == 1  # the earlier socket of 1005 closed
    for discr, tx in txs.items():
        fd = passed.take(discr, tx.sport)
        assert fd is not None and os.fstat(fd).st_ino == os.fstat(tx.fileno()).st_ino, discr
        os.close(fd)
    for tx in [*txs.values(), old]:
        tx.close()
    assert not _open_fds() - before  # nothing passed is left open


def test_a_connection_that_failed_says_so(tmp_path: Path, as_engine) -> None:
    (s,) = _bound(1)
    inbox = session_sockets.open_inbox(tmp_path)
    assert inbox is not None
    sender = session_sockets.Sender(tmp_path)
    inbox.close()  # the successor went away
    assert sender.send([(7, s.getsockname()[1], s.fileno())]) == 0
    assert sender.broken
    sender.close()
    s.close()


def _warm_up(tmp_path: Path) -> SimpleNamespace:
    """Four sessions' sockets passed at a warm-up and read early: three bound as their records say,
    the fourth's port bound on another address (the check refuses it)."""
    socks = _bound(4)
    sports = [s.getsockname()[1] for s in socks]
    socks[3].close()
    elsewhere = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    elsewhere.bind(("127.0.0.5", sports[3]))
    warm = _handed(sports)
    discrs = [r.state["_local_discr"] for r in warm.sessions]
    before = _open_fds()
    inbox = session_sockets.open_inbox(tmp_path)
    sender = session_sockets.Sender(tmp_path)
    fds = [s.fileno() for s in socks[:3]] + [elsewhere.fileno()]
    assert sender.send(list(zip(discrs, sports, fds, strict=True))) == 4
    early = session_sockets.receive_early(inbox, os.getpid())
    return SimpleNamespace(
        socks=socks, sports=sports, elsewhere=elsewhere, warm=warm, discrs=discrs, before=before,
        inbox=inbox, sender=sender, fds=fds, early=early,
    )  # fmt: skip


def test_the_warm_ups_sockets_are_checked_before_the_request_and_kept_without_asking_again(
    tmp_path: Path, as_engine, monkeypatch, caplog
) -> None:
    """receive_early + state.check_early: the restore keeps a socket checked against the very record
    the request's state restores without asking the kernel again; a changed record's is checked
    again, a socket passed again at the request is the request's, and a refused one says why."""
    host = FakeHost()
    w = _warm_up(tmp_path)
    socks, sports, elsewhere, warm, discrs = w.socks, w.sports, w.elsewhere, w.warm, w.discrs
    before, inbox, sender, fds, early = w.before, w.inbox, w.sender, w.fds, w.early
    assert sorted(early.fds) == sorted(discrs)
    assert state.check_early(early, [(None, r) for r in warm.sessions]) == 3  # the fourth is refused
    assert early.fds == {} and sorted(early.checked) == sorted(discrs)
    assert sender.send([(discrs[2], sports[2], fds[2])]) == 1  # passed again at the request
    sender.close()
    passed = session_sockets.collect(inbox, os.getpid(), early)
    assert passed is early and list(passed.fds) == [discrs[2]] and discrs[2] not in passed.checked
    # The request's state: the first record as the warm-up's (the same object), the second equal
    # but decoded afresh (another object), the third and fourth as the warm-up's.
    request = replace(warm, sessions=[warm.sessions[0], replace(warm.sessions[1]), *warm.sessions[2:]])
    asked: list[int] = []
    real = state.adoptable

    def counted(sock, **kw):
        asked.append(kw["sport"])
        return real(sock, **kw)

    monkeypatch.setattr(state, "adoptable", counted)
    with caplog.at_level("INFO", "xdp_bfd"):
        state.restore(host, _Offload(), request, [], sockets=passed)
    assert asked == sports[1:]  # not the first: checked against that very record before the request
    kept = [host.sessions[d].tx.adopted for d in discrs]
    assert [k is not None for k in kept] == [True, True, True, False]
    for k, s in zip(kept[:3], socks[:3], strict=True):
        assert os.fstat(k.fileno()).st_ino == os.fstat(s.fileno()).st_ino
    assert "kept 3 of their sockets" in caplog.text
    assert f"1 bound to 127.0.0.5 port {sports[3]}, not 127.0.0.1 port {sports[3]}" in caplog.text
    assert _open_fds() == before | {k.fileno() for k in kept[:3]}  # the refused and replaced closed
    for k in kept[:3]:
        k.close()
    for s in [*socks[:3], elsewhere]:
        s.close()


def test_without_a_warm_up_connection_the_request_brings_them_all(tmp_path: Path, as_engine) -> None:
    (s,) = _bound(1)
    inbox = session_sockets.open_inbox(tmp_path)
    early = session_sockets.receive_early(inbox, os.getpid())  # nobody connected yet
    assert early.conn is None and early.fds == {}
    _send(tmp_path, [(7, s.getsockname()[1], s.fileno())])
    passed = session_sockets.collect(inbox, os.getpid(), early)
    assert list(passed.fds) == [7]
    passed.close()
    s.close()


def test_sessions_made_before_the_request_are_joined_where_record_and_socket_are_unchanged(
    tmp_path: Path, as_engine, caplog
) -> None:
    """state.build_ahead: the warm-up's sessions made before the request, nothing of the host
    changed; the restore joins those very entries where the request's state kept the record and
    the socket is still the one checked, and makes the rest afresh as before."""
    host = FakeHost()
    w = _warm_up(tmp_path)
    socks, sports, elsewhere, warm, discrs = w.socks, w.sports, w.elsewhere, w.warm, w.discrs
    before, inbox, sender, fds, early = w.before, w.inbox, w.sender, w.fds, w.early
    known = [(None, r) for r in warm.sessions]
    assert state.check_early(early, known) == 3
    ahead = state.build_ahead(host, known, [], early)
    assert len(ahead) == 3 and host.made_ahead == 3
    assert host.sessions == {}  # made, not joined
    made = {discr: entry for discr, (_r, _sock, entry) in ahead.items()}
    assert sender.send([(discrs[2], sports[2], fds[2])]) == 1  # the third's passed again at the request
    sender.close()
    passed = session_sockets.collect(inbox, os.getpid(), early)
    # The request's state: the first record the warm-up's own, the second decoded afresh.
    request = replace(warm, sessions=[warm.sessions[0], replace(warm.sessions[1]), *warm.sessions[2:]])
    with caplog.at_level("INFO", "xdp_bfd"):
        state.restore(host, _Offload(), request, [], sockets=passed, ahead=ahead)
    joined = [host.sessions[d] is made.get(d) for d in discrs]
    assert joined == [True, False, False, False]
    assert host.made_ahead == 3  # the others were made at the restore, as without it
    first, record = host.sessions[discrs[0]], warm.sessions[0]
    assert os.fstat(first.tx.adopted.fileno()).st_ino == os.fstat(socks[0].fileno()).st_ino
    assert first.session.state == record.state["_state"] and first.slot == record.entry["slot"]
    kept = [host.sessions[d].tx.adopted for d in discrs]
    assert [k is not None for k in kept] == [True, True, True, False]
    assert "kept 3 of their sockets" in caplog.text and "; 1 made before the request;" in caplog.text
    assert _open_fds() == before | {k.fileno() for k in kept[:3]}  # the refused and replaced closed
    for k in kept[:3]:
        k.close()
    for s in [*socks[:3], elsewhere]:
        s.close()
