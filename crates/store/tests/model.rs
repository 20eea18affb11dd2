//! Model-based test of `MemStore`, in the spirit of redb's fuzzer: random sequences of
//! transactions (including ones that must fail) go to the store and to a reference
//! model made of plain maps and `Vec<u8>`s; after every step every read must agree.
//! The model applies a transaction to a full copy of itself, so it is atomic by
//! construction and any partial effect of a failed transaction in the store shows up.

use bytes::Bytes;
use carmine_store::{
    CollectionId, FaultConfig, FaultyDevice, LogStore, LogStoreConfig, MemStore, ObjectStat,
    ObjectStore, StoreError, StoreUsage, Transaction, TxOp,
};
use carmine_types::limits::{
    OBJECT_NAME_BYTES_MAX, OBJECT_SIZE_BYTES_MAX, OMAP_KEY_BYTES_MAX, XATTR_NAME_BYTES_MAX,
    XATTR_VALUE_BYTES_MAX,
};
use carmine_types::{ObjectId, PgId, SnapId};
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default)]
struct ModelObject {
    data: Vec<u8>,
    mtime_ns: u64,
    xattrs: BTreeMap<String, Bytes>,
    omap: BTreeMap<Bytes, Bytes>,
}

type Collections = BTreeMap<CollectionId, BTreeMap<ObjectId, ModelObject>>;

#[derive(Debug, Clone)]
struct Model {
    collections: Collections,
    capacity_bytes: u64,
    seq: u64,
}

fn too_large(length: u64, limit: u64) -> Result<(), StoreError> {
    if length > limit {
        return Err(StoreError::TooLarge { limit_bytes: limit });
    }
    Ok(())
}

fn extent_end(offset: u64, length: u64) -> Result<usize, StoreError> {
    let end = offset.saturating_add(length);
    too_large(end, OBJECT_SIZE_BYTES_MAX)?;
    Ok(end as usize)
}

/// The object, created empty when `create` and missing.
fn object_mut<'a>(
    collections: &'a mut Collections,
    coll: CollectionId,
    oid: &ObjectId,
    create: bool,
) -> Result<&'a mut ModelObject, StoreError> {
    let objects = collections
        .get_mut(&coll)
        .ok_or(StoreError::NoSuchCollection(coll))?;
    if create {
        return Ok(objects.entry(oid.clone()).or_default());
    }
    objects
        .get_mut(oid)
        .ok_or_else(|| StoreError::NoSuchObject(coll, oid.clone()))
}

fn check_limits(op: &TxOp) -> Result<(), StoreError> {
    let name_max = OBJECT_NAME_BYTES_MAX as u64;
    match op {
        TxOp::Touch(_, oid) | TxOp::Remove(_, oid) | TxOp::OmapClear(_, oid) => {
            too_large(oid.name.len() as u64, name_max)
        }
        TxOp::Write {
            oid, offset, data, ..
        } => {
            too_large(oid.name.len() as u64, name_max)?;
            extent_end(*offset, data.len() as u64).map(drop)
        }
        TxOp::Zero {
            oid,
            offset,
            length,
            ..
        } => {
            too_large(oid.name.len() as u64, name_max)?;
            extent_end(*offset, *length).map(drop)
        }
        TxOp::Truncate {
            oid, size_bytes, ..
        } => {
            too_large(oid.name.len() as u64, name_max)?;
            extent_end(*size_bytes, 0).map(drop)
        }
        TxOp::SetMtime { oid, .. } => too_large(oid.name.len() as u64, name_max),
        TxOp::SetXattr {
            oid, name, value, ..
        } => {
            too_large(oid.name.len() as u64, name_max)?;
            too_large(name.len() as u64, XATTR_NAME_BYTES_MAX as u64)?;
            too_large(value.len() as u64, XATTR_VALUE_BYTES_MAX as u64)
        }
        TxOp::RmXattr { oid, name, .. } => {
            too_large(oid.name.len() as u64, name_max)?;
            too_large(name.len() as u64, XATTR_NAME_BYTES_MAX as u64)
        }
        TxOp::OmapSet { oid, entries, .. } => {
            too_large(oid.name.len() as u64, name_max)?;
            let mut keys = entries.iter().map(|(key, _)| key);
            keys.try_for_each(|key| too_large(key.len() as u64, OMAP_KEY_BYTES_MAX as u64))
        }
        TxOp::OmapRm { oid, keys, .. } => {
            too_large(oid.name.len() as u64, name_max)?;
            keys.iter()
                .try_for_each(|key| too_large(key.len() as u64, OMAP_KEY_BYTES_MAX as u64))
        }
        TxOp::Clone { src, dst, .. } => {
            too_large(src.name.len() as u64, name_max)?;
            too_large(dst.name.len() as u64, name_max)
        }
        TxOp::CreateCollection(_) | TxOp::RemoveCollection(_) => Ok(()),
    }
}

