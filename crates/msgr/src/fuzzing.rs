//! Harnesses that feed arbitrary bytes to the frame decoder and to a session, shared
//! by the `cargo fuzz` targets in `crates/msgr/fuzz` and by the randomized tests that
//! run under `cargo test` (`fuzzing::tests`).
//!
//! Each harness takes one byte string, interprets it as a recipe (options, then bytes
//! to feed, cut into chunks), and asserts what must hold for any input: no panic, an
//! error closes (or, lossless, disconnects) the session and stays sticky, and the
//! receive buffer never holds much more than what was fed or the frame limit allows.
//! A random byte almost never passes a crc, so both harnesses can also wrap the input
//! into frames with valid crcs, and the session harness can complete a real handshake
//! first, to reach the decoders behind the checksums.

use crate::config::{Policy, SessionConfig};
use crate::frame::{Frame, FrameDecoder, FrameTag, FRAME_OVERHEAD_BYTES_MAX, SEGMENTS_MAX};
use crate::handshake::{
    AuthStep, Banner, CloseReason, Counter, Hello, HelloReply, SessionReady, SessionRequest,
};
use crate::message::{header_bytes, Message, MessageHeader};
use crate::session::{Session, SessionEvent, HANDSHAKE_FRAME_BYTES_MAX};
use crate::AuthMethod;
use bytes::Bytes;
use carmine_types::encoding::Encode;
use carmine_types::limits::MESSAGE_BYTES_MAX;
use carmine_types::{EntityName, OsdId, ShardIndex};
use std::time::{Duration, Instant};

/// Slack allowed in the receive-buffer bound (the allocator rounds up; a read may
/// reserve a little ahead).
const BUFFER_SLACK_BYTES: usize = 4096;
/// Largest segment a crafted frame carries (input bytes run out long before).
const CRAFTED_SEGMENT_BYTES_MAX: usize = 2048;
/// Most operations one session run performs.
const SESSION_STEPS_MAX: usize = 4096;

/// Reads the fuzzer's bytes as a recipe; reading past the end yields zeros.
struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&byte, rest)) => {
                self.data = rest;
                byte
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    fn u64(&mut self) -> u64 {
        u64::from(self.u16()) | u64::from(self.u16()) << 16 | u64::from(self.u16()) << 40
    }

    fn bytes(&mut self, count: usize) -> &'a [u8] {
        let count = count.min(self.data.len());
        let (taken, rest) = self.data.split_at(count);
        self.data = rest;
        taken
    }

    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// Memory a decoder may hold after being fed `fed_bytes` with frames of at most
/// `max_frame_bytes`: growth doubles at most what was needed.
fn buffer_bound(fed_bytes: usize, max_frame_bytes: usize) -> usize {
    2 * fed_bytes.max(max_frame_bytes) + BUFFER_SLACK_BYTES
}

/// Writes one frame with a valid preamble crc and, unless `corrupt`, valid segment
/// crcs, whatever the tag byte and however many segments (up to [`SEGMENTS_MAX`]).
fn put_raw_frame(tag: u8, segments: &[&[u8]], wire: &mut Vec<u8>) {
    assert!(segments.len() <= SEGMENTS_MAX);
    let mut preamble = [0u8; 24];
    preamble[0] = tag;
    preamble[1] = segments.len() as u8;
    for (index, segment) in segments.iter().enumerate() {
        let at = 4 + index * 4;
        preamble[at..at + 4].copy_from_slice(&(segment.len() as u32).to_le_bytes());
    }
    let crc = crc32c::crc32c(&preamble[..20]);
    preamble[20..].copy_from_slice(&crc.to_le_bytes());
    wire.extend_from_slice(&preamble);
    for segment in segments {
        wire.extend_from_slice(segment);
    }
    for segment in segments {
        wire.extend_from_slice(&crc32c::crc32c(segment).to_le_bytes());
    }
}

