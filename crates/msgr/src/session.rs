//! The sans-IO session state machine: no sockets, clocks, threads or randomness.
//!
//! A driver feeds it received bytes (`handle_received` / `handle_buffered`), the
//! current time (`handle_timeout` at `poll_timeout()`), and messages to send (`send`);
//! it collects bytes to write (`poll_transmit`) and events (`poll_event`). The wire
//! format is in [`crate::frame`], [`crate::handshake`] and [`crate::message`].
//!
//! Handshake (one round trip; the connector pipelines its side):
//!
//! ```text
//! connector                                   acceptor
//!   banner, Hello, AuthRequest, SessionRequest ->
//!                                <- banner, HelloReply, AuthDone, SessionReady
//!   Established                                 Established (after SessionReady)
//! ```
//!
//! A lossless acceptor does not decide alone whether a `SessionRequest` resumes an
//! older session: it emits [`SessionEvent::ResumeRequested`] and waits until the
//! driver either hands it to the old session ([`Session::resume`]) or tells it to
//! start afresh ([`Session::accept_new_session`]).
//!
//! Sequencing: every message gets `seq` 1, 2, ... per session; the receiver delivers
//! `seq == in_seq + 1` only. A lossless receiver acknowledges with the highest `seq`
//! it has, in the header of its next message or, failing that, in one `Ack` frame per
//! `poll_transmit`. On reconnect each side tells the other its `in_seq`; the sender
//! replays everything after it, so each message is delivered exactly once, in order.

use crate::config::{Policy, SessionConfig};
use crate::error::SessionError;
use crate::fault::{FaultState, HandshakeStep};
use crate::frame::{
    encode_frame_gather, FrameDecoder, FrameParts, FrameTag, SegmentRef, FRAME_OVERHEAD_BYTES_MAX,
};
use crate::handshake::{
    AuthStep, Banner, CloseReason, Counter, Hello, HelloReply, SessionReady, SessionRequest,
    AUTH_PAYLOAD_BYTES_MAX,
};
use crate::message::{decode_header, decode_header_in_place, header_array, Message, HEADER_BYTES};
use crate::queue::OutQueue;
use bytes::{Bytes, BytesMut};
use carmine_types::encoding::{Decode, Encode};
use carmine_types::{EntityName, ShardIndex};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Initial capacity of the buffer small frames are encoded into.
const TRANSMIT_SCRATCH_BYTES: usize = 64 * 1024;
/// Lossless: longest a received message waits for its acknowledgement to ride on an
/// outgoing message before a standalone `Ack` frame is sent. Kept coarse on purpose:
/// re-arming a driver timer on every message costs more than the acks save (a 1 ms
/// delay made 4 KiB depth-1 round trips 2.5x slower over tokio).
pub const ACK_DELAY_MAX: Duration = Duration::from_millis(50);
/// Largest frame accepted before the handshake completes: room for the largest
/// handshake body (an auth payload) and nothing more, so a peer that has not said who
/// it is cannot make the decoder reserve `max_frame_bytes`.
pub const HANDSHAKE_FRAME_BYTES_MAX: usize = AUTH_PAYLOAD_BYTES_MAX + 4096;
const _: () = assert!(HANDSHAKE_FRAME_BYTES_MAX < carmine_types::limits::MESSAGE_BYTES_MAX);
/// Lossless: most received messages left unacknowledged before an `Ack` is sent
/// regardless of the delay.
pub const ACKS_PENDING_MAX: u64 = 32;
/// Lossless: most payload bytes received unacknowledged before an `Ack` is sent
/// regardless of the delay. The sender keeps unacknowledged messages for replay and
/// counts them against its send queue (64 MiB by default), and a receiver that sends
/// nothing back on this session (a replica answers its primary on its own session) has
/// no reply for the acks to ride on: without this, sixteen 4 MiB writes fill the
/// primary's queue and it waits for the `ACK_DELAY_MAX` timer.
pub const ACK_BYTES_PENDING_MAX: u64 = 8 * 1024 * 1024;

