"""Real FRR (zebra + bfdd) inside a test namespace, with private paths.

Each instance gets its own directory for config, pid files, vty sockets and
logs, owned by user ``frr`` as the daemons require. Nothing touches the host's
/etc/frr or frr.service. ``root`` runs the daemons from another root file
system (a debootstrapped trixie for FRR 10.x) through chroot; the directory
then lives inside that root.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .netns import Namespace
from .wait import wait_until

FRR_LIB = "/usr/lib/frr"


def frr_version(root: str = "/") -> tuple[int, ...]:
    """Version of the bfdd installed under ``root``, e.g. (8, 4, 4)."""
    argv = [f"{FRR_LIB}/bfdd", "--version"]
    if root != "/":
        argv = ["chroot", root, *argv]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    m = re.search(r"version\s+(\d+(?:\.\d+)+)", out)
    if not m:
        raise RuntimeError(f"cannot read the FRR version from: {out!r}")
    return tuple(int(x) for x in m.group(1).split("."))


@dataclass
class Frr:
    """zebra + bfdd in ``ns``. Use :meth:`start`, then vtysh/peers, then :meth:`stop`."""

    ns: Namespace
    name: str
    root: str = "/"
    bfdd_args: list[str] = field(default_factory=list)
    # Run bfdd in the foreground under this prefix, e.g. ``chrt -d …`` to keep a
    # peer out of a CPU fight: a daemonising fork would drop the policy.
    bfdd_prefix: list[str] = field(default_factory=list)
    dir: Path = field(init=False)
    uid: int = field(init=False)

    def __post_init__(self) -> None:
        base = Path(self.root) / "run" / "xdp-bfd-tests"
        base.mkdir(parents=True, exist_ok=True)
        base.chmod(0o755)
        self.dir = Path(tempfile.mkdtemp(prefix=f"{self.ns.name}-{self.name}-", dir=base))
        self.dir.chmod(0o755)
        frr = pwd.getpwnam("frr") if self.root == "/" else None
        uid, gid = (frr.pw_uid, frr.pw_gid) if frr else _chroot_ids(self.root)
        os.chown(self.dir, uid, gid)
        self.uid = uid  # what its daemons run as (a trixie root's frr is not the host's)
        self.version = frr_version(self.root)

    # Paths as the daemon sees them (inside the chroot when there is one).
    def _p(self, leaf: str) -> str:
        path = self.dir / leaf
        return "/" + str(path.relative_to(self.root)) if self.root != "/" else str(path)

    def _argv(self, daemon: str, extra: list[str]) -> list[str]:
        argv = [
            f"{FRR_LIB}/{daemon}", "-d", "-u", "frr", "-g", "frr",
            "--vty_socket", self._p(""), "-z", self._p("zserv.api"),
            "-f", self._p(f"{daemon}.conf"), "-i", self._p(f"{daemon}.pid"),
            "--log", f"file:{self._p(daemon + '.log')}",
            *extra,
        ]  # fmt: skip
        return ["chroot", self.root, *argv] if self.root != "/" else argv

    def start(self, bfdd_conf: str = "", *, timeout: float = 20.0) -> Frr:
        for daemon, conf in (("zebra", ""), ("bfdd", bfdd_conf)):
            path = self.dir / f"{daemon}.conf"
            path.write_text(conf)
            shutil.chown(path, *_owner(self.dir))
        self.ns.run(self._argv("zebra", ["-P", "0"]))
        wait_until((self.dir / "zebra.vty").exists, timeout=timeout, what="zebra's vty socket")
        extra = list(self.bfdd_args)
        # 8.x wants a control socket path of its own; 10.x refuses the option.
        if self.version < (9,):
            extra += ["--bfdctl", self._p("bfdd.sock")]
        self._start_bfdd(extra)
        wait_until((self.dir / "bfdd.vty").exists, timeout=timeout, what="bfdd's vty socket")
        return self

    def _start_bfdd(self, extra: list[str]) -> None:
        argv = self._argv("bfdd", extra)
        if not self.bfdd_prefix:
            self.ns.run(argv)
            return
        argv.remove("-d")
        self._fg = self.ns.popen(
            [*self.bfdd_prefix, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def pid(self, daemon: str) -> int | None:
        try:
            return int((self.dir / f"{daemon}.pid").read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def alive(self, daemon: str) -> bool:
        pid = self.pid(daemon)
        return pid is not None and Path(f"/proc/{pid}").exists() and _not_zombie(pid)

    def kill(self, daemon: str, sig: int = signal.SIGKILL, *, timeout: float = 10.0) -> None:
        pid = self.pid(daemon)
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        wait_until(lambda: not self.alive(daemon), timeout=timeout, what=f"{self.name} {daemon} to exit")
        # A killed daemon leaves its vty socket; a restart must not find it.
        with contextlib.suppress(FileNotFoundError):
            (self.dir / f"{daemon}.vty").unlink()

    def restart_bfdd(self, *, timeout: float = 20.0) -> None:
        self.kill("bfdd")
        extra = list(self.bfdd_args)
        if self.version < (9,):
            extra += ["--bfdctl", self._p("bfdd.sock")]
        self._start_bfdd(extra)
        wait_until((self.dir / "bfdd.vty").exists, timeout=timeout, what="bfdd's vty socket")

    def stop(self) -> None:
        for daemon in ("bfdd", "zebra"):
            if self.alive(daemon):
                self.kill(daemon, signal.SIGTERM)

    def vtysh(self, *commands: str, timeout: float = 20.0) -> str:
        argv = ["vtysh", "--vty_socket", self._p("")]
        for c in commands:
            argv += ["-c", c]
        if self.root != "/":
            argv = ["chroot", self.root, *argv]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"vtysh {commands!r} failed ({out.returncode}): {out.stderr or out.stdout}")
        return out.stdout

    def configure(self, *lines: str) -> None:
        """Apply config lines in one ``configure terminal`` session."""
        self.vtysh("configure terminal", *lines)

    def peers(self) -> list[dict]:
        return json.loads(self.vtysh("show bfd peers json") or "[]")

    def peer(self, peer: str) -> dict | None:
        for p in self.peers():
            if p.get("peer") == peer:
                return p
        return None

    def counters(self) -> list[dict]:
        return json.loads(self.vtysh("show bfd peers counters json") or "[]")

    def log(self, daemon: str = "bfdd") -> str:
        try:
            return (self.dir / f"{daemon}.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def cleanup(self) -> None:
        self.stop()
        fg = getattr(self, "_fg", None)
        if fg is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                fg.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


def _owner(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_uid, st.st_gid


def _chroot_ids(root: str) -> tuple[int, int]:
    for line in (Path(root) / "etc" / "passwd").read_text().splitlines():
        parts = line.split(":")
        if parts[0] == "frr":
            return int(parts[2]), int(parts[3])
    raise LookupError(f"no user frr in {root}/etc/passwd")


def _not_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def deadline_prefix(runtime_us: int, period_us: int = 10_000) -> list[str]:
    """``chrt`` argv that runs bfdd under SCHED_DEADLINE (reset-on-fork: its helper threads stay ordinary).

    A peer under test load must not be what flaps; size ``runtime_us`` above
    what bfdd uses for the sessions at hand (64 sessions at 10 ms: 19 % of a
    core here).
    """
    runtime, period = str(runtime_us * 1000), str(period_us * 1000)
    return ["chrt", "-d", "-R", "--sched-runtime", runtime, "--sched-deadline", period,
            "--sched-period", period, "0"]  # fmt: skip


def bfd_peer_block(
    peer: str,
    *,
    local: str | None = None,
    interface: str | None = None,
    multihop: bool = False,
    rx_ms: int = 300,
    tx_ms: int = 300,
    mult: int = 3,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """The vtysh lines for one ``bfd`` peer (to pass to :meth:`Frr.configure`)."""
    head = f"peer {peer}"
    if multihop:
        head += " multihop"
    if local:
        head += f" local-address {local}"
    if interface:
        head += f" interface {interface}"
    return [
        "bfd",
        head,
        f"receive-interval {rx_ms}",
        f"transmit-interval {tx_ms}",
        f"detect-multiplier {mult}",
        *extra,
        "exit",
        "exit",
    ]
