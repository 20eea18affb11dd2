//! The scenario over the messenger, through either API.

use super::stats::window;
use super::{
    listen, runtime, Api, BenchError, LatencyRecorder, Measurement, Placement, Spec, ACK_BYTES,
    MSG_ACK, MSG_REQUEST,
};
use crate::config::SessionConfig;
use crate::message::Message;
use crate::tcp::{
    connect, connect_with, serve, serve_with, ConnId, ConnectionHandle, Dispatch, NetEvent, Outbox,
};
use bytes::Bytes;
use carmine_types::{EntityName, OsdId, ShardIndex};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

/// How long a run may take beyond its warmup and window before it is declared stuck.
const RUN_GRACE: Duration = Duration::from_secs(30);
/// Queue room beyond what the scenario keeps in flight (acks, keepalives).
const QUEUE_MESSAGES_SLACK: usize = 64;

pub(super) fn run(api: Api, spec: &Spec, placement: &Placement) -> Result<Measurement, BenchError> {
    let (listener, addr) = listen()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let (server_spec, server_placement) = (*spec, *placement);
    let server = std::thread::Builder::new()
        .name("bench-server".into())
        .spawn(move || -> std::io::Result<()> {
            server_placement.pin_server();
            runtime()?.block_on(async move {
                let listener = TcpListener::from_std(listener)?;
                let config = session_config(EntityName::osd(OsdId(0)), &server_spec);
                let task = match api {
                    Api::Dispatch => tokio::spawn(serve_with(listener, config, |_| {
                        Some(Acker {
                            ack: Bytes::from(vec![0u8; ACK_BYTES]),
                        })
                    })),
                    Api::Channel => tokio::spawn(channel_server(listener, config)),
                };
                let _ = stopped.await;
                task.abort();
                Ok(())
            })
        })?;
    let (client_spec, client_placement) = (*spec, *placement);
    let client = std::thread::Builder::new()
        .name("bench-client".into())
        .spawn(move || -> Result<Measurement, BenchError> {
            client_placement.pin_client();
            let runtime = runtime()?;
            // The work runs in a spawned task: a current-thread runtime polls
            // `block_on`'s own future only after checking for I/O.
            let task = runtime.spawn(clients(api, addr, client_spec));
            runtime
                .block_on(task)
                .map_err(|error| BenchError::Closed(format!("client task: {error}")))?
        })?;
    let result = client.join().expect("bench client thread panicked");
    let _ = stop.send(());
    server.join().expect("bench server thread panicked")?;
    result
}

fn session_config(name: EntityName, spec: &Spec) -> SessionConfig {
    // Requests share one payload buffer, so a deep queue of large messages costs
    // references, not copies.
    let in_flight_bytes = spec.depth * (spec.size_bytes + ACK_BYTES);
    let defaults = SessionConfig::new(name, spec.policy);
    SessionConfig {
        send_queue_messages_max: spec.depth * 2 + QUEUE_MESSAGES_SLACK,
        send_queue_bytes_max: defaults.send_queue_bytes_max.max(2 * in_flight_bytes),
        ..defaults
    }
}

/// Opens `spec.connections` connections, runs them to the end of one shared window,
/// and merges what they recorded.
async fn clients(api: Api, addr: SocketAddr, spec: Spec) -> Result<Measurement, BenchError> {
    let recorder = window(spec.warmup, spec.measure);
    let deadline = recorder.end() + RUN_GRACE;
    let mut tasks = Vec::with_capacity(spec.connections);
    for index in 0..spec.connections {
        let recorder = recorder.clone();
        let name = EntityName::client(index as u64 + 1);
        let config = session_config(name, &spec);
        tasks.push(tokio::spawn(async move {
            match api {
                Api::Dispatch => dispatch_client(addr, config, spec, recorder).await,
                Api::Channel => channel_client(addr, config, spec, recorder).await,
            }
        }));
    }
    let mut total: Option<LatencyRecorder> = None;
    for task in tasks {
        let joined = tokio::time::timeout_at(deadline.into(), task)
            .await
            .map_err(|_| BenchError::Closed("the run made no progress; timed out".into()))?;
        let recorded =
            joined.map_err(|error| BenchError::Closed(format!("client task: {error}")))??;
        match &mut total {
            None => total = Some(recorded),
            Some(total) => total.merge(recorded),
        }
    }
    Ok(total
        .expect("at least one connection")
        .finish(spec.size_bytes))
}

/// The server's dispatcher: one ack per request, queued on the connection's own task.
struct Acker {
    ack: Bytes,
}

impl Dispatch for Acker {
    fn on_message(&mut self, message: Message, out: &mut Outbox<'_>) {
        let reply = Message::new(MSG_ACK, message.header.tid, 0, self.ack.clone());
        if let Err(error) = out.send(reply) {
            tracing::warn!(conn_id = out.conn_id(), %error, "bench: ack not queued; closing");
            out.close();
        }
    }
}

/// The client's dispatcher: keeps `depth` requests in flight until the window ends.
struct Requester {
    payload: Bytes,
    depth: usize,
    next_tid: u64,
    sent_at: VecDeque<Instant>,
    recorder: Option<LatencyRecorder>,
    done: Option<oneshot::Sender<Result<LatencyRecorder, String>>>,
}