/// What the session reports to its driver.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionEvent {
    /// The handshake completed; messages flow.
    Established {
        peer: EntityName,
        peer_shard: ShardIndex,
    },
    /// A message from the peer, delivered once and in order.
    Message(Message),
    /// Lossless acceptor: the peer asks for a session; the driver must call
    /// [`Session::resume`] on the old session it finds under `(peer, client_cookie)`,
    /// or [`Session::accept_new_session`] on this one.
    ResumeRequested {
        peer: EntityName,
        client_cookie: u64,
        server_cookie: u64,
    },
    /// A lossless session continues on a new connection.
    Resumed,
    /// Lossless connector: the acceptor no longer knows our session (it restarted).
    /// Sequence numbers start again; queued messages were renumbered and will be sent.
    PeerReset,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Connector { target_shard: ShardIndex },
    Acceptor,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing written yet (cookies and addresses may still be set).
    Unopened,
    /// Waiting for the peer's banner.
    Banner,
    /// Waiting for this handshake frame.
    Expect(HandshakeStep),
    /// Lossless acceptor: waiting for the driver's decision on this request.
    AwaitingResume(SessionRequest),
    Established,
    /// Lossless: the connection failed at `since`; queues are kept until the session
    /// resumes on a new connection or `reconnect_window` passes.
    Disconnected {
        since: Instant,
    },
    /// Closed or failed: every call but `poll_transmit` fails.
    Closed,
}

/// One messenger session (see the module docs).
#[derive(Debug)]
pub struct Session {
    config: SessionConfig,
    role: Role,
    policy: Policy,
    state: State,
    decoder: FrameDecoder,
    scratch: BytesMut,
    chunks: Vec<Bytes>,
    events: VecDeque<SessionEvent>,
    peer: Option<(EntityName, ShardIndex)>,
    local_addr: Option<SocketAddr>,
    peer_addr: Option<SocketAddr>,
    addr_seen_by_peer: Option<SocketAddr>,
    client_cookie: u64,
    server_cookie: u64,
    was_established: bool,
    /// How many times the handshake completed (first establishment and resumes).
    established_count: u64,
    out: OutQueue,
    in_seq: u64,
    ack_sent: u64,
    /// Payload bytes received in messages, and that count when `ack_sent` was last set.
    received_bytes: u64,
    received_bytes_at_ack: u64,
    /// When a standalone `Ack` is due, if acknowledgements are pending.
    ack_due_at: Option<Instant>,
    /// An injected stall: input is left unprocessed until then.
    stalled_until: Option<Instant>,
    started_at: Instant,
    last_received_at: Instant,
    next_keepalive_at: Instant,
    keepalives_sent: u64,
    faults: FaultState,
}

impl Session {
    /// A session that connects to `target_shard` of the peer.
    pub fn connect(config: SessionConfig, target_shard: ShardIndex, now: Instant) -> Session {
        Self::new(config, Role::Connector { target_shard }, now)
    }

    /// A session for an accepted connection.
    pub fn accept(config: SessionConfig, now: Instant) -> Session {
        Self::new(config, Role::Acceptor, now)
    }

    fn new(config: SessionConfig, role: Role, now: Instant) -> Session {
        config.assert_valid();
        Session {
            role,
            policy: config.policy,
            state: State::Unopened,
            decoder: FrameDecoder::new(handshake_frame_bytes_max(&config)),
            scratch: BytesMut::with_capacity(TRANSMIT_SCRATCH_BYTES),
            chunks: Vec::new(),
            events: VecDeque::new(),
            peer: None,
            local_addr: None,
            peer_addr: None,
            addr_seen_by_peer: None,
            client_cookie: 1,
            server_cookie: 1,
            was_established: false,
            established_count: 0,
            out: OutQueue::new(config.send_queue_messages_max, config.send_queue_bytes_max),
            in_seq: 0,
            ack_sent: 0,
            received_bytes: 0,
            received_bytes_at_ack: 0,
            ack_due_at: None,
            stalled_until: None,
            started_at: now,
            last_received_at: now,
            next_keepalive_at: now + config.keepalive_interval,
            keepalives_sent: 0,
            faults: FaultState::new(config.faults.clone()),
            config,
        }
    }

    /// Sets this side's cookie (client cookie for a connector, server cookie for an
    /// acceptor); must be non-zero, unique per session, and set before any I/O.
    pub fn set_cookie(&mut self, cookie: u64) {
        assert_ne!(cookie, 0, "cookie 0 means 'none' on the wire");
        assert_eq!(self.state, State::Unopened, "set_cookie after I/O started");
        match self.role {
            Role::Connector { .. } => self.client_cookie = cookie,
            Role::Acceptor => self.server_cookie = cookie,
        }
    }

