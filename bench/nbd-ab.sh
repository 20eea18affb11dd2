#!/usr/bin/env bash
# nbd-ab.sh: CPU per IO of `carmine image nbd`, two binaries A/B, runs interleaved on one cluster.
#
#   bench/nbd-ab.sh BIN_A BIN_B [ROUNDS] [SECONDS]
#
# Starts `BIN_A vstart --osds 3 --mons 1` (pool nbdab, size 3, 32 PGs; a 1 GiB image,
# the first 256 MiB prefilled with 4 MiB writes), then for each round and each binary
# serves the image with `BIN image nbd` and runs fio (--ioengine=nbd) 4 KiB randwrite
# qd16, randread qd16 and randwrite qd1 for SECONDS each. Around every fio run it reads
# utime+stime of the NBD server and of the OSDs from /proc/PID/stat. Prints one line per
# run: binary, workload, IOPS, mean latency, NBD-server CPU µs per IO, OSD CPU µs per IO,
# load average. The server is restarted for each round, so both binaries see the same
# cluster, the same objects and the same machine state, alternately.
set -uo pipefail
A=$(readlink -f "$1"); B=$(readlink -f "$2"); ROUNDS=${3:-3}; SECS=${4:-8}
PORT=${PORT:-10871}
. "$(dirname "$0")/lib/image-cluster.sh"
start_image_cluster nbd-ab
fio_run() { # fio_run NAME RW QD
  fio --name="$1" --ioengine=nbd --uri="nbd://127.0.0.1:$PORT" --rw="$2" --bs=4k --iodepth="$3" \
    --size=256M --runtime="$SECS" --time_based=1 --output-format=json 2>/dev/null | sed -n '/^{/,$p' > "$D/fio.json"
}
serve "$A"
fio --name=prefill --ioengine=nbd --uri="nbd://127.0.0.1:$PORT" --rw=write --bs=4M --iodepth=16 --size=256M > /dev/null 2>&1
unserve
for round in $(seq 1 "$ROUNDS"); do
  for label in A B; do
    [ $label = A ] && bin=$A || bin=$B
    serve "$bin"
    for spec in "randwrite 16" "randread 16" "randwrite 1"; do
      read -r rw qd <<< "$spec"
      n0=$(cpu "$NBD"); o0=$(cpu $OSDS)
      fio_run "$rw" "$rw" "$qd"
      n1=$(cpu "$NBD"); o1=$(cpu $OSDS)
      python3 - "$D/fio.json" "$label" "$round" "${rw}_qd$qd" $((n1-n0)) $((o1-o0)) "$HZ" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import json, sys
f, label, rnd, name, nbd, osd, hz, load = sys.argv[1:]
j = json.load(open(f))["jobs"][0]
d = j["write"] if j["write"]["io_bytes"] > 0 else j["read"]
ios = d["total_ios"]
print(f"{label} round={rnd} {name:14} iops={d['iops']:9.0f} lat_mean_us={d['clat_ns']['mean']/1e3:8.1f} "
      f"nbd_cpu_us_per_io={int(nbd)/int(hz)*1e6/ios:6.1f} osd_cpu_us_per_io={int(osd)/int(hz)*1e6/ios:6.1f} load={load}", flush=True)
PY
    done
    unserve
  done
done
