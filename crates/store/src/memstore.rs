//! `MemStore`: the in-memory [`ObjectStore`], in the role of Crimson's CyanStore. It is
//! the store for `vstart`, the simulator and OSD tests, and the reference the
//! persistent `LogStore` is checked against, so it follows the trait's contract to
//! the letter and commits every transaction as soon as it is submitted.
//!
//! Transactions apply in place and record what each op replaced; a failing op (or a
//! transaction that would exceed the capacity) rolls the records back newest first.
//! That keeps the cost of atomicity proportional to the transaction: appending one
//! PG-log key to an omap with thousands of entries copies nothing else.
//!
//! Accounting (for [`StoreUsage`] and the capacity): every object costs
//! [`MemStore::OBJECT_OVERHEAD_BYTES`] plus its name in metadata, plus its xattr and omap names,
//! keys and values. Objects in PG collections count in `object_count` and their logical
//! size in `data_bytes`; objects in [`CollectionId::Meta`] are the shard's own metadata,
//! so their size counts in `metadata_bytes`. Capacity is checked against the sum of
//! data and metadata bytes with holes counted in full, as thick provisioning would.

mod apply;
mod extents;
mod key;

pub(crate) use apply::check_limits;
mod object;

use crate::{CollectionId, ObjectStat, ObjectStore, StoreError, StoreUsage, Transaction, TxSeq};
use bytes::Bytes;
use carmine_types::ObjectId;
use key::ObjectKey;
use object::Object;
use std::collections::BTreeMap;
use std::ops::Bound;

/// Metadata bytes every object costs besides its name, xattrs and omap.
const OBJECT_OVERHEAD_BYTES: u64 = 64;

/// An in-memory object store. See the module docs.
#[derive(Debug, Clone)]
pub struct MemStore {
    collections: BTreeMap<CollectionId, Collection>,
    counters: Counters,
    capacity_bytes: u64,
    last_seq: TxSeq,
    undo: apply::UndoLog,
    spares: object::SpareBuffers,
    /// Fault injection: this many more transactions are refused ([`MemStore::refuse_next`]).
    refusals_left: u32,
}

#[derive(Debug, Clone, Default)]
struct Collection {
    objects: BTreeMap<ObjectKey, Object>,
}

/// Running totals behind [`StoreUsage`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counters {
    object_count: u64,
    data_bytes: u64,
    metadata_bytes: u64,
}

impl Counters {
    /// What one object contributes to the totals.
    /// `name_bytes`: the length of the object's name.
    fn of_object(coll: CollectionId, name_bytes: usize, object: &Object) -> Counters {
        let metadata_bytes = OBJECT_OVERHEAD_BYTES + name_bytes as u64 + object.attribute_bytes();
        let size_bytes = object.data.size_bytes();
        match coll {
            CollectionId::Meta => Counters {
                object_count: 0,
                data_bytes: 0,
                metadata_bytes: metadata_bytes + size_bytes,
            },
            CollectionId::Pg(_) => Counters {
                object_count: 1,
                data_bytes: size_bytes,
                metadata_bytes,
            },
        }
    }

    fn add(&mut self, other: Counters) {
        self.object_count += other.object_count;
        self.data_bytes += other.data_bytes;
        self.metadata_bytes += other.metadata_bytes;
    }

    fn subtract(&mut self, other: Counters) {
        self.object_count =
            (self.object_count.checked_sub(other.object_count)).expect("object count underflow");
        self.data_bytes =
            (self.data_bytes.checked_sub(other.data_bytes)).expect("data bytes underflow");
        self.metadata_bytes = (self.metadata_bytes.checked_sub(other.metadata_bytes))
            .expect("metadata bytes underflow");
    }

    fn used_bytes(&self) -> u64 {
        self.data_bytes + self.metadata_bytes
    }
}

impl Default for MemStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemStore {
    /// Metadata bytes every object costs besides its name, xattrs and omap (see the
    /// module docs).
    pub const OBJECT_OVERHEAD_BYTES: u64 = OBJECT_OVERHEAD_BYTES;

    /// An unbounded store (its capacity is `u64::MAX`).
    pub fn new() -> Self {
        Self::with_capacity_bytes(u64::MAX)
    }

