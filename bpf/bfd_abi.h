/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The one ABI between the XDP fast path and the engine.
 *
 * Both sides compile from this file: the kernel programs include it, and the
 * engine reads every map layout through bcc's generated ctypes (map Key/Leaf
 * types), never through a second hand-written copy. The counter list is an
 * X-macro so the engine can read the names from here as well.
 */
#ifndef BFD_ABI_H
#define BFD_ABI_H

#ifndef BFD_MAX_SESSIONS
#define BFD_MAX_SESSIONS 4096
#endif
/*
 * A discriminator the engine chose names its session's slot in its low bits
 * (docs/fastpath.md, "Slots"), so a packet's Your Discriminator leads to the
 * slot without a hash lookup; the slot's cfg.local_discr confirms it, and any
 * other discriminator (bfdd's, a handed-over session's) goes through by_discr.
 */
#define BFD_DISCR_SLOT_MASK 0xffff

/*
 * Values the RFCs define, restated here for C. Their reference in this
 * repository is the engine's wire codec (engine/xdp_bfd/wire/control.py,
 * table-tested against RFC 5880) and netio.py for the ports: the engine
 * refuses a header whose copy disagrees (xdp_bfd/fastpath/abi.py), and
 * tests/unit/fastpath/test_kernel_abi.py checks them, so neither side can drift.
 */
#define BFD_PORT_CONTROL 3784   /* RFC 5881 §4 */
#define BFD_PORT_MULTIHOP 4784  /* RFC 5883 §3 */
#define BFD_PORT_ECHO 3785      /* RFC 5881 §4 */
#define BFD_PORT_SBFD 7784      /* RFC 7881: S-BFD control, to the reflector */
#define BFD_VERSION 1
#define BFD_CONTROL_LEN 24      /* the mandatory section (RFC 5880 §4.1) */
#define BFD_CONTROL_LEN_AUTH 26 /* with the A bit: at least Auth Type and Auth Len */
#define BFD_AUTH_SIMPLE 1       /* §4.2: Auth Type, Auth Len, Key ID, then 1-16 bytes of password */
#define BFD_AUTH_KEYED_MD5 2    /* §4.3: ... Reserved, Sequence Number, 16-byte digest */
#define BFD_AUTH_MET_MD5 3
#define BFD_AUTH_KEYED_SHA1 4   /* §4.4: ... Reserved, Sequence Number, 20-byte digest */
#define BFD_AUTH_MET_SHA1 5
#define BFD_AUTH_SEQ_OFF 28     /* where a keyed section's Sequence Number is in the packet */
#define BFD_PKT_MAX 52          /* the longest control packet: keyed SHA1's 28-byte section */

/* struct bfd_ctrl.flags: the State in the top two bits, then P F C A D M. */
#define BFD_FLAG_POLL 0x20
#define BFD_FLAG_FINAL 0x10
#define BFD_FLAG_CPI 0x08
#define BFD_FLAG_AUTH 0x04
#define BFD_FLAG_DEMAND 0x02
#define BFD_FLAG_MULTIPOINT 0x01
#define BFD_STATE_SHIFT 6
#define BFD_STATE_ADMIN_DOWN 0
#define BFD_STATE_DOWN 1
#define BFD_STATE_INIT 2
#define BFD_STATE_UP 3
#define BFD_VERSION_SHIFT 5

/* The control packet's mandatory section (RFC 5880 §4.1), as it is on the wire. */
struct bfd_ctrl {
	__u8 vers_diag;         /* version << BFD_VERSION_SHIFT | diagnostic */
	__u8 flags;             /* state << BFD_STATE_SHIFT | BFD_FLAG_* */
	__u8 detect_mult;
	__u8 length;
	__be32 my_discr;
	__be32 your_discr;
	__be32 desired_min_tx;
	__be32 required_min_rx;
	__be32 required_min_echo_rx;
};
_Static_assert(sizeof(struct bfd_ctrl) == BFD_CONTROL_LEN, "struct bfd_ctrl is the 24-byte section");

/*
 * Engine <-> kernel values: defined here and nowhere else. The engine reads
 * them from this file (xdp_bfd/fastpath/abi.py), never from a copy.
 */

