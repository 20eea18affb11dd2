//! Durability with real processes: OSDs on LogStore, every OSD killed with SIGKILL at
//! once (a cluster-wide power cut for the OSDs), restarted, and every acknowledged
//! object read back byte-exact; then `carmine store fsck` finds every device clean.

mod common;

use common::{carmine, write_file, DevCluster};

#[test]
fn every_acknowledged_write_survives_sigkill_of_every_osd() {
    let cluster = DevCluster::start("logstore", &["--store", "log"]);
    cluster.ok(&["pool", "create", "rbd", "--size", "3", "--pg-num", "16"]);
    let names: Vec<String> = (0..40).map(|i| format!("durable-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        let file = cluster.path(&format!("in-{i}"));
        write_file(
            &file,
            format!("content of {name} {}", "x".repeat(i * 97)).as_bytes(),
        );
        cluster.ok(&["obj", "put", "rbd", name, file.to_str().unwrap()]);
    }
    let dir = cluster.dir.to_str().unwrap().to_string();
    for osd in 0..3 {
        let name = format!("osd.{osd}");
        let killed = carmine()
            .args(["vstop", "--only", &name, "--kill", "--dir", &dir])
            .output()
            .unwrap();
        assert!(
            killed.status.success(),
            "{}",
            String::from_utf8_lossy(&killed.stderr)
        );
    }
    for osd in 0..3 {
        let data = cluster.path(&format!("osd.{osd}"));
        let fsck = cluster.ok(&["store", "fsck", "--data", data.to_str().unwrap()]);
        assert!(fsck.contains("errors: []"), "{fsck}");
    }
    for osd in 0..3 {
        cluster.ok(&["vstart", "--only", &format!("osd.{osd}"), "--dir", &dir]);
    }
    let out = cluster.path("out");
    for (i, name) in names.iter().enumerate() {
        cluster.ok(&["obj", "get", "rbd", name, out.to_str().unwrap()]);
        let expected = format!("content of {name} {}", "x".repeat(i * 97));
        assert_eq!(std::fs::read_to_string(&out).unwrap(), expected, "{name}");
    }
    let listed = cluster.ok(&["obj", "ls", "rbd"]);
    assert_eq!(listed.lines().count(), names.len());
}
