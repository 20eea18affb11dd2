#!/bin/bash
# peer.sh BIN: a writer (16 in flight) runs while osd.1 is killed and marked down at once;
# its longest op is the time the PGs that lost osd.1 took to serve again. LEASE (seconds, default
# 1) sets osd_read_lease_interval: a new primary serves once the old one's read leases ran out.
BIN=$1; D=${DIR:-/tmp/peer-cost}; rm -rf $D
timeout 60 $BIN vstart --osds 3 --mons 1 --dir $D > /dev/null 2>&1 || exit 1
export CARMINE_CONF=$D/carmine.toml
$BIN config set osd_read_lease_interval ${LEASE:-1} >/dev/null; $BIN pool create p --size 3 --pg-num 64 >/dev/null
for i in $(seq 200); do $BIN health 2>/dev/null | grep -q HEALTH_OK && break; sleep 0.1; done
$BIN --format json bench p write -b 4096 -t 16 --seconds 4 --no-cleanup > $D.bench.json &
BP=$!
sleep 1.5
$BIN vstop --dir $D --only osd.1 --kill >/dev/null
$BIN osd down 1 >/dev/null
wait $BP
python3 -c "import json;d=json.load(open('$D.bench.json'));print('max_ms', d['latency_us_max']/1000, 'ops', d['ops'], 'errors', d['errors'])"
$BIN vstop --dir $D >/dev/null 2>&1
