//! Applying a [`Transaction`] to a [`MemStore`] atomically.
//!
//! Limits are checked for the whole transaction before anything changes, since they
//! depend only on the ops. Then each op changes the store in place and pushes an
//! [`Undo`] record holding exactly what it replaced (moved out, or a refcounted
//! `Bytes`); if an op fails, or the result would not fit in the capacity, the records
//! are replayed newest first and the totals restored. Undo records never copy object
//! data, xattrs or omaps, so a failing transaction costs what it would have written.
//!
//! Consecutive ops on the same object (an OSD write is a run of data, mtime and xattr
//! ops on the object, then omap ops on the PG's metadata object) are applied as one
//! run: the object is looked up once, its totals recounted once, and its name kept
//! once in the undo log (a [`Undo::Target`] before the run's changes) rather than
//! cloned into every record. A run that creates its object records no changes at all:
//! undoing the creation removes the object whatever the run did to it.

use super::key::ObjectKey;
use super::object::{DataUndo, Object, ObjectData, SpareBuffers};
use super::{Collection, Counters, MemStore};
use crate::omap::OmapKey;
use crate::owned::{own_key, own_small};
use crate::{CollectionId, StoreError, Transaction, TxOp};
use bytes::Bytes;
use carmine_types::limits::{
    OBJECT_NAME_BYTES_MAX, OBJECT_SIZE_BYTES_MAX, OMAP_KEY_BYTES_MAX, XATTR_NAME_BYTES_MAX,
    XATTR_VALUE_BYTES_MAX,
};
use carmine_types::ObjectId;
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

/// What one op replaced, to put back if the transaction fails.
enum Undo {
    /// The collection's previous state: absent (`None`) or the removed collection.
    Collection(CollectionId, Option<Collection>),
    /// The object's previous state: absent (`None`) or the removed or replaced object
    /// (boxed: it is rare, and it would make every record as large as an object).
    Object(CollectionId, ObjectId, Option<Box<Object>>),
    /// The object the [`Undo::Change`] records after it (up to the next record of
    /// another kind) changed.
    Target(CollectionId, ObjectId),
    Change(Change),
}

/// What one change to an existing object replaced.
enum Change {
    Data(DataUndo),
    Mtime(u64),
    Xattr(String, Option<Bytes>),
    OmapEntry(OmapKey, Option<Bytes>),
    OmapAll(BTreeMap<OmapKey, Bytes>),
}

/// The undo records of the transaction being applied. The vector is kept between
/// transactions so that applying one allocates nothing for it; it is empty between
/// them.
#[derive(Default)]
pub(super) struct UndoLog(Vec<Undo>);

impl Clone for UndoLog {
    /// A copy of the store starts with an empty log (there is nothing in it between
    /// transactions anyway).
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl std::fmt::Debug for UndoLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UndoLog({} records)", self.0.len())
    }
}

/// An op on one object's contents, with its collection and name split off.
enum ObjectOp {
    Touch,
    Write { offset: u64, data: Bytes },
    Zero { offset: u64, length: u64 },
    Truncate { size_bytes: u64 },
    SetMtime(u64),
    SetXattr(String, Bytes),
    RmXattr(String),
    OmapSet(Vec<(Bytes, Bytes)>),
    OmapRm(Vec<Bytes>),
    OmapClear,
}

impl ObjectOp {
    /// Whether the op creates a missing object (the others require it).
    fn creates(&self) -> bool {
        !matches!(self, ObjectOp::RmXattr(_) | ObjectOp::OmapRm(_))
    }
}

