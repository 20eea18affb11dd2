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

/// The daemons' log lines woven into a full trace (`CARMINE_LOG=debug carmine sim
/// --seed N --trace`) land among the events and leave the run itself unchanged.
#[test]
fn daemon_log_lines_join_the_trace_without_changing_the_run() {
    let mut config = carmine_sim::SimConfig::from_seed(3).with_faults(FaultClasses::ALL);
    config.full_trace = true;
    let plain = carmine_sim::run_config(config.clone());
    config.daemon_log = Some("debug".into());
    let logged = carmine_sim::run_config(config);
    assert_eq!(plain.trace_hash, logged.trace_hash);
    assert_eq!(plain.events, logged.events);
    let log_lines = |report: &carmine_sim::SimReport| {
        (report.trace_tail.iter())
            .filter(|line| line.contains(" log: "))
            .count()
    };
    assert_eq!(log_lines(&plain), 0);
    assert!(log_lines(&logged) > 10, "{} log lines", log_lines(&logged));
    assert!(logged
        .trace_tail
        .iter()
        .any(|line| line.contains("active in interval")));
}
