//! Comparing the members' copies after a deep-scrub step (Ceph's scrub maps).
//!
//! A deep-scrub step verifies each copy's data against its own checksums, which finds
//! rot but not a copy that is wrong and intact: an object a replica lost, or kept
//! after it was removed, or holds at another version or with other bytes (a store
//! bug, an operator's mistake, a write lost with a restart inside an interval). So
//! after each step over a range of names, a clean primary asks its replicas for their
//! scrub maps of that range (`PgScrubRequest`): per stored object, its size, the
//! version in its object info, and a crc32c of its data. The request travels on the
//! same ordered session as the primary's `RepOp`s and a replica answers the moment it
//! arrives, so both maps describe the copies after the same writes; no write waits.
//!
//! Where a replica's copy differs from ours, ours wins (the primary's copy is the
//! PG's, as peering made it): the object joins that replica's `peer_missing` and is
//! pushed, counted as a copy found bad and then repaired. Where a replica holds an
//! object we lack, the log decides: if its newest change to the object removed it,
//! the replica's copy is a leftover and the push removes it; otherwise our copy is
//! the one lost, and we pull the replica's (Ceph's scrub too takes a copy that exists
//! over one that does not, unless the log says it was removed). Objects changed since
//! the maps were taken, or under repair or recovery, wait for the next pass.

use super::{peer_output, Pg};
use crate::exec::OBJECT_INFO_XATTR;
use crate::Output;
use carmine_proto::{
    LogOp, Msg, ObjectInfo, PgScrubMap, PgScrubRequest, ScrubEntry, SCRUB_MAP_ENTRIES_MAX,
};
use carmine_store::ObjectStore;
use carmine_types::encoding::Decode;
use carmine_types::{EVersion, ObjectId, OsdId};
use std::collections::{BTreeMap, BTreeSet};

/// Objects listed per store call while building a scrub map.
const LIST_PAGE: usize = 256;
/// The data a replica reads for one scrub map, at most (beyond its first object): the
/// primary's range holds at most a deep-scrub step's bytes of its own objects, but a
/// replica may hold objects the primary does not. A map cut short covers its range up
/// to its last entry.
const SCRUB_MAP_BYTES_MAX: u64 = 8 << 20;

/// Primary: a comparison waiting for the replicas' maps.
#[derive(Debug)]
pub(crate) struct ScrubCompare {
    round: u64,
    /// Our `last_update` when the maps were taken: objects changed since are skipped.
    at: EVersion,
    own: BTreeMap<ObjectId, ScrubEntry>,
    waiting: BTreeSet<OsdId>,
}

/// Counts of what comparisons found, summed into the shard's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompareCounters {
    /// Objects compared, one per copy per replica.
    pub objects_compared: u64,
    /// Replica copies that differed from ours (pushed ours).
    pub replica_copies_differing: u64,
    /// Our copies found lost (pulled a replica's).
    pub own_copies_lost: u64,
}

impl Pg {
    /// Our copies in `(after, last]`, at most `limit` entries and (beyond the first)
    /// `bytes_max` bytes of data; whether that was all.
    fn scrub_map(
        &self,
        store: &dyn ObjectStore,
        after: Option<&str>,
        last: Option<&str>,
        (limit, bytes_max): (usize, u64),
    ) -> (Vec<ScrubEntry>, bool) {
        let mut entries = Vec::new();
        let mut bytes = 0u64;
        let mut cursor = after.map(ObjectId::head);
        loop {
            let page = match store.list_objects(self.coll, cursor.as_ref(), LIST_PAGE) {
                Ok(page) => page,
                Err(error) => {
                    tracing::error!("{}: scrub map cannot list objects: {error}", self.pgid);
                    return (entries, false);
                }
            };
            let page_full = page.len() == LIST_PAGE;
            for oid in page {
                if last.is_some_and(|last| oid.name.as_str() > last) {
                    return (entries, true);
                }
                cursor = Some(oid.clone());
                if oid.name.is_empty() {
                    continue; // the PG's metadata object
                }
                if entries.len() == limit || (bytes >= bytes_max && !entries.is_empty()) {
                    return (entries, false);
                }
                let entry = self.scrub_entry(store, oid);
                bytes += entry.size_bytes;
                entries.push(entry);
            }
            if !page_full {
                return (entries, true);
            }
        }
    }

