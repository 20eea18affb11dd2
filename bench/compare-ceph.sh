#!/usr/bin/env bash
# compare-ceph.sh: Carmine against real Ceph, side by side on this machine (issue #11).
#
#   bench/compare-ceph.sh            # from anywhere; builds Carmine (release) first
#
# Three phases, each on a fresh cluster (so no run pays for an earlier one's deletes, and memory
# is measured from the same start), first for Ceph, then for Carmine:
#   block: a size-3 pool, a 1 GiB image with its first IMG_REGION prefilled (4 MiB writes), then
#          fio 4 KiB randwrite qd16, randread qd16, randwrite qd1, the three FIO_REPS times over
#          (the table takes each metric's median: one fio run's IOPS moves by up to 2x on this
#          kind of shared machine, nbdkit's most of all) -- Ceph through librbd
#          (`fio --ioengine=rbd`, rbd_cache off), Carmine through its NBD export
#          (`carmine image nbd` + `fio --ioengine=nbd`), the same fio parameters; and the same fio runs
#          against `nbdkit memory 1G` on loopback (NBDKIT=1, the default): a block device in local RAM
#          over the same protocol, the ceiling issue #10 measures the NBD export against;
#   size 1 and size 3 (32 PGs): object benchmarks -- `rados bench` for Ceph, `carmine bench` for
#          Carmine: 4 KiB writes 16 in flight, 4 KiB random reads of those objects 16 in flight,
#          4 KiB writes 1 in flight, 4 MiB writes 16 in flight (every write --no-cleanup: no run
#          includes deletes). Each phase starts with a 2 s 4 KiB warm-up write.
# Ceph is Debian's 16.2 (ceph-mon, ceph-osd, ceph-common, fio with its rbd engine): 1 monitor +
# N_OSDS memstore OSDs on 127.0.0.1, no mgr, no systemd (bench/ceph/up.sh, from the team's shared
# tools; bench/ceph/down.sh stops one by hand). Its OSDs are stopped with SIGKILL by pid (a clean
# MemStore shutdown first writes every object to disk) and the monitor with SIGTERM. Carmine is `carmine vstart --osds N_OSDS --mons 1`
# (MemStore), stopped with `carmine vstop`. Then it prints one table (workload, metric, Ceph,
# Carmine, Carmine/Ceph, the issue's target) and writes results.jsonl, table.md, table-wide.md and
# compare-ceph.png (latency CDF of 4 KiB writes, size 3, qd16, from fio's full latency histograms;
# throughput bars per workload).
#
# Per run it measures: ops/s, MB/s (10^6 B), mean and p99 latency (rados bench reports no
# percentiles, so Ceph's object-level p99 is "n/a"; the fio rows have both), CPU seconds of all
# OSD processes together per op (/proc/PID/stat utime+stime deltas around the run), peak RSS
# per OSD during the run (VmHWM, reset through /proc/PID/clear_refs before each run) and RSS
# per OSD at rest (VmRSS in the first phase after start-up and pool creation, OSDs idle, before
# any IO). Before each run it waits (up to 60 s) for the OSDs to go idle; it records the CPU the
# OSDs got and the CPU other processes on the host took during each run (machines are shared).
#
# Environment (defaults in brackets):
#   OUT         raw logs and results [/tmp/compare-ceph-<date>]; RESULTS [bench/results, or OUT
#               with QUICK=1]: where table.md, table-wide.md, results.jsonl and the PNG are copied
#   N_OSDS [3]  SIZES ["1 3"]  PG_NUM [32]
#   DUR [15] (4 KiB t16 write and read)  DUR_LAT [10] (4 KiB t1)  DUR_BIG [8] (4 MiB)
#   DUR_FIO [8] (each fio run)  FIO_REPS [3] (rounds of the three fio runs; the table shows medians)
#   IMG_REGION [256M]  FIO [1] (0 skips the block runs)  QUICK=1 (2-3 s runs, one fio round)
#   NBDKIT [1] (0 skips the nbdkit-memory block runs; they run only with FIO=1)
#   CARMINE_BIN (skip the build and use this binary)  CARGO_TARGET_DIR (as cargo)
#   ONLY=ceph|carmine (run one side; the table then shows only that side)
#   ORDER [ceph-first] | carmine-first: which system's phases run first (nbdkit's always last).
#               The second system starts on a host that has just run the first: alternate the
#               order between runs to see whether that matters
#   CARMINE_NO_PIN=1  restart each OSD vstart started with `--no-pin`. Only matters when all shards fit
#               the CPUs: vstart then pins each shard to a CPU of its own, and with more shards than CPUs
#               (3 one-shard OSDs on 2 cores) it already starts them unpinned
# Needs: ceph-mon ceph-osd ceph-common (rados, rbd) python3-rados fio; python3-matplotlib
# is installed with apt-get when missing.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
N_OSDS=${N_OSDS:-3}
SIZES=${SIZES-"1 3"}   # SIZES="" (set, empty): the block phases only
PG_NUM=${PG_NUM:-32}
DUR=${DUR:-15}; DUR_LAT=${DUR_LAT:-10}; DUR_BIG=${DUR_BIG:-8}; DUR_FIO=${DUR_FIO:-8}; FIO_REPS=${FIO_REPS:-3}
if [ "${QUICK:-0}" = 1 ]; then DUR=3; DUR_LAT=2; DUR_BIG=2; DUR_FIO=3; FIO_REPS=1; fi
IMG_REGION=${IMG_REGION:-256M}
FIO=${FIO:-1}
NBDKIT=${NBDKIT:-1}
ONLY=${ONLY:-both}
ORDER=${ORDER:-ceph-first}
MAX_BIG_OBJS=${MAX_BIG_OBJS:-512}   # rados bench 4 MiB: cap on objects (memory), as in the shared bench.sh
OUT=${OUT:-/tmp/compare-ceph-$(date +%Y%m%d-%H%M%S)}
# a QUICK run is for trying the script: it leaves the committed results alone unless RESULTS is set
if [ "${QUICK:-0}" = 1 ]; then RESULTS=${RESULTS:-$OUT}; else RESULTS=${RESULTS:-$HERE/results}; fi
TICK=$(getconf CLK_TCK)
T_START=$(date +%s)

