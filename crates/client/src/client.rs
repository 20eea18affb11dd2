//! The async client: one driver task owns the [`Objecter`], the monitor session and
//! one lossy session per OSD shard it talks to; [`Client`] handles send it requests.

use crate::objecter::{Objecter, ObjecterError, ObjecterOutput, OpSnaps, Target};
use crate::ClientError;
use carmine_clustermap::OsdMap;
use carmine_msgr::tcp::{connect, ConnId, ConnectionHandle, NetEvent};
use carmine_msgr::{Message, Policy, SessionConfig};
use carmine_proto::{
    Command, CommandOutput, MonCommand, MonGetMap, Msg, OpCode, OsdOp, OsdOpReply,
};
use carmine_types::{EntityName, Epoch, OsdId, PgId, PoolId, ShardIndex};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

/// How a client finds and talks to the cluster.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub mon_addrs: Vec<SocketAddr>,
    /// An op that gets no answer in this long fails with a timeout.
    pub op_timeout: Duration,
    /// How long `Client::connect` waits for the monitor and the first map.
    pub connect_timeout: Duration,
}

impl ClientConfig {
    pub fn new(mon_addrs: Vec<SocketAddr>) -> Self {
        Self {
            mon_addrs,
            op_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

type OpReplySender = oneshot::Sender<Result<OsdOpReply, ObjecterError>>;
type CommandReplySender = oneshot::Sender<Result<CommandOutput, ClientError>>;

/// An op request from a handle to the driver.
pub(crate) struct OpRequest {
    pub pool: PoolId,
    pub oid: String,
    pub list_pg: Option<PgId>,
    pub ops: Vec<OpCode>,
    pub flags: u32,
    pub pinned_osd: Option<OsdId>,
    pub snaps: OpSnaps,
}

pub(crate) enum Request {
    Op(OpRequest, OpReplySender),
    Command(Command, CommandReplySender),
}

enum Internal {
    Connected(Target, Result<ConnectionHandle, String>),
    MonConnected(Result<ConnectionHandle, String>),
}

enum OsdConn {
    Connecting(Vec<OsdOp>),
    Ready(ConnectionHandle),
}

/// A handle to a connected client; cheap to clone, usable from many tasks.
#[derive(Clone)]
pub struct Client {
    requests: mpsc::UnboundedSender<Request>,
    map: watch::Receiver<Option<Arc<OsdMap>>>,
    client_id: u64,
}

fn random_client_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    hasher.finish() >> 1
}

impl Client {
    /// Connects to the monitors and waits for the first map. Must be called inside a
    /// tokio runtime; the driver runs as a task of it.
    pub async fn connect(config: ClientConfig) -> Result<Client, ClientError> {
        if config.mon_addrs.is_empty() {
            return Err(ClientError::Config(
                "no monitor addresses configured".into(),
            ));
        }
        let client_id = random_client_id();
        let (requests, requests_rx) = mpsc::unbounded_channel();
        let (map_tx, mut map) = watch::channel(None);
        let timeout = config.connect_timeout;
        let driver = Driver::new(client_id, config, map_tx);
        tokio::spawn(driver.run(requests_rx));
        let ready = tokio::time::timeout(timeout, async {
            map.wait_for(|m| m.is_some()).await.map(|_| ())
        })
        .await;
        match ready {
            Ok(Ok(_)) => Ok(Client {
                requests,
                map,
                client_id,
            }),
            Ok(Err(_)) => Err(ClientError::Disconnected),
            Err(_) => Err(ClientError::MonUnreachable(timeout)),
        }
    }

    pub fn client_id(&self) -> u64 {
        self.client_id
    }

    /// The newest map the client holds.
    pub fn map(&self) -> Arc<OsdMap> {
        self.map
            .borrow()
            .clone()
            .expect("connect() returned only after the first map")
    }

    /// Waits until the client holds a map of at least `epoch`.
    pub async fn wait_for_epoch(&self, epoch: Epoch) -> Result<Arc<OsdMap>, ClientError> {
        let mut map = self.map.clone();
        let found = map
            .wait_for(|m| m.as_ref().is_some_and(|m| m.epoch >= epoch))
            .await
            .map_err(|_| ClientError::Disconnected)?;
        Ok(found.clone().expect("checked"))
    }

    pub(crate) async fn submit(&self, request: OpRequest) -> Result<OsdOpReply, ClientError> {
        let (reply_tx, reply_rx) = oneshot::channel();
        self.requests
            .send(Request::Op(request, reply_tx))
            .map_err(|_| ClientError::Disconnected)?;
        let reply = reply_rx.await.map_err(|_| ClientError::Disconnected)?;
        let reply = reply.map_err(ClientError::from)?;
        match &reply.result {
            Ok(()) => Ok(reply),
            Err(error) => Err(ClientError::Op(error.clone())),
        }
    }

    /// Sends an operator command to the monitor.
    pub async fn command(&self, command: Command) -> Result<CommandOutput, ClientError> {
        let (reply_tx, reply_rx) = oneshot::channel();
        self.requests
            .send(Request::Command(command, reply_tx))
            .map_err(|_| ClientError::Disconnected)?;
        reply_rx.await.map_err(|_| ClientError::Disconnected)?
    }
}

struct Driver {
    config: ClientConfig,
    objecter: Objecter,
    map_tx: watch::Sender<Option<Arc<OsdMap>>>,
    events_tx: mpsc::UnboundedSender<NetEvent>,
    events_rx: mpsc::UnboundedReceiver<NetEvent>,
    internal_tx: mpsc::UnboundedSender<Internal>,
    internal_rx: mpsc::UnboundedReceiver<Internal>,
    mon: Option<ConnectionHandle>,
    mon_connecting: bool,
    mon_hunt: crate::MonHunt,
    next_mon_attempt: Instant,
    osds: HashMap<Target, OsdConn>,
    conn_targets: HashMap<ConnId, Target>,
    op_waiters: HashMap<u64, OpReplySender>,
    next_command_tid: u64,
    queued_commands: Vec<(u64, Command)>,
    command_waiters: HashMap<u64, CommandReplySender>,
    name: EntityName,
}

const RETRY_INTERVAL: Duration = Duration::from_millis(100);

impl Driver {
    fn new(
        client_id: u64,
        config: ClientConfig,
        map_tx: watch::Sender<Option<Arc<OsdMap>>>,
    ) -> Self {
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let (internal_tx, internal_rx) = mpsc::unbounded_channel();
        let objecter = Objecter::new(client_id, config.op_timeout);
        Self {
            config,
            objecter,
            map_tx,
            events_tx,
            events_rx,
            internal_tx,
            internal_rx,
            mon: None,
            mon_connecting: false,
            mon_hunt: crate::MonHunt::new(),
            next_mon_attempt: Instant::now(),
            osds: HashMap::new(),
            conn_targets: HashMap::new(),
            op_waiters: HashMap::new(),
            next_command_tid: 1,
            queued_commands: Vec::new(),
            command_waiters: HashMap::new(),
            name: EntityName::client(client_id),
        }
    }

    fn session_config(&self) -> SessionConfig {
        let mut config = SessionConfig::new(self.name, Policy::Lossy);
        config.handshake_timeout = Duration::from_secs(3);
        config
    }

    async fn run(mut self, mut requests: mpsc::UnboundedReceiver<Request>) {
        let mut outputs = Vec::new();
        loop {
            self.ensure_mon();
            let deadline = self.next_deadline();
            tokio::select! {
                request = requests.recv() => match request {
                    Some(request) => self.handle_request(request, &mut outputs),
                    None => break,
                },
                Some(event) = self.events_rx.recv() => self.handle_event(event, &mut outputs),
                Some(internal) = self.internal_rx.recv() => self.handle_internal(internal, &mut outputs),
                _ = tokio::time::sleep_until(deadline.into()) => {
                    self.objecter.handle_timeout(Instant::now(), &mut outputs);
                }
            }
            self.carry_out(&mut outputs);
        }
        if let Some(mon) = &self.mon {
            mon.close();
        }
        for conn in self.osds.values() {
            if let OsdConn::Ready(handle) = conn {
                handle.close();
            }
        }
    }

    fn next_deadline(&self) -> Instant {
        let mut deadline = Instant::now() + Duration::from_secs(1);
        if let Some(at) = self.objecter.poll_timeout() {
            deadline = deadline.min(at);
        }
        if self.objecter.has_untargeted() {
            deadline = deadline.min(Instant::now() + RETRY_INTERVAL);
        }
        if self.mon.is_none() && !self.mon_connecting {
            deadline = deadline.min(self.next_mon_attempt);
        }
        deadline
    }

    fn ensure_mon(&mut self) {
        if self.mon.is_some() || self.mon_connecting || Instant::now() < self.next_mon_attempt {
            return;
        }
        self.mon_connecting = true;
        let addr = self.config.mon_addrs[self.mon_hunt.next_target(self.config.mon_addrs.len())];
        let config = self.session_config();
        let events = self.events_tx.clone();
        let internal = self.internal_tx.clone();
        tokio::spawn(async move {
            let result = connect(addr, config, ShardIndex(0), events).await;
            let result = result.map_err(|e| format!("monitor {addr}: {e}"));
            let _ = internal.send(Internal::MonConnected(result));
        });
    }

    fn handle_request(&mut self, request: Request, out: &mut Vec<ObjecterOutput>) {
        match request {
            Request::Op(op, reply) => {
                let mtime_ns = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0);
                let tid = self.objecter.submit_at(
                    Instant::now(),
                    op.pool,
                    op.oid,
                    op.list_pg,
                    op.ops,
                    op.flags,
                    mtime_ns,
                    op.pinned_osd,
                    op.snaps,
                    out,
                );
                self.op_waiters.insert(tid, reply);
            }
            Request::Command(command, reply) => {
                let tid = self.next_command_tid;
                self.next_command_tid += 1;
                self.command_waiters.insert(tid, reply);
                self.queued_commands.push((tid, command));
                self.flush_commands();
            }
        }
    }

    fn flush_commands(&mut self) {
        let Some(mon) = &self.mon else { return };
        for (tid, command) in std::mem::take(&mut self.queued_commands) {
            let msg = Msg::MonCommand(MonCommand { tid, command });
            let _ = mon.send(to_message(&msg, Epoch(0)));
        }
    }

    fn handle_internal(&mut self, internal: Internal, out: &mut Vec<ObjecterOutput>) {
        match internal {
            Internal::MonConnected(Ok(handle)) => {
                self.mon_connecting = false;
                let have = self.objecter.map().map(|m| m.epoch).unwrap_or(Epoch(0));
                let msg = Msg::MonGetMap(MonGetMap {
                    have,
                    subscribe: true,
                });
                let _ = handle.send(to_message(&msg, have));
                self.mon = Some(handle);
                self.flush_commands();
            }
            Internal::MonConnected(Err(error)) => {
                tracing::debug!("client: {error}");
                self.mon_connecting = false;
                self.next_mon_attempt = Instant::now() + Duration::from_millis(200);
            }
            Internal::Connected(target, Ok(handle)) => {
                let queued = match self.osds.insert(target, OsdConn::Ready(handle.clone())) {
                    Some(OsdConn::Connecting(queued)) => queued,
                    _ => Vec::new(),
                };
                self.conn_targets.insert(handle.id(), target);
                let epoch = self.objecter.map().map(|m| m.epoch).unwrap_or(Epoch(0));
                for op in queued {
                    let _ = handle.send(to_message(&Msg::OsdOp(op), epoch));
                }
            }
            Internal::Connected(target, Err(error)) => {
                tracing::debug!("client: {}: {error}", target.osd);
                self.osds.remove(&target);
                // Ops stay in flight and are retried on the next tick or map.
                self.objecter.handle_unreachable(target);
                let _ = out;
            }
        }
    }

    fn handle_event(&mut self, event: NetEvent, out: &mut Vec<ObjecterOutput>) {
        match event {
            NetEvent::Message {
                conn_id, message, ..
            } => {
                let msg =
                    match Msg::decode_parts(message.header.msg_type, message.front, message.data) {
                        Ok(msg) => msg,
                        Err(error) => {
                            tracing::warn!("client: dropping a malformed message: {error}");
                            return;
                        }
                    };
                self.handle_msg(conn_id, msg, out);
            }
            NetEvent::Closed {
                conn_id, reason, ..
            } => {
                if self.mon.as_ref().is_some_and(|m| m.id() == conn_id) {
                    tracing::debug!("client: monitor session closed: {reason}");
                    self.mon = None;
                    self.next_mon_attempt = Instant::now() + Duration::from_millis(100);
                } else if let Some(target) = self.conn_targets.remove(&conn_id) {
                    self.osds.remove(&target);
                    self.objecter.handle_reset(target, out);
                }
            }
            _ => {}
        }
    }

    fn handle_msg(&mut self, conn_id: ConnId, msg: Msg, out: &mut Vec<ObjecterOutput>) {
        match msg {
            Msg::OsdMap(update) => {
                // The objecter acts on the newest map only; the epochs between need
                // applying (incrementals build on each other) but not acting on.
                let step = update.advance(self.objecter.map());
                if let Some(newest) = step.maps.last() {
                    self.objecter.handle_map(newest.clone(), out);
                    self.map_tx.send_replace(Some(newest.clone()));
                }
                if let Some(have) = step.request {
                    tracing::debug!(
                        "client: asking the monitor for maps after e{}: {}",
                        have.0,
                        step.error.map_or_else(String::new, |e| e.to_string())
                    );
                    self.request_maps(have);
                }
            }
            Msg::OsdOpReply(reply) => self.objecter.handle_reply(reply, out),
            Msg::MonCommandReply(reply) => {
                if let Some(waiter) = self.command_waiters.remove(&reply.tid) {
                    let _ = waiter.send(reply.result.map_err(ClientError::Command));
                }
            }
            other => tracing::debug!(
                "client: unexpected message type {} on connection {conn_id}",
                other.msg_type()
            ),
        }
    }

    fn carry_out(&mut self, outputs: &mut Vec<ObjecterOutput>) {
        for output in outputs.drain(..) {
            match output {
                ObjecterOutput::Send(target, op) => self.send_op(target, op),
                ObjecterOutput::Complete(tid, result) => {
                    if let Some(waiter) = self.op_waiters.remove(&tid) {
                        let _ = waiter.send(result);
                    }
                }
                ObjecterOutput::NeedMap(_) => {
                    let have = self.objecter.map().map(|m| m.epoch).unwrap_or(Epoch(0));
                    self.request_maps(have);
                }
            }
        }
    }

    /// Asks the monitor for the maps after `have` (`Epoch(0)`: a full map).
    fn request_maps(&self, have: Epoch) {
        if let Some(mon) = &self.mon {
            let msg = Msg::MonGetMap(MonGetMap {
                have,
                subscribe: true,
            });
            let _ = mon.send(to_message(&msg, have));
        }
    }

    fn send_op(&mut self, target: Target, op: OsdOp) {
        let epoch = op.map_epoch;
        match self.osds.get_mut(&target) {
            Some(OsdConn::Ready(handle)) => {
                if handle.send(to_message(&Msg::OsdOp(op), epoch)).is_err() {
                    tracing::debug!("client: send to {} failed; will resend", target.osd);
                }
            }
            Some(OsdConn::Connecting(queued)) => queued.push(op),
            None => {
                self.osds.insert(target, OsdConn::Connecting(vec![op]));
                let config = self.session_config();
                let events = self.events_tx.clone();
                let internal = self.internal_tx.clone();
                tokio::spawn(async move {
                    let result = connect(target.addr, config, target.shard, events).await;
                    let result = result.map_err(|e| e.to_string());
                    let _ = internal.send(Internal::Connected(target, result));
                });
            }
        }
    }
}

/// Wraps a message for the messenger.
pub fn to_message(msg: &Msg, epoch: Epoch) -> Message {
    // A large payload rides in the data segment, by reference (no copy into the front).
    let (front, data) = msg.encode_parts();
    Message::new(msg.msg_type(), 0, epoch.0, front).with_data(data)
}
