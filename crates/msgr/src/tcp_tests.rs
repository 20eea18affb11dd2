//! Tests of the TCP driver over 127.0.0.1.

use super::*;
use crate::fault::FaultPlan;
use carmine_types::OsdId;
use std::collections::HashMap;

fn osd_config() -> SessionConfig {
    SessionConfig::new(EntityName::osd(OsdId(1)), Policy::Lossy)
}

fn client_config(policy: Policy) -> SessionConfig {
    SessionConfig::new(EntityName::client(9), policy)
}

/// Serves on an ephemeral port and echoes every message back (same tid, msg_type + 1).
async fn echo_server(config: SessionConfig) -> (SocketAddr, mpsc::UnboundedReceiver<NetEvent>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (events, mut inbox) = mpsc::unbounded_channel();
    tokio::spawn(serve(listener, config, events));
    let (report, reported) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut handles: HashMap<ConnId, ConnectionHandle> = HashMap::new();
        while let Some(event) = inbox.recv().await {
            match &event {
                NetEvent::Established { conn, .. } => {
                    handles.insert(conn.id(), conn.clone());
                }
                NetEvent::Message {
                    conn_id, message, ..
                } => {
                    let mut reply = message.clone();
                    reply.header.msg_type += 1;
                    let handle = handles.get(conn_id).expect("message before established");
                    handle.send(reply).expect("echo queue");
                }
                NetEvent::Closed { conn_id, .. } => {
                    handles.remove(conn_id);
                }
            }
            if report.send(event).is_err() {
                return;
            }
        }
    });
    (addr, reported)
}

async fn next_message(events: &mut mpsc::UnboundedReceiver<NetEvent>) -> Message {
    loop {
        match events.recv().await.expect("events end") {
            NetEvent::Message { message, .. } => return message,
            NetEvent::Closed { reason, .. } => panic!("closed: {reason}"),
            _ => {}
        }
    }
}

