#!/bin/bash
# Used for BENCHMARKS.md "Messenger and runtime costs per op, before/after"; run it
# alternately with two binaries and compare medians.
# msgr-runtime-ab.sh BIN LABEL OUTFILE: fresh 3-OSD vstart cluster, size-3 pool of 32 PGs, three
# workloads; per workload one JSON line: bench output + OSD CPU s, minor faults, VmHWM.
set -u
BIN=$1; LABEL=$2; OUT=$3
DIR=${AB_DIR:-/tmp/ab}/cluster-$LABEL
rm -rf "$DIR"
mkdir -p "${AB_DIR:-/tmp/ab}"; timeout 60 "$BIN" vstart --osds 3 --mons 1 --dir "$DIR" > ${AB_DIR:-/tmp/ab}/vstart-$LABEL.log 2>&1 || { echo "vstart failed"; cat ${AB_DIR:-/tmp/ab}/vstart-$LABEL.log; exit 1; }
export CARMINE_CONF=$DIR/carmine.toml
for i in $(seq 1 100); do "$BIN" --format json status 2>/dev/null | python3 -c 'import json,sys; s=json.load(sys.stdin); sys.exit(0 if s["osdmap"]["num_up_osds"]==3 and s["health"]["status"]=="HEALTH_OK" else 1)' && break; sleep 0.2; done
timeout 30 "$BIN" pool create rbd --size 3 --pg-num 32 > /dev/null || { echo "pool create failed"; exit 1; }
for i in $(seq 1 300); do "$BIN" --format json status 2>/dev/null | python3 -c '
import json,sys
s=json.load(sys.stdin); by={x["state_name"]:x["count"] for x in s["pgmap"]["pgs_by_state"]}; t=sum(by.values())
sys.exit(0 if by.get("active+clean",0)==t and t>=32 else 1)' && break; sleep 0.2; done
PIDS=$(cat $DIR/run/osd.*.pid)
osd_stat() { # sum of utime+stime ticks, minflt
  for p in $PIDS; do awk '{print $14+$15, $10}' /proc/$p/stat; done | awk '{c+=$1; f+=$2} END {print c, f}'
}
hwm() { for p in $PIDS; do awk '/VmHWM/{print $2}' /proc/$p/status; done | sort -n | tail -1; }
reset_hwm() { for p in $PIDS; do echo 5 > /proc/$p/clear_refs 2>/dev/null; done; }
B="$BIN --format json bench rbd"
timeout 60 $B write -b 4096 -t 16 --seconds 2 --no-cleanup --run-name warmup > /dev/null 2>&1
run() { # NAME args...
  local name=$1; shift
  reset_hwm
  read c0 f0 < <(osd_stat)
  local res; res=$(timeout 120 $B "$@" 2>/dev/null | tail -1)
  read c1 f1 < <(osd_stat)
  echo "{\"label\":\"$LABEL\",\"workload\":\"$name\",\"osd_cpu_s\":$(python3 -c "print(($c1-$c0)/$(getconf CLK_TCK))"),\"osd_minflt\":$((f1-f0)),\"osd_hwm_kib\":$(hwm),\"bench\":${res:-null}}" >> "$OUT"
}
run w4k_t16 write -b 4096 -t 16 --seconds 8 --no-cleanup
run w4k_t1 write -b 4096 -t 1 --seconds 6 --no-cleanup --run-name lat
run w4m_t16 write -b 4194304 -t 16 --seconds 8 --no-cleanup --run-name big
timeout 60 "$BIN" vstop --dir "$DIR" > /dev/null 2>&1
for p in $PIDS; do kill -0 $p 2>/dev/null && kill -KILL $p; done
rm -rf "$DIR"
