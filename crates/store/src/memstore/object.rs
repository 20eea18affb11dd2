//! One object's state inside a [`MemStore`](super::MemStore).
//!
//! Data is kept as non-overlapping extents of shared [`Bytes`] keyed by offset, with the
//! gaps between them as holes, and a sparse write far past the end allocates nothing
//! for the hole. A 4 KiB overwrite in a 4 MiB object changes the extent's own buffer
//! when nothing else refers to it, and otherwise (a snapshot's clone or a read reply
//! still holds it) slices the old extent (no copy) and inserts a new buffer. Every
//! change returns what it replaced, so the store can undo a failed transaction at a
//! cost proportional to the transaction, not to the objects it touched (see
//! `apply.rs`).

use super::extents::ExtentMap;
use crate::omap::OmapKey;
use crate::page_pool;
use bytes::{Bytes, BytesMut};
use std::collections::BTreeMap;

/// Writes shorter than this are copied into their own buffer (see `ObjectData::write`).
const COPY_BELOW_BYTES: usize = 64 * 1024;

/// Spare buffers kept for [`SpareBuffers`]: enough for a transaction's worth of small
/// overwrites, small enough that the memory they hold does not matter.
const SPARE_BUFFERS_MAX: usize = 32;

/// Buffers of small extents that committed overwrites replaced, kept to receive the
/// copies of the next small writes (see `ObjectData::write`). A 4 KiB overwrite then
/// reuses the buffer the previous one freed: a large allocation and free per write
/// were the most expensive part of allocating on the write path.
#[derive(Default)]
pub(super) struct SpareBuffers(Vec<BytesMut>);

impl SpareBuffers {
    /// Keeps `extent`'s buffer if nothing else refers to it and it is exactly the
    /// extent (so that a reuse filling it whole needs no new allocation either).
    pub fn recycle(&mut self, extent: Bytes) {
        if self.0.len() >= SPARE_BUFFERS_MAX || extent.len() >= COPY_BELOW_BYTES {
            return;
        }
        if let Ok(buffer) = extent.try_into_mut() {
            if buffer.capacity() == buffer.len() {
                self.0.push(buffer);
            }
        }
    }

    /// A copy of `data` in a spare buffer of exactly its length, else in one of the
    /// thread's pre-touched buffers ([`page_pool`]), else in a new one.
    fn copy(&mut self, data: &[u8]) -> Bytes {
        let mut buffer = match self.0.last() {
            Some(spare) if spare.capacity() == data.len() => {
                let mut buffer = self.0.pop().expect("checked above");
                buffer.clear();
                buffer
            }
            _ => match page_pool::take(data.len()) {
                Some(buffer) => buffer,
                None => return Bytes::copy_from_slice(data),
            },
        };
        buffer.extend_from_slice(data);
        buffer.freeze()
    }
}

impl Clone for SpareBuffers {
    /// A copy of the store starts without spares.
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl std::fmt::Debug for SpareBuffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SpareBuffers({})", self.0.len())
    }
}

/// An object's byte data: extents plus a logical size. Invariants: extents do not
/// overlap, none is empty, and none reaches past `size_bytes`.
#[derive(Debug, Clone, Default)]
pub(super) struct ObjectData {
    extents: ExtentMap,
    size_bytes: u64,
}

/// What a data change replaced: the old size and the original extents that overlapped
/// the changed range, plus the span `start..end` that covers them and the range.
#[derive(Debug)]
pub(super) struct DataUndo {
    size_bytes: u64,
    start: u64,
    end: u64,
    extents: Replaced,
}

/// The extents a change removed: one inline (a whole-object overwrite replaces one
/// extent, and should not allocate to say so), any more in a vector.
#[derive(Debug, Default)]
struct Replaced {
    first: Option<(u64, Bytes)>,
    rest: Vec<(u64, Bytes)>,
}

impl Replaced {
    fn push(&mut self, offset: u64, data: Bytes) {
        if self.first.is_none() {
            self.first = Some((offset, data));
        } else {
            self.rest.push((offset, data));
        }
    }

    fn into_iter(self) -> impl Iterator<Item = (u64, Bytes)> {
        self.first.into_iter().chain(self.rest)
    }
}

fn extent_end(offset: u64, data: &Bytes) -> u64 {
    offset + data.len() as u64
}