/// Splits an op on one object's contents; gives back any other op.
fn split(op: TxOp) -> Result<(CollectionId, ObjectId, ObjectOp), TxOp> {
    Ok(match op {
        TxOp::Touch(coll, oid) => (coll, oid, ObjectOp::Touch),
        TxOp::Write {
            coll,
            oid,
            offset,
            data,
        } => (coll, oid, ObjectOp::Write { offset, data }),
        TxOp::Zero {
            coll,
            oid,
            offset,
            length,
        } => (coll, oid, ObjectOp::Zero { offset, length }),
        TxOp::Truncate {
            coll,
            oid,
            size_bytes,
        } => (coll, oid, ObjectOp::Truncate { size_bytes }),
        TxOp::SetMtime {
            coll,
            oid,
            mtime_ns,
        } => (coll, oid, ObjectOp::SetMtime(mtime_ns)),
        TxOp::SetXattr {
            coll,
            oid,
            name,
            value,
        } => (coll, oid, ObjectOp::SetXattr(name, value)),
        TxOp::RmXattr { coll, oid, name } => (coll, oid, ObjectOp::RmXattr(name)),
        TxOp::OmapSet { coll, oid, entries } => (coll, oid, ObjectOp::OmapSet(entries)),
        TxOp::OmapRm { coll, oid, keys } => (coll, oid, ObjectOp::OmapRm(keys)),
        TxOp::OmapClear(coll, oid) => (coll, oid, ObjectOp::OmapClear),
        other => return Err(other),
    })
}

/// The object whose contents the op changes, for ops that [`split`] accepts.
fn content_target(op: &TxOp) -> Option<(CollectionId, &ObjectId)> {
    match op {
        TxOp::Remove(..) | TxOp::Clone { .. } => None,
        other => other.target(),
    }
}

fn too_large(length: usize, limit: usize) -> Result<(), StoreError> {
    if length > limit {
        return Err(StoreError::TooLarge {
            limit_bytes: limit as u64,
        });
    }
    Ok(())
}

fn check_extent(offset: u64, length: u64) -> Result<(), StoreError> {
    match offset.checked_add(length) {
        Some(end) if end <= OBJECT_SIZE_BYTES_MAX => Ok(()),
        _ => Err(StoreError::TooLarge {
            limit_bytes: OBJECT_SIZE_BYTES_MAX,
        }),
    }
}

/// Checks the limits that depend only on the op: name and value lengths, object size.
pub(crate) fn check_limits(op: &TxOp) -> Result<(), StoreError> {
    for oid in op_objects(op).into_iter().flatten() {
        too_large(oid.name.len(), OBJECT_NAME_BYTES_MAX)?;
    }
    match op {
        TxOp::Write { offset, data, .. } => check_extent(*offset, data.len() as u64),
        TxOp::Zero { offset, length, .. } => check_extent(*offset, *length),
        TxOp::Truncate { size_bytes, .. } => check_extent(*size_bytes, 0),
        TxOp::SetXattr { name, value, .. } => {
            too_large(name.len(), XATTR_NAME_BYTES_MAX)?;
            too_large(value.len(), XATTR_VALUE_BYTES_MAX)
        }
        TxOp::RmXattr { name, .. } => too_large(name.len(), XATTR_NAME_BYTES_MAX),
        TxOp::OmapSet { entries, .. } => entries
            .iter()
            .try_for_each(|(key, _)| too_large(key.len(), OMAP_KEY_BYTES_MAX)),
        TxOp::OmapRm { keys, .. } => keys
            .iter()
            .try_for_each(|key| too_large(key.len(), OMAP_KEY_BYTES_MAX)),
        _ => Ok(()),
    }
}

/// The objects an op names (at most two; no allocation, as this runs for every op).
fn op_objects(op: &TxOp) -> [Option<&ObjectId>; 2] {
    match op {
        TxOp::Remove(_, oid) => [Some(oid), None],
        TxOp::Clone { src, dst, .. } => [Some(src), Some(dst)],
        other => [content_target(other).map(|(_, oid)| oid), None],
    }
}

