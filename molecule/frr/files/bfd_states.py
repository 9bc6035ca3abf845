#!/usr/bin/env python3
"""Count the BFD control packets of a pcap file by source address and state.

    bfd_states.py FILE.pcap

Prints one JSON object: {"<IPv4 source>": {"Up": n, "Down": n, ...}, ...},
plus "_frames" (all frames in the file) and "_skipped" (frames that are not
IPv4/UDP to port 3784 with a BFD header). Standard library only: classic pcap
(either byte order, micro- or nanosecond), Ethernet (with 802.1Q tags) or
Linux cooked (SLL, SLL2) link layers. The state is the top two bits of the
second byte of the BFD header (RFC 5880, 4.1).
"""
import json
import struct
import sys

STATES = ("AdminDown", "Down", "Init", "Up")
BFD_PORT = 3784
MAGICS = {
    b"\xd4\xc3\xb2\xa1": "<",
    b"\xa1\xb2\xc3\xd4": ">",
    b"\x4d\x3c\xb2\xa1": "<",
    b"\xa1\xb2\x3c\x4d": ">",
}
LINKTYPE_ETHERNET, LINKTYPE_SLL, LINKTYPE_SLL2 = 1, 113, 276


def ipv4_payload(linktype, frame):
    """The IPv4 packet in a frame, or None."""
    if linktype == LINKTYPE_ETHERNET:
        off, ethertype = 14, frame[12:14]
        while ethertype in (b"\x81\x00", b"\x88\xa8") and len(frame) >= off + 4:
            ethertype, off = frame[off + 2 : off + 4], off + 4
    elif linktype == LINKTYPE_SLL:
        off, ethertype = 16, frame[14:16]
    elif linktype == LINKTYPE_SLL2:
        off, ethertype = 20, frame[0:2]
    else:
        raise SystemExit(f"unsupported pcap link type {linktype}")
    return frame[off:] if ethertype == b"\x08\x00" else None


def bfd_packet(ip):
    """(source address, state name) of an IPv4 packet that is BFD, or None."""
    if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 17:
        return None
    if struct.unpack("!H", ip[6:8])[0] & 0x1FFF:  # a later fragment
        return None
    udp = ip[(ip[0] & 0x0F) * 4 :]
    if len(udp) < 8 + 24 or struct.unpack("!H", udp[2:4])[0] != BFD_PORT:
        return None
    bfd = udp[8:]
    if bfd[0] >> 5 != 1:  # BFD version 1
        return None
    return ".".join(str(b) for b in ip[12:16]), STATES[bfd[1] >> 6]


def count(path):
    counts, frames, skipped = {}, 0, 0
    with open(path, "rb") as f:
        header = f.read(24)
        if len(header) < 24 or header[:4] not in MAGICS:
            raise SystemExit(f"{path}: not a classic pcap file")
        order = MAGICS[header[:4]]
        linktype = struct.unpack(order + "I", header[20:24])[0] & 0x0FFFFFFF
        while True:
            record = f.read(16)
            if len(record) < 16:
                break
            caplen = struct.unpack(order + "I", record[8:12])[0]
            frame = f.read(caplen)
            if len(frame) < caplen:  # cut short by the capture's end
                break
            frames += 1
            ip = ipv4_payload(linktype, frame)
            found = bfd_packet(ip) if ip is not None else None
            if found is None:
                skipped += 1
                continue
            source, state = found
            per = counts.setdefault(source, {})
            per[state] = per.get(state, 0) + 1
    counts["_frames"], counts["_skipped"] = frames, skipped
    return counts


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    print(json.dumps(count(sys.argv[1]), sort_keys=True))
