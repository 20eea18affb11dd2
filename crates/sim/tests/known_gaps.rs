//! Known gaps: seeds and fault classes that FAIL today. They run only with
//! `cargo test -p carmine-sim --features known-gaps --test known_gaps`; move each to the
//! default run when the fix lands (regression seeds go to `tests/seeds.rs`).
#![cfg(feature = "known-gaps")]

use carmine_sim::{format_report, run, run_with_faults, FaultClasses};

fn assert_all_pass(seeds: impl Iterator<Item = u64>, faults: FaultClasses) {
    let failed: Vec<String> = seeds
        .map(|seed| run_with_faults(seed, faults))
        .filter(|report| !report.ok)
        .map(|report| format_report(&report))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Peering sends `PgLogRequest` to a peer outside the acting set (a stray holding the
/// newest log) on shard 0 rather than on the shard that owns the PG; that shard drops
/// it and the PG stays `peering` forever. Only OSDs with 2+ shards; no fault needed.
#[test]
fn regression_log_request_to_a_stray_reaches_the_owning_shard() {
    for seed in [13, 68, 179, 215, 235, 258, 277] {
        let report = run(seed);
        assert!(report.ok, "{}", format_report(&report));
    }
}

/// An OSD whose monitor session resets boots again; the monitor publishes "down" then
/// "up", but the rebooting OSD subscribes only before the second, so it never sees the
/// down epoch, keeps its old interval, and ignores the primary's `PgActivate` for the
/// new one: the PG stays `peering`.
#[test]
fn osd_monitor_session_resets() {
    let faults = FaultClasses {
        osd_mon_resets: true,
        ..FaultClasses::handled()
    };
    assert_all_pass(0..30, faults);
}

/// OSD crash and restart on the same store.
#[test]
fn osd_crashes() {
    let faults = FaultClasses {
        crashes: true,
        ..FaultClasses::handled()
    };
    assert_all_pass(0..30, faults);
}

/// OSD ↔ OSD and OSD ↔ monitor partitions, both ways and one way.
#[test]
fn osd_partitions() {
    let faults = FaultClasses {
        osd_partitions: true,
        ..FaultClasses::handled()
    };
    assert_all_pass(0..30, faults);
}
