"""The engine reads names and constants from the one ABI header, not from a copy."""

from __future__ import annotations

import enum
import ipaddress
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.sessions import bring_up, deliver, make, packet, sent
from xdp_bfd.core import netio
from xdp_bfd.core.host import Callback, Entry
from xdp_bfd.fastpath import abi, reports
from xdp_bfd.fastpath.abi import PACKAGED_BPF_DIR, bpf_dir
from xdp_bfd.fastpath.abi import load as load_abi
from xdp_bfd.fastpath.errors import KernelError
from xdp_bfd.fastpath.layout import layout_id, layout_sources
from xdp_bfd.fastpath.observer import Offload, steady_template
from xdp_bfd.fastpath.reports import Events
from xdp_bfd.fastpath.slots import mapped16
from xdp_bfd.session import AuthConfig
from xdp_bfd.wire import control, echo


def counter_names(header: Path) -> list[str]:
    return list(load_abi(header).counters)


REPO_BPF = Path(__file__).resolve().parents[3] / "bpf"
ENGINE = Path(__file__).resolve().parents[3] / "engine" / "xdp_bfd"


def test_counter_names_come_from_the_header_in_index_order():
    header = bpf_dir() / "bfd_abi.h"
    names = counter_names(header)
    block = header.read_text().split("#define BFD_COUNTERS(X)", 1)[1].split("\n\n", 1)[0]
    assert len(names) == block.count("X(") == len(set(names))
    assert names[:2] == ["xdp_tx", "xdp_pass"]
    # Every DESIGN.md reject rule has its own counter.
    rules = {"ip_options", "ttl", "min_ttl", "version", "short", "length", "detect_mult", "multipoint"}
    rules |= {"my_discr", "your_discr", "your_discr_zero", "auth_unexpected", "auth_missing"}
    assert rules <= set(names), rules - set(names)
    # The S-BFD reflector's rules have their own (docs/fastpath.md), never a session's.
    sbfd = {"sport", "address", "short", "version", "length", "detect_mult", "multipoint", "my_discr"}
    sbfd |= {"your_discr_zero", "unknown", "auth", "gated", "rate_limited"}
    assert {f"sbfd_{r}" for r in sbfd} | {"sbfd_tx"} <= set(names)


def test_constants():
    c = load_abi(bpf_dir() / "bfd_abi.h").constants
    assert c["BFD_MAX_SESSIONS"] >= 4096
    assert (c["BFD_PORT_CONTROL"], c["BFD_PORT_MULTIHOP"], c["BFD_PORT_ECHO"]) == (3784, 4784, 3785)
    flags = [
        c[k] for k in ("BFD_CFG_ACTIVE", "BFD_CFG_KTX", "BFD_CFG_DETECT", "BFD_CFG_AUTH", "BFD_CFG_ECHO")
    ]
    assert len(set(flags)) == 5 and all(f & (f - 1) == 0 for f in flags)


def test_v4_mapped_keys_keep_families_apart():
    v4 = mapped16(ipaddress.ip_address("198.19.0.1"))
    assert v4 == bytes(10) + b"\xff\xff" + bytes([198, 19, 0, 1])
    assert mapped16(ipaddress.ip_address("fd00:bfd::1")) == ipaddress.ip_address("fd00:bfd::1").packed
    assert mapped16(None) == bytes(16)
    assert ipaddress.IPv6Address(v4).ipv4_mapped == ipaddress.ip_address("198.19.0.1")


def test_the_sources_default_to_the_packaged_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDP_BFD_BPF_DIR", raising=False)
    assert bpf_dir() == PACKAGED_BPF_DIR
    names = {p.name for p in REPO_BPF.iterdir()}
    assert {"bfd_abi.h", "maps.h", "sweep.c", "xdp_bfd.c"} <= names
    for name in names:
        assert (PACKAGED_BPF_DIR / name).read_bytes() == (REPO_BPF / name).read_bytes(), name
    if PACKAGED_BPF_DIR.parent.is_relative_to(REPO_BPF.parent):
        # Run from the checkout (editable install): the package's bpf/ is the
        # repository's through a link, so there is one copy to edit.
        assert PACKAGED_BPF_DIR.resolve() == REPO_BPF.resolve()


def test_the_override_wins_and_must_hold_the_sources(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "bfd_abi.h").write_text("/* another build */\n")
    monkeypatch.setenv("XDP_BFD_BPF_DIR", str(tmp_path))
    assert bpf_dir() == tmp_path
    # Pointing nowhere is an error, not a quiet fall-back to the packaged copy.
    monkeypatch.setenv("XDP_BFD_BPF_DIR", str(tmp_path / "missing"))
    with pytest.raises(KernelError, match=r"no bfd_abi\.h in .*missing \(XDP_BFD_BPF_DIR\)"):
        bpf_dir()


# --- one typed ABI: Python takes every shared value from the header -----------------


def _header(tmp_path: Path, *edits: tuple[str, str]) -> Path:
    """A copy of this build's bfd_abi.h with each (old, new) replaced exactly once."""
    text = (REPO_BPF / "bfd_abi.h").read_text()
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    out = tmp_path / "bfd_abi.h"
    out.write_text(text)
    return out


