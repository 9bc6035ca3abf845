"""A plain, non-editable install of engine/ is a working engine, --kernel-tx included.

The BPF C sources travel with the package: in a fresh virtualenv, with no
XDP_BFD_BPF_DIR and no checkout on the path, the installed ``xdp-bfd`` must find
them in its own package and attach its XDP program. Both ways the package gets
built are run: plain ``pip install`` (isolated build, PyPI) and the engine
role's offline command (Debian's setuptools, no index).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import engine as harness_engine
from harness.netns import xdp_attached
from harness.wait import wait_until

REPO = Path(__file__).resolve().parents[2]
# What the package must carry: every C source and header of the one bpf/, and its README.
BPF_SOURCES = {p.name for p in (REPO / "bpf").iterdir() if p.suffix in {".c", ".h"} or p.name == "README.md"}

INSTALLS = {
    "pip": ["install", "--disable-pip-version-check"],
    # roles/engine/tasks/install.yml, word for word.
    "role": ["install", "--no-index", "--no-deps", "--no-build-isolation", "--disable-pip-version-check"],
}


def _clean_env() -> dict[str, str]:
    """This process's environment without anything that would lead the new venv to the checkout's copy."""
    env = dict(os.environ)
    for var in ("XDP_BFD_BPF_DIR", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
        env.pop(var, None)
    return env


def _run(argv: list[str], env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _install(tmp_path: Path, how: str) -> Path:
    """A venv like the role's (Debian's python3, system site packages for bcc) with engine/ installed."""
    # A copy of engine/ and bpf/ side by side, as the role unpacks them on a
    # router: pip builds in the source tree, and the shared checkout must not
    # get its build/ written by a test. Links stay links (engine/xdp_bfd/bpf).
    src = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    for part in ("engine", "bpf"):
        shutil.copytree(REPO / part, src / part, symlinks=True, ignore=skip)
    venv = tmp_path / "venv"
    env = _clean_env()
    _run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)], env, 120)
    _run([str(venv / "bin" / "pip"), *INSTALLS[how], str(src / "engine")], env, 300)
    return venv


def _where_the_sources_are(venv: Path) -> dict[str, str]:
    probe = (
        "import json, xdp_bfd, xdp_bfd.fastpath.abi as k;"
        "print(json.dumps({'package': xdp_bfd.__file__, 'bpf_dir': str(k.bpf_dir())}))"
    )
    return json.loads(_run([str(venv / "bin" / "python"), "-c", probe], _clean_env(), 60))


@pytest.mark.parametrize("how", sorted(INSTALLS))
def test_installed_engine_attaches_from_its_packaged_sources(
    how: str, topo, engine_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv = _install(tmp_path, how)

    found = _where_the_sources_are(venv)
    package = Path(found["package"]).parent
    assert package.is_relative_to(venv), f"imported {package}, not the venv's copy"
    bpf = Path(found["bpf_dir"])
    assert bpf == package / "bpf", found
    # Real files in the venv (a wheel copies them), not a link back into a source tree.
    assert not bpf.is_symlink()
    assert {p.name for p in bpf.iterdir() if p.is_file() and not p.is_symlink()} == BPF_SOURCES
    for name in BPF_SOURCES:
        assert (bpf / name).read_bytes() == (REPO / "bpf" / name).read_bytes(), name

    d, p = topo.namespace("d"), topo.namespace("p")
    a, b = topo.veth(d, "veth-d", p, "veth-p")
    # One session gives the engine something to do; nobody answers it, the program attaches anyway.
    sessions = tmp_path / "sessions.yml"
    sessions.write_text(f"- {{local: {a.ip4}, peer: {b.ip4}, interface: veth-d}}\n")
    exe = venv / "bin" / "xdp-bfd"
    # The shared factory starts harness.engine.XDP_BFD (the checkout's venv); point it at
    # this install, and keep the checkout's sources out of the engine's reach.
    monkeypatch.setattr(harness_engine, "XDP_BFD", str(exe))
    monkeypatch.delenv("XDP_BFD_BPF_DIR", raising=False)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    eng = engine_factory(d, ["--sessions", str(sessions), "--kernel-tx", "veth-d", "--xdp-mode", "generic"])

    def attached() -> bool:
        if eng.proc is not None and eng.proc.poll() is not None:
            raise AssertionError(f"the installed engine exited ({eng.proc.returncode}):\n{eng.log()}")
        return xdp_attached(d, "veth-d")

    # bcc compiles at start: slow on a loaded machine (the unit allows 120 s). The
    # kernel's word first, then the engine's.
    wait_until(attached, timeout=90, interval=0.25, what="an XDP program on veth-d")
    eng.wait_log("kernel-tx: XDP attached to veth-d")
    # Read once it runs (right after the fork it is still ip netns exec): the program is this install's.
    cmdline = Path(f"/proc/{eng.pid}/cmdline").read_bytes().split(b"\0")
    assert str(exe).encode() in cmdline, cmdline
    doc = eng.stats(timeout=10)
    assert doc["kernel_tx"] is True
    assert [i["ifname"] for i in doc["xdp"]["interfaces"]] == ["veth-d"], doc["xdp"]
    assert "cannot find the bpf/ sources" not in eng.log()
