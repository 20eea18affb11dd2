//! Tests of the session state machine: pairs wired back to back in memory.

use super::*;
use crate::fault::FaultPlan;
use crate::frame::Frame;
use crate::handshake::PROTOCOL_VERSION;
use carmine_types::OsdId;
use proptest::prelude::*;
use std::time::Duration;

fn config(name: EntityName, policy: Policy) -> SessionConfig {
    SessionConfig {
        send_queue_messages_max: 64,
        ..SessionConfig::new(name, policy)
    }
}

fn client_config(policy: Policy) -> SessionConfig {
    config(EntityName::client(7), policy)
}

fn osd_config(policy: Policy) -> SessionConfig {
    config(EntityName::osd(OsdId(3)), policy)
}

fn message(tid: u64) -> Message {
    Message::new(42, tid, 5, Bytes::from(tid.to_le_bytes().to_vec()))
}

/// Moves everything `from` wants to send into `to`.
fn transfer(now: Instant, from: &mut Session, to: &mut Session) -> Result<usize, SessionError> {
    let mut wire = Vec::new();
    let bytes = from.poll_transmit(&mut wire);
    for chunk in wire {
        to.handle_received(now, &chunk)?;
    }
    Ok(bytes)
}

fn pump(now: Instant, a: &mut Session, b: &mut Session) {
    loop {
        let moved = transfer(now, a, b).unwrap() + transfer(now, b, a).unwrap();
        if moved == 0 {
            return;
        }
    }
}

/// Takes every message event; panics on unexpected ones unless `lenient`.
fn delivered(session: &mut Session) -> Vec<Message> {
    let mut out = Vec::new();
    while let Some(event) = session.poll_event() {
        match event {
            SessionEvent::Message(message) => out.push(message),
            SessionEvent::Established { .. } | SessionEvent::Resumed => {}
            other => panic!("unexpected event {other:?}"),
        }
    }
    out
}

fn established_pair(policy: Policy, now: Instant) -> (Session, Session) {
    let mut client = Session::connect(client_config(policy), ShardIndex(2), now);
    let mut osd = Session::accept(osd_config(policy), now);
    let mut wire = Vec::new();
    client.poll_transmit(&mut wire);
    for chunk in wire.drain(..) {
        osd.handle_received(now, &chunk).unwrap();
    }
    if policy == Policy::Lossless {
        assert!(osd.resume_pending());
        assert!(matches!(
            osd.poll_event(),
            Some(SessionEvent::ResumeRequested { .. })
        ));
        osd.accept_new_session(now).unwrap();
    }
    pump(now, &mut client, &mut osd);
    assert!(client.is_established());
    assert!(osd.is_established());
    (client, osd)
}

#[test]
fn handshake_reports_names_shards_and_addresses() {
    let now = Instant::now();
    let mut client = Session::connect(client_config(Policy::Lossy), ShardIndex(2), now);
    let mut osd = Session::accept(osd_config(Policy::Lossy), now);
    let seen: SocketAddr = "10.0.0.9:4711".parse().unwrap();
    osd.set_addresses(None, Some(seen));
    pump(now, &mut client, &mut osd);
    assert_eq!(
        client.poll_event(),
        Some(SessionEvent::Established {
            peer: EntityName::osd(OsdId(3)),
            peer_shard: ShardIndex(2)
        })
    );
    assert_eq!(
        osd.poll_event(),
        Some(SessionEvent::Established {
            peer: EntityName::client(7),
            peer_shard: ShardIndex(2)
        })
    );
    assert_eq!(
        client.peer(),
        Some((EntityName::osd(OsdId(3)), ShardIndex(2)))
    );
    assert_eq!(client.addr_seen_by_peer(), Some(seen));
}

