"""The judge's three verdicts, from stamps made up here (the real stream is tested in integration)."""

from __future__ import annotations

import contextlib
from dataclasses import replace

import pytest

from harness.witness import ATTEMPTS, PERIOD_MS, Inconclusive, ReferenceStreams, Registry, gap_figures
from harness.witness import Judge as _Judge


def Judge(stream, registry, test):
    """A judge whose windows last one second each, from t=1000."""
    ticks = iter(range(1000, 10**6))
    return _Judge(stream, registry, test, clock=lambda: float(next(ticks)))


class Late:
    """A userspace or deadline witness that was ``ms`` late."""

    def __init__(self, ms: float) -> None:
        self.ms = ms

    def lateness_ms(self, t0: float, t1: float) -> float:
        return self.ms


class Stamps:
    """A reference stream whose arrivals the test chooses: every period, minus a hole in the
    middle of the window (``hole_ms``) and more holes after it (``then``: (ms of running, ms of
    hole) each). ``late_ms``: the userspace witness's lateness, ``deadline_ms`` the deadline
    witness's."""

    def __init__(
        self, hole_ms: float = 0.0, late_ms: float = 0.0, then: tuple = (), deadline_ms: float = 0.0
    ) -> None:
        self.hole_ms, self.late_ms, self.then = hole_ms, late_ms, then
        self.userspace = self
        self.deadline = Late(deadline_ms)

    def lateness_ms(self, t0: float, t1: float) -> float:
        return self.late_ms

    def figures(self, t0: float, t1: float, **_):
        holes = [((t1 - t0) / 2, self.hole_ms)] if self.hole_ms else []
        for run_ms, hole_ms in self.then:
            holes.append((holes[-1][0] + (holes[-1][1] + run_ms) / 1e3, hole_ms))
        stamps, t = [], t0 + 0.001
        while t < t1:
            stamps.append(t)
            t += PERIOD_MS / 1e3
            if holes and t - t0 >= holes[0][0]:
                t += holes.pop(0)[1] / 1e3
        return gap_figures(stamps, t0, t1)


def test_gap_figures_finds_the_hole_and_counts_the_edges():
    stamps = [0.00, 0.01, 0.02, 0.08, 0.09]
    f = gap_figures(stamps, 0.0, 0.10, period_ms=10)
    seen = (f.frames, f.expected, round(f.max_gap_ms), round(f.max_gap_at_s, 2), f.late_gaps)
    assert seen == (5, 10, 60, 0.08, 1)
    # A stream that stopped before the window ended is not clean.
    assert round(gap_figures(stamps, 0.0, 0.30, period_ms=10).stall_ms) == 200


def test_stalls_close_together_add_up_within_the_horizon():
    # Late gaps of 17 ms and 15 ms, 3 ms apart, then one of 9 ms 0.5 s later (period 2 ms).
    stamps = [0.0, 0.002, 0.019, 0.021, 0.036, 0.038, 0.538, 0.547, 0.549]
    f = gap_figures(stamps, 0.0, 0.549, period_ms=2)
    assert [round(e, 3) for e, _x in f.lates] == [0.019, 0.036, 0.538, 0.547]
    assert round(f.stall_ms) == 498  # the 0.5 s hole
    f = gap_figures(stamps[:6], 0.0, 0.038, period_ms=2)
    assert round(f.stall_ms) == 15 and round(f.stall_within(0)) == 15
    assert round(f.stall_within(17)) == 28  # 15 + 13: both end within 17 ms
    assert round(f.stall_within(16)) == 15  # 17 ms apart: one at a time
    # A stream without late gaps gathers nothing: its stall is its worst gap.
    clean = gap_figures([0.0, 0.002, 0.004], 0.0, 0.004, period_ms=2)
    assert clean.lates == () and clean.stall_within(1000) == clean.stall_ms == 0.0