def test_the_header_parses_into_typed_values() -> None:
    a = load_abi()
    assert isinstance(a.CfgFlag.KTX, enum.IntFlag) and isinstance(a.Event.POLL, enum.IntEnum)
    flags = [a.CfgFlag.ACTIVE, a.CfgFlag.KTX, a.CfgFlag.DETECT, a.CfgFlag.AUTH, a.CfgFlag.ECHO]
    assert len(set(flags)) == 5 and all(f & (f - 1) == 0 for f in flags)
    assert a.Event.EXPIRED != a.Event.POLL
    assert a.counters == tuple(counter_names(a.header))
    assert a.control_len == control.MIN_LEN
    # 4096 sessions take every copy of the sweep; one more than they cover is refused.
    assert a.sweep_programs(a.sweep_chunk * a.sweep_copies) == a.sweep_copies
    assert a.sweep_programs(1) == 1
    with pytest.raises(abi.AbiError, match="BFD_SWEEP_COPIES x BFD_SWEEP_CHUNK"):
        a.sweep_programs(a.sweep_chunk * a.sweep_copies + 1)


def test_the_header_is_parsed_once() -> None:
    header = bpf_dir() / "bfd_abi.h"
    assert abi.load(header) is abi.load(header) is load_abi()
    assert load_abi(header).constants is load_abi().constants


@pytest.mark.parametrize(
    ("old", "new", "read", "want"),
    [
        ("#define BFD_CFG_KTX 0x02", "#define BFD_CFG_KTX 0x40", lambda a: a.CfgFlag.KTX, 0x40),
        ("#define BFD_CFG_ECHO 0x10", "#define BFD_CFG_ECHO 0x80", lambda a: a.CfgFlag.ECHO, 0x80),
        ("#define BFD_EV_POLL 2", "#define BFD_EV_POLL 9", lambda a: a.Event.POLL, 9),
        ("#define BFD_SWEEP_CHUNK 512", "#define BFD_SWEEP_CHUNK 256", lambda a: a.sweep_chunk, 256),
        ("#define BFD_SWEEP_COPIES 8", "#define BFD_SWEEP_COPIES 16", lambda a: a.sweep_copies, 16),
        (
            "#define BFD_HANDOVER_CHUNK 16384",
            "#define BFD_HANDOVER_CHUNK 4096",
            lambda a: a.handover_chunk,
            4096,
        ),
        ("#define BFD_OWNER_DONE_NS 3", "#define BFD_OWNER_DONE_NS 7", lambda a: a.Owner.DONE_NS, 7),
        (
            "#define BFD_OWNER_HANDED_OVER 2",
            "#define BFD_OWNER_HANDED_OVER 5",
            lambda a: a.OwnerState.HANDED_OVER,
            5,
        ),
        (
            "#define BFD_SPREAD_MAX_CPUS 256",
            "#define BFD_SPREAD_MAX_CPUS 64",
            lambda a: a.spread_max_cpus,
            64,
        ),
        ("#define BFD_MAX_SESSIONS 4096", "#define BFD_MAX_SESSIONS 1024", lambda a: a.max_sessions, 1024),
        ("\tX(XDP_TX, xdp_tx)                 \\\n", "", lambda a: a.counters[0], "xdp_pass"),
    ],
)
def test_a_changed_header_changes_the_python_value(tmp_path: Path, old, new, read, want) -> None:
    assert read(load_abi()) != want
    assert read(load_abi(_header(tmp_path, (old, new)))) == want


def test_a_missing_name_is_one_clear_error(tmp_path: Path) -> None:
    header = _header(
        tmp_path,
        ("#define BFD_CFG_KTX 0x02 ", "/* gone */ "),
        ("#define BFD_SWEEP_CHUNK 512\n", "\n"),
    )
    with pytest.raises(KernelError) as e:
        load_abi(header)
    # One line, every missing name in it, the header named.
    msg = str(e.value)
    assert "\n" not in msg and str(header) in msg
    assert re.search(r"needs BFD_CFG_KTX, BFD_SWEEP_CHUNK\b", msg), msg
    with pytest.raises(abi.AbiError):
        abi.load(header)


def test_no_counter_list_is_one_clear_error(tmp_path: Path) -> None:
    header = _header(tmp_path, ("#define BFD_COUNTERS(X)", "#define BFD_COUNTER_LIST(X)"))
    with pytest.raises(KernelError, match=r"needs BFD_COUNTERS\b"):
        counter_names(header)


def test_a_value_defined_twice_differently_is_refused(tmp_path: Path) -> None:
    header = _header(tmp_path, ("#define BFD_EV_POLL 2", "#define BFD_EV_POLL 2\n#define BFD_EV_POLL 3"))
    with pytest.raises(KernelError, match="defined twice with different values: BFD_EV_POLL"):
        load_abi(header)


# --- RFC values: the codec is their reference, the header's copy is checked ----------


def test_the_headers_rfc_values_are_the_codecs() -> None:
    c = load_abi().constants
    assert {f.name: c[f"BFD_FLAG_{f.name}"] for f in control.Flag} == {f.name: int(f) for f in control.Flag}
    assert {s.name: c[f"BFD_STATE_{s.name}"] for s in control.State} == {
        s.name: int(s) for s in control.State
    }
    assert (c["BFD_VERSION"], c["BFD_VERSION_SHIFT"], c["BFD_STATE_SHIFT"]) == (
        control.VERSION,
        control.VERSION_SHIFT,
        control.STATE_SHIFT,
    )
    assert (c["BFD_CONTROL_LEN"], c["BFD_CONTROL_LEN_AUTH"]) == (control.MIN_LEN, control.MIN_LEN_AUTH)
    assert load_abi().ports == (netio.PORT_SINGLE_HOP, netio.PORT_MULTIHOP, netio.PORT_ECHO)
    assert load_abi().sbfd_port == netio.PORT_SBFD == 7784  # RFC 7881


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("#define BFD_FLAG_POLL 0x20", "#define BFD_FLAG_POLL 0x40"),
        ("#define BFD_STATE_UP 3", "#define BFD_STATE_UP 2"),
        ("#define BFD_CONTROL_LEN 24 ", "#define BFD_CONTROL_LEN 28 "),
        ("#define BFD_ECHO_MAGIC 0x58424645", "#define BFD_ECHO_MAGIC 0x58424531"),
    ],
)
def test_a_header_that_disagrees_with_the_rfc_codec_is_refused(tmp_path: Path, old: str, new: str) -> None:
    name = old.split()[1]
    with pytest.raises(KernelError, match=rf"{name} is 0x[0-9a-f]+, the wire codec says"):
        load_abi(_header(tmp_path, (old, new)))


