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
use bytes::Bytes;
use carmine_proto::{
    Msg, ObjectInfo, PgScrubMap, PgScrubRequest, ScrubEntry, SCRUB_MAP_ENTRIES_MAX,
};
use carmine_store::{CollectionId, ObjectStore};
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
/// Comparisons a primary waits on at once. A step starts a new one before the last
/// one's maps are in when steps come fast or the network is slow; each covers its own
/// range, so the newest does not replace the others (when it did, a range the steps
/// kept reaching first was never compared: `--snapshots` seed 657). A replica that
/// never answers (an older build drops the request) holds a slot only until newer
/// comparisons push it out.
const COMPARES_IN_FLIGHT_MAX: usize = 4;

/// Primary: a comparison waiting for the replicas' maps.
#[derive(Debug)]
pub(crate) struct ScrubCompare {
    round: u64,
    /// Our `last_update` when the maps were taken: objects changed since are skipped.
    at: EVersion,
    own: BTreeMap<ObjectId, ScrubEntry>,
    waiting: BTreeSet<OsdId>,
    maps: BTreeMap<OsdId, ReplicaMap>,
}

/// A replica's answer, kept until every replica has answered.
#[derive(Debug)]
struct ReplicaMap {
    entries: BTreeMap<ObjectId, ScrubEntry>,
    /// The map was cut short: it covers the range only up to here.
    covered_to: Option<ObjectId>,
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
        let meta_crc = meta_digest(store, self.coll, &oid);
        ScrubEntry {
            oid,
            size_bytes,
            version,
            data_crc,
            meta_crc,
        }
    }

    /// Primary: whether the copies can be compared now. Only a clean PG: nothing to
    /// recover or repair, and no write held by a replica short of space (those copies
    /// differ on purpose until it has room). (`fully_recovered`, not `backfilling`:
    /// `--faults all,disk-errors` seed 2892 once kept a PG from ever comparing through
    /// a stale `backfilling` entry.)
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
        if self.scrub_compares.len() == COMPARES_IN_FLIGHT_MAX {
            self.scrub_compares.pop_front();
        }
        self.scrub_compares.push_back(ScrubCompare {
            round: self.scrub_round,
            at: self.info.last_update,
            own: own.into_iter().map(|e| (e.oid.clone(), e)).collect(),
            waiting: replicas.into_iter().collect(),
            maps: BTreeMap::new(),
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

    /// Primary: a replica's map. Once every replica's is in, repairs what differs
    /// (see the module's docs).
    pub fn handle_scrub_map(
        &mut self,
        store: &mut dyn ObjectStore,
        from: OsdId,
        map: PgScrubMap,
        out: &mut Vec<Output>,
    ) {
        let Some(at) = (self.scrub_compares.iter()).position(|c| c.round == map.round) else {
            return;
        };
        let compare = &mut self.scrub_compares[at];
        if map.interval != self.interval_start || !compare.waiting.remove(&from) {
            return;
        }
        let entries: BTreeMap<ObjectId, ScrubEntry> = map
            .objects
            .into_iter()
            .map(|e| (e.oid.clone(), e))
            .collect();
        // A map cut short covers the range only up to its last entry.
        let covered_to = if map.complete {
            None
        } else {
            entries.keys().next_back().cloned()
        };
        compare.maps.insert(
            from,
            ReplicaMap {
                entries,
                covered_to,
            },
        );
        if compare.waiting.is_empty() {
            let compare = self.scrub_compares.remove(at).expect("found above");
            self.finish_compare(store, compare, out);
        }
    }

    /// Primary: every replica's map is in. Judging them together (before any repair
    /// makes the PG unclean) repairs every replica's differences in one pass, and a
    /// copy we lost comes from the best of the replicas that hold one.
    fn finish_compare(
        &mut self,
        store: &mut dyn ObjectStore,
        compare: ScrubCompare,
        out: &mut Vec<Output>,
    ) {
        if !self.ready_to_compare() {
            return;
        }
        let at = compare.at;
        let settled = |pg: &Pg, name: &str| {
            !pg.writes_per_object.contains_key(name)
                && !pg
                    .log
                    .entries()
                    .rev()
                    .take_while(|entry| entry.version > at)
                    .any(|entry| entry.oid == name)
        };
        let names_here: BTreeSet<&str> = compare.own.keys().map(|o| o.name.as_str()).collect();
        // Names only replicas hold, with each holder's entry for the object.
        let mut only_there: BTreeMap<String, Vec<(OsdId, &ScrubEntry)>> = BTreeMap::new();
        let mut to_push: Vec<(OsdId, String)> = Vec::new();
        for (&replica, theirs) in &compare.maps {
            let covered = |oid: &ObjectId| theirs.covered_to.as_ref().is_none_or(|to| oid <= to);
            let mut ours_to_push = BTreeSet::new();
            for (oid, mine) in compare.own.iter().filter(|(oid, _)| covered(oid)) {
                let differs = (theirs.entries.get(oid)).is_none_or(|other| !same_copy(mine, other));
                if differs {
                    ours_to_push.insert(oid.name.clone());
                }
            }
            let mut theirs_only = 0;
            for (oid, entry) in theirs.entries.iter() {
                if compare.own.contains_key(oid) {
                    continue;
                }
                // A clone we do not have, beside a head we hold: ours wins. A head we
                // do not have is another matter, even with clones of it here (a copy
                // lost behind the store's back): pushing "ours" would remove the
                // replica's head and every clone with it (seed 1116 of the remap class
                // with snapshots), so the log decides, as for a name we lack entirely.
                let our_head = ObjectId::head(&*oid.name);
                let head_lost =
                    oid.snap == carmine_types::SnapId::HEAD || !compare.own.contains_key(&our_head);
                if names_here.contains(oid.name.as_str()) && !head_lost {
                    ours_to_push.insert(oid.name.clone());
                } else {
                    theirs_only += 1;
                    only_there
                        .entry(oid.name.clone())
                        .or_default()
                        .push((replica, entry));
                }
            }
            self.compare_counters.objects_compared +=
                theirs.entries.len().max(compare.own.len()) as u64;
            tracing::debug!(
                "{}: compared {} objects with {replica}'s {}: {} to push there, {} only there",
                self.pgid,
                compare.own.len(),
                theirs.entries.len(),
                ours_to_push.len(),
                theirs_only
            );
            to_push.extend(ours_to_push.into_iter().map(|name| (replica, name)));
        }
        let mut pushed = false;
        for (replica, name) in to_push {
            if settled(self, &name) {
                self.compare_counters.replica_copies_differing += 1;
                self.note_replica_inconsistent(replica, name);
                pushed = true;
            }
        }
        for (name, holders) in only_there {
            if !settled(self, &name) || store.exists(self.coll, &ObjectId::head(&*name)) {
                continue;
            }
            if self.log_removed(&name) {
                let mut leftovers: Vec<OsdId> = holders.iter().map(|&(osd, _)| osd).collect();
                leftovers.dedup();
                for osd in leftovers {
                    self.compare_counters.replica_copies_differing += 1;
                    self.note_replica_inconsistent(osd, name.clone());
                    pushed = true;
                }
            } else {
                self.compare_counters.own_copies_lost += 1;
                self.repair_lost_copy(best_source(&holders), &name, out);
            }
        }
        if pushed {
            self.schedule_recovery(store, out);
        }
    }
}

/// Where to pull a copy we lost from, among the replicas that hold the object (each
/// with its entries for the name, the head first when it has one): the newest head
/// version wins; among equals, the copy most holders agree on; then the lowest id.
/// (Ceph's scrub picks its authoritative copy by version, then by agreement.)
fn best_source(holders: &[(OsdId, &ScrubEntry)]) -> OsdId {
    let heads: Vec<(OsdId, &ScrubEntry)> = holders
        .iter()
        .filter(|(_, entry)| entry.oid.snap == carmine_types::SnapId::HEAD)
        .copied()
        .collect();
    let candidates = if heads.is_empty() {
        holders
    } else {
        &heads[..]
    };
    let agreeing = |entry: &ScrubEntry| {
        candidates
            .iter()
            .filter(|(_, other)| same_copy(entry, other))
            .count()
    };
    candidates
        .iter()
        .max_by_key(|&&(osd, entry)| (entry.version, agreeing(entry), std::cmp::Reverse(osd)))
        .map(|&(osd, _)| osd)
        .expect("a name only replicas hold has a holder")
}

/// A copy's xattrs and omap entries as one crc32c: each name or key and each value
/// length-prefixed, xattrs by name, then a separator, then the omap in key order (the
/// prefixes keep `("ab", "c")` and `("a", "bc")` apart). `None` when either cannot be
/// read.
fn meta_digest(store: &dyn ObjectStore, coll: CollectionId, oid: &ObjectId) -> Option<u32> {
    fn add(crc: u32, field: &[u8]) -> u32 {
        let length = u32::try_from(field.len()).unwrap_or(u32::MAX);
        crc32c::crc32c_append(crc32c::crc32c_append(crc, &length.to_le_bytes()), field)
    }
    let mut crc = 0;
    for (name, value) in store.getxattrs(coll, oid).ok()? {
        crc = add(add(crc, name.as_bytes()), &value);
    }
    crc = crc32c::crc32c_append(crc, &[0xff]);
    let mut after: Option<Bytes> = None;
    loop {
        let page = store
            .omap_list(coll, oid, after.as_deref(), LIST_PAGE)
            .ok()?;
        let full = page.len() == LIST_PAGE;
        for (key, value) in &page {
            crc = add(add(crc, key), value);
        }
        after = page.into_iter().next_back().map(|(key, _)| key);
        if !full {
            return Some(crc);
        }
    }
}

/// Two copies hold the same object: same size and version, and the same data and
/// metadata where both could read them (an unreadable copy is deep scrub's to report
/// and repair; a map from an older build has no metadata digests).
fn same_copy(a: &ScrubEntry, b: &ScrubEntry) -> bool {
    let same_where_known = |x: Option<u32>, y: Option<u32>| match (x, y) {
        (Some(x), Some(y)) => x == y,
        _ => true,
    };
    a.size_bytes == b.size_bytes
        && a.version == b.version
        && same_where_known(a.data_crc, b.data_crc)
        && same_where_known(a.meta_crc, b.meta_crc)
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
            meta_crc: Some(1),
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
        let other_meta = ScrubEntry {
            meta_crc: Some(2),
            ..a.clone()
        };
        assert!(!same_copy(&a, &other_meta));
        let old_sender = ScrubEntry {
            meta_crc: None,
            ..a.clone()
        };
        assert!(same_copy(&a, &old_sender), "no digest: not compared");
    }

    #[test]
    fn a_lost_copy_comes_from_the_newest_then_the_most_agreed_copy() {
        let at = |version: u64, crc: u32| ScrubEntry {
            oid: ObjectId::head("o"),
            size_bytes: 1,
            version: EVersion::new(1, version),
            data_crc: Some(crc),
            meta_crc: Some(0),
        };
        let (old, new) = (at(3, 1), at(4, 1));
        assert_eq!(best_source(&[(OsdId(1), &old), (OsdId(2), &new)]), OsdId(2));
        let (odd, even_a, even_b) = (at(4, 7), at(4, 8), at(4, 8));
        let holders = [(OsdId(1), &odd), (OsdId(2), &even_a), (OsdId(3), &even_b)];
        assert_eq!(best_source(&holders), OsdId(2));
        assert_eq!(
            best_source(&[(OsdId(5), &odd), (OsdId(4), &even_a)]),
            OsdId(4)
        );
        let clone = ScrubEntry {
            oid: ObjectId {
                name: "o".into(),
                snap: carmine_types::SnapId(2),
            },
            version: EVersion::new(1, 9),
            ..old.clone()
        };
        let holders = [(OsdId(1), &clone), (OsdId(2), &old)];
        assert_eq!(best_source(&holders), OsdId(2), "heads decide, not clones");
    }

    #[test]
    fn the_metadata_digest_sees_xattrs_and_omap_and_their_boundaries() {
        use carmine_store::{MemStore, Transaction};
        let coll = CollectionId::Pg(carmine_types::PgId::new(1, 0));
        let digest_after = |build: &dyn Fn(&mut Transaction, ObjectId)| {
            let mut store = MemStore::new();
            let mut tx = Transaction::new();
            tx.create_collection(coll);
            tx.touch(coll, ObjectId::head("o"));
            build(&mut tx, ObjectId::head("o"));
            store.submit(tx).unwrap();
            meta_digest(&store, coll, &ObjectId::head("o")).unwrap()
        };
        let b = |s: &'static str| Bytes::from_static(s.as_bytes());
        let plain = digest_after(&|_, _| {});
        let xattr = digest_after(&|tx, oid| tx.set_xattr(coll, oid, "ab".into(), b("c")));
        let xattr_moved = digest_after(&|tx, oid| tx.set_xattr(coll, oid, "a".into(), b("bc")));
        let omap = digest_after(&|tx, oid| tx.omap_set(coll, oid, vec![(b("ab"), b("c"))]));
        let many = digest_after(&|tx, oid| {
            let entries = (0..LIST_PAGE * 2 + 3)
                .map(|i| (Bytes::from(format!("k{i:05}")), b("v")))
                .collect();
            tx.omap_set(coll, oid, entries);
        });
        let many_but_last = digest_after(&|tx, oid| {
            let entries = (0..LIST_PAGE * 2 + 2)
                .map(|i| (Bytes::from(format!("k{i:05}")), b("v")))
                .collect();
            tx.omap_set(coll, oid, entries);
        });
        let all = [plain, xattr, xattr_moved, omap, many, many_but_last];
        let distinct: BTreeSet<u32> = all.iter().copied().collect();
        assert_eq!(distinct.len(), all.len(), "{all:?}");
        assert_eq!(
            xattr,
            digest_after(&|tx, oid| tx.set_xattr(coll, oid, "ab".into(), b("c")))
        );
    }
}
