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

use super::{peer_output, Pg, Phase};
use crate::pglog::pgmeta_oid;
use crate::Output;
use bytes::Bytes;
use carmine_clustermap::OsdMap;
use carmine_proto::{Msg, PgRemove, PgState};
use carmine_store::{ObjectStore, Transaction};
use carmine_types::OsdId;

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
    /// that answered this interval's peering to delete its copy. Once per interval.
    pub fn purge_strays(&mut self, out: &mut Vec<Output>) {
        if self.strays_purged || !self.is_primary() || self.phase != Phase::Active {
            return;
        }
        if !self.state().contains(PgState::CLEAN)
            || self.acting != self.up
            || !self.missing.is_empty()
        {
            return;
        }
        self.strays_purged = true;
        let strays: Vec<OsdId> = self
            .notifies
            .iter()
            .filter(|(osd, n)| n.exists && !self.acting.contains(osd) && !self.up.contains(osd))
            .map(|(osd, _)| *osd)
            .collect();
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

/// Whether the copy in `store` carries the deleting marker (a restart resumes it).
pub fn marked_deleting(store: &dyn ObjectStore, coll: carmine_store::CollectionId) -> bool {
    let keys = [Bytes::from_static(DELETING_KEY)];
    store
        .omap_get(coll, &pgmeta_oid(), &keys)
        .is_ok_and(|found| !found.is_empty())
}
