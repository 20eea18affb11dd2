//! `LogStore`: the native persistent [`ObjectStore`](crate::ObjectStore), after Crimson's SeaStore. One
//! instance per OSD shard owns one [`BlockDevice`] (for a real OSD, the
//! [`FileDevice`] at [`shard_device_path`]) and is driven by that
//! shard alone: `&mut self`, no locks, no threads, no clocks, so the simulator can
//! drive it deterministically over a [`FaultyDevice`](crate::FaultyDevice).
//!
//! ```
//! use bytes::Bytes;
//! use carmine_store::{CollectionId, FaultConfig, FaultyDevice, LogStore, LogStoreConfig};
//! use carmine_store::{ObjectStore, Transaction};
//! use carmine_types::ObjectId;
//!
//! let device = FaultyDevice::in_memory(4 << 20, FaultConfig::default());
//! let mut store = LogStore::open(device, LogStoreConfig::small()).unwrap();
//! let mut tx = Transaction::new();
//! tx.create_collection(CollectionId::Meta);
//! tx.write(CollectionId::Meta, ObjectId::head("superblock"), 0, Bytes::from_static(b"v1"));
//! let seq = store.submit(tx).unwrap();
//! assert!(store.committed_through() < seq); // readable, not yet durable
//! store.flush().unwrap(); // one write and one sync for everything pending
//! assert!(store.committed_through() >= seq);
//!
//! let mut device = store.into_device();
//! device.crash().unwrap(); // power cut: unsynced writes are lost
//! let store = LogStore::open(device, LogStoreConfig::small()).unwrap();
//! let oid = ObjectId::head("superblock");
//! assert_eq!(&store.read(CollectionId::Meta, &oid, 0, 2).unwrap()[..], b"v1");
//! ```
//!
//! # Durability contract
//!
//! - [`submit`](crate::ObjectStore::submit) validates the transaction, applies it to the
//!   in-memory index (reads see it at once), appends one checksummed record to the
//!   pending buffer and returns its sequence number. Nothing is durable yet.
//! - [`flush`](crate::ObjectStore::flush) writes every pending record in as few writes as
//!   possible (one per segment touched), issues one `sync` for all of them (group
//!   commit) and only then advances [`committed_through`](crate::ObjectStore::committed_through).
//!   It runs to completion before returning.
//! - Acknowledge a transaction only once `committed_through() >= seq`. After a crash,
//!   the store holds every transaction up to the `committed_through` it had reached,
//!   and possibly some later ones: always whole and in order (a prefix of the submitted
//!   sequence). A failed device write or sync poisons the store: every later call fails
//!   and the owner must reopen it, which recovers the durable prefix.
//!
//! # Layout and recovery
//!
//! The device holds a superblock, two checkpoint slots and fixed-size segments (bytes
//! in `format.rs`). Records are appended to the head segment; when it is full a
//! `SegmentEnd` record names the next one. Writes under 64 KiB travel inline in their
//! transaction record; larger ones are split into pieces of at most [`PIECE_BYTES_MAX`]
//! written as Data records ahead of it, so a 4 KiB overwrite writes 4 KiB. The index
//! maps every object to extents of checksummed pieces; reads fetch and verify them.
//!
//! `open` rebuilds the index from the newest valid checkpoint and replays the records
//! after it until the first torn, corrupt or stale one; a transaction is one record,
//! so it is applied whole or not at all. It then writes a new checkpoint with a new
//! epoch, so stale records past the old end can never be replayed later. Checkpoints
//! are also written every [`LogStoreConfig::checkpoint_interval_bytes`] of log or
//! [`LogStoreConfig::checkpoint_interval_ops`] logged ops, when free segments run low,
//! and by [`LogStore::close`].
//!
//! # Cleaning and space
//!
//! Segments older than the last checkpoint whose pieces are all dead become free
//! after the next sync. When free segments fall to
//! [`LogStoreConfig::cleaner_free_segments_min`], each `flush` copies at most
//! [`LogStoreConfig::clean_bytes_per_flush_max`] of live pieces forward from the
//! emptiest such segment, so cleaning never stalls a client for long. Client writes
//! may not use the last [`LogStoreConfig::reserved_segments`] free segments (the
//! cleaner's room); a transaction that does not fit even after a few rounds of cleaning
//! fails with [`StoreError::NoSpace`] and changes nothing.

