#!/usr/bin/env python3
"""Client IO during recovery (issue #9): what a lost OSD costs the clients, and how fast it heals.

    bench/recovery.sh            # builds Carmine (release) and runs this with defaults

One run, on a fresh `carmine vstart` cluster (MemStore, N_OSDS OSDs, a size-3 pool):

1. prefill: FILL_SECONDS of 1 MiB writes to at most FILL_OBJECTS objects (`carmine bench POOL
   write -b 1M --no-cleanup --max-objects 2048`: 2 GiB, so the lost OSD holds about 1.5 GiB
   that must be copied again, the same in every run);
2. a 4 KiB writer with 16 in flight (`carmine bench POOL write -b 4096 -t 16 --max-objects
   16384`, overwriting 64 MiB of objects in turn) runs for the whole rest of the run; its
   per-second rows are time-stamped as they arrive;
3. after WARMUP_SECONDS (not measured: the PG logs fill) and BASELINE_SECONDS the victim OSD
   is killed with SIGKILL and immediately marked down and out (`carmine osd down`, `carmine osd out`), so the run measures recovery, not the failure
   detector: every PG it served gets a new member and backfills it;
4. `carmine pg stat --format json` is polled every 0.25 s until every PG is active+clean again;
5. the writer keeps going for AFTER_SECONDS, then the cluster is stopped (`carmine vstop`).

It prints (and writes as JSON to OUT/recovery.json): client 4 KiB write ops/s before the failure
(the median of the per-second rows), during recovery (ops finished between "out" and "clean"
divided by that time), their ratio (the issue's target: >= 0.7); the same window split at the
moment the writer is back above a quarter of "before" (the failure's stall, then the data
movement with its own ratio);
the recovery time, the bytes
the victim held, the recovery rate, and the raw TCP loopback bandwidth measured in the same run
(`carmine bench msgr --sizes 1m --scenarios a`, its raw column) as the bandwidth available.
"""

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

CARMINE = os.environ.get("CARMINE_BIN", "carmine")
OUT = os.environ.get("OUT", "/tmp/carmine-recovery")
N_OSDS = int(os.environ.get("N_OSDS", "4"))
PG_NUM = int(os.environ.get("PG_NUM", "32"))
FILL_SECONDS = float(os.environ.get("FILL_SECONDS", "12"))
# The prefill writes at most FILL_OBJECTS objects of 1 MiB (overwriting them in turn if
# FILL_SECONDS leaves time), so the data to recover is the same in every run; 0: a new
# object every write for FILL_SECONDS (how much depends on the cluster's speed).
FILL_OBJECTS = int(os.environ.get("FILL_OBJECTS", "2048"))
# The 4 KiB writer overwrites WRITER_OBJECTS objects in turn (64 MiB); 0: a new object
# every write, as `rados bench write` does. See BENCHMARKS.md: on this VM, memory the
# guest never touched costs ~10x more to fault in, so a writer that grows the cluster's
# memory by ~50 MB/s slows down after a few hundred thousand writes with no failure at
# all, and "before" and "during" would compare two memory regimes, not recovery.
WRITER_OBJECTS = int(os.environ.get("WRITER_OBJECTS", "16384"))
BASELINE_SECONDS = float(os.environ.get("BASELINE_SECONDS", "10"))
# The writer runs this long before the baseline starts: until every PG's log is full
# (3,000 entries; 32 PGs fill at ~96,000 writes) and trimming, the writes are cheaper
# than they will be for the rest of the run, so a baseline taken then is too high.
WARMUP_SECONDS = float(os.environ.get("WARMUP_SECONDS", "10"))
AFTER_SECONDS = float(os.environ.get("AFTER_SECONDS", "5"))
RECOVERY_TIMEOUT = float(os.environ.get("RECOVERY_TIMEOUT", "300"))
VICTIM = int(os.environ.get("VICTIM", "1"))
# kill: SIGKILL the victim, then mark it down and out (a lost OSD); out: only mark it out
# (rebalancing away from a live OSD: no failure, the same data movement)
FAILURE = os.environ.get("FAILURE", "kill")
# Config keys to set before the prefill, "key=value key=value" (e.g. the recovery
# scheduler's "osd_mclock_recovery_res=16M osd_mclock_client_wgt=4")
CONFIG = os.environ.get("CONFIG", "")
POOL = "recov"


