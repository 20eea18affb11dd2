//! The reference model of one object: what a compound op should return and leave
//! behind, written from the op semantics (redb's fuzzer compares with a `BTreeMap` the
//! same way). The checkers replay the writes of the PG log through it.
//!
//! Semantics mirrored from the OSD: reads see the object as it was before the
//! request's writes; writes apply in order; a request that fails changes nothing; a
//! request that writes and leaves the object existing stamps its mtime and version.

use bytes::Bytes;
use carmine_proto::{OpCode, OpError, OpOutput, SnapContext};
use carmine_types::limits::{LIST_ENTRIES_MAX, XATTR_VALUE_BYTES_MAX};
use carmine_types::SnapId;
use std::collections::BTreeMap;

/// An existing object.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObjectModel {
    pub data: Vec<u8>,
    pub xattrs: BTreeMap<String, Bytes>,
    pub omap: BTreeMap<Bytes, Bytes>,
    pub mtime_ns: u64,
    pub user_version: u64,
}

/// An object's state: `None` when it does not exist.
pub type State = Option<ObjectModel>;

/// A clone of the head kept for snapshots: the head as it was before the first write
/// under a context naming snapshots newer than any it was written under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelClone {
    /// The context's seq when it was made.
    pub id: u64,
    /// The snapshots it serves, newest first.
    pub snaps: Vec<u64>,
    pub object: ObjectModel,
}

/// An object's snapshot history, written from the semantics of self-managed snapshots
/// (Ceph's `SnapSet`), not from the OSD's code: a write under a context whose seq is
/// newer than any the object was written under first preserves the head, if it
/// exists, for the context's snapshots newer than that; a read at a snapshot sees the
/// oldest clone made at or after it that serves it, the head when the object has not
/// been written under that snapshot yet, and nothing otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Snapshots {
    /// The newest context seq a write was applied under.
    pub seq: u64,
    /// Oldest first.
    pub clones: Vec<ModelClone>,
}

impl Snapshots {
    /// Before a write under `snapc` is applied to `head`.
    pub fn before_write(&mut self, head: &State, snapc: &SnapContext) {
        if snapc.seq <= self.seq {
            return;
        }
        let snaps: Vec<u64> = snapc
            .snaps
            .iter()
            .copied()
            .filter(|&snap| snap > self.seq)
            .collect();
        if let (Some(object), false) = (head, snaps.is_empty()) {
            self.clones.push(ModelClone {
                id: snapc.seq,
                snaps,
                object: object.clone(),
            });
        }
        self.seq = snapc.seq;
    }

    /// After a write that leaves the head as `head`: an object removed with no clones
    /// left is gone entirely, its snapshot seq with it (as Ceph drops the `SnapSet`
    /// with the head), so a writer with an older context recreates it as new.
    pub fn after_write(&mut self, head: &State) {
        if head.is_none() && self.clones.is_empty() {
            *self = Snapshots::default();
        }
    }

    /// Drops the `removed` snapshots from the clones and the clones left serving none
    /// (a snapshot trim). Returns whether any clone served one.
    pub fn trim(&mut self, removed: &std::collections::BTreeSet<u64>) -> bool {
        let touched =
            (self.clones.iter()).any(|clone| clone.snaps.iter().any(|snap| removed.contains(snap)));
        for clone in &mut self.clones {
            clone.snaps.retain(|snap| !removed.contains(snap));
        }
        self.clones.retain(|clone| !clone.snaps.is_empty());
        touched
    }

    /// What a read at `snap` sees, given the head now.
    pub fn resolve(&self, head: &State, snap: SnapId) -> State {
        if snap == SnapId::HEAD || snap.0 > self.seq {
            return head.clone();
        }
        self.clones
            .iter()
            .find(|clone| clone.id >= snap.0)
            .filter(|clone| clone.snaps.contains(&snap.0))
            .map(|clone| clone.object.clone())
    }
}

/// What a request did: its outputs and the object after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub outputs: Vec<OpOutput>,
    pub after: State,
}

