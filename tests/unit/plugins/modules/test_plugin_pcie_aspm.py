"""pcie_aspm against a fake sysfs tree and faked lspci/setpci (pciutils 3.9 output)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible_collections.xdp_bfd.fastpath.plugins.modules import pcie_aspm
from fastpath_modtest import Cmd, run_case

LSPCI, SETPCI = "/usr/bin/lspci", "/usr/bin/setpci"
NIC, ROOT = "0000:03:00.0", "0000:00:1c.0"


def lspci_nic(aspm: str) -> str:
    """``lspci -vvv -s 0000:03:00.0`` of an Intel I210 (trimmed to the capability that matters)."""
    return (
        "03:00.0 Ethernet controller: Intel Corporation I210 Gigabit Network Connection (rev 03)\n"
        "\tSubsystem: Intel Corporation I210 Gigabit Network Connection\n"
        "\tControl: I/O+ Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- SERR- "
        "FastB2B- DisINTx+\n"
        "\tCapabilities: [a0] Express (v2) Endpoint, MSI 00\n"
        "\t\tDevCap:\tMaxPayload 512 bytes, PhantFunc 0, Latency L0s <512ns, L1 <64us\n"
        "\t\t\tExtTag- AttnBtn- AttnInd- PwrInd- RBE+ FLReset+ SlotPowerLimit 0.000W\n"
        "\t\tLnkCap:\tPort #0, Speed 2.5GT/s, Width x1, ASPM L0s L1, Exit Latency L0s <2us, L1 <16us\n"
        "\t\t\tClockPM- Surprise- LLActRep- BwNot- ASPMOptComp+\n"
        f"\t\tLnkCtl:\tASPM {aspm}; RCB 64 bytes, Disabled- CommClk+\n"
        "\t\t\tExtSynch- ClockPM- AutWidDis- BWInt- AutBWInt-\n"
        "\t\tLnkSta:\tSpeed 2.5GT/s (ok), Width x1 (ok)\n"
        "\t\t\tTrErr- Train- SlotClk+ DLActive- BWMgmt- ABWMgmt-\n"
        "\t\tLnkCtl2: Target Link Speed: 2.5GT/s, EnterCompliance- SpeedDis-\n"
        "\tKernel driver in use: igb\n"
        "\tKernel modules: igb\n\n"
    )


def lspci_root(aspm: str) -> str:
    return (
        "00:1c.0 PCI bridge: Intel Corporation Sunrise Point-H PCI Express Root Port #1 (rev f1) "
        "(prog-if 00 [Normal decode])\n"
        "\tCapabilities: [40] Express (v2) Root Port (Slot+), MSI 00\n"
        "\t\tLnkCap:\tPort #1, Speed 8GT/s, Width x1, ASPM L0s L1, Exit Latency L0s <1us, L1 <16us\n"
        "\t\t\tClockPM- Surprise- LLActRep+ BwNot+ ASPMOptComp+\n"
        f"\t\tLnkCtl:\tASPM {aspm}; RCB 64 bytes, Disabled- CommClk+\n"
        "\t\t\tExtSynch- ClockPM- AutWidDis- BWInt- AutBWInt-\n"
        "\t\tLnkSta:\tSpeed 2.5GT/s (downgraded), Width x1 (ok)\n"
        "\tKernel driver in use: pcieport\n\n"
    )


LSPCI_VIRTIO = (
    "00:03.0 Ethernet controller: Red Hat, Inc. Virtio network device\n"
    "\tSubsystem: Red Hat, Inc. Device 0001\n"
    "\tControl: I/O+ Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- SERR- "
    "FastB2B- DisINTx-\n"
    "\tKernel driver in use: virtio-pci\n\n"
)
LSPCI_DENIED = (
    "03:00.0 Ethernet controller: Intel Corporation I210 Gigabit Network Connection (rev 03)\n"
    "\tSubsystem: Intel Corporation I210 Gigabit Network Connection\n"
    "\tCapabilities: <access denied>\n"
    "\tKernel driver in use: igb\n\n"
)


def read(bdf: str) -> list[str]:
    return [LSPCI, "-vvv", "-s", bdf]


def reg(bdf: str) -> list[str]:
    return [SETPCI, "-s", bdf, "CAP_EXP+10.w"]


def clear(bdf: str, mask: str = "2") -> list[str]:
    return [SETPCI, "-s", bdf, f"CAP_EXP+10.w=0:{mask}"]


@pytest.fixture
def sysfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """/sys with eth1 (I210 behind a root port), eth0 (virtio on the root bus), veth0, eth7 (platform)."""
    devices = tmp_path / "devices"
    net = tmp_path / "class" / "net"
    i210 = devices / "pci0000:00" / ROOT / NIC
    virtio = devices / "pci0000:00" / "0000:00:03.0" / "virtio2"
    platform = devices / "platform" / "soc" / "ethernet0"
    for d in (i210, virtio, platform):
        d.mkdir(parents=True)
    for name, target in (("eth1", i210), ("eth0", virtio), ("eth7", platform), ("veth0", None)):
        (net / name).mkdir(parents=True)
        if target is not None:
            (net / name / "device").symlink_to(target)
    monkeypatch.setattr(pcie_aspm, "SYS_CLASS_NET", str(net))
    return tmp_path


BOTH = {"function": NIC, "upstream": ROOT, "root_port": ROOT}

CASES: list[dict[str, Any]] = [
    {
        "id": "l1-on-nic-and-root-port",
        "params": {"interface": "eth1"},
        "commands": [
            Cmd(read(NIC), out=lspci_nic("L1 Enabled")),
            Cmd(reg(NIC), out="0042\n"),
            Cmd(clear(NIC)),
            Cmd(read(NIC), out=lspci_nic("Disabled")),
            Cmd(read(ROOT), out=lspci_root("L1 Enabled")),
            Cmd(reg(ROOT), out="0042\n"),
            Cmd(clear(ROOT)),
            Cmd(read(ROOT), out=lspci_root("Disabled")),
        ],
        "expect": {
            "changed": True,
            "pci": BOTH,
            "commands": [clear(NIC), clear(ROOT)],
            "devices": [
                {
                    "bdf": NIC,
                    "role": "function",
                    "supported": True,
                    "changed": True,
                    "aspm_before": "L1 Enabled",
                    "aspm_after": "Disabled",
                    "lnkctl_before": "0x0042",
                    "lnkctl_after": "0x0040",
                },
                {
                    "bdf": ROOT,
                    "role": "upstream",
                    "supported": True,
                    "changed": True,
                    "aspm_before": "L1 Enabled",
                    "aspm_after": "Disabled",
                    "lnkctl_before": "0x0042",
                    "lnkctl_after": "0x0040",
                },
            ],
        },
    },
    {
        "id": "check-mode-reads-only",
        "params": {"interface": "eth1"},
        "check_mode": True,
        "commands": [
            Cmd(read(NIC), out=lspci_nic("L1 Enabled")),
            Cmd(reg(NIC), out="0042\n"),
            Cmd(read(ROOT), out=lspci_root("L1 Enabled")),
            Cmd(reg(ROOT), out="0042\n"),
        ],
        "expect": {
            "changed": True,
            "commands": [clear(NIC), clear(ROOT)],
            "devices": [
                {"aspm_after": "Disabled", "lnkctl_after": "0x0040"},
                {"aspm_after": "Disabled", "lnkctl_after": "0x0040"},
            ],
        },
    },
    {
        "id": "already-disabled",
        "params": {"interface": "eth1"},
        "commands": [Cmd(read(NIC), out=lspci_nic("Disabled")), Cmd(read(ROOT), out=lspci_root("Disabled"))],
        "expect": {
            "changed": False,
            "commands": [],
            "devices": [
                {"changed": False, "aspm_before": "Disabled", "lnkctl_before": None},
                {"changed": False, "aspm_before": "Disabled"},
            ],
        },
    },
    {
        "id": "only-where-enabled",
        "params": {"interface": "eth1"},
        "commands": [
            Cmd(read(NIC), out=lspci_nic("L0s L1 Enabled")),
            Cmd(reg(NIC), out="0043\n"),
            Cmd(clear(NIC)),
            Cmd(read(NIC), out=lspci_nic("L0s Enabled")),
            Cmd(read(ROOT), out=lspci_root("Disabled")),
        ],
        "expect": {
            "changed": True,
            "commands": [clear(NIC)],
            "devices": [
                {
                    "changed": True,
                    "aspm_before": "L0s L1 Enabled",
                    "aspm_after": "L0s Enabled",
                    "lnkctl_before": "0x0043",
                    "lnkctl_after": "0x0041",
                },
                {"changed": False},
            ],
        },
    },
    {
        "id": "l0s-alone-left-for-l1_disabled",
        "params": {"interface": "eth1", "upstream": False},
        "commands": [Cmd(read(NIC), out=lspci_nic("L0s Enabled"))],
        "expect": {"changed": False, "commands": []},
    },
    {
        "id": "state-disabled-clears-both",
        "params": {"interface": "eth1", "state": "disabled", "upstream": False},
        "commands": [
            Cmd(read(NIC), out=lspci_nic("L0s L1 Enabled")),
            Cmd(reg(NIC), out="0043\n"),
            Cmd(clear(NIC, "3")),
            Cmd(read(NIC), out=lspci_nic("Disabled")),
        ],
        "expect": {
            "changed": True,
            "commands": [clear(NIC, "3")],
            "devices": [{"lnkctl_after": "0x0040", "aspm_after": "Disabled"}],
        },
    },
    {
        "id": "upstream-false-nic-only",
        "params": {"interface": "eth1", "upstream": False},
        "commands": [
            Cmd(read(NIC), out=lspci_nic("L1 Enabled")),
            Cmd(reg(NIC), out="0042\n"),
            Cmd(clear(NIC)),
            Cmd(read(NIC), out=lspci_nic("Disabled")),
        ],
        "expect": {"changed": True, "commands": [clear(NIC)]},
    },
    {
        "id": "virtual-interface-is-not-an-error",
        "params": {"interface": "veth0"},
        "binaries": {"lspci": None, "setpci": None},
        "commands": [],
        "expect": {"changed": False, "pci": None, "devices": [], "commands": []},
        "msg_contains": "veth0 has no device link",
    },
    {
        "id": "non-pci-device",
        "params": {"interface": "eth7"},
        "commands": [],
        "expect": {"changed": False, "pci": None},
        "msg_contains": "eth7 is not a PCI device",
    },
    {
        "id": "conventional-pci-on-root-bus",
        "params": {"interface": "eth0"},
        "commands": [Cmd(read("0000:00:03.0"), out=LSPCI_VIRTIO)],
        "expect": {
            "changed": False,
            "pci": {"function": "0000:00:03.0", "upstream": None, "root_port": None},
            "devices": [{"bdf": "0000:00:03.0", "supported": False, "changed": False}],
        },
    },
    {
        "id": "no-such-interface-fails",
        "params": {"interface": "eth9"},
        "commands": [],
        "fail": "no network interface named eth9 (nothing in {net})",
    },
    {
        "id": "access-denied-fails",
        "params": {"interface": "eth1"},
        "commands": [Cmd(read(NIC), out=LSPCI_DENIED)],
        "fail": "lspci cannot read the capabilities of 0000:03:00.0 (<access denied>): run as root",
    },
    {
        "id": "setpci-write-error-fails",
        "params": {"interface": "eth1"},
        "commands": [
            Cmd(read(NIC), out=lspci_nic("L1 Enabled")),
            Cmd(reg(NIC), out="0042\n"),
            Cmd(
                clear(NIC), rc=1, err="setpci: Unable to write to /sys/bus/pci/devices/0000:03:00.0/config\n"
            ),
        ],
        "fail": "/usr/bin/setpci -s 0000:03:00.0 CAP_EXP+10.w=0:2 failed (rc 1): "
        "setpci: Unable to write to /sys/bus/pci/devices/0000:03:00.0/config",
    },
    {
        "id": "write-not-taken-fails",
        "params": {"interface": "eth1", "upstream": False},
        "commands": [
            Cmd(read(NIC), out=lspci_nic("L1 Enabled")),
            Cmd(reg(NIC), out="0042\n"),
            Cmd(clear(NIC)),
            Cmd(read(NIC), out=lspci_nic("L1 Enabled")),
        ],
        "fail": "setpci wrote CAP_EXP+10.w on 0000:03:00.0 but lspci still shows ASPM L1 Enabled",
    },
    {
        "id": "register-disagrees-with-lspci-fails",
        "params": {"interface": "eth1", "upstream": False},
        "commands": [Cmd(read(NIC), out=lspci_nic("L1 Enabled")), Cmd(reg(NIC), out="0040\n")],
        "fail": "0000:03:00.0: lspci says ASPM L1 Enabled but Link Control reads 0x0040",
    },
    {
        "id": "lspci-missing-fails",
        "params": {"interface": "eth1"},
        "binaries": {"lspci": None},
        "commands": [],
        "fail": "Failed to find required executable 'lspci' in paths",
    },
]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_pcie_aspm(sysfs, case):
    run_case(pcie_aspm, case, fail_format={"net": sysfs / "class" / "net"}, item_subsets=True)


def test_diff_mode(run_module, sysfs):
    res = run_module(
        pcie_aspm,
        {"interface": "eth1"},
        [
            Cmd(read(NIC), out=lspci_nic("L1 Enabled")),
            Cmd(reg(NIC), out="0042\n"),
            Cmd(read(ROOT), out=lspci_root("Disabled")),
        ],
        check_mode=True,
        diff=True,
    )
    assert res["diff"] == {
        "before": {NIC: "L1 Enabled", ROOT: "Disabled"},
        "after": {NIC: "Disabled", ROOT: "Disabled"},
    }


def test_switch_between_nic_and_root_port(run_module, tmp_path, monkeypatch):
    """Behind a PCIe switch the upstream end of the NIC's link is the switch's downstream port."""
    nic = (
        tmp_path
        / "devices"
        / "pci0000:00"
        / "0000:00:01.0"
        / "0000:01:00.0"
        / "0000:02:03.0"
        / "0000:04:00.1"
    )
    nic.mkdir(parents=True)
    (tmp_path / "net" / "eth2").mkdir(parents=True)
    (tmp_path / "net" / "eth2" / "device").symlink_to(nic)
    monkeypatch.setattr(pcie_aspm, "SYS_CLASS_NET", str(tmp_path / "net"))
    res = run_module(
        pcie_aspm,
        {"interface": "eth2"},
        [
            Cmd(read("0000:04:00.1"), out=lspci_nic("Disabled")),
            Cmd(read("0000:02:03.0"), out=lspci_root("Disabled")),
        ],
    )
    assert res["pci"] == {"function": "0000:04:00.1", "upstream": "0000:02:03.0", "root_port": "0000:00:01.0"}