def test_struct_bfd_echo_probe_is_the_echo_codecs_layout() -> None:
    body = re.search(r"struct bfd_echo_probe \{(.*?)\};", (REPO_BPF / "bfd_abi.h").read_text(), re.S)
    assert body
    kinds = re.findall(r"^\s*(__be32|__be64)\s+\w+;", body.group(1), re.M)
    assert "!4s" + "".join("I" if k == "__be32" else "Q" for k in kinds[1:]) == echo._ECHO.format
    assert load_abi().constants["BFD_ECHO_LEN"] == echo.ECHO_LEN


def test_struct_bfd_ctrl_is_the_codecs_fixed_section() -> None:
    body = re.search(r"struct bfd_ctrl \{(.*?)\};", (REPO_BPF / "bfd_abi.h").read_text(), re.S)
    assert body
    kinds = re.findall(r"^\s*(__u8|__be32)\s+\w+;", body.group(1), re.M)
    assert "!" + "".join("B" if k == "__u8" else "I" for k in kinds) == control._FIXED.format


# --- no copies: each value has one home ------------------------------------------------


def test_no_python_module_restates_an_abi_name() -> None:
    # The engine<->kernel names appear in abi.py only: every other module takes the
    # values typed from the parsed Abi (the owner record's slots and states too).
    # BFD_STATE_CHANGE is a bfddp message, not the header's.
    shared = re.compile(
        r"\bBFD_(CFG|EV|SWEEP|HANDOVER|FLAG|OWNER)_\w+|\bBFD_STATE_(ADMIN_DOWN|DOWN|INIT|UP|SHIFT)\b"
    )
    for py in ENGINE.rglob("*.py"):
        if py.name == "abi.py":
            continue
        text = py.read_text()
        assert not shared.search(text), (py.name, shared.search(text))
        assert "511) // 512" not in text and "0x20, 0x10" not in text, py.name


def test_the_programs_define_no_shared_value_of_their_own() -> None:
    for c_file in ("xdp_bfd.c", "sweep.c", "parse.h"):
        defines = re.findall(r"^#define (BFD_\w+)", (REPO_BPF / c_file).read_text(), re.M)
        shared = [
            d
            for d in defines
            if d.startswith(("BFD_FLAG_", "BFD_STATE_", "BFD_CFG_", "BFD_EV_", "BFD_SWEEP_"))
        ]
        assert not shared, (c_file, shared)


def test_the_sweep_defines_as_many_copies_as_the_header_says() -> None:
    text = (REPO_BPF / "sweep.c").read_text()
    copies = re.findall(r"^BFD_SWEEP\((\d+)\)$", text, re.M)
    assert [int(i) for i in copies] == list(range(load_abi().sweep_copies))
    watches = re.findall(r"^BFD_TICK_WATCH\((\d+)\)$", text, re.M)
    assert [int(i) for i in watches] == list(range(load_abi().tick_watch_copies))


def test_the_tick_watch_covers_every_session_and_no_more() -> None:
    a = load_abi()
    assert a.tick_watch_programs(a.max_sessions) * a.tick_watch_chunk >= a.max_sessions
    assert a.tick_watch_programs(1) == 1
    with pytest.raises(abi.AbiError, match="BFD_TICK_WATCH_COPIES x BFD_TICK_WATCH_CHUNK"):
        a.tick_watch_programs(a.tick_watch_chunk * a.tick_watch_copies + 1)


def test_xdp_walks_the_frame_with_one_parser() -> None:
    text = (REPO_BPF / "xdp_bfd.c").read_text()
    assert '#include "parse.h"' in text
    # No hand-rolled EtherType test or masked offset left: parse.h does the walking.
    assert not re.search(r"h_proto|ETH_P_\w+_BE|bounded\(|bfd\[\d\]", text)


# --- the --pin layout id: map layouts, not program code ---------------------------------


def test_the_layout_id_hashes_what_decides_the_maps(tmp_path: Path) -> None:
    src = tmp_path / "bpf"
    shutil.copytree(REPO_BPF, src)
    assert sorted(layout_sources(src)) == ["bfd_abi.h", "maps.h"]
    base = layout_id(src, ["-DBFD_MAX_SESSIONS=4096"])
    # Program code, the parser included, may change under adopted maps...
    (src / "parse.h").write_text((src / "parse.h").read_text() + "\n/* changed */\n")
    (src / "xdp_bfd.c").write_text((src / "xdp_bfd.c").read_text() + "\n/* changed */\n")
    assert layout_id(src, ["-DBFD_MAX_SESSIONS=4096"]) == base
    # ...the ABI header may not, nor a header maps.h comes to include.
    abi_h = src / "bfd_abi.h"
    abi_h.write_text(abi_h.read_text() + "\n/* changed */\n")
    changed = layout_id(src, ["-DBFD_MAX_SESSIONS=4096"])
    assert changed != base
    (src / "extra.h").write_text("struct x { int a; };\n")
    (src / "maps.h").write_text(
        (src / "maps.h")
        .read_text()
        .replace('#include "bfd_abi.h"', '#include "bfd_abi.h"\n#include "extra.h"')
    )
    assert "extra.h" in layout_sources(src)
    with_extra = layout_id(src, ["-DBFD_MAX_SESSIONS=4096"])
    (src / "extra.h").write_text("struct x { long a; };\n")
    assert layout_id(src, ["-DBFD_MAX_SESSIONS=4096"]) != with_extra