    fn scrub_entry(&self, store: &dyn ObjectStore, oid: ObjectId) -> ScrubEntry {
        let size_bytes = store
            .stat(self.coll, &oid)
            .map_or(0, |stat| stat.size_bytes);
        let version = store
            .getxattr(self.coll, &oid, OBJECT_INFO_XATTR)
            .ok()
            .and_then(|raw| ObjectInfo::from_shared(raw).ok())
            .map_or(EVersion::ZERO, |info| info.version);
        let data_crc = store
            .read(self.coll, &oid, 0, size_bytes)
            .ok()
            .map(|data| crc32c::crc32c(&data));
        ScrubEntry {
            oid,
            size_bytes,
            version,
            data_crc,
        }
    }

    /// Primary: whether the copies can be compared now. Only a clean PG: nothing to
    /// recover or repair, and no write held by a replica short of space (those copies
    /// differ on purpose until it has room). (Not `backfilling`: a backfill target
    /// with nothing to push stays named there after its backfill is done, which kept
    /// a PG from ever comparing: `--faults all,disk-errors` seed 2892.)
    fn ready_to_compare(&self) -> bool {
        self.is_active()
            && self.acting.len() > 1
            && self.missing.is_empty()
            && self.fully_recovered()
            && self.in_flight.iter().all(|w| w.refused_by.is_empty())
    }

    /// Primary, after a deep-scrub step over `(after, last]`: takes our map of the
    /// range and asks every replica for theirs.
    pub(super) fn start_scrub_compare(
        &mut self,
        store: &dyn ObjectStore,
        after: Option<&str>,
        last: Option<&str>,
        out: &mut Vec<Output>,
    ) {
        if !self.ready_to_compare() {
            return;
        }
        let (own, _) = self.scrub_map(store, after, last, (usize::MAX, u64::MAX));
        self.scrub_round += 1;
        let replicas = self.replicas();
        for &replica in &replicas {
            let request = Msg::PgScrubRequest(PgScrubRequest {
                pgid: self.pgid,
                interval: self.interval_start,
                map_epoch: self.map_epoch,
                round: self.scrub_round,
                after: after.map(str::to_string),
                last: last.map(str::to_string),
            });
            out.push(peer_output(replica, request));
        }
        self.scrub_compare = Some(ScrubCompare {
            round: self.scrub_round,
            at: self.info.last_update,
            own: own.into_iter().map(|e| (e.oid.clone(), e)).collect(),
            waiting: replicas.into_iter().collect(),
        });
    }

    /// Replica: the primary asks for our map of a range. A copy that knows it lacks
    /// objects (recovery under way) has nothing to compare yet and stays silent.
    pub fn handle_scrub_request(
        &mut self,
        store: &dyn ObjectStore,
        from: OsdId,
        request: PgScrubRequest,
        out: &mut Vec<Output>,
    ) {
        if request.interval != self.interval_start
            || self.primary != Some(from)
            || self.is_primary()
            || !self.missing.is_empty()
        {
            return;
        }
        let (objects, complete) = self.scrub_map(
            store,
            request.after.as_deref(),
            request.last.as_deref(),
            (SCRUB_MAP_ENTRIES_MAX, SCRUB_MAP_BYTES_MAX),
        );
        let map = Msg::PgScrubMap(PgScrubMap {
            pgid: self.pgid,
            interval: self.interval_start,
            map_epoch: self.map_epoch,
            round: request.round,
            complete,
            objects,
        });
        out.push(peer_output(from, map));
    }

