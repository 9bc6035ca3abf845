"""The per-session series written a slice at a time: the text prometheus_client writes, in bounded steps."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from xdp_bfd.stats.exposition import SESSION_FAMILIES, session_series
from xdp_bfd.stats.metrics import exposition_text

LABELS = ["local", "peer", "ifname", "multihop"]
STATE = {"admin_down": 0, "down": 1, "init": 2, "up": 3}


class _Reference(Collector):
    """The session families as prometheus_client objects (how the engine wrote them before)."""

    def __init__(self, sessions: list[dict]) -> None:
        self.sessions = sessions

    def collect(self):
        fam = {
            f.name: (GaugeMetricFamily if f.kind == "gauge" else CounterMetricFamily)
            for f in SESSION_FAMILIES
        }
        helps = {f.name: f.help for f in SESSION_FAMILIES}

        def make(name: str, extra: tuple[str, ...] = ()):
            return fam[name](name, helps[name], labels=[*LABELS, *extra])

        state, up, flaps = (
            make("xdp_bfd_session_state"),
            make("xdp_bfd_session_up"),
            make("xdp_bfd_session_flaps"),
        )
        tx, rx = make("xdp_bfd_session_tx_packets", ("path",)), make("xdp_bfd_session_rx_packets")
        ktx, kclock = make("xdp_bfd_session_kernel_tx_active"), make("xdp_bfd_session_kernel_clock")
        overshoot = make("xdp_bfd_session_detection_overshoot_seconds")
        probes, rtt = (
            make("xdp_bfd_session_echo_probes", ("outcome",)),
            make("xdp_bfd_session_echo_rtt_seconds", ("stat",)),
        )
        alive = make("xdp_bfd_session_echo_alive")
        for s in self.sessions:
            lab = [s["local"] or "", s["peer"], s["ifname"] or "", str(s["multihop"]).lower()]
            state.add_metric(lab, STATE[s["state"]])
            up.add_metric(lab, int(s["state"] == "up"))
            flaps.add_metric(lab, s["flaps"])
            tx.add_metric([*lab, "kernel"], s["kernel_tx_packets"])
            tx.add_metric([*lab, "user"], s["user_tx_packets"])
            rx.add_metric(lab, s["rx_packets"])
            ktx.add_metric(lab, int(bool(s.get("kernel_tx_active"))))
            kclock.add_metric(lab, int(bool(s.get("kernel_clock"))))
            if s.get("last_detection_overshoot_us") is not None:
                overshoot.add_metric(lab, s["last_detection_overshoot_us"] / 1e6)
            echo = s.get("echo")
            if echo:
                for o in ("sent", "returned", "lost"):
                    probes.add_metric([*lab, o], echo[o])
                for stat, us in (echo["rtt_us"] or {}).items():
                    if us is not None:
                        rtt.add_metric([*lab, stat], us / 1e6)
                alive.add_metric(lab, int(echo["alive"]))
        yield from (state, up, flaps, tx, rx, ktx, kclock, overshoot, probes, rtt, alive)


def _reference(sessions: list[dict]) -> str:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Reference(sessions))
    return generate_latest(reg).decode()


def _sessions(n: int) -> list[dict]:
    out = []
    for i in range(n):
        s = {
            "local": None if i % 3 == 0 else f"198.19.{i % 250}.1",
            "peer": f"198.19.{i % 250}.{2 + i // 250}",
            "ifname": ["veth-d", None, 'we"ird\\name\n'][i % 3],
            "multihop": i % 2 == 1,
            "state": ["up", "down", "init", "admin_down"][i % 4],
            "flaps": i,
            "kernel_tx_packets": 12_345_678 * i,  # Go's exponent form from 1e7 on
            "user_tx_packets": i % 7,
            "rx_packets": 3 * i,
            "kernel_tx_active": i % 2 == 0,
            "kernel_clock": i % 5 == 0,
            "last_detection_overshoot_us": None if i % 4 else 250 + i,
        }
        if i % 3 == 1:
            rtt = None if i % 6 == 1 else {"min": 50.0, "p99": 300.5, "max": None}
            s["echo"] = {"sent": i, "returned": i // 2, "lost": 1, "alive": i % 2 == 0, "rtt_us": rtt}
        out.append(s)
    return out


@pytest.mark.parametrize("n", [0, 1, 7, 300])
def test_the_text_is_prometheus_clients_own(n):
    sessions = _sessions(n)
    out: list[str] = []
    for _ in session_series(sessions, out, slice_sessions=4):
        pass
    assert "".join(out) == _reference(sessions)


def test_each_step_writes_one_slice_of_one_family_at_most():
    sessions = _sessions(10)
    out: list[str] = []
    steps, seen = [], 0
    for _ in session_series(sessions, out, slice_sessions=3):
        steps.append(out[seen:])
        seen = len(out)
    steps.append(out[seen:])
    writing = [chunks for chunks in steps if chunks]
    assert len(writing) == len(SESSION_FAMILIES) * 4  # 10 sessions in slices of 3, for every family
    for chunks in writing:
        samples = [line for c in chunks for line in c.splitlines() if line and not line.startswith("#")]
        assert len({line.split("{")[0] for line in samples}) <= 1
        assert len({line.split('peer="')[1].split('"')[0] for line in samples}) <= 3


def test_the_whole_exposition_parses_and_counts_every_session():
    sessions = _sessions(40)
    background = {"steps": 9, "step_max_us": 1500, "jobs": 2, "last_job": None}
    lag = {"buckets": [[100, 1], ["+Inf", 2]], "sum_us": 300, "background": background}
    doc = {"sessions_configured": 40, "sessions_up": 10, "kernel_tx": True, "dplane": None, "sched": "other",
           "counters": {"drop": {"x": 1}}, "sessions": sessions, "loop_lag": lag}  # fmt: skip
    families = {f.name: f for f in text_string_to_metric_families(exposition_text(doc))}
    assert len(families["xdp_bfd_session_state"].samples) == 40
    assert sum(s.value for s in families["xdp_bfd_session_up"].samples) == 10
    assert families["xdp_bfd_sessions_configured"].samples[0].value == 40
    assert families["xdp_bfd_loop_lag_seconds"].type == "histogram"
    assert families["xdp_bfd_background_step_max_seconds"].samples[0].value == 0.0015
