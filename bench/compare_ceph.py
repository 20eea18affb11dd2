#!/usr/bin/env python3
"""Helpers of compare-ceph.sh: turn one benchmark run into a JSON line, print the table, draw the plot.

  compare_ceph.py rest SYSTEM "RSS_KB..."                       -> JSON line (RSS per OSD at rest)
  compare_ceph.py parse SYSTEM SIZE WORKLOAD KIND BS LOG T0 T1 SNAP0 SNAP1 TICK "HWM_KB..."
                                                                -> JSON line for one run
  compare_ceph.py line RESULTS.jsonl                            -> one human line for the last run
  compare_ceph.py report OUTDIR                                 -> markdown table on stdout, OUTDIR/compare-ceph.png

A workload run several times (the fio rounds, REP=1, 2, ... in the environment of `parse`) is shown as
the median of each metric over its runs, with the range in the block-targets table.
"""
import json
import math
import os
import re
import sys

WORKLOADS = [  # key, label
    ("w4k_t16", "4 KiB write, 16 in flight"),
    ("rand4k_t16", "4 KiB random read, 16 in flight"),
    ("w4k_t1", "4 KiB write, 1 in flight"),
    ("w4m_t16", "4 MiB write, 16 in flight"),
    ("fio_randwrite_qd16", "fio 4 KiB randwrite qd16 (rbd / nbd)"),
    ("fio_randread_qd16", "fio 4 KiB randread qd16 (rbd / nbd)"),
    ("fio_randwrite_qd1", "fio 4 KiB randwrite qd1 (rbd / nbd)"),
]
LABEL = dict(WORKLOADS)


def parse_run(argv):
    system, size, wl, kind, bs, log, t0, t1, s0, s1, tick, hwm = argv
    size, bs, tick = int(size), int(bs), int(tick)
    wall = float(t1) - float(t0)
    o0, x0, h0 = map(int, s0.split())
    o1, x1, h1 = map(int, s1.split())
    tline = [l for l in open(log + ".time").read().splitlines() if l.strip()][-1].split()
    client_cpu = float(tline[1]) + float(tline[2])
    p99 = None
    p999 = None
    if kind == "rados":
        txt = open(log + ".out").read()

        def g(k):
            m = re.search(re.escape(k) + r"\s*([0-9.e+-]+)", txt)
            if not m:
                raise SystemExit(f"cannot find '{k}' in {log}.out")
            return float(m.group(1))

        ops = int(g("Total writes made:") if "Total writes made:" in txt else g("Total reads made:"))
        secs = g("Total time run:")
        lat_avg = g("Average Latency(s):") * 1e6
        lat_max = g("Max latency(s):") * 1e6
    elif kind == "carmine":
        lines = [l for l in open(log + ".out").read().splitlines() if l.startswith("{")]
        j = json.loads(lines[-1])
        if j.get("errors"):
            raise SystemExit(f"{log}: {j['errors']} errors")
        ops, secs = j["ops"], j["seconds_run"]
        lat_avg, p99, p999, lat_max = j["latency_us_avg"], j["latency_us_p99"], j["latency_us_p999"], j["latency_us_max"]
    else:  # fio json+
        j = json.load(open(log + ".json"))["jobs"][0]
        d = j["write"] if j["write"]["total_ios"] > 0 else j["read"]
        if j.get("error"):
            raise SystemExit(f"{log}: fio error {j['error']}")
        ops = d["total_ios"]
        secs = d["runtime"] / 1000.0
        lat = d["lat_ns"]
        lat_avg, lat_max = lat["mean"] / 1e3, lat["max"] / 1e3
        pct = lat.get("percentile", {})
        p99 = pct.get("99.000000", float("nan")) / 1e3
        p999 = pct.get("99.900000", float("nan")) / 1e3
    osd_cpu = (o1 - o0) / tick
    other_daemons = (x1 - x0) / tick
    host = (h1 - h0) / tick
    hwm_kb = [int(x) for x in hwm.split()]
    rec = {
        "type": "run", "system": system, "size": size, "workload": wl, "kind": kind, "bs": bs,
        "ops": ops, "seconds": secs, "ops_s": ops / secs, "mb_s": ops * bs / secs / 1e6,
        "lat_avg_us": lat_avg, "lat_p99_us": p99, "lat_p999_us": p999, "lat_max_us": lat_max,
        "wall_s": wall, "osd_cpu_s": osd_cpu, "osd_cpu_us_per_op": osd_cpu / ops * 1e6 if ops else None,
        "osd_cores": osd_cpu / wall, "mon_nbd_cpu_s": other_daemons, "client_cpu_s": client_cpu,
        "others_cores": max(0.0, host - osd_cpu - other_daemons - client_cpu) / wall,
        "peak_rss_mib_max": max(hwm_kb) / 1024, "peak_rss_mib_per_osd": [k / 1024 for k in hwm_kb],
        "log": log, "rep": int(os.environ.get("REP", "1")),
    }
    print(json.dumps(rec))