die() { echo "compare-ceph: $*" >&2; exit 1; }
log() { echo "[$(date +%H:%M:%S)] $*"; }
case "$ORDER" in ceph-first|carmine-first) ;; *) die "ORDER must be ceph-first or carmine-first, not '$ORDER'";; esac

# ---------------------------------------------------------------- preconditions
# Debian's python (python3-rados, python3-matplotlib live there), not one from pyenv/venv on PATH
PY=/usr/bin/python3; [ -x "$PY" ] || PY=$(command -v python3)
for t in ceph-mon ceph-osd ceph monmaptool ceph-authtool rados rbd fio python3 uuidgen ss getconf; do
  command -v "$t" >/dev/null || die "'$t' not found; install Debian's ceph-mon ceph-osd ceph-common fio uuid-runtime iproute2"
done
"$PY" -c 'import rados' 2>/dev/null || die "python3-rados is missing (apt-get install python3-rados)"
fio --enghelp 2>/dev/null | grep -qw rbd || die "this fio has no rbd ioengine (Debian's fio has it)"
fio --enghelp 2>/dev/null | grep -qw nbd || die "this fio has no nbd ioengine (Debian's fio has it)"
if [ "$NBDKIT" = 1 ] && [ "$FIO" = 1 ]; then
  command -v nbdkit >/dev/null || die "'nbdkit' not found; install Debian's nbdkit (or set NBDKIT=0)"
fi
if ! "$PY" -c 'import matplotlib' 2>/dev/null; then
  log "installing python3-matplotlib (for the plot)"
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get install -y -q python3-matplotlib >/dev/null 2>&1 ||
    { $SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q python3-matplotlib >/dev/null 2>&1; } ||
    echo "compare-ceph: could not install python3-matplotlib; the table is printed but no PNG" >&2
fi

mkdir -p "$OUT" "$RESULTS"
OUT=$(cd "$OUT" && pwd)
JSONL="$OUT/results.jsonl"
echo "{\"type\": \"meta\", \"n_osds\": $N_OSDS, \"img_region_bytes\": $(numfmt --from=iec "$IMG_REGION")}" > "$JSONL"
exec > >(tee -a "$OUT/compare-ceph.log") 2>&1
exec 3>&1   # the traps write here: a signal can arrive while a run's output is redirected to its log

