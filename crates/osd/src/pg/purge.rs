//! Stray purge: deleting the copies a PG no longer needs (Ceph's PG removal).
//!
//! When data moves (an OSD marked out, a pg_temp removed, an OSD back in), the old
//! copies stay on OSDs outside the PG's up and acting sets: *strays*. Peering hears of
//! them (they answer the primary's queries). Once the PG is active+clean with its
//! whole up set acting, every member holds every acknowledged write, so no stray is
//! needed any more: the primary sends each one a [`PgRemove`] naming its interval.
//!
//! A stray obeys only if, in its own map (at least as new as the sender's), it is
//! outside the up and acting sets, and its copy was last activated before the
//! sender's interval (otherwise it became a member of a newer interval since). It
//! then persists a *deleting* marker in its metadata object before it removes
//! anything, so a restart mid-deletion resumes it; a deleting copy answers queries as
//! if it held nothing, so half a copy is never used by peering. The objects go a
//! bounded number per shard turn ([`PURGE_OBJECTS_PER_TURN`]); the collection goes last.
//!
//! A stray on an OSD that was down while the PG peered is never queried (peering asks
//! only up OSDs, and only those of past intervals that may have accepted writes), so
//! an OSD that joins the map again announces every copy it holds of a PG that the map
//! no longer gives it ([`stray_notices`], an unsolicited `PgNotify`). The primary
//! remembers it, and tells it to delete its copy once the PG is clean, as above and
//! with the same checks on the stray's side.

use super::{peer_output, Pg, Phase};
use crate::pglog::{pgmeta_oid, INFO_KEY};
use crate::Output;
use bytes::Bytes;
use carmine_clustermap::OsdMap;
use carmine_proto::{Msg, PgInfo, PgNotify, PgRemove, PgState};
use carmine_store::{CollectionId, ObjectStore, Transaction};
use carmine_types::encoding::Decode;
use carmine_types::{Epoch, OsdId, PgId};
use std::collections::BTreeSet;

/// Objects a shard removes per turn over all its deleting PGs (Ceph paces PG
/// deletion too: `osd_delete_sleep`), so a large stray never stalls client IO.
pub const PURGE_OBJECTS_PER_TURN: usize = 64;

/// Omap key in the metadata object marking a copy as being deleted.
pub const DELETING_KEY: &[u8] = b"deleting";

/// What a deletion step left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PurgeProgress {
    /// Objects remain: call again next turn.
    More { removed: usize },
    /// The collection is gone: drop the PG.
    Done { removed: usize },
}

impl Pg {
    /// Whether this copy is being deleted (it serves nothing and answers queries as
    /// if it held nothing).
    pub fn is_deleting(&self) -> bool {
        self.deleting
    }

    /// Primary: once the PG is clean with its whole up set acting, tells every stray
    /// that answered this interval's peering to delete its copy (once per interval),
    /// and every stray that announced itself since (see `Pg::note_stray`).
    pub fn purge_strays(&mut self, out: &mut Vec<Output>) {
        if self.strays_purged && self.late_strays.is_empty() {
            return;
        }
        if !self.is_primary() || self.phase != Phase::Active {
            return;
        }
        if !self.state().contains(PgState::CLEAN)
            || self.acting != self.up
            || !self.missing.is_empty()
        {
            return;
        }
        let mut strays: BTreeSet<OsdId> = std::mem::take(&mut self.late_strays);
        if !self.strays_purged {
            self.strays_purged = true;
            strays.extend(
                self.notifies
                    .iter()
                    .filter(|(_, n)| n.exists)
                    .map(|(osd, _)| *osd),
            );
        }
        strays.retain(|osd| !self.acting.contains(osd) && !self.up.contains(osd));
        for stray in strays {
            tracing::info!("{}: clean; {stray} may delete its stray copy", self.pgid);
            let remove = PgRemove {
                pgid: self.pgid,
                interval: self.interval_start,
                map_epoch: self.map_epoch,
            };
            out.push(peer_output(stray, Msg::PgRemove(remove)));
        }
    }

    /// Primary: `from`, outside the up and acting sets, holds a copy (it answered a
    /// query, or announced the copy after booting): it is told to delete it once the
    /// PG is clean, whether or not this interval's peering asked it.
    pub(super) fn note_stray(&mut self, from: OsdId, notify: &PgNotify) -> bool {
        let stray = self.is_primary()
            && notify.exists
            && !self.acting.contains(&from)
            && !self.up.contains(&from);
        if stray {
            self.late_strays.insert(from);
        }
        stray
    }

