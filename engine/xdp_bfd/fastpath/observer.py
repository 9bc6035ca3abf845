"""Keeps the XDP fast path's view of each session in step with the state machine.

The session decides; this module only mirrors the decision into the maps
(one write when something changes, never per packet) and feeds the kernel's
reports (expiries, Polls it answered) back into the sessions. In steady state
the only periodic work is the dead-man heartbeat: O(1) per tick, whatever the
number of sessions.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

from ..core import links
from ..core.clock import now_us
from ..core.host import Entry, Host, PacketCounts
from ..session import AuthConfig, Rejected, SessionConfig
from ..wire.control import (
    MIN_LEN,
    MIN_LEN_AUTH,
    CodecError,
    Flag,
    State,
    amended,
    decode_control,
    encode_control,
)
from .kernel import FastPath
from .slots import mapped16

log = logging.getLogger("xdp_bfd")

# int, not Flag: the complement of a Flag holds only the other flags, and the State bits would go.
_POLL_FINAL = int(Flag.POLL | Flag.FINAL)


def verified_packet(raw: bytes, auth: AuthConfig, most: int) -> bytes:
    """What the kernel may accept again without a digest check for an authenticated session: the
    whole of the last packet the session verified (up to its Length), if it is a plain periodic
    one (no P, no F) under the configured key; empty (nothing accepted) otherwise."""
    if len(raw) < MIN_LEN_AUTH or raw[1] & _POLL_FINAL or not raw[1] & Flag.AUTH:
        return b""
    length = raw[3]
    if not MIN_LEN_AUTH <= length <= min(len(raw), most) or raw[24] != auth.type or raw[26] != auth.key_id:
        return b""
    return raw[:length]


def steady_template(raw: bytes, size: int) -> bytes:
    """What the peer's steady packet looks like (the kernel compares all ``size`` bytes of it):
    its last one without P and F, if it had no auth section; zeros (never matching) otherwise."""
    if len(raw) >= size and raw[3] == MIN_LEN and not raw[1] & Flag.AUTH:
        return raw[:1] + bytes([raw[1] & ~_POLL_FINAL & 0xFF]) + raw[2:size]
    return bytes(size)


def path_ifindex(cfg: SessionConfig) -> int:
    """The interface the kernel's indexes tie a session to: 0 for a multihop or unbound one."""
    if cfg.multihop or cfg.interface is None:
        return 0
    return links.index_of(cfg.interface)


def index_of(cfg: SessionConfig, discr: int) -> dict[str, Any]:
    """What the kernel's indexes key a session by (Slots.install)."""
    return {
        "local": cfg.local,
        "peer": cfg.peer,
        "ifindex": path_ifindex(cfg),
        "multihop": cfg.multihop,
        "discr": discr,
    }


