//! Self-managed snapshots inside a PG: cloning a head on its first write after a
//! snapshot, finding the copy a read at a snapshot sees, and trimming the clones of
//! removed snapshots.
//!
//! Each object keeps its [`SnapSet`] in a store xattr of its head. A clone is the
//! object `ObjectId { name, snap: SnapId(clone id) }` in the same collection, so it
//! sorts next to its head and no client name can collide with it. A head removed while
//! clones remain stays as a *whiteout*: an empty object whose info says it does not
//! exist, kept only to hold the snapshot set (Ceph's whiteout head). Every change here
//! is part of an ordinary PG write transaction, so it replicates, is logged under the
//! head's name, and recovery (which copies a head together with its clones) repairs it.

use crate::exec::{store_error, ObjectState, OBJECT_INFO_XATTR};
use carmine_proto::{CloneInfo, ObjectInfo, OpError, SnapContext, SnapSet, SnapTarget};
use carmine_store::{CollectionId, ObjectStore, StoreError, Transaction};
use carmine_types::encoding::{Decode, Encode};
use carmine_types::{ObjectId, SnapId};
use std::collections::BTreeSet;

/// The store xattr of a head that holds its [`SnapSet`]. It has no `_` prefix, so it
/// is never shown as a user xattr.
pub const SNAPSET_XATTR: &str = "snapset";

/// The clone object of `name` with id `clone`.
pub fn clone_oid(name: &str, clone: u64) -> ObjectId {
    ObjectId {
        name: name.to_string(),
        snap: SnapId(clone),
    }
}

/// The snapshot set of `name`'s head (empty when the head or the xattr is absent).
pub fn load_snapset(
    store: &dyn ObjectStore,
    coll: CollectionId,
    name: &str,
) -> Result<SnapSet, OpError> {
    match store.getxattr(coll, &ObjectId::head(name), SNAPSET_XATTR) {
        Ok(raw) => SnapSet::from_shared(raw)
            .map_err(|e| OpError::Io(format!("snapset of {name} is corrupt: {e}"))),
        Err(StoreError::NoSuchObject(..))
        | Err(StoreError::NoSuchCollection(_))
        | Err(StoreError::NoSuchXattr(_)) => Ok(SnapSet::default()),
        Err(other) => Err(store_error(other)),
    }
}

/// The object a read of `name` at `snap` must use; `NotFound` if the object did not
/// exist then.
pub fn read_target(
    store: &dyn ObjectStore,
    coll: CollectionId,
    name: &str,
    snap: SnapId,
) -> Result<ObjectId, OpError> {
    if snap == SnapId::HEAD {
        return Ok(ObjectId::head(name));
    }
    match load_snapset(store, coll, name)?.resolve(snap) {
        SnapTarget::Head => Ok(ObjectId::head(name)),
        SnapTarget::Clone(id) => Ok(clone_oid(name, id)),
        SnapTarget::Absent => Err(OpError::NotFound),
    }
}

/// Before the first write under `snapc` since the head was last written: clone the
/// head (when it exists) for the snaps taken since, and advance the set's seq. Adds the
/// clone to `tx` and returns whether `snapset` changed.
pub fn clone_before_write(
    coll: CollectionId,
    name: &str,
    before: &ObjectState,
    snapc: &SnapContext,
    snapset: &mut SnapSet,
    tx: &mut Transaction,
) -> Result<bool, OpError> {
    if snapc.seq <= snapset.seq {
        return Ok(false);
    }
    let snaps = snapset.snaps_to_clone(snapc);
    if before.exists && !snaps.is_empty() {
        if snapset.clones.len() >= carmine_proto::CLONES_PER_OBJECT_MAX {
            return Err(OpError::Invalid(format!(
                "{name} already has {} clones; remove snapshots first",
                snapset.clones.len()
            )));
        }
        let clone = clone_oid(name, snapc.seq);
        tx.clone_object(coll, ObjectId::head(name), clone.clone());
        // The clone keeps the head's data, user xattrs, omap and info; the snapset
        // belongs to the head alone (a head has the xattr exactly when its set is not
        // empty: `finish_write` writes no empty set).
        if *snapset != SnapSet::default() {
            tx.rm_xattr(coll, clone, SNAPSET_XATTR.into());
        }
        snapset.clones.push(CloneInfo {
            id: snapc.seq,
            snaps,
            size_bytes: before.size_bytes,
        });
    }
    snapset.seq = snapc.seq;
    Ok(true)
}