/// Runs `ops` on `before` as the OSD would, stamping writes with `user_version`.
pub fn execute(
    before: &State,
    ops: &[OpCode],
    user_version: u64,
    mtime_ns: u64,
) -> Result<Outcome, OpError> {
    let mut after = before.clone();
    let mut outputs = Vec::with_capacity(ops.len());
    let mut wrote = false;
    for op in ops {
        if op.is_write() {
            wrote = true;
            write(&mut after, op)?;
            outputs.push(OpOutput::None);
        } else {
            outputs.push(read(before, op)?);
        }
    }
    if wrote {
        if let Some(object) = after.as_mut() {
            object.mtime_ns = mtime_ns;
            object.user_version = user_version;
        }
    }
    Ok(Outcome { outputs, after })
}

fn create(state: &mut State) -> &mut ObjectModel {
    state.get_or_insert_with(ObjectModel::default)
}

fn put(data: &mut Vec<u8>, offset: usize, bytes: &[u8]) {
    if data.len() < offset + bytes.len() {
        data.resize(offset + bytes.len(), 0);
    }
    data[offset..offset + bytes.len()].copy_from_slice(bytes);
}

fn write(state: &mut State, op: &OpCode) -> Result<(), OpError> {
    match op {
        OpCode::Create { exclusive } => {
            if state.is_some() && *exclusive {
                return Err(OpError::Exists);
            }
            create(state);
        }
        OpCode::WriteFull { data } => create(state).data = data.to_vec(),
        OpCode::Write { offset, data } => put(&mut create(state).data, *offset as usize, data),
        OpCode::Append { data } => {
            let object = create(state);
            let end = object.data.len();
            put(&mut object.data, end, data);
        }
        OpCode::Truncate { size_bytes } => create(state).data.resize(*size_bytes as usize, 0),
        OpCode::Zero { offset, length } => {
            if let Some(object) = state.as_mut() {
                let size = object.data.len();
                let start = (*offset as usize).min(size);
                let end = (*offset as usize)
                    .saturating_add(*length as usize)
                    .min(size);
                object.data[start..end].fill(0);
            }
        }
        OpCode::Remove => {
            if state.take().is_none() {
                return Err(OpError::NotFound);
            }
        }
        OpCode::SetXattr { name, value } => {
            if value.len() > XATTR_VALUE_BYTES_MAX {
                return Err(OpError::Invalid("xattr value too long".into()));
            }
            create(state).xattrs.insert(name.clone(), value.clone());
        }
        OpCode::OmapSet { entries } => {
            let object = create(state);
            for (key, value) in entries {
                object.omap.insert(key.clone(), value.clone());
            }
        }
        OpCode::OmapClear => match state.as_mut() {
            Some(object) => object.omap.clear(),
            None => return Err(OpError::NotFound),
        },
        other => panic!("the model does not implement {other:?}; keep it out of the workload"),
    }
    Ok(())
}

fn read(state: &State, op: &OpCode) -> Result<OpOutput, OpError> {
    let object = state.as_ref().ok_or(OpError::NotFound)?;
    let size = object.data.len() as u64;
    Ok(match op {
        OpCode::Read { offset, length } => {
            let length = if *length == 0 {
                size.saturating_sub(*offset)
            } else {
                *length
            };
            let start = (*offset).min(size) as usize;
            let end = offset.saturating_add(length).min(size) as usize;
            OpOutput::Data(Bytes::copy_from_slice(&object.data[start..end]))
        }
        OpCode::Stat => OpOutput::Stat {
            size_bytes: size,
            mtime_ns: object.mtime_ns,
            version: object.user_version,
        },
        OpCode::GetXattr { name } => OpOutput::Xattr(
            object
                .xattrs
                .get(name)
                .cloned()
                .ok_or(OpError::NoSuchXattr)?,
        ),
        OpCode::GetXattrs => OpOutput::Xattrs(object.xattrs.clone()),
        OpCode::OmapGetVals { after, max_entries } => {
            let max = (*max_entries as usize).clamp(1, LIST_ENTRIES_MAX);
            let mut entries: Vec<(Bytes, Bytes)> = object
                .omap
                .iter()
                .filter(|(key, _)| after.as_ref().is_none_or(|after| *key > after))
                .map(|(key, value)| (key.clone(), value.clone()))
                .take(max + 1)
                .collect();
            let more = entries.len() > max;
            entries.truncate(max);
            OpOutput::Omap { entries, more }
        }
        OpCode::AssertExists => OpOutput::None,
        other => panic!("the model does not implement {other:?}; keep it out of the workload"),
    })
}

