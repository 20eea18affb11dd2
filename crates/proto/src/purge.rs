//! Stray purge (Ceph's `MOSDPGRemove`): once a PG is active+clean with its whole up
//! set acting, its primary tells every OSD that answered peering with a copy outside
//! that set (a *stray*) to delete it.
//!
//! The message names the primary's interval: the stray ignores it unless, in its own
//! map (at least as new as the sender's), it is still outside the PG's up and acting
//! sets and its copy was last activated before that interval. A stray that became a
//! member of a newer interval meanwhile thus never deletes a copy that interval uses.

use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
use carmine_types::{Epoch, PgId};

/// Primary → stray: delete your copy of `pgid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgRemove {
    pub pgid: PgId,
    /// The epoch the sending primary's interval started (in which the PG went clean).
    pub interval: Epoch,
    pub map_epoch: Epoch,
}

impl Encode for PgRemove {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(1, 1, |e| {
            self.pgid.encode(e);
            self.interval.encode(e);
            self.map_epoch.encode(e);
        });
    }
}

impl Decode for PgRemove {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("PgRemove", 1, |d, _| {
            Ok(PgRemove {
                pgid: PgId::decode(d)?,
                interval: Epoch::decode(d)?,
                map_epoch: Epoch::decode(d)?,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Msg;

    #[test]
    fn a_removal_round_trips_as_message_type_51() {
        let msg = Msg::PgRemove(PgRemove {
            pgid: PgId::new(3, 7),
            interval: Epoch(12),
            map_epoch: Epoch(15),
        });
        assert_eq!(msg.msg_type(), 51);
        assert_eq!(Msg::decode(51, msg.encode_front()).unwrap(), msg);
    }
}