/* struct bfd_cfg.flags */
#define BFD_CFG_ACTIVE 0x01   /* slot holds a session */
#define BFD_CFG_KTX 0x02      /* answer the peer from XDP (session Up, timers clockable) */
#define BFD_CFG_DETECT 0x04   /* the sweep watches this session (Init or Up) */
#define BFD_CFG_AUTH 0x08     /* packets must carry the A bit, with auth_type and auth_key_id */
#define BFD_CFG_ECHO 0x10     /* reflect the peer's echo packets */
#define BFD_CFG_FINAL 0x20    /* answer the peer's Poll with a Final from XDP (session Up) */
#define BFD_CFG_AUTH_SEQ 0x40 /* the peer's sequence number is known: one outside the window dies here */

/* struct bfd_event.type */
#define BFD_EV_EXPIRED 1      /* no packet for detect_ns: the sweep's verdict */
#define BFD_EV_POLL 2         /* a Poll answered with Final in XDP; pkt holds it */
#define BFD_EV_TICK_LOST 3    /* a session's tick frame has not come round for tick_cfg.lost_ns */

/*
 * The sweep: the verifier explores a bounded loop iteration by iteration and
 * refuses more than 8192 pending branches, so one program covers
 * BFD_SWEEP_CHUNK slots; BFD_SWEEP_COPIES of them (sweep.c) chain by tail
 * call, and the engine loads ceil(sessions / BFD_SWEEP_CHUNK) of them.
 */
#define BFD_SWEEP_CHUNK 512
#define BFD_SWEEP_COPIES 8

/*
 * A packet for the engine's socket that repeats, byte for byte, one of the
 * last two passed for the same session within this time is dropped in XDP
 * (pass_repeat): the engine has already been told, and the kernel stamped
 * the packet as a sign of life. While the kernel does not watch the
 * session's silence, a Final is never held (the session times our Poll's
 * answer itself), and the session forgets bfd.RemoteDiscr a hold later than
 * §6.8.1 says (it does not see every packet). A peer answering each P of our
 * Poll with an F, or repeating its own Poll, or still saying Up to a Down
 * session, otherwise sends the engine one packet per interval per session
 * until it has caught up (1024 sessions at 10 ms: 100 k/s). One copy per hold
 * still goes up, in case the socket lost the first. The same hold spares
 * the engine the event of a Poll XDP answered (BFD_EV_POLL) when it repeats
 * one already reported (poll_repeat): the Final still leaves for each.
 */
#define BFD_PASS_HOLD_NS 250000000
/*
 * The hold while the kernel does not watch the session (Down, AdminDown,
 * Demand): nothing but a change is news to a Down session (a peer still
 * saying Up is answered by our Down, once a second), and at bring-up
 * thousands of them may face peers that still say Up.
 */
#define BFD_PASS_HOLD_IDLE_NS 1000000000

/*
 * Per-CPU counters: X(INDEX_NAME, stats_name). Drop reasons first appear in
 * the order the checks run.
 */