fn apply_data_op(object: &mut ModelObject, op: &TxOp) {
    match op {
        TxOp::Write { offset, data, .. } if !data.is_empty() => {
            let start = *offset as usize;
            let end = start + data.len();
            if object.data.len() < end {
                object.data.resize(end, 0);
            }
            object.data[start..end].copy_from_slice(data);
        }
        TxOp::Zero { offset, length, .. } if *length > 0 => {
            let start = *offset as usize;
            let end = start + *length as usize;
            if object.data.len() < end {
                object.data.resize(end, 0);
            }
            object.data[start..end].fill(0);
        }
        TxOp::Truncate { size_bytes, .. } => object.data.resize(*size_bytes as usize, 0),
        _ => {}
    }
}

fn apply_op(collections: &mut Collections, op: &TxOp) -> Result<(), StoreError> {
    match op {
        TxOp::CreateCollection(coll) => {
            if collections.contains_key(coll) {
                return Err(StoreError::CollectionExists(*coll));
            }
            collections.insert(*coll, BTreeMap::new());
        }
        TxOp::RemoveCollection(coll) => {
            collections
                .remove(coll)
                .ok_or(StoreError::NoSuchCollection(*coll))?;
        }
        TxOp::Touch(coll, oid) => drop(object_mut(collections, *coll, oid, true)?),
        TxOp::Write { coll, oid, .. }
        | TxOp::Zero { coll, oid, .. }
        | TxOp::Truncate { coll, oid, .. } => {
            apply_data_op(object_mut(collections, *coll, oid, true)?, op)
        }
        TxOp::Remove(coll, oid) => {
            object_mut(collections, *coll, oid, false)?;
            collections.get_mut(coll).unwrap().remove(oid);
        }
        TxOp::SetMtime {
            coll,
            oid,
            mtime_ns,
        } => object_mut(collections, *coll, oid, true)?.mtime_ns = *mtime_ns,
        TxOp::SetXattr {
            coll,
            oid,
            name,
            value,
        } => {
            let object = object_mut(collections, *coll, oid, true)?;
            object.xattrs.insert(name.clone(), value.clone());
        }
        TxOp::RmXattr { coll, oid, name } => {
            let object = object_mut(collections, *coll, oid, false)?;
            object
                .xattrs
                .remove(name)
                .ok_or_else(|| StoreError::NoSuchXattr(name.clone()))?;
        }
        _ => apply_omap_or_clone(collections, op)?,
    }
    Ok(())
}

fn apply_omap_or_clone(collections: &mut Collections, op: &TxOp) -> Result<(), StoreError> {
    match op {
        TxOp::OmapSet { coll, oid, entries } => {
            let object = object_mut(collections, *coll, oid, true)?;
            object.omap.extend(entries.iter().cloned());
        }
        TxOp::OmapRm { coll, oid, keys } => {
            let object = object_mut(collections, *coll, oid, false)?;
            for key in keys {
                object.omap.remove(key);
            }
        }
        TxOp::OmapClear(coll, oid) => object_mut(collections, *coll, oid, true)?.omap.clear(),
        TxOp::Clone { coll, src, dst } => {
            let copy = object_mut(collections, *coll, src, false)?.clone();
            collections.get_mut(coll).unwrap().insert(dst.clone(), copy);
        }
        other => unreachable!("{other:?}"),
    }
    Ok(())
}

