#!/usr/bin/env bash
# per-event.sh BIN [ROUNDS=3] [SECS=6]: CPU per 4 KiB random write at depth 16 through NBD,
# per process, for nbdkit's memory plugin and for Carmine's export of a size-3 image, and
# the raw TCP ceiling at depth 16, in interleaved rounds. CPU from `perf stat -e task-clock`
# of each process over SECS in the middle of a fio run of SECS + 4 s.
set -uo pipefail
BIN=$1; ROUNDS=${2:-3}; SECS=${3:-6}
STAT=$(dirname "$0")/stat.sh
cc -O2 -o /tmp/tcp-ceiling "$(dirname "$0")/../../../../shared/tools/tcp-ceiling.c" 2>/dev/null
nbdkit_round() {
  local port=10891 pid fpid
  nbdkit -f -p $port memory 1G & pid=$!
  sleep 1
  fio --name=x --ioengine=nbd --uri=nbd://127.0.0.1:$port --rw=randwrite --bs=4k --iodepth=16 --size=256M \
    --runtime=$((SECS + 4)) --time_based=1 --output-format=json 2>/dev/null | sed -n '/^{/,$p' > /tmp/pe.nbdkit.json &
  local job=$!
  sleep 2; fpid=$(pgrep -n -x fio)
  perf stat -x, -e task-clock,context-switches -p $pid -o /tmp/pe.nk -- sleep "$SECS" & local p1=$!
  perf stat -x, -e task-clock,context-switches -p "$fpid" -o /tmp/pe.fio -- sleep "$SECS" & local p2=$!
  wait $job $p1 $p2; kill $pid; wait $pid 2>/dev/null
  python3 - "$SECS" <<'PY'
import json, sys
secs = float(sys.argv[1])
iops = json.load(open('/tmp/pe.nbdkit.json'))['jobs'][0]['write']['iops']
def cpu(p):
    for l in open(p):
        f = l.strip().split(',')
        if len(f) > 2 and f[2] == 'task-clock': return float(f[0]) * 1e3 / (iops * secs)
print(f"nbdkit  iops={iops:8.0f}  cpu_us_per_io: nbdkit={cpu('/tmp/pe.nk'):5.1f} fio={cpu('/tmp/pe.fio'):5.1f}")
PY
}
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r"
  nbdkit_round
  echo "carmine $(timeout 150 "$STAT" "$BIN" 16 "$SECS" 2>&1 | tail -6 | sed 's/ page-faults.*//' | tr -s ' ' | tr '\n' ' ')"
  local_out=$(perf stat -x, -e task-clock -o /tmp/pe.tcp /tmp/tcp-ceiling 4096 16 20000 2>&1 | tail -1)
  python3 - "$local_out" <<'PY'
import sys
line = sys.argv[1]
ops = float(line.split('ops_per_s=')[1].split()[0]); secs = float(line.split('seconds=')[1].split()[0])
n = float(line.split('ops=')[1].split()[0])
cpu = [float(l.split(',')[0]) for l in open('/tmp/pe.tcp') if ',task-clock,' in l][0]
print(f"tcp-ceiling 4096 16 20000: ops_per_s={ops:8.0f} cpu_us_per_op={cpu * 1e3 / n:5.2f} (a 4 KiB request and a 16-byte ack)")
PY
done
