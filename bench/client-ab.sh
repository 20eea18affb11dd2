#!/usr/bin/env bash
# client-ab.sh: the client side of a 4 KiB write, two carmine binaries A/B (issues #10, #11).
#
#   bench/client-ab.sh BASE_BIN NEW_BIN [ROUNDS] [SECONDS]
#
# Starts one cluster with BASE_BIN (`vstart --osds 3 --mons 1`, pool bench3 size 3, 32 PGs), then:
#   1. `carmine bench bench3 write -b 4096 -t 1|16`, BASE and NEW alternating, ROUNDS rounds of SECONDS:
#      ops/s, mean and p99 latency, client CPU per op (/usr/bin/time user+sys over ops);
#   2. client instructions per op under callgrind (stable on a shared machine): each binary runs
#      for 1 s and 4 s, Ir/op = (Ir_4s - Ir_1s) / (ops_4s - ops_1s) (start-up cancels out);
#   3. `carmine image nbd` (one server per binary, own image) under fio 4 KiB randwrite qd1/qd16,
#      alternating: iops, mean and p99 latency, server CPU per op (/proc/PID/stat);
#   4. NBD server instructions per op under callgrind: fio --number_ios 500 and 3000 (qd16),
#      300 and 1500 (qd1), Ir/op from the difference.
# Needs fio (nbd engine), valgrind, python3. Results go to stdout.
set -uo pipefail
. "$(dirname "$0")/lib/cluster.sh"
BASE=$(readlink -f "$1"); NEW=$(readlink -f "$2"); ROUNDS=${3:-5}; SECS=${4:-4}
D=$(mktemp -d /tmp/client-ab.XXXXXX); C="--conf $D/carmine.toml"
TICK=$(getconf CLK_TCK)
trap '"$BASE" vstop --dir "$D" >/dev/null 2>&1; kill $(jobs -p) 2>/dev/null' EXIT
"$BASE" vstart --osds 3 --mons 1 --dir "$D" > "$D/vstart.log" 2>&1 || { cat "$D/vstart.log"; exit 1; }
wait_cluster_ready "$BASE" "$D/carmine.toml"
"$BASE" $C pool create bench3 --size 3 --pg-num 32 > /dev/null
sleep 2
"$BASE" $C --format json bench bench3 write -b 4096 -t 16 --seconds 2 --no-cleanup --run-name warm > /dev/null

bench_run() { # label bin t
  local out; out=$(/usr/bin/time -f "TIME %e %U %S" "$2" $C --format json bench bench3 write -b 4096 -t "$3" \
    --seconds "$SECS" --no-cleanup --run-name "r$RANDOM" 2>&1)
  echo "$out" | python3 -c '
import json,sys
lines=sys.stdin.read().splitlines()
j=json.loads([l for l in lines if l.startswith("{")][-1])
t=[l for l in lines if l.startswith("TIME")][-1].split()
print("bench %s t%s ops/s=%.0f lat_avg_us=%.1f p99_us=%d cpu_us_per_op=%.2f" % (sys.argv[1], sys.argv[2],
  j["ops_per_second"], j["latency_us_avg"], j["latency_us_p99"], (float(t[2])+float(t[3]))*1e6/max(j["ops"],1)))' "$1" "$3"
}
echo "== 1. carmine bench, alternating"
for r in $(seq 1 "$ROUNDS"); do for t in 1 16; do
  if [ $((r % 2)) = 1 ]; then bench_run base "$BASE" $t; bench_run new "$NEW" $t
  else bench_run new "$NEW" $t; bench_run base "$BASE" $t; fi
done; done

