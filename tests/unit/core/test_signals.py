"""The caught signals are held pending while the programs load, and arrive afterwards."""

from __future__ import annotations

import os
import signal
import time

from xdp_bfd.core.signals import CAUGHT_SIGNALS, held


def test_a_signal_during_the_hold_is_pending_then_delivered_once_it_ends():
    got: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda sig, _frame: got.append(sig))
    try:
        with held():
            os.kill(os.getpid(), signal.SIGUSR1)
            os.kill(os.getpid(), signal.SIGUSR1)
            # Not delivered: pending for the thread, which is what the verifier must not see.
            assert got == []
            assert signal.SIGUSR1 in signal.sigpending()
        # Delivered once the mask is back, the two as one. Python runs the handler at its next check
        # of pending signals, which need not come before the next line: a sleep is one.
        for _ in range(1000):
            if got:
                break
            time.sleep(0.001)
        assert got == [signal.SIGUSR1]
        assert signal.SIGUSR1 not in signal.sigpending()
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_the_mask_is_what_it_was_after_the_hold_even_when_the_load_fails():
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    try:
        with held():
            assert set(CAUGHT_SIGNALS) <= signal.pthread_sigmask(signal.SIG_BLOCK, [])
            raise RuntimeError("the load failed")
    except RuntimeError:
        pass
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before