impl MemStore {
    /// Applies every op of `tx` or, on error, none of them.
    pub(super) fn apply(&mut self, tx: Transaction) -> Result<(), StoreError> {
        tx.ops.iter().try_for_each(check_limits)?;
        // The PGs' own books may go past the capacity: refusing a PG its log, info or
        // missing keys (or its creation, or the removals that go with adopting another
        // copy's log) on a full store left copies that differ from what their logs say,
        // PGs that never came to exist, and lost acknowledged writes (the simulator's
        // space faults). It is small and bounded (logs are trimmed), as the room Ceph's full
        // ratios keep for it is. (An unbounded store, every daemon's default, skips
        // the scan of the ops: it is on every write's path.)
        let books_only = self.capacity_bytes != u64::MAX && tx.keeps_books_only();
        let counters_before = self.counters;
        let mut undo = std::mem::take(&mut self.undo.0);
        assert!(
            undo.is_empty(),
            "the undo log is empty between transactions"
        );
        let result = self
            .apply_ops(tx.ops, &mut undo)
            .and_then(|()| match books_only {
                true => Ok(()),
                false => self.check_capacity(counters_before),
            });
        if result.is_err() {
            self.roll_back(&mut undo);
            self.counters = counters_before;
            debug_assert!(self.counters_match());
        }
        for record in undo.drain(..) {
            if let Undo::Change(Change::Data(data)) = record {
                ObjectData::commit(data, &mut self.spares);
            }
        }
        self.undo.0 = undo;
        result
    }

    fn apply_ops(&mut self, ops: Vec<TxOp>, undo: &mut Vec<Undo>) -> Result<(), StoreError> {
        let mut ops = ops.into_iter();
        while let Some(op) = ops.next() {
            let (coll, oid, first) = match split(op) {
                Ok(content) => content,
                Err(op) => {
                    self.apply_op(op, undo)?;
                    continue;
                }
            };
            let more = ops
                .as_slice()
                .iter()
                .take_while(|next| content_target(next) == Some((coll, &oid)))
                .count();
            let rest = ops.by_ref().take(more).map(|op| match split(op) {
                Ok((_, _, op)) => op,
                Err(_) => unreachable!("counted as a content op above"),
            });
            self.apply_run(coll, oid, std::iter::once(first).chain(rest), undo)?;
        }
        Ok(())
    }

    /// Refuses a transaction that leaves the store above its capacity and uses more
    /// than it did before. One that grows nothing (a removal, an overwrite in place)
    /// goes through even on a store already past its capacity (PG metadata may take it
    /// there, or a capacity lowered under what the store holds): refusing it made a
    /// full store refuse the very deletes that free it.
    fn check_capacity(&self, before: Counters) -> Result<(), StoreError> {
        let used_bytes = self.counters.used_bytes();
        if used_bytes <= self.capacity_bytes || used_bytes <= before.used_bytes() {
            return Ok(());
        }
        Err(StoreError::NoSpace {
            needed_bytes: used_bytes.saturating_sub(before.used_bytes()),
            free_bytes: self.capacity_bytes.saturating_sub(before.used_bytes()),
        })
    }

    /// Applies an op that [`split`] gave back: collections, removal and clones.
    fn apply_op(&mut self, op: TxOp, undo: &mut Vec<Undo>) -> Result<(), StoreError> {
        match op {
            TxOp::CreateCollection(coll) => self.create_collection(coll, undo),
            TxOp::RemoveCollection(coll) => self.remove_collection(coll, undo),
            TxOp::Remove(coll, oid) => self.remove_object(coll, oid, undo),
            TxOp::Clone { coll, src, dst } => self.clone_object(coll, src, dst, undo),
            content => unreachable!("content ops are applied in runs: {content:?}"),
        }
    }

