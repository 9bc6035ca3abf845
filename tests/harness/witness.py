"""A witness of the environment for timing verdicts, and the judge that uses it.

This VM stalls everything at times (50-60 ms, kernel-answered replies
included). A timing verdict that fails must tell "we were late" from
"everything was late", so every timing window is measured twice: once on the
code under test, and once on a reference that does not involve it.

The reference is a kernel-paced frame stream between two namespaces of its
own: frames queued behind a ``tbf`` qdisc on one end of a private veth pair
leave one per :data:`PERIOD_MS` on the kernel's qdisc timer, and a capture on
the other end timestamps them in softirq (testbed.md). No userspace process
has to be scheduled for a frame to flow; a feeder thread only keeps a reserve
of minutes queued, so a starved test process does not starve the stream. When
the stream shows a gap, the kernel (or the hypervisor under it) was late, and
so was everything else on the machine in that moment. The qdisc's timer fires
on one CPU, so there is one stream per CPU, its feeder pinned there
(:class:`ReferenceStreams`): a stall of one CPU's softirq work delays only the
packets that CPU handles.

The peer's own transmit gaps are a second witness where the peer is not the
code under test (real FRR): a peer that went quiet explains a Down without us.

A kernel-paced stream does not see CPU contention: with both cores busy, an
ordinary process waits for its turn while softirqs and qdisc timers run on
time. For code under test that is itself an ordinary process (the engine in
software mode, bfdd), a window may also ask for the userspace witness
(:class:`UserspaceClock`): an ordinary process of its own that wakes every
:data:`PERIOD_MS` and records how late it woke. Windows that judge the fast
path's robustness to a starved userspace (stress, FIFO-99) must not ask for it.

A window's verdict is one of three:

- pass: the body's assertions held;
- product fault: an assertion failed and both witnesses were clean: the test
  fails and says so;
- inconclusive: an assertion failed while a witness stalled at least as long
  as the window's ``stall_ms``: :class:`Inconclusive` is raised, and the test is
  re-run (pytest-rerunfailures, only for this exception) at most twice. The
  third inconclusive window in a row fails the test as "environment too
  noisy", with every window's figures. It never passes.

No bound is loosened anywhere: the assertions inside a window are the test's
own; the witness only decides what a failure means.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from .netns import Namespace, Topology, entered
from .wait import wait_until

# Fine enough to see a stall of a few ms (a detection bound's slack), cheap
# enough to leave running: 500 frames/s, idle gaps 1.98-2.06 ms here.
PERIOD_MS = 2.0
# 66 bytes on the wire (what tbf counts) at 264 kbit/s leave one per 2 ms.
FRAME_LEN = 66
RATE_BIT = int(FRAME_LEN * 8 * 1000 / PERIOD_MS)
ETHERTYPE = 0x88B5  # IEEE local experimental: nothing else in these namespaces speaks it
# Queued ahead of the kernel clock: longer than any stress a test runs, so a
# fully starved test process (and its feeder thread) does not starve the stream.
RESERVE_S = 75.0
TOP_UP_S = 1.0
ATTEMPTS = 3  # windows per test: the first one and two re-runs
SO_SNDBUFFORCE = 32


class Inconclusive(Exception):
    """A timing window failed while the environment itself stalled: re-run it."""


@dataclass(frozen=True)
class Figures:
    """What a witness saw in one window."""

    seconds: float
    frames: int
    expected: int
    period_ms: float
    max_gap_ms: float
    max_gap_at_s: float  # offset of the largest gap's end into the window
    late_gaps: int  # gaps of more than twice the period
    cpu: int | None = None  # the CPU whose softirqs paced the stream, when it was pinned
    # Each late gap: (its end, seconds into the window; how much longer than the period, ms).
    lates: tuple[tuple[float, float], ...] = field(default=(), repr=False)

    @property
    def stall_ms(self) -> float:
        """How much later than its period the stream's worst frame came."""
        return max(0.0, self.max_gap_ms - self.period_ms)

    def stall_within(self, horizon_ms: float) -> float:
        """The most lateness the stream gathered within any ``horizon_ms``: the summed excess of
        the late gaps that end that close together, at least :attr:`stall_ms`.

        Stalls that come in a burst cost a process as one: it runs between
        them only if it is first to run, and a packet due during the second
        is late by both (docs/testing.md, "Stalls in a burst").
        """
        worst, total, first = self.stall_ms, 0.0, 0
        for end, excess in self.lates:
            total += excess
            while end - self.lates[first][0] > horizon_ms / 1e3:
                total -= self.lates[first][1]
                first += 1
            worst = max(worst, total)
        return worst

    def __str__(self) -> str:
        return (
            f"stall {self.stall_ms:.1f} ms (largest gap {self.max_gap_ms:.1f} ms "
            f"at +{self.max_gap_at_s:.2f} s, period {self.period_ms:g}), "
            f"{self.frames}/{self.expected} frames in {self.seconds:.1f} s, "
            f"{self.late_gaps} gaps over {2 * self.period_ms:g} ms"
            + (f" (CPU {self.cpu})" if self.cpu is not None else "")
        )


