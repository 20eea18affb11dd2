//! The space fault class: one OSD shard's MemStore is squeezed to what it holds plus a
//! little (0 to 12/64 of it), for half a second to four seconds, then given its room back:
//! a device that filled up and was then grown, or whose other tenants freed space.
//! Writes that add data find no room on that OSD: the monitor marks it full from its
//! usage reports and primaries refuse such writes with `NoSpace`; before that, a
//! replica refuses `RepOp`s (the primary holds the write until it fits) and pushes
//! (the primary backs off and pushes again). Nothing acknowledged may be lost, no
//! copy may go clean while stale, and the run must converge once the room is back.
//!
//! Squeezes run on their own schedule and random stream (a fork of the seed), so seeds
//! without the class run exactly as before. MemStore seeds only (a LogStore's capacity
//! is its device). The class is not part of `--faults all`: `--faults all,space` adds it.

use crate::events::Event;
use crate::osd_node::Process;
use crate::rng::Rng;
use crate::sim::{Phase, Sim};
use crate::time::{Nanos, MILLISECOND, SECOND};
use carmine_store::ObjectStore;
use carmine_types::{OsdId, ShardIndex};
use std::collections::BTreeSet;

/// Mean time between squeezes.
pub const SQUEEZE_INTERVAL_MEAN: Nanos = 2 * SECOND;
/// Room left above what the store holds, at most, in 1/64ths of what it holds: from
/// none (the next write that adds data fails on the store) to enough that the monitor
/// marks it nearfull or full first (the ratios are 0.85 and 0.95).
const SLACK_64THS_MAX: u64 = 12;

#[derive(Debug)]
pub struct SpaceState {
    rng: Rng,
    /// Shards squeezed now.
    squeezed: BTreeSet<(OsdId, ShardIndex)>,
    pub squeezes: u64,
}

impl SpaceState {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Rng::new(seed).fork(0x5350_4143), // "SPAC"
            squeezed: BTreeSet::new(),
            squeezes: 0,
        }
    }
}

impl Sim {
    fn space_enabled(&self) -> bool {
        self.config.faults.space && self.config.disk == crate::disk::DiskKind::Mem
    }

    /// At the start of the workload: schedule the first squeeze.
    pub(crate) fn start_space_faults(&mut self) {
        if self.space_enabled() {
            let first = self.space.rng.exponential(SQUEEZE_INTERVAL_MEAN);
            self.schedule(first, Event::SpaceSqueeze);
        }
    }

    pub(crate) fn squeeze_space(&mut self) {
        if self.phase != Phase::Faults {
            return;
        }
        let next = self.space.rng.exponential(SQUEEZE_INTERVAL_MEAN);
        self.schedule(next, Event::SpaceSqueeze);
        let Some((osd, shard)) = crate::osd_node::pick_up_shard(&self.osds, &mut self.space.rng)
        else {
            return;
        };
        let node = self.osds.get_mut(&osd).expect("exists");
        let slack_64ths = self.space.rng.below(SLACK_64THS_MAX + 1);
        let lasts = self.space.rng.between(SECOND / 2, 4 * SECOND);
        if self.space.squeezed.contains(&(osd, shard)) {
            return;
        }
        let Process::Up(shards) = &mut node.process else {
            return;
        };
        let store = shards[usize::from(shard.0)].store_mut();
        let usage = store.usage();
        let used = usage.data_bytes + usage.metadata_bytes;
        let slack = used / 64 * slack_64ths;
        let capacity = used + slack;
        if !store.set_capacity_bytes(capacity) {
            return;
        }
        self.space.squeezed.insert((osd, shard));
        self.space.squeezes += 1;
        self.schedule(lasts, Event::SpaceRelease { osd, shard });
        self.record_side_fault(format!(
            "space: {osd} shard {} squeezed to {capacity} bytes ({slack} free) for {}ms",
            shard.0,
            lasts / MILLISECOND
        ));
    }

    /// The squeezed shard gets its room back (whether its OSD is up or down).
    pub(crate) fn release_space(&mut self, osd: OsdId, shard: ShardIndex) {
        if !self.space.squeezed.remove(&(osd, shard)) {
            return;
        }
        let node = self.osds.get_mut(&osd).expect("exists");
        let index = usize::from(shard.0);
        match &mut node.process {
            Process::Up(shards) => shards[index].store_mut().set_capacity_bytes(u64::MAX),
            Process::Down(stores) => stores[index].set_capacity_bytes(u64::MAX),
        };
        self.record_side_fault(format!("space: {osd} shard {} has room again", shard.0));
    }

    /// The faults end: every squeezed shard gets its room back.
    pub(crate) fn release_all_space(&mut self) {
        let squeezed: Vec<_> = self.space.squeezed.iter().copied().collect();
        for (osd, shard) in squeezed {
            self.release_space(osd, shard);
        }
    }
}
