//! carmine-sim: the deterministic whole-cluster simulator (issue 3; STYLE.md habit 9).
//!
//! One thread runs the real monitors (1, 3 or 5, replicated with Raft), OSD shards and
//! client objecters — the pure cores of DESIGN.md §3 — under virtual time, over a
//! simulated network that delays, reorders across links, resets sessions, partitions
//! (both ways and one way) and slows links, with OSD and monitor processes that crash
//! and restart on their stores ([`mon_node`] for the monitors). Half the seeds
//! give their OSDs the real LogStore on a fault-injecting in-memory device ([`disk`]):
//! syncs take a seed-chosen latency, and a crash loses every unsynced write (keeping a
//! random prefix, the first dropped write torn) before the store recovers; the other
//! half use MemStore. A seed chooses the cluster's shape, the disks, the workload and
//! the fault rates; the same seed and build replay the same run, event for event, and
//! give the same trace hash.
//!
//! A run warms up, injects faults while clients run a random workload, heals
//! everything, lets the cluster converge, reads every object back, and checks: no
//! acknowledged write is lost, reads are linearizable per object, replicas are
//! byte-identical, every PG becomes active+clean within a bound, and no two monitors
//! publish different maps for one epoch (see [`checkers`]). Canary modes break a rule
//! on purpose; the checkers must catch them.
//!
//! Fault classes ([`FaultClasses`]): the default set — latency and cross-link
//! reordering, client session resets, slow links, client partitions, monitor crashes
//! and monitor partitions — is what the fixed CI seeds run with; OSD ↔ monitor session
//! resets, OSD crashes and OSD partitions are added by [`run_with_faults`] or
//! `carmine sim --faults all` (their known gaps are in `tests/known_gaps.rs`).
//!
//! Bit flips (class `bit-flips`, in [`FaultClasses::ALL`]): LogStore seeds get bits of
//! checkpointed data flipped in one copy at a time, OSDs scrub periodically, and the
//! run converges only once every flipped acting copy reads clean (see `bitflips.rs`).
//!
//! Disk errors (class `disk-errors`, not in [`FaultClasses::ALL`] yet:
//! `--faults all,disk-errors`): a LogStore shard's device fails its writes, the store
//! puts itself out of service and the OSD stops, restarting later (see `disk_errors.rs`).
//!
//! Space (class `space`, `--faults all,space`, MemStore seeds): one shard's store is
//! squeezed to little more than it holds for a while (see `space.rs`). Remaps (class
//! `remaps`, `--faults all,remaps`): an operator marks OSDs out, reweights them,
//! changes their primary affinity and takes a size-3 pool to two copies for a while,
//! so PGs move (see `remaps.rs`). Expansion (class `expansion`, `--faults
//! all,expansion`): one or two new OSDs, in no map at the start, are started with empty
//! stores during the faults and join the cluster, and data moves to them (see
//! `expansion.rs`). Replacements (class `replacements`, `--faults all,replacements`):
//! while the cluster has converged, one OSD's disks die and are replaced by empty ones;
//! the OSD starts again on them under the same id, as it is or after the operator
//! marked it lost or purged it (see `replacement.rs`). Decommission (class
//! `decommission`): an operator retires one OSD for good, out, `safe-to-destroy`,
//! stop, purge (see `decommission.rs`). None of these five is in
//! [`FaultClasses::ALL`].
//!
//! BUGGIFY: half the seeds (their own stream of the seed) shrink the OSD's internal
//! limits through [`carmine_osd::OsdTuning`]: tiny push windows and batches, tiny
//! in-flight-write, waiting-op and map-wait queues, and a PG log of 8–64 entries (the
//! checkers keep their own record of trimmed entries, `log_record`). LogStore seeds
//! also defer store commits behind a disk latency. Not yet: early objecter deadlines,
//! maps that skip epochs, shortened monitor grace periods.
//!
//! ```
//! let report = carmine_sim::run(7);
//! assert_eq!(report.seed, 7);
//! assert_eq!(report.trace_hash, carmine_sim::run(7).trace_hash);
//! ```

mod bitflips;
pub mod checkers;
mod cli;
mod client_node;
mod config;
mod daemon_log;
mod decommission;
pub mod disk;
mod disk_errors;
pub mod dump;
mod events;
mod expansion;
mod faults;
mod history;
mod log_record;
pub mod model;
pub mod mon_node;
pub mod network;
mod osd_node;
mod remaps;
mod replacement;
pub mod rng;
mod sim;
mod snap_removal;
mod space;
mod tamper;
pub mod time;
mod trace;
pub mod workload;

pub use cli::{format_report, main_cli};
pub use config::{Canary, FaultClasses, FaultWeights, SimConfig};
pub use sim::Sim;

use serde::Serialize;
use std::ops::Range;