# --- the steady template the kernel compares --------------------------------------------


def test_the_steady_template_keeps_the_state_and_drops_poll_and_final() -> None:
    pkt = control.ControlPacket(state=control.State.UP, my_discr=5, your_discr=7, poll=True, demand=True)
    raw = control.encode_control(pkt)
    got = control.decode_control(steady_template(raw, load_abi().control_len))
    assert got == control.ControlPacket(state=control.State.UP, my_discr=5, your_discr=7, demand=True)
    # With an auth section (or none at all) there is no steady packet: zeros never match.
    auth = control.Auth(control.AuthType.SIMPLE, key_id=1, data=b"pw")
    assert steady_template(control.encode_control(pkt.__class__(**{**vars(pkt), "auth": auth})), 24) == bytes(
        24
    )
    assert steady_template(b"", 24) == bytes(24)


class _Events(Events):
    """The dispatch as the engine runs it; no ring to open or read."""

    def open(self) -> int:
        return -1


class _Host:
    """What of core.host.Host an Offload uses: the loop's watch and timers, the table, service, drops."""

    def __init__(self) -> None:
        self.sessions: dict[int, Entry] = {}
        self.watched: list[Any] = []
        self.timers: list[int] = []
        self.serviced: list[Entry] = []
        self.announced: list[tuple[int, Any]] = []
        self.drops: Counter = Counter()

    def watch(self, sock: Any, callback: Callback, *, read: bool = True, write: bool = False) -> None:
        self.watched.append(sock)

    def call_at(self, deadline_us: int, callback: Callback) -> None:
        self.timers.append(deadline_us)

    def service(self, entry: Entry, now: int) -> None:
        self.serviced.append(entry)

    def announce(self, entry: Entry) -> None:
        # What the engine's announce hands its listeners (the controller): the session's events.
        while (ev := entry.session.next_event()) is not None:
            self.announced.append((entry.session.local_discr, ev))

    def count_drop(self, reason: str) -> None:
        self.drops[reason] += 1


def _fast_path(a: abi.Abi, writes: list[dict], downs: list | None = None) -> SimpleNamespace:
    """A FastPath's parts as the Offload reaches them, the maps replaced by what the test reads back
    and the ring by ``events.dispatch`` (the batch a read of the ring hands on); ``downs``: the
    Downs written for the courier (slot, watch, packet)."""
    downs = [] if downs is None else downs
    state = SimpleNamespace(
        rx_packets=0, rx_bytes=0, ktx_packets=0, ktx_bytes=0, last_ktx_ns=0, last_rx_ns=0, echo_packets=0
    )
    return SimpleNamespace(
        abi=a,
        program=SimpleNamespace(attached=[], interfaces=dict),
        gate=SimpleNamespace(deadman_ns=0, heartbeat=lambda _ns: None),
        events=_Events({"event_layout": SimpleNamespace(Leaf=None)}),
        slots=SimpleNamespace(
            write_cfg=lambda _slot, kcfg: writes.append(kcfg),
            read_state=lambda _slot: state,
            write_down=lambda slot, epoch, pkt: downs.append((slot, epoch, pkt)),
        ),
    )


def test_the_offload_writes_the_flags_and_reads_the_events_the_header_defines(tmp_path: Path) -> None:
    """Not only the parse: what the offload writes into bfd_cfg.flags follows a changed header."""
    header = _header(
        tmp_path,
        ("#define BFD_CFG_ACTIVE 0x01", "#define BFD_CFG_ACTIVE 0x100"),
        ("#define BFD_CFG_KTX 0x02", "#define BFD_CFG_KTX 0x200"),
        ("#define BFD_CFG_DETECT 0x04", "#define BFD_CFG_DETECT 0x400"),
        ("#define BFD_CFG_ECHO 0x10", "#define BFD_CFG_ECHO 0x800"),
        ("#define BFD_CFG_FINAL 0x20", "#define BFD_CFG_FINAL 0x1000"),
        ("#define BFD_EV_EXPIRED 1", "#define BFD_EV_EXPIRED 7"),
    )
    writes: list[dict] = []
    session = make()
    bring_up(session, 0)
    sent: list[bytes] = []
    wire = SimpleNamespace(sport=49152, dport=3784, send=lambda data: sent.append(data) is None)
    entry = Entry(session, wire, "cli", slot=0, offloaded=True, epoch=1)
    host = _Host()
    host.sessions[session.local_discr] = entry
    fp = _fast_path(load_abi(header), writes)
    off = Offload(host, fp)
    assert host.watched == [-1] and host.timers  # the events ring is watched, the heartbeat runs
    # The ring hands the Offload the header's EXPIRED (7), not the old value.
    assert 7 in fp.events.handlers and 1 not in fp.events.handlers
    assert 7 in fp.events.ahead_handlers and 1 not in fp.events.ahead_handlers
    off.by_slot[0] = session.local_discr
    off.answers = lambda _entry: True  # type: ignore[method-assign]  # (timers aside)
    off.serviced(entry)
    assert writes[-1]["flags"] == 0x100 | 0x200 | 0x400 | 0x800 | 0x1000
    out: dict = {}
    off.session_stats(entry, out, 0)
    assert out["kernel_tx_active"] is True
    # An event whose type is the header's EXPIRED is an expiry; the old value is not.
    ev = SimpleNamespace(
        slot=0, epoch=entry.epoch, type=1, now_ns=50_000_000, last_rx_ns=0, pkt=b"", ttl=255, queued=0
    )
    fp.events.dispatch([ev])
    assert entry.last_detection_us is None and session.state == control.State.UP and not sent
    ev.type = 7
    fp.events.dispatch([ev])
    assert entry.last_detection_us == 50_000 and session.state == control.State.DOWN
    assert host.serviced[-1] is entry
    # The Down went out (Entry.send) before the machine ran, and the machine did not send it again.
    (down,) = [control.decode_control(x) for x in sent]
    assert (down.state, down.diag, down.your_discr) == (
        control.State.DOWN,
        control.Diag.CONTROL_DETECTION_TIME_EXPIRED,
        0,
    )
    assert session.datagrams_to_send(0) == []
    assert entry.user_tx_packets == 1


