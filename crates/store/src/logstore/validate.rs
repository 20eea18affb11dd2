//! Validation of a transaction against the index without changing it, so that
//! [`Index::apply`](super::index::Index::apply) never fails halfway. It tracks, in a small
//! overlay, only what can make an op fail: which collections and objects exist and
//! which xattr names an object has. Errors match `MemStore`'s exactly: limits for all
//! ops first, then the first op that fails.

use super::index::Index;
use crate::{CollectionId, StoreError, TxOp};
use carmine_types::ObjectId;
use std::collections::{BTreeMap, BTreeSet};

/// An object's state in the overlay: `None` when absent, else its xattr names.
type ObjectState = Option<BTreeSet<String>>;

#[derive(Debug, Default)]
struct CollectionOverlay {
    exists: bool,
    /// The collection was removed or created in this transaction: objects in the
    /// index no longer count.
    hides_index: bool,
    /// A transaction touches few objects: a small ordered map beats hashing names.
    objects: BTreeMap<ObjectId, ObjectState>,
}

/// A dry run of one transaction. See the module docs.
pub struct DryRun<'a> {
    index: &'a Index,
    collections: BTreeMap<CollectionId, CollectionOverlay>,
}

impl<'a> DryRun<'a> {
    pub fn new(index: &'a Index) -> Self {
        Self {
            index,
            collections: BTreeMap::new(),
        }
    }

    /// Checks every op of a client transaction in order.
    pub fn check_transaction(index: &Index, ops: &[TxOp]) -> Result<(), StoreError> {
        ops.iter().try_for_each(crate::memstore::check_limits)?;
        let mut dry_run = DryRun::new(index);
        ops.iter().try_for_each(|op| dry_run.check(op))
    }

    fn overlay(&mut self, coll: CollectionId) -> &mut CollectionOverlay {
        let exists = self.index.collections.contains_key(&coll);
        self.collections
            .entry(coll)
            .or_insert_with(|| CollectionOverlay {
                exists,
                ..CollectionOverlay::default()
            })
    }

    fn object(&mut self, coll: CollectionId, oid: &ObjectId) -> Result<ObjectState, StoreError> {
        let index = self.index;
        let overlay = self.overlay(coll);
        if !overlay.exists {
            return Err(StoreError::NoSuchCollection(coll));
        }
        if let Some(state) = overlay.objects.get(oid) {
            return Ok(state.clone());
        }
        if overlay.hides_index {
            return Ok(None);
        }
        let onode = index.onode(coll, oid);
        Ok(onode.map(|onode| onode.xattrs.keys().cloned().collect()))
    }

    fn require(
        &mut self,
        coll: CollectionId,
        oid: &ObjectId,
    ) -> Result<BTreeSet<String>, StoreError> {
        self.object(coll, oid)?
            .ok_or_else(|| StoreError::NoSuchObject(coll, oid.clone()))
    }

    /// Checks an op that creates the object when it is missing.
    pub fn check_create(&mut self, coll: CollectionId, oid: &ObjectId) -> Result<(), StoreError> {
        if self.object(coll, oid)?.is_none() {
            self.set(coll, oid, Some(BTreeSet::new()));
        }
        Ok(())
    }

    fn set(&mut self, coll: CollectionId, oid: &ObjectId, state: ObjectState) {
        self.overlay(coll).objects.insert(oid.clone(), state);
    }

    fn reset_collection(&mut self, coll: CollectionId, exists: bool) {
        let overlay = self.overlay(coll);
        overlay.exists = exists;
        overlay.hides_index = true;
        overlay.objects.clear();
    }

    /// Checks one op and records its effect on existence.
    pub fn check(&mut self, op: &TxOp) -> Result<(), StoreError> {
        match op {
            TxOp::CreateCollection(coll) => {
                if self.overlay(*coll).exists {
                    return Err(StoreError::CollectionExists(*coll));
                }
                self.reset_collection(*coll, true);
            }
            TxOp::RemoveCollection(coll) => {
                if !self.overlay(*coll).exists {
                    return Err(StoreError::NoSuchCollection(*coll));
                }
                self.reset_collection(*coll, false);
            }
            TxOp::Touch(coll, oid)
            | TxOp::Write { coll, oid, .. }
            | TxOp::Zero { coll, oid, .. }
            | TxOp::Truncate { coll, oid, .. }
            | TxOp::SetMtime { coll, oid, .. }
            | TxOp::OmapSet { coll, oid, .. }
            | TxOp::OmapClear(coll, oid) => self.check_create(*coll, oid)?,
            TxOp::SetXattr {
                coll, oid, name, ..
            } => {
                let mut names = self.object(*coll, oid)?.unwrap_or_default();
                names.insert(name.clone());
                self.set(*coll, oid, Some(names));
            }
            TxOp::RmXattr { coll, oid, name } => {
                let mut names = self.require(*coll, oid)?;
                if !names.remove(name) {
                    return Err(StoreError::NoSuchXattr(name.clone()));
                }
                self.set(*coll, oid, Some(names));
            }
            TxOp::OmapRm { coll, oid, .. } => drop(self.require(*coll, oid)?),
            TxOp::Remove(coll, oid) => {
                self.require(*coll, oid)?;
                self.set(*coll, oid, None);
            }
            TxOp::Clone { coll, src, dst } => {
                let names = self.require(*coll, src)?;
                self.set(*coll, dst, Some(names));
            }
        }
        Ok(())
    }
}
