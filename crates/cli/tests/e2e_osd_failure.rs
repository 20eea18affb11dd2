//! Failure detection with real processes and the operator's flags: an OSD killed with
//! SIGKILL is reported down within the grace plus a bound, `carmine status` shows the
//! degraded state with reasons, `noout` keeps the dead OSD in past the down-out
//! interval, and once `noout` is unset the monitor marks it out. The OSD restarts and
//! is marked in again; `pool set`/`get`, `config set|get|rm|dump` and `pg stat`/`dump`
//! see the same cluster, and bad input gets a one-line error.

mod common;

use common::DevCluster;
use serde_json::Value;
use std::time::{Duration, Instant};

const GRACE_SECONDS: u64 = 2;
const DOWN_OUT_SECONDS: u64 = 4;
/// Slack for the monitor's tick, the client's map refresh and a loaded machine.
const DETECTION_SLACK: Duration = Duration::from_secs(6);

fn json(cluster: &DevCluster, args: &[&str]) -> Value {
    let mut full = vec!["--format", "json"];
    full.extend_from_slice(args);
    serde_json::from_str(&cluster.ok(&full)).expect("JSON output")
}

fn osd2(cluster: &DevCluster) -> Value {
    json(cluster, &["osd", "dump"])["osds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["osd"] == 2)
        .cloned()
        .expect("osd.2 in the dump")
}

/// Polls until `done` holds; returns how long it took.
fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    started.elapsed()
}

