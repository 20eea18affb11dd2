//! Messages: what the layers above exchange through a session.
//!
//! A message travels in one `Message` frame with three segments:
//!
//! ```text
//! segment 0  header, a versioned envelope (v1, compat 1):
//!              u8 version=1 | u8 compat=1 | u32 body_length=31 |
//!              u16 msg_type | u8 priority | u64 seq | u64 tid | u32 sender_epoch |
//!              u64 ack_seq
//! segment 1  front: the encoded message body (opaque to the messenger)
//! segment 2  data: bulk payload (opaque, may be empty)
//! ```
//!
//! `ack_seq` is not part of [`MessageHeader`]: the session writes there the highest
//! sequence number it has received, so acknowledgements ride on replies for free.

use bytes::Bytes;
use carmine_types::encoding::{DecodeError, Decoder, Encoder};

/// Priority of ordinary messages.
pub const PRIORITY_DEFAULT: u8 = 127;
/// Current version of the header envelope.
const HEADER_VERSION: u8 = 1;
/// Oldest header version a reader must understand to read ours.
const HEADER_COMPAT_VERSION: u8 = 1;
/// Encoded size of the v1 header, envelope included.
pub const HEADER_BYTES: usize = ENVELOPE_BYTES + HEADER_BODY_BYTES;
/// Bytes of a versioned envelope before its body.
const ENVELOPE_BYTES: usize = 6;
/// Bytes of the v1 header body.
const HEADER_BODY_BYTES: usize = 2 + 1 + 8 + 8 + 4 + 8;

/// Routing and ordering information of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MessageHeader {
    /// What the front segment contains; defined by the layers above.
    pub msg_type: u16,
    /// Higher is more urgent. The session keeps FIFO order; drivers may use it.
    pub priority: u8,
    /// Per-session sequence number, assigned by the session (1, 2, ...).
    pub seq: u64,
    /// Transaction id: ties a reply to its request.
    pub tid: u64,
    /// The sender's cluster-map epoch when it sent the message.
    pub sender_epoch: u32,
}

/// A message: header, front (encoded body) and data (bulk payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub header: MessageHeader,
    pub front: Bytes,
    pub data: Bytes,
}

impl Message {
    /// A message with default priority and no data; the session assigns `seq`.
    pub fn new(msg_type: u16, tid: u64, sender_epoch: u32, front: Bytes) -> Self {
        Self {
            header: MessageHeader {
                msg_type,
                priority: PRIORITY_DEFAULT,
                seq: 0,
                tid,
                sender_epoch,
            },
            front,
            data: Bytes::new(),
        }
    }

    /// Attaches a bulk payload.
    pub fn with_data(mut self, data: Bytes) -> Self {
        self.data = data;
        self
    }

    /// Payload bytes (front and data), the unit send queues are bounded in.
    pub fn payload_bytes(&self) -> usize {
        self.front.len() + self.data.len()
    }
}

/// Writes the header segment.
pub fn encode_header(header: &MessageHeader, ack_seq: u64, encoder: &mut Encoder) {
    encoder.versioned(HEADER_VERSION, HEADER_COMPAT_VERSION, |e| {
        e.put_u16(header.msg_type);
        e.put_u8(header.priority);
        e.put_u64(header.seq);
        e.put_u64(header.tid);
        e.put_u32(header.sender_epoch);
        e.put_u64(ack_seq);
    });
}

/// Encodes the header segment into a fresh buffer.
pub fn header_bytes(header: &MessageHeader, ack_seq: u64) -> Bytes {
    Bytes::copy_from_slice(&header_array(header, ack_seq))
}

/// The header segment as [`encode_header`] writes it, into a fixed array: the send path
/// encodes every message's header this way, without an allocation.
pub fn header_array(header: &MessageHeader, ack_seq: u64) -> [u8; HEADER_BYTES] {
    let mut out = [0u8; HEADER_BYTES];
    out[0] = HEADER_VERSION;
    out[1] = HEADER_COMPAT_VERSION;
    out[2..6].copy_from_slice(&(HEADER_BODY_BYTES as u32).to_le_bytes());
    out[6..8].copy_from_slice(&header.msg_type.to_le_bytes());
    out[8] = header.priority;
    out[9..17].copy_from_slice(&header.seq.to_le_bytes());
    out[17..25].copy_from_slice(&header.tid.to_le_bytes());
    out[25..29].copy_from_slice(&header.sender_epoch.to_le_bytes());
    out[29..37].copy_from_slice(&ack_seq.to_le_bytes());
    out
}