    /// Tells the session the socket's addresses (sent in `Hello` / `HelloReply`).
    pub fn set_addresses(&mut self, local: Option<SocketAddr>, peer: Option<SocketAddr>) {
        self.local_addr = local;
        self.peer_addr = peer;
    }

    /// The peer's name and shard, once its hello has arrived.
    pub fn peer(&self) -> Option<(EntityName, ShardIndex)> {
        self.peer
    }

    /// Our address as the acceptor saw it (connector only).
    pub fn addr_seen_by_peer(&self) -> Option<SocketAddr> {
        self.addr_seen_by_peer
    }

    pub fn is_established(&self) -> bool {
        self.state == State::Established
    }

    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// How many times the handshake has completed: 1 after the first, +1 per resume.
    pub fn established_count(&self) -> u64 {
        self.established_count
    }

    /// The connector's cookie (an acceptor learns it from the session request).
    pub fn client_cookie(&self) -> u64 {
        self.client_cookie
    }

    /// Lossless: the connection failed and the session waits to resume.
    pub fn is_disconnected(&self) -> bool {
        matches!(self.state, State::Disconnected { .. })
    }

    /// Lossless acceptor: waiting for `resume` or `accept_new_session`.
    pub fn resume_pending(&self) -> bool {
        matches!(self.state, State::AwaitingResume(_))
    }

    /// The driver's connection ended (EOF or I/O error). A lossless session that can
    /// resume becomes disconnected; any other closes.
    pub fn handle_transport_closed(&mut self, now: Instant) {
        match self.state {
            State::Closed | State::Disconnected { .. } => {}
            _ if self.can_resume() => self.state = State::Disconnected { since: now },
            _ => self.state = State::Closed,
        }
    }

    fn can_resume(&self) -> bool {
        let connector = matches!(self.role, Role::Connector { .. });
        self.lossless() && (self.was_established || connector)
    }

    /// The policy in force (an acceptor's is the connector's once requested).
    pub fn policy(&self) -> Policy {
        self.policy
    }

    pub fn config(&self) -> &SessionConfig {
        &self.config
    }

    /// Whether `send` would accept another (small) message now.
    pub fn has_send_room(&self) -> bool {
        self.out.has_room()
    }

    /// Whether `send` would accept a message of `payload_bytes` now.
    pub fn has_send_room_for(&self, payload_bytes: usize) -> bool {
        self.out.fits(payload_bytes)
    }

    /// Messages queued: unsent, plus sent-but-unacknowledged when lossless.
    pub fn queued_messages(&self) -> usize {
        self.out.len()
    }

    /// Payload bytes queued (see `queued_messages`).
    pub fn queued_bytes(&self) -> usize {
        self.out.payload_bytes()
    }

    /// Queues a message; before establishment it is held until the session is up.
    pub fn send(&mut self, _now: Instant, message: Message) -> Result<(), SessionError> {
        if self.state == State::Closed {
            return Err(SessionError::Closed);
        }
        let bytes = message.payload_bytes() + HEADER_BYTES + FRAME_OVERHEAD_BYTES_MAX;
        if bytes > self.config.max_frame_bytes {
            return Err(SessionError::MessageTooLarge {
                bytes,
                limit: self.config.max_frame_bytes,
            });
        }
        self.out
            .push(message)
            .map(|_| ())
            .map_err(|full| SessionError::QueueFull {
                messages: full.messages,
                bytes: full.bytes,
            })
    }

    /// Feeds bytes received from the connection.
    pub fn handle_received(&mut self, now: Instant, data: &[u8]) -> Result<(), SessionError> {
        self.decoder.push(data);
        self.handle_buffered(now)
    }

    /// The receive buffer, to read into without a copy; then call `handle_buffered`.
    pub fn receive_buffer(&mut self) -> &mut BytesMut {
        self.decoder.buffer()
    }

    /// Processes bytes a driver read straight into `receive_buffer()`.
    pub fn handle_buffered(&mut self, now: Instant) -> Result<(), SessionError> {
        match self.state {
            State::Closed => return Err(SessionError::Closed),
            State::Disconnected { .. } => return Err(SessionError::NotConnected),
            _ => {}
        }
        self.last_received_at = now;
        self.open();
        match self.process(now) {
            Ok(()) => Ok(()),
            Err(error) => Err(self.fail(now, error)),
        }
    }

