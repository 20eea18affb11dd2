#!/usr/bin/env bash
# snap-under-load.sh BIN [SNAPS=5]: how long `image snap create` takes while fio writes
# 4 KiB at depth 16 through `BIN image nbd` (a writer holding a lease), against the same
# on the idle image; and fio's IOPS in the seconds around. Fresh size-3 cluster.
set -uo pipefail
A=$1; SNAPS=${2:-5}
PORT=${PORT:-10887}
. "$(cd "$(dirname "$0")/lib" && pwd)/image-cluster.sh"
start_image_cluster snapload
serve "$A"
ms() { date +%s%3N; }
idle=()
for i in $(seq 1 "$SNAPS"); do
  t=$(ms); "$A" $C image snap create "nbdab/img@idle$i" > /dev/null || exit 1; idle+=($(( $(ms) - t )))
done
fio --name=x --ioengine=nbd --uri="nbd://127.0.0.1:$PORT" --rw=randwrite --bs=4k --iodepth=16 \
  --size=256M --runtime=$((SNAPS * 2 + 6)) --time_based=1 --write_iops_log="$D/iops" --log_avg_msec=500 \
  --output-format=json 2>/dev/null | sed -n '/^{/,$p' > "$D/fio.json" &
job=$!
sleep 3
busy=()
for i in $(seq 1 "$SNAPS"); do
  t=$(ms); "$A" $C image snap create "nbdab/img@busy$i" > /dev/null || exit 1; busy+=($(( $(ms) - t )))
  sleep 1
done
wait $job
echo "snap create, idle image (ms): ${idle[*]}"
echo "snap create, fio randwrite qd16 through NBD (ms): ${busy[*]}"
python3 - "$D/fio.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))['jobs'][0]['write']
print(f"fio over the whole run: {j['iops']:.0f} IOPS, max completion latency {j['clat_ns']['max'] / 1e6:.1f} ms")
PY
