//! The cleaner: copies live pieces forward out of the emptiest sealed segment, at most
//! [`LogStoreConfig::clean_bytes_per_flush_max`](super::LogStoreConfig) per flush, so
//! that the segment can be freed. The copies go out as Data records followed by one
//! Relocate record naming their new places, in the same group commit as the client
//! records; the old segment is freed only after that sync.

use super::format::{RecordKind, RECORD_HEADER_BYTES};
use super::recovery::io_error;
use super::txrecord::encode_relocations;
use super::LogStore;
use crate::device::BlockDevice;
use crate::StoreError;

/// Pieces one cleaning step moves at most, which bounds its Relocate record.
const CLEAN_MOVES_MAX: usize = 1024;
const RELOCATE_RECORD_BYTES_MAX: u64 = (RECORD_HEADER_BYTES + 10 + 16 * CLEAN_MOVES_MAX) as u64;

impl<D: BlockDevice> LogStore<D> {
    /// The sealed segment with the fewest live bytes, if any holds some and cleaning
    /// it would gain at least a tenth of a segment.
    fn cleaning_victim(&self) -> Option<usize> {
        let live = &self.index.segment_live_bytes;
        let live_max = self.superblock.geometry.segment_bytes / 10 * 9;
        (self.log.sealed.iter().copied())
            .filter(|&segment| live[segment] > 0 && live[segment] <= live_max)
            .min_by_key(|&segment| (live[segment], segment))
    }

    /// One bounded cleaning step (see the module docs). Keeps one segment free.
    pub(super) fn clean_step(&mut self) -> Result<(), StoreError> {
        let Some(victim) = self.cleaning_victim() else {
            return Ok(());
        };
        let budget = self.config.clean_bytes_per_flush_max;
        let piece_ids: Vec<u64> = self.index.segment_pieces[victim].iter().copied().collect();
        let mut moves = Vec::new();
        let mut moved_bytes = 0;
        for piece_id in piece_ids.into_iter().take(CLEAN_MOVES_MAX) {
            let piece = self.index.pieces[&piece_id];
            let length = u64::from(piece.length);
            if moved_bytes > 0 && moved_bytes + length > budget {
                break;
            }
            let records = [
                RECORD_HEADER_BYTES as u64 + length,
                RELOCATE_RECORD_BYTES_MAX,
            ];
            if self.log.segments_needed(records) + 1 > self.log.free.len() {
                break;
            }
            // Copied as they are: a piece that decayed keeps failing its crc.
            let mut data = vec![0u8; piece.length as usize];
            self.device
                .read_at(piece.device_offset, &mut data)
                .map_err(io_error)?;
            let at = self.log.append(RecordKind::Data, &data) + RECORD_HEADER_BYTES as u64;
            moves.push((piece_id, at));
            moved_bytes += length;
        }
        if moves.is_empty() {
            return Ok(());
        }
        self.log
            .append(RecordKind::Relocate, &encode_relocations(&moves));
        for (piece_id, at) in moves {
            self.index.relocate(piece_id, at).expect("piece is live");
        }
        self.stats.cleaned_bytes += moved_bytes;
        self.stats.cleaned_bytes_last_flush = moved_bytes;
        Ok(())
    }
}
