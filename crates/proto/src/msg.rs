//! [`Msg`]: the one enum of every message, with its wire type number.

use crate::heartbeat::{OsdFailure, OsdPing};
use crate::lease::{PgLease, PgLeaseAck};
use crate::mon::{
    MonCommand, MonCommandReply, MonForward, MonGetMap, MonRaft, OsdBoot, OsdMapMsg, OsdStats,
};
use crate::osd::{OsdOp, OsdOpReply, RepOp, RepOpReply};
use crate::peering::{
    PgActivate, PgActivated, PgLogReply, PgLogRequest, PgNotify, PgPull, PgPush, PgPushReply,
    PgQuery,
};
use crate::purge::PgRemove;
use crate::reserve::PgReserve;
use crate::scrub::{PgScrubMap, PgScrubRequest};
use bytes::Bytes;
use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};

/// Room reserved for a message's front segment, enough for a client op or a
/// replicated write without its payload, so encoding does not grow the buffer
/// step by step (larger messages still grow it).
const FRONT_BYTES_RESERVED: usize = 512;

/// Every message Carmine sends.
#[derive(Debug, Clone, PartialEq)]
pub enum Msg {
    MonGetMap(MonGetMap),
    OsdMap(OsdMapMsg),
    OsdBoot(OsdBoot),
    OsdStats(OsdStats),
    MonCommand(MonCommand),
    MonCommandReply(MonCommandReply),
    OsdOp(OsdOp),
    OsdOpReply(OsdOpReply),
    RepOp(RepOp),
    RepOpReply(RepOpReply),
    PgQuery(PgQuery),
    PgNotify(PgNotify),
    PgLogRequest(PgLogRequest),
    PgLogReply(PgLogReply),
    PgActivate(PgActivate),
    PgActivated(PgActivated),
    PgPull(PgPull),
    PgPush(PgPush),
    PgPushReply(PgPushReply),
    PgRemove(PgRemove),
    PgReserve(PgReserve),
    PgScrubRequest(PgScrubRequest),
    PgScrubMap(PgScrubMap),
    PgLease(PgLease),
    PgLeaseAck(PgLeaseAck),
    MonRaft(MonRaft),
    MonForward(MonForward),
    OsdPing(OsdPing),
    OsdFailure(OsdFailure),
}

/// Wire type numbers. Never reuse a number.
pub mod msg_type {
    pub const MON_GET_MAP: u16 = 1;
    pub const OSD_MAP: u16 = 2;
    pub const OSD_BOOT: u16 = 3;
    pub const OSD_STATS: u16 = 4;
    pub const MON_COMMAND: u16 = 5;
    pub const MON_COMMAND_REPLY: u16 = 6;
    pub const OSD_OP: u16 = 20;
    pub const OSD_OP_REPLY: u16 = 21;
    pub const REP_OP: u16 = 30;
    pub const REP_OP_REPLY: u16 = 31;
    pub const PG_QUERY: u16 = 40;
    pub const PG_NOTIFY: u16 = 41;
    pub const PG_LOG_REQUEST: u16 = 42;
    pub const PG_LOG_REPLY: u16 = 43;
    pub const PG_ACTIVATE: u16 = 44;
    pub const PG_ACTIVATED: u16 = 45;
    pub const PG_PULL: u16 = 46;
    pub const PG_PUSH: u16 = 47;
    pub const PG_PUSH_REPLY: u16 = 48;
    pub const PG_REMOVE: u16 = 51;
    pub const PG_RESERVE: u16 = 52;
    pub const PG_SCRUB_REQUEST: u16 = 53;
    pub const PG_SCRUB_MAP: u16 = 54;
    pub const PG_LEASE: u16 = 49;
    pub const PG_LEASE_ACK: u16 = 50;
    pub const MON_RAFT: u16 = 60;
    pub const MON_FORWARD: u16 = 61;
    pub const OSD_PING: u16 = 70;
    pub const OSD_FAILURE: u16 = 71;
}

/// A message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MsgError {
    #[error("unknown message type {0}")]
    UnknownType(u16),
    #[error("malformed message of type {msg_type}: {source}")]
    Malformed { msg_type: u16, source: DecodeError },
}

