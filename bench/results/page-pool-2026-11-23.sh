#!/bin/bash
# page-pool-2026-11-23.sh depth1|t16 LABEL BIN: the A/B runs of BENCHMARKS.md "New objects on a grown store".
# depth1: fresh cluster, size-1 pool, t1 on the empty store, grow it with 12 s of t16 writes, two t1 runs of new objects.
# t16: fresh cluster, size-3 pool, 11 s of t16 writes; OSD CPU and faults over 8 s of it.
MODE=$1; shift
if [ "$MODE" = depth1 ]; then
  L=$1; B=$2
  rm -rf /tmp/c1; $B vstart --osds 3 --mons 1 --dir /tmp/c1 >/dev/null 2>&1; C="$B --conf /tmp/c1/carmine.toml"
  $C pool create p --size 1 --pg-num 32 >/dev/null; sleep 2
  pids=$(cat /tmp/c1/run/osd.*.pid | paste -sd' ')
  snap(){ for p in $pids; do cat /proc/$p/stat; done | awk '{u+=$14+$15; f+=$10} END{print u, f}'; }
  lat(){ $C --format json bench p write -b 4096 -t 1 --seconds 6 --no-cleanup --run-name $1 > /tmp/l.json & sleep 1; a=$(snap); sleep 4; b=$(snap); wait
  python3 -c 'import json,sys; d=json.load(open("/tmp/l.json")); r=d["ops_per_second"]; a="'"$a"'".split(); b="'"$b"'".split(); print("'$L' '$1'", "lat", round(d["latency_us_avg"],1), "p50", d["latency_us_p50"], "p99", d["latency_us_p99"], "osd_cpu_us/op", round((int(b[0])-int(a[0]))*1e4/(r*4),1), "faults/op", round((int(b[1])-int(a[1]))/(r*4),2))'; }
  lat fresh
  $C --format json bench p write -b 4096 -t 16 --seconds 12 --no-cleanup >/dev/null
  lat grown1; lat grown2
  $B vstop --dir /tmp/c1 >/dev/null
else
  L=$1; B=$2
  rm -rf /tmp/c1; $B vstart --osds 3 --mons 1 --dir /tmp/c1 >/dev/null 2>&1; C="$B --conf /tmp/c1/carmine.toml"
  $C pool create p --size 3 --pg-num 32 >/dev/null; sleep 2
  pids=$(cat /tmp/c1/run/osd.*.pid | paste -sd' ')
  snap(){ for p in $pids; do cat /proc/$p/stat; done | awk '{u+=$14+$15; f+=$10} END{print u, f}'; }
  $C --format json bench p write -b 4096 -t 16 --seconds 11 --no-cleanup > /tmp/l.json & sleep 1; a=$(snap); sleep 8; b=$(snap); wait
  python3 -c 'import json,sys; d=json.load(open("/tmp/l.json")); r=d["ops_per_second"]; a="'"$a"'".split(); b="'"$b"'".split(); print("'$L' t16 size3 ops/s", round(r), "lat", round(d["latency_us_avg"],1), "p99", d["latency_us_p99"], "osd_cpu_us/op", round((int(b[0])-int(a[0]))*1e4/(r*8),1), "faults/op", round((int(b[1])-int(a[1]))/(r*8),2))'
  $B vstop --dir /tmp/c1 >/dev/null
fi
