"""The synthetic peer's meticulous authentication (bench/synth_peer.py ``--meticulous``) and the
takeover bench's figures of those sessions (bench/takeover.py ``--meticulous``): our packets are
signed as RFC 5880 §6.7.3/§6.7.4 and the engine's codec wants, the engine's are checked against
the window, and a discarded packet is not heard, so a run of them takes the session Down."""

from __future__ import annotations

import argparse
import ipaddress
import socket
import stat
import struct
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "bench"))

import scale  # noqa: E402
import synth_peer  # noqa: E402
import takeover  # noqa: E402

from harness.capture import WirePacket  # noqa: E402
from harness.inject import keyed_digest  # noqa: E402
from xdp_bfd.core.config import load_sessions  # noqa: E402
from xdp_bfd.wire.control import Auth, AuthType, ControlPacket, State, encode_control  # noqa: E402

TYPES = {
    "meticulous-keyed-md5": AuthType.METICULOUS_KEYED_MD5,
    "meticulous-keyed-sha1": AuthType.METICULOUS_KEYED_SHA1,
}
SECRET = synth_peer.AUTH_SECRET
KEY_ID = synth_peer.AUTH_KEY_ID


def engine_packet(
    name: str, seq: int, *, state: State = State.UP, key_id: int = KEY_ID, secret: bytes = SECRET
) -> bytes:
    """A packet as the engine signs it (its own codec, not the peer's)."""
    pkt = ControlPacket(
        state=state, my_discr=0x100, your_discr=synth_peer.DISCR_BASE, desired_min_tx_us=10_000,
        required_min_rx_us=10_000, auth=Auth(TYPES[name], key_id, b"", seq),
    )  # fmt: skip
    return encode_control(pkt, secret=secret)


@pytest.mark.parametrize("name", sorted(TYPES))
def test_the_peer_signs_as_the_rfc_and_accepts_what_the_engine_signs(name: str) -> None:
    key = synth_peer.Key(name, KEY_ID, SECRET)
    head = synth_peer.bfd_packet(
        state=synth_peer.UP, flags=synth_peer.FLAG_A, mult=3, my_discr=1, your_discr=2, tx_us=10_000,
        rx_us=10_000, length=24 + key.auth_len,
    )  # fmt: skip
    pkt = key.sign(head, 0xFFFFFFFF)
    assert len(pkt) == 24 + key.auth_len and pkt[3] == len(pkt) and pkt[25] == key.auth_len
    assert pkt[24] == TYPES[name] and pkt[26] == KEY_ID and synth_peer.seq_of(pkt) == 0xFFFFFFFF
    # The digest as the test harness computes it (tests/harness/inject.py), independently.
    assert pkt[32:] == keyed_digest(pkt, TYPES[name], SECRET)
    # And what the engine's codec signs passes the peer's checks, on any number while none is known.
    assert key.check(engine_packet(name, 12345), None) is None


def test_the_window_is_strictly_after_the_last_and_at_most_three_detect_mults_ahead() -> None:
    name = "meticulous-keyed-sha1"
    key = synth_peer.Key(name, KEY_ID, SECRET)
    last = 0xFFFFFFFE  # the window wraps (circular space)
    assert key.check(engine_packet(name, last + 1), last) is None
    assert key.check(engine_packet(name, 2), last) is None  # 4 ahead, across zero
    assert key.check(engine_packet(name, 7), last) is None  # 9 = 3 x Detect Mult 3 ahead
    assert key.check(engine_packet(name, 8), last) == "seq_ahead"
    assert key.check(engine_packet(name, last), last) == "seq_old"  # a repeat
    assert key.check(engine_packet(name, last - 1), last) == "seq_old"


def test_every_other_fault_is_named() -> None:
    name = "meticulous-keyed-md5"
    key = synth_peer.Key(name, KEY_ID, SECRET)
    good = engine_packet(name, 5)
    plain = encode_control(ControlPacket(state=State.UP, my_discr=1))
    assert key.check(plain, None) == "missing"
    assert key.check(engine_packet("meticulous-keyed-sha1", 5), None) == "type"
    assert key.check(engine_packet(name, 5, key_id=KEY_ID + 1), None) == "key_id"
    assert key.check(engine_packet(name, 5, secret=b"another"), None) == "digest"
    flipped = bytearray(good)
    flipped[8] ^= 1  # Your Discriminator: covered by the digest
    assert key.check(bytes(flipped), None) == "digest"
    short = bytearray(good)
    short[25] -= 1
    assert key.check(bytes(short), None) == "length"


