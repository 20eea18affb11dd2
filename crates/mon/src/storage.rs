//! The monitor's Raft storage: hard state, the snapshot (the applied cluster map at the
//! snapshot's index) and the log entries after it, all in memory, and the image of all
//! three that the driver writes to disk whole and atomically.
//!
//! On-disk image (`MonStore::to_bytes`), inside Carmine's versioned envelope
//! (`u8 version | u8 compat | u32 length | body`), version 1:
//!
//! ```text
//! blob   hard_state   raft-rs eraftpb.HardState, protobuf (term, vote, commit)
//! blob   snapshot     raft-rs eraftpb.Snapshot, protobuf: metadata (index, term,
//!                     conf_state with the voters) and data = the OsdMap encoding
//! u32    count        log entries after the snapshot, contiguous from index + 1
//! blob × count        raft-rs eraftpb.Entry, protobuf; a normal entry's data is a
//!                     `MonEntry` (entry.rs)
//! ```
//!
//! A blob is `u32 length | bytes`. The log is compacted into a new snapshot every
//! [`LOG_ENTRIES_MAX`] applied entries, so the image stays a few maps long.

use carmine_clustermap::OsdMap;
use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
use raft::prelude::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};

/// Applied entries kept in the log before they are folded into a snapshot.
pub const LOG_ENTRIES_MAX: u64 = 16;
/// Largest image accepted on load (a map is far smaller).
const IMAGE_BLOB_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Most log entries accepted on load.
const IMAGE_ENTRIES_MAX: usize = 4096;
const _: () = assert!(LOG_ENTRIES_MAX * 4 < IMAGE_ENTRIES_MAX as u64);

