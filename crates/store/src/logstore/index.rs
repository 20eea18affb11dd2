//! The in-memory index of a [`LogStore`](crate::LogStore): collections, objects whose
//! data are extents of checksummed pieces stored in segments, xattrs and omap, plus
//! the live bytes of every segment. It changes only through [`Index::apply`], which
//! cannot fail: transactions are validated first (see `validate.rs`).
//!
//! A piece is one contiguous run of data on the device (at most
//! [`PIECE_BYTES_MAX`](super::PIECE_BYTES_MAX)) with its crc32c; extents reference a
//! sub-range of a piece, so a 4 KiB overwrite splits one extent and adds one piece
//! instead of rewriting the object. A piece is live while any extent references it;
//! segment live bytes count whole live pieces, which is what the cleaner must copy.

use super::extents::ExtentMap;
use crate::omap::OmapKey;
use crate::owned::{own_key, own_small};
use crate::{CollectionId, MemStore, TxOp};
use bytes::Bytes;
use carmine_types::ObjectId;
use std::collections::{BTreeMap, BTreeSet};

pub type PieceId = u64;

/// Where one piece lives and how to verify it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub device_offset: u64,
    pub length: u32,
    pub crc: u32,
    /// Extents referencing this piece.
    pub refs: u32,
}

/// A new piece named by a write: where its bytes are and their crc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PieceLocation {
    pub device_offset: u64,
    pub length: u32,
    pub crc: u32,
}

/// Bytes `skip..skip+length` of a piece, at some logical offset of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub piece_id: PieceId,
    pub skip: u32,
    pub length: u32,
}

#[derive(Debug, Clone, Default)]
pub struct Onode {
    pub size_bytes: u64,
    pub mtime_ns: u64,
    pub extents: ExtentMap,
    pub xattrs: BTreeMap<String, Bytes>,
    pub omap: BTreeMap<OmapKey, Bytes>,
}

impl Onode {
    fn attribute_bytes(&self) -> u64 {
        let xattrs: usize = self.xattrs.iter().map(|(k, v)| k.len() + v.len()).sum();
        let omap: usize = self
            .omap
            .iter()
            .map(|(k, v)| k.as_slice().len() + v.len())
            .sum();
        (xattrs + omap) as u64
    }
}

/// A transaction op as the index applies it: writes name pieces, not bytes.
#[derive(Debug, Clone)]
pub enum LogOp {
    /// Any op except `TxOp::Write`.
    Op(TxOp),
    Write {
        coll: CollectionId,
        oid: ObjectId,
        offset: u64,
        pieces: Vec<PieceLocation>,
    },
}

/// Totals behind [`StoreUsage`](crate::StoreUsage), counted as `MemStore` counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub object_count: u64,
    pub data_bytes: u64,
    pub metadata_bytes: u64,
}

impl Counters {
    pub fn of_object(coll: CollectionId, oid: &ObjectId, onode: &Onode) -> Counters {
        let metadata_bytes =
            MemStore::OBJECT_OVERHEAD_BYTES + oid.name.len() as u64 + onode.attribute_bytes();
        match coll {
            CollectionId::Meta => Counters {
                object_count: 0,
                data_bytes: 0,
                metadata_bytes: metadata_bytes + onode.size_bytes,
            },
            CollectionId::Pg(_) => Counters {
                object_count: 1,
                data_bytes: onode.size_bytes,
                metadata_bytes,
            },
        }
    }

    pub fn add(&mut self, other: Counters) {
        self.object_count += other.object_count;
        self.data_bytes += other.data_bytes;
        self.metadata_bytes += other.metadata_bytes;
    }

    fn subtract(&mut self, other: Counters) {
        self.object_count = self
            .object_count
            .checked_sub(other.object_count)
            .expect("count");
        self.data_bytes = self.data_bytes.checked_sub(other.data_bytes).expect("data");
        self.metadata_bytes = (self.metadata_bytes.checked_sub(other.metadata_bytes))
            .expect("metadata bytes underflow");
    }
}

/// Where segments are on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub segments_start: u64,
    pub segment_bytes: u64,
    pub segment_count: u32,
}

impl Geometry {
    pub fn segment_of(&self, device_offset: u64) -> usize {
        assert!(
            device_offset >= self.segments_start,
            "offset before segments"
        );
        let segment = (device_offset - self.segments_start) / self.segment_bytes;
        assert!(
            segment < u64::from(self.segment_count),
            "offset past segments"
        );
        segment as usize
    }

    pub fn segment_start(&self, segment: usize) -> u64 {
        assert!(segment < self.segment_count as usize);
        self.segments_start + segment as u64 * self.segment_bytes
    }
}

pub type Objects = BTreeMap<ObjectId, Onode>;

