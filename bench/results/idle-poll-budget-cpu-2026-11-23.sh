#!/bin/bash
# idle-poll budget vs OSD CPU per write at t16 / t1, size 3
B=/work/main/target/release/carmine
for round in 1 2 3; do
 for us in 200 50 0; do
  D=/tmp/ipab/c; rm -rf $D
  $B --idle-poll-us $us vstart --osds 3 --mons 1 --dir $D >/dev/null 2>&1
  $B --conf $D/carmine.toml pool create p3 --size 3 --pg-num 32 >/dev/null
  sleep 2
  for t in 16 1; do
   P=$(cat $D/run/osd.*.pid | paste -sd,)
   perf stat -x, -e task-clock,context-switches,raw_syscalls:sys_enter -p $P -o /tmp/ipab/ps -- sleep 9 &
   out=$($B --conf $D/carmine.toml --format json bench p3 write -b 4096 -t $t --seconds 8 2>/dev/null)
   wait
   ops=$(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["ops"], round(d["ops_per_second"]), round(d["latency_us_avg"]))' 2>/dev/null || echo "? ? ?")
   tc=$(grep task-clock /tmp/ipab/ps | cut -d, -f1); cs=$(grep context-sw /tmp/ipab/ps | cut -d, -f1); sc=$(grep raw_sys /tmp/ipab/ps | cut -d, -f1)
   echo "round=$round us=$us t=$t ops/iops/mean=$ops task_ms=$tc cs=$cs sys=$sc"
  done
  $B vstop --dir $D >/dev/null
 done
done
