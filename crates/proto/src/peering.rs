//! Peering and recovery messages between the OSDs serving a PG.
//!
//! A primary in a new interval queries the infos of every OSD that may hold the PG's
//! newest writes ([`PgQuery`] → [`PgNotify`]), fetches the authoritative log where it
//! needs it ([`PgLogRequest`] → [`PgLogReply`]), pulls objects it lacks ([`PgPull`] →
//! [`PgPush`]), activates the replicas with the log suffix they lack and what they must
//! recover ([`PgActivate`] → [`PgActivated`]), and pushes their missing objects
//! ([`PgPush`] → [`PgPushReply`]). Copies that fail their checksum are named in the
//! `corrupt` lists of [`PgPush`] (a pull the sender could not serve) and
//! [`PgPushReply`] (a replica's scrub report), so the primary repairs them. Every message carries the sender's interval start
//! (`interval`): a message from an older interval is ignored.

use crate::op::OpError;
use crate::osd::{LogEntry, PgInfo};
use bytes::Bytes;
use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
use carmine_types::limits::{OBJECT_NAME_BYTES_MAX, OMAP_KEY_BYTES_MAX, XATTR_NAME_BYTES_MAX};
use carmine_types::{EVersion, Epoch, PgId, ReqId};
use std::collections::BTreeMap;

/// Primary → peer: send me your info for `pgid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgQuery {
    pub pgid: PgId,
    /// The epoch the querying primary's interval started.
    pub interval: Epoch,
    pub map_epoch: Epoch,
}

/// Peer → primary: my info (an empty info if I hold nothing of the PG).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgNotify {
    pub pgid: PgId,
    pub interval: Epoch,
    pub map_epoch: Epoch,
    pub info: PgInfo,
    /// Whether this OSD holds a copy of the PG at all.
    pub exists: bool,
    /// Objects this OSD knows it lacks (it has their log entries, not their data).
    pub missing: Vec<String>,
    /// The version this OSD needs of those of `missing` whose need its log no longer
    /// records (Ceph's `pg_missing_item::need`), where it knows it (v3; none from
    /// older senders). A primary adopting this copy's history learns them with it.
    pub missing_need: Vec<(String, EVersion)>,
    /// How much longer (nanoseconds of the sender's clock, from when it sent this) a
    /// read lease it granted may still let an earlier primary serve reads: the new
    /// primary waits that long before serving (v2; 0 from v1 senders).
    pub prior_lease_remaining_ns: u64,
}

/// Primary → peer: send me your log entries after `after` (all when `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgLogRequest {
    pub pgid: PgId,
    pub interval: Epoch,
    pub map_epoch: Epoch,
    pub after: Option<EVersion>,
    /// Asks the copy to name, in its reply's `unreadable`, the objects written by
    /// its entries after this version that its store cannot read (version 2; none
    /// from older senders). The primary asks when this copy's log reaches past every
    /// other answering copy's, where writes may rest on this copy's data alone.
    pub check_after: Option<EVersion>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgLogReply {
    pub pgid: PgId,
    pub interval: Epoch,
    pub map_epoch: Epoch,
    pub info: PgInfo,
    pub entries: Vec<LogEntry>,
    /// The requests of the sender's trimmed entries (version 2; none from older
    /// senders), so a copy adopting this log still answers their resends.
    pub dups: Vec<LogDup>,
    /// The objects of the entries after the request's `check_after` whose copy here
    /// fails its checksum (version 4; none from older senders).
    pub unreadable: Vec<String>,
}

/// A request whose log entry was trimmed, remembered so that a resend is answered with
/// its original result instead of being applied again (Ceph's `pg_log_dup_t`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogDup {
    pub reqid: ReqId,
    /// The version of the trimmed entry.
    pub version: EVersion,
    pub user_version: u64,
    /// The error of a trimmed error entry (a failed write): a resend gets it again.
    /// Sent after the dups in version 3 of the messages that carry them.
    pub error: Option<OpError>,
}

