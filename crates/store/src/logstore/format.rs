//! The on-disk format of [`LogStore`](crate::LogStore), byte by byte. All integers are
//! little-endian; `envelope(v, c){…}` is the versioned envelope of
//! [`carmine_types::encoding`] (`u8 version | u8 compat | u32 body_length | body`), so
//! later versions may append fields; `crc32c` is Castagnoli.
//!
//! ```text
//! Device  := Superblock (4096 bytes at 0)
//!          | CheckpointSlot 0 | CheckpointSlot 1   (checkpoint_slot_bytes each)
//!          | Segment 0 … Segment N-1                (segment_bytes each, from segments_start)
//!
//! Superblock := u32 magic "CMSB" | envelope(1,1){ u64 segment_bytes | u32 segment_count
//!             | u64 checkpoint_slot_bytes | u64 segments_start } | u32 crc32c(all before)
//!   Written once when the device is formatted. An all-zero superblock means "not
//!   formatted"; anything else that does not verify is corruption.
//!
//! CheckpointSlot := u32 magic "CMCP" | envelope(2,2){ Checkpoint } | u32 crc32c(all before)
//!   Checkpoint := u64 checkpoint_seq | u64 epoch | u32 replay_segment
//!               | u32 replay_offset (in the segment) | u64 next_record_seq
//!               | u64 last_tx_seq | u64 next_piece_id
//!               | var piece_count | Piece* | var collection_count | Collection*
//!   var := LEB128 varint: 7 bits a byte, low bits first, high bit set on all but the last
//!   Piece := var id_delta (> 0: from the previous piece's id, or from 0)
//!          | var zigzag(device_offset - the previous piece's device_offset, or - 0)
//!          | var length | u32 crc32c                       (pieces ascend by id)
//!   Collection := u8 0 (meta) | u8 1 var pool var seed (a PG)
//!               | var object_count | Object*            (objects ascend by ObjectId)
//!   Object := u8 flags (1 snap, 2 mtime, 4 xattrs, 8 omap; other bits invalid)
//!           | var shared (leading name bytes equal to the previous object's name)
//!           | var suffix_length | the rest of the name (UTF-8 once joined)
//!           | [var snap if flag 1, else head] | var size_bytes | [u64 mtime_ns if flag 2]
//!           | var extent_count | (var gap from the previous extent's end, or from 0
//!             | var piece_id | var piece_skip | var length)*
//!           | [var xattr_count | (var length | name | var length | value)* if flag 4]
//!           | [var omap_count | (var length | key | var length | value)* if flag 8]
//!   Version 1 (envelope(1,1), still read): the same fields, fixed width and unshared:
//!     … | u64 next_piece_id | u32 piece_count
//!     | (u64 piece_id | u64 device_offset | u32 length | u32 crc32c)*
//!     | u32 collection_count | (CollectionId | u32 object_count | ObjectV1*)*
//!     ObjectV1 := ObjectId | u64 size_bytes | u64 mtime_ns | u32 extent_count
//!       | (u64 logical_offset | u64 piece_id | u32 piece_skip | u32 length)*
//!       | u32 xattr_count | (blob name | blob value)* | u32 omap_count | (blob key | blob value)*
//!   Slots alternate; the valid one with the higher checkpoint_seq wins (only the slot
//!   claiming the higher number is decoded unless it fails). The checkpoint is written
//!   only after every record before its replay position is durable.
//!
//! Segment := Record* (records never cross a segment; a segment has no header)
//! Record := RecordHeader (32 bytes) | payload
//!   RecordHeader := 0 u32 magic "CMRC" | 4 u8 version=1 | 5 u8 kind | 6 u16 zero
//!                 | 8 u64 epoch | 16 u64 record_seq | 24 u32 payload_bytes
//!                 | 28 u32 crc32c(header bytes 0..28, then payload)
//!   kind 1 Transaction: envelope(1,1){ u64 tx_seq | u32 op_count | LogOp* }
//!     LogOp := u8 1 | TxOp                        (any op but Write; transaction codec)
//!            | u8 2 | CollectionId | ObjectId | u64 offset | blob data     (inline write)
//!            | u8 3 | CollectionId | ObjectId | u64 offset
//!                   | u32 piece_count | (u64 device_offset | u32 length | u32 crc32c)*
//!              (out-of-line write: the data is in Data records earlier in the log)
//!   kind 2 Data:       raw bytes of one out-of-line piece (no envelope)
//!   kind 3 Relocate:   envelope(1,1){ u32 count | (u64 piece_id | u64 new_device_offset)* }
//!   kind 4 SegmentEnd: envelope(1,1){ u32 next_segment }   (the log continues at its offset 0)
//!   kind 5 Padding:    zeros up to the next 512-byte boundary (ends every flush)
//! ```
//!
//! Replay starts at the checkpoint's position and accepts a record only if its magic,
//! version and crc verify, its epoch equals the checkpoint's and its record_seq is one
//! more than the previous one; the first record that fails ends the log. Each open
//! writes a checkpoint with a new epoch before any record, so stale records left past
//! the end by an earlier crash can never be mistaken for new ones. Each flush starts on
//! a 512-byte boundary, so a torn write cannot damage a sector holding durable records.
//! A flush's writes also carry zeros from the log's end to the next 4096-byte boundary
//! (never past the segment): past the end of the log, so replay sees "end of log", and
//! a buffered write never covers part of a page that the kernel would first have to
//! read from the disk.

