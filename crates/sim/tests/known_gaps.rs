//! Known gaps: seeds and fault classes that FAIL today. They run only with
//! `cargo test -p carmine-sim --features known-gaps --test known_gaps`; move each to the
//! default run when the fix lands (regression seeds go to `tests/seeds.rs`).
//!
//! The stale reads of seeds 287 and 852 (read leases), seed 1878 (an op held across a
//! primary change) and the unreadable object of seed 3176 (an interval below min_size
//! recorded as started) are regression seeds now.

#![cfg(feature = "known-gaps")]

use carmine_sim::{format_report, run_with_faults, FaultClasses};

/// Seed 23448 (LogStore, bit flips, 5 monitors), found 2026-11-23 by a swarm of seeds
/// 0..32,000 (the only failure), and failing at 307371b too, before that day's changes:
/// osd.3, primary of PG 1.1, was cut off from every OSD and monitor but not from the
/// clients for 7 s, applied writes to 6'51 that no replica got (never acknowledged),
/// a bit flip hit its copy of `client1-0`, and it crashed and came back. PG 1.1 then
/// stays incomplete on osd.3 (its log the newest, 6'51 against the replicas' 6'46) and
/// never becomes active+clean; the final comparison sees osd.3's unacknowledged
/// versions. The rollbacks of seeds 7290 and 4040 (`Pg::roll_back_unreadable_writes`,
/// `Pg::roll_back_unreadable_history`) do not apply here; why is not known yet.
/// Reproduce: `carmine sim --seed 23448 --faults all`.
#[test]
fn an_unacknowledged_history_with_a_rotten_copy_after_a_long_cut() {
    let report = run_with_faults(23448, FaultClasses::ALL);
    assert!(report.ok, "{}", format_report(&report));
}
