#!/usr/bin/env bash
# nbd-depth.sh: where an image's 4 KiB random writes spend their CPU, per process, at several
# queue depths. Per round and depth: a fresh `vstart --osds 3 --mons 1` cluster (pool size 3,
# 32 PGs, a 1 GiB image whose first 256 MiB are prefilled with 4 MiB writes, served by
# `BIN image nbd`), fio randwrite 4 KiB over the prefilled 256 MiB for SECS + 4 s, and over SECS
# in the middle of it the CPU time and run-queue wait of each OSD, the NBD server and fio
# (/proc/PID/task/*/schedstat), per IO. One line per run, then one per process.
#   bench/nbd-depth.sh BIN [DEPTHS="16 1"] [ROUNDS=1] [SECS=6]
# PIN=A:B:C:N:F pins (taskset, all threads) OSDs 0-2, the NBD server and fio to those CPUs once
# fio runs; an empty field leaves that process to the kernel (PIN=0:1:0:: pins the OSDs only).
# Environment such as CARMINE_IDLE_POLL_US reaches the OSDs and the NBD server.
set -uo pipefail
A=$1; DEPTHS=${2:-"16 1"}; ROUNDS=${3:-1}; SECS=${4:-6}
PORT=${PORT:-10884}
LIB="$(cd "$(dirname "$0")" && pwd)/lib/image-cluster.sh"

one() { # one DEPTH ROUND: a cluster of its own, in a subshell so its EXIT trap stops it
  (
    local depth=$1 round=$2
    . "$LIB"
    start_image_cluster nbd-depth
    serve "$A"
    fio --name=prefill --ioengine=nbd --uri="nbd://127.0.0.1:$PORT" --rw=write --bs=4M --iodepth=16 \
      --size=256M > /dev/null 2>&1
    sleep 2
    fio --name=x --ioengine=nbd --uri="nbd://127.0.0.1:$PORT" --rw=randwrite --bs=4k --iodepth="$depth" \
      --size=256M --runtime=$((SECS + 4)) --time_based=1 --output-format=json 2>/dev/null |
      sed -n '/^{/,$p' > "$D/fio.json" &
    local fio_job=$!
    sleep 2
    local fio_pid; fio_pid=$(pgrep -n -x fio)
    if [ -n "${PIN:-}" ]; then
      local cpus pids i
      IFS=: read -r -a cpus <<< "$PIN"
      # shellcheck disable=SC2206
      pids=($OSDS "$NBD" "$fio_pid")
      for i in "${!pids[@]}"; do
        [ -n "${cpus[$i]:-}" ] && taskset -a -p -c "${cpus[$i]}" "${pids[$i]}" > /dev/null
      done
    fi
    snap() {
      local p t
      for p in $OSDS $NBD $fio_pid; do
        for t in /proc/"$p"/task/*; do echo "$p $(cat "/proc/$p/comm") $(cat "$t/schedstat")"; done
      done
    }
    snap > "$D/s0"; sleep "$SECS"; snap > "$D/s1"
    wait "$fio_job"
    python3 - "$D/fio.json" "$D/s0" "$D/s1" "$SECS" "$round" "${PIN:-}" "$OSDS" "$NBD" <<'PY'
import collections, json, sys
fio, s0, s1, secs, rnd, pin, osds, nbd = sys.argv[1:]
d = json.load(open(fio))["jobs"][0]["write"]
ios = d["iops"] * float(secs)
def load(path):  # pid -> [cpu ns, run-queue wait ns, timeslices], summed over threads
    r = collections.defaultdict(lambda: [0, 0, 0])
    for line in open(path):
        pid, _comm, *vals = line.split()
        for i, v in enumerate(vals):
            r[pid][i] += int(v)
    return r
a, b = load(s0), load(s1)
names = {p: f"osd.{i}" for i, p in enumerate(osds.split())} | {nbd: "nbd"}
cpu = {p: (b[p][0] - a[p][0]) / 1e3 / ios for p in b if p in a}
wait = {p: (b[p][1] - a[p][1]) / 1e3 / ios for p in b if p in a}
print(f"round={rnd} qd={json.load(open(fio))['jobs'][0]['job options']['iodepth']} pin={pin or 'none'} "
      f"iops={d['iops']:.0f} mean_us={d['clat_ns']['mean'] / 1e3:.1f} cpu_us_per_io={sum(cpu.values()):.1f}", flush=True)
for p in cpu:
    print(f"    {names.get(p, 'fio'):6} cpu_us_per_io={cpu[p]:6.1f} runqueue_wait_us_per_io={wait[p]:6.1f}", flush=True)
PY
  )
}
for round in $(seq 1 "$ROUNDS"); do
  for qd in $DEPTHS; do one "$qd" "$round"; done
done