if [ -z "${CARMINE_BIN:-}" ]; then
  log "building Carmine (cargo build --release -p carmine-cli)"
  (cd "$ROOT" && cargo build --release -q -p carmine-cli) || die "cargo build failed"
  CARMINE_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/carmine"
fi
[ -x "$CARMINE_BIN" ] || die "no carmine binary at $CARMINE_BIN"
CARMINE_BIN=$(readlink -f "$CARMINE_BIN")

{
  echo "date: $(date -Is)"
  echo "host: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), kernel $(uname -r), $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "ceph: $(ceph --version | head -1)"
  echo "fio: $(fio --version)"
  if [ "$NBDKIT" = 1 ] && [ "$FIO" = 1 ]; then echo "nbdkit: $(nbdkit --version | head -1)"; fi
  echo "carmine: $CARMINE_BIN ($(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?'))"
  echo "params: N_OSDS=$N_OSDS SIZES='$SIZES' PG_NUM=$PG_NUM DUR=$DUR DUR_LAT=$DUR_LAT DUR_BIG=$DUR_BIG DUR_FIO=$DUR_FIO FIO_REPS=$FIO_REPS ORDER=$ORDER IMG_REGION=$IMG_REGION FIO=$FIO CARMINE_NO_PIN=${CARMINE_NO_PIN:-0}"
  echo "uptime at start: $(uptime)"
} | tee "$OUT/machine.txt"

gone() {  # gone PID...: true once none of them runs (a zombie waiting for its reaper counts as gone); waits up to 10 s
  local p i st
  for i in $(seq 1 50); do
    st=0; for p in "$@"; do
      [ -r "/proc/$p/stat" ] || continue
      [ "$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -d' ' -f1)" = Z ] && continue
      st=1; done
    [ $st = 0 ] && return 0; sleep 0.2
  done
  return 1
}
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ---------------------------------------------------------------- state + cleanup trap
CEPH_BASE=""; CM_DIR=""; CEPH_UP=0; CM_UP=0; NBD_PID=""; NBDKIT_PID=""; CUR=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  exec 1>&3 2>&3
  if [ -n "$CUR" ] && kill -0 "$CUR" 2>/dev/null; then kill -TERM "$CUR" 2>/dev/null; wait "$CUR" 2>/dev/null; fi
  stop_nbd
  stop_nbdkit
  if [ "$CEPH_UP" = 1 ]; then log "stopping Ceph (by pid)"; ceph_stop; fi
  if [ "$CM_UP" = 1 ]; then log "stopping Carmine (by pid)"; carmine_stop; fi
  [ $rc = 0 ] || echo "compare-ceph: failed (exit $rc); logs in $OUT" >&2
  exit $rc
}
trap cleanup EXIT
trap 'echo "compare-ceph: interrupted" >&3; exit 130' INT TERM

# run a command in the background and wait for it, so that an interrupt reaches the trap at once;
# with `timeout` first: it signals its whole process group, so stopping it stops the client too
bg_run() { "$@" & CUR=$!; local rc=0; wait "$CUR" || rc=$?; CUR=""; return $rc; }
TMO=$(( DUR + DUR_LAT + DUR_BIG + DUR_FIO + 120 ))   # no single client command may take longer

# ---------------------------------------------------------------- measurement (both systems)
OSD_PIDS=(); OTHER_PIDS=()   # OSD daemons; monitors and the NBD server (not counted as other load)
proc_ticks() {  # utime+stime (clock ticks) of the given pids, all threads
  local t=0 p s f; for p in "$@"; do
    s=$(cat "/proc/$p/stat" 2>/dev/null) || continue
    read -r -a f <<< "${s##*) }"          # fields after "(comm) ": state=0 ... utime=11 stime=12
    t=$((t + f[11] + f[12])); done; echo $t; }
