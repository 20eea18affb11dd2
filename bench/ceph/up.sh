#!/usr/bin/env bash
# Copied from /work/shared/tools/ceph/up.sh (the team's shared Ceph tools), unchanged apart from this line.
# up.sh [N_OSDS] [STORE]
#   Start a tiny Ceph (Debian 16.2.x Pacific packages) cluster on 127.0.0.1 only:
#   1 monitor, N OSDs (default 3), no mgr unless WITH_MGR=1, auth none, no systemd.
#   STORE = memstore (default) | bluestore (4 GiB sparse file per OSD under the data dir)
# Environment knobs:
#   CEPH_BASE     data dir (default /tmp/cephbase); everything lives there (conf, logs, pids, stores)
#   MON_PORT      msgr2 port of the mon (default 3300); msgr1 port is MON_PORT_V1 (default 6789)
#   MEMSTORE_GB   memstore device size accounted per OSD (default 4; RAM is used only for data stored)
#   BLUESTORE_GB  size of the sparse block file per OSD (default 4)
#   MEMSTORE_PAGE_SET  memstore_page_set (default true: 64 KiB pages; 'false' = Ceph's default
#                 bufferlist objects, whose random 4K overwrites fragment and slow down over time)
#   WITH_MGR=1    also start a ceph-mgr (not needed for rados/rbd/fio)
#   CEPH_DEBUG=1  keep Ceph's default debug log levels (default: debug_* = 0/0, as usual for benchmarks)
# Exit status 0 once all OSDs are up+in and a test pool accepts a write+read.
set -euo pipefail

N_OSDS=${1:-3}
STORE=${2:-memstore}
BASE=${CEPH_BASE:-/tmp/cephbase}
MON_PORT=${MON_PORT:-3300}
MON_PORT_V1=${MON_PORT_V1:-6789}
MEMSTORE_GB=${MEMSTORE_GB:-4}
BLUESTORE_GB=${BLUESTORE_GB:-4}
MEMSTORE_PAGE_SET=${MEMSTORE_PAGE_SET:-true}
MEMSTORE_PAGE_SIZE=${MEMSTORE_PAGE_SIZE:-4096}
WITH_MGR=${WITH_MGR:-0}
HERE=$(cd "$(dirname "$0")" && pwd)

case "$STORE" in memstore|bluestore) ;; *) echo "STORE must be memstore or bluestore" >&2; exit 2;; esac

