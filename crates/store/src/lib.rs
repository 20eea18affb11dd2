//! The object store interface: collections (one per PG) of objects, each with byte
//! data, xattrs and an omap, changed only through atomic [`Transaction`]s.
//!
//! A store is owned by exactly one OSD shard (DESIGN.md §2), so it is `&mut self`
//! everywhere and never locked. Submission and durability are separate steps, as in
//! Crimson and BlueStore: [`ObjectStore::submit`] applies a transaction atomically to
//! the store's visible state and returns its sequence number; the transaction is
//! durable once [`ObjectStore::committed_through`] has reached that number. `MemStore`
//! commits at once; persistent stores commit after their log reaches the disk.
//!
//! ```
//! use bytes::Bytes;
//! use carmine_store::{CollectionId, MemStore, ObjectStore, Transaction};
//! use carmine_types::{ObjectId, PgId};
//!
//! let mut store = MemStore::new();
//! let coll = CollectionId::Pg(PgId::new(1, 0));
//! let oid = ObjectId::head("greeting");
//! let mut tx = Transaction::new();
//! tx.create_collection(coll);
//! tx.write(coll, oid.clone(), 0, Bytes::from_static(b"hello"));
//! let seq = store.submit(tx).unwrap();
//! assert!(store.committed_through() >= seq);
//! assert_eq!(&store.read(coll, &oid, 0, 100).unwrap()[..], b"hello");
//! ```

pub mod device;
pub mod logstore;
mod memstore;
mod omap;
mod owned;
pub mod page_pool;
mod transaction;

pub use device::{BlockDevice, FaultConfig, FaultyDevice, FileDevice, MemDevice};
pub use logstore::{LogStore, LogStoreConfig};
pub use memstore::MemStore;
pub use transaction::{Transaction, TxOp};

use bytes::Bytes;
use carmine_types::{ObjectId, PgId};
use std::collections::BTreeMap;

/// A collection: the objects of one PG, or the shard's own metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CollectionId {
    /// The shard's metadata (superblock, maps); not part of any PG.
    Meta,
    Pg(PgId),
}

impl std::fmt::Display for CollectionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CollectionId::Meta => write!(f, "meta"),
            CollectionId::Pg(pg) => write!(f, "{pg}_head"),
        }
    }
}

/// A transaction's position in the store's commit order. Sequence numbers start at 1
/// and increase by one per submitted transaction.
pub type TxSeq = u64;

/// Size and modification time of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ObjectStat {
    pub size_bytes: u64,
    /// Nanoseconds since the Unix epoch, as set by the last [`TxOp::SetMtime`].
    pub mtime_ns: u64,
}

/// Space and object counts, for `carmine status` and `osd df`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreUsage {
    pub object_count: u64,
    /// Logical bytes of object data.
    pub data_bytes: u64,
    /// Bytes of xattrs, omap and metadata.
    pub metadata_bytes: u64,
    /// Capacity of the device; `u64::MAX` for unbounded in-memory stores.
    pub capacity_bytes: u64,
}

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("collection {0} does not exist")]
    NoSuchCollection(CollectionId),
    #[error("collection {0} already exists")]
    CollectionExists(CollectionId),
    #[error("object {1} does not exist in {0}")]
    NoSuchObject(CollectionId, ObjectId),
    #[error("xattr {0:?} does not exist")]
    NoSuchXattr(String),
    #[error("no space left on the store: {needed_bytes} bytes needed, {free_bytes} free")]
    NoSpace { needed_bytes: u64, free_bytes: u64 },
    #[error("object would exceed {limit_bytes} bytes")]
    TooLarge { limit_bytes: u64 },
    #[error("store I/O error: {0}")]
    Io(String),
    #[error("store is corrupt: {0}")]
    Corrupt(String),
}

/// An object store owned by one shard. Transactions are atomic: `submit` either applies
/// every op or, on error, none of them. Reads see every submitted transaction.
pub trait ObjectStore {
    /// Applies `tx` atomically and returns its sequence number. Fails without any
    /// effect if an op refers to a missing collection, would exceed a limit, or the
    /// store is out of space. Ops on a missing object create it (like Ceph's touch),
    /// except `Remove`, `RmXattr`, `OmapRm*` and `Clone`'s source, which require it.
    fn submit(&mut self, tx: Transaction) -> Result<TxSeq, StoreError>;

