//! The client's control plane: one task keeps the monitor session (hunting through
//! the monitors when it drops), applies the maps it sends to the shared objecter,
//! carries operator commands, and ticks the objecter's timers (op deadlines, retries of
//! ops without a target). Ops themselves never pass through it (`crate::sessions`).

use crate::client::{ClientConfig, CommandReplySender};
use crate::objecter::Objecter;
use crate::sessions::{to_message, Shared};
use crate::ClientError;
use carmine_clustermap::OsdMap;
use carmine_msgr::tcp::{connect, ConnId, ConnectionHandle, NetEvent};
use carmine_msgr::{Policy, SessionConfig};
use carmine_proto::{Command, MonCommand, MonGetMap, Msg};
use carmine_types::{EntityName, Epoch, ShardIndex};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// How often the driver looks at the objecter's timers while ops are in flight: ops
/// without a target are retried and late ops fail within this long.
const RETRY_INTERVAL: Duration = Duration::from_millis(100);
/// How often it looks when no op is in flight.
const IDLE_INTERVAL: Duration = Duration::from_secs(1);
/// Pause after a failed monitor connection attempt, and after a monitor session closed.
const MON_RETRY_AFTER_FAILURE: Duration = Duration::from_millis(200);
const MON_RETRY_AFTER_CLOSE: Duration = Duration::from_millis(100);

/// A request from a handle to the driver.
pub(crate) enum ControlRequest {
    Command(Command, CommandReplySender),
}

pub(crate) struct Driver {
    config: ClientConfig,
    shared: Arc<Shared>,
    map_tx: watch::Sender<Option<Arc<OsdMap>>>,
    events_tx: mpsc::UnboundedSender<NetEvent>,
    events_rx: mpsc::UnboundedReceiver<NetEvent>,
    mon_connected_tx: mpsc::UnboundedSender<Result<ConnectionHandle, String>>,
    mon_connected_rx: mpsc::UnboundedReceiver<Result<ConnectionHandle, String>>,
    /// The monitor session's id (the session itself lives in the shared state).
    mon_id: Option<ConnId>,
    mon_connecting: bool,
    mon_hunt: crate::MonHunt,
    next_mon_attempt: Instant,
    next_command_tid: u64,
    queued_commands: Vec<(u64, Command)>,
    command_waiters: HashMap<u64, CommandReplySender>,
}

