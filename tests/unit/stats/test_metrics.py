"""The stats document as Prometheus families: the dataplane's counters."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from xdp_bfd.stats.metrics import StatsCollector


def _exposed(doc: dict) -> dict:
    collector = StatsCollector()
    collector.doc = doc
    reg = CollectorRegistry()
    reg.register(collector)
    text = generate_latest(reg).decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def _doc(dplane: dict | None) -> dict:
    return {
        "sessions_configured": 0,
        "sessions_up": 0,
        "kernel_tx": False,
        "dplane": dplane,
        "sched": "other",
        "counters": {"drop": {}},
        "sessions": [],
        "loop_lag": None,
    }


def test_timers_reports_are_a_counter_beside_the_connection():
    got = _exposed(_doc({"connected": True, "timers_reports": 3}))
    assert (got["xdp_bfd_dplane_connected"], got["xdp_bfd_dplane_timers_reports_total"]) == (1.0, 3.0)


def test_without_a_dataplane_neither_is_exposed():
    got = _exposed(_doc(None))
    assert "xdp_bfd_dplane_connected" not in got and "xdp_bfd_dplane_timers_reports_total" not in got
