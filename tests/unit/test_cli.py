"""Command-line contract: the spellings DESIGN.md fixes, one-line usage errors."""

from __future__ import annotations

import ipaddress

import pytest

from xdp_bfd.cli import main, parse_args
from xdp_bfd.core.config import ReflectorConfig
from xdp_bfd.core.errors import EXIT_USAGE, UsageError
from xdp_bfd.dplane.address import DplaneAddress, parse_dplane_address
from xdp_bfd.dplane.peer import default_allowed


@pytest.mark.parametrize(
    ("text", "want", "bfdd"),
    [
        ("ipv4:127.0.0.1:50700", DplaneAddress("ipv4", "127.0.0.1", 50700), "ipv4c:127.0.0.1:50700"),
        ("ipv4:127.0.0.1", DplaneAddress("ipv4", "127.0.0.1", 50700), "ipv4c:127.0.0.1:50700"),
        ("ipv6:[::1]:50701", DplaneAddress("ipv6", "::1", 50701), "ipv6c:[::1]:50701"),
        ("ipv6:[::1]", DplaneAddress("ipv6", "::1", 50700), "ipv6c:[::1]:50700"),
        ("unix:/run/bfdd.sock", DplaneAddress("unix", "/run/bfdd.sock", 0), "unixc:/run/bfdd.sock"),
    ],
)
def test_dplane_addresses_use_bfdd_spelling(text, want, bfdd):
    got = parse_dplane_address(text)
    assert got == want
    assert got.bfdd_client_form() == bfdd


@pytest.mark.parametrize(
    "text",
    [
        "tcp:127.0.0.1:1",
        "ipv4:localhost:1",
        "ipv4:127.0.0.1:0",
        "ipv4:127.0.0.1:70000",
        "ipv6:::1",
        "ipv6:[127.0.0.1]",
        "ipv4:::1",
        "unix:",
        "127.0.0.1:50700",
    ],
)
def test_bad_dplane_addresses(text):
    with pytest.raises(UsageError):
        parse_dplane_address(text)


def test_dplane_port_is_short_for_listen_on_loopback():
    a = parse_args(["--dplane", "50700"])
    assert (a.dplane_mode, a.dplane_addr) == ("listen", DplaneAddress("ipv4", "127.0.0.1", 50700))
    a = parse_args(["--dplane-connect", "ipv4:127.0.0.1:50701"])
    assert (a.dplane_mode, a.dplane_addr.port) == ("connect", 50701)


def test_dplane_allow_resolves_names_and_uids_at_start():
    """Who may be the dataplane: frr and root by default; the option's names resolved now."""
    a = parse_args(["--dplane", "50700"])
    assert a.dplane_allow == default_allowed() and 0 in a.dplane_allow
    a = parse_args(["--dplane-connect", "ipv4:127.0.0.1:50700", "--dplane-allow", "nobody,0,997"])
    assert a.dplane_allow == (65534, 0, 997)


def test_positional_session_and_defaults():
    a = parse_args(["198.19.0.1", "198.19.0.2"])
    assert (a.local, a.peer) == (ipaddress.ip_address("198.19.0.1"), ipaddress.ip_address("198.19.0.2"))
    assert (a.dp_hold, a.deadman_us, a.demand_poll_us, a.xdp_mode) == (0, 3_000_000, 1_000_000, "auto")
    assert a.kernel_tx == ()
    assert parse_args(["--sessions", "f.yml", "--kernel-tx", "eth0,eth1"]).kernel_tx == ("eth0", "eth1")
    assert parse_args(["--dplane", "1", "--sched-deadline", "1000/10000"]).sched_deadline == (1000, 10000)
    assert a.succeed is None and parse_args(["--dplane", "1", "--succeed", "4242"]).succeed == 4242


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["198.19.0.1"],
        ["198.19.0.1", "fd00:bfd::2"],
        ["198.19.0.1", "not-an-ip"],
        ["--dplane", "1", "--dplane-connect", "ipv4:127.0.0.1:2"],
        ["--dplane", "0"],
        ["--dplane", "1", "--dp-hold", "-1"],
        ["--dplane", "1", "--sched-deadline", "2000/1000"],
        ["--dplane", "1", "--xdp-mode", "turbo"],
        ["--dplane", "1", "--dplane-allow", "no-such-user-xbf"],
        ["--dplane", "1", "--dplane-allow", "root,,nobody"],
        ["198.19.0.1", "198.19.0.2", "--dplane-allow", "root"],
        ["--dplane", "1", "--succeed", "0"],
        ["--dplane", "1", "--succeed", "123", "--pin", "/run/xdp-bfd-pin"],
        ["--no-such-option"],
    ],
)
def test_usage_errors_exit_2_in_one_line(argv, capsys):
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("xdp-bfd: ") and err.count("\n") == 1, err


def test_sbfd_reflector_takes_a_list_of_discriminators():
    opts = parse_args(["--kernel-tx", "veth0", "--sbfd-reflector", "456,7"])
    assert opts.sbfd_reflectors == (ReflectorConfig(456), ReflectorConfig(7))
    assert parse_args(["--sessions", "s.yml"]).sbfd_reflectors == ()


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--sbfd-reflector", "456"], "--sbfd-reflector is answered in XDP only: it needs --kernel-tx"),
        (["--kernel-tx", "v", "--sbfd-reflector", "0"], "--sbfd-reflector: expected a discriminator"),
        (["--kernel-tx", "v", "--sbfd-reflector", "1,,2"], "--sbfd-reflector: an empty discriminator"),
        (["--kernel-tx", "v", "--sbfd-reflector", "3,3"], "discriminator 3 is already given by --sbfd"),
    ],
)
def test_sbfd_reflector_usage_errors(argv, says):
    with pytest.raises(UsageError) as e:
        parse_args(argv)
    assert says in str(e.value)