/// Decodes the input (raw, or wrapped into crafted frames) in chunks and checks the
/// decoder: frames within the limit, sticky errors, bounded buffer, and crafted valid
/// frames decoded exactly.
pub fn frame_decoder(data: &[u8]) {
    let mut input = Input { data };
    let options = input.u8();
    let max_frame_bytes = match options & 3 {
        0 => FRAME_OVERHEAD_BYTES_MAX,
        1 => 4096,
        2 => HANDSHAKE_FRAME_BYTES_MAX,
        _ => MESSAGE_BYTES_MAX,
    };
    let chunk_seed = input.u8();
    let (wire, expected) = match options & 4 != 0 {
        false => (input.bytes(usize::MAX).to_vec(), None),
        true => crafted_frames(&mut input, max_frame_bytes),
    };
    let mut decoder = FrameDecoder::new(max_frame_bytes);
    let mut decoded = Vec::new();
    let mut failed = false;
    let mut fed = 0;
    for chunk in chunks(&wire, chunk_seed) {
        decoder.push(chunk);
        fed += chunk.len();
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => {
                    assert!(frame.segments.len() <= SEGMENTS_MAX);
                    assert!(frame.wire_bytes() <= max_frame_bytes);
                    decoded.push(frame);
                }
                Ok(None) => break,
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        assert!(decoder.buffer().capacity() <= buffer_bound(fed, max_frame_bytes));
        if failed {
            assert!(decoder.next_frame().is_err(), "decoder errors are sticky");
            break;
        }
    }
    if let Some(expected) = expected {
        assert!(!failed, "valid frames failed to decode");
        assert_eq!(decoded, expected);
    }
}

/// Wraps the input into frames with valid crcs. Returns the wire bytes and, when every
/// frame is valid (known tag, within the limit, not corrupted), the frames expected.
fn crafted_frames(input: &mut Input<'_>, max_frame_bytes: usize) -> (Vec<u8>, Option<Vec<Frame>>) {
    let mut wire = Vec::new();
    let mut frames = Vec::new();
    let mut valid = true;
    while !input.is_empty() {
        let tag = input.u8();
        let count = usize::from(input.u8()) % (SEGMENTS_MAX + 1);
        let mut segments = Vec::with_capacity(count);
        for _ in 0..count {
            let length = usize::from(input.u16()) % CRAFTED_SEGMENT_BYTES_MAX;
            segments.push(input.bytes(length));
        }
        put_raw_frame(tag, &segments, &mut wire);
        let frame_bytes = crate::frame::frame_wire_bytes(segments.iter().map(|s| s.len()));
        match FrameTag::from_u8(tag) {
            Some(tag) if frame_bytes <= max_frame_bytes => {
                let segments = segments.iter().map(|s| Bytes::copy_from_slice(s));
                frames.push(Frame::new(tag, segments.collect()));
            }
            _ => valid = false,
        }
        if input.u8() == 0xff {
            // Corrupt one byte of what was written so far.
            let position = usize::from(input.u16()) % wire.len();
            wire[position] ^= input.u8() | 1;
            valid = false;
        }
    }
    (wire, valid.then_some(frames))
}

/// Cuts `wire` into chunks whose sizes follow from `seed` (0: one chunk).
fn chunks(wire: &[u8], seed: u8) -> impl Iterator<Item = &[u8]> {
    let mut state = u32::from(seed);
    let mut rest = wire;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let size = match seed {
            0 => rest.len(),
            _ => {
                state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                1 + (state >> 16) as usize % 257
            }
        };
        let (chunk, remainder) = rest.split_at(size.min(rest.len()));
        rest = remainder;
        Some(chunk)
    })
}

/// Where the session under test starts before the fuzzed bytes arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prelude {
    /// Nothing: the fuzzed bytes are the peer's first bytes (banner included).
    Nothing,
    /// The peer's valid banner has arrived.
    Banner,
    /// A real peer completed the handshake; messages flow.
    Established,
}

/// Drives a session (acceptor or connector, lossy or lossless) with fuzzed bytes,
/// sends, timeouts and transport resets, and checks it never panics, closes on error,
/// and keeps its buffers and queues within their limits.
pub fn session(data: &[u8]) {
    let mut input = Input { data };
    let options = input.u8();
    let policy = match options & 1 {
        0 => Policy::Lossy,
        _ => Policy::Lossless,
    };
    let acceptor = options & 2 != 0;
    let prelude = match (options >> 2) % 3 {
        0 => Prelude::Nothing,
        1 => Prelude::Banner,
        _ => Prelude::Established,
    };
    let crafted = options & 0x20 != 0;
    let mut run = SessionRun::new(policy, acceptor, prelude);
    for _ in 0..SESSION_STEPS_MAX {
        if input.is_empty() {
            break;
        }
        run.step(&mut input, crafted);
    }
}

fn harness_config(name: EntityName, policy: Policy) -> SessionConfig {
    SessionConfig {
        max_frame_bytes: 256 * 1024,
        send_queue_messages_max: 16,
        send_queue_bytes_max: 64 * 1024,
        ..SessionConfig::new(name, policy)
    }
}

/// One fuzzed session and the bookkeeping its checks need.
struct SessionRun {
    session: Session,
    now: Instant,
    fed_bytes: usize,
    connector: bool,
    /// The session returned an error; it must stay closed or disconnected.
    failed: bool,
}