#[derive(Debug, Clone)]
pub struct Index {
    pub geometry: Geometry,
    pub collections: BTreeMap<CollectionId, Objects>,
    pub pieces: BTreeMap<PieceId, Piece>,
    pub next_piece_id: PieceId,
    pub segment_live_bytes: Vec<u64>,
    /// The live pieces in each segment, for the cleaner.
    pub segment_pieces: Vec<BTreeSet<PieceId>>,
    pub counters: Counters,
}

impl Index {
    pub fn new(geometry: Geometry) -> Self {
        Self {
            geometry,
            collections: BTreeMap::new(),
            pieces: BTreeMap::new(),
            next_piece_id: 1,
            segment_live_bytes: vec![0; geometry.segment_count as usize],
            segment_pieces: vec![BTreeSet::new(); geometry.segment_count as usize],
            counters: Counters::default(),
        }
    }

    pub fn onode(&self, coll: CollectionId, oid: &ObjectId) -> Option<&Onode> {
        self.collections.get(&coll)?.get(oid)
    }

    /// Applies one op that validation accepted.
    pub fn apply(&mut self, op: LogOp) {
        match op {
            LogOp::Write {
                coll,
                oid,
                offset,
                pieces,
            } => self.with_onode(coll, oid, |index, onode| {
                index.write(onode, offset, &pieces)
            }),
            LogOp::Op(op) => self.apply_op(op),
        }
    }

    fn apply_op(&mut self, op: TxOp) {
        match op {
            TxOp::CreateCollection(coll) => {
                let previous = self.collections.insert(coll, Objects::new());
                assert!(previous.is_none(), "validated: {coll} is new");
            }
            TxOp::RemoveCollection(coll) => {
                let objects = self.collections.remove(&coll).expect("validated");
                for (oid, onode) in objects {
                    self.drop_onode(coll, &oid, onode);
                }
            }
            TxOp::Touch(coll, oid) => self.with_onode(coll, oid, |_, _| {}),
            TxOp::Write { .. } => unreachable!("writes arrive as LogOp::Write"),
            TxOp::Zero {
                coll,
                oid,
                offset,
                length,
            } => self.with_onode(coll, oid, |index, onode| {
                index.punch(onode, offset, offset + length);
                if length > 0 {
                    onode.size_bytes = onode.size_bytes.max(offset + length);
                }
            }),
            TxOp::Truncate {
                coll,
                oid,
                size_bytes,
            } => self.with_onode(coll, oid, |index, onode| {
                index.punch(onode, size_bytes, u64::MAX);
                onode.size_bytes = size_bytes;
            }),
            TxOp::Remove(coll, oid) => {
                let objects = self.collections.get_mut(&coll).expect("validated");
                let onode = objects.remove(&oid).expect("validated");
                self.drop_onode(coll, &oid, onode);
            }
            other => self.apply_attribute_op(other),
        }
    }

    fn apply_attribute_op(&mut self, op: TxOp) {
        match op {
            TxOp::SetMtime {
                coll,
                oid,
                mtime_ns,
            } => self.with_onode(coll, oid, |_, onode| onode.mtime_ns = mtime_ns),
            TxOp::SetXattr {
                coll,
                oid,
                name,
                value,
            } => self.with_onode(coll, oid, |_, onode| {
                onode.xattrs.insert(name, own_small(value));
            }),
            TxOp::RmXattr { coll, oid, name } => self.with_onode(coll, oid, |_, onode| {
                onode.xattrs.remove(&name).expect("validated");
            }),
            TxOp::OmapSet { coll, oid, entries } => self.with_onode(coll, oid, |_, onode| {
                let owned = entries
                    .into_iter()
                    .map(|(key, value)| (own_key(key), own_small(value)));
                onode.omap.extend(owned)
            }),
            TxOp::OmapRm { coll, oid, keys } => self.with_onode(coll, oid, |_, onode| {
                for key in keys {
                    onode.omap.remove(&OmapKey::copied(&key));
                }
            }),
            TxOp::OmapClear(coll, oid) => self.with_onode(coll, oid, |_, onode| onode.omap.clear()),
            TxOp::Clone { coll, src, dst } => self.clone_object(coll, &src, dst),
            other => unreachable!("handled by apply_op: {other:?}"),
        }
    }