mod at_rest;
mod checkpoint;
mod cleaner;
mod crc;
mod extents;
mod format;
mod fsck;
mod index;
mod log;
mod object_store;
mod pending;
mod recovery;
mod txrecord;
mod validate;
mod varint;

pub use at_rest::DeviceRange;
pub use fsck::{fsck, stat, FsckReport, LogStoreStat};

use crate::device::BlockDevice;
use crate::{FileDevice, StoreError, TxSeq};
use checkpoint::CheckpointMeta;
use format::{PAGE_BYTES, SECTOR_BYTES};
use index::{Geometry, Index};
use log::{LogWriter, SEGMENT_TAIL_RESERVE_BYTES};
use recovery::{io_error, Recovered, Superblock};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The most bytes of one piece: out-of-line writes are split into pieces this large,
/// and a read fetches at most this much extra to verify a checksum.
pub const PIECE_BYTES_MAX: u64 = 64 * 1024;
/// Inline write bytes one transaction record may carry; the rest go out of line.
const TX_INLINE_BYTES_MAX: u64 = 64 * 1024;
const SEGMENT_BYTES_MIN: u64 = 4 * PIECE_BYTES_MAX;
/// Flush rounds a `submit` may run to make room before failing with `NoSpace`.
const SUBMIT_CLEANING_ROUNDS_MAX: usize = 4;
const _: () = assert!(SEGMENT_BYTES_MIN >= 2 * (PIECE_BYTES_MAX + SEGMENT_TAIL_RESERVE_BYTES));

/// Where shard `shard`'s device file lives under an OSD's data directory.
pub fn shard_device_path(data_dir: &Path, shard: usize) -> PathBuf {
    data_dir.join(format!("logstore.shard{shard}"))
}

/// Tuning for a [`LogStore`]. `segment_bytes` and `checkpoint_slot_bytes` apply when a
/// device is formatted; an existing device keeps what its superblock says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogStoreConfig {
    pub segment_bytes: u64,
    pub checkpoint_slot_bytes: u64,
    /// Write a checkpoint after this many bytes of log.
    pub checkpoint_interval_bytes: u64,
    /// Write a checkpoint after this many logged ops (writes, removes, attribute
    /// changes...), so that the replay after a crash, which costs about a
    /// microsecond per op, stays short even when ops are tiny.
    pub checkpoint_interval_ops: u64,
    /// The most live bytes one `flush` copies while cleaning.
    pub clean_bytes_per_flush_max: u64,
    /// Clean (and checkpoint) when this few segments are free.
    pub cleaner_free_segments_min: usize,
    /// Free segments client transactions may not take.
    pub reserved_segments: usize,
}

impl Default for LogStoreConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 16 << 20,
            checkpoint_slot_bytes: 64 << 20,
            checkpoint_interval_bytes: 256 << 20,
            checkpoint_interval_ops: 500_000,
            clean_bytes_per_flush_max: 2 << 20,
            cleaner_free_segments_min: 8,
            reserved_segments: 3,
        }
    }
}

impl LogStoreConfig {
    /// Small segments for tests and the simulator (devices of a few MiB).
    pub fn small() -> Self {
        Self {
            segment_bytes: 256 << 10,
            checkpoint_slot_bytes: 256 << 10,
            checkpoint_interval_bytes: 1 << 20,
            checkpoint_interval_ops: 2_000,
            clean_bytes_per_flush_max: 64 << 10,
            cleaner_free_segments_min: 4,
            reserved_segments: 2,
        }
    }

