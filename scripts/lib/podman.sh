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
# every container until the parent holds a budget to hand out.
#
#   podman_rt_budget N   make room for N containers of XDP_BFD_CONTAINER_RT_US
#
# Raises the parent's budget (never lowers it), takes back what containers
# that no longer exist still hold, and when the rest cannot give N containers
# their share, shrinks the share to fit (never below 10 ms per second) or
# fails naming who holds the budget — instead of runc's "failed to write
# 100000 ... cpu.rt_runtime_us: invalid argument" half-way through a run.
podman_rt_budget() {
  local need=${1:-1} parent=/sys/fs/cgroup/cpu/libpod_parent cur used free share
  [ -e /sys/fs/cgroup/cpu/cpu.rt_runtime_us ] || return 0  # cgroup v2 or no RT groups
  mkdir -p "$parent"
  cur=$(cat "$parent/cpu.rt_runtime_us")
  if [ "$cur" -lt "$XDP_BFD_PODMAN_RT_US" ]; then
    if ! echo "$XDP_BFD_PODMAN_RT_US" >"$parent/cpu.rt_runtime_us" 2>/dev/null; then
      printf 'podman: cannot give %s %sus of RT runtime (root has %sus)\n' "$parent" \
        "$XDP_BFD_PODMAN_RT_US" "$(cat /sys/fs/cgroup/cpu/cpu.rt_runtime_us)" >&2
      return 1
    fi
    cur=$XDP_BFD_PODMAN_RT_US
  fi
  podman_rt_reclaim
  used=$(podman_rt_used "$parent")
  free=$((cur - used))
  [ "$need" -gt 0 ] || return 0
  if [ "$free" -ge $((need * XDP_BFD_CONTAINER_RT_US)) ]; then return 0; fi
  share=$((free / need / 1000 * 1000))
  if [ "$share" -ge 10000 ]; then
    printf 'podman: %sus of RT runtime free in %s for %s containers: each gets %sus, not %sus\n' \
      "$free" "$parent" "$need" "$share" "$XDP_BFD_CONTAINER_RT_US" >&2
    XDP_BFD_CONTAINER_RT_US=$share
    return 0
  fi
  printf 'podman: only %sus of RT runtime free in %s (%s containers need %sus each); %s\n' \
    "$free" "$parent" "$need" "$XDP_BFD_CONTAINER_RT_US" "$(podman_rt_holders)" >&2
  return 1
}

# One short line (a CI report cuts long ones): the parent's RT runtime in µs
# and every child group that holds some, by container name ("gone:<id>" for a
# group whose container podman no longer knows, the directory's name for one
# that is not a container's).
podman_rt_holders() {
  local parent=/sys/fs/cgroup/cpu/libpod_parent names d rt id name out
  [ -e "$parent/cpu.rt_runtime_us" ] || { echo "no $parent"; return 0; }
  names=$(podman ps -a --no-trunc --format '{{.ID}} {{.Names}}' 2>/dev/null || true)
  out="libpod_parent $(cat "$parent/cpu.rt_runtime_us"):"
  for d in "$parent"/*/; do
    rt=$(cat "$d/cpu.rt_runtime_us" 2>/dev/null || echo 0)
    [ "$rt" -gt 0 ] || continue
    id=${d%/}; id=${id##*/}
    case $id in
      libpod-*)
        id=${id#libpod-}
        name=$(awk -v i="$id" '$1 == i { print $2 }' <<<"$names")
        name=${name:-gone:${id:0:12}}
        ;;
      *) name=$id ;;
    esac
    out="$out $name=$rt"
  done
  echo "$out"
}

# The RT runtime (µs per second) the children of cgroup $1 hold between them.
podman_rt_used() {
  local d sum=0 rt period
  for d in "$1"/*/; do
    [ -e "$d/cpu.rt_runtime_us" ] || continue
    rt=$(cat "$d/cpu.rt_runtime_us")
    period=$(cat "$d/cpu.rt_period_us")
    [ "$rt" -gt 0 ] || continue
    sum=$((sum + rt * 1000000 / period))
  done
  echo "$sum"
}

# runc leaves a container's cpu cgroup behind on cgroup v1 when the systemd in
# it made sub-groups (rmdir of a directory that still has child groups
# fails), and the leftover keeps its RT runtime: every removed router would
# shrink the budget for good. Removes the groups of containers podman no
# longer knows. The directories are listed before the containers, so a
# container being created meanwhile is already in podman's list.
podman_rt_reclaim() {
  local parent=/sys/fs/cgroup/cpu/libpod_parent dirs=() live d id
  [ -d "$parent" ] || return 0
  for d in "$parent"/libpod-*/; do [ -d "$d" ] && dirs+=("$d"); done
  [ "${#dirs[@]}" -gt 0 ] || return 0
  live=$(podman ps -a --no-trunc --format '{{.ID}}')
  for d in "${dirs[@]}"; do
    id=${d%/}; id=${id##*/libpod-}
    if grep -qx "$id" <<<"$live"; then continue; fi
    # Deepest first; a group that still has tasks refuses rmdir and stays.
    find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
}