/// The outcome of one run.
#[derive(Debug, Clone, Serialize)]
pub struct SimReport {
    pub seed: u64,
    /// No checker found a violation.
    pub ok: bool,
    /// A hash of every event processed, in order: equal for equal seeds and builds.
    pub trace_hash: u64,
    pub events: u64,
    /// Virtual time the run covered.
    pub virtual_ms: u64,
    /// Ops that completed successfully.
    pub ops_acked: u64,
    /// Ops that failed or timed out (an error reply such as "no such object" counts).
    pub ops_failed: u64,
    /// Faults injected (bit flips not included).
    pub faults: u64,
    /// Bits of data at rest flipped (the bit-flip fault class, LogStore seeds).
    pub bit_flips: u64,
    /// Disk errors armed (the disk-error fault class, LogStore seeds), and OSD
    /// processes that stopped because a store failed.
    pub disk_errors: u64,
    pub store_failure_stops: u64,
    /// MemStores squeezed (the space fault class).
    pub space_squeezes: u64,
    /// Operator changes of OSD settings (the remap fault class).
    pub remaps: u64,
    /// New OSDs started during the run (the expansion class).
    pub osds_added: u64,
    /// PG copies the new OSDs are acting members for at the end.
    pub pgs_on_added_osds: u64,
    /// Disks that died and were replaced by empty ones (the replacement class), and
    /// of those, OSDs the operator marked lost, or purged, before they started on the
    /// new disk.
    pub disks_replaced: u64,
    pub replaced_marked_lost: u64,
    pub replaced_purged: u64,
    /// OSDs retired for good (the decommission class: out, safe-to-destroy, stop,
    /// purge), and the monitor's refusals on the way (`safe-to-destroy` saying no, a
    /// purge refused).
    pub osds_retired: u64,
    pub retirement_refusals: u64,
    /// Object copies the OSDs found corrupt and replaced with a good copy.
    pub repairs: u64,
    /// Scrub comparisons of the members' copies, counted by the OSDs up at the end:
    /// objects compared, and copies found different (a replica's, or the primary's
    /// own found lost).
    pub scrub_compared: u64,
    pub scrub_differing: u64,
    /// Replica copies made wrong behind their PG's back at the read-back's start
    /// (bit-flip seeds), which the comparisons must repair.
    pub tampered: u64,
    /// Backfills started: a replica activated with `backfill`, or a primary pulling
    /// everything (what a PG log too short to cover a copy leads to).
    pub backfills: u64,
    /// `--snapshots`: snapshots the clients took, and reads at a snapshot answered
    /// without error.
    pub snapshots: u64,
    /// `--snap-trim`: snapshots the monitor recorded as removed.
    pub snapshots_removed: u64,
    /// `--snap-trim`: trim writes in the PG logs (one per object trimmed).
    pub snap_trims: u64,
    pub snapshot_reads: u64,
    pub shape: String,
    /// The store and the monitor count the run had (the seed's own unless the
    /// command overrode them).
    pub disk: disk::DiskKind,
    pub mon_count: u64,
    pub fault_classes: FaultClasses,
    pub violations: Vec<String>,
    /// The faults injected, with their virtual times.
    pub fault_log: Vec<String>,
    /// The last events, in words.
    pub trace_tail: Vec<String>,
}

/// Runs `seed` with the default fault classes (those the code handles today).
pub fn run(seed: u64) -> SimReport {
    run_config(SimConfig::from_seed(seed))
}

/// Runs `seed` with the given fault classes.
pub fn run_with_faults(seed: u64, faults: FaultClasses) -> SimReport {
    run_config(SimConfig::from_seed(seed).with_faults(faults))
}

/// Runs `seed` with the given fault classes and the snapshot workload (`--snapshots`).
pub fn run_with_snapshots(seed: u64, faults: FaultClasses) -> SimReport {
    run_config(
        SimConfig::from_seed(seed)
            .with_faults(faults)
            .with_snapshots(true),
    )
}

/// Runs `seed` with the given fault classes and the snapshot workload with snapshot
/// removal (`--snap-trim`).
pub fn run_with_snap_trim(seed: u64, faults: FaultClasses) -> SimReport {
    run_config(
        SimConfig::from_seed(seed)
            .with_faults(faults)
            .with_snap_trim(true),
    )
}

pub fn run_config(config: SimConfig) -> SimReport {
    Sim::new(config).run()
}

/// Runs every seed of `seeds` with the default fault classes.
pub fn swarm(seeds: Range<u64>) -> Vec<SimReport> {
    swarm_with_faults(seeds, FaultClasses::default())
}

pub fn swarm_with_faults(seeds: Range<u64>, faults: FaultClasses) -> Vec<SimReport> {
    seeds.map(|seed| run_with_faults(seed, faults)).collect()
}
