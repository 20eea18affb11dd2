//! Stray purge with real processes: an OSD marked out and back in moves every PG's
//! data away and back; the copies left behind each time are deleted once their PG is
//! clean again, so the cluster's used bytes return to what the three copies need.

mod common;

use common::DevCluster;
use serde_json::Value;
use std::time::{Duration, Instant};

const OBJECTS: usize = 12;
const OBJECT_BYTES: usize = 32 * 1024;
const COPIES: u64 = 3;
/// Monitor reports, peering, backfill and purge on a loaded machine.
const SETTLE_LIMIT: Duration = Duration::from_secs(90);

fn json(cluster: &DevCluster, args: &[&str]) -> Value {
    let mut full = vec!["--format", "json"];
    full.extend_from_slice(args);
    serde_json::from_str(&cluster.ok(&full)).expect("JSON output")
}

/// Data bytes each OSD reports, by id.
fn used_bytes(cluster: &DevCluster) -> Vec<u64> {
    let df = json(cluster, &["osd", "df"]);
    let nodes = df["nodes"].as_array().expect("nodes");
    nodes
        .iter()
        .map(|n| n["data_bytes"].as_u64().unwrap())
        .collect()
}

fn all_clean(cluster: &DevCluster) -> bool {
    let status = json(cluster, &["status"]);
    status["pgmap"]["pgs_by_state"]
        .as_array()
        .is_some_and(|s| s.len() == 1 && s[0]["state_name"] == "active+clean")
}

/// Waits until every PG is clean and `done` holds for the OSDs' used bytes.
fn settle(cluster: &DevCluster, what: &str, done: impl Fn(&[u64]) -> bool) -> Vec<u64> {
    let started = Instant::now();
    loop {
        let used = used_bytes(cluster);
        if all_clean(cluster) && done(&used) {
            return used;
        }
        assert!(
            started.elapsed() < SETTLE_LIMIT,
            "{what}: not within {SETTLE_LIMIT:?}; used bytes {used:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn an_osd_out_and_back_in_leaves_no_stray_copies_behind() {
    let cluster = DevCluster::start("strays", &["--osds", "4"]);
    cluster.ok(&["pool", "create", "rbd", "--size", "3", "--pg-num", "16"]);
    let input = cluster.path("object.bin");
    common::write_file(&input, &vec![b's'; OBJECT_BYTES]);
    for i in 0..OBJECTS {
        let name = format!("obj-{i}");
        cluster.ok(&["obj", "put", "rbd", &name, input.to_str().unwrap()]);
    }
    let needed = COPIES * (OBJECTS * OBJECT_BYTES) as u64;
    let total = |used: &[u64]| used.iter().sum::<u64>();
    let baseline = settle(&cluster, "written", |used| total(used) == needed);
    assert!(baseline[3] > 0, "osd.3 holds copies: {baseline:?}");

    // Out: osd.3's copies move to the others, and its strays go once they are clean.
    cluster.ok(&["osd", "out", "3"]);
    let moved = settle(&cluster, "osd.3 out", |used| {
        used[3] == 0 && total(used) == needed
    });
    eprintln!("used bytes by OSD: {baseline:?} -> out {moved:?}");

    // In again: the data moves back, and the copies the others held meanwhile go.
    cluster.ok(&["osd", "in", "3"]);
    let back = settle(&cluster, "osd.3 in", |used| {
        used[3] > 0 && total(used) == needed
    });
    eprintln!("used bytes by OSD: back in {back:?}");
    assert_eq!(back, baseline, "the same placement holds the same copies");

    let output = cluster.path("read.bin");
    for i in 0..OBJECTS {
        let name = format!("obj-{i}");
        cluster.ok(&["obj", "get", "rbd", &name, output.to_str().unwrap()]);
        assert_eq!(std::fs::read(&output).unwrap().len(), OBJECT_BYTES);
    }
}
