//! The fixed seed set: 200 seeds with the fault classes the code handles today
//! (latency and reordering, client session resets, slow links, client partitions).
//! Each must pass every checker. A failing seed prints its report; reproduce it with
//! `carmine sim --seed N` (or the `sim_seed` example).
//!
//! Seeds excluded here fail for a known reason and live in `tests/known_gaps.rs`.

use carmine_sim::{format_report, run, SimReport};

/// Seeds that stall peering: a `PgLogRequest` to a peer outside the acting set goes to
/// shard 0 instead of the shard that owns the PG (see `known_gaps.rs`).
pub const MISROUTED_PEERING_SEEDS: [u64; 7] = [13, 68, 179, 215, 235, 258, 277];

#[test]
fn fixed_seeds_pass_with_the_handled_faults() {
    let reports: Vec<SimReport> = (0..200)
        .filter(|seed| !MISROUTED_PEERING_SEEDS.contains(seed))
        .map(run)
        .collect();
    let failed: Vec<String> = reports
        .iter()
        .filter(|r| !r.ok)
        .map(format_report)
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    let faults: u64 = reports.iter().map(|r| r.faults).sum();
    let acked: u64 = reports.iter().map(|r| r.ops_acked).sum();
    assert!(faults > 500, "only {faults} faults injected");
    assert!(acked > 50_000, "only {acked} ops acknowledged");
}
