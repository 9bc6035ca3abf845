"""--pin: nothing in the pin directory is trusted unless only root could have written it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from xdp_bfd.pin import directory
from xdp_bfd.pin.errors import HandoverError

LAYOUT = "0123456789abcdef"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="owners other than root need root to make")


def _tree(root: Path) -> Path:
    """A pin directory as an engine leaves it: root 0700, the owner record, our maps (0600)."""
    root.chmod(0o700)
    (root / "owner").touch(0o600)
    (root / LAYOUT).mkdir(0o700)
    (root / LAYOUT / "slot_cfg").touch(0o600)
    return root


def test_a_root_only_directory_is_trusted(tmp_path) -> None:
    directory.check_trusted(_tree(tmp_path), LAYOUT)
    directory.check_trusted(tmp_path / "empty-but-there", LAYOUT)  # nothing there: nothing to trust


@pytest.mark.parametrize(
    ("path", "change", "want"),
    [
        (".", lambda p: p.chmod(0o777), "mode 0777"),
        (".", lambda p: p.chmod(0o1777), "mode 1777"),  # a bare `mount -t bpf`: sticky, world-writable
        (".", lambda p: p.chmod(0o770), "mode 0770"),
        (".", lambda p: os.chown(p, 65534, 0), "owned by uid 65534"),
        ("owner", lambda p: p.chmod(0o666), "mode 0666"),
        ("owner", lambda p: os.chown(p, 1000, 1000), "owned by uid 1000"),
        (LAYOUT, lambda p: p.chmod(0o757), "mode 0757"),
        (f"{LAYOUT}/slot_cfg", lambda p: p.chmod(0o620), "mode 0620"),
        (f"{LAYOUT}/slot_cfg", lambda p: os.chown(p, 1000, 0), "owned by uid 1000"),
    ],
)
def test_anything_others_could_write_is_refused_naming_path_owner_and_mode(tmp_path, path, change, want):
    root = _tree(tmp_path)
    target = root / path
    change(target)
    with pytest.raises(HandoverError) as refused:
        directory.check_trusted(root, LAYOUT)
    line = str(refused.value)
    assert f"--pin: {target.resolve() if path == '.' else target} is " in line and want in line, line
    assert "\n" not in line


def test_a_symlink_is_refused(tmp_path) -> None:
    root = _tree(tmp_path)
    (root / "owner").unlink()
    (root / "owner").symlink_to("/etc/passwd")
    with pytest.raises(HandoverError, match="symbolic link"):
        directory.check_trusted(root, LAYOUT)


def test_other_builds_layouts_are_not_opened_so_not_checked(tmp_path) -> None:
    root = _tree(tmp_path)
    other = root / "fedcba9876543210"
    other.mkdir()
    other.chmod(0o777)  # finish() only removes it
    directory.check_trusted(root, LAYOUT)


def test_our_layout_directory_is_made_root_only_whatever_the_umask(tmp_path) -> None:
    old = os.umask(0)
    try:
        directory.make_layout_dir(tmp_path, LAYOUT)
    finally:
        os.umask(old)
    st = (tmp_path / LAYOUT).stat()
    assert (st.st_uid, st.st_mode & 0o7777) == (0, 0o700)
    directory.make_layout_dir(tmp_path, LAYOUT)  # there already: left as it is