    /// A store that refuses, with [`StoreError::NoSpace`], any transaction that would
    /// bring its used bytes (see the module docs) above `capacity_bytes` and above what
    /// they were, except one that only keeps PGs' books: their metadata objects, which
    /// collections exist, removals ([`Transaction::keeps_books_only`]).
    pub fn with_capacity_bytes(capacity_bytes: u64) -> Self {
        Self {
            collections: BTreeMap::new(),
            counters: Counters::default(),
            capacity_bytes,
            last_seq: 0,
            undo: apply::UndoLog::default(),
            spares: object::SpareBuffers::default(),
            refusals_left: 0,
        }
    }

    /// Changes the capacity (a device grown or shrunk: the simulator's space faults).
    /// Data already stored stays; only later transactions are checked against it.
    pub fn set_capacity_bytes(&mut self, capacity_bytes: u64) {
        self.capacity_bytes = capacity_bytes;
    }

    /// Fault injection for tests of what the OSD makes of a refusal it cannot foresee
    /// (a device with no room even for metadata): the next `count` transactions are
    /// refused with [`StoreError::NoSpace`], whatever they hold, and change nothing.
    pub fn refuse_next(&mut self, count: u32) {
        self.refusals_left = count;
    }

    /// Fault injection for tests of detection and repair: from now on, data reads of
    /// `oid` fail with [`StoreError::Corrupt`], as a store that checksums its data
    /// reports media decay, until a transaction removes the object. Metadata (stat,
    /// xattrs, omap) stays readable, as it does in `LogStore`.
    pub fn inject_decay(&mut self, coll: CollectionId, oid: &ObjectId) -> Result<(), StoreError> {
        let object = self
            .collections
            .get_mut(&coll)
            .ok_or(StoreError::NoSuchCollection(coll))?
            .objects
            .get_mut(&ObjectKey::of(oid))
            .ok_or_else(|| StoreError::NoSuchObject(coll, oid.clone()))?;
        object.decayed = true;
        Ok(())
    }

    fn collection(&self, coll: CollectionId) -> Result<&Collection, StoreError> {
        self.collections
            .get(&coll)
            .ok_or(StoreError::NoSuchCollection(coll))
    }

    fn object(&self, coll: CollectionId, oid: &ObjectId) -> Result<&Object, StoreError> {
        self.collection(coll)?
            .objects
            .get(&ObjectKey::of(oid))
            .ok_or_else(|| StoreError::NoSuchObject(coll, oid.clone()))
    }

    /// Recounts the totals from scratch; costly, so only for `debug_assert!`.
    fn counters_match(&self) -> bool {
        let mut counters = Counters::default();
        for (&coll, collection) in &self.collections {
            for (key, object) in &collection.objects {
                counters.add(Counters::of_object(coll, key.name_bytes(), object));
                if !object.data.invariants_hold() {
                    return false;
                }
            }
        }
        counters == self.counters
    }
}

impl ObjectStore for MemStore {
    fn submit(&mut self, tx: Transaction) -> Result<TxSeq, StoreError> {
        if self.refusals_left > 0 {
            self.refusals_left -= 1;
            return Err(StoreError::NoSpace {
                needed_bytes: 0,
                free_bytes: 0,
            });
        }
        self.apply(tx)?;
        self.last_seq += 1;
        debug_assert!(self.counters_match());
        Ok(self.last_seq)
    }

    fn committed_through(&self) -> TxSeq {
        self.last_seq
    }

    fn collection_exists(&self, coll: CollectionId) -> bool {
        self.collections.contains_key(&coll)
    }

    fn list_collections(&self) -> Vec<CollectionId> {
        self.collections.keys().copied().collect()
    }

    fn stat(&self, coll: CollectionId, oid: &ObjectId) -> Result<ObjectStat, StoreError> {
        let object = self.object(coll, oid)?;
        Ok(ObjectStat {
            size_bytes: object.data.size_bytes(),
            mtime_ns: object.mtime_ns,
        })
    }

    fn read(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
        offset: u64,
        length: u64,
    ) -> Result<Bytes, StoreError> {
        let object = self.object(coll, oid)?;
        if object.decayed {
            return Err(StoreError::Corrupt(format!(
                "data of {oid} in {coll} fails its checksum (injected)"
            )));
        }
        Ok(object.data.read(offset, length))
    }

    /// The data lives in this process's memory and has no checksum to fail but the
    /// injected one: checking the flag is the whole verification. Reading the data as
    /// the default does cost a deep-scrub step of one 4 MiB image object 20–48 ms
    /// (assembling its 4 KiB extents into fresh pages), during which the shard served
    /// nothing.
    fn verify(&self, coll: CollectionId, oid: &ObjectId) -> Result<(), StoreError> {
        if self.object(coll, oid)?.decayed {
            return Err(StoreError::Corrupt(format!(
                "data of {oid} in {coll} fails its checksum (injected)"
            )));
        }
        Ok(())
    }