def gap_figures(stamps: list[float], t0: float, t1: float, period_ms: float = PERIOD_MS) -> Figures:
    """Largest silence between ``t0`` and ``t1`` (seconds) given the arrival stamps.

    The window's edges count as arrivals: a stream that went quiet before the
    window ended shows that silence, so a witness that stopped is never clean.
    """
    inside = [t for t in stamps if t0 <= t <= t1]
    edges = [t0, *inside, t1]
    gaps = [(b - a) * 1e3 for a, b in itertools.pairwise(edges)]
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    lates = tuple((edges[i + 1] - t0, g - period_ms) for i, g in enumerate(gaps) if g > 2 * period_ms)
    return Figures(
        seconds=t1 - t0,
        frames=len(inside),
        expected=int((t1 - t0) * 1e3 / period_ms),
        period_ms=period_ms,
        max_gap_ms=gaps[worst],
        max_gap_at_s=edges[worst + 1] - t0,
        late_gaps=len(lates),
        lates=lates,
    )


class _PcapTail:
    """Reads the timestamps a running tcpdump -U has written so far, incrementally."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.scale, self.stamps = path, 0, 0.0, []

    def poll(self) -> list[float]:
        if not self.path.exists():
            return self.stamps
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        off = 0
        if self.offset == 0:
            if len(data) < 24:
                return self.stamps
            magic = struct.unpack_from("<I", data)[0]
            self.scale = {0xA1B2C3D4: 1e-6, 0xA1B23C4D: 1e-9}[magic]
            off = 24
        while off + 16 <= len(data):
            sec, frac, incl, _orig = struct.unpack_from("<IIII", data, off)
            if off + 16 + incl > len(data):
                break  # a record tcpdump is still writing
            self.stamps.append(sec + frac * self.scale)
            off += 16 + incl
        self.offset += off
        return self.stamps


# The userspace witness: its own process, so that the test process's GIL and
# the tests' own work are not what it measures. It records only late
# wake-ups (wall clock at the wake, lateness in ms), and exits with its parent.
_CLOCK = """
import os, sys, time
parent, period = os.getppid(), float(sys.argv[2]) / 1e3
out = open(sys.argv[1], "w", buffering=1)
due = time.monotonic() + period
while os.getppid() == parent:
    time.sleep(max(0.0, due - time.monotonic()))
    now = time.monotonic()
    if now - due > 0.001:
        out.write(f"{time.time():.6f} {(now - due) * 1e3:.3f}\\n")
    due = now + period
