//! Data at rest: where an object's live pieces lie on the device, for fault injection
//! (the simulator's bit flips) and tests of detection and repair.
//!
//! A piece is *at rest* once a checkpoint covers it: the next open loads it from the
//! checkpoint and never replays the record that carries it. Decay there is found only
//! when the piece is read (its crc fails and the read returns
//! [`StoreError::Corrupt`](crate::StoreError::Corrupt)). A flip in a record that a
//! reopen would replay is a different fault — replay stops at the first record that
//! fails its crc, so it also loses the transactions after it — which is why injectors
//! should pick ranges from [`LogStore::data_at_rest`].

use super::LogStore;
use crate::device::BlockDevice;
use crate::{CollectionId, StoreError};
use carmine_types::ObjectId;

/// One live piece's bytes on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceRange {
    pub device_offset: u64,
    pub length: u32,
}

impl<D: BlockDevice> LogStore<D> {
    /// Flushes every pending record and writes a checkpoint, so that everything
    /// submitted so far is durable and at rest. Returns `false` if the index outgrew
    /// the checkpoint slot (the flush still happened).
    pub fn checkpoint(&mut self) -> Result<bool, StoreError> {
        self.flush_inner(false)?;
        self.write_checkpoint()
    }

    /// The device ranges of the live pieces holding `oid`'s data that are at rest (see
    /// the module docs), in logical order, each piece once. Empty for an object
    /// without data or whose data is all newer than the last checkpoint.
    pub fn data_at_rest(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
    ) -> Result<Vec<DeviceRange>, StoreError> {
        let onode = self
            .index
            .onode(coll, oid)
            .ok_or_else(|| StoreError::NoSuchObject(coll, oid.clone()))?;
        let mut ranges: Vec<DeviceRange> = Vec::new();
        for extent in onode.extents.values() {
            let piece = self.index.pieces[&extent.piece_id];
            let range = DeviceRange {
                device_offset: piece.device_offset,
                length: piece.length,
            };
            if self.is_at_rest(piece.device_offset) && !ranges.contains(&range) {
                ranges.push(range);
            }
        }
        Ok(ranges)
    }

    /// Whether a reopen would not replay the record holding `device_offset`: it lies in
    /// a segment the log left before the last checkpoint, or before the checkpoint's
    /// replay start in the segment the replay starts in. Pending records are at the
    /// head, past the replay start, so they never count.
    fn is_at_rest(&self, device_offset: u64) -> bool {
        let segment = self.superblock.geometry.segment_of(device_offset);
        match self.log.chain.iter().position(|&s| s == segment) {
            None => true,
            Some(0) => device_offset < self.replay_start,
            Some(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FaultConfig, FaultyDevice, LogStoreConfig, ObjectStore, Transaction};
    use bytes::Bytes;
    use carmine_types::PgId;

    fn pg() -> CollectionId {
        CollectionId::Pg(PgId::new(1, 0))
    }

    fn store_with(objects: &[(&str, usize)]) -> LogStore<FaultyDevice> {
        let device = FaultyDevice::in_memory(4 << 20, FaultConfig::default());
        let mut store = LogStore::open(device, LogStoreConfig::small()).unwrap();
        let mut tx = Transaction::new();
        tx.create_collection(pg());
        for (name, length) in objects {
            let data = Bytes::from(vec![0x5A; *length]);
            tx.write(pg(), ObjectId::head(*name), 0, data);
        }
        store.submit(tx).unwrap();
        store
    }

    #[test]
    fn data_is_at_rest_only_after_a_checkpoint() {
        let mut store = store_with(&[("small", 100), ("large", 200_000)]);
        let small = ObjectId::head("small");
        assert!(store.data_at_rest(pg(), &small).unwrap().is_empty());
        store.flush().unwrap();
        assert!(
            store.data_at_rest(pg(), &small).unwrap().is_empty(),
            "synced but replayed by the next open"
        );
        assert!(store.checkpoint().unwrap());
        let ranges = store.data_at_rest(pg(), &small).unwrap();
        assert_eq!(ranges.len(), 1);
        assert_eq!(ranges[0].length, 100);
        let large = store.data_at_rest(pg(), &ObjectId::head("large")).unwrap();
        assert_eq!(large.len(), 4, "200,000 bytes in pieces of at most 64 KiB");
        assert_eq!(
            large.iter().map(|r| u64::from(r.length)).sum::<u64>(),
            200_000
        );
        assert!(matches!(
            store.data_at_rest(pg(), &ObjectId::head("absent")),
            Err(StoreError::NoSuchObject(..))
        ));
    }

    /// A bit flipped in a piece at rest fails reads of that object with `Corrupt`
    /// (never other bytes, never a panic), leaves other objects readable, survives a
    /// reopen (it is not replayed), and goes away once the object is rewritten.
    #[test]
    fn a_flipped_bit_at_rest_is_reported_corrupt_until_rewritten() {
        let mut store = store_with(&[("victim", 3000), ("bystander", 3000)]);
        assert!(store.checkpoint().unwrap());
        let victim = ObjectId::head("victim");
        let range = store.data_at_rest(pg(), &victim).unwrap()[0];
        let offset = range.device_offset + u64::from(range.length) / 2;
        store.device_mut().corrupt_durable_bit(offset, 3).unwrap();
        for (offset, length) in [(0, 3000), (0, 1), (2999, 1)] {
            assert!(
                matches!(
                    store.read(pg(), &victim, offset, length),
                    Err(StoreError::Corrupt(_))
                ),
                "any read of the piece verifies all of it"
            );
        }
        let bystander = ObjectId::head("bystander");
        assert_eq!(store.read(pg(), &bystander, 0, 3000).unwrap().len(), 3000);
        assert!(store.stat(pg(), &victim).is_ok(), "metadata is not data");

        let device = store.into_device();
        let mut store = LogStore::open(device, LogStoreConfig::small()).unwrap();
        assert!(store.exists(pg(), &bystander), "nothing lost on reopen");
        assert!(matches!(
            store.read(pg(), &victim, 0, 10),
            Err(StoreError::Corrupt(_))
        ));

        let mut tx = Transaction::new();
        tx.remove(pg(), victim.clone());
        tx.write(pg(), victim.clone(), 0, Bytes::from_static(b"repaired"));
        store.submit(tx).unwrap();
        assert_eq!(&store.read(pg(), &victim, 0, 100).unwrap()[..], b"repaired");
    }
}