/// Reads the header segment; returns the header and the piggybacked `ack_seq`.
pub fn decode_header(segment: Bytes) -> Result<(MessageHeader, u64), DecodeError> {
    if let Some(decoded) = decode_header_in_place(&segment) {
        return Ok(decoded);
    }
    let mut decoder = Decoder::new(segment);
    let value = decoder.versioned("message header", HEADER_VERSION, |d, _version| {
        let header = MessageHeader {
            msg_type: d.get_u16()?,
            priority: d.get_u8()?,
            seq: d.get_u64()?,
            tid: d.get_u64()?,
            sender_epoch: d.get_u32()?,
        };
        Ok((header, d.get_u64()?))
    })?;
    decoder.finish()?;
    Ok(value)
}

/// The common case, a v1 header exactly as this build writes it, read without the
/// general envelope decoder (and without a shared slice of the receive buffer);
/// `None` for anything else (newer versions, bad lengths), which [`decode_header`]
/// then handles or refuses.
pub(crate) fn decode_header_in_place(raw: &[u8]) -> Option<(MessageHeader, u64)> {
    let raw: &[u8; HEADER_BYTES] = raw.try_into().ok()?;
    let body_length = u32::from_le_bytes([raw[2], raw[3], raw[4], raw[5]]);
    if raw[0] != HEADER_VERSION || raw[1] != HEADER_COMPAT_VERSION {
        return None;
    }
    if body_length as usize != HEADER_BODY_BYTES {
        return None;
    }
    let u64_at = |at: usize| u64::from_le_bytes(raw[at..at + 8].try_into().expect("8 bytes"));
    let header = MessageHeader {
        msg_type: u16::from_le_bytes([raw[6], raw[7]]),
        priority: raw[8],
        seq: u64_at(9),
        tid: u64_at(17),
        sender_epoch: u32::from_le_bytes([raw[25], raw[26], raw[27], raw[28]]),
    };
    Some((header, u64_at(29)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn headers_round_trip(msg_type in any::<u16>(), priority in any::<u8>(), seq in any::<u64>(),
                              tid in any::<u64>(), sender_epoch in any::<u32>(), ack in any::<u64>()) {
            let header = MessageHeader { msg_type, priority, seq, tid, sender_epoch };
            let bytes = header_bytes(&header, ack);
            prop_assert_eq!(bytes.len(), HEADER_BYTES);
            prop_assert_eq!(decode_header(bytes).unwrap(), (header, ack));
        }

        #[test]
        fn fixed_array_encoding_matches_the_envelope_encoder(msg_type in any::<u16>(), priority in any::<u8>(),
                seq in any::<u64>(), tid in any::<u64>(), sender_epoch in any::<u32>(), ack in any::<u64>()) {
            let header = MessageHeader { msg_type, priority, seq, tid, sender_epoch };
            let mut encoder = Encoder::new();
            encode_header(&header, ack, &mut encoder);
            prop_assert_eq!(&encoder.into_vec()[..], &header_array(&header, ack)[..]);
        }

        #[test]
        fn garbage_headers_never_panic(raw in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_header(Bytes::from(raw));
        }
    }

    #[test]
    fn newer_header_versions_with_appended_fields_decode() {
        let mut encoder = Encoder::new();
        encoder.versioned(2, 1, |e| {
            e.put_u16(9);
            e.put_u8(1);
            e.put_u64(2);
            e.put_u64(3);
            e.put_u32(4);
            e.put_u64(5);
            e.put_u64(0xdead); // a field from the future
        });
        let (header, ack) = decode_header(encoder.into_bytes()).unwrap();
        assert_eq!((header.msg_type, header.seq, header.tid, ack), (9, 2, 3, 5));
    }
}