"""


# The deadline witness's reservation: the packaged unit's (--sched-deadline 1000/10000, µs).
DEADLINE_RESERVATION_US = (1000, 10000)


class UserspaceClock:
    """A process waking every PERIOD_MS: how late the scheduler let it run.

    An ordinary process by default. With ``deadline`` (runtime, period in µs)
    it runs under that SCHED_DEADLINE reservation (``chrt --deadline``), as
    the engine does where a window judges what the reservation claims: that
    FIFO hogs do not delay it. Late with it, every deadline task was late.
    """

    def __init__(self, path: Path, deadline: tuple[int, int] | None = None) -> None:
        self.path, self.deadline = path, deadline
        self.proc: subprocess.Popen | None = None

    @property
    def what(self) -> str:
        return "the deadline witness" if self.deadline else "the userspace witness"

    def start(self) -> UserspaceClock:
        self.path.touch()
        argv = [sys.executable, "-c", _CLOCK, str(self.path), str(PERIOD_MS)]
        if self.deadline is not None:
            runtime, period = (str(us * 1000) for us in self.deadline)
            argv = ["chrt", "--deadline", "--sched-runtime", runtime, "--sched-deadline", period,
                    "--sched-period", period, "0", *argv]  # fmt: skip
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        return self

    def lateness_ms(self, t0: float, t1: float) -> float:
        """The longest a wake-up due between ``t0`` and ``t1`` waited past its time."""
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"{self.what} died (rc {self.proc and self.proc.returncode})")
        worst = 0.0
        for line in self.path.read_text().splitlines():
            woke, _, late = line.partition(" ")
            with contextlib.suppress(ValueError):
                end, ms = float(woke), float(late)
                if end > t0 and end - ms / 1e3 < t1:
                    worst = max(worst, ms)
        return worst

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=5)


class ReferenceStream:
    """The kernel-paced reference: one per test session (per CPU), shared by every window.

    ``cpu``: the feeder runs pinned there, so the qdisc's watchdog timer (a
    pinned softirq hrtimer, armed where the queue was last run) fires on that
    CPU and the stream witnesses that CPU's softirq punctuality. Unpinned, it
    witnesses whichever CPU the timer happened to land on.
    """

    def __init__(self, workdir: Path, *, cpu: int | None = None, userspace: bool = True) -> None:
        self.workdir = workdir
        self.cpu = cpu
        self.topo = Topology()
        self.sent = 0
        self.started = 0.0
        self._stop = threading.Event()
        self._feeder: threading.Thread | None = None
        self._cap: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        suffix = "" if cpu is None else f"-cpu{cpu}"
        self._tail = _PcapTail(workdir / f"reference{suffix}.pcap")
        self._lock = threading.Lock()
        self.userspace = UserspaceClock(workdir / "userspace-lateness.txt") if userspace else None
        self.deadline: UserspaceClock | None = None  # ReferenceStreams keeps the session's

    def start(self) -> ReferenceStream:
        a, b = self.topo.namespace("wit-a"), self.topo.namespace("wit-b")
        with a.ipr() as ipr:
            ipr.link("add", ifname="wit0", kind="veth", peer={"ifname": "wit1", "net_ns_fd": b.name})
            ipr.link("set", index=ipr.link_lookup(ifname="wit0")[0], state="up")
        with b.ipr() as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="wit1")[0], state="up")
        # burst of one frame: after a stall the stream resumes at its period
        # instead of catching up, so a stall shows as one long gap. Nothing
        # may take these links down: a carrier loss purges the queued reserve.
        a.run(["tc", "qdisc", "replace", "dev", "wit0", "root", "tbf", "rate", f"{RATE_BIT}bit",
               "burst", str(FRAME_LEN + 34), "limit", "16000000"])  # fmt: skip
        self._capture(b)
        with entered(a.name):
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        # Minutes of frames sit in the qdisc charged to this socket.
        sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 256 << 20)
        sock.bind(("wit0", 0))
        self._sock = sock
        self.started = time.time()
        # The first frames are queued from the feeder, pinned: the queue's first
        # run arms the watchdog on the CPU it runs on.
        self._feeder = threading.Thread(target=self._feed, name="witness-feeder", daemon=True)
        self._feeder.start()
        wait_until(lambda: len(self._tail.poll()) >= 3, timeout=5, what="the reference stream's first frames")
        if self.userspace is not None:
            self.userspace.start()
        return self

    def _capture(self, b: Namespace) -> None:
        self._cap = b.popen(
            ["tcpdump", "-i", "wit1", "-n", "-U", "--immediate-mode", "-B", "16384",
             "--time-stamp-precision=nano", "-s", "64", "-w", str(self._tail.path),
             f"ether proto {ETHERTYPE:#x}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert self._cap.stderr is not None
        deadline, line = time.monotonic() + 10, ""
        while "listening on" not in line:
            if time.monotonic() > deadline or self._cap.poll() is not None:
                raise RuntimeError(f"the witness capture did not start: {line!r}")
            line = self._cap.stderr.readline()

    def _top_up(self) -> None:
        assert self._sock is not None
        want = int((time.time() - self.started + RESERVE_S) * 1e3 / PERIOD_MS)
        head = b"\xff" * 6 + b"\x02\x00\x00\x00\xbf\xd1" + struct.pack("!H", ETHERTYPE)
        with self._lock:
            while self.sent < want:
                self._sock.send(head + struct.pack("!Q", self.sent) + bytes(FRAME_LEN - 22))
                self.sent += 1

    def _feed(self) -> None:
        if self.cpu is not None:
            os.sched_setaffinity(0, {self.cpu})  # this thread only
        self._top_up()
        while not self._stop.wait(TOP_UP_S):
            self._top_up()

    def alive(self) -> bool:
        return self._cap is not None and self._cap.poll() is None

    def figures(self, t0: float, t1: float, *, horizon_ms: float = 0.0, settle_s: float = 15.0) -> Figures:
        """The stream between ``t0`` and ``t1`` (wall clock, as pcap stamps are). ``horizon_ms``
        is :meth:`ReferenceStreams.figures`'s; one stream has no other to be chosen over.

        Waits (bounded) for the capture to have written past ``t1``: after a
        stress the capture process drains its buffer late, and a frame not yet
        read must not look like a stall. What is still missing then counts as
        silence.
        """
        if not self.alive():
            raise RuntimeError("the witness capture died")
        with contextlib.suppress(AssertionError):
            wait_until(
                lambda: (s := self._tail.poll()) and s[-1] >= t1,
                timeout=settle_s,
                interval=0.05,
                what="the witness capture to pass the window's end",
            )
        return replace(gap_figures(self._tail.poll(), t0, t1), cpu=self.cpu)

    def close(self) -> None:
        if self.userspace is not None:
            self.userspace.close()
        self._stop.set()
        if self._feeder is not None:
            self._feeder.join(timeout=5)
        if self._cap is not None:
            with contextlib.suppress(ProcessLookupError):
                self._cap.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._cap.wait(timeout=5)
            if self._cap.poll() is None:
                self._cap.kill()
                self._cap.wait(timeout=5)
            if self._cap.stderr:
                self._cap.stderr.close()
        if self._sock is not None:
            self._sock.close()
        self.topo.close()


class ReferenceStreams:
    """One reference stream per CPU: a window's figures are the worst CPU's.

    A stall of one CPU's softirq work delays the packets that CPU handles and
    none of the other's; one stream saw only its own CPU (docs/testing.md).
    """

    def __init__(self, workdir: Path, cpus: Iterable[int]) -> None:
        cpus = sorted(cpus)
        self.streams = [ReferenceStream(workdir, cpu=c, userspace=i == 0) for i, c in enumerate(cpus)]
        clock = self.streams[0].userspace
        assert clock is not None
        self.userspace: UserspaceClock = clock
        self.deadline = UserspaceClock(workdir / "deadline-lateness.txt", deadline=DEADLINE_RESERVATION_US)

    def start(self) -> ReferenceStreams:
        for s in self.streams:
            s.start()
        self.deadline.start()
        return self

    def alive(self) -> bool:
        return all(s.alive() for s in self.streams)

    def figures(self, t0: float, t1: float, *, horizon_ms: float = 0.0) -> Figures:
        """The worst CPU's stream: the one that gathered the most lateness within ``horizon_ms``."""
        return max((s.figures(t0, t1) for s in self.streams), key=lambda f: f.stall_within(horizon_ms))

    def close(self) -> None:
        self.deadline.close()
        for s in self.streams:
            s.close()


