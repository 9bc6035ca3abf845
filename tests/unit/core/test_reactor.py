"""The reactor: readiness, timed callbacks in deadline order, session timers, signals run from the loop."""

from __future__ import annotations

import contextlib
import gc
import os
import selectors
import signal
import socket
import time
from collections.abc import Iterator

import pytest

from xdp_bfd.core.clock import now_us
from xdp_bfd.core.reactor import Reactor
from xdp_bfd.core.signals import CAUGHT_SIGNALS


def test_calls_run_in_deadline_order_and_only_when_due() -> None:
    r = Reactor()
    ran: list[str] = []
    r.call_at(300, lambda _now: ran.append("c"))
    r.call_at(100, lambda _now: ran.append("a"))
    r.call_at(200, lambda _now: ran.append("b"))
    r.call_at(200, lambda _now: ran.append("b2"))  # same deadline: in the order asked
    r.run_timers(199)
    assert ran == ["a"]
    assert r.next_due() == 200
    r.run_timers(1_000)
    assert ran == ["a", "b", "b2", "c"]
    assert r.next_due() is None and r.timeout_s(0) is None


class _Recorder(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """The real selector, with each timeout it was given recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float | None] = []

    def select(self, timeout: float | None = None) -> list:
        self.timeouts.append(timeout)
        return super().select(timeout)


def _swap_selector(r: Reactor) -> _Recorder:
    rec = _Recorder()
    for key in list(r.selector.get_map().values()):
        rec.register(key.fileobj, key.events, key.data)
    r.selector.close()
    r.selector = rec
    return rec


def test_a_deadline_under_epolls_millisecond_wakes_the_loop_by_the_timerfd() -> None:
    """epoll rounds its timeout up to a whole millisecond: the wait asks it for none and arms the timerfd."""
    r = Reactor()
    rec = _swap_selector(r)
    ready = r.wait(0.0003)
    assert rec.timeouts == [None]  # never a rounded-up millisecond past the deadline
    # What woke it is the deadline, and the loop's callback takes the expiry off the fd.
    assert [k.data for k, _ in ready] == [r._deadline.expired]
    for key, _ in ready:
        key.data(now_us())
    assert not r._deadline.armed and rec.select(0) == []
    r.close()


def test_input_wakes_the_loop_before_its_deadline() -> None:
    r = Reactor()
    a, b = socket.socketpair()
    r.watch(a, lambda _now: None)
    b.send(b"x")
    ready = r.wait(30.0)
    assert [k.fileobj for k, _ in ready] == [a]
    assert r._deadline.armed  # still set for the deadline; the next wait re-arms it
    r.wait(0)  # due now: epoll is only polled, and the deadline disarmed
    assert not r._deadline.armed
    a.close()
    b.close()
    r.close()


def test_the_wait_for_input_without_a_deadline_blocks_until_input() -> None:
    r = Reactor()
    a, b = socket.socketpair()
    r.selector.register(a, selectors.EVENT_READ, "a")
    b.send(b"x")
    assert [k.data for k, _ in r.wait(None)] == ["a"]
    a.close()
    b.close()


def test_session_timers_reach_the_owner_with_their_deadline() -> None:
    r = Reactor()
    fired: list[tuple[int, int]] = []
    r.fire_timer = lambda key, deadline, _now: fired.append((key, deadline))
    r.schedule(7, 50)
    r.schedule(8, 40)
    r.run_timers(45)
    assert fired == [(8, 40)]
    r.run_timers(60)
    # The owner decides what is stale (the deadline says which arming this was).
    assert fired == [(8, 40), (7, 50)]


def test_watch_then_change_interest_then_unwatch() -> None:
    r = Reactor()
    a, b = socket.socketpair()
    seen: list[str] = []
    try:
        r.watch(a, lambda _now: seen.append("read"))
        b.send(b"x")
        for key, _ in r.selector.select(1.0):
            key.data(now_us())
        assert seen == ["read"]
        a.recv(1)
        # Write interest on the same socket replaces the callback (the dataplane's flush).
        r.watch(a, lambda _now: seen.append("write"), read=False, write=True)
        for key, _ in r.selector.select(1.0):
            key.data(now_us())
        assert seen == ["read", "write"]
        r.unwatch(a)
        r.unwatch(a)  # twice is harmless
        with pytest.raises(KeyError):
            r.selector.get_key(a)
    finally:
        a.close()
        b.close()


@contextlib.contextmanager
def _signals_installed(r: Reactor) -> Iterator[None]:
    """The reactor's signal handling for the body; the test process's own put back after."""
    previous = {s: signal.getsignal(s) for s in CAUGHT_SIGNALS}
    old_fd = signal.set_wakeup_fd(-1)
    try:
        r.install_signals()
        yield
    finally:
        signal.set_wakeup_fd(old_fd)
        for s, h in previous.items():
            signal.signal(s, h)


def test_a_signal_runs_its_handler_from_the_loop_not_the_handler() -> None:
    r = Reactor()
    got: list[str] = []
    with _signals_installed(r):
        r.on_signal(signal.SIGUSR1, lambda: got.append("usr1"))
        r.on_signal(signal.SIGHUP, lambda: (got.append("hup"), setattr(r, "stop_requested", True)))
        os.kill(os.getpid(), signal.SIGUSR1)
        assert got == []  # recorded only
        os.kill(os.getpid(), signal.SIGHUP)
        r.call_at(now_us() + 5_000_000, lambda _now: got.append("deadline"))  # the loop's bound
        t0 = time.monotonic()
        r.loop()
        assert got == ["usr1", "hup"]
        assert time.monotonic() - t0 < 5


def test_background_steps_are_paced_and_the_next_job_follows() -> None:
    r = Reactor()
    steps: list[int] = []
    jobs = [iter([None, None]), iter([None])]

    def job():
        yield from jobs.pop(0)
        steps.append(len(jobs))

    queued = [job, job]
    r.next_background = lambda: queued.pop(0)() if queued else None
    r.start_background()
    for _ in range(10):  # bounded: two jobs of three and two steps
        if r.background is None:
            break
        r.step_background()
    assert steps == [1, 0]
    assert r.background is None


class _Clock:
    """The reactor's clock, moved only by the background steps below."""

    def __init__(self) -> None:
        self.t = 1_000_000

    def __call__(self) -> int:
        return self.t


def _timed_job(clock: _Clock, steps: int, step_us: int, done: list[int]):
    def job():
        for i in range(steps):
            clock.t += step_us
            done.append(i)
            if i < steps - 1:
                yield

    return job


def _reactor_with_a_job(monkeypatch, turn_us: int) -> tuple[Reactor, _Clock, list[int]]:
    """A reactor on a clock only its one job moves: 10 steps of 300 µs each."""
    clock = _Clock()
    monkeypatch.setattr("xdp_bfd.core.reactor.now_us", clock)
    r = Reactor()
    done: list[int] = []
    queued = [_timed_job(clock, 10, 300, done)]
    r.next_background = lambda: queued.pop(0)() if queued else None
    r.turn_us = turn_us
    return r, clock, done


def test_a_turn_of_background_runs_steps_until_its_budget_is_used(monkeypatch) -> None:
    r, _clock, done = _reactor_with_a_job(monkeypatch, 1000)
    r.start_background()
    r.run_background()
    assert done == [0, 1, 2, 3]  # 1200 µs: the step that crossed 1000 is the last of the turn
    r.run_background()
    assert done == list(range(8))
    r.run_background()
    assert done == list(range(10)) and r.background is None
    bg = r.lag.background.doc()
    assert bg["steps"] == 10 and bg["step_max_us"] == 300 and bg["jobs"] == 1
    job = bg["last_job"]
    assert (job["steps"], job["step_max_us"], job["busy_us"], job["wall_us"]) == (10, 300, 3000, 3000)
    # The fake clock moved, the thread's CPU time hardly did: a step kept from running shows so.
    assert 0 <= job["step_cpu_max_us"] < 300 and 0 <= job["cpu_us"] < 3000


def test_a_step_that_ends_the_turn_is_its_last(monkeypatch) -> None:
    """end_turn() from a step: the turn stops after it though budget is left; the next turn goes on."""
    clock = _Clock()
    monkeypatch.setattr("xdp_bfd.core.reactor.now_us", clock)
    r = Reactor()
    done: list[int] = []

    def job():
        for i in range(6):
            clock.t += 100
            done.append(i)
            if i == 1:
                r.end_turn()
            yield

    queued = [job]
    r.next_background = lambda: queued.pop(0)() if queued else None
    r.turn_us = 10_000  # room for every step in one turn
    r.start_background()
    r.run_background()
    assert done == [0, 1]
    r.run_background()
    assert done == list(range(6))  # ended once: the flag does not outlive its turn
    r.close()


def test_a_timer_falling_due_ends_the_turn_early(monkeypatch) -> None:
    r, clock, done = _reactor_with_a_job(monkeypatch, 10_000)
    r.call_at(clock.t + 500, lambda _now: None)
    r.start_background()
    r.run_background()
    assert done == [0, 1]  # due at +500: after the second step (+600) the loop runs it
    assert not gc.isenabled()  # the job is not over
    r.close()
    assert gc.isenabled()


def test_under_a_reservation_background_gets_a_turn_a_period_of_the_runtime_it_can_stretch() -> None:
    r = Reactor()
    r.pace_background(1000, 10_000, reclaiming=True)
    assert (r.turn_us, r.pace_us) == (1000, 10_000)
    r.pace_background(1000, 10_000, reclaiming=False)
    assert (r.turn_us, r.pace_us) == (500, 10_000)


def test_the_collector_is_held_off_while_background_jobs_run() -> None:
    r = Reactor()
    seen: list[bool] = []

    def job():
        seen.append(gc.isenabled())
        yield
        seen.append(gc.isenabled())

    queued = [job, job]
    r.next_background = lambda: queued.pop(0)() if queued else None
    assert gc.isenabled()
    r.start_background()
    for _ in range(10):  # bounded: two jobs of two steps
        if r.background is None:
            break
        r.step_background()
    assert seen == [False, False, False, False] and r.background is None
    assert gc.isenabled()


def test_a_signal_during_a_turn_runs_before_the_rest_of_the_turn() -> None:
    """Due timers and ready sockets after the one that saw the signal wait for its handler."""
    r = Reactor()
    got: list[str] = []
    pairs = [socket.socketpair() for _ in range(2)]

    def readable(name: str, sock: socket.socket):
        def on(_now: int) -> None:
            sock.recv(16)
            got.append(name)
            r.unwatch(sock)
            if len(got) == 1:
                os.kill(os.getpid(), signal.SIGUSR1)

        return on

    def timer(name: str):
        def fire(_now: int) -> None:
            got.append(name)
            if name == "t1":
                os.kill(os.getpid(), signal.SIGUSR2)

        return fire

    try:
        with _signals_installed(r):
            r.on_signal(signal.SIGUSR1, lambda: got.append("usr1"))
            r.on_signal(signal.SIGUSR2, lambda: got.append("usr2"))
            for i, (a, b) in enumerate(pairs):
                r.watch(a, readable(f"fd{i}", a))
                b.send(b"x")
            soon = now_us() + 20_000
            for name in ("t1", "t2", "t3"):
                r.call_at(soon, timer(name))
            r.call_at(soon + 30_000, lambda _now: setattr(r, "stop_requested", True))
            t0 = time.monotonic()
            r.loop()
            assert time.monotonic() - t0 < 5
    finally:
        for a, b in pairs:
            a.close()
            b.close()
    first_fd = got[0]
    other_fd = "fd1" if first_fd == "fd0" else "fd0"
    # The second socket was ready in the same turn; the signal's handler ran between them.
    assert got == [first_fd, "usr1", other_fd, "t1", "usr2", "t2", "t3"], got