cg_bench() { # bin t secs -> "ops Ir"
  local out; out=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$1" $C --format json bench bench3 write \
    -b 4096 -t "$2" --seconds "$3" --no-cleanup --run-name "cg$RANDOM" 2>&1)
  echo "$(echo "$out" | grep '^{' | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["ops"])') \
$(echo "$out" | grep -o 'Collected : [0-9]*' | awk '{print $3}')"
}
echo "== 2. client instructions per op (callgrind)"
for t in 1 16; do for label in base new; do
  bin=$BASE; [ $label = new ] && bin=$NEW
  read -r o1 i1 <<< "$(cg_bench "$bin" $t 1)"; read -r o4 i4 <<< "$(cg_bench "$bin" $t 4)"
  echo "callgrind bench $label t$t Ir_per_op=$(( (i4 - i1) / (o4 - o1) ))"
done; done

start_nbd() { # label bin port [valgrind]
  ${4:+valgrind --tool=callgrind --callgrind-out-file=/dev/null} "$2" $C image nbd "bench3/img$1" --bind "127.0.0.1:$3" > "$D/nbd-$1.log" 2>&1 &
  NBD_PID=$!
  for i in $(seq 1 300); do grep -q serving "$D/nbd-$1.log" && break; sleep 0.2; done
}
fio_run() { # port qd [fio args...] -> json
  local port=$1 qd=$2; shift 2
  fio --name=w --ioengine=nbd --uri="nbd://127.0.0.1:$port" --rw=randwrite --bs=4k --iodepth="$qd" --size=256M \
    --output-format=json "$@" 2>/dev/null | sed -n '/^{/,$p'
}
for label in base new cgbase cgnew; do "$BASE" $C image create "bench3/img$label" --size 1G > /dev/null; done
echo "== 3. NBD, fio randwrite 4 KiB, alternating"
start_nbd base "$BASE" 10809; PB=$NBD_PID; start_nbd new "$NEW" 10810; PN=$NBD_PID
nbd_run() { # label pid port qd
  local c0 c1 out; c0=$(awk '{print $14+$15}' "/proc/$2/stat")
  out=$(fio_run "$3" "$4" --runtime="$SECS" --time_based=1); c1=$(awk '{print $14+$15}' "/proc/$2/stat")
  echo "$out" | python3 -c '
import json,sys
j=json.load(sys.stdin)["jobs"][0]["write"]
print("nbd %s qd%s iops=%.0f lat_mean_us=%.1f p99_us=%.1f cpu_us_per_op=%.2f" % (sys.argv[1], sys.argv[2], j["iops"],
  j["clat_ns"]["mean"]/1e3, j["clat_ns"]["percentile"]["99.000000"]/1e3, int(sys.argv[3])/int(sys.argv[4])*1e6/max(j["total_ios"],1)))' \
    "$1" "$4" $((c1 - c0)) "$TICK"
}
for qd in 16 1; do nbd_run base $PB 10809 $qd > /dev/null; nbd_run new $PN 10810 $qd > /dev/null; done
for r in $(seq 1 "$ROUNDS"); do for qd in 1 16; do
  if [ $((r % 2)) = 1 ]; then nbd_run base $PB 10809 $qd; nbd_run new $PN 10810 $qd
  else nbd_run new $PN 10810 $qd; nbd_run base $PB 10809 $qd; fi
done; done
kill $PB $PN; wait $PB $PN 2>/dev/null

cg_nbd() { # label bin qd n -> Ir
  start_nbd "cg$1" "$2" 10811 cg
  fio_run 10811 "$3" --number_ios="$4" > /dev/null
  kill -TERM $NBD_PID; wait $NBD_PID
  grep -o 'Collected : [0-9]*' "$D/nbd-cg$1.log" | awk '{print $3}'
}
echo "== 4. NBD server instructions per op (callgrind)"
for spec in "16 500 3000" "1 300 1500"; do read -r qd n1 n2 <<< "$spec"; for label in base new; do
  bin=$BASE; [ $label = new ] && bin=$NEW
  i1=$(cg_nbd $label "$bin" "$qd" "$n1"); i2=$(cg_nbd $label "$bin" "$qd" "$n2")
  echo "callgrind nbd $label qd$qd Ir_per_op=$(( (i2 - i1) / (n2 - n1) ))"
done; done
