//! A simulated OSD shard's disk: either a `MemStore` (everything it accepted survives a
//! crash) or the real `LogStore` on a fault-injecting in-memory device, where a crash
//! loses every write not yet synced (keeping a random prefix of them, the first dropped
//! one torn) and the restarted store must recover from what reached the "platter".
//!
//! A LogStore disk can also decay: [`SimStore::flip_bit_at_rest`] flips a bit of an
//! object's checkpointed data (the bit-flip fault class).
//!
//! With a LogStore disk, shards run with deferred flushes: the simulator syncs a shard
//! only when its disk-latency event fires, so acknowledgements, peering messages and
//! crashes interleave with unsynced writes as they would on a real disk.

use bytes::Bytes;
use carmine_store::device::{FaultConfig, FaultyDevice, MemDevice};
use carmine_store::{
    CollectionId, LogStore, LogStoreConfig, MemStore, ObjectStat, ObjectStore, StoreError,
    StoreUsage, Transaction, TxSeq,
};
use carmine_types::ObjectId;
use std::collections::BTreeMap;

/// Bytes of each simulated LogStore device.
pub const LOG_DEVICE_BYTES: usize = 24 << 20;

/// Which store a seed gives its OSDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum DiskKind {
    Mem,
    Log,
}

/// One shard's store.
pub enum SimStore {
    Mem(MemStore),
    Log(Box<LogDisk>),
}

/// A LogStore on its faulty device.
pub struct LogDisk {
    store: LogStore<FaultyDevice<MemDevice>>,
    /// The canary [`crate::Canary::AckBeforeSync`]: report every submitted
    /// transaction as durable, as a store that acknowledges before its sync would.
    ack_before_sync: bool,
    submitted: Option<TxSeq>,
}

impl SimStore {
    /// A fresh, empty store; `seed` drives the device's crash choices.
    pub fn new(kind: DiskKind, seed: u64) -> SimStore {
        Self::with_canary(kind, seed, false)
    }

    /// As [`SimStore::new`]; `ack_before_sync` makes a LogStore lie about durability.
    pub fn with_canary(kind: DiskKind, seed: u64, ack_before_sync: bool) -> SimStore {
        match kind {
            DiskKind::Mem => SimStore::Mem(MemStore::new()),
            DiskKind::Log => {
                let config = FaultConfig {
                    seed,
                    crash_keeps_random_prefix: true,
                    crash_tears_last_sector: true,
                    ..FaultConfig::default()
                };
                let device = FaultyDevice::new(MemDevice::new(LOG_DEVICE_BYTES), config);
                let store = LogStore::open(device, LogStoreConfig::small())
                    .expect("a fresh device formats");
                SimStore::Log(Box::new(LogDisk {
                    store,
                    ack_before_sync,
                    submitted: None,
                }))
            }
        }
    }

    /// Whether acknowledgements must wait for a sync (the shard defers its flushes).
    pub fn needs_sync(&self) -> bool {
        matches!(self, SimStore::Log(_))
    }

    /// The process died: a MemStore keeps everything; a LogStore's device loses its
    /// unsynced writes and the store is recovered from the rest, as a restart would.
    pub fn crash(self) -> Result<SimStore, String> {
        match self {
            SimStore::Mem(store) => Ok(SimStore::Mem(store)),
            SimStore::Log(disk) => {
                let LogDisk {
                    store,
                    ack_before_sync,
                    ..
                } = *disk;
                let mut device = store.into_device();
                device
                    .crash()
                    .map_err(|e| format!("device crash failed: {e}"))?;
                let store = LogStore::open(device, LogStoreConfig::small())
                    .map_err(|e| format!("LogStore does not recover after a crash: {e}"))?;
                store
                    .check_consistency()
                    .map_err(|e| format!("LogStore recovered inconsistent: {e}"))?;
                Ok(SimStore::Log(Box::new(LogDisk {
                    store,
                    ack_before_sync,
                    submitted: None,
                })))
            }
        }
    }

    /// Arms a disk error: the device fails every write from the `writes`+1-th more on
    /// (and every sync after it), until the OSD's process stops and the device is
    /// reset by [`SimStore::crash`]. False for a MemStore (it has no device).
    pub fn fail_writes_after(&mut self, writes: u64) -> bool {
        let SimStore::Log(disk) = self else {
            return false;
        };
        disk.store.device_mut().fail_power_after_writes(writes);
        true
    }

    /// Disarms a disk error armed by [`SimStore::fail_writes_after`] that has not
    /// struck yet (the faults end).
    /// Sets a MemStore's capacity (the space faults); `false` for a LogStore.
    pub fn set_capacity_bytes(&mut self, capacity_bytes: u64) -> bool {
        let SimStore::Mem(store) = self else {
            return false;
        };
        store.set_capacity_bytes(capacity_bytes);
        true
    }

