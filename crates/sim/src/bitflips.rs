//! The bit-flip fault class: data at rest decays on one OSD's LogStore device, and the
//! OSDs must find the corrupt copy (a client read, a push, or a scrub) and repair it
//! from a good one.
//!
//! Flips run on their own schedule and random stream (a fork of the seed), so seeds
//! without them — every MemStore seed, and LogStore seeds without the class — run
//! exactly as before. A flip picks a PG that is active+clean with its whole acting set
//! up on the newest map and no earlier flip still unhealed, then one object copy in
//! it: so at most one copy of any object is corrupt at a time and a good copy exists.
//! (A member still on an older map may be a stale primary: its writes, which nobody
//! acknowledges, overwrite its own copy, and a flip on the other copy of a two-copy
//! history then leaves no good one; seed 9517 of remaps, disk errors and expansion
//! with snapshots.) Pools of two copies
//! get flips only when OSDs never leave acting sets (no crashes, OSD partitions or
//! monitor resets): otherwise the good copy's OSD could go down while writes land on
//! the corrupt one, which no replication scheme survives.
//!
//! Every up OSD runs a deep-scrub step every [`SCRUB_INTERVAL`]. Healing is part of
//! convergence: the run has not converged while an acting copy that was flipped still
//! fails its checksum.

use crate::events::Event;
use crate::osd_node::Process;
use crate::rng::Rng;
use crate::sim::{Phase, Sim};
use crate::time::{format_nanos, Nanos, MILLISECOND};
use carmine_clustermap::pg_shard;
use carmine_proto::PgState;
use carmine_store::CollectionId;
use carmine_types::{ObjectId, OsdId, PgId, ShardIndex, SnapId};

/// Mean time between flips.
pub const FLIP_INTERVAL_MEAN: Nanos = 1_500 * MILLISECOND;
/// How often every up OSD runs a scrub step.
pub const SCRUB_INTERVAL: Nanos = 300 * MILLISECOND;
/// Objects one scrub step of one shard verifies.
pub const SCRUB_OBJECTS_PER_STEP: usize = 64;

/// An object in a flip's words: its name, and for a snapshot clone its id (a head's
/// words are what they were before clones could be flipped, so traces stay as they were).
fn object_words(oid: &ObjectId) -> String {
    if oid.snap == carmine_types::SnapId::HEAD {
        oid.name.clone()
    } else {
        format!("{} clone {}", oid.name, oid.snap.0)
    }
}

/// One injected flip.
#[derive(Debug, Clone)]
pub struct Flip {
    pub osd: OsdId,
    pub shard: ShardIndex,
    pub pgid: PgId,
    /// The head or snapshot clone flipped.
    pub oid: ObjectId,
    pub at: Nanos,
}

/// Flips so far, and the repairs counted by OSD processes that have since crashed.
#[derive(Debug)]
pub struct FlipState {
    rng: Rng,
    pub flips: Vec<Flip>,
    pub repairs_before_crashes: u64,
}

impl FlipState {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Rng::new(seed).fork(0x464c_4950), // "FLIP"
            flips: Vec::new(),
            repairs_before_crashes: 0,
        }
    }
}

impl Sim {
    pub(crate) fn flips_enabled(&self) -> bool {
        self.config.faults.bit_flips && self.config.disk == crate::disk::DiskKind::Log
    }

    /// At the start of the workload: schedule the first flip and scrub.
    pub(crate) fn start_bit_flips(&mut self) {
        if !self.flips_enabled() {
            return;
        }
        let first = self.flips.rng.exponential(FLIP_INTERVAL_MEAN);
        self.schedule(first, Event::BitFlip);
        if self.config.canary != crate::Canary::NoScrub {
            self.schedule(SCRUB_INTERVAL, Event::Scrub);
        }
    }

