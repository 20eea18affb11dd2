//! Executing a compound op against a PG's collection: reads come straight from the
//! store; writes become one [`Transaction`] with the object's new info.
//!
//! Within one request, ops run in order over a projection of the object's existence
//! and size, so `create` then `write` or `remove` then `write_full` behave as written.
//! Reads observe the object as it was before the request's writes.

use crate::snaps;
use bytes::Bytes;
use carmine_proto::{ObjectInfo, OpCode, OpError, OpOutput, SnapContext, SnapSet};
use carmine_store::{CollectionId, ObjectStore, StoreError, Transaction};
use carmine_types::encoding::{Decode, Encode};
use carmine_types::limits::{
    LIST_ENTRIES_MAX, OBJECT_SIZE_BYTES_MAX, OMAP_KEY_BYTES_MAX, XATTR_NAME_BYTES_MAX,
    XATTR_VALUE_BYTES_MAX,
};
use carmine_types::{EVersion, ObjectId};
use std::collections::BTreeMap;

/// The store xattr holding [`ObjectInfo`]; user xattrs are stored as `_` + name, as
/// Ceph does, so the two never collide.
pub const OBJECT_INFO_XATTR: &str = "_";

/// Transaction ops reserved for a write: its own (a `write_full` of an existing
/// object is truncate, write, mtime, info) and the PG log's (an entry, the info, and
/// when the log is full a trim and its dups).
const TX_OPS_TYPICAL: usize = 8;

/// An object as a request finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ObjectState {
    pub exists: bool,
    pub size_bytes: u64,
    pub mtime_ns: u64,
    pub info: ObjectInfo,
}

/// The outcome of executing a request.
#[derive(Debug, Default)]
pub struct Execution {
    pub outputs: Vec<OpOutput>,
    pub tx: Transaction,
    pub before: ObjectState,
    pub exists_after: bool,
    pub size_after: u64,
    pub wrote: bool,
    /// Snapshot clones the write makes and drops: the PG counts clones among its
    /// objects and bytes, as Ceph's `num_objects` and `num_bytes` do.
    pub clones_made: Counts,
    pub clones_dropped: Counts,
}

/// Objects and their bytes, for a PG's counts.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub objects: u64,
    pub bytes: u64,
}

impl Counts {
    pub fn one(bytes: u64) -> Counts {
        Counts { objects: 1, bytes }
    }

    pub fn add(&mut self, other: Counts) {
        self.objects += other.objects;
        self.bytes += other.bytes;
    }
}

pub fn load_object(
    store: &dyn ObjectStore,
    coll: CollectionId,
    oid: &ObjectId,
) -> Result<ObjectState, OpError> {
    let mut values = [None];
    load_with_xattrs(store, coll, oid, &[OBJECT_INFO_XATTR], &mut values)
}

/// [`load_object`] of a head together with its snapshot set, from one store lookup
/// (a write needs both).
fn load_head_and_snapset(
    store: &dyn ObjectStore,
    coll: CollectionId,
    oid: &ObjectId,
) -> Result<(ObjectState, SnapSet), OpError> {
    let mut values = [None, None];
    let names = [OBJECT_INFO_XATTR, snaps::SNAPSET_XATTR];
    let state = load_with_xattrs(store, coll, oid, &names, &mut values)?;
    let snapset = match values[1].take() {
        Some(raw) => SnapSet::from_shared(raw)
            .map_err(|e| OpError::Io(format!("snapset of {} is corrupt: {e}", oid.name)))?,
        None => SnapSet::default(),
    };
    Ok((state, snapset))
}

