//! Applying a [`Transaction`] to a [`MemStore`] atomically.
//!
//! Limits are checked for the whole transaction before anything changes, since they
//! depend only on the ops. Then each op changes the store in place and pushes an
//! [`Undo`] record holding exactly what it replaced (moved out, or a refcounted
//! `Bytes`); if an op fails, or the result would not fit in the capacity, the records
//! are replayed newest first and the totals restored. Undo records never copy object
//! data, xattrs or omaps, so a failing transaction costs what it would have written.

use super::object::{DataUndo, Object};
use super::{Collection, Counters, MemStore};
use crate::{CollectionId, StoreError, Transaction, TxOp};
use bytes::Bytes;
use carmine_types::limits::{
    OBJECT_NAME_BYTES_MAX, OBJECT_SIZE_BYTES_MAX, OMAP_KEY_BYTES_MAX, XATTR_NAME_BYTES_MAX,
    XATTR_VALUE_BYTES_MAX,
};
use carmine_types::ObjectId;
use std::collections::BTreeMap;

/// What one op replaced, to put back if the transaction fails.
enum Undo {
    /// The collection's previous state: absent (`None`) or the removed collection.
    Collection(CollectionId, Option<Collection>),
    /// The object's previous state: absent (`None`) or the removed or replaced object.
    Object(CollectionId, ObjectId, Option<Object>),
    Data(CollectionId, ObjectId, DataUndo),
    Mtime(CollectionId, ObjectId, u64),
    Xattr(CollectionId, ObjectId, String, Option<Bytes>),
    Omap(CollectionId, ObjectId, Vec<(Bytes, Option<Bytes>)>),
    OmapAll(CollectionId, ObjectId, BTreeMap<Bytes, Bytes>),
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
    for oid in op_objects(op) {
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

/// The objects an op names.
fn op_objects(op: &TxOp) -> Vec<&ObjectId> {
    match op {
        TxOp::CreateCollection(_) | TxOp::RemoveCollection(_) => vec![],
        TxOp::Touch(_, oid) | TxOp::Remove(_, oid) | TxOp::OmapClear(_, oid) => vec![oid],
        TxOp::Write { oid, .. }
        | TxOp::Zero { oid, .. }
        | TxOp::Truncate { oid, .. }
        | TxOp::SetMtime { oid, .. }
        | TxOp::SetXattr { oid, .. }
        | TxOp::RmXattr { oid, .. }
        | TxOp::OmapSet { oid, .. }
        | TxOp::OmapRm { oid, .. } => vec![oid],
        TxOp::Clone { src, dst, .. } => vec![src, dst],
    }
}

impl MemStore {
    /// Applies every op of `tx` or, on error, none of them.
    pub(super) fn apply(&mut self, tx: Transaction) -> Result<(), StoreError> {
        tx.ops.iter().try_for_each(check_limits)?;
        let counters_before = self.counters;
        let mut undo = Vec::with_capacity(tx.ops.len());
        let result = tx
            .ops
            .into_iter()
            .try_for_each(|op| self.apply_op(op, &mut undo))
            .and_then(|()| self.check_capacity(counters_before));
        if result.is_err() {
            while let Some(record) = undo.pop() {
                self.undo(record);
            }
            self.counters = counters_before;
            debug_assert!(self.counters_match());
        }
        result
    }

    fn check_capacity(&self, before: Counters) -> Result<(), StoreError> {
        let used_bytes = self.counters.used_bytes();
        if used_bytes <= self.capacity_bytes {
            return Ok(());
        }
        Err(StoreError::NoSpace {
            needed_bytes: used_bytes.saturating_sub(before.used_bytes()),
            free_bytes: self.capacity_bytes.saturating_sub(before.used_bytes()),
        })
    }

    fn apply_op(&mut self, op: TxOp, undo: &mut Vec<Undo>) -> Result<(), StoreError> {
        match op {
            TxOp::CreateCollection(coll) => self.create_collection(coll, undo),
            TxOp::RemoveCollection(coll) => self.remove_collection(coll, undo),
            TxOp::Touch(coll, oid) => self.with_object(coll, oid, true, undo, |_| None),
            TxOp::Write {
                coll,
                oid,
                offset,
                data,
            } => self.change_data(coll, oid, undo, |object| object.data.write(offset, data)),
            TxOp::Zero {
                coll,
                oid,
                offset,
                length,
            } => self.change_data(coll, oid, undo, |object| object.data.zero(offset, length)),
            TxOp::Truncate {
                coll,
                oid,
                size_bytes,
            } => self.change_data(coll, oid, undo, |object| object.data.truncate(size_bytes)),
            TxOp::Remove(coll, oid) => self.remove_object(coll, oid, undo),
            TxOp::SetMtime {
                coll,
                oid,
                mtime_ns,
            } => self.with_object(coll, oid.clone(), true, undo, |object| {
                let previous = std::mem::replace(&mut object.mtime_ns, mtime_ns);
                Some(Undo::Mtime(coll, oid, previous))
            }),
            TxOp::SetXattr {
                coll,
                oid,
                name,
                value,
            } => self.put_xattr(coll, oid, name, Some(value), undo),
            TxOp::RmXattr { coll, oid, name } => self.put_xattr(coll, oid, name, None, undo),
            TxOp::OmapSet { coll, oid, entries } => {
                let entries = entries.into_iter().map(|(k, v)| (k, Some(v))).collect();
                self.put_omap(coll, oid, entries, true, undo)
            }
            TxOp::OmapRm { coll, oid, keys } => {
                let entries = keys.into_iter().map(|key| (key, None)).collect();
                self.put_omap(coll, oid, entries, false, undo)
            }
            TxOp::OmapClear(coll, oid) => self.with_object(coll, oid.clone(), true, undo, |o| {
                Some(Undo::OmapAll(coll, oid, o.replace_omap(BTreeMap::new())))
            }),
            TxOp::Clone { coll, src, dst } => self.clone_object(coll, src, dst, undo),
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
        for (oid, object) in &collection.objects {
            self.counters
                .subtract(Counters::of_object(coll, oid, object));
        }
        undo.push(Undo::Collection(coll, Some(collection)));
        Ok(())
    }

    /// Runs `change` on the object (created first if `create` and it is missing),
    /// keeping the totals up to date and recording the undo record it returns.
    fn with_object(
        &mut self,
        coll: CollectionId,
        oid: ObjectId,
        create: bool,
        undo: &mut Vec<Undo>,
        change: impl FnOnce(&mut Object) -> Option<Undo>,
    ) -> Result<(), StoreError> {
        let collection = self
            .collections
            .get_mut(&coll)
            .ok_or(StoreError::NoSuchCollection(coll))?;
        if !collection.objects.contains_key(&oid) {
            if !create {
                return Err(StoreError::NoSuchObject(coll, oid));
            }
            let object = Object::default();
            self.counters.add(Counters::of_object(coll, &oid, &object));
            collection.objects.insert(oid.clone(), object);
            undo.push(Undo::Object(coll, oid.clone(), None));
        }
        let object = collection
            .objects
            .get_mut(&oid)
            .expect("present or created");
        self.counters
            .subtract(Counters::of_object(coll, &oid, object));
        let record = change(object);
        self.counters.add(Counters::of_object(coll, &oid, object));
        undo.extend(record);
        Ok(())
    }

    fn change_data(
        &mut self,
        coll: CollectionId,
        oid: ObjectId,
        undo: &mut Vec<Undo>,
        change: impl FnOnce(&mut Object) -> DataUndo,
    ) -> Result<(), StoreError> {
        self.with_object(coll, oid.clone(), true, undo, |object| {
            Some(Undo::Data(coll, oid, change(object)))
        })
    }

    fn put_xattr(
        &mut self,
        coll: CollectionId,
        oid: ObjectId,
        name: String,
        value: Option<Bytes>,
        undo: &mut Vec<Undo>,
    ) -> Result<(), StoreError> {
        let removing = value.is_none();
        if removing && !self.object(coll, &oid)?.xattrs().contains_key(&name) {
            return Err(StoreError::NoSuchXattr(name));
        }
        self.with_object(coll, oid.clone(), !removing, undo, |object| {
            let previous = object.put_xattr(name.clone(), value);
            Some(Undo::Xattr(coll, oid, name, previous))
        })
    }

    /// Sets or removes (`None`) omap entries; removal requires the object.
    fn put_omap(
        &mut self,
        coll: CollectionId,
        oid: ObjectId,
        entries: Vec<(Bytes, Option<Bytes>)>,
        create: bool,
        undo: &mut Vec<Undo>,
    ) -> Result<(), StoreError> {
        self.with_object(coll, oid.clone(), create, undo, |object| {
            let previous = entries
                .into_iter()
                .map(|(key, value)| (key.clone(), object.put_omap(key, value)))
                .collect();
            Some(Undo::Omap(coll, oid, previous))
        })
    }

    fn remove_object(
        &mut self,
        coll: CollectionId,
        oid: ObjectId,
        undo: &mut Vec<Undo>,
    ) -> Result<(), StoreError> {
        self.object(coll, &oid)?;
        let collection = self.collections.get_mut(&coll).expect("checked above");
        let object = collection.objects.remove(&oid).expect("checked above");
        self.counters
            .subtract(Counters::of_object(coll, &oid, &object));
        undo.push(Undo::Object(coll, oid, Some(object)));
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
        self.counters.add(Counters::of_object(coll, &dst, &copy));
        let previous = collection.objects.insert(dst.clone(), copy);
        if let Some(previous) = &previous {
            self.counters
                .subtract(Counters::of_object(coll, &dst, previous));
        }
        undo.push(Undo::Object(coll, dst, previous));
        Ok(())
    }

    /// Puts back what one op replaced. Runs newest first, so the state it finds is the
    /// one the op left. Totals are restored by the caller.
    fn undo(&mut self, record: Undo) {
        match record {
            Undo::Collection(coll, Some(collection)) => {
                self.collections.insert(coll, collection);
            }
            Undo::Collection(coll, None) => {
                self.collections.remove(&coll);
            }
            Undo::Object(coll, oid, Some(object)) => {
                self.undo_objects(coll).insert(oid, object);
            }
            Undo::Object(coll, oid, None) => {
                self.undo_objects(coll).remove(&oid);
            }
            Undo::Data(coll, oid, data) => self.undo_object(coll, &oid).data.undo(data),
            Undo::Mtime(coll, oid, mtime_ns) => self.undo_object(coll, &oid).mtime_ns = mtime_ns,
            Undo::Xattr(coll, oid, name, previous) => {
                self.undo_object(coll, &oid).put_xattr(name, previous);
            }
            Undo::Omap(coll, oid, previous) => {
                let object = self.undo_object(coll, &oid);
                for (key, value) in previous.into_iter().rev() {
                    object.put_omap(key, value);
                }
            }
            Undo::OmapAll(coll, oid, omap) => {
                self.undo_object(coll, &oid).replace_omap(omap);
            }
        }
    }

    /// The objects of a collection that an undo record relies on existing.
    fn undo_objects(&mut self, coll: CollectionId) -> &mut BTreeMap<ObjectId, Object> {
        let collection = self.collections.get_mut(&coll);
        &mut collection.expect("undo: the collection exists").objects
    }

    fn undo_object(&mut self, coll: CollectionId, oid: &ObjectId) -> &mut Object {
        let object = self.undo_objects(coll).get_mut(oid);
        object.expect("undo: the object exists")
    }
}