#[cfg(test)]
mod snapshot_tests {
    use super::*;

    fn object(data: &[u8]) -> State {
        Some(ObjectModel {
            data: data.to_vec(),
            ..ObjectModel::default()
        })
    }

    fn snapc(seq: u64, snaps: &[u64]) -> SnapContext {
        SnapContext {
            seq,
            snaps: snaps.to_vec(),
        }
    }

    #[test]
    fn a_snapshot_sees_the_head_until_a_write_under_it_then_the_clone() {
        let mut snaps = Snapshots::default();
        let head = object(b"one");
        // Snapshot 1 taken: not yet written under, the head serves it.
        assert_eq!(snaps.resolve(&head, SnapId(1)), head);
        snaps.before_write(&head, &snapc(1, &[1]));
        let head = object(b"two");
        assert_eq!(snaps.resolve(&head, SnapId(1)), object(b"one"));
        assert_eq!(snaps.resolve(&head, SnapId::HEAD), object(b"two"));
        // A writer still on the old context clones nothing.
        snaps.before_write(&head, &snapc(0, &[]));
        assert_eq!(snaps.clones.len(), 1);
        // Snapshots 2 and 3 taken before the next write share one clone.
        snaps.before_write(&head, &snapc(3, &[3, 2, 1]));
        assert_eq!(snaps.clones[1].snaps, vec![3, 2]);
        let head = None;
        assert_eq!(snaps.resolve(&head, SnapId(2)), object(b"two"));
        assert_eq!(snaps.resolve(&head, SnapId(3)), object(b"two"));
        assert_eq!(snaps.resolve(&head, SnapId(1)), object(b"one"));
        assert_eq!(snaps.resolve(&head, SnapId(4)), None);
    }

    #[test]
    fn an_object_removed_without_clones_forgets_its_seq() {
        let mut snaps = Snapshots::default();
        snaps.before_write(&None, &snapc(1, &[1]));
        snaps.after_write(&object(b"created after snapshot 1"));
        assert_eq!(snaps.seq, 1);
        snaps.after_write(&None);
        assert_eq!(snaps, Snapshots::default());
        // Recreated by a writer that has not heard of snapshot 1: the head serves it.
        snaps.before_write(&None, &snapc(0, &[]));
        let head = object(b"recreated");
        assert_eq!(snaps.resolve(&head, SnapId(1)), head);
    }

    #[test]
    fn an_object_created_after_a_snapshot_is_absent_at_it() {
        let mut snaps = Snapshots::default();
        snaps.before_write(&None, &snapc(1, &[1]));
        let head = object(b"new");
        assert!(snaps.clones.is_empty());
        assert_eq!(snaps.resolve(&head, SnapId(1)), None);
        assert_eq!(snaps.resolve(&head, SnapId(2)), head);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(bytes: &[u8]) -> Bytes {
        Bytes::copy_from_slice(bytes)
    }

    #[test]
    fn writes_apply_in_order_and_reads_see_the_state_before() {
        let ops = vec![
            OpCode::WriteFull { data: data(b"abc") },
            OpCode::Append { data: data(b"de") },
            OpCode::Write {
                offset: 7,
                data: data(b"z"),
            },
        ];
        let outcome = execute(&None, &ops, 5, 9).unwrap();
        let object = outcome.after.unwrap();
        assert_eq!(object.data, b"abcde\0\0z");
        assert_eq!((object.user_version, object.mtime_ns), (5, 9));
        let read = vec![OpCode::Read {
            offset: 0,
            length: 0,
        }];
        assert_eq!(execute(&None, &read, 0, 0), Err(OpError::NotFound));
    }

    #[test]
    fn a_failed_request_changes_nothing() {
        let ops = vec![
            OpCode::SetXattr {
                name: "a".into(),
                value: data(b"1"),
            },
            OpCode::Remove,
            OpCode::Remove,
        ];
        assert_eq!(execute(&None, &ops, 1, 1), Err(OpError::NotFound));
    }
}
