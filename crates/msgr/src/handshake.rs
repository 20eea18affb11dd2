//! The banner and the handshake and control frames' bodies.
//!
//! Both sides write the banner first, before any frame:
//!
//! ```text
//! offset  size  field
//! 0       8     magic "carmine\n"
//! 8       1     envelope version (1)
//! 9       1     envelope compat version (1)
//! 10      4     body_length (u32, at most BANNER_BODY_BYTES_MAX)
//! 14      2     protocol_version (u16)
//! 16      8     supported_features (u64 bit set)
//! 24      8     required_features (u64 bit set)
//! ```
//!
//! Then frames (see [`crate::frame`]). Each handshake and control frame carries one
//! segment holding one versioned envelope (`u8 version | u8 compat | u32 length | body`,
//! see `carmine_types::encoding`); the bodies, version 1:
//!
//! ```text
//! Hello           EntityName name (u8 kind, u64 id) | u16 target_shard |
//!                 Option<SocketAddr> connector_addr (u8 0/1, then u8 family 4/6, ip, u16 port)
//! HelloReply      EntityName name | u16 shard | Option<SocketAddr> connector_addr_seen
//! AuthRequest     u8 method (0 = none) | blob payload (u32 length + bytes)
//! AuthDone        u8 method | blob payload
//! SessionRequest  u8 policy (0 lossy, 1 lossless) | u64 client_cookie |
//!                 u64 server_cookie (0: none known) | u64 in_seq
//! SessionReady    u64 server_cookie | u64 in_seq
//! Ack             u64 seq (highest sequence number received)
//! Keepalive       u64 stamp (opaque, echoed by KeepaliveAck)
//! KeepaliveAck    u64 stamp
//! Close           string reason (u32 length + UTF-8)
//! ```
//!
//! The connector sends the banner, `Hello`, `AuthRequest` and `SessionRequest` at once;
//! the acceptor answers with its banner, `HelloReply`, `AuthDone` and `SessionReady`.
//! A session is therefore established after one round trip.

use crate::config::{AuthMethod, Policy};
use bytes::Bytes;
use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
use carmine_types::{EntityName, ShardIndex};
use std::net::SocketAddr;

/// The banner's first bytes.
pub const BANNER_MAGIC: &[u8; 8] = b"carmine\n";
/// The messenger protocol version this build speaks.
pub const PROTOCOL_VERSION: u16 = 1;
/// Feature bit: lossless sessions resume after reconnect (cookies, replay).
pub const FEATURE_LOSSLESS_RESUME: u64 = 1 << 0;
/// Feature bit: acks ride in message headers.
pub const FEATURE_PIGGYBACKED_ACKS: u64 = 1 << 1;
/// Features this build supports.
pub const FEATURES_SUPPORTED: u64 = FEATURE_LOSSLESS_RESUME | FEATURE_PIGGYBACKED_ACKS;
/// Features this build requires from its peer.
pub const FEATURES_REQUIRED: u64 = FEATURE_PIGGYBACKED_ACKS;
/// Largest banner body accepted (guards the buffer before the first frame).
pub const BANNER_BODY_BYTES_MAX: usize = 256;
/// Bytes of the banner before its body.
pub const BANNER_PREFIX_BYTES: usize = 8 + 6;
/// Longest auth payload accepted.
pub const AUTH_PAYLOAD_BYTES_MAX: usize = 64 * 1024;
/// Longest close reason accepted.
pub const CLOSE_REASON_BYTES_MAX: usize = 1024;

const _: () = assert!(FEATURES_REQUIRED & !FEATURES_SUPPORTED == 0);

/// The banner each side sends first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Banner {
    pub protocol_version: u16,
    pub supported_features: u64,
    pub required_features: u64,
}

impl Banner {
    /// This build's banner.
    pub fn ours() -> Self {
        Self {
            protocol_version: PROTOCOL_VERSION,
            supported_features: FEATURES_SUPPORTED,
            required_features: FEATURES_REQUIRED,
        }
    }

    /// Magic and envelope, ready to write.
    pub fn to_wire(&self) -> Bytes {
        let mut encoder = Encoder::with_capacity(BANNER_PREFIX_BYTES + 18);
        encoder.put_raw(BANNER_MAGIC);
        encoder.versioned(1, 1, |e| {
            e.put_u16(self.protocol_version);
            e.put_u64(self.supported_features);
            e.put_u64(self.required_features);
        });
        encoder.into_bytes()
    }