#[test]
fn thousand_messages_each_way_in_order() {
    for policy in [Policy::Lossy, Policy::Lossless] {
        let now = Instant::now();
        let (mut client, mut osd) = established_pair(policy, now);
        let mut got_osd = Vec::new();
        let mut got_client = Vec::new();
        for tid in 0..1000 {
            client.send(now, message(tid)).unwrap();
            osd.send(now, message(tid + 10_000)).unwrap();
            if tid % 37 == 0 {
                pump(now, &mut client, &mut osd);
                got_osd.extend(delivered(&mut osd));
                got_client.extend(delivered(&mut client));
            }
        }
        pump(now, &mut client, &mut osd);
        got_osd.extend(delivered(&mut osd));
        got_client.extend(delivered(&mut client));
        // Pending acknowledgements go out once their delay has passed.
        let later = now + ACK_DELAY_MAX;
        client.handle_timeout(later).unwrap();
        osd.handle_timeout(later).unwrap();
        pump(later, &mut client, &mut osd);
        let tids: Vec<u64> = got_osd.iter().map(|m| m.header.tid).collect();
        assert_eq!(tids, (0..1000).collect::<Vec<_>>());
        let seqs: Vec<u64> = got_client.iter().map(|m| m.header.seq).collect();
        assert_eq!(seqs, (1..=1000).collect::<Vec<_>>());
        assert_eq!(got_client[5].header.tid, 10_005);
        assert_eq!(got_client[5].header.sender_epoch, 5);
        // Lossless: everything was acknowledged, so nothing is retained.
        assert_eq!(client.queued_messages(), 0, "{policy:?}");
        assert_eq!(osd.queued_messages(), 0, "{policy:?}");
    }
}

#[test]
fn messages_sent_before_establishment_are_held() {
    let now = Instant::now();
    let mut client = Session::connect(client_config(Policy::Lossy), ShardIndex(0), now);
    let mut osd = Session::accept(osd_config(Policy::Lossy), now);
    client.send(now, message(1)).unwrap();
    // Nothing but the handshake leaves before the session is up.
    let mut wire = Vec::new();
    client.poll_transmit(&mut wire);
    assert!(!wire.is_empty());
    for chunk in wire.drain(..) {
        osd.handle_received(now, &chunk).unwrap();
    }
    assert!(delivered(&mut osd).is_empty());
    pump(now, &mut client, &mut osd);
    assert_eq!(delivered(&mut osd).len(), 1);
}

fn banner_with_version(version: u16) -> Bytes {
    Banner {
        protocol_version: version,
        ..Banner::ours()
    }
    .to_wire()
}

#[test]
fn newer_protocol_version_is_rejected_with_a_clear_error() {
    let now = Instant::now();
    let mut osd = Session::accept(osd_config(Policy::Lossy), now);
    let error = osd
        .handle_received(now, &banner_with_version(PROTOCOL_VERSION + 1))
        .unwrap_err();
    let text = error.to_string();
    assert!(text.contains("protocol v2, newer than our v1"), "{text}");
    assert!(osd.is_closed());
    assert!(matches!(
        osd.send(now, message(1)),
        Err(SessionError::Closed)
    ));
}

#[test]
fn fatal_errors_are_told_to_the_peer() {
    let now = Instant::now();
    let (mut client, mut osd) = established_pair(Policy::Lossy, now);
    // A handshake frame after establishment is a protocol violation.
    let mut bogus = BytesMut::new();
    crate::frame::encode_frame(
        &Frame::new(FrameTag::AuthDone, vec![Bytes::new()]),
        &mut bogus,
    );
    let error = osd.handle_received(now, &bogus).unwrap_err();
    assert!(
        matches!(error, SessionError::UnexpectedFrame { .. }),
        "{error}"
    );
    let error = transfer(now, &mut osd, &mut client).unwrap_err();
    match error {
        SessionError::PeerClosed { reason } => assert!(reason.contains("unexpected"), "{reason}"),
        other => panic!("{other}"),
    }
}

#[test]
fn close_reaches_the_peer() {
    let now = Instant::now();
    let (mut client, mut osd) = established_pair(Policy::Lossy, now);
    client.close("shutting down");
    assert!(client.is_closed());
    let error = transfer(now, &mut client, &mut osd).unwrap_err();
    assert!(error.to_string().contains("shutting down"));
}

