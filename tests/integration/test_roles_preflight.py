"""A bad variable fails in argument_specs or preflight, names the variable, and changes nothing.

Each case runs a real ansible-playbook against a podman container booting
systemd (the lab's bookworm image, no network: nothing here may need one).
"Changed nothing" is judged twice: the play recap reports 0 changed, and a
probe of everything the roles write (sysctl.d, /etc/xdp-bfd, /opt/xdp-bfd,
the units, FRR's daemons file, the live reserved ports) reads the same as
before. The witness that moves comes last: the same playbook with valid
variables changes the probe, so an unchanged probe means something.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.podman import Container, ensure_images, run_playbook

# The first test may build the bookworm image from nothing (2-3.5 min here).
pytestmark = pytest.mark.timeout(900)

REPO = Path(__file__).resolve().parents[2]
IMAGE = "localhost/xdp-bfd-bookworm"

ROLE_PLAY = """\
- name: One role
  hosts: bfd_routers
  gather_facts: true
  roles:
    - role: xdp_bfd.fastpath.{role}
"""

PROBE = (
    "ls -la /etc/sysctl.d /etc/xdp-bfd /opt/xdp-bfd /etc/systemd/system/xdp-bfd.service 2>&1;"
    " md5sum /etc/frr/daemons; cat /proc/sys/net/ipv4/ip_local_reserved_ports;"
    " systemctl is-enabled xdp-bfd.service 2>&1; true"
)


@pytest.fixture(scope="module")
def host() -> Iterator[Container]:
    ensure_images("bookworm")
    with Container(f"xbt-{os.getpid()}-roles", IMAGE) as c:
        yield c


def probe(c: Container) -> str:
    return c.exec("sh", "-c", PROBE).stdout


def run_role(tmp_path: Path, c: Container, role: str, extra: dict[str, Any]) -> Any:
    return run_playbook(tmp_path, c.name, ROLE_PLAY.format(role=role), extra)


def assert_refused(result: Any, variable: str, before: str, after: str) -> None:
    assert result.rc != 0, f"the play passed:\n{result.output[-3000:]}"
    assert result.failures, "the play failed without a failed task"
    assert any(variable in msg for msg in result.failures), f"no failure names {variable}: {result.failures}"
    assert result.stats.get("changed", 0) == 0, f"changed {result.stats} before failing ({result.tasks})"
    assert after == before, "the host changed although the play failed"


# A multihop peer with echo: FRR has no echo on multihop sessions.
MULTIHOP_ECHO = {"peer": "198.19.0.2", "local_address": "198.19.0.1", "multihop": True, "echo_mode": True}
# The mistyped interface of issue 20: FRR takes it and the peer never comes up.
NO_SUCH_IF = {"peer": "198.19.0.2", "interface": "nosuch0"}

# (role, extra vars, the variable the message must name)
CASES = [
    pytest.param("host_tuning", {"xdp_bfd_dplane_port": 70000}, "xdp_bfd_dplane_port", id="port-above-65535"),
    pytest.param("host_tuning", {"xdp_bfd_dplane_port": 0}, "xdp_bfd_dplane_port", id="port-zero"),
    pytest.param(
        "host_tuning", {"xdp_bfd_dplane_port": 65500}, "xdp_bfd_dplane_port", id="port-in-engine-source-range"
    ),
    pytest.param(
        "host_tuning", {"xdp_bfd_dplane_port": "bfd"}, "xdp_bfd_dplane_port", id="port-not-a-number"
    ),
    pytest.param(
        "host_tuning",
        {"xdp_bfd_tuning_interfaces": [{"name": "nosuch0"}]},
        "xdp_bfd_tuning_interfaces",
        id="unknown-tuning-interface",
    ),
    pytest.param(
        "host_tuning",
        {"xdp_bfd_tuning_interfaces": [{"flow_control_off": True}]},
        "name",
        id="tuning-interface-without-name",
    ),
    pytest.param(
        "engine", {"xdp_bfd_interfaces": ["nosuch0"]}, "xdp_bfd_interfaces", id="unknown-xdp-interface"
    ),
    pytest.param("engine", {"xdp_bfd_xdp_mode": "turbo"}, "xdp_bfd_xdp_mode", id="xdp-mode-choice"),
    pytest.param(
        "engine", {"xdp_bfd_dplane_port": 65535}, "xdp_bfd_dplane_port", id="engine-port-reserved-range"
    ),
    pytest.param("engine", {"xdp_bfd_dplane_mode": "both"}, "xdp_bfd_dplane_mode", id="dplane-mode-choice"),
    pytest.param(
        "engine",
        {"xdp_bfd_sched_deadline": "10000/1000"},
        "xdp_bfd_sched_deadline",
        id="deadline-over-period",
    ),
    pytest.param(
        "frr", {"xdp_bfd_sessions_wait": "soon"}, "xdp_bfd_sessions_wait", id="sessions-wait-choice"
    ),
    pytest.param("frr", {"xdp_bfd_dplane_port": 99999}, "xdp_bfd_dplane_port", id="frr-port-above-65535"),
    # bfd_session's own rules, checked offline (state rendered) before FRR is even installed.
    pytest.param(
        "frr", {"xdp_bfd_sessions": [MULTIHOP_ECHO]}, "xdp_bfd_sessions", id="session-echo-on-multihop"
    ),
    pytest.param(
        "frr",
        {"xdp_bfd_sessions": [{"peer": "198.19.0.2", "receive_interval": 5}]},
        "xdp_bfd_sessions",
        id="session-interval-below-10ms",
    ),
    pytest.param("frr", {"xdp_bfd_sessions": [NO_SUCH_IF]}, "nosuch0", id="session-unknown-interface"),
]


@pytest.mark.parametrize(("role", "extra", "variable"), CASES)
def test_bad_variable_fails_before_any_change(
    tmp_path: Path, host: Container, role: str, extra: dict[str, Any], variable: str
) -> None:
    before = probe(host)
    result = run_role(tmp_path, host, role, extra)
    assert_refused(result, variable, before, probe(host))


SITE_CASES = [
    pytest.param({"xdp_bfd_xdp_mode": "turbo"}, "xdp_bfd_xdp_mode", id="engine-variable"),
    pytest.param({"xdp_bfd_sessions": [MULTIHOP_ECHO]}, "xdp_bfd_sessions", id="session-echo-on-multihop"),
    pytest.param({"xdp_bfd_sessions": [NO_SUCH_IF]}, "nosuch0", id="session-unknown-interface"),
    pytest.param(
        {"xdp_bfd_sessions": [{"peer": "198.19.0.2", "intervall": 10}]}, "intervall", id="session-unknown-key"
    ),
]


@pytest.mark.parametrize(("extra", "variable"), SITE_CASES)
def test_site_refuses_bad_input_before_host_tuning_changes_anything(
    tmp_path: Path, host: Container, extra: dict[str, Any], variable: str
) -> None:
    # site.yml runs host_tuning first: a mistake in a later role's variables,
    # the BFD sessions included, must still stop the first play before the
    # first role writes anything.
    before = probe(host)
    result = run_playbook(tmp_path, host.name, str(REPO / "playbooks" / "site.yml"), extra)
    assert_refused(result, variable, before, probe(host))
    assert "Reserve the dataplane port" not in " ".join(result.tasks), result.tasks


PREFLIGHT_PLAY = """\
- name: The frr role's preflight alone
  hosts: bfd_routers
  gather_facts: true
  tasks:
    - name: Preflight
      ansible.builtin.include_role:
        name: xdp_bfd.fastpath.frr
        tasks_from: preflight
