"""RFC 5880 §6.7 authentication between two real engines, and injected forgeries against it.

Two ``xdp-bfd`` processes, one per namespace, each with a sessions file naming
the other. What is on the wire is judged by the capture and by digests
computed here with hashlib (§6.7.3/§6.7.4: the digest field holds the secret,
zero-padded, while hashing), never by the engine's own codec. Forged packets
are injected from the peer's namespace with the peer's addresses and the
discriminators and sequence numbers read from the capture, so each one
differs from a genuine packet in exactly the property under test.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.capture import Capture, WirePacket, flow, steady
from harness.engine import EngineProcess
from harness.inject import (
    AUTH_TYPES,
    HASHES,
    METICULOUS,
    auth_keyed,
    auth_simple,
    bfd_control,
    keyed_digest,
    send_frames,
    seq_of,
    udp_frame,
)
from harness.netns import Link, Namespace
from harness.wait import wait_until

SECRET = b"bfd-s3cret-14b"  # 14 bytes: fits every type, and is padded for every digest
KEY_ID = 7
MULT = 3
UP_INTERVAL_MS = 50
# The forgery tests use a slower session so that "a sequence number inside the
# window" stays inside it between reading the capture and the frame's arrival
# (the window is 3 x Detect Mult = 9 packets; 4 of them take at least 600 ms here).
INJECT_INTERVAL_MS = 200
INTERVAL_US = INJECT_INTERVAL_MS * 1000
N = 3  # copies of every forged packet
SPORT = 49999
U32 = 1 << 32


# --- independent wire helpers -----------------------------------------------------


def signed(
    *, auth_type: int, key_id: int, seq: int, secret: bytes, my_discr: int, your_discr: int, interval_ms: int
) -> bytes:
    """A keyed control packet in state Up with P (see ``assert_nothing_answered``), signed with ``secret``."""
    _, size = HASHES[auth_type]
    packet = bfd_control(
        state="up",
        flags="PA",
        my_discr=my_discr,
        your_discr=your_discr,
        detect_mult=MULT,
        desired_min_tx_us=interval_ms * 1000,
        required_min_rx_us=interval_ms * 1000,
        auth=auth_keyed(auth_type, key_id, seq, bytes(size)),
    )
    digest = keyed_digest(packet, auth_type, secret)
    return packet[:32] + digest + packet[32 + size :]


def digest_ok(payload: bytes, auth_type: int, secret: bytes) -> bool:
    _, size = HASHES[auth_type]
    packet = payload[: payload[3]]
    return keyed_digest(packet, auth_type, secret) == packet[32 : 32 + size]


# --- two engines ------------------------------------------------------------------


@dataclass
class Pair:
    d: Namespace
    p: Namespace
    a: Link
    b: Link
    ed: EngineProcess  # the engine under attack, in d
    ep: EngineProcess  # its genuine peer, in p
    cap: Capture  # on a (veth-d), started before either engine

    def session(self, engine: EngineProcess) -> dict:
        return engine.session(str(self.b.ip4 if engine is self.ed else self.a.ip4))

    def from_peer(self, pkts: list[WirePacket]) -> list[WirePacket]:
        return [p for p in flow(pkts, src=str(self.b.ip4), dst=str(self.a.ip4)) if p.sport != SPORT]

    def from_engine(self, pkts: list[WirePacket]) -> list[WirePacket]:
        return flow(pkts, src=str(self.a.ip4), dst=str(self.b.ip4))


def sessions_file(
    path: Path, local: Link, peer: Link, *, interval_ms: int, auth_name: str, secret: bytes
) -> Path:
    path.write_text(
        f"- local: '{local.ip4}'\n"
        f"  peer: '{peer.ip4}'\n"
        f"  interface: {local.ifname}\n"
        f"  min_tx_ms: {interval_ms}\n"
        f"  min_rx_ms: {interval_ms}\n"
        f"  detect_mult: {MULT}\n"
        f"  auth: {{type: {auth_name}, key_id: {KEY_ID}, secret: '{secret.decode()}'}}\n"
    )
    path.chmod(0o600)  # a file holding a secret readable by others is refused
    return path


def start_pair(
    topo,
    engine_factory,
    capture_factory,
    tmp_path,
    *,
    auth_name,
    interval_ms,
    secret_d=SECRET,
    secret_p=SECRET,
) -> Pair:
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    cap = capture_factory(d, "veth-d")
    fd = sessions_file(
        tmp_path / "d.yaml", a, b, interval_ms=interval_ms, auth_name=auth_name, secret=secret_d
    )
    fp = sessions_file(
        tmp_path / "p.yaml", b, a, interval_ms=interval_ms, auth_name=auth_name, secret=secret_p
    )
    ed = engine_factory(d, ["--sessions", str(fd)])
    ep = engine_factory(p, ["--sessions", str(fp)])
    # SIGUSR1 (stats) before the handlers are installed would kill an engine.
    for e in (ed, ep):
        e.wait_log("serving 1 sessions", timeout=10)
    return Pair(d, p, a, b, ed, ep, cap)


def wait_both_up(pair: Pair) -> tuple[dict, dict]:
    def up() -> tuple[dict, dict] | None:
        sd, sp = pair.session(pair.ed), pair.session(pair.ep)
        return (sd, sp) if sd["state"] == sp["state"] == "up" else None

    return wait_until(up, timeout=15, interval=0.1, what="both engines' sessions up")


def logs(pair: Pair) -> str:
    return f"engine d:\n{pair.ed.log()}\nengine p:\n{pair.ep.log()}"


# --- 1. every auth type comes up, and the wire shows it -----------------------------


@pytest.mark.timing(stall_ms=100, userspace=True)  # a 3x50 ms flap: detection time less one interval
@pytest.mark.parametrize("auth_name", list(AUTH_TYPES))
def test_engines_come_up_with_auth(topo, engine_factory, capture_factory, tmp_path, auth_name):
    auth_type = AUTH_TYPES[auth_name]
    pair = start_pair(
        topo, engine_factory, capture_factory, tmp_path, auth_name=auth_name, interval_ms=UP_INTERVAL_MS
    )
    wait_both_up(pair)
    # A second of steady state, counted on the wire.
    need = 1000 // UP_INTERVAL_MS
    wait_until(
        lambda: all(
            len(list(steady(f(pair.cap.snapshot())))) >= need for f in (pair.from_peer, pair.from_engine)
        ),
        timeout=10,
        what=f"{need} Up packets each way",
    )
    sd, sp = pair.session(pair.ed), pair.session(pair.ep)
    pkts = pair.cap.stop()

    for name, s in (("d", sd), ("p", sp)):
        assert (s["state"], s["remote_state"], s["flaps"]) == ("up", "up", 0), (name, s, logs(pair))
        # Not one genuine packet was refused on the way up or since.
        assert s["drops"] == {}, (name, s)
    for e in (pair.ed, pair.ep):
        assert e.stats()["counters"]["drop"] == {}, logs(pair)

    for direction, f in (("d->p", pair.from_engine(pkts)), ("p->d", pair.from_peer(pkts))):
        assert len(list(steady(f))) >= need, direction
        states = {p.state for p in f}
        assert "up" in states, (direction, states)
        for p in f:
            assert p.auth, f"{direction}: a control packet without the A bit: {p}"
            assert p.payload[24] == auth_type and p.payload[26] == KEY_ID, (direction, p.payload.hex())
            assert p.length == len(p.payload) == 24 + p.payload[25], (direction, p.payload.hex())
            if auth_type == 1:
                assert p.payload[25] == 3 + len(SECRET) and p.payload[27:] == SECRET, p.payload.hex()
            else:
                assert p.payload[25] == 8 + HASHES[auth_type][1], p.payload.hex()
                # The digest the engine sent is the one RFC 5880 defines (computed here).
                assert digest_ok(p.payload, auth_type, SECRET), (direction, p.payload.hex())
        if auth_type == 1:
            continue
        seqs = [seq_of(p.payload) for p in f]
        steps = [(y - x) % U32 for x, y in itertools.pairwise(seqs)]
        lowest = 1 if auth_type in METICULOUS else 0
        # Within the receiver's window (3 x Detect Mult) each step, and going up overall.
        bad = [(i, s) for i, s in enumerate(steps) if not lowest <= s <= 3 * MULT]
        assert not bad, f"{direction}: sequence steps outside [{lowest}, {3 * MULT}]: {bad[:5]} of {seqs}"
        assert sum(steps) > 0, f"{direction}: the sequence number never moved: {seqs}"
        print(f"{auth_name} {direction}: {len(f)} packets, sequence {seqs[0]} -> {seqs[-1]}")


# --- 2. forged packets against a live keyed session --------------------------------


@dataclass(frozen=True)
class Live:
    pair: Pair
    auth_type: int
    local: int  # engine d's discriminator
    remote: int  # engine p's
    up_since: float


def fresh_peer_packet(pair: Pair) -> WirePacket:
    """Wait for the peer's next packet and return it (its sequence is now bfd.RcvAuthSeq at d)."""
    mark = len(pair.cap.snapshot())

    def probe() -> WirePacket | None:
        new = pair.from_peer(pair.cap.snapshot()[mark:])
        return new[-1] if new else None

    return wait_until(probe, timeout=5, interval=0.01, what="a fresh packet from the peer engine")