impl ObjectData {
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Removes every stored byte in `start..end`, keeping (as zero-copy slices) the parts
    /// of straddling extents that lie outside the range.
    fn punch(&mut self, start: u64, end: u64) -> DataUndo {
        let mut undo = DataUndo {
            size_bytes: self.size_bytes,
            start,
            end,
            extents: Replaced::default(),
        };
        if start >= end {
            return undo;
        }
        if let Some((offset, data)) = self.extents.last_before(start, false) {
            if extent_end(offset, data) > start {
                self.cut(offset, start, end, &mut undo);
            }
        }
        // What `cut` puts back starts before `start` or at `end`: outside the range.
        while let Some(offset) = self.extents.first_in(start, end) {
            self.cut(offset, start, end, &mut undo);
        }
        undo
    }

    /// Removes the extent at `offset`, keeping (as zero-copy slices) its parts outside
    /// `start..end`, and records it in `undo`.
    fn cut(&mut self, offset: u64, start: u64, end: u64, undo: &mut DataUndo) {
        let data = self
            .extents
            .remove(offset)
            .expect("extent found by the caller");
        let data_end = extent_end(offset, &data);
        if offset < start {
            let keep = usize::try_from(start - offset).expect("extent fits in memory");
            self.extents.insert(offset, data.slice(..keep));
        }
        if data_end > end {
            let skip = usize::try_from(end - offset).expect("extent fits in memory");
            self.extents.insert(end, data.slice(skip..));
        }
        undo.start = undo.start.min(offset);
        undo.end = undo.end.max(data_end);
        undo.extents.push(offset, data);
    }

    /// Writes `data` at `offset`; the caller has checked that the end does not overflow.
    /// A small write is copied: into the extent that holds its range when that
    /// extent's buffer is ours alone, else into one of `spares` when one fits.
    pub fn write(&mut self, offset: u64, data: Bytes, spares: &mut SpareBuffers) -> DataUndo {
        let end = offset
            .checked_add(data.len() as u64)
            .expect("checked by caller");
        if !data.is_empty() && data.len() < COPY_BELOW_BYTES {
            if let Some(undo) = self.overwrite_in_place(offset, &data, spares) {
                return undo;
            }
        }
        let undo = self.punch(offset, end);
        if !data.is_empty() {
            // A small write arrives as a slice of a much larger receive buffer; kept
            // as is, it would pin that whole buffer for as long as the extent lives.
            let data = if data.len() < COPY_BELOW_BYTES {
                spares.copy(&data)
            } else {
                data
            };
            self.extents.insert(offset, data);
            self.size_bytes = self.size_bytes.max(end);
        }
        undo
    }

    /// Copies `data` over `offset..` inside the one larger extent that holds the whole
    /// range, in that extent's own buffer, if no other `Bytes` refers to the buffer.
    /// `None` (nothing changed) when no extent holds the range or the buffer is shared.
    ///
    /// Why: slicing around the new bytes would keep the whole old buffer alive for the
    /// rest of its extent, so 4 KiB random overwrites of a prefilled image doubled an
    /// OSD's memory (every 4 MiB buffer kept, plus a new page per overwrite) and paid a
    /// first-touch page fault per write. The replaced bytes go to the undo record, in a
    /// spare buffer that the commit recycles for the next one.
    fn overwrite_in_place(
        &mut self,
        offset: u64,
        data: &[u8],
        spares: &mut SpareBuffers,
    ) -> Option<DataUndo> {
        let size_bytes = self.size_bytes;
        let (from, extent) = self.own_extent_holding(offset, data.len())?;
        let replaced = spares.copy(&extent[from..from + data.len()]);
        copy_into(extent, from, data);
        Some(DataUndo {
            size_bytes,
            start: offset,
            end: offset + data.len() as u64,
            extents: Replaced {
                first: Some((offset, replaced)),
                rest: Vec::new(),
            },
        })
    }

    /// The extent that holds all of `offset..offset+len` and more, with the range's
    /// start inside it, if no other `Bytes` refers to its buffer: the one extent a
    /// write may change in place. Safe because a shared buffer is never changed: a
    /// clone of the object (a snapshot), a read's zero-copy reply and a copy of the
    /// store all hold a reference.
    fn own_extent_holding(&mut self, offset: u64, len: usize) -> Option<(usize, &mut Bytes)> {
        let (at, extent) = self.extents.last_at_or_before_mut(offset)?;
        let holds = extent_end(at, extent) >= offset + len as u64 && extent.len() > len;
        (holds && extent.is_unique())
            .then(|| (usize::try_from(offset - at).expect("in extent"), extent))
    }

