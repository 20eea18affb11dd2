//! Recovery: read the superblock, load the newest valid checkpoint and replay the
//! records after it. Nothing here writes; [`LogStore::open`](crate::LogStore::open),
//! `fsck` and `stat` all start from [`recover`].

use super::checkpoint::{self, CheckpointMeta};
use super::format::{
    frame, framed_length, parse_record_header, record_crc_matches, unframe, RecordHeader,
    RecordKind, FORMAT_VERSION, RECORD_HEADER_BYTES, SUPERBLOCK_BYTES, SUPERBLOCK_MAGIC,
};
use super::index::{Geometry, Index, LogOp, PieceLocation};
use super::txrecord;
use super::validate::DryRun;
use crate::device::BlockDevice;
use crate::StoreError;
use bytes::Bytes;

/// The device geometry recorded at format time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    pub geometry: Geometry,
    pub checkpoint_slot_bytes: u64,
}

impl Superblock {
    pub fn slot_offset(&self, slot: usize) -> u64 {
        assert!(slot < 2);
        SUPERBLOCK_BYTES + slot as u64 * self.checkpoint_slot_bytes
    }

    pub fn encode(&self) -> Vec<u8> {
        frame(SUPERBLOCK_MAGIC, |e| {
            e.put_u64(self.geometry.segment_bytes);
            e.put_u32(self.geometry.segment_count);
            e.put_u64(self.checkpoint_slot_bytes);
            e.put_u64(self.geometry.segments_start);
        })
    }
}

pub fn io_error(error: std::io::Error) -> StoreError {
    StoreError::Io(error.to_string())
}

fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

fn read_bytes(device: &dyn BlockDevice, offset: u64, length: usize) -> Result<Vec<u8>, StoreError> {
    let mut buf = vec![0u8; length];
    device.read_at(offset, &mut buf).map_err(io_error)?;
    Ok(buf)
}

/// The superblock, or `None` for a device never formatted (all zeros).
pub fn read_superblock(device: &dyn BlockDevice) -> Result<Option<Superblock>, StoreError> {
    if device.size_bytes() < SUPERBLOCK_BYTES {
        return Err(corrupt("device smaller than a superblock"));
    }
    let raw = read_bytes(device, 0, SUPERBLOCK_BYTES as usize)?;
    if raw.iter().all(|&b| b == 0) {
        return Ok(None);
    }
    let mut d = unframe(Bytes::from(raw), SUPERBLOCK_MAGIC)
        .map_err(|e| corrupt(format!("superblock: {e}")))?;
    let superblock = d
        .versioned("superblock", FORMAT_VERSION, |d, _| {
            let segment_bytes = d.get_u64()?;
            let segment_count = d.get_u32()?;
            let checkpoint_slot_bytes = d.get_u64()?;
            let segments_start = d.get_u64()?;
            Ok(Superblock {
                geometry: Geometry {
                    segments_start,
                    segment_bytes,
                    segment_count,
                },
                checkpoint_slot_bytes,
            })
        })
        .map_err(|e| corrupt(format!("superblock: {e}")))?;
    let geometry = superblock.geometry;
    let end = geometry.segments_start + geometry.segment_bytes * u64::from(geometry.segment_count);
    if geometry.segment_count == 0 || geometry.segment_bytes == 0 || end > device.size_bytes() {
        return Err(corrupt("superblock geometry does not fit the device"));
    }
    Ok(Some(superblock))
}

/// One checkpoint slot: decoded, or why not.
pub type SlotState = Result<(CheckpointMeta, Index), String>;

pub fn read_slot(
    device: &dyn BlockDevice,
    superblock: &Superblock,
    slot: usize,
) -> Result<SlotState, StoreError> {
    let offset = superblock.slot_offset(slot);
    let head = read_bytes(device, offset, 10)?;
    let Some(length) = framed_length(&head, super::format::CHECKPOINT_MAGIC) else {
        return Ok(Err("no checkpoint".into()));
    };
    if length as u64 > superblock.checkpoint_slot_bytes {
        return Ok(Err("checkpoint longer than its slot".into()));
    }
    let raw = read_bytes(device, offset, length)?;
    Ok(checkpoint::decode(Bytes::from(raw), superblock.geometry))
}