    fn process(&mut self, now: Instant) -> Result<(), SessionError> {
        loop {
            if self.stalled(now) {
                return Ok(());
            }
            match self.state {
                State::Banner => {
                    if !self.receive_banner()? {
                        return Ok(());
                    }
                }
                State::AwaitingResume(_)
                | State::Closed
                | State::Unopened
                | State::Disconnected { .. } => return Ok(()),
                State::Expect(_) | State::Established => match self.decoder.next_frame_parts()? {
                    None => return Ok(()),
                    Some(frame) => self.handle_frame(now, frame)?,
                },
            }
        }
    }

    /// Whether an injected stall holds input back now (starting one on reaching its step).
    fn stalled(&mut self, now: Instant) -> bool {
        if let Some(until) = self.stalled_until {
            if now < until {
                return true;
            }
            self.stalled_until = None;
        }
        let step = match self.state {
            State::Banner => HandshakeStep::Banner,
            State::Expect(step) => step,
            _ => return false,
        };
        match self.faults.stall(step) {
            Some(duration) => {
                self.stalled_until = Some(now + duration);
                true
            }
            None => false,
        }
    }

    /// Closes the session with a reason for the peer; the `Close` frame is left for
    /// `poll_transmit`.
    pub fn close(&mut self, reason: &str) {
        if self.state == State::Closed {
            return;
        }
        if self.state != State::Unopened {
            self.queue_frame(FrameTag::Close, &CloseReason(reason.to_string()).to_bytes());
        }
        self.state = State::Closed;
    }

    /// Ends the connection after `error`: a lossless session that can resume waits
    /// disconnected after a recoverable error; otherwise it closes, and fatal errors
    /// are told to the peer.
    fn fail(&mut self, now: Instant, error: SessionError) -> SessionError {
        if matches!(self.state, State::Closed | State::Disconnected { .. }) {
            return error;
        }
        if error.is_recoverable() && self.can_resume() {
            self.state = State::Disconnected { since: now };
            return error;
        }
        if !error.is_recoverable() && !matches!(error, SessionError::PeerClosed { .. }) {
            self.close(&error.to_string());
        }
        self.state = State::Closed;
        error
    }

