//! [`ObjectStore`] for [`LogStore`]: `submit` (validate, place records, apply to the
//! index), `flush`, and reads that fetch and verify pieces.

use super::format::{RecordKind, RECORD_HEADER_BYTES};
use super::index::{LogOp, Onode, Piece, PieceLocation};
use super::recovery::io_error;
use super::txrecord::{self, WritePlan};
use super::validate::DryRun;
use super::{LogStore, PIECE_BYTES_MAX, SUBMIT_CLEANING_ROUNDS_MAX, TX_INLINE_BYTES_MAX};
use crate::device::BlockDevice;
use crate::{
    CollectionId, ObjectStat, ObjectStore, StoreError, StoreUsage, Transaction, TxOp, TxSeq,
};
use bytes::Bytes;
use carmine_types::ObjectId;
use std::collections::BTreeMap;
use std::ops::Bound;

/// Decides, per write in op order, inline (`None`) or out of line in `Some(n)` pieces.
fn plan_writes(ops: &[TxOp]) -> Vec<Option<usize>> {
    let mut inline_left = TX_INLINE_BYTES_MAX;
    let mut plans = Vec::new();
    for op in ops {
        if let TxOp::Write { data, .. } = op {
            let length = data.len() as u64;
            if length < PIECE_BYTES_MAX && length <= inline_left {
                inline_left -= length;
                plans.push(None);
            } else {
                plans.push(Some(length.div_ceil(PIECE_BYTES_MAX) as usize));
            }
        }
    }
    plans
}

/// The out-of-line data of a transaction, one slice per piece, in op order.
fn out_of_line_pieces(ops: &[TxOp], plans: &[Option<usize>]) -> Vec<Bytes> {
    let writes = ops.iter().filter_map(|op| match op {
        TxOp::Write { data, .. } => Some(data),
        _ => None,
    });
    let mut pieces = Vec::new();
    for (data, plan) in writes.zip(plans) {
        if plan.is_some() {
            let mut start = 0;
            while start < data.len() {
                let end = (start + PIECE_BYTES_MAX as usize).min(data.len());
                pieces.push(data.slice(start..end));
                start = end;
            }
        }
    }
    pieces
}

/// The write plans with out-of-line pieces taken in order from `locations`.
fn write_plans(
    plans: &[Option<usize>],
    mut locations: impl Iterator<Item = PieceLocation>,
) -> Vec<WritePlan> {
    let plans = plans.iter().map(|plan| match plan {
        None => WritePlan::Inline,
        Some(count) => WritePlan::OutOfLine(locations.by_ref().take(*count).collect()),
    });
    let plans: Vec<WritePlan> = plans.collect();
    assert!(locations.next().is_none(), "every piece belongs to a write");
    plans
}

impl<D: BlockDevice> LogStore<D> {
    /// Makes room for records of these sizes, cleaning for a few rounds if needed.
    /// Transactions without data (removes, metadata) may use all but one reserved
    /// segment, so a full store can still delete.
    fn ensure_space(
        &mut self,
        record_lengths: &[u64],
        carries_data: bool,
    ) -> Result<(), StoreError> {
        let reserved = if carries_data {
            self.config.reserved_segments
        } else {
            1
        };
        for round in 0..=SUBMIT_CLEANING_ROUNDS_MAX {
            let needed = self.log.segments_needed(record_lengths.iter().copied());
            if needed == 0 || needed + reserved <= self.log.free.len() {
                return Ok(());
            }
            if round < SUBMIT_CLEANING_ROUNDS_MAX {
                self.flush_inner(true)?;
            }
        }
        Err(StoreError::NoSpace {
            needed_bytes: record_lengths.iter().sum(),
            free_bytes: self.log.appendable_bytes(self.config.reserved_segments),
        })
    }

