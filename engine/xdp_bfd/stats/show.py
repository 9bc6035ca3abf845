"""``xdp-bfd show``: the stats document (DESIGN.md, "Stats JSON") as an operator reads it.

Pure functions of the document; finding the engine and getting a fresh
document is ``locate``'s job. Keys the document does not have print as ``-``:
a field an older or newer engine lacks never breaks the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# Same rule as offload_info (plugins/module_utils/offload.py): the kernel transmits for a
# session when it sent for it within three detection times (3 s without one).
KTX_AGE_DETECT_FACTOR = 3
KTX_AGE_FALLBACK_US = 3_000_000

SESSION_COLUMNS = (
    "PEER", "LOCAL", "IFACE", "HOP", "STATE", "REMOTE", "UPTIME", "TX", "LAST RX", "FLAPS", "DIAG",
)  # fmt: skip
PACKET_COLUMNS = ("PEER", "LOCAL", "IFACE", "HOP", "RX", "KERNEL TX", "USER TX", "ECHO", "DROPS")
# Not counters: what the dplane section says about itself.
DPLANE_IDENTITY = ("mode", "address")
XDP_PROGRAM_KEYS = ("run_cnt", "run_time_ns", "ns_per_packet", "spread_cpus")


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


def fmt_age_us(us: Any) -> str:
    """A microsecond age, shortest readable unit: 850us, 3.1ms, 2.40s, 5m03s."""
    if not isinstance(us, (int, float)) or isinstance(us, bool) or us < 0:
        return "-"
    if us < 1_000:
        return f"{int(us)}us"
    if us < 999_950:  # what still rounds to at most 999.9ms
        return f"{us / 1_000:.1f}ms"
    if us < 60_000_000:
        return f"{us / 1_000_000:.2f}s"
    return fmt_duration(us / 1_000_000)


def fmt_duration(seconds: Any) -> str:
    """Whole seconds as 45s, 3m07s, 2h03m07s, 4d02h03m."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds < 0:
        return "-"
    s = int(seconds)
    d, s = divmod(s, 86_400)
    h, s = divmod(s, 3_600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d{h:02d}h{m:02d}m"
    if h:
        return f"{h}h{m:02d}m{s:02d}s"
    if m:
        return f"{m}m{s:02d}s"
    return f"{s}s"


def ktx_age_bound_us(session: dict[str, Any]) -> int:
    detect = session.get("detect_time_us") or 0
    return KTX_AGE_DETECT_FACTOR * int(detect) if detect > 0 else KTX_AGE_FALLBACK_US


def transmitter(session: dict[str, Any]) -> str:
    """Who sends this session's control packets now: ``kernel`` (the XDP fast path sent for it
    within three detection times), ``user`` (the engine's loop), or ``-`` (nothing sent yet)."""
    age = session.get("last_ktx_age_us")
    if session.get("kernel_tx_packets") and isinstance(age, int) and age <= ktx_age_bound_us(session):
        return "kernel"
    if session.get("user_tx_packets") or session.get("kernel_tx_packets"):
        return "user"
    return "-"


def uptime(doc: dict[str, Any], session: dict[str, Any]) -> str:
    since, at = session.get("up_since"), doc.get("generated_at")
    if session.get("state") != "up" or not since or not isinstance(at, (int, float)):
        return "-"
    return fmt_duration(max(0.0, at - since))


def _iface(session: dict[str, Any]) -> str:
    return session.get("ifname") or "-"


def _hop(session: dict[str, Any]) -> str:
    return "multi" if session.get("multihop") else "single"


def session_rows(doc: dict[str, Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for s in doc.get("sessions") or []:
        diag = s.get("diag")
        rows.append(
            (
                _dash(s.get("peer")),
                _dash(s.get("local")),
                _iface(s),
                _hop(s),
                _dash(s.get("state")),
                _dash(s.get("remote_state")),
                uptime(doc, s),
                transmitter(s),
                fmt_age_us(s.get("last_rx_age_us")),
                _dash(s.get("flaps")),
                "-" if diag in (None, "none") else str(diag),
            )
        )
    return rows


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns two spaces apart, no trailing blanks."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = []
    for row in (tuple(headers), *rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def summary(doc: dict[str, Any], origin: str | None = None) -> list[str]:
    """The lines above the table: which engine, its fast path, dataplane, scheduling, counts."""
    head = f"engine pid {_dash(doc.get('pid'))}, xdp-bfd {_dash(doc.get('engine_version'))}"
    lines = [head + (f", {origin}" if origin else "")]
    xdp = doc.get("xdp")
    if doc.get("kernel_tx") and isinstance(xdp, dict):
        attached = xdp.get("interfaces") or [xdp]
        where = ", ".join(f"{_dash(a.get('ifname'))} ({_dash(a.get('mode'))})" for a in attached)
        lines.append(f"fast path: XDP on {where}")
    else:
        lines.append("fast path: none (software only, no --kernel-tx)")
    dp = doc.get("dplane")
    if isinstance(dp, dict):
        state = "connected" if dp.get("connected") else "NOT connected"
        lines.append(f"dataplane: {_dash(dp.get('mode'))} {_dash(dp.get('address'))}, bfdd {state}")
    else:
        lines.append("dataplane: none")
    lines.append(f"sched: {_dash(doc.get('sched'))}")
    lines.append(
        f"sessions: {_dash(doc.get('sessions_configured'))} configured, {_dash(doc.get('sessions_up'))} up"
    )
    return lines


def format_sessions(doc: dict[str, Any], origin: str | None = None) -> str:
    """``xdp-bfd show``."""
    out = [*summary(doc, origin), ""]
    rows = session_rows(doc)
    out.append(table(SESSION_COLUMNS, rows) if rows else "no sessions")
    return "\n".join(out) + "\n"


# -- counters ------------------------------------------------------------------------


ECHO_KEYS = ("interval_ms", "sent", "returned", "lost", "rtt_us", "alive")


def _rtt(rtt: Any) -> str:
    if not isinstance(rtt, dict):
        return "-"
    return "/".join(
        _dash(None if rtt.get(k) is None else round(rtt[k])) for k in ("min", "mean", "p99", "max")
    )


def _is_count(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def counters(doc: dict[str, Any]) -> dict[str, Any]:
    """The document's counters, grouped as ``show counters`` prints them (its ``--json``)."""
    c = doc.get("counters") or {}
    drop = c.get("drop") or {}
    in_xdp = c.get("xdp_drop") or {}
    xdp = doc.get("xdp") if isinstance(doc.get("xdp"), dict) else None
    dp = doc.get("dplane") if isinstance(doc.get("dplane"), dict) else None
    lag = doc.get("loop_lag") if isinstance(doc.get("loop_lag"), dict) else None
    sbfd = doc.get("sbfd_reflector") if isinstance(doc.get("sbfd_reflector"), dict) else None
    out: dict[str, Any] = {
        "fast_path": {k: v for k, v in c.items() if _is_count(v)},
        "xdp_program": {k: xdp.get(k) for k in XDP_PROGRAM_KEYS if k in xdp} if xdp else None,
        "drops": {
            reason: {"total": drop.get(reason, 0), "xdp": in_xdp.get(reason, 0)}
            for reason in sorted(set(drop) | set(in_xdp))
        },
        "dplane": {k: v for k, v in dp.items() if k not in DPLANE_IDENTITY} if dp else None,
        "loop_lag": None,
        # Per reflector discriminator (fastpath.sbfd); None without the fast path.
        "sbfd_reflector": [
            {k: r.get(k) for k in ("discr", "state", "answered", "rate_limited", "last_answer_age_us")}
            for r in sbfd.get("reflectors") or []
        ]
        if sbfd
        else None,
        "sessions": [
            {
                "peer": s.get("peer"),
                "local": s.get("local"),
                "ifname": s.get("ifname"),
                "multihop": bool(s.get("multihop")),
                "rx_packets": s.get("rx_packets"),
                "kernel_tx_packets": s.get("kernel_tx_packets"),
                "user_tx_packets": s.get("user_tx_packets"),
                "echo_reflected": s.get("echo_reflected"),
                "drops": dict(s.get("drops") or {}),
            }
            for s in doc.get("sessions") or []
        ],
        # Our echo (fastpath.echo), for the sessions that send it.
        "echo": [
            {"peer": s.get("peer"), **{k: s["echo"].get(k) for k in ECHO_KEYS}}
            for s in doc.get("sessions") or []
            if isinstance(s.get("echo"), dict)
        ],
    }
    if lag is not None:
        count, total = lag.get("count"), lag.get("sum_us")
        mean = round(total / count, 1) if _is_count(count) and count and _is_count(total) else None
        background = lag.get("background") if isinstance(lag.get("background"), dict) else {}
        out["loop_lag"] = {
            "count": count,
            "max_us": lag.get("max_us"),
            "mean_us": mean,
            "background_step_max_us": background.get("step_max_us"),
        }
    return out


def _block(title: str, items: dict[str, Any]) -> list[str]:
    width = max((len(k) for k in items), default=0)
    lines = [title]
    for k, v in items.items():
        text = ("yes" if v else "no") if isinstance(v, bool) else _dash(v)
        lines.append(f"  {k.ljust(width)}  {text}")
    return lines


def format_counters(doc: dict[str, Any], origin: str | None = None) -> str:
    """``xdp-bfd show counters``."""
    c = counters(doc)
    out = [*summary(doc, origin)]
    out += ["", *_block("fast path verdicts", c["fast_path"])]
    if c["xdp_program"]:
        out += ["", *_block("XDP program (run_* need kernel.bpf_stats_enabled=1)", c["xdp_program"])]
    out += ["", "drops by reason (total: kernel and engine; in XDP: the kernel's part)"]
    if c["drops"]:
        drops = [(r, str(v["total"]), str(v["xdp"])) for r, v in c["drops"].items()]
        out += ["  " + line for line in table(("REASON", "TOTAL", "IN XDP"), drops).splitlines()]
    else:
        out.append("  none")
    if c["dplane"] is not None:
        dp = doc["dplane"]
        out += ["", *_block(f"dataplane ({_dash(dp.get('mode'))} {_dash(dp.get('address'))})", c["dplane"])]
    if c["loop_lag"] is not None:
        lag = c["loop_lag"]
        out += [
            "",
            *_block(
                "loop lag",
                {
                    "runs": lag["count"],
                    "max": fmt_age_us(lag["max_us"]),
                    "mean": fmt_age_us(lag["mean_us"]),
                    "longest background step": fmt_age_us(lag["background_step_max_us"]),
                },
            ),
        ]
    if c["sbfd_reflector"]:
        refl = [
            (str(r["discr"]), _dash(r["state"]), _dash(r["answered"]), _dash(r["rate_limited"]),
             fmt_age_us(r["last_answer_age_us"]))
            for r in c["sbfd_reflector"]
        ]  # fmt: skip
        out += ["", "S-BFD reflector (UDP 7784, answered in XDP)"]
        out += [
            "  " + line
            for line in table(("DISCR", "STATE", "ANSWERED", "RATE LIMITED", "LAST"), refl).splitlines()
        ]
    if c["echo"]:
        echo = [
            (_dash(e["peer"]), f"{_dash(e['interval_ms'])}ms", _dash(e["sent"]), _dash(e["returned"]),
             _dash(e["lost"]), _rtt(e["rtt_us"]), "yes" if e["alive"] else "no")
            for e in c["echo"]
        ]  # fmt: skip
        out += ["", "our echo (advisory: it never takes a session down)"]
        out += [
            "  " + line
            for line in table(
                ("PEER", "EVERY", "SENT", "RETURNED", "LOST", "RTT us MIN/MEAN/P99/MAX", "ALIVE"), echo
            ).splitlines()
        ]
    out += ["", "per session"]
    rows: list[tuple[str, ...]] = [
        (
            _dash(s["peer"]),
            _dash(s["local"]),
            s["ifname"] or "-",
            "multi" if s["multihop"] else "single",
            _dash(s["rx_packets"]),
            _dash(s["kernel_tx_packets"]),
            _dash(s["user_tx_packets"]),
            _dash(s["echo_reflected"]),
            ", ".join(f"{k} {v}" for k, v in sorted(s["drops"].items()) if v) or "0",
        )
        for s in c["sessions"]
    ]
    out += ["  " + line for line in table(PACKET_COLUMNS, rows).splitlines()] if rows else ["  no sessions"]
    return "\n".join(out) + "\n"