    fn check(&self) {
        assert!(
            self.segment_bytes >= SEGMENT_BYTES_MIN,
            "segments under 256 KiB"
        );
        assert_eq!(
            self.segment_bytes % PAGE_BYTES,
            0,
            "segments in whole pages"
        );
        assert!(self.clean_bytes_per_flush_max >= PIECE_BYTES_MAX);
        assert!(self.checkpoint_interval_ops > 0);
        assert!(self.reserved_segments >= 2, "the cleaner needs room");
        assert!(self.cleaner_free_segments_min > self.reserved_segments);
    }
}

/// Counters for `carmine store stat` and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogStoreStats {
    pub flushes: u64,
    pub syncs: u64,
    pub device_writes: u64,
    pub bytes_written: u64,
    pub checkpoints: u64,
    /// Checkpoints skipped because the index outgrew the checkpoint slot.
    pub checkpoints_too_large: u64,
    pub cleaned_bytes: u64,
    pub cleaned_bytes_last_flush: u64,
    pub segments_freed: u64,
}

/// Physical space, as the cleaner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceUsage {
    pub capacity_bytes: u64,
    /// Bytes of live pieces (object data still referenced).
    pub live_bytes: u64,
    pub segment_bytes: u64,
    pub segment_count: u32,
    pub free_segments: usize,
    /// Segments the log passed through since the last checkpoint.
    pub log_segments: usize,
}

/// The persistent object store. See the module docs.
pub struct LogStore<D: BlockDevice = FileDevice> {
    device: D,
    config: LogStoreConfig,
    superblock: Superblock,
    index: Index,
    log: LogWriter,
    last_tx_seq: TxSeq,
    committed_tx_seq: TxSeq,
    checkpoint_seq: u64,
    checkpoint_slot_next: usize,
    bytes_since_checkpoint: u64,
    /// Ops in the records written since the last checkpoint.
    ops_since_checkpoint: u64,
    /// The device offset where the newest checkpoint's replay starts (in `log.chain[0]`).
    replay_start: u64,
    failed: Option<StoreError>,
    stats: LogStoreStats,
}

impl<D: BlockDevice> std::fmt::Debug for LogStore<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore")
            .field("superblock", &self.superblock)
            .field("last_tx_seq", &self.last_tx_seq)
            .field("committed_tx_seq", &self.committed_tx_seq)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn format_device(device: &mut dyn BlockDevice, config: &LogStoreConfig) -> Result<(), StoreError> {
    let slots_end = format::SUPERBLOCK_BYTES + 2 * config.checkpoint_slot_bytes;
    let segments_start = slots_end.div_ceil(4096) * 4096;
    let segment_count = device.size_bytes().saturating_sub(segments_start) / config.segment_bytes;
    if segment_count < (config.cleaner_free_segments_min + 2) as u64 {
        return Err(StoreError::NoSpace {
            needed_bytes: segments_start
                + (config.cleaner_free_segments_min as u64 + 2) * config.segment_bytes,
            free_bytes: device.size_bytes(),
        });
    }
    let superblock = Superblock {
        geometry: Geometry {
            segments_start,
            segment_bytes: config.segment_bytes,
            segment_count: u32::try_from(segment_count).expect("under 4 G segments"),
        },
        checkpoint_slot_bytes: config.checkpoint_slot_bytes,
    };
    let meta = CheckpointMeta {
        checkpoint_seq: 1,
        epoch: 1,
        replay_segment: 0,
        replay_offset: 0,
        next_record_seq: 1,
        last_tx_seq: 0,
    };
    let empty = checkpoint::encode(&meta, &Index::new(superblock.geometry));
    device
        .write_at(superblock.slot_offset(0), &empty)
        .map_err(io_error)?;
    device.write_at(0, &superblock.encode()).map_err(io_error)?;
    device.sync().map_err(io_error)
}