#[tokio::test]
async fn lossy_exchange_and_close_seen_by_peer() {
    let (addr, mut server_events) = echo_server(osd_config()).await;
    let (events, mut client_events) = mpsc::unbounded_channel();
    let conn = connect(addr, client_config(Policy::Lossy), ShardIndex(3), events)
        .await
        .unwrap();
    assert_eq!(conn.peer(), EntityName::osd(OsdId(1)));
    assert_eq!(conn.peer_shard(), ShardIndex(3));
    for tid in 0..500u64 {
        let data = Bytes::from(vec![tid as u8; (tid as usize * 37) % 9000]);
        let message =
            Message::new(10, tid, 1, Bytes::from(tid.to_le_bytes().to_vec())).with_data(data);
        conn.send(message).unwrap();
    }
    for tid in 0..500u64 {
        let reply = next_message(&mut client_events).await;
        assert_eq!((reply.header.tid, reply.header.msg_type), (tid, 11));
        assert_eq!(reply.data.len(), (tid as usize * 37) % 9000);
        assert_eq!(reply.header.seq, tid + 1);
    }
    let server_conn_id = match server_events.recv().await.unwrap() {
        NetEvent::Established {
            conn,
            peer,
            peer_shard,
        } => {
            assert_eq!(peer, EntityName::client(9));
            assert_eq!(peer_shard, ShardIndex(3));
            conn.id()
        }
        other => panic!("{other:?}"),
    };
    conn.close();
    loop {
        match server_events.recv().await.unwrap() {
            NetEvent::Closed {
                conn_id,
                peer,
                reason,
            } => {
                assert_eq!(conn_id, server_conn_id);
                assert_eq!(peer, Some(EntityName::client(9)));
                assert!(reason.contains("closed by its owner"), "{reason}");
                break;
            }
            NetEvent::Message { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(
        client_events.recv().await,
        Some(NetEvent::Closed { .. })
    ));
    assert_eq!(
        conn.send(Message::new(1, 1, 1, Bytes::new())),
        Err(SendError::Closed)
    );
}

#[tokio::test]
async fn client_sees_closed_when_the_server_drops() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (events, mut server_events) = mpsc::unbounded_channel();
    let server = tokio::spawn(serve(listener, osd_config(), events));
    let (events, mut client_events) = mpsc::unbounded_channel();
    let conn = connect(addr, client_config(Policy::Lossy), ShardIndex(0), events)
        .await
        .unwrap();
    let Some(NetEvent::Established {
        conn: server_conn, ..
    }) = server_events.recv().await
    else {
        panic!("no established event");
    };
    server_conn
        .send(Message::new(5, 77, 1, Bytes::from_static(b"hi")))
        .unwrap();
    assert_eq!(next_message(&mut client_events).await.header.tid, 77);
    server_conn.close();
    server.abort();
    match client_events.recv().await {
        Some(NetEvent::Closed {
            conn_id, reason, ..
        }) => {
            assert_eq!(conn_id, conn.id());
            assert!(reason.contains("closed by its owner"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn connect_to_a_newer_protocol_fails_clearly() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let banner = crate::handshake::Banner {
            protocol_version: crate::handshake::PROTOCOL_VERSION + 1,
            ..crate::handshake::Banner::ours()
        };
        stream.writable().await.unwrap();
        stream.try_write(&banner.to_wire()).unwrap();
        // Keep the socket open until the client gives up.
        let mut sink = [0u8; 1024];
        loop {
            stream.readable().await.unwrap();
            match stream.try_read(&mut sink) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    });
    let (events, _client_events) = mpsc::unbounded_channel();
    let error = connect(addr, client_config(Policy::Lossy), ShardIndex(0), events)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("newer than our v1"), "{error}");
}

#[tokio::test]
async fn lossless_reconnects_and_replays_exactly_once() {
    let server_config = SessionConfig {
        faults: FaultPlan {
            drop_every_messages: 97,
            ..FaultPlan::none()
        },
        ..osd_config()
    };
    let (addr, mut server_events) = echo_server(server_config).await;
    let (events, mut client_events) = mpsc::unbounded_channel();
    let client = SessionConfig {
        faults: FaultPlan {
            seed: 3,
            drop_probability: 0.01,
            ..FaultPlan::none()
        },
        ..client_config(Policy::Lossless)
    };
    let conn = connect(addr, client, ShardIndex(0), events).await.unwrap();
    let total = 2000u64;
    let mut sent = 0;
    let mut received = 0;
    while received < total {
        while sent < total && sent < received + 64 {
            let message = Message::new(20, sent, 1, Bytes::from(vec![1u8; 100]));
            conn.send(message).unwrap();
            sent += 1;
        }
        let reply = next_message(&mut client_events).await;
        assert_eq!(
            reply.header.tid, received,
            "echo out of order or duplicated"
        );
        received += 1;
    }
    // The server saw each message once, in order, on one session.
    let mut server_tids = Vec::new();
    let mut established = 0;
    while server_tids.len() < total as usize {
        match server_events.recv().await.unwrap() {
            NetEvent::Message { message, .. } => server_tids.push(message.header.tid),
            NetEvent::Established { .. } => established += 1,
            NetEvent::Closed { reason, .. } => panic!("server closed: {reason}"),
        }
    }
    assert_eq!(server_tids, (0..total).collect::<Vec<_>>());
    assert_eq!(established, 1);
    conn.close();
}

#[tokio::test]
async fn injected_handshake_failure_fails_connect() {
    let (addr, _server_events) = echo_server(osd_config()).await;
    let (events, _client_events) = mpsc::unbounded_channel();
    let config = SessionConfig {
        faults: FaultPlan {
            fail_at: Some(crate::fault::HandshakeStep::HelloReply),
            ..FaultPlan::none()
        },
        ..client_config(Policy::Lossy)
    };
    let error = connect(addr, config, ShardIndex(0), events)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("HelloReply"), "{error}");
}

#[tokio::test]
async fn lossless_survives_faults_in_the_middle_of_reconnect_handshakes() {
    // The connector fails on receiving SessionReady six times: after the acceptor has
    // already resumed the session, so both sides must agree again on the next try.
    let (addr, mut server_events) = echo_server(osd_config()).await;
    let (events, mut client_events) = mpsc::unbounded_channel();
    let client = SessionConfig {
        faults: FaultPlan {
            drop_every_messages: 31,
            fail_at: Some(crate::fault::HandshakeStep::SessionReady),
            fail_at_times: 6,
            ..FaultPlan::none()
        },
        ..client_config(Policy::Lossless)
    };
    let conn = connect(addr, client, ShardIndex(0), events).await.unwrap();
    let total = 400u64;
    for tid in 0..total {
        conn.send(Message::new(20, tid, 1, Bytes::from_static(b"x")))
            .unwrap();
    }
    for tid in 0..total {
        assert_eq!(next_message(&mut client_events).await.header.tid, tid);
    }
    let mut server_tids = Vec::new();
    while server_tids.len() < total as usize {
        match server_events.recv().await.unwrap() {
            NetEvent::Message { message, .. } => server_tids.push(message.header.tid),
            NetEvent::Closed { reason, .. } => panic!("server closed: {reason}"),
            _ => {}
        }
    }
    assert_eq!(server_tids, (0..total).collect::<Vec<_>>());
}

#[tokio::test]
async fn stalled_acceptor_handshake_completes_after_the_stall() {
    let stalling = SessionConfig {
        faults: FaultPlan {
            stall_at: Some(crate::fault::HandshakeStep::SessionRequest),
            stall_for: Duration::from_millis(20),
            ..FaultPlan::none()
        },
        ..osd_config()
    };
    let (addr, _server_events) = echo_server(stalling).await;
    let (events, mut client_events) = mpsc::unbounded_channel();
    let started = Instant::now();
    let conn = connect(addr, client_config(Policy::Lossy), ShardIndex(0), events)
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(20));
    conn.send(Message::new(1, 5, 1, Bytes::new())).unwrap();
    assert_eq!(next_message(&mut client_events).await.header.tid, 5);
}

/// An idle connection stays up past the keepalive timeout: the timer fires turn after
/// turn and keepalives flow both ways (the driver polls its timer only when it can
/// matter, so this guards that it is never left unregistered).
#[tokio::test]
async fn idle_connections_keep_each_other_alive() {
    let quick = |config: SessionConfig| SessionConfig {
        keepalive_interval: Duration::from_millis(10),
        keepalive_timeout: Duration::from_millis(60),
        ..config
    };
    let (addr, mut server_events) = echo_server(quick(osd_config())).await;
    let (events, mut client_events) = mpsc::unbounded_channel();
    let conn = connect(
        addr,
        quick(client_config(Policy::Lossy)),
        ShardIndex(0),
        events,
    )
    .await
    .unwrap();
    for tid in 0..3 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        conn.send(Message::new(1, tid, 1, Bytes::new())).unwrap();
        assert_eq!(next_message(&mut client_events).await.header.tid, tid);
    }
    while let Ok(event) = server_events.try_recv() {
        assert!(!matches!(event, NetEvent::Closed { .. }), "{event:?}");
    }
}

