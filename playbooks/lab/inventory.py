#!/usr/bin/env python3
"""The lab fleet (scripts/lab), as an Ansible inventory script.

Podman containers with systemd: N routers that run the engine under FRR
(xdp-bfd-lab-r1 .. -rN) and one plain FRR peer (xdp-bfd-lab-peer), reached
through podman exec. N is the lab's one parameter:

  XDP_BFD_LAB_ROUTERS   router count, 1..8; unset: the running lab's count
                        (/run/xdp-bfd-lab/routers, written by scripts/lab),
                        else 2

This script only names the hosts, their groups and each router's index.
Everything else is derived from those in group_vars/ (all.yml: the address
plan and the full mesh of router links; bfd_routers.yml: each router's image,
interfaces and BFD peers), so nothing lists peers by hand.

  ansible-inventory -i playbooks/lab/inventory.py --graph
"""

import json
import os
import sys

MAX_ROUTERS = 8  # 28 links: the /30s of 198.18.2.0/24 hold 64 (group_vars/all.yml)
STATE = "/run/xdp-bfd-lab/routers"


def router_count() -> int:
    raw = os.environ.get("XDP_BFD_LAB_ROUTERS", "")
    if not raw and os.path.exists(STATE):
        with open(STATE, encoding="ascii") as f:
            raw = f.read().strip()
    raw = raw or "2"
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_ROUTERS:
        sys.exit(f"lab inventory: router count {raw!r} is not 1..{MAX_ROUTERS}")
    return int(raw)


def inventory(n: int) -> dict:
    routers = {f"xdp-bfd-lab-r{i}": {"lab_index": i} for i in range(1, n + 1)}
    return {
        "_meta": {
            "hostvars": {
                # The controller, where the containers are made. Explicit, so
                # that the podman connection set for the fleet never applies.
                "localhost": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                },
                **routers,
                "xdp-bfd-lab-peer": {},
            }
        },
        "all": {"children": ["ungrouped", "bfd_routers", "bfd_peers"]},
        "ungrouped": {"hosts": ["localhost"]},
        "bfd_routers": {"hosts": list(routers)},
        "bfd_peers": {"hosts": ["xdp-bfd-lab-peer"]},
    }


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "--host":
        print(json.dumps(inventory(router_count())["_meta"]["hostvars"].get(argv[2], {})))
        return 0
    if len(argv) == 2 and argv[1] == "--list":
        print(json.dumps(inventory(router_count()), indent=2))
        return 0
    sys.exit("usage: inventory.py --list | --host HOST")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
