//! The fixed seed sets. Every seed must pass every checker. A failing seed prints its
//! report; reproduce it with `carmine sim --seed N [--faults all]`.
//!
//! - 200 seeds with the network faults (latency and reordering, session resets, slow
//!   links, client partitions), including the seeds that once hit a misrouted
//!   `PgLogRequest` to a stray (13, 68, 179, 215, 235, 258, 277).
//! - 120 seeds with every fault class: OSD crashes and restarts (stores kept), OSD
//!   partitions (one-way and both ways), OSD↔monitor session resets, on top of the
//!   network faults; LogStore seeds also get bits of data at rest flipped, which must
//!   be found and repaired. These exercise peering, recovery and the monitor's failure
//!   detection.
//!
//! Seeds that fail today live in `tests/known_gaps.rs`.

use carmine_sim::{format_report, run, run_with_faults, FaultClasses, SimReport};

fn check(reports: &[SimReport], faults_min: u64, acked_min: u64) {
    let failed: Vec<String> = reports
        .iter()
        .filter(|r| !r.ok)
        .map(format_report)
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    let faults: u64 = reports.iter().map(|r| r.faults).sum();
    let acked: u64 = reports.iter().map(|r| r.ops_acked).sum();
    assert!(faults > faults_min, "only {faults} faults injected");
    assert!(acked > acked_min, "only {acked} ops acknowledged");
}

#[test]
fn fixed_seeds_pass_with_the_network_faults() {
    let reports: Vec<SimReport> = (0..200).map(run).collect();
    check(&reports, 500, 50_000);
}

#[test]
fn fixed_seeds_pass_with_every_fault_class() {
    let reports: Vec<SimReport> = (1000..1120)
        .map(|seed| run_with_faults(seed, FaultClasses::ALL))
        .collect();
    check(&reports, 500, 30_000);
    // Bit flips (LogStore seeds of 3-copy pools) happened and were repaired.
    let flips: u64 = reports.iter().map(|r| r.bit_flips).sum();
    let repairs: u64 = reports.iter().map(|r| r.repairs).sum();
    assert!(flips > 50, "only {flips} bits flipped");
    assert!(
        repairs > 40,
        "only {repairs} copies repaired of {flips} flips"
    );
}

/// Seeds that once failed with every fault class: a primary whose pull was cut short by
/// a new peering round kept lacking an object, became authoritative, and activated
/// without recovering it.
#[test]
fn regression_an_authoritative_primary_recovers_what_it_lacks_first() {
    let reports: Vec<SimReport> = [826, 1240]
        .into_iter()
        .map(|seed| run_with_faults(seed, FaultClasses::ALL))
        .collect();
    check(&reports, 20, 300);
}
