//! The log writer: where the next record goes, the records not yet written to the
//! device (the pending buffer), and the state of every segment.
//!
//! A segment is in exactly one of three sets: `free`; `chain`, the segments the log
//! passed through since the durable checkpoint's position (the last one is the head,
//! where records are appended); or `sealed`, older segments that replay no longer
//! needs but that may still hold live data. Sealed segments whose live bytes reach
//! zero become free after the next sync.

use super::format::{
    put_record, RecordHeader, RecordKind, PAGE_BYTES, RECORD_HEADER_BYTES, SECTOR_BYTES,
};
use super::index::Geometry;
use crate::device::BlockDevice;
use carmine_types::encoding::Encoder;
use std::collections::BTreeSet;
use std::io;

/// Bytes kept free at the end of every segment for a `SegmentEnd` record and the
/// padding of a flush.
pub const SEGMENT_TAIL_RESERVE_BYTES: u64 = 1024;
const SEGMENT_END_RECORD_BYTES: u64 = RECORD_HEADER_BYTES as u64 + 10;
const _: () = assert!(
    SEGMENT_END_RECORD_BYTES + SECTOR_BYTES + (RECORD_HEADER_BYTES as u64)
        < SEGMENT_TAIL_RESERVE_BYTES
);
const ZEROS: [u8; PAGE_BYTES as usize] = [0; PAGE_BYTES as usize];
/// Written chunk buffers kept for reuse by later flushes.
const SPARE_BUFFERS_MAX: usize = 2;

/// Contiguous bytes waiting to be written at `device_offset`.
#[derive(Debug, Clone)]
pub struct PendingChunk {
    pub device_offset: u64,
    pub bytes: Vec<u8>,
}

#[derive(Debug)]
pub struct LogWriter {
    pub geometry: Geometry,
    pub epoch: u64,
    pub next_record_seq: u64,
    pub head_segment: usize,
    pub head_offset: u64,
    pub pending: Vec<PendingChunk>,
    /// Buffers of written chunks, emptied, for the next flushes (at most
    /// [`SPARE_BUFFERS_MAX`]).
    pub spare: Vec<Vec<u8>>,
    pub free: BTreeSet<usize>,
    pub chain: Vec<usize>,
    pub sealed: BTreeSet<usize>,
}

impl LogWriter {
    /// The largest record (header included) that fits in an empty segment.
    pub fn record_bytes_max(&self) -> u64 {
        self.geometry.segment_bytes - SEGMENT_TAIL_RESERVE_BYTES
    }

    fn fits(&self, head_offset: u64, record_bytes: u64) -> bool {
        head_offset + record_bytes + SEGMENT_TAIL_RESERVE_BYTES <= self.geometry.segment_bytes
    }

    /// How many free segments appending records of these sizes would take.
    pub fn segments_needed(&self, record_lengths: impl IntoIterator<Item = u64>) -> usize {
        let mut head_offset = self.head_offset;
        let mut segments = 0;
        for length in record_lengths {
            assert!(
                length <= self.record_bytes_max(),
                "record larger than a segment"
            );
            if !self.fits(head_offset, length) {
                segments += 1;
                head_offset = 0;
            }
            head_offset += length;
        }
        segments
    }

    /// Bytes that can still be appended without taking more than `free - reserve`
    /// free segments (an estimate for [`crate::StoreUsage`] style reports).
    pub fn appendable_bytes(&self, reserved_segments: usize) -> u64 {
        let head_room = self.geometry.segment_bytes - SEGMENT_TAIL_RESERVE_BYTES;
        let usable = self.free.len().saturating_sub(reserved_segments) as u64;
        head_room.saturating_sub(self.head_offset) + usable * head_room
    }

    fn device_offset(&self) -> u64 {
        self.geometry.segment_start(self.head_segment) + self.head_offset
    }

    /// The buffer of the pending chunk that ends at the head, started if there is none.
    fn head_chunk(&mut self) -> &mut Vec<u8> {
        let at = self.device_offset();
        let continues = (self.pending.last())
            .is_some_and(|chunk| chunk.device_offset + chunk.bytes.len() as u64 == at);
        if !continues {
            let bytes = self.spare.pop().unwrap_or_default();
            assert!(bytes.is_empty());
            self.pending.push(PendingChunk {
                device_offset: at,
                bytes,
            });
        }
        &mut self.pending.last_mut().expect("just ensured").bytes
    }

