//! Messages of the data path: client ↔ primary OSD requests and replies, and primary
//! ↔ replica replication.

use crate::op::{OpCode, OpError, OpOutput};
use crate::snap::SnapContext;
use carmine_store::Transaction;
use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
use carmine_types::limits::{OBJECT_NAME_BYTES_MAX, OPS_PER_REQUEST_MAX};
use carmine_types::{EVersion, Epoch, PgId, ReqId, SnapId};
use std::sync::Arc;

/// A client request: a compound op on one object of one PG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OsdOp {
    pub reqid: ReqId,
    pub pgid: PgId,
    /// The object name; empty for PG-level ops such as listing.
    pub oid: String,
    /// The epoch of the map the client used to pick the target.
    pub map_epoch: Epoch,
    pub flags: u32,
    /// Modification time the client stamps on writes (ns since the Unix epoch).
    pub mtime_ns: u64,
    pub ops: Vec<OpCode>,
    /// Writes: the writer's snapshot context (encoding v2; empty from v1).
    pub snapc: SnapContext,
    /// Reads: the snapshot to read at (encoding v2; [`SnapId::HEAD`] from v1).
    pub snapid: SnapId,
}

impl OsdOp {
    /// Serve a read from this OSD's local copy whatever its role (a debug read used to
    /// compare replicas).
    pub const FLAG_LOCAL_READ: u32 = 1 << 0;

    pub fn is_write(&self) -> bool {
        self.ops.iter().any(OpCode::is_write)
    }
}

/// The answer to an [`OsdOp`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OsdOpReply {
    pub reqid: ReqId,
    pub pgid: PgId,
    pub result: Result<(), OpError>,
    /// One output per sub-op on success.
    pub outputs: Vec<OpOutput>,
    /// The object's user version after the request.
    pub user_version: u64,
    /// The PG version that a write got.
    pub version: EVersion,
    /// The OSD's map epoch, so a client with an older map can catch up.
    pub map_epoch: Epoch,
}

/// What a PG log entry records about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogOp {
    Modify,
    Delete,
    /// The write failed with this error and changed nothing; it is logged so that a
    /// resend, to this primary or a later one, gets the same answer instead of being
    /// applied (Ceph's `pg_log_entry_t::ERROR`, written by `record_write_error`).
    Error(OpError),
}

impl LogOp {
    /// The error an [`LogOp::Error`] entry answers with.
    pub fn error(&self) -> Option<&OpError> {
        match self {
            LogOp::Error(error) => Some(error),
            LogOp::Modify | LogOp::Delete => None,
        }
    }
}

/// One entry of a PG log: a write ordered by the primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub version: EVersion,
    pub prior_version: EVersion,
    pub reqid: ReqId,
    pub oid: String,
    pub op: LogOp,
    /// The object's user version after the write; 0 for an error entry, which leaves
    /// the object as it was.
    pub user_version: u64,
}

impl LogEntry {
    /// Whether the entry changed its object. An error entry did not: it orders the
    /// failure in the PG's history (and bumps the PG version) but makes no object
    /// missing or divergent, and copies never need to exchange its object for it.
    pub fn changes_object(&self) -> bool {
        !matches!(self.op, LogOp::Error(_))
    }
}

/// Primary → replica: apply this transaction, which carries the write and the PG log
/// entry, and answer when it is durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepOp {
    pub pgid: PgId,
    pub map_epoch: Epoch,
    pub rep_tid: u64,
    pub entry: LogEntry,
    /// The PG's info after this write, so a replica's counters match the primary's.
    pub info: PgInfo,
    /// Shared: a primary sends the same transaction to every replica, and copying it
    /// per replica cloned every op's object name. The wire format is the plain
    /// transaction; a decoded `RepOp` holds the only reference, so a replica takes the
    /// transaction out without a copy.
    pub tx: Arc<Transaction>,
}

/// What a PG member knows about its PG: how far its log goes and what it holds.
/// Persisted with every write in the PG's metadata object.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PgInfo {
    pub pgid: PgId,
    /// The newest write this member has applied.
    pub last_update: EVersion,
    /// The oldest version still in the log (older entries were trimmed).
    pub log_tail: EVersion,
    pub object_count: u64,
    pub data_bytes: u64,
    /// The interval start of the last peering that activated this copy (0: never).
    pub last_epoch_started: Epoch,
    /// When this copy was created (or wiped for a backfill): it cannot vouch for
    /// intervals before then.
    pub created: Epoch,
    /// `object_count` and `data_bytes` are not known to be this history's (Ceph's
    /// `stats_invalid`): a rollback left them counting what it took back. Whoever
    /// adopts this info adopts the doubt with it; a primary holding every object of
    /// its history counts them afresh (version 3; false from older senders).
    pub stats_invalid: bool,
}