    /// Primary: a replica's map. Repairs what differs (see the module's docs).
    pub fn handle_scrub_map(
        &mut self,
        store: &mut dyn ObjectStore,
        from: OsdId,
        map: PgScrubMap,
        out: &mut Vec<Output>,
    ) {
        let Some(compare) = &mut self.scrub_compare else {
            return;
        };
        if map.interval != self.interval_start
            || map.round != compare.round
            || !compare.waiting.remove(&from)
        {
            return;
        }
        let at = compare.at;
        let theirs: BTreeMap<ObjectId, ScrubEntry> = map
            .objects
            .into_iter()
            .map(|e| (e.oid.clone(), e))
            .collect();
        // A map cut short covers the range only up to its last entry.
        let covered_to = if map.complete {
            None
        } else {
            theirs.keys().next_back().cloned()
        };
        let covered = |oid: &ObjectId| covered_to.as_ref().is_none_or(|to| oid <= to);
        let mut ours_to_push = BTreeSet::new();
        let mut theirs_only = BTreeSet::new();
        for (oid, mine) in compare.own.iter().filter(|(oid, _)| covered(oid)) {
            let differs = theirs.get(oid).is_none_or(|other| !same_copy(mine, other));
            if differs {
                ours_to_push.insert(oid.name.clone());
            }
        }
        let names_here: BTreeSet<&str> = compare.own.keys().map(|o| o.name.as_str()).collect();
        for oid in theirs.keys().filter(|oid| !compare.own.contains_key(*oid)) {
            if names_here.contains(oid.name.as_str()) {
                ours_to_push.insert(oid.name.clone()); // a clone we do not have
            } else {
                theirs_only.insert(oid.name.clone());
            }
        }
        self.compare_counters.objects_compared += theirs.len().max(compare.own.len()) as u64;
        tracing::debug!(
            "{}: compared {} objects with {from}'s {}: {} to push there, {} only there",
            self.pgid,
            compare.own.len(),
            theirs.len(),
            ours_to_push.len(),
            theirs_only.len()
        );
        if self
            .scrub_compare
            .as_ref()
            .is_some_and(|c| c.waiting.is_empty())
        {
            self.scrub_compare = None;
        }
        if !self.ready_to_compare() {
            return;
        }
        let settled = |pg: &Pg, name: &str| {
            !pg.writes_per_object.contains_key(name)
                && !pg
                    .log
                    .entries()
                    .rev()
                    .take_while(|entry| entry.version > at)
                    .any(|entry| entry.oid == name)
        };
        let mut pushed = false;
        for name in ours_to_push {
            if settled(self, &name) {
                self.compare_counters.replica_copies_differing += 1;
                self.note_replica_inconsistent(from, name);
                pushed = true;
            }
        }
        for name in theirs_only {
            if !settled(self, &name) || store.exists(self.coll, &ObjectId::head(&*name)) {
                continue;
            }
            if self.log_removed(&name) {
                self.compare_counters.replica_copies_differing += 1;
                self.note_replica_inconsistent(from, name);
                pushed = true;
            } else {
                self.compare_counters.own_copies_lost += 1;
                self.repair_lost_copy(from, &name, out);
            }
        }
        if pushed {
            self.schedule_recovery(store, out);
        }
    }

    /// Whether the newest change our log records for `name` removed it.
    fn log_removed(&self, name: &str) -> bool {
        (self.newest_change(name)).is_some_and(|entry| matches!(entry.op, LogOp::Delete))
    }
}

/// Two copies hold the same object: same size and version, and the same data where
/// both could read it (an unreadable copy is deep scrub's to report and repair).
fn same_copy(a: &ScrubEntry, b: &ScrubEntry) -> bool {
    let data_same = match (a.data_crc, b.data_crc) {
        (Some(x), Some(y)) => x == y,
        _ => true,
    };
    a.size_bytes == b.size_bytes && a.version == b.version && data_same
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(version: u64, size: u64, crc: Option<u32>) -> ScrubEntry {
        ScrubEntry {
            oid: ObjectId::head("o"),
            size_bytes: size,
            version: EVersion::new(1, version),
            data_crc: crc,
        }
    }

    #[test]
    fn copies_differ_by_version_size_or_readable_data() {
        let a = entry(3, 10, Some(7));
        assert!(same_copy(&a, &entry(3, 10, Some(7))));
        assert!(!same_copy(&a, &entry(4, 10, Some(7))));
        assert!(!same_copy(&a, &entry(3, 11, Some(7))));
        assert!(!same_copy(&a, &entry(3, 10, Some(8))));
        assert!(same_copy(&a, &entry(3, 10, None)), "unreadable: scrub's");
    }
}