fn usage_of(collections: &Collections, capacity_bytes: u64) -> StoreUsage {
    let mut usage = StoreUsage {
        capacity_bytes,
        ..StoreUsage::default()
    };
    for (coll, objects) in collections {
        for (oid, object) in objects {
            let xattr_bytes: usize = object.xattrs.iter().map(|(k, v)| k.len() + v.len()).sum();
            let omap_bytes: usize = object.omap.iter().map(|(k, v)| k.len() + v.len()).sum();
            usage.metadata_bytes += MemStore::OBJECT_OVERHEAD_BYTES
                + (oid.name.len() + xattr_bytes + omap_bytes) as u64;
            let size_bytes = object.data.len() as u64;
            if *coll == CollectionId::Meta {
                usage.metadata_bytes += size_bytes;
            } else {
                usage.object_count += 1;
                usage.data_bytes += size_bytes;
            }
        }
    }
    usage
}

fn used_bytes(usage: &StoreUsage) -> u64 {
    usage.data_bytes + usage.metadata_bytes
}

impl Model {
    fn submit(&mut self, tx: &Transaction) -> Result<u64, StoreError> {
        tx.ops.iter().try_for_each(check_limits)?;
        let mut next = self.collections.clone();
        for op in &tx.ops {
            apply_op(&mut next, op)?;
        }
        let before = used_bytes(&self.usage());
        let after = used_bytes(&usage_of(&next, self.capacity_bytes));
        // A PG's books may go past the capacity (see `Transaction::keeps_books_only`), and
        // what grows nothing goes through on a store past it.
        if after > self.capacity_bytes && after > before && !tx.keeps_books_only() {
            return Err(StoreError::NoSpace {
                needed_bytes: after.saturating_sub(before),
                free_bytes: self.capacity_bytes.saturating_sub(before),
            });
        }
        self.collections = next;
        self.seq += 1;
        Ok(self.seq)
    }

    fn usage(&self) -> StoreUsage {
        usage_of(&self.collections, self.capacity_bytes)
    }

    fn object(&self, coll: CollectionId, oid: &ObjectId) -> Result<&ModelObject, StoreError> {
        let objects = (self.collections.get(&coll)).ok_or(StoreError::NoSuchCollection(coll))?;
        objects
            .get(oid)
            .ok_or_else(|| StoreError::NoSuchObject(coll, oid.clone()))
    }

    fn read(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
        offset: u64,
        length: u64,
    ) -> Result<Bytes, StoreError> {
        let data = &self.object(coll, oid)?.data;
        let size = data.len() as u64;
        let end = offset.saturating_add(length).min(size);
        if offset >= end {
            return Ok(Bytes::new());
        }
        Ok(Bytes::copy_from_slice(&data[offset as usize..end as usize]))
    }
}

// ---- Strategies: small pools of names so ops collide often. ----

const COLLECTIONS: [CollectionId; 4] = [
    CollectionId::Meta,
    CollectionId::Pg(PgId {
        pool: carmine_types::PoolId(1),
        seed: 0,
    }),
    CollectionId::Pg(PgId {
        pool: carmine_types::PoolId(1),
        seed: 1,
    }),
    CollectionId::Pg(PgId {
        pool: carmine_types::PoolId(2),
        seed: 0,
    }),
];
const XATTR_NAMES: [&str; 3] = ["_", "snapset", "user.x"];
const OMAP_KEYS: [&[u8]; 5] = [b"", b"k0", b"k1", b"k2", b"pglog_0001"];

fn object_ids() -> Vec<ObjectId> {
    vec![
        ObjectId::head("a"),
        ObjectId {
            name: "a".into(),
            snap: SnapId(1),
        },
        ObjectId::head("b"),
        ObjectId::head("rbd_data.0000000000000001"),
        ObjectId::head(""), // a PG's metadata object
    ]
}