def carmine(*args, check=True):
    conf = os.path.join(OUT, "dev-cluster", "carmine.toml")
    cmd = [CARMINE, *args]
    if args[0] not in ("vstart", "bench") or (args[0] == "bench" and args[1] != "msgr"):
        cmd += ["--conf", conf]
    result = subprocess.run(cmd, cwd=OUT, capture_output=True, text=True)
    if check and result.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return result.stdout


def pg_states():
    out = json.loads(carmine("pg", "stat", "--format", "json"))["pg_summary"]
    return {s["name"]: s["num"] for s in out["num_pg_by_state"]}, out["num_pgs"]


def all_clean():
    states, total = pg_states()
    return states.get("active+clean", 0) == total


def max_objects(count):
    return ["--max-objects", str(count)] if count > 0 else []


class Writer:
    """The 4 KiB writer, its per-second rows time-stamped on arrival."""

    ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s")

    def __init__(self, seconds):
        conf = os.path.join(OUT, "dev-cluster", "carmine.toml")
        self.proc = subprocess.Popen(
            [CARMINE, "bench", POOL, "write", "-b", "4096", "-t", "16",
             "--seconds", str(int(seconds)), "--conf", conf, "--run-name", "recovery-writer",
             *max_objects(WRITER_OBJECTS)],
            cwd=OUT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.rows = []  # (arrival time, finished ops so far)
        self.lines = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            m = self.ROW.match(line)
            if m:
                self.rows.append((time.monotonic(), int(m.group(4))))

    def finished_at(self, t):
        """Ops finished by time t, interpolated between rows."""
        prev = (self.rows[0][0] - 1.0, 0)
        for row in self.rows:
            if row[0] >= t:
                span = row[0] - prev[0]
                frac = (t - prev[0]) / span if span > 0 else 1.0
                return prev[1] + frac * (row[1] - prev[1])
            prev = row
        return prev[1]

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.thread.join(timeout=5)


def main():
    os.makedirs(OUT, exist_ok=True)
    subprocess.run([CARMINE, "vstop", "--conf", os.path.join(OUT, "dev-cluster", "carmine.toml")],
                   cwd=OUT, capture_output=True)
    raw = json.loads(carmine("bench", "msgr", "--sizes", "1m", "--scenarios", "a",
                             "--runs", "1", "--seconds", "1", "--format", "json").splitlines()[0])
    carmine("vstart", "--osds", str(N_OSDS), "--dir", os.path.join(OUT, "dev-cluster"))
    try:
        for pair in CONFIG.split():
            key, value = pair.split("=", 1)
            carmine("config", "set", key, value)
        carmine("pool", "create", POOL, "--size", "3", "--pg-num", str(PG_NUM))
        deadline = time.monotonic() + 60
        while not all_clean():
            if time.monotonic() > deadline:
                sys.exit("pool never became active+clean")
            time.sleep(0.25)
        carmine("bench", POOL, "write", "-b", "1048576", "-t", "16",
                "--seconds", str(int(FILL_SECONDS)), "--no-cleanup", "--run-name", "fill",
                *max_objects(FILL_OBJECTS))
        df = json.loads(carmine("osd", "df", "--format", "json"))["nodes"]
        victim_bytes = next(n["data_bytes"] for n in df if n["id"] == VICTIM)
        pid = int(open(os.path.join(OUT, "dev-cluster", "run", f"osd.{VICTIM}.pid")).read())

        writer = Writer(WARMUP_SECONDS + BASELINE_SECONDS + RECOVERY_TIMEOUT + AFTER_SECONDS + 10)
        time.sleep(WARMUP_SECONDS + BASELINE_SECONDS)
        t_fail = time.monotonic()
        if FAILURE == "kill":
            os.kill(pid, signal.SIGKILL)
            carmine("osd", "down", str(VICTIM))
        carmine("osd", "out", str(VICTIM))
        t_out = time.monotonic()
        samples = []
        while True:
            states, total = pg_states()
            samples.append((round(time.monotonic() - t_out, 2), states))
            if states.get("active+clean", 0) == total and time.monotonic() - t_out > 1.0:
                break
            if time.monotonic() - t_out > RECOVERY_TIMEOUT:
                writer.stop()
                sys.exit(f"not clean after {RECOVERY_TIMEOUT} s: {states}")
            time.sleep(0.25)
        t_clean = time.monotonic()
        time.sleep(AFTER_SECONDS)
        t_end = time.monotonic()
        writer.stop()
    finally:
        subprocess.run([CARMINE, "vstop", "--conf", os.path.join(OUT, "dev-cluster", "carmine.toml")],
                       cwd=OUT, capture_output=True)

    rows = writer.rows
    per_second = [b[1] - a[1] for a, b in zip(rows, rows[1:])]
    t0 = rows[0][0]
    baseline_rates = [b[1] - a[1] for a, b in zip(rows, rows[1:]) if a[0] >= t0 + WARMUP_SECONDS and b[0] <= t_fail]
    before = statistics.median(baseline_rates)
    recovery_s = t_clean - t_out
    during = (writer.finished_at(t_clean) - writer.finished_at(t_out)) / recovery_s
    after = (writer.finished_at(t_end) - writer.finished_at(t_clean)) / (t_end - t_clean)
    # The same window split in two: the stall (re-peering, and the new primaries waiting
    # out the dead primary's read lease, as Ceph's do), until the writer's first
    # per-second row after "out" back above a quarter of before begins; and from then
    # until clean, the data movement itself. (Not from `pg stat`: the monitor's PG states
    # lag the OSDs' by a second or two.)
    t_serving = next((a[0] for a, b in zip(rows, rows[1:])
                      if a[0] >= t_out and b[1] - a[1] >= before / 4), t_clean)
    t_serving = min(t_serving, t_clean)
    stall_s = t_serving - t_out
    moving_s = t_clean - t_serving
    moving = ((writer.finished_at(t_clean) - writer.finished_at(t_serving)) / moving_s
              if moving_s >= 1.0 else None)
    result = {
        "osds": N_OSDS, "pg_num": PG_NUM, "victim": VICTIM, "failure": FAILURE, "config": CONFIG,
        "fill_objects": FILL_OBJECTS, "writer_objects": WRITER_OBJECTS,
        "client_ops_per_s_before": round(before, 1),
        "client_ops_per_s_during_recovery": round(during, 1),
        "client_ops_per_s_after": round(after, 1),
        "ratio_during_over_before": round(during / before, 3),
        "failure_to_out_s": round(t_out - t_fail, 3),
        "stall_s": round(stall_s, 3),
        "client_ops_per_s_while_data_moves": moving and round(moving, 1),
        "ratio_while_data_moves_over_before": moving and round(moving / before, 3),
        "recovery_s": round(recovery_s, 3),
        "victim_bytes": victim_bytes,
        "recovery_mb_per_s": round(victim_bytes / recovery_s / 1e6, 1),
        "raw_tcp_mb_per_s": round(raw["raw_ops_per_s"] * raw["size_bytes"] / 1e6, 1),
        "per_second_ops": per_second,
        "pg_state_samples": samples[:: max(1, len(samples) // 40)],
    }
    with open(os.path.join(OUT, "writer.log"), "w") as f:
        f.writelines(writer.lines)
    with open(os.path.join(OUT, "recovery.json"), "w") as f:
        json.dump(result, f, indent=1)
    for key, value in result.items():
        if key not in ("per_second_ops", "pg_state_samples"):
            print(f"{key:34} {value}")
    print(f"per-second client ops: {per_second}")


if __name__ == "__main__":
    main()
