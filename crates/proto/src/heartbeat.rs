//! Failure detection messages: OSD↔OSD heartbeats ([`OsdPing`], Ceph's `MOSDPing`) and
//! an OSD's report to the monitor that a peer went silent ([`OsdFailure`], Ceph's
//! `MOSDFailure`).
//!
//! A ping carries the sender's timestamp, opaque to the peer, which echoes it in its
//! reply: the pinger learns which of its pings was answered without trusting the
//! peer's clock.

use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
use carmine_types::{Epoch, OsdId};

/// What an [`OsdPing`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PingOp {
    /// "Are you there?" — answered with a [`PingOp::Reply`] echoing `stamp`.
    Ping,
    /// The answer to a ping.
    Reply,
}

/// A heartbeat between two OSDs; the sender is the session's peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OsdPing {
    pub op: PingOp,
    /// The sender's map epoch.
    pub epoch: Epoch,
    /// The pinger's send time in its own units (echoed unchanged in the reply).
    pub stamp: u64,
}

/// An OSD tells the monitor that `target` has not answered its heartbeats for
/// `silent_for_ms` (or, with `alive`, withdraws that report: it hears `target` again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OsdFailure {
    pub target: OsdId,
    pub reporter: OsdId,
    /// The reporter's map epoch when it judged `target`.
    pub epoch: Epoch,
    pub silent_for_ms: u64,
    /// Ceph's `FLAG_ALIVE`: a cancellation, not a report.
    pub alive: bool,
}

impl Encode for OsdPing {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(1, 1, |e| {
            e.put_u8(match self.op {
                PingOp::Ping => 1,
                PingOp::Reply => 2,
            });
            self.epoch.encode(e);
            e.put_u64(self.stamp);
        });
    }
}

impl Decode for OsdPing {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("OsdPing", 1, |d, _| {
            let op = match d.get_u8()? {
                1 => PingOp::Ping,
                2 => PingOp::Reply,
                other => {
                    return Err(DecodeError::Invalid {
                        what: "OsdPing op",
                        value: u64::from(other),
                    })
                }
            };
            Ok(OsdPing {
                op,
                epoch: Epoch::decode(d)?,
                stamp: d.get_u64()?,
            })
        })
    }
}

impl Encode for OsdFailure {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(1, 1, |e| {
            self.target.encode(e);
            self.reporter.encode(e);
            self.epoch.encode(e);
            e.put_u64(self.silent_for_ms);
            self.alive.encode(e);
        });
    }
}

impl Decode for OsdFailure {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("OsdFailure", 1, |d, _| {
            Ok(OsdFailure {
                target: OsdId::decode(d)?,
                reporter: OsdId::decode(d)?,
                epoch: Epoch::decode(d)?,
                silent_for_ms: d.get_u64()?,
                alive: bool::decode(d)?,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Msg;
    use bytes::Bytes;

    #[test]
    fn heartbeat_messages_round_trip() {
        let ping = Msg::OsdPing(OsdPing {
            op: PingOp::Ping,
            epoch: Epoch(7),
            stamp: 123_456_789,
        });
        let reply = Msg::OsdPing(OsdPing {
            op: PingOp::Reply,
            epoch: Epoch(9),
            stamp: u64::MAX,
        });
        let failure = Msg::OsdFailure(OsdFailure {
            target: OsdId(2),
            reporter: OsdId(0),
            epoch: Epoch(12),
            silent_for_ms: 3_250,
            alive: false,
        });
        let cancel = Msg::OsdFailure(OsdFailure {
            alive: true,
            ..match &failure {
                Msg::OsdFailure(f) => f.clone(),
                _ => unreachable!(),
            }
        });
        for msg in [ping, reply, failure, cancel] {
            let decoded = Msg::decode(msg.msg_type(), msg.encode_front()).unwrap();
            assert_eq!(decoded, msg);
        }
    }

    #[test]
    fn a_bad_ping_op_is_an_error_not_a_panic() {
        let msg = Msg::OsdPing(OsdPing {
            op: PingOp::Ping,
            epoch: Epoch(1),
            stamp: 5,
        });
        let mut bytes = msg.encode_front().to_vec();
        // The op byte follows the 6-byte envelope header.
        bytes[6] = 9;
        let error = Msg::decode(msg.msg_type(), Bytes::from(bytes)).unwrap_err();
        assert!(error.to_string().contains("OsdPing op"), "{error}");
    }

    #[test]
    fn a_newer_failure_report_with_appended_fields_still_decodes() {
        let failure = OsdFailure {
            target: OsdId(1),
            reporter: OsdId(3),
            epoch: Epoch(4),
            silent_for_ms: 10,
            alive: true,
        };
        let mut bytes = failure.to_bytes().to_vec();
        // A version 2 writer that appended 4 bytes, still compatible with version 1.
        bytes[0] = 2;
        bytes.extend_from_slice(&[1, 2, 3, 4]);
        let length = u32::from_le_bytes(bytes[2..6].try_into().unwrap()) + 4;
        bytes[2..6].copy_from_slice(&length.to_le_bytes());
        assert_eq!(OsdFailure::from_bytes(&bytes).unwrap(), failure);
    }
}
