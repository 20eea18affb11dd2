//! The versions a copy's missing objects need (Ceph's `pg_missing_item::need`).
//!
//! A copy that lacks an object learns the version it needs from the log entry of the
//! object's newest change. The log is trimmed by length, and an entry naming a
//! missing object may go (the trim pin of `PgLog::plan_trim` gives up at
//! `LOG_PINNED_GROWTH` times the log's length). The need is therefore kept with the
//! missing set itself, as the value of its `missing.NAME` key, from the moment the
//! object is named missing; a log-only write to it updates it. It travels in
//! `PgNotify::missing_need` and `PgActivate::missing_need`, so a copy adopting
//! another's history learns it too. With it, a primary can still ask for exactly that
//! version (`Pg::version_needed`), and a stray or a backfill target holding it can
//! serve it.
//!
//! A need is history: each one names the newest change the copy's history made to
//! the object. When a history is replaced, only needs up to the point both share
//! survive (`Pg::own_needs_to`); the rest come from the new log or from the copy
//! whose history it is.

use super::repair::copy_version;
use super::Pg;
use crate::pglog::{encode_need, missing_key, pgmeta_oid, MISSING_ALL};
use bytes::Bytes;
use carmine_proto::ObjectCopy;
use carmine_store::{ObjectStore, Transaction};
use carmine_types::EVersion;
use std::collections::{BTreeMap, BTreeSet};

impl Pg {
    /// The needs of the objects of `missing` once our log is the one in memory: the
    /// newest change the log records for each, else what `known` says. Names neither
    /// knows stay without one.
    pub(super) fn needs_of(
        &self,
        missing: &BTreeSet<String>,
        known: &BTreeMap<String, EVersion>,
    ) -> BTreeMap<String, EVersion> {
        let mut needs = BTreeMap::new();
        if missing.is_empty() {
            return needs;
        }
        for entry in self.log.entries().rev() {
            if entry.changes_object() && missing.contains(&entry.oid) {
                needs.entry(entry.oid.clone()).or_insert(entry.version);
            }
        }
        for name in missing {
            if name == MISSING_ALL || needs.contains_key(name) {
                continue;
            }
            if let Some(&need) = known.get(name) {
                needs.insert(name.clone(), need);
            }
        }
        needs
    }

    /// Our needs that are history up to `shared_to`: what a log replacing ours from
    /// that point keeps of them.
    pub(super) fn own_needs_to(&self, shared_to: EVersion) -> BTreeMap<String, EVersion> {
        (self.missing_need.iter())
            .filter(|(_, need)| **need <= shared_to)
            .map(|(name, need)| (name.clone(), *need))
            .collect()
    }

    /// Our needs of `names`, for a notify or an activation.
    pub(super) fn needs_to_send<'a>(
        &self,
        names: impl IntoIterator<Item = &'a String>,
    ) -> Vec<(String, EVersion)> {
        if self.missing_need.is_empty() {
            return Vec::new();
        }
        (names.into_iter())
            .filter_map(|name| Some((name.clone(), *self.missing_need.get(name)?)))
            .collect()
    }

    /// The pgmeta omap of a missing set: each name's key, valued with its need.
    pub(super) fn missing_omap<'a>(
        names: impl IntoIterator<Item = &'a String>,
        needs: &BTreeMap<String, EVersion>,
    ) -> Vec<(Bytes, Bytes)> {
        (names.into_iter())
            .map(|name| (missing_key(name), encode_need(needs.get(name).copied())))
            .collect()
    }
}

impl Pg {
    /// The versions the copies of `objects` carry, for those we lack: taken as their
    /// needs if our store refuses the copies (see `Pg::note_refused_needs`).
    pub(super) fn versions_of_missing(&self, objects: &[ObjectCopy]) -> Vec<(String, EVersion)> {
        (objects.iter())
            .filter(|copy| self.missing.contains(&copy.oid))
            .filter_map(|copy| Some((copy.oid.clone(), copy_version(copy.state.as_ref()?)?)))
            .collect()
    }

    /// Our store refused copies of objects we lack (no room, say): the versions they
    /// carry are the ones our history needs (a push from our primary, or a pull of the
    /// history we adopted), and may be all that says so once the log trims the
    /// entries that wrote them (seed 36287: every entry left naming the objects was a
    /// failed write's). Kept in memory and, where the store takes it, on disk.
    pub(super) fn note_refused_needs(
        &mut self,
        store: &mut dyn ObjectStore,
        versions: Vec<(String, EVersion)>,
    ) {
        let changed: Vec<(String, EVersion)> = (versions.into_iter())
            .filter(|(name, need)| self.missing_need.get(name) != Some(need))
            .collect();
        if changed.is_empty() {
            return;
        }
        let omap = (changed.iter())
            .map(|(name, need)| (missing_key(name), encode_need(Some(*need))))
            .collect();
        let mut tx = Transaction::new();
        tx.omap_set(self.coll, pgmeta_oid(), omap);
        match store.submit(tx) {
            Ok(seq) => self.last_submitted = seq,
            Err(error) => tracing::debug!(
                "{}: the needed versions of refused copies stay in memory: {error}",
                self.pgid
            ),
        }
        self.missing_need.extend(changed);
    }
}
