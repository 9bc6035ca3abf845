"""Fixtures shared by every test layer.

Integration tests (everything under tests/integration) need root, real FRR and
the kernel's XDP; they create their own namespaces through the ``topo``
fixture and are marked ``integration`` automatically.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import netns
from harness.capture import Capture
from harness.engine import EngineProcess
from harness.frr import Frr
from harness.netns import Namespace, Topology
from harness.witness import Inconclusive, Judge, ReferenceStreams, Registry

# Every timing window of the session, judged against the reference stream.
WINDOWS = Registry()


def _inconclusive(error: BaseException | None) -> bool:
    return isinstance(error, Inconclusive)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.path):
            item.add_marker(pytest.mark.integration)
        # A test that judges timing windows is re-run only when a window was
        # inconclusive (the witness stalled), never for any other failure.
        if item.get_closest_marker("timing") is not None and "timing" not in item.fixturenames:
            item.fixturenames.append("timing")  # type: ignore[attr-defined]
        if "timing" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.flaky(reruns=2, condition=_inconclusive))


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> object:
    """``@pytest.mark.timing(stall_ms=…)``: the whole test body is one timing window."""
    mark = pyfuncitem.get_closest_marker("timing")
    if mark is None:
        return (yield)
    judge: Judge = pyfuncitem.funcargs["timing"]  # type: ignore[assignment]
    kw = {k: mark.kwargs[k] for k in ("userspace", "deadline", "horizon_ms") if k in mark.kwargs}
    with judge.window(mark.kwargs.get("name", pyfuncitem.name), stall_ms=mark.kwargs["stall_ms"], **kw):
        return (yield)


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.geteuid() == 0:
        stale = netns.sweep_stale()
        if stale:
            print(f"removed namespaces left by earlier runs: {' '.join(stale)}")


def _leftovers() -> list[str]:
    found = [f"namespace {n}" for n in netns.ours() if n.startswith(f"{netns.PREFIX}{os.getpid()}-")]
    out = subprocess.run(
        # Only this run's: another run on the machine may be mid-test.
        ["pgrep", "-a", "-f", f"/run/xdp-bfd-tests/{netns.PREFIX}{os.getpid()}-"],
        capture_output=True,
        text=True,
        check=False,
    )
    found += [f"process {line}" for line in out.stdout.splitlines()]
    return found


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not WINDOWS.records:
        return
    tally = ", ".join(f"{n} {verdict}" for verdict, n in WINDOWS.tally().items())
    terminalreporter.section("timing windows")
    for r in WINDOWS.records:
        terminalreporter.line(r.line())
    terminalreporter.line(f"timing windows: {tally}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # A test run must leave nothing behind; make a leak fail the run loudly.
    if os.geteuid() != 0:
        return
    left = _leftovers()
    if left:
        print("\nLEFT BEHIND by this test run:\n  " + "\n  ".join(left))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def reference_stream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceStreams]:
    """The kernel-paced reference stream every timing window is judged against (witness.py)."""
    if os.geteuid() != 0:
        pytest.fail("the reference stream needs root (network namespaces)")
    # One stream per CPU this process may run on (witness.py, ReferenceStreams).
    stream = ReferenceStreams(tmp_path_factory.mktemp("witness"), os.sched_getaffinity(0))
    try:
        yield stream.start()
    finally:
        stream.close()


@pytest.fixture
def timing(request: pytest.FixtureRequest, reference_stream: ReferenceStreams) -> Judge:
    """Judge this test's timing windows: ``with timing.window(name, stall_ms=…):``."""
    return Judge(reference_stream, WINDOWS, request.node.nodeid)


@pytest.fixture
def topo() -> Iterator[Topology]:
    if os.geteuid() != 0:
        pytest.fail("integration tests need root (network namespaces, XDP, FRR)")
    t = Topology()
    try:
        yield t
    finally:
        t.close()


@pytest.fixture
def frr_factory() -> Iterator:
    made: list[Frr] = []

    def make(ns: Namespace, name: str, **kw: object) -> Frr:
        f = Frr(ns, name, **kw)  # type: ignore[arg-type]
        made.append(f)
        return f

    try:
        yield make
    finally:
        for f in made:
            f.cleanup()


@pytest.fixture
def capture_factory(tmp_path: Path) -> Iterator:
    made: list[Capture] = []

    def make(ns: Namespace, ifname: str, bpf_filter: str | None = None) -> Capture:
        c = Capture(ns, ifname, tmp_path / f"{ns.name}-{ifname}-{len(made)}.pcap", bpf_filter).start()
        made.append(c)
        return c

    try:
        yield make
    finally:
        for c in made:
            c.stop()


@pytest.fixture
def engine_factory(tmp_path: Path) -> Iterator:
    """Start ``xdp-bfd`` in a namespace: ``engine_factory(ns, [args...])``; always stopped."""
    made: list[EngineProcess] = []

    def make(ns: Namespace, args: list[str], prefix: list[str] | None = None) -> EngineProcess:
        e = EngineProcess(ns, args, tmp_path, prefix).start()
        made.append(e)
        return e

    try:
        yield make
    finally:
        for e in made:
            e.cleanup()


@pytest.fixture
def pin_dir(tmp_path: Path) -> Iterator[Path]:
    """A bpffs of the test's own for ``--pin``, unmounted afterwards (root-only, as the role mounts it)."""
    d = tmp_path / "pin"
    d.mkdir()
    subprocess.run(["mount", "-t", "bpf", "-o", "mode=0700", "bpf", str(d)], check=True)
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)
