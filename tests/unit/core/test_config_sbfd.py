"""S-BFD reflector entries in the sessions file, and the engine's refusals of a reflector set.

A reflector's discriminator is no session's: the engine reserves it (no
session allocates it, bfdd's id is not used when it names one) and refuses a
set that names a running session's, at start and on SIGHUP alike.
"""

from __future__ import annotations

import ipaddress
import logging
import random
from pathlib import Path

import pytest

from xdp_bfd.core.config import SBFD_MIN_RX_US, SBFD_RATE_PPS, ConfigError, ReflectorConfig, load_config
from xdp_bfd.core.engine import Engine
from xdp_bfd.core.errors import EngineError
from xdp_bfd.session import SessionConfig


def _load(tmp_path: Path, text: str):
    p = tmp_path / "s.yml"
    p.write_text(text)
    p.chmod(0o600)
    return load_config(p)


def test_a_reflector_entry_with_defaults_beside_sessions(tmp_path):
    loaded = _load(tmp_path, "- {local: 198.19.0.1, peer: 198.19.0.2}\n- {sbfd_reflector: 456}\n")
    assert len(loaded.sessions) == 1
    (r,) = loaded.reflectors
    assert r == ReflectorConfig(456)
    assert (r.admin_down, r.min_rx_us, r.rate_pps) == (False, SBFD_MIN_RX_US, SBFD_RATE_PPS)
    assert r.burst_packets == SBFD_RATE_PPS // 10


def test_a_full_reflector_entry(tmp_path):
    (r,) = _load(
        tmp_path,
        "- {sbfd_reflector: 4294967295, state: admin-down, min_rx_us: 10000, rate_pps: 50, burst: 3}\n",
    ).reflectors
    assert r == ReflectorConfig(0xFFFFFFFF, admin_down=True, min_rx_us=10_000, rate_pps=50, burst=3)
    assert r.burst_packets == 3
    assert ReflectorConfig(1, rate_pps=5).burst_packets == 1  # never a bucket that holds nothing


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("- {sbfd_reflector: 0}\n", "[0].sbfd_reflector: expected a discriminator 1-4294967295, got 0"),
        ("- {sbfd_reflector: 4294967296}\n", "[0].sbfd_reflector: expected a discriminator"),
        ("- {sbfd_reflector: true}\n", "[0].sbfd_reflector: expected a discriminator"),
        ("- {sbfd_reflector: abc}\n", "[0].sbfd_reflector: expected a discriminator"),
        ("- {sbfd_reflector: 5, state: down}\n", "[0].state: expected one of up, admin-down, got 'down'"),
        ("- {sbfd_reflector: 5, rate_pps: 0}\n", "[0].rate_pps: expected an integer 1-10000000, got 0"),
        ("- {sbfd_reflector: 5, min_rx_us: 0}\n", "[0].min_rx_us: expected an integer"),
        ("- {sbfd_reflector: 5, peer: 198.19.0.2}\n", "[0]: unknown field 'peer' for an S-BFD reflector"),
        ("- {sbfd_reflector: 5}\n- {sbfd_reflector: 5}\n", "[1]: S-BFD reflector discriminator 5 is already"),
    ],
)
def test_bad_reflector_entries_are_one_line_naming_entry_and_field(tmp_path, text, where):
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, text)
    assert where in str(e.value)
    assert "\n" not in str(e.value)


sunk: list[dict[int, ReflectorConfig]] = []  # what the engines below handed the stand-in reflector


def _engine(tmp_path: Path, cli: tuple[ReflectorConfig, ...] = (), *, xdp: bool = True) -> Engine:
    engine = Engine(stats_path=tmp_path / "stats.json", sbfd_cli=cli)
    if xdp:  # stands in for the XDP reflector: what the engine hands it
        engine.reflector_sink = lambda r: sunk.append(dict(r))
    return engine


class _Draws(random.Random):
    """A generator that draws the given numbers, in order."""

    def __init__(self, *draws: int) -> None:
        super().__init__(0)
        self.draws = list(draws)

    def randrange(self, *_args, **_kw) -> int:  # type: ignore[override]
        return self.draws.pop(0)