    fn submit_inner(&mut self, tx: Transaction) -> Result<TxSeq, StoreError> {
        self.check_failed()?;
        DryRun::check_transaction(&self.index, &tx.ops)?;
        let tx_seq = self.last_tx_seq + 1;
        let counts = plan_writes(&tx.ops);
        let pieces = out_of_line_pieces(&tx.ops, &counts);
        let placeholder = PieceLocation {
            device_offset: 0,
            length: 0,
            crc: 0,
        };
        let sized_plans = write_plans(&counts, pieces.iter().map(|_| placeholder));
        let (probe, probe_positions) = txrecord::encode(tx_seq, &tx.ops, &sized_plans);
        let tx_record_bytes = (RECORD_HEADER_BYTES + probe.len()) as u64;
        if tx_record_bytes > self.log.record_bytes_max() {
            return Err(StoreError::TooLarge {
                limit_bytes: self.log.record_bytes_max(),
            });
        }
        let mut lengths: Vec<u64> = pieces
            .iter()
            .map(|p| (RECORD_HEADER_BYTES + p.len()) as u64)
            .collect();
        lengths.push(tx_record_bytes);
        self.ensure_space(&lengths, tx.data_bytes() > 0)?;

        let mut locations = Vec::with_capacity(pieces.len());
        for piece in &pieces {
            let crc = crc32c::crc32c(piece);
            let at = self.log.append_shared(RecordKind::Data, piece, crc);
            locations.push(PieceLocation {
                device_offset: at + RECORD_HEADER_BYTES as u64,
                length: piece.len() as u32,
                crc,
            });
        }
        let plans = write_plans(&counts, locations.into_iter());
        // Without out-of-line pieces the probe is the record: nothing was placed.
        let (payload, inline_positions) = if pieces.is_empty() {
            (probe, probe_positions)
        } else {
            let (payload, positions) = txrecord::encode(tx_seq, &tx.ops, &plans);
            assert_eq!(
                payload.len(),
                probe.len(),
                "placement changed the record size"
            );
            (payload, positions)
        };
        let payload_at =
            self.log.append(RecordKind::Transaction, &payload) + RECORD_HEADER_BYTES as u64;
        self.ops_since_checkpoint += tx.ops.len() as u64;
        self.apply_logged(tx.ops, plans, inline_positions, payload_at);
        self.last_tx_seq = tx_seq;
        Ok(tx_seq)
    }

    /// Applies a logged transaction to the index; validation already passed.
    fn apply_logged(
        &mut self,
        ops: Vec<TxOp>,
        plans: Vec<WritePlan>,
        inline_positions: Vec<usize>,
        payload_at: u64,
    ) {
        let mut plans = plans.into_iter();
        let mut inline_positions = inline_positions.into_iter();
        for op in ops {
            let TxOp::Write {
                coll,
                oid,
                offset,
                data,
            } = op
            else {
                self.index.apply(LogOp::Op(op));
                continue;
            };
            let pieces = match plans.next().expect("one plan per write") {
                WritePlan::OutOfLine(pieces) => pieces,
                WritePlan::Inline => {
                    let position = inline_positions
                        .next()
                        .expect("one position per inline write");
                    let location = PieceLocation {
                        device_offset: payload_at + position as u64,
                        length: data.len() as u32,
                        crc: crc32c::crc32c(&data),
                    };
                    if data.is_empty() {
                        Vec::new()
                    } else {
                        vec![location]
                    }
                }
            };
            self.index.apply(LogOp::Write {
                coll,
                oid,
                offset,
                pieces,
            });
        }
    }

    /// Reads a whole piece, from the pending buffer or the device, and verifies it.
    fn read_piece(&self, piece: &Piece) -> Result<Vec<u8>, StoreError> {
        let mut buf = vec![0u8; piece.length as usize];
        if self.log.read_pending(piece.device_offset, &mut buf) {
            assert_eq!(
                crc32c::crc32c(&buf),
                piece.crc,
                "pending piece changed in memory"
            );
            return Ok(buf);
        }
        for _attempt in 0..2 {
            self.device
                .read_at(piece.device_offset, &mut buf)
                .map_err(io_error)?;
            if crc32c::crc32c(&buf) == piece.crc {
                return Ok(buf);
            }
        }
        Err(StoreError::Corrupt(format!(
            "data piece at device offset {} fails its checksum",
            piece.device_offset
        )))
    }

    fn onode(&self, coll: CollectionId, oid: &ObjectId) -> Result<&Onode, StoreError> {
        let objects = self
            .index
            .collections
            .get(&coll)
            .ok_or(StoreError::NoSuchCollection(coll))?;
        objects
            .get(oid)
            .ok_or_else(|| StoreError::NoSuchObject(coll, oid.clone()))
    }
}

impl<D: BlockDevice> ObjectStore for LogStore<D> {
    /// See the durability contract in the module docs: applied and readable now,
    /// durable after the next [`flush`](ObjectStore::flush).
    fn submit(&mut self, tx: Transaction) -> Result<TxSeq, StoreError> {
        self.submit_inner(tx)
    }

    fn committed_through(&self) -> TxSeq {
        self.committed_tx_seq
    }

    fn submitted_through(&self) -> TxSeq {
        self.last_tx_seq
    }