def load(path):
    return [json.loads(l) for l in open(path) if l.strip()]


def fmt_num(v, unit=""):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if abs(v) >= 100:
        s = f"{v:,.0f}"
    elif abs(v) >= 10:
        s = f"{v:.1f}"
    else:
        s = f"{v:.2f}"
    return s + unit


def fmt_lat(us):
    if us is None or (isinstance(us, float) and math.isnan(us)):
        return "n/a"
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs"


def line(path):
    r = load(path)[-1]
    name = LABEL.get(r["workload"], r["workload"]) + (f" #{r['rep']}" if r.get("rep", 1) > 1 else "")
    print(f"  {r['system']:8s} size {r['size']} {name:38s} "
          f"{r['ops_s']:9.0f} ops/s {r['mb_s']:7.1f} MB/s  mean {fmt_lat(r['lat_avg_us']):>9s}  "
          f"p99 {fmt_lat(r['lat_p99_us']):>9s}  OSD CPU {r['osd_cpu_us_per_op']:6.0f} µs/op  "
          f"peak RSS/OSD {r['peak_rss_mib_max']:6.0f} MiB  others {r['others_cores']:.2f} cores")


# targets of issue #11, as Carmine/Ceph ratios: (workload, size or None for any, metric) -> (op, bound, text)
def target_for(wl, size, metric):
    w4k = wl in ("w4k_t16", "w4k_t1", "fio_randwrite_qd16", "fio_randwrite_qd1")
    if metric == "ops_s" and wl in ("w4k_t16", "fio_randwrite_qd16") and size == 3:
        return (">=", 10.0)
    if metric in ("lat_avg_us", "lat_p99_us") and wl in ("w4k_t1", "fio_randwrite_qd1"):
        return ("<=", 0.15)
    if metric == "ops_s" and wl in ("rand4k_t16", "fio_randread_qd16"):
        return (">=", 3.0)
    if metric == "mb_s" and wl == "w4m_t16":
        return (">=", 1.5)
    if metric == "osd_cpu_us_per_op" and w4k:
        return ("<=", 0.1)
    # memory under load is judged on the block runs: they run first on a fresh cluster and hold the same
    # data on both systems; the object runs come later and hold different amounts (more ops, more objects)
    if metric == "rest_rss_mib_max" or (metric == "peak_rss_mib_max" and wl.startswith("fio_")):
        return ("<", 1.0)
    return None