impl SessionRun {
    fn new(policy: Policy, acceptor: bool, prelude: Prelude) -> Self {
        let now = Instant::now();
        let osd = harness_config(EntityName::osd(OsdId(1)), policy);
        let client = harness_config(EntityName::client(2), policy);
        let (mut session, mut peer) = match acceptor {
            true => (
                Session::accept(osd, now),
                Session::connect(client, ShardIndex(0), now),
            ),
            false => (
                Session::connect(client, ShardIndex(0), now),
                Session::accept(osd, now),
            ),
        };
        let mut fed_bytes = 0;
        match prelude {
            Prelude::Nothing => {}
            Prelude::Banner => {
                let banner = Banner::ours().to_wire();
                fed_bytes += banner.len();
                session
                    .handle_received(now, &banner)
                    .expect("our own banner is accepted");
            }
            Prelude::Established => fed_bytes += handshake(now, &mut session, &mut peer),
        }
        let mut wire = Vec::new();
        session.poll_transmit(&mut wire);
        Self {
            session,
            now,
            fed_bytes,
            connector: !acceptor,
            failed: false,
        }
    }

    fn step(&mut self, input: &mut Input<'_>, crafted: bool) {
        match input.u8() % 8 {
            0..=3 => {
                let bytes = match crafted {
                    true => crafted_session_frame(input),
                    false => {
                        let length = usize::from(input.u8()) + 1;
                        input.bytes(length).to_vec()
                    }
                };
                self.feed(&bytes);
            }
            4 => {
                let length = usize::from(input.u16()) % (96 * 1024);
                let message = Message::new(3, input.u64(), 0, Bytes::from(vec![7u8; length]));
                if self.session.send(self.now, message).is_ok() {
                    assert!(!self.session.is_closed());
                }
                let config = self.session.config();
                assert!(self.session.queued_messages() <= config.send_queue_messages_max);
            }
            5 => {
                self.now += Duration::from_millis(u64::from(input.u16()) * 4);
                if self.session.handle_timeout(self.now).is_err() {
                    self.failed = true;
                }
            }
            6 => {
                let mut wire = Vec::new();
                self.session.poll_transmit(&mut wire);
            }
            _ => self.reset(),
        }
        self.drain_events();
        if self.failed {
            assert!(self.session.is_closed() || self.session.is_disconnected());
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        self.fed_bytes += bytes.len();
        let result = self.session.handle_received(self.now, bytes);
        if self.failed && !self.session.resume_pending() {
            assert!(result.is_err(), "a failed session accepted input");
        }
        if result.is_err() {
            assert!(self.session.is_closed() || self.session.is_disconnected());
            self.failed = true;
        }
        let max_frame_bytes = self.session.config().max_frame_bytes;
        let capacity = self.session.receive_buffer().capacity();
        assert!(capacity <= buffer_bound(self.fed_bytes, max_frame_bytes));
    }

    /// The connection drops; a lossless connector starts again on a fresh one (the
    /// following input is then that connection's bytes).
    fn reset(&mut self) {
        self.session.handle_transport_closed(self.now);
        if self.connector && self.session.is_disconnected() {
            self.session.reconnect(self.now);
            self.failed = false;
            self.fed_bytes = 0;
        }
    }

    fn drain_events(&mut self) {
        while let Some(event) = self.session.poll_event() {
            if let SessionEvent::ResumeRequested { .. } = event {
                if self.session.accept_new_session(self.now).is_err() {
                    self.failed = true;
                }
            }
        }
    }
}

/// Completes a handshake between `session` and a real `peer`; returns the bytes fed
/// to `session`.
fn handshake(now: Instant, session: &mut Session, peer: &mut Session) -> usize {
    let mut fed = 0;
    for _ in 0..8 {
        let mut wire = Vec::new();
        session.poll_transmit(&mut wire);
        for chunk in wire.drain(..) {
            peer.handle_received(now, &chunk).expect("peer accepts us");
        }
        accept_if_asked(now, peer);
        peer.poll_transmit(&mut wire);
        for chunk in wire.drain(..) {
            fed += chunk.len();
            session
                .handle_received(now, &chunk)
                .expect("we accept the peer");
        }
        accept_if_asked(now, session);
        if session.is_established() && peer.is_established() {
            break;
        }
    }
    assert!(session.is_established());
    while session.poll_event().is_some() {}
    fed
}

fn accept_if_asked(now: Instant, session: &mut Session) {
    if session.resume_pending() {
        while session.poll_event().is_some() {}
        session.accept_new_session(now).expect("new session");
    }
}

/// One frame with valid crcs whose tag and body come from the input: either raw
/// bytes or a well-formed body of the tag's type with fuzzed fields.
fn crafted_session_frame(input: &mut Input<'_>) -> Vec<u8> {
    let tag = match input.u8() {
        byte @ 0..=11 => byte,
        byte => byte % 12 + 1,
    };
    let mut wire = Vec::new();
    if input.u8() & 1 == 0 {
        let count = usize::from(input.u8()) % (SEGMENTS_MAX + 1);
        let segments: Vec<&[u8]> = (0..count)
            .map(|_| {
                let length = usize::from(input.u8());
                input.bytes(length)
            })
            .collect();
        put_raw_frame(tag, &segments, &mut wire);
        return wire;
    }
    let body = well_formed_body(tag, input);
    let segments: Vec<&[u8]> = body.iter().map(|b| &b[..]).collect();
    put_raw_frame(tag, &segments, &mut wire);
    wire
}

fn well_formed_body(tag: u8, input: &mut Input<'_>) -> Vec<Bytes> {
    let name = match input.u8() % 3 {
        0 => EntityName::client(input.u64()),
        1 => EntityName::osd(OsdId(u32::from(input.u16()))),
        _ => EntityName::mon(input.u64()),
    };
    let shard = ShardIndex(input.u16());
    let body = match FrameTag::from_u8(tag) {
        Some(FrameTag::Hello) => Hello {
            name,
            target_shard: shard,
            connector_addr: None,
        }
        .to_bytes(),
        Some(FrameTag::HelloReply) => HelloReply {
            name,
            shard,
            connector_addr_seen: Some(([127, 0, 0, 1], input.u16()).into()),
        }
        .to_bytes(),
        Some(FrameTag::AuthRequest | FrameTag::AuthDone) => AuthStep {
            method: AuthMethod::None,
            payload: {
                let length = usize::from(input.u8());
                Bytes::copy_from_slice(input.bytes(length))
            },
        }
        .to_bytes(),
        Some(FrameTag::SessionRequest) => SessionRequest {
            policy: match input.u8() & 1 {
                0 => Policy::Lossy,
                _ => Policy::Lossless,
            },
            client_cookie: input.u64(),
            server_cookie: input.u64() % 3,
            in_seq: input.u64() % 8,
        }
        .to_bytes(),
        Some(FrameTag::SessionReady) => SessionReady {
            server_cookie: input.u64() % 3,
            in_seq: input.u64() % 8,
        }
        .to_bytes(),
        Some(FrameTag::Ack | FrameTag::Keepalive | FrameTag::KeepaliveAck) => {
            Counter(input.u64() % 16).to_bytes()
        }
        Some(FrameTag::Close) => {
            CloseReason(String::from_utf8_lossy(input.bytes(8)).into_owned()).to_bytes()
        }
        Some(FrameTag::Message) => return message_segments(input),
        None => Bytes::copy_from_slice(input.bytes(16)),
    };
    vec![body]
}

/// A message frame's three segments with a well-formed header and small sequence
/// numbers, so in-order, duplicate and gapped messages all occur.
fn message_segments(input: &mut Input<'_>) -> Vec<Bytes> {
    let header = MessageHeader {
        msg_type: input.u16(),
        priority: input.u8(),
        seq: u64::from(input.u8() % 8),
        tid: input.u64(),
        sender_epoch: 0,
    };
    let ack_seq = u64::from(input.u8() % 8);
    let front_length = usize::from(input.u8());
    let front = Bytes::copy_from_slice(input.bytes(front_length));
    vec![header_bytes(&header, ack_seq), front, Bytes::new()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn frame_decoder_survives_random_input(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
            frame_decoder(&data);
        }

        #[test]
        fn session_survives_random_input(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
            session(&data);
        }
    }

    #[test]
    fn crafted_valid_frames_round_trip() {
        // options 0b101: wrapped into frames, 4 KiB limit; one chunk.
        let mut data = vec![0b101, 0];
        for tag in 1..=11u8 {
            data.extend_from_slice(&[tag, 2, 3, 0, b'a', b'b', b'c', 0, 0, 0]);
        }
        frame_decoder(&data);
    }

    #[test]
    fn every_prelude_and_role_runs() {
        for options in 0..64u8 {
            let mut data = vec![options];
            for step in 0..64u8 {
                data.extend_from_slice(&[step % 8, step, 5, 1, 2, 3, 4, 5, 6, 7]);
            }
            session(&data);
        }
    }
}
