#!/usr/bin/env bash
# Where a depth-1 block write's time goes (issue #10): three depth-1 4 KiB write latencies
# on one cluster, alternating, ROUNDS times: `carmine bench` on a size-3 pool (the object
# write alone), fio qd1 randwrite through `BIN image nbd` on a size-3 image (the same
# write plus the NBD hop), and fio qd1 through nbdkit's memory plugin (the NBD hop alone:
# fio's engine and a server that does nothing).
#
#   bench/qd1-split.sh BIN          environment: ROUNDS [3]  SECS [6]
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BIN" >&2; exit 2; }
A=$(readlink -f "$1"); PORT=${PORT:-10872}; NBDKIT_PORT=${NBDKIT_PORT:-10873}
ROUNDS=${ROUNDS:-3}; SECS=${SECS:-6}
. "$(dirname "$0")/lib/image-cluster.sh"
start_image_cluster qd1
fio_lat() { # fio_lat URI -> mean µs
  fio --name=q --ioengine=nbd --uri="$1" --rw=randwrite --bs=4k --iodepth=1 --size=256M \
    --runtime="$SECS" --time_based=1 --output-format=json 2>/dev/null | sed -n '/^{/,$p' \
    | python3 -c 'import json,sys; j=json.load(sys.stdin); print(round(j["jobs"][0]["write"]["lat_ns"]["mean"]/1000))'
}
serve "$A"
fio --name=prefill --ioengine=nbd --uri="nbd://127.0.0.1:$PORT" --rw=write --bs=4M --iodepth=16 --size=256M > /dev/null 2>&1
unserve
"$A" $C pool create b3 --size 3 --pg-num 32 > /dev/null
for r in $(seq 1 $ROUNDS); do
  b=$("$A" $C bench b3 write -b 4096 -t 1 --seconds "$SECS" | awk '/Average latency/ {printf "%.0f", $4*1000}')
  serve "$A"; c=$(fio_lat "nbd://127.0.0.1:$PORT"); unserve
  nbdkit -f -p "$NBDKIT_PORT" -i 127.0.0.1 memory 1G & NK=$!; sleep 0.5
  n=$(fio_lat "nbd://127.0.0.1:$NBDKIT_PORT"); kill $NK; wait $NK 2>/dev/null
  echo "round $r: bench t1 size 3 ${b} us, fio qd1 via carmine nbd ${c} us, fio qd1 via nbdkit memory ${n} us"
done