@dataclass
class Record:
    """One judged window, for the session's summary."""

    test: str
    window: str
    attempt: int
    verdict: str  # pass | product fault | inconclusive | too noisy
    reference: Figures
    peer: Figures | None
    stall_ms: float
    userspace_ms: float | None = None  # the userspace witness's lateness, when the window asked
    horizon_ms: float = 0.0  # the window's: stalls this close together count as one
    deadline_ms: float | None = None  # the deadline witness's lateness, when the window asked

    def _burst(self, fig: Figures) -> str:
        within = fig.stall_within(self.horizon_ms)
        return f", {within:.1f} ms late within {self.horizon_ms:g} ms" if within > fig.stall_ms else ""

    def line(self) -> str:
        peer = f"; peer TX {self.peer}{self._burst(self.peer)}" if self.peer else ""
        user = f"; userspace witness late {self.userspace_ms:.1f} ms" if self.userspace_ms is not None else ""
        if self.deadline_ms is not None:
            user += f"; deadline witness late {self.deadline_ms:.1f} ms"
        return (
            f"{self.verdict:<13} {self.test} [{self.window}] attempt {self.attempt}/{ATTEMPTS}: "
            f"reference {self.reference}{self._burst(self.reference)}{peer}{user} "
            f"(inconclusive at a stall >= {self.stall_ms:g} ms)"
        )