/// Primary → replica: adopt this history. Entries after `common` in the replica's log
/// are divergent (never acknowledged) and are dropped; `entries` follow `common`.
/// With `backfill`, the replica's copy is not covered by the log: it empties its
/// collection and receives every object by push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgActivate {
    pub pgid: PgId,
    pub interval: Epoch,
    pub map_epoch: Epoch,
    pub info: PgInfo,
    pub common: EVersion,
    pub entries: Vec<LogEntry>,
    pub backfill: bool,
    /// Objects the replica must receive before it is complete.
    pub missing: Vec<String>,
    /// The versions the primary knows those objects need where the log it sends may
    /// not name them (v4; none from older senders), as in [`PgNotify::missing_need`].
    pub missing_need: Vec<(String, EVersion)>,
    /// The primary's remembered requests of trimmed entries (version 2; none from
    /// older senders): the replica merges them, a backfilled one starts from them.
    pub dups: Vec<LogDup>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgActivated {
    pub pgid: PgId,
    pub interval: Epoch,
    pub map_epoch: Epoch,
}

/// Primary → peer: push me these objects (`all`: every object you hold, then a final
/// push with `last` set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgPull {
    pub pgid: PgId,
    pub interval: Epoch,
    pub map_epoch: Epoch,
    pub oids: Vec<String>,
    pub all: bool,
    /// Objects whose exact version the primary knows (Ceph's `need` of a missing
    /// item). A peer that lists one of them as missing may still send its copy when
    /// that copy is exactly this version: a copy waiting to be backfilled can be the
    /// only intact one of a write the log no longer records. (v2)
    pub exact: Vec<(String, EVersion)>,
}

/// One object's whole state (or its absence), sent to recover a peer's copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectCopy {
    pub oid: String,
    /// `None`: the object does not exist; the receiver removes it.
    pub state: Option<ObjectState>,
    /// The object's snapshot clones, by clone id (PgPush encoding v3; none from older ones).
    /// They travel with their head, so recovery and backfill, which work by object
    /// name, bring a copy's clones back together with the head's snapshot set.
    pub clones: Vec<(u64, ObjectState)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectState {
    pub data: Bytes,
    pub mtime_ns: u64,
    /// Raw store xattrs, the object-info xattr included.
    pub xattrs: BTreeMap<String, Bytes>,
    pub omap: Vec<(Bytes, Bytes)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgPush {
    pub pgid: PgId,
    pub interval: Epoch,
    pub map_epoch: Epoch,
    pub objects: Vec<ObjectCopy>,
    /// The end of a pull of `all` objects: `names` lists every object the sender holds.
    pub last: Option<Vec<String>>,
    /// Objects of the pull the sender could not copy because its own copy is unreadable
    /// (it failed its checksum, or the sender knows it lacks the object). Added in
    /// version 2; empty from older senders.
    pub corrupt: Vec<String>,
    /// Those of `corrupt` asked for at an exact version (`PgPull::exact`) that the
    /// sender holds at another version or not at all: a copy that is not the one
    /// needed, not a bad one. Also named in `corrupt`, which is all a receiver older
    /// than version 4 reads.
    pub lacking: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgPushReply {
    pub pgid: PgId,
    pub interval: Epoch,
    pub map_epoch: Epoch,
    pub oids: Vec<String>,
    /// Objects whose copy the sender found unreadable (a scrub, replica → primary): the
    /// primary pushes them again. Added in version 2; empty from older senders.
    pub corrupt: Vec<String>,
    /// Pushed objects the sender could not apply: its store refused the transaction
    /// (nothing of it was applied), `refused_for_space` when for want of room. The
    /// primary keeps them to push and backs off. Added in version 3; empty from older
    /// senders.
    pub refused: Vec<String>,
    pub refused_for_space: bool,
}

// --- encoding -------------------------------------------------------------------

fn put_names(e: &mut Encoder, names: &[String]) {
    e.put_u32(names.len() as u32);
    for name in names {
        name.encode(e);
    }
}

fn get_names(d: &mut Decoder) -> Result<Vec<String>, DecodeError> {
    let count = d.get_count("object names", 4)?;
    let mut names = Vec::with_capacity(count);
    for _ in 0..count {
        names.push(d.get_string("object name", OBJECT_NAME_BYTES_MAX)?);
    }
    Ok(names)
}

/// Object names with a version each (a pull's exact versions, a missing set's needs).
pub(crate) fn put_versioned_names(e: &mut Encoder, names: &[(String, EVersion)]) {
    e.put_u32(names.len() as u32);
    for (name, version) in names {
        name.encode(e);
        version.encode(e);
    }
}

pub(crate) fn get_versioned_names(
    d: &mut Decoder,
    what: &'static str,
) -> Result<Vec<(String, EVersion)>, DecodeError> {
    let count = d.get_count(what, 4 + 12)?;
    let mut names = Vec::with_capacity(count);
    for _ in 0..count {
        let name = d.get_string("object name", OBJECT_NAME_BYTES_MAX)?;
        names.push((name, EVersion::decode(d)?));
    }
    Ok(names)
}

fn header(e: &mut Encoder, pgid: PgId, interval: Epoch, map_epoch: Epoch) {
    pgid.encode(e);
    interval.encode(e);
    map_epoch.encode(e);
}

fn get_header(d: &mut Decoder) -> Result<(PgId, Epoch, Epoch), DecodeError> {
    Ok((PgId::decode(d)?, Epoch::decode(d)?, Epoch::decode(d)?))
}

impl Encode for PgQuery {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(1, 1, |e| {
            header(e, self.pgid, self.interval, self.map_epoch)
        });
    }
}

impl Decode for PgQuery {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("PgQuery", 1, |d, _| {
            let (pgid, interval, map_epoch) = get_header(d)?;
            Ok(PgQuery {
                pgid,
                interval,
                map_epoch,
            })
        })
    }
}