host_busy() { local a; read -r -a a < /proc/stat; echo $((a[1] + a[2] + a[3] + a[6] + a[7] + a[8])); }
snap() { echo "$(proc_ticks "${OSD_PIDS[@]}") $(proc_ticks "${OTHER_PIDS[@]}") $(host_busy)"; }
status_kb() { local k=$1 p v out=(); for p in "${OSD_PIDS[@]}"; do
  v=$(awk -v k="$k:" '$1==k{print $2}' "/proc/$p/status" 2>/dev/null); out+=("${v:-0}"); done; echo "${out[*]}"; }
reset_hwm() { local p; for p in "${OSD_PIDS[@]}"; do echo 5 > "/proc/$p/clear_refs" 2>/dev/null || true; done; }

wait_osd_idle() {  # until the OSDs use < 0.1 core for 1 s (max 60 s); from the shared bench.sh
  local a b i
  for i in $(seq 1 60); do
    a=$(proc_ticks "${OSD_PIDS[@]}"); sleep 1; b=$(proc_ticks "${OSD_PIDS[@]}")
    if [ $((b - a)) -lt $((TICK / 10)) ]; then [ "$i" -gt 3 ] && log "  (waited ${i} s for the OSDs to go idle)"; return 0; fi
  done
  log "  (OSDs still busy after 60 s; going on)"
}

REST_DONE=""
record_rest() {  # record_rest SYSTEM: RSS per OSD, once per system (first phase, one empty pool, idle)
  case " $REST_DONE " in *" $1 "*) return 0;; esac
  wait_osd_idle
  "$PY" "$HERE/compare_ceph.py" rest "$1" "$(status_kb VmRSS)" >> "$JSONL"
  REST_DONE="$REST_DONE $1"
}

# run_case SYSTEM SIZE WORKLOAD KIND BS LOG cmd...   (KIND: rados | carmine | fio; fio writes LOG.json)
run_case() {
  local sys=$1 sz=$2 wl=$3 kind=$4 bs=$5 lg=$6; shift 6
  local s0 s1 t0 t1 rc=0
  wait_osd_idle
  reset_hwm
  s0=$(snap); t0=$(date +%s.%N)
  bg_run timeout "$TMO" /usr/bin/time -f "%e %U %S" -o "$lg.time" "$@" > "$lg.out" 2>&1 || rc=$?
  t1=$(date +%s.%N); s1=$(snap)
  if [ $rc != 0 ]; then
    tail -5 "$lg.out" >&2; die "$sys '$wl' (size $sz) failed (exit $rc$([ $rc = 124 ] && echo ", timed out after $TMO s")): $*"
  fi
  "$PY" "$HERE/compare_ceph.py" parse "$sys" "$sz" "$wl" "$kind" "$bs" "$lg" "$t0" "$t1" "$s0" "$s1" \
    "$TICK" "$(status_kb VmHWM)" >> "$JSONL"
  "$PY" "$HERE/compare_ceph.py" line "$JSONL"
}

object_workloads() {  # object_workloads SYSTEM SIZE POOL
  local sys=$1 sz=$2 pool=$3
  local L="$OUT/$sys.s$sz"
  if [ "$sys" = ceph ]; then
    local B="rados -p $pool bench"
    bg_run timeout 60 $B 2 write -b 4096 -t 16 --no-cleanup --run-name warmup > "$L.warmup.out" 2>&1 ||
      { tail -5 "$L.warmup.out" >&2; die "ceph: warm-up write on $pool failed"; }
    run_case ceph "$sz" w4k_t16    rados 4096    "$L.w4k_t16"    $B "$DUR" write -b 4096 -t 16 --no-cleanup
    run_case ceph "$sz" rand4k_t16 rados 4096    "$L.rand4k_t16" $B "$DUR" rand -t 16
    run_case ceph "$sz" w4k_t1     rados 4096    "$L.w4k_t1"     $B "$DUR_LAT" write -b 4096 -t 1 --no-cleanup --run-name lat
    run_case ceph "$sz" w4m_t16    rados 4194304 "$L.w4m_t16"    $B "$DUR_BIG" write -b 4194304 -t 16 --no-cleanup \
      --run-name big --max-objects "$MAX_BIG_OBJS"
  else
    local B="$CARMINE_BIN --format json bench $pool"
    bg_run timeout 60 $B write -b 4096 -t 16 --seconds 2 --no-cleanup --run-name warmup > "$L.warmup.out" 2>&1 ||
      { tail -5 "$L.warmup.out" >&2; die "carmine: warm-up write on $pool failed"; }
    run_case carmine "$sz" w4k_t16    carmine 4096    "$L.w4k_t16"    $B write -b 4096 -t 16 --seconds "$DUR" --no-cleanup
    run_case carmine "$sz" rand4k_t16 carmine 4096    "$L.rand4k_t16" $B rand -b 4096 -t 16 --seconds "$DUR"
    run_case carmine "$sz" w4k_t1     carmine 4096    "$L.w4k_t1"     $B write -b 4096 -t 1 --seconds "$DUR_LAT" --no-cleanup --run-name lat
    run_case carmine "$sz" w4m_t16    carmine 4194304 "$L.w4m_t16"    $B write -b 4194304 -t 16 --seconds "$DUR_BIG" --no-cleanup --run-name big
  fi
}

