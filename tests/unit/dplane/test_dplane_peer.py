"""Who may be the dataplane: the sock_diag messages as data, the allow list, and the refusal path.

The netlink answers below were captured on this kind of machine (x86_64,
kernel 6.18) from a client running as nobody (uid 65534): a request built by
:func:`build_request` and the kernel's reply, byte for byte. The refusal
path runs the real Dataplane on the fake Host over real loopback and unix
sockets; the stranger is this same process with the allow list set so as not
to include it (so no root is needed).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import pwd
import socket
import sys

import pytest
from test_dplane import add

from harness.fakehost import FakeHost
from xdp_bfd.core.errors import UsageError
from xdp_bfd.dplane import Dataplane, gate, peer
from xdp_bfd.dplane.address import DplaneAddress
from xdp_bfd.dplane.peer import (
    TCP_ESTABLISHED,
    TCP_LISTEN,
    TCP_SYN_RECV,
    TCP_TIME_WAIT,
    CredentialError,
    DiagAnswer,
    Endpoint,
    Peer,
    build_request,
    connecting_tcp_peer,
    default_allowed,
    listening_tcp_peer,
    parse_allow_users,
    parse_answer,
    socket_owner_pid,
    unix_peer,
    with_process,
)
from xdp_bfd.wire.bfddp import EchoReply, EchoRequest, FrameReader, encode_message

pytestmark = pytest.mark.skipif(sys.byteorder != "little", reason="captured on x86_64 (host-order fields)")

ME = os.geteuid()
NOBODY = 65534


def ep(text: str, port: int) -> Endpoint:
    return Endpoint(ipaddress.ip_address(text), port)


# A nobody client 127.0.0.1:50871 connected to a listener on 127.0.0.1:39387.
V4_CLIENT, V4_SERVER = ep("127.0.0.1", 50871), ep("127.0.0.1", 39387)
V4_REQUEST = bytes.fromhex(
    "4800000014000100010000000000000002060000ffffffffc6b799db7f00000100000000000000000000000"
    "07f00000100000000000000000000000000000000ffffffffffffffff"
)
V4_ANSWER = bytes.fromhex(
    "7c0000001400000001000000332a000002010000c6b799db7f000001000000000000000000000000"
    "7f000001000000000000000000000000000000005500000000000000000000000000000000000000"
    "feff0000787c4500050008000000000008000f00000000000c00150001000000000000000600160052000000"
)
# The same over ::1: [::1]:46931 -> [::1]:35917.
V6_CLIENT, V6_SERVER = ep("::1", 46931), ep("::1", 35917)
V6_REQUEST = bytes.fromhex(
    "480000001400010001000000000000000a060000ffffffffb7538c4d0000000000000000000000000000000"
    "10000000000000000000000000000000100000000ffffffffffffffff"
)
V6_ANSWER = bytes.fromhex(
    "7c0000001400000001000000332a00000a010000b7538c4d00000000000000000000000000000001"
    "00000000000000000000000000000001000000005600000000000000000000000000000000000000"
    "feff0000837c4500050008000000000008000f00000000000c00150001000000000000000600160012000000"
)
# An AF_INET6 client reaching the IPv4 listener through ::ffff:127.0.0.1 (41713 -> 38013):
# the kernel answers the AF_INET request with the client's own family and v4-mapped addresses.
MAPPED_CLIENT, MAPPED_SERVER = ep("127.0.0.1", 41713), ep("127.0.0.1", 38013)
MAPPED_ANSWER = bytes.fromhex(
    "7c0000001400000001000000332a00000a010000a2f1947d00000000000000000000ffff7f000001"
    "00000000000000000000ffff7f000001000000005700000000000000000000000000000000000000"
    "feff00008e7c4500050008000000000008000f00000000000c00150001000000000000000600160012000000"
)
# No such socket (127.0.0.1:1 -> 127.0.0.1:2): NLMSG_ERROR, -ENOENT, the request echoed.
ENOENT_ANSWER = bytes.fromhex(
    "5c0000000200000001000000332a0000feffffff4800000014000100010000000000000002060000ffffffff"
    "000100027f0000010000000000000000000000007f00000100000000000000000000000000000000ffffffffffffffff"
)


# --- the messages as data -------------------------------------------------------------------


def test_requests_are_the_bytes_the_kernel_answered():
    assert build_request(V4_CLIENT, V4_SERVER) == V4_REQUEST
    assert build_request(V6_CLIENT, V6_SERVER) == V6_REQUEST
    with pytest.raises(ValueError, match="not one family"):
        build_request(V4_CLIENT, V6_SERVER)


@pytest.mark.parametrize(
    ("answer", "client", "server", "inode"),
    [
        (V4_ANSWER, V4_CLIENT, V4_SERVER, 0x457C78),
        (V6_ANSWER, V6_CLIENT, V6_SERVER, 0x457C83),
        (MAPPED_ANSWER, MAPPED_CLIENT, MAPPED_SERVER, 0x457C8E),
    ],
    ids=["ipv4", "ipv6", "v4-mapped"],
)
def test_answers_parse_to_the_clients_owner(answer, client, server, inode):
    a = parse_answer(answer)
    assert (a.state, a.local, a.remote, a.uid, a.inode) == (TCP_ESTABLISHED, client, server, NOBODY, inode)
    # What listen mode makes of it: the connecting socket's owner.
    assert connecting_tcp_peer(server, client, lambda local, remote: a) == Peer(NOBODY, inode=inode)


def test_errors_and_nonsense_refuse():
    with pytest.raises(CredentialError, match="No such file or directory"):
        parse_answer(ENOENT_ANSWER)
    with pytest.raises(CredentialError, match="no socket diagnostics answer"):
        parse_answer(V4_ANSWER, seq=2)  # not the answer to our request
    with pytest.raises(CredentialError, match="malformed"):
        parse_answer(V4_ANSWER[:40])  # the length says more than there is
    with pytest.raises(CredentialError, match="no socket diagnostics answer"):
        parse_answer(b"")
    short = bytearray(V4_ANSWER[: 16 + 20])
    short[0] = len(short)
    with pytest.raises(CredentialError, match="unexpected"):
        parse_answer(bytes(short))


def _as(answer: bytes, **change: int) -> DiagAnswer:
    a = parse_answer(answer)
    return DiagAnswer(**{**a.__dict__, **change})


@pytest.mark.parametrize("state", [TCP_TIME_WAIT, TCP_SYN_RECV, TCP_LISTEN])
def test_an_entry_without_an_owner_is_never_root(state):
    """TIME_WAIT and request entries report uid 0 for want of an owner: refused, not taken for root."""
    a = _as(V4_ANSWER, state=state, uid=0, inode=0)
    with pytest.raises(CredentialError, match=f"TCP state {state}"):
        connecting_tcp_peer(V4_SERVER, V4_CLIENT, lambda local, remote: a)


def test_an_answer_for_another_socket_refuses():
    a = parse_answer(V4_ANSWER)
    with pytest.raises(CredentialError, match="answered for"):
        connecting_tcp_peer(V4_SERVER, ep("127.0.0.1", 50872), lambda local, remote: a)


def test_connect_mode_asks_the_listener_while_the_kernel_holds_a_request():
    """Our connection's far end is still a SYN_RECV entry: the listener on that port answers."""
    us, bfdd = V4_CLIENT, V4_SERVER
    listener = DiagAnswer(socket.AF_INET, TCP_LISTEN, bfdd, ep("0.0.0.0", 0), 103, 777)
    request = DiagAnswer(socket.AF_INET, TCP_SYN_RECV, bfdd, us, 0, 0)
    asked = []

    def query(local, remote):
        asked.append((local, remote))
        return request if remote == us else listener

    assert listening_tcp_peer(us, bfdd, query) == Peer(103, inode=777)
    assert asked == [(bfdd, us), (bfdd, ep("0.0.0.0", 0))]
    # An established far end not yet accept()ed has no inode: the listener's names the process.
    child = DiagAnswer(socket.AF_INET, TCP_ESTABLISHED, bfdd, us, 103, 0)
    assert listening_tcp_peer(us, bfdd, lambda local, remote: child if remote == us else listener) == Peer(
        103, inode=777
    )
    # Whatever answers for the port must be a listener.
    with pytest.raises(CredentialError, match="no listener"):
        listening_tcp_peer(us, bfdd, lambda local, remote: request)


