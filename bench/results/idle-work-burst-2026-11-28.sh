#!/usr/bin/env bash
# pf.sh BIN: carmine bench size-3 t16 new objects; ops/s, faults & cpu per write on OSDs
# Used for bench/results/idle-work-burst-2026-11-28.txt: T (depth, 16) SECS (8) BIN; the OSDs take their environment from vstart.
set -uo pipefail
A=$1
. "$(dirname "$0")/../lib/cluster.sh"
D=$(mktemp -d /tmp/pf.XXXXXX); C="--conf $D/carmine.toml"
trap '"$A" vstop --dir "$D" >/dev/null 2>&1; rm -rf "$D"' EXIT
"$A" vstart --osds 3 --mons 1 --dir "$D" > "$D/vstart.log" 2>&1 || { cat "$D/vstart.log"; exit 1; }
wait_cluster_ready "$A" "$D/carmine.toml"
"$A" $C pool create p3 --size 3 --pg-num 32 > /dev/null
OSDS=$(cat "$D"/run/osd.*.pid)
"$A" $C bench p3 write -b 4096 -t 16 --seconds 2 --no-cleanup --run-name warm > /dev/null
f0=$(for p in $OSDS; do awk '{print $10}' /proc/$p/stat; done | paste -sd+ | bc)
c0=$(for p in $OSDS; do awk '{print $14+$15}' /proc/$p/stat; done | paste -sd+ | bc)
"$A" $C --format json bench p3 write -b 4096 -t ${T:-16} --seconds ${SECS:-8} --no-cleanup > $D/b.json
f1=$(for p in $OSDS; do awk '{print $10}' /proc/$p/stat; done | paste -sd+ | bc)
c1=$(for p in $OSDS; do awk '{print $14+$15}' /proc/$p/stat; done | paste -sd+ | bc)
tail -1 $D/b.json > $D/last.json
python3 - $D/last.json $f0 $f1 $c0 $c1 <<'PY'
import json,sys
j=json.load(open(sys.argv[1])); f0,f1,c0,c1=map(int,sys.argv[2:]); ops=j["ops"]
print(f"ops_s={ops/j['seconds_run']:.0f} faults_per_write={(f1-f0)/ops:.2f} osd_cpu_us_per_write={(c1-c0)/100*1e6/ops:.1f} mean_us={j['latency_us_avg']:.0f}")
PY
