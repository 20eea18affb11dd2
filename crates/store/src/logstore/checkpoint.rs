//! Checkpoints: the whole index plus the position replay starts from, written to one
//! of two fixed slots (see `format.rs` for the bytes). A checkpoint bounds replay time
//! and lets the segments before its position be reused once their data is dead.
//!
//! Version 2 (written now) is compact, because a shard may hold millions of small
//! objects and its checkpoint is read on every start: varints, object names that share
//! a prefix with the previous name store only the rest, and pieces and objects come in
//! ascending order so the maps are bulk-built from sorted runs. Version 1 (fixed-width
//! fields) is still read.

use super::format::{frame_versioned, unframe, CHECKPOINT_MAGIC};
use super::index::{Counters, Extent, Geometry, Index, Objects, Onode, Piece, PieceId};
use super::varint::{put_varint, unzigzag, zigzag, Cursor};
use crate::omap::OmapKey;
use crate::owned::{own_key, own_small};
use crate::CollectionId;
use bytes::Bytes;
use carmine_types::encoding::{Decode, DecodeError, Decoder};
use carmine_types::limits::{
    MESSAGE_BYTES_MAX, OBJECT_NAME_BYTES_MAX, OMAP_KEY_BYTES_MAX, XATTR_NAME_BYTES_MAX,
};
use carmine_types::{ObjectId, PgId, SnapId};
use std::collections::BTreeMap;

/// The checkpoint encoding written; readers accept 1 and 2.
pub const CHECKPOINT_VERSION: u8 = 2;

/// Object flags (version 2): what follows the object's size.
const FLAG_SNAP: u8 = 1;
const FLAG_MTIME: u8 = 2;
const FLAG_XATTRS: u8 = 4;
const FLAG_OMAP: u8 = 8;
const FLAGS_KNOWN: u8 = FLAG_SNAP | FLAG_MTIME | FLAG_XATTRS | FLAG_OMAP;

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

fn invalid(what: &'static str, value: u64) -> DecodeError {
    DecodeError::Invalid { what, value }
}

/// Encodes a version 2 checkpoint (the bytes are in `format.rs`).
pub fn encode(meta: &CheckpointMeta, index: &Index) -> Vec<u8> {
    let object_count: usize = index.collections.values().map(|o| o.len()).sum();
    let capacity = 64 + index.pieces.len() * 16 + object_count * 32;
    let mut body = Vec::with_capacity(capacity);
    body.extend_from_slice(&meta.checkpoint_seq.to_le_bytes());
    body.extend_from_slice(&meta.epoch.to_le_bytes());
    body.extend_from_slice(&meta.replay_segment.to_le_bytes());
    body.extend_from_slice(&meta.replay_offset.to_le_bytes());
    body.extend_from_slice(&meta.next_record_seq.to_le_bytes());
    body.extend_from_slice(&meta.last_tx_seq.to_le_bytes());
    body.extend_from_slice(&index.next_piece_id.to_le_bytes());
    encode_pieces(&mut body, &index.pieces);
    put_varint(&mut body, index.collections.len() as u64);
    for (coll, objects) in &index.collections {
        encode_collection_id(&mut body, *coll);
        put_varint(&mut body, objects.len() as u64);
        let mut previous: &[u8] = &[];
        for (oid, onode) in objects {
            encode_object(&mut body, previous, oid, onode);
            previous = oid.name.as_bytes();
        }
    }
    frame_versioned(
        CHECKPOINT_MAGIC,
        CHECKPOINT_VERSION,
        CHECKPOINT_VERSION,
        body.len() + 16,
        |e| e.put_raw(&body),
    )
}

fn encode_pieces(out: &mut Vec<u8>, pieces: &BTreeMap<PieceId, Piece>) {
    put_varint(out, pieces.len() as u64);
    let (mut previous_id, mut previous_offset) = (0u64, 0u64);
    for (&id, piece) in pieces {
        put_varint(out, id - previous_id);
        put_varint(
            out,
            zigzag(piece.device_offset.wrapping_sub(previous_offset) as i64),
        );
        put_varint(out, u64::from(piece.length));
        out.extend_from_slice(&piece.crc.to_le_bytes());
        previous_id = id;
        previous_offset = piece.device_offset;
    }
}