def test_the_kernel_names_this_process_for_its_own_connection():
    """The real lookups on loopback, IPv4: who connected, and who listens."""
    with socket.socket() as lst:
        lst.bind(("127.0.0.1", 0))
        lst.listen(1)
        with socket.create_connection(lst.getsockname()) as cli:
            srv, _ = lst.accept()
            with srv:
                theirs, ours = Endpoint.of(cli.getsockname()), Endpoint.of(srv.getsockname())
                who = with_process(connecting_tcp_peer(ours, theirs))
                assert (who.uid, who.pid) == (ME, os.getpid())
                assert who.inode == os.fstat(cli.fileno()).st_ino
                there = with_process(listening_tcp_peer(theirs, ours))
                assert (there.uid, there.pid) == (ME, os.getpid())
    assert socket_owner_pid(0) is None


def test_unix_sockets_use_peer_credentials(tmp_path):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        p = unix_peer(a)
    assert (p.uid, p.pid) == (ME, os.getpid()) and p.comm
    assert p.describe() == f"uid {ME} (pid {os.getpid()}, {p.comm})"
    assert Peer(NOBODY).describe() == "uid 65534 (pid unknown)"


# --- the allow list -----------------------------------------------------------------------------


def test_allow_list_takes_names_and_uids():
    assert parse_allow_users("root") == (0,)
    assert parse_allow_users("nobody,0,root, 997") == (NOBODY, 0, 997)
    assert 0 in default_allowed()


