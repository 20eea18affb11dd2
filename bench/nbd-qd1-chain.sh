#!/usr/bin/env bash
# nbd-qd1-chain.sh: where one 4 KiB NBD write at queue depth 1 spends its time (issue #10).
#
#   bench/nbd-qd1-chain.sh BIN [SECONDS]
#
# Starts a cluster with BIN (`vstart --osds 3 --mons 1`, pool bench3 size 3, 32 PGs), serves a
# 1 GiB image with `BIN image nbd`, runs fio 4 KiB randwrite qd1 against it and, meanwhile:
#   1. `perf sched record -a` for 2 s, then follows each request along the wake-ups between
#      processes (fio wakes the server, the server wakes the primary OSD, ... the server wakes
#      fio) and prints each hop's mean and median, and the scheduling delay per process;
#   2. `strace -c` on the server for 2,000 writes: system calls per request;
#   3. `perf stat` on the server: CPU time and context switches per request.
# The wake-up chain needs root (perf sched) and a kernel with sched tracepoints.
set -uo pipefail
. "$(dirname "$0")/lib/cluster.sh"
BIN=$(readlink -f "$1"); SECS=${2:-6}
D=$(mktemp -d /tmp/nbd-chain.XXXXXX); C="--conf $D/carmine.toml"; PORT=10859
trap '"$BIN" vstop --dir "$D" >/dev/null 2>&1; kill $(jobs -p) 2>/dev/null' EXIT
"$BIN" vstart --osds 3 --mons 1 --dir "$D" > "$D/vstart.log" 2>&1 || { cat "$D/vstart.log"; exit 1; }
wait_cluster_ready "$BIN" "$D/carmine.toml"
"$BIN" $C pool create bench3 --size 3 --pg-num 32 > /dev/null
"$BIN" $C image create bench3/chain --size 1G > /dev/null
"$BIN" $C image nbd bench3/chain --bind "127.0.0.1:$PORT" > "$D/nbd.log" 2>&1 &
NBD=$!
for i in $(seq 1 300); do grep -q serving "$D/nbd.log" && break; sleep 0.2; done
OSDS=$(pgrep -d, -f "$BIN osd .*--data $D/")
fio_qd1() { fio --name=w --ioengine=nbd --uri="nbd://127.0.0.1:$PORT" --rw=randwrite --bs=4k --iodepth=1 \
  --size=256M --output-format=json "$@" 2>/dev/null | sed -n '/^{/,$p'; }
fio_qd1 --number_ios=3000 > /dev/null   # warm: objects exist, sessions open

echo "== 1. wake-up chain (perf sched record -a, 2 s of fio qd1)"
fio_qd1 --runtime="$SECS" --time_based=1 > "$D/fio.json" &
FIO=$!; sleep 1
perf sched record -a -o "$D/sched.data" -- sleep 2 > /dev/null 2>&1
wait $FIO
python3 - "$D/sched.data" "$NBD" "$OSDS" <<'PY'
import collections, re, statistics as st, subprocess, sys
data, nbd = sys.argv[1], int(sys.argv[2])
osds = {int(p) for p in sys.argv[3].split(",") if p}
name = lambda p: "fio" if p == fio else "nbd" if p == nbd else "osd"
out = subprocess.run(["perf", "script", "-i", data, "-F", "tid,time,event,trace"],
                     capture_output=True, text=True).stdout
events = []
for line in out.splitlines():
    m = re.match(r"\s*(\d+)\s+([\d.]+):\s+sched:(sched_waking|sched_switch):\s+(.*)", line)
    if not m:
        continue
    tid, t, kind, rest = int(m.group(1)), float(m.group(2)) * 1e6, m.group(3), m.group(4)
    if kind == "sched_waking":
        events.append((t, "wake", tid, int(re.search(r" pid=(\d+)", rest).group(1))))
    else:
        prev = int(re.search(r"prev_pid=(\d+)", rest).group(1))
        nxt = int(re.search(r"next_pid=(\d+)", rest).group(1))
        events.append((t, "switch", prev, nxt))
