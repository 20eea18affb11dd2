//! The log writer: where the next record goes, the records not yet written to the
//! device (the pending buffer), and the state of every segment.
//!
//! A segment is in exactly one of three sets: `free`; `chain`, the segments the log
//! passed through since the durable checkpoint's position (the last one is the head,
//! where records are appended); or `sealed`, older segments that replay no longer
//! needs but that may still hold live data. Sealed segments whose live bytes reach
//! zero become free after the next sync.

use super::format::{
    put_record_header, put_record_with_crc, RecordHeader, RecordKind, PAGE_BYTES,
    RECORD_HEADER_BYTES, SECTOR_BYTES,
};
use super::index::Geometry;
use super::pending::{PendingChunk, SHARED_PAYLOAD_BYTES_MIN};
use crate::device::BlockDevice;
use bytes::Bytes;
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

/// A record payload: borrowed (always copied) or shared (copied only if small).
#[derive(Debug, Clone, Copy)]
enum Payload<'a> {
    Borrowed(&'a [u8]),
    Shared(&'a Bytes),
}

impl Payload<'_> {
    fn len(&self) -> usize {
        match self {
            Payload::Borrowed(bytes) => bytes.len(),
            Payload::Shared(bytes) => bytes.len(),
        }
    }
}

#[derive(Debug)]
pub struct LogWriter {
    pub geometry: Geometry,
    pub epoch: u64,
    pub next_record_seq: u64,
    pub head_segment: usize,
    pub head_offset: u64,
    pub pending: Vec<PendingChunk>,
    /// Copy buffers of written chunks for the next flushes (at most
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

    /// The pending chunk that ends at the head, started if there is none.
    fn head_chunk(&mut self) -> &mut PendingChunk {
        let at = self.device_offset();
        if (self.pending.last()).is_none_or(|chunk| chunk.end() != at) {
            let buffer = self.spare.pop().unwrap_or_default();
            self.pending.push(PendingChunk::new(at, buffer));
        }
        self.pending.last_mut().expect("just ensured")
    }

    /// Puts a record at the head (which has room for it); returns its device offset.
    /// A large payload is shared, not copied.
    fn put(&mut self, kind: RecordKind, payload: Payload<'_>, payload_crc: u32) -> u64 {
        let header = RecordHeader {
            kind,
            epoch: self.epoch,
            record_seq: self.next_record_seq,
            payload_bytes: u32::try_from(payload.len()).expect("record under 4 GiB"),
        };
        self.next_record_seq += 1;
        let at = self.device_offset();
        let chunk = self.head_chunk();
        match payload {
            Payload::Shared(bytes) if bytes.len() >= SHARED_PAYLOAD_BYTES_MIN => {
                chunk.extend_copied(|out| put_record_header(out, &header, payload_crc));
                chunk.push_shared(bytes.clone());
            }
            Payload::Shared(bytes) => {
                chunk.extend_copied(|out| put_record_with_crc(out, &header, bytes, payload_crc))
            }
            Payload::Borrowed(bytes) => {
                chunk.extend_copied(|out| put_record_with_crc(out, &header, bytes, payload_crc))
            }
        }
        self.head_offset += (RECORD_HEADER_BYTES + payload.len()) as u64;
        assert!(self.head_offset <= self.geometry.segment_bytes);
        assert_eq!(
            self.device_offset(),
            self.pending.last().expect("put").end()
        );
        at
    }

    /// Appends one record and returns the device offset of its header. Moves to a
    /// free segment first if it does not fit; the caller checked [`Self::segments_needed`].
    pub fn append(&mut self, kind: RecordKind, payload: &[u8]) -> u64 {
        let crc = crc32c::crc32c(payload);
        self.append_payload(kind, Payload::Borrowed(payload), crc)
    }

    /// [`Self::append`] of a payload with its crc32c already known, shared with the
    /// caller rather than copied if it is large.
    pub fn append_shared(&mut self, kind: RecordKind, payload: &Bytes, payload_crc: u32) -> u64 {
        self.append_payload(kind, Payload::Shared(payload), payload_crc)
    }

    fn append_payload(&mut self, kind: RecordKind, payload: Payload<'_>, payload_crc: u32) -> u64 {
        let length = (RECORD_HEADER_BYTES + payload.len()) as u64;
        assert!(
            length <= self.record_bytes_max(),
            "record larger than a segment"
        );
        if !self.fits(self.head_offset, length) {
            let next = self.free.pop_first().expect("caller checked free segments");
            let mut e = Encoder::new();
            e.versioned(1, 1, |e| e.put_u32(next as u32));
            let end = e.into_vec();
            self.put(
                RecordKind::SegmentEnd,
                Payload::Borrowed(&end),
                crc32c::crc32c(&end),
            );
            self.head_segment = next;
            self.head_offset = 0;
            self.chain.push(next);
        }
        self.put(kind, payload, payload_crc)
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
        self.put(
            RecordKind::Padding,
            Payload::Borrowed(zeros),
            crc32c::crc32c(zeros),
        );
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
            let fill = self.page_fill(self.pending[index].end());
            written += self.pending[index].write_to(device, fill)?;
        }
        for chunk in self.pending.drain(..) {
            if self.spare.len() < SPARE_BUFFERS_MAX {
                self.spare.push(chunk.into_buffer());
            }
        }
        Ok(written)
    }

    /// Copies `buf.len()` bytes at `device_offset` from the pending buffer if they are
    /// there; returns whether they were.
    pub fn read_pending(&self, device_offset: u64, buf: &mut [u8]) -> bool {
        (self.pending.iter()).any(|chunk| chunk.read(device_offset, buf))
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
