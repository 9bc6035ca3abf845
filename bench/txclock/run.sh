#!/bin/bash
# The kernel transmit clock's prototype rig (issue 15); see bench/txclock/README.md.
#
#   bench/txclock/run.sh [-o DIR] EXPERIMENT...      (root)
#
# Takes the integration-test lock (flock /tmp/xbf-it.lock, waiting at most TXC_LOCK_WAIT s, default 2400),
# builds netns txc-a and txc-b (198.19.177.0/24), runs txclock.py's experiments in txc-a and the UDP
# receiver in txc-b, each bounded by the sum of the experiments' budgets, then removes the namespaces,
# the bpffs mount and restores kernel.bpf_stats_enabled, on any exit.
# Results: DIR (or $TXC_OUT; default bench/out/txclock-<UTC stamp>/): results.json, run.log, recv.json.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
LOCK=/tmp/xbf-it.lock
A=txc-a B=txc-b
NET=198.19.177  # the address plan's benchmarking range; no test uses this /24
PY=/usr/bin/python3  # bcc comes from the distribution's python3-bpfcc

# Experiment: budget in seconds (about twice the duration measured on the 2-vCPU VM).
ORDER="single many fine jitter limits round2 round3 round4 control classchange gate backlog"
budget() {
  case $1 in
    smoke) echo 60 ;;         # ~10 s: one session at 10 ms for 2 s
    single) echo 180 ;;       # ~70 s: one session, htb vs tbf, idle and under stress-ng
    many) echo 240 ;;         # ~100 s: 16 and 256 sessions, tbf / htb class per interval / per session, mix, stress
    fine) echo 90 ;;          # ~30 s: periods 1, 3.333, 3.3 and 100 ms
    jitter) echo 240 ;;       # ~90 s: random length in [0.75, 1] and [0.75, 0.9], 1 and 256 sessions, stress
    limits) echo 60 ;;        # ~5 s: frame lengths 40..9100 B, MTU 1500 and 9000
    baseline) echo 60 ;;      # 10 s: softirq share with no session
    round2) echo 360 ;;       # ~130 s: baseline, 16..1000 sessions, Lmax 200, tbf jitter, stress
    round3) echo 360 ;;       # ~120 s: jitter [0.77, 0.98] with and without the 0.75 floor, 1..1000 sessions, stress
    round4) echo 180 ;;       # ~55 s: baseline, the cost without clones, 256/512 sessions at Lmax 200
    control) echo 60 ;;       # ~10 s: start, class move, loss + re-inject, duplicate, stop
    classchange) echo 60 ;;   # ~8 s: 'tc class change' 10 -> 50 -> 1000 -> 10 ms
    gate) echo 60 ;;          # ~4 s: the dead-man gate closed and open
    backlog) echo 60 ;;       # ~3 s: 1000 frames injected: where they are dropped
    *) return 1 ;;
  esac
}

usage() {
  echo "usage: $0 [-o DIR] EXPERIMENT...   (or all = $ORDER)" >&2
  echo "experiments: smoke baseline $ORDER" >&2
  exit 2
}

OUT=${TXC_OUT:-}
while getopts "o:h" opt; do
  case $opt in
    o) OUT=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || usage
EXPS=()
for e in "$@"; do
  if [ "$e" = all ]; then
    read -r -a more <<<"$ORDER"
    EXPS+=("${more[@]}")
  else
    EXPS+=("$e")
  fi
done
LIMIT=60
for e in "${EXPS[@]}"; do
  b=$(budget "$e") || { echo "unknown experiment: $e" >&2; usage; }
  LIMIT=$((LIMIT + b))
done
[ "$(id -u)" = 0 ] || { echo "run.sh needs root" >&2; exit 2; }
OUT=${OUT:-$REPO/bench/out/txclock-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

exec 9>>"$LOCK"
echo "waiting for $LOCK (at most ${TXC_LOCK_WAIT:-2400} s)..." >&2
flock -w "${TXC_LOCK_WAIT:-2400}" 9 || { echo "gave up waiting for $LOCK" >&2; exit 75; }
echo "$(date -u +%H:%M:%SZ) lock taken; experiments: ${EXPS[*]} (bounded at $LIMIT s); results in $OUT" >&2

BPFFS= PY_PID= RECV_PID=
STATS=$(sysctl -n kernel.bpf_stats_enabled)
stop() {  # stop PID: SIGTERM, 10 s to finish, then SIGKILL
  local pid=$1 i
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 50); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.2
  done
  kill -KILL "$pid" 2>/dev/null
}
cleanup() {
  set +e
  stop "$PY_PID"
  stop "$RECV_PID"
  ip netns del $A 2>/dev/null
  ip netns del $B 2>/dev/null
  if [ -n "$BPFFS" ]; then
    umount "$BPFFS" 2>/dev/null
    rmdir "$BPFFS"
  fi
  sysctl -qw kernel.bpf_stats_enabled="$STATS"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Left over by a run that was killed outright (we hold the lock: nobody else uses these names).
ip netns del $A 2>/dev/null || true
ip netns del $B 2>/dev/null || true
ip netns add $A
ip netns add $B
for ns in $A $B; do
  ip netns exec $ns sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  ip -n $ns link set lo up
done
ip -n $A link add lpA txqueuelen 10000 type veth peer name lpB
ip -n $A link add rfA type veth peer name rfB
ip -n $A link add ra type veth peer name rb netns $B
for d in lpA lpB rfA rfB ra; do ip -n $A link set $d up; done
ip -n $A addr add $NET.1/24 dev ra
ip -n $B addr add $NET.2/24 dev rb
ip -n $B link set rb up
BPFFS=$(mktemp -d /tmp/txc-bpffs.XXXXXX)
mount -t bpf bpf "$BPFFS"

timeout -k 10 $((LIMIT + 30)) ip netns exec $B $PY "$HERE/recv.py" $((LIMIT + 20)) "$OUT/recv.json" 9>&- &
RECV_PID=$!
timeout -k 10 $LIMIT ip netns exec $A $PY "$HERE/txclock.py" --out "$OUT" --bpffs "$BPFFS" "${EXPS[@]}" \
  9>&- > >(tee "$OUT/run.log") 2>&1 &
PY_PID=$!
rc=0
wait $PY_PID || rc=$?
PY_PID=
[ $rc = 124 ] && echo "txclock.py ran out of its $LIMIT s" >&2
echo "results: $OUT/results.json (tables: $HERE/summary.py $OUT)" >&2
exit $rc