def inject(pair: Pair, payload: bytes, copies: int = N) -> None:
    f = udp_frame(
        src_mac=pair.b.mac,
        dst_mac=pair.a.mac,
        src=str(pair.b.ip4),
        dst=str(pair.a.ip4),
        sport=SPORT,
        dport=3784,
        payload=payload,
    )
    assert send_frames(pair.p, "veth-p", [f] * copies) == copies


def assert_undisturbed(live: Live) -> None:
    pair = live.pair
    sd, sp = pair.session(pair.ed), pair.session(pair.ep)
    for name, s in (("d", sd), ("p", sp)):
        assert (s["state"], s["remote_state"], s["flaps"]) == ("up", "up", 0), (name, s, logs(pair))
    assert (sd["local_discr"], sd["remote_discr"]) == (live.local, live.remote), sd
    assert abs(sd["up_since"] - live.up_since) <= 0.005, (sd, live.up_since)
    assert sp["drops"] == {}, sp


def assert_nothing_answered(pair: Pair, mark: int, since: float) -> None:
    """No Final from d since ``mark``: every forged packet carries P, so accepting one means a Final.

    d answers a Poll before it handles the next signal, so once the capture holds
    a packet d sent after ``since`` (taken after the stats showed the drops),
    any such Final would already be on it.
    """
    wait_until(
        lambda: any(p.ts > since for p in pair.from_engine(pair.cap.snapshot()[mark:])),
        timeout=5,
        interval=0.02,
        what="a packet from d sent after the drops were counted",
    )
    new = pair.cap.snapshot()[mark:]
    finals = [p for p in pair.from_engine(new) if p.final]
    polls = [p for p in pair.from_peer(new) if p.poll]
    assert len(finals) == len(polls), f"d answered a forged Poll: {finals}"