impl Encode for PgInfo {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(3, 1, |e| {
            self.pgid.encode(e);
            self.last_update.encode(e);
            self.log_tail.encode(e);
            e.put_u64(self.object_count);
            e.put_u64(self.data_bytes);
            self.last_epoch_started.encode(e);
            self.created.encode(e);
            self.stats_invalid.encode(e);
        });
    }
}

impl Decode for PgInfo {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("PgInfo", 3, |d, version| {
            Ok(PgInfo {
                pgid: PgId::decode(d)?,
                last_update: EVersion::decode(d)?,
                log_tail: EVersion::decode(d)?,
                object_count: d.get_u64()?,
                data_bytes: d.get_u64()?,
                last_epoch_started: if version >= 2 {
                    Epoch::decode(d)?
                } else {
                    Epoch(0)
                },
                created: if version >= 2 {
                    Epoch::decode(d)?
                } else {
                    Epoch(0)
                },
                stats_invalid: version >= 3 && bool::decode(d)?,
            })
        })
    }
}

/// Replica → primary: the transaction of `rep_tid` is durable (or failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepOpReply {
    pub pgid: PgId,
    pub map_epoch: Epoch,
    pub rep_tid: u64,
    pub version: EVersion,
    pub result: Result<(), OpError>,
    /// The replica applied only the entry to its log: it lacks the object (its store
    /// refused the object's push) and holds no copy of the write (v2; a v1 reply
    /// decodes as `false`).
    pub log_only: bool,
}

fn encode_result(e: &mut Encoder, result: &Result<(), OpError>) {
    match result {
        Ok(()) => e.put_u8(0),
        Err(error) => {
            e.put_u8(1);
            error.encode(e);
        }
    }
}

fn decode_result(d: &mut Decoder) -> Result<Result<(), OpError>, DecodeError> {
    match d.get_u8()? {
        0 => Ok(Ok(())),
        1 => Ok(Err(OpError::decode(d)?)),
        other => Err(DecodeError::Invalid {
            what: "result tag",
            value: u64::from(other),
        }),
    }
}

impl Encode for OsdOp {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(2, 1, |e| {
            self.reqid.encode(e);
            self.pgid.encode(e);
            self.oid.encode(e);
            self.map_epoch.encode(e);
            e.put_u32(self.flags);
            e.put_u64(self.mtime_ns);
            self.ops.encode(e);
            self.snapc.encode(e);
            self.snapid.encode(e);
        });
    }
}

impl Decode for OsdOp {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("OsdOp", 2, |d, version| {
            let mut op = OsdOp {
                reqid: ReqId::decode(d)?,
                pgid: PgId::decode(d)?,
                oid: d.get_string("object name", OBJECT_NAME_BYTES_MAX)?,
                map_epoch: Epoch::decode(d)?,
                flags: d.get_u32()?,
                mtime_ns: d.get_u64()?,
                ops: Vec::decode(d)?,
                snapc: SnapContext::default(),
                snapid: SnapId::HEAD,
            };
            if version >= 2 {
                op.snapc = SnapContext::decode(d)?;
                op.snapid = SnapId::decode(d)?;
            }
            if op.ops.len() > OPS_PER_REQUEST_MAX {
                return Err(DecodeError::TooLong {
                    what: "ops in one request",
                    length: op.ops.len(),
                    limit: OPS_PER_REQUEST_MAX,
                });
            }
            Ok(op)
        })
    }
}

impl Encode for OsdOpReply {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(1, 1, |e| {
            self.reqid.encode(e);
            self.pgid.encode(e);
            encode_result(e, &self.result);
            self.outputs.encode(e);
            e.put_u64(self.user_version);
            self.version.encode(e);
            self.map_epoch.encode(e);
        });
    }
}

impl Decode for OsdOpReply {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("OsdOpReply", 1, |d, _| {
            Ok(OsdOpReply {
                reqid: ReqId::decode(d)?,
                pgid: PgId::decode(d)?,
                result: decode_result(d)?,
                outputs: Vec::decode(d)?,
                user_version: d.get_u64()?,
                version: EVersion::decode(d)?,
                map_epoch: Epoch::decode(d)?,
            })
        })
    }
}