# fio's I/O thread: whatever the server wakes most that is not an OSD.
woken_by_nbd = collections.Counter(b for _, kind, a, b in events if kind == "wake" and a == nbd and b not in osds)
fio = woken_by_nbd.most_common(1)[0][0]
ours = osds | {fio, nbd}
hops, chain, woken_at, delay = {}, None, {}, {}
for t, kind, a, b in events:
    if kind == "wake" and b in ours:
        woken_at.setdefault(b, t)
    if kind == "switch" and b in woken_at:
        delay.setdefault(name(b) if b != nbd else "nbd", []).append(t - woken_at.pop(b))
    if kind == "wake" and a == fio and b == nbd:
        chain = [(t, "fio wakes nbd")]
    elif chain is not None and kind == "switch" and b == nbd and len(chain) == 1:
        chain.append((t, "nbd runs"))
    elif chain is not None and kind == "wake" and a in ours and b in ours:
        chain.append((t, f"{name(a)} wakes {name(b)}"))
        if a == nbd and b == fio:
            for (t0, l0), (t1, l1) in zip(chain, chain[1:]):
                hops.setdefault(f"{l0} -> {l1}", []).append(t1 - t0)
            hops.setdefault("TOTAL fio wakes nbd -> nbd wakes fio", []).append(chain[-1][0] - chain[0][0])
            chain = None
for key, values in sorted(hops.items(), key=lambda kv: -len(kv[1]))[:10]:
    values.sort()
    print(f"{key:<44} n={len(values):6d} mean_us={st.mean(values):7.1f} p50_us={values[len(values)//2]:7.1f}")
for who, values in sorted(delay.items()):
    values.sort()
    print(f"wake-to-run delay {who:<8} n={len(values):6d} mean_us={st.mean(values):7.1f} "
          f"p50_us={values[len(values)//2]:6.1f} p99_us={values[int(len(values)*.99)]:8.1f}")
PY
python3 -c 'import json; w=json.load(open("'"$D/fio.json"'"))["jobs"][0]["write"]; print("fio qd1 iops=%.0f mean_us=%.1f p50_us=%.1f p99_us=%.1f" % (w["iops"], w["clat_ns"]["mean"]/1e3, w["clat_ns"]["percentile"]["50.000000"]/1e3, w["clat_ns"]["percentile"]["99.000000"]/1e3))'

echo "== 2. server system calls per request (strace -c, 2,000 writes)"
strace -c -p "$NBD" -o "$D/strace.txt" & ST=$!; sleep 0.5
fio_qd1 --number_ios=2000 > /dev/null; kill -INT $ST; wait $ST 2>/dev/null
awk '$NF ~ /^(writev|recvfrom|epoll_wait|sendto|write|read|futex)$/ {printf "%s/op=%.2f ", $NF, $4/2000} END {print ""}' "$D/strace.txt"

echo "== 3. server CPU and context switches per request (perf stat, 3,000 writes)"
perf stat -x, -e task-clock,context-switches -p "$NBD" -o "$D/stat.txt" & PS=$!; sleep 0.5
fio_qd1 --number_ios=3000 > /dev/null; kill -INT $PS; wait $PS 2>/dev/null
python3 - "$D/stat.txt" <<'PY'
import sys
vals = {l.split(",")[2]: float(l.split(",")[0]) for l in open(sys.argv[1]) if l.count(",") > 2 and l[0].isdigit()}
print("server task-clock_us/op=%.1f context-switches/op=%.2f (perf stat also counts the idle 0.5 s before fio)" % (
    vals.get("task-clock", 0) * 1e3 / 3000, vals.get("context-switches", 0) / 3000))
PY
kill $NBD; wait $NBD 2>/dev/null