/// The checkpoint sequence number slot `slot` claims, read before anything is
/// verified (the sequence number is the first field of every checkpoint version).
fn claimed_checkpoint_seq(
    device: &dyn BlockDevice,
    superblock: &Superblock,
    slot: usize,
) -> Result<Option<u64>, StoreError> {
    let head = read_bytes(device, superblock.slot_offset(slot), 18)?;
    Ok(framed_length(&head, super::format::CHECKPOINT_MAGIC)
        .map(|_| u64::from_le_bytes(head[10..18].try_into().expect("8 bytes"))))
}

/// The valid checkpoint with the higher sequence number, and its slot. Only the slot
/// that claims the higher number is decoded, unless it fails to verify: with millions
/// of objects, decoding a checkpoint is most of the time an open takes.
pub fn newest_checkpoint(
    device: &dyn BlockDevice,
    superblock: &Superblock,
) -> Result<(usize, CheckpointMeta, Index), StoreError> {
    let claims = [
        claimed_checkpoint_seq(device, superblock, 0)?,
        claimed_checkpoint_seq(device, superblock, 1)?,
    ];
    let mut order = [0, 1];
    order.sort_by_key(|&slot| std::cmp::Reverse(claims[slot]));
    let mut reasons = Vec::new();
    for slot in order {
        match read_slot(device, superblock, slot)? {
            Ok((meta, index)) => return Ok((slot, meta, index)),
            Err(reason) => reasons.push(format!("slot {slot}: {reason}")),
        }
    }
    Err(corrupt(format!(
        "no valid checkpoint ({})",
        reasons.join("; ")
    )))
}

/// What replay found.
#[derive(Debug)]
pub struct Recovered {
    pub superblock: Superblock,
    pub checkpoint: CheckpointMeta,
    pub checkpoint_slot: usize,
    pub index: Index,
    pub last_tx_seq: u64,
    pub next_record_seq: u64,
    /// Segments replay passed through, from the checkpoint's to the last.
    pub chain: Vec<usize>,
    pub end_segment: usize,
    /// Offset in `end_segment` just after the last valid record.
    pub end_offset: u64,
    pub records_replayed: u64,
    /// Why replay stopped: the first record that did not verify.
    pub stop_reason: String,
}

/// The next record, or why there is none.
enum Next {
    Record(RecordHeader, Bytes),
    End(String),
}

fn read_record(
    device: &dyn BlockDevice,
    geometry: &Geometry,
    segment: usize,
    offset: u64,
    epoch: u64,
    record_seq: u64,
) -> Result<Next, StoreError> {
    let room = geometry.segment_bytes - offset;
    if room < RECORD_HEADER_BYTES as u64 {
        return Ok(Next::End("segment ends without a SegmentEnd record".into()));
    }
    let at = geometry.segment_start(segment) + offset;
    let raw: [u8; RECORD_HEADER_BYTES] = read_bytes(device, at, RECORD_HEADER_BYTES)?
        .try_into()
        .expect("header");
    let Some(header) = parse_record_header(&raw) else {
        let zero = raw.iter().all(|&b| b == 0);
        return Ok(Next::End(
            if zero {
                "end of log (zeros)"
            } else {
                "no record header"
            }
            .into(),
        ));
    };
    if header.epoch != epoch || header.record_seq != record_seq {
        return Ok(Next::End(format!(
            "stale record (epoch {} seq {}, expected epoch {epoch} seq {record_seq})",
            header.epoch, header.record_seq
        )));
    }
    if u64::from(header.payload_bytes) > room - RECORD_HEADER_BYTES as u64 {
        return Ok(Next::End("record passes the segment end".into()));
    }
    let payload_at = at + RECORD_HEADER_BYTES as u64;
    let mut payload = read_bytes(device, payload_at, header.payload_bytes as usize)?;
    if !record_crc_matches(&raw, &payload) {
        // Read once more: a transient read error must not end the log.
        payload = read_bytes(device, payload_at, header.payload_bytes as usize)?;
        if !record_crc_matches(&raw, &payload) {
            return Ok(Next::End(format!("crc mismatch in record {record_seq}")));
        }
    }
    Ok(Next::Record(header, Bytes::from(payload)))
}