/// The object's state from its stat and its info xattr (`names[0]`); the values of
/// the other `names` are left in `values`. A missing object loads as absent.
fn load_with_xattrs(
    store: &dyn ObjectStore,
    coll: CollectionId,
    oid: &ObjectId,
    names: &[&str],
    values: &mut [Option<Bytes>],
) -> Result<ObjectState, OpError> {
    debug_assert_eq!(names[0], OBJECT_INFO_XATTR);
    let stat = match store.stat_with_xattrs(coll, oid, names, values) {
        Ok(stat) => stat,
        Err(StoreError::NoSuchObject(..)) | Err(StoreError::NoSuchCollection(_)) => {
            return Ok(ObjectState::default())
        }
        Err(other) => return Err(store_error(other)),
    };
    let info = match values[0].take() {
        Some(raw) => ObjectInfo::from_shared(raw)
            .map_err(|e| OpError::Io(format!("object info of {oid} is corrupt: {e}")))?,
        None => ObjectInfo::default(),
    };
    Ok(ObjectState {
        // A whiteout head is kept only for its clones: to clients it does not exist.
        exists: !info.whiteout,
        size_bytes: stat.size_bytes,
        mtime_ns: stat.mtime_ns,
        info,
    })
}

pub fn store_error(error: StoreError) -> OpError {
    match error {
        StoreError::NoSpace { .. } => OpError::NoSpace,
        StoreError::TooLarge { limit_bytes } => OpError::TooLarge { limit_bytes },
        StoreError::NoSuchObject(..) => OpError::NotFound,
        StoreError::NoSuchXattr(_) => OpError::NoSuchXattr,
        other => OpError::Io(other.to_string()),
    }
}

/// Runs `ops` on object `oid` (a head, or for reads at a snapshot, the clone that
/// serves it). Writes are collected into `Execution::tx`, stamped with
/// `version`/`user_version` and `mtime_ns`, after the clone that `snapc` calls for;
/// nothing is applied here.
pub fn execute(
    store: &dyn ObjectStore,
    coll: CollectionId,
    oid: &ObjectId,
    ops: &[OpCode],
    snapc: &SnapContext,
    version: EVersion,
    mtime_ns: u64,
) -> Result<Execution, OpError> {
    let writes = ops.iter().any(OpCode::is_write);
    let (before, mut snapset) = if writes {
        assert_eq!(oid.snap, carmine_types::SnapId::HEAD, "writes go to heads");
        load_head_and_snapset(store, coll, oid)?
    } else {
        (load_object(store, coll, oid)?, SnapSet::default())
    };
    let mut run = Execution {
        outputs: Vec::with_capacity(ops.len()),
        // Room for the common write (truncate, write, mtime, info) without regrowing.
        tx: Transaction {
            ops: Vec::with_capacity(if writes { TX_OPS_TYPICAL } else { 0 }),
        },
        before,
        exists_after: before.exists,
        size_after: before.size_bytes,
        wrote: false,
        clones_made: Counts::default(),
        clones_dropped: Counts::default(),
    };
    let mut snapset_changed = false;
    if writes {
        let clones = snapset.clones.len();
        snapset_changed =
            snaps::clone_before_write(coll, &oid.name, &before, snapc, &mut snapset, &mut run.tx)?;
        if snapset.clones.len() > clones {
            run.clones_made = Counts::one(before.size_bytes);
        }
    }
    for op in ops {
        let output = if op.is_write() {
            run.wrote = true;
            execute_write(store, coll, oid, op, &mut run)?;
            OpOutput::None
        } else {
            execute_read(store, coll, oid, op, &before)?
        };
        run.outputs.push(output);
    }
    if run.wrote && run.exists_after {
        let info = ObjectInfo {
            version,
            user_version: version.version,
            whiteout: false,
        };
        run.tx.set_mtime(coll, oid.clone(), mtime_ns);
        run.tx
            .set_xattr(coll, oid.clone(), OBJECT_INFO_XATTR.into(), info.to_bytes());
    }
    let removed = ops.iter().any(|op| matches!(op, OpCode::Remove));
    if run.wrote && (snapset_changed || removed || !run.exists_after) {
        let info = ObjectInfo {
            version,
            user_version: version.version,
            whiteout: false,
        };
        snaps::finish_write(
            coll,
            &oid.name,
            &snapset,
            run.exists_after,
            info,
            &mut run.tx,
        );
    }
    Ok(run)
}

fn require_exists(state: &ObjectState) -> Result<(), OpError> {
    if state.exists {
        Ok(())
    } else {
        Err(OpError::NotFound)
    }
}

