#!/usr/bin/env bash
# Idle-polling budgets side by side (issue #11): for each budget in turn, a fresh
# `carmine --idle-poll-us US vstart --osds 3 --mons 1` cluster with a size-1 and a size-3
# pool (32 PGs each), then `carmine --idle-poll-us US bench POOL write -b 4096` at depth 1
# (size 1 and size 3) and depth 16 (size 3), SECS seconds each. Prints one line per run:
# ops/s, mean/p50/p99 latency and the CPU of the three OSD processes per write
# (utime+stime from /proc). Budgets alternate, ROUNDS times, so they share the load.
#
#   bench/idle-poll-ab.sh [BIN] [BUDGETS...]     e.g. bench/idle-poll-ab.sh target/release/carmine 0 200
#   environment: ROUNDS [2]  SECS [4]  STORE [mem] (`log`: LogStore OSDs, as `vstart --store log`)
set -euo pipefail
BIN=${1:-target/release/carmine}
shift || true
if [ $# -gt 0 ]; then BUDGETS=("$@"); else BUDGETS=(0 200); fi
ROUNDS=${ROUNDS:-2}
SECS=${SECS:-4}
STORE=${STORE:-mem}
HZ=$(getconf CLK_TCK)
. "$(dirname "$0")/lib/cluster.sh"
D=
trap '[ -n "$D" ] && { "$BIN" vstop --dir "$D" >/dev/null 2>&1; rm -rf "$D"; }' EXIT
cpu() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done; echo $t; }
for round in $(seq 1 "$ROUNDS"); do
  for us in "${BUDGETS[@]}"; do
    D=$(mktemp -d /tmp/idle-poll-ab.XXXXXX)
    B=("$BIN" --idle-poll-us "$us")
    "${B[@]}" vstart --osds 3 --mons 1 --store "$STORE" --dir "$D" > "$D/vstart.log" 2>&1 || { cat "$D/vstart.log"; exit 1; }
    C=(--conf "$D/carmine.toml")
    "${B[@]}" "${C[@]}" pool create p1 --size 1 --pg-num 32 > /dev/null
    "${B[@]}" "${C[@]}" pool create p3 --size 3 --pg-num 32 > /dev/null
    wait_cluster_ready "$BIN" "$D/carmine.toml"
    OSDS=$(cat "$D"/run/osd.*.pid)
    for run in "p1 1" "p3 1" "p3 16"; do
      set -- $run
      c0=$(cpu $OSDS)
      out=$("${B[@]}" "${C[@]}" --format json bench "$1" write -b 4096 -t "$2" --seconds "$SECS" --run-name "r$round-$us-$1-$2")
      c1=$(cpu $OSDS)
      echo "$out" | python3 -c "import json,sys
d=json.load(sys.stdin)
print('round=$round idle_poll_us=$us pool=$1 depth=$2 ops/s=%d mean_us=%d p50_us=%d p99_us=%d osd_cpu_us_per_op=%.0f' % (d['ops_per_second'], d['latency_us_avg'], d['latency_us_p50'], d['latency_us_p99'], ($c1-$c0)/$HZ*1e6/d['ops']))"
    done
    "$BIN" vstop --dir "$D" > /dev/null 2>&1; rm -rf "$D"; D=
  done
done