"""


def test_valid_sessions_pass_the_preflight(tmp_path: Path, host: Container) -> None:
    # The witness for the session cases: the same checks let a good peer
    # through (its interface exists - the container has only lo -, its values are FRR's to take).
    good = {"peer": "198.19.0.2", "local_address": "198.19.0.1", "interface": "lo", "receive_interval": 100}
    multihop = {"peer": "198.19.9.2", "local_address": "198.19.0.1", "multihop": True, "minimum_ttl": 250}
    extra = {"xdp_bfd_sessions": [good, multihop], "xdp_bfd_dplane_mode": "connect"}
    result = run_playbook(tmp_path, host.name, PREFLIGHT_PLAY, extra)
    assert result.rc == 0, result.failures or result.output[-3000:]
    assert "xdp_bfd.fastpath.frr : The sessions are valid BFD peers" in result.tasks
    assert "xdp_bfd.fastpath.frr : Every session's interface exists" in result.tasks


def test_reserved_port_in_engine_range_on_the_host_is_refused(tmp_path: Path, host: Container) -> None:
    # Not a variable but the host's own state: a reservation inside 65472-65535
    # would block the engine's source-port binds.
    host.exec("sysctl", "-q", "-w", "net.ipv4.ip_local_reserved_ports=65500")
    try:
        before = probe(host)
        result = run_role(tmp_path, host, "host_tuning", {})
        assert_refused(result, "ip_local_reserved_ports", before, probe(host))
    finally:
        host.exec("sysctl", "-q", "-w", "net.ipv4.ip_local_reserved_ports=")


def test_valid_variables_do_change_the_host(tmp_path: Path, host: Container) -> None:
    # The witness for every case above: with valid variables the same role
    # writes what the probe reads. Runs last (file order) on the shared host.
    before = probe(host)
    result = run_role(tmp_path, host, "host_tuning", {"xdp_bfd_dplane_port": 50799})
    assert result.rc == 0, result.failures or result.output[-3000:]
    assert result.stats.get("changed", 0) > 0
    after = probe(host)
    assert after != before
    assert "50-xdp-bfd.conf" in after
    assert "50799" in host.exec("cat", "/proc/sys/net/ipv4/ip_local_reserved_ports").stdout