    /// Zeroes `offset..offset+length` by punching a hole, extending the size to its end.
    pub fn zero(&mut self, offset: u64, length: u64) -> DataUndo {
        let end = offset.checked_add(length).expect("checked by caller");
        let undo = self.punch(offset, end);
        if length > 0 {
            self.size_bytes = self.size_bytes.max(end);
        }
        undo
    }

    pub fn truncate(&mut self, size_bytes: u64) -> DataUndo {
        let undo = self.punch(size_bytes, u64::MAX);
        self.size_bytes = size_bytes;
        undo
    }

    /// The change that returned `undo` is committed: offers the extents it replaced to
    /// `spares`.
    pub fn commit(undo: DataUndo, spares: &mut SpareBuffers) {
        for (_, extent) in undo.extents.into_iter() {
            spares.recycle(extent);
        }
    }

    /// Reverts the change that returned `undo`; changes must be undone newest first.
    pub fn undo(&mut self, undo: DataUndo) {
        // What an in-place overwrite replaced goes back in place too, so that a failed
        // transaction does not leave the extent cut in three.
        if let Replaced {
            first: Some((offset, replaced)),
            rest,
        } = &undo.extents
        {
            let exactly_the_range =
                *offset == undo.start && extent_end(*offset, replaced) == undo.end;
            if rest.is_empty() && exactly_the_range && undo.size_bytes == self.size_bytes {
                if let Some((from, extent)) = self.own_extent_holding(*offset, replaced.len()) {
                    copy_into(extent, from, replaced);
                    return;
                }
            }
        }
        self.punch(undo.start, undo.end);
        for (offset, data) in undo.extents.into_iter() {
            let previous = self.extents.insert(offset, data);
            assert!(previous.is_none(), "undo restored an overlapping extent");
        }
        self.size_bytes = undo.size_bytes;
    }

    /// Reads up to `length` bytes at `offset`, short at the end; holes read as zeros.
    /// A range inside one extent comes back as a zero-copy slice of it.
    pub fn read(&self, offset: u64, length: u64) -> Bytes {
        let end = offset.saturating_add(length).min(self.size_bytes);
        if offset >= end {
            return Bytes::new();
        }
        let before = self.extents.last_before(offset, true);
        if let Some((extent_offset, data)) = before {
            if extent_end(extent_offset, data) >= end {
                let from = usize::try_from(offset - extent_offset).expect("in extent");
                let to = usize::try_from(end - extent_offset).expect("in extent");
                return data.slice(from..to);
            }
        }
        let length = usize::try_from(end - offset).expect("object size fits in memory");
        let mut out = BytesMut::zeroed(length);
        let first = before.map_or(offset, |(extent_offset, _)| extent_offset);
        self.extents.for_each_in(first, end, |extent_offset, data| {
            let low = extent_offset.max(offset);
            let high = extent_end(extent_offset, data).min(end);
            if low >= high {
                return;
            }
            let out_range = (low - offset) as usize..(high - offset) as usize;
            let data_range = (low - extent_offset) as usize..(high - extent_offset) as usize;
            out[out_range].copy_from_slice(&data[data_range]);
        });
        out.freeze()
    }

    /// Checks the invariants; costly, so only for `debug_assert!`.
    pub fn invariants_hold(&self) -> bool {
        let mut previous_end = 0;
        self.extents.iter().all(|(offset, data)| {
            let ok = !data.is_empty() && offset >= previous_end;
            previous_end = extent_end(offset, data);
            ok && previous_end <= self.size_bytes
        })
    }
}

/// Copies `data` into `extent`'s own buffer at `from`; the caller found the buffer
/// unique ([`ObjectData::own_extent_holding`]).
fn copy_into(extent: &mut Bytes, from: usize, data: &[u8]) {
    let mut buffer = std::mem::take(extent)
        .try_into_mut()
        .expect("a unique buffer converts without a copy");
    buffer[from..from + data.len()].copy_from_slice(data);
    *extent = buffer.freeze();
}