def _silent(host: _Host, off: Offload, order: list[tuple[str, int]], count: int) -> list[Any]:
    """``count`` sessions Up in slots 0.., each with its expiry report as the ring hands it on;
    each session's sends go into ``order``."""
    events = []
    for slot in range(count):
        session = make(discr=100 + slot)
        deliver(session, packet(control.State.DOWN, your=0), 0)
        deliver(session, packet(control.State.UP, your=session.local_discr), 1_000)
        sent(session, 1_000)
        while session.next_event() is not None:  # the bring-up's transitions, reported long ago
            pass
        wire = SimpleNamespace(
            sport=49152,
            dport=3784,
            send=lambda _data, d=session.local_discr: order.append(("send", d)) is None,
        )
        entry = Entry(session, wire, "cli", slot=slot, offloaded=True, epoch=1)
        host.sessions[session.local_discr] = entry
        off.by_slot[slot] = session.local_discr
        events.append(
            SimpleNamespace(
                slot=slot,
                epoch=1,
                type=int(off.event.EXPIRED),
                now_ns=40_000_000,
                last_rx_ns=0,
                pkt=b"",
                ttl=255,
                queued=0,
            )
        )
    return events


def test_every_down_of_one_read_leaves_then_is_announced_before_any_session_is_handled() -> None:
    """One walk that finds many peers silent: each session's Down is sent first, one per silence,
    then every transition is announced (the controller hears it), then each session is handled."""
    order: list[tuple[str, int]] = []
    host = _Host()
    host.service = lambda entry, _now: order.append(("service", entry.session.local_discr))  # type: ignore[method-assign]
    announce = host.announce

    def announced(entry: Entry) -> None:
        order.append(("announce", entry.session.local_discr))
        announce(entry)

    host.announce = announced  # type: ignore[method-assign]
    fp = _fast_path(load_abi(), [])
    off = Offload(host, fp)
    events = _silent(host, off, order, 4)
    # Two CPUs reported slot 1's silence; slot 3's report is of a watch since replaced.
    events.insert(2, SimpleNamespace(**vars(events[1])))
    events[-1].epoch = 0
    fp.events.dispatch(events)
    assert order == [
        ("send", 100),
        ("send", 101),
        ("send", 102),
        ("announce", 100),
        ("announce", 101),
        ("announce", 102),
        ("service", 100),
        ("service", 101),
        ("service", 101),
        ("service", 102),
    ]
    # What the controller heard, once per session: the transition to Down for a silence.
    assert [(d, ev.new, ev.diag) for d, ev in host.announced] == [
        (d, control.State.DOWN, control.Diag.CONTROL_DETECTION_TIME_EXPIRED) for d in (100, 101, 102)
    ]
    assert [host.sessions[d].session.state for d in (100, 101, 102, 103)] == [control.State.DOWN] * 3 + [
        control.State.UP
    ]
    # The machines did not queue the Down again, and the second report of slot 1 sent nothing.
    assert all(host.sessions[d].session.datagrams_to_send(0) == [] for d in (100, 101, 102))
    assert [host.sessions[d].user_tx_packets for d in (100, 101, 102, 103)] == [1, 1, 1, 0]


def test_a_batch_whose_announcing_failed_still_takes_every_session_down(caplog) -> None:
    """The controller's listener fails for the first session of a batch: that session is not left
    Up with its Down sent (its own handling runs its machine), and the sessions after it are
    announced as if nothing happened."""
    order: list[tuple[str, int]] = []
    host = _Host()
    calls = []

    def failing(entry: Entry) -> None:
        calls.append(entry.session.local_discr)
        if len(calls) == 1:
            raise RuntimeError("the controller's listener failed")
        _Host.announce(host, entry)

    host.announce = failing  # type: ignore[method-assign]
    fp = _fast_path(load_abi(), [])
    off = Offload(host, fp)
    events = _silent(host, off, order, 3)
    with caplog.at_level("ERROR", logger="xdp_bfd"):
        fp.events.dispatch(events)
    assert calls == [100, 101, 102]  # each report its own call: one failure costs only its session
    assert [d for d, _ in host.announced] == [101, 102]
    assert [r.getMessage() for r in caplog.records] == ["kernel-tx: handling a kernel report failed"]
    assert [host.sessions[d].session.state for d in (100, 101, 102)] == [control.State.DOWN] * 3
    assert [e.session.local_discr for e in host.serviced] == [100, 101, 102]
    # Each Down left once, ahead; the machines run later did not queue it again.
    assert order == [("send", 100), ("send", 101), ("send", 102)]
    assert all(host.sessions[d].session.datagrams_to_send(0) == [] for d in (100, 101, 102))
    assert off.ahead == {}