    /// Runs `change` on the object (created if missing), keeping the totals. The
    /// object is taken out of its slot and put back, not removed and reinserted, so
    /// the map is not rebalanced and the name not copied on every change.
    fn with_onode(
        &mut self,
        coll: CollectionId,
        oid: ObjectId,
        change: impl FnOnce(&mut Index, &mut Onode),
    ) {
        let objects = self.collections.get_mut(&coll).expect("validated");
        let existing = objects.get_mut(&oid).map(std::mem::take);
        if let Some(onode) = &existing {
            self.counters
                .subtract(Counters::of_object(coll, &oid, onode));
        }
        let is_new = existing.is_none();
        let mut onode = existing.unwrap_or_default();
        change(self, &mut onode);
        self.counters.add(Counters::of_object(coll, &oid, &onode));
        let objects = self.collections.get_mut(&coll).expect("still there");
        if is_new {
            let previous = objects.insert(oid, onode);
            assert!(previous.is_none(), "change does not create the object");
        } else {
            *objects.get_mut(&oid).expect("still there") = onode;
        }
    }

    fn drop_onode(&mut self, coll: CollectionId, oid: &ObjectId, onode: Onode) {
        self.counters
            .subtract(Counters::of_object(coll, oid, &onode));
        for extent in onode.extents.values() {
            self.unref_piece(extent.piece_id);
        }
    }

    fn clone_object(&mut self, coll: CollectionId, src: &ObjectId, dst: ObjectId) {
        if *src == dst {
            return;
        }
        let copy = self.onode(coll, src).expect("validated").clone();
        for extent in copy.extents.values() {
            self.pieces
                .get_mut(&extent.piece_id)
                .expect("live piece")
                .refs += 1;
        }
        self.counters.add(Counters::of_object(coll, &dst, &copy));
        let objects = self.collections.get_mut(&coll).expect("validated");
        if let Some(previous) = objects.insert(dst.clone(), copy) {
            self.drop_onode(coll, &dst, previous);
        }
    }

    fn new_piece(&mut self, location: PieceLocation) -> PieceId {
        let id = self.next_piece_id;
        self.next_piece_id += 1;
        let segment = self.geometry.segment_of(location.device_offset);
        self.segment_live_bytes[segment] += u64::from(location.length);
        self.segment_pieces[segment].insert(id);
        let piece = Piece {
            device_offset: location.device_offset,
            length: location.length,
            crc: location.crc,
            refs: 0,
        };
        self.pieces.insert(id, piece);
        id
    }

    fn unref_piece(&mut self, piece_id: PieceId) {
        let piece = self.pieces.get_mut(&piece_id).expect("live piece");
        piece.refs = piece.refs.checked_sub(1).expect("piece refs underflow");
        if piece.refs == 0 {
            let piece = self.pieces.remove(&piece_id).expect("present");
            let segment = self.geometry.segment_of(piece.device_offset);
            self.segment_pieces[segment].remove(&piece_id);
            let live = &mut self.segment_live_bytes[segment];
            *live = live
                .checked_sub(u64::from(piece.length))
                .expect("live bytes");
        }
    }

    fn write(&mut self, onode: &mut Onode, offset: u64, pieces: &[PieceLocation]) {
        let total: u64 = pieces.iter().map(|p| u64::from(p.length)).sum();
        self.punch(onode, offset, offset + total);
        let mut at = offset;
        let mut extents = Vec::with_capacity(pieces.len());
        for &location in pieces {
            assert!(location.length > 0, "empty pieces are never stored");
            let piece_id = self.new_piece(location);
            self.pieces.get_mut(&piece_id).expect("new").refs = 1;
            let extent = Extent {
                piece_id,
                skip: 0,
                length: location.length,
            };
            extents.push((at, extent));
            at += u64::from(location.length);
        }
        let removed = onode.extents.splice(offset, offset + total, extents);
        assert!(removed.is_empty(), "the range was punched");
        if total > 0 {
            onode.size_bytes = onode.size_bytes.max(offset + total);
        }
    }

    /// Removes the data in `start..end`, keeping the parts of straddling extents.
    fn punch(&mut self, onode: &mut Onode, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let overlapping = onode.extents.overlapping(start, end);
        let (Some(&(first_offset, first)), Some(&(last_offset, last))) =
            (overlapping.first(), overlapping.last())
        else {
            return;
        };
        let left = (first_offset < start).then(|| {
            let length = (start - first_offset) as u32;
            (first_offset, Extent { length, ..first })
        });
        let right = (last_offset + u64::from(last.length) > end).then(|| {
            let skip = (end - last_offset) as u32;
            let right = Extent {
                piece_id: last.piece_id,
                skip: last.skip + skip,
                length: last.length - skip,
            };
            (end, right)
        });
        for (_, kept) in left.iter().chain(&right) {
            self.pieces.get_mut(&kept.piece_id).expect("live").refs += 1;
        }
        let removed = onode
            .extents
            .splice(start, end, left.into_iter().chain(right));
        for (_, extent) in removed {
            self.unref_piece(extent.piece_id);
        }
    }

