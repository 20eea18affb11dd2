//! Self-managed snapshots on the wire and on disk: the snapshot context a write
//! carries, and the snapshot set an object's head keeps (Ceph's `SnapContext` and
//! `SnapSet`).
//!
//! A write carries `SnapContext { seq, snaps }`: `seq` is the newest snapshot id the
//! writer knows, `snaps` the live snapshot ids, newest first. When an object's head
//! was last written under an older `seq`, the PG first clones the head to an object
//! named by `seq` (the clone covers the snaps newer than the head's last `seq`), then
//! applies the write. A read at snapshot `S` finds the oldest clone whose id is at
//! least `S` and that covers `S`; with none, the head if no write happened since `S`.

use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
use carmine_types::SnapId;

/// Most snapshot ids one context may name (and one clone may cover).
pub const SNAPS_PER_CONTEXT_MAX: usize = 4096;
/// Most clones one object may have.
pub const CLONES_PER_OBJECT_MAX: usize = 4096;

/// What a writer knows about its snapshots.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SnapContext {
    /// The newest snapshot id allocated (0: none ever).
    pub seq: u64,
    /// Live snapshot ids, strictly descending, each at most `seq`.
    pub snaps: Vec<u64>,
}

impl SnapContext {
    /// Whether the context is well formed; the OSD refuses a write whose context is
    /// not, since a clone recorded from it could never be read back correctly.
    pub fn validate(&self) -> Result<(), String> {
        if self.snaps.len() > SNAPS_PER_CONTEXT_MAX {
            return Err(format!(
                "a snapshot context names {} snaps; the limit is {SNAPS_PER_CONTEXT_MAX}",
                self.snaps.len()
            ));
        }
        if self.snaps.first().is_some_and(|&newest| newest > self.seq) {
            return Err(format!(
                "snapshot context names snap {} above its seq {}",
                self.snaps[0], self.seq
            ));
        }
        if self.snaps.windows(2).any(|pair| pair[0] <= pair[1]) {
            return Err("snapshot context snaps must be strictly descending".into());
        }
        if self.snaps.contains(&0) || self.snaps.contains(&SnapId::HEAD.0) {
            return Err("snapshot ids 0 and u64::MAX are reserved".into());
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.seq == 0 && self.snaps.is_empty()
    }
}

/// One clone of an object: its id (the `seq` of the write that made it), the
/// snapshots it still serves (descending) and its size.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CloneInfo {
    pub id: u64,
    pub snaps: Vec<u64>,
    pub size_bytes: u64,
}

/// The snapshot history an object's head keeps (in a store xattr).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SnapSet {
    /// The newest snapshot seq the head was written under.
    pub seq: u64,
    /// Clones, oldest (lowest id) first.
    pub clones: Vec<CloneInfo>,
}

/// Which copy of an object serves a read at a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapTarget {
    Head,
    Clone(u64),
    /// The object did not exist at that snapshot (or the snapshot was trimmed).
    Absent,
}

impl SnapSet {
    /// The copy that holds the object as it was at snapshot `snap`.
    pub fn resolve(&self, snap: SnapId) -> SnapTarget {
        if snap == SnapId::HEAD || snap.0 > self.seq {
            return SnapTarget::Head;
        }
        match self.clones.iter().find(|clone| clone.id >= snap.0) {
            Some(clone) if clone.snaps.contains(&snap.0) => SnapTarget::Clone(clone.id),
            _ => SnapTarget::Absent,
        }
    }

    /// The snaps of `snapc` that a head last written under `self.seq` must preserve
    /// before a write under `snapc` (empty: no clone needed).
    pub fn snaps_to_clone(&self, snapc: &SnapContext) -> Vec<u64> {
        if snapc.seq <= self.seq {
            return Vec::new();
        }
        snapc
            .snaps
            .iter()
            .copied()
            .filter(|&snap| snap > self.seq)
            .collect()
    }
}

impl Encode for SnapContext {
    fn encode(&self, e: &mut Encoder) {
        e.put_u64(self.seq);
        self.snaps.encode(e);
    }
}

impl Decode for SnapContext {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        let seq = d.get_u64()?;
        let snaps = get_snaps(d)?;
        Ok(SnapContext { seq, snaps })
    }
}

fn get_snaps(d: &mut Decoder) -> Result<Vec<u64>, DecodeError> {
    let count = d.get_count("snap ids", 8)?;
    if count > SNAPS_PER_CONTEXT_MAX {
        return Err(DecodeError::TooLong {
            what: "snap ids",
            length: count,
            limit: SNAPS_PER_CONTEXT_MAX,
        });
    }
    (0..count).map(|_| d.get_u64()).collect()
}

impl Encode for SnapSet {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(1, 1, |e| {
            e.put_u64(self.seq);
            e.put_u32(self.clones.len() as u32);
            for clone in &self.clones {
                e.put_u64(clone.id);
                clone.snaps.encode(e);
                e.put_u64(clone.size_bytes);
            }
        });
    }
}