FIO_COMMON="--numjobs=1 --direct=1 --lat_percentiles=1 --percentile_list=50:90:99:99.9 --output-format=json+"
block_workloads() {  # block_workloads SYSTEM FIO_ENGINE_ARGS...
  local sys=$1; shift
  local L="$OUT/$sys.fio"
  log "  prefill $IMG_REGION of the image (4 MiB writes, qd16)"
  bg_run timeout "$TMO" fio "$@" $FIO_COMMON --name=prefill --rw=write --bs=4M --iodepth=16 --size="$IMG_REGION" \
    --output="$L.prefill.json" > "$L.prefill.out" 2>&1 || { tail -5 "$L.prefill.out" >&2; die "$sys: fio prefill failed"; }
  local spec rw qd rep
  # Round after round of all three, so that a slow spell of the host lands in one round of each
  # rather than in every run of one workload; each run is recorded with its round (REP).
  for rep in $(seq 1 "$FIO_REPS"); do
    for spec in "randwrite 16" "randread 16" "randwrite 1"; do
      read -r rw qd <<< "$spec"
      REP=$rep run_case "$sys" 3 "fio_${rw}_qd$qd" fio 4096 "$L.${rw}_qd$qd.r$rep" \
        fio "$@" $FIO_COMMON --name="${rw}_qd$qd" --rw="$rw" --bs=4k --iodepth="$qd" --size="$IMG_REGION" \
        --runtime="$DUR_FIO" --time_based --output="$L.${rw}_qd$qd.r$rep.json"
    done
  done
}

