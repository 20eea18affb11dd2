//! End to end with real processes: OSDs whose MemStores have a capacity
//! (`vstart --memstore-mib`, as Ceph's `memstore_device_bytes`) fill up. Writes that
//! add data then fail with a clear `NoSpace` error, health says which OSDs are full,
//! no OSD stops, every object written before still reads back, and deleting objects
//! makes room for writes again.

mod common;

use common::{wait_until, write_file, DevCluster};
use std::time::Duration;

/// Each OSD's one shard holds 8 MiB.
const MEMSTORE_MIB: &str = "8";
const OBJECT_BYTES: usize = 64 * 1024;

fn object_data(i: usize) -> Vec<u8> {
    (0..OBJECT_BYTES).map(|b| (b * 7 + i * 13) as u8).collect()
}

#[test]
fn a_full_memstore_gives_clear_errors_loses_nothing_and_takes_writes_after_deletes() {
    let cluster = DevCluster::start(
        "full",
        &["--osds", "3", "--mons", "1", "--memstore-mib", MEMSTORE_MIB],
    );
    cluster.ok(&["pool", "create", "p", "--size", "3", "--pg-num", "8"]);
    let file = cluster.path("object");

    // Fill until a write is refused; a size-3 pool on three OSDs puts every object
    // on every OSD, so 8 MiB holds fewer than 128 of them.
    let mut written = 0;
    let refusal = loop {
        assert!(written < 160, "{written} objects of 64 KiB fit in 8 MiB");
        write_file(&file, &object_data(written));
        let name = format!("o{written:03}");
        let output = cluster.run(&["obj", "put", "p", &name, file.to_str().unwrap()]);
        if !output.status.success() {
            break String::from_utf8_lossy(&output.stderr).into_owned();
        }
        written += 1;
    };
    assert!(written >= 64, "only {written} objects fit");
    assert!(refusal.contains("NoSpace"), "{refusal}");

    // Health names the full OSDs (the monitor marks them from their usage reports).
    wait_until("health reports full OSDs", Duration::from_secs(10), || {
        let health = cluster.run(&["health", "detail"]);
        String::from_utf8_lossy(&health.stdout).contains("OSD_FULL")
    });
    for id in 0..3 {
        assert!(cluster.osd_up(id), "osd.{id} stopped on a full store");
    }
    for i in (0..written).step_by(9) {
        let out = cluster.path("back");
        cluster.ok(&[
            "obj",
            "get",
            "p",
            &format!("o{i:03}"),
            out.to_str().unwrap(),
        ]);
        assert_eq!(std::fs::read(&out).unwrap(), object_data(i), "o{i:03}");
    }

    // Deletes go through while full; once the monitor sees the room, writes do too.
    for i in 0..16 {
        cluster.ok(&["obj", "rm", "p", &format!("o{i:03}")]);
    }
    wait_until("full OSDs cleared", Duration::from_secs(10), || {
        let health = cluster.run(&["health", "detail"]);
        !String::from_utf8_lossy(&health.stdout).contains("OSD_FULL")
    });
    write_file(&file, &object_data(999));
    cluster.ok(&["obj", "put", "p", "after", file.to_str().unwrap()]);
    let out = cluster.path("back");
    cluster.ok(&["obj", "get", "p", "after", out.to_str().unwrap()]);
    assert_eq!(std::fs::read(&out).unwrap(), object_data(999));
}
