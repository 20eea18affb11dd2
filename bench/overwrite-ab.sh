#!/usr/bin/env bash
# overwrite-ab.sh: two OSD builds on 4 KiB random overwrites of a prefilled image. Per round and
# build (in turn, the order reversed every other round): a fresh `vstart --osds 3 --mons 1`
# cluster started by that build (pool size 3, 32 PGs, a 1 GiB image whose first 256 MiB are
# prefilled with 4 MiB writes, served by `BIN image nbd`), then fio 4 KiB randwrite qd16 for
# SECS over the prefilled 256 MiB, then qd1 for SECS. One line per run: IOPS, mean latency, OSD
# CPU and page faults per IO (/proc/PID/stat), peak RSS of the largest OSD during the run (VmHWM,
# reset before it) and RSS of the three OSDs after it.
#   bench/overwrite-ab.sh OLD_BIN NEW_BIN [ROUNDS=3] [SECS=10]
set -uo pipefail
OLD=$1; NEW=$2; ROUNDS=${3:-3}; SECS=${4:-10}
PORT=${PORT:-10883}
LIB="$(cd "$(dirname "$0")" && pwd)/lib/image-cluster.sh"
one() { # one LABEL BIN ROUND: a cluster of its own, in a subshell so its EXIT trap stops it
  (
    A=$2; . "$LIB"
    start_image_cluster overwrite-ab
    serve "$A"
    fio --name=prefill --ioengine=nbd --uri="nbd://127.0.0.1:$PORT" --rw=write --bs=4M --iodepth=16 --size=256M > /dev/null 2>&1
    sleep 2
    for qd in 16 1; do
      for p in $OSDS; do echo 5 > "/proc/$p/clear_refs"; done
      o0=$(cpu $OSDS); f0=$(for p in $OSDS; do awk '{print $10}' "/proc/$p/stat"; done | paste -sd+ | bc)
      fio --name=x --ioengine=nbd --uri="nbd://127.0.0.1:$PORT" --rw=randwrite --bs=4k --iodepth=$qd \
        --size=256M --runtime="$SECS" --time_based=1 --output-format=json 2>/dev/null | sed -n '/^{/,$p' > "$D/fio.json"
      o1=$(cpu $OSDS); f1=$(for p in $OSDS; do awk '{print $10}' "/proc/$p/stat"; done | paste -sd+ | bc)
      hwm=$(for p in $OSDS; do awk '/VmHWM/{print $2}' "/proc/$p/status"; done | sort -n | tail -1)
      rss=$(for p in $OSDS; do awk '/VmRSS/{print int($2/1024)}' "/proc/$p/status"; done | paste -sd/)
      python3 - "$D/fio.json" "$1" "$3" "qd$qd" $((o1-o0)) $((f1-f0)) "$HZ" "$hwm" "$rss" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import json, sys
f, label, rnd, name, osd, faults, hz, hwm, rss, load = sys.argv[1:]
d = json.load(open(f))["jobs"][0]["write"]
ios = d["total_ios"]
print(f"{label:4} round={rnd} randwrite_{name:5} iops={d['iops']:7.0f} mean_us={d['clat_ns']['mean']/1e3:7.1f} "
      f"osd_cpu_us_per_io={int(osd)/int(hz)*1e6/ios:6.1f} faults_per_io={int(faults)/ios:5.2f} "
      f"peak_rss_mib={int(hwm)/1024:6.0f} rss_after_mib={rss} load={load}", flush=True)
PY
    done
  )
}
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) = 1 ]; then one old "$OLD" "$round"; one new "$NEW" "$round"
  else one new "$NEW" "$round"; one old "$OLD" "$round"; fi
done
