//! Recovery and backfill reservations (Ceph's `MBackfillReserve` /
//! `MRecoveryReserve`): before a primary pushes a PG's background recovery to its
//! replicas, it holds a slot of its own shard's local reserver and one of each target
//! shard's remote reserver, so that at most `osd_max_backfills` PGs recover into (and
//! out of) one OSD shard at a time.
//!
//! The primary sends `Request` to one target at a time (in OSD id order, which keeps
//! two primaries from each holding the slot the other waits for); the target answers
//! `Grant` once a slot is free, or `Reject` when, in its map, the sender no longer
//! leads the PG in that interval. The primary sends `Release` when the PG has
//! nothing left to push or its interval ends. `(interval, round)` names one
//! reservation round of one primary, so a late answer to an earlier round is never
//! taken for the current one.

use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
use carmine_types::{Epoch, PgId};

/// What a [`PgReserve`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ReserveKind {
    /// Primary → target: queue me for a remote slot.
    Request,
    /// Target → primary: the slot is yours.
    Grant,
    /// Target → primary: refused (the request is stale in the target's map).
    Reject,
    /// Primary → target: done (or the interval ended); free the slot or the place in
    /// the queue.
    Release,
}

impl ReserveKind {
    fn code(self) -> u8 {
        match self {
            ReserveKind::Request => 0,
            ReserveKind::Grant => 1,
            ReserveKind::Reject => 2,
            ReserveKind::Release => 3,
        }
    }

    fn from_code(code: u8) -> Result<Self, DecodeError> {
        Ok(match code {
            0 => ReserveKind::Request,
            1 => ReserveKind::Grant,
            2 => ReserveKind::Reject,
            3 => ReserveKind::Release,
            other => {
                return Err(DecodeError::Invalid {
                    what: "reservation kind",
                    value: u64::from(other),
                })
            }
        })
    }
}

/// A reservation message about one PG (wire type 52).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgReserve {
    pub pgid: PgId,
    /// The epoch the primary's interval started.
    pub interval: Epoch,
    pub map_epoch: Epoch,
    /// The primary's reservation round within the interval.
    pub round: u32,
    pub kind: ReserveKind,
    /// Higher is served first (Ceph's scale: backfill 100, degraded backfill 140,
    /// recovery 180).
    pub priority: u8,
}

impl Encode for PgReserve {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(1, 1, |e| {
            self.pgid.encode(e);
            self.interval.encode(e);
            self.map_epoch.encode(e);
            e.put_u32(self.round);
            e.put_u8(self.kind.code());
            e.put_u8(self.priority);
        });
    }
}

impl Decode for PgReserve {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("PgReserve", 1, |d, _| {
            Ok(PgReserve {
                pgid: PgId::decode(d)?,
                interval: Epoch::decode(d)?,
                map_epoch: Epoch::decode(d)?,
                round: d.get_u32()?,
                kind: ReserveKind::from_code(d.get_u8()?)?,
                priority: d.get_u8()?,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Msg;

    #[test]
    fn every_reservation_kind_round_trips_as_message_type_52() {
        for kind in [
            ReserveKind::Request,
            ReserveKind::Grant,
            ReserveKind::Reject,
            ReserveKind::Release,
        ] {
            let msg = Msg::PgReserve(PgReserve {
                pgid: PgId::new(3, 7),
                interval: Epoch(12),
                map_epoch: Epoch(15),
                round: 4,
                kind,
                priority: 180,
            });
            assert_eq!(msg.msg_type(), 52);
            assert_eq!(Msg::decode(52, msg.encode_front()).unwrap(), msg);
        }
    }

    #[test]
    fn an_unknown_kind_is_refused() {
        let mut front = Msg::PgReserve(PgReserve {
            pgid: PgId::new(1, 1),
            interval: Epoch(1),
            map_epoch: Epoch(1),
            round: 1,
            kind: ReserveKind::Grant,
            priority: 100,
        })
        .encode_front()
        .to_vec();
        let kind_at = front.len() - 2;
        front[kind_at] = 9;
        assert!(Msg::decode(52, front.into()).is_err());
    }
}