fn user_xattr(name: &str) -> Result<String, OpError> {
    if name.is_empty() || name.len() > XATTR_NAME_BYTES_MAX {
        return Err(OpError::Invalid(format!(
            "xattr names must be 1..={XATTR_NAME_BYTES_MAX} bytes"
        )));
    }
    Ok(format!("_{name}"))
}

fn execute_read(
    store: &dyn ObjectStore,
    coll: CollectionId,
    oid: &ObjectId,
    op: &OpCode,
    state: &ObjectState,
) -> Result<OpOutput, OpError> {
    if matches!(op, OpCode::ListSnaps) {
        // Answers for the head and its clones, even when only clones remain.
        return Ok(OpOutput::Snaps {
            snapset: snaps::load_snapset(store, coll, &oid.name)?,
            head_exists: load_object(store, coll, &ObjectId::head(oid.name.clone()))?.exists,
        });
    }
    require_exists(state)?;
    Ok(match op {
        OpCode::Read { offset, length } => {
            let length = if *length == 0 {
                state.size_bytes.saturating_sub(*offset)
            } else {
                *length
            };
            OpOutput::Data(
                store
                    .read(coll, oid, *offset, length)
                    .map_err(store_error)?,
            )
        }
        OpCode::Stat => OpOutput::Stat {
            size_bytes: state.size_bytes,
            mtime_ns: state.mtime_ns,
            version: state.info.user_version,
        },
        OpCode::GetXattr { name } => {
            let value = store.getxattr(coll, oid, &user_xattr(name)?);
            OpOutput::Xattr(value.map_err(|_| OpError::NoSuchXattr)?)
        }
        OpCode::GetXattrs => OpOutput::Xattrs(user_xattrs(store, coll, oid)?),
        OpCode::OmapGetVals { after, max_entries } => {
            let max = (*max_entries as usize).clamp(1, LIST_ENTRIES_MAX);
            let mut entries = store
                .omap_list(coll, oid, after.as_deref(), max + 1)
                .map_err(store_error)?;
            let more = entries.len() > max;
            entries.truncate(max);
            OpOutput::Omap { entries, more }
        }
        OpCode::OmapGetValsByKeys { keys } => OpOutput::Omap {
            entries: store.omap_get(coll, oid, keys).map_err(store_error)?,
            more: false,
        },
        OpCode::CmpXattrEq { name, value } => {
            let current = store.getxattr(coll, oid, &user_xattr(name)?).ok();
            if current.as_ref() != Some(value) {
                return Err(OpError::Canceled);
            }
            OpOutput::None
        }
        OpCode::AssertVersion { version } => {
            if state.info.user_version != *version {
                return Err(OpError::VersionMismatch {
                    expected: *version,
                    actual: state.info.user_version,
                });
            }
            OpOutput::None
        }
        OpCode::AssertExists => OpOutput::None,
        OpCode::PgList { .. } | OpCode::PgListUnfound { .. } | OpCode::PgMarkUnfoundLost => {
            return Err(OpError::Invalid(
                "a pg op must be sent without an object name".into(),
            ))
        }
        write => unreachable!("execute_read got a write op {write:?}"),
    })
}

fn user_xattrs(
    store: &dyn ObjectStore,
    coll: CollectionId,
    oid: &ObjectId,
) -> Result<BTreeMap<String, Bytes>, OpError> {
    Ok(store
        .getxattrs(coll, oid)
        .map_err(store_error)?
        .into_iter()
        .filter_map(|(name, value)| {
            let user = name.strip_prefix('_')?;
            (!user.is_empty()).then(|| (user.to_string(), value))
        })
        .collect())
}

fn check_extent(offset: u64, length: u64) -> Result<u64, OpError> {
    let end = offset
        .checked_add(length)
        .filter(|&end| end <= OBJECT_SIZE_BYTES_MAX)
        .ok_or(OpError::TooLarge {
            limit_bytes: OBJECT_SIZE_BYTES_MAX,
        })?;
    Ok(end)
}