/// Loads the newest checkpoint and replays the log after it. `Ok(None)` if the
/// device was never formatted.
pub fn recover(device: &dyn BlockDevice) -> Result<Option<Recovered>, StoreError> {
    let Some(superblock) = read_superblock(device)? else {
        return Ok(None);
    };
    let (slot, meta, index) = newest_checkpoint(device, &superblock)?;
    let mut state = Recovered {
        superblock,
        checkpoint: meta,
        checkpoint_slot: slot,
        index,
        last_tx_seq: meta.last_tx_seq,
        next_record_seq: meta.next_record_seq,
        chain: vec![meta.replay_segment as usize],
        end_segment: meta.replay_segment as usize,
        end_offset: u64::from(meta.replay_offset),
        records_replayed: 0,
        stop_reason: String::new(),
    };
    let geometry = superblock.geometry;
    loop {
        let next = read_record(
            device,
            &geometry,
            state.end_segment,
            state.end_offset,
            meta.epoch,
            state.next_record_seq,
        )?;
        let (header, payload) = match next {
            Next::Record(header, payload) => (header, payload),
            Next::End(reason) => {
                state.stop_reason = reason;
                return Ok(Some(state));
            }
        };
        let payload_at = geometry.segment_start(state.end_segment)
            + state.end_offset
            + RECORD_HEADER_BYTES as u64;
        state.end_offset += (RECORD_HEADER_BYTES + payload.len()) as u64;
        state.next_record_seq += 1;
        state.records_replayed += 1;
        apply_record(&mut state, header, payload, payload_at)?;
    }
}

fn apply_record(
    state: &mut Recovered,
    header: RecordHeader,
    payload: Bytes,
    payload_at: u64,
) -> Result<(), StoreError> {
    let geometry = state.superblock.geometry;
    let seq = header.record_seq;
    match header.kind {
        RecordKind::Data | RecordKind::Padding => {}
        RecordKind::Transaction => {
            let (tx_seq, ops) = txrecord::decode(payload, payload_at, &geometry)
                .map_err(|e| corrupt(format!("record {seq}: {e}")))?;
            if tx_seq != state.last_tx_seq + 1 {
                return Err(corrupt(format!(
                    "record {seq}: tx {tx_seq} after {}",
                    state.last_tx_seq
                )));
            }
            check_ops(&state.index, &ops).map_err(|e| corrupt(format!("record {seq}: {e}")))?;
            for op in ops {
                state.index.apply(op);
            }
            state.last_tx_seq = tx_seq;
        }
        RecordKind::Relocate => {
            let moves = txrecord::decode_relocations(payload)
                .map_err(|e| corrupt(format!("record {seq}: {e}")))?;
            for (piece_id, new_offset) in moves {
                let length = state.index.pieces.get(&piece_id).map(|p| p.length);
                let location = PieceLocation {
                    device_offset: new_offset,
                    length: length.unwrap_or(0),
                    crc: 0,
                };
                txrecord::check_piece(&location, &geometry).map_err(|e| {
                    corrupt(format!("record {seq}: relocating piece {piece_id}: {e}"))
                })?;
                state
                    .index
                    .relocate(piece_id, new_offset)
                    .expect("checked above");
            }
        }
        RecordKind::SegmentEnd => {
            let next = txrecord::decode_segment_end(payload)
                .map_err(|e| corrupt(format!("record {seq}: {e}")))?
                as usize;
            if next >= geometry.segment_count as usize || state.chain.contains(&next) {
                return Err(corrupt(format!("record {seq}: bad next segment {next}")));
            }
            state.chain.push(next);
            state.end_segment = next;
            state.end_offset = 0;
        }
    }
    Ok(())
}

/// Validates a replayed transaction exactly as `submit` did.
fn check_ops(index: &Index, ops: &[LogOp]) -> Result<(), StoreError> {
    let mut dry_run = DryRun::new(index);
    for op in ops {
        match op {
            LogOp::Op(op) => dry_run.check(op)?,
            LogOp::Write { coll, oid, .. } => dry_run.check_create(*coll, oid)?,
        }
    }
    Ok(())
}