#define BFD_COUNTERS(X)                   \
	X(XDP_TX, xdp_tx)                 \
	X(XDP_PASS, xdp_pass)             \
	X(ECHO_TX, echo_tx)               \
	X(ECHO_RX, echo_rx)               \
	X(TX_EARLY, tx_early)             \
	X(SPREAD, spread)                 \
	X(EVENT_LOST, event_lost)         \
	X(PASS_REPEAT, pass_repeat)       \
	X(AUTH_STEADY, auth_steady)       \
	X(POLL_REPEAT, poll_repeat)       \
	X(DISCR_HASH, discr_by_hash)      \
	X(DROP_IP_OPTIONS, ip_options)    \
	X(DROP_FRAGMENT, fragment)        \
	X(DROP_TTL, ttl)                  \
	X(DROP_SHORT, short)              \
	X(DROP_VERSION, version)          \
	X(DROP_LENGTH, length)            \
	X(DROP_DETECT_MULT, detect_mult)  \
	X(DROP_MULTIPOINT, multipoint)    \
	X(DROP_MY_DISCR, my_discr)        \
	X(DROP_YOUR_DISCR, your_discr)    \
	X(DROP_YOUR_DISCR_ZERO, your_discr_zero) \
	X(DROP_NO_SESSION, no_session)    \
	X(DROP_PATH, path)                \
	X(DROP_MIN_TTL, min_ttl)          \
	X(DROP_AUTH_UNEXPECTED, auth_unexpected) \
	X(DROP_AUTH_MISSING, auth_missing) \
	X(DROP_AUTH_SECTION, auth_section) \
	X(DROP_AUTH_TYPE, auth_type)      \
	X(DROP_AUTH_KEY_ID, auth_key_id)  \
	X(DROP_AUTH_SEQUENCE, auth_sequence) \
	X(DROP_AUTH_DIGEST, auth_digest)  \
	X(DROP_ECHO_UNKNOWN, echo_unknown) \
	X(DROP_ECHO_STALE, echo_stale)    \
	X(SBFD_TX, sbfd_tx)               \
	X(DROP_SBFD_SPORT, sbfd_sport)    \
	X(DROP_SBFD_ADDRESS, sbfd_address) \
	X(DROP_SBFD_SHORT, sbfd_short)    \
	X(DROP_SBFD_VERSION, sbfd_version) \
	X(DROP_SBFD_LENGTH, sbfd_length)  \
	X(DROP_SBFD_DETECT_MULT, sbfd_detect_mult) \
	X(DROP_SBFD_MULTIPOINT, sbfd_multipoint) \
	X(DROP_SBFD_MY_DISCR, sbfd_my_discr) \
	X(DROP_SBFD_YOUR_DISCR_ZERO, sbfd_your_discr_zero) \
	X(DROP_SBFD_UNKNOWN, sbfd_unknown) \
	X(DROP_SBFD_AUTH, sbfd_auth)      \
	X(DROP_SBFD_GATED, sbfd_gated)    \
	X(DROP_SBFD_RATE, sbfd_rate_limited)

#define BFD_X_ENUM(idx, name) BFD_C_##idx,
enum bfd_counter { BFD_COUNTERS(BFD_X_ENUM) BFD_C_MAX };
#undef BFD_X_ENUM

/* Demultiplexing key: addresses are 16 bytes, IPv4 as v4-mapped IPv6 (::ffff:a.b.c.d). */
struct bfd_key {
	__u8 local[16];
	__u8 peer[16];
	__u32 ifindex;    /* 0: any interface (multihop, or single-hop not bound to one) */
	__u8 multihop;
	__u8 pad[3];
};

/* Echo packets are matched by the peer alone (their destination is not ours for IPv4). */
struct bfd_echo_key {
	__u8 peer[16];
	__u32 ifindex;
};

/*
 * Our own echo (RFC 5880 §6.4; docs/fastpath.md, "The echo originator"): the
 * engine sends it addressed to ourselves at the peer's MAC, the peer's
 * forwarding plane sends it back, and XDP stamps the return into
 * echo_rtt[slot] and drops it. The payload is ours to define (§6.4): 24 bytes,
 * starting with a word FRR's echo (version 1, length 24) never starts with.
 */
#define BFD_ECHO_MAGIC 0x58424645   /* "XBFE" */
#define BFD_ECHO_LEN 24
#define BFD_ECHO_RING 64            /* the last returns kept per session: a power of two */
#define BFD_ECHO_MAX_RTT_NS 10000000000  /* older than 10 s (or from the future): stale */
struct bfd_echo_probe {
	__be32 magic;
	__be32 discr;           /* our discriminator of the session: it leads to the slot (xdp_bfd.c) */
	__be32 seq;             /* from 1, per generation */
	__be32 gen;             /* echo_rtt[slot].gen when it was sent */
	__be64 tx_ns;           /* CLOCK_MONOTONIC (bpf_ktime_get_ns) when it was sent */
};
_Static_assert(sizeof(struct bfd_echo_probe) == BFD_ECHO_LEN, "an echo probe is 24 bytes");

struct bfd_echo_ret {
	__u32 seq;              /* 0: empty (sequence numbers start at 1) */
	__u32 rtt_us;
};

