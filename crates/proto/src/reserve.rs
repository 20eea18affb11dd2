//! Recovery and backfill reservations (Ceph's `MBackfillReserve` /
//! `MRecoveryReserve`): before a primary pushes a PG's background recovery to its
//! replicas, it holds a slot of its own shard's local reserver and one of each target
//! shard's remote reserver, so that at most `osd_max_backfills` PGs recover into (and
//! out of) one OSD shard at a time.
//!
//! The primary sends `Request` to one target at a time (in OSD id order, which keeps
//! two primaries from each holding the slot the other waits for); the target answers
//! `Queued` when no slot is free yet, `Grant` once one is, or `Reject`: with
//! [`RejectReason::Stale`] when, in its map, the sender no longer leads the PG in
//! that interval, with [`RejectReason::TooFull`] when it has no room for what the
//! request would bring (a backfill to a backfillfull OSD, anything to a full one). The
//! primary sends `Release` when the PG has nothing left to push or its interval ends,
//! and sends it again until the target answers `Released`. `(interval, round)` names
//! one reservation round of one primary, so a late answer to an earlier round is
//! never taken for the current one.
//!
//! A target may take a granted slot back for a request of higher priority: it sends
//! `Revoke`, and the primary gives up its round and asks again.
//!
//! Encoding v2 appended [`Purpose`] and [`RejectReason`] (a v1 message decodes as a
//! backfill, and a v1 `Reject` as stale) and the kinds `Queued`, `Released` and
//! `Revoke`, which a v1 decoder refuses as an unknown kind.

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
    /// Target → primary: no slot is free yet; the request waits in the queue (v2).
    Queued,
    /// Target → primary: the `Release` of this round arrived (v2).
    Released,
    /// Target → primary: a higher-priority request took the slot granted to this
    /// round (Ceph's `REVOKE`); ask again (v2).
    Revoke,
}

impl ReserveKind {
    fn code(self) -> u8 {
        match self {
            ReserveKind::Request => 0,
            ReserveKind::Grant => 1,
            ReserveKind::Reject => 2,
            ReserveKind::Release => 3,
            ReserveKind::Queued => 4,
            ReserveKind::Released => 5,
            ReserveKind::Revoke => 6,
        }
    }

    fn from_code(code: u8) -> Result<Self, DecodeError> {
        Ok(match code {
            0 => ReserveKind::Request,
            1 => ReserveKind::Grant,
            2 => ReserveKind::Reject,
            3 => ReserveKind::Release,
            4 => ReserveKind::Queued,
            5 => ReserveKind::Released,
            6 => ReserveKind::Revoke,
            other => {
                return Err(DecodeError::Invalid {
                    what: "reservation kind",
                    value: u64::from(other),
                })
            }
        })
    }
}

/// What a requested slot is for: the target refuses a backfill sooner than a
/// recovery when it runs short of space (Ceph refuses backfill at backfillfull and
/// log-based recovery only at full).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Purpose {
    /// Log-based recovery of the objects the target's log says it lacks.
    Recovery,
    /// Backfill: the target's copy is rebuilt object by object.
    Backfill,
}

impl Purpose {
    fn code(self) -> u8 {
        match self {
            Purpose::Recovery => 0,
            Purpose::Backfill => 1,
        }
    }

    fn from_code(code: u8) -> Result<Self, DecodeError> {
        match code {
            0 => Ok(Purpose::Recovery),
            1 => Ok(Purpose::Backfill),
            other => Err(DecodeError::Invalid {
                what: "reservation purpose",
                value: u64::from(other),
            }),
        }
    }
}

/// Why a target answered `Reject`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RejectReason {
    /// In the target's map the sender no longer leads the PG in that interval.
    Stale,
    /// The target has no room (Ceph's `REJECT_TOOFULL`): backfillfull or full in the
    /// map or by its own store usage, for a backfill; full, for a recovery.
    TooFull,
}

impl RejectReason {
    fn code(self) -> u8 {
        match self {
            RejectReason::Stale => 0,
            RejectReason::TooFull => 1,
        }
    }