/// An object: data, modification time, xattrs and omap. Byte counts of xattrs and
/// omap are kept up to date so accounting is O(1) per change.
#[derive(Debug, Clone, Default)]
pub(super) struct Object {
    pub data: ObjectData,
    pub mtime_ns: u64,
    xattrs: Xattrs,
    omap: BTreeMap<OmapKey, Bytes>,
    xattr_bytes: u64,
    omap_bytes: u64,
    /// Set by [`MemStore::inject_decay`](super::MemStore::inject_decay): data reads fail
    /// with `Corrupt` until the object is removed (a recreated object starts clean).
    pub decayed: bool,
}

/// An object's xattrs, sorted by name. Objects have one or two (the OSD's object info,
/// perhaps a snapshot set): a vector of exactly that many costs about 60 bytes each,
/// where a `BTreeMap` allocates a 640-byte node for the first.
#[derive(Debug, Clone, Default)]
struct Xattrs(Vec<(String, Bytes)>);

impl Xattrs {
    fn find(&self, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(held, _)| held.as_str().cmp(name))
    }

    fn get(&self, name: &str) -> Option<&Bytes> {
        self.find(name).ok().map(|index| &self.0[index].1)
    }

    /// Inserts a new name at its place, growing the vector by exactly one.
    fn insert_new(&mut self, index: usize, name: String, value: Bytes) {
        self.0.reserve_exact(1);
        self.0.insert(index, (name, value));
    }

    fn remove(&mut self, name: &str) -> Option<Bytes> {
        let index = self.find(name).ok()?;
        Some(self.0.remove(index).1)
    }
}

fn entry_bytes(key: &[u8], value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64
}

impl Object {
    /// Bytes of xattr and omap names, keys and values.
    pub fn attribute_bytes(&self) -> u64 {
        self.xattr_bytes + self.omap_bytes
    }

    pub fn xattr(&self, name: &str) -> Option<&Bytes> {
        self.xattrs.get(name)
    }

    pub fn xattr_map(&self) -> BTreeMap<String, Bytes> {
        self.xattrs.0.iter().cloned().collect()
    }

    pub fn omap(&self) -> &BTreeMap<OmapKey, Bytes> {
        &self.omap
    }

    /// Sets (`Some`) or removes (`None`) an xattr and returns the previous value.
    pub fn put_xattr(&mut self, name: String, value: Option<Bytes>) -> Option<Bytes> {
        match value {
            Some(value) => self.set_xattr(name, value, false).1,
            None => self.put_xattr_removed(&name),
        }
    }

    /// Sets an xattr and returns its name back (for an undo record) with the previous
    /// value. The name is cloned only when the xattr is new and `keep_name` asks for it
    /// back: replacing a value keeps the stored name.
    pub fn set_xattr(
        &mut self,
        name: String,
        value: Bytes,
        keep_name: bool,
    ) -> (String, Option<Bytes>) {
        self.xattr_bytes += (name.len() + value.len()) as u64;
        match self.xattrs.find(&name) {
            Ok(index) => {
                let previous = std::mem::replace(&mut self.xattrs.0[index].1, value);
                self.xattr_bytes -= (name.len() + previous.len()) as u64;
                (name, Some(previous))
            }
            Err(index) => {
                let kept = if keep_name {
                    name.clone()
                } else {
                    String::new()
                };
                self.xattrs.insert_new(index, name, value);
                (kept, None)
            }
        }
    }

    /// Removes an xattr and returns its value, or `None` if there was none.
    pub fn put_xattr_removed(&mut self, name: &str) -> Option<Bytes> {
        let previous = self.xattrs.remove(name)?;
        self.xattr_bytes -= (name.len() + previous.len()) as u64;
        Some(previous)
    }

    /// Removes an omap entry and returns its value, or `None` if there was none.
    pub fn remove_omap(&mut self, key: &OmapKey) -> Option<Bytes> {
        let previous = self.omap.remove(key)?;
        self.omap_bytes -= entry_bytes(key.as_slice(), &previous);
        Some(previous)
    }

    /// Sets (`Some`) or removes (`None`) an omap entry and returns the previous value.
    pub fn put_omap(&mut self, key: OmapKey, value: Option<Bytes>) -> Option<Bytes> {
        let key_bytes = key.as_slice().len() as u64;
        let previous = match value {
            Some(value) => {
                self.omap_bytes += key_bytes + value.len() as u64;
                self.omap.insert(key, value)
            }
            None => self.omap.remove(&key),
        };
        if let Some(previous) = &previous {
            self.omap_bytes -= key_bytes + previous.len() as u64;
        }
        previous
    }

