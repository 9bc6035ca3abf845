/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The maps, shared by the XDP program and the sweep: the engine hands bcc both
 * files as one text (bcc rewrites map calls only in its main file, so code
 * that touches maps cannot live in a header). Layouts: bfd_abi.h.
 */
#ifndef BFD_MAPS_H
#define BFD_MAPS_H

#include "bfd_abi.h"

/*
 * With --pin (the engine defines BFD_PIN_DIR and BFD_PIN_ROOT) the session
 * state lives in bpffs: bcc opens a pinned map when it exists, else creates
 * and pins it, so a successor compiled from the same layout shares these maps
 * with the engine it replaces. bcc does not compare key or value sizes of a
 * pinned map; the layout id in BFD_PIN_DIR is what keeps builds apart.
 */
#ifdef BFD_PIN_DIR
#define BFD_TABLE_F(type, key, leaf, name, max, flags) \
	BPF_TABLE_PINNED(type, key, leaf, name, max, BFD_PIN_DIR "/" #name, flags)
#else
#define BFD_TABLE_F(type, key, leaf, name, max, flags) BPF_F_TABLE(type, key, leaf, name, max, flags)
#endif
#define BFD_TABLE(type, key, leaf, name, max) BFD_TABLE_F(type, key, leaf, name, max, 0)
/*
 * What the engine reads for every session of a stats walk is mapped into its
 * memory instead (engine: fastpath/mapped.py): a copy out of the mapping, not a
 * system call per session.
 */
#define BFD_TABLE_MAPPED(type, key, leaf, name, max) BFD_TABLE_F(type, key, leaf, name, max, BPF_F_MMAPABLE)

BFD_TABLE("hash", struct bfd_key, __u32, sessions, BFD_MAX_SESSIONS);
BFD_TABLE("hash", __u32, __u32, by_discr, BFD_MAX_SESSIONS);
/* Slot + 1 (0: none) of the session whose discriminator has these low bits, when they are not its slot. */
BFD_TABLE("array", __u32, __u32, discr_slot, BFD_DISCR_SLOT_MASK + 1);
BFD_TABLE("hash", struct bfd_echo_key, __u32, echo_peers, BFD_MAX_SESSIONS);
BFD_TABLE("array", __u32, struct bfd_cfg, slot_cfg, BFD_MAX_SESSIONS);
BFD_TABLE_MAPPED("array", __u32, struct bfd_state, slot_state, BFD_MAX_SESSIONS);
BFD_TABLE("array", __u32, struct bfd_echo_rtt, echo_rtt, BFD_MAX_SESSIONS);
BFD_TABLE("array", __u32, struct bfd_gate, gate, 1);
BFD_TABLE("percpu_array", __u32, __u64, counters, BFD_C_MAX);
/* One entry more than slots: the courier's (BFD_COURIER_SLOT). */
BFD_TABLE("array", __u32, struct bfd_tick_cfg, tick_cfg, BFD_MAX_SESSIONS + 1);
BFD_TABLE_MAPPED("array", __u32, struct bfd_tick_state, tick_state, BFD_MAX_SESSIONS + 1);
BFD_TABLE("array", __u32, struct bfd_down_pkt, down_pkt, BFD_MAX_SESSIONS);
/* Pinned: a successor goes on with its predecessor's series (the slot's tick_cfg names the element). */
BFD_TABLE("array", __u32, struct bfd_series, series, BFD_SERIES_MAX);
/*
 * Slots whose Down the courier sends. Each engine's own, not pinned: a Down
 * queued in the instant a successor swaps its programs in is lost with it, and
 * the session's next Down is the slow rate's (docs/fastpath.md).
 */
BPF_QUEUE(down_queue, __u32, BFD_MAX_SESSIONS);
BFD_TABLE("percpu_array", __u32, __u64, tick_counters, BFD_TC_MAX);
/* Where the tick program reads a frame of Downs to (it rebuilds the frame for each Down): never pinned. */
BPF_F_TABLE("percpu_array", __u32, struct bfd_down_frame, down_scratch, 1, 0);
BFD_TABLE("hash", __u32, struct bfd_sbfd_cfg, sbfd_cfg, BFD_SBFD_MAX_REFLECTORS);
BFD_TABLE("hash", __u32, struct bfd_sbfd_state, sbfd_state, BFD_SBFD_MAX_REFLECTORS);
BFD_TABLE("array", __u32, struct bfd_sbfd_global, sbfd_global, 1);
#ifdef BFD_PIN_DIR
BFD_TABLE("array", __u32, struct bfd_handover_chunk, handover, BFD_HANDOVER_CHUNKS);
BPF_TABLE_PINNED("array", __u32, __u64, owner, BFD_OWNER_SLOTS, BFD_PIN_ROOT "/owner");
#endif
/* Room for an expiry of every session at once (4096 x 80 bytes), so a whole
 * table going silent together is reported in one sweep. */
BPF_RINGBUF_OUTPUT(events, 128);
/* Never used by a program: it only hands the event layout to the engine through bcc. */
BPF_ARRAY(event_layout, struct bfd_event, 1);

#endif /* BFD_MAPS_H */