fn coll() -> impl Strategy<Value = CollectionId> {
    prop_oneof![
        12 => Just(COLLECTIONS[1]),
        3 => Just(COLLECTIONS[0]),
        1 => proptest::sample::select(COLLECTIONS.to_vec()),
    ]
}

fn oid() -> impl Strategy<Value = ObjectId> {
    prop_oneof![
        200 => proptest::sample::select(object_ids()),
        1 => Just(ObjectId::head("n".repeat(OBJECT_NAME_BYTES_MAX + 1))),
    ]
}

fn bytes(max: usize) -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
}

fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => 0u64..512,
        3 => 0u64..8192,
        1 => 0u64..65536,
        1 => Just(OBJECT_SIZE_BYTES_MAX),
    ]
}

fn write_data() -> impl Strategy<Value = Bytes> {
    prop_oneof![6 => bytes(64), 1 => bytes(5000)]
}

fn xattr_name() -> impl Strategy<Value = String> {
    prop_oneof![
        100 => proptest::sample::select(XATTR_NAMES.to_vec()).prop_map(String::from),
        1 => Just("x".repeat(XATTR_NAME_BYTES_MAX + 1)),
    ]
}

fn omap_key() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        100 => proptest::sample::select(OMAP_KEYS.to_vec()).prop_map(Bytes::from_static),
        1 => Just(Bytes::from(vec![b'k'; OMAP_KEY_BYTES_MAX + 1])),
    ]
}

fn data_op() -> impl Strategy<Value = TxOp> {
    prop_oneof![
        8 => (coll(), oid(), offset(), write_data())
            .prop_map(|(coll, oid, offset, data)| TxOp::Write { coll, oid, offset, data }),
        2 => (coll(), oid(), offset(), prop_oneof![50 => 0u64..10_000, 1 => Just(u64::MAX)])
            .prop_map(|(coll, oid, offset, length)| TxOp::Zero { coll, oid, offset, length }),
        2 => (coll(), oid(), prop_oneof![50 => 0u64..70_000, 1 => Just(OBJECT_SIZE_BYTES_MAX + 1)])
            .prop_map(|(coll, oid, size_bytes)| TxOp::Truncate { coll, oid, size_bytes }),
        2 => (coll(), oid()).prop_map(|(coll, oid)| TxOp::Touch(coll, oid)),
        2 => (coll(), oid()).prop_map(|(coll, oid)| TxOp::Remove(coll, oid)),
        1 => (coll(), oid(), any::<u64>())
            .prop_map(|(coll, oid, mtime_ns)| TxOp::SetMtime { coll, oid, mtime_ns }),
        2 => (coll(), oid(), oid()).prop_map(|(coll, src, dst)| TxOp::Clone { coll, src, dst }),
        2 => coll().prop_map(TxOp::CreateCollection),
        1 => coll().prop_map(TxOp::RemoveCollection),
    ]
}

fn attribute_op() -> impl Strategy<Value = TxOp> {
    let value =
        prop_oneof![100 => bytes(16), 1 => Just(Bytes::from(vec![0; XATTR_VALUE_BYTES_MAX + 1]))];
    prop_oneof![
        3 => (coll(), oid(), xattr_name(), value)
            .prop_map(|(coll, oid, name, value)| TxOp::SetXattr { coll, oid, name, value }),
        2 => (coll(), oid(), xattr_name())
            .prop_map(|(coll, oid, name)| TxOp::RmXattr { coll, oid, name }),
        3 => (coll(), oid(), proptest::collection::vec((omap_key(), bytes(16)), 0..4))
            .prop_map(|(coll, oid, entries)| TxOp::OmapSet { coll, oid, entries }),
        2 => (coll(), oid(), proptest::collection::vec(omap_key(), 0..4))
            .prop_map(|(coll, oid, keys)| TxOp::OmapRm { coll, oid, keys }),
        1 => (coll(), oid()).prop_map(|(coll, oid)| TxOp::OmapClear(coll, oid)),
    ]
}

