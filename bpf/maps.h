/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The maps, shared by the XDP program and the sweep: the engine hands bcc both
 * files as one text (bcc rewrites map calls only in its main file, so code
 * that touches maps cannot live in a header). Layouts: bfd_abi.h.
 */
#ifndef BFD_MAPS_H
#define BFD_MAPS_H

#include "bfd_abi.h"

BPF_HASH(sessions, struct bfd_key, __u32, BFD_MAX_SESSIONS);
BPF_HASH(by_discr, __u32, __u32, BFD_MAX_SESSIONS);
BPF_HASH(echo_peers, struct bfd_echo_key, __u32, BFD_MAX_SESSIONS);
BPF_ARRAY(slot_cfg, struct bfd_cfg, BFD_MAX_SESSIONS);
BPF_ARRAY(slot_state, struct bfd_state, BFD_MAX_SESSIONS);
BPF_ARRAY(gate, struct bfd_gate, 1);
BPF_PERCPU_ARRAY(counters, __u64, BFD_C_MAX);
/* Room for an expiry of every session at once (4096 x 80 bytes), so a whole
 * table going silent together is reported in one sweep. */
BPF_RINGBUF_OUTPUT(events, 128);
/* Never used by a program: it only hands the event layout to the engine through bcc. */
BPF_ARRAY(event_layout, struct bfd_event, 1);

#endif /* BFD_MAPS_H */