def _session(engine: Engine, discr: int) -> None:
    cfg = SessionConfig(local=ipaddress.ip_address("127.0.0.1"), peer=ipaddress.ip_address("127.0.0.2"))
    engine.add_session(cfg, "file", discr=discr)


def test_reflectors_are_reserved_and_handed_to_the_xdp_reflector(tmp_path):
    sunk.clear()
    engine = _engine(tmp_path, (ReflectorConfig(7),))
    try:
        engine.set_reflectors(engine.check_reflectors([ReflectorConfig(8)], "s.yml"))
        assert sunk == [{7: ReflectorConfig(7), 8: ReflectorConfig(8)}]
        assert not engine.discr_free(7) and not engine.discr_free(8) and engine.discr_free(9)
        big = [ReflectorConfig(8), ReflectorConfig(1 << 16), ReflectorConfig(2 << 16)]
        engine.set_reflectors(engine.check_reflectors(big, "s.yml"))
        engine.table._rng = _Draws(1, 2, 3)  # index 0 under high halves 1, 2: both reflectors'
        assert engine.allocate_discr() == 3 << 16
    finally:
        engine.shutdown()


def test_a_reflector_that_names_a_session_is_refused_in_one_line(tmp_path):
    engine = _engine(tmp_path)
    try:
        _session(engine, 456)
        with pytest.raises(EngineError) as e:
            engine.check_reflectors([ReflectorConfig(456)], "s.yml")
        assert str(e.value) == (
            "s.yml: S-BFD reflector discriminator 456 is the local discriminator of session "
            "127.0.0.1 -> 127.0.0.2 single-hop; a reflector's must be no session's"
        )
    finally:
        engine.shutdown()


def test_the_command_line_and_the_file_may_not_name_one_discriminator_twice(tmp_path):
    engine = _engine(tmp_path, (ReflectorConfig(9),))
    try:
        with pytest.raises(EngineError, match=r"s\.yml: S-BFD reflector discriminator 9 is already given by"):
            engine.check_reflectors([ReflectorConfig(9)], "s.yml")
    finally:
        engine.shutdown()


def test_without_the_fast_path_a_reflector_is_refused(tmp_path):
    engine = _engine(tmp_path, xdp=False)
    try:
        with pytest.raises(
            EngineError, match=r"s.yml: S-BFD reflector 5 is answered in XDP only; give --kernel-tx"
        ):
            engine.check_reflectors([ReflectorConfig(5)], "s.yml")
        assert engine.check_reflectors([], "s.yml") == {}
    finally:
        engine.shutdown()


def test_a_reload_that_collides_keeps_everything_and_a_good_one_applies(tmp_path, caplog):
    sunk.clear()
    path = tmp_path / "s.yml"
    path.write_text("- {local: 127.0.0.1, peer: 127.0.0.2}\n- {sbfd_reflector: 5}\n")
    engine = Engine(stats_path=tmp_path / "stats.json", sessions_file=path)
    engine.reflector_sink = lambda r: sunk.append(dict(r))
    try:
        engine.reload()
        assert sunk[-1] == {5: ReflectorConfig(5)}
        (entry,) = engine.sessions.values()
        taken = entry.session.local_discr
        path.write_text(f"- {{local: 127.0.0.1, peer: 127.0.0.2}}\n- {{sbfd_reflector: {taken}}}\n")
        with caplog.at_level(logging.ERROR, logger="xdp_bfd"):
            engine.reload()
        assert f"S-BFD reflector discriminator {taken} is the local discriminator" in caplog.text
        assert "keeping the running sessions unchanged" in caplog.text
        assert sunk[-1] == {5: ReflectorConfig(5)} and engine.reflectors == {5: ReflectorConfig(5)}
        path.write_text("- {local: 127.0.0.1, peer: 127.0.0.2}\n- {sbfd_reflector: 6, rate_pps: 100}\n")
        engine.reload()
        assert sunk[-1] == {6: ReflectorConfig(6, rate_pps=100)}
        assert engine.discr_free(5) and not engine.discr_free(6)
    finally:
        engine.shutdown()
