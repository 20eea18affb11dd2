#!/usr/bin/env python3
"""Page faults, OSD CPU and RSS per 4 KiB write, for new objects and for overwrites,
as interleaved A/B pairs of `carmine` binaries and/or malloc settings (issue #11).

Each variant is `LABEL=BINARY[:ENV=VALUE,...]`. Every round starts one fresh
`carmine vstart --osds 3 --mons 1` cluster per variant (in turn, so the variants of a
round share the machine's load), creates a size-3 pool and runs:

  new:       carmine bench POOL write -b BLOCK_SIZE -t THREADS --seconds NEW_S --run-name ab --no-cleanup
             (THREADS: --threads, default 16)
  overwrite: the same with --seconds OVERWRITE_S (same names: it rewrites ab_object0..)
             (OVERWRITE_S must be short enough to stay inside the objects `new` wrote;
             the script checks that it did)

Around each run it reads /proc/PID/stat of the three OSDs (minflt, utime+stime) and
/proc/PID/status (VmRSS, VmHWM reset through clear_refs before the run). Prints one
JSON line per run and a table of medians per variant at the end.

  bench/alloc_ab.py --rounds 4 base=/tmp/carmine-base new=$CARGO_TARGET_DIR/release/carmine
  bench/alloc_ab.py base=/tmp/carmine-base \
      never=/tmp/carmine-base:MIMALLOC_PURGE_DELAY=-1
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def parse_variant(text):
    label, _, rest = text.partition("=")
    binary, _, env_text = rest.partition(":")
    env = {}
    for item in filter(None, env_text.split(",")):
        key, _, value = item.partition("=")
        env[key] = value
    return label, binary, env


def osd_pids(cluster_dir):
    run = os.path.join(cluster_dir, "run")
    pids = []
    for name in sorted(os.listdir(run)):
        if name.startswith("osd.") and name.endswith(".pid"):
            with open(os.path.join(run, name)) as f:
                pids.append(int(f.read().strip()))
    return pids


def proc_sample(pids):
    """Sums over the OSDs: minor faults, major faults, CPU ticks; per OSD: RSS, HWM kB."""
    minflt = majflt = ticks = sticks = 0
    rss, hwm = [], []
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        # fields[0] is state (field 3): minflt is field 10, majflt 12, utime 14, stime 15.
        minflt += int(fields[7])
        majflt += int(fields[9])
        ticks += int(fields[11]) + int(fields[12])
        sticks += int(fields[12])
        status = {}
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                status[key] = value.split()[0] if value.split() else "0"
        rss.append(int(status.get("VmRSS", 0)))
        hwm.append(int(status.get("VmHWM", 0)))
    return {"minflt": minflt, "majflt": majflt, "ticks": ticks, "sticks": sticks, "rss_kb": rss, "hwm_kb": hwm}


def reset_hwm(pids):
    for pid in pids:
        try:
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


class Cluster:
    def __init__(self, binary, env, cluster_dir):
        self.binary, self.dir = binary, cluster_dir
        self.env = dict(os.environ, **env)
        self.conf = os.path.join(cluster_dir, "carmine.toml")

    def run(self, *args, check=True, capture=True):
        return subprocess.run(
            [self.binary, "--conf", self.conf, *args],
            env=self.env,
            check=check,
            capture_output=capture,
            text=True,
            timeout=120,
        )

    def start(self, pool, pg_num):
        if os.path.exists(self.dir):
            shutil.rmtree(self.dir)
        subprocess.run(
            [self.binary, "vstart", "--osds", "3", "--mons", "1", "--dir", self.dir],
            env=self.env,
            check=True,
            capture_output=True,
            timeout=90,
        )
        self.run("pool", "create", pool, "--size", "3", "--pg-num", str(pg_num))
        for _ in range(600):
            status = json.loads(self.run("--format", "json", "status").stdout)
            by_state = {s["state_name"]: s["count"] for s in status["pgmap"]["pgs_by_state"]}
            total = sum(by_state.values())
            if total >= pg_num and by_state.get("active+clean", 0) == total:
                return osd_pids(self.dir)
            time.sleep(0.2)
        raise RuntimeError(f"pool {pool} not active+clean in {self.dir}")

    def stop(self):
        subprocess.run(
            [self.binary, "vstop", "--dir", self.dir], env=self.env, capture_output=True, timeout=60
        )
        shutil.rmtree(self.dir, ignore_errors=True)

    def bench(self, pool, seconds, block_size, threads):
        out = self.run(
            "--format", "json", "bench", pool, "write", "-b", str(block_size), "-t", str(threads),
            "--seconds", str(seconds), "--run-name", "ab", "--no-cleanup",
        ).stdout
        return json.loads(out)


def measured(cluster, pids, pool, seconds, block_size, threads):
    reset_hwm(pids)
    before = proc_sample(pids)
    load = loadavg()
    summary = cluster.bench(pool, seconds, block_size, threads)
    after = proc_sample(pids)
    ops = summary["ops"]
    return {
        "ops": ops,
        "ops_per_second": round(summary["ops_per_second"]),
        "latency_us_avg": round(summary["latency_us_avg"]),
        "latency_us_p50": summary["latency_us_p50"],
        "latency_us_p99": summary["latency_us_p99"],
        "faults_per_write": round((after["minflt"] - before["minflt"]) / ops, 3),
        "majflt": after["majflt"] - before["majflt"],
        "osd_cpu_us_per_write": round((after["ticks"] - before["ticks"]) / CLK_TCK * 1e6 / ops, 1),
        "osd_sys_us_per_write": round((after["sticks"] - before["sticks"]) / CLK_TCK * 1e6 / ops, 1),
        "rss_growth_pages_per_write": round(
            (sum(after["rss_kb"]) - sum(before["rss_kb"])) * 1024 / PAGE / ops, 3
        ),
        "rss_kb_after": max(after["rss_kb"]),
        "hwm_kb": max(after["hwm_kb"]),
        "load": load,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("variants", nargs="+", help="LABEL=BINARY[:ENV=VALUE,...]")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--new-seconds", type=int, default=8)
    parser.add_argument("--overwrite-seconds", type=int, default=4)
    parser.add_argument("--overwrite-runs", type=int, default=2)
    parser.add_argument("--pg-num", type=int, default=32)
    parser.add_argument("--block-size", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=16, help="writes in flight (-t)")
    parser.add_argument("--dir", default="/tmp/alloc-ab")
    parser.add_argument("--out", default=None, help="append JSON lines here too")
    args = parser.parse_args()
    variants = [parse_variant(v) for v in args.variants]
    rows = []
    out = open(args.out, "a") if args.out else None
    for round_index in range(args.rounds):
        order = variants if round_index % 2 == 0 else list(reversed(variants))
        for label, binary, env in order:
            cluster = Cluster(binary, env, os.path.join(args.dir, label))
            try:
                pids = cluster.start("bench3", args.pg_num)
                rest = proc_sample(pids)
                results = [("new", measured(cluster, pids, "bench3", args.new_seconds, args.block_size, args.threads))]
                for index in range(args.overwrite_runs):
                    result = measured(cluster, pids, "bench3", args.overwrite_seconds, args.block_size, args.threads)
                    if result["ops"] > results[0][1]["ops"]:
                        print(f"warning: overwrite run wrote {result['ops']} > {results[0][1]['ops']} objects", file=sys.stderr)
                    results.append((f"overwrite{index + 1}", result))
            finally:
                cluster.stop()
            for kind, result in results:
                row = {"round": round_index, "variant": label, "kind": kind, "rest_rss_kb": max(rest["rss_kb"]), **result}
                rows.append(row)
                line = json.dumps(row)
                print(line, flush=True)
                if out:
                    out.write(line + "\n")
                    out.flush()
    keys = ["ops_per_second", "faults_per_write", "osd_cpu_us_per_write", "osd_sys_us_per_write", "rss_growth_pages_per_write", "hwm_kb", "rest_rss_kb", "latency_us_avg", "latency_us_p50", "latency_us_p99", "load"]
    print("\nmedians over rounds")
    print("| variant | run | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 2) + "|")
    for label, _, _ in variants:
        for kind in sorted({r["kind"] for r in rows}):
            chosen = [r for r in rows if r["variant"] == label and r["kind"] == kind]
            if not chosen:
                continue
            cells = [f"{statistics.median(r[k] for r in chosen):g}" for k in keys]
            print(f"| {label} | {kind} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