METRICS = [  # key, label, formatter
    ("ops_s", "ops/s", lambda v: fmt_num(v)),
    ("mb_s", "MB/s", lambda v: fmt_num(v)),
    ("lat_avg_us", "mean latency", fmt_lat),
    ("lat_p99_us", "p99 latency", fmt_lat),
    ("osd_cpu_us_per_op", "OSD CPU per op (all OSDs)", lambda v: fmt_num(v, " µs")),
    ("peak_rss_mib_max", "peak RSS per OSD (max)", lambda v: fmt_num(v, " MiB")),
    ("held_mib_per_osd", "(object data held per OSD)", lambda v: fmt_num(v, " MiB")),
    ("osd_cores", "(CPU the OSDs got, cores)", lambda v: fmt_num(v)),
    ("others_cores", "(CPU other processes took, cores)", lambda v: fmt_num(v)),
]


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def combine(group):
    """One record for a workload's runs: each numeric metric's median over them (a single run as it
    is), with `reps` and each metric's (min, max) in `spread`; `log` is the run of median ops/s (whose
    latency histogram the plot draws)."""
    if len(group) == 1:
        return group[0]
    by_ops = sorted(group, key=lambda r: r["ops_s"])
    rec = dict(by_ops[(len(by_ops) - 1) // 2])
    rec["reps"] = len(group)
    rec["spread"] = {}
    for key, value in group[0].items():
        if key == "rep" or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        values = [r[key] for r in group if isinstance(r.get(key), (int, float)) and not math.isnan(r[key])]
        if len(values) == len(group):
            rec[key] = median(values)
            rec["spread"][key] = (min(values), max(values))
    return rec


def rounds(runs):
    """How many runs the most repeated workload had (1 when none was repeated)."""
    return max((r.get("reps", 1) for r in runs.values()), default=1)


def report(out):
    recs = load(os.path.join(out, "results.jsonl"))
    rest = {r["system"]: r for r in recs if r["type"] == "rest"}
    meta = next((r for r in recs if r["type"] == "meta"), {"n_osds": 3, "img_region_bytes": 0})
    # data the memory stores hold per OSD at the end of each run (in-memory stores: RSS grows with it):
    # the writes of the earlier runs in the same pool (all --no-cleanup), or the prefilled image region
    written = {}
    for r in recs:
        if r["type"] != "run":
            continue
        if r["workload"].startswith("fio_"):
            held = meta["img_region_bytes"]
        else:
            k = (r["system"], r["size"])
            if r["workload"].startswith("w"):
                written[k] = written.get(k, 0) + r["ops"] * r["bs"]
            held = written.get(k, 0)
        r["held_mib_per_osd"] = held * r["size"] / meta["n_osds"] / 2**20
    groups = {}
    for r in recs:
        if r["type"] == "run":
            groups.setdefault((r["system"], r["size"], r["workload"]), []).append(r)
    runs = {key: combine(group) for key, group in groups.items()}
    sizes = sorted({r["size"] for r in runs.values()})
    rows = []
    verdicts = []

    def add(wl_label, mlabel, cv, kv, fmt, target):
        # a near-zero baseline (another process's CPU share rounding to nothing) has no meaningful ratio
        ratio = kv / cv if (cv is not None and kv is not None and not math.isnan(cv) and not math.isnan(kv)
                            and abs(cv) > 1e-6) else None
        tgt, met = "", ""
        if target:
            op, bound = target
            tgt = f"{'≥' if op == '>=' else '≤' if op == '<=' else '<'} {bound:g}×"
            if ratio is not None:
                ok = ratio >= bound if op == ">=" else ratio <= bound if op == "<=" else ratio < bound
                met = "**met**" if ok else "missed"
                verdicts.append((wl_label, mlabel, ratio, tgt, ok))
            else:
                met = "—"
        rows.append([wl_label, mlabel, fmt(cv) if cv is not None else "—", fmt(kv) if kv is not None else "—",
                     f"{ratio:.2f}×" if ratio is not None else "n/a", tgt, met])

    for wl, label in WORKLOADS:
        for sz in sizes:
            c, k = runs.get(("ceph", sz, wl)), runs.get(("carmine", sz, wl))
            if not c and not k:
                continue
            name = f"{label}, size {sz}"
            for key, mlabel, fmt in METRICS:
                cv = c.get(key) if c else None
                kv = k.get(key) if k else None
                add(name, mlabel, cv, kv, fmt, target_for(wl, sz, key))
    if rest:
        c, k = rest.get("ceph"), rest.get("carmine")
        for key, mlabel in (("rest_rss_mib_max", "RSS per OSD at rest (max)"), ("rest_rss_mib_mean", "RSS per OSD at rest (mean)")):
            add("at rest (cluster up, one empty pool)", mlabel, c and c[key], k and k[key],
                lambda v: fmt_num(v, " MiB"), target_for("rest", None, key) if key.endswith("max") else None)

    hdr = ["workload", "metric", "Ceph", "Carmine", "Carmine/Ceph", "target", "met?"]
    print("| " + " | ".join(hdr) + " |")
    print("|" + "|".join(["---"] * len(hdr)) + "|")
    prev = None
    for r in rows:
        w = r[0] if r[0] != prev else ""
        prev = r[0]
        print("| " + " | ".join([w] + r[1:]) + " |")
    if verdicts:
        n = sum(1 for v in verdicts if v[4])
        print(f"\nTargets met: {n} of {len(verdicts)}.")
    print("\nRatios are Carmine/Ceph. Ceph's object-level p99 is n/a: rados bench reports no percentiles.\n"
          "Peak RSS is VmHWM during the run (reset before it) of the largest OSD. Each phase (block; size 1; size 3)\n"
          "runs on a fresh cluster; the block runs hold the same data on both systems, the object runs hold what\n"
          "they wrote (shown below each: both stores keep it in RAM), so only block-run memory has a target.")
    reps = rounds(runs)
    if reps > 1:
        print(f"A workload run {reps} times (the fio rows) shows each metric's median over its runs.")
    # background load during the runs
    oth = {}
    for r in runs.values():
        oth.setdefault(r["system"], []).append(r["others_cores"])
    for s, v in oth.items():
        print(f"CPU used by other processes on the host during the {s} runs: mean {sum(v)/len(v):.2f} cores, max {max(v):.2f}")
    block_targets(runs)
    wide(out, runs, sizes)
    plot(out, runs, sizes)


def block_targets(runs):
    """Issue #10's targets for the NBD export, against Ceph's librbd and nbdkit's memory plugin."""
    rows = []
    for wl, metric, against, op, bound in (
        ("fio_randwrite_qd16", "ops_s", "ceph", ">=", 5.0),
        ("fio_randwrite_qd16", "ops_s", "nbdkit", ">=", 0.3),
        ("fio_randwrite_qd1", "lat_avg_us", "ceph", "<=", 0.2),
    ):
        k, b = runs.get(("carmine", 3, wl)), runs.get((against, 3, wl))
        if not (k and b):
            continue
        ratio = k[metric] / b[metric]
        ok = ratio >= bound if op == ">=" else ratio <= bound
        fmt = fmt_lat if metric == "lat_avg_us" else fmt_num
        rows.append(f"| {LABEL[wl]}, {'IOPS' if metric == 'ops_s' else 'mean latency'} | {against} "
                    f"{fmt(b[metric])}{spread(b, metric, fmt)} | {fmt(k[metric])}{spread(k, metric, fmt)} | "
                    f"{ratio:.3f}× | {'≥' if op == '>=' else '≤'} {bound:g}× | {'**met**' if ok else 'missed'} |")
    nbdkit = [(wl, label) for wl, label in WORKLOADS if ("nbdkit", 3, wl) in runs]
    if not rows and not nbdkit:
        return
    reps = rounds(runs)
    print("\nBlock targets (issue #10): Carmine's NBD export of a size-3 image"
          + (f" (medians of {reps} runs each, range in brackets)" if reps > 1 else ""))
    print("| workload | baseline | Carmine | ratio | target | met? |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(r)
    for wl, label in nbdkit:
        r = runs[("nbdkit", 3, wl)]
        print(f"| {label}: nbdkit memory (1 process) | {fmt_num(r['ops_s'])} IOPS, mean {fmt_lat(r['lat_avg_us'])}, "
              f"p99 {fmt_lat(r['lat_p99_us'])}, {fmt_num(r['osd_cpu_us_per_op'], ' µs')} CPU/op | | | | |")


def spread(rec, metric, fmt):
    """' (min–max)' over a workload's runs, or nothing for a single run."""
    lo_hi = rec.get("spread", {}).get(metric)
    return f" ({fmt(lo_hi[0])}–{fmt(lo_hi[1])})" if lo_hi else ""


def wide(out, runs, sizes):
    """One row per workload (for BENCHMARKS.md): Ceph | Carmine | ratio for the main metrics."""
    cols = [("ops_s", "ops/s", fmt_num), ("lat_avg_us", "mean", fmt_lat), ("lat_p99_us", "p99", fmt_lat),
            ("osd_cpu_us_per_op", "OSD CPU/op", lambda v: fmt_num(v, " µs")),
            ("peak_rss_mib_max", "peak RSS/OSD", lambda v: fmt_num(v, " MiB"))]
    lines = ["| workload | " + " | ".join(f"{c[1]} Ceph | Carmine | ×" for c in cols) + " | OSD cores Ceph / Carmine |",
             "|" + "---|" * (1 + 3 * len(cols) + 1)]
    for wl, label in WORKLOADS:
        for sz in sizes:
            c, k = runs.get(("ceph", sz, wl)), runs.get(("carmine", sz, wl))
            if not (c and k):
                continue
            cells = [f"{label}, size {sz}"]
            for key, _, f in cols:
                cv, kv = c.get(key), k.get(key)
                ok = cv not in (None, 0) and kv is not None and not math.isnan(cv) and not math.isnan(kv)
                cells += [f(cv) if cv is not None else "n/a", f(kv) if kv is not None else "n/a",
                          f"{kv / cv:.2f}" if ok else "n/a"]
            cells.append(f"{c['osd_cores']:.2f} / {k['osd_cores']:.2f}")
            lines.append("| " + " | ".join(cells) + " |")
    open(os.path.join(out, "table-wide.md"), "w").write("\n".join(lines) + "\n")


def cdf_from_fio(path):
    j = json.load(open(path))["jobs"][0]
    d = j["write"] if j["write"]["total_ios"] > 0 else j["read"]
    bins = d["lat_ns"].get("bins") or d["clat_ns"].get("bins")
    pts = sorted((int(k), v) for k, v in bins.items())
    tot = sum(v for _, v in pts)
    xs, ys, acc = [], [], 0
    for ns, cnt in pts:
        acc += cnt
        xs.append(ns / 1e6)
        ys.append(acc / tot)
    return xs, ys


def plot(out, runs, sizes):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not available: no plot)", file=sys.stderr)
        return
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(15, 5.8), gridspec_kw={"width_ratios": [1, 1.6]})
    colors = {"ceph": "#d62728", "carmine": "#1f77b4"}
    names = {"ceph": "Ceph 16.2 (fio rbd)", "carmine": "Carmine (fio nbd)"}
    drew = False
    for s in ("ceph", "carmine"):
        r = runs.get((s, 3, "fio_randwrite_qd16"))
        if r and os.path.exists(r["log"] + ".json"):
            xs, ys = cdf_from_fio(r["log"] + ".json")
            a1.step(xs, ys, where="post", color=colors[s],
                    label=f"{names[s]}: {r['ops_s']:,.0f} IOPS, p50 "
                          f"{xs[next(i for i, y in enumerate(ys) if y >= 0.5)]:.2f} ms, p99 {r['lat_p99_us']/1000:.2f} ms")
            drew = True
    if drew:
        a1.set_xscale("log")
        a1.set_xlabel("latency per write, submission to completion (ms, log scale)")
        a1.set_ylabel("fraction of writes")
        a1.set_title("4 KiB random writes, size-3 pool, 16 in flight: latency CDF")
        a1.grid(True, which="both", alpha=0.3)
        a1.legend(loc="lower right", fontsize=8)
    labels, cv, kv = [], [], []
    for wl, label in WORKLOADS:
        for sz in sizes:
            c, k = runs.get(("ceph", sz, wl)), runs.get(("carmine", sz, wl))
            if not (c or k):
                continue
            short = label.replace(" (rbd / nbd)", "").replace(", 16 in flight", " t16").replace(", 1 in flight", " t1")
            short = short.replace("random read", "rand read")
            labels.append(f"{short}\nsize {sz}")
            cv.append(c["ops_s"] if c else 0)
            kv.append(k["ops_s"] if k else 0)
    x = range(len(labels))
    w = 0.4
    a2.bar([i - w / 2 for i in x], cv, w, color=colors["ceph"], label="Ceph 16.2 (rados bench / fio rbd)")
    a2.bar([i + w / 2 for i in x], kv, w, color=colors["carmine"], label="Carmine (carmine bench / fio nbd)")
    for i in x:
        if cv[i] and kv[i]:
            a2.text(i + w / 2, kv[i] * 1.08, f"{kv[i] / cv[i]:.1f}×", ha="center", fontsize=8)
    a2.set_yscale("log")
    a2.set_ylabel("ops/s (log scale)")
    a2.set_xticks(list(x))
    a2.set_xticklabels(labels, rotation=60, ha="right", fontsize=7.5)
    a2.set_title("Throughput per workload, 3 memstore OSDs (label: Carmine/Ceph)")
    a2.set_ylim(top=max(cv + kv) * 6)
    a2.legend(fontsize=8, loc="upper right", ncol=2)
    a2.grid(True, axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "compare-ceph.png"), dpi=110)
    print(f"\nplot: {os.path.join(out, 'compare-ceph.png')}")


def main():
    cmd = sys.argv[1]
    if cmd == "rest":
        kb = [int(x) for x in sys.argv[3].split()]
        print(json.dumps({"type": "rest", "system": sys.argv[2], "rest_rss_mib_max": max(kb) / 1024,
                          "rest_rss_mib_mean": sum(kb) / len(kb) / 1024, "rest_rss_mib_per_osd": [k / 1024 for k in kb]}))
    elif cmd == "parse":
        parse_run(sys.argv[2:])
    elif cmd == "line":
        line(sys.argv[2])
    elif cmd == "report":
        report(sys.argv[2])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
