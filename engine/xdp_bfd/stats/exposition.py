"""The per-session series of the Prometheus exposition, written a slice at a time.

prometheus_client builds an object per sample and formats it in one call: at
thousands of sessions that held the loop for many periods in one piece
(docs/benchmarks.md). Here each session's labels are escaped once, every
family is written in slices of sessions between which the loop runs its
timers, and the text is what prometheus_client writes for the same families
(text format 0.0.4: labels sorted by name, values as Go prints floats), so a
scraper sees no difference. The engine-wide families stay with
prometheus_client (``metrics.StatsCollector``): a few dozen samples.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from prometheus_client.utils import floatToGoString

# Sessions per step of one family: tens of µs (docs/benchmarks.md).
EXPOSITION_SLICE_SESSIONS = 64

STATE_VALUES = {"admin_down": 0, "down": 1, "init": 2, "up": 3}


def escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


@dataclass(frozen=True, slots=True)
class Labels:
    """One session's labels, escaped once, split where a family's own label sorts in."""

    head: str  # ifname, local, multihop
    peer: str

    @classmethod
    def of(cls, s: dict[str, Any]) -> Labels:
        return cls(
            f'ifname="{escape_label(s["ifname"] or "")}",local="{escape_label(s["local"] or "")}",'
            f'multihop="{str(s["multihop"]).lower()}"',
            f'peer="{escape_label(s["peer"])}"',
        )


def _value(v: float) -> str:
    # Most values are counts: Go prints an integer below 1e6 as Python's float
    # repr does ("42.0"), without floatToGoString's float() and repr().
    if type(v) is int and -1_000_000 < v < 1_000_000:
        return f"{v}.0"
    return floatToGoString(v)


# A family's lines for one session ("" for none), given its name and the session's labels.
Lines = Callable[[str, dict[str, Any], Labels], str]


def _one(value: Callable[[dict[str, Any]], float | None]) -> Lines:
    def lines(name: str, s: dict[str, Any], lab: Labels) -> str:
        v = value(s)
        return "" if v is None else f"{name}{{{lab.head},{lab.peer}}} {_value(v)}\n"

    return lines


def _tx(name: str, s: dict[str, Any], lab: Labels) -> str:
    return (
        f'{name}{{{lab.head},path="kernel",{lab.peer}}} {_value(s["kernel_tx_packets"])}\n'
        f'{name}{{{lab.head},path="user",{lab.peer}}} {_value(s["user_tx_packets"])}\n'
    )


def _echo_probes(name: str, s: dict[str, Any], lab: Labels) -> str:
    echo = s.get("echo") or {}
    return "".join(
        f'{name}{{{lab.head},outcome="{o}",{lab.peer}}} {_value(echo[o])}\n'
        for o in ("sent", "returned", "lost")
        if echo
    )


def _echo_rtt(name: str, s: dict[str, Any], lab: Labels) -> str:
    rtt = (s.get("echo") or {}).get("rtt_us") or {}
    return "".join(
        f'{name}{{{lab.head},{lab.peer},stat="{escape_label(stat)}"}} {_value(us / 1e6)}\n'
        for stat, us in rtt.items()
        if us is not None
    )


def _state(s: dict[str, Any]) -> int:
    return STATE_VALUES[s["state"]]


def _up(s: dict[str, Any]) -> int:
    return int(s["state"] == "up")


def _field(key: str) -> Callable[[dict[str, Any]], float]:
    return lambda s: s[key]


def _flag(key: str) -> Callable[[dict[str, Any]], int]:
    return lambda s: int(bool(s.get(key)))


def _overshoot(s: dict[str, Any]) -> float | None:
    us = s.get("last_detection_overshoot_us")
    return None if us is None else us / 1e6


def _echo_alive(s: dict[str, Any]) -> float | None:
    echo = s.get("echo")
    return int(echo["alive"]) if echo else None


@dataclass(frozen=True)
class Family:
    name: str
    kind: str  # gauge or counter
    help: str
    lines: Lines

    @property
    def sample_name(self) -> str:
        return f"{self.name}_total" if self.kind == "counter" else self.name

    def header(self) -> str:
        n = self.sample_name
        return f"# HELP {n} {escape_help(self.help)}\n# TYPE {n} {self.kind}\n"


SESSION_FAMILIES = (
    Family("xdp_bfd_session_state", "gauge", "0 admin_down, 1 down, 2 init, 3 up", _one(_state)),
    Family("xdp_bfd_session_up", "gauge", "1 when the session is Up", _one(_up)),
    Family("xdp_bfd_session_flaps", "counter", "Transitions out of Up", _one(_field("flaps"))),
    Family("xdp_bfd_session_tx_packets", "counter", "Control packets sent, by path", _tx),
    Family("xdp_bfd_session_rx_packets", "counter", "Control packets accepted", _one(_field("rx_packets"))),
    Family(
        "xdp_bfd_session_kernel_tx_active",
        "gauge",
        "1 while the fast path answers the peer",
        _one(_flag("kernel_tx_active")),
    ),
    Family(
        "xdp_bfd_session_kernel_clock",
        "gauge",
        "1 while the kernel transmit clock runs for the session",
        _one(_flag("kernel_clock")),
    ),
    Family(
        "xdp_bfd_session_detection_overshoot_seconds",
        "gauge",
        "Silence beyond the detection time at the last kernel-detected expiry",
        _one(_overshoot),
    ),
    Family(
        "xdp_bfd_session_echo_probes",
        "counter",
        "Our echo probes since the session's echo last started, by outcome",
        _echo_probes,
    ),
    Family(
        "xdp_bfd_session_echo_rtt_seconds",
        "gauge",
        "Round trip of our echo (p99 over the last returns kept)",
        _echo_rtt,
    ),
    Family(
        "xdp_bfd_session_echo_alive",
        "gauge",
        "1 while our echo comes back within the timeout (advisory only)",
        _one(_echo_alive),
    ),
)


def session_series(
    sessions: list[dict[str, Any]], out: list[str], *, slice_sessions: int = EXPOSITION_SLICE_SESSIONS
) -> Generator[None, None, None]:
    """Append every session family's text to ``out``, yielding between slices of sessions."""
    labels: list[Labels] = []
    for i in range(0, len(sessions), slice_sessions):
        labels.extend(Labels.of(s) for s in sessions[i : i + slice_sessions])
        yield
    for family in SESSION_FAMILIES:
        out.append(family.header())
        name, lines = family.sample_name, family.lines
        for i in range(0, len(sessions), slice_sessions):
            part = zip(sessions[i : i + slice_sessions], labels[i : i + slice_sessions], strict=True)
            out.append("".join(lines(name, s, lab) for s, lab in part))
            yield