impl<D: BlockDevice> LogStore<D> {
    /// Opens the store on `device`, formatting it first if it is all zeros, and
    /// recovers (see the module docs). Writes one checkpoint before returning.
    pub fn open(mut device: D, config: LogStoreConfig) -> Result<Self, StoreError> {
        config.check();
        let recovered = match recovery::recover(&device)? {
            Some(recovered) => recovered,
            None => {
                format_device(&mut device, &config)?;
                recovery::recover(&device)?.expect("just formatted")
            }
        };
        Self::from_recovered(device, config, recovered)
    }

    fn from_recovered(
        device: D,
        config: LogStoreConfig,
        recovered: Recovered,
    ) -> Result<Self, StoreError> {
        let geometry = recovered.superblock.geometry;
        let index = recovered.index;
        let mut head_segment = recovered.end_segment;
        let mut head_offset = recovered.end_offset.div_ceil(SECTOR_BYTES) * SECTOR_BYTES;
        if head_offset + SEGMENT_TAIL_RESERVE_BYTES + SECTOR_BYTES > geometry.segment_bytes {
            head_segment = (0..geometry.segment_count as usize)
                .find(|&segment| index.segment_live_bytes[segment] == 0)
                .ok_or(StoreError::NoSpace {
                    needed_bytes: geometry.segment_bytes,
                    free_bytes: 0,
                })?;
            head_offset = 0;
        }
        let (mut free, mut sealed) = (BTreeSet::new(), BTreeSet::new());
        for segment in (0..geometry.segment_count as usize).filter(|&s| s != head_segment) {
            if index.segment_live_bytes[segment] == 0 {
                free.insert(segment);
            } else {
                sealed.insert(segment);
            }
        }
        let log = LogWriter {
            geometry,
            epoch: recovered.checkpoint.epoch + 1,
            next_record_seq: recovered.next_record_seq,
            head_segment,
            head_offset,
            pending: Vec::new(),
            spare: Vec::new(),
            free,
            chain: vec![head_segment],
            sealed,
        };
        let mut store = Self {
            device,
            config,
            superblock: recovered.superblock,
            index,
            log,
            last_tx_seq: recovered.last_tx_seq,
            committed_tx_seq: recovered.last_tx_seq,
            checkpoint_seq: recovered.checkpoint.checkpoint_seq,
            checkpoint_slot_next: 1 - recovered.checkpoint_slot,
            bytes_since_checkpoint: 0,
            ops_since_checkpoint: 0,
            replay_start: 0,
            failed: None,
            stats: LogStoreStats::default(),
        };
        if !store.write_checkpoint()? {
            return Err(StoreError::NoSpace {
                needed_bytes: store.superblock.checkpoint_slot_bytes + 1,
                free_bytes: store.superblock.checkpoint_slot_bytes,
            });
        }
        Ok(store)
    }

    /// Flushes, writes a checkpoint (so the next open replays nothing) and returns the
    /// device.
    pub fn close(mut self) -> Result<D, StoreError> {
        self.flush_inner(false)?;
        self.write_checkpoint()?;
        Ok(self.device)
    }

    /// Gives up the device without flushing: what a crash leaves behind.
    pub fn into_device(self) -> D {
        self.device
    }

    pub fn device(&self) -> &D {
        &self.device
    }