#[test]
fn keepalives_and_peer_timeout() {
    let start = Instant::now();
    let (mut client, mut osd) = established_pair(Policy::Lossy, start);
    let interval = client.config().keepalive_interval;
    let timeout = client.config().keepalive_timeout;
    assert_eq!(client.poll_timeout(), Some(start + interval));
    let t1 = start + interval;
    client.handle_timeout(t1).unwrap();
    // The keepalive refreshes the OSD's view; its ack refreshes the client's.
    transfer(t1, &mut client, &mut osd).unwrap();
    transfer(t1, &mut osd, &mut client).unwrap();
    // Silence from the OSD past the timeout kills the client's session.
    let late = t1 + timeout;
    assert!(client.poll_timeout().unwrap() <= late);
    let mut now;
    let error = loop {
        now = client.poll_timeout().unwrap();
        if let Err(error) = client.handle_timeout(now) {
            break error;
        }
        let mut discard = Vec::new();
        client.poll_transmit(&mut discard);
    };
    assert!(
        matches!(error, SessionError::PeerTimedOut { .. }),
        "{error}"
    );
    assert_eq!(now, late);
    assert!(client.is_closed());
}

#[test]
fn handshake_timeout() {
    let now = Instant::now();
    let mut client = Session::connect(client_config(Policy::Lossy), ShardIndex(0), now);
    let deadline = client.poll_timeout().unwrap();
    assert_eq!(deadline, now + client.config().handshake_timeout);
    assert!(client
        .handle_timeout(deadline - Duration::from_millis(1))
        .is_ok());
    assert!(matches!(
        client.handle_timeout(deadline),
        Err(SessionError::HandshakeTimedOut { .. })
    ));
}

#[test]
fn send_queue_is_bounded() {
    let now = Instant::now();
    let mut client = Session::connect(client_config(Policy::Lossless), ShardIndex(0), now);
    for tid in 0..64 {
        client.send(now, message(tid)).unwrap();
    }
    assert!(!client.has_send_room());
    assert!(matches!(
        client.send(now, message(99)),
        Err(SessionError::QueueFull { messages: 64, .. })
    ));
    let huge = Message::new(1, 1, 1, Bytes::from(vec![0u8; 2048]))
        .with_data(Bytes::from(vec![0u8; client.config().max_frame_bytes]));
    assert!(matches!(
        client.send(now, huge),
        Err(SessionError::MessageTooLarge { .. })
    ));
}

#[test]
fn injected_handshake_failure() {
    let now = Instant::now();
    let faulty = SessionConfig {
        faults: FaultPlan {
            fail_at: Some(HandshakeStep::AuthRequest),
            ..FaultPlan::none()
        },
        ..osd_config(Policy::Lossy)
    };
    let mut client = Session::connect(client_config(Policy::Lossy), ShardIndex(0), now);
    let mut osd = Session::accept(faulty, now);
    let error = transfer(now, &mut client, &mut osd).unwrap_err();
    assert!(error.to_string().contains("AuthRequest"), "{error}");
    assert!(error.is_recoverable());
    assert!(osd.is_closed());
}

/// A preamble with a valid crc claiming a large frame, before the peer has said who
/// it is: refused from the preamble alone, with nothing reserved for it.
#[test]
fn large_frames_are_refused_before_the_handshake_completes() {
    let now = Instant::now();
    let mut osd = Session::accept(osd_config(Policy::Lossy), now);
    osd.handle_received(now, &Banner::ours().to_wire()).unwrap();
    let big = Bytes::from(vec![0u8; HANDSHAKE_FRAME_BYTES_MAX]);
    let mut wire = BytesMut::new();
    crate::frame::encode_frame(&Frame::new(FrameTag::Hello, vec![big]), &mut wire);
    let error = osd.handle_received(now, &wire[..24]).unwrap_err();
    assert!(
        matches!(
            error,
            SessionError::Frame(crate::FrameError::TooLarge { .. })
        ),
        "{error}"
    );
    assert!(osd.is_closed());
    assert!(osd.receive_buffer().capacity() < HANDSHAKE_FRAME_BYTES_MAX);
    // Once established, the configured limit applies.
    let (mut client, mut osd) = established_pair(Policy::Lossy, now);
    let payload = Bytes::from(vec![1u8; 2 * HANDSHAKE_FRAME_BYTES_MAX]);
    client.send(now, message(1).with_data(payload)).unwrap();
    transfer(now, &mut client, &mut osd).unwrap();
    let got = delivered(&mut osd);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].data.len(), 2 * HANDSHAKE_FRAME_BYTES_MAX);
}

