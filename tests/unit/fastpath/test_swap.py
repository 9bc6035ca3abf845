"""A takeover's sweep start and XDP swap, run in a thread beside the restore (fastpath.program.Swap).

The kernel calls are the Program's; here a stand-in records what the thread
did and where, so the ordering, the thread's signal mask and the error's way
back to the loop's thread are seen without a compile. The real swap runs in
every --pin takeover of the integration tests (test_engine_pin.py).
"""

from __future__ import annotations

import signal
import threading

import pytest

from xdp_bfd.core.signals import CAUGHT_SIGNALS
from xdp_bfd.fastpath.errors import KernelError
from xdp_bfd.fastpath.program import Attachment, Program, Swap


class StandIn:
    """What Swap uses of a Program: start_sweep, attach, and the swap it registers itself as."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.threads: set[str] = set()
        self.blocked: set[int] = set()
        self.fail_on = fail_on
        self.swap: Swap | None = None
        self.attached: list[Attachment] = []

    def _note(self, *call: str) -> None:
        self.calls.append(call)
        self.threads.add(threading.current_thread().name)
        self.blocked |= set(signal.pthread_sigmask(signal.SIG_BLOCK, []))

    def start_sweep(self) -> None:
        self._note("sweep")

    def attach(self, ifname: str, mode: str, *, replace: bool = False) -> Attachment:
        self._note("attach", ifname, mode, str(replace))
        if ifname == self.fail_on:
            raise KernelError(f"cannot attach XDP to {ifname} in generic mode: refused")
        att = Attachment(ifname, 1, "generic", 2)
        self.attached.append(att)
        return att


def test_the_sweep_then_each_interface_in_a_thread_with_the_caught_signals_blocked() -> None:
    prog = StandIn()
    mask_before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    swap = Swap(prog, ["lo"], "auto")  # type: ignore[arg-type]
    assert prog.swap is swap and swap.ifindexes == {"lo": 1}
    assert prog.calls == []  # nothing before start()
    swap.start()
    swap.wait()
    assert prog.calls == [("sweep",), ("attach", "lo", "auto", "True")]
    assert prog.threads == {"xdp-swap"}
    assert set(CAUGHT_SIGNALS) <= prog.blocked  # no signal interrupts the thread's netlink calls
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == mask_before  # the loop's thread unchanged


def test_an_interface_that_is_gone_fails_before_the_thread_starts() -> None:
    prog = StandIn()
    with pytest.raises(KernelError, match="no interface xbt-absent0"):
        Swap(prog, ["lo", "xbt-absent0"], "auto")  # type: ignore[arg-type]
    assert prog.calls == [] and prog.swap is None


def test_an_attach_error_reaches_the_loops_thread_at_wait() -> None:
    prog = StandIn(fail_on="lo")
    swap = Swap(prog, ["lo"], "generic")  # type: ignore[arg-type]
    swap.start()
    with pytest.raises(KernelError, match="cannot attach XDP to lo"):
        swap.wait()
    swap.wait(raise_error=False)  # the close path: waits, says nothing
    assert prog.calls == [("sweep",), ("attach", "lo", "generic", "True")]


def test_waiting_on_a_swap_never_started_returns() -> None:
    prog = StandIn()
    swap = Swap(prog, ["lo"], "auto")  # type: ignore[arg-type]
    swap.wait()  # a start that failed before swap.start(): the close path must not hang
    assert prog.calls == []


def test_the_offload_knows_the_interfaces_while_the_swap_is_under_way() -> None:
    prog = StandIn()
    Swap(prog, ["lo"], "auto")  # type: ignore[arg-type]
    assert Program.interfaces(prog) == {"lo": 1}  # type: ignore[arg-type]
    prog.attached.append(Attachment("veth-x", 7, "native", 4))
    assert Program.interfaces(prog) == {"lo": 1, "veth-x": 7}  # type: ignore[arg-type]