    fn getxattr(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
        name: &str,
    ) -> Result<Bytes, StoreError> {
        let object = self.object(coll, oid)?;
        object
            .xattr(name)
            .cloned()
            .ok_or_else(|| StoreError::NoSuchXattr(name.to_owned()))
    }

    fn getxattrs(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
    ) -> Result<BTreeMap<String, Bytes>, StoreError> {
        Ok(self.object(coll, oid)?.xattr_map())
    }

    fn stat_with_xattrs(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
        names: &[&str],
        values: &mut [Option<Bytes>],
    ) -> Result<ObjectStat, StoreError> {
        assert_eq!(names.len(), values.len(), "one value per xattr name");
        let object = self.object(coll, oid)?;
        for (name, value) in names.iter().zip(values.iter_mut()) {
            *value = object.xattr(name).cloned();
        }
        Ok(ObjectStat {
            size_bytes: object.data.size_bytes(),
            mtime_ns: object.mtime_ns,
        })
    }

    fn omap_list(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
        after: Option<&[u8]>,
        max_entries: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        let omap = self.object(coll, oid)?.omap();
        Ok(crate::omap::range(omap, after, max_entries))
    }

    /// Returns the entries in key order, each key once, whatever the order of `keys`.
    fn omap_get(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
        keys: &[Bytes],
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        let omap = self.object(coll, oid)?.omap();
        Ok(crate::omap::lookup(omap, keys))
    }

    fn list_objects(
        &self,
        coll: CollectionId,
        after: Option<&ObjectId>,
        max_entries: usize,
    ) -> Result<Vec<ObjectId>, StoreError> {
        let objects = &self.collection(coll)?.objects;
        let start = after.map_or(Bound::Unbounded, |oid| Bound::Excluded(ObjectKey::of(oid)));
        Ok(objects
            .range((start, Bound::Unbounded))
            .take(max_entries)
            .map(|(key, _)| key.to_oid())
            .collect())
    }

