//! Known gaps: seeds and fault classes that FAIL today. They run only with
//! `cargo test -p carmine-sim --features known-gaps --test known_gaps`; move each to the
//! default run when the fix lands (regression seeds go to `tests/seeds.rs`).
//!
//! The stale reads of seeds 287 and 852 (read leases) and seed 1878 (an op held across
//! a primary change) are regression seeds now.
#![cfg(feature = "known-gaps")]

use carmine_sim::{format_report, run_with_faults, FaultClasses};

/// Not analysed yet (found in the first 2000..4000 swarm with read leases; it passes
/// with the `NoLeases` canary, whose timing differs): after healing, PG 1.6 stays
/// `active+degraded+backfill_wait` on its primary and the run does not converge
/// within 60 s. Either a lease wait or lag left the recovery budget's resume queue
/// without the PG, or the budget never frees; the trace of
/// `carmine sim --seed 3176 --faults all` is where to start. (Since stray purge and
/// the other merges of 2026-11-22 changed the traces it passes, so its old schedule
/// is gone; the cause was never found.)
///
/// It fails again since the error-entry merge of the second 2026-11-22 session, now
/// with a clearer trace: PG 1.6's primary osd.2 is missing `shared-2` and pulls it
/// from osd.0 (whose copy took a bit flip at 11.39 s) and from osd.1 (crashed at
/// 11.66 s, back at 13.0 s); both answer the pull with `corrupt: ["shared-2"]`, so the
/// object has no readable copy and the PG waits in `backfill_wait` for good. What to
/// find out: whether osd.1 ever held the newest `shared-2` durably (a LogStore replay
/// or backfill-marker gap would lose an acknowledged write), or only answers
/// "corrupt" for an object it lacks; and whether an unfound object should leave the
/// PG in a state the checker accepts (Ceph: `recovery_unfound`).
#[test]
fn backfill_wait_that_never_resumes() {
    let report = run_with_faults(3176, FaultClasses::ALL);
    assert!(report.ok, "{}", format_report(&report));
}