proptest! {
    #[test]
    fn garbage_after_the_banner_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..300)) {
        let now = Instant::now();
        let mut osd = Session::accept(osd_config(Policy::Lossy), now);
        osd.handle_received(now, &Banner::ours().to_wire()).unwrap();
        let _ = osd.handle_received(now, &raw);
        let mut client = Session::connect(client_config(Policy::Lossless), ShardIndex(0), now);
        let _ = client.handle_received(now, &raw);
    }
}

/// The acceptor side of the in-memory lossless harness: the long-lived session, and
/// the fresh one handling the current connection's handshake, if any.
struct AcceptorSide {
    main: Option<Session>,
    fresh: Option<Session>,
    cookie: u64,
}

impl AcceptorSide {
    fn new_connection(&mut self, now: Instant) {
        if let Some(main) = &mut self.main {
            main.handle_transport_closed(now);
        }
        self.cookie += 1;
        let mut fresh = Session::accept(osd_config(Policy::Lossless), now);
        if self.main.is_none() {
            fresh.set_cookie(self.cookie);
        }
        self.fresh = Some(fresh);
    }

    /// Feeds bytes to whichever session owns the connection now.
    fn receive(&mut self, now: Instant, data: &[u8]) -> Result<(), SessionError> {
        let Some(fresh) = &mut self.fresh else {
            return self
                .main
                .as_mut()
                .expect("a session")
                .handle_received(now, data);
        };
        fresh.handle_received(now, data)?;
        if !fresh.resume_pending() {
            return Ok(());
        }
        let mut fresh = self.fresh.take().expect("fresh");
        assert!(matches!(
            fresh.poll_event(),
            Some(SessionEvent::ResumeRequested { .. })
        ));
        match &mut self.main {
            Some(main) => main.resume(now, &mut fresh),
            None => {
                fresh.accept_new_session(now)?;
                self.main = Some(fresh);
                Ok(())
            }
        }
    }

    fn transmit(&mut self, out: &mut Vec<Bytes>) {
        match (&mut self.fresh, &mut self.main) {
            (Some(fresh), _) => fresh.poll_transmit(out),
            (None, Some(main)) => main.poll_transmit(out),
            (None, None) => 0,
        };
    }
}

#[derive(Debug, Clone)]
enum Step {
    ClientSends(u8),
    OsdSends(u8),
    ClientToOsd(u16),
    OsdToClient(u16),
    Reset { osd_notices: bool },
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (1u8..8).prop_map(Step::ClientSends),
        3 => (1u8..8).prop_map(Step::OsdSends),
        4 => (1u16..400).prop_map(Step::ClientToOsd),
        4 => (1u16..400).prop_map(Step::OsdToClient),
        1 => any::<bool>().prop_map(|osd_notices| Step::Reset { osd_notices }),
    ]
}

/// The in-memory lossless world: both sides, bytes in flight, what each delivered.
struct World {
    now: Instant,
    client: Session,
    osd: AcceptorSide,
    to_osd: Vec<u8>,
    to_client: Vec<u8>,
    client_sent: u64,
    osd_sent: u64,
    client_got: Vec<u64>,
    osd_got: Vec<u64>,
    resets: usize,
}

impl World {
    fn new(client_faults: FaultPlan) -> Self {
        let now = Instant::now();
        let config = SessionConfig {
            faults: client_faults,
            ..client_config(Policy::Lossless)
        };
        let mut osd = AcceptorSide {
            main: None,
            fresh: None,
            cookie: 100,
        };
        osd.new_connection(now);
        World {
            now,
            client: Session::connect(config, ShardIndex(1), now),
            osd,
            to_osd: Vec::new(),
            to_client: Vec::new(),
            client_sent: 0,
            osd_sent: 0,
            client_got: Vec::new(),
            osd_got: Vec::new(),
            resets: 0,
        }
    }

    fn reset(&mut self, osd_notices: bool) {
        self.resets += 1;
        self.to_osd.clear();
        self.to_client.clear();
        self.client.handle_transport_closed(self.now);
        self.client.reconnect(self.now);
        if osd_notices || self.osd.main.is_none() {
            self.osd.new_connection(self.now);
        } else {
            // The acceptor has not noticed: its old session is still "established"
            // when the resume request arrives.
            let fresh = Session::accept(osd_config(Policy::Lossless), self.now);
            self.osd.fresh = Some(fresh);
        }
    }

