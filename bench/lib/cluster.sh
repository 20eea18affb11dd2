# Sourced by the bench scripts that start a `vstart --osds 3 --mons 1` cluster.

wait_cluster_ready() { # wait_cluster_ready BIN CONF: up to 20 s for 3 up OSDs and HEALTH_OK
  local i
  for i in $(seq 1 100); do
    "$1" --conf "$2" --format json status 2>/dev/null | python3 -c 'import json,sys; s=json.load(sys.stdin)
sys.exit(0 if s["osdmap"]["num_up_osds"]==s["osdmap"]["num_osds"]==3 and s["health"]["status"]=="HEALTH_OK" else 1)' && return 0
    sleep 0.2
  done
  return 1
}