    /// Parses a banner from the start of `buffer`. Returns `Ok(None)` if more bytes
    /// are needed, otherwise the banner and how many bytes it took.
    pub fn parse(buffer: &[u8]) -> Result<Option<(Banner, usize)>, BannerError> {
        let magic_bytes = buffer.len().min(BANNER_MAGIC.len());
        if buffer[..magic_bytes] != BANNER_MAGIC[..magic_bytes] {
            return Err(BannerError::BadMagic);
        }
        if buffer.len() < BANNER_PREFIX_BYTES {
            return Ok(None);
        }
        let body_length = u32::from_le_bytes([buffer[10], buffer[11], buffer[12], buffer[13]]);
        let body_length = body_length as usize;
        if body_length > BANNER_BODY_BYTES_MAX {
            return Err(BannerError::TooLong { body_length });
        }
        let total = BANNER_PREFIX_BYTES + body_length;
        if buffer.len() < total {
            return Ok(None);
        }
        let mut decoder = Decoder::from_slice(&buffer[BANNER_MAGIC.len()..total]);
        let banner = decoder.versioned("banner", 1, |d, _| {
            Ok(Banner {
                protocol_version: d.get_u16()?,
                supported_features: d.get_u64()?,
                required_features: d.get_u64()?,
            })
        })?;
        Ok(Some((banner, total)))
    }

    /// Checks that we can talk to a peer that sent `peer`.
    pub fn check_peer(&self, peer: &Banner) -> Result<(), BannerError> {
        if peer.protocol_version > self.protocol_version {
            return Err(BannerError::ProtocolTooNew {
                peer: peer.protocol_version,
                ours: self.protocol_version,
            });
        }
        let we_lack = peer.required_features & !self.supported_features;
        if we_lack != 0 {
            return Err(BannerError::MissingFeatures { missing: we_lack });
        }
        let peer_lacks = self.required_features & !peer.supported_features;
        if peer_lacks != 0 {
            return Err(BannerError::PeerLacksFeatures {
                missing: peer_lacks,
            });
        }
        Ok(())
    }
}

/// Why a peer's banner was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BannerError {
    #[error("peer is not a carmine messenger (bad banner magic)")]
    BadMagic,
    #[error("banner body of {body_length} bytes exceeds {BANNER_BODY_BYTES_MAX}")]
    TooLong { body_length: usize },
    #[error("malformed banner: {0}")]
    Decode(#[from] DecodeError),
    #[error("peer speaks messenger protocol v{peer}, newer than our v{ours}; upgrade this node")]
    ProtocolTooNew { peer: u16, ours: u16 },
    #[error("peer requires features {missing:#x} that this build lacks")]
    MissingFeatures { missing: u64 },
    #[error("peer lacks features {missing:#x} that this build requires")]
    PeerLacksFeatures { missing: u64 },
}

macro_rules! versioned_body {
    ($name:ident, $what:literal, |$self_:ident, $e:ident| $enc:block, |$d:ident| $dec:block) => {
        impl Encode for $name {
            fn encode(&$self_, encoder: &mut Encoder) {
                encoder.versioned(1, 1, |$e| $enc);
            }
        }
        impl Decode for $name {
            fn decode(decoder: &mut Decoder) -> Result<Self, DecodeError> {
                decoder.versioned($what, 1, |$d, _version| $dec)
            }
        }
    };
}

/// Connector → acceptor: who I am and which shard I want.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub name: EntityName,
    pub target_shard: ShardIndex,
    pub connector_addr: Option<SocketAddr>,
}

versioned_body!(
    Hello,
    "hello",
    |self, e| {
        self.name.encode(e);
        self.target_shard.encode(e);
        self.connector_addr.encode(e);
    },
    |d| {
        Ok(Hello {
            name: EntityName::decode(d)?,
            target_shard: ShardIndex::decode(d)?,
            connector_addr: Option::<SocketAddr>::decode(d)?,
        })
    }
);

/// Acceptor → connector: who I am, the shard serving you, your address as I see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloReply {
    pub name: EntityName,
    pub shard: ShardIndex,
    pub connector_addr_seen: Option<SocketAddr>,
}

versioned_body!(
    HelloReply,
    "hello reply",
    |self, e| {
        self.name.encode(e);
        self.shard.encode(e);
        self.connector_addr_seen.encode(e);
    },
    |d| {
        Ok(HelloReply {
            name: EntityName::decode(d)?,
            shard: ShardIndex::decode(d)?,
            connector_addr_seen: Option::<SocketAddr>::decode(d)?,
        })
    }
);

/// An authentication step (request or done), method-specific payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthStep {
    pub method: AuthMethod,
    pub payload: Bytes,
}

versioned_body!(
    AuthStep,
    "auth",
    |self, e| {
        e.put_u8(self.method.to_u8());
        e.put_blob(&self.payload);
    },
    |d| {
        let raw = d.get_u8()?;
        let method = AuthMethod::from_u8(raw).ok_or(DecodeError::Invalid {
            what: "auth method",
            value: u64::from(raw),
        })?;
        Ok(AuthStep {
            method,
            payload: d.get_blob("auth payload", AUTH_PAYLOAD_BYTES_MAX)?,
        })
    }
);

/// Connector → acceptor: start a new session or resume one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionRequest {
    pub policy: Policy,
    pub client_cookie: u64,
    /// The acceptor's cookie from the last `SessionReady`, 0 if none.
    pub server_cookie: u64,
    /// Highest sequence number the connector has received.
    pub in_seq: u64,
}