/// The dispatch API: a server handler replies on the connection's own task, a client
/// handler keeps a few requests in flight; both see every message once, in order.
#[tokio::test]
async fn dispatchers_exchange_in_order() {
    struct Echo;
    impl Dispatch for Echo {
        fn on_message(&mut self, mut message: Message, out: &mut Outbox<'_>) {
            message.header.msg_type += 1;
            out.send(message).unwrap();
        }
    }
    struct Client {
        next: u64,
        seen: Vec<u64>,
        done: Option<oneshot::Sender<Vec<u64>>>,
    }
    impl Client {
        fn send_next(&mut self, out: &mut Outbox<'_>) {
            let data = Bytes::from(vec![self.next as u8; (self.next as usize * 131) % 5000]);
            out.send(Message::new(10, self.next, 1, Bytes::new()).with_data(data))
                .unwrap();
            self.next += 1;
        }
    }
    impl Dispatch for Client {
        fn on_start(&mut self, out: &mut Outbox<'_>) {
            for _ in 0..8 {
                self.send_next(out);
            }
        }
        fn on_message(&mut self, message: Message, out: &mut Outbox<'_>) {
            assert_eq!(message.header.msg_type, 11);
            assert_eq!(
                message.data.len(),
                (message.header.tid as usize * 131) % 5000
            );
            self.seen.push(message.header.tid);
            if self.next < 300 {
                self.send_next(out);
            } else if self.seen.len() == 300 {
                let _ = self.done.take().expect("done once").send(self.seen.clone());
                out.close();
            }
        }
    }
    for policy in [Policy::Lossy, Policy::Lossless] {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve_with(listener, osd_config(), |_| Some(Echo)));
        let (done, finished) = oneshot::channel();
        let client = Client {
            next: 0,
            seen: Vec::new(),
            done: Some(done),
        };
        let handle = connect_with(addr, client_config(policy), ShardIndex(0), |_| client)
            .await
            .unwrap();
        assert_eq!(finished.await.unwrap(), (0..300).collect::<Vec<_>>());
        assert!(handle.is_closed());
        server.abort();
    }
}

