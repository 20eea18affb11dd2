//! Known gaps: seeds and fault classes that FAIL today. They run only with
//! `cargo test -p carmine-sim --features known-gaps --test known_gaps`; move each to the
//! default run when the fix lands (regression seeds go to `tests/seeds.rs`).
//!
//! One is known today: seed 211550 (below). The stale reads of seeds 287 and 852 (read leases), seed 1878
//! (an op held across a primary change), the unreadable object of seed 3176 (an
//! interval below min_size recorded as started), the incomplete PG of seed 23448 (a
//! rollback that kept versions only the rolled-back copy had) and the PG counts of seed
//! 102790 (a rollback no copy could settle) are regression seeds now.

#![cfg(feature = "known-gaps")]

use carmine_sim::{format_report, run_with_faults, FaultClasses};

/// Seed 211550 (found 2026-11-28; fails the same way before that day's changes): the
/// only intact copy of an acknowledged write is on an OSD that returns as a backfill
/// target, and the object is unfound for good.
///
/// PG 1.9 wrote `shared-1` at 4'23 on osd.2 (primary) and osd.0. osd.2 was cut off;
/// osd.0's copy took a bit flip; the next interval's writes to `shared-1` failed with
/// "no readable copy" (error entries only), and the log moved past 4'23. When osd.2
/// came back (last_update 4'23, behind the new log's tail) it became a backfill target:
/// activation put `shared-1` into its missing set, so it refused the primary's pull
/// ("shared-1 is missing here") although it held exactly version 4'23 intact. The PG
/// stays active+degraded+remapped+backfill_wait and the object unreadable. Ceph's
/// `search_for_missing` would count osd.2 as a location (its last_update is at least the
/// needed version and it was backfilled in full before); the pull would have to carry the
/// needed version so a peer could serve an object its missing set names.
#[test]
fn seed_211550_an_intact_copy_on_a_returning_backfill_target_is_used() {
    let report = run_with_faults(211550, FaultClasses::ALL);
    assert!(report.ok, "{}", format_report(&report));
}
