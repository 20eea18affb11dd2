//! Stray purge with real processes: an OSD marked out and back in moves every PG's
//! data away and back; the copies left behind each time are deleted once their PG is
//! clean again, so the cluster's used bytes return to what the three copies need.
//! Then the OSD is retired for good (`osd safe-to-destroy`, `osd purge`).

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
    let read_all = || {
        for i in 0..OBJECTS {
            let name = format!("obj-{i}");
            cluster.ok(&["obj", "get", "rbd", &name, output.to_str().unwrap()]);
            assert_eq!(std::fs::read(&output).unwrap().len(), OBJECT_BYTES);
        }
    };
    read_all();

    // Decommissioned for good, as an operator retires a disk: out, drained, stopped,
    // then purged once `safe-to-destroy` says yes.
    let error = cluster.fails(&["osd", "safe-to-destroy", "3"]);
    assert!(error.contains("pgs are mapped to it"), "{error}");
    cluster.ok(&["osd", "out", "3"]);
    settle(&cluster, "osd.3 out again", |used| {
        used[3] == 0 && total(used) == needed
    });
    let safe = cluster.ok(&["osd", "safe-to-destroy", "3"]);
    assert!(safe.contains("osd.3 is safe to destroy"), "{safe}");
    let error = cluster.fails(&["osd", "purge", "3", "--yes-i-really-mean-it"]);
    assert!(error.contains("is up; stop it"), "{error}");
    cluster.ok(&["vstop", "--only", "osd.3"]);
    cluster.ok(&["osd", "down", "3"]);
    let error = cluster.fails(&["osd", "purge", "3"]);
    assert!(error.contains("--yes-i-really-mean-it"), "{error}");
    let purged = cluster.ok(&["osd", "purge", "3", "--yes-i-really-mean-it"]);
    assert!(purged.contains("purged osd.3"), "{purged}");
    let tree = cluster.ok(&["osd", "tree"]);
    assert!(!tree.contains("osd.3"), "{tree}");
    let status = json(&cluster, &["status"]);
    assert_eq!(status["osdmap"]["num_osds"], 3, "{status}");
    let error = cluster.fails(&["osd", "safe-to-destroy", "3"]);
    assert!(error.contains("does not exist"), "{error}");
    let after = settle(&cluster, "osd.3 purged", |used| {
        used.len() == 3 && total(used) == needed
    });
    eprintln!("used bytes by OSD: osd.3 purged {after:?}");
    read_all();
}
