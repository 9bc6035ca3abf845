"""A synthetic asynchronous BFD peer for many sessions (RFC 5880), run inside a namespace.

FRR cannot drive thousands of sessions at fast timers on this machine, so
``scale.py`` uses this instead. One process owns N peer addresses (one address
pair per session: the engine's address against each of ours, as BFD requires),
and per session it:

* stays silent in Down (passive role, RFC 5880 §6.1) until the engine speaks;
* engine Down (your_discr 0)  -> Init, answered at once with your_discr = the engine's discriminator;
* engine Init or Up            -> Up, sent at once; the change of DesiredMinTx from 1 s (not Up, §6.8.3)
  to the configured interval is announced with a Poll Sequence (P until the engine's F);
* engine Down/AdminDown while we are Up -> Down (counted as a flap seen by the peer);
* any packet with the P bit    -> answered at once with the F bit (§6.5).

In steady state every Up session sends its prebuilt Up frame once per interval,
without the §6.8.7 jitter (a deliberate simplification: a steady cadence). The
interval is cut into slots of at least 1 ms and the sessions spread evenly over
them, so the send rate is smooth (N / interval packets a second, in small
batches, one sendmmsg(2) call a slot); the loop sleeps to absolute slot
deadlines and reports how late it ran and the longest gap it left between two
periodic frames of a session (its witness: a gap past the detection time is a
silence the engine must declare Down). Each Down the engine sends with diag 1
(detection time expired) while we were Up is judged against that witness (by
the kernel's receive stamp): it follows a silence of ours on its slot
(``flaps_after_silence``: a correct detection, the environment's fault) or it
does not (the engine's flap). Frames (Ethernet + IPv4 + UDP with a full
checksum + 24 bytes of BFD) are built once per state change and sent through
an AF_PACKET socket on the interface, which bypasses nothing the engine sees:
they enter the engine's XDP hook exactly as a real peer's would.

Receiving uses one UDP socket bound to 0.0.0.0:3784 (IP_PKTINFO names the
session by its destination address; the bound socket also keeps the namespace
from answering with ICMP port unreachable). While every session is Up and no
Poll is open, a classic BPF socket filter drops the engine's plain Up replies
in the kernel (state Up, neither P nor F, a fast Desired Min TX), so the peer
spends nothing per steady reply; anything else (Down, Init, AdminDown, P, F, an
Up at the slow rate) still reaches it.
The peer does not run its own detection timer (it cannot see the filtered
replies); the engine's replies are counted on the interface by the caller.

With ``--filter always`` the filter is on from the start. At 1024 sessions the
bring-up's plain Up replies alone are ~100 k packets/s, more than this process
reads; stalled in its reader it stops sending, and the DUT rightly declares
its sessions Down. A DUT that comes Up on our Init says so at the slow rate
(§6.8.3; the engine keeps it until we say Up) or with a Poll announcing its
fast rate: either passes the filter. A DUT that sent a plain fast Up before we
were Up would leave our session in Init until it timed out and started over.

With ``--meticulous N`` the first N sessions are authenticated with a
meticulous keyed type (RFC 5880 §6.7.3/§6.7.4, ``--auth-type``; key ID
``--auth-key-id``, the secret ``AUTH_SECRET``). For those sessions only, every
packet of ours carries its own Sequence Number (one more each packet) and
digest, and every packet of the DUT's is checked as a real peer would: the A
bit, the type, the lengths, the key ID, the Sequence Number inside the window
(more than the last one accepted, at most 3 x Detect Mult ahead of it) and the
digest. A packet failing any of them is discarded and counted
(``auth_rejected``, by reason in ``auth_rejected_by``), and it does not count
as heard: the peer runs its own detection timer for these sessions (by the
kernel's receive stamps, so a stall of this process is not a silence of the
DUT's), and a detection time without an accepted packet takes the session Down
(``auth_detect_expired``; a Down with diag 1 goes to the DUT). The steady
filter lets every authenticated packet (A bit) through, so the DUT's plain Up
replies of these sessions reach the checks; the other sessions cost what they
did (the filter passes nothing more of theirs, and their frames are built once
per state change as before).

Status: one JSON line on stdout every ``--status-every`` seconds. Stops on EOF
on stdin, SIGTERM, or after ``--max-seconds``.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import ipaddress
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import time

DOWN, INIT, UP, ADMIN_DOWN = 1, 2, 3, 0
FLAG_P, FLAG_F, FLAG_A = 0x20, 0x10, 0x04
DISCR_BASE = 0x5EED0000
SLOW_TX_US = 1_000_000
PORT = 3784
IP_PKTINFO = 8
SO_ATTACH_FILTER, SO_DETACH_FILTER = 26, 27
SO_RCVBUFFORCE = 33
SO_TIMESTAMPNS = SCM_TIMESTAMPNS = 35
RECV_BATCH = 4096
DRAIN_CHECK = 32

# Engine side and peer addresses: one /19 in the benchmarking range (testbed.md).
SUBNET = ipaddress.IPv4Network("198.19.32.0/19")
ENGINE_IP = "198.19.32.1"
MAX_SESSIONS = 31 * 250

# The meticulous keyed types (RFC 5880 §4.1): the sessions file's name -> (Auth Type, hash, digest size).
AUTH_TYPES = {
    "meticulous-keyed-md5": (3, "md5", 16),
    "meticulous-keyed-sha1": (5, "sha1", 20),
}
# The bench's key: bench/takeover.py writes the same into the engine's sessions file.
AUTH_SECRET = b"synth-peer-key"
AUTH_KEY_ID = 7
# Why a packet of the DUT's was discarded (RFC 5880 §6.7.3), the keys of ``auth_rejected_by``.
AUTH_REASONS = ("missing", "type", "length", "key_id", "seq_old", "seq_ahead", "digest")


def peer_address(i: int) -> str:
    """Session i's peer address: 198.19.33.1 … 198.19.63.250 (250 per /24)."""
    if not 0 <= i < MAX_SESSIONS:
        raise ValueError(f"session index {i} out of range")
    return f"198.19.{33 + i // 250}.{1 + i % 250}"


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def bfd_packet(
    *,
    state: int,
    flags: int,
    mult: int,
    my_discr: int,
    your_discr: int,
    tx_us: int,
    rx_us: int,
    diag: int = 0,
    length: int = 24,
) -> bytes:
    return struct.pack(
        "!BBBBIIIII", 0x20 | diag, (state << 6) | flags, mult, length, my_discr, your_discr, tx_us, rx_us, 0
    )


