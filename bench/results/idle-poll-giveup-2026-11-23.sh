#!/bin/bash
B=/work/main/target/release/carmine
for round in 1 2 3; do
 for g in off 10 40; do
  D=/tmp/ipab/c; rm -rf $D
  if [ $g = off ]; then unset CARMINE_POLL_GIVEUP_US; else export CARMINE_POLL_GIVEUP_US=$g; fi
  $B vstart --osds 3 --mons 1 --dir $D >/dev/null 2>&1
  $B --conf $D/carmine.toml pool create p3 --size 3 --pg-num 32 >/dev/null
  sleep 2
  for t in 16 1; do
   P=$(cat $D/run/osd.*.pid | paste -sd,)
   perf stat -x, -e task-clock,context-switches,raw_syscalls:sys_enter -p $P -o /tmp/ipab/ps -- sleep 9 &
   out=$($B --conf $D/carmine.toml --format json bench p3 write -b 4096 -t $t --seconds 8 2>/dev/null)
   wait
   ops=$(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["ops"], round(d["ops_per_second"]), round(d["latency_us_avg"]))')
   tc=$(grep task-clock /tmp/ipab/ps | cut -d, -f1); cs=$(grep context-sw /tmp/ipab/ps | cut -d, -f1); sc=$(grep raw_sys /tmp/ipab/ps | cut -d, -f1)
   set -- $ops
   echo "round=$round giveup=$g t=$t ops=$1 iops=$2 mean_us=$3 cpu_us_per_op=$(python3 -c "print(round($tc*1000/$1,1))") cs_per_op=$(python3 -c "print(round($cs/$1,2))") sys_per_op=$(python3 -c "print(round($sc/$1,1))")"
  done
  $B vstop --dir $D >/dev/null
 done
done