    fn usage(&self) -> StoreUsage {
        StoreUsage {
            object_count: self.counters.object_count,
            data_bytes: self.counters.data_bytes,
            metadata_bytes: self.counters.metadata_bytes,
            capacity_bytes: self.capacity_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use carmine_types::PgId;

    fn pg() -> CollectionId {
        CollectionId::Pg(PgId::new(1, 0))
    }

    #[test]
    fn failed_transaction_changes_nothing() {
        let mut store = MemStore::new();
        let oid = ObjectId::head("a");
        let mut tx = Transaction::new();
        tx.create_collection(pg());
        tx.write(pg(), oid.clone(), 0, Bytes::from_static(b"hello"));
        tx.omap_set(
            pg(),
            oid.clone(),
            vec![(Bytes::from_static(b"k"), Bytes::new())],
        );
        assert_eq!(store.submit(tx).unwrap(), 1);
        let usage = store.usage();

        let mut tx = Transaction::new();
        tx.write(pg(), oid.clone(), 2, Bytes::from_static(b"XXXXXX"));
        tx.omap_clear(pg(), oid.clone());
        tx.remove(pg(), oid.clone());
        tx.remove_collection(pg());
        tx.remove(pg(), ObjectId::head("missing"));
        assert!(matches!(
            store.submit(tx),
            Err(StoreError::NoSuchCollection(_))
        ));
        assert_eq!(store.committed_through(), 1);
        assert_eq!(store.usage(), usage);
        assert_eq!(&store.read(pg(), &oid, 0, 100).unwrap()[..], b"hello");
        assert_eq!(store.omap_list(pg(), &oid, None, 10).unwrap().len(), 1);
    }

    #[test]
    fn no_space_leaves_the_store_unchanged() {
        let mut store = MemStore::with_capacity_bytes(10_000);
        let oid = ObjectId::head("a");
        let mut tx = Transaction::new();
        tx.create_collection(pg());
        tx.write(pg(), oid.clone(), 0, Bytes::from(vec![1u8; 5000]));
        store.submit(tx).unwrap();
        let usage = store.usage();
        assert_eq!(usage.data_bytes, 5000);
        assert_eq!(usage.metadata_bytes, OBJECT_OVERHEAD_BYTES + 1);

        let mut tx = Transaction::new();
        tx.write(pg(), oid.clone(), 0, Bytes::from(vec![2u8; 100]));
        tx.write(pg(), ObjectId::head("b"), 0, Bytes::from(vec![3u8; 5000]));
        let free_bytes = 10_000 - usage.data_bytes - usage.metadata_bytes;
        assert_eq!(
            store.submit(tx),
            Err(StoreError::NoSpace {
                needed_bytes: 5000 + OBJECT_OVERHEAD_BYTES + 1,
                free_bytes,
            })
        );
        assert_eq!(store.usage(), usage);
        assert!(!store.exists(pg(), &ObjectId::head("b")));
        assert_eq!(&store.read(pg(), &oid, 0, 3).unwrap()[..], &[1, 1, 1]);
    }

    /// A full store still takes a PG's metadata and a new PG (its collection, metadata
    /// object and info): refused, a PG never came to exist on an OSD the map made a
    /// member, and peering waited on it for good (the simulator's remap and space
    /// classes together). Its objects' data is still refused, and what grows nothing
    /// is taken though the store is past its capacity.
    #[test]
    fn a_full_store_takes_pg_metadata_and_new_pgs_but_not_data() {
        let mut store = MemStore::with_capacity_bytes(100);
        let meta = ObjectId::head("");
        let mut tx = Transaction::new();
        tx.create_collection(pg());
        tx.touch(pg(), meta.clone());
        tx.omap_set(
            pg(),
            meta.clone(),
            vec![(Bytes::from_static(b"info"), Bytes::from(vec![0u8; 200]))],
        );
        assert!(tx.keeps_books_only());
        store.submit(tx).unwrap();
        assert!(store.usage().metadata_bytes > 100);

        let mut tx = Transaction::new();
        tx.write(pg(), ObjectId::head("a"), 0, Bytes::from_static(b"x"));
        assert!(!tx.keeps_books_only());
        assert!(matches!(store.submit(tx), Err(StoreError::NoSpace { .. })));

        // Past its capacity, the store still takes what grows nothing.
        let mut tx = Transaction::new();
        tx.omap_rm(pg(), meta.clone(), vec![Bytes::from_static(b"nothing")]);
        tx.touch(pg(), ObjectId::head("a"));
        tx.remove(pg(), ObjectId::head("a"));
        assert!(!tx.keeps_books_only());
        store.submit(tx).unwrap();

        let mut tx = Transaction::new();
        tx.remove_collection(pg());
        assert!(tx.keeps_books_only());
        store.submit(tx).unwrap();
        assert_eq!(store.usage().metadata_bytes, 0);
    }

    #[test]
    fn injected_decay_fails_data_reads_and_verify_until_the_object_is_removed() {
        let mut store = MemStore::new();
        let oid = ObjectId::head("a");
        let mut tx = Transaction::new();
        tx.create_collection(pg());
        tx.write(pg(), oid.clone(), 0, Bytes::from_static(b"hello"));
        store.submit(tx).unwrap();
        assert_eq!(store.verify(pg(), &oid), Ok(()));
        store.inject_decay(pg(), &oid).unwrap();
        assert!(matches!(
            store.read(pg(), &oid, 0, 5),
            Err(StoreError::Corrupt(_))
        ));
        // Deep scrub's check agrees with a read, without reading.
        assert!(matches!(
            store.verify(pg(), &oid),
            Err(StoreError::Corrupt(_))
        ));
        assert!(matches!(
            store.verify(pg(), &ObjectId::head("missing")),
            Err(StoreError::NoSuchObject(..))
        ));
        assert_eq!(store.stat(pg(), &oid).unwrap().size_bytes, 5);
        // A failed transaction that removed it restores the decayed object.
        let mut tx = Transaction::new();
        tx.remove(pg(), oid.clone());
        tx.remove(pg(), ObjectId::head("missing"));
        assert!(store.submit(tx).is_err());
        assert!(store.read(pg(), &oid, 0, 5).is_err());
        let mut tx = Transaction::new();
        tx.remove(pg(), oid.clone());
        tx.write(pg(), oid.clone(), 0, Bytes::from_static(b"fresh"));
        store.submit(tx).unwrap();
        assert_eq!(&store.read(pg(), &oid, 0, 5).unwrap()[..], b"fresh");
        assert!(store
            .inject_decay(pg(), &ObjectId::head("missing"))
            .is_err());
    }
}