/* Written by the engine when it (re)starts a session's echo, by XDP for each return. */
struct bfd_echo_rtt {
	__u32 gen;              /* returns of another generation are stale */
	__u32 last_seq;
	__u64 returned;
	__u64 rtt_sum_ns;
	__u64 rtt_min_ns;       /* the engine starts it at all ones */
	__u64 rtt_max_ns;
	__u64 last_ns;          /* when the last return came in */
	struct bfd_echo_ret ring[BFD_ECHO_RING];  /* at seq % BFD_ECHO_RING: the engine judges loss from it */
};

/* What the engine decides for a session. Written by userspace only. */
struct bfd_cfg {
	__u32 flags;
	__u32 local_discr;
	__u8 peer[16];          /* the path a packet must come from, whatever found it */
	__u32 ifindex;          /* 0: any */
	__u32 epoch;            /* bumped when detection is (re)armed */
	__u64 min_gap_ns;       /* 0.75 x the negotiated interval: earlier replies are skipped */
	__u64 detect_ns;        /* the session's detection time */
	__u16 sport;            /* our source port, network order */
	__u16 dport;            /* 3784 or 4784, network order */
	__u8 multihop;
	__u8 min_ttl;
	__u8 pad[2];
	__u8 reply[BFD_CONTROL_LEN];  /* our Up packet; your_discr is filled from the peer's */
	/*
	 * The peer's steady packet: anything else goes up. With authentication
	 * it is the whole of the last packet the engine verified (RFC 5880
	 * §6.7: docs/fastpath.md, "Authenticated sessions"), else its first 24
	 * bytes without P and F.
	 */
	__u8 expect[BFD_PKT_MAX];
	__u8 expect_len;        /* with BFD_CFG_AUTH: 0, nothing is steady */
	__u8 auth_type;         /* with BFD_CFG_AUTH: the section every packet must carry */
	__u8 auth_key_id;
	__u8 pad2;
	__u32 auth_seq;         /* BFD_CFG_AUTH_SEQ: the peer's last verified Sequence Number */
	__u32 pad3;
	__u64 verified_ns;      /* with BFD_CFG_AUTH: when the engine last verified a packet (the sweep's) */
};

/* What the kernel saw. Written by the kernel only (counters atomically). */
struct bfd_state {
	__u64 last_rx_ns;
	__u64 last_ktx_ns;
	__u64 rx_packets;
	__u64 rx_bytes;
	__u64 ktx_packets;
	__u64 ktx_bytes;
	__u64 echo_packets;
	__u64 early_skips;
	__u32 expired_epoch;    /* == cfg.epoch once the sweep has reported this silence */
	__u32 rx_ifindex;       /* where the peer's last valid packet came in: the clock sends out there */
	__u8 rx_eth[12];        /* that packet's destination and source MACs (ours, the peer's or its router's) */
	__u8 rx_local[16];      /* the address it was sent to (ours), v4-mapped for IPv4 */
	__u32 queued_epoch;     /* == cfg.epoch once the sweep has queued this silence's Down (tick.c's courier) */
	/*
	 * The last two distinct packets passed to the engine's socket, first 24
	 * bytes, and when (BFD_PASS_HOLD_NS). Two: during our Poll a peer
	 * alternates its periodic packet and its Final.
	 */
	__u64 passed_ns_a;
	__u64 passed_ns_b;
	__u8 passed_a[BFD_CONTROL_LEN];
	__u8 passed_b[BFD_CONTROL_LEN];
#ifdef BFD_TEST_LAYOUT_CHANGE
	__u64 test_only;        /* tests build a changed layout with this (XDP_BFD_TEST_LAYOUT_CHANGE=1) */
#endif
};

/* Global knobs, written by userspace. */
struct bfd_gate {
	__u64 heartbeat_ns;     /* last sign of life from the engine's loop */
	__u64 deadman_ns;       /* 0: no dead-man gate */
	__u32 nslots;           /* the sweep looks at slots [0, nslots) */
	__u32 spread_cpus;      /* --spread-pass: non-BFD traffic goes to spread_cpu[0, n); 0: off */
	__u64 sweep_ns;         /* the longest gap between walks of the table (sweep.c; the engine scales it with nslots) */
};

