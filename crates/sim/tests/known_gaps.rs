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

/// Not analysed yet: with a 13-entry PG log (a trial of BUGGIFY at 2–24 entries; the
/// default 8–64 passed 3,500 seeds), seed 1878 orders two acknowledged writes after
/// writes invoked later than their acknowledgements ("acked ... before ... was
/// invoked, yet orders after it"). Either the OSD logged writes out of real-time order
/// or the checker rebuilt the history wrongly around a trimmed log; the trace of
/// `carmine sim --seed 1878 --faults all` with that log length is where to start.
#[test]
fn real_time_order_with_a_thirteen_entry_log() {
    let mut config = SimConfig::from_seed(1878).with_faults(FaultClasses::ALL);
    config.tuning.log_entries_max = 13;
    let report = run_config(config);
    assert!(report.ok, "{}", format_report(&report));
}
