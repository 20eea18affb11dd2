//! Known gaps: seeds and fault classes that FAIL today. They run only with
//! `cargo test -p carmine-sim --features known-gaps --test known_gaps`; move each to the
//! default run when the fix lands (regression seeds go to `tests/seeds.rs`).
//!
//! Known today: seed 34338 of expansion, remaps, space and snapshot trims (an
//! acknowledged write lost; below). The stale reads of seeds 287 and 852 (read leases), seed 1878
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
//! trimmed taken for divergent), 16262 (a diverged copy holding the needed version
//! never asked) and 15189 (the entry naming a missing object's needed version
//! trimmed), and the unfound object of seed 28576 (a later write rolled back over the
//! only copy of an acknowledged one) of remaps, space and snapshot trims, and the
//! degraded PG of seed 5531 of remaps, disk errors and expansion with snapshots (an
//! adopted log naming a write no copy could serve) and the clone on one copy only of
//! seed 1132 of expansion, remaps, space and snapshot trims (a removed object a
//! backfill source lacked taken for gone) and seed 36287 of the same class (a
//! missing object's needed version gone with the log entries naming it) are
//! regression seeds now.

#![cfg(feature = "known-gaps")]

use carmine_sim::disk::DiskKind;
use carmine_sim::{format_report, run_config, FaultClasses, SimConfig};

/// `--faults all,expansion,remaps,space --snap-trim --disk mem`, seed 34338 (MemStore,
/// size 2, min_size 1): an acknowledged write is lost. What the trace shows:
/// - osd.0's store had no room, so osd.2, primary of PG 1.6 in interval 9, acknowledged
///   writes to `shared-0` up to 11'46 with its own data alone (osd.0 logged them only:
///   the policy session 39 left to the team, "acknowledged writes can rest on one
///   disk's data");
/// - osd.2 was then cut off outbound for 6 s and went on as a stale primary: it applied
///   11'47..11'49 (a rollback to a snapshot among them) over that only copy; nobody
///   acknowledged them, and the clients' resends got EIO from the next interval,
///   where the object was unfound;
/// - at e31 osd.2 leads again, its three entries are divergent (the later interval
///   logged other writes) and are rolled back, and no copy of 11'46 exists anywhere:
///   `shared-0` stays missing, its store holding 11'49's data.
///
/// Ceph would not have acknowledged those writes: a replica missing a few objects is
/// recovered synchronously, and a write to one waits for its recovery. (Its
/// asynchronous recovery, for a replica lacking more than `osd_async_recovery_min_cost`
/// objects, logs writes there without data as Carmine does, keeping `min_size`
/// complete copies, so at min_size 1 it takes the same risk.) Closing this means
/// revisiting that policy (or keeping the data a stale primary overwrites, as Ceph
/// does only for erasure-coded pools). Fails on session 39's build too.
/// Found by the swarm of seeds 30000..45000 (1 of 15,000).
#[test]
fn a_stale_primary_overwrites_the_only_copy_of_an_acknowledged_write() {
    assert_passes(expansion_remaps_space_trims(34338));
}

fn expansion_remaps_space_trims(seed: u64) -> SimConfig {
    let classes = FaultClasses {
        expansion: true,
        remaps: true,
        space: true,
        ..FaultClasses::ALL
    };
    SimConfig::from_seed(seed)
        .with_faults(classes)
        .with_snap_trim(true)
        .with_disk(DiskKind::Mem)
}

/// Fails with the run's report unless it passes.
fn assert_passes(config: SimConfig) {
    let report = run_config(config);
    assert!(report.ok, "{}", format_report(&report));
}