fn transaction() -> impl Strategy<Value = Transaction> {
    let op = prop_oneof![3 => data_op(), 2 => attribute_op()];
    proptest::collection::vec(op, 0..6).prop_map(|ops| Transaction { ops })
}

/// A transaction and the read ranges to compare after it.
fn step() -> impl Strategy<Value = (Transaction, Vec<(u64, u64)>)> {
    let range = (
        offset(),
        prop_oneof![4 => 0u64..10_000, 1 => Just(u64::MAX)],
    );
    (transaction(), proptest::collection::vec(range, 1..4))
}

// ---- Comparison of every read. ----

fn check_object(
    store: &dyn ObjectStore,
    model: &Model,
    coll: CollectionId,
    oid: &ObjectId,
    ranges: &[(u64, u64)],
) {
    let expected_stat = model.object(coll, oid).map(|object| ObjectStat {
        size_bytes: object.data.len() as u64,
        mtime_ns: object.mtime_ns,
    });
    assert_eq!(store.stat(coll, oid), expected_stat, "stat {coll} {oid}");
    assert_eq!(store.exists(coll, oid), expected_stat.is_ok());
    let size = expected_stat.as_ref().map_or(0, |stat| stat.size_bytes);
    let all = [(0, u64::MAX), (size.saturating_sub(3), 10), (size, 1)];
    for &(offset, length) in ranges.iter().chain(&all) {
        assert_eq!(
            store.read(coll, oid, offset, length),
            model.read(coll, oid, offset, length),
            "read {coll} {oid} {offset}+{length}"
        );
    }
    let mut values = vec![None; XATTR_NAMES.len()];
    let combined = store.stat_with_xattrs(coll, oid, &XATTR_NAMES, &mut values);
    assert_eq!(combined, expected_stat, "stat_with_xattrs {coll} {oid}");
    let Ok(object) = model.object(coll, oid) else {
        assert!(store.getxattrs(coll, oid).is_err());
        assert!(store.omap_list(coll, oid, None, 10).is_err());
        return;
    };
    assert_eq!(store.getxattrs(coll, oid).unwrap(), object.xattrs);
    for (name, value) in XATTR_NAMES.iter().zip(&values) {
        assert_eq!(value.as_ref(), object.xattrs.get(*name), "xattr {name}");
    }
    for name in XATTR_NAMES {
        let expected =
            (object.xattrs.get(name).cloned()).ok_or_else(|| StoreError::NoSuchXattr(name.into()));
        assert_eq!(store.getxattr(coll, oid, name), expected);
    }
    check_omap(store, object, coll, oid);
}

fn check_omap(store: &dyn ObjectStore, object: &ModelObject, coll: CollectionId, oid: &ObjectId) {
    let expected: Vec<(Bytes, Bytes)> = object.omap.clone().into_iter().collect();
    for page_entries in [1, 2, 100] {
        let mut listed = Vec::new();
        loop {
            let after = listed.last().map(|(key, _): &(Bytes, Bytes)| key.clone());
            let page = store
                .omap_list(coll, oid, after.as_deref(), page_entries)
                .unwrap();
            assert!(page.len() <= page_entries);
            let done = page.len() < page_entries;
            listed.extend(page);
            if done {
                break;
            }
        }
        assert_eq!(listed, expected);
    }
    let keys: Vec<Bytes> = OMAP_KEYS
        .iter()
        .rev()
        .map(|key| Bytes::from_static(key))
        .collect();
    assert_eq!(store.omap_get(coll, oid, &keys).unwrap(), expected);
}