fn execute_write(
    store: &dyn ObjectStore,
    coll: CollectionId,
    oid: &ObjectId,
    op: &OpCode,
    run: &mut Execution,
) -> Result<(), OpError> {
    let tx = &mut run.tx;
    let o = || oid.clone();
    match op {
        OpCode::Create { exclusive } => {
            if run.exists_after && *exclusive {
                return Err(OpError::Exists);
            }
            tx.touch(coll, o());
        }
        OpCode::WriteFull { data } => {
            let end = check_extent(0, data.len() as u64)?;
            if run.exists_after {
                tx.truncate(coll, o(), 0);
            }
            tx.write(coll, o(), 0, data.clone());
            run.size_after = end;
        }
        OpCode::Write { offset, data } => {
            let end = check_extent(*offset, data.len() as u64)?;
            if data.is_empty() {
                // Like Ceph, an empty write creates the object but never extends it.
                tx.touch(coll, o());
            } else {
                tx.write(coll, o(), *offset, data.clone());
                run.size_after = run.size_after.max(end);
            }
        }
        OpCode::Append { data } => {
            let end = check_extent(run.size_after, data.len() as u64)?;
            tx.write(coll, o(), run.size_after, data.clone());
            run.size_after = end;
        }
        OpCode::Truncate { size_bytes } => {
            check_extent(*size_bytes, 0)?;
            tx.truncate(coll, o(), *size_bytes);
            run.size_after = *size_bytes;
        }
        OpCode::Zero { offset, length } => {
            check_extent(*offset, *length)?;
            // Like Ceph, zeroing never extends the object, and on a missing object it
            // does nothing at all.
            if !run.exists_after {
                return Ok(());
            }
            if *offset < run.size_after {
                let length = (*length).min(run.size_after - offset);
                tx.zero(coll, o(), *offset, length);
            }
        }
        OpCode::Remove => {
            if !run.exists_after {
                return Err(OpError::NotFound);
            }
            tx.remove(coll, o());
            run.exists_after = false;
            run.size_after = 0;
            return Ok(());
        }
        _ => return execute_attr_write(store, coll, oid, op, run),
    }
    run.exists_after = true;
    Ok(())
}

fn execute_attr_write(
    store: &dyn ObjectStore,
    coll: CollectionId,
    oid: &ObjectId,
    op: &OpCode,
    run: &mut Execution,
) -> Result<(), OpError> {
    let tx = &mut run.tx;
    match op {
        OpCode::SetXattr { name, value } => {
            if value.len() > XATTR_VALUE_BYTES_MAX {
                return Err(OpError::Invalid(format!(
                    "xattr values are limited to {XATTR_VALUE_BYTES_MAX} bytes"
                )));
            }
            tx.set_xattr(coll, oid.clone(), user_xattr(name)?, value.clone());
        }
        OpCode::RmXattr { name } => {
            if !run.exists_after {
                return Err(OpError::NotFound);
            }
            let stored = user_xattr(name)?;
            if store.getxattr(coll, oid, &stored).is_err() {
                return Err(OpError::NoSuchXattr);
            }
            tx.rm_xattr(coll, oid.clone(), stored);
        }
        OpCode::OmapSet { entries } => {
            if let Some((key, _)) = entries
                .iter()
                .find(|(key, _)| key.len() > OMAP_KEY_BYTES_MAX)
            {
                return Err(OpError::Invalid(format!(
                    "omap key of {} bytes exceeds {OMAP_KEY_BYTES_MAX}",
                    key.len()
                )));
            }
            tx.omap_set(coll, oid.clone(), entries.clone());
        }
        OpCode::OmapRm { keys } => {
            if !run.exists_after {
                return Err(OpError::NotFound);
            }
            tx.omap_rm(coll, oid.clone(), keys.clone());
        }
        OpCode::OmapClear => {
            if !run.exists_after {
                return Err(OpError::NotFound);
            }
            tx.omap_clear(coll, oid.clone());
        }
        other => unreachable!("execute_attr_write got {other:?}"),
    }
    run.exists_after = true;
    Ok(())
}