@pytest.mark.parametrize(
    ("text", "why"),
    [("no-such-user-xbf", "no such user 'no-such-user-xbf'"), ("root,,frr", "empty"), ("", "empty")],
)
def test_allow_list_unknown_names_are_usage_errors(text, why):
    with pytest.raises(UsageError, match=why):
        parse_allow_users(text)


# --- the refusal path, on the fake Host ---------------------------------------------------------


class Bfdd:
    """A stand-in bfdd (or stranger) on a real socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(2)
        self.reader = FrameReader()

    def first(self):
        return self.reader.feed(self.sock.recv(4096))


@pytest.fixture
def listening(caplog):
    caplog.set_level(logging.INFO, logger="xdp_bfd")
    eng = FakeHost()
    dp = Dataplane(eng, DplaneAddress("ipv4", "127.0.0.1", 0), mode="listen", hold_s=30, allow=[ME])
    dp.start()
    port = dp.transport.listener.getsockname()[1]  # type: ignore[union-attr]
    socks: list[socket.socket] = []

    def connect() -> socket.socket:
        s = socket.create_connection(("127.0.0.1", port))
        socks.append(s)
        return s

    try:
        yield dp, eng, connect
    finally:
        dp.close()
        for s in socks:
            s.close()


def _refusals(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("dplane: refused")]


def _up_bfdd(dp: Dataplane, eng: FakeHost, connect) -> Bfdd:
    b = Bfdd(connect())
    assert eng.spin(2, lambda: dp.transport.conn is not None)
    (hello,) = b.first()
    b.sock.sendall(encode_message(add(1001)) + encode_message(EchoReply(hello.dp_time, 0)))
    assert eng.spin(2, lambda: 1001 in eng.sessions and dp.transport.conn.proven)  # type: ignore[union-attr]
    return b


def test_a_stranger_is_refused_and_the_connected_bfdd_keeps_its_slot(listening, caplog):
    dp, eng, connect = listening
    bfdd = _up_bfdd(dp, eng, connect)
    conn = dp.transport.conn
    assert f"dplane: bfdd connected as {pwd.getpwuid(ME).pw_name} (uid {ME})" in caplog.text
    dp.gate.allowed = frozenset({NOBODY})  # from now on this process is a stranger
    stranger = connect()
    stranger.settimeout(2)
    assert eng.spin(2, lambda: dp.gate.refused == 1)
    assert stranger.recv(4096) == b""  # closed, nothing said
    (line,) = _refusals(caplog)
    assert line == f"dplane: refused a connection from uid {ME} (pid {os.getpid()}, {_comm()}): " + (
        "not an allowed dataplane user"
    )
    # bfdd was neither looked at nor disturbed: same connection, same session, no second-connection rule.
    assert dp.transport.conn is conn and conn.open and not conn.failed  # type: ignore[union-attr]
    assert "refusing a second connection" not in caplog.text
    assert 1001 in eng.sessions and eng.removed == []
    assert dp.stats()["refused"] == 1 and dp.stats()["connections"] == 1
    bfdd.sock.sendall(encode_message(EchoRequest(42)))
    assert eng.spin(2, lambda: any(isinstance(m, EchoReply) for m in _read(bfdd)))


def _read(b: Bfdd) -> list:
    b.sock.setblocking(False)
    try:
        return b.reader.feed(b.sock.recv(65536))
    except BlockingIOError:
        return []
    finally:
        b.sock.settimeout(2)


def _comm() -> str:
    with open(f"/proc/{os.getpid()}/comm") as f:
        return f.read().strip()


def test_a_stranger_during_the_hold_neither_takes_the_slot_nor_ends_the_hold(listening, caplog):
    """bfdd gone, sessions held: a stranger that could answer the barrier would orphan them all."""
    dp, eng, connect = listening
    bfdd = _up_bfdd(dp, eng, connect)
    bfdd.sock.close()
    assert eng.spin(2, lambda: dp.transport.conn is None)
    assert [r.discr for r in dp.registry.held()] == [1001]
    dp.gate.allowed = frozenset({NOBODY})
    for _ in range(3):
        connect()
    assert eng.spin(2, lambda: dp.gate.refused == 3)
    assert dp.transport.conn is None and dp.stats()["connections"] == 1
    assert [r.discr for r in dp.registry.held()] == [1001] and eng.removed == []
    # bfdd comes back and re-adds: the held session is adopted, not recreated.
    dp.gate.allowed = frozenset({ME})
    back = Bfdd(connect())
    assert eng.spin(2, lambda: dp.transport.conn is not None)
    (hello,) = back.first()
    back.sock.sendall(encode_message(add(2002)) + encode_message(EchoReply(hello.dp_time, 0)))
    assert eng.spin(2, lambda: dp.registry.held() == [] and 2002 in dp.registry.by_lid)
    assert eng.removed == [] and list(eng.sessions) == [1001]
    assert "dplane: adopted held session" in caplog.text


def test_refusal_lines_are_rate_limited_but_every_refusal_counts(listening, caplog, monkeypatch):
    dp, eng, connect = listening
    scans = []
    scan = dp.gate._process
    monkeypatch.setattr(dp.gate, "_process", lambda p: scans.append(p) or scan(p))  # the real scan, counted
    monkeypatch.setattr(gate, "LOG_WINDOW_US", 1_500_000)
    dp.gate.allowed = frozenset()
    for n in range(1, gate.LOG_BURST + 4):  # one at a time: the accept backlog is 8
        connect()
        assert eng.spin(2, lambda n=n: dp.gate.refused == n)
    assert len(_refusals(caplog)) == gate.LOG_BURST == len(scans)  # no /proc scan for an unlogged one
    eng.spin(1.6)  # the window (shortened below) is over: lines again, saying what went unsaid
    connect()
    assert eng.spin(2, lambda: dp.gate.refused == gate.LOG_BURST + 4)
    assert _refusals(caplog)[-1].endswith("(3 more refused without a line before this one)")


def test_no_credentials_refuses_with_its_own_reason(caplog):
    """A socket the kernel cannot find (here: not a TCP connection at all) is refused, not trusted."""
    g = gate.Gate([ME], kind="ipv4", mode="listen", display="127.0.0.1:1")
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with udp:
        udp.bind(("127.0.0.1", 0))
        udp.connect(("127.0.0.1", 9))
        assert g.vet(udp, 0) is None
    assert g.refused == 1
    (line,) = _refusals(caplog)
    assert line.startswith("dplane: refused a connection from 127.0.0.1:9: cannot establish who it is (")


@pytest.mark.parametrize("kind", ["ipv4", "unix"])
def test_connect_mode_refuses_a_strangers_listener_and_sends_it_nothing(kind, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="xdp_bfd")
    if kind == "unix":
        lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lst.bind(str(tmp_path / "bfdd.sock"))
        addr = DplaneAddress("unix", str(tmp_path / "bfdd.sock"), 0)
    else:
        lst = socket.socket()
        lst.bind(("127.0.0.1", 0))
        addr = DplaneAddress("ipv4", "127.0.0.1", lst.getsockname()[1])
    lst.listen(8)
    lst.settimeout(2)
    eng = FakeHost()
    dp = Dataplane(eng, addr, mode="connect", hold_s=5, allow=[NOBODY])
    try:
        dp.start()
        assert eng.spin(5, lambda: dp.gate.refused >= 3), dp.gate.refused
        assert dp.transport.conn is None and dp.stats()["connections"] == 0
        # Each attempt was closed without a byte: the listener reads the end at once.
        for _ in range(3):
            srv, _ = lst.accept()
            with srv:
                srv.settimeout(2)
                assert srv.recv(4096) == b""
        lines = _refusals(caplog)
        assert lines == [
            f"dplane: refused the listener on {addr.display}, uid {ME} (pid {os.getpid()}, {_comm()}): "
            "not an allowed dataplane user; retrying"
        ], "one line per distinct refusal"
        # The same listener, now owned by an allowed user: connected, and the next refusal is said again.
        dp.gate.allowed = frozenset({ME})
        assert eng.spin(5, lambda: dp.transport.conn is not None)
        assert "dplane: bfdd connected as " in caplog.text
        srv, _ = lst.accept()
        with srv:
            srv.settimeout(2)
            (hello,) = FrameReader().feed(srv.recv(4096))
            assert isinstance(hello, EchoRequest)
    finally:
        dp.close()
        lst.close()


# --- FRR from a root of its own (a chroot): its uid named frr there --------------------------


def _proc_tree(
    tmp_path, *, passwd: str, passwd_mode: int = 0o644, root_mode: int = 0o755, userns: str = "u1"
):
    """A /proc with ourselves ("self", in /) and pid 42 chrooted into tmp/chroot (real files)."""
    proc, chroot = tmp_path / "proc", tmp_path / "chroot"
    (chroot / "etc").mkdir(parents=True)
    (chroot / "etc" / "passwd").write_text(passwd)
    (chroot / "etc" / "passwd").chmod(passwd_mode)
    chroot.chmod(root_mode)
    for pid, root, ns in (("self", "/", "u1"), ("42", str(chroot), userns)):
        (proc / pid / "ns").mkdir(parents=True)
        (proc / pid / "root").symlink_to(root)
        (proc / pid / "ns" / "user").symlink_to(f"user:[{ns}]")
    return str(proc)


TRIXIE_PASSWD = (
    "root:x:0:0:root:/root:/bin/bash\nfrr:x:997:997:Frr routing suite:/nonexistent:/usr/sbin/nologin\n"
)


def test_a_chroots_frr_is_named_by_its_own_root(tmp_path):
    proc = _proc_tree(tmp_path, passwd=TRIXIE_PASSWD)
    assert peer.name_in_own_root(42, 997, proc) == "frr"
    assert peer.name_in_own_root(42, 1000, proc) is None  # a uid that root does not name


@pytest.mark.parametrize(
    ("what", "kw"),
    [
        ("passwd writable by others", {"passwd_mode": 0o666}),
        ("passwd writable by its group", {"passwd_mode": 0o664}),
        ("root writable by others", {"root_mode": 0o777}),
        ("another user namespace (an unprivileged user's own)", {"userns": "u2"}),
    ],
)
def test_a_root_that_someone_else_could_have_written_names_nobody(tmp_path, what, kw):
    proc = _proc_tree(tmp_path, passwd=TRIXIE_PASSWD, **kw)
    assert peer.name_in_own_root(42, 997, proc) is None, what


def test_our_own_root_names_nobody_beyond_the_uid_check(tmp_path):
    """In the host's root the uid was judged by its number: its host name must not let it in again."""
    proc = _proc_tree(tmp_path, passwd=TRIXIE_PASSWD)
    os.remove(os.path.join(proc, "42", "root"))
    os.symlink("/", os.path.join(proc, "42", "root"))
    assert peer.name_in_own_root(42, 0, proc) is None