impl Encode for PgNotify {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(3, 1, |e| {
            header(e, self.pgid, self.interval, self.map_epoch);
            self.info.encode(e);
            self.exists.encode(e);
            put_names(e, &self.missing);
            self.prior_lease_remaining_ns.encode(e);
            put_versioned_names(e, &self.missing_need);
        });
    }
}

impl Decode for PgNotify {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("PgNotify", 3, |d, version| {
            let (pgid, interval, map_epoch) = get_header(d)?;
            Ok(PgNotify {
                pgid,
                interval,
                map_epoch,
                info: PgInfo::decode(d)?,
                exists: bool::decode(d)?,
                missing: get_names(d)?,
                prior_lease_remaining_ns: if version >= 2 { u64::decode(d)? } else { 0 },
                missing_need: if version >= 3 {
                    get_versioned_names(d, "missing versions")?
                } else {
                    Vec::new()
                },
            })
        })
    }
}

impl Encode for PgLogRequest {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(2, 1, |e| {
            header(e, self.pgid, self.interval, self.map_epoch);
            self.after.encode(e);
            self.check_after.encode(e);
        });
    }
}

impl Decode for PgLogRequest {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("PgLogRequest", 2, |d, version| {
            let (pgid, interval, map_epoch) = get_header(d)?;
            Ok(PgLogRequest {
                pgid,
                interval,
                map_epoch,
                after: Option::decode(d)?,
                check_after: if version >= 2 {
                    Option::decode(d)?
                } else {
                    None
                },
            })
        })
    }
}

impl Encode for LogDup {
    fn encode(&self, e: &mut Encoder) {
        self.reqid.encode(e);
        self.version.encode(e);
        e.put_u64(self.user_version);
    }
}

impl Decode for LogDup {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(LogDup {
            reqid: ReqId::decode(d)?,
            version: EVersion::decode(d)?,
            user_version: d.get_u64()?,
            error: None,
        })
    }
}

fn put_dups(e: &mut Encoder, dups: &[LogDup]) {
    e.put_u32(dups.len() as u32);
    for dup in dups {
        dup.encode(e);
    }
}

/// The errors of the failed writes among `dups`, after the dups and everything else
/// an older reader knows (so it skips them): `u32 count | (u32 index | OpError)*`.
fn put_dup_errors(e: &mut Encoder, dups: &[LogDup]) {
    let failed: Vec<(usize, &OpError)> = dups
        .iter()
        .enumerate()
        .filter_map(|(index, dup)| Some((index, dup.error.as_ref()?)))
        .collect();
    e.put_u32(failed.len() as u32);
    for (index, error) in failed {
        e.put_u32(index as u32);
        error.encode(e);
    }
}

