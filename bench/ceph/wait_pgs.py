#!/usr/bin/python3
# Copied from /work/shared/tools/ceph/wait_pgs.py (the team's shared Ceph tools), unchanged apart from this line.
# wait_pgs.py POOL [TIMEOUT_S]
# Wait until every PG of POOL is active+clean, without a ceph-mgr
# (asks each PG's primary OSD directly, like `ceph pg <pgid> query`).
import json, os, sys, time
import rados

pool = sys.argv[1]
timeout = float(sys.argv[2]) if len(sys.argv) > 2 else 120
conf = os.environ.get("CEPH_CONF", "/tmp/cephbase/ceph.conf")
c = rados.Rados(conffile=conf)
c.connect(timeout=10)

def mon(cmd):
    ret, out, err = c.mon_command(json.dumps(cmd), b"", timeout=10)
    if ret != 0:
        raise RuntimeError(f"{cmd}: {ret} {err}")
    return json.loads(out)

pool_id = c.pool_lookup(pool)
pg_num = mon({"prefix": "osd pool get", "pool": pool, "var": "pg_num", "format": "json"})["pg_num"]
t0 = time.time()
pending = [f"{pool_id}.{i:x}" for i in range(pg_num)]
states = {}
while pending and time.time() - t0 < timeout:
    still = []
    for pgid in pending:
        try:
            ret, out, err = c.pg_command(pgid, json.dumps({"prefix": "query", "pgid": pgid, "format": "json"}),
                                         b"", timeout=5)
            st = json.loads(out)["state"] if ret == 0 else f"err{ret}"
        except Exception as e:  # PG not yet mapped / OSD not answering
            st = type(e).__name__
        states[pgid] = st
        if st != "active+clean":
            still.append(pgid)
    pending = still
    if pending:
        time.sleep(0.25)
c.shutdown()
if pending:
    print(f"pool {pool}: {len(pending)}/{pg_num} PGs not active+clean after {timeout}s: "
          + ", ".join(f"{p}={states.get(p)}" for p in pending[:8]), file=sys.stderr)
    sys.exit(1)
print(f"pool {pool}: {pg_num} PGs active+clean after {time.time() - t0:.1f}s")