    /// Applies a run of ops on one object: looks it up once (creating it if the first op
    /// may), applies the ops in order and recounts its totals once.
    fn apply_run(
        &mut self,
        coll: CollectionId,
        oid: ObjectId,
        mut ops: impl Iterator<Item = ObjectOp>,
        undo: &mut Vec<Undo>,
    ) -> Result<(), StoreError> {
        let collection = self
            .collections
            .get_mut(&coll)
            .ok_or(StoreError::NoSuchCollection(coll))?;
        let name_bytes = oid.name.len();
        // One search whether or not the object exists (a write of a new object used to
        // search twice: a miss, then the insert).
        match collection.objects.entry(ObjectKey::of(&oid)) {
            Entry::Occupied(mut entry) => {
                let object = entry.get_mut();
                let before = Counters::of_object(coll, name_bytes, object);
                undo.push(Undo::Target(coll, oid));
                let spares = &mut self.spares;
                let result = ops.try_for_each(|op| change(object, op, spares, Some(&mut *undo)));
                self.counters.subtract(before);
                self.counters
                    .add(Counters::of_object(coll, name_bytes, object));
                result
            }
            Entry::Vacant(entry) => {
                let mut ops = ops.peekable();
                if !ops.peek().is_some_and(ObjectOp::creates) {
                    return Err(StoreError::NoSuchObject(coll, oid));
                }
                let object = entry.insert(Object::default());
                undo.push(Undo::Object(coll, oid, None));
                let spares = &mut self.spares;
                let result = ops.try_for_each(|op| change(object, op, spares, None));
                self.counters
                    .add(Counters::of_object(coll, name_bytes, object));
                result
            }
        }
    }

    fn create_collection(
        &mut self,
        coll: CollectionId,
        undo: &mut Vec<Undo>,
    ) -> Result<(), StoreError> {
        if self.collections.contains_key(&coll) {
            return Err(StoreError::CollectionExists(coll));
        }
        self.collections.insert(coll, Collection::default());
        undo.push(Undo::Collection(coll, None));
        Ok(())
    }

    fn remove_collection(
        &mut self,
        coll: CollectionId,
        undo: &mut Vec<Undo>,
    ) -> Result<(), StoreError> {
        let collection = self
            .collections
            .remove(&coll)
            .ok_or(StoreError::NoSuchCollection(coll))?;
        for (key, object) in &collection.objects {
            self.counters
                .subtract(Counters::of_object(coll, key.name_bytes(), object));
        }
        undo.push(Undo::Collection(coll, Some(collection)));
        Ok(())
    }

    fn remove_object(
        &mut self,
        coll: CollectionId,
        oid: ObjectId,
        undo: &mut Vec<Undo>,
    ) -> Result<(), StoreError> {
        let collection = self
            .collections
            .get_mut(&coll)
            .ok_or(StoreError::NoSuchCollection(coll))?;
        let Some(object) = collection.objects.remove(&ObjectKey::of(&oid)) else {
            return Err(StoreError::NoSuchObject(coll, oid));
        };
        self.counters
            .subtract(Counters::of_object(coll, oid.name.len(), &object));
        undo.push(Undo::Object(coll, oid, Some(Box::new(object))));
        Ok(())
    }

    /// Replaces `dst` with a copy of `src`; extents and omap values are shared `Bytes`.
    fn clone_object(
        &mut self,
        coll: CollectionId,
        src: ObjectId,
        dst: ObjectId,
        undo: &mut Vec<Undo>,
    ) -> Result<(), StoreError> {
        self.object(coll, &src)?;
        if src == dst {
            return Ok(());
        }
        let copy = self.object(coll, &src)?.clone();
        let collection = self.collections.get_mut(&coll).expect("checked above");
        let name_bytes = dst.name.len();
        self.counters
            .add(Counters::of_object(coll, name_bytes, &copy));
        let previous = collection.objects.insert(ObjectKey::of(&dst), copy);
        if let Some(previous) = &previous {
            self.counters
                .subtract(Counters::of_object(coll, name_bytes, previous));
        }
        undo.push(Undo::Object(coll, dst, previous.map(Box::new)));
        Ok(())
    }

    /// Puts back, newest first, what the ops recorded in `undo` replaced, so that each
    /// record finds the state its op left. Totals are restored by the caller.
    fn roll_back(&mut self, undo: &mut Vec<Undo>) {
        // The changes met so far (newest first) whose target is still to come.
        let mut changes: Vec<Change> = Vec::new();
        while let Some(record) = undo.pop() {
            match record {
                Undo::Change(change) => changes.push(change),
                Undo::Target(coll, oid) => {
                    let object = self.undo_objects(coll).get_mut(&ObjectKey::of(&oid));
                    let object = object.expect("undo: the object exists");
                    for change in changes.drain(..) {
                        undo_change(object, change);
                    }
                }
                Undo::Collection(coll, previous) => {
                    assert!(changes.is_empty(), "undo: changes without a target");
                    match previous {
                        Some(collection) => self.collections.insert(coll, collection),
                        None => self.collections.remove(&coll),
                    };
                }
                Undo::Object(coll, oid, previous) => {
                    assert!(changes.is_empty(), "undo: changes without a target");
                    let objects = self.undo_objects(coll);
                    match previous {
                        Some(object) => objects.insert(ObjectKey::of(&oid), *object),
                        None => objects.remove(&ObjectKey::of(&oid)),
                    };
                }
            }
        }
        assert!(changes.is_empty(), "undo: changes without a target");
    }