    fn gather(&mut self) {
        let mut wire = Vec::new();
        self.client.poll_transmit(&mut wire);
        self.to_osd.extend(wire.drain(..).flat_map(|c| c.to_vec()));
        self.osd.transmit(&mut wire);
        self.to_client
            .extend(wire.drain(..).flat_map(|c| c.to_vec()));
    }

    fn collect(&mut self) {
        for message in delivered_lenient(&mut self.client) {
            self.client_got.push(message.header.tid);
        }
        if let Some(main) = &mut self.osd.main {
            for message in delivered_lenient(main) {
                self.osd_got.push(message.header.tid);
            }
        }
    }

    fn step(&mut self, step: &Step) {
        self.gather();
        let result = match *step {
            Step::ClientSends(count) => {
                for _ in 0..count {
                    if self.client.has_send_room() {
                        self.client
                            .send(self.now, message(self.client_sent))
                            .unwrap();
                        self.client_sent += 1;
                    }
                }
                Ok(())
            }
            Step::OsdSends(count) => {
                if let Some(main) = &mut self.osd.main {
                    for _ in 0..count {
                        if main.has_send_room() {
                            main.send(self.now, message(self.osd_sent)).unwrap();
                            self.osd_sent += 1;
                        }
                    }
                }
                Ok(())
            }
            Step::ClientToOsd(bytes) => {
                let take = (bytes as usize).min(self.to_osd.len());
                let chunk: Vec<u8> = self.to_osd.drain(..take).collect();
                self.osd.receive(self.now, &chunk)
            }
            Step::OsdToClient(bytes) => {
                let take = (bytes as usize).min(self.to_client.len());
                let chunk: Vec<u8> = self.to_client.drain(..take).collect();
                self.client.handle_received(self.now, &chunk)
            }
            Step::Reset { osd_notices } => {
                self.reset(osd_notices);
                Ok(())
            }
        };
        self.collect();
        if let Err(error) = result {
            assert!(error.is_recoverable(), "unexpected fatal error: {error}");
            self.reset(true);
        }
    }

    /// Runs without faults until nothing moves; checks exactly-once, in-order delivery.
    fn settle_and_check(&mut self) {
        for _ in 0..10_000 {
            self.gather();
            if self.to_osd.is_empty() && self.to_client.is_empty() {
                break;
            }
            self.step(&Step::ClientToOsd(u16::MAX));
            self.step(&Step::OsdToClient(u16::MAX));
        }
        assert!(self.client.is_established());
        assert_eq!(self.osd_got, (0..self.client_sent).collect::<Vec<_>>());
        assert_eq!(self.client_got, (0..self.osd_sent).collect::<Vec<_>>());
    }
}