def test_a_burst_of_stalls_within_the_horizon_is_inconclusive_and_said_so():
    burst = Stamps(hole_ms=15, then=((3, 15),))
    with (
        pytest.raises(Inconclusive, match=r"stall 1[5-7]\.\d ms.*, 3[0-4]\.\d ms late within 30 ms"),
        Judge(burst, Registry(), "t").window("w", stall_ms=20, horizon_ms=30),
    ):
        raise AssertionError("late")
    # The horizon defaults to stall_ms: these two end 18 ms apart, so each is judged alone.
    with (
        pytest.raises(AssertionError, match="PRODUCT FAULT"),
        Judge(burst, Registry(), "t").window("w", stall_ms=16),
    ):
        raise AssertionError("late")
    # The same two stalls far apart are two small ones: the failure is ours.
    apart = Stamps(hole_ms=15, then=((300, 15),))
    with (
        pytest.raises(AssertionError, match="PRODUCT FAULT") as exc,
        Judge(apart, Registry(), "t").window("w", stall_ms=20, horizon_ms=30),
    ):
        raise AssertionError("late")
    assert "late within" not in str(exc.value)


def _window(judge: Judge, fail: bool, peer=None) -> None:
    with judge.window("w", stall_ms=30) as w:
        if peer is not None:
            w.peer(peer, period_ms=10)
        assert not fail, "we were late"


def test_pass_records_and_clears_the_streak():
    reg = Registry()
    _window(Judge(Stamps(), reg, "t"), fail=False)
    assert [r.verdict for r in reg.records] == ["pass"]


def test_a_failure_with_a_clean_witness_is_a_product_fault():
    reg = Registry()
    with pytest.raises(AssertionError, match=r"PRODUCT FAULT.*\n.*\n.*we were late") as exc:
        _window(Judge(Stamps(), reg, "t"), fail=True)
    assert not isinstance(exc.value, Inconclusive)
    assert [r.verdict for r in reg.records] == ["product fault"]


def test_a_failure_while_the_reference_stalled_is_inconclusive_then_too_noisy():
    reg = Registry()
    judge = Judge(Stamps(hole_ms=45), reg, "t")
    for _ in range(ATTEMPTS - 1):
        with pytest.raises(Inconclusive, match=r"stall 4[4-6]\.\d ms"):
            _window(judge, fail=True)
    with pytest.raises(AssertionError, match="ENVIRONMENT TOO NOISY") as exc:
        _window(judge, fail=True)
    assert not isinstance(exc.value, Inconclusive)
    assert [r.verdict for r in reg.records] == ["inconclusive", "inconclusive", "too noisy"]
    assert exc.value.args[0].count("attempt") == ATTEMPTS  # every window's figures


def _calls_on_inconclusive(stamps: Stamps, fail: bool) -> list[str]:
    calls: list[str] = []
    judge = Judge(stamps, Registry(), "t")
    window = judge.window("w", stall_ms=30, on_inconclusive=lambda: calls.append("rebase"))
    with contextlib.suppress(AssertionError, Inconclusive), window:
        assert not fail, "we were late"
    return calls


def test_on_inconclusive_runs_for_an_inconclusive_window_only():
    assert _calls_on_inconclusive(Stamps(), fail=False) == []  # pass
    assert _calls_on_inconclusive(Stamps(), fail=True) == []  # product fault
    assert _calls_on_inconclusive(Stamps(hole_ms=45), fail=True) == ["rebase"]


def test_a_stall_shorter_than_the_bound_leaves_the_verdict_to_us():
    reg = Registry()
    with pytest.raises(AssertionError, match="PRODUCT FAULT"):
        _window(Judge(Stamps(hole_ms=15), reg, "t"), fail=True)


class P:
    def __init__(self, ts: float) -> None:
        self.ts = ts


def test_a_peer_that_went_quiet_makes_it_inconclusive():
    now = 1000.0
    quiet = [P(now + i * 0.01) for i in range(5)] + [P(now + 0.2 + i * 0.01) for i in range(5)]
    reg = Registry()
    with pytest.raises(Inconclusive, match="peer TX"):
        _window(Judge(Stamps(), reg, "t"), fail=True, peer=quiet)


class S(P):
    def __init__(self, ts: float, state: str) -> None:
        super().__init__(ts)
        self.state = state


def test_the_peers_slow_rate_after_declaring_us_down_is_not_a_stall():
    # Up every 10 ms, then Down (its answer to our silence) at the 1 s slow rate.
    now = 1000.0
    flow = [S(now + i * 0.01, "up") for i in range(10)] + [S(now + 0.1 + i, "down") for i in range(3)]
    reg = Registry()
    with pytest.raises(AssertionError, match="PRODUCT FAULT"):
        _window(Judge(Stamps(), reg, "t"), fail=True, peer=flow)
    # A silence that began while it was Up still counts, up to its first Down.
    flow = [S(now + i * 0.01, "up") for i in range(10)] + [S(now + 0.2, "down"), S(now + 1.2, "down")]
    with pytest.raises(Inconclusive, match=r"peer TX stall 10\d\.\d ms"):
        _window(Judge(Stamps(), reg, "t"), fail=True, peer=flow)