def forge_case(live: Live, name: str, reason: str, build) -> None:
    """Inject N copies of ``build(last genuine packet)``; exactly N drops of ``reason``, nothing else."""
    pair = live.pair
    before = pair.ed.stats()
    s_before = next(s for s in before["sessions"] if s["peer"] == str(pair.b.ip4))
    mark = len(pair.cap.snapshot())
    genuine = fresh_peer_packet(pair)
    payload = build(genuine)
    inject(pair, payload)

    base = before["counters"]["drop"].get(reason, 0)
    after = wait_until(
        lambda: (st := pair.ed.stats())["counters"]["drop"].get(reason, 0) >= base + N and st,
        timeout=5,
        what=f"{name}: drop counter {reason!r} to reach {base + N}",
    )
    since = time.time()
    s_after = next(s for s in after["sessions"] if s["peer"] == str(pair.b.ip4))
    want = dict(before["counters"]["drop"])
    want[reason] = base + N
    assert after["counters"]["drop"] == want, f"{name}: drop counters {after['counters']['drop']} != {want}"
    want_own = dict(s_before["drops"])
    want_own[reason] = want_own.get(reason, 0) + N
    assert s_after["drops"] == want_own, f"{name}: session drops {s_after['drops']} != {want_own}"

    injected = [p for p in pair.cap.snapshot()[mark:] if p.sport == SPORT]
    assert len(injected) == N and all(p.payload == payload and p.udp_csum_ok for p in injected), injected
    assert_nothing_answered(pair, mark, since)
    assert_undisturbed(live)