    /// The highest sequence number that is durable: every transaction up to it survives
    /// a crash.
    fn committed_through(&self) -> TxSeq;

    /// The highest sequence number submitted. Above [`committed_through`]
    /// (ObjectStore::committed_through) while a store with deferred durability holds
    /// transactions that a [`flush`](ObjectStore::flush) would make durable; a store
    /// durable on submit keeps the default.
    fn submitted_through(&self) -> TxSeq {
        self.committed_through()
    }

    /// Lets a store with deferred durability start making submitted transactions
    /// durable (a group commit). Returns once the work is started, not finished.
    fn flush(&mut self) -> Result<(), StoreError> {
        Ok(())
    }

    /// The error that has put the store out of service, if one has: a device write or
    /// sync failed, and the store refuses all further work until it is reopened
    /// (its durable state is intact; what was not synced is not acknowledged). The
    /// OSD stops on it, as Ceph's does on an I/O error, so that its PGs re-peer without
    /// it instead of waiting on a copy that can no longer commit.
    fn failure(&self) -> Option<&StoreError> {
        None
    }

    fn collection_exists(&self, coll: CollectionId) -> bool;
    fn list_collections(&self) -> Vec<CollectionId>;

    fn exists(&self, coll: CollectionId, oid: &ObjectId) -> bool {
        self.stat(coll, oid).is_ok()
    }
    fn stat(&self, coll: CollectionId, oid: &ObjectId) -> Result<ObjectStat, StoreError>;

    /// Reads up to `length` bytes at `offset`; past the end the result is short (empty
    /// at or beyond the size). Holes read as zeros.
    fn read(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
        offset: u64,
        length: u64,
    ) -> Result<Bytes, StoreError>;

    /// Checks that the whole of the object's data can be read back intact: an error
    /// ([`StoreError::Corrupt`] for data that fails its checksum) exactly when a read
    /// of all of it would fail. Deep scrub calls it on every object. By default it
    /// reads the data; a store that can check without assembling it says so here.
    fn verify(&self, coll: CollectionId, oid: &ObjectId) -> Result<(), StoreError> {
        let size = self.stat(coll, oid)?.size_bytes;
        self.read(coll, oid, 0, size).map(drop)
    }

    fn getxattr(&self, coll: CollectionId, oid: &ObjectId, name: &str)
        -> Result<Bytes, StoreError>;
    fn getxattrs(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
    ) -> Result<BTreeMap<String, Bytes>, StoreError>;

    /// The object's [`stat`](ObjectStore::stat) together with the values of the xattrs
    /// `names` (into `values`, as long as `names`; `None` where absent), from one
    /// lookup of the object: the OSD reads an object's info and snapshot set before
    /// every write. Fails as `stat` does.
    fn stat_with_xattrs(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
        names: &[&str],
        values: &mut [Option<Bytes>],
    ) -> Result<ObjectStat, StoreError> {
        assert_eq!(names.len(), values.len(), "one value per xattr name");
        let stat = self.stat(coll, oid)?;
        for (name, value) in names.iter().zip(values.iter_mut()) {
            *value = match self.getxattr(coll, oid, name) {
                Ok(found) => Some(found),
                Err(StoreError::NoSuchXattr(_)) => None,
                Err(other) => return Err(other),
            };
        }
        Ok(stat)
    }

    /// Omap entries with keys strictly after `after` (all when `None`), in key order,
    /// at most `max_entries`.
    fn omap_list(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
        after: Option<&[u8]>,
        max_entries: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError>;

    /// Values of the given omap keys that exist.
    fn omap_get(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
        keys: &[Bytes],
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError>;

    /// Objects of a collection strictly after `after`, in order, at most `max_entries`.
    fn list_objects(
        &self,
        coll: CollectionId,
        after: Option<&ObjectId>,
        max_entries: usize,
    ) -> Result<Vec<ObjectId>, StoreError>;

    fn usage(&self) -> StoreUsage;
}