def test_a_busy_machine_explains_an_ordinary_process_only_where_the_window_says_so():
    reg = Registry()
    busy = Stamps(late_ms=35)  # the kernel on time, an ordinary process 35 ms late
    sw = Judge(busy, reg, "sw").window("software engine", stall_ms=20, userspace=True)
    with pytest.raises(Inconclusive, match=r"userspace witness late 35\.0 ms"), sw:
        raise AssertionError("late")
    # The fast path claims to hold on a starved userspace: there it is our fault.
    ktx = Judge(busy, reg, "ktx").window("kernel path", stall_ms=20)
    with pytest.raises(AssertionError, match="PRODUCT FAULT"), ktx:
        raise AssertionError("late")


class CpuStamps(Stamps):
    def __init__(self, cpu: int, hole_ms: float = 0.0) -> None:
        super().__init__(hole_ms)
        self.cpu = cpu

    def figures(self, t0: float, t1: float, **_):
        return replace(super().figures(t0, t1), cpu=self.cpu)


def _per_cpu(*streams: CpuStamps) -> ReferenceStreams:
    composite = ReferenceStreams.__new__(ReferenceStreams)  # the streams made up here, not started
    composite.streams = list(streams)  # type: ignore[assignment]
    composite.userspace = streams[0]  # type: ignore[assignment]
    composite.deadline = streams[0].deadline  # type: ignore[assignment]
    return composite


def test_a_stall_of_one_cpu_is_the_windows_stall_and_names_the_cpu():
    both = _per_cpu(CpuStamps(0), CpuStamps(1, hole_ms=80))
    fig = both.figures(1000.0, 1001.0)
    assert fig.cpu == 1 and fig.stall_ms >= 70 and "(CPU 1)" in str(fig)
    reg = Registry()
    with pytest.raises(Inconclusive, match=r"\(CPU 1\)"):
        _window(Judge(both, reg, "t"), fail=True)
    # The same failure with both CPUs clean is ours.
    with pytest.raises(AssertionError, match="PRODUCT FAULT"):
        _window(Judge(_per_cpu(CpuStamps(0), CpuStamps(1)), Registry(), "t"), fail=True)


def test_the_cpu_whose_stalls_came_in_a_burst_is_the_windows_reference():
    single = CpuStamps(0, hole_ms=18)
    burst = CpuStamps(1, hole_ms=12)
    burst.then = ((2, 12),)
    both = _per_cpu(single, burst)
    assert both.figures(1000.0, 1001.0).cpu == 0  # alone, the longer gap is the worst
    fig = both.figures(1000.0, 1001.0, horizon_ms=30)
    assert fig.cpu == 1 and round(fig.stall_within(30)) >= 22
    with (
        pytest.raises(Inconclusive, match=r"\(CPU 1\), 2\d\.\d ms late within 30 ms"),
        Judge(both, Registry(), "t").window("w", stall_ms=20, horizon_ms=30),
    ):
        raise AssertionError("late")


def test_a_late_deadline_witness_explains_only_a_window_that_claims_the_reservation():
    late = Stamps(deadline_ms=25)
    with (
        pytest.raises(Inconclusive, match=r"deadline witness late 25\.0 ms"),
        Judge(late, Registry(), "dl").window("under hogs", stall_ms=20, deadline=True),
    ):
        raise AssertionError("late")
    # Not asked: the reservation's own lateness is no excuse for a claim it does not carry.
    with (
        pytest.raises(AssertionError, match="PRODUCT FAULT") as exc,
        Judge(late, Registry(), "ktx").window("kernel path", stall_ms=20),
    ):
        raise AssertionError("late")
    assert "deadline witness" not in str(exc.value)
    # Asked and on time: the failure is ours, and the line says how late the witness was.
    with (
        pytest.raises(AssertionError, match=r"PRODUCT FAULT(.|\n)*deadline witness late 3\.0 ms"),
        Judge(Stamps(deadline_ms=3), Registry(), "dl").window("under hogs", stall_ms=20, deadline=True),
    ):
        raise AssertionError("late")