use bytes::Bytes;
use carmine_types::encoding::{Decoder, Encoder};

pub const SUPERBLOCK_BYTES: u64 = 4096;
pub const SECTOR_BYTES: u64 = 512;
/// Flush writes end on a boundary of this many bytes (see the module docs): the page
/// size.
pub const PAGE_BYTES: u64 = 4096;
pub const RECORD_HEADER_BYTES: usize = 32;

pub const SUPERBLOCK_MAGIC: u32 = u32::from_le_bytes(*b"CMSB");
pub const CHECKPOINT_MAGIC: u32 = u32::from_le_bytes(*b"CMCP");
pub const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"CMRC");
pub const RECORD_VERSION: u8 = 1;
pub const FORMAT_VERSION: u8 = 1;
pub const FORMAT_COMPAT: u8 = 1;

/// Bytes a framed struct adds around its envelope body: magic, envelope head, crc.
pub const FRAME_OVERHEAD_BYTES: usize = 4 + 6 + 4;

/// What a record holds (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    Transaction = 1,
    Data = 2,
    Relocate = 3,
    SegmentEnd = 4,
    Padding = 5,
}

impl RecordKind {
    fn from_u8(value: u8) -> Option<Self> {
        Some(match value {
            1 => Self::Transaction,
            2 => Self::Data,
            3 => Self::Relocate,
            4 => Self::SegmentEnd,
            5 => Self::Padding,
            _ => return None,
        })
    }
}

/// A decoded, verified record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    pub kind: RecordKind,
    pub epoch: u64,
    pub record_seq: u64,
    pub payload_bytes: u32,
}

/// Appends a whole record (header and payload) to `out`.
#[cfg(test)]
pub fn put_record(out: &mut Vec<u8>, header: &RecordHeader, payload: &[u8]) {
    put_record_with_crc(out, header, payload, crc32c::crc32c(payload));
}

/// [`put_record`] for a caller that already has `crc32c(payload)`, so a large payload
/// is checksummed once.
pub fn put_record_with_crc(
    out: &mut Vec<u8>,
    header: &RecordHeader,
    payload: &[u8],
    payload_crc: u32,
) {
    assert_eq!(header.payload_bytes as usize, payload.len());
    debug_assert_eq!(crc32c::crc32c(payload), payload_crc);
    put_record_header(out, header, payload_crc);
    out.extend_from_slice(payload);
}

/// Appends the header of a record whose payload (`header.payload_bytes` long, with
/// crc32c `payload_crc`) the caller writes right after it.
pub fn put_record_header(out: &mut Vec<u8>, header: &RecordHeader, payload_crc: u32) {
    let start = out.len();
    out.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    out.push(RECORD_VERSION);
    out.push(header.kind as u8);
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&header.epoch.to_le_bytes());
    out.extend_from_slice(&header.record_seq.to_le_bytes());
    out.extend_from_slice(&header.payload_bytes.to_le_bytes());
    let header_crc = crc32c::crc32c(&out[start..start + 28]);
    let payload_bytes = header.payload_bytes as usize;
    let crc = super::crc::combine(header_crc, payload_crc, payload_bytes);
    out.extend_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(out.len() - start, RECORD_HEADER_BYTES);
}

