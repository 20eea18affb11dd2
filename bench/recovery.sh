#!/usr/bin/env bash
# recovery.sh: client 4 KiB write ops/s while the cluster recovers a lost OSD, against before
# the failure, and the recovery rate against the loopback bandwidth (issue #9). See recovery.py.
#
#   bench/recovery.sh      # builds Carmine (release) first; CARMINE_BIN=... skips the build
# Environment: OUT [/tmp/carmine-recovery-<date>], N_OSDS [4], PG_NUM [32], FILL_SECONDS [12],
#   FILL_OBJECTS [2048], WRITER_OBJECTS [16384], WARMUP_SECONDS [10], BASELINE_SECONDS [10],
#   AFTER_SECONDS [5], VICTIM [1], RECOVERY_TIMEOUT [300],
#   CONFIG ["key=value ..." set with `carmine config set` before the prefill]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
if [ -z "${CARMINE_BIN:-}" ]; then
    (cd "$ROOT" && cargo build --release -p carmine-cli >&2)
    CARMINE_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/carmine"
fi
export CARMINE_BIN
export OUT=${OUT:-/tmp/carmine-recovery-$(date +%Y%m%d-%H%M%S)}
exec python3 "$HERE/recovery.py"