# Software engines both sides: the forged packets must leave the session undisturbed, and a
# machine (or either engine's process) stalled for the detection time less one interval
# (3 x 200 ms - 200) explains a flap without them (a clean-clone run saw one).
@pytest.mark.timing(stall_ms=2 * INJECT_INTERVAL_MS, userspace=True)
@pytest.mark.parametrize("auth_name", ["keyed-sha1", "meticulous-keyed-md5"])
def test_forged_packets_dropped_and_counted(topo, engine_factory, capture_factory, tmp_path, auth_name):
    auth_type = AUTH_TYPES[auth_name]
    pair = start_pair(
        topo, engine_factory, capture_factory, tmp_path, auth_name=auth_name, interval_ms=INJECT_INTERVAL_MS
    )
    sd, _ = wait_both_up(pair)
    # Past the timer-change Poll: the session runs at its configured rate.
    wait_until(
        lambda: (
            (g := pair.from_peer(pair.cap.snapshot()))
            and g[-1].state == "up"
            and g[-1].desired_min_tx_us == INTERVAL_US
            and not (g[-1].poll or g[-1].final)
        ),
        timeout=10,
        what="the peer's steady Up packets",
    )
    genuine = pair.from_peer(pair.cap.snapshot())[-1]
    # The wire and the stats agree on who is who, and our digest matches the peer's.
    assert (genuine.my_discr, genuine.your_discr) == (sd["remote_discr"], sd["local_discr"]), (genuine, sd)
    assert digest_ok(genuine.payload, auth_type, SECRET), genuine.payload.hex()
    live = Live(pair, auth_type, sd["local_discr"], sd["remote_discr"], sd["up_since"])
    wrong_type = 2 if HASHES[auth_type][0] == "sha1" else 5

    def sign(g: WirePacket, **over: object) -> bytes:
        fields: dict = {
            "auth_type": auth_type,
            "key_id": KEY_ID,
            "seq": (seq_of(g.payload) + 3) % U32,  # inside the window whatever the type
            "secret": SECRET,
            "my_discr": g.my_discr,
            "your_discr": g.your_discr,
            "interval_ms": INJECT_INTERVAL_MS,
        }
        fields.update(over)
        return signed(**fields)

    cases = [
        ("wrong_secret", "auth_digest", lambda g: sign(g, secret=b"not-the-secret")),
        # The right digest: only the sequence number is wrong.
        ("old_sequence", "auth_sequence", lambda g: sign(g, seq=(seq_of(g.payload) - 1000) % U32)),
        ("wrong_key_id", "auth_key_id", lambda g: sign(g, key_id=KEY_ID + 1)),
        ("wrong_auth_type", "auth_type", lambda g: sign(g, auth_type=wrong_type)),
        (
            "simple_password_instead",
            "auth_type",
            lambda g: bfd_control(
                state="up",
                flags="PA",
                my_discr=g.my_discr,
                your_discr=g.your_discr,
                desired_min_tx_us=INTERVAL_US,
                required_min_rx_us=INTERVAL_US,
                auth=auth_simple(KEY_ID, SECRET),
            ),
        ),
        (
            "a_bit_clear",
            "auth_missing",
            lambda g: bfd_control(
                state="up",
                flags="P",
                my_discr=g.my_discr,
                your_discr=g.your_discr,
                desired_min_tx_us=INTERVAL_US,
                required_min_rx_us=INTERVAL_US,
            ),
        ),
    ]
    if auth_type in METICULOUS:
        # A byte-for-byte replay of the packet d has just accepted: a meticulous
        # receiver needs every sequence number to be new.
        cases.append(("exact_replay_of_genuine", "auth_sequence", lambda g: g.payload))

    failures = []
    for name, reason, build in cases:
        try:
            forge_case(live, name, reason, build)
        except AssertionError as e:
            failures.append(f"{name}: {e}")
            break  # the session may be disturbed now; later cases would say nothing new
    assert not failures, "\n".join(failures) + "\n" + logs(pair)

    if auth_type not in METICULOUS:
        positive_control(live, sign)