/// Reads what [`put_dup_errors`] wrote into `dups`, for bodies of `version` 3 on.
fn get_dup_errors(d: &mut Decoder, version: u8, dups: &mut [LogDup]) -> Result<(), DecodeError> {
    if version < 3 {
        return Ok(());
    }
    // Each is at least a u32 index and a u16 code.
    let count = d.get_count("dup errors", 6)?;
    for _ in 0..count {
        let index = d.get_u32()?;
        let error = OpError::decode(d)?;
        let dup = dups.get_mut(index as usize).ok_or(DecodeError::Invalid {
            what: "dup error index",
            value: u64::from(index),
        })?;
        dup.error = Some(error);
    }
    Ok(())
}

/// Dups of a body of `version`: present from `since` on.
fn get_dups(d: &mut Decoder, version: u8, since: u8) -> Result<Vec<LogDup>, DecodeError> {
    if version < since {
        return Ok(Vec::new());
    }
    // A dup is at least 16 (reqid) + 12 (version) + 8 bytes.
    let count = d.get_count("log dups", 36)?;
    let mut dups = Vec::with_capacity(count);
    for _ in 0..count {
        dups.push(LogDup::decode(d)?);
    }
    Ok(dups)
}

impl Encode for PgLogReply {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(4, 1, |e| {
            header(e, self.pgid, self.interval, self.map_epoch);
            self.info.encode(e);
            self.entries.encode(e);
            put_dups(e, &self.dups);
            put_dup_errors(e, &self.dups);
            put_names(e, &self.unreadable);
        });
    }
}

impl Decode for PgLogReply {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("PgLogReply", 4, |d, version| {
            let (pgid, interval, map_epoch) = get_header(d)?;
            let mut reply = PgLogReply {
                pgid,
                interval,
                map_epoch,
                info: PgInfo::decode(d)?,
                entries: Vec::decode(d)?,
                dups: get_dups(d, version, 2)?,
                unreadable: Vec::new(),
            };
            get_dup_errors(d, version, &mut reply.dups)?;
            if version >= 4 {
                reply.unreadable = get_names(d)?;
            }
            Ok(reply)
        })
    }
}

impl Encode for PgActivate {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(4, 1, |e| {
            header(e, self.pgid, self.interval, self.map_epoch);
            self.info.encode(e);
            self.common.encode(e);
            self.entries.encode(e);
            self.backfill.encode(e);
            put_names(e, &self.missing);
            put_dups(e, &self.dups);
            put_dup_errors(e, &self.dups);
            put_versioned_names(e, &self.missing_need);
        });
    }
}

impl Decode for PgActivate {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("PgActivate", 4, |d, version| {
            let (pgid, interval, map_epoch) = get_header(d)?;
            let mut activate = PgActivate {
                pgid,
                interval,
                map_epoch,
                info: PgInfo::decode(d)?,
                common: EVersion::decode(d)?,
                entries: Vec::decode(d)?,
                backfill: bool::decode(d)?,
                missing: get_names(d)?,
                dups: get_dups(d, version, 2)?,
                missing_need: Vec::new(),
            };
            get_dup_errors(d, version, &mut activate.dups)?;
            if version >= 4 {
                activate.missing_need = get_versioned_names(d, "missing versions")?;
            }
            Ok(activate)
        })
    }
}

impl Encode for PgActivated {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(1, 1, |e| {
            header(e, self.pgid, self.interval, self.map_epoch)
        });
    }
}

impl Decode for PgActivated {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("PgActivated", 1, |d, _| {
            let (pgid, interval, map_epoch) = get_header(d)?;
            Ok(PgActivated {
                pgid,
                interval,
                map_epoch,
            })
        })
    }
}

impl Encode for PgPull {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(2, 1, |e| {
            header(e, self.pgid, self.interval, self.map_epoch);
            put_names(e, &self.oids);
            self.all.encode(e);
            // v2: the versions the puller needs exactly.
            put_versioned_names(e, &self.exact);
        });
    }
}

impl Decode for PgPull {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("PgPull", 2, |d, version| {
            let (pgid, interval, map_epoch) = get_header(d)?;
            let oids = get_names(d)?;
            let all = bool::decode(d)?;
            let exact = if version >= 2 {
                get_versioned_names(d, "exact versions")?
            } else {
                Vec::new()
            };
            Ok(PgPull {
                pgid,
                interval,
                map_epoch,
                oids,
                all,
                exact,
            })
        })
    }
}