/*
 * The kernel transmit clock (docs/fastpath.md): one tick frame per clocked
 * session circulates through a private veth pair whose sending end is shaped
 * (htb, one class per session at BFD_TICK_LEN_FULL bytes per interval), so
 * the frame's length is its next period. On each release the tick program
 * (tick.c) sends the session's current packet unless one left within
 * cfg.min_gap_ns (an XDP reply or an earlier tick), then sends the frame
 * round again.
 */
#define BFD_TICK_ETHERTYPE 0x88b5   /* IEEE 802 local experimental: never leaves the loop */
#define BFD_TICK_MAGIC 0x7bfd71c0
#define BFD_TICK_LEN_FULL 1500      /* a frame this long takes one nominal interval (loop MTU 1486) */
#define BFD_TICK_LEN_MIN 64         /* the shortest frame (a period of 64/1500 of the interval) */
/* The sweep's watch for lost frames (sweep.c), chained as the sweep is. */
#define BFD_TICK_WATCH_CHUNK 512
#define BFD_TICK_WATCH_COPIES 8

/* struct bfd_tick_cfg.flags */
#define BFD_TICK_RUN 0x01           /* keep this session's frame circulating and sending */
#define BFD_TICK_SERIES 0x02        /* send only what the slot's series holds (a meticulous key) */

/*
 * A series: packets of a meticulous key, signed ahead by the engine. Such a
 * key needs a new Sequence Number, so a new digest, in every packet, which a
 * program cannot compute; so the engine keeps the next packets of each such
 * session signed in its series, at consecutive numbers, and the clock sends
 * them as it sends any session's packet: no periodic packet waits for the
 * engine, which refills the series well ahead of the clock (fastpath/clock.py)
 * and also across a --pin takeover. An element of the series array (the
 * slot's tick_cfg.series_idx) is rewritten in place, never swapped, and the
 * packet with number n sits at n mod BFD_SERIES_DEPTH: a refill writes the
 * same bytes where the clock may be reading. The clock goes on from
 * tick_state.series_next while the series' epoch is the one it last sent
 * from; a new epoch (the engine sent a packet of its own in between) starts
 * again at first_seq.
 */
#define BFD_SERIES_DEPTH 512        /* packets a series holds; a power of two */
#define BFD_SERIES_MAX 128          /* sessions with a series at once */
struct bfd_series {
	__u32 slot;             /* the session's: a series of another slot's is not sent */
	__u32 epoch;            /* never 0; a new one each time the numbers start again */
	__u32 first_seq;        /* the series holds first_seq .. first_seq + count - 1 */
	__u32 count;            /* at most BFD_SERIES_DEPTH; 0: stopped */
	__u8 pkt_len;           /* of each packet */
	__u8 pad[7];
	__u64 not_before_ns;    /* CLOCK_MONOTONIC: none of this epoch before (the engine's last packet + the minimum gap) */
	__u8 pkt[BFD_SERIES_DEPTH * BFD_PKT_MAX];  /* number n at (n mod DEPTH) x BFD_PKT_MAX (bcc's ctypes take one dimension) */
};

/* The frame's header; its padding carries nothing. */
struct bfd_tick_hdr {
	__u8 dst[6];
	__u8 src[6];
	__be16 proto;           /* BFD_TICK_ETHERTYPE */
	__u32 magic;
	__u32 slot;
	__u32 gen;              /* a frame of another generation than tick_cfg.gen dies on arrival */
} __attribute__((packed));

/*
 * A run of Downs handed to the kernel in one frame (tick.c): when a walk finds
 * many peers silent at once, each session's Down is the tick program's clone
 * of a packet built from that session's maps, instead of a send system call of
 * the engine's each (tens of microseconds here: 130-180 ms of sends at 4096
 * sessions held the controller's reports back). The engine sends the
 * frame into the loop unclassified (htb's direct queue: no wait); it dies
 * after its Downs left.
 */
#define BFD_DOWN_MAGIC 0x7bfd71d0
#define BFD_DOWN_BATCH 16           /* entries in one frame (the frame stays under the loop's MTU) */

struct bfd_down_entry {
	__u32 slot;
	__u8 pkt_len;           /* of pkt: 24, or more with a password's auth section */
	__u8 pad[3];
	__u8 pkt[BFD_PKT_MAX];  /* the session's Down, as its machine would send it */
} __attribute__((packed));