def test_the_steady_filter_lets_every_authenticated_packet_through() -> None:
    """A plain fast Up dies in the kernel; the same packet signed (A bit) reaches the reader."""
    plain = encode_control(ControlPacket(state=State.UP, my_discr=7, your_discr=9, desired_min_tx_us=10_000))
    signed = engine_packet("meticulous-keyed-sha1", 1)
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    flt = synth_peer.Filter()
    with rx, tx:
        rx.bind(("127.0.0.1", 0))
        rx.setsockopt(socket.SOL_SOCKET, synth_peer.SO_ATTACH_FILTER, flt.fprog)
        rx.settimeout(2)
        for data in (plain, signed, plain):
            tx.sendto(data, rx.getsockname())
        marker = encode_control(ControlPacket(state=State.DOWN, my_discr=4242))
        tx.sendto(marker, rx.getsockname())
        got = []
        while (data := rx.recv(256)) != marker:
            got.append(data)
    assert got == [signed]


DETECT = 0.030


def _peer(n: int = 3, met: int = 2) -> tuple[synth_peer.Peer, list[bytes]]:
    """A peer with n sessions Up, the first ``met`` meticulous, no sockets: what it sends is kept."""
    peer = object.__new__(synth_peer.Peer)
    peer.n, peer.interval_us, peer.mult = n, 10_000, 3
    peer.src_mac, peer.dst_mac = b"\x02" * 6, b"\x04" * 6
    peer.engine = socket.inet_aton(synth_peer.ENGINE_IP)
    peer.addrs = [socket.inet_aton(synth_peer.peer_address(i)) for i in range(n)]
    peer.index = {a: i for i, a in enumerate(peer.addrs)}
    peer.state, peer.remote, peer.polling = [synth_peer.UP] * n, [0x100 + i for i in range(n)], [False] * n
    peer.periodic, peer.init_set, peer.up, peer.polls_open = [None] * n, set(), n, 0
    peer.members = [[i] for i in range(n)]
    peer.batches = [None] * n
    peer.counts = {"flaps": 0, "recv": 0, "bad": 0, "flaps_after_silence": 0, "sent": 0, "finals_sent": 0}
    peer.silences = synth_peer.Silences(n, DETECT, DETECT)
    peer.met, peer.key = met, synth_peer.Key("meticulous-keyed-sha1", KEY_ID, SECRET)
    peer._init_auth()
    sent: list[bytes] = []
    peer._send = sent.append  # type: ignore[method-assign]
    return peer, sent


def _from_engine(peer: synth_peer.Peer, i: int, seq: int, t_rx: float, **kw: object) -> None:
    pkt = bytearray(engine_packet("meticulous-keyed-sha1", seq, **kw))  # type: ignore[arg-type]
    struct.pack_into("!II", pkt, 4, 0x100 + i, synth_peer.DISCR_BASE + i)
    key = synth_peer.Key("meticulous-keyed-sha1", KEY_ID, SECRET)
    pkt[32:] = key.hash(bytes(pkt[:32]) + key.pad).digest()  # signed again after the discriminators
    peer.on_packet(bytes(pkt), peer.addrs[i], peer.engine, t_rx)


def test_our_packets_carry_a_new_number_each_and_a_good_digest() -> None:
    peer, _ = _peer()
    key = peer.key
    assert key is not None
    first = peer.xmit_seq[0]
    frames = [peer._frame(0, synth_peer.UP, 0) for _ in range(3)]
    payloads = [f[14 + 20 + 8 :] for f in frames]
    assert [synth_peer.seq_of(p) for p in payloads] == [(first + k) & 0xFFFFFFFF for k in range(3)]
    assert all(key.check(p, None) is None and p[1] & synth_peer.FLAG_A for p in payloads)
    plain = peer._frame(2, synth_peer.UP, 0)[14 + 20 + 8 :]  # not meticulous: as before
    assert len(plain) == 24 and not plain[1] & synth_peer.FLAG_A
    # A meticulous session has no prebuilt periodic frame (it would spend a number); a plain one has.
    peer._refresh(0)
    peer._refresh(2)
    assert peer.periodic[0] is None and peer.periodic[2] is not None
    assert peer.counts["auth_signed"] == 3