class Key:
    """A meticulous keyed type's key: signs our packets and checks the DUT's (RFC 5880 §6.7.3/§6.7.4).
    The digest is over the whole packet with the digest field holding the secret, zero-padded."""

    def __init__(self, auth_type: str, key_id: int, secret: bytes) -> None:
        self.type, hash_name, self.size = AUTH_TYPES[auth_type]
        self.hash = getattr(hashlib, hash_name)
        self.key_id = key_id
        self.pad = secret.ljust(self.size, b"\0")
        if len(self.pad) != self.size:
            raise ValueError(f"a secret of at most {self.size} bytes")
        self.auth_len = 8 + self.size  # Auth Type, Auth Len, Key ID, Reserved, Sequence Number, digest

    def sign(self, header: bytes, seq: int) -> bytes:
        """``header`` (24 bytes, A bit and Length already set) with our section at ``seq``."""
        body = header + struct.pack("!BBBxI", self.type, self.auth_len, self.key_id, seq)
        return body + self.hash(body + self.pad).digest()

    def digest_ok(self, data: bytes) -> bool:
        end = 32 + self.size
        return self.hash(data[:32] + self.pad + data[end:]).digest() == data[32:end]

    def check(self, data: bytes, last: int | None) -> str | None:
        """Why ``data`` (a whole BFD packet) must be discarded, or None; ``last``: the Sequence
        Number last accepted (bfd.RcvAuthSeq) while bfd.AuthSeqKnown, else None."""
        if not data[1] & FLAG_A:
            return "missing"
        if len(data) < 32 or data[24] != self.type:
            return "type"
        if data[25] != self.auth_len or data[3] != 24 + self.auth_len or len(data) < data[3]:
            return "length"
        if data[26] != self.key_id:
            return "key_id"
        if last is not None:
            ahead = (seq_of(data) - last) & 0xFFFFFFFF
            if ahead == 0 or ahead >= 0x80000000:
                return "seq_old"  # not strictly greater (circular space)
            if ahead > 3 * data[2]:
                return "seq_ahead"  # past bfd.RcvAuthSeq + 3 x Detect Mult
        return None if self.digest_ok(data[: data[3]]) else "digest"


