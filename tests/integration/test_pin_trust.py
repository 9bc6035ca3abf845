"""--pin: nothing the successor reads can run code, and the pin directory must be root's.

A state forged into the pinned ``handover`` map (a pickle that would run a
command, a truncated blob) makes the successor start fresh with one line
saying why; it still takes the XDP program over, and the marker file shows
that nothing ran. A pin directory others could write (mode 0777, another
owner) makes the engine refuse to start, exit 1, with one line naming it.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import re
import signal
import struct
import zlib
from pathlib import Path

import pytest
from test_engine_pin import _one_session_lab

from harness.netns import Namespace
from harness.wait import wait_until
from xdp_bfd.fastpath import abi
from xdp_bfd.pin import bpfsys

_BPF_MAP_LOOKUP_ELEM, _BPF_MAP_UPDATE_ELEM = 1, 2


def _map_op(cmd: int, path: Path, key: int, value: ctypes.Array) -> None:
    """One lookup or update of the pinned array at ``path``, by the bare system call."""
    fd = bpfsys.open_pinned(path)
    try:
        k = ctypes.c_uint32(key)
        attr = struct.pack("=I4xQQQ", fd, ctypes.addressof(k), ctypes.addressof(value), 0)
        bpfsys._bpf(cmd, attr)
    finally:
        os.close(fd)


def _layout_dir(pin: Path) -> Path:
    (d,) = [x for x in pin.iterdir() if x.is_dir() and len(x.name) == 16]
    return d


def _owner(pin: Path, slot: int) -> int:
    value = ctypes.c_uint64()
    _map_op(_BPF_MAP_LOOKUP_ELEM, pin / "owner", slot, value)  # type: ignore[arg-type]
    return value.value


def _set_owner(pin: Path, slot: int, value: int) -> None:
    _map_op(_BPF_MAP_UPDATE_ELEM, pin / "owner", slot, ctypes.c_uint64(value))  # type: ignore[arg-type]


def _write_blob(pin: Path, blob: bytes, chunk: int) -> None:
    """What an attacker with the map would do: the blob into the chunks, its length in the record."""
    path = _layout_dir(pin) / "handover"
    for i in range(0, len(blob), chunk):
        leaf = (ctypes.c_ubyte * chunk).from_buffer_copy(blob[i : i + chunk].ljust(chunk, b"\0"))
        _map_op(_BPF_MAP_UPDATE_ELEM, path, i // chunk, leaf)


def _xdp_prog(ns: Namespace, ifname: str) -> int:
    m = re.search(r"prog/xdp id (\d+)", ns.run(["ip", "-d", "link", "show", "dev", ifname]).stdout)
    assert m, f"no XDP program on {ifname}"
    return int(m.group(1))


class _RunsACommand:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def _forge_pickle(pin: Path, a: abi.Abi, marker: Path) -> str:
    # What format 2 looked like (zlib of a pickle), carrying a command.
    blob = zlib.compress(pickle.dumps({"format": "x", "sessions": [_RunsACommand(marker)]}))
    _write_blob(pin, blob, a.handover_chunk)
    _set_owner(pin, a.Owner.BLOB_LEN, len(blob))
    return (
        "it is in a format this build no longer reads (format 1 or 2, a pickle: "
        "code-carrying formats are refused)"
    )


def _forge_truncated(pin: Path, a: abi.Abi, _marker: Path) -> str:
    # The real state, its length in the owner record cut short by 100 bytes (the header is 10).
    length = _owner(pin, a.Owner.BLOB_LEN)
    _set_owner(pin, a.Owner.BLOB_LEN, length - 100)
    return f"its header says {length - 10} bytes, {length - 110} follow (truncated?)"


@pytest.mark.parametrize(
    "forge", [_forge_pickle, _forge_truncated], ids=["code-carrying pickle", "truncated"]
)
def test_a_forged_state_means_a_fresh_start_and_nothing_runs(  # noqa: PLR0917  (pytest fixtures)
    topo, frr_factory, engine_factory, tmp_path, pin_dir, forge
):
    d, _p, a_if, b_if, frr, sessions = _one_session_lab(topo, frr_factory, tmp_path)
    # The dead-man gate outlasts the successor's compile (test_engine_pin's SIGUSR2 test says why).
    args = ["--sessions", str(sessions), "--kernel-tx", "veth-d", "--pin", str(pin_dir)]
    args += ["--deadman-us", "15000000"]
    eng = engine_factory(d, args)
    wait_until(lambda: (frr.peer(str(a_if.ip4)) or {}).get("status") == "up", timeout=20, what="up")
    old_prog = _xdp_prog(d, "veth-d")
    eng.signal(signal.SIGUSR2)
    assert eng.wait_exit(timeout=10) == 75  # the state is in the map, the program still attached
    a = abi.load()
    assert _owner(pin_dir, a.Owner.STATE) == a.OwnerState.HANDED_OVER
    marker = tmp_path / "pickle-ran"
    reason = forge(pin_dir, a, marker)

    new = engine_factory(d, args)
    line = new.wait_log("pin: the handed-over state is refused", timeout=30)
    assert line == f"pin: the handed-over state is refused: {reason}; starting fresh"
    new.wait_log("bfd: serving 1 sessions", timeout=20)
    log = new.log()
    assert "pin: adopted" not in log and log.count("handed-over state is refused") == 1, log
    assert "kernel-tx: XDP attached to veth-d" in log
    assert _xdp_prog(d, "veth-d") != old_prog  # the successor's program replaced the old one
    wait_until(lambda: new.session(str(b_if.ip4))["state"] == "up", timeout=30, what="the fresh session up")
    assert not marker.exists()  # nothing in the forged state ran


def _attached(d: Namespace) -> list[str]:
    return re.findall(r"prog/xdp id \d+", d.run(["ip", "-d", "link", "show", "dev", "veth-d"]).stdout)


def _refused(engine_factory, d, pin_dir: Path, sessions: Path) -> str:
    """The engine refuses the directory: exit 1, one line, and it touched no program."""
    before = _attached(d)
    eng = engine_factory(d, ["--sessions", str(sessions), "--kernel-tx", "veth-d", "--pin", str(pin_dir)])
    assert eng.wait_exit(timeout=30) == 1, eng.log()
    lines = [ln for ln in eng.log().splitlines() if ln.startswith("xdp-bfd: ")]
    assert len(lines) == 1, eng.log()
    assert _attached(d) == before, eng.log()  # nothing attached, nothing replaced
    return lines[0]


def _lab_without_peer(topo, tmp_path) -> tuple[Namespace, Path]:
    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    sessions = tmp_path / "one.yml"
    sessions.write_text(f"- {{local: {a.ip4}, peer: {b.ip4}, interface: veth-d}}\n")
    return d, sessions


def test_a_world_writable_pin_directory_is_refused(topo, engine_factory, tmp_path, pin_dir):
    d, sessions = _lab_without_peer(topo, tmp_path)
    pin_dir.chmod(0o777)
    line = _refused(engine_factory, d, pin_dir, sessions)
    assert line == (
        f"xdp-bfd: --pin: {pin_dir} is owned by uid 0 with mode 0777: it must be owned by root and not "
        "writable by group or others (mount -t bpf -o mode=0700); refusing to use it"
    )


def test_a_pin_directory_of_another_owner_is_refused(topo, engine_factory, tmp_path, pin_dir):
    d, sessions = _lab_without_peer(topo, tmp_path)
    os.chown(pin_dir, 65534, 65534)
    line = _refused(engine_factory, d, pin_dir, sessions)
    assert f"--pin: {pin_dir} is owned by uid 65534 with mode 1700" in line, line


def test_a_map_others_could_write_is_refused(topo, engine_factory, tmp_path, pin_dir):
    d, sessions = _lab_without_peer(topo, tmp_path)
    eng = engine_factory(d, ["--sessions", str(sessions), "--kernel-tx", "veth-d", "--pin", str(pin_dir)])
    eng.wait_log("bfd: serving", timeout=30)
    eng.signal(signal.SIGUSR2)
    assert eng.wait_exit(timeout=10) == 75
    handover = _layout_dir(pin_dir) / "handover"
    assert handover.stat().st_mode & 0o777 == 0o600  # as the kernel pins it
    handover.chmod(0o666)
    line = _refused(engine_factory, d, pin_dir, sessions)
    assert f"--pin: {handover} is owned by uid 0 with mode 0666" in line, line
