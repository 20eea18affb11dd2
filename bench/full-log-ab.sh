#!/usr/bin/env bash
# Two builds on full PG logs, side by side (issue #11): for each binary in turn, a fresh
# `vstart --osds 3 --mons 1` cluster with a size-3 pool of 32 PGs, then
# `carmine bench p3 write -b 4096` at depth 1 (T1 seconds: fresh logs), at depth 16
# (T16 seconds, new objects, cleaned up after: every PG log and its dups end up full),
# and at depth 1 again (full logs). Prints one line per run: the two depth-1 means and
# the depth-16 writes. Binaries alternate, ROUNDS times, so they share the load.
#
#   bench/full-log-ab.sh BIN_A BIN_B      environment: ROUNDS [3]  T1 [8]  T16 [12]
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BIN_A BIN_B" >&2; exit 2; }
ROUNDS=${ROUNDS:-3}
T1=${T1:-8}
T16=${T16:-12}
. "$(dirname "$0")/lib/cluster.sh"
D= BIN=
trap '[ -n "$D" ] && { "$BIN" vstop --dir "$D" >/dev/null 2>&1; rm -rf "$D"; }' EXIT
mean_us() { awk '/Average latency/ {printf "%.0f", $4 * 1000}'; }
for round in $(seq 1 "$ROUNDS"); do
  for BIN in "$@"; do
    D=$(mktemp -d /tmp/full-log-ab.XXXXXX)
    "$BIN" vstart --osds 3 --mons 1 --dir "$D" > "$D/vstart.log" 2>&1 || { cat "$D/vstart.log"; exit 1; }
    C=(--conf "$D/carmine.toml")
    "$BIN" "${C[@]}" pool create p3 --size 3 --pg-num 32 > /dev/null
    wait_cluster_ready "$BIN" "$D/carmine.toml"
    fresh=$("$BIN" "${C[@]}" bench p3 write -b 4096 -t 1 --seconds "$T1" | mean_us)
    writes=$("$BIN" "${C[@]}" bench p3 write -b 4096 -t 16 --seconds "$T16" | awk '/Total ops/ {print $3}')
    full=$("$BIN" "${C[@]}" bench p3 write -b 4096 -t 1 --seconds "$T1" | mean_us)
    echo "round $round $BIN: depth 1 fresh ${fresh} us, depth 16 ${writes} writes in ${T16} s, depth 1 on full logs ${full} us"
    "$BIN" vstop --dir "$D" > /dev/null 2>&1
    rm -rf "$D"
    D=
  done
done