def seq_of(data: bytes) -> int:
    """The Sequence Number of a keyed authentication section (bytes 28..32 of the packet)."""
    return struct.unpack_from("!I", data, 28)[0]


def frame(*, src_mac: bytes, dst_mac: bytes, src: bytes, dst: bytes, sport: int, payload: bytes) -> bytes:
    udp_len = 8 + len(payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0xC0, 20 + udp_len, 0, 0x4000, 255, 17, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", _csum(ip)) + ip[12:]
    pseudo = src + dst + struct.pack("!BBH", 0, 17, udp_len)
    udp = struct.pack("!HHHH", sport, PORT, udp_len, 0)
    c = _csum(pseudo + udp + payload) or 0xFFFF
    udp = udp[:6] + struct.pack("!H", c)
    return dst_mac + src_mac + b"\x08\x00" + ip + udp + payload


# Classic BPF on the UDP socket (offset 0 = UDP header, 9 = BFD state/flags, 20 = Desired
# Min TX): drop "Up, no P, no F, Desired Min TX under a second", accept everything else. A DUT
# that is Up before us says so at the slow rate (it has not seen us Up), and that must reach us.
# An authenticated packet (A bit) always passes: a meticulous session's every packet is checked.
_STEADY_FILTER = [
    (0x30, 0, 0, 9),  # ldb [9]
    (0x45, 5, 0, FLAG_A),  # jset #0x04 ? accept : next
    (0x54, 0, 0, 0xF0),  # and #0xf0
    (0x15, 0, 3, 0xC0),  # jeq #0xc0 ? next : accept
    (0x20, 0, 0, 20),  # ld [20]
    (0x35, 1, 0, SLOW_TX_US),  # jge #SLOW_TX_US ? accept : drop
    (0x06, 0, 0, 0),  # ret #0 (drop)
    (0x06, 0, 0, 0xFFFFFFFF),  # ret #-1 (accept)
]


class Filter:
    def __init__(self) -> None:
        raw = b"".join(struct.pack("HBBI", *ins) for ins in _STEADY_FILTER)
        self._buf = ctypes.create_string_buffer(raw, len(raw))
        self.fprog = struct.pack("HL", len(_STEADY_FILTER), ctypes.addressof(self._buf))


class Silences:
    """Each slot's recent silences (gaps of at least a detection time between two of its
    periodic frames), to judge a Down the DUT sends: after a silence of ours it is a correct
    detection (the environment's fault: this process was not scheduled), without one it is
    the DUT's flap. Times are the loop's CLOCK_MONOTONIC seconds (the kernel's receive stamps,
    CLOCK_REALTIME, are converted to it).

    A Down is explained by a silence that began at least a detection time before it reached
    us (so the DUT could have expired by then) and ended at most ``lag`` before it (the DUT
    needs time to send its Down; a Down later than that is counted against the DUT), or by a
    silence still open when it arrived.
    """

    KEEP = 4

    def __init__(self, slots: int, detect_s: float, lag_s: float) -> None:
        self.detect_s, self.lag_s = detect_s, lag_s
        self.last: list[float] = [0.0] * slots
        self.gaps: list[list[tuple[float, float]]] = [[] for _ in range(slots)]

    def sent(self, k: int, t: float) -> float:
        """Slot k's frames left at t; returns the gap since its previous send (0 for the first)."""
        was, self.last[k] = self.last[k], t
        if not was:
            return 0.0
        if t - was >= self.detect_s:
            g = self.gaps[k]
            g.append((was, t))
            if len(g) > self.KEEP:
                del g[0]
        return t - was

    def explains(self, k: int, t_rx: float) -> bool:
        """Whether a Down from the DUT for a session of slot k, received at t_rx, follows our silence."""
        if self.last[k] and t_rx - self.last[k] >= self.detect_s:
            return True
        return any(s + self.detect_s <= t_rx <= e + self.lag_s for s, e in self.gaps[k])


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _Msghdr(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_void_p),
        ("namelen", ctypes.c_uint32),
        ("iov", ctypes.POINTER(_Iovec)),
        ("iovlen", ctypes.c_size_t),
        ("control", ctypes.c_void_p),
        ("controllen", ctypes.c_size_t),
        ("flags", ctypes.c_int),
    ]