@dataclass
class Registry:
    """Every window of the session, and each test's run of inconclusive windows."""

    records: list[Record] = field(default_factory=list)
    streak: dict[str, list[Record]] = field(default_factory=dict)

    def tally(self) -> dict[str, int]:
        out = {"pass": 0, "product fault": 0, "inconclusive": 0, "too noisy": 0}
        for r in self.records:
            out[r.verdict] += 1
        return out


class Window:
    """One timing window: the body runs inside it; see :meth:`Judge.window`."""

    def __init__(self, name: str, stall_ms: float) -> None:
        self.name, self.stall_ms = name, stall_ms
        self.t0 = self.t1 = 0.0
        self.focused: tuple[float, float] | None = None
        self._peers: list[tuple[list[float], float]] = []

    def focus(self, t0: float, t1: float) -> None:
        """Judge the witnesses only between ``t0`` and ``t1`` (wall clock, as capture stamps).

        For a verdict about one moment (a detection from the peer's last
        packet to our Down): a stall elsewhere in the window cannot explain it.
        """
        self.focused = (t0, t1)

    def peer(self, packets: Iterable[object], *, period_ms: float) -> None:
        """The peer's own transmissions in this window: the WirePackets of one flow.

        Only for a peer that is not the code under test (real FRR): its
        silence then explains a failure as well as a stalled machine does.
        Call once per flow, with the interval the peer sends at; the
        quietest flow is the one judged. Only silences that begin while the
        peer is Up count: once it has declared us Down it sends at its slow
        rate (1 s), and that is its answer to our lateness, not a stall.
        """
        run: list[float] = []
        for p in sorted(packets, key=lambda x: x.ts):  # type: ignore[attr-defined]
            run.append(p.ts)
            if getattr(p, "state", "up") != "up":
                self._add_run(run, period_ms)
                run = []
        self._add_run(run, period_ms)

    def _add_run(self, stamps: list[float], period_ms: float) -> None:
        if len(stamps) >= 2:
            self._peers.append((stamps, period_ms))

    def span(self) -> tuple[float, float]:
        return self.focused or (self.t0, self.t1)

    def peer_figures(self, horizon_ms: float = 0.0) -> Figures | None:
        # Between the flow's own first and last packets: a peer the test
        # stops on purpose is not a peer that went quiet.
        t0, t1 = self.span()
        figs = [
            gap_figures(s, max(t0, s[0]), min(t1, s[-1]), period)
            for s, period in self._peers
            if max(t0, s[0]) < min(t1, s[-1])
        ]
        return max(figs, key=lambda f: f.stall_within(horizon_ms), default=None)