    pub(crate) fn inject_bit_flip(&mut self) {
        if self.phase != Phase::Faults {
            return;
        }
        let next = self.flips.rng.exponential(FLIP_INTERVAL_MEAN);
        self.schedule(next, Event::BitFlip);
        let Some((osd, shard, pgid)) = self.flip_target() else {
            return;
        };
        if self.disk_errors.armed.contains(&(osd, shard)) {
            // The flip checkpoints the store first: a disk error would strike there,
            // outside any turn of the OSD's (it strikes on the OSD's own writes).
            return;
        }
        let coll = CollectionId::Pg(pgid);
        let store = self.osds[&osd].store(shard);
        let Ok(objects) = carmine_store::ObjectStore::list_objects(store, coll, None, 4096) else {
            return;
        };
        let objects: Vec<ObjectId> = objects
            .into_iter()
            .filter(|oid| !oid.name.is_empty())
            .collect();
        if objects.is_empty() {
            return;
        }
        let oid = objects[self.flips.rng.index(objects.len())].clone();
        let byte = self.flips.rng.next_u64();
        let bit = self.flips.rng.below(8) as u8;
        let store = match &mut self.osds.get_mut(&osd).expect("exists").process {
            Process::Up(shards) => shards[usize::from(shard.0)].store_mut(),
            Process::Down(_) => return,
        };
        match store.flip_bit_at_rest(coll, &oid, byte, bit) {
            Ok(Some(offset)) => {
                self.flips.flips.push(Flip {
                    osd,
                    shard,
                    pgid,
                    oid: oid.clone(),
                    at: self.now(),
                });
                self.record_side_fault(format!(
                    "bit flip on {osd} shard {}: {pgid} {} at device offset {offset}",
                    shard.0,
                    object_words(&oid)
                ));
            }
            Ok(None) => {}
            Err(error) => self.violations.push(format!("bit flip on {osd}: {error}")),
        }
    }

    /// A random up OSD's shard and one of its PGs that may take a flip now.
    fn flip_target(&mut self) -> Option<(OsdId, ShardIndex, PgId)> {
        let map = self.newest_map.clone();
        // The size now: the remap class takes a size-3 pool down to two copies.
        let size_now = map.pools.get(&self.pool).map_or(0, |pool| pool.size);
        let pool_size = usize::from(self.config.pool_size.min(size_now));
        if pool_size < 3 && self.config.faults.moves_osds() {
            return None;
        }
        let up: Vec<OsdId> = (self.osds.iter())
            .filter(|(_, node)| node.is_up())
            .map(|(&osd, _)| osd)
            .collect();
        if up.len() < pool_size {
            return None;
        }
        let osd = up[self.flips.rng.index(up.len())];
        let shards = self.config.shards_per_osd;
        let candidates: Vec<PgId> = map
            .all_pgs()
            .filter(|&pgid| {
                let Some(mapping) = map.pg_mapping(pgid) else {
                    return false;
                };
                let Some(primary) = mapping.primary else {
                    return false;
                };
                let shard = pg_shard(pgid, shards);
                mapping.acting.contains(&osd)
                    && mapping.acting.len() == pool_size
                    && mapping
                        .acting
                        .iter()
                        .all(|o| self.osds[o].has_epoch(map.epoch))
                    && self.osds[&primary]
                        .pg_state(shard, pgid)
                        .is_some_and(|s| s.contains(PgState::ACTIVE) && s.contains(PgState::CLEAN))
                    && !self
                        .flips
                        .flips
                        .iter()
                        .any(|f| f.pgid == pgid && !self.flip_healed(f))
            })
            .collect();
        if candidates.is_empty() {
            return None;
        }
        let pgid = candidates[self.flips.rng.index(candidates.len())];
        Some((osd, pg_shard(pgid, shards), pgid))
    }