fn encode_collection_id(out: &mut Vec<u8>, coll: CollectionId) {
    match coll {
        CollectionId::Meta => out.push(0),
        CollectionId::Pg(pg) => {
            out.push(1);
            put_varint(out, pg.pool.0);
            put_varint(out, u64::from(pg.seed));
        }
    }
}

fn put_blob(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn encode_object(out: &mut Vec<u8>, previous_name: &[u8], oid: &ObjectId, onode: &Onode) {
    let name = oid.name.as_bytes();
    let shared = (name.iter().zip(previous_name))
        .take_while(|(a, b)| a == b)
        .count();
    let mut flags = 0;
    for (present, flag) in [
        (oid.snap != SnapId::HEAD, FLAG_SNAP),
        (onode.mtime_ns != 0, FLAG_MTIME),
        (!onode.xattrs.is_empty(), FLAG_XATTRS),
        (!onode.omap.is_empty(), FLAG_OMAP),
    ] {
        if present {
            flags |= flag;
        }
    }
    out.push(flags);
    put_varint(out, shared as u64);
    put_blob(out, &name[shared..]);
    if flags & FLAG_SNAP != 0 {
        put_varint(out, oid.snap.0);
    }
    put_varint(out, onode.size_bytes);
    if flags & FLAG_MTIME != 0 {
        out.extend_from_slice(&onode.mtime_ns.to_le_bytes());
    }
    put_varint(out, onode.extents.len() as u64);
    let mut previous_end = 0;
    for &(offset, extent) in onode.extents.iter() {
        put_varint(out, offset - previous_end);
        put_varint(out, extent.piece_id);
        put_varint(out, u64::from(extent.skip));
        put_varint(out, u64::from(extent.length));
        previous_end = offset + u64::from(extent.length);
    }
    if flags & FLAG_XATTRS != 0 {
        put_varint(out, onode.xattrs.len() as u64);
        for (name, value) in &onode.xattrs {
            put_blob(out, name.as_bytes());
            put_blob(out, value);
        }
    }
    if flags & FLAG_OMAP != 0 {
        put_varint(out, onode.omap.len() as u64);
        for (key, value) in &onode.omap {
            put_blob(out, key.as_slice());
            put_blob(out, value);
        }
    }
}

/// Decodes and checks a whole checkpoint slot (magic, crc, structure), of either
/// version.
pub fn decode(raw: Bytes, geometry: Geometry) -> Result<(CheckpointMeta, Index), String> {
    let mut d = unframe(raw, CHECKPOINT_MAGIC)?;
    let decoded = d.versioned("checkpoint", CHECKPOINT_VERSION, |d, version| {
        if version == 1 {
            decode_body_v1(d, geometry).map(Decoded::Uncounted)
        } else {
            let body = d.get_raw(d.remaining())?;
            decode_body_v2(&body, geometry).map(Decoded::Counted)
        }
    });
    match decoded.map_err(|e| e.to_string())? {
        Decoded::Uncounted((meta, mut index)) => {
            index.recount()?;
            Ok((meta, index))
        }
        Decoded::Counted((meta, parts)) => {
            let index = Index::from_counted_parts(
                geometry,
                parts.next_piece_id,
                parts.pieces,
                parts.collections,
                parts.counters,
            )?;
            debug_assert_eq!(index.check_consistency(), Ok(()));
            Ok((meta, index))
        }
    }
}

/// A decoded body: version 1 still needs [`Index::recount`]; version 2 counted
/// references and totals while decoding, in one pass.
enum Decoded {
    Uncounted((CheckpointMeta, Index)),
    Counted((CheckpointMeta, CountedParts)),
}

struct CountedParts {
    next_piece_id: PieceId,
    pieces: Vec<(PieceId, Piece)>,
    collections: BTreeMap<CollectionId, Objects>,
    counters: Counters,
}

fn check_meta(meta: &CheckpointMeta, geometry: Geometry) -> Result<(), DecodeError> {
    if meta.replay_segment >= geometry.segment_count {
        return Err(invalid("replay segment", u64::from(meta.replay_segment)));
    }
    if u64::from(meta.replay_offset) >= geometry.segment_bytes {
        return Err(invalid("replay offset", u64::from(meta.replay_offset)));
    }
    Ok(())
}

fn check_piece(piece: &Piece, geometry: Geometry) -> Result<(), DecodeError> {
    let segments_end =
        geometry.segments_start + u64::from(geometry.segment_count) * geometry.segment_bytes;
    let end = piece.device_offset.saturating_add(u64::from(piece.length));
    if piece.device_offset < geometry.segments_start || end > segments_end {
        return Err(invalid("piece offset", piece.device_offset));
    }
    Ok(())
}

fn decode_body_v2(
    body: &[u8],
    geometry: Geometry,
) -> Result<(CheckpointMeta, CountedParts), DecodeError> {
    let mut c = Cursor::new(body);
    let meta = CheckpointMeta {
        checkpoint_seq: c.u64()?,
        epoch: c.u64()?,
        replay_segment: c.u32()?,
        replay_offset: c.u32()?,
        next_record_seq: c.u64()?,
        last_tx_seq: c.u64()?,
    };
    check_meta(&meta, geometry)?;
    let next_piece_id = c.u64()?;
    let mut pieces = PieceTable {
        pieces: decode_pieces(&mut c, geometry)?,
        hint: 0,
    };
    let mut counters = Counters::default();
    let mut collections = BTreeMap::new();
    for _ in 0..c.count("collections", 2)? {
        let coll = decode_collection_id(&mut c)?;
        let objects = decode_objects(&mut c, coll, &mut pieces, &mut counters)?;
        if collections.insert(coll, objects).is_some() {
            return Err(invalid("collection listed twice", 0));
        }
    }
    let parts = CountedParts {
        next_piece_id,
        pieces: pieces.pieces,
        collections,
        counters,
    };
    Ok((meta, parts))
}

fn decode_pieces(
    c: &mut Cursor<'_>,
    geometry: Geometry,
) -> Result<Vec<(PieceId, Piece)>, DecodeError> {
    let count = c.count("pieces", 7)?;
    let mut pieces = Vec::with_capacity(count);
    let (mut id, mut device_offset) = (0u64, 0u64);
    for _ in 0..count {
        let delta = c.varint()?;
        if delta == 0 {
            return Err(invalid("piece ids out of order", id));
        }
        id = id.checked_add(delta).ok_or(invalid("piece id", delta))?;
        device_offset = device_offset.wrapping_add(unzigzag(c.varint()?) as u64);
        let piece = Piece {
            device_offset,
            length: c.varint_u32("piece length")?,
            crc: c.u32()?,
            refs: 0,
        };
        check_piece(&piece, geometry)?;
        pieces.push((id, piece));
    }
    Ok(pieces)
}

/// The decoded pieces, ascending by id, and where the last lookup found one: objects
/// written one after another name pieces one after another, so most lookups are the
/// next entry and need no search.
struct PieceTable {
    pieces: Vec<(PieceId, Piece)>,
    hint: usize,
}

impl PieceTable {
    /// Takes a reference to the piece an extent names, checking the extent fits in it.
    fn reference(&mut self, extent: &Extent) -> Result<(), DecodeError> {
        let id = extent.piece_id;
        let at = |position: usize| self.pieces.get(position).is_some_and(|(i, _)| *i == id);
        let position = if at(self.hint + 1) {
            self.hint + 1
        } else if at(self.hint) {
            self.hint
        } else {
            (self.pieces.binary_search_by_key(&id, |(i, _)| *i))
                .map_err(|_| invalid("extent names a missing piece", id))?
        };
        self.hint = position;
        let piece = &mut self.pieces[position].1;
        if u64::from(extent.skip) + u64::from(extent.length) > u64::from(piece.length) {
            return Err(invalid("extent passes its piece", id));
        }
        piece.refs = (piece.refs.checked_add(1)).ok_or(invalid("piece references", id))?;
        Ok(())
    }
}

fn decode_collection_id(c: &mut Cursor<'_>) -> Result<CollectionId, DecodeError> {
    match c.u8()? {
        0 => Ok(CollectionId::Meta),
        1 => {
            let pool = c.varint()?;
            let seed = c.varint_u32("pg seed")?;
            Ok(CollectionId::Pg(PgId::new(pool, seed)))
        }
        other => Err(invalid("collection kind", u64::from(other))),
    }
}

fn decode_objects(
    c: &mut Cursor<'_>,
    coll: CollectionId,
    pieces: &mut PieceTable,
    counters: &mut Counters,
) -> Result<Objects, DecodeError> {
    let count = c.count("objects", 5)?;
    let mut objects: Vec<(ObjectId, Onode)> = Vec::with_capacity(count);
    for _ in 0..count {
        let previous = objects.last().map(|(oid, _)| oid);
        let (oid, onode) = decode_object(c, previous, pieces)?;
        if previous.is_some_and(|previous| *previous >= oid) {
            return Err(invalid("objects out of order", 0));
        }
        counters.add(Counters::of_object(coll, &oid, &onode));
        objects.push((oid, onode));
    }
    // Ascending object ids: the map is bulk-built without a real sort.
    Ok(objects.into_iter().collect())
}

fn decode_object(
    c: &mut Cursor<'_>,
    previous: Option<&ObjectId>,
    pieces: &mut PieceTable,
) -> Result<(ObjectId, Onode), DecodeError> {
    let flags = c.u8()?;
    if flags & !FLAGS_KNOWN != 0 {
        return Err(invalid("object flags", u64::from(flags)));
    }
    let name = decode_name(c, previous.map_or(&[][..], |oid| oid.name.as_bytes()))?;
    let snap = if flags & FLAG_SNAP != 0 {
        SnapId(c.varint()?)
    } else {
        SnapId::HEAD
    };
    let mut onode = Onode {
        size_bytes: c.varint()?,
        ..Onode::default()
    };
    if flags & FLAG_MTIME != 0 {
        onode.mtime_ns = c.u64()?;
    }
    decode_extents(c, &mut onode, pieces)?;
    decode_attributes(c, flags, &mut onode)?;
    Ok((ObjectId { name, snap }, onode))
}

/// An object name: the bytes it shares with the previous name, then the rest.
fn decode_name(c: &mut Cursor<'_>, previous_name: &[u8]) -> Result<String, DecodeError> {
    let shared = c.varint()?;
    if shared > previous_name.len() as u64 {
        return Err(invalid("shared name prefix", shared));
    }
    let shared = shared as usize;
    let suffix = c.blob("object name", OBJECT_NAME_BYTES_MAX - shared)?;
    let mut name = Vec::with_capacity(shared + suffix.len());
    name.extend_from_slice(&previous_name[..shared]);
    name.extend_from_slice(suffix);
    String::from_utf8(name).map_err(|_| DecodeError::Utf8 {
        what: "object name",
    })
}

/// The extents, each taking a reference to its piece; they must end within the size.
fn decode_extents(
    c: &mut Cursor<'_>,
    onode: &mut Onode,
    pieces: &mut PieceTable,
) -> Result<(), DecodeError> {
    let mut offset = 0u64;
    for _ in 0..c.count("extents", 4)? {
        offset = offset
            .checked_add(c.varint()?)
            .ok_or(invalid("extent offset", offset))?;
        let extent = Extent {
            piece_id: c.varint()?,
            skip: c.varint_u32("extent skip")?,
            length: c.varint_u32("extent length")?,
        };
        if extent.length == 0 {
            return Err(invalid("empty extent", offset));
        }
        pieces.reference(&extent)?;
        assert!(onode.extents.push(offset, extent), "offsets ascend");
        offset = offset
            .checked_add(u64::from(extent.length))
            .ok_or(invalid("extent end", offset))?;
    }
    if offset > onode.size_bytes {
        return Err(invalid("extent past the object's size", offset));
    }
    Ok(())
}

/// The xattrs and omap entries the flags say follow.
fn decode_attributes(c: &mut Cursor<'_>, flags: u8, onode: &mut Onode) -> Result<(), DecodeError> {
    if flags & FLAG_XATTRS != 0 {
        for _ in 0..c.count("xattrs", 2)? {
            let name = c.blob("xattr name", XATTR_NAME_BYTES_MAX)?;
            let name = String::from_utf8(name.to_vec())
                .map_err(|_| DecodeError::Utf8 { what: "xattr name" })?;
            let value = c.blob("xattr value", MESSAGE_BYTES_MAX)?;
            onode.xattrs.insert(name, Bytes::copy_from_slice(value));
        }
    }
    if flags & FLAG_OMAP != 0 {
        for _ in 0..c.count("omap", 2)? {
            let key = c.blob("omap key", OMAP_KEY_BYTES_MAX)?;
            let value = c.blob("omap value", MESSAGE_BYTES_MAX)?;
            onode
                .omap
                .insert(OmapKey::copied(key), Bytes::copy_from_slice(value));
        }
    }
    Ok(())
}

fn decode_body_v1(
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
    check_meta(&meta, geometry)?;
    let mut index = Index::new(geometry);
    index.next_piece_id = d.get_u64()?;
    for _ in 0..d.get_count("pieces", 24)? {
        let id = d.get_u64()?;
        let piece = Piece {
            device_offset: d.get_u64()?,
            length: d.get_u32()?,
            crc: d.get_u32()?,
            refs: 0,
        };
        check_piece(&piece, geometry)?;
        index.pieces.insert(id, piece);
    }
    for _ in 0..d.get_count("collections", 5)? {
        let coll = CollectionId::decode(d)?;
        let mut objects = BTreeMap::new();
        for _ in 0..d.get_count("objects", 40)? {
            let oid = ObjectId::decode(d)?;
            objects.insert(oid, decode_onode_v1(d)?);
        }
        index.collections.insert(coll, objects);
    }
    Ok((meta, index))
}

fn decode_onode_v1(d: &mut Decoder) -> Result<Onode, DecodeError> {
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
        if !onode.extents.push(offset, extent) {
            return Err(invalid("extents out of order", offset));
        }
    }
    for _ in 0..d.get_count("xattrs", 8)? {
        let name = d.get_string("xattr name", XATTR_NAME_BYTES_MAX)?;
        let value = own_small(d.get_blob("xattr value", MESSAGE_BYTES_MAX)?);
        onode.xattrs.insert(name, value);
    }
    for _ in 0..d.get_count("omap", 8)? {
        let key = own_key(d.get_blob("omap key", OMAP_KEY_BYTES_MAX)?);
        let value = own_small(d.get_blob("omap value", MESSAGE_BYTES_MAX)?);
        onode.omap.insert(key, value);
    }
    Ok(onode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logstore::format::{frame, FRAME_OVERHEAD_BYTES};
    use crate::logstore::index::{LogOp, PieceLocation};
    use crate::TxOp;
    use carmine_types::encoding::{Encode, Encoder};

    fn geometry() -> Geometry {
        Geometry {
            segments_start: 1 << 20,
            segment_bytes: 1 << 20,
            segment_count: 8,
        }
    }

    fn meta() -> CheckpointMeta {
        CheckpointMeta {
            checkpoint_seq: 7,
            epoch: 3,
            replay_segment: 2,
            replay_offset: 4096,
            next_record_seq: 99,
            last_tx_seq: 42,
        }
    }

    /// An index with every kind of content: shared names, snapshots, mtimes, split
    /// extents sharing a piece, xattrs, omap, two collections.
    fn sample_index() -> Index {
        let mut index = Index::new(geometry());
        let pg = CollectionId::Pg(PgId::new(5, 0x1f));
        for coll in [CollectionId::Meta, pg] {
            index.apply(LogOp::Op(TxOp::CreateCollection(coll)));
        }
        let mut at = geometry().segments_start + 4096;
        let mut write = |index: &mut Index, oid: &ObjectId, offset: u64, length: u32| {
            let pieces = vec![PieceLocation {
                device_offset: at,
                length,
                crc: at as u32,
            }];
            at += u64::from(length) + 100;
            index.apply(LogOp::Write {
                coll: pg,
                oid: oid.clone(),
                offset,
                pieces,
            });
        };
        for i in 0..50u64 {
            let oid = ObjectId::head(format!("rbd_data.abc.{i:016x}"));
            write(&mut index, &oid, i * 7, 4096);
            if i % 5 == 0 {
                write(&mut index, &oid, i * 7 + 100, 10);
            }
        }
        let snap = ObjectId {
            name: "rbd_data.abc.0000000000000003".into(),
            snap: SnapId(4),
        };
        index.apply(LogOp::Op(TxOp::Clone {
            coll: pg,
            src: ObjectId::head("rbd_data.abc.0000000000000003"),
            dst: snap,
        }));
        let named = ObjectId::head("é");
        index.apply(LogOp::Op(TxOp::SetMtime {
            coll: pg,
            oid: named.clone(),
            mtime_ns: 1_700_000_000_000_000_000,
        }));
        index.apply(LogOp::Op(TxOp::SetXattr {
            coll: pg,
            oid: named.clone(),
            name: "_".into(),
            value: Bytes::from_static(b"object info"),
        }));
        index.apply(LogOp::Op(TxOp::OmapSet {
            coll: pg,
            oid: named,
            entries: vec![(Bytes::from_static(b"k"), Bytes::from_static(b"v"))],
        }));
        index.apply(LogOp::Op(TxOp::Touch(
            CollectionId::Meta,
            ObjectId::head("superblock"),
        )));
        index
    }

    fn assert_same(a: &Index, b: &Index) {
        assert_eq!(a.next_piece_id, b.next_piece_id);
        assert_eq!(a.pieces, b.pieces);
        assert_eq!(a.counters, b.counters);
        assert_eq!(a.segment_live_bytes, b.segment_live_bytes);
        let keys = |index: &Index| -> Vec<(CollectionId, ObjectId)> {
            (index.collections.iter())
                .flat_map(|(c, objects)| objects.keys().map(|oid| (*c, oid.clone())))
                .collect()
        };
        assert_eq!(keys(a), keys(b));
        for (coll, objects) in &a.collections {
            for (oid, onode) in objects {
                let other = &b.collections[coll][oid];
                assert_eq!(onode.size_bytes, other.size_bytes);
                assert_eq!(onode.mtime_ns, other.mtime_ns);
                assert_eq!(onode.extents, other.extents);
                assert_eq!(onode.xattrs, other.xattrs);
                assert_eq!(onode.omap, other.omap);
            }
        }
    }

    /// The version 1 encoder, kept to test that old checkpoints still load.
    fn encode_v1(meta: &CheckpointMeta, index: &Index) -> Vec<u8> {
        frame(CHECKPOINT_MAGIC, |e: &mut Encoder| {
            e.put_u64(meta.checkpoint_seq);
            e.put_u64(meta.epoch);
            e.put_u32(meta.replay_segment);
            e.put_u32(meta.replay_offset);
            e.put_u64(meta.next_record_seq);
            e.put_u64(meta.last_tx_seq);
            e.put_u64(index.next_piece_id);
            e.put_u32(index.pieces.len() as u32);
            for (id, piece) in &index.pieces {
                e.put_u64(*id);
                e.put_u64(piece.device_offset);
                e.put_u32(piece.length);
                e.put_u32(piece.crc);
            }
            e.put_u32(index.collections.len() as u32);
            for (coll, objects) in &index.collections {
                coll.encode(e);
                e.put_u32(objects.len() as u32);
                for (oid, onode) in objects {
                    oid.encode(e);
                    e.put_u64(onode.size_bytes);
                    e.put_u64(onode.mtime_ns);
                    e.put_u32(onode.extents.len() as u32);
                    for (offset, extent) in onode.extents.iter() {
                        e.put_u64(*offset);
                        e.put_u64(extent.piece_id);
                        e.put_u32(extent.skip);
                        e.put_u32(extent.length);
                    }
                    e.put_u32(onode.xattrs.len() as u32);
                    for (name, value) in &onode.xattrs {
                        e.put_blob(name.as_bytes());
                        e.put_blob(value);
                    }
                    e.put_u32(onode.omap.len() as u32);
                    for (key, value) in &onode.omap {
                        e.put_blob(key.as_slice());
                        e.put_blob(value);
                    }
                }
            }
        })
    }

    #[test]
    fn version_2_round_trips() {
        let index = sample_index();
        index.check_consistency().unwrap();
        let bytes = encode(&meta(), &index);
        let (decoded_meta, decoded) = decode(Bytes::from(bytes), geometry()).unwrap();
        assert_eq!(decoded_meta, meta());
        assert_same(&index, &decoded);
        decoded.check_consistency().unwrap();
    }

    #[test]
    fn version_1_still_decodes_and_version_2_is_smaller() {
        let index = sample_index();
        let v1 = encode_v1(&meta(), &index);
        let v2 = encode(&meta(), &index);
        assert!(v2.len() * 2 < v1.len(), "{} vs {}", v2.len(), v1.len());
        let (decoded_meta, decoded) = decode(Bytes::from(v1), geometry()).unwrap();
        assert_eq!(decoded_meta, meta());
        assert_same(&index, &decoded);
    }

    #[test]
    fn empty_index_round_trips() {
        let index = Index::new(geometry());
        let bytes = encode(&meta(), &index);
        let (_, decoded) = decode(Bytes::from(bytes), geometry()).unwrap();
        assert_same(&index, &decoded);
    }

    /// Every truncation fails cleanly (crc or structure), never panics.
    #[test]
    fn truncated_checkpoints_are_rejected() {
        let bytes = encode(&meta(), &sample_index());
        for length in 0..bytes.len() {
            let truncated = Bytes::copy_from_slice(&bytes[..length]);
            assert!(decode(truncated, geometry()).is_err(), "length {length}");
        }
    }

    /// A body that passes the crc but lies (as a bug would write it) is rejected by
    /// the structure checks, never accepted or panicking.
    #[test]
    fn corrupt_bodies_with_valid_crcs_are_rejected_or_consistent() {
        let bytes = encode(&meta(), &sample_index());
        let body_start = FRAME_OVERHEAD_BYTES - 4;
        for position in body_start..bytes.len() - 4 {
            for flip in [0x01u8, 0x80] {
                let mut body = bytes[body_start..bytes.len() - 4].to_vec();
                body[position - body_start] ^= flip;
                let framed = frame_versioned(CHECKPOINT_MAGIC, 2, 2, 0, |e| e.put_raw(&body));
                if let Ok((_, index)) = decode(Bytes::from(framed), geometry()) {
                    index.check_consistency().unwrap();
                }
            }
        }
    }

    #[test]
    fn newer_incompatible_versions_are_refused() {
        let framed = frame_versioned(CHECKPOINT_MAGIC, 3, 3, 0, |e| e.put_u64(1));
        let error = decode(Bytes::from(framed), geometry()).unwrap_err();
        assert!(error.contains("newer version"), "{error}");
    }
}
