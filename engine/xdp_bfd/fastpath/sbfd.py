"""The S-BFD reflector (RFC 7880, RFC 7881) seen from userspace: its discriminators in the maps.

The reflector itself is XDP's (``sbfd_reflect`` in ``bpf/xdp_bfd.c``): it
answers each initiator's frame with that frame and passes nothing up, so the
engine's whole part is configuration — one map write per discriminator when
the configuration changes, none per packet — and reading the counters for
the stats. Map layouts and flags come from ``bpf/bfd_abi.h`` (bcc's types,
:mod:`.abi`); nothing here restates them.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Mapping
from typing import Any

from ..core.config import ReflectorConfig
from ..core.host import Stats
from ..wire.control import State
from .kernel import FastPath

log = logging.getLogger("xdp_bfd")

_DIAG_ADMIN_DOWN = 7  # RFC 5880 §4.1: Administratively Down


class Reflector:
    """The ``sbfd_cfg``, ``sbfd_state`` and ``sbfd_global`` maps, kept equal to the configured set."""

    def __init__(self, host: Stats, fp: FastPath) -> None:
        bpf = fp.program.bpf
        self.cfg, self.state, self.glob = bpf["sbfd_cfg"], bpf["sbfd_state"], bpf["sbfd_global"]
        self.flag = fp.abi.SbfdFlag
        self.limit = fp.abi.sbfd_max_reflectors
        self.port = fp.abi.sbfd_port
        self.configs: dict[int, ReflectorConfig] = {}
        host.add_stats_section("sbfd_reflector", self.section)

    def apply(self, configs: Mapping[int, ReflectorConfig]) -> None:
        """Make the maps answer exactly ``configs`` (a pinned map may hold a predecessor's: synced whole)."""
        if len(configs) > self.limit:
            # Checked by the engine before anything changes; here only as the last word.
            raise ValueError(f"at most {self.limit} S-BFD reflector discriminators")
        for d, rc in configs.items():
            key = self.cfg.Key(d)
            self.cfg[key] = self._leaf(rc)
            if self.state.get(key) is None:
                self.state[key] = self.state.Leaf()
        # The global switch last when adding (every entry is there when 7784 becomes ours),
        # first when removing (7784 goes back to the stack before its entries go).
        g = self.glob.Leaf()
        g.reflectors = len(configs)
        self.glob[self.glob.Key(0)] = g
        for key in [k for k in self.cfg if k.value not in configs]:
            self.cfg.pop(key, None)
        for key in [k for k in self.state if k.value not in configs]:
            self.state.pop(key, None)
        added = sorted(set(configs) - set(self.configs))
        gone = sorted(set(self.configs) - set(configs))
        changed = sorted(d for d in set(configs) & set(self.configs) if configs[d] != self.configs[d])
        self.configs = dict(configs)
        if added or gone or changed:
            log.info(
                "sbfd: reflector answers %s in XDP (UDP %d)%s%s",
                ", ".join(map(str, sorted(configs))) or "nothing",
                self.port,
                f"; added {', '.join(map(str, added))}" if added else "",
                f"; removed {', '.join(map(str, gone))}" if gone else "",
            )

    def _leaf(self, rc: ReflectorConfig) -> Any:
        leaf = self.cfg.Leaf()
        leaf.flags = int(self.flag.ACTIVE)
        leaf.state = int(State.ADMIN_DOWN if rc.admin_down else State.UP)
        leaf.diag = _DIAG_ADMIN_DOWN if rc.admin_down else 0
        leaf.min_rx = socket.htonl(rc.min_rx_us)
        interval = 1_000_000_000 // rc.rate_pps
        leaf.interval_ns = interval
        # GCRA: a packet conforms while the bucket runs at most burst_ns ahead, so
        # burst - 1 drips of slack let `burst` packets through at once.
        leaf.burst_ns = interval * (rc.burst_packets - 1)
        return leaf

    def section(self) -> dict[str, Any]:
        """The stats document's ``sbfd_reflector``: per discriminator, what it is and what it did."""
        now = time.monotonic_ns()
        out = []
        for d, rc in sorted(self.configs.items()):
            st = self.state.get(self.state.Key(d))
            out.append(
                {
                    "discr": d,
                    "state": "admin_down" if rc.admin_down else "up",
                    "min_rx_us": rc.min_rx_us,
                    "rate_pps": rc.rate_pps,
                    "burst": rc.burst_packets,
                    "answered": int(st.answered) if st is not None else 0,
                    "rate_limited": int(st.rate_limited) if st is not None else 0,
                    "last_answer_age_us": (now - st.last_ns) // 1000
                    if st is not None and st.last_ns
                    else None,
                }
            )
        return {"port": self.port, "reflectors": out}


__all__ = ["Reflector"]