impl Msg {
    pub fn msg_type(&self) -> u16 {
        use msg_type::*;
        match self {
            Msg::MonGetMap(_) => MON_GET_MAP,
            Msg::OsdMap(_) => OSD_MAP,
            Msg::OsdBoot(_) => OSD_BOOT,
            Msg::OsdStats(_) => OSD_STATS,
            Msg::MonCommand(_) => MON_COMMAND,
            Msg::MonCommandReply(_) => MON_COMMAND_REPLY,
            Msg::OsdOp(_) => OSD_OP,
            Msg::OsdOpReply(_) => OSD_OP_REPLY,
            Msg::RepOp(_) => REP_OP,
            Msg::RepOpReply(_) => REP_OP_REPLY,
            Msg::PgQuery(_) => PG_QUERY,
            Msg::PgNotify(_) => PG_NOTIFY,
            Msg::PgLogRequest(_) => PG_LOG_REQUEST,
            Msg::PgLogReply(_) => PG_LOG_REPLY,
            Msg::PgActivate(_) => PG_ACTIVATE,
            Msg::PgActivated(_) => PG_ACTIVATED,
            Msg::PgPull(_) => PG_PULL,
            Msg::PgPush(_) => PG_PUSH,
            Msg::PgPushReply(_) => PG_PUSH_REPLY,
            Msg::PgRemove(_) => PG_REMOVE,
            Msg::PgReserve(_) => PG_RESERVE,
            Msg::PgScrubRequest(_) => PG_SCRUB_REQUEST,
            Msg::PgScrubMap(_) => PG_SCRUB_MAP,
            Msg::PgLease(_) => PG_LEASE,
            Msg::PgLeaseAck(_) => PG_LEASE_ACK,
            Msg::MonRaft(_) => MON_RAFT,
            Msg::MonForward(_) => MON_FORWARD,
            Msg::OsdPing(_) => OSD_PING,
            Msg::OsdFailure(_) => OSD_FAILURE,
        }
    }

    /// Encodes the body (the messenger's front segment), every byte inline.
    pub fn encode_front(&self) -> Bytes {
        let mut e = Encoder::new();
        self.encode_into(&mut e);
        e.into_bytes()
    }

    /// Encodes the message as the messenger's front and data segments: one large
    /// payload (a write's data, a read's result, a replicated write's data) goes to the
    /// data segment by reference instead of being copied into the front. Decode with
    /// [`Msg::decode_parts`].
    pub fn encode_parts(&self) -> (Bytes, Bytes) {
        let mut e = Encoder::with_data_segment(FRONT_BYTES_RESERVED);
        self.encode_into(&mut e);
        e.into_parts()
    }

    fn encode_into(&self, e: &mut Encoder) {
        match self {
            Msg::MonGetMap(m) => m.encode(e),
            Msg::OsdMap(m) => m.encode(e),
            Msg::OsdBoot(m) => m.encode(e),
            Msg::OsdStats(m) => m.encode(e),
            Msg::MonCommand(m) => m.encode(e),
            Msg::MonCommandReply(m) => m.encode(e),
            Msg::OsdOp(m) => m.encode(e),
            Msg::OsdOpReply(m) => m.encode(e),
            Msg::RepOp(m) => m.encode(e),
            Msg::RepOpReply(m) => m.encode(e),
            Msg::PgQuery(m) => m.encode(e),
            Msg::PgNotify(m) => m.encode(e),
            Msg::PgLogRequest(m) => m.encode(e),
            Msg::PgLogReply(m) => m.encode(e),
            Msg::PgActivate(m) => m.encode(e),
            Msg::PgActivated(m) => m.encode(e),
            Msg::PgPull(m) => m.encode(e),
            Msg::PgPush(m) => m.encode(e),
            Msg::PgPushReply(m) => m.encode(e),
            Msg::PgRemove(m) => m.encode(e),
            Msg::PgReserve(m) => m.encode(e),
            Msg::PgScrubRequest(m) => m.encode(e),
            Msg::PgScrubMap(m) => m.encode(e),
            Msg::PgLease(m) => m.encode(e),
            Msg::PgLeaseAck(m) => m.encode(e),
            Msg::MonRaft(m) => m.encode(e),
            Msg::MonForward(m) => m.encode(e),
            Msg::OsdPing(m) => m.encode(e),
            Msg::OsdFailure(m) => m.encode(e),
        }
    }

    /// Decodes a body received with wire type `msg_type`. Byte payloads are slices of
    /// `front`, not copies.
    pub fn decode(msg_type: u16, front: Bytes) -> Result<Msg, MsgError> {
        Self::decode_parts(msg_type, front, Bytes::new())
    }