struct bfd_down_frame {
	__u8 dst[6];
	__u8 src[6];
	__be16 proto;           /* BFD_TICK_ETHERTYPE */
	__u32 magic;            /* BFD_DOWN_MAGIC */
	__u32 count;            /* entries that follow, at most BFD_DOWN_BATCH */
	__u8 pad[2];            /* a multiple of 8 bytes in all: a per-CPU map's value */
	struct bfd_down_entry e[BFD_DOWN_BATCH];
} __attribute__((packed));

/*
 * The courier (tick.c): a frame of its own in the loop, at slot
 * BFD_COURIER_SLOT of tick_cfg and tick_state, that sends the Downs the sweep
 * queued (down_queue) without the engine: a walk that finds a peer silent
 * pushes the slot when the session's Down is ready in down_pkt for this watch
 * (its epoch) and the courier came round lately. Its next-but-one round is
 * aimed at the earliest expiry the sweep's last walk foresaw, no sooner than
 * BFD_COURIER_SHORT_NS after the next and no later than its class's period; a
 * round that leaves Downs queued comes back unshaped at once.
 */
#define BFD_COURIER_MAGIC 0x7bfd71e0
#define BFD_COURIER_SLOT BFD_MAX_SESSIONS   /* tick_cfg / tick_state have one entry more than slots */
#define BFD_COURIER_SHORT_NS 250000         /* one hrtimer gap of the sweep's clock with 2 CPUs */

/* A session's Down, ready for the courier. Written by userspace when the kernel starts watching. */
struct bfd_down_pkt {
	__u32 epoch;            /* cfg.epoch of the watch it is for: another watch's Down is stale */
	__u8 pkt_len;           /* 0: none (keyed authentication: no Down ahead) */
	__u8 pad[3];
	__u8 pkt[BFD_PKT_MAX];
};

/* What the engine decides for a session's clock. Written by userspace only. */
struct bfd_tick_cfg {
	__u32 flags;
	__u32 gen;
	__u32 classid;          /* skb->priority: the session's htb class, major:minor */
	__u32 loop_ifindex;     /* the shaped end of the loop, where the frame goes round again */
	__u16 len_min;          /* the next period is len / BFD_TICK_LEN_FULL x period_ns, */
	__u16 len_max;          /* len picked at random in [len_min, len_max] (RFC 5880 §6.8.7 jitter) */
	__u8 pkt_len;           /* of pkt: 24, or more with an auth section */
	__u8 pad;
	__u16 series_idx;       /* BFD_TICK_SERIES: the element of the series array that is the slot's */
	__u64 period_ns;        /* the nominal transmit interval */
	__u64 lost_ns;          /* the sweep reports a frame not seen for this long */
	__u64 armed_ns;         /* CLOCK_MONOTONIC when this generation's frame was sent in */
	__u8 pkt[BFD_PKT_MAX];  /* our current control packet, as the session would send it (signed) */
};

/* What the clock did. Written by the kernel only. */
struct bfd_tick_state {
	__u64 last_tick_ns;
	__u64 ticks;
	__u64 sent;             /* control packets the clock sent (also in bfd_state.ktx_packets) */
	__u64 skipped;          /* ticks with a packet sent within min_gap_ns: nothing to do */
	__u64 gated;            /* ticks while the dead-man gate was closed */
	__u32 gen_seen;         /* the generation of the last frame that came round */
	__u32 lost_gen;         /* the generation the sweep reported lost */
	__u32 series_next;      /* BFD_TICK_SERIES: the number of the next packet to send from the series */
	__u32 series_epoch;     /* ... of the series of this epoch (bfd_abi.h, struct bfd_series) */
};

