//! The canary: a primary that acknowledges a write one replica never committed (the
//! simulator drops that replica's copy and forges its acknowledgement). The checkers
//! must catch it on every seed.

use carmine_sim::{run_config, Canary, SimConfig};

#[test]
fn the_checkers_catch_an_acknowledgement_before_a_replica_commits() {
    for seed in 0..5 {
        let config = SimConfig::from_seed(seed).with_canary(Canary::ForgedReplicaAck);
        let report = run_config(config);
        assert!(!report.ok, "seed {seed}: the canary went unnoticed");
        assert!(
            report
                .violations
                .iter()
                .any(|v| v.contains("replicas differ")),
            "seed {seed}: {:?}",
            report.violations
        );
    }
}
