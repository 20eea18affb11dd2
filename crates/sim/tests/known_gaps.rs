//! Known gaps: seeds and fault classes that FAIL today. They run only with
//! `cargo test -p carmine-sim --features known-gaps --test known_gaps`; move each to the
//! default run when the fix lands (regression seeds go to `tests/seeds.rs`).
//!
//! Known today: seed 15189 of remaps, space and snapshot trims (below). The stale reads of seeds 287 and 852 (read leases), seed 1878
//! (an op held across a primary change), the unreadable object of seed 3176 (an
//! interval below min_size recorded as started), the incomplete PG of seed 23448 (a
//! rollback that kept versions only the rolled-back copy had), the PG counts of seeds
//! 102790 (a rollback no copy could settle) and 382 with `--snapshots` (unsure counts
//! settled from a copy that had them from us), seed 382 of the remap class with
//! snapshots (doubtful counts adopted as sure by a later primary), the unfound object of seed 211550 (the
//! last intact copy on a returning backfill target), seeds 173 and 1356 of the
//! disk-error class (an activation that left before the primary's log was durable),
//! seeds 1514, 1822 and 2346 of the space class (a push's answer taken for a
//! write's), the incomplete PGs of seeds 10963 (entries the authoritative log had
//! trimmed taken for divergent) and 16262 (a diverged copy holding the needed version
//! never asked), and the unfound object of seed 28576 (a later write rolled back over
//! the only copy of an acknowledged one) of remaps, space and snapshot trims are
//! regression seeds now.

#![cfg(feature = "known-gaps")]

use carmine_sim::{format_report, run_config, FaultClasses, SimConfig};

/// `--faults all,remaps,space --snap-trim --disk mem`, seed 15189 (MemStore, size 2, five monitors): PG 1.0 ends
/// incomplete. osd.0's store had no room for its pull of `client0-1` (e39), so it led
/// the PG with the object missing, and its log (BUGGIFY-small) then trimmed past every
/// entry that names it. osd.1 holds the object, but its last update (30'22) is older
/// than osd.0's log tail (45'26), so nothing tells which version the history needs
/// and no copy can vouch for it (`unobtainable_missing`, `Pg::exact_copy`). Ceph's
/// missing set keeps each object's needed version (`pg_missing_t`: need, have); ours
/// keeps names only, which is what a fix would change. It appeared once this session
/// logged refusals for space (more entries, so logs trim sooner); before, the same
/// seed took another course and passed.
#[test]
fn a_missing_object_whose_needed_version_the_log_no_longer_names() {
    assert_passes_with_remaps_space_and_snapshot_trims(15189);
}

/// Runs `seed` of `--faults all,remaps,space --snap-trim --disk mem`; fails with its
/// report unless it passes.
fn assert_passes_with_remaps_space_and_snapshot_trims(seed: u64) {
    let classes = FaultClasses {
        remaps: true,
        space: true,
        ..FaultClasses::ALL
    };
    let report = run_config(
        SimConfig::from_seed(seed)
            .with_faults(classes)
            .with_snap_trim(true)
            .with_disk(carmine_sim::disk::DiskKind::Mem),
    );
    assert!(report.ok, "{}", format_report(&report));
}
