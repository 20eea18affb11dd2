//! Read leases between a PG's primary and the other members of its acting set.
//!
//! A primary may serve reads only while every other acting member has promised not to
//! help a newer interval serve IO before the lease ends: otherwise a primary cut off
//! from the monitors and its peers could keep answering reads with data that a new
//! interval elsewhere has already overwritten. The primary renews with [`PgLease`]
//! from its periodic tick; a member that accepts it promises `duration_ns` of its own
//! monotonic clock from the moment it handles the message, and answers with
//! [`PgLeaseAck`] naming the same `seq`. A primary's lease runs from when it *sent*
//! the renewal every member acknowledged, so message delay only shortens it.
//!
//! Clocks of different OSDs are never compared: a promise travels as a duration (the
//! lease length here, the time still left in `PgNotify.prior_lease_remaining_ns`).

use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
use carmine_types::{Epoch, PgId};

/// Primary → acting member: promise me `duration_ns` more of your clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgLease {
    pub pgid: PgId,
    /// The epoch the primary's interval started; a member in another interval refuses.
    pub interval: Epoch,
    pub map_epoch: Epoch,
    /// Renewal number within the interval (grows by one per renewal).
    pub seq: u64,
    /// How long the member promises, in nanoseconds of its own monotonic clock.
    pub duration_ns: u64,
}

/// Acting member → primary: renewal `seq` is promised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgLeaseAck {
    pub pgid: PgId,
    pub interval: Epoch,
    pub map_epoch: Epoch,
    pub seq: u64,
}

impl Encode for PgLease {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(1, 1, |e| {
            self.pgid.encode(e);
            self.interval.encode(e);
            self.map_epoch.encode(e);
            self.seq.encode(e);
            self.duration_ns.encode(e);
        });
    }
}

impl Decode for PgLease {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("PgLease", 1, |d, _| {
            Ok(PgLease {
                pgid: PgId::decode(d)?,
                interval: Epoch::decode(d)?,
                map_epoch: Epoch::decode(d)?,
                seq: u64::decode(d)?,
                duration_ns: u64::decode(d)?,
            })
        })
    }
}

impl Encode for PgLeaseAck {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(1, 1, |e| {
            self.pgid.encode(e);
            self.interval.encode(e);
            self.map_epoch.encode(e);
            self.seq.encode(e);
        });
    }
}

impl Decode for PgLeaseAck {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("PgLeaseAck", 1, |d, _| {
            Ok(PgLeaseAck {
                pgid: PgId::decode(d)?,
                interval: Epoch::decode(d)?,
                map_epoch: Epoch::decode(d)?,
                seq: u64::decode(d)?,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use carmine_types::PoolId;

    #[test]
    fn lease_messages_round_trip() {
        let pgid = PgId {
            pool: PoolId(3),
            seed: 7,
        };
        let lease = PgLease {
            pgid,
            interval: Epoch(12),
            map_epoch: Epoch(14),
            seq: 9,
            duration_ns: 1_500_000_000,
        };
        assert_eq!(PgLease::from_shared(lease.to_bytes()).unwrap(), lease);
        let ack = PgLeaseAck {
            pgid,
            interval: Epoch(12),
            map_epoch: Epoch(14),
            seq: 9,
        };
        assert_eq!(PgLeaseAck::from_shared(ack.to_bytes()).unwrap(), ack);
    }
}