impl Driver {
    pub fn new(
        client_id: u64,
        config: ClientConfig,
        map_tx: watch::Sender<Option<Arc<OsdMap>>>,
    ) -> Self {
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let (mon_connected_tx, mon_connected_rx) = mpsc::unbounded_channel();
        let objecter = Objecter::new(client_id, config.op_timeout);
        let mut session_config = SessionConfig::new(EntityName::client(client_id), Policy::Lossy);
        session_config.handshake_timeout = Duration::from_secs(3);
        Self {
            config,
            shared: Shared::new(objecter, session_config),
            map_tx,
            events_tx,
            events_rx,
            mon_connected_tx,
            mon_connected_rx,
            mon_id: None,
            mon_connecting: false,
            mon_hunt: crate::MonHunt::new(),
            next_mon_attempt: Instant::now(),
            next_command_tid: 1,
            queued_commands: Vec::new(),
            command_waiters: HashMap::new(),
        }
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Runs until every handle (every sender of `requests`) is gone, then closes the
    /// client's sessions.
    pub async fn run(mut self, mut requests: mpsc::UnboundedReceiver<ControlRequest>) {
        loop {
            self.ensure_mon();
            let deadline = self.next_deadline();
            tokio::select! {
                request = requests.recv() => match request {
                    Some(request) => self.handle_request(request),
                    None => break,
                },
                Some(event) = self.events_rx.recv() => self.handle_event(event),
                Some(result) = self.mon_connected_rx.recv() => self.handle_mon_connected(result),
                _ = tokio::time::sleep_until(deadline.into()) => self.tick(),
            }
        }
        self.shared.lock().shut_down();
    }

    fn next_deadline(&self) -> Instant {
        let now = Instant::now();
        let in_flight = self.shared.lock().objecter.in_flight();
        let mut deadline = now
            + if in_flight > 0 {
                RETRY_INTERVAL
            } else {
                IDLE_INTERVAL
            };
        if self.mon_id.is_none() && !self.mon_connecting {
            deadline = deadline.min(self.next_mon_attempt);
        }
        deadline
    }

    /// Fails ops past their deadline and retries ops without a target.
    fn tick(&mut self) {
        let now = Instant::now();
        let mut state = self.shared.lock();
        let due = state.objecter.poll_timeout().is_some_and(|at| at <= now)
            || state.objecter.has_untargeted();
        if due {
            state.with_objecter(&self.shared, |objecter, out| {
                objecter.handle_timeout(now, out)
            });
        }
    }

    fn ensure_mon(&mut self) {
        if self.mon_id.is_some() || self.mon_connecting || Instant::now() < self.next_mon_attempt {
            return;
        }
        self.mon_connecting = true;
        let addr = self.config.mon_addrs[self.mon_hunt.next_target(self.config.mon_addrs.len())];
        let config = self.shared.session_config().clone();
        let events = self.events_tx.clone();
        let connected = self.mon_connected_tx.clone();
        tokio::spawn(async move {
            let result = connect(addr, config, ShardIndex(0), events).await;
            let result = result.map_err(|e| format!("monitor {addr}: {e}"));
            let _ = connected.send(result);
        });
    }

    fn handle_request(&mut self, request: ControlRequest) {
        match request {
            ControlRequest::Command(command, reply) => {
                let tid = self.next_command_tid;
                self.next_command_tid += 1;
                self.command_waiters.insert(tid, reply);
                self.queued_commands.push((tid, command));
                self.flush_commands();
            }
        }
    }

    fn flush_commands(&mut self) {
        let state = self.shared.lock();
        let Some(mon) = &state.mon else { return };
        for (tid, command) in self.queued_commands.drain(..) {
            let msg = Msg::MonCommand(MonCommand { tid, command });
            let _ = mon.send(to_message(&msg, Epoch(0)));
        }
    }

    fn handle_mon_connected(&mut self, result: Result<ConnectionHandle, String>) {
        self.mon_connecting = false;
        match result {
            Ok(handle) => {
                let mut state = self.shared.lock();
                let have = state.map_epoch();
                let msg = Msg::MonGetMap(MonGetMap {
                    have,
                    subscribe: true,
                });
                let _ = handle.send(to_message(&msg, have));
                self.mon_id = Some(handle.id());
                state.mon = Some(handle);
                drop(state);
                self.flush_commands();
            }
            Err(error) => {
                tracing::debug!("client: {error}");
                self.next_mon_attempt = Instant::now() + MON_RETRY_AFTER_FAILURE;
            }
        }
    }

    fn handle_event(&mut self, event: NetEvent) {
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
                self.handle_msg(conn_id, msg);
            }
            NetEvent::Closed {
                conn_id, reason, ..
            } if self.mon_id == Some(conn_id) => {
                tracing::debug!("client: monitor session closed: {reason}");
                self.mon_id = None;
                self.shared.lock().mon = None;
                self.next_mon_attempt = Instant::now() + MON_RETRY_AFTER_CLOSE;
            }
            _ => {}
        }
    }

    fn handle_msg(&mut self, conn_id: ConnId, msg: Msg) {
        match msg {
            Msg::OsdMap(update) => {
                let mut state = self.shared.lock();
                // The objecter acts on the newest map only; the epochs between need
                // applying (incrementals build on each other) but not acting on.
                let step = update.advance(state.objecter.map());
                if let Some(newest) = step.maps.last() {
                    state.with_objecter(&self.shared, |objecter, out| {
                        objecter.handle_map(newest.clone(), out)
                    });
                    self.map_tx.send_replace(Some(newest.clone()));
                }
                if let Some(have) = step.request {
                    tracing::debug!(
                        "client: asking the monitor for maps after e{}: {}",
                        have.0,
                        step.error.map_or_else(String::new, |e| e.to_string())
                    );
                    state.request_maps(have);
                }
            }
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
}