    /// Keepalives and timeouts; call at `poll_timeout()`.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), SessionError> {
        match self.state {
            State::Closed => return Err(SessionError::Closed),
            State::Disconnected { since } => {
                if now >= since + self.config.reconnect_window {
                    self.state = State::Closed;
                    let after = self.config.reconnect_window;
                    return Err(SessionError::ReconnectWindowExpired { after });
                }
                return Ok(());
            }
            _ => {}
        }
        if self.state != State::Established
            && now >= self.started_at + self.config.handshake_timeout
        {
            let error = SessionError::HandshakeTimedOut {
                after: self.config.handshake_timeout,
            };
            return Err(self.fail(now, error));
        }
        let silence = now.saturating_duration_since(self.last_received_at);
        if silence >= self.config.keepalive_timeout {
            return Err(self.fail(now, SessionError::PeerTimedOut { silence }));
        }
        if self.ack_due_at.is_some_and(|due| now >= due) {
            self.queue_ack();
        }
        if self.state == State::Established && now >= self.next_keepalive_at {
            self.keepalives_sent += 1;
            self.queue_frame(
                FrameTag::Keepalive,
                &Counter(self.keepalives_sent).to_bytes(),
            );
            self.next_keepalive_at = now + self.config.keepalive_interval;
        }
        if self.stalled_until.is_some_and(|until| now >= until) {
            if let Err(error) = self.process(now) {
                return Err(self.fail(now, error));
            }
        }
        Ok(())
    }

    /// When `handle_timeout` must next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let deadline = self.state_deadline()?;
        Some(
            self.stalled_until
                .map_or(deadline, |until| deadline.min(until)),
        )
    }

    fn state_deadline(&self) -> Option<Instant> {
        let silence_deadline = self.last_received_at + self.config.keepalive_timeout;
        match self.state {
            State::Closed => None,
            State::Disconnected { since } => Some(since + self.config.reconnect_window),
            State::Established => {
                let deadline = silence_deadline.min(self.next_keepalive_at);
                Some(self.ack_due_at.map_or(deadline, |due| deadline.min(due)))
            }
            _ => Some(silence_deadline.min(self.started_at + self.config.handshake_timeout)),
        }
    }

    /// Appends every queued outgoing byte to `out` (for one vectored write) and
    /// returns how many bytes that is.
    pub fn poll_transmit(&mut self, out: &mut Vec<Bytes>) -> usize {
        self.open();
        if self.state == State::Established {
            self.encode_messages();
        }
        if !self.scratch.is_empty() {
            self.chunks.push(self.scratch.split().freeze());
        }
        let mut total = 0;
        for chunk in self.chunks.drain(..) {
            total += chunk.len();
            out.push(chunk);
        }
        total
    }

    pub fn poll_event(&mut self) -> Option<SessionEvent> {
        self.events.pop_front()
    }

    fn lossless(&self) -> bool {
        self.policy == Policy::Lossless
    }

    fn encode_messages(&mut self) {
        let lossless = self.lossless();
        let ack_seq = if lossless { self.in_seq } else { 0 };
        let scratch = &mut self.scratch;
        let chunks = &mut self.chunks;
        let mut encoded_any = false;
        self.out.drain_unsent(lossless, |message| {
            let header = header_array(&message.header, ack_seq);
            let segments = [
                SegmentRef::Slice(&header),
                SegmentRef::Shared(&message.front),
                SegmentRef::Shared(&message.data),
            ];
            encode_frame_gather(FrameTag::Message, &segments, scratch, chunks);
            encoded_any = true;
        });
        let acks_pending = self.in_seq - self.ack_sent;
        let bytes_pending = self.received_bytes - self.received_bytes_at_ack;
        if encoded_any {
            self.mark_all_acked();
        } else if lossless
            && (acks_pending >= ACKS_PENDING_MAX || bytes_pending >= ACK_BYTES_PENDING_MAX)
        {
            self.queue_ack();
        }
    }

    /// Queues a standalone `Ack` for everything received.
    fn queue_ack(&mut self) {
        if self.in_seq > self.ack_sent {
            self.queue_frame(FrameTag::Ack, &Counter(self.in_seq).to_bytes());
        }
        self.mark_all_acked();
    }

    /// Everything received so far is acknowledged (or about to be, in a queued frame).
    fn mark_all_acked(&mut self) {
        self.ack_sent = self.in_seq;
        self.received_bytes_at_ack = self.received_bytes;
        self.ack_due_at = None;
    }

    fn queue_frame(&mut self, tag: FrameTag, body: &Bytes) {
        let segments = [SegmentRef::Shared(body)];
        encode_frame_gather(tag, &segments, &mut self.scratch, &mut self.chunks);
    }

    /// Writes this side's opening (banner; the connector's pipelined requests).
    fn open(&mut self) {
        if self.state != State::Unopened {
            return;
        }
        self.scratch.extend_from_slice(&Banner::ours().to_wire());
        self.state = State::Banner;
        if let Role::Connector { target_shard } = self.role {
            self.queue_connector_requests(target_shard);
        }
    }

    fn queue_connector_requests(&mut self, target_shard: ShardIndex) {
        let hello = Hello {
            name: self.config.my_name,
            target_shard,
            connector_addr: self.local_addr,
        };
        self.queue_frame(FrameTag::Hello, &hello.to_bytes());
        let auth = AuthStep {
            method: self.config.auth_method,
            payload: Bytes::new(),
        };
        self.queue_frame(FrameTag::AuthRequest, &auth.to_bytes());
        let request = SessionRequest {
            policy: self.policy,
            client_cookie: self.client_cookie,
            server_cookie: if self.was_established {
                self.server_cookie
            } else {
                0
            },
            in_seq: self.in_seq,
        };
        self.queue_frame(FrameTag::SessionRequest, &request.to_bytes());
    }

    /// Returns true once the peer's banner has been read and accepted.
    fn receive_banner(&mut self) -> Result<bool, SessionError> {
        let Some((banner, length)) = Banner::parse(self.decoder.buffer())? else {
            return Ok(false);
        };
        self.faults.on_step(HandshakeStep::Banner)?;
        Banner::ours().check_peer(&banner)?;
        let _ = self.decoder.buffer().split_to(length);
        self.state = State::Expect(match self.role {
            Role::Connector { .. } => HandshakeStep::HelloReply,
            Role::Acceptor => HandshakeStep::Hello,
        });
        Ok(true)
    }

    fn handle_frame(&mut self, now: Instant, frame: FrameParts) -> Result<(), SessionError> {
        match (self.state, frame.tag) {
            (State::Established, FrameTag::Message) => self.on_message(now, frame),
            (State::Established, FrameTag::Ack) => {
                let Counter(seq) = decode_single(&frame)?;
                self.on_ack(seq)
            }
            (_, FrameTag::Keepalive) => {
                let body = single_segment(&frame)?;
                self.queue_frame(FrameTag::KeepaliveAck, &body);
                Ok(())
            }
            (_, FrameTag::KeepaliveAck) => Ok(()),
            (_, FrameTag::Close) => {
                let CloseReason(reason) = decode_single(&frame)?;
                Err(SessionError::PeerClosed { reason })
            }
            (State::Expect(step), tag) if step_tag(step) == tag => {
                self.faults.on_step(step)?;
                self.handle_handshake(now, step, &frame)
            }
            (state, tag) => Err(SessionError::UnexpectedFrame {
                tag,
                state: state_name(state),
            }),
        }
    }

    fn handle_handshake(
        &mut self,
        now: Instant,
        step: HandshakeStep,
        frame: &FrameParts,
    ) -> Result<(), SessionError> {
        match step {
            HandshakeStep::Hello => self.on_hello(decode_single(frame)?),
            HandshakeStep::AuthRequest => self.on_auth_request(decode_single(frame)?),
            HandshakeStep::SessionRequest => self.on_session_request(now, decode_single(frame)?),
            HandshakeStep::HelloReply => self.on_hello_reply(decode_single(frame)?),
            HandshakeStep::AuthDone => {
                let _done: AuthStep = decode_single(frame)?;
                self.state = State::Expect(HandshakeStep::SessionReady);
                Ok(())
            }
            HandshakeStep::SessionReady => self.on_session_ready(now, decode_single(frame)?),
            HandshakeStep::Banner => unreachable!("the banner is not a frame"),
        }
    }

    fn on_hello(&mut self, hello: Hello) -> Result<(), SessionError> {
        assert_eq!(self.role, Role::Acceptor);
        self.peer = Some((hello.name, hello.target_shard));
        let reply = HelloReply {
            name: self.config.my_name,
            shard: hello.target_shard,
            connector_addr_seen: self.peer_addr,
        };
        self.queue_frame(FrameTag::HelloReply, &reply.to_bytes());
        self.state = State::Expect(HandshakeStep::AuthRequest);
        Ok(())
    }

    fn on_auth_request(&mut self, request: AuthStep) -> Result<(), SessionError> {
        if request.method != self.config.auth_method {
            return Err(SessionError::AuthFailed {
                reason: format!(
                    "auth method {:?} offered, {:?} required",
                    request.method, self.config.auth_method
                ),
            });
        }
        let done = AuthStep {
            method: self.config.auth_method,
            payload: Bytes::new(),
        };
        self.queue_frame(FrameTag::AuthDone, &done.to_bytes());
        self.state = State::Expect(HandshakeStep::SessionRequest);
        Ok(())
    }

    fn on_session_request(
        &mut self,
        now: Instant,
        request: SessionRequest,
    ) -> Result<(), SessionError> {
        let (peer, _) = self.peer.expect("hello precedes the session request");
        self.policy = request.policy;
        self.state = State::AwaitingResume(request);
        if request.policy == Policy::Lossy {
            self.start_new_session(now);
            return Ok(());
        }
        self.events.push_back(SessionEvent::ResumeRequested {
            peer,
            client_cookie: request.client_cookie,
            server_cookie: request.server_cookie,
        });
        Ok(())
    }

    /// Lossless acceptor, after `ResumeRequested`: no earlier session exists, start
    /// a new one.
    pub fn accept_new_session(&mut self, now: Instant) -> Result<(), SessionError> {
        self.start_new_session(now);
        // Frames the connector sent after its request may already be buffered.
        match self.process(now) {
            Ok(()) => Ok(()),
            Err(error) => Err(self.fail(now, error)),
        }
    }

    fn start_new_session(&mut self, now: Instant) {
        let State::AwaitingResume(request) = self.state else {
            panic!("accept_new_session in state {:?}", self.state);
        };
        self.client_cookie = request.client_cookie;
        self.establish_acceptor(now);
        let (peer, peer_shard) = self.peer.expect("hello precedes the session request");
        self.events
            .push_back(SessionEvent::Established { peer, peer_shard });
    }

    /// Lossless acceptor: continues this (older) session on `fresh`'s connection;
    /// `fresh` must be waiting after `ResumeRequested` and is consumed (closed). Fails
    /// if the peer's view of the session cannot be reconciled with ours; the driver
    /// should then close this session and call `accept_new_session` on `fresh`.
    pub fn resume(&mut self, now: Instant, fresh: &mut Session) -> Result<(), SessionError> {
        let State::AwaitingResume(request) = fresh.state else {
            panic!("resume from a session in state {:?}", fresh.state);
        };
        assert_eq!(self.role, Role::Acceptor);
        assert_eq!(fresh.peer.map(|p| p.0), self.peer.map(|p| p.0));
        if self.state == State::Closed || !self.lossless() {
            return Err(SessionError::CannotResume {
                reason: "the old session is closed".into(),
            });
        }
        let cookie_known =
            request.server_cookie == 0 || request.server_cookie == self.server_cookie;
        if request.client_cookie != self.client_cookie || !cookie_known {
            return Err(SessionError::CannotResume {
                reason: "cookies do not match".into(),
            });
        }
        if !self.out.rewind(request.in_seq) {
            return Err(SessionError::CannotResume {
                reason: format!(
                    "peer has seq {}, we sent {}",
                    request.in_seq,
                    self.out.last_seq()
                ),
            });
        }
        self.decoder = std::mem::replace(&mut fresh.decoder, FrameDecoder::new(1 << 16));
        self.scratch = std::mem::take(&mut fresh.scratch);
        self.chunks = std::mem::take(&mut fresh.chunks);
        self.peer = fresh.peer;
        self.peer_addr = fresh.peer_addr;
        self.local_addr = fresh.local_addr;
        fresh.state = State::Closed;
        self.establish_acceptor(now);
        self.events.push_back(SessionEvent::Resumed);
        match self.process(now) {
            Ok(()) => Ok(()),
            Err(error) => Err(self.fail(now, error)),
        }
    }

    fn establish_acceptor(&mut self, now: Instant) {
        let ready = SessionReady {
            server_cookie: self.server_cookie,
            in_seq: self.in_seq,
        };
        self.queue_frame(FrameTag::SessionReady, &ready.to_bytes());
        self.mark_all_acked();
        self.enter_established(now);
    }

    fn enter_established(&mut self, now: Instant) {
        self.decoder
            .set_max_frame_bytes(self.config.max_frame_bytes);
        self.state = State::Established;
        self.was_established = true;
        self.established_count += 1;
        self.last_received_at = now;
        self.next_keepalive_at = now + self.config.keepalive_interval;
    }

    fn on_hello_reply(&mut self, reply: HelloReply) -> Result<(), SessionError> {
        self.peer = Some((reply.name, reply.shard));
        self.addr_seen_by_peer = reply.connector_addr_seen;
        self.state = State::Expect(HandshakeStep::AuthDone);
        Ok(())
    }

    fn on_session_ready(&mut self, now: Instant, ready: SessionReady) -> Result<(), SessionError> {
        let first = !self.was_established;
        if !first && ready.server_cookie != self.server_cookie {
            // The acceptor lost our session: start numbering afresh.
            self.out.renumber();
            self.in_seq = 0;
            self.events.push_back(SessionEvent::PeerReset);
        } else if !self.out.rewind(ready.in_seq) {
            return Err(SessionError::CannotResume {
                reason: format!(
                    "peer has seq {}, we sent {}",
                    ready.in_seq,
                    self.out.last_seq()
                ),
            });
        }
        self.server_cookie = ready.server_cookie;
        self.mark_all_acked();
        self.enter_established(now);
        let (peer, peer_shard) = self.peer.expect("hello reply precedes session ready");
        self.events.push_back(match first {
            true => SessionEvent::Established { peer, peer_shard },
            false => SessionEvent::Resumed,
        });
        Ok(())
    }

    /// Lossless connector: the connection failed; start the handshake again on a new
    /// one, keeping queued and unacknowledged messages for replay.
    pub fn reconnect(&mut self, now: Instant) {
        assert!(matches!(self.role, Role::Connector { .. }));
        assert_eq!(
            self.policy,
            Policy::Lossless,
            "only lossless sessions reconnect"
        );
        assert_ne!(self.state, State::Closed, "reconnect of a closed session");
        self.decoder = FrameDecoder::new(handshake_frame_bytes_max(&self.config));
        self.scratch.clear();
        self.chunks.clear();
        self.state = State::Unopened;
        self.started_at = now;
        self.last_received_at = now;
        self.open();
    }

    fn on_message(&mut self, now: Instant, frame: FrameParts) -> Result<(), SessionError> {
        if frame.segment_count() != 3 {
            return Err(SessionError::MalformedFrame {
                tag: FrameTag::Message,
                reason: format!("{} segments, expected 3", frame.segment_count()),
            });
        }
        // The header is read where it lies (the general decoder, for other versions,
        // needs a shared slice).
        let header = match decode_header_in_place(frame.segment_bytes(0)) {
            Some(decoded) => Ok(decoded),
            None => decode_header(frame.segment(0)),
        };
        let (header, ack_seq) = header.map_err(|source| SessionError::Decode {
            what: "message header",
            source,
        })?;
        let [front, data] = frame.into_last_two();
        if header.seq != self.in_seq + 1 {
            if self.lossless() && header.seq <= self.in_seq {
                return Ok(()); // a replayed duplicate
            }
            return Err(SessionError::SequenceGap {
                expected: self.in_seq + 1,
                received: header.seq,
            });
        }
        self.faults.on_message()?;
        if self.lossless() {
            self.on_ack(ack_seq)?;
            self.ack_due_at.get_or_insert(now + ACK_DELAY_MAX);
        }
        self.in_seq = header.seq;
        self.received_bytes += (front.len() + data.len()) as u64;
        self.events.push_back(SessionEvent::Message(Message {
            header,
            front,
            data,
        }));
        Ok(())
    }

    fn on_ack(&mut self, seq: u64) -> Result<(), SessionError> {
        if !self.lossless() {
            return Ok(());
        }
        if !self.out.ack(seq) {
            return Err(SessionError::BadAck {
                acked: seq,
                sent: self.out.last_seq(),
            });
        }
        Ok(())
    }
}