/// The local dispatch API: the dispatchers of every connection a listener accepts share
/// one `Rc<RefCell<_>>` (no lock, no `Send`), and each turn that delivered messages
/// ends with `on_turn_end`, whose sends still leave on that connection.
#[tokio::test]
async fn local_dispatchers_share_state_and_end_each_turn() {
    use std::cell::RefCell;
    use std::rc::Rc;
    #[derive(Default)]
    struct Counts {
        messages: u64,
        turns: u64,
    }
    struct Server {
        counts: Rc<RefCell<Counts>>,
        pending: Vec<Message>,
    }
    impl Dispatch for Server {
        fn on_message(&mut self, message: Message, _out: &mut Outbox<'_>) {
            self.counts.borrow_mut().messages += 1;
            self.pending.push(message);
        }
        fn on_turn_end(&mut self, out: &mut Outbox<'_>) {
            self.counts.borrow_mut().turns += 1;
            // Replies held until the turn ends, as an OSD holds them for its flush.
            for mut message in self.pending.drain(..) {
                message.header.msg_type += 1;
                out.send(message).unwrap();
            }
        }
    }
    struct Client {
        next: u64,
        seen: u64,
        done: Option<oneshot::Sender<u64>>,
    }
    impl Dispatch for Client {
        fn on_start(&mut self, out: &mut Outbox<'_>) {
            for _ in 0..4 {
                out.send(Message::new(10, self.next, 1, Bytes::new()))
                    .unwrap();
                self.next += 1;
            }
        }
        fn on_message(&mut self, message: Message, out: &mut Outbox<'_>) {
            assert_eq!(message.header.msg_type, 11);
            assert_eq!(message.header.tid, self.seen);
            self.seen += 1;
            if self.next < 100 {
                out.send(Message::new(10, self.next, 1, Bytes::new()))
                    .unwrap();
                self.next += 1;
            } else if self.seen == 100 {
                let _ = self.done.take().expect("done once").send(self.seen);
                out.close();
            }
        }
    }
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            let counts = Rc::new(RefCell::new(Counts::default()));
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let shared = counts.clone();
            let make = move |_: &ConnectionHandle| {
                Some(Server {
                    counts: shared.clone(),
                    pending: Vec::new(),
                })
            };
            let server = tokio::task::spawn_local(serve_local_with(listener, osd_config(), make));
            let mut finished = Vec::new();
            for policy in [Policy::Lossy, Policy::Lossless] {
                let (done, waiter) = oneshot::channel();
                let client = Client {
                    next: 0,
                    seen: 0,
                    done: Some(done),
                };
                connect_local_with(addr, client_config(policy), ShardIndex(0), |_| client)
                    .await
                    .unwrap();
                finished.push(waiter);
            }
            for waiter in finished {
                assert_eq!(waiter.await.unwrap(), 100);
            }
            let counts = counts.borrow();
            assert_eq!(counts.messages, 200, "both connections, one shared count");
            assert!(counts.turns >= 1 && counts.turns <= counts.messages);
            server.abort();
        })
        .await;
}