    pub fn disarm_disk_error(&mut self) {
        if let SimStore::Log(disk) = self {
            disk.store.device_mut().cancel_power_failure();
        }
    }

    /// Flips one bit of `oid`'s data at rest (see `carmine_store::logstore::at_rest`):
    /// checkpoints the store so its data is at rest, then flips bit `bit_choice % 8` of
    /// the byte `byte_choice` picks among the object's checkpointed pieces, as media
    /// decay would. Returns the device offset, or `None` when there is nothing to flip
    /// (a MemStore, or an object without data).
    pub fn flip_bit_at_rest(
        &mut self,
        coll: CollectionId,
        oid: &ObjectId,
        byte_choice: u64,
        bit_choice: u8,
    ) -> Result<Option<u64>, String> {
        let SimStore::Log(disk) = self else {
            return Ok(None);
        };
        let store = &mut disk.store;
        if !store.checkpoint().map_err(|e| format!("checkpoint: {e}"))? {
            return Ok(None);
        }
        let ranges = store
            .data_at_rest(coll, oid)
            .map_err(|e| format!("data at rest: {e}"))?;
        let total: u64 = ranges.iter().map(|r| u64::from(r.length)).sum();
        if total == 0 {
            return Ok(None);
        }
        let mut byte = byte_choice % total;
        for range in ranges {
            if byte < u64::from(range.length) {
                let offset = range.device_offset + byte;
                store
                    .device_mut()
                    .corrupt_durable_bit(offset, bit_choice % 8)
                    .map_err(|e| format!("flip at {offset}: {e}"))?;
                return Ok(Some(offset));
            }
            byte -= u64::from(range.length);
        }
        unreachable!("byte < total");
    }

    /// Whether `oid`'s data in `coll` fails its checksum here.
    pub fn is_corrupt(&self, coll: CollectionId, oid: &ObjectId) -> bool {
        let Ok(stat) = self.stat(coll, oid) else {
            return false;
        };
        matches!(
            self.read(coll, oid, 0, stat.size_bytes),
            Err(StoreError::Corrupt(_))
        )
    }

    fn inner(&self) -> &dyn ObjectStore {
        match self {
            SimStore::Mem(store) => store,
            SimStore::Log(disk) => &disk.store,
        }
    }

    fn inner_mut(&mut self) -> &mut dyn ObjectStore {
        match self {
            SimStore::Mem(store) => store,
            SimStore::Log(disk) => &mut disk.store,
        }
    }
}

impl ObjectStore for SimStore {
    fn submit(&mut self, tx: Transaction) -> Result<TxSeq, StoreError> {
        let seq = self.inner_mut().submit(tx)?;
        if let SimStore::Log(disk) = self {
            disk.submitted = Some(seq);
        }
        Ok(seq)
    }

    fn committed_through(&self) -> TxSeq {
        match self {
            SimStore::Log(disk) if disk.ack_before_sync => disk
                .submitted
                .unwrap_or_else(|| disk.store.committed_through()),
            _ => self.inner().committed_through(),
        }
    }

    fn submitted_through(&self) -> TxSeq {
        self.inner().submitted_through()
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        self.inner_mut().flush()
    }

    fn failure(&self) -> Option<&StoreError> {
        self.inner().failure()
    }

    fn collection_exists(&self, coll: CollectionId) -> bool {
        self.inner().collection_exists(coll)
    }

    fn list_collections(&self) -> Vec<CollectionId> {
        self.inner().list_collections()
    }

    fn exists(&self, coll: CollectionId, oid: &ObjectId) -> bool {
        self.inner().exists(coll, oid)
    }

    fn stat(&self, coll: CollectionId, oid: &ObjectId) -> Result<ObjectStat, StoreError> {
        self.inner().stat(coll, oid)
    }

    fn read(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
        offset: u64,
        length: u64,
    ) -> Result<Bytes, StoreError> {
        self.inner().read(coll, oid, offset, length)
    }

    fn verify(&self, coll: CollectionId, oid: &ObjectId) -> Result<(), StoreError> {
        self.inner().verify(coll, oid)
    }

    fn getxattr(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
        name: &str,
    ) -> Result<Bytes, StoreError> {
        self.inner().getxattr(coll, oid, name)
    }

    fn getxattrs(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
    ) -> Result<BTreeMap<String, Bytes>, StoreError> {
        self.inner().getxattrs(coll, oid)
    }

    fn omap_list(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
        after: Option<&[u8]>,
        max_entries: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        self.inner().omap_list(coll, oid, after, max_entries)
    }

    fn omap_get(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
        keys: &[Bytes],
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        self.inner().omap_get(coll, oid, keys)
    }

    fn list_objects(
        &self,
        coll: CollectionId,
        after: Option<&ObjectId>,
        max_objects: usize,
    ) -> Result<Vec<ObjectId>, StoreError> {
        self.inner().list_objects(coll, after, max_objects)
    }

    fn usage(&self) -> StoreUsage {
        self.inner().usage()
    }
}