fn handshake_frame_bytes_max(config: &SessionConfig) -> usize {
    config.max_frame_bytes.min(HANDSHAKE_FRAME_BYTES_MAX)
}

fn step_tag(step: HandshakeStep) -> FrameTag {
    match step {
        HandshakeStep::Hello => FrameTag::Hello,
        HandshakeStep::HelloReply => FrameTag::HelloReply,
        HandshakeStep::AuthRequest => FrameTag::AuthRequest,
        HandshakeStep::AuthDone => FrameTag::AuthDone,
        HandshakeStep::SessionRequest => FrameTag::SessionRequest,
        HandshakeStep::SessionReady => FrameTag::SessionReady,
        HandshakeStep::Banner => unreachable!("the banner is not a frame"),
    }
}

fn state_name(state: State) -> &'static str {
    match state {
        State::Unopened => "unopened",
        State::Banner => "banner",
        State::Expect(HandshakeStep::Hello) => "awaiting hello",
        State::Expect(HandshakeStep::HelloReply) => "awaiting hello reply",
        State::Expect(HandshakeStep::AuthRequest) => "awaiting auth request",
        State::Expect(HandshakeStep::AuthDone) => "awaiting auth done",
        State::Expect(HandshakeStep::SessionRequest) => "awaiting session request",
        State::Expect(HandshakeStep::SessionReady) => "awaiting session ready",
        State::Expect(HandshakeStep::Banner) => "banner",
        State::AwaitingResume(_) => "awaiting resume",
        State::Established => "established",
        State::Disconnected { .. } => "disconnected",
        State::Closed => "closed",
    }
}

fn single_segment(frame: &FrameParts) -> Result<Bytes, SessionError> {
    match frame.segments::<1>() {
        Ok([segment]) => Ok(segment),
        Err(count) => Err(SessionError::MalformedFrame {
            tag: frame.tag,
            reason: format!("{count} segments, expected 1"),
        }),
    }
}

fn decode_single<T: Decode>(frame: &FrameParts) -> Result<T, SessionError> {
    let segment = single_segment(frame)?;
    T::from_shared(segment).map_err(|source| SessionError::Decode {
        what: tag_name(frame.tag),
        source,
    })
}

fn tag_name(tag: FrameTag) -> &'static str {
    match tag {
        FrameTag::Hello => "hello",
        FrameTag::HelloReply => "hello reply",
        FrameTag::AuthRequest => "auth request",
        FrameTag::AuthDone => "auth done",
        FrameTag::Message => "message",
        FrameTag::Ack => "ack",
        FrameTag::Keepalive => "keepalive",
        FrameTag::KeepaliveAck => "keepalive ack",
        FrameTag::Close => "close",
        FrameTag::SessionRequest => "session request",
        FrameTag::SessionReady => "session ready",
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
