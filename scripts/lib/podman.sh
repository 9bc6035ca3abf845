# Sourced by scripts/images, scripts/molecule and scripts/lab: the podman
# settings every container of this project is made with.
# shellcheck shell=bash

# containers.conf for this host (runc, rlimits, networks in 198.18.0.0/16).
export CONTAINERS_CONF=${CONTAINERS_CONF:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/molecule/images/containers.conf}

# Real-time budget each router container gets (podman --cpu-rt-runtime, µs per
# 1 s period) and the total reserved for podman's parent cgroup.
XDP_BFD_CONTAINER_RT_US=${XDP_BFD_CONTAINER_RT_US:-100000}
XDP_BFD_PODMAN_RT_US=${XDP_BFD_PODMAN_RT_US:-900000}

# On a cgroup v1 host with CONFIG_RT_GROUP_SCHED, a task in a cpu cgroup whose
# cpu.rt_runtime_us is 0 cannot get SCHED_FIFO, and a child cannot get more
# than its parent. podman's parent cgroup (libpod_parent) starts at 0, so
# xdp-bfd.service (CPUSchedulingPolicy=fifo) fails with 214/SETSCHEDULER in
# every container until the parent holds a budget to hand out. Only raises it.
podman_rt_budget() {
  local parent=/sys/fs/cgroup/cpu/libpod_parent cur
  [ -e /sys/fs/cgroup/cpu/cpu.rt_runtime_us ] || return 0  # cgroup v2 or no RT groups
  mkdir -p "$parent"
  cur=$(cat "$parent/cpu.rt_runtime_us")
  if [ "$cur" -lt "$XDP_BFD_PODMAN_RT_US" ]; then
    if ! echo "$XDP_BFD_PODMAN_RT_US" >"$parent/cpu.rt_runtime_us" 2>/dev/null; then
      printf 'podman: cannot give %s %sus of RT runtime (root has %sus)\n' "$parent" \
        "$XDP_BFD_PODMAN_RT_US" "$(cat /sys/fs/cgroup/cpu/cpu.rt_runtime_us)" >&2
      return 1
    fi
  fi
}