def test_a_rejected_packet_is_counted_and_not_heard_so_a_run_of_them_expires_the_session() -> None:
    peer, sent = _peer()
    _from_engine(peer, 0, 100, 1.000)
    _from_engine(peer, 0, 101, 1.010)
    assert (peer.counts["recv"], peer.counts["auth_accepted"], peer.rcv_seq[0]) == (2, 2, 101)
    # A jump past the window, then repeats: discarded, not received, not heard.
    _from_engine(peer, 0, 200, 1.020)
    _from_engine(peer, 0, 101, 1.030)
    assert peer.counts["recv"] == 2 and peer.auth_rejected_by["seq_ahead"] == 1
    assert peer.auth_rejected_by["seq_old"] == 1 and peer.counts["auth_rejected"] == 2
    assert peer.heard[0] == 1.010 and peer.state[0] == synth_peer.UP
    # The detection timer, judged when the socket was last found empty.
    peer.empty_at = 1.039
    peer.check_detection()
    assert peer.state[0] == synth_peer.UP
    peer.empty_at = 1.041
    peer.check_detection()
    assert peer.state[0] == synth_peer.DOWN and peer.state[1] == synth_peer.UP  # session 1 never heard
    assert (peer.counts["flaps"], peer.counts["auth_flaps"], peer.counts["auth_detect_expired"]) == (1, 1, 1)
    down = sent[-1][14 + 20 + 8 :]
    assert down[1] >> 6 == synth_peer.DOWN and down[0] & 0x1F == 1 and peer.key.check(down, None) is None
    peer.check_detection()  # Down: no second expiry
    assert peer.counts["auth_detect_expired"] == 1


def test_a_late_packet_expires_the_timer_it_outlived_and_a_long_silence_forgets_the_number() -> None:
    peer, _ = _peer()
    _from_engine(peer, 1, 500, 2.000)
    _from_engine(peer, 1, 501, 2.035)  # 35 ms: the timer expired before this packet came
    assert peer.state[1] == synth_peer.DOWN and peer.counts["auth_detect_expired"] == 1
    assert peer.counts["auth_rejected"] == 0
    # Twice the detection time without an acceptable packet: bfd.AuthSeqKnown lapses, any number goes.
    _from_engine(peer, 1, 9000, 2.200)
    assert peer.counts["auth_seq_forgotten"] == 1 and peer.rcv_seq[1] == 9000


def test_sessions_past_the_meticulous_ones_are_not_checked() -> None:
    peer, _ = _peer(met=1)
    pkt = encode_control(
        ControlPacket(state=State.UP, my_discr=0x102, your_discr=synth_peer.DISCR_BASE + 2,
                      desired_min_tx_us=10_000, required_min_rx_us=10_000)
    )  # fmt: skip
    peer.on_packet(pkt, peer.addrs[2], peer.engine, 1.0)
    assert peer.counts["recv"] == 1 and peer.counts["auth_rejected"] == 0


def test_the_sessions_file_gives_the_first_sessions_the_peers_key_and_is_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "sessions.yml"
    scale.sessions_file(path, 4, 10, auth="meticulous-keyed-md5", auth_count=2)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    got = load_sessions(path)  # the engine's own loader (it refuses a key readable by others)
    assert [s.auth is not None for s in got] == [True, True, False, False]
    auth = got[0].auth
    assert auth is not None and auth.meticulous and auth.key_id == KEY_ID and auth.secret == SECRET
    assert int(auth.type) == int(AuthType.METICULOUS_KEYED_MD5)
    scale.sessions_file(path, 2, 10)
    assert all(s.auth is None for s in load_sessions(path))


def test_the_capture_covers_meticulous_sessions_even_outside_its_net() -> None:
    net = ipaddress.IPv4Network("198.19.33.0/25")
    covered, bpf = takeover.captured(net, 1024, 16)
    assert covered == list(range(127)) and bpf.endswith("(dst net 198.19.33.0/25)")
    far = ipaddress.IPv4Network("198.19.40.0/24")
    covered, bpf = takeover.captured(far, 2000, 20)
    assert covered[: takeover.CAPTURE_SIGNED_MAX] == list(range(takeover.CAPTURE_SIGNED_MAX))
    assert f"dst host {synth_peer.peer_address(0)}" in bpf and covered[takeover.CAPTURE_SIGNED_MAX] > 1000


