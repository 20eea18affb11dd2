//! The client's data path: the [`Objecter`] and one lossy session per OSD shard, shared
//! by every [`crate::Client`] handle, the control-plane driver and the OSD connections'
//! tasks.
//!
//! An op takes one task hop each way. The caller's task submits it to the objecter and
//! queues the request on the OSD connection's handle; the connection's task writes it.
//! The reply is decoded on the connection's task (a [`Dispatch`], run to completion),
//! handed to the objecter, and completes the caller's oneshot from there. Before, a
//! request went through a driver task both ways (handle → driver → connection, and
//! connection → driver → caller): two more wake-ups per op.
//!
//! The state sits behind one mutex, held for the objecter's bookkeeping and for
//! queueing messages, never across an await. The handle is `Send` and used from any
//! task of any runtime, so a lock (uncontended on a current-thread runtime) is the
//! cheapest way to share it.

use crate::objecter::{Objecter, ObjecterError, ObjecterOutput, OpSnaps, Target};
use carmine_msgr::tcp::{connect_with, ConnId, ConnectionHandle, Dispatch, Outbox};
use carmine_msgr::{Message, SessionConfig};
use carmine_proto::{MonGetMap, Msg, OpCode, OsdOp, OsdOpReply};
use carmine_types::fast_hash::FastHashMap;
use carmine_types::{Epoch, OsdId, PgId, PoolId};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::oneshot;

pub(crate) type OpReplySender = oneshot::Sender<Result<OsdOpReply, ObjecterError>>;

/// An op request from a handle.
pub(crate) struct OpRequest {
    pub pool: PoolId,
    pub oid: String,
    pub list_pg: Option<PgId>,
    pub ops: Vec<OpCode>,
    pub flags: u32,
    pub pinned_osd: Option<OsdId>,
    pub snaps: OpSnaps,
}

enum OsdConn {
    /// Ops wait here while the session is being established.
    Connecting(Vec<OsdOp>),
    Ready(ConnectionHandle),
}

/// What every task of one client shares.
pub(crate) struct Shared {
    state: Mutex<State>,
    session_config: SessionConfig,
    /// The runtime `Client::connect` ran on: OSD sessions run there, whichever task
    /// (of whichever runtime) first needs them, so they live as long as the driver.
    runtime: tokio::runtime::Handle,
}

/// The objecter and everything that carries out its outputs.
pub(crate) struct State {
    pub objecter: Objecter,
    /// The monitor session (the driver opens and replaces it); maps are asked for on it.
    pub mon: Option<ConnectionHandle>,
    osds: FastHashMap<Target, OsdConn>,
    op_waiters: FastHashMap<u64, OpReplySender>,
    /// Set once the last handle is gone: no new connections, and every one open is
    /// closed.
    shut_down: bool,
    /// Reused for the objecter's outputs.
    outputs: Vec<ObjecterOutput>,
}

impl Shared {
    /// Must be called inside a tokio runtime (the client's).
    pub fn new(objecter: Objecter, session_config: SessionConfig) -> Arc<Shared> {
        Arc::new(Shared {
            state: Mutex::new(State {
                objecter,
                mon: None,
                osds: FastHashMap::default(),
                op_waiters: FastHashMap::default(),
                shut_down: false,
                outputs: Vec::new(),
            }),
            session_config,
            runtime: tokio::runtime::Handle::current(),
        })
    }

    pub fn session_config(&self) -> &SessionConfig {
        &self.session_config
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock is a bug in this crate; the state may be
        // half-updated, so nothing should go on with it.
        self.state.lock().expect("client state lock poisoned")
    }

    /// Starts an op; `reply` gets its result.
    pub fn submit(self: &Arc<Self>, op: OpRequest, reply: OpReplySender) {
        let mtime_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let now = Instant::now();
        let mut state = self.lock();
        let mut outputs = std::mem::take(&mut state.outputs);
        let tid = state.objecter.submit_at(
            now,
            op.pool,
            op.oid,
            op.list_pg,
            op.ops,
            op.flags,
            mtime_ns,
            op.pinned_osd,
            op.snaps,
            &mut outputs,
        );
        // Before the outputs: one of them may complete this op at once.
        let previous = state.op_waiters.insert(tid, reply);
        assert!(previous.is_none(), "tid {tid} submitted twice");
        state.carry_out(self, &mut outputs);
        state.outputs = outputs;
    }

    /// Opens a session to `target`; ops queued for it go out once it is established.
    async fn connect(self: Arc<Self>, target: Target) {
        let config = self.session_config.clone();
        let result = connect_with(target.addr, config, target.shard, |handle| {
            // Registered before the connection's task starts, so its `on_closed`
            // always finds the session in the map.
            self.lock().on_connected(target, handle);
            OsdDispatch {
                shared: self.clone(),
                target,
                conn_id: handle.id(),
                replies: Vec::new(),
            }
        })
        .await;
        if let Err(error) = result {
            tracing::debug!("client: {}: {error}", target.osd);
            self.lock().on_connect_failed(target);
        }
    }
}

impl State {
    /// Carries out the objecter's `outputs` (drained).
    pub fn carry_out(&mut self, shared: &Arc<Shared>, outputs: &mut Vec<ObjecterOutput>) {
        for output in outputs.drain(..) {
            match output {
                ObjecterOutput::Send(target, op) => self.send_op(shared, target, op),
                ObjecterOutput::Complete(tid, result) => {
                    if let Some(waiter) = self.op_waiters.remove(&tid) {
                        let _ = waiter.send(result);
                    }
                }
                ObjecterOutput::NeedMap(_) => {
                    let have = self.map_epoch();
                    self.request_maps(have);
                }
            }
        }
    }