class _Mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", _Msghdr), ("len", ctypes.c_uint)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.sendmmsg.argtypes = [ctypes.c_int, ctypes.POINTER(_Mmsghdr), ctypes.c_uint, ctypes.c_int]


class Batch:
    """One slot's periodic frames as a sendmmsg(2) vector: one system call a slot, not one a frame
    (at 1024 sessions the per-frame calls were most of this process's CPU)."""

    def __init__(self, frames: list[bytes]) -> None:
        self.count = len(frames)
        self._bufs = [ctypes.create_string_buffer(f, len(f)) for f in frames]
        self._iov = (_Iovec * max(1, self.count))()
        self.msgs = (_Mmsghdr * max(1, self.count))()
        for j, b in enumerate(self._bufs):
            self._iov[j].base = ctypes.addressof(b)
            self._iov[j].len = len(frames[j])
            self.msgs[j].hdr.iov = ctypes.pointer(self._iov[j])
            self.msgs[j].hdr.iovlen = 1

    def send(self, fd: int) -> tuple[int, int]:
        """Send every frame; (sent, failed). A short count is retried from where it stopped."""
        done = failed = 0
        while done + failed < self.count:
            start = done + failed
            msgs = ctypes.cast(
                ctypes.byref(self.msgs, start * ctypes.sizeof(_Mmsghdr)), ctypes.POINTER(_Mmsghdr)
            )
            n = _libc.sendmmsg(fd, msgs, self.count - start, 0)
            if n <= 0:
                failed += 1  # the frame at the head could not go; the rest still try
            else:
                done += n
        return done, failed