impl Decode for SnapSet {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("SnapSet", 1, |d, _| {
            let seq = d.get_u64()?;
            let count = d.get_count("clones", 20)?;
            if count > CLONES_PER_OBJECT_MAX {
                return Err(DecodeError::TooLong {
                    what: "clones",
                    length: count,
                    limit: CLONES_PER_OBJECT_MAX,
                });
            }
            let mut clones = Vec::with_capacity(count);
            for _ in 0..count {
                clones.push(CloneInfo {
                    id: d.get_u64()?,
                    snaps: get_snaps(d)?,
                    size_bytes: d.get_u64()?,
                });
            }
            Ok(SnapSet { seq, clones })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> SnapSet {
        // Written under seq 7; clone 4 covers snaps 4 and 2, clone 7 covers 6.
        SnapSet {
            seq: 7,
            clones: vec![
                CloneInfo {
                    id: 4,
                    snaps: vec![4, 2],
                    size_bytes: 10,
                },
                CloneInfo {
                    id: 7,
                    snaps: vec![6],
                    size_bytes: 20,
                },
            ],
        }
    }

    #[test]
    fn reads_resolve_to_the_clone_covering_the_snap() {
        let set = set();
        assert_eq!(set.resolve(SnapId(2)), SnapTarget::Clone(4));
        assert_eq!(set.resolve(SnapId(4)), SnapTarget::Clone(4));
        assert_eq!(set.resolve(SnapId(6)), SnapTarget::Clone(7));
        // Snap 5 was removed (no clone covers it); snap 1 predates the object.
        assert_eq!(set.resolve(SnapId(5)), SnapTarget::Absent);
        assert_eq!(set.resolve(SnapId(1)), SnapTarget::Absent);
        assert_eq!(set.resolve(SnapId(8)), SnapTarget::Head);
        assert_eq!(set.resolve(SnapId::HEAD), SnapTarget::Head);
    }

    #[test]
    fn only_snaps_newer_than_the_last_write_need_a_clone() {
        let set = set();
        let snapc = SnapContext {
            seq: 10,
            snaps: vec![10, 9, 6, 2],
        };
        assert_eq!(set.snaps_to_clone(&snapc), vec![10, 9]);
        let old = SnapContext {
            seq: 7,
            snaps: vec![6],
        };
        assert!(set.snaps_to_clone(&old).is_empty());
    }

    #[test]
    fn contexts_are_validated() {
        let ok = SnapContext {
            seq: 5,
            snaps: vec![5, 3],
        };
        assert!(ok.validate().is_ok());
        for bad in [vec![3, 5], vec![7], vec![3, 3], vec![0]] {
            let snapc = SnapContext { seq: 6, snaps: bad };
            assert!(snapc.validate().is_err(), "{snapc:?} accepted");
        }
    }

    #[test]
    fn snapset_round_trips_and_refuses_garbage() {
        let set = set();
        let bytes = set.to_bytes();
        assert_eq!(SnapSet::from_shared(bytes.clone()).unwrap(), set);
        for cut in 0..bytes.len() {
            assert!(SnapSet::from_shared(bytes.slice(..cut)).is_err());
        }
    }

    /// OsdOp v2 carries the snapshot fields; a v1 encoding (an older client) decodes
    /// with an empty context at the head. PgPush v3 carries clones; ObjectInfo v1 has
    /// no whiteout flag.
    #[test]
    fn snapshot_fields_round_trip_and_older_encodings_still_decode() {
        use crate::{Msg, ObjectCopy, ObjectInfo, ObjectState, OpCode, OsdOp, PgPush};
        use carmine_types::{Epoch, PgId, PoolId, ReqId};
        let op = OsdOp {
            reqid: ReqId { client: 1, tid: 2 },
            pgid: PgId {
                pool: PoolId(1),
                seed: 3,
            },
            oid: "obj".into(),
            map_epoch: Epoch(4),
            flags: 0,
            mtime_ns: 5,
            ops: vec![OpCode::ListSnaps],
            snapc: SnapContext {
                seq: 9,
                snaps: vec![9, 4],
            },
            snapid: SnapId(4),
        };
        let msg = Msg::OsdOp(op.clone());
        assert_eq!(
            Msg::decode(msg.msg_type(), msg.encode_front()).unwrap(),
            msg
        );
        let mut e = Encoder::new();
        e.versioned(1, 1, |e| {
            op.reqid.encode(e);
            op.pgid.encode(e);
            op.oid.encode(e);
            op.map_epoch.encode(e);
            e.put_u32(op.flags);
            e.put_u64(op.mtime_ns);
            op.ops.encode(e);
        });
        let old = OsdOp::from_shared(e.into_bytes()).unwrap();
        assert_eq!(old.snapc, SnapContext::default());
        assert_eq!(old.snapid, SnapId::HEAD);

        let state = ObjectState {
            data: bytes::Bytes::from_static(b"d"),
            mtime_ns: 1,
            xattrs: Default::default(),
            omap: Vec::new(),
        };
        let push = Msg::PgPush(PgPush {
            pgid: op.pgid,
            interval: Epoch(2),
            map_epoch: Epoch(3),
            objects: vec![ObjectCopy {
                oid: "obj".into(),
                state: Some(state.clone()),
                clones: vec![(4, state.clone()), (9, state)],
            }],
            last: None,
            corrupt: Vec::new(),
            lacking: Vec::new(),
        });
        assert_eq!(
            Msg::decode(push.msg_type(), push.encode_front()).unwrap(),
            push
        );

        let mut e = Encoder::new();
        e.versioned(1, 1, |e| {
            carmine_types::EVersion::ZERO.encode(e);
            e.put_u64(7);
        });
        let info = ObjectInfo::from_shared(e.into_bytes()).unwrap();
        assert!(!info.whiteout);
        assert_eq!(info.user_version, 7);
    }
}
