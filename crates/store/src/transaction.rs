//! A transaction: an ordered list of ops applied atomically by [`ObjectStore::submit`].
//!
//! Transactions travel from the primary to replica OSDs in the versioned binary form
//! described in [`codec`], which also implements `Encode`/`Decode` for
//! [`CollectionId`].
//!
//! [`ObjectStore::submit`]: crate::ObjectStore::submit

mod codec;

use crate::CollectionId;
use bytes::Bytes;
use carmine_types::ObjectId;

/// One change inside a [`Transaction`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxOp {
    CreateCollection(CollectionId),
    /// Removes a collection and every object in it.
    RemoveCollection(CollectionId),
    /// Creates the object empty if it does not exist.
    Touch(CollectionId, ObjectId),
    /// Writes `data` at `offset`, extending the object (holes read as zeros).
    Write {
        coll: CollectionId,
        oid: ObjectId,
        offset: u64,
        data: Bytes,
    },
    /// Zeroes `length` bytes at `offset` without changing the size beyond `offset+length`
    /// (it extends the object like a write of zeros would).
    Zero {
        coll: CollectionId,
        oid: ObjectId,
        offset: u64,
        length: u64,
    },
    /// Sets the size: shrinks (dropping data) or extends with zeros.
    Truncate {
        coll: CollectionId,
        oid: ObjectId,
        size_bytes: u64,
    },
    /// Removes the object with its data, xattrs and omap. The object must exist.
    Remove(CollectionId, ObjectId),
    SetMtime {
        coll: CollectionId,
        oid: ObjectId,
        mtime_ns: u64,
    },
    SetXattr {
        coll: CollectionId,
        oid: ObjectId,
        name: String,
        value: Bytes,
    },
    /// The xattr must exist.
    RmXattr {
        coll: CollectionId,
        oid: ObjectId,
        name: String,
    },
    OmapSet {
        coll: CollectionId,
        oid: ObjectId,
        entries: Vec<(Bytes, Bytes)>,
    },
    /// Removes the given keys; missing keys are ignored.
    OmapRm {
        coll: CollectionId,
        oid: ObjectId,
        keys: Vec<Bytes>,
    },
    OmapClear(CollectionId, ObjectId),
    /// Copies `src` (data, xattrs, omap, mtime) to `dst`, replacing `dst`.
    Clone {
        coll: CollectionId,
        src: ObjectId,
        dst: ObjectId,
    },
}

impl TxOp {
    /// The object the op changes (a clone's destination), if any.
    pub fn object(&self) -> Option<&ObjectId> {
        self.target().map(|(_, oid)| oid)
    }

    /// The collection and object the op changes (a clone's destination), if any.
    pub(crate) fn target(&self) -> Option<(CollectionId, &ObjectId)> {
        match self {
            TxOp::CreateCollection(_) | TxOp::RemoveCollection(_) => None,
            TxOp::Touch(coll, oid) | TxOp::Remove(coll, oid) | TxOp::OmapClear(coll, oid) => {
                Some((*coll, oid))
            }
            TxOp::Write { coll, oid, .. }
            | TxOp::Zero { coll, oid, .. }
            | TxOp::Truncate { coll, oid, .. }
            | TxOp::SetMtime { coll, oid, .. }
            | TxOp::SetXattr { coll, oid, .. }
            | TxOp::RmXattr { coll, oid, .. }
            | TxOp::OmapSet { coll, oid, .. }
            | TxOp::OmapRm { coll, oid, .. } => Some((*coll, oid)),
            TxOp::Clone { coll, dst, .. } => Some((*coll, dst)),
        }
    }
}

impl Transaction {
    /// Whether the transaction only keeps PGs' books: it changes only PGs' metadata
    /// objects (the objects with an empty name: a PG's log, info and missing keys),
    /// creates or removes collections (a PG created on this OSD, or deleted), and
    /// removes objects (a copy adopting another's log drops what that log does not
    /// hold). A full store must still take these: refusing one leaves a PG whose copy
    /// differs from what its log says, or one that never comes to exist.
    pub fn keeps_books_only(&self) -> bool {
        (self.ops.iter()).all(|op| match op {
            TxOp::CreateCollection(_) | TxOp::RemoveCollection(_) | TxOp::Remove(..) => true,
            _ => op.object().is_some_and(|oid| oid.name.is_empty()),
        })
    }
}

/// An ordered, atomic list of [`TxOp`]s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transaction {
    pub ops: Vec<TxOp>,
}

impl Transaction {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Bytes of object data the transaction carries (for accounting and limits).
    pub fn data_bytes(&self) -> u64 {
        self.ops
            .iter()
            .map(|op| match op {
                TxOp::Write { data, .. } => data.len() as u64,
                _ => 0,
            })
            .sum()
    }

    pub fn push(&mut self, op: TxOp) {
        self.ops.push(op);
    }

    pub fn append(&mut self, other: Transaction) {
        self.ops.extend(other.ops);
    }

    pub fn create_collection(&mut self, coll: CollectionId) {
        self.push(TxOp::CreateCollection(coll));
    }

    pub fn remove_collection(&mut self, coll: CollectionId) {
        self.push(TxOp::RemoveCollection(coll));
    }

    pub fn touch(&mut self, coll: CollectionId, oid: ObjectId) {
        self.push(TxOp::Touch(coll, oid));
    }

    pub fn write(&mut self, coll: CollectionId, oid: ObjectId, offset: u64, data: Bytes) {
        self.push(TxOp::Write {
            coll,
            oid,
            offset,
            data,
        });
    }

    pub fn zero(&mut self, coll: CollectionId, oid: ObjectId, offset: u64, length: u64) {
        self.push(TxOp::Zero {
            coll,
            oid,
            offset,
            length,
        });
    }

    pub fn truncate(&mut self, coll: CollectionId, oid: ObjectId, size_bytes: u64) {
        self.push(TxOp::Truncate {
            coll,
            oid,
            size_bytes,
        });
    }

    pub fn remove(&mut self, coll: CollectionId, oid: ObjectId) {
        self.push(TxOp::Remove(coll, oid));
    }

    pub fn set_mtime(&mut self, coll: CollectionId, oid: ObjectId, mtime_ns: u64) {
        self.push(TxOp::SetMtime {
            coll,
            oid,
            mtime_ns,
        });
    }

    pub fn set_xattr(&mut self, coll: CollectionId, oid: ObjectId, name: String, value: Bytes) {
        self.push(TxOp::SetXattr {
            coll,
            oid,
            name,
            value,
        });
    }

    pub fn rm_xattr(&mut self, coll: CollectionId, oid: ObjectId, name: String) {
        self.push(TxOp::RmXattr { coll, oid, name });
    }

    pub fn omap_set(&mut self, coll: CollectionId, oid: ObjectId, entries: Vec<(Bytes, Bytes)>) {
        self.push(TxOp::OmapSet { coll, oid, entries });
    }

    pub fn omap_rm(&mut self, coll: CollectionId, oid: ObjectId, keys: Vec<Bytes>) {
        self.push(TxOp::OmapRm { coll, oid, keys });
    }

    pub fn omap_clear(&mut self, coll: CollectionId, oid: ObjectId) {
        self.push(TxOp::OmapClear(coll, oid));
    }

    pub fn clone_object(&mut self, coll: CollectionId, src: ObjectId, dst: ObjectId) {
        self.push(TxOp::Clone { coll, src, dst });
    }
}