    fn from_code(code: u8) -> Result<Self, DecodeError> {
        match code {
            0 => Ok(RejectReason::Stale),
            1 => Ok(RejectReason::TooFull),
            other => Err(DecodeError::Invalid {
                what: "reservation reject reason",
                value: u64::from(other),
            }),
        }
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
    /// What the slot is for (v2; a v1 message decodes as [`Purpose::Backfill`]).
    pub purpose: Purpose,
    /// Why a `Reject` refused; `Stale` in every other kind (v2; a v1 message decodes
    /// as [`RejectReason::Stale`]).
    pub reason: RejectReason,
}

impl Encode for PgReserve {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(2, 1, |e| {
            self.pgid.encode(e);
            self.interval.encode(e);
            self.map_epoch.encode(e);
            e.put_u32(self.round);
            e.put_u8(self.kind.code());
            e.put_u8(self.priority);
            // v2
            e.put_u8(self.purpose.code());
            e.put_u8(self.reason.code());
        });
    }
}

impl Decode for PgReserve {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("PgReserve", 2, |d, version| {
            let mut reserve = PgReserve {
                pgid: PgId::decode(d)?,
                interval: Epoch::decode(d)?,
                map_epoch: Epoch::decode(d)?,
                round: d.get_u32()?,
                kind: ReserveKind::from_code(d.get_u8()?)?,
                priority: d.get_u8()?,
                purpose: Purpose::Backfill,
                reason: RejectReason::Stale,
            };
            if version >= 2 {
                reserve.purpose = Purpose::from_code(d.get_u8()?)?;
                reserve.reason = RejectReason::from_code(d.get_u8()?)?;
            }
            Ok(reserve)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Msg;

    fn reserve(kind: ReserveKind) -> PgReserve {
        PgReserve {
            pgid: PgId::new(3, 7),
            interval: Epoch(12),
            map_epoch: Epoch(15),
            round: 4,
            kind,
            priority: 180,
            purpose: Purpose::Recovery,
            reason: RejectReason::Stale,
        }
    }

    #[test]
    fn every_reservation_kind_round_trips_as_message_type_52() {
        for kind in [
            ReserveKind::Request,
            ReserveKind::Grant,
            ReserveKind::Reject,
            ReserveKind::Release,
            ReserveKind::Queued,
            ReserveKind::Released,
            ReserveKind::Revoke,
        ] {
            for purpose in [Purpose::Recovery, Purpose::Backfill] {
                for reason in [RejectReason::Stale, RejectReason::TooFull] {
                    let msg = Msg::PgReserve(PgReserve {
                        purpose,
                        reason,
                        ..reserve(kind)
                    });
                    assert_eq!(msg.msg_type(), 52);
                    assert_eq!(Msg::decode(52, msg.encode_front()).unwrap(), msg);
                }
            }
        }
    }

    /// A v1 message (as the first encoder wrote it: no purpose, no reason) decodes as
    /// a backfill and a stale rejection.
    #[test]
    fn a_version_1_message_decodes_with_the_v1_meaning() {
        let mut e = Encoder::new();
        e.versioned(1, 1, |e| {
            PgId::new(3, 7).encode(e);
            Epoch(12).encode(e);
            Epoch(15).encode(e);
            e.put_u32(4);
            e.put_u8(2); // Reject
            e.put_u8(100);
        });
        let decoded = Msg::decode(52, e.into_bytes()).unwrap();
        let expected = PgReserve {
            priority: 100,
            purpose: Purpose::Backfill,
            reason: RejectReason::Stale,
            ..reserve(ReserveKind::Reject)
        };
        assert_eq!(decoded, Msg::PgReserve(expected));
    }

    #[test]
    fn an_unknown_kind_purpose_or_reason_is_refused() {
        let front = Msg::PgReserve(reserve(ReserveKind::Grant))
            .encode_front()
            .to_vec();
        // The last four bytes: kind, priority, purpose, reason.
        for (from_end, bad) in [(4, 9), (2, 2), (1, 7)] {
            let mut front = front.clone();
            let at = front.len() - from_end;
            front[at] = bad;
            assert!(Msg::decode(52, front.into()).is_err(), "byte -{from_end}");
        }
    }

    #[test]
    fn a_truncated_message_is_refused() {
        let front = Msg::PgReserve(reserve(ReserveKind::Request))
            .encode_front()
            .to_vec();
        for length in 0..front.len() {
            let cut = front[..length].to_vec();
            assert!(Msg::decode(52, cut.into()).is_err(), "{length} bytes");
        }
    }
}