class Judge:
    """Judges the timing windows of one test against the session's reference stream."""

    def __init__(
        self,
        stream: ReferenceStream | ReferenceStreams,
        registry: Registry,
        test: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.stream, self.registry, self.test, self.clock = stream, registry, test, clock

    @property
    def attempt(self) -> int:
        return len(self.registry.streak.get(self.test, [])) + 1

    @contextlib.contextmanager
    def window(
        self,
        name: str,
        *,
        stall_ms: float,
        userspace: bool = False,
        deadline: bool = False,
        horizon_ms: float | None = None,
        on_inconclusive: Callable[[], None] | None = None,
    ) -> Iterator[Window]:
        """Run the body as a timing window.

        ``stall_ms``: a stall this long (a witness's frame this much later
        than its period) could alone explain the failure: the bound the body
        asserts less what a punctual product already uses of it (for "our
        gaps stay under the 30 ms detection time" at 10 ms: 20 ms). An
        AssertionError from the body (wait_until's timeouts are
        AssertionErrors) is judged; other exceptions pass
        through unchanged, so a broken premise (``pytest.fail``) is never
        mistaken for lateness. ``userspace``: the code under test is an
        ordinary process that makes no claim about a busy machine, so the
        userspace witness being as late as ``stall_ms`` explains a failure too.
        ``deadline``: the code under test claims its SCHED_DEADLINE
        reservation carries it through a busy machine (FIFO hogs): the deadline
        witness, under the same reservation, being as late as ``stall_ms``
        explains a failure too; it is not delayed by what the claim covers.
        ``horizon_ms`` (default ``stall_ms``): a kernel-paced witness's late
        gaps that end within this long of each other add up to one stall
        (:meth:`Figures.stall_within`); a window whose bound is a span of
        several intervals (a detection time) gives that span.
        ``on_inconclusive``: called before :class:`Inconclusive` is raised, for
        a test whose later windows share state with this one (a module's
        live sessions) and must not be judged against what the stall left.
        """
        w = Window(name, stall_ms)
        w.t0 = self.clock()
        failure: AssertionError | None = None
        try:
            yield w
        except AssertionError as exc:
            failure = exc
        w.t1 = self.clock()
        horizon = stall_ms if horizon_ms is None else horizon_ms
        ref = self.stream.figures(*w.span(), horizon_ms=horizon)
        peer = w.peer_figures(horizon)
        clock = self.stream.userspace
        user = clock.lateness_ms(*w.span()) if userspace and clock is not None else None
        dl_clock = self.stream.deadline
        if deadline and dl_clock is None:
            raise RuntimeError(f"window {name!r} asks for the deadline witness and there is none")
        dl = dl_clock.lateness_ms(*w.span()) if deadline and dl_clock is not None else None
        stalled = (
            ref.stall_within(horizon) >= stall_ms
            or (peer is not None and peer.stall_within(horizon) >= stall_ms)
            or (user is not None and user >= stall_ms)
            or (dl is not None and dl >= stall_ms)
        )

        def record(verdict: str) -> Record:
            r = Record(self.test, name, self.attempt, verdict, ref, peer, stall_ms, user, horizon, dl)
            self.registry.records.append(r)
            print(f"\ntiming window: {r.line()}")
            return r

        if failure is None:
            record("pass")
            self.registry.streak.pop(self.test, None)
            return
        if not stalled:
            r = record("product fault")
            self.registry.streak.pop(self.test, None)
            raise AssertionError(
                f"PRODUCT FAULT in window '{name}': the witnesses were clean and we were late\n"
                f"  {r.line()}\n  {failure}"
            ) from failure
        if self.attempt >= ATTEMPTS:
            r = record("too noisy")
            earlier = self.registry.streak.pop(self.test, [])
            lines = "\n  ".join(x.line() for x in [*earlier, r])
            raise AssertionError(
                f"ENVIRONMENT TOO NOISY: {ATTEMPTS} inconclusive windows in a row for '{name}'; "
                f"nothing was judged\n  {lines}\n  last failure: {failure}"
            ) from failure
        r = record("inconclusive")
        self.registry.streak.setdefault(self.test, []).append(r)
        if on_inconclusive is not None:
            on_inconclusive()
        raise Inconclusive(
            f"INCONCLUSIVE window '{name}' (re-run follows): a witness stalled\n  {r.line()}\n  {failure}"
        ) from failure