def test_the_gate_lets_a_chroots_frr_in_and_says_so(caplog):
    """The allow list names frr; the uid is not the host's frr, but its own root calls it frr."""
    roots = {(4242, 997): "frr", (4343, 998): "mallory"}
    g = gate.Gate(
        [ME],
        kind="unix",
        mode="listen",
        display="/run/x.sock",
        lookup_process=lambda p: p,
        lookup_root_name=lambda pid, uid: roots.get((pid, uid)),
    )
    g.credentials = lambda sock: sock  # type: ignore[method-assign]  # the peer itself stands in for its socket
    frr = g.vet(Peer(997, pid=4242, comm="bfdd"), 0)  # type: ignore[arg-type]
    assert frr is not None and frr.root_name == "frr"
    assert frr.user() == "frr (uid 997 in its own root, pid 4242)"
    assert g.vet(Peer(998, pid=4343, comm="bfdd"), 0) is None  # type: ignore[arg-type]
    assert g.refused == 1
    g.names = frozenset()  # --dplane-allow with uids only: no name to honour
    assert g.vet(Peer(997, pid=4242, comm="bfdd"), 0) is None  # type: ignore[arg-type]
    assert [r for r in _refusals(caplog)][-1].startswith(
        "dplane: refused a connection from uid 997 (pid 4242"
    )


def test_allowed_names_default_and_explicit():
    assert peer.allowed_names(None) == ("frr", "root")
    assert peer.allowed_names("frr,0,bfdops") == ("frr", "bfdops")
