#!/usr/bin/env bash
# Copied from /work/shared/tools/ceph/down.sh (the team's shared Ceph tools), unchanged apart from this line.
# down.sh: stop only the daemons started by up.sh (by the PIDs recorded in $CEPH_BASE/pids/*.pid)
# and remove the data dir. Never kills by name.
set -uo pipefail
BASE=${CEPH_BASE:-/tmp/cephbase}
KEEP=${KEEP_DATA:-0}     # KEEP_DATA=1 keeps the data dir (logs) for inspection

pids=()
if [ -d "$BASE/pids" ]; then
  for f in "$BASE"/pids/*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    name=$(basename "$f" .pid)
    comm=$(cat "/proc/$pid/comm" 2>/dev/null || true)
    case "$comm" in
      ceph-*|fio|rados) echo "stopping $name pid $pid ($comm)"; kill -TERM "$pid" 2>/dev/null; pids+=("$pid");;
      "") echo "$name pid $pid already gone";;
      *) echo "$name pid $pid is now '$comm', not ours; leaving it alone";;
    esac
  done
fi
for i in $(seq 1 50); do
  alive=0
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
  [ $alive = 0 ] && break
  sleep 0.2
done
for pid in "${pids[@]}"; do
  if kill -0 "$pid" 2>/dev/null; then echo "pid $pid did not exit on TERM; sending KILL"; kill -KILL "$pid" 2>/dev/null; fi
done
sleep 0.2
if [ "$KEEP" = 1 ]; then
  rm -f "$BASE"/pids/*.pid
  echo "kept $BASE"
else
  case "$BASE" in /|/tmp|/home|/root|"") echo "refusing to remove $BASE";; *) rm -rf "$BASE"; echo "removed $BASE";; esac
fi
