//! The expansion fault class: an operator adds OSDs to a running cluster, as one grows
//! Ceph by starting new OSD daemons (`ceph-volume lvm create`, or `carmine osd --id N`
//! here). One or two OSDs, with ids after the seed's, exist in no map at the start;
//! each starts with an empty store at a random time of the fault phase, boots, and the
//! monitor places it in the CRUSH map under a host of its own (`OsdMap::boot_osd`), so
//! the PGs CRUSH now maps to it are backfilled there, under a pg_temp while it catches
//! up, and their old members become strays. The new OSDs stay: the run must converge
//! with them, nothing acknowledged may be lost, and once deployed they meet every other
//! fault like the rest (crashes, partitions, bit flips, remaps).
//!
//! Deployments run on their own random stream (a fork of the seed), so seeds without
//! the class run exactly as before. Not part of `--faults all`: `--faults all,expansion`
//! adds it.

use crate::events::Event;
use crate::osd_node::OsdNode;
use crate::rng::Rng;
use crate::sim::Sim;
use crate::time::{MILLISECOND, SECOND};
use carmine_types::OsdId;
use std::collections::BTreeSet;

/// At most this many OSDs join a run.
pub const LATE_OSDS_MAX: u32 = 2;

#[derive(Debug)]
pub struct ExpansionState {
    rng: Rng,
    /// OSDs planned and not started yet.
    pending: BTreeSet<OsdId>,
    /// OSDs started so far.
    pub deployed: u64,
    /// Their ids.
    added: BTreeSet<OsdId>,
}

impl ExpansionState {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Rng::new(seed).fork(0x4558_5041), // "EXPA"
            pending: BTreeSet::new(),
            deployed: 0,
            added: BTreeSet::new(),
        }
    }
}

impl Sim {
    /// At the start of the workload: plans the new OSDs and when each starts.
    pub(crate) fn start_expansion(&mut self) {
        if !self.config.faults.expansion {
            return;
        }
        let count = 1 + self.expansion.rng.below(u64::from(LATE_OSDS_MAX)) as u32;
        let latest = (self.config.fault_phase * 3 / 4).max(SECOND);
        for index in 0..count {
            let osd = OsdId(self.config.osd_count + index);
            self.expansion.pending.insert(osd);
            let at = self.expansion.rng.between(SECOND / 2, latest);
            self.schedule(at, Event::Deploy(osd));
        }
    }

    /// The operator starts new OSD `osd` on an empty device; it boots as any OSD
    /// does, and the monitor adds it to the map.
    pub(crate) fn deploy(&mut self, osd: OsdId) {
        if !self.expansion.pending.remove(&osd) {
            return;
        }
        let config = &self.config;
        let node = OsdNode::new(
            osd,
            config.shards_per_osd,
            config.disk,
            config.seed,
            config.canary == crate::Canary::AckBeforeSync,
            config.tuning,
        );
        self.osds.insert(osd, node);
        self.expansion.deployed += 1;
        self.expansion.added.insert(osd);
        self.record_side_fault(format!("operator: deploys {osd}, a new OSD"));
        let jitter = self.expansion.rng.below(50 * MILLISECOND);
        self.schedule(jitter, Event::OsdConnectMon(osd));
        let jitter = self.expansion.rng.below(SECOND);
        self.schedule(jitter, Event::OsdStats(osd));
        self.schedule(MILLISECOND, Event::OsdTick(osd));
    }

    /// The faults end: OSDs still planned start now, so the run converges with them.
    pub(crate) fn deploy_all_pending(&mut self) {
        let pending: Vec<OsdId> = self.expansion.pending.iter().copied().collect();
        for osd in pending {
            self.deploy(osd);
        }
    }

    /// PG copies the added OSDs are acting members for in the newest map.
    pub(crate) fn pgs_on_added_osds(&self) -> u64 {
        let map = &self.newest_map;
        (map.all_pgs())
            .filter_map(|pgid| map.pg_mapping(pgid))
            .map(|mapping| {
                (mapping.acting.iter())
                    .filter(|osd| self.expansion.added.contains(osd))
                    .count() as u64
            })
            .sum()
    }
}
