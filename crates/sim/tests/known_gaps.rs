//! Known gaps: seeds and fault classes that FAIL today. They run only with
//! `cargo test -p carmine-sim --features known-gaps --test known_gaps`; move each to the
//! default run when the fix lands (regression seeds go to `tests/seeds.rs`).
#![cfg(feature = "known-gaps")]

use carmine_sim::{format_report, run_config, run_with_faults, FaultClasses, SimConfig};

/// The two failures in 2,000 seeds with every fault class (monitor faults included):
/// a primary cut off from the monitors (but not from some clients) serves a read
/// after a new primary has taken writes: a stale read. Ceph prevents it with read
/// leases; Carmine has none yet. Monitor faults make the window longer (a client or
/// an OSD that cannot reach a monitor with quorum keeps an old map). Seed 287 runs one
/// monitor, seed 852 three. (Seed 1132, which showed it before seeds chose monitor
/// counts and BUGGIFY shrank the PG log, no longer does.)
#[test]
fn stale_read_from_a_cut_off_primary() {
    for seed in [287, 852] {
        let report = run_with_faults(seed, FaultClasses::ALL);
        assert!(report.ok, "{}", format_report(&report));
    }
}

/// Request ids of trimmed PG log entries ("dups") live in memory only. An OSD that
/// applied a write, restarted (forgetting its dups, its short log no longer holding
/// the entry) and became primary again applies the client's resend a second time:
/// seed 1082 with a 15-entry log (BUGGIFY draws 8–64, where 2,000 seeds did not hit
/// it; 2–24 did). The fix is Ceph's: persist the dups with the log and send them with
/// it in peering.
#[test]
fn a_resend_after_a_restart_and_a_trim_is_applied_twice() {
    let mut config = SimConfig::from_seed(1082).with_faults(FaultClasses::ALL);
    config.tuning.log_entries_max = 15;
    let report = run_config(config);
    assert!(report.ok, "{}", format_report(&report));
}
