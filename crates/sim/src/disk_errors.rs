//! The disk-error fault class: one OSD shard's LogStore device starts failing its
//! writes, the store puts itself out of service (`ObjectStore::failure`), and the OSD
//! must stop, as the daemon does (`carmine_rt`'s shard loop exits the process, as Ceph's
//! OSD aborts on an I/O error), so that its PGs re-peer without it instead of waiting on
//! a copy that can no longer commit. The OSD restarts later on the same device: what
//! was synced survives, what was not is lost (possibly torn), and nothing acknowledged
//! may be missing.
//!
//! Errors run on their own schedule and random stream (a fork of the seed), so seeds
//! without the class (every MemStore seed, and LogStore seeds without it) run exactly
//! as before. An error is armed to strike after 0 to 3 more device writes; one armed
//! but not yet struck when the faults end is disarmed.
//!
//! The class is not part of `--faults all` (`--faults all,disk-errors` adds it): its
//! stops fall exactly on flushes, so it loses unsynced work far more often than the
//! crash class, and the pinned regression seeds run with `all` would no longer reach
//! their original interleavings or their activity floors. Its first swarm found that
//! a primary's activation could leave before the primary's own log was durable
//! (seeds 173 and 1356; docs/architecture.md, "Disk errors").

use crate::events::Event;
use crate::osd_node::Process;
use crate::rng::Rng;
use crate::sim::{Phase, Sim};
use crate::time::{Nanos, MILLISECOND, SECOND};
use carmine_store::ObjectStore;
use carmine_types::{OsdId, ShardIndex};
use std::collections::BTreeSet;

/// Mean time between disk errors.
pub const DISK_ERROR_INTERVAL_MEAN: Nanos = 3 * SECOND;

/// Disk errors armed and struck so far.
#[derive(Debug)]
pub struct DiskErrorState {
    rng: Rng,
    /// Devices armed to fail whose OSD has not stopped yet.
    pub(crate) armed: BTreeSet<(OsdId, ShardIndex)>,
    /// Errors armed.
    pub injected: u64,
    /// OSD processes that stopped because a store failed.
    pub stops: u64,
}

impl DiskErrorState {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Rng::new(seed).fork(0x4445_5252), // "DERR"
            armed: BTreeSet::new(),
            injected: 0,
            stops: 0,
        }
    }
}

impl Sim {
    fn disk_errors_enabled(&self) -> bool {
        self.config.faults.disk_errors && self.config.disk == crate::disk::DiskKind::Log
    }

    /// At the start of the workload: schedule the first disk error.
    pub(crate) fn start_disk_errors(&mut self) {
        if self.disk_errors_enabled() {
            let first = self.disk_errors.rng.exponential(DISK_ERROR_INTERVAL_MEAN);
            self.schedule(first, Event::DiskError);
        }
    }

    pub(crate) fn inject_disk_error(&mut self) {
        if self.phase != Phase::Faults {
            return;
        }
        let next = self.disk_errors.rng.exponential(DISK_ERROR_INTERVAL_MEAN);
        self.schedule(next, Event::DiskError);
        let Some((osd, shard)) =
            crate::osd_node::pick_up_shard(&self.osds, &mut self.disk_errors.rng)
        else {
            return;
        };
        let node = self.osds.get_mut(&osd).expect("exists");
        let writes = self.disk_errors.rng.below(4);
        if self.disk_errors.armed.contains(&(osd, shard)) {
            return;
        }
        let Process::Up(shards) = &mut node.process else {
            return;
        };
        if !shards[usize::from(shard.0)]
            .store_mut()
            .fail_writes_after(writes)
        {
            return;
        }
        self.disk_errors.armed.insert((osd, shard));
        self.disk_errors.injected += 1;
        self.record_side_fault(format!(
            "disk error on {osd} shard {}: writes fail after {writes} more",
            shard.0
        ));
    }

    /// The first shard of `osd`'s running process whose store has failed, and why.
    fn failed_store(&self, osd: OsdId) -> Option<(usize, String)> {
        let Process::Up(shards) = &self.osds[&osd].process else {
            return None;
        };
        (shards.iter().enumerate())
            .find_map(|(index, shard)| shard.store().failure().map(|e| (index, e.to_string())))
    }

    /// Whether a store of `osd` has failed: its outputs are dropped (the daemon exits
    /// before it sends a turn's replies) and it stops at once ([`Event::StoreFailed`]).
    pub(crate) fn store_failed(&mut self, osd: OsdId) -> bool {
        if self.failed_store(osd).is_none() {
            return false;
        }
        let start = self.osds[&osd].starts;
        self.schedule(0, Event::StoreFailed { osd, start });
        true
    }

    /// The OSD whose store failed stops, and restarts later on the same devices.
    pub(crate) fn stop_on_store_failure(&mut self, osd: OsdId, start: u64) {
        let node = &self.osds[&osd];
        if !node.is_up() || node.starts != start {
            return;
        }
        let Some((index, error)) = self.failed_store(osd) else {
            return;
        };
        self.disk_errors.stops += 1;
        self.crash_osd(osd);
        let downtime = self.disk_errors.rng.between(SECOND / 2, 8 * SECOND);
        self.schedule(downtime, Event::OsdRestart(osd));
        self.record_side_fault(format!(
            "{osd} stops: shard {index}'s store failed ({error}); restart in {}ms",
            downtime / MILLISECOND
        ));
    }

    /// The faults end: errors armed but not struck are disarmed.
    pub(crate) fn disarm_disk_errors(&mut self) {
        for (osd, shard) in std::mem::take(&mut self.disk_errors.armed) {
            if let Process::Up(shards) = &mut self.osds.get_mut(&osd).expect("exists").process {
                shards[usize::from(shard.0)].store_mut().disarm_disk_error();
            }
        }
    }
}