impl Requester {
    fn send_one(&mut self, out: &mut Outbox<'_>) {
        self.next_tid += 1;
        let request = Message::new(MSG_REQUEST, self.next_tid, 0, Bytes::new())
            .with_data(self.payload.clone());
        match out.send(request) {
            Ok(()) => self.sent_at.push_back(out.now()),
            Err(error) => {
                self.finish(Err(format!("request not queued: {error}")));
                out.close();
            }
        }
    }

    fn finish(&mut self, result: Result<LatencyRecorder, String>) {
        if let Some(done) = self.done.take() {
            let _ = done.send(result);
        }
    }
}

impl Dispatch for Requester {
    fn on_start(&mut self, out: &mut Outbox<'_>) {
        for _ in 0..self.depth {
            self.send_one(out);
        }
    }

    fn on_message(&mut self, _reply: Message, out: &mut Outbox<'_>) {
        let now = out.now();
        let Some(sent) = self.sent_at.pop_front() else {
            self.finish(Err("an ack for no request".into()));
            out.close();
            return;
        };
        let Some(recorder) = &mut self.recorder else {
            return;
        };
        recorder.record(sent, now);
        if now < recorder.end() {
            self.send_one(out);
        } else if self.sent_at.is_empty() {
            let recorder = self.recorder.take().expect("recorder");
            self.finish(Ok(recorder));
            out.close();
        }
    }

    fn on_closed(&mut self, reason: &str) {
        self.finish(Err(reason.to_string()));
    }
}

async fn dispatch_client(
    addr: SocketAddr,
    config: SessionConfig,
    spec: Spec,
    recorder: LatencyRecorder,
) -> Result<LatencyRecorder, BenchError> {
    let (done, finished) = oneshot::channel();
    let requester = Requester {
        payload: Bytes::from(vec![0x5a; spec.size_bytes]),
        depth: spec.depth,
        next_tid: 0,
        sent_at: VecDeque::with_capacity(spec.depth),
        recorder: Some(recorder),
        done: Some(done),
    };
    let _handle = connect_with(addr, config, ShardIndex(0), |_| requester).await?;
    match finished.await {
        Ok(Ok(recorder)) => Ok(recorder),
        Ok(Err(reason)) => Err(BenchError::Closed(reason)),
        Err(_) => Err(BenchError::Closed("the connection ended silently".into())),
    }
}

/// The `NetEvent` API: replies reach this task over the channel, requests go back
/// through the handle's queue.
async fn channel_client(
    addr: SocketAddr,
    config: SessionConfig,
    spec: Spec,
    mut recorder: LatencyRecorder,
) -> Result<LatencyRecorder, BenchError> {
    let (events, mut inbox) = mpsc::unbounded_channel();
    let handle = connect(addr, config, ShardIndex(0), events).await?;
    let payload = Bytes::from(vec![0x5a; spec.size_bytes]);
    let mut next_tid = 0;
    let mut send = |handle: &ConnectionHandle| {
        next_tid += 1;
        let request =
            Message::new(MSG_REQUEST, next_tid, 0, Bytes::new()).with_data(payload.clone());
        handle
            .send(request)
            .map_err(|error| BenchError::Closed(format!("request not queued: {error}")))
    };
    let mut sent_at = VecDeque::with_capacity(spec.depth);
    for _ in 0..spec.depth {
        send(&handle)?;
        sent_at.push_back(Instant::now());
    }
    while let Some(event) = inbox.recv().await {
        match event {
            NetEvent::Message { .. } => {
                let now = Instant::now();
                let sent = sent_at
                    .pop_front()
                    .ok_or_else(|| BenchError::Closed("an ack for no request".into()))?;
                recorder.record(sent, now);
                if now < recorder.end() {
                    send(&handle)?;
                    sent_at.push_back(now);
                } else if sent_at.is_empty() {
                    handle.close();
                    return Ok(recorder);
                }
            }
            NetEvent::Closed { reason, .. } => return Err(BenchError::Closed(reason)),
            _ => {}
        }
    }
    Err(BenchError::Closed("the event channel ended".into()))
}

/// The server's owner task for the `NetEvent` API, shaped like an OSD shard's loop.
async fn channel_server(listener: TcpListener, config: SessionConfig) {
    let (events, mut inbox) = mpsc::unbounded_channel();
    tokio::spawn(serve(listener, config, events));
    let ack = Bytes::from(vec![0u8; ACK_BYTES]);
    let mut handles: HashMap<ConnId, ConnectionHandle> = HashMap::new();
    while let Some(event) = inbox.recv().await {
        match event {
            NetEvent::Established { conn, .. } => {
                handles.insert(conn.id(), conn);
            }
            NetEvent::Message {
                conn_id, message, ..
            } => {
                let reply = Message::new(MSG_ACK, message.header.tid, 0, ack.clone());
                if let Some(handle) = handles.get(&conn_id) {
                    if let Err(error) = handle.send(reply) {
                        tracing::warn!(conn_id, %error, "bench: ack not queued; closing");
                        handle.close();
                    }
                }
            }
            NetEvent::Closed { conn_id, .. } => {
                handles.remove(&conn_id);
            }
        }
    }
}