/// `versioned(2, 1) { EVersion version | EVersion prior_version | ReqId reqid | string
/// oid | u8 op (1 modify, 2 delete, 3 error) | u64 user_version | [op 3: OpError] }`.
/// An error entry is written with compat 2: a version-1 reader cannot represent it and
/// says so, rather than misread it as a change. Modify and delete entries stay readable
/// by version-1 readers (version 1 had no error field).
impl Encode for LogEntry {
    fn encode(&self, e: &mut Encoder) {
        let compat = if self.op.error().is_some() { 2 } else { 1 };
        e.versioned(2, compat, |e| {
            self.version.encode(e);
            self.prior_version.encode(e);
            self.reqid.encode(e);
            self.oid.encode(e);
            e.put_u8(match self.op {
                LogOp::Modify => 1,
                LogOp::Delete => 2,
                LogOp::Error(_) => 3,
            });
            e.put_u64(self.user_version);
            if let LogOp::Error(error) = &self.op {
                error.encode(e);
            }
        });
    }
}

impl Decode for LogEntry {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("LogEntry", 2, |d, version| {
            let version_at = EVersion::decode(d)?;
            let prior_version = EVersion::decode(d)?;
            let reqid = ReqId::decode(d)?;
            let oid = d.get_string("object name", OBJECT_NAME_BYTES_MAX)?;
            let tag = d.get_u8()?;
            let user_version = d.get_u64()?;
            let op = match tag {
                1 => LogOp::Modify,
                2 => LogOp::Delete,
                3 if version >= 2 => LogOp::Error(OpError::decode(d)?),
                other => {
                    return Err(DecodeError::Invalid {
                        what: "log op",
                        value: u64::from(other),
                    })
                }
            };
            Ok(LogEntry {
                version: version_at,
                prior_version,
                reqid,
                oid,
                op,
                user_version,
            })
        })
    }
}

impl Encode for RepOp {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(1, 1, |e| {
            self.pgid.encode(e);
            self.map_epoch.encode(e);
            e.put_u64(self.rep_tid);
            self.entry.encode(e);
            self.info.encode(e);
            self.tx.encode(e);
        });
    }
}

impl Decode for RepOp {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("RepOp", 1, |d, _| {
            Ok(RepOp {
                pgid: PgId::decode(d)?,
                map_epoch: Epoch::decode(d)?,
                rep_tid: d.get_u64()?,
                entry: LogEntry::decode(d)?,
                info: PgInfo::decode(d)?,
                tx: Arc::new(Transaction::decode(d)?),
            })
        })
    }
}

impl Encode for RepOpReply {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(2, 1, |e| {
            self.pgid.encode(e);
            self.map_epoch.encode(e);
            e.put_u64(self.rep_tid);
            self.version.encode(e);
            encode_result(e, &self.result);
            self.log_only.encode(e);
        });
    }
}