/* Per-CPU counters of the tick program, as BFD_COUNTERS. */
#define BFD_TICK_COUNTERS(X)              \
	X(TICK, tick)                     \
	X(TICK_SENT, tick_sent)           \
	X(TICK_SKIPPED, tick_skipped)     \
	X(TICK_GATED, tick_gated)         \
	X(TICK_EXPIRED, tick_expired)     \
	X(TICK_NO_PATH, tick_no_path)     \
	X(TICK_STALE, tick_stale)         \
	X(TICK_FOREIGN, tick_foreign)     \
	X(TICK_ERROR, tick_error)         \
	X(TICK_PREPAID, tick_prepaid)     \
	X(TICK_UNPAID, tick_unpaid)       \
	X(DOWN_SENT, down_sent)           \
	X(DOWN_NO_PATH, down_no_path)     \
	X(DOWN_STALE, down_stale)         \
	X(DOWN_ERROR, down_error)         \
	X(DOWN_QUEUED, down_queued)       \
	X(COURIER, courier)               \
	X(COURIER_STALE, courier_stale)

#define BFD_X_ENUM(idx, name) BFD_TC_##idx,
enum bfd_tick_counter { BFD_TICK_COUNTERS(BFD_X_ENUM) BFD_TC_MAX };
#undef BFD_X_ENUM

/*
 * The S-BFD reflector (RFC 7880, RFC 7881): UDP 7784 frames naming one
 * of these discriminators in Your Discriminator are answered in XDP and
 * nowhere else. Keyed by the reflector discriminator (host order).
 */
#define BFD_SBFD_MAX_REFLECTORS 64

/* struct bfd_sbfd_cfg.flags */
#define BFD_SBFD_ACTIVE 0x01        /* answer (an entry being removed is not) */

/* What the engine configured for one reflector discriminator. Written by userspace only. */
struct bfd_sbfd_cfg {
	__u32 flags;
	__u8 state;             /* BFD_STATE_UP, or BFD_STATE_ADMIN_DOWN: out of service, said so */
	__u8 diag;              /* 0 when Up, 7 (Administratively Down) otherwise */
	__u8 pad[2];
	__be32 min_rx;          /* Required Min RX Interval we advertise (µs, network order) */
	__u32 pad2;
	__u64 interval_ns;      /* rate limit: 1e9 / pps, the bucket's drip */
	__u64 burst_ns;         /* rate limit: how far ahead of now the bucket may run (the burst) */
};

/* What the reflector did for it. Written by the kernel only. */
struct bfd_sbfd_state {
	__u64 tat_ns;           /* GCRA's theoretical arrival time: the token bucket, claimed by CAS */
	__u64 answered;
	__u64 rate_limited;
	__u64 last_ns;          /* the last answer */
};

/* The one global entry: the reflector is on (at least one discriminator configured). */
struct bfd_sbfd_global {
	__u32 reflectors;       /* 0: UDP 7784 is not ours and is passed untouched */
	__u32 pad;
};

/* --spread-pass: at most this many CPUs take non-BFD traffic (the cpumap's size). */
#define BFD_SPREAD_MAX_CPUS 256

struct bfd_event {
	__u32 type;
	__u32 slot;
	__u32 local_discr;
	__u32 epoch;
	__u64 now_ns;
	__u64 last_rx_ns;
	__u32 ifindex;
	__u8 ttl;
	__u8 queued;            /* BFD_EV_EXPIRED: the kernel's courier sends this session's Down (tick.c) */
	__u8 pad[2];
	__u8 pkt[BFD_CONTROL_LEN];
};

/*
 * --pin: the directory's owner record, pinned at <dir>/owner by every build.
 * An array of __u64 indexed by these constants; this layout never changes,
 * so an engine of any build can find the one running and ask it to leave.
 * Everything else is pinned under <dir>/<layout id>, a hash of this file,
 * maps.h and the compile flags: a build whose layouts differ never opens them.
 */
#define BFD_OWNER_PID 0
#define BFD_OWNER_STATE 1
#define BFD_OWNER_BLOB_LEN 2
#define BFD_OWNER_DONE_NS 3     /* CLOCK_MONOTONIC when the state was written (timing a handover) */
#define BFD_OWNER_SLOTS 4
#define BFD_OWNER_RUNNING 1
#define BFD_OWNER_HANDED_OVER 2

/* The engine's own session state, handed to its successor through a pinned map. */
#define BFD_HANDOVER_CHUNK 16384
#define BFD_HANDOVER_CHUNKS 256
struct bfd_handover_chunk {
	__u8 data[BFD_HANDOVER_CHUNK];
};

#endif /* BFD_ABI_H */