fn le_u32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"))
}

fn le_u64(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"))
}

/// Parses a header; `None` if magic, version or kind is wrong. The crc is checked by
/// [`record_crc_matches`] once the payload is read.
pub fn parse_record_header(raw: &[u8; RECORD_HEADER_BYTES]) -> Option<RecordHeader> {
    if le_u32(raw) != RECORD_MAGIC || raw[4] != RECORD_VERSION || raw[6..8] != [0, 0] {
        return None;
    }
    Some(RecordHeader {
        kind: RecordKind::from_u8(raw[5])?,
        epoch: le_u64(&raw[8..]),
        record_seq: le_u64(&raw[16..]),
        payload_bytes: le_u32(&raw[24..]),
    })
}

pub fn record_crc_matches(raw: &[u8; RECORD_HEADER_BYTES], payload: &[u8]) -> bool {
    let crc = crc32c::crc32c_append(crc32c::crc32c(&raw[..28]), payload);
    crc == le_u32(&raw[28..])
}

/// `magic | envelope(version, compat){body} | crc32c`: the superblock and checkpoints.
pub fn frame(magic: u32, body: impl FnOnce(&mut Encoder)) -> Vec<u8> {
    frame_versioned(magic, FORMAT_VERSION, FORMAT_COMPAT, 0, body)
}

/// [`frame`] with its own envelope version, into a buffer of `capacity` bytes.
pub fn frame_versioned(
    magic: u32,
    version: u8,
    compat: u8,
    capacity: usize,
    body: impl FnOnce(&mut Encoder),
) -> Vec<u8> {
    let mut e = Encoder::with_capacity(capacity);
    e.put_u32(magic);
    e.versioned(version, compat, body);
    let mut out = e.into_vec();
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The total length of the frame whose first 10 bytes are `head`, or `None` if the
/// magic is wrong.
pub fn framed_length(head: &[u8], magic: u32) -> Option<usize> {
    if head.len() < 10 || le_u32(head) != magic {
        return None;
    }
    Some(FRAME_OVERHEAD_BYTES + le_u32(&head[6..]) as usize)
}

/// Verifies a whole frame and returns a decoder positioned at its envelope.
pub fn unframe(raw: Bytes, magic: u32) -> Result<Decoder, String> {
    let length = framed_length(&raw, magic).ok_or("bad magic")?;
    if raw.len() < length {
        return Err(format!("truncated: {} of {length} bytes", raw.len()));
    }
    let crc = crc32c::crc32c(&raw[..length - 4]);
    if crc != le_u32(&raw[length - 4..]) {
        return Err("crc mismatch".into());
    }
    Ok(Decoder::new(raw.slice(4..length - 4)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trip_and_crc() {
        let header = RecordHeader {
            kind: RecordKind::Data,
            epoch: 3,
            record_seq: 9,
            payload_bytes: 5,
        };
        let mut out = Vec::new();
        put_record(&mut out, &header, b"hello");
        let raw: [u8; RECORD_HEADER_BYTES] = out[..32].try_into().unwrap();
        assert_eq!(parse_record_header(&raw), Some(header));
        assert!(record_crc_matches(&raw, b"hello"));
        assert!(!record_crc_matches(&raw, b"hellp"));
    }

    #[test]
    fn frame_detects_corruption() {
        let framed = frame(CHECKPOINT_MAGIC, |e| e.put_u64(42));
        let mut d = unframe(Bytes::from(framed.clone()), CHECKPOINT_MAGIC).unwrap();
        let value = d.versioned("test", 1, |d, _| d.get_u64()).unwrap();
        assert_eq!(value, 42);
        let mut bad = framed;
        bad[12] ^= 1;
        assert!(unframe(Bytes::from(bad), CHECKPOINT_MAGIC).is_err());
    }
}