impl Decode for RepOpReply {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("RepOpReply", 2, |d, version| {
            Ok(RepOpReply {
                pgid: PgId::decode(d)?,
                map_epoch: Epoch::decode(d)?,
                rep_tid: d.get_u64()?,
                version: EVersion::decode(d)?,
                result: decode_result(d)?,
                log_only: version >= 2 && bool::decode(d)?,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(op: LogOp) -> LogEntry {
        LogEntry {
            version: EVersion::new(3, 7),
            prior_version: EVersion::new(2, 5),
            reqid: ReqId { client: 9, tid: 4 },
            oid: "obj".into(),
            user_version: if op.error().is_some() { 0 } else { 7 },
            op,
        }
    }

    #[test]
    fn log_entries_round_trip_error_entries_included() {
        let errors = [
            OpError::Exists,
            OpError::NotFound,
            OpError::VersionMismatch {
                expected: 3,
                actual: 4,
            },
            OpError::Invalid("bad".into()),
            OpError::Io("disk".into()),
        ];
        let ops = [LogOp::Modify, LogOp::Delete]
            .into_iter()
            .chain(errors.into_iter().map(LogOp::Error));
        for op in ops {
            let original = entry(op);
            let decoded = LogEntry::from_shared(original.to_bytes()).unwrap();
            assert_eq!(decoded, original);
        }
    }

    #[test]
    fn truncated_or_garbled_log_entries_are_decode_errors() {
        let bytes = entry(LogOp::Error(OpError::VersionMismatch {
            expected: 1,
            actual: 2,
        }))
        .to_bytes();
        for length in 0..bytes.len() {
            let cut = bytes.slice(..length);
            assert!(LogEntry::from_shared(cut).is_err(), "cut at {length}");
        }
        // An unknown op tag, and an unknown error code, are errors too.
        let mut raw = bytes.to_vec();
        // From the end: the error (code, expected, actual) and the user version.
        let tag_at = raw.len() - (2 + 8 + 8) - 8 - 1;
        assert_eq!(raw[tag_at], 3);
        raw[tag_at] = 9;
        assert!(LogEntry::from_shared(raw.clone().into()).is_err());
        raw[tag_at] = 3;
        let code_at = tag_at + 1 + 8;
        raw[code_at] = 0xee;
        assert!(LogEntry::from_shared(raw.into()).is_err());
    }

    /// Entries written before error entries existed (version 1) still decode, and a
    /// modify entry is still written so that a version-1 reader accepts it, while an
    /// error entry tells such a reader it cannot read it.
    #[test]
    fn version_1_entries_decode_and_error_entries_need_version_2() {
        let mut e = Encoder::with_capacity(64);
        e.versioned(1, 1, |e| {
            EVersion::new(1, 2).encode(e);
            EVersion::new(1, 1).encode(e);
            ReqId { client: 1, tid: 2 }.encode(e);
            "o".to_string().encode(e);
            e.put_u8(2);
            e.put_u64(2);
        });
        let old = LogEntry::from_shared(e.into_bytes()).unwrap();
        assert_eq!(old.op, LogOp::Delete);
        assert_eq!(old.user_version, 2);
        let modify = entry(LogOp::Modify).to_bytes();
        assert_eq!((modify[0], modify[1]), (2, 1));
        let error = entry(LogOp::Error(OpError::Exists)).to_bytes();
        assert_eq!((error[0], error[1]), (2, 2));
        // A version-1 body with tag 3 is invalid (version 1 had no error entries).
        let mut e = Encoder::with_capacity(64);
        e.versioned(1, 1, |e| {
            EVersion::new(1, 2).encode(e);
            EVersion::ZERO.encode(e);
            ReqId { client: 1, tid: 2 }.encode(e);
            "o".to_string().encode(e);
            e.put_u8(3);
            e.put_u64(0);
            OpError::Exists.encode(e);
        });
        assert!(LogEntry::from_shared(e.into_bytes()).is_err());
    }

    /// A replica's answer carries whether it only logged the write (v2); one from a
    /// build before says nothing of it and reads as holding the write.
    #[test]
    fn rep_op_reply_log_only_round_trips_and_a_v1_reply_reads_as_holding_it() {
        let reply = RepOpReply {
            pgid: PgId::new(1, 2),
            map_epoch: Epoch(7),
            rep_tid: 11,
            version: EVersion::new(7, 3),
            result: Ok(()),
            log_only: true,
        };
        let mut e = Encoder::new();
        reply.encode(&mut e);
        let decoded = RepOpReply::decode(&mut Decoder::new(e.into_bytes())).unwrap();
        assert_eq!(decoded, reply);

        let mut e = Encoder::new();
        e.versioned(1, 1, |e| {
            reply.pgid.encode(e);
            reply.map_epoch.encode(e);
            e.put_u64(reply.rep_tid);
            reply.version.encode(e);
            encode_result(e, &reply.result);
        });
        let decoded = RepOpReply::decode(&mut Decoder::new(e.into_bytes())).unwrap();
        assert_eq!(
            decoded,
            RepOpReply {
                log_only: false,
                ..reply
            }
        );
    }

    /// An info says whether its counts are in doubt (v3); one from a build before
    /// says nothing of it and reads as counts that are sure.
    #[test]
    fn pg_info_stats_invalid_round_trips_and_a_v2_info_reads_as_sure() {
        let info = PgInfo {
            pgid: PgId::new(1, 2),
            last_update: EVersion::new(7, 3),
            log_tail: EVersion::new(2, 1),
            object_count: 5,
            data_bytes: 4096,
            last_epoch_started: Epoch(6),
            created: Epoch(2),
            stats_invalid: true,
        };
        let decoded = PgInfo::from_shared(info.to_bytes()).unwrap();
        assert_eq!(decoded, info);

        let mut e = Encoder::new();
        e.versioned(2, 1, |e| {
            info.pgid.encode(e);
            info.last_update.encode(e);
            info.log_tail.encode(e);
            e.put_u64(info.object_count);
            e.put_u64(info.data_bytes);
            info.last_epoch_started.encode(e);
            info.created.encode(e);
        });
        let decoded = PgInfo::decode(&mut Decoder::new(e.into_bytes())).unwrap();
        assert_eq!(
            decoded,
            PgInfo {
                stats_invalid: false,
                ..info
            }
        );
    }
}
