"""A Python model of the fast path's verdict on one frame: the test's oracle.

``kernel_verdict`` walks the rules of ``docs/fastpath.md`` ("Rules enforced in
XDP") in the order the XDP program applies them and says where a frame is
charged: the name of the drop counter (``ttl``, ``short``, ``path``, …),
``echo_tx`` for an echo it reflects, ``accepted`` for a control packet it
takes, or None for a frame that is no parsable BFD frame (passed to the stack
untouched and counted nowhere). It is written from the rules, not from the
BPF source, and knows the sessions only through a :class:`KernelTable` the
test fills in from what it configured, never from the kernel's maps.

With S-BFD reflector discriminators in the table (``KernelTable.sbfd``), UDP
7784 is a BFD port too and its frames get the reflector's rules
(docs/fastpath.md, "The S-BFD reflector"): ``sbfd_tx`` for a request it
answers, an ``sbfd_*`` reason otherwise. Its rate limit and the dead-man gate
are not modelled: callers keep under the bucket and run with the gate open.

Not modelled: IPv6 extension headers (the fast path looks through up to three
and charges ``ip_options`` or ``fragment``; here any next header but UDP is
"not BFD"), which the callers never generate.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass, field

from .frames import ETHERTYPE_8021Q

CONTROL_PORT, MULTIHOP_PORT, ECHO_PORT = 3784, 4784, 3785
SBFD_PORT = 7784  # RFC 7881
BFD_PORTS = (CONTROL_PORT, MULTIHOP_PORT, ECHO_PORT)
ETHERTYPE_IPV4, ETHERTYPE_IPV6 = b"\x08\x00", b"\x86\xdd"
IPPROTO_UDP = 17


def mapped16(addr: str) -> bytes:
    """The 16-byte key form of an address: IPv6 as is, IPv4 as ``::ffff:a.b.c.d``."""
    a = ipaddress.ip_address(addr)
    return a.packed if a.version == 6 else bytes(10) + b"\xff\xff" + a.packed


@dataclass
class KernelTable:
    """What the fast path's maps hold, as the test knows it (not read from the maps)."""

    ifindex: int  # the interface the frames arrive on
    # discr -> (peer16, multihop, ifindex, min_ttl, auth)
    by_discr: dict[int, tuple[bytes, bool, int, int, bool]] = field(default_factory=dict)
    # (local16, peer16, ifindex, multihop) -> discr
    by_key: dict[tuple[bytes, bytes, int, bool], int] = field(default_factory=dict)
    echo: set[tuple[bytes, int]] = field(default_factory=set)  # (peer16, ifindex)
    sbfd: set[int] = field(default_factory=set)  # S-BFD reflector discriminators configured

    def ports(self) -> tuple[int, ...]:
        return (*BFD_PORTS, SBFD_PORT) if self.sbfd else BFD_PORTS

    def add_session(
        self,
        discr: int,
        local: str,
        peer: str,
        *,
        multihop: bool = False,
        min_ttl: int = 255,
        auth: bool = False,
    ) -> None:
        """A session with local discriminator ``discr``: single-hop ones are bound to ``ifindex``."""
        ifx = 0 if multihop else self.ifindex
        self.by_discr[discr] = (mapped16(peer), multihop, ifx, min_ttl, auth)
        self.by_key[(mapped16(local), mapped16(peer), ifx, multihop)] = discr
        self.echo.add((mapped16(peer), ifx))