    /// Stray: a primary says this copy is no longer needed. Starts deleting it (the
    /// marker persisted first) unless the request is stale; returns whether it did.
    pub fn handle_remove(
        &mut self,
        store: &mut dyn ObjectStore,
        map: &OsdMap,
        from: OsdId,
        remove: &PgRemove,
    ) -> bool {
        let member = map
            .pg_mapping(self.pgid)
            .is_some_and(|m| m.acting.contains(&self.whoami) || m.up.contains(&self.whoami));
        if member || self.is_primary() || self.info.last_epoch_started >= remove.interval {
            tracing::debug!(
                "{}: ignoring a stale removal from {from} (interval e{}; member: {member}, \
                 activated at e{})",
                self.pgid,
                remove.interval.0,
                self.info.last_epoch_started.0
            );
            return false;
        }
        if !self.deleting {
            let mut tx = Transaction::new();
            tx.omap_set(
                self.coll,
                pgmeta_oid(),
                vec![(Bytes::from_static(DELETING_KEY), Bytes::new())],
            );
            self.submit_meta(store, tx);
            self.deleting = true;
            tracing::info!("{}: deleting this stray copy ({from} asked)", self.pgid);
        }
        true
    }

    /// Removes up to `objects_max` objects of a deleting copy, then the collection
    /// once nothing but the metadata object (which holds the marker) is left.
    pub fn purge_step(&mut self, store: &mut dyn ObjectStore, objects_max: usize) -> PurgeProgress {
        assert!(
            self.deleting,
            "{}: purge of a copy not being deleted",
            self.pgid
        );
        let objects_max = objects_max.max(1);
        let page = match store.list_objects(self.coll, None, objects_max + 1) {
            Ok(page) => page,
            Err(error) => {
                tracing::error!("{}: cannot list a deleting copy: {error}", self.pgid);
                return PurgeProgress::More { removed: 0 };
            }
        };
        // Fewer than asked for: this page is all that is left.
        let last_page = page.len() <= objects_max;
        let meta = pgmeta_oid();
        let objects: Vec<_> = page
            .into_iter()
            .filter(|oid| *oid != meta)
            .take(objects_max)
            .collect();
        let removed = objects.len();
        let mut tx = Transaction::new();
        for oid in objects {
            tx.remove(self.coll, oid);
        }
        if last_page {
            tx.remove_collection(self.coll);
        }
        self.submit_meta(store, tx);
        if last_page {
            PurgeProgress::Done { removed }
        } else {
            PurgeProgress::More { removed }
        }
    }
}

/// An OSD that has just joined the map (booted, or marked up again): for each copy
/// in `store` of a PG of `owned` whose mapping no longer names `whoami`, a notice to
/// the PG's primary (an unsolicited `PgNotify`, interval 0), so that a copy left on
/// an OSD that was down while the PG moved is purged too (see the module comment).
pub fn stray_notices(
    store: &dyn ObjectStore,
    map: &OsdMap,
    whoami: OsdId,
    owned: impl Fn(PgId) -> bool,
) -> Vec<Output> {
    let mut notices = Vec::new();
    for coll in store.list_collections() {
        let CollectionId::Pg(pgid) = coll else {
            continue;
        };
        if !owned(pgid) || marked_deleting(store, coll) {
            continue;
        }
        let Some(mapping) = map.pg_mapping(pgid) else {
            continue;
        };
        if mapping.acting.contains(&whoami) || mapping.up.contains(&whoami) {
            continue;
        }
        let Some(primary) = mapping.primary else {
            continue;
        };
        let keys = [Bytes::from_static(INFO_KEY)];
        let info = match store.omap_get(coll, &pgmeta_oid(), &keys) {
            Ok(found) => match found.into_iter().next() {
                Some((_, raw)) => PgInfo::from_shared(raw).ok(),
                None => None,
            },
            Err(_) => None,
        };
        let Some(info) = info else {
            tracing::warn!("{whoami}: stray copy of {pgid} has no readable info; kept");
            continue;
        };
        tracing::info!("{whoami}: holds a stray copy of {pgid}; telling {primary}");
        let notify = PgNotify {
            pgid,
            interval: Epoch(0),
            map_epoch: map.epoch,
            info,
            exists: true,
            missing: Vec::new(),
            missing_need: Vec::new(),
            prior_lease_remaining_ns: 0,
        };
        notices.push(peer_output(primary, Msg::PgNotify(notify)));
    }
    notices
}

/// Whether the copy in `store` carries the deleting marker (a restart resumes it).
pub fn marked_deleting(store: &dyn ObjectStore, coll: carmine_store::CollectionId) -> bool {
    let keys = [Bytes::from_static(DELETING_KEY)];
    store
        .omap_get(coll, &pgmeta_oid(), &keys)
        .is_ok_and(|found| !found.is_empty())
}