def positive_control(live: Live, sign) -> None:
    """A packet signed here with the right key and the next sequence number IS accepted."""
    pair = live.pair
    before = pair.ed.stats()
    mark = len(pair.cap.snapshot())
    genuine = fresh_peer_packet(pair)
    # The next sequence number: still in the window after the peer's next packet
    # too, and the peer's next one stays in the window after ours (a repeat is
    # fine for the non-meticulous types).
    payload = sign(genuine, seq=(seq_of(genuine.payload) + 1) % U32)
    inject(pair, payload, copies=1)

    def answered() -> WirePacket | None:
        new = pair.cap.snapshot()[mark:]
        at = next((i for i, p in enumerate(new) if p.sport == SPORT), None)
        if at is None:
            return None
        return next((p for p in pair.from_engine(new[at:]) if p.final), None)

    final = wait_until(answered, timeout=3, what="d's Final answering the signed Poll")
    assert (final.my_discr, final.your_discr, final.state) == (live.local, live.remote, "up"), final
    assert final.auth and digest_ok(final.payload, live.auth_type, SECRET), final.payload.hex()
    # The peer's next two genuine packets are still accepted after ours moved the sequence.
    fresh_peer_packet(pair)
    fresh_peer_packet(pair)
    after = pair.ed.stats()
    assert after["counters"]["drop"] == before["counters"]["drop"], logs(pair)
    s_before = next(s for s in before["sessions"] if s["peer"] == str(pair.b.ip4))
    s_after = next(s for s in after["sessions"] if s["peer"] == str(pair.b.ip4))
    assert s_after["drops"] == s_before["drops"]
    assert s_after["rx_packets"] > s_before["rx_packets"]
    assert_undisturbed(live)


# --- 3. different secrets: never Up ---------------------------------------------------


def test_mismatched_secrets_never_come_up(topo, engine_factory, capture_factory, tmp_path):
    pair = start_pair(
        topo,
        engine_factory,
        capture_factory,
        tmp_path,
        auth_name="keyed-sha1",
        interval_ms=UP_INTERVAL_MS,
        secret_d=SECRET,
        secret_p=b"another-secret",
    )

    def digest_drops() -> tuple[int, int]:
        return tuple(e.stats()["counters"]["drop"].get("auth_digest", 0) for e in (pair.ed, pair.ep))

    first = wait_until(
        lambda: (v := digest_drops()) and min(v) >= 1 and v, timeout=10, what="auth_digest drops"
    )
    # It grows: two more of the peer's (slow, 1 s) Down packets refused on each side.
    last = wait_until(
        lambda: (v := digest_drops()) and all(x >= f + 2 for x, f in zip(v, first, strict=True)) and v,
        timeout=10,
        what="auth_digest drops growing on both sides",
    )
    pkts = pair.cap.stop()

    for e in (pair.ed, pair.ep):
        st = e.stats()
        s = st["sessions"][0]
        assert st["counters"]["drop"] == {"auth_digest": st["counters"]["drop"]["auth_digest"]}, st[
            "counters"
        ]
        assert s["drops"] == st["counters"]["drop"], s
        # Never accepted one packet, so never left Down.
        assert (s["state"], s["flaps"], s["up_since"], s["rx_packets"]) == ("down", 0, 0, 0), s
    print(f"auth_digest drops (d, p): {first} -> {last}")

    for direction, f in (("d->p", pair.from_engine(pkts)), ("p->d", pair.from_peer(pkts))):
        assert len(f) >= 3, direction
        assert {p.state for p in f} == {"down"}, (direction, {p.state for p in f})
        assert all(p.auth and p.your_discr == 0 for p in f), direction
    # Each side's packets are correctly signed with its own secret, and not with the other's.
    assert all(digest_ok(p.payload, 4, SECRET) for p in pair.from_engine(pkts))
    assert not any(digest_ok(p.payload, 4, SECRET) for p in pair.from_peer(pkts))
    assert all(digest_ok(p.payload, 4, b"another-secret") for p in pair.from_peer(pkts))