    /// The objects of a collection that an undo record relies on existing.
    fn undo_objects(&mut self, coll: CollectionId) -> &mut BTreeMap<ObjectKey, Object> {
        let collection = self.collections.get_mut(&coll);
        &mut collection.expect("undo: the collection exists").objects
    }
}

/// Applies one op to `object`, recording what it replaced in `undo` unless the object
/// was created by this run (`None`: nothing to record).
fn change(
    object: &mut Object,
    op: ObjectOp,
    spares: &mut SpareBuffers,
    undo: Option<&mut Vec<Undo>>,
) -> Result<(), StoreError> {
    let record = |undo: Option<&mut Vec<Undo>>, change: Change| {
        if let Some(undo) = undo {
            undo.push(Undo::Change(change));
        }
    };
    match op {
        ObjectOp::Touch => {}
        ObjectOp::Write { offset, data } => {
            record(undo, Change::Data(object.data.write(offset, data, spares)));
        }
        ObjectOp::Zero { offset, length } => {
            record(undo, Change::Data(object.data.zero(offset, length)));
        }
        ObjectOp::Truncate { size_bytes } => {
            record(undo, Change::Data(object.data.truncate(size_bytes)));
        }
        ObjectOp::SetMtime(mtime_ns) => {
            let previous = std::mem::replace(&mut object.mtime_ns, mtime_ns);
            record(undo, Change::Mtime(previous));
        }
        ObjectOp::SetXattr(name, value) => {
            let (name, previous) = object.set_xattr(name, own_small(value), undo.is_some());
            record(undo, Change::Xattr(name, previous));
        }
        ObjectOp::RmXattr(name) => {
            let Some(previous) = object.put_xattr_removed(&name) else {
                return Err(StoreError::NoSuchXattr(name));
            };
            record(undo, Change::Xattr(name, Some(previous)));
        }
        ObjectOp::OmapSet(entries) => match undo {
            Some(undo) => {
                for (key, value) in entries {
                    let key = own_key(key);
                    let previous = object.put_omap(key.clone(), Some(own_small(value)));
                    undo.push(Undo::Change(Change::OmapEntry(key, previous)));
                }
            }
            None => {
                for (key, value) in entries {
                    object.put_omap(own_key(key), Some(own_small(value)));
                }
            }
        },
        ObjectOp::OmapRm(keys) => match undo {
            Some(undo) => {
                for key in keys {
                    let key = own_key(key);
                    let previous = object.remove_omap(&key);
                    undo.push(Undo::Change(Change::OmapEntry(key, previous)));
                }
            }
            None => {
                for key in keys {
                    object.remove_omap(&OmapKey::copied(&key));
                }
            }
        },
        ObjectOp::OmapClear => {
            record(undo, Change::OmapAll(object.replace_omap(BTreeMap::new())));
        }
    }
    Ok(())
}

/// Reverts one change; changes to an object are reverted newest first.
fn undo_change(object: &mut Object, change: Change) {
    match change {
        Change::Data(data) => object.data.undo(data),
        Change::Mtime(mtime_ns) => object.mtime_ns = mtime_ns,
        Change::Xattr(name, previous) => {
            object.put_xattr(name, previous);
        }
        Change::OmapEntry(key, previous) => {
            object.put_omap(key, previous);
        }
        Change::OmapAll(omap) => {
            object.replace_omap(omap);
        }
    }
}