def test_a_failing_report_handler_costs_the_rest_of_the_batch_nothing(caplog) -> None:
    events = Events({"event_layout": SimpleNamespace(Leaf=None)})
    seen: list[tuple[str, Any]] = []

    def fail(ev: Any) -> None:
        seen.append(("on", ev.n))
        if ev.n == 1:
            raise RuntimeError("boom")

    events.on(2, fail)
    events.ahead(2, lambda evs: seen.append(("ahead", [e.n for e in evs])))
    events.on(5, lambda ev: seen.append(("other", ev.n)))
    batch = [SimpleNamespace(type=t, n=n) for n, t in enumerate((2, 2, 5, 2, 9))]
    with caplog.at_level("ERROR", logger="xdp_bfd"):
        events.dispatch(batch)
    assert seen == [("ahead", [0, 1, 3]), ("on", 0), ("on", 1), ("other", 2), ("on", 3)]
    assert [r.getMessage() for r in caplog.records] == ["kernel-tx: handling a kernel report failed"]


def test_what_the_kernel_reports_meanwhile_is_sent_ahead_of_the_next_handling() -> None:
    """Reports that reach the ring while one is handled get their ahead handler before the next one's."""
    events = Events({"event_layout": SimpleNamespace(Leaf=None)})
    seen: list[tuple[str, Any]] = []
    later = [[], [SimpleNamespace(type=2, n=10), SimpleNamespace(type=2, n=11)], [], []]
    events.on(2, lambda ev: seen.append(("on", ev.n)))
    events.ahead(2, lambda evs: seen.append(("ahead", [e.n for e in evs])))
    events.dispatch([SimpleNamespace(type=2, n=0), SimpleNamespace(type=2, n=1)], read=lambda: later.pop(0))
    assert seen == [
        ("ahead", [0, 1]),
        ("on", 0),
        ("on", 1),
        ("ahead", [10, 11]),
        ("on", 10),
        ("on", 11),
    ]
    assert later == []  # read again after every handler, and no more once the queue was empty


def test_every_next_handler_goes_before_any_on_and_a_report_read_meanwhile_is_sent_after_one() -> None:
    """The three stages: a report read while the controller hears of an earlier one has its Down
    (ahead) sent before the next report (next), and every report before any session's handling (on)."""
    events = Events({"event_layout": SimpleNamespace(Leaf=None)})
    seen: list[tuple[str, Any]] = []
    later = [[SimpleNamespace(type=2, n=10)], [], [], [], [], [], []]
    events.ahead(2, lambda evs: seen.append(("ahead", [e.n for e in evs])))
    events.next(2, lambda ev: seen.append(("next", ev.n)))
    events.on(2, lambda ev: seen.append(("on", ev.n)))
    events.on(5, lambda ev: seen.append(("other", ev.n)))  # a type without a next handler
    batch = [SimpleNamespace(type=2, n=0), SimpleNamespace(type=5, n=1), SimpleNamespace(type=2, n=2)]
    events.dispatch(batch, read=lambda: later.pop(0))
    assert seen == [
        ("ahead", [0, 2]),
        ("next", 0),
        ("ahead", [10]),  # read after the first report: its Down before the second report
        ("next", 2),
        ("next", 10),
        ("on", 0),
        ("other", 1),
        ("on", 2),
        ("on", 10),
    ]
    assert later == []


def test_no_next_handler_waits_for_a_later_turn(monkeypatch) -> None:
    """Past the turn's bound the ``on`` handlers wait; a ``next`` handler never does, also for a report
    read during the last ``on`` handler (its Down left: its transition must follow in the same step)."""
    monkeypatch.setattr(reports, "TURN_S", 0.0)
    events = Events({"event_layout": SimpleNamespace(Leaf=None)})
    seen: list[tuple[str, Any]] = []
    later = [[], [], [SimpleNamespace(type=2, n=10)], []]  # a read after each handler
    events.ahead(2, lambda evs: seen.append(("ahead", [e.n for e in evs])))
    events.next(2, lambda ev: seen.append(("next", ev.n)))
    events.on(2, lambda ev: seen.append(("on", ev.n)))
    first = [SimpleNamespace(type=2, n=0), SimpleNamespace(type=2, n=1)]
    assert events.dispatch(first, read=lambda: later.pop(0)) is True
    assert seen == [("ahead", [0, 1]), ("next", 0), ("next", 1)]  # past the bound, both still ran
    assert events.dispatch([], read=lambda: later.pop(0)) is True
    assert seen[3:] == [("on", 0), ("ahead", [10]), ("next", 10)]
    assert later == []
    assert events.dispatch([], read=lambda: []) is True
    assert events.dispatch([], read=lambda: []) is False
    assert seen[6:] == [("on", 1), ("on", 10)]


