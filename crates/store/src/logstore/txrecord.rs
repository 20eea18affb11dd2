//! The payload of a Transaction record (kind 1; bytes in `format.rs`): the client
//! transaction with each write either inline, its data a piece inside the record, or
//! out of line, naming pieces already appended as Data records.

use super::index::{Geometry, LogOp, PieceLocation};
use crate::{CollectionId, TxOp};
use bytes::Bytes;
use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
use carmine_types::limits::MESSAGE_BYTES_MAX;
use carmine_types::ObjectId;

const TX_RECORD_VERSION: u8 = 1;
const OP_KIND_OTHER: u8 = 1;
const OP_KIND_INLINE_WRITE: u8 = 2;
const OP_KIND_OUT_OF_LINE_WRITE: u8 = 3;
/// Envelope head: version, compat, body length.
const ENVELOPE_HEAD_BYTES: usize = 6;

/// How one write of a transaction is logged.
#[derive(Debug, Clone)]
pub enum WritePlan {
    Inline,
    OutOfLine(Vec<PieceLocation>),
}

/// Encodes a transaction record payload. `plans` holds one entry per `Write` op, in
/// order. Returns the payload and, per inline write, its data position in it.
pub fn encode(tx_seq: u64, ops: &[TxOp], plans: &[WritePlan]) -> (Vec<u8>, Vec<usize>) {
    let mut inline_positions = Vec::new();
    let mut plans = plans.iter();
    let mut e = Encoder::new();
    e.versioned(TX_RECORD_VERSION, TX_RECORD_VERSION, |e| {
        e.put_u64(tx_seq);
        e.put_u32(u32::try_from(ops.len()).expect("op count"));
        for op in ops {
            let TxOp::Write {
                coll,
                oid,
                offset,
                data,
            } = op
            else {
                e.put_u8(OP_KIND_OTHER);
                op.encode(e);
                continue;
            };
            match plans.next().expect("one plan per write") {
                WritePlan::Inline => {
                    put_write_head(e, OP_KIND_INLINE_WRITE, coll, oid, *offset);
                    inline_positions.push(e.len() + 4);
                    e.put_blob(data);
                }
                WritePlan::OutOfLine(pieces) => {
                    put_write_head(e, OP_KIND_OUT_OF_LINE_WRITE, coll, oid, *offset);
                    e.put_u32(u32::try_from(pieces.len()).expect("piece count"));
                    for piece in pieces {
                        e.put_u64(piece.device_offset);
                        e.put_u32(piece.length);
                        e.put_u32(piece.crc);
                    }
                }
            }
        }
    });
    (e.into_vec(), inline_positions)
}

fn put_write_head(e: &mut Encoder, kind: u8, coll: &CollectionId, oid: &ObjectId, offset: u64) {
    e.put_u8(kind);
    coll.encode(e);
    oid.encode(e);
    e.put_u64(offset);
}

fn invalid(what: &'static str, value: u64) -> DecodeError {
    DecodeError::Invalid { what, value }
}

/// Decodes a payload that starts at `payload_offset` on the device into its tx_seq
/// and ops; inline writes become pieces inside the payload.
pub fn decode(
    payload: Bytes,
    payload_offset: u64,
    geometry: &Geometry,
) -> Result<(u64, Vec<LogOp>), DecodeError> {
    if payload.len() < ENVELOPE_HEAD_BYTES {
        return Err(DecodeError::Truncated {
            needed: ENVELOPE_HEAD_BYTES,
            remaining: payload.len(),
        });
    }
    let body_bytes = u32::from_le_bytes(payload[2..6].try_into().expect("4 bytes")) as usize;
    let body_end = ENVELOPE_HEAD_BYTES + body_bytes;
    let mut d = Decoder::new(payload);
    d.versioned("transaction record", TX_RECORD_VERSION, |d, _| {
        let tx_seq = d.get_u64()?;
        let count = d.get_count("logged ops", 2)?;
        let mut ops = Vec::with_capacity(count);
        for _ in 0..count {
            ops.push(decode_op(d, payload_offset, body_end, geometry)?);
        }
        Ok((tx_seq, ops))
    })
}

fn decode_op(
    d: &mut Decoder,
    payload_offset: u64,
    body_end: usize,
    geometry: &Geometry,
) -> Result<LogOp, DecodeError> {
    let kind = d.get_u8()?;
    if kind == OP_KIND_OTHER {
        let op = TxOp::decode(d)?;
        if matches!(op, TxOp::Write { .. }) {
            return Err(invalid("logged op", u64::from(kind)));
        }
        return Ok(LogOp::Op(op));
    }
    let coll = CollectionId::decode(d)?;
    let oid = ObjectId::decode(d)?;
    let offset = d.get_u64()?;
    let mut pieces = Vec::new();
    match kind {
        OP_KIND_INLINE_WRITE => {
            let position = body_end - d.remaining() + 4;
            let data = d.get_blob("write data", MESSAGE_BYTES_MAX)?;
            if !data.is_empty() {
                pieces.push(PieceLocation {
                    device_offset: payload_offset + position as u64,
                    length: data.len() as u32,
                    crc: crc32c::crc32c(&data),
                });
            }
        }
        OP_KIND_OUT_OF_LINE_WRITE => {
            for _ in 0..d.get_count("write pieces", 16)? {
                let piece = PieceLocation {
                    device_offset: d.get_u64()?,
                    length: d.get_u32()?,
                    crc: d.get_u32()?,
                };
                check_piece(&piece, geometry)?;
                pieces.push(piece);
            }
        }
        other => return Err(invalid("logged op", u64::from(other))),
    }
    Ok(LogOp::Write {
        coll,
        oid,
        offset,
        pieces,
    })
}

/// A piece must be non-empty and lie inside one segment.
pub fn check_piece(piece: &PieceLocation, geometry: &Geometry) -> Result<(), DecodeError> {
    let start = piece.device_offset;
    let segments_end =
        geometry.segments_start + u64::from(geometry.segment_count) * geometry.segment_bytes;
    let end = start.saturating_add(u64::from(piece.length));
    if piece.length == 0 || start < geometry.segments_start || end > segments_end {
        return Err(invalid("piece offset", start));
    }
    let segment = (start - geometry.segments_start) / geometry.segment_bytes;
    if (end - 1 - geometry.segments_start) / geometry.segment_bytes != segment {
        return Err(invalid("piece crosses a segment", start));
    }
    Ok(())
}

/// Encodes a Relocate payload.
pub fn encode_relocations(moves: &[(u64, u64)]) -> Vec<u8> {
    let mut e = Encoder::new();
    e.versioned(1, 1, |e| {
        e.put_u32(u32::try_from(moves.len()).expect("relocation count"));
        for (piece_id, new_offset) in moves {
            e.put_u64(*piece_id);
            e.put_u64(*new_offset);
        }
    });
    e.into_vec()
}

pub fn decode_relocations(payload: Bytes) -> Result<Vec<(u64, u64)>, DecodeError> {
    Decoder::new(payload).versioned("relocations", 1, |d, _| {
        let count = d.get_count("relocations", 16)?;
        (0..count)
            .map(|_| Ok((d.get_u64()?, d.get_u64()?)))
            .collect()
    })
}

pub fn decode_segment_end(payload: Bytes) -> Result<u32, DecodeError> {
    Decoder::new(payload).versioned("segment end", 1, |d, _| d.get_u32())
}
