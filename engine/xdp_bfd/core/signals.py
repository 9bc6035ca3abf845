"""The signals the engine catches, and holding them off while the kernel verifies its programs."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

# Signals whose default action would kill the engine: each is caught, and only
# recorded by the handler (the loop acts, so no handler races a half-done update).
CAUGHT_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGWINCH,
)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Keep the caught signals pending for the duration, then let them in.

    The verifier gives a program up with EAGAIN whenever a signal is pending for
    the loading thread (it checks as it walks the program), and libbpf retries a
    load a few times only: a burst of stats requests (SIGUSR1) during the
    compile failed the start ("cannot load the XDP program: ... Resource
    temporarily unavailable"). A blocked signal is not pending for the thread;
    it arrives when the mask is restored, and the loop acts on it as on any
    other, a stop request included.
    """
    before = signal.pthread_sigmask(signal.SIG_BLOCK, CAUGHT_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


__all__ = ["CAUGHT_SIGNALS", "held"]