def kernel_verdict(f: bytes, t: KernelTable) -> str | None:
    """Where the fast path's rules (in its order) charge frame ``f``: a drop reason,
    ``echo_tx`` or ``accepted``; None for a frame that is no parsable BFD frame (passed
    untouched and counted nowhere)."""
    if len(f) < 14:
        return None
    proto, off = f[12:14], 14
    if proto == ETHERTYPE_8021Q:
        if len(f) < 18:
            return None
        proto, off = f[16:18], 18
    if proto == ETHERTYPE_IPV4:
        if len(f) < off + 20 or f[off + 9] != IPPROTO_UDP:
            return None
        ihl = (f[off] & 0x0F) * 4
        frag = struct.unpack_from("!H", f, off + 6)[0]
        if ihl < 20 or frag & 0x1FFF or len(f) < off + ihl + 8:
            return None
        dport = struct.unpack_from("!H", f, off + ihl + 2)[0]
        if dport not in t.ports():
            return None
        if ihl != 20:
            return "ip_options"
        if frag & 0x2000:
            return "fragment"
        ttl = f[off + 8]
        src, dst = (
            bytes(10) + b"\xff\xff" + f[off + 12 : off + 16],
            bytes(10) + b"\xff\xff" + f[off + 16 : off + 20],
        )
        l4 = off + 20
    elif proto == ETHERTYPE_IPV6:
        if len(f) < off + 48 or f[off + 6] != IPPROTO_UDP:
            return None
        l4 = off + 40
        dport = struct.unpack_from("!H", f, l4 + 2)[0]
        if dport not in t.ports():
            return None
        ttl, src, dst = f[off + 7], f[off + 8 : off + 24], f[off + 24 : off + 40]
    else:
        return None
    multihop = dport == MULTIHOP_PORT
    if dport == SBFD_PORT:
        return _sbfd_verdict(f, l4, (src, dst), proto == ETHERTYPE_IPV4, t)
    if dport == ECHO_PORT:
        return "echo_tx" if (src, t.ifindex) in t.echo or (src, 0) in t.echo else "echo_unknown"
    if dport == CONTROL_PORT and ttl != 255:
        return "ttl"
    ulen = struct.unpack_from("!H", f, l4 + 4)[0]
    bfd = l4 + 8
    if ulen < 8 or bfd + ulen - 8 > len(f):
        return "short"
    pl = ulen - 8
    if pl < 1:
        return "short"
    if f[bfd] >> 5 != 1:
        return "version"
    if pl < 24:
        return "short"
    flags, mult, length = f[bfd + 1], f[bfd + 2], f[bfd + 3]
    if length < (26 if flags & 0x04 else 24) or length > pl:
        return "length"
    if mult == 0:
        return "detect_mult"
    if flags & 0x01:
        return "multipoint"
    my, your = struct.unpack_from("!II", f, bfd + 4)
    if my == 0:
        return "my_discr"
    if your:
        if your not in t.by_discr:
            return "your_discr"
        discr = your
    else:
        if flags >> 6 >= 2:
            return "your_discr_zero"
        discr = t.by_key.get((dst, src, t.ifindex, multihop)) or t.by_key.get((dst, src, 0, multihop))
        if discr is None:
            return "no_session"
    peer, mh, ifx, min_ttl, auth = t.by_discr[discr]
    if peer != src or mh != multihop or (ifx and ifx != t.ifindex):
        return "path"
    if multihop and ttl < min_ttl:
        return "min_ttl"
    if flags & 0x04 and not auth:
        return "auth_unexpected"
    if not flags & 0x04 and auth:
        return "auth_missing"
    return "accepted"


def _unicast(addr16: bytes, v4: bool) -> bool:
    """An address a reflector may answer from or to (docs/fastpath.md: ``sbfd_address``)."""
    if v4:
        first = addr16[12]
        return first not in (0, 127) and first < 224
    a = ipaddress.IPv6Address(addr16)
    return not (a.is_multicast or a.is_unspecified or a.is_loopback)


def _sbfd_verdict(f: bytes, l4: int, addrs: tuple[bytes, bytes], v4: bool, t: KernelTable) -> str:
    """The S-BFD reflector's rules, in the order docs/fastpath.md lists them; ``addrs`` is (src, dst)."""
    src, dst = addrs
    if struct.unpack_from("!H", f, l4)[0] == SBFD_PORT:
        return "sbfd_sport"
    if not (_unicast(dst, v4) and _unicast(src, v4)):
        return "sbfd_address"
    ulen = struct.unpack_from("!H", f, l4 + 4)[0]
    bfd = l4 + 8
    if ulen < 8 or bfd + ulen - 8 > len(f) or ulen - 8 < 1:
        return "sbfd_short"
    pl = ulen - 8
    if f[bfd] >> 5 != 1:
        return "sbfd_version"
    if pl < 24:
        return "sbfd_short"
    flags, mult, length = f[bfd + 1], f[bfd + 2], f[bfd + 3]
    if length < (26 if flags & 0x04 else 24) or length > pl:
        return "sbfd_length"
    if mult == 0:
        return "sbfd_detect_mult"
    if flags & 0x01:
        return "sbfd_multipoint"
    my, your = struct.unpack_from("!II", f, bfd + 4)
    if my == 0:
        return "sbfd_my_discr"
    if your == 0:
        return "sbfd_your_discr_zero"
    if your not in t.sbfd:
        return "sbfd_unknown"
    if flags & 0x04:
        return "sbfd_auth"
    return "sbfd_tx"
