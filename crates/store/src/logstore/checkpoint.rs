//! Checkpoints: the whole index plus the position replay starts from, written to one
//! of two fixed slots (see `format.rs` for the bytes). A checkpoint bounds replay time
//! and lets the segments before its position be reused once their data is dead.

use super::format::{frame, unframe, CHECKPOINT_MAGIC, FORMAT_VERSION};
use super::index::{Extent, Geometry, Index, Onode, Piece};
use crate::CollectionId;
use bytes::Bytes;
use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
use carmine_types::limits::{MESSAGE_BYTES_MAX, OMAP_KEY_BYTES_MAX, XATTR_NAME_BYTES_MAX};
use carmine_types::ObjectId;
use std::collections::BTreeMap;

/// Where replay starts and the counters it continues from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointMeta {
    pub checkpoint_seq: u64,
    pub epoch: u64,
    pub replay_segment: u32,
    pub replay_offset: u32,
    pub next_record_seq: u64,
    pub last_tx_seq: u64,
}

fn put_count(e: &mut Encoder, count: usize) {
    e.put_u32(u32::try_from(count).expect("checkpoint element count over u32::MAX"));
}

pub fn encode(meta: &CheckpointMeta, index: &Index) -> Vec<u8> {
    frame(CHECKPOINT_MAGIC, |e| {
        e.put_u64(meta.checkpoint_seq);
        e.put_u64(meta.epoch);
        e.put_u32(meta.replay_segment);
        e.put_u32(meta.replay_offset);
        e.put_u64(meta.next_record_seq);
        e.put_u64(meta.last_tx_seq);
        e.put_u64(index.next_piece_id);
        put_count(e, index.pieces.len());
        for (id, piece) in &index.pieces {
            e.put_u64(*id);
            e.put_u64(piece.device_offset);
            e.put_u32(piece.length);
            e.put_u32(piece.crc);
        }
        put_count(e, index.collections.len());
        for (coll, objects) in &index.collections {
            coll.encode(e);
            put_count(e, objects.len());
            for (oid, onode) in objects {
                oid.encode(e);
                encode_onode(e, onode);
            }
        }
    })
}

fn encode_onode(e: &mut Encoder, onode: &Onode) {
    e.put_u64(onode.size_bytes);
    e.put_u64(onode.mtime_ns);
    put_count(e, onode.extents.len());
    for (offset, extent) in &onode.extents {
        e.put_u64(*offset);
        e.put_u64(extent.piece_id);
        e.put_u32(extent.skip);
        e.put_u32(extent.length);
    }
    put_count(e, onode.xattrs.len());
    for (name, value) in &onode.xattrs {
        e.put_blob(name.as_bytes());
        e.put_blob(value);
    }
    put_count(e, onode.omap.len());
    for (key, value) in &onode.omap {
        e.put_blob(key);
        e.put_blob(value);
    }
}

fn invalid(what: &'static str, value: u64) -> DecodeError {
    DecodeError::Invalid { what, value }
}

/// Decodes and checks a whole checkpoint slot (magic, crc, structure).
pub fn decode(raw: Bytes, geometry: Geometry) -> Result<(CheckpointMeta, Index), String> {
    let mut d = unframe(raw, CHECKPOINT_MAGIC)?;
    let decoded = d.versioned("checkpoint", FORMAT_VERSION, |d, _| {
        decode_body(d, geometry)
    });
    let (meta, mut index) = decoded.map_err(|e| e.to_string())?;
    index.recount()?;
    Ok((meta, index))
}

fn decode_body(
    d: &mut Decoder,
    geometry: Geometry,
) -> Result<(CheckpointMeta, Index), DecodeError> {
    let meta = CheckpointMeta {
        checkpoint_seq: d.get_u64()?,
        epoch: d.get_u64()?,
        replay_segment: d.get_u32()?,
        replay_offset: d.get_u32()?,
        next_record_seq: d.get_u64()?,
        last_tx_seq: d.get_u64()?,
    };
    if meta.replay_segment >= geometry.segment_count {
        return Err(invalid("replay segment", u64::from(meta.replay_segment)));
    }
    let mut index = Index::new(geometry);
    index.next_piece_id = d.get_u64()?;
    let segments_end =
        geometry.segment_start(geometry.segment_count as usize - 1) + geometry.segment_bytes;
    for _ in 0..d.get_count("pieces", 24)? {
        let id = d.get_u64()?;
        let piece = Piece {
            device_offset: d.get_u64()?,
            length: d.get_u32()?,
            crc: d.get_u32()?,
            refs: 0,
        };
        let end = piece.device_offset.saturating_add(u64::from(piece.length));
        if piece.device_offset < geometry.segments_start || end > segments_end {
            return Err(invalid("piece offset", piece.device_offset));
        }
        index.pieces.insert(id, piece);
    }
    for _ in 0..d.get_count("collections", 5)? {
        let coll = CollectionId::decode(d)?;
        let mut objects = BTreeMap::new();
        for _ in 0..d.get_count("objects", 40)? {
            let oid = ObjectId::decode(d)?;
            objects.insert(oid, decode_onode(d)?);
        }
        index.collections.insert(coll, objects);
    }
    Ok((meta, index))
}

fn decode_onode(d: &mut Decoder) -> Result<Onode, DecodeError> {
    let mut onode = Onode {
        size_bytes: d.get_u64()?,
        mtime_ns: d.get_u64()?,
        ..Onode::default()
    };
    for _ in 0..d.get_count("extents", 24)? {
        let offset = d.get_u64()?;
        let extent = Extent {
            piece_id: d.get_u64()?,
            skip: d.get_u32()?,
            length: d.get_u32()?,
        };
        onode.extents.insert(offset, extent);
    }
    for _ in 0..d.get_count("xattrs", 8)? {
        let name = d.get_string("xattr name", XATTR_NAME_BYTES_MAX)?;
        onode
            .xattrs
            .insert(name, d.get_blob("xattr value", MESSAGE_BYTES_MAX)?);
    }
    for _ in 0..d.get_count("omap", 8)? {
        let key = d.get_blob("omap key", OMAP_KEY_BYTES_MAX)?;
        onode
            .omap
            .insert(key, d.get_blob("omap value", MESSAGE_BYTES_MAX)?);
    }
    Ok(onode)
}
