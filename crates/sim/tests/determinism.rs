//! The same seed and build replay the same run; different seeds make different runs.

use carmine_sim::{run, run_with_faults, FaultClasses};

#[test]
fn same_seed_same_trace_hash() {
    let first = run(1);
    let second = run(1);
    assert_eq!(first.trace_hash, second.trace_hash);
    assert_eq!(first.events, second.events);
    assert_eq!(first.violations, second.violations);
    assert!(first.events > 1_000, "the run did something: {first:?}");
}

#[test]
fn same_seed_same_trace_hash_with_every_fault_class() {
    let first = run_with_faults(4, FaultClasses::ALL);
    let second = run_with_faults(4, FaultClasses::ALL);
    assert_eq!(first.trace_hash, second.trace_hash);
    assert_eq!(first.fault_log, second.fault_log);
}

#[test]
fn same_seed_same_trace_hash_with_five_monitors() {
    let config = carmine_sim::SimConfig::from_seed(2)
        .with_mons(5)
        .with_faults(FaultClasses::ALL);
    let first = carmine_sim::run_config(config.clone());
    let second = carmine_sim::run_config(config);
    assert_eq!(first.trace_hash, second.trace_hash);
    assert_eq!(first.fault_log, second.fault_log);
}

#[test]
fn different_seeds_different_trace_hashes() {
    let hashes: std::collections::BTreeSet<u64> = (0..8).map(|seed| run(seed).trace_hash).collect();
    assert_eq!(hashes.len(), 8);
}