    /// Moves a piece to a new location (the cleaner copied it there).
    pub fn relocate(&mut self, piece_id: PieceId, new_device_offset: u64) -> Option<()> {
        let geometry = self.geometry;
        let piece = self.pieces.get_mut(&piece_id)?;
        let length = u64::from(piece.length);
        let old_segment = geometry.segment_of(piece.device_offset);
        piece.device_offset = new_device_offset;
        let new_segment = geometry.segment_of(new_device_offset);
        self.segment_live_bytes[old_segment] -= length;
        self.segment_live_bytes[new_segment] += length;
        self.segment_pieces[old_segment].remove(&piece_id);
        self.segment_pieces[new_segment].insert(piece_id);
        Some(())
    }

    /// An index from a checkpoint decoded in one pass: `pieces` ascend by id and carry
    /// their reference counts, `counters` totals the objects. Fills in what follows
    /// from the pieces (live bytes and piece sets per segment); `Err` names a piece
    /// that nothing references or whose id was never handed out.
    pub fn from_counted_parts(
        geometry: Geometry,
        next_piece_id: PieceId,
        pieces: Vec<(PieceId, Piece)>,
        collections: BTreeMap<CollectionId, Objects>,
        counters: Counters,
    ) -> Result<Index, String> {
        let segment_count = geometry.segment_count as usize;
        let mut segment_live_bytes = vec![0; segment_count];
        let mut segment_ids: Vec<Vec<PieceId>> = vec![Vec::new(); segment_count];
        let mut previous_id = 0;
        for &(id, piece) in &pieces {
            assert!(id > previous_id, "pieces ascend by id");
            previous_id = id;
            if piece.refs == 0 || id >= next_piece_id {
                return Err(format!("piece {id} is unreferenced or from the future"));
            }
            let segment = geometry.segment_of(piece.device_offset);
            segment_live_bytes[segment] += u64::from(piece.length);
            segment_ids[segment].push(id);
        }
        Ok(Index {
            geometry,
            collections,
            // Sorted input: both are bulk-built without a real sort.
            pieces: pieces.into_iter().collect(),
            next_piece_id,
            segment_live_bytes,
            segment_pieces: segment_ids.into_iter().map(BTreeSet::from_iter).collect(),
            counters,
        })
    }

    /// Rebuilds references, live bytes and totals from the objects and pieces (after
    /// decoding a checkpoint); `Err` names the first inconsistency.
    pub fn recount(&mut self) -> Result<(), String> {
        let segment_count = self.geometry.segment_count as usize;
        self.segment_live_bytes = vec![0; segment_count];
        self.segment_pieces = vec![BTreeSet::new(); segment_count];
        self.counters = Counters::default();
        for piece in self.pieces.values_mut() {
            piece.refs = 0;
        }
        for (&coll, objects) in &self.collections {
            for (oid, onode) in objects {
                self.counters.add(Counters::of_object(coll, oid, onode));
                let mut previous_end = 0;
                for &(offset, extent) in onode.extents.iter() {
                    let piece = self.pieces.get_mut(&extent.piece_id).ok_or_else(|| {
                        format!(
                            "{coll}/{oid}: extent names missing piece {}",
                            extent.piece_id
                        )
                    })?;
                    let end = offset.saturating_add(u64::from(extent.length));
                    if offset < previous_end || end > onode.size_bytes || extent.length == 0 {
                        return Err(format!("{coll}/{oid}: bad extent at {offset}"));
                    }
                    if u64::from(extent.skip) + u64::from(extent.length) > u64::from(piece.length) {
                        return Err(format!("{coll}/{oid}: extent at {offset} passes its piece"));
                    }
                    previous_end = end;
                    piece.refs += 1;
                }
            }
        }
        for (&id, piece) in &self.pieces {
            if piece.refs == 0 || id >= self.next_piece_id {
                return Err(format!("piece {id} is unreferenced or from the future"));
            }
            let segment = self.geometry.segment_of(piece.device_offset);
            self.segment_live_bytes[segment] += u64::from(piece.length);
            self.segment_pieces[segment].insert(id);
        }
        Ok(())
    }

    /// Recounts everything and compares with the running values (for fsck and tests).
    pub fn check_consistency(&self) -> Result<(), String> {
        let mut recounted = self.clone();
        recounted.recount()?;
        if recounted.counters != self.counters {
            return Err(format!(
                "totals {:?} != {:?}",
                self.counters, recounted.counters
            ));
        }
        if recounted.pieces != self.pieces {
            return Err("piece reference counts disagree".into());
        }
        if recounted.segment_live_bytes != self.segment_live_bytes
            || recounted.segment_pieces != self.segment_pieces
        {
            return Err("segment live bytes disagree with the pieces".into());
        }
        Ok(())
    }
}