    /// The device, for fault injection in tests and the simulator.
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }

    pub fn stats(&self) -> LogStoreStats {
        self.stats
    }

    pub fn space(&self) -> SpaceUsage {
        let geometry = self.superblock.geometry;
        SpaceUsage {
            capacity_bytes: geometry.segment_bytes * u64::from(geometry.segment_count),
            live_bytes: self.index.segment_live_bytes.iter().sum(),
            segment_bytes: geometry.segment_bytes,
            segment_count: geometry.segment_count,
            free_segments: self.log.free.len(),
            log_segments: self.log.chain.len(),
        }
    }

    /// Recounts the index and compares it with the running totals (costly; tests).
    pub fn check_consistency(&self) -> Result<(), StoreError> {
        self.index.check_consistency().map_err(StoreError::Corrupt)
    }

    fn check_failed(&self) -> Result<(), StoreError> {
        match &self.failed {
            Some(error) => Err(error.clone()),
            None => Ok(()),
        }
    }

    /// Records a device failure: the store refuses all further work.
    fn fail(&mut self, error: std::io::Error) -> StoreError {
        let error = StoreError::Io(format!("{error} (store must be reopened)"));
        self.failed = Some(error.clone());
        error
    }

    /// Writes a checkpoint of the whole index at the head and retires the log before
    /// it. Needs an empty pending buffer. Returns `false` if the checkpoint outgrew its
    /// slot (nothing is written then).
    fn write_checkpoint(&mut self) -> Result<bool, StoreError> {
        self.check_failed()?;
        assert!(
            !self.log.has_pending(),
            "checkpoint with records not yet written"
        );
        assert_eq!(self.log.head_offset % SECTOR_BYTES, 0);
        let meta = CheckpointMeta {
            checkpoint_seq: self.checkpoint_seq + 1,
            epoch: self.log.epoch,
            replay_segment: self.log.head_segment as u32,
            replay_offset: u32::try_from(self.log.head_offset).expect("segment under 4 GiB"),
            next_record_seq: self.log.next_record_seq,
            last_tx_seq: self.last_tx_seq,
        };
        let bytes = checkpoint::encode(&meta, &self.index);
        if bytes.len() as u64 > self.superblock.checkpoint_slot_bytes {
            self.stats.checkpoints_too_large += 1;
            return Ok(false);
        }
        let offset = self.superblock.slot_offset(self.checkpoint_slot_next);
        let result = self
            .device
            .write_at(offset, &bytes)
            .and_then(|()| self.device.sync());
        result.map_err(|e| self.fail(e))?;
        self.stats.checkpoints += 1;
        self.stats.syncs += 1;
        self.stats.device_writes += 1;
        self.stats.bytes_written += bytes.len() as u64;
        self.checkpoint_seq += 1;
        self.checkpoint_slot_next = 1 - self.checkpoint_slot_next;
        self.replay_start = self.log.geometry.segments_start
            + self.log.head_segment as u64 * self.log.geometry.segment_bytes
            + self.log.head_offset;
        self.bytes_since_checkpoint = 0;
        self.ops_since_checkpoint = 0;
        self.log.retire_chain();
        Ok(true)
    }

    /// One group commit (see the module docs); `urgent` cleans and checkpoints even if
    /// free segments are not yet low.
    fn flush_inner(&mut self, urgent: bool) -> Result<(), StoreError> {
        self.check_failed()?;
        self.stats.flushes += 1;
        self.stats.cleaned_bytes_last_flush = 0;
        let low = self.log.free.len() <= self.config.cleaner_free_segments_min;
        if low || urgent {
            self.clean_step()?;
        }
        if self.log.has_pending() {
            let chunks = self.log.pending.len() as u64;
            let written = self
                .log
                .write_pending(&mut self.device)
                .map_err(|e| self.fail(e))?;
            self.device.sync().map_err(|e| self.fail(e))?;
            self.stats.syncs += 1;
            self.stats.device_writes += chunks;
            self.stats.bytes_written += written;
            self.bytes_since_checkpoint += written;
        }
        self.committed_tx_seq = self.last_tx_seq;
        let retirable = self.log.chain.len() > 1;
        if self.bytes_since_checkpoint >= self.config.checkpoint_interval_bytes
            || self.ops_since_checkpoint >= self.config.checkpoint_interval_ops
            || ((low || urgent) && retirable)
        {
            self.write_checkpoint()?;
        }
        self.free_dead_segments();
        Ok(())
    }

    /// Frees sealed segments without live data. Runs right after a sync, so every
    /// record that killed their data is durable.
    fn free_dead_segments(&mut self) {
        assert!(!self.log.has_pending());
        let dead: Vec<usize> = (self.log.sealed.iter())
            .filter(|&&segment| self.index.segment_live_bytes[segment] == 0)
            .copied()
            .collect();
        for segment in dead {
            self.log.sealed.remove(&segment);
            self.log.free.insert(segment);
            self.stats.segments_freed += 1;
        }
    }
}
