"""The stats file: written where nobody else can swap it, never through a link; encoded in slices."""

from __future__ import annotations

import errno
import json
import logging
import os

import pytest

from xdp_bfd.core.document import file_writer
from xdp_bfd.core.stats_format import encode_steps, write_atomic, write_atomic_steps

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def _tmp_name(path):
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _dir(tmp_path, mode):
    d = tmp_path / "d"
    d.mkdir()
    d.chmod(mode)
    return d


def test_writes_0644_whatever_the_umask(tmp_path):
    path = tmp_path / "stats.json"
    old = os.umask(0o077)
    try:
        write_atomic(path, b'{"a": 1}\n')
    finally:
        os.umask(old)
    assert path.read_bytes() == b'{"a": 1}\n'
    assert path.stat().st_mode & 0o777 == 0o644
    assert not _tmp_name(path).exists()


def test_a_missing_directory_is_created(tmp_path):
    path = tmp_path / "run" / "xdp-bfd" / "stats.json"
    write_atomic(path, b"x")
    assert path.read_bytes() == b"x" and path.parent.stat().st_mode & 0o777 == 0o755


def test_a_symlink_at_the_path_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    path = tmp_path / "stats.json"
    path.symlink_to(victim)
    write_atomic(path, b"stats")
    assert victim.read_bytes() == b"precious"
    assert not path.is_symlink() and path.read_bytes() == b"stats"


def test_a_symlink_planted_at_the_temp_name_is_removed_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    path = tmp_path / "stats.json"
    _tmp_name(path).symlink_to(victim)
    write_atomic(path, b"stats")
    assert victim.read_bytes() == b"precious" and path.read_bytes() == b"stats"
    assert not os.path.lexists(_tmp_name(path))


@as_root
def test_in_a_sticky_world_writable_directory_another_users_files_are_replaced(tmp_path):
    d = _dir(tmp_path, 0o1777)  # as /tmp
    path = d / "bfd_tx_stats.json"
    path.write_bytes(b'{"forged": true}')
    os.chown(path, NOBODY, NOBODY)
    _tmp_name(path).write_bytes(b"planted")
    os.chown(_tmp_name(path), NOBODY, NOBODY)
    write_atomic(path, b"genuine")
    st = path.stat()
    assert path.read_bytes() == b"genuine" and (st.st_uid, st.st_mode & 0o777) == (0, 0o644)


@pytest.mark.parametrize(
    ("mode", "who"), [(0o777, "others"), (0o773, "others"), (0o775, "its group"), (0o2770, "its group")]
)
def test_a_directory_others_may_rename_in_is_refused(tmp_path, mode, who):
    d = _dir(tmp_path, mode)
    path = d / "stats.json"
    with pytest.raises(OSError) as e:
        write_atomic(path, b"x")
    assert e.value.errno == errno.EPERM
    assert e.value.strerror == (
        f"{d} is writable by {who} and not sticky (mode {mode:04o}); refusing to write there"
    )
    assert os.listdir(d) == []


@pytest.mark.parametrize("mode", [0o755, 0o700, 0o1777, 0o1775])
def test_private_or_sticky_directories_are_written(tmp_path, mode):
    d = _dir(tmp_path, mode)
    write_atomic(d / "stats.json", b"x")
    assert os.listdir(d) == ["stats.json"]


@as_root
def test_a_directory_owned_by_another_user_is_refused(tmp_path):
    d = _dir(tmp_path, 0o755)
    os.chown(d, NOBODY, NOBODY)
    with pytest.raises(OSError, match=f"belongs to uid {NOBODY}, neither root nor us"):
        write_atomic(d / "stats.json", b"x")
    assert os.listdir(d) == []


def test_the_sigusr1_writer_logs_the_refusal_in_one_line(tmp_path, caplog):
    d = _dir(tmp_path, 0o777)
    write = file_writer(d / "stats.json")
    with caplog.at_level(logging.ERROR, logger="xdp_bfd"):
        gen = write({"version": 1})
        assert gen is not None
        for _ in gen:
            pass
    assert caplog.messages == [
        f"stats: cannot write {d / 'stats.json'}: {d} is writable by others and not sticky "
        "(mode 0777); refusing to write there"
    ]


@pytest.mark.parametrize("n", [0, 1, 5, 70])
def test_a_dump_is_encoded_a_slice_of_sessions_at_a_time_into_json_dumps_own_bytes(n):
    sessions = [
        {"peer": f"198.19.1.{i}", "state": "up", "drops": {"x": i}, "name": 'a"b\\c\x00'} for i in range(n)
    ]
    doc = {"version": 1, "counters": {"drop": {}}, "sessions": sessions, "loop_lag": {"max_us": 3}}
    steps = encode_steps(doc, slice_sessions=4)
    yielded = 0
    while True:
        try:
            next(steps)
            yielded += 1
        except StopIteration as done:
            pieces = done.value
            break
    data = b"".join(pieces)
    assert data == (json.dumps(doc) + "\n").encode()
    assert yielded == -(-n // 4)  # one step per slice of four sessions
    assert len(pieces) == yielded + 2  # the head, a piece a slice, the tail: no step joins them all
    assert json.loads(data)["sessions"] == sessions


def test_a_write_goes_a_chunk_per_step_and_only_the_rename_shows_it(tmp_path):
    path = tmp_path / "stats.json"
    path.write_bytes(b"old")
    steps = write_atomic_steps(path, b"0123456789", chunk=4)
    next(steps)
    assert _tmp_name(path).read_bytes() == b"0123" and path.read_bytes() == b"old"
    next(steps)
    assert _tmp_name(path).read_bytes() == b"01234567"
    with pytest.raises(StopIteration):
        next(steps)
    assert path.read_bytes() == b"0123456789" and not _tmp_name(path).exists()


def test_pieces_are_written_a_chunk_per_step_across_their_boundaries(tmp_path):
    path = tmp_path / "stats.json"
    steps = write_atomic_steps(path, [b"01", b"2345", b"", b"6789"], chunk=4)
    next(steps)
    assert _tmp_name(path).read_bytes() == b"0123"  # two pieces in one step, cut at the chunk
    next(steps)
    assert _tmp_name(path).read_bytes() == b"01234567"
    with pytest.raises(StopIteration):
        next(steps)
    assert path.read_bytes() == b"0123456789" and not _tmp_name(path).exists()


def test_a_write_abandoned_half_way_leaves_no_temp_file(tmp_path):
    path = tmp_path / "stats.json"
    steps = write_atomic_steps(path, b"0123456789", chunk=4)
    next(steps)
    assert _tmp_name(path).exists()
    steps.close()
    assert not _tmp_name(path).exists() and not path.exists()