/// Adds to `tx` what a head needs at the end of a write: its snapset xattr, and if the
/// write removed it while clones remain, a whiteout in its place.
pub fn finish_write(
    coll: CollectionId,
    name: &str,
    snapset: &SnapSet,
    exists_after: bool,
    info: ObjectInfo,
    tx: &mut Transaction,
) {
    let head = ObjectId::head(name);
    let keep_set = snapset.seq > 0 || !snapset.clones.is_empty();
    if !exists_after {
        if snapset.clones.is_empty() {
            return;
        }
        let whiteout = ObjectInfo {
            whiteout: true,
            ..info
        };
        tx.touch(coll, head.clone());
        tx.set_xattr(
            coll,
            head.clone(),
            OBJECT_INFO_XATTR.into(),
            whiteout.to_bytes(),
        );
    }
    if keep_set {
        tx.set_xattr(coll, head, SNAPSET_XATTR.into(), snapset.to_bytes());
    }
}

/// Every clone object of `name` the store holds (recovery replaces them all, so it
/// looks at the store rather than trusting the snapset).
pub fn stored_clones(store: &dyn ObjectStore, coll: CollectionId, name: &str) -> Vec<ObjectId> {
    const PAGE: usize = 64;
    let mut clones = Vec::new();
    // Snap id 0 is never allocated, so listing after it starts at the first clone.
    let mut cursor = clone_oid(name, 0);
    loop {
        let Ok(page) = store.list_objects(coll, Some(&cursor), PAGE) else {
            return clones;
        };
        let full = page.len() == PAGE;
        for oid in page {
            if oid.name != name || oid.snap == SnapId::HEAD {
                return clones;
            }
            cursor = oid.clone();
            clones.push(oid);
        }
        if !full {
            return clones;
        }
    }
}

/// What trimming one object does.
#[derive(Debug, Default)]
pub struct Trim {
    pub tx: Transaction,
    /// The head was a whiteout and its last clone went: the whole object is gone.
    pub removed_head: bool,
    /// The clones deleted, and their bytes.
    pub clones_removed: crate::exec::Counts,
}

/// Drops `removed` snaps from `name`'s clones and deletes clones that serve no snap.
/// `None` when nothing changes.
pub fn trim_object(
    store: &dyn ObjectStore,
    coll: CollectionId,
    name: &str,
    removed: &BTreeSet<u64>,
) -> Result<Option<Trim>, OpError> {
    let mut snapset = load_snapset(store, coll, name)?;
    let touches = snapset
        .clones
        .iter()
        .any(|clone| clone.snaps.iter().any(|snap| removed.contains(snap)));
    if !touches {
        return Ok(None);
    }
    let mut trim = Trim::default();
    snapset.clones.retain_mut(|clone| {
        clone.snaps.retain(|snap| !removed.contains(snap));
        if clone.snaps.is_empty() {
            trim.tx.remove(coll, clone_oid(name, clone.id));
            trim.clones_removed
                .add(crate::exec::Counts::one(clone.size_bytes));
            false
        } else {
            true
        }
    });
    let head = ObjectId::head(name);
    let whiteout = is_whiteout(store, coll, &head)?;
    if whiteout && snapset.clones.is_empty() {
        trim.tx.remove(coll, head);
        trim.removed_head = true;
    } else {
        trim.tx
            .set_xattr(coll, head, SNAPSET_XATTR.into(), snapset.to_bytes());
    }
    Ok(Some(trim))
}

/// Whether `oid` is a whiteout head (kept only for its clones).
pub fn is_whiteout(
    store: &dyn ObjectStore,
    coll: CollectionId,
    oid: &ObjectId,
) -> Result<bool, OpError> {
    match store.getxattr(coll, oid, OBJECT_INFO_XATTR) {
        Ok(raw) => Ok(ObjectInfo::from_shared(raw)
            .map_err(|e| OpError::Io(format!("object info of {oid} is corrupt: {e}")))?
            .whiteout),
        Err(_) => Ok(false),
    }
}