class Peer:
    # Sessions 0 .. met-1 are meticulous-authenticated with ``key`` (none by default).
    met = 0
    key: Key | None = None

    def __init__(self, args: argparse.Namespace) -> None:
        self.n = args.count
        self.interval_us = args.interval_ms * 1000
        self.mult = args.mult
        self.src_mac = bytes.fromhex(args.src_mac.replace(":", ""))
        self.dst_mac = bytes.fromhex(args.dst_mac.replace(":", ""))
        self.engine = socket.inet_aton(ENGINE_IP)
        self.addrs = [socket.inet_aton(peer_address(i)) for i in range(self.n)]
        self.index = {a: i for i, a in enumerate(self.addrs)}
        self.state = [DOWN] * self.n
        self.remote = [0] * self.n
        self.polling = [False] * self.n
        self.periodic: list[bytes | None] = [None] * self.n
        self.init_set: set[int] = set()
        self.counts = {
            "flaps": 0,
            "sent": 0,
            "recv": 0,
            "finals_sent": 0,
            "polls_done": 0,
            "send_errors": 0,
            "bad": 0,
            "filter_swaps": 0,
            "slots": 0,
            "late_slots": 0,
            "resyncs": 0,
            "gaps_over_detect": 0,
            "flaps_after_silence": 0,
        }
        self.met = min(self.n, getattr(args, "meticulous", 0) or 0)
        if self.met:
            self.key = Key(args.auth_type, args.auth_key_id, AUTH_SECRET)
            self._init_auth()
        self.up = self.polls_open = 0
        self.late_max_us = 0
        self.gap_max_us = 0
        self.filter = Filter()
        self.steady = False
        self.filter_always = args.filter == "always"

        self.tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        self.tx.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        self.tx.bind((args.ifname, 0))
        self.rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 16 << 20)
        self.rx.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
        self.rx.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.rx.bind(("0.0.0.0", PORT))
        self.rx.setblocking(False)

        slots = max(1, min(self.n, args.interval_ms))
        self.slot_us = self.interval_us / slots
        self.members = [list(range(k, self.n, slots)) for k in range(slots)]
        # The meticulous sessions of each slot: signed afresh every packet, outside the slot's batch.
        self.signed = [[i for i in m if i < self.met] for m in self.members]
        self.batches: list[Batch | None] = [None] * slots  # rebuilt when a member's frame changes
        # A Down may reach us up to one more detection time after our silence ended.
        detect_s = self.mult * self.interval_us / 1e6
        self.silences = Silences(slots, detect_s, lag_s=detect_s)

    def _init_auth(self) -> None:
        """Per meticulous session: bfd.XmitAuthSeq (random, §6.8.1), bfd.RcvAuthSeq and whether it
        is known, when the last accepted packet arrived and the detection time it set."""
        m = self.met
        self.xmit_seq = [random.getrandbits(32) for _ in range(m)]
        self.rcv_seq = [0] * m
        self.seq_known = [False] * m
        self.heard = [0.0] * m  # when the last packet was accepted (monotonic; 0: none yet)
        self.detect_s = [self.mult * max(self.interval_us, SLOW_TX_US) / 1e6] * m
        self.empty_at = 0.0  # when the receive socket was last found empty (monotonic)
        self.auth_rejected_by = dict.fromkeys(AUTH_REASONS, 0)
        for k in ("auth_accepted", "auth_signed", "auth_rejected", "auth_flaps", "auth_detect_expired"):
            self.counts[k] = 0
        self.counts["auth_seq_forgotten"] = 0

    # -- frames ---------------------------------------------------------------

    def _frame(self, i: int, state: int, flags: int, diag: int = 0) -> bytes:
        tx_us = self.interval_us if state == UP else max(self.interval_us, SLOW_TX_US)
        fields = {
            "state": state,
            "mult": self.mult,
            "my_discr": DISCR_BASE + i,
            "your_discr": self.remote[i],
            "tx_us": tx_us,
            "rx_us": self.interval_us,
            "diag": diag,
        }
        if i < self.met:
            # Meticulous: every packet its own Sequence Number, so its own digest (§6.7.3).
            key = self.key
            assert key is not None
            head = bfd_packet(flags=flags | FLAG_A, length=24 + key.auth_len, **fields)
            seq, self.xmit_seq[i] = self.xmit_seq[i], (self.xmit_seq[i] + 1) & 0xFFFFFFFF
            payload = key.sign(head, seq)
            self.counts["auth_signed"] += 1
        else:
            payload = bfd_packet(flags=flags, **fields)
        return frame(
            src_mac=self.src_mac,
            dst_mac=self.dst_mac,
            src=self.addrs[i],
            dst=self.engine,
            sport=49152 + i % 16384,
            payload=payload,
        )

    def _send(self, f: bytes) -> None:
        try:
            self.tx.send(f)
            self.counts["sent"] += 1
        except OSError:
            self.counts["send_errors"] += 1

    def _refresh(self, i: int) -> None:
        """Rebuild the periodic frame after a change of state, discriminator or Poll."""
        s = self.state[i]
        if s == UP and i >= self.met:  # a meticulous session's are signed as they leave
            self.periodic[i] = self._frame(i, UP, FLAG_P if self.polling[i] else 0)
        else:
            self.periodic[i] = None
        self.batches[i % len(self.batches)] = None
        if s == INIT:
            self.init_set.add(i)
        else:
            self.init_set.discard(i)

    def _set_state(self, i: int, new: int) -> None:
        old = self.state[i]
        if new == old:
            return
        if old == UP:
            self.up -= 1
            self.counts["flaps"] += 1
            if i < self.met:
                self.counts["auth_flaps"] += 1
            if self.polling[i]:
                self.polling[i] = False
                self.polls_open -= 1
        if new == UP:
            self.up += 1
            # §6.8.3: DesiredMinTx leaves the 1 s floor now; announce it with a Poll.
            if self.interval_us != SLOW_TX_US:
                self.polling[i] = True
                self.polls_open += 1
        self.state[i] = new
        self._refresh(i)

    # -- input ----------------------------------------------------------------

    def on_packet(self, data: bytes, dst: bytes, src: bytes, t_rx: float = 0.0) -> None:
        """One packet from the DUT, received at t_rx (monotonic; 0 when unknown)."""
        if len(data) < 24 or data[0] >> 5 != 1 or src != self.engine:
            self.counts["bad"] += 1
            return
        bits = data[1]
        state, flags = bits >> 6, bits & 0x3F
        my_discr, your_discr = struct.unpack_from("!II", data, 4)
        i = your_discr - DISCR_BASE if your_discr else self.index.get(dst, -1)
        if not 0 <= i < self.n or self.addrs[i] != dst:
            self.counts["bad"] += 1
            return
        if i < self.met and not self._accept(i, data, t_rx or time.monotonic()):
            return  # discarded: neither received nor heard (§6.7.3)
        self.counts["recv"] += 1
        if self.remote[i] != my_discr:
            self.remote[i] = my_discr
            self._refresh(i)
        ours = self.state[i]
        if state == ADMIN_DOWN:
            new = DOWN
        elif ours == DOWN:
            new = INIT if state == DOWN else UP if state == INIT else DOWN
        elif ours == INIT:
            new = UP if state in (INIT, UP) else INIT
        else:
            new = DOWN if state == DOWN else UP
        changed = new != ours
        # Diag 1 (Control Detection Time Expired): the DUT heard nothing for a detection time.
        expired = ours == UP and new == DOWN and data[0] & 0x1F == 1 and t_rx > 0
        if expired and self.silences.explains(i % len(self.members), t_rx):
            self.counts["flaps_after_silence"] += 1
        self._set_state(i, new)
        if flags & FLAG_F and self.polling[i]:
            self.polling[i] = False
            self.polls_open -= 1
            self.counts["polls_done"] += 1
            self._refresh(i)
        if flags & FLAG_P:
            self._send(self._frame(i, self.state[i], FLAG_F))
            self.counts["finals_sent"] += 1
        elif changed and self.state[i] != DOWN:
            # §6.8.7: a changed state goes out at once, not at the next slot.
            self._send(self._frame(i, self.state[i], FLAG_P if self.polling[i] else 0))

    def _accept(self, i: int, data: bytes, t_rx: float) -> bool:
        """A meticulous session's packet from the DUT: checked (§6.7.3), and if good, heard."""
        key = self.key
        assert key is not None
        # bfd.AuthSeqKnown lapses after twice the detection time without a packet (§6.8.1).
        if self.seq_known[i] and self.heard[i] and t_rx - self.heard[i] > 2 * self.detect_s[i]:
            self.seq_known[i] = False
            self.counts["auth_seq_forgotten"] += 1
        why = key.check(data, self.rcv_seq[i] if self.seq_known[i] else None)
        if why is not None:
            self.counts["auth_rejected"] += 1
            self.auth_rejected_by[why] += 1
            return False
        self.counts["auth_accepted"] += 1
        self.rcv_seq[i], self.seq_known[i] = seq_of(data), True
        # Our detection timer: heard nothing for a detection time before this packet came, it expired.
        if self.state[i] == UP and self.heard[i] and t_rx - self.heard[i] > self.detect_s[i]:
            self._expire(i)
        self.heard[i] = t_rx
        # §6.8.4: the DUT's Detect Mult x max(our Required Min RX, its Desired Min TX).
        tx_us = struct.unpack_from("!I", data, 12)[0]
        self.detect_s[i] = data[2] * max(self.interval_us, tx_us) / 1e6
        return True

    def _expire(self, i: int) -> None:
        """A meticulous session heard nothing acceptable for a detection time: Down, diag 1, said once."""
        self.counts["auth_detect_expired"] += 1
        self._set_state(i, DOWN)  # the timer stops with Up; ``heard`` still ages bfd.AuthSeqKnown
        self._send(self._frame(i, DOWN, 0, diag=1))

    def check_detection(self) -> None:
        """The meticulous sessions' detection timers, judged at the moment the receive socket was
        last found empty (every packet stamped before it has been read): not this process's stall."""
        at = self.empty_at
        for i in range(self.met):
            if self.state[i] == UP and self.heard[i] and at - self.heard[i] > self.detect_s[i]:
                self._expire(i)

    def drain(self, until: float) -> None:
        """Read what is queued, but hand the loop back once ``until`` (the next slot) is due:
        at ~10 us a packet, one unbounded batch was a 40 ms silence towards every session."""
        # The kernel stamps in CLOCK_REALTIME; the loop keeps time in CLOCK_MONOTONIC.
        to_mono = time.monotonic() - time.time()
        met = self.met
        for n in range(RECV_BATCH):
            if n % DRAIN_CHECK == DRAIN_CHECK - 1 and time.monotonic() >= until:
                return
            # Before the read: if it finds the socket empty, every packet stamped before this was read.
            t_try = time.monotonic() if met else 0.0
            try:
                data, anc, _flags, addr = self.rx.recvmsg(128, 128)
            except (BlockingIOError, InterruptedError):
                if met:
                    self.empty_at = t_try
                return
            dst, t_rx = b"", 0.0
            for level, kind, value in anc:
                if level == socket.IPPROTO_IP and kind == IP_PKTINFO and len(value) >= 12:
                    dst = value[8:12]  # struct in_pktinfo: ifindex, spec_dst, addr
                elif level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and len(value) >= 16:
                    sec, nsec = struct.unpack_from("qq", value)
                    t_rx = sec + nsec / 1e9 + to_mono
            self.on_packet(data, dst, socket.inet_aton(addr[0]), t_rx)

    def update_filter(self) -> None:
        want = self.filter_always or (self.up == self.n and self.polls_open == 0)
        if want == self.steady:
            return
        if want:
            self.rx.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, self.filter.fprog)
        else:
            self.rx.setsockopt(socket.SOL_SOCKET, SO_DETACH_FILTER, 0)
        self.steady = want
        self.counts["filter_swaps"] += 1

    # -- loop -----------------------------------------------------------------

    def status(self, t0: float) -> dict:
        states = {"down": 0, "init": 0, "up": 0}
        for s in self.state:
            states["up" if s == UP else "init" if s == INIT else "down"] += 1
        usage = os.times()
        doc: dict[str, object] = {
            "t": round(time.monotonic() - t0, 3),
            **states,
            "polls_open": self.polls_open,
            "steady_filter": self.steady,
            "late_max_ms": round(self.late_max_us / 1000, 3),
            "gap_max_ms": round(self.gap_max_us / 1000, 3),
            "cpu_s": round(usage.user + usage.system, 3),
            **self.counts,
        }
        if self.met:
            doc["auth_sessions"] = self.met
            doc["auth_rejected_by"] = dict(self.auth_rejected_by)
        self.late_max_us = self.gap_max_us = 0
        return doc

    def run(self, max_seconds: float, status_every: float) -> None:
        stop = {"now": False}
        signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
        t0 = time.monotonic()
        end = t0 + max_seconds
        slot_s = self.slot_us / 1e6
        nslots = len(self.members)
        next_slot, k = t0, 0
        fd = self.tx.fileno()
        slip_s = self.interval_us / 4e6
        detect_us = self.mult * self.interval_us
        next_status = t0
        next_init = t0 + 1.0
        print(
            json.dumps({"ready": True, "slots": nslots, "slot_ms": round(self.slot_us / 1000, 3)}), flush=True
        )
        while not stop["now"]:
            now = time.monotonic()
            if now >= end:
                break
            wait = max(0.0, min(next_slot, next_status, end) - now)
            readable, _, _ = select.select([self.rx, sys.stdin], [], [], wait)
            if sys.stdin in readable and not sys.stdin.buffer.read1(4096):
                break
            if self.rx in readable:
                self.drain(until=next_slot)
                self.update_filter()
            elif self.met:
                self.empty_at = now  # nothing queued when select returned, so nothing stamped before it
            if self.met:
                self.check_detection()
            now = time.monotonic()
            # The witness of this process's own punctuality: how late the due slot is, read
            # before a resync can hide it (a stall past the detection time silences every
            # session of the slot, and the engine is right to declare them Down).
            self.late_max_us = max(self.late_max_us, int((now - next_slot) * 1e6))
            # Send every slot that is due. Catching up in full after a stall would send a
            # slot's sessions early on the next round (interval - lateness); the schedule
            # slips by what lies beyond a quarter of the interval, so no session's gap
            # drops below 0.75 x interval (RFC 5880 §6.8.7). Slipping the whole lateness
            # instead added every small stall to every session's next gap.
            if now - next_slot > slip_s:
                self.counts["resyncs"] += 1
                next_slot = now - slip_s
            while next_slot <= now:
                late = int((now - next_slot) * 1e6)
                self.counts["slots"] += 1
                if late > self.slot_us:
                    self.counts["late_slots"] += 1
                # The witness that matters to the DUT: this slot's sessions' gap since their
                # last periodic frame (a gap past the detection time is a peer the DUT must
                # declare Down, not a fault of the DUT).
                gap = int(self.silences.sent(k, now) * 1e6)
                self.gap_max_us = max(self.gap_max_us, gap)
                if gap >= detect_us:
                    self.counts["gaps_over_detect"] += 1
                batch = self.batches[k]
                if batch is None:
                    frames = [f for f in (self.periodic[i] for i in self.members[k]) if f is not None]
                    batch = self.batches[k] = Batch(frames)
                sent, failed = batch.send(fd)
                self.counts["sent"] += sent
                self.counts["send_errors"] += failed
                for i in self.signed[k]:
                    if self.state[i] == UP:
                        self._send(self._frame(i, UP, FLAG_P if self.polling[i] else 0))
                k = (k + 1) % nslots
                next_slot += slot_s
            if now >= next_init:
                # Init is repeated at the slow rate (DesiredMinTx >= 1 s while not Up).
                for i in list(self.init_set)[:RECV_BATCH]:
                    self._send(self._frame(i, INIT, 0))
                next_init = now + 1.0
            if now >= next_status:
                print(json.dumps(self.status(t0)), flush=True)
                next_status = now + status_every
        print(json.dumps(self.status(t0) | {"final": True}), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ifname", required=True)
    ap.add_argument("--src-mac", required=True, help="our interface's MAC")
    ap.add_argument("--dst-mac", required=True, help="the engine's interface MAC")
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--interval-ms", type=int, required=True)
    ap.add_argument("--mult", type=int, default=3)
    ap.add_argument("--max-seconds", type=float, default=300.0)
    ap.add_argument("--status-every", type=float, default=1.0)
    ap.add_argument(
        "--filter",
        default="steady",
        choices=("steady", "always"),
        help="when the engine's plain Up replies are dropped in the kernel: once every session is Up"
        " and no Poll is open, or from the start (for a DUT that polls as it comes Up)",
    )
    ap.add_argument(
        "--meticulous",
        type=int,
        default=0,
        metavar="N",
        help="the first N sessions meticulous-authenticated (key ID --auth-key-id, the secret AUTH_SECRET)",
    )
    ap.add_argument("--auth-type", default="meticulous-keyed-sha1", choices=tuple(AUTH_TYPES))
    ap.add_argument("--auth-key-id", type=int, default=AUTH_KEY_ID)
    args = ap.parse_args()
    if not 0 <= args.meticulous <= args.count or not 0 <= args.auth_key_id <= 255:
        ap.error("--meticulous 0-COUNT, --auth-key-id 0-255")
    if not 1 <= args.count <= MAX_SESSIONS or not 1 <= args.interval_ms <= 60_000:
        ap.error(f"--count 1-{MAX_SESSIONS}, --interval-ms 1-60000")
    Peer(args).run(args.max_seconds, args.status_every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
