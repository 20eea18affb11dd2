#!/bin/bash
# ab.sh ROUNDS SECS BIN... : alternate w3.sh runs
R=$1; S=$2; shift 2
for r in $(seq $R); do for b in "$@"; do
  out=$(/tmp/x/w3.sh $b $S 2>&1 | tail -2)
  ops=$(echo "$out" | grep -o "'ops_per_second': [0-9.]*" | cut -d' ' -f2)
  cpu=$(echo "$out" | grep -o "per op [0-9.]*" | cut -d' ' -f3)
  echo "$r $(basename $b) ops/s ${ops%.*} osd_us_per_op $cpu"
done; done
