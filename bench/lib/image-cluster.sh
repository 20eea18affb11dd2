# Sourced by the NBD benchmarks (nbd-ab.sh, scrub-ab.sh): a fresh `vstart --osds 3
# --mons 1` cluster with pool nbdab (size 3, 32 PGs) and a 1 GiB image nbdab/img, served
# over NBD by `BIN image nbd`. The caller sets A (the binary that starts the cluster)
# and PORT, and calls start_image_cluster PREFIX; the cluster and any server are
# stopped when the script exits.

. "$(dirname "${BASH_SOURCE[0]}")/cluster.sh"

cpu() { # cpu PID...: utime+stime in clock ticks, summed
  local t=0 p
  for p in "$@"; do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done
  echo $t
}

start_image_cluster() { # start_image_cluster PREFIX: sets D, C, HZ, OSDS
  D=$(mktemp -d "/tmp/$1.XXXXXX"); C="--conf $D/carmine.toml"
  HZ=$(getconf CLK_TCK)
  trap '[ -n "${NBD:-}" ] && kill "$NBD" 2>/dev/null; "$A" vstop --dir "$D" >/dev/null 2>&1; rm -rf "$D"' EXIT
  "$A" vstart --osds 3 --mons 1 --dir "$D" > "$D/vstart.log" 2>&1 || { cat "$D/vstart.log"; exit 1; }
  wait_cluster_ready "$A" "$D/carmine.toml"
  "$A" $C pool create nbdab --size 3 --pg-num 32 > /dev/null
  "$A" $C image create nbdab/img --size 1G > /dev/null
  OSDS=$(cat "$D"/run/osd.*.pid)
}

serve() { # serve BIN: `BIN image nbd` on 127.0.0.1:PORT in the background (pid in NBD)
  "$1" $C image nbd nbdab/img --bind "127.0.0.1:$PORT" > "$D/nbd.log" 2>&1 &
  NBD=$!
  local i
  for i in $(seq 1 100); do grep -q serving "$D/nbd.log" && return; sleep 0.1; done
  echo "nbd server did not start"; cat "$D/nbd.log"; exit 1
}

unserve() { kill -TERM "$NBD"; wait "$NBD" 2>/dev/null; NBD=; }