if [ -e "$BASE/pids" ] && ls "$BASE"/pids/*.pid >/dev/null 2>&1; then
  echo "A cluster seems to be running under $BASE (pid files exist); run down.sh first" >&2
  exit 1
fi
for p in "$MON_PORT" "$MON_PORT_V1"; do
  if ss -ltn "( sport = :$p )" 2>/dev/null | grep -q LISTEN; then
    echo "port $p already in use on this machine; set MON_PORT/MON_PORT_V1" >&2; exit 1
  fi
done

trap 'echo "up.sh failed; logs in $BASE/log; run down.sh (CEPH_BASE=$BASE) to stop what was started" >&2' ERR
T0=$(date +%s.%N)
rm -rf "$BASE"
mkdir -p "$BASE"/{log,run,pids,mon.a}
CONF="$BASE/ceph.conf"
FSID=$(uuidgen)
export CEPH_CONF="$CONF"

if [ "${CEPH_DEBUG:-0}" = 1 ]; then
  DEBUG_LINES=""
else
  DEBUG_LINES=$(for s in ms osd mon monc auth objecter rados rbd filestore memstore bluestore bluefs bdev rocksdb \
                          journal ms paxos crush objclass optracker finisher heartbeatmap perfcounter timer throttle \
                          asok context buffer client mgrc mgr objectcacher; do echo "debug_$s = 0/0"; done)
fi

cat > "$CONF" <<EOF
[global]
fsid = $FSID
mon_host = [v2:127.0.0.1:$MON_PORT,v1:127.0.0.1:$MON_PORT_V1]
public_addr = 127.0.0.1
cluster_addr = 127.0.0.1
public_network = 127.0.0.0/8
cluster_network = 127.0.0.0/8
ms_bind_ipv4 = true
ms_bind_ipv6 = false
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
auth_supported = none
keyring = $BASE/keyring
run_dir = $BASE/run
admin_socket = $BASE/run/\$name.asok
log_file = $BASE/log/\$name.log
pid_file = $BASE/run/\$name.pid
log_to_stderr = false
err_to_stderr = true
crash_dir = $BASE/crash
mon_allow_pool_delete = true
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
mon_warn_on_insecure_global_id_reclaim = false
mon_warn_on_insecure_global_id_reclaim_allowed = false
mon_warn_on_pool_no_app = false
mon_data_avail_warn = 2
mon_data_avail_crit = 1
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 32
osd_pool_default_pgp_num = 32
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
osd_objectstore = $STORE
$DEBUG_LINES

[mon]
mon_data = $BASE/\$name
mon_cluster_log_file = $BASE/log/cluster.log

[mgr]
mgr_data = $BASE/\$name

[client]
rbd_cache = false

[osd]
osd_data = $BASE/\$name
osd_class_dir = /usr/lib/x86_64-linux-gnu/rados-classes
osd_max_object_name_len = 460
osd_max_object_namespace_len = 64
osd_check_max_object_name_len_on_startup = false
memstore_device_bytes = $((MEMSTORE_GB * 1024 * 1024 * 1024))
memstore_page_set = $MEMSTORE_PAGE_SET
memstore_page_size = $MEMSTORE_PAGE_SIZE
bluestore_block_path = $BASE/\$name.block
bluestore_block_create = true
bluestore_block_size = $((BLUESTORE_GB * 1024 * 1024 * 1024))
bluestore_block_db_create = false
bluestore_block_wal_create = false
osd_memory_target = 1073741824
bluestore_cache_autotune = true
osd_fast_fail_on_connection_refused = true
EOF

# keyring (content unused with auth none, but the tools like to find one)
ceph-authtool --create-keyring "$BASE/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
ceph-authtool "$BASE/keyring" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' \
  --cap mgr 'allow *' --cap mds 'allow *' >/dev/null

start_daemon() {   # start_daemon NAME cmd...   -> runs in foreground mode (-f) detached, pid recorded
  local name=$1; shift
  setsid "$@" -f </dev/null >>"$BASE/log/$name.stdout" 2>&1 &
  local pid=$!
  echo "$pid" > "$BASE/pids/$name.pid"
  sleep 0.2
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "$name failed to start; see $BASE/log/$name.stdout and $BASE/log/$name.log" >&2
    tail -20 "$BASE/log/$name.stdout" >&2 || true
    exit 1
  fi
}

# ---------------- monitor ----------------
monmaptool --create --clobber --fsid "$FSID" \
  --addv a "[v2:127.0.0.1:$MON_PORT,v1:127.0.0.1:$MON_PORT_V1]" "$BASE/monmap" >/dev/null
ceph-mon -c "$CONF" --mkfs -i a --monmap "$BASE/monmap" --keyring "$BASE/keyring" >"$BASE/log/mon.a.mkfs" 2>&1
start_daemon mon.a ceph-mon -c "$CONF" -i a

for i in $(seq 1 100); do
  if timeout 5 ceph -c "$CONF" mon stat >/dev/null 2>&1; then break; fi
  sleep 0.2
  if [ "$i" = 100 ]; then echo "mon did not come up" >&2; exit 1; fi
done
T_MON=$(date +%s.%N)

# ---------------- mgr (optional) ----------------
if [ "$WITH_MGR" = 1 ]; then
  mkdir -p "$BASE/mgr.x"
  ceph -c "$CONF" config set mgr mgr_pool false >/dev/null 2>&1 || true
  start_daemon mgr.x ceph-mgr -c "$CONF" -i x
fi

# ---------------- OSDs ----------------
for n in $(seq 0 $((N_OSDS - 1))); do
  uuid=$(uuidgen)
  id=$(ceph -c "$CONF" osd new "$uuid")
  mkdir -p "$BASE/osd.$id"
  ceph-osd -c "$CONF" -i "$id" --mkfs --osd-uuid "$uuid" >"$BASE/log/osd.$id.mkfs" 2>&1 || {
    echo "osd.$id mkfs failed:" >&2; tail -30 "$BASE/log/osd.$id.mkfs" >&2; exit 1; }
  start_daemon "osd.$id" ceph-osd -c "$CONF" -i "$id"
done

# wait for all OSDs up and in
for i in $(seq 1 600); do
  st=$(ceph -c "$CONF" osd stat -f json 2>/dev/null || true)
  up=$(echo "$st" | python3 -c 'import sys,json; d=json.load(sys.stdin); print(d["num_up_osds"], d["num_in_osds"])' 2>/dev/null || echo "0 0")
  if [ "$up" = "$N_OSDS $N_OSDS" ]; then break; fi
  if [ "$i" = 600 ]; then echo "OSDs not all up/in after 120 s: $up" >&2; exit 1; fi
  sleep 0.2
done
T_OSD=$(date +%s.%N)

# usable pool check: create a pool, write + read one object, delete the pool
SZ=$(( N_OSDS >= 3 ? 3 : 1 ))
ceph -c "$CONF" osd pool create uptest 8 8 replicated >/dev/null 2>&1
ceph -c "$CONF" osd pool set uptest size "$SZ" --yes-i-really-mean-it >/dev/null 2>&1
echo hello > "$BASE/run/uptest.obj"
for i in $(seq 1 120); do
  if timeout 10 rados -c "$CONF" -p uptest put probe "$BASE/run/uptest.obj" 2>/dev/null &&
     timeout 10 rados -c "$CONF" -p uptest get probe - 2>/dev/null | grep -q hello; then ok=1; break; fi
  sleep 0.5
done
[ "${ok:-0}" = 1 ] || { echo "test pool not usable" >&2; exit 1; }
T_POOL=$(date +%s.%N)
ceph -c "$CONF" osd pool rm uptest uptest --yes-i-really-really-mean-it >/dev/null 2>&1

echo "$STORE" > "$BASE/store"
echo "$N_OSDS" > "$BASE/n_osds"
echo "---- ceph -s ----"
timeout 10 ceph -c "$CONF" -s || true
echo "---- health ----"
timeout 10 ceph -c "$CONF" health detail || true
python3 - "$T0" "$T_MON" "$T_OSD" "$T_POOL" "$N_OSDS" "$STORE" <<'EOF'
import sys
t0, tm, to, tp = map(float, sys.argv[1:5])
print(f"startup ({sys.argv[5]} OSDs, {sys.argv[6]}): mon ready {tm-t0:.1f} s, all OSDs up/in {to-t0:.1f} s, "
      f"pool usable (size {'3' if int(sys.argv[5])>=3 else '1'} write+read ok) {tp-t0:.1f} s")
EOF
echo "export CEPH_CONF=$CONF    # for ceph/rados/rbd/fio"
echo "pids: $(cat "$BASE"/pids/*.pid | tr '\n' ' ')"
