#!/bin/bash
# Run from /tmp/x in the 2026-11-29 session (paths below); OUT files land there.
# w3.sh BIN SECS [PERF]: size-3 4 KiB write t16 on a fresh 3-OSD cluster; CPU per op per process
BIN=$1; SECS=${2:-8}; D=/tmp/x/cl; rm -rf $D
timeout 60 $BIN vstart --osds 3 --mons 1 --dir $D > /tmp/x/vstart.log 2>&1 || { cat /tmp/x/vstart.log; exit 1; }
export CARMINE_CONF=$D/carmine.toml
for i in $(seq 100); do $BIN health 2>/dev/null | grep -q HEALTH_OK && break; sleep 0.2; done
[ -n "$NOSCRUB" ] && $BIN config set osd_scrub_interval 0 >/dev/null
$BIN pool create p3 --size 3 --pg-num 32 >/dev/null
for i in $(seq 100); do $BIN health 2>/dev/null | grep -q HEALTH_OK && break; sleep 0.2; done
$BIN bench p3 write -b 4096 -t 16 --seconds 2 --no-cleanup --run-name warm >/dev/null
pids=$(cat $D/run/osd.*.pid)
cpu() { local s=0; for p in "$@"; do s=$((s + $(awk '{print $14+$15}' /proc/$p/stat))); done; echo $s; }
c0=$(cpu $pids)
( TIMEFORMAT="client cpu %U %S"; time $BIN $CLIENTARGS --format json bench p3 write -b 4096 -t 16 --seconds $SECS --no-cleanup > /tmp/x/bench.json ) 2> /tmp/x/client.txt &
BP=$!
sleep 0.3
[ -n "$PERFCLIENT" ] && PERFPIDS=$(pgrep -f "bench p3 write -b 4096 -t 16 --seconds $SECS" | tail -1)
if [ -n "$3" ]; then perf record ${PERFEV:--F 1000} --call-graph dwarf,16384 -o /tmp/x/perf.data -p ${PERFPIDS:-$(echo $pids | tr " " ",")} -- sleep 2 2>/dev/null >/dev/null; fi
cb=$(awk '{print $14+$15}' /proc/$BP/stat 2>/dev/null)
wait $BP
c1=$(cpu $pids)
python3 - "$c0" "$c1" <<'P'
import json,sys
d=json.load(open('/tmp/x/bench.json'))
ops=d.get('ops') or d.get('total_ops') 
print({k:v for k,v in d.items() if not isinstance(v,(list,dict))})
c=(int(sys.argv[2])-int(sys.argv[1]))/100
print(f"OSD cpu {c:.2f}s  per op {c/ops*1e6:.1f} us" if ops else "no ops key")
P
$BIN vstop --dir $D >/dev/null 2>&1
