#!/usr/bin/env bash
# stat.sh BIN DEPTH SECS: perf stat of each OSD, the NBD server and fio during a fio 4 KiB
# randwrite at DEPTH through `BIN image nbd` (fresh size-3 cluster, 256 MiB prefilled); per IO:
# CPU µs, page faults, context switches, migrations and system calls.
set -uo pipefail
A=$1; depth=${2:-16}; SECS=${3:-6}
PORT=${PORT:-10885}
. "$(cd "$(dirname "$0")/../../lib" && pwd)/image-cluster.sh"
start_image_cluster probe
serve "$A"
fio --name=prefill --ioengine=nbd --uri="nbd://127.0.0.1:$PORT" --rw=write --bs=4M --iodepth=16 --size=256M > /dev/null 2>&1
sleep 2
fio --name=x --ioengine=nbd --uri="nbd://127.0.0.1:$PORT" --rw=randwrite --bs=4k --iodepth="$depth" \
  --size=256M --runtime=$((SECS + 4)) --time_based=1 --output-format=json 2>/dev/null | sed -n '/^{/,$p' > "$D/fio.json" &
job=$!
sleep 2
fio_pid=$(pgrep -n -x fio)
i=0
for p in $OSDS $NBD $fio_pid; do
  perf stat -x, -e task-clock,page-faults,context-switches,cpu-migrations,syscalls:sys_enter_sched_yield,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_writev,syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendto,syscalls:sys_enter_write,syscalls:sys_enter_read -p $p -o "$D/perf.$i" -- sleep "$SECS" &
  perfs="${perfs:-} $!"
  i=$((i+1))
done
wait $job
wait $perfs
iops=$(python3 -c "import json;print(json.load(open('$D/fio.json'))['jobs'][0]['write']['iops'])")
echo "depth=$depth iops=$iops"
ios=$(python3 -c "print($iops*$SECS)")
i=0
for name in osd0 osd1 osd2 nbd fio; do
  python3 - "$D/perf.$i" "$ios" "$name" <<'PY'
import sys
path, ios, name = sys.argv[1], float(sys.argv[2]), sys.argv[3]
out = []
for line in open(path):
    f = line.strip().split(',')
    if len(f) < 3 or not f[0] or f[0].startswith('<'): continue
    ev = f[2].replace('syscalls:sys_enter_','')
    v = float(f[0])
    if ev == 'task-clock': out.append(f"cpu_us={v*1e3/ios:6.1f}")
    else: out.append(f"{ev}={v/ios:5.2f}")
print(f"  {name:5} " + " ".join(out))
PY
  i=$((i+1))
done