def test_bcc_is_imported_only_to_compile() -> None:
    # Without --kernel-tx nothing compiles, so nothing may load bcc: not the
    # dataplane, not the fast path's or --pin's modules, imported or not.
    probe = (
        "import sys, xdp_bfd.app, xdp_bfd.dplane, xdp_bfd.fastpath.kernel, xdp_bfd.pin.startup;"
        "print('bcc' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False"


def _signed(auth: AuthConfig, pkt: control.ControlPacket, seq: int | None) -> bytes:
    signed = control.Auth(auth.type, auth.key_id, b"", seq if auth.keyed else None)
    return control.encode_control(replace(pkt, auth=signed), secret=auth.secret)


def _auth_session(auth: AuthConfig) -> tuple[Any, Entry, Offload, list[dict], int]:
    """An authenticated session brought Up by signed packets, as the engine hands them on."""
    writes: list[dict] = []
    session = make(auth=auth)
    sent: list[bytes] = []
    wire = SimpleNamespace(sport=49152, dport=3784, send=lambda data: sent.append(data) is None)
    entry = Entry(session, wire, "cli", slot=0, offloaded=True, epoch=1)
    host = _Host()
    host.sessions[session.local_discr] = entry
    off = Offload(host, _fast_path(load_abi(), writes))
    now = 0
    for state, your, seq in ((control.State.DOWN, 0, 100), (control.State.UP, session.local_discr, 101)):
        raw = _signed(auth, control.ControlPacket(state=state, my_discr=9, your_discr=your), seq)
        session.receive(control.decode_control(raw), raw, now, ttl=255)
        entry.last_rx_raw = raw
        off.serviced(entry)
        now += 1_000
    assert session.state == control.State.UP
    return session, entry, off, writes, now


@pytest.mark.parametrize(
    "auth_type", [control.AuthType.SIMPLE, control.AuthType.KEYED_MD5, control.AuthType.KEYED_SHA1]
)
def test_an_authenticated_session_hands_the_kernel_only_the_packet_it_verified(auth_type) -> None:
    auth = AuthConfig(auth_type, 3, b"0123456789abcdef")
    session, entry, off, writes, now = _auth_session(auth)
    f = off.cfg_flag
    w = writes[-1]
    # The sweep watches it, and may count as alive only the last verified packet and the
    # session's verifications: both are in the kernel's config.
    assert w["flags"] & f.DETECT and w["flags"] & f.AUTH and session.detection_external
    assert w["expect"] == entry.last_rx_raw and w["expect_len"] == len(entry.last_rx_raw)
    assert (w["auth_type"], w["auth_key_id"]) == (int(auth_type), 3)
    assert w["verified_ns"] == session.last_rx_us * 1000
    # A keyed type's sequence is known once a packet was verified: older ones die in the kernel.
    assert bool(w["flags"] & f.AUTH_SEQ) == auth.keyed
    assert w["auth_seq"] == (101 if auth.keyed else 0)
    assert not w["flags"] & (f.KTX | f.FINAL)  # a reply would need a digest: never built in XDP
    assert w["reply"] == b""  # so no template for one either
    # The peer's Poll is verified, but a packet with P or F is no steady one: nothing is accepted.
    raw = _signed(
        auth,
        control.ControlPacket(state=control.State.UP, my_discr=9, your_discr=session.local_discr, poll=True),
        102,
    )
    session.receive(control.decode_control(raw), raw, now, ttl=255)
    entry.last_rx_raw = raw
    off.serviced(entry)
    assert writes[-1]["expect"] == b"" and writes[-1]["expect_len"] == 0
    # Another key: what was verified under the old one is no longer the kernel's to accept.
    other = AuthConfig(auth_type, 4, b"0123456789abcdef")
    entry.last_rx_raw = _signed(
        auth, control.ControlPacket(state=control.State.UP, my_discr=9, your_discr=session.local_discr), 103
    )
    session.set_config(replace(session.config, auth=other), now)
    off.serviced(entry)
    assert writes[-1]["expect_len"] == 0 and not writes[-1]["flags"] & f.AUTH_SEQ


@pytest.mark.parametrize(
    "auth_type", [control.AuthType.METICULOUS_KEYED_MD5, control.AuthType.METICULOUS_KEYED_SHA1]
)
def test_a_meticulous_session_keeps_its_liveness_in_userspace(auth_type) -> None:
    """Every meticulous packet carries a new number: none repeats for the kernel to accept."""
    session, _entry, off, writes, _now = _auth_session(AuthConfig(auth_type, 3, b"0123456789abcdef"))
    f = off.cfg_flag
    w = writes[-1]
    assert w["flags"] & f.AUTH and not w["flags"] & f.DETECT and not session.detection_external
    assert w["expect_len"] == 0
    # Replays of an older number still die in the kernel.
    assert w["flags"] & f.AUTH_SEQ and w["auth_seq"] == 101
    # The session's own detection timer runs (a deadline after its last verified packet).
    assert session.get_timer() is not None


def test_the_template_is_signed_at_the_current_number_without_advancing_it() -> None:
    for auth_type in control.AuthType:
        if auth_type == control.AuthType.NONE:
            continue
        auth = AuthConfig(auth_type, 3, b"0123456789abcdef")
        session, _entry, _off, _writes, now = _auth_session(auth)
        session.datagrams_to_send(now)  # what the handshake queued has its numbers already
        first = session.template(poll=False)
        assert session.template(poll=False) == first  # the number stays put
        pkt = control.decode_control(first)
        assert pkt.auth is not None and control.verify_auth(first, pkt, auth.secret)
        assert (pkt.state, pkt.poll) == (control.State.UP, False)
        polled = control.decode_control(session.template(poll=True))
        assert polled.poll and polled.auth is not None
        if auth.keyed:
            # The session's own next packet carries the same number, and moves it on.
            session.start_poll(now)
            due = session.get_timer()
            assert due is not None
            session.handle_timer(due)
            own = control.decode_control(session.datagrams_to_send(due)[0])
            assert own.auth is not None and own.auth.sequence == pkt.auth.sequence
            moved = control.decode_control(session.template(poll=False))
            assert moved.auth is not None and moved.auth.sequence == (pkt.auth.sequence + 1) % (1 << 32)
    plain = make()
    assert plain.template(poll=False) == control.encode_control(plain.current_packet())


def test_reports_past_a_turns_bound_wait_for_the_next_turn_with_their_ahead_handlers_run(monkeypatch) -> None:
    """A turn hands reports to their handlers for TURN_S at most; what is read meanwhile has its
    ahead handler run at once and waits, with the rest, for the next call (first in line)."""
    monkeypatch.setattr(reports, "TURN_S", 0.0)  # every turn: one report's handler, then its reads
    events = Events({"event_layout": SimpleNamespace(Leaf=None)})
    seen: list[tuple[str, Any]] = []
    later = [[SimpleNamespace(type=2, n=10)], [], [SimpleNamespace(type=2, n=11)]]
    events.on(2, lambda ev: seen.append(("on", ev.n)))
    events.ahead(2, lambda evs: seen.append(("ahead", [e.n for e in evs])))
    first = [SimpleNamespace(type=2, n=0), SimpleNamespace(type=2, n=1)]
    assert events.dispatch(first, read=lambda: later.pop(0)) is True
    assert seen == [("ahead", [0, 1]), ("on", 0), ("ahead", [10])]
    assert events.dispatch([], read=lambda: later.pop(0)) is True
    assert events.dispatch([], read=lambda: later.pop(0)) is True
    assert seen[3:] == [("on", 1), ("on", 10), ("ahead", [11])]
    assert events.dispatch([], read=lambda: []) is False
    assert seen[6:] == [("on", 11)]
    assert later == []


def test_a_reads_downs_go_to_the_kernel_a_frame_at_a_time_and_what_it_cannot_take_leaves_from_here() -> None:
    """With the transmit clock's loop: a read's Downs are handed over a frame's worth at a time (no
    send of the session's own, the machine does not queue it again); one whose frame the loop
    refused is sent by its session, once."""
    order: list[tuple[str, int]] = []
    host = _Host()
    fp = _fast_path(load_abi(), [])
    off = Offload(host, fp)
    handed: list[list[tuple[int, bytes]]] = []

    def kernel(downs: list[tuple[int, bytes]]) -> list[int]:
        handed.append(list(downs))
        return [last] if last in dict(downs) else []  # the second frame was refused for the last slot

    n = fp.abi.down_batch + 2
    last = n - 1
    off.kernel_downs = kernel
    events = _silent(host, off, order, n)
    d = [host.sessions[100 + slot] for slot in range(n)]
    downs = [e.session.expiry_datagram() for e in d]
    fp.events.dispatch(events)
    # A frame's worth, then the rest; each Down the bytes its machine would have sent.
    batch = fp.abi.down_batch
    assert handed == [[(s, downs[s]) for s in range(batch)], [(s, downs[s]) for s in range(batch, n)]]
    assert {control.decode_control(x).diag for x in downs} == {control.Diag.CONTROL_DETECTION_TIME_EXPIRED}
    assert order == [("send", 100 + last)]
    assert [e.user_tx_packets for e in d] == [0] * last + [1]
    assert [e.session.state for e in d] == [control.State.DOWN] * n
    assert all(e.session.datagrams_to_send(0) == [] for e in d)


def test_downs_the_sweep_queued_leave_from_the_courier_and_the_rest_as_before() -> None:
    """An expiry whose Down the sweep queued for the kernel's courier (bfd_event.queued): neither a
    send nor a frame of the engine's, and the machine does not queue it again; in the same read an
    expiry the sweep could not queue goes the frame's way."""
    order: list[tuple[str, int]] = []
    host = _Host()
    fp = _fast_path(load_abi(), [])
    off = Offload(host, fp)
    handed: list[list[tuple[int, bytes]]] = []
    off.kernel_downs = lambda downs: handed.append(list(downs)) or []
    events = _silent(host, off, order, 3)
    events[0].queued = events[2].queued = 1
    d = [host.sessions[100 + slot] for slot in range(3)]
    down = d[1].session.expiry_datagram()
    fp.events.dispatch(events)
    assert handed == [[(1, down)]] and order == []
    assert [e.session.state for e in d] == [control.State.DOWN] * 3
    assert all(e.session.datagrams_to_send(0) == [] for e in d)
    assert [e.user_tx_packets for e in d] == [0, 0, 0]


def test_the_courier_gets_each_watchs_down_before_the_kernel_watches_with_it() -> None:
    """Written once per watch and configuration (down_pkt), ahead of the config that arms the watch."""
    writes: list[dict] = []
    downs: list[tuple[int, int, bytes | None]] = []
    fp = _fast_path(load_abi(), writes, downs)
    calls: list[str] = []
    fp.slots.write_cfg = lambda _slot, kcfg: calls.append("cfg") or writes.append(kcfg)
    fp.slots.write_down = lambda slot, epoch, pkt: calls.append("down") or downs.append((slot, epoch, pkt))
    host = _Host()
    session = make()
    entry = Entry(session, SimpleNamespace(sport=49152, dport=3784), "cli", slot=2, offloaded=True, epoch=1)
    host.sessions[session.local_discr] = entry
    off = Offload(host, fp)
    off.serviced(entry)
    assert downs == [] and not writes[-1]["flags"] & int(fp.abi.CfgFlag.DETECT)  # Down: nothing watched
    bring_up(session, 0)
    off.serviced(entry)
    assert calls[-2:] == ["down", "cfg"] and writes[-1]["flags"] & int(fp.abi.CfgFlag.DETECT)
    assert downs == [(2, 2, session.expiry_datagram())] and writes[-1]["epoch"] == 2
    off.serviced(entry)
    assert len(downs) == 1  # nothing changed
    session.set_config(replace(session.config, detect_mult=5), 1_000)
    off.serviced(entry)
    assert (
        downs[-1] == (2, 2, session.expiry_datagram())
        and control.decode_control(downs[-1][2]).detect_mult == 5
    )
    assert len(downs) == 2