    /// Replaces the whole omap (O(1)) and returns the previous one.
    pub fn replace_omap(&mut self, omap: BTreeMap<OmapKey, Bytes>) -> BTreeMap<OmapKey, Bytes> {
        self.omap_bytes = omap.iter().map(|(k, v)| entry_bytes(k.as_slice(), v)).sum();
        std::mem::replace(&mut self.omap, omap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overwrite_in_a_shared_large_extent_slices_it_instead_of_copying() {
        let mut data = ObjectData::default();
        let big = Bytes::from(vec![7u8; 4 << 20]);
        let spares = &mut SpareBuffers::default();
        data.write(0, big.clone(), spares);
        let undo = data.write(4096, Bytes::from(vec![1u8; 4096]), spares);
        assert_eq!(data.extents.len(), 3);
        // The untouched parts are slices of the original buffer.
        assert_eq!(data.extents.get(0).unwrap().as_ptr(), big.as_ptr());
        assert_eq!(data.read(8192, 10).as_ptr(), big[8192..].as_ptr());
        assert_eq!(
            &data.read(4090, 12)[..],
            &[7, 7, 7, 7, 7, 7, 1, 1, 1, 1, 1, 1]
        );
        data.undo(undo);
        assert_eq!(data.extents.len(), 1);
        assert!(data.invariants_hold());
    }

    #[test]
    fn overwrite_in_a_large_extent_of_our_own_changes_its_buffer_and_undoes() {
        let mut data = ObjectData::default();
        let spares = &mut SpareBuffers::default();
        data.write(0, Bytes::from(vec![7u8; 1 << 20]), spares);
        let buffer = data.extents.get(0).unwrap().as_ptr();
        let undo = data.write(4096, Bytes::from(vec![1u8; 4096]), spares);
        assert_eq!(data.extents.len(), 1, "no slicing, no new extent");
        assert_eq!(data.extents.get(0).unwrap().as_ptr(), buffer, "same buffer");
        assert_eq!(
            &data.read(4090, 12)[..],
            &[7, 7, 7, 7, 7, 7, 1, 1, 1, 1, 1, 1]
        );
        assert_eq!(&data.read(8190, 4)[..], &[1, 1, 7, 7]);
        assert_eq!(data.size_bytes(), 1 << 20);
        data.undo(undo);
        assert!(data.read(0, 1 << 20).iter().all(|&b| b == 7));
        assert_eq!(data.extents.len(), 1, "undone in place too");
        assert_eq!(data.extents.get(0).unwrap().as_ptr(), buffer);
        assert!(data.invariants_hold());

        // Committed: the replaced bytes' buffer receives the next overwrite's old bytes.
        let undo = data.write(0, Bytes::from(vec![2u8; 4096]), spares);
        ObjectData::commit(undo, spares);
        assert_eq!(spares.0.len(), 1);
        let undo = data.write(8192, Bytes::from(vec![3u8; 4096]), spares);
        assert_eq!(spares.0.len(), 0, "the spare took the replaced bytes");
        ObjectData::commit(undo, spares);
        assert_eq!(&data.read(4094, 4)[..], &[2, 2, 7, 7]);
        assert_eq!(&data.read(8190, 4)[..], &[7, 7, 3, 3]);
        assert!(data.invariants_hold());
    }

    #[test]
    fn overwrite_never_changes_a_buffer_a_snapshot_or_a_read_still_holds() {
        let mut data = ObjectData::default();
        let spares = &mut SpareBuffers::default();
        data.write(0, Bytes::from(vec![7u8; 1 << 20]), spares);
        let snapshot = data.clone();
        data.write(0, Bytes::from(vec![1u8; 4096]), spares);
        assert!(snapshot.read(0, 1 << 20).iter().all(|&b| b == 7));
        assert_eq!(&data.read(4094, 4)[..], &[1, 1, 7, 7]);
        drop(snapshot);

        // A zero-copy read reply still being sent holds the buffer of the rest.
        let reply = data.read(8192, 4096);
        data.write(8192, Bytes::from(vec![2u8; 4096]), spares);
        assert!(reply.iter().all(|&b| b == 7), "the reply kept what it read");
        assert_eq!(&data.read(8190, 4)[..], &[7, 7, 2, 2]);
        assert!(data.invariants_hold());
    }

    #[test]
    fn a_write_past_its_extent_or_over_a_hole_is_not_in_place() {
        let mut data = ObjectData::default();
        let spares = &mut SpareBuffers::default();
        data.write(0, Bytes::from(vec![7u8; 8192]), spares);
        // Straddles the extent's end: the usual path (punch, then a copy).
        data.write(6144, Bytes::from(vec![1u8; 4096]), spares);
        assert_eq!(data.extents.len(), 2);
        assert_eq!(&data.read(6142, 4)[..], &[7, 7, 1, 1]);
        assert_eq!(data.size_bytes(), 10240);
        // A write over a hole leaves the extent before it alone.
        data.write(20000, Bytes::from(vec![3u8; 10]), spares);
        assert_eq!(data.extents.len(), 3);
        assert_eq!(&data.read(10238, 4)[..], &[1, 1, 0, 0]);
        assert!(data.invariants_hold());
    }

    #[test]
    fn committed_small_overwrites_reuse_the_replaced_buffer() {
        let mut data = ObjectData::default();
        let spares = &mut SpareBuffers::default();
        data.write(0, Bytes::from(vec![1u8; 4096]), spares);
        let first = data.extents.get(0).unwrap().as_ptr();
        let undo = data.write(0, Bytes::from(vec![2u8; 4096]), spares);
        ObjectData::commit(undo, spares);
        let undo = data.write(0, Bytes::from(vec![3u8; 4096]), spares);
        assert_eq!(
            data.extents.get(0).unwrap().as_ptr(),
            first,
            "the first buffer is reused"
        );
        assert_eq!(&data.read(0, 4096)[..], &[3u8; 4096][..]);
        // A buffer still shared (here by a reader) is never recycled.
        let held = data.read(0, 4096);
        ObjectData::commit(undo, spares);
        let undo = data.write(0, Bytes::from(vec![4u8; 4096]), spares);
        ObjectData::commit(undo, spares);
        assert_eq!(&held[..], &[3u8; 4096][..]);
        assert!(spares.0.is_empty());
        assert!(data.invariants_hold());
    }

    #[test]
    fn a_small_write_with_no_spare_takes_a_pre_touched_buffer_of_its_size() {
        std::thread::spawn(|| {
            page_pool::enable(2);
            while page_pool::top_up_one() {}
            let mut data = ObjectData::default();
            let spares = &mut SpareBuffers::default();
            data.write(0, Bytes::from(vec![1u8; page_pool::BUFFER_BYTES]), spares);
            assert_eq!(page_pool::ready(), 1, "one pooled buffer taken");
            data.write(8192, Bytes::from(vec![2u8; 100]), spares);
            assert_eq!(page_pool::ready(), 1, "other sizes allocate as before");
            assert_eq!(&data.read(0, 4096)[..], &[1u8; 4096][..]);
            assert_eq!(&data.read(8192, 100)[..], &[2u8; 100][..]);
            // The buffer a committed overwrite freed comes before the pool.
            let undo = data.write(0, Bytes::from(vec![3u8; page_pool::BUFFER_BYTES]), spares);
            ObjectData::commit(undo, spares);
            assert_eq!(page_pool::ready(), 0);
            assert!(page_pool::top_up_one());
            data.write(0, Bytes::from(vec![4u8; page_pool::BUFFER_BYTES]), spares);
            assert_eq!(page_pool::ready(), 1, "the spare was used, not the pool");
            assert_eq!(&data.read(0, 4096)[..], &[4u8; 4096][..]);
            assert!(data.invariants_hold());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn sparse_write_allocates_only_the_data() {
        let mut data = ObjectData::default();
        data.write(
            100 << 20,
            Bytes::from_static(b"end"),
            &mut SpareBuffers::default(),
        );
        assert_eq!(data.size_bytes(), (100 << 20) + 3);
        assert_eq!(data.extents.len(), 1);
        assert_eq!(&data.read(0, 4)[..], &[0, 0, 0, 0]);
        data.truncate(10);
        assert!(data.extents.is_empty());
        assert!(data.invariants_hold());
    }
}
