//! `carmine store fsck` and `carmine store stat`: read-only inspection of a LogStore
//! device. Both recover the index exactly as `open` would, without writing.

use super::recovery::{self, io_error};
use crate::device::BlockDevice;
use crate::StoreError;

/// A summary of a LogStore device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogStoreStat {
    /// Device offset of segment 0.
    pub segments_start: u64,
    pub segment_bytes: u64,
    pub segment_count: u32,
    pub free_segments: usize,
    pub live_bytes: u64,
    pub collection_count: usize,
    pub object_count: u64,
    pub piece_count: usize,
    pub checkpoint_seq: u64,
    pub checkpoint_epoch: u64,
    pub checkpoint_slot: usize,
    /// Records after the checkpoint (what the next open replays).
    pub records_after_checkpoint: u64,
    pub last_tx_seq: u64,
    /// Why replay stopped where it did.
    pub log_end: String,
}

/// What [`fsck`] found. `errors` is empty for a healthy store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsckReport {
    pub stat: LogStoreStat,
    /// Records whose crc, epoch and sequence were verified.
    pub records_checked: u64,
    /// Data pieces read back and verified against their crc.
    pub pieces_checked: u64,
    /// The other checkpoint slot: "ok" or why it does not load.
    pub other_checkpoint: String,
    pub errors: Vec<String>,
}

impl FsckReport {
    pub fn is_clean(&self) -> bool {
        self.errors.is_empty()
    }
}

fn recover(device: &dyn BlockDevice) -> Result<recovery::Recovered, StoreError> {
    recovery::recover(device)?.ok_or_else(|| {
        StoreError::Corrupt("not a LogStore device: the superblock is all zeros".into())
    })
}

fn stat_of(recovered: &recovery::Recovered) -> LogStoreStat {
    let geometry = recovered.superblock.geometry;
    let index = &recovered.index;
    let in_use = index
        .segment_live_bytes
        .iter()
        .enumerate()
        .filter(|(segment, &live)| live > 0 || recovered.chain.contains(segment));
    LogStoreStat {
        segments_start: geometry.segments_start,
        segment_bytes: geometry.segment_bytes,
        segment_count: geometry.segment_count,
        free_segments: geometry.segment_count as usize - in_use.count(),
        live_bytes: index.segment_live_bytes.iter().sum(),
        collection_count: index.collections.len(),
        object_count: index.collections.values().map(|o| o.len() as u64).sum(),
        piece_count: index.pieces.len(),
        checkpoint_seq: recovered.checkpoint.checkpoint_seq,
        checkpoint_epoch: recovered.checkpoint.epoch,
        checkpoint_slot: recovered.checkpoint_slot,
        records_after_checkpoint: recovered.records_replayed,
        last_tx_seq: recovered.last_tx_seq,
        log_end: recovered.stop_reason.clone(),
    }
}

/// Summarizes the device (`carmine store stat`). Reads only.
pub fn stat(device: &dyn BlockDevice) -> Result<LogStoreStat, StoreError> {
    Ok(stat_of(&recover(device)?))
}

/// Checks the device (`carmine store fsck`): the superblock, both checkpoint slots,
/// every record after the checkpoint (crc, epoch, sequence, decoding, validity of each
/// transaction), the index (references, totals, live bytes, pieces that overlap) and
/// every live data piece against its crc. Reads only. `Err` means the store cannot be
/// opened at all; problems that `open` tolerates are listed in the report.
pub fn fsck(device: &dyn BlockDevice) -> Result<FsckReport, StoreError> {
    let recovered = recover(device)?;
    let mut errors = Vec::new();
    let other = 1 - recovered.checkpoint_slot;
    let other_checkpoint = match recovery::read_slot(device, &recovered.superblock, other)? {
        Ok((meta, _)) => format!("ok (checkpoint {})", meta.checkpoint_seq),
        Err(reason) => reason,
    };
    if let Err(error) = recovered.index.check_consistency() {
        errors.push(format!("index: {error}"));
    }
    let mut previous_end = 0;
    let mut by_offset: Vec<_> = recovered.index.pieces.iter().collect();
    by_offset.sort_by_key(|(_, piece)| piece.device_offset);
    let mut pieces_checked = 0;
    for (id, piece) in by_offset {
        if piece.device_offset < previous_end {
            errors.push(format!("piece {id} overlaps the piece before it"));
        }
        previous_end = piece.device_offset + u64::from(piece.length);
        let mut data = vec![0u8; piece.length as usize];
        device
            .read_at(piece.device_offset, &mut data)
            .map_err(io_error)?;
        pieces_checked += 1;
        if crc32c::crc32c(&data) != piece.crc {
            errors.push(format!(
                "piece {id} at device offset {} fails its crc",
                piece.device_offset
            ));
        }
    }
    Ok(FsckReport {
        stat: stat_of(&recovered),
        records_checked: recovered.records_replayed,
        pieces_checked,
        other_checkpoint,
        errors,
    })
}
