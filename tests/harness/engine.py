"""The engine under test as a real process (``xdp-bfd`` from the venv) in a namespace."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .netns import Namespace
from .wait import WaitTimeout, wait_until

XDP_BFD = str(Path(sys.executable).with_name("xdp-bfd"))
# How long an engine may take to say it serves (its compile), as the tests that wait for it bound it.
SERVING_S = 60.0


class EngineProcess:
    """``xdp-bfd ARGS`` inside ``ns``; stderr goes to a log file the test can read."""

    def __init__(
        self, ns: Namespace, args: list[str], workdir: Path, prefix: list[str] | None = None
    ) -> None:
        self.ns, self.args, self.workdir = ns, args, workdir
        self.prefix = prefix or []  # e.g. setpriv to run it unprivileged
        given = args.index("--stats-dump") + 1 if "--stats-dump" in args else None
        self.stats_path = Path(args[given]) if given else workdir / f"stats-{ns.name}.json"
        self.log_path = workdir / f"engine-{ns.name}-{time.monotonic_ns()}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> EngineProcess:
        full = [*self.prefix, XDP_BFD, *self.args]
        if "--stats-dump" not in self.args:
            full += ["--stats-dump", str(self.stats_path)]
        self._log = self.log_path.open("w")
        self.proc = self.ns.popen(full, stdout=self._log, stderr=subprocess.STDOUT)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_log(self, text: str, *, timeout: float = 30.0) -> str:
        def probe() -> str | None:
            if self.proc is not None and self.proc.poll() is not None and text not in self.log():
                raise AssertionError(
                    f"engine exited ({self.proc.returncode}) before logging {text!r}:\n{self.log()}"
                )
            return next((line for line in self.log().splitlines() if text in line), None)

        return wait_until(probe, timeout=timeout, what=f"engine log line {text!r}")

    def stats_identity(self) -> tuple[int, int] | None:
        """Which stats file is there: every dump renames a new inode into place, and two
        dumps within one tick of the filesystem's coarse clock carry the same mtime."""
        with contextlib.suppress(FileNotFoundError):
            st = self.stats_path.stat()
            return st.st_ino, st.st_mtime_ns
        return None

    def stats(self, *, timeout: float = 5.0) -> dict:
        """Signal SIGUSR1 and return the file written after the signal."""
        # SIGUSR1's default action kills: wait until the engine says it serves. The first time that
        # is bcc's compile, which a busy machine stretched past the old 15 s (beside a starting bfdd,
        # in a full CI run); an engine that exits fails at once.
        self.wait_log("bfd: serving", timeout=max(timeout + 10, SERVING_S))

        before = self.stats_identity()
        sent = time.time()
        self.signal(signal.SIGUSR1)

        def fresh() -> dict | None:
            now = self.stats_identity()
            if now is None or now == before:
                return None
            doc = json.loads(self.stats_path.read_text())
            return doc if doc["generated_at"] >= sent - 0.01 else None

        try:
            return wait_until(fresh, timeout=timeout, what="a fresh stats dump")
        except WaitTimeout as e:
            tail = "\n".join(self.log().splitlines()[-15:])
            raise WaitTimeout(f"{e}; the engine's last log lines:\n{tail}") from None

    def session(self, peer: str, *, timeout: float = 5.0) -> dict:
        for s in self.stats(timeout=timeout)["sessions"]:
            if s["peer"] == peer:
                return s
        raise LookupError(f"no session with peer {peer}")

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def wait_exit(self, *, timeout: float = 10.0) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self._log.close()

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.signal(signal.SIGTERM)
        try:
            return self.wait_exit(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.wait_exit(timeout=10)

    def cleanup(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