versioned_body!(
    SessionRequest,
    "session request",
    |self, e| {
        e.put_u8(match self.policy {
            Policy::Lossy => 0,
            Policy::Lossless => 1,
        });
        e.put_u64(self.client_cookie);
        e.put_u64(self.server_cookie);
        e.put_u64(self.in_seq);
    },
    |d| {
        let policy = match d.get_u8()? {
            0 => Policy::Lossy,
            1 => Policy::Lossless,
            other => {
                return Err(DecodeError::Invalid {
                    what: "session policy",
                    value: u64::from(other),
                })
            }
        };
        Ok(SessionRequest {
            policy,
            client_cookie: d.get_u64()?,
            server_cookie: d.get_u64()?,
            in_seq: d.get_u64()?,
        })
    }
);

/// Acceptor → connector: the session is established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionReady {
    pub server_cookie: u64,
    /// Highest sequence number the acceptor has received in this session.
    pub in_seq: u64,
}

versioned_body!(
    SessionReady,
    "session ready",
    |self, e| {
        e.put_u64(self.server_cookie);
        e.put_u64(self.in_seq);
    },
    |d| {
        Ok(SessionReady {
            server_cookie: d.get_u64()?,
            in_seq: d.get_u64()?,
        })
    }
);

/// A bare u64 body: `Ack`, `Keepalive`, `KeepaliveAck`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counter(pub u64);

versioned_body!(
    Counter,
    "counter",
    |self, e| {
        e.put_u64(self.0);
    },
    |d| { Ok(Counter(d.get_u64()?)) }
);

/// Why the sender closes the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseReason(pub String);

versioned_body!(
    CloseReason,
    "close",
    |self, e| {
        e.put_blob(self.0.as_bytes());
    },
    |d| {
        Ok(CloseReason(
            d.get_string("close reason", CLOSE_REASON_BYTES_MAX)?,
        ))
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn banner_round_trips_in_pieces() {
        let wire = Banner::ours().to_wire();
        for cut in 0..wire.len() {
            assert_eq!(Banner::parse(&wire[..cut]).unwrap(), None, "cut {cut}");
        }
        assert_eq!(
            Banner::parse(&wire).unwrap(),
            Some((Banner::ours(), wire.len()))
        );
    }

    #[test]
    fn newer_protocol_and_unknown_required_features_are_refused() {
        let ours = Banner::ours();
        let newer = Banner {
            protocol_version: PROTOCOL_VERSION + 1,
            ..ours
        };
        let error = ours.check_peer(&newer).unwrap_err();
        assert!(error.to_string().contains("newer"), "{error}");
        let demanding = Banner {
            required_features: ours.required_features | 1 << 40,
            supported_features: ours.supported_features | 1 << 40,
            ..ours
        };
        assert_eq!(
            ours.check_peer(&demanding),
            Err(BannerError::MissingFeatures { missing: 1 << 40 })
        );
        assert!(ours.check_peer(&ours).is_ok());
    }

    proptest! {
        #[test]
        fn bodies_round_trip(id in any::<u64>(), shard in any::<u16>(), cookie in any::<u64>(), seq in any::<u64>(),
                             port in any::<u16>(), reason in ".{0,40}", payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            let hello = Hello { name: EntityName::client(id), target_shard: ShardIndex(shard), connector_addr: Some(addr) };
            prop_assert_eq!(Hello::from_bytes(&hello.to_bytes()).unwrap(), hello);
            let reply = HelloReply { name: EntityName::mon(id), shard: ShardIndex(shard), connector_addr_seen: None };
            prop_assert_eq!(HelloReply::from_bytes(&reply.to_bytes()).unwrap(), reply);
            let auth = AuthStep { method: AuthMethod::None, payload: Bytes::from(payload) };
            prop_assert_eq!(AuthStep::from_bytes(&auth.to_bytes()).unwrap(), auth);
            let request = SessionRequest { policy: Policy::Lossless, client_cookie: cookie, server_cookie: id, in_seq: seq };
            prop_assert_eq!(SessionRequest::from_bytes(&request.to_bytes()).unwrap(), request);
            let ready = SessionReady { server_cookie: cookie, in_seq: seq };
            prop_assert_eq!(SessionReady::from_bytes(&ready.to_bytes()).unwrap(), ready);
            prop_assert_eq!(Counter::from_bytes(&Counter(seq).to_bytes()).unwrap(), Counter(seq));
            let close = CloseReason(reason);
            prop_assert_eq!(CloseReason::from_bytes(&close.to_bytes()).unwrap(), close);
        }

        #[test]
        fn garbage_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = Banner::parse(&raw);
            let _ = Hello::from_bytes(&raw);
            let _ = HelloReply::from_bytes(&raw);
            let _ = AuthStep::from_bytes(&raw);
            let _ = SessionRequest::from_bytes(&raw);
            let _ = SessionReady::from_bytes(&raw);
            let _ = CloseReason::from_bytes(&raw);
        }
    }
}