    /// Whether a flipped copy reads clean again (repaired, or its data rewritten). A
    /// copy on a down OSD counts as not healed. The head and clones of one object
    /// share data pieces on LogStore until one is rewritten, so a flip is healed only
    /// when every one of them reads clean (seed 20896 with `--snap-trim`: a flipped
    /// head was overwritten, and its clone kept the flipped piece).
    fn flip_healed(&self, flip: &Flip) -> bool {
        let node = &self.osds[&flip.osd];
        if !node.is_up() {
            return false;
        }
        let store = node.store(flip.shard);
        let coll = CollectionId::Pg(flip.pgid);
        if store.is_corrupt(coll, &flip.oid) {
            return false;
        }
        // Clones sort before their head, from snap id 0 (never allocated) on.
        let first = ObjectId {
            name: flip.oid.name.clone(),
            snap: SnapId(0),
        };
        let Ok(after) = carmine_store::ObjectStore::list_objects(store, coll, Some(&first), 4096)
        else {
            return true;
        };
        !(after.iter())
            .take_while(|oid| oid.name == flip.oid.name)
            .any(|oid| store.is_corrupt(coll, oid))
    }

    /// Every up OSD runs a scrub step; repeats until the run ends.
    pub(crate) fn scrub_tick(&mut self) {
        if self.phase == Phase::Done {
            return;
        }
        self.schedule(SCRUB_INTERVAL, Event::Scrub);
        let osds: Vec<OsdId> = self.osds.keys().copied().collect();
        let no_leases = self.no_leases();
        for osd in osds {
            let now = self.osd_instant(osd);
            let node = self.osds.get_mut(&osd).expect("exists");
            let Process::Up(shards) = &mut node.process else {
                continue;
            };
            let mut outputs = Vec::new();
            for (index, shard) in shards.iter_mut().enumerate() {
                let mut out = Vec::new();
                if !no_leases {
                    shard.set_clock(now);
                }
                shard.scrub_step(
                    SCRUB_OBJECTS_PER_STEP,
                    carmine_osd::SCRUB_BYTES_PER_STEP,
                    &mut out,
                );
                outputs.push((ShardIndex(index as u16), out));
            }
            for (shard, out) in outputs {
                self.osd_outputs(osd, shard, out);
            }
        }
    }

    /// Why healing is not done: an acting copy that was flipped still fails its
    /// checksum (a copy whose OSD left the acting set is a stray; nobody repairs it).
    pub(crate) fn unhealed_flip(&self) -> Option<String> {
        let map = self.newest_map.clone();
        self.flips
            .flips
            .iter()
            .filter(|f| {
                map.pg_mapping(f.pgid)
                    .is_some_and(|m| m.acting.contains(&f.osd))
            })
            .find(|f| !self.flip_healed(f))
            .map(|f| {
                format!(
                    "{}'s copy of {} in {} (bit flipped at {}) still fails its checksum",
                    f.osd,
                    object_words(&f.oid),
                    f.pgid,
                    format_nanos(f.at)
                )
            })
    }

    /// Copies the OSDs repaired, over the whole run.
    pub(crate) fn repairs_total(&self) -> u64 {
        let live = self.live_counters(|c| c.copies_repaired_total);
        live + self.flips.repairs_before_crashes
    }

    /// One shard counter summed over the OSD processes up now.
    pub(crate) fn live_counters(
        &self,
        counter: impl Fn(&carmine_osd::ShardCounters) -> u64,
    ) -> u64 {
        (self.osds.values())
            .filter_map(|node| match &node.process {
                Process::Up(shards) => Some(shards),
                Process::Down(_) => None,
            })
            .flatten()
            .map(|shard| counter(&shard.counters()))
            .sum()
    }

    /// Before `osd`'s process dies: keep its repair count.
    pub(crate) fn save_repair_counts(&mut self, osd: OsdId) {
        if let Process::Up(shards) = &self.osds[&osd].process {
            let repairs: u64 = shards
                .iter()
                .map(|shard| shard.counters().copies_repaired_total)
                .sum();
            self.flips.repairs_before_crashes += repairs;
        }
    }
}