fn check_listing(store: &dyn ObjectStore, model: &Model, coll: CollectionId) {
    let Some(objects) = model.collections.get(&coll) else {
        assert!(!store.collection_exists(coll));
        assert_eq!(
            store.list_objects(coll, None, 10),
            Err(StoreError::NoSuchCollection(coll))
        );
        return;
    };
    assert!(store.collection_exists(coll));
    let expected: Vec<ObjectId> = objects.keys().cloned().collect();
    for page_entries in [1, 3] {
        let mut listed: Vec<ObjectId> = Vec::new();
        loop {
            let page = store
                .list_objects(coll, listed.last(), page_entries)
                .unwrap();
            let done = page.len() < page_entries;
            listed.extend(page);
            if done {
                break;
            }
        }
        assert_eq!(listed, expected);
    }
}

fn check_all(store: &MemStore, model: &Model, ranges: &[(u64, u64)]) {
    assert_eq!(store.committed_through(), model.seq);
    assert_eq!(store.usage(), model.usage());
    check_contents(store, model, ranges);
}

/// Everything but the sequence and the capacity, which differ between stores.
fn check_contents(store: &dyn ObjectStore, model: &Model, ranges: &[(u64, u64)]) {
    let usage = StoreUsage {
        capacity_bytes: model.capacity_bytes,
        ..store.usage()
    };
    assert_eq!(usage, model.usage());
    let collections: Vec<CollectionId> = model.collections.keys().copied().collect();
    assert_eq!(store.list_collections(), collections);
    for coll in COLLECTIONS {
        check_listing(store, model, coll);
        for oid in object_ids() {
            check_object(store, model, coll, &oid, ranges);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn memstore_matches_model(
        capacity_bytes in prop_oneof![2 => Just(u64::MAX), 1 => 500u64..20_000],
        steps in proptest::collection::vec(step(), 1..25),
    ) {
        let mut store = MemStore::with_capacity_bytes(capacity_bytes);
        let mut model = Model { collections: BTreeMap::new(), capacity_bytes, seq: 0 };
        // Most ops go to these two collections; the others come and go.
        let mut setup = Transaction::new();
        setup.create_collection(COLLECTIONS[0]);
        setup.create_collection(COLLECTIONS[1]);
        prop_assert_eq!(store.submit(setup.clone()), model.submit(&setup));
        for (tx, ranges) in steps {
            let expected = model.submit(&tx);
            prop_assert_eq!(store.submit(tx.clone()), expected, "tx {:?}", tx);
            check_all(&store, &model, &ranges);
        }
    }
}

/// What happens to the LogStore after a step.
fn logstore_action() -> impl Strategy<Value = u8> {
    prop_oneof![4 => Just(0u8), 4 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8)]
}

fn open_logstore(device: FaultyDevice) -> LogStore<FaultyDevice> {
    LogStore::open(device, LogStoreConfig::small()).expect("open")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The same sequences against LogStore on an in-memory device, with flushes,
    /// clean reopens (checkpoint) and crashes after a flush (replay from the log).
    #[test]
    fn logstore_matches_model(
        steps in proptest::collection::vec((step(), logstore_action()), 1..25),
    ) {
        let device = FaultyDevice::in_memory(4 << 20, FaultConfig::default());
        let mut store = open_logstore(device);
        let mut model = Model { collections: BTreeMap::new(), capacity_bytes: u64::MAX, seq: 0 };
        let mut setup = Transaction::new();
        setup.create_collection(COLLECTIONS[0]);
        setup.create_collection(COLLECTIONS[1]);
        prop_assert_eq!(store.submit(setup.clone()), model.submit(&setup));
        for ((tx, ranges), action) in steps {
            let expected = model.submit(&tx);
            prop_assert_eq!(store.submit(tx.clone()), expected, "tx {:?}", tx);
            match action {
                0 => {}
                1 => store.flush().expect("flush"),
                2 => store = open_logstore(store.close().expect("close")),
                _ => {
                    store.flush().expect("flush");
                    let mut device = store.into_device();
                    device.crash().expect("crash");
                    store = open_logstore(device);
                    prop_assert_eq!(store.committed_through(), model.seq);
                }
            }
            check_contents(&store, &model, &ranges);
            store.check_consistency().expect("consistent index");
        }
    }
}