    fn put(&mut self, kind: RecordKind, payload: &[u8]) -> u64 {
        let header = RecordHeader {
            kind,
            epoch: self.epoch,
            record_seq: self.next_record_seq,
            payload_bytes: u32::try_from(payload.len()).expect("record under 4 GiB"),
        };
        self.next_record_seq += 1;
        let at = self.device_offset();
        put_record(self.head_chunk(), &header, payload);
        self.head_offset += (RECORD_HEADER_BYTES + payload.len()) as u64;
        assert!(self.head_offset <= self.geometry.segment_bytes);
        at
    }

    /// Appends one record and returns the device offset of its header. Moves to a
    /// free segment first if it does not fit; the caller checked [`Self::segments_needed`].
    pub fn append(&mut self, kind: RecordKind, payload: &[u8]) -> u64 {
        let length = (RECORD_HEADER_BYTES + payload.len()) as u64;
        assert!(
            length <= self.record_bytes_max(),
            "record larger than a segment"
        );
        if !self.fits(self.head_offset, length) {
            let next = self.free.pop_first().expect("caller checked free segments");
            let mut e = Encoder::new();
            e.versioned(1, 1, |e| e.put_u32(next as u32));
            self.put(RecordKind::SegmentEnd, &e.into_vec());
            self.head_segment = next;
            self.head_offset = 0;
            self.chain.push(next);
        }
        self.put(kind, payload)
    }

    /// Ends the pending bytes on a sector boundary with a padding record, so the next
    /// flush never rewrites a sector holding durable records.
    fn pad_to_sector(&mut self) {
        let misalignment = self.head_offset % SECTOR_BYTES;
        if misalignment == 0 {
            return;
        }
        let mut gap = SECTOR_BYTES - misalignment;
        if gap < RECORD_HEADER_BYTES as u64 {
            gap += SECTOR_BYTES;
        }
        let zeros = &ZEROS[..gap as usize - RECORD_HEADER_BYTES];
        self.put(RecordKind::Padding, zeros);
        assert_eq!(self.head_offset % SECTOR_BYTES, 0);
    }

    /// Zeros that take a chunk ending at `end` to the next page boundary, but not past
    /// its segment: past the log's end, they only spare the kernel from reading the
    /// rest of a page it does not hold (see `format.rs`).
    fn page_fill(&self, end: u64) -> &'static [u8] {
        let segment = self.geometry.segment_of(end - 1);
        let segment_end = self.geometry.segment_start(segment) + self.geometry.segment_bytes;
        let page_end = end.div_ceil(PAGE_BYTES) * PAGE_BYTES;
        &ZEROS[..(page_end.min(segment_end) - end) as usize]
    }

    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Pads and writes every pending chunk (one write per chunk, no sync, each filled to
    /// a page boundary); returns the bytes written. On error the chunks stay pending.
    pub fn write_pending(&mut self, device: &mut dyn BlockDevice) -> io::Result<u64> {
        if self.pending.is_empty() {
            return Ok(0);
        }
        self.pad_to_sector();
        let mut written = 0;
        for index in 0..self.pending.len() {
            let chunk = &self.pending[index];
            let fill = self.page_fill(chunk.device_offset + chunk.bytes.len() as u64);
            let chunk = &mut self.pending[index];
            let log_bytes = chunk.bytes.len();
            chunk.bytes.extend_from_slice(fill);
            let result = device.write_at(chunk.device_offset, &chunk.bytes);
            chunk.bytes.truncate(log_bytes);
            result?;
            written += (log_bytes + fill.len()) as u64;
        }
        for chunk in self.pending.drain(..) {
            if self.spare.len() < SPARE_BUFFERS_MAX {
                let mut bytes = chunk.bytes;
                bytes.clear();
                self.spare.push(bytes);
            }
        }
        Ok(written)
    }

    /// Copies `buf.len()` bytes at `device_offset` from the pending buffer if they are
    /// there; returns whether they were.
    pub fn read_pending(&self, device_offset: u64, buf: &mut [u8]) -> bool {
        let end = device_offset + buf.len() as u64;
        for chunk in &self.pending {
            let chunk_end = chunk.device_offset + chunk.bytes.len() as u64;
            if chunk.device_offset <= device_offset && end <= chunk_end {
                let from = (device_offset - chunk.device_offset) as usize;
                buf.copy_from_slice(&chunk.bytes[from..from + buf.len()]);
                return true;
            }
        }
        false
    }

    /// After a checkpoint at the head: every chain segment but the head is sealed.
    pub fn retire_chain(&mut self) {
        let head = self.head_segment;
        for segment in self.chain.drain(..) {
            if segment != head {
                self.sealed.insert(segment);
            }
        }
        self.chain.push(head);
    }
}