def _wire_pkt(ts: float, i: int, seq: int, *, bad: bool = False) -> WirePacket:
    data = bytearray(engine_packet("meticulous-keyed-sha1", seq))
    if bad:
        data[-1] ^= 0xFF
    dst = synth_peer.peer_address(i)
    return WirePacket(ts, synth_peer.ENGINE_IP, dst, 49152, 3784, 255, None, bytes(data))


def test_the_wire_of_the_meticulous_sessions_is_checked_as_the_peer_checks_it() -> None:
    key = synth_peer.Key("meticulous-keyed-sha1", KEY_ID, SECRET)
    pkts = [_wire_pkt(10.0 + 0.01 * k, 0, 50 + k) for k in range(5)]
    pkts += [_wire_pkt(10.06, 0, 56)]  # a takeover's step of 2
    pkts += [_wire_pkt(10.10, 0, 70)]  # past the window, after a 40 ms gap
    pkts += [_wire_pkt(10.0 + 0.01 * k, 1, 7 + k, bad=k == 2) for k in range(3)]
    w = takeover.signed_wire(pkts, [0, 1], key, 9.0, 11.0)
    assert w["sessions_captured"] == 2 and w["packets_checked"] == 10
    assert w["worst_gap_ms"] == 40.0 and w["non_up_from_us"] == 0
    assert w["rejects"] == 2 and w["rejects_by"] == {"digest": 1, "seq_ahead": 1}
    assert w["seq_steps"] == {"2": 1, "14": 1}


def test_the_meticulous_figures_are_the_peers_and_the_engines_deltas_for_those_sessions_only() -> None:
    signed = {synth_peer.peer_address(0)}

    def stats(flaps: int, drops: int, prepaid: int) -> dict:
        return {
            "sessions": [
                {"peer": synth_peer.peer_address(0), "local_discr": 1, "flaps": flaps, "state": "up",
                 "drops": {"auth_sequence": drops}},
                {"peer": synth_peer.peer_address(1), "local_discr": 2, "flaps": 9, "state": "down",
                 "drops": {"auth_sequence": 9}},
            ],
            "kernel_clock": {"counters": {"tick_prepaid": prepaid}},
        }  # fmt: skip

    peer0 = {"auth_flaps": 1, "auth_detect_expired": 1, "auth_rejected": 2, "auth_accepted": 10,
             "auth_seq_forgotten": 0, "auth_rejected_by": {"digest": 2, "seq_old": 0}}  # fmt: skip
    peer1 = {"auth_flaps": 3, "auth_detect_expired": 2, "auth_rejected": 5, "auth_accepted": 90,
             "auth_seq_forgotten": 1, "auth_rejected_by": {"digest": 2, "seq_old": 3}}  # fmt: skip
    m = takeover.meticulous_figures(
        signed, peer0=peer0, peer1=peer1, s0=stats(0, 0, 4), s1=stats(2, 3, 40), wire_doc={}
    )
    assert (m["peer_down_events"], m["peer_detect_expired"], m["auth_rejected"]) == (2, 1, 3)
    assert m["auth_rejected_by"] == {"seq_old": 3} and m["auth_accepted"] == 80
    assert (m["engine_flaps"], m["engine_drops"], m["up_at_end"]) == (2, {"auth_sequence": 3}, 1)
    assert m["kernel_sent_signed_ahead"] == 36 and m["peer_seq_forgotten"] == 1


def test_the_options_default_to_no_meticulous_session_and_are_bounded() -> None:
    ap = takeover.parser()
    args = ap.parse_args([])
    assert (args.meticulous, args.auth_type) == (0, "meticulous-keyed-sha1")
    assert takeover.check(args) is None
    args = ap.parse_args(["--sessions", "64", "--meticulous", "65"])
    assert takeover.check(args) == "--meticulous 0-SESSIONS"
    ns = argparse.Namespace(sessions=8, takeovers=1)  # the suite's older arguments: none meticulous
    assert takeover.check(ns) is None


def test_the_engines_reservation_defaults_to_the_units_and_is_checked() -> None:
    ap = takeover.parser()
    assert ap.parse_args([]).engine_reservation == takeover.ENGINE_RESERVATION
    assert takeover.check(ap.parse_args(["--engine-reservation", "3000/10000"])) is None
    for bad in ("3000", "0/10000", "20000/10000", "3 ms/10000", "-1/10000"):
        args = ap.parse_args([f"--engine-reservation={bad}"])
        assert takeover.check(args) == "--engine-reservation RUNTIME/PERIOD in us, 0 < RUNTIME <= PERIOD"