/// A monitor store that cannot be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("{0}")]
    Decode(#[from] DecodeError),
    #[error("the {what} is not valid protobuf: {detail}")]
    Protobuf { what: &'static str, detail: String },
    #[error("the snapshot's cluster map is unreadable: {0}")]
    Map(DecodeError),
    #[error("log entry {found} follows the snapshot or entry before it out of order (expected {expected})")]
    Gap { expected: u64, found: u64 },
    #[error("the store's monitors {stored:?} differ from the configured {configured:?}")]
    Members {
        stored: Vec<u64>,
        configured: Vec<u64>,
    },
}

/// Raft's durable state for one monitor.
#[derive(Debug, Clone, Default)]
pub struct MonStore {
    hard_state: HardState,
    snapshot: Snapshot,
    /// Entries `snapshot.index + 1 ..= last_index`, in order.
    entries: Vec<Entry>,
}

impl MonStore {
    /// A new group's store: every monitor starts from the same `map` at index 0, with
    /// the monitors `ranks` as voters, so no snapshot is ever needed to agree on it.
    pub fn bootstrap(map: &OsdMap, ranks: &[u64]) -> MonStore {
        let raft_ids: Vec<u64> = ranks.iter().map(|&rank| crate::raft_id(rank)).collect();
        let mut snapshot = Snapshot {
            data: map.to_bytes(),
            ..Snapshot::default()
        };
        let metadata = snapshot.mut_metadata();
        metadata.set_conf_state(ConfState::from((raft_ids, Vec::<u64>::new())));
        MonStore {
            hard_state: HardState::default(),
            snapshot,
            entries: Vec::new(),
        }
    }

    /// The voters this store was created for.
    pub fn voters(&self) -> Vec<u64> {
        self.snapshot.get_metadata().get_conf_state().voters.clone()
    }

    pub fn snapshot_index(&self) -> u64 {
        self.snapshot.get_metadata().index
    }

    /// The cluster map as of the snapshot.
    pub fn snapshot_map(&self) -> Result<OsdMap, StoreError> {
        OsdMap::from_bytes(&self.snapshot.data).map_err(StoreError::Map)
    }

    fn first_index(&self) -> u64 {
        self.snapshot_index() + 1
    }

    fn last_index(&self) -> u64 {
        self.snapshot_index() + self.entries.len() as u64
    }

    /// Appends `entries`, replacing any suffix they overlap (a new leader's log wins).
    pub fn append(&mut self, entries: &[Entry]) {
        let Some(first) = entries.first() else {
            return;
        };
        assert!(
            first.index > self.snapshot_index(),
            "append at {} overwrites the snapshot at {}",
            first.index,
            self.snapshot_index()
        );
        assert!(
            first.index <= self.last_index() + 1,
            "append at {} leaves a gap after {}",
            first.index,
            self.last_index()
        );
        let keep = (first.index - self.first_index()) as usize;
        self.entries.truncate(keep);
        self.entries.extend_from_slice(entries);
    }

    pub fn set_hard_state(&mut self, hard_state: HardState) {
        self.hard_state = hard_state;
    }

    pub fn set_commit(&mut self, commit: u64) {
        self.hard_state.commit = commit;
    }

    /// Replaces everything with a snapshot received from the leader.
    pub fn apply_snapshot(&mut self, snapshot: Snapshot) {
        let metadata = snapshot.get_metadata();
        assert!(metadata.index > self.snapshot_index(), "snapshot goes back");
        self.hard_state.commit = self.hard_state.commit.max(metadata.index);
        self.hard_state.term = self.hard_state.term.max(metadata.term);
        self.entries.clear();
        self.snapshot = snapshot;
    }

    /// Folds the entries through `applied` into a snapshot whose data is `map_bytes`.
    pub fn compact(&mut self, applied: u64, map_bytes: bytes::Bytes) {
        assert!(applied >= self.first_index(), "nothing to compact");
        assert!(applied <= self.last_index(), "compacting past the log");
        let term = self.entries[(applied - self.first_index()) as usize].term;
        let conf_state = self.snapshot.get_metadata().get_conf_state().clone();
        self.entries
            .drain(..(applied + 1 - self.first_index()) as usize);
        let mut snapshot = Snapshot {
            data: map_bytes,
            ..Snapshot::default()
        };
        let metadata = snapshot.mut_metadata();
        metadata.index = applied;
        metadata.term = term;
        metadata.set_conf_state(conf_state);
        self.snapshot = snapshot;
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        self.encode(&mut e);
        e.into_vec()
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<MonStore, StoreError> {
        let mut d = Decoder::from_slice(bytes);
        let store = MonStore::decode_checked(&mut d)?;
        d.finish()?;
        Ok(store)
    }

    fn encode(&self, e: &mut Encoder) {
        e.versioned(1, 1, |e| {
            e.put_blob(&protobuf_bytes(&self.hard_state));
            e.put_blob(&protobuf_bytes(&self.snapshot));
            e.put_u32(u32::try_from(self.entries.len()).expect("log compacted"));
            for entry in &self.entries {
                e.put_blob(&protobuf_bytes(entry));
            }
        });
    }

    fn decode_checked(d: &mut Decoder) -> Result<MonStore, StoreError> {
        let (hard_state, snapshot, entry_blobs) = d.versioned("MonStore", 1, |d, _| {
            let hard_state = d.get_blob("hard state", IMAGE_BLOB_BYTES_MAX)?;
            let snapshot = d.get_blob("snapshot", IMAGE_BLOB_BYTES_MAX)?;
            let count = d.get_u32()? as usize;
            if count > IMAGE_ENTRIES_MAX {
                return Err(DecodeError::Invalid {
                    what: "log entry count",
                    value: count as u64,
                });
            }
            let mut entries = Vec::with_capacity(count);
            for _ in 0..count {
                entries.push(d.get_blob("log entry", IMAGE_BLOB_BYTES_MAX)?);
            }
            Ok((hard_state, snapshot, entries))
        })?;
        let store = MonStore {
            hard_state: parse_protobuf("hard state", &hard_state)?,
            snapshot: parse_protobuf("snapshot", &snapshot)?,
            entries: entry_blobs
                .iter()
                .map(|blob| parse_protobuf("log entry", blob))
                .collect::<Result<_, _>>()?,
        };
        for (expected, entry) in (store.first_index()..).zip(&store.entries) {
            if entry.index != expected {
                return Err(StoreError::Gap {
                    expected,
                    found: entry.index,
                });
            }
        }
        store.snapshot_map()?;
        Ok(store)
    }
}

fn protobuf_bytes(message: &impl protobuf::Message) -> Vec<u8> {
    message
        .write_to_bytes()
        .expect("raft messages always encode")
}

fn parse_protobuf<M: protobuf::Message>(what: &'static str, bytes: &[u8]) -> Result<M, StoreError> {
    M::parse_from_bytes(bytes).map_err(|error| StoreError::Protobuf {
        what,
        detail: error.to_string(),
    })
}

/// Encodes a raft-rs message for [`carmine_proto::MonRaft`].
pub fn encode_raft_message(message: &raft::prelude::Message) -> Vec<u8> {
    protobuf_bytes(message)
}

/// Decodes a raft-rs message from a peer.
pub fn decode_raft_message(bytes: &[u8]) -> Result<raft::prelude::Message, StoreError> {
    parse_protobuf("raft message", bytes)
}

impl raft::Storage for MonStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState {
            hard_state: self.hard_state.clone(),
            conf_state: self.snapshot.get_metadata().get_conf_state().clone(),
        })
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first_index() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last_index() + 1 {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let offset = self.first_index();
        let mut entries = self.entries[(low - offset) as usize..(high - offset) as usize].to_vec();
        raft::util::limit_size(&mut entries, max_size.into());
        Ok(entries)
    }

    fn term(&self, index: u64) -> raft::Result<u64> {
        let metadata = self.snapshot.get_metadata();
        if index == metadata.index {
            return Ok(metadata.term);
        }
        if index < metadata.index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if index > self.last_index() {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        Ok(self.entries[(index - self.first_index()) as usize].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(MonStore::first_index(self))
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(MonStore::last_index(self))
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        if self.snapshot_index() < request_index {
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        Ok(self.snapshot.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::Storage;

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            data: vec![index as u8].into(),
            ..Entry::default()
        }
    }

    #[test]
    fn appends_truncate_compacts_and_round_trips() {
        let mut store = MonStore::bootstrap(&OsdMap::new_dev(3), &[0, 1, 2]);
        store.append(&[entry(1, 1), entry(2, 1), entry(3, 1)]);
        store.append(&[entry(3, 2), entry(4, 2)]);
        assert_eq!(Storage::last_index(&store).unwrap(), 4);
        assert_eq!(store.term(3).unwrap(), 2);
        store.compact(2, OsdMap::new_dev(3).to_bytes());
        assert_eq!(Storage::first_index(&store).unwrap(), 3);
        assert_eq!(store.term(2).unwrap(), 1);
        assert!(store
            .entries(1, 3, None, GetEntriesContext::empty(false))
            .is_err());
        let loaded = MonStore::from_bytes(&store.to_bytes()).unwrap();
        assert_eq!(loaded.entries, store.entries);
        assert_eq!(loaded.voters(), vec![1, 2, 3]);
        assert_eq!(loaded.snapshot_index(), 2);
    }

    #[test]
    fn a_corrupt_image_is_an_error_not_a_panic() {
        let mut store = MonStore::bootstrap(&OsdMap::new_dev(3), &[0]);
        store.append(&[entry(1, 1)]);
        let bytes = store.to_bytes();
        for cut in [0, 3, bytes.len() / 2, bytes.len() - 1] {
            assert!(MonStore::from_bytes(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        let middle = flipped.len() / 2;
        flipped[middle] ^= 0xff;
        let _ = MonStore::from_bytes(&flipped);
    }
}
