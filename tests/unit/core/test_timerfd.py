"""The timerfd the loop's deadlines wake it by: readable once per arming, never when disarmed."""

from __future__ import annotations

import select

from xdp_bfd.core.timerfd import TimerFd


def _readable(t: TimerFd, within_s: float) -> bool:
    r, _, _ = select.select([t], [], [], within_s)
    return bool(r)


def test_an_armed_timer_becomes_readable_and_its_expiry_is_taken_off() -> None:
    t = TimerFd()
    assert not _readable(t, 0)
    t.arm(200_000)  # 0.2 ms
    assert t.armed and _readable(t, 5.0)
    t.expired()
    assert not t.armed and not _readable(t, 0)
    t.expired()  # a second read finds nothing and says nothing
    t.close()
    assert t.fd == -1


def test_a_disarmed_timer_never_fires() -> None:
    t = TimerFd()
    t.arm(20_000_000)  # 20 ms
    t.arm(0)
    # The witness that it would have fired: an armed twin of the same length does, within the bound.
    twin = TimerFd()
    twin.arm(20_000_000)
    assert _readable(twin, 5.0)
    assert not t.armed and not _readable(t, 0)
    t.close()
    twin.close()