class Offload:
    """The fast path as a session observer (core.host.SessionObserver)."""

    def __init__(self, host: Host, fp: FastPath) -> None:
        self.host, self.fp = host, fp
        # The engine<->kernel values, as the header this build compiled defines them.
        self.cfg_flag, self.event = fp.abi.CfgFlag, fp.abi.Event
        # The same flags as plain ints for serviced(): an IntFlag's | costs many times an int's, and
        # every service of a session ORs several (a takeover's successor services a thousand at once).
        self.cfg_bits = SimpleNamespace(**{m.name: int(m) for m in fp.abi.CfgFlag})
        self.control_len, self.pkt_max = fp.abi.control_len, fp.abi.pkt_max
        self.pass_hold_us = fp.abi.constants["BFD_PASS_HOLD_IDLE_NS"] // 1000
        self.by_slot: dict[int, int] = {}  # slot -> local discriminator
        self.slots = fp.slots
        self.ifindexes = fp.program.interfaces()  # a takeover's swap may still be under way (Swap)
        # slot -> the Down sent ahead for a reported expiry (None: none could be), from the read
        # that reported it to the session's own handling.
        self.ahead: dict[int, bytes | None] = {}
        # The tick program's run of Downs (Clock.send_downs), set when the transmit clock's loop runs:
        # it returns the slots it could not take.
        self.kernel_downs: Callable[[Sequence[tuple[int, bytes]]], list[int]] | None = None
        self.down_batch = fp.abi.down_batch
        # slot -> (watch, configuration) whose Down the courier holds (down_pkt): written once per both.
        self.down_for: dict[int, tuple[int, Any]] = {}
        fp.events.ahead(self.event.EXPIRED, self.send_downs)
        fp.events.next(self.event.EXPIRED, self.announce_expiry)
        fp.events.on(self.event.EXPIRED, self.on_event)
        fp.events.on(self.event.POLL, self.on_event)
        host.watch(fp.events.open(), self._consume)
        # The gate must be refreshed well inside the dead-man bound, but never so
        # often that it becomes per-session work: it is one map write.
        deadman_us = fp.gate.deadman_ns // 1000
        self.beat_us = max(10_000, min(250_000, deadman_us // 4 if deadman_us else 250_000))
        self._beat(now_us())

    def _consume(self, _now: int) -> None:
        if self.fp.events.consume():
            # Reports left past the turn's bound: the ring's fd will not say so, a timer due now does.
            self.host.call_at(now_us(), self._consume)

    def _beat(self, now: int) -> None:
        self.fp.gate.heartbeat(time.monotonic_ns())
        self.host.call_at(now + self.beat_us, self._beat)

    # -- sessions ---------------------------------------------------------------

    def offloaded(self, entry: Entry) -> bool:
        """Packets of this session cross an interface we watch, so the kernel sees them all."""
        cfg = entry.session.config
        if cfg.multihop:
            return bool(self.ifindexes)
        return cfg.interface is not None and cfg.interface in self.ifindexes

    def _path_ifindex(self, entry: Entry) -> int:
        return path_ifindex(entry.session.config)

    def _index(self, entry: Entry) -> dict[str, Any]:
        return index_of(entry.session.config, entry.session.local_discr)

    def added(self, entry: Entry) -> None:
        # Every session gets a slot, offloaded or not: XDP validates every BFD
        # packet on the interfaces it watches and drops those of unknown sessions.
        s = entry.session
        slot = self.slots.alloc(s.local_discr)
        entry.slot = slot
        entry.epoch = 1
        entry.offloaded = self.offloaded(entry)
        self.by_slot[slot] = s.local_discr
        self.slots.install(slot, **self._index(entry))
        self.serviced(entry)

    def adopted(self, entry: Entry) -> None:
        """A session handed over with its slot (--pin): the kernel's view of it is already there.

        Its configuration is written when the host services it, once every
        adopted session is in (the predecessor's serves until then).
        """
        assert entry.slot is not None
        s = entry.session
        self.by_slot[entry.slot] = s.local_discr
        self.slots.install(entry.slot, **self._index(entry))
        if entry.detect_armed:
            self.down_for[entry.slot] = (entry.epoch, s.config)  # the predecessor wrote it
        st = self.slots.read_state(entry.slot)
        if entry.detect_armed and st.expired_epoch == entry.epoch:
            # The sweep reported this silence while no engine was reading its ring.
            log.info("kernel-tx: discriminator %d expired during the handover", s.local_discr)
            s.detection_expired(now_us())

    def removed(self, entry: Entry) -> None:
        if entry.slot is None:
            return
        self.slots.uninstall(entry.slot, **self._index(entry))
        self.by_slot.pop(entry.slot, None)
        self.ahead.pop(entry.slot, None)
        self.down_for.pop(entry.slot, None)
        entry.slot = None

    @staticmethod
    def answers(entry: Entry) -> bool:
        """XDP replies to each of the peer's packets for this session (its RX-clocked transmission)."""
        s = entry.session
        cfg = s.config
        # Up before the peer, the session sends once a second by itself until the peer says Up
        # (docs/engine.md), as the kernel clock waits for it (clock.Clock.wanted): the offload
        # starts with the fast rate.
        if not entry.offloaded or not s.both_up or cfg.auth is not None:
            return False
        if cfg.demand or s.remote_demand or s.remote_min_rx_us == 0 or s.remote_discr == 0:
            return False
        # RX-clocked TX replies once per peer packet: only safe when the peer
        # sends at least as often as we must (RFC 5880 §6.8.7 with asymmetric
        # timers is userspace's job).
        peer_interval = max(s.remote_desired_tx_us, s.required_min_rx_us)
        return peer_interval <= s.tx_interval_us

    @staticmethod
    def kernel_detects(entry: Entry) -> bool:
        """The sweep, not the session's timer, detects this session's silence.

        For an authenticated session the kernel counts as alive only what the
        session verified: a packet byte for byte the last one it verified
        (XDP compares, computing no digest), and the session's own
        verifications (cfg.verified_ns), so a forger on the link cannot keep a
        dead peer alive. Not for the meticulous types, whose every packet must
        carry a new Sequence Number: no packet repeats, so the kernel would
        only watch the session's clock. Not while we are in Demand mode: the
        peer is silent by request then, and only an unanswered Poll times out
        (§6.8.4), which the session times itself.
        """
        s = entry.session
        auth = s.config.auth
        return entry.offloaded and not (auth and auth.meticulous) and not s.local_demand_active

    def serviced(self, entry: Entry) -> None:
        """Write the session's kernel config if anything in it changed."""
        if entry.slot is None:
            return
        s = entry.session
        cfg = s.config
        s.detection_external = self.kernel_detects(entry)  # a reconfiguration may have changed it
        detect = s.detection_external and s.state in (State.INIT, State.UP)
        if detect and not entry.detect_armed:
            entry.epoch += 1  # a new watch: an old expiry report must not count
        if detect:
            known = self.down_for.get(entry.slot)
            if known is None or known[0] != entry.epoch or known[1] is not cfg:
                # Built now (once per configuration, kept by the machine), not in a mass expiry's
                # run, and handed to the kernel's courier before the kernel watches with it.
                self.slots.write_down(entry.slot, entry.epoch, s.expiry_datagram())
                self.down_for[entry.slot] = (entry.epoch, cfg)
        entry.detect_armed = detect
        ktx = self.answers(entry)
        f = self.cfg_bits
        flags = f.ACTIVE
        if s.state == State.UP:
            flags |= f.ECHO  # a peer echoes only over an Up session
            if cfg.auth is None and entry.offloaded:
                flags |= f.FINAL  # the reply template is an Up packet: valid only now
        if ktx:
            flags |= f.KTX
        if detect:
            flags |= f.DETECT
        auth_fields: dict[str, Any] = {}
        if cfg.auth is not None:
            flags |= f.AUTH
            seq = s.rcv_auth_seq if cfg.auth.keyed else None
            if seq is not None:
                flags |= f.AUTH_SEQ
            # Only while the kernel watches the session may it take a repeat for the verified packet.
            verified = verified_packet(entry.last_rx_raw, cfg.auth, self.pkt_max) if detect else b""
            auth_fields = {
                "auth_type": int(cfg.auth.type),
                "auth_key_id": cfg.auth.key_id,
                "auth_seq": seq or 0,
                "expect": verified,
                "expect_len": len(verified),
                "verified_ns": s.last_rx_us * 1000,
            }
        # The kernel answers only while Up and fills Your Discriminator from the
        # peer's packet (so the reply stays right across a peer restart). During our
        # own Poll every periodic packet carries P (§6.5), once the session's own first
        # P has gone out (Session.poll_announced); the peer's Final is not steady, so
        # it reaches the session, which ends the Poll and this P with it.
        # Never read for an authenticated session (XDP answers none of them: a reply would need a
        # digest), so not built for one either: its every verified packet services it.
        reply = (
            encode_control(amended(s.current_packet(), state=State.UP, your_discr=0, poll=s.poll_announced))
            if cfg.auth is None
            else b""
        )
        expect = steady_template(entry.last_rx_raw, self.control_len)
        kcfg = {
            "flags": int(flags),
            "local_discr": s.local_discr,
            "peer": mapped16(cfg.peer),
            "ifindex": self._path_ifindex(entry),
            "epoch": entry.epoch,
            "min_gap_ns": s.tx_interval_us * 750,
            "detect_ns": s.detect_time_us * 1000,
            "sport": socket.htons(entry.tx.sport),
            "dport": socket.htons(entry.tx.dport),
            "multihop": int(cfg.multihop),
            "min_ttl": cfg.minimum_ttl if cfg.multihop else 255,
            "reply": reply,
            "expect": expect,
            **auth_fields,
        }
        s.periodic_tx_external = ktx
        # XDP holds back repeats of what it passed up (BFD_PASS_HOLD_IDLE_NS while it does not
        # watch the session) for every session it sees but an authenticated one, whose packets
        # all reach the session.
        s.rx_hold_us = self.pass_hold_us if entry.offloaded and cfg.auth is None else 0
        if kcfg != entry.kcfg:
            self.slots.write_cfg(entry.slot, kcfg)
            entry.kcfg = kcfg

    # -- kernel reports ---------------------------------------------------------

    def _reported(self, ev: Any) -> Entry | None:
        """The session a report is about, unless it went away or was re-armed since."""
        discr = self.by_slot.get(ev.slot)
        entry = self.host.sessions.get(discr) if discr is not None else None
        if entry is None or ev.epoch != entry.epoch:
            return None
        return entry

    def send_downs(self, evs: Sequence[Any]) -> None:
        """The expiries of one read of the ring: each session's Down leaves, at once.

        A session's own handling (kernel config, timers, log line) costs a
        hundred microseconds or more here, its machine's transition and report
        to the controller tens; one walk that finds a thousand peers silent
        would hold the last Down back by that much per session before it
        (docs/benchmarks.md, "Every peer silent at once"). With the transmit
        clock's loop a run of Downs is one frame per ``down_batch`` of them;
        without, a send each. The transition and the report follow in
        :meth:`announce_expiry`, the rest in :meth:`on_event`.
        """
        run: list[tuple[int, Entry, bytes]] = []
        kernel = self.kernel_downs
        for ev in evs:
            entry = self._reported(ev)
            if entry is None or ev.slot in self.ahead:
                continue  # two CPUs may both report one silence: one Down
            down = entry.session.expiry_datagram()
            if ev.queued:
                # The sweep handed it to the kernel's courier, which sends it without us.
                self.ahead[ev.slot] = down
                continue
            # The kernel builds the packet from what XDP recorded of the peer's last packet, which
            # an expiry report implies (XDP stamps the arrival and the path together).
            if down is not None and kernel is not None:
                self.ahead[ev.slot] = down
                run.append((ev.slot, entry, down))
                if len(run) == self.down_batch:  # a frame's worth leaves before the rest is looked at
                    self._hand(kernel, run)
                    run = []
            else:
                self.ahead[ev.slot] = down if down is not None and entry.send(down) else None
        if run and kernel is not None:
            self._hand(kernel, run)

    def _hand(
        self, kernel: Callable[[Sequence[tuple[int, bytes]]], list[int]], run: list[tuple[int, Entry, bytes]]
    ) -> None:
        refused = set(kernel([(slot, down) for slot, _, down in run]))
        for slot, entry, down in run:
            if slot in refused:  # what the loop refused leaves from here
                self.ahead[slot] = down if entry.send(down) else None

    def announce_expiry(self, ev: Any) -> None:
        """A reported expiry whose Down left: the machine takes its transition and the controller hears.

        Before any session's own handling, since routing protocols learn of a
        failure from this report, not from the Down. One report at a time,
        the ring read again between them: a Down the kernel reports meanwhile
        waits for one report, not for all of them (:class:`.reports.Events`).
        """
        entry = self._reported(ev)
        if entry is None or ev.slot not in self.ahead or entry.session.state not in (State.INIT, State.UP):
            return  # a second report of one silence; or none ahead, left to on_event
        self._expire(ev, entry, now_us(), self.ahead[ev.slot])
        self.host.announce(entry)

    @staticmethod
    def _expire(ev: Any, entry: Entry, now: int, sent: bytes | None) -> None:
        # The kernel's own clock says how long the peer was silent when the
        # sweep noticed: the honest detection latency, however late we read it.
        entry.last_detection_us = (ev.now_ns - ev.last_rx_ns) // 1000
        entry.last_detection_overshoot_us = entry.last_detection_us - entry.session.detect_time_us
        entry.session.detection_expired(now, sent=sent)

    def on_event(self, ev: Any) -> None:
        entry = self._reported(ev)
        if entry is None:
            return
        now = now_us()
        if ev.type == self.event.EXPIRED:
            # The Down left in send_downs and the machine ran in announce_expiry, before this: on a
            # CPU woken from idle the rest took longer than the send (docs/benchmarks.md,
            # "Detection's clock").
            sent = self.ahead.pop(ev.slot, None)
            if entry.session.state in (State.INIT, State.UP):
                # Not run ahead: a report handed on alone, or the batch's ahead handling failed
                # before this session. A second report of one silence finds the session Down.
                self._expire(ev, entry, now, sent)
            self.host.service(entry, now)
            log.info(
                # The monotonic time of the last packet lets an operator line
                # a mass expiry up with other events (a takeover's phases).
                "kernel-tx: detection expired for discriminator %d after %dus of silence"
                " (last packet at %.6f)",
                entry.session.local_discr,
                entry.last_detection_us,
                ev.last_rx_ns / 1e9,
            )
            return
        if ev.type == self.event.POLL:
            raw = bytes(ev.pkt)
            try:
                pkt = decode_control(raw)
                entry.session.receive(pkt, raw, now, ttl=ev.ttl, final_sent=True)
            except (CodecError, Rejected) as e:
                self.host.count_drop(getattr(e, "reason", "poll"))
                return
            entry.last_rx_raw = raw
        self.host.service(entry, now)

    # -- stats ------------------------------------------------------------------

    def counts(self, entry: Entry, counts: PacketCounts) -> PacketCounts:
        if entry.slot is None:
            return counts
        return self._counts(entry, counts, self.slots.read_state(entry.slot))

    @staticmethod
    def _counts(entry: Entry, counts: PacketCounts, st: Any) -> PacketCounts:
        rx_p, rx_b = counts.rx_packets, counts.rx_bytes
        if entry.offloaded:
            # Every packet of an offloaded session crosses XDP, including those
            # passed up to the socket, so the kernel's count is the whole count.
            rx_p, rx_b = int(st.rx_packets), int(st.rx_bytes)
        return PacketCounts(
            rx_p, rx_b, counts.tx_packets + int(st.ktx_packets), counts.tx_bytes + int(st.ktx_bytes)
        )

    def session_stats(self, entry: Entry, out: dict[str, Any], now_ns: int) -> None:
        """Add the kernel's view (the session's slot_state, one map read) to its stats."""
        if entry.slot is None:
            return
        st = self.slots.read_state(entry.slot)
        if entry.offloaded:
            out["rx_packets"] = int(st.rx_packets)
        out["kernel_tx_packets"] = int(st.ktx_packets)
        out["last_ktx_age_us"] = (now_ns - st.last_ktx_ns) // 1000 if st.last_ktx_ns else None
        if st.last_rx_ns:
            age = (now_ns - st.last_rx_ns) // 1000
            prev = out.get("last_rx_age_us")
            out["last_rx_age_us"] = age if prev is None else min(prev, age)
        out["echo_reflected"] = int(st.echo_packets)
        out["last_detection_us"] = entry.last_detection_us
        out["last_detection_overshoot_us"] = entry.last_detection_overshoot_us
        out["offloaded"] = entry.offloaded
        out["kernel_tx_active"] = bool(entry.kcfg and entry.kcfg["flags"] & self.cfg_flag.KTX)

    def document(self, doc: dict[str, Any]) -> None:
        totals = self.fp.counters.totals()
        attached = self.fp.program.attached
        first = attached[0] if attached else None
        cnt, ns = self.fp.program.run_stats()
        doc["kernel_tx"] = True
        doc["xdp"] = {
            "ifname": first.ifname if first else None,
            "ifindex": first.ifindex if first else None,
            "mode": first.mode if first else None,
            "interfaces": [{"ifname": a.ifname, "ifindex": a.ifindex, "mode": a.mode} for a in attached],
            # Zero unless kernel.bpf_stats_enabled=1 (the bench turns it on).
            "run_cnt": cnt,
            "run_time_ns": ns,
            "ns_per_packet": round(ns / cnt, 1) if cnt else None,
            "spread_cpus": self.fp.gate.spread_cpus,  # 0: --spread-pass off (or unavailable)
        }
        counters = doc["counters"]
        counters["xdp_tx"] = totals.pop("xdp_tx", 0)
        counters["xdp_pass"] = totals.pop("xdp_pass", 0)
        counters["pass_repeat"] = totals.pop("pass_repeat", 0)  # not a reject: BFD_PASS_HOLD_NS
        counters["auth_steady"] = totals.pop("auth_steady", 0)  # the verified packet again: accepted
        counters["poll_repeat"] = totals.pop("poll_repeat", 0)  # answered with Final, event not repeated
        # Found through the hash, not the discriminator's slot bits (bfd_abi.h): not a verdict, a path.
        counters["discr_by_hash"] = totals.pop("discr_by_hash", 0)
        counters["echo_tx"] = totals.pop("echo_tx", 0)
        counters["echo_rx"] = totals.pop("echo_rx", 0)  # our own echo back (fastpath.echo), not a reject
        counters["tx_early"] = totals.pop("tx_early", 0)
        counters["spread"] = totals.pop("spread", 0)
        counters["sbfd_tx"] = totals.pop("sbfd_tx", 0)  # S-BFD answers (fastpath.sbfd); its drops stay below
        # Kernel drops also on their own, so "died in XDP" stays provable.
        counters["xdp_drop"] = dict(totals)
        drops = counters["drop"]
        for name, value in totals.items():
            drops[name] = drops.get(name, 0) + value