# ---------------------------------------------------------------- Ceph
ceph_start() {  # ceph_start PHASE
  CEPH_BASE="$OUT/ceph-$1"; export CEPH_BASE CEPH_CONF="$OUT/ceph-$1/ceph.conf"
  export MON_PORT MON_PORT_V1; MON_PORT=$(free_port); MON_PORT_V1=$(free_port)
  CEPH_UP=1
  bg_run timeout 180 "$HERE/ceph/up.sh" "$N_OSDS" memstore > "$OUT/ceph-$1.up.log" 2>&1 3>&- ||
    { tail -20 "$OUT/ceph-$1.up.log" >&2; die "Ceph did not start (log: $OUT/ceph-$1.up.log)"; }
  log "Ceph up: $(grep -E '^startup' "$OUT/ceph-$1.up.log" | sed 's/^startup //')"
  OSD_PIDS=(); OTHER_PIDS=()
  local f; for f in "$CEPH_BASE"/pids/osd.*.pid; do OSD_PIDS+=("$(cat "$f")"); done
  for f in "$CEPH_BASE"/pids/mon.*.pid; do OTHER_PIDS+=("$(cat "$f")"); done
  [ "${#OSD_PIDS[@]}" = "$N_OSDS" ] || die "ceph: expected $N_OSDS OSD pids in $CEPH_BASE/pids"
}
ceph_stop() {  # by the pids up.sh recorded, and only if they still are ceph daemons
  local f p comm pids=()
  for f in "$CEPH_BASE"/pids/*.pid; do
    [ -e "$f" ] || continue; p=$(cat "$f"); comm=$(cat "/proc/$p/comm" 2>/dev/null || true)
    case "$comm" in
      ceph-osd) kill -KILL "$p"; pids+=("$p");;     # MemStore: nothing to keep, and no writing it all to disk
      ceph-*) kill -TERM "$p"; pids+=("$p");;
    esac
    rm -f "$f"
  done
  if ! gone "${pids[@]}"; then
    for p in "${pids[@]}"; do case "$(cat "/proc/$p/comm" 2>/dev/null)" in ceph-*) kill -KILL "$p";; esac; done
    gone "${pids[@]}" || die "ceph: pids ${pids[*]} still run after SIGKILL"
  fi
  rm -rf "$CEPH_BASE"/osd.*
  CEPH_UP=0
}
ceph_mkpool() {  # NAME SIZE APP
  local c="timeout 30 ceph"
  $c osd pool create "$1" "$PG_NUM" "$PG_NUM" replicated >/dev/null 2>&1 || die "ceph: cannot create pool $1"
  $c osd pool set "$1" size "$2" --yes-i-really-mean-it >/dev/null 2>&1 || die "ceph: cannot set size of $1"
  $c osd pool set "$1" min_size "$([ "$2" = 1 ] && echo 1 || echo 2)" >/dev/null 2>&1 || die "ceph: cannot set min_size of $1"
  $c osd pool application enable "$1" "$3" >/dev/null 2>&1 || die "ceph: cannot enable $3 on $1"
  bg_run timeout 150 "$HERE/ceph/wait_pgs.py" "$1" 120 > /dev/null || die "ceph: pool $1 not active+clean after 120 s"
}

ceph_phase() {  # ceph_phase block|1|3
  local ph=$1
  log "== Ceph, phase '$ph': 1 monitor + $N_OSDS memstore OSDs ($(uptime | sed 's/.*load/load/'))"
  ceph_start "$ph"
  if [ "$ph" = block ]; then
    ceph_mkpool rbd3 3 rbd
    record_rest ceph
    timeout 60 rbd pool init rbd3 >/dev/null 2>&1 || die "ceph: rbd pool init failed"
    timeout 60 rbd create rbd3/img --size 1G || die "ceph: rbd create failed"
    block_workloads ceph --ioengine=rbd --clientname=admin --pool=rbd3 --rbdname=img
  else
    ceph_mkpool "bench$ph" "$ph" rados
    record_rest ceph
    object_workloads ceph "$ph" "bench$ph"
  fi
  ceph_stop
}

# ---------------------------------------------------------------- Carmine
carmine() { "$CARMINE_BIN" --conf "$CM_DIR/carmine.toml" "$@"; }
carmine_stop() {
  local pids=() f p
  for f in "$CM_DIR"/run/*.pid; do [ -e "$f" ] && pids+=("$(cat "$f")"); done
  timeout 60 "$CARMINE_BIN" vstop --dir "$CM_DIR" >> "$OUT/carmine-vstop.log" 2>&1 || true
  for f in "$CM_DIR"/run/*.pid; do   # anything vstop could not stop: by its pid file, if still a carmine process
    [ -e "$f" ] || continue; p=$(cat "$f")
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = carmine ] && { echo "killing leftover carmine pid $p"; kill -KILL "$p"; }
  done
  CM_UP=0
  gone "${pids[@]}" || die "carmine: some of pids ${pids[*]} still run after vstop"
}
stop_nbd() {
  if [ -n "$NBD_PID" ]; then kill -TERM "$NBD_PID" 2>/dev/null; wait "$NBD_PID" 2>/dev/null; NBD_PID=""; fi
  return 0
}
stop_nbdkit() {
  if [ -n "$NBDKIT_PID" ]; then
    [ "$(cat "/proc/$NBDKIT_PID/comm" 2>/dev/null)" = nbdkit ] && kill -TERM "$NBDKIT_PID" 2>/dev/null
    gone "$NBDKIT_PID" || kill -KILL "$NBDKIT_PID" 2>/dev/null
    NBDKIT_PID=""
  fi
  return 0
}
carmine_up_ok() {  # every OSD up and HEALTH_OK
  carmine --format json status 2>/dev/null | "$PY" -c 'import json,sys; s=json.load(sys.stdin)
sys.exit(0 if s["osdmap"]["num_up_osds"] == s["osdmap"]["num_osds"] == int(sys.argv[1]) and s["health"]["status"] == "HEALTH_OK" else 1)' "$N_OSDS"
}
carmine_wait_clean() {  # POOL PG_NUM: until every PG of the pool is active+clean (max 120 s)
  local i
  for i in $(seq 1 600); do
    if carmine --format json status 2>/dev/null | "$PY" -c '
import json, sys
s = json.load(sys.stdin); pool, pgs = sys.argv[1], int(sys.argv[2])
p = [x for x in s["pools"] if x["name"] == pool]
by = {x["state_name"]: x["count"] for x in s["pgmap"]["pgs_by_state"]}
tot = sum(by.values())
sys.exit(0 if p and by.get("active+clean", 0) == tot and tot >= pgs else 1)' "$1" "$2"; then return 0; fi
    sleep 0.2
  done
  die "carmine: pool $1 not active+clean after 120 s"
}
carmine_mkpool() {
  timeout 30 "$CARMINE_BIN" --conf "$CM_DIR/carmine.toml" pool create "$1" --size "$2" --pg-num "$PG_NUM" >/dev/null ||
    die "carmine: cannot create pool $1"
  carmine_wait_clean "$1" "$PG_NUM"
}
carmine_unpin_osds() {  # restart every OSD with the same arguments plus --no-pin (empty cluster: nothing to lose)
  local f n pid args
  for f in "$CM_DIR"/run/osd.*.pid; do
    n=$(basename "$f" .pid); pid=$(cat "$f")
    mapfile -d '' -t args < "/proc/$pid/cmdline"
    timeout 30 "$CARMINE_BIN" vstop --dir "$CM_DIR" --only "$n" > /dev/null || die "carmine: cannot stop $n"
    setsid "$CARMINE_BIN" "${args[@]:1}" --no-pin < /dev/null >> "$CM_DIR/log/$n.log" 2>&1 3>&- &
    echo $! > "$f"
  done
  sleep 1
  for i in $(seq 1 150); do
    carmine_up_ok && break
    [ "$i" = 150 ] && die "carmine: OSDs not back up after restarting them with --no-pin"; sleep 0.2
  done
  log "restarted the OSDs with --no-pin; CPUs allowed: $(for f in "$CM_DIR"/run/osd.*.pid; do awk '/Cpus_allowed_list/{print $2}' "/proc/$(cat "$f")/status"; done | tr '\n' ' ')"
}
carmine_start() {  # carmine_start PHASE
  CM_DIR="$OUT/carmine-$1"
  rm -rf "$CM_DIR"
  CM_UP=1
  local t0 i; t0=$(date +%s.%N)
  timeout 60 "$CARMINE_BIN" vstart --osds "$N_OSDS" --mons 1 --dir "$CM_DIR" > "$OUT/carmine-$1.vstart.log" 2>&1 3>&- ||
    { cat "$OUT/carmine-$1.vstart.log" >&2; die "Carmine did not start"; }
  for i in $(seq 1 100); do
    carmine_up_ok && break
    [ "$i" = 100 ] && die "carmine: not all OSDs up and HEALTH_OK 20 s after vstart"; sleep 0.2
  done
  log "Carmine up: all OSDs up, HEALTH_OK $("$PY" -c "import time; print(f'{time.time()-$t0:.1f}')") s"
  if [ "${CARMINE_NO_PIN:-0}" = 1 ]; then carmine_unpin_osds; fi
  OSD_PIDS=(); OTHER_PIDS=()
  local f; for f in "$CM_DIR"/run/osd.*.pid; do OSD_PIDS+=("$(cat "$f")"); done
  for f in "$CM_DIR"/run/mon.*.pid; do OTHER_PIDS+=("$(cat "$f")"); done
  [ "${#OSD_PIDS[@]}" = "$N_OSDS" ] || die "carmine: expected $N_OSDS OSD pids in $CM_DIR/run"
  export CARMINE_CONF="$CM_DIR/carmine.toml"
}

carmine_phase() {  # carmine_phase block|1|3
  local ph=$1 i port
  log "== Carmine, phase '$ph': 1 monitor + $N_OSDS OSDs, MemStore ($(uptime | sed 's/.*load/load/'))"
  carmine_start "$ph"
  if [ "$ph" = block ]; then
    carmine_mkpool rbd3 3
    record_rest carmine
    timeout 30 "$CARMINE_BIN" image create rbd3/img --size 1G > /dev/null || die "carmine: image create failed"
    port=$(free_port)
    "$CARMINE_BIN" image nbd rbd3/img --bind "127.0.0.1:$port" > "$OUT/carmine-nbd.log" 2>&1 3>&- &
    NBD_PID=$!
    for i in $(seq 1 100); do
      grep -q serving "$OUT/carmine-nbd.log" && break
      kill -0 "$NBD_PID" 2>/dev/null || { cat "$OUT/carmine-nbd.log" >&2; die "carmine image nbd exited"; }
      [ "$i" = 100 ] && die "carmine image nbd not serving after 20 s"; sleep 0.2
    done
    OTHER_PIDS+=("$NBD_PID")
    block_workloads carmine --ioengine=nbd --uri="nbd://127.0.0.1:$port"
    stop_nbd
  else
    carmine_mkpool "bench$ph" "$ph"
    record_rest carmine
    object_workloads carmine "$ph" "bench$ph"
  fi
  carmine_stop
}

PHASES=""; [ "$FIO" = 1 ] && PHASES="block"; PHASES="$PHASES $SIZES"
run_ceph() {
  if [ "$ONLY" != carmine ]; then for ph in $PHASES; do ceph_phase "$ph"; done; fi
  echo "after ceph $(uptime)" >> "$OUT/uptime.txt"
}
run_carmine() {
  if [ "$ONLY" != ceph ]; then for ph in $PHASES; do carmine_phase "$ph"; done; fi
  echo "after carmine $(uptime)" >> "$OUT/uptime.txt"
}
echo "start $(uptime)" >> "$OUT/uptime.txt"
if [ "$ORDER" = carmine-first ]; then run_carmine; run_ceph; else run_ceph; run_carmine; fi

# ---------------------------------------------------------------- nbdkit memory (the NBD ceiling)
nbdkit_phase() {  # the same fio runs against nbdkit's memory plugin; its process stands in for "the OSDs"
  local port i
  log "== nbdkit memory 1G on 127.0.0.1 (the NBD ceiling) ($(uptime | sed 's/.*load/load/'))"
  port=$(free_port)
  # -f: stay in the foreground, so $! is nbdkit itself (stopped by that pid)
  nbdkit -f -i 127.0.0.1 -p "$port" memory 1G > "$OUT/nbdkit.log" 2>&1 3>&- &
  NBDKIT_PID=$!
  for i in $(seq 1 100); do
    ss -ltn "sport = :$port" 2>/dev/null | grep -q LISTEN && break
    kill -0 "$NBDKIT_PID" 2>/dev/null || { cat "$OUT/nbdkit.log" >&2; die "nbdkit exited"; }
    [ "$i" = 100 ] && die "nbdkit not listening after 20 s"; sleep 0.2
  done
  OSD_PIDS=("$NBDKIT_PID"); OTHER_PIDS=()
  block_workloads nbdkit --ioengine=nbd --uri="nbd://127.0.0.1:$port"
  stop_nbdkit
}
if [ "$FIO" = 1 ] && [ "$NBDKIT" = 1 ] && [ "$ONLY" != ceph ]; then nbdkit_phase; fi

# ---------------------------------------------------------------- report
echo "end $(uptime)" >> "$OUT/uptime.txt"
unset CEPH_CONF CARMINE_CONF
echo
"$PY" "$HERE/compare_ceph.py" report "$OUT" | tee "$OUT/table.md"
if [ "$(cd "$RESULTS" && pwd)" != "$OUT" ]; then
  cp "$OUT/table.md" "$OUT/table-wide.md" "$OUT/results.jsonl" "$OUT/machine.txt" "$OUT/uptime.txt" "$RESULTS/"
  if [ -f "$OUT/compare-ceph.png" ]; then cp "$OUT/compare-ceph.png" "$RESULTS/compare-ceph.png"; fi
fi
log "took $(( $(date +%s) - T_START )) s; raw logs in $OUT; table, data and plot in $RESULTS"