    /// Runs `step` on the objecter and carries out what it asks for.
    pub fn with_objecter(
        &mut self,
        shared: &Arc<Shared>,
        step: impl FnOnce(&mut Objecter, &mut Vec<ObjecterOutput>),
    ) {
        let mut outputs = std::mem::take(&mut self.outputs);
        step(&mut self.objecter, &mut outputs);
        self.carry_out(shared, &mut outputs);
        self.outputs = outputs;
    }

    pub fn map_epoch(&self) -> Epoch {
        self.objecter.map().map(|m| m.epoch).unwrap_or(Epoch(0))
    }

    /// Asks the monitor for the maps after `have` (`Epoch(0)`: a full map).
    pub fn request_maps(&self, have: Epoch) {
        if let Some(mon) = &self.mon {
            let msg = Msg::MonGetMap(MonGetMap {
                have,
                subscribe: true,
            });
            let _ = mon.send(to_message(&msg, have));
        }
    }

    /// The last handle is gone: closes every session and refuses new ones. Ops still
    /// in flight are dropped (their callers are gone too).
    pub fn shut_down(&mut self) {
        self.shut_down = true;
        if let Some(mon) = self.mon.take() {
            mon.close();
        }
        for (_, conn) in self.osds.drain() {
            if let OsdConn::Ready(handle) = conn {
                handle.close();
            }
        }
        self.op_waiters.clear();
    }

    fn send_op(&mut self, shared: &Arc<Shared>, target: Target, op: OsdOp) {
        if self.shut_down {
            return;
        }
        match self.osds.get_mut(&target) {
            Some(OsdConn::Ready(handle)) => {
                let epoch = op.map_epoch;
                if handle.send(to_message(&Msg::OsdOp(op), epoch)).is_err() {
                    tracing::debug!("client: send to {} failed; will resend", target.osd);
                }
            }
            Some(OsdConn::Connecting(queued)) => queued.push(op),
            None => {
                self.osds.insert(target, OsdConn::Connecting(vec![op]));
                shared.runtime.spawn(shared.clone().connect(target));
            }
        }
    }

    fn on_connected(&mut self, target: Target, handle: &ConnectionHandle) {
        if self.shut_down {
            handle.close();
            return;
        }
        let queued = match self.osds.insert(target, OsdConn::Ready(handle.clone())) {
            Some(OsdConn::Connecting(queued)) => queued,
            _ => Vec::new(),
        };
        let epoch = self.map_epoch();
        for op in queued {
            let _ = handle.send(to_message(&Msg::OsdOp(op), epoch));
        }
    }

    fn on_connect_failed(&mut self, target: Target) {
        if matches!(self.osds.get(&target), Some(OsdConn::Connecting(_))) {
            self.osds.remove(&target);
        }
        // Ops stay in flight and are retried on the next tick or map.
        self.objecter.handle_unreachable(target);
    }

    /// The session `conn_id` to `target` closed: resend what was sent on it (over a new
    /// session).
    fn on_closed(&mut self, shared: &Arc<Shared>, target: Target, conn_id: ConnId) {
        let current = matches!(
            self.osds.get(&target),
            Some(OsdConn::Ready(handle)) if handle.id() == conn_id
        );
        if !current || self.shut_down {
            return;
        }
        self.osds.remove(&target);
        self.with_objecter(shared, |objecter, out| objecter.handle_reset(target, out));
    }
}

/// Runs on an OSD connection's task: hands replies to the objecter, which completes
/// the callers' oneshots from here. The replies of one turn (one read) are handed on
/// under one lock.
struct OsdDispatch {
    shared: Arc<Shared>,
    target: Target,
    conn_id: ConnId,
    replies: Vec<OsdOpReply>,
}

impl Dispatch for OsdDispatch {
    fn on_message(&mut self, message: Message, _out: &mut Outbox<'_>) {
        let msg = match Msg::decode_parts(message.header.msg_type, message.front, message.data) {
            Ok(msg) => msg,
            Err(error) => {
                tracing::warn!("client: dropping a malformed message: {error}");
                return;
            }
        };
        match msg {
            Msg::OsdOpReply(reply) => self.replies.push(reply),
            other => tracing::debug!(
                "client: unexpected message type {} from {}",
                other.msg_type(),
                self.target.osd
            ),
        }
    }

    fn on_turn_end(&mut self, _out: &mut Outbox<'_>) {
        if self.replies.is_empty() {
            return;
        }
        let replies = &mut self.replies;
        let from = self.target.osd;
        self.shared
            .lock()
            .with_objecter(&self.shared, |objecter, out| {
                for reply in replies.drain(..) {
                    objecter.handle_reply(from, reply, out);
                }
            });
    }

    fn on_closed(&mut self, reason: &str) {
        tracing::debug!("client: session to {} closed: {reason}", self.target.osd);
        self.shared
            .lock()
            .on_closed(&self.shared, self.target, self.conn_id);
    }
}

/// Wraps a message for the messenger.
pub fn to_message(msg: &Msg, epoch: Epoch) -> Message {
    // A large payload rides in the data segment, by reference (no copy into the front).
    let (front, data) = msg.encode_parts();
    Message::new(msg.msg_type(), 0, epoch.0, front).with_data(data)
}