impl Encode for ObjectCopy {
    fn encode(&self, e: &mut Encoder) {
        self.oid.encode(e);
        match &self.state {
            None => e.put_u8(0),
            Some(state) => {
                e.put_u8(1);
                put_object_state(e, state);
            }
        }
    }
}

fn put_object_state(e: &mut Encoder, state: &ObjectState) {
    e.put_shared_blob(&state.data);
    e.put_u64(state.mtime_ns);
    state.xattrs.encode(e);
    e.put_u32(state.omap.len() as u32);
    for (key, value) in &state.omap {
        e.put_blob(key);
        e.put_blob(value);
    }
}

fn get_object_state(d: &mut Decoder) -> Result<ObjectState, DecodeError> {
    let data = Bytes::decode(d)?;
    let mtime_ns = d.get_u64()?;
    let count = d.get_count("xattrs", 8)?;
    let mut xattrs = BTreeMap::new();
    for _ in 0..count {
        let name = d.get_string("xattr name", XATTR_NAME_BYTES_MAX + 1)?;
        xattrs.insert(name, Bytes::decode(d)?);
    }
    let count = d.get_count("omap entries", 8)?;
    let mut omap = Vec::with_capacity(count);
    for _ in 0..count {
        let key = d.get_blob("omap key", OMAP_KEY_BYTES_MAX)?;
        omap.push((key, Bytes::decode(d)?));
    }
    Ok(ObjectState {
        data,
        mtime_ns,
        xattrs,
        omap,
    })
}

fn put_clones(e: &mut Encoder, clones: &[(u64, ObjectState)]) {
    e.put_u32(clones.len() as u32);
    for (id, state) in clones {
        e.put_u64(*id);
        put_object_state(e, state);
    }
}

fn get_clones(d: &mut Decoder) -> Result<Vec<(u64, ObjectState)>, DecodeError> {
    let count = d.get_count("clones", 24)?;
    if count > crate::snap::CLONES_PER_OBJECT_MAX {
        return Err(DecodeError::TooLong {
            what: "clones",
            length: count,
            limit: crate::snap::CLONES_PER_OBJECT_MAX,
        });
    }
    let mut clones = Vec::with_capacity(count);
    for _ in 0..count {
        clones.push((d.get_u64()?, get_object_state(d)?));
    }
    Ok(clones)
}

impl Decode for ObjectCopy {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        let oid = d.get_string("object name", OBJECT_NAME_BYTES_MAX)?;
        let state = match d.get_u8()? {
            0 => None,
            1 => Some(get_object_state(d)?),
            other => {
                return Err(DecodeError::Invalid {
                    what: "object copy tag",
                    value: u64::from(other),
                })
            }
        };
        Ok(ObjectCopy {
            oid,
            state,
            clones: Vec::new(),
        })
    }
}

impl Encode for PgPush {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(4, 1, |e| {
            header(e, self.pgid, self.interval, self.map_epoch);
            self.objects.encode(e);
            match &self.last {
                None => e.put_u8(0),
                Some(names) => {
                    e.put_u8(1);
                    put_names(e, names);
                }
            }
            // v2: the copies the sender could not read.
            put_names(e, &self.corrupt);
            // v3: each object's clones, in object order.
            for object in &self.objects {
                put_clones(e, &object.clones);
            }
            // v4: the exact versions the sender does not hold.
            put_names(e, &self.lacking);
        });
    }
}

impl Decode for PgPush {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("PgPush", 4, |d, version| {
            let (pgid, interval, map_epoch) = get_header(d)?;
            let mut objects: Vec<ObjectCopy> = Vec::decode(d)?;
            let last = match d.get_u8()? {
                0 => None,
                1 => Some(get_names(d)?),
                other => {
                    return Err(DecodeError::Invalid {
                        what: "push last tag",
                        value: u64::from(other),
                    })
                }
            };
            let corrupt = if version >= 2 {
                get_names(d)?
            } else {
                Vec::new()
            };
            if version >= 3 {
                for object in &mut objects {
                    object.clones = get_clones(d)?;
                }
            }
            let lacking = if version >= 4 {
                get_names(d)?
            } else {
                Vec::new()
            };
            Ok(PgPush {
                pgid,
                interval,
                map_epoch,
                objects,
                last,
                corrupt,
                lacking,
            })
        })
    }
}

