#!/usr/bin/env bash
# scrub-ab.sh: fio 4 KiB randwrite (qd1, qd16) through `carmine image nbd`, with the
# background deep scrub on (the default, `osd_scrub_interval` 1 s) and off (0), in turn on one
# cluster (3 OSDs, pool size 3, 32 PGs, a 1 GiB image with its first 256 MiB prefilled with
# 4 MiB writes). BIN (the carmine binary) ROUNDS SECS. One line per run: IOPS, latency mean,
# p50, p99, p99.9, OSD CPU per IO.
set -uo pipefail
A=${BIN:-target/release/carmine}; ROUNDS=${ROUNDS:-3}; SECS=${SECS:-8}
PORT=${PORT:-10881}
. "$(dirname "$0")/lib/image-cluster.sh"
start_image_cluster scrub-ab
serve "$A"
fio --name=prefill --ioengine=nbd --uri="nbd://127.0.0.1:$PORT" --rw=write --bs=4M --iodepth=16 --size=256M > /dev/null 2>&1
for round in $(seq 1 "$ROUNDS"); do
  for mode in on off; do
    if [ $mode = on ]; then "$A" $C config rm osd_scrub_interval >/dev/null 2>&1; else "$A" $C config set osd_scrub_interval 0 >/dev/null; fi
    sleep 2
    for spec in "randwrite 1" "randwrite 16"; do
      read -r rw qd <<< "$spec"
      o0=$(cpu $OSDS)
      fio --name=x --ioengine=nbd --uri="nbd://127.0.0.1:$PORT" --rw=$rw --bs=4k --iodepth=$qd \
        --size=256M --runtime="$SECS" --time_based=1 --lat_percentiles=1 --output-format=json 2>/dev/null | sed -n '/^{/,$p' > "$D/fio.json"
      o1=$(cpu $OSDS)
      python3 - "$D/fio.json" "$mode" "$round" "${rw}_qd$qd" $((o1-o0)) "$HZ" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import json, sys
f, mode, rnd, name, osd, hz, load = sys.argv[1:]
j = json.load(open(f))["jobs"][0]
d = j["write"]
ios = d["total_ios"]
p = d["clat_ns"]["percentile"]
print(f"scrub={mode} round={rnd} {name:14} iops={d['iops']:8.0f} mean_us={d['clat_ns']['mean']/1e3:7.1f} p50={p['50.000000']/1e3:7.1f} p99={p['99.000000']/1e3:8.1f} p99.9={p['99.900000']/1e3:8.1f} osd_cpu_us_per_io={int(osd)/int(hz)*1e6/ios:6.1f} load={load}", flush=True)
PY
    done
  done
done