#[test]
fn a_killed_osd_goes_down_then_out_unless_noout() {
    let grace = GRACE_SECONDS.to_string();
    let down_out = DOWN_OUT_SECONDS.to_string();
    let cluster = DevCluster::start(
        "osd-failure",
        &[
            "--osds",
            "3",
            "--osd-down-grace-seconds",
            &grace,
            "--osd-down-out-seconds",
            &down_out,
        ],
    );
    cluster.ok(&["pool", "create", "rbd", "--size", "3", "--pg-num", "16"]);
    cluster.ok(&["pool", "set", "rbd", "min_size", "2"]);
    assert_eq!(
        json(&cluster, &["pool", "get", "rbd", "min_size"])["min_size"],
        2
    );
    let input = cluster.path("object.bin");
    common::write_file(&input, b"survives a dead OSD");
    cluster.ok(&["obj", "put", "rbd", "greeting", input.to_str().unwrap()]);

    // Bad input gets one clear line.
    let error = cluster.fails(&["osd", "set", "nosuchflag"]);
    assert!(error.contains("unknown flag"), "{error}");
    let error = cluster.fails(&["pool", "set", "rbd", "size", "0"]);
    assert!(error.contains("outside"), "{error}");
    let error = cluster.fails(&["pool", "set", "rbd", "pg_num", "64"]);
    assert!(error.contains("splitting"), "{error}");

    // Config keys travel with the map.
    cluster.ok(&["config", "set", "site/rack", "r42"]);
    assert_eq!(cluster.ok(&["config", "get", "site/rack"]).trim(), "r42");
    assert_eq!(json(&cluster, &["config", "dump"])["site/rack"], "r42");
    cluster.ok(&["config", "rm", "site/rack"]);
    let error = cluster.fails(&["config", "get", "site/rack"]);
    assert!(error.contains("does not exist"), "{error}");

    cluster.ok(&["osd", "set", "noout"]);
    assert_eq!(json(&cluster, &["osd", "dump"])["flags"], "noout");
    cluster.ok(&["vstop", "--only", "osd.2", "--kill"]);
    let took = wait_until(
        "osd.2 marked down",
        Duration::from_secs(GRACE_SECONDS) + DETECTION_SLACK,
        || osd2(&cluster)["up"] == false,
    );
    eprintln!("osd.2 reported down {took:?} after SIGKILL");

    // Degraded, with the reasons named.
    let checks = wait_until("status shows the dead OSD", DETECTION_SLACK, || {
        let status = json(&cluster, &["status"]);
        let checks = status["health"]["checks"].to_string();
        status["health"]["status"] == "HEALTH_WARN"
            && checks.contains("OSD_DOWN")
            && checks.contains("osd.2")
            && checks.contains("OSDMAP_FLAGS")
    });
    let _ = checks;
    let health = cluster.ok(&["health", "detail"]);
    assert!(health.contains("OSD_DOWN"), "{health}");
    let pg_stat = cluster.ok(&["pg", "stat"]);
    assert!(pg_stat.starts_with("16 pgs:"), "{pg_stat}");

    // The data is still served by the two survivors.
    let output = cluster.path("read.bin");
    cluster.ok(&["obj", "get", "rbd", "greeting", output.to_str().unwrap()]);
    assert_eq!(std::fs::read(&output).unwrap(), b"survives a dead OSD");

    // noout holds it in well past the down-out interval.
    std::thread::sleep(Duration::from_secs(DOWN_OUT_SECONDS + 2));
    assert_eq!(osd2(&cluster)["in"], true, "noout keeps osd.2 in");

    cluster.ok(&["osd", "unset", "noout"]);
    wait_until(
        "osd.2 marked out once noout is unset",
        Duration::from_secs(DOWN_OUT_SECONDS) + DETECTION_SLACK,
        || osd2(&cluster)["in"] == false,
    );

    // Declared lost while down (as for a dead disk): refused without the flag, and
    // recorded in the map with it. Its return below is then an ordinary stray's.
    let error = cluster.fails(&["osd", "lost", "2"]);
    assert!(error.contains("--yes-i-really-mean-it"), "{error}");
    let marked = cluster.ok(&["osd", "lost", "2", "--yes-i-really-mean-it"]);
    assert!(marked.contains("marked osd.2 lost"), "{marked}");
    assert_ne!(osd2(&cluster)["lost_at"], 0);
    let error = cluster.fails(&["osd", "lost", "0", "--yes-i-really-mean-it"]);
    assert!(error.contains("only a down OSD"), "{error}");

    // Back: restart, mark in, and every PG is listed by `pg dump`.
    cluster.ok(&[
        "vstart",
        "--dir",
        cluster.dir.to_str().unwrap(),
        "--only",
        "osd.2",
    ]);
    cluster.ok(&["osd", "in", "2"]);
    wait_until("osd.2 up and in", DETECTION_SLACK, || {
        let osd = osd2(&cluster);
        osd["up"] == true && osd["in"] == true
    });
    let dump = json(&cluster, &["pg", "dump"]);
    let pgs = dump["pg_map"]["pg_stats"].as_array().unwrap();
    assert_eq!(pgs.len(), 16);
    cluster.ok(&["obj", "get", "rbd", "greeting", output.to_str().unwrap()]);
    assert_eq!(std::fs::read(&output).unwrap(), b"survives a dead OSD");

    // Nothing was lost, and the primaries say so when asked.
    assert!(
        pgs.iter().all(|pg| pg["num_objects_unfound"] == 0),
        "{dump}"
    );
    let pgid = pgs[0]["pgid"].as_str().unwrap();
    let listed = cluster.ok(&["pg", "list_unfound", pgid]);
    assert_eq!(listed.trim(), format!("pg {pgid} has no unfound objects"));
    let listed = json(&cluster, &["pg", "list_unfound", pgid]);
    assert_eq!(listed["num_unfound"], 0, "{listed}");
    let error = cluster.fails(&["pg", "list_unfound", "99.0"]);
    assert!(error.contains("no pool 99"), "{error}");
    let error = cluster.fails(&["pg", "list_unfound", "1.zz"]);
    assert!(error.contains("not hexadecimal"), "{error}");
    let marked = cluster.ok(&["pg", "mark_unfound_lost", pgid, "delete"]);
    assert_eq!(marked.trim(), format!("pg {pgid} has no unfound objects"));
    let error = cluster.fails(&["pg", "mark_unfound_lost", pgid, "revert"]);
    assert!(error.contains("revert is not built"), "{error}");
}