fn delivered_lenient(session: &mut Session) -> Vec<Message> {
    let mut out = Vec::new();
    while let Some(event) = session.poll_event() {
        match event {
            SessionEvent::Message(message) => out.push(message),
            SessionEvent::PeerReset => panic!("the acceptor never loses state here"),
            _ => {}
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn lossless_exactly_once_in_order_under_random_resets(steps in proptest::collection::vec(arb_step(), 1..400)) {
        let mut world = World::new(FaultPlan::none());
        for step in &steps {
            world.step(step);
        }
        world.settle_and_check();
    }
}

#[test]
fn lossless_survives_thousands_of_injected_drops() {
    let mut world = World::new(FaultPlan {
        seed: 7,
        drop_probability: 0.05,
        ..FaultPlan::none()
    });
    let mut rng = 12345u64;
    for _ in 0..40_000 {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let pick = (rng >> 33) % 20;
        let size = ((rng >> 17) % 300 + 1) as u16;
        let step = match pick {
            0..=4 => Step::ClientSends(4),
            5..=9 => Step::OsdSends(4),
            10..=13 => Step::ClientToOsd(size),
            14..=18 => Step::OsdToClient(size),
            _ => Step::Reset {
                osd_notices: rng & 1 == 0,
            },
        };
        world.step(&step);
    }
    world.settle_and_check();
    assert!(world.resets > 1000, "{}", world.resets);
    assert!(world.osd_got.len() > 1000);
}

#[test]
fn lossless_connector_restarts_numbering_when_the_acceptor_lost_the_session() {
    let now = Instant::now();
    let (mut client, mut osd) = established_pair(Policy::Lossless, now);
    for tid in 0..3 {
        client.send(now, message(tid)).unwrap();
    }
    pump(now, &mut client, &mut osd);
    assert_eq!(delivered(&mut osd).len(), 3);
    client.send(now, message(3)).unwrap();
    // The acceptor restarts (new cookie, no memory); the connector reconnects.
    client.handle_transport_closed(now);
    assert!(client.is_disconnected());
    client.reconnect(now);
    let mut restarted = Session::accept(osd_config(Policy::Lossless), now);
    restarted.set_cookie(999);
    transfer(now, &mut client, &mut restarted).unwrap();
    assert!(matches!(
        restarted.poll_event(),
        Some(SessionEvent::ResumeRequested {
            server_cookie: 1,
            ..
        })
    ));
    restarted.accept_new_session(now).unwrap();
    pump(now, &mut client, &mut restarted);
    let mut events = Vec::new();
    while let Some(event) = client.poll_event() {
        events.push(event);
    }
    assert!(events.contains(&SessionEvent::PeerReset), "{events:?}");
    // Unacknowledged messages were renumbered from 1 and delivered to the new session.
    let got = delivered(&mut restarted);
    let tids: Vec<(u64, u64)> = got.iter().map(|m| (m.header.seq, m.header.tid)).collect();
    assert_eq!(tids, [(1, 0), (2, 1), (3, 2), (4, 3)]);
}

#[test]
fn injected_stall_holds_the_handshake_until_its_time() {
    let start = Instant::now();
    let stall_for = Duration::from_secs(2);
    let stalling = SessionConfig {
        faults: FaultPlan {
            stall_at: Some(HandshakeStep::AuthRequest),
            stall_for,
            ..FaultPlan::none()
        },
        ..osd_config(Policy::Lossy)
    };
    let mut client = Session::connect(client_config(Policy::Lossy), ShardIndex(0), start);
    let mut osd = Session::accept(stalling, start);
    pump(start, &mut client, &mut osd);
    assert!(!client.is_established());
    assert!(osd.peer().is_some(), "hello was processed before the stall");
    assert_eq!(osd.poll_timeout(), Some(start + stall_for));
    let later = start + stall_for;
    osd.handle_timeout(later).unwrap();
    pump(later, &mut client, &mut osd);
    assert!(client.is_established());
    assert!(osd.is_established());
}

/// A lossless receiver that sends nothing back still acknowledges large messages
/// before the ack timer, once `ACK_BYTES_PENDING_MAX` bytes are pending, so the
/// sender's replay queue (counted against its send queue) does not fill and stall it;
/// small messages keep waiting for a reply to ride on (or `ACKS_PENDING_MAX` of them).
#[test]
fn lossless_receivers_acknowledge_large_messages_without_waiting_for_the_timer() {
    let now = Instant::now();
    let (mut client, mut osd) = established_pair(Policy::Lossless, now);
    let big =
        |tid| Message::new(42, tid, 5, Bytes::new()).with_data(Bytes::from(vec![7u8; 1 << 20]));
    let per_ack = ACK_BYTES_PENDING_MAX as usize >> 20;
    for tid in 0..per_ack as u64 - 1 {
        client.send(now, big(tid)).unwrap();
    }
    pump(now, &mut client, &mut osd);
    assert_eq!(delivered(&mut osd).len(), per_ack - 1);
    assert_eq!(
        client.queued_messages(),
        per_ack - 1,
        "not yet acknowledged"
    );
    client.send(now, big(99)).unwrap();
    pump(now, &mut client, &mut osd);
    assert_eq!(delivered(&mut osd).len(), 1);
    assert_eq!(
        client.queued_messages(),
        0,
        "acknowledged with no timer and no reply"
    );
    // Small messages: no standalone ack before the count or the timer.
    for tid in 0..3 {
        client.send(now, message(tid)).unwrap();
    }
    pump(now, &mut client, &mut osd);
    assert_eq!(delivered(&mut osd).len(), 3);
    assert_eq!(client.queued_messages(), 3);
}
