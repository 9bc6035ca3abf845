"""One BFD session: the RFC 5880 §6 state machine, sans-I/O.

Modelled on h11 and aioquic's QuicConnection: the caller feeds decoded packets
with the time they arrived, calls :meth:`Session.handle_timer` when
:meth:`Session.get_timer` says so, and drains :meth:`Session.datagrams_to_send`
and :meth:`Session.next_event`. Times are integer microseconds on any monotonic
clock the caller likes; the session never reads one.
"""

from __future__ import annotations

import operator
import random
from collections import deque
from typing import Any, ClassVar

from ..wire.control import (
    Auth,
    ControlPacket,
    Diag,
    State,
    amended,
    encode_control,
    renumbered,
    verify_auth,
)
from .config import AuthConfig, SessionConfig
from .events import Rejected, RemoteParamsChanged, StateChanged
from .timers import SLOW_TX_US, jittered, next_sequence, sequence_in_window

__all__ = ["Session"]

# RFC 5881 §5 (GTSM): single-hop packets must arrive with the TTL they were sent with.
_SINGLE_HOP_TTL = 255
_U32 = 1 << 32


class Session:
    """The state of one BFD session and everything RFC 5880 says to do with it.

    Two attributes are for the kernel fast path and may be flipped at any time:

    ``periodic_tx_external``
        While the session is Up and not polling, the kernel sends the periodic
        packets, so the session schedules none of its own. Finals, our own Poll
        packets and state-transition packets are still produced here.
    ``detection_external``
        The kernel watches for silence; the internal detection timer does not
        run and the caller reports expiry through :meth:`detection_expired`.

    ``remote_events`` is for whoever mirrors the peer's values elsewhere (bfdd
    over bfddp): while True, :meth:`next_event` also yields a
    :class:`RemoteParamsChanged` whenever an accepted packet changes the peer's
    timers or Detect Mult. Off by default, so a caller that wants only state
    changes sees nothing new.
    """

    periodic_tx_external: bool
    detection_external: bool
    # A class-level default rather than an attribute set in __init__: the
    # --pin handover carries (and fingerprints) exactly the attributes a fresh
    # session has, and a switch the engine sets on each session is not state.
    remote_events: bool = False
    # Set by a fast path that holds back byte-for-byte repeats of the peer's packets for up to
    # this long (µs) while the session is not watched by it: the session then hears a live peer
    # less often than every Detection Time, so §6.8.1's bfd.RemoteDiscr lapses this much later.
    rx_hold_us: int = 0

    def __init__(
        self,
        config: SessionConfig,
        local_discr: int,
        *,
        now_us: int,
        rng: random.Random | None = None,
    ) -> None:
        # §6.8.1: bfd.LocalDiscr is nonzero (the caller keeps it unique).
        if not 0 < local_discr < _U32:
            raise ValueError(f"local discriminator {local_discr} must be 1..2^32-1")
        self._gen = 0
        self._config = config
        self._rng = rng if rng is not None else random.Random()
        self._local_discr = local_discr
        self.periodic_tx_external = False
        self.detection_external = False
        # In local Demand mode nothing detects a silent peer but a Poll (§6.6):
        # start one at least this often (never faster than the Detection Time);
        # 0 never polls, as stock bfdd.
        self.demand_poll_us = 0

        # §6.8.1 initial values; an administratively disabled session starts in AdminDown (§6.8.16).
        self._state = State.ADMIN_DOWN if config.shutdown else State.DOWN
        self._local_diag = Diag.ADMINISTRATIVELY_DOWN if config.shutdown else Diag.NONE
        self._remote_state = State.DOWN
        self._remote_discr = 0
        self._remote_diag: Diag | int = Diag.NONE
        self._remote_min_rx_us = 1  # §6.8.1: bfd.RemoteMinRxInterval starts at 1
        self._remote_desired_tx_us = 0
        self._remote_detect_mult = 0
        self._remote_min_echo_rx_us = 0
        self._remote_demand = False

        # Advertised bfd.DesiredMinTxInterval / bfd.RequiredMinRxInterval, and the
        # values actually used for our transmit interval and Detection Time. They
        # differ only while a Poll Sequence guards a change (§6.8.3).
        tx, rx = self._timer_targets()
        self._adv_tx_us = self._eff_tx_us = tx
        self._adv_rx_us = self._eff_rx_us = rx

        # Poll Sequence (§6.5). ``_poll_first_tx_us`` is when the first P went out
        # (§6.8.4 demand-mode detection counts from there).
        self._poll_active = False
        self._poll_queued = False
        self._poll_first_tx_us: int | None = None
        self._poll_ended_us: int | None = None
        self._f_clear_since_poll = True

        self._next_tx_us: int | None = None
        self._sched_key: tuple[int, bool] | None = None
        self._last_tx_us: int | None = None
        self._last_content: ControlPacket | None = None
        self._last_sent_demand = False
        self._transition_pending = False
        # detection_expired(sent=...): the packet the host sent ahead of the machine.
        self._sent_ahead: bytes | None = None
        # expiry_datagram's packet and the config it was built under: only the config shapes it.
        self._down_memo: tuple[SessionConfig, bytes] | None = None
        self._outbox: list[bytes] = []
        self._events: deque[StateChanged | RemoteParamsChanged] = deque()

        # §6.8.1: bfd.XmitAuthSeq starts random; bfd.AuthSeqKnown starts at 0.
        self._xmit_seq = self._rng.getrandbits(32)
        self._rcv_seq = 0
        self._seq_known = False

        self._rx_packets = 0
        self._tx_packets = 0
        self._flaps = 0
        self._up_since_us = 0
        self._last_rx_us: int | None = None
        # resume_reading(): the peer's silence is counted from here at the earliest.
        self._silence_from_us: int | None = None

        self._reschedule_tx(now_us)

    # -- a state value, for a --pin successor -----------------------------------

    # What a session is, beyond its configuration: every attribute a fresh
    # session has except its collaborators (config, rng) and what is queued
    # for the caller (outbox, events), which the old engine already took.
    # A new attribute must be added here or to _NOT_STATE (a unit test checks).
    STATE_FIELDS: ClassVar[tuple[str, ...]] = (
        "_adv_rx_us", "_adv_tx_us", "_eff_rx_us", "_eff_tx_us", "_f_clear_since_poll", "_flaps",
        "_last_content", "_last_rx_us", "_last_sent_demand", "_last_tx_us", "_local_diag", "_local_discr",
        "_next_tx_us", "_poll_active", "_poll_ended_us", "_poll_first_tx_us", "_poll_queued", "_rcv_seq",
        "_remote_demand", "_remote_desired_tx_us", "_remote_detect_mult", "_remote_diag", "_remote_discr",
        "_remote_min_echo_rx_us", "_remote_min_rx_us", "_remote_state", "_rx_packets", "_sched_key",
        "_seq_known", "_state", "_transition_pending", "_tx_packets", "_up_since_us", "_xmit_seq",
        "demand_poll_us", "detection_external", "periodic_tx_external",
    )  # fmt: skip
    _NOT_STATE: ClassVar[frozenset[str]] = frozenset(
        {"_config", "_rng", "_outbox", "_events", "_sent_ahead", "_down_memo", "_silence_from_us", "_gen"}
    )
    # The state fields a caller sets directly rather than through a method: not counted by
    # ``generation``, so whoever keeps a copy of the state compares these itself.
    CALLER_FIELDS: ClassVar[tuple[str, ...]] = (
        "demand_poll_us",
        "detection_external",
        "periodic_tx_external",
    )

    @property
    def generation(self) -> int:
        """Moves on each call of a method that may change :meth:`export` (a unit test holds every
        method to it), so a copy of the state made at one generation is still the state while it
        stays: a ``--pin`` handover encodes again only the sessions whose generation moved. The
        ``CALLER_FIELDS`` are not counted. Not state: a restored session starts again from 0.
        """
        return self._gen

    def export(self) -> tuple[Any, ...]:
        """The session's state, as values in ``STATE_FIELDS`` order (plain data, picklable)."""
        return _state_values(vars(self))

    @classmethod
    def restore(
        cls, config: SessionConfig, state: dict[str, Any], *, rng: random.Random | None = None
    ) -> Session:
        """The session ``state`` (``STATE_FIELDS`` by name) describes, under ``config``.

        Not made by ``__init__``, whose every other value the state replaces: a
        takeover's successor restores a thousand sessions between the request
        and serving. What is not state (``_NOT_STATE``) is set here as a fresh
        session has it; a unit test holds the two lists to a fresh session's.
        """
        session = cls.__new__(cls)
        session._config = config
        session._rng = rng if rng is not None else random.Random()
        session._sent_ahead = None
        session._down_memo = None
        session._outbox = []
        session._events = deque()
        session._silence_from_us = None
        session._gen = 0
        vars(session).update(state)
        return session

    def __repr__(self) -> str:
        return (
            f"<Session {self._local_discr}->{self._remote_discr} {self._state.name}"
            f" remote={self._remote_state.name} diag={int(self._local_diag)}>"
        )

    # --- the caller's API -------------------------------------------------------

    def receive(
        self, pkt: ControlPacket, raw: bytes, now_us: int, *, ttl: int | None = None, final_sent: bool = False
    ) -> None:
        """Process one decoded packet addressed to this session (§6.8.6 from the session checks on).

        ``raw`` is the packet as received (needed for digest checks). ``ttl`` is
        the IP TTL / Hop Limit, or None when the caller cannot tell.
        ``final_sent`` says the fast path already answered this packet's Poll
        with a Final, so the session must not send a second one. Raises
        :class:`Rejected` for a discarded packet, in which case nothing changed.
        """
        self._gen += 1
        self._check_ttl(ttl)
        self._check_discriminators(pkt)
        sequence = self._check_auth(pkt, raw, now_us)

        # Accepted: every check that can discard the packet has run, so mutate from here on.
        if sequence is not None:
            self._rcv_seq = sequence
            self._seq_known = True
        self._rx_packets += 1
        self._last_rx_us = now_us
        if self.remote_events:
            self._note_remote_params(pkt, now_us)
        self._remote_discr = pkt.my_discr
        self._remote_state = pkt.state
        self._remote_demand = pkt.demand
        self._remote_min_rx_us = pkt.required_min_rx_us
        self._remote_desired_tx_us = pkt.desired_min_tx_us
        self._remote_detect_mult = pkt.detect_mult
        self._remote_min_echo_rx_us = pkt.required_min_echo_rx_us
        self._remote_diag = pkt.diag
        if pkt.final:
            # An F before our first P cannot be an answer to this Poll (§6.5).
            if self.poll_announced:
                self._end_poll(now_us)
        else:
            self._f_clear_since_poll = True

        # §6.8.6: in AdminDown the remote values are recorded but the packet goes no further.
        if self._state == State.ADMIN_DOWN:
            self._settle(now_us)
            return
        self._run_state_machine(pkt.state, now_us)
        self._settle(now_us, answer_poll=pkt.poll and not final_sent)

    def handle_timer(self, now_us: int) -> None:
        """Do whatever is due at ``now_us``: detection, bookkeeping resets, transmission."""
        self._gen += 1
        deadline = self._detection_deadline()
        if deadline is not None and now_us >= deadline:
            self._expire_detection(now_us)
        deadline = self._remote_discr_deadline()
        if deadline is not None and now_us >= deadline:
            # §6.8.1: bfd.RemoteDiscr is forgotten a Detection Time after the last packet.
            self._remote_discr = 0
        deadline = self._auth_seq_timer()
        if deadline is not None and now_us >= deadline:
            # §6.8.1: lets the sequence resynchronise if the peer restarted.
            self._seq_known = False
        deadline = self._demand_poll_deadline()
        if deadline is not None and now_us >= deadline:
            self._poll_queued = True
        self._settle(now_us)
        self._service_tx(now_us)

    def get_timer(self) -> int | None:
        """Earliest absolute time (µs) at which :meth:`handle_timer` has work, or None."""
        deadlines = (
            self._tx_deadline(),
            self._detection_deadline(),
            self._remote_discr_deadline(),
            self._auth_seq_timer(),
            self._queued_poll_deadline(),
            self._demand_poll_deadline(),
        )
        return min((d for d in deadlines if d is not None), default=None)

    def datagrams_to_send(self, now_us: int) -> list[bytes]:
        """Encoded control packets (auth applied), oldest first; the queue is emptied.

        Anything already due at ``now_us`` is handled first, as by
        :meth:`handle_timer`, so the packets reflect the session at that time.
        """
        self.handle_timer(now_us)
        out, self._outbox = self._outbox, []
        return out

    def next_event(self) -> StateChanged | RemoteParamsChanged | None:
        """The oldest undelivered event, or None (only StateChanged unless ``remote_events``)."""
        return self._events.popleft() if self._events else None

    def set_config(self, config: SessionConfig, now_us: int) -> None:
        """Apply a changed configuration to the running session.

        Timer changes while Up go through a Poll Sequence with the §6.8.3 rules;
        toggling ``shutdown`` moves to AdminDown (diag 7) or back to Down
        (§6.8.16). The demultiplexing key cannot change: that is a new session.
        """
        self._gen += 1
        old = self._config
        if config.key() != old.key():
            raise ValueError(f"session key cannot change ({old.key()} -> {config.key()})")
        self._config = config
        if config.auth != old.auth:
            # A new key or type starts its own sequence stream at the peer.
            self._seq_known = False
        if config.shutdown and not old.shutdown and self._state != State.ADMIN_DOWN:
            self._change_state(State.ADMIN_DOWN, Diag.ADMINISTRATIVELY_DOWN, now_us)
        elif old.shutdown and not config.shutdown and self._state == State.ADMIN_DOWN:
            # §6.8.16 only says "set bfd.SessionState to Down"; diag 7 stays as the last reason.
            self._change_state(State.DOWN, self._local_diag, now_us)
        self._settle(now_us)

    def admin_down(self, now_us: int) -> None:
        """Go AdminDown (diag 7) and queue a packet telling the peer at once (§6.8.16)."""
        self._gen += 1
        if self._state != State.ADMIN_DOWN:
            self._change_state(State.ADMIN_DOWN, Diag.ADMINISTRATIVELY_DOWN, now_us)
        else:
            self._transition_pending = True
        self._settle(now_us)

    def detection_expired(self, now_us: int, *, sent: bytes | None = None) -> None:
        """An external detector saw a Detection Time pass in silence: as the internal timer (§6.8.4).

        ``sent``: what the host already sent for it (:meth:`expiry_datagram`); the
        machine queues its own packet only if it differs.
        """
        self._gen += 1
        self._sent_ahead = sent
        try:
            self._expire_detection(now_us)
            self._settle(now_us)
        finally:
            self._sent_ahead = None

    def expiry_datagram(self) -> bytes | None:
        """The packet :meth:`detection_expired` would send now, for a host to send before the machine runs.

        The Down that tells a peer its session is gone is the one packet whose
        latency is the product's (detection overshoot), and on a CPU just woken
        the machine's own work took longer than the send. None where it would
        send nothing, or where the packet cannot be known ahead (a keyed
        Sequence Number belongs to the packet that carries it).
        """
        cfg, auth = self._config, self._config.auth
        if self._state not in (State.INIT, State.UP) or cfg.passive or (auth is not None and auth.keyed):
            return None
        if self._down_memo is not None and self._down_memo[0] is cfg:
            return self._down_memo[1]
        # After the expiry: Down, the peer's discriminator forgotten, the slow rate (§6.8.3), no D.
        # What is left of the content is the configuration's (detect multiplier, echo interval)
        # and the discriminator, so the packet is built once per configuration: at a mass
        # failure every session's Down goes out in one run (docs/benchmarks.md).
        down = amended(
            self._content(),
            state=State.DOWN,
            your_discr=0,
            diag=Diag.CONTROL_DETECTION_TIME_EXPIRED,
            desired_min_tx_us=max(cfg.min_tx_us, SLOW_TX_US),
            required_min_rx_us=cfg.min_rx_us,
            demand=False,
        )
        data = self._signed(down)
        self._down_memo = (cfg, data)
        return data

    def note_rx(self, now_us: int) -> None:
        """The kernel handled a packet for this session: it counts as received for §6.8.4 bookkeeping."""
        self._gen += 1
        if self._last_rx_us is None or now_us > self._last_rx_us:
            self._last_rx_us = now_us

    def start_poll(self, now_us: int) -> None:
        """Verify connectivity with a Poll Sequence (§6.5, §6.6); only meaningful while Up.

        In Demand mode this is the only thing that detects a silent peer: if no
        Final arrives within the Detection Time the session goes Down (§6.8.4).
        """
        self._gen += 1
        if self._state == State.UP and not self._poll_active:
            self._poll_queued = True
        self._settle(now_us)

    # --- read-only view (stats) ---------------------------------------------------

    @property
    def config(self) -> SessionConfig:
        return self._config

    @property
    def state(self) -> State:
        return self._state

    @property
    def remote_state(self) -> State:
        return self._remote_state

    @property
    def local_diag(self) -> Diag:
        return self._local_diag

    @property
    def remote_diag(self) -> Diag | int:
        return self._remote_diag

    @property
    def local_discr(self) -> int:
        return self._local_discr

    @property
    def remote_discr(self) -> int:
        return self._remote_discr

    @property
    def remote_min_rx_us(self) -> int:
        return self._remote_min_rx_us

    @property
    def remote_desired_tx_us(self) -> int:
        return self._remote_desired_tx_us

    @property
    def remote_detect_mult(self) -> int:
        return self._remote_detect_mult

    @property
    def remote_min_echo_rx_us(self) -> int:
        return self._remote_min_echo_rx_us

    @property
    def remote_demand(self) -> bool:
        return self._remote_demand

    @property
    def desired_min_tx_us(self) -> int:
        """bfd.DesiredMinTxInterval as advertised now (≥ 1 s while not Up)."""
        return self._adv_tx_us

    @property
    def required_min_rx_us(self) -> int:
        """bfd.RequiredMinRxInterval as advertised now."""
        return self._adv_rx_us

    @property
    def tx_interval_us(self) -> int:
        """Negotiated periodic interval before jitter (§6.8.7): the slower side wins."""
        return max(self._eff_tx_us, self._remote_min_rx_us)

    @property
    def detect_time_us(self) -> int:
        """Current Detection Time (§6.8.4); 0 while nothing has been heard from the peer."""
        if self._local_demand_active():
            # Demand mode: our own rate and multiplier, since the peer is silent between Polls.
            return self._config.detect_mult * self.tx_interval_us
        return self._remote_detect_mult * max(self._eff_rx_us, self._remote_desired_tx_us)

    @property
    def poll_active(self) -> bool:
        return self._poll_active

    @property
    def poll_announced(self) -> bool:
        """Our Poll is open and its first P has gone out (from here: a Final can end it, §6.5).

        The kernel's packets carry P only from then on. Carried at once, a P of the kernel's could
        go before ours, and the peer's Final to it would reach a session that must ignore it: the
        peer's later Finals repeat those bytes, and XDP holds such repeats back (pass_repeat), so
        the Poll ran on until something else got through (docs/benchmarks.md, session 19's flake).
        """
        return self._poll_active and self._poll_first_tx_us is not None

    @property
    def both_up(self) -> bool:
        """Up, and the peer's packets say Up too: what the fast rate, Demand mode and echo wait for."""
        return self._state == State.UP and self._remote_state == State.UP

    @property
    def local_demand_active(self) -> bool:
        """We are in Demand mode and both ends are Up: the peer is silent between our Polls (§6.6)."""
        return self._local_demand_active()

    @property
    def rx_packets(self) -> int:
        return self._rx_packets

    @property
    def tx_packets(self) -> int:
        return self._tx_packets

    @property
    def flaps(self) -> int:
        return self._flaps

    @property
    def up_since_us(self) -> int:
        return self._up_since_us

    @property
    def last_rx_us(self) -> int:
        return 0 if self._last_rx_us is None else self._last_rx_us

    @property
    def rcv_auth_seq(self) -> int | None:
        """bfd.RcvAuthSeq while bfd.AuthSeqKnown is 1 (by the last packet received), else None."""
        return self._rcv_seq if self._seq_known else None

    @property
    def xmit_seq(self) -> int:
        """bfd.XmitAuthSeq: the Sequence Number of the next packet the session signs."""
        return self._xmit_seq

    @property
    def last_tx_us(self) -> int:
        """When the session last sent a packet of its own (0: never)."""
        return 0 if self._last_tx_us is None else self._last_tx_us

    # --- reception checks (pure: they must not touch the session) ------------------

    def _check_ttl(self, ttl: int | None) -> None:
        if ttl is None:
            return
        if self._config.multihop:
            # RFC 5883 §5: the hop count is unknown, so only a floor can be enforced.
            if ttl < self._config.minimum_ttl:
                raise Rejected("ttl", f"{ttl} < minimum {self._config.minimum_ttl}")
        elif ttl != _SINGLE_HOP_TTL:
            raise Rejected("ttl", f"{ttl} != {_SINGLE_HOP_TTL}")

    def _check_discriminators(self, pkt: ControlPacket) -> None:
        if pkt.your_discr not in (0, self._local_discr):
            raise Rejected("your_discr", f"{pkt.your_discr} is not ours ({self._local_discr})")
        # §6.8.6; the decoder checks this too, but accepting it here would let a
        # stray Up packet move a Down/Init session.
        if pkt.your_discr == 0 and pkt.state not in (State.DOWN, State.ADMIN_DOWN):
            raise Rejected("your_discr", f"zero in state {pkt.state.name}")

    def _check_auth(self, pkt: ControlPacket, raw: bytes, now_us: int) -> int | None:
        """§6.7 acceptance; returns the sequence number to record, if the type has one."""
        want = self._config.auth
        got = pkt.auth
        if want is None:
            if got is not None:
                raise Rejected("auth_unexpected", f"A bit set, type {int(got.type)}")
            return None
        if got is None:
            raise Rejected("auth_missing", f"{want.type.name} configured")
        if got.type != want.type:
            raise Rejected("auth_type", f"got {int(got.type)}, want {int(want.type)}")
        if got.key_id != want.key_id:
            raise Rejected("auth_key_id", f"got {got.key_id}, want {want.key_id}")
        sequence = got.sequence if want.keyed else None
        if want.keyed:
            if sequence is None:
                raise Rejected("auth_sequence", "keyed auth without a sequence number")
            if self._seq_known_at(now_us) and not sequence_in_window(
                sequence, self._rcv_seq, pkt.detect_mult, meticulous=want.meticulous
            ):
                raise Rejected("auth_sequence", f"{sequence} outside window after {self._rcv_seq}")
        # The RFC sets bfd.AuthSeqKnown before checking the digest; doing it only
        # after (in receive) keeps a forged packet from moving the window.
        if not verify_auth(raw, pkt, want.secret):
            raise Rejected("auth_digest", f"{want.type.name} key {want.key_id}")
        return sequence

    def _seq_known_at(self, now_us: int) -> bool:
        deadline = self._auth_seq_deadline()
        return self._seq_known and (deadline is None or now_us < deadline)

    def _note_remote_params(self, pkt: ControlPacket, now_us: int) -> None:
        # Compared with what the previous packet said, not with what anyone was
        # told: a Poll repeats its new values until the Final, and only the
        # first packet that carries them is news.
        params = (pkt.desired_min_tx_us, pkt.required_min_rx_us, pkt.required_min_echo_rx_us, pkt.detect_mult)
        known = (
            self._remote_desired_tx_us,
            self._remote_min_rx_us,
            self._remote_min_echo_rx_us,
            self._remote_detect_mult,
        )
        if params != known:
            self._events.append(RemoteParamsChanged(*params, now_us))

    # --- §6.2 state machine ---------------------------------------------------------

    def _run_state_machine(self, received: State, now_us: int) -> None:
        state = self._state
        if received == State.ADMIN_DOWN:
            if state != State.DOWN:
                self._change_state(State.DOWN, Diag.NEIGHBOR_SIGNALED_SESSION_DOWN, now_us)
        elif state == State.DOWN:
            if received == State.DOWN:
                self._change_state(State.INIT, self._local_diag, now_us)
            elif received == State.INIT:
                # Becoming Up has no failure to report, so the diag is cleared (as FRR does).
                self._change_state(State.UP, Diag.NONE, now_us)
        elif state == State.INIT:
            if received in (State.INIT, State.UP):
                self._change_state(State.UP, Diag.NONE, now_us)
        elif received == State.DOWN:  # we are Up
            self._change_state(State.DOWN, Diag.NEIGHBOR_SIGNALED_SESSION_DOWN, now_us)

    def _change_state(self, new: State, diag: Diag, now_us: int) -> None:
        old = self._state
        if new == old:
            return
        self._state = new
        self._local_diag = diag
        if old == State.UP:
            self._flaps += 1
            self._up_since_us = 0
        if new == State.UP:
            self._up_since_us = now_us
        else:
            # Polls only guard timer changes of an Up session; leaving Up ends them.
            self._poll_active = False
            self._poll_queued = False
            self._poll_first_tx_us = None
            self._poll_ended_us = None
        self._events.append(StateChanged(old, new, diag, now_us))
        # §6.8.7: a packet whose contents differ SHOULD go out between periodic ones.
        self._transition_pending = True

    def _expire_detection(self, now_us: int) -> None:
        self._remote_discr = 0
        if self._state in (State.INIT, State.UP):
            self._change_state(State.DOWN, Diag.CONTROL_DETECTION_TIME_EXPIRED, now_us)

    # --- timers, polls and transmission ----------------------------------------------

    def _settle(self, now_us: int, *, answer_poll: bool = False) -> None:
        """Bring timers, polls and the transmit schedule in line with the current state."""
        self._apply_timer_targets()
        if self._state == State.UP and not self._poll_active and self._content_needs_poll():
            self._poll_queued = True
        if self._poll_queued and not self._poll_active and self._may_start_poll(now_us):
            self._begin_poll()
        self._reschedule_tx(now_us)
        if answer_poll:
            # §6.8.6: answer at once, whatever the timers say; it also carries any new state.
            self._transition_pending = False
            self._transmit(now_us, final=True)
        elif self._transition_pending:
            self._transition_pending = False
            self._transmit(now_us, final=False)
            if self._next_tx_us is not None:
                self._next_tx_us = now_us + self._jittered_interval()

    def _timer_targets(self) -> tuple[int, int]:
        cfg = self._config
        # §6.8.3 asks for the slow rate while not Up; we keep it until the peer says Up too. An Up
        # session whose peer has not taken our Up in yet (one busy with thousands bringing up)
        # would otherwise cost a packet per interval that nobody can answer for us: the peer
        # sends slowly until it is Up, so the fast path cannot reply in step (docs/engine.md).
        tx = cfg.min_tx_us if self.both_up else max(cfg.min_tx_us, SLOW_TX_US)
        return tx, cfg.min_rx_us

    def _apply_timer_targets(self) -> None:
        tx, rx = self._timer_targets()
        if self._state != State.UP:
            # §6.8.3's delayed-effect rules protect an Up session only; otherwise effective at once.
            self._adv_tx_us = self._eff_tx_us = tx
            self._adv_rx_us = self._eff_rx_us = rx
        elif (tx, rx) != (self._adv_tx_us, self._adv_rx_us):
            # §6.8.3: a change while Up needs a Poll; one at a time, the next waits its turn.
            self._poll_queued = True

    def _content_needs_poll(self) -> bool:
        content = self._content()
        # §6.6: flipping D must be acknowledged, and with Demand mode active on
        # either side any change in contents must be pushed through a Poll.
        if content.demand != self._last_sent_demand:
            return True
        return self._demand_on_either_side() and content != self._last_content

    def _may_start_poll(self, now_us: int) -> bool:
        if self._state != State.UP:
            return False
        # §6.8.3: a Final that answers an older Poll must not end a newer one, so
        # wait for a packet without F or for a transmit interval (≥ a round trip).
        if self._poll_ended_us is None or self._f_clear_since_poll:
            return True
        return now_us >= self._poll_ended_us + self.tx_interval_us

    def _begin_poll(self) -> None:
        tx, rx = self._timer_targets()
        # §6.8.3: a faster TX or a slower RX is safe to use at once; a slower TX
        # waits for the Final so the peer's Detection Time grows first, and a
        # faster RX waits so the peer is already sending faster when ours shrinks.
        self._eff_tx_us = min(tx, self._eff_tx_us)
        self._eff_rx_us = max(rx, self._eff_rx_us)
        self._adv_tx_us, self._adv_rx_us = tx, rx
        self._poll_active = True
        self._poll_queued = False
        self._poll_first_tx_us = None

    def _end_poll(self, now_us: int) -> None:
        self._poll_active = False
        self._poll_first_tx_us = None
        self._eff_tx_us, self._eff_rx_us = self._adv_tx_us, self._adv_rx_us
        self._poll_ended_us = now_us
        self._f_clear_since_poll = False

    def _demand_poll_deadline(self) -> int | None:
        if not self.demand_poll_us or not self._local_demand_active():
            return None
        if self._poll_active or self._poll_queued:
            return None
        since = max(self._up_since_us, self._poll_ended_us or 0)
        return since + max(self.demand_poll_us, self.detect_time_us)

    def _local_demand_active(self) -> bool:
        # We ask for Demand mode and both ends are Up, so the peer has stopped
        # its periodic packets (§6.6).
        return self._config.demand and self.both_up

    def _remote_demand_active(self) -> bool:
        return self._remote_demand and self.both_up

    def _demand_on_either_side(self) -> bool:
        return self._local_demand_active() or self._remote_demand_active()

    def _periodic_allowed(self) -> bool:
        # §6.8.7: a passive system stays silent until it knows the peer's discriminator.
        if self._config.passive and self._remote_discr == 0:
            return False
        # §6.8.7: the peer asked for no periodic packets at all.
        if self._remote_min_rx_us == 0:
            return False
        # §6.6/§6.8.7: the peer is in Demand mode; only a Poll Sequence is sent.
        return not (self._remote_demand_active() and not self._poll_active)

    def _tx_external(self) -> bool:
        # Our own Poll's first P is ours (a Final counts only after it, §6.5); its repeats are
        # the kernel's like any periodic packet (the fast path's template carries P), so a busy
        # engine bringing up many sessions is not left to send every Poll's packets itself.
        if not self.periodic_tx_external or self._state != State.UP:
            return False
        return not self._poll_active or self.poll_announced

    def _jittered_interval(self) -> int:
        return jittered(self.tx_interval_us, self._config.detect_mult, self._rng)

    def _reschedule_tx(self, now_us: int) -> None:
        if not self._periodic_allowed():
            self._next_tx_us = None
            self._sched_key = None
            return
        key = (self.tx_interval_us, self._config.detect_mult == 1)
        if self._next_tx_us is not None and key == self._sched_key:
            # A slot missed while the kernel sent for us is due now, not in the past.
            self._next_tx_us = max(self._next_tx_us, now_us)
            return
        self._sched_key = key
        if self._last_tx_us is None:
            self._next_tx_us = now_us
        else:
            # §6.8.3/§6.8.7: measured from the last packet, so a shorter interval is
            # honoured at once and a longer one is never undercut.
            self._next_tx_us = max(now_us, self._last_tx_us + self._jittered_interval())

    def _service_tx(self, now_us: int) -> None:
        if self._next_tx_us is None or now_us < self._next_tx_us or self._tx_external():
            return
        self._transmit(now_us, final=False)
        self._next_tx_us = now_us + self._jittered_interval()

    def current_packet(self) -> ControlPacket:
        """What a periodic packet carries now, without P, F or authentication.

        The fast path answers the peer from this template, so it must stay
        byte-identical to what :meth:`datagrams_to_send` would produce.
        """
        return self._content()

    def template(self, *, poll: bool) -> bytes:
        """The periodic packet the kernel sends for this session: :meth:`current_packet` with P as
        asked, signed at the current transmit Sequence Number without advancing it. A repeated
        number is what §6.7.3/§6.7.4 allow unless the type is meticulous, whose packets the kernel
        never sends; the next packet the session sends itself moves it on.
        """
        return self._signed(amended(self._content(), poll=poll))

    def series_content(self) -> tuple[ControlPacket, AuthConfig | None]:
        """What each packet of a series carries now but its number, and the key that signs it:
        when either changes, a series signed before is stale."""
        return amended(self._content(), poll=self.poll_announced), self._config.auth

    def series(self, first: int, count: int) -> list[bytes]:
        """The periodic packets the session would send next, signed at the ``count`` consecutive
        Sequence Numbers from ``first``, the session's own number left alone: for the kernel to
        send (fastpath/series.py), a meticulous key's packets being unsignable there. Whoever
        sends the session's packets after them calls :meth:`resume_sequence`.
        """
        pkt = amended(self._content(), poll=self.poll_announced)
        return [self._signed(pkt, seq=(first + i) % 2**32) for i in range(count)]

    def renumbered(self, data: bytes, seq: int) -> bytes:
        """``data``, a packet this session queued, signed again at ``seq`` (a number the kernel's
        series had not reached), and the session's own number moved past it."""
        auth = self._config.auth
        if auth is None or not auth.keyed:
            raise ValueError("only a keyed type's packets carry a Sequence Number")
        self.resume_sequence(seq + 1)
        return renumbered(data, seq, auth.secret)

    def resume_reading(self, now_us: int) -> None:
        """A successor restored the session (--pin): what the peer sent since the old engine's
        last read waits unread in the socket, so its silence counts from ``now_us`` at the
        earliest. Judged from the last packet read, a takeover longer than the detection time
        declared a live peer dead before the socket was read. A dead one is detected at most
        the takeover's length later; the kernel's own detection is not affected.
        """
        self._silence_from_us = now_us

    def resume_sequence(self, seq: int) -> None:
        """Packets of ours left at numbers before ``seq`` without the session (a series the
        kernel sent): the next one carries ``seq``."""
        self._gen += 1
        self._xmit_seq = seq % 2**32

    def _signed(self, pkt: ControlPacket, *, seq: int | None = None) -> bytes:
        """``pkt`` encoded with our authentication section at the current transmit Sequence
        Number, or ``seq`` (the encoder computes the digest from the secret), or plain without
        a key."""
        auth = self._config.auth
        if auth is None:
            return encode_control(pkt)
        number = (self._xmit_seq if seq is None else seq) if auth.keyed else None
        section = Auth(auth.type, auth.key_id, b"", number)
        return encode_control(amended(pkt, auth=section), secret=auth.secret)

    def _content(self) -> ControlPacket:
        """The packet we would send, minus P, F and authentication (§6.8.7)."""
        cfg = self._config
        return ControlPacket(
            state=self._state,
            my_discr=self._local_discr,
            your_discr=self._remote_discr,
            diag=self._local_diag,
            detect_mult=cfg.detect_mult,
            desired_min_tx_us=self._adv_tx_us,
            required_min_rx_us=self._adv_rx_us,
            # RFC 5883 §3: no Echo over multiple hops, so never invite it.
            required_min_echo_rx_us=0 if cfg.multihop else cfg.echo_us,
            # §6.8.7: D only when Demand mode is wanted and both ends are Up.
            demand=self._local_demand_active(),
        )

    def _transmit(self, now_us: int, *, final: bool) -> None:
        # §6.8.7: a passive system stays silent until it knows the peer's discriminator.
        if self._config.passive and self._remote_discr == 0:
            return
        content = self._content()
        # §6.5: never both P and F on one packet.
        poll = self._poll_active and not final
        auth = self._config.auth
        data = self._signed(amended(content, poll=poll, final=final))
        if data != self._sent_ahead:
            self._outbox.append(data)
        self._sent_ahead = None
        self._tx_packets += 1
        if auth is not None and auth.keyed:
            # §6.7.3: required per packet for meticulous, allowed for plain keyed.
            self._xmit_seq = next_sequence(self._xmit_seq)
        if poll and self._poll_first_tx_us is None:
            self._poll_first_tx_us = now_us
        self._last_content = content
        self._last_sent_demand = content.demand
        if not final:
            # Finals are outside the periodic schedule (§6.5), so they do not restart it.
            self._last_tx_us = now_us

    # --- deadlines --------------------------------------------------------------------

    def _tx_deadline(self) -> int | None:
        return None if self._tx_external() else self._next_tx_us

    def _detection_deadline(self) -> int | None:
        if self.detection_external or self._state not in (State.INIT, State.UP):
            return None
        detect = self.detect_time_us
        if detect <= 0:
            return None
        if self._local_demand_active():
            # §6.8.4: in Demand mode only an unanswered Poll can time out.
            if self._poll_active and self._poll_first_tx_us is not None:
                return self._poll_first_tx_us + detect
            return None
        if self._last_rx_us is None:
            return None
        if self._silence_from_us is not None and self._silence_from_us > self._last_rx_us:
            return self._silence_from_us + detect
        return self._last_rx_us + detect

    def _remote_discr_deadline(self) -> int | None:
        # In Init/Up the detection timer covers this (and clears the discriminator);
        # in Demand mode the peer is legitimately silent for long stretches.
        if self._state in (State.INIT, State.UP) or self._remote_discr == 0 or self._last_rx_us is None:
            return None
        detect = self.detect_time_us
        return self._last_rx_us + detect + self.rx_hold_us if detect > 0 else None

    def _auth_seq_deadline(self) -> int | None:
        if not self._seq_known or self._last_rx_us is None:
            return None
        detect = self.detect_time_us
        return self._last_rx_us + 2 * detect if detect > 0 else None

    def _auth_seq_timer(self) -> int | None:
        # With an external detector the session does not see every packet the peer sends (the
        # fast path accepts repeats of the verified one), so its own last receipt says nothing of
        # the peer's silence: bfd.AuthSeqKnown is kept for that detector, which lapses it by its
        # own stamps (docs/fastpath.md, "Authenticated sessions"). The session's own check of a
        # packet still lapses it by the session's view (_seq_known_at).
        return None if self.detection_external else self._auth_seq_deadline()

    def _queued_poll_deadline(self) -> int | None:
        if not self._poll_queued or self._poll_active or self._state != State.UP:
            return None
        if self._poll_ended_us is None or self._f_clear_since_poll:
            return None  # nothing to wait for; _settle starts it at once
        return self._poll_ended_us + self.tx_interval_us


_state_values = operator.itemgetter(*Session.STATE_FIELDS)