    /// Decodes a message written by [`Msg::encode_parts`]: payloads are slices of
    /// `front` or of `data`, not copies.
    pub fn decode_parts(msg_type: u16, front: Bytes, data: Bytes) -> Result<Msg, MsgError> {
        use msg_type::*;
        let mut d = Decoder::with_data_segment(front, data);
        let malformed = |source| MsgError::Malformed { msg_type, source };
        let msg = match msg_type {
            MON_GET_MAP => Msg::MonGetMap(MonGetMap::decode(&mut d).map_err(malformed)?),
            OSD_MAP => Msg::OsdMap(OsdMapMsg::decode(&mut d).map_err(malformed)?),
            OSD_BOOT => Msg::OsdBoot(OsdBoot::decode(&mut d).map_err(malformed)?),
            OSD_STATS => Msg::OsdStats(OsdStats::decode(&mut d).map_err(malformed)?),
            MON_COMMAND => Msg::MonCommand(MonCommand::decode(&mut d).map_err(malformed)?),
            MON_COMMAND_REPLY => {
                Msg::MonCommandReply(MonCommandReply::decode(&mut d).map_err(malformed)?)
            }
            OSD_OP => Msg::OsdOp(OsdOp::decode(&mut d).map_err(malformed)?),
            OSD_OP_REPLY => Msg::OsdOpReply(OsdOpReply::decode(&mut d).map_err(malformed)?),
            REP_OP => Msg::RepOp(RepOp::decode(&mut d).map_err(malformed)?),
            REP_OP_REPLY => Msg::RepOpReply(RepOpReply::decode(&mut d).map_err(malformed)?),
            PG_QUERY => Msg::PgQuery(PgQuery::decode(&mut d).map_err(malformed)?),
            PG_NOTIFY => Msg::PgNotify(PgNotify::decode(&mut d).map_err(malformed)?),
            PG_LOG_REQUEST => Msg::PgLogRequest(PgLogRequest::decode(&mut d).map_err(malformed)?),
            PG_LOG_REPLY => Msg::PgLogReply(PgLogReply::decode(&mut d).map_err(malformed)?),
            PG_ACTIVATE => Msg::PgActivate(PgActivate::decode(&mut d).map_err(malformed)?),
            PG_ACTIVATED => Msg::PgActivated(PgActivated::decode(&mut d).map_err(malformed)?),
            PG_PULL => Msg::PgPull(PgPull::decode(&mut d).map_err(malformed)?),
            PG_PUSH => Msg::PgPush(PgPush::decode(&mut d).map_err(malformed)?),
            PG_PUSH_REPLY => Msg::PgPushReply(PgPushReply::decode(&mut d).map_err(malformed)?),
            PG_REMOVE => Msg::PgRemove(PgRemove::decode(&mut d).map_err(malformed)?),
            PG_RESERVE => Msg::PgReserve(PgReserve::decode(&mut d).map_err(malformed)?),
            PG_SCRUB_REQUEST => {
                Msg::PgScrubRequest(PgScrubRequest::decode(&mut d).map_err(malformed)?)
            }
            PG_SCRUB_MAP => Msg::PgScrubMap(PgScrubMap::decode(&mut d).map_err(malformed)?),
            PG_LEASE => Msg::PgLease(PgLease::decode(&mut d).map_err(malformed)?),
            PG_LEASE_ACK => Msg::PgLeaseAck(PgLeaseAck::decode(&mut d).map_err(malformed)?),
            MON_RAFT => Msg::MonRaft(MonRaft::decode(&mut d).map_err(malformed)?),
            MON_FORWARD => Msg::MonForward(MonForward::decode(&mut d).map_err(malformed)?),
            OSD_PING => Msg::OsdPing(OsdPing::decode(&mut d).map_err(malformed)?),
            OSD_FAILURE => Msg::OsdFailure(OsdFailure::decode(&mut d).map_err(malformed)?),
            other => return Err(MsgError::UnknownType(other)),
        };
        d.finish().map_err(malformed)?;
        Ok(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::osd::{LogEntry, LogOp, PgInfo};
    use carmine_store::{CollectionId, Transaction};
    use carmine_types::{EVersion, Epoch, ObjectId, PgId, ReqId};

    fn rep_op(data: Bytes) -> Msg {
        let pgid = PgId::default();
        let mut tx = Transaction::default();
        tx.write(CollectionId::Pg(pgid), ObjectId::head("o"), 0, data);
        Msg::RepOp(RepOp {
            pgid,
            map_epoch: Epoch(3),
            rep_tid: 7,
            entry: LogEntry {
                version: EVersion::default(),
                prior_version: EVersion::default(),
                reqid: ReqId::default(),
                oid: "o".into(),
                op: LogOp::Modify,
                user_version: 1,
            },
            info: PgInfo::default(),
            tx: std::sync::Arc::new(tx),
        })
    }

    #[test]
    fn a_replicated_write_carries_its_payload_by_reference() {
        let payload = Bytes::from(vec![5u8; 4 << 20]);
        let msg = rep_op(payload.clone());
        let (front, data) = msg.encode_parts();
        assert_eq!(data.as_ptr(), payload.as_ptr(), "not copied");
        assert!(
            front.len() < FRONT_BYTES_RESERVED,
            "front {} bytes",
            front.len()
        );
        let decoded = Msg::decode_parts(msg_type::REP_OP, front.clone(), data.clone()).unwrap();
        assert_eq!(decoded, msg);
        // The inline encoding decodes to the same message.
        assert_eq!(
            Msg::decode(msg_type::REP_OP, msg.encode_front()).unwrap(),
            msg
        );
        // A front that refers to a data segment it did not get is refused clearly.
        let error = Msg::decode(msg_type::REP_OP, front).unwrap_err();
        assert!(matches!(error, MsgError::Malformed { .. }), "{error}");
    }

    #[test]
    fn small_payloads_stay_inline() {
        let msg = rep_op(Bytes::from_static(b"small"));
        let (front, data) = msg.encode_parts();
        assert!(data.is_empty());
        assert_eq!(front, msg.encode_front());
    }
}