impl Encode for PgPushReply {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(3, 1, |e| {
            header(e, self.pgid, self.interval, self.map_epoch);
            put_names(e, &self.oids);
            put_names(e, &self.corrupt);
            put_names(e, &self.refused);
            self.refused_for_space.encode(e);
        });
    }
}

impl Decode for PgPushReply {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("PgPushReply", 3, |d, version| {
            let (pgid, interval, map_epoch) = get_header(d)?;
            let oids = get_names(d)?;
            let corrupt = if version >= 2 {
                get_names(d)?
            } else {
                Vec::new()
            };
            let (refused, refused_for_space) = if version >= 3 {
                (get_names(d)?, bool::decode(d)?)
            } else {
                (Vec::new(), false)
            };
            Ok(PgPushReply {
                pgid,
                interval,
                map_epoch,
                oids,
                corrupt,
                refused,
                refused_for_space,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Version 2 carries the unreadable objects and version 4 those of them the sender
    /// holds at another version; older bodies (no such fields) still decode, with
    /// none.
    #[test]
    fn push_messages_carry_corrupt_names_and_read_version_one() {
        let push = PgPush {
            pgid: PgId::new(1, 2),
            interval: Epoch(3),
            map_epoch: Epoch(4),
            objects: Vec::new(),
            last: None,
            corrupt: vec!["bad".into(), "other version".into()],
            lacking: vec!["other version".into()],
        };
        assert_eq!(PgPush::from_shared(push.to_bytes()).unwrap(), push);
        let mut e = Encoder::new();
        e.versioned(3, 1, |e| {
            header(e, push.pgid, push.interval, push.map_epoch);
            push.objects.encode(e);
            e.put_u8(0);
            put_names(e, &push.corrupt);
        });
        let v3 = PgPush::from_shared(e.into_bytes()).unwrap();
        assert_eq!(v3.corrupt, push.corrupt);
        assert!(v3.lacking.is_empty());
        let reply = PgPushReply {
            pgid: PgId::new(1, 2),
            interval: Epoch(3),
            map_epoch: Epoch(4),
            oids: vec!["good".into()],
            corrupt: vec!["bad".into()],
            refused: vec!["no room".into()],
            refused_for_space: true,
        };
        assert_eq!(PgPushReply::from_shared(reply.to_bytes()).unwrap(), reply);
        // Version 2 (no refusals) reads with none.
        let mut e = Encoder::new();
        e.versioned(2, 1, |e| {
            header(e, reply.pgid, reply.interval, reply.map_epoch);
            put_names(e, &reply.oids);
            put_names(e, &reply.corrupt);
        });
        let v2 = PgPushReply::from_shared(e.into_bytes()).unwrap();
        assert_eq!(v2.corrupt, reply.corrupt);
        assert!(v2.refused.is_empty() && !v2.refused_for_space);

        let mut e = Encoder::new();
        e.versioned(1, 1, |e| {
            header(e, reply.pgid, reply.interval, reply.map_epoch);
            put_names(e, &reply.oids);
        });
        let old = PgPushReply::from_shared(e.into_bytes()).unwrap();
        assert_eq!(old.oids, reply.oids);
        assert!(old.corrupt.is_empty());
    }

    /// Version 2 of a pull carries the versions needed exactly; a version-1 body (no
    /// such field) still decodes, with none.
    #[test]
    fn pulls_carry_exact_versions_and_read_version_one() {
        let pull = PgPull {
            pgid: PgId::new(1, 2),
            interval: Epoch(3),
            map_epoch: Epoch(4),
            oids: vec!["a".into(), "b".into()],
            all: false,
            exact: vec![("a".into(), EVersion::new(4, 23))],
        };
        assert_eq!(PgPull::from_shared(pull.to_bytes()).unwrap(), pull);
        let mut e = Encoder::new();
        e.versioned(1, 1, |e| {
            header(e, pull.pgid, pull.interval, pull.map_epoch);
            put_names(e, &pull.oids);
            pull.all.encode(e);
        });
        let old = PgPull::from_shared(e.into_bytes()).unwrap();
        assert_eq!(old.oids, pull.oids);
        assert!(old.exact.is_empty());
    }

    /// Version 2 of the log reply and the activation carries dups; version-1 bodies
    /// (no such field) still decode, with none.
    #[test]
    fn log_exchange_messages_carry_dups_and_read_version_one() {
        let dup = LogDup {
            reqid: ReqId { client: 9, tid: 4 },
            version: EVersion::new(2, 17),
            user_version: 17,
            error: None,
        };
        let failed = LogDup {
            reqid: ReqId { client: 9, tid: 5 },
            version: EVersion::new(2, 18),
            user_version: 0,
            error: Some(OpError::VersionMismatch {
                expected: 1,
                actual: 2,
            }),
        };
        let reply = PgLogReply {
            pgid: PgId::new(1, 2),
            interval: Epoch(3),
            map_epoch: Epoch(4),
            info: PgInfo::default(),
            entries: Vec::new(),
            dups: vec![dup.clone(), failed.clone()],
            unreadable: Vec::new(),
        };
        assert_eq!(PgLogReply::from_shared(reply.to_bytes()).unwrap(), reply);
        let activate = PgActivate {
            pgid: PgId::new(1, 2),
            interval: Epoch(3),
            map_epoch: Epoch(4),
            info: PgInfo::default(),
            common: EVersion::ZERO,
            entries: Vec::new(),
            backfill: true,
            missing: vec!["a".into()],
            dups: vec![failed.clone(), dup.clone(), failed],
            missing_need: Vec::new(),
        };
        assert_eq!(
            PgActivate::from_shared(activate.to_bytes()).unwrap(),
            activate
        );

        let mut e = Encoder::new();
        e.versioned(1, 1, |e| {
            header(e, reply.pgid, reply.interval, reply.map_epoch);
            reply.info.encode(e);
            reply.entries.encode(e);
        });
        let old = PgLogReply::from_shared(e.into_bytes()).unwrap();
        assert_eq!(old.info, reply.info);
        assert!(old.dups.is_empty());
        let mut e = Encoder::new();
        e.versioned(1, 1, |e| {
            header(e, activate.pgid, activate.interval, activate.map_epoch);
            activate.info.encode(e);
            activate.common.encode(e);
            activate.entries.encode(e);
            activate.backfill.encode(e);
            put_names(e, &activate.missing);
        });
        let old = PgActivate::from_shared(e.into_bytes()).unwrap();
        assert_eq!(old.missing, activate.missing);
        assert!(old.dups.is_empty());
        // Version 2 (dups without their errors) reads as dups of successful writes.
        let mut e = Encoder::new();
        e.versioned(2, 1, |e| {
            header(e, reply.pgid, reply.interval, reply.map_epoch);
            reply.info.encode(e);
            reply.entries.encode(e);
            put_dups(e, &reply.dups);
        });
        let old = PgLogReply::from_shared(e.into_bytes()).unwrap();
        assert_eq!(old.dups.len(), 2);
        assert!(old.dups.iter().all(|dup| dup.error.is_none()));
        // Cut short anywhere, or naming a dup that is not there, a body is an error.
        let bytes = activate.to_bytes();
        for length in 0..bytes.len() {
            assert!(PgActivate::from_shared(bytes.slice(..length)).is_err());
        }
        let mut e = Encoder::new();
        e.versioned(3, 1, |e| {
            header(e, reply.pgid, reply.interval, reply.map_epoch);
            reply.info.encode(e);
            reply.entries.encode(e);
            put_dups(e, &[]);
            put_dup_errors(e, &reply.dups);
        });
        assert!(PgLogReply::from_shared(e.into_bytes()).is_err());
    }

    /// Version 3 of the notify and version 4 of the activation carry the versions a
    /// missing set needs; older bodies (no such field) still decode, with none, and a
    /// body cut short anywhere is an error.
    #[test]
    fn missing_sets_carry_needed_versions_and_read_older_versions() {
        let needs = vec![
            ("a".to_string(), EVersion::new(13, 81)),
            ("b".to_string(), EVersion::new(40, 2)),
        ];
        let notify = PgNotify {
            pgid: PgId::new(1, 2),
            interval: Epoch(3),
            map_epoch: Epoch(4),
            info: PgInfo::default(),
            exists: true,
            missing: vec!["a".into(), "b".into(), "c".into()],
            missing_need: needs.clone(),
            prior_lease_remaining_ns: 7,
        };
        assert_eq!(PgNotify::from_shared(notify.to_bytes()).unwrap(), notify);
        let mut e = Encoder::new();
        e.versioned(2, 1, |e| {
            header(e, notify.pgid, notify.interval, notify.map_epoch);
            notify.info.encode(e);
            notify.exists.encode(e);
            put_names(e, &notify.missing);
            notify.prior_lease_remaining_ns.encode(e);
        });
        let old = PgNotify::from_shared(e.into_bytes()).unwrap();
        assert_eq!(
            (old.missing, old.prior_lease_remaining_ns),
            (notify.missing.clone(), 7)
        );
        assert!(old.missing_need.is_empty());

        let activate = PgActivate {
            pgid: PgId::new(1, 2),
            interval: Epoch(3),
            map_epoch: Epoch(4),
            info: PgInfo::default(),
            common: EVersion::new(2, 9),
            entries: Vec::new(),
            backfill: false,
            missing: vec!["a".into(), "b".into()],
            dups: Vec::new(),
            missing_need: needs,
        };
        assert_eq!(
            PgActivate::from_shared(activate.to_bytes()).unwrap(),
            activate
        );
        let mut e = Encoder::new();
        e.versioned(3, 1, |e| {
            header(e, activate.pgid, activate.interval, activate.map_epoch);
            activate.info.encode(e);
            activate.common.encode(e);
            activate.entries.encode(e);
            activate.backfill.encode(e);
            put_names(e, &activate.missing);
            put_dups(e, &[]);
            put_dup_errors(e, &[]);
        });
        let old = PgActivate::from_shared(e.into_bytes()).unwrap();
        assert_eq!(old.missing, activate.missing);
        assert!(old.missing_need.is_empty());
        let (notify, activate) = (notify.to_bytes(), activate.to_bytes());
        for length in 0..notify.len() {
            assert!(PgNotify::from_shared(notify.slice(..length)).is_err());
        }
        for length in 0..activate.len() {
            assert!(PgActivate::from_shared(activate.slice(..length)).is_err());
        }
    }

    /// Version 2 of the log request asks which of the newest entries' objects the
    /// copy cannot read, and version 4 of the reply names them; older bodies (no such
    /// fields) still decode, with none.
    #[test]
    fn log_exchange_messages_carry_unreadable_objects_and_read_older_versions() {
        let request = PgLogRequest {
            pgid: PgId::new(1, 2),
            interval: Epoch(3),
            map_epoch: Epoch(4),
            after: None,
            check_after: Some(EVersion::new(3, 7)),
        };
        assert_eq!(
            PgLogRequest::from_shared(request.to_bytes()).unwrap(),
            request
        );
        let mut e = Encoder::new();
        e.versioned(1, 1, |e| {
            header(e, request.pgid, request.interval, request.map_epoch);
            request.after.encode(e);
        });
        let old = PgLogRequest::from_shared(e.into_bytes()).unwrap();
        assert_eq!(old.check_after, None);

        let reply = PgLogReply {
            pgid: PgId::new(1, 2),
            interval: Epoch(3),
            map_epoch: Epoch(4),
            info: PgInfo::default(),
            entries: Vec::new(),
            dups: Vec::new(),
            unreadable: vec!["rotten".into()],
        };
        assert_eq!(PgLogReply::from_shared(reply.to_bytes()).unwrap(), reply);
        let mut e = Encoder::new();
        e.versioned(3, 1, |e| {
            header(e, reply.pgid, reply.interval, reply.map_epoch);
            reply.info.encode(e);
            reply.entries.encode(e);
            put_dups(e, &reply.dups);
            put_dup_errors(e, &reply.dups);
        });
        let old = PgLogReply::from_shared(e.into_bytes()).unwrap();
        assert!(old.unreadable.is_empty());
        let bytes = reply.to_bytes();
        for length in 0..bytes.len() {
            assert!(PgLogReply::from_shared(bytes.slice(..length)).is_err());
        }
    }
}