    /// Group commit: writes all pending records, one sync, then does a bounded amount
    /// of cleaning work. Synchronous: durable when it returns `Ok`.
    fn flush(&mut self) -> Result<(), StoreError> {
        self.flush_inner(false)
    }

    fn failure(&self) -> Option<&StoreError> {
        self.failed.as_ref()
    }

    fn collection_exists(&self, coll: CollectionId) -> bool {
        self.index.collections.contains_key(&coll)
    }

    fn list_collections(&self) -> Vec<CollectionId> {
        self.index.collections.keys().copied().collect()
    }

    fn stat(&self, coll: CollectionId, oid: &ObjectId) -> Result<ObjectStat, StoreError> {
        let onode = self.onode(coll, oid)?;
        Ok(ObjectStat {
            size_bytes: onode.size_bytes,
            mtime_ns: onode.mtime_ns,
        })
    }

    /// Fetches and verifies every piece under the range; a piece that fails its crc
    /// makes the read fail with [`StoreError::Corrupt`] rather than return bad bytes.
    fn read(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
        offset: u64,
        length: u64,
    ) -> Result<Bytes, StoreError> {
        let onode = self.onode(coll, oid)?;
        let end = offset.saturating_add(length).min(onode.size_bytes);
        if offset >= end {
            return Ok(Bytes::new());
        }
        let mut out = vec![0u8; usize::try_from(end - offset).expect("object fits in memory")];
        for &(extent_offset, extent) in onode.extents.overlapping(offset, end) {
            let low = extent_offset.max(offset);
            let high = (extent_offset + u64::from(extent.length)).min(end);
            if low >= high {
                continue;
            }
            let piece = self
                .index
                .pieces
                .get(&extent.piece_id)
                .expect("index is consistent");
            let bytes = self.read_piece(piece)?;
            let from = (extent.skip as u64 + (low - extent_offset)) as usize;
            let to = from + (high - low) as usize;
            out[(low - offset) as usize..(high - offset) as usize]
                .copy_from_slice(&bytes[from..to]);
        }
        Ok(Bytes::from(out))
    }

    fn getxattr(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
        name: &str,
    ) -> Result<Bytes, StoreError> {
        let onode = self.onode(coll, oid)?;
        (onode.xattrs.get(name).cloned()).ok_or_else(|| StoreError::NoSuchXattr(name.to_owned()))
    }

    fn getxattrs(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
    ) -> Result<BTreeMap<String, Bytes>, StoreError> {
        Ok(self.onode(coll, oid)?.xattrs.clone())
    }

    fn stat_with_xattrs(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
        names: &[&str],
        values: &mut [Option<Bytes>],
    ) -> Result<ObjectStat, StoreError> {
        assert_eq!(names.len(), values.len(), "one value per xattr name");
        let onode = self.onode(coll, oid)?;
        for (name, value) in names.iter().zip(values.iter_mut()) {
            *value = onode.xattrs.get(*name).cloned();
        }
        Ok(ObjectStat {
            size_bytes: onode.size_bytes,
            mtime_ns: onode.mtime_ns,
        })
    }

    fn omap_list(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
        after: Option<&[u8]>,
        max_entries: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        let omap = &self.onode(coll, oid)?.omap;
        Ok(crate::omap::range(omap, after, max_entries))
    }

    /// Returns the entries in key order, each key once, whatever the order of `keys`.
    fn omap_get(
        &self,
        coll: CollectionId,
        oid: &ObjectId,
        keys: &[Bytes],
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        let omap = &self.onode(coll, oid)?.omap;
        Ok(crate::omap::lookup(omap, keys))
    }

    fn list_objects(
        &self,
        coll: CollectionId,
        after: Option<&ObjectId>,
        max_entries: usize,
    ) -> Result<Vec<ObjectId>, StoreError> {
        let objects = self
            .index
            .collections
            .get(&coll)
            .ok_or(StoreError::NoSuchCollection(coll))?;
        let start = after.map_or(Bound::Unbounded, Bound::Excluded);
        Ok(objects
            .range::<ObjectId, _>((start, Bound::Unbounded))
            .take(max_entries)
            .map(|(oid, _)| oid.clone())
            .collect())
    }

    /// Logical totals counted as `MemStore` counts them; the capacity is the segments'.
    /// Physical space is in [`LogStore::space`].
    fn usage(&self) -> StoreUsage {
        let counters = self.index.counters;
        StoreUsage {
            object_count: counters.object_count,
            data_bytes: counters.data_bytes,
            metadata_bytes: counters.metadata_bytes,
            capacity_bytes: self.space().capacity_bytes,
        }
    }
}
