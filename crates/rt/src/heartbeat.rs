//! The heartbeat driver on shard 0: runs the pure [`HeartbeatTracker`] with real time,
//! sends its pings to shard 0 of each peer OSD and its failure reports to the monitor.
//!
//! Pings travel on sessions of their own (lossy: a lost ping is simply a ping not
//! answered), opened by this task to the peer's shard 0 listener, as Ceph keeps its
//! heartbeat connections apart from replication traffic: a ping never queues behind a
//! large push on the data session, so a busy peer is not mistaken for a dead one. The
//! peer's shard loop answers on the same connection (`ShardLoop` echoes the stamp), so
//! the replies come back here.

use crate::peers::{MakeDispatch, PeerConnected, Peers};
use crate::{from_message, to_message};
use carmine_clustermap::OsdMap;
use carmine_msgr::tcp::{ConnId, ConnectionHandle, Dispatch, Outbox};
use carmine_msgr::{Message, Policy, SessionConfig};
use carmine_osd::heartbeat::{HeartbeatAction, HeartbeatConfig, HeartbeatTracker};
use carmine_proto::Msg;
use carmine_types::{EntityKind, EntityName, Epoch, OsdId, ShardIndex};
use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// Something the heartbeat sessions produced.
pub enum HeartbeatEvent {
    Reply { peer: EntityName, message: Message },
    Closed(ConnId),
    Connected(PeerConnected),
}

/// Forwards what a heartbeat session receives to the heartbeat task (replies are
/// few, and the tracker lives on that task).
struct Forward {
    conn_id: ConnId,
    peer: EntityName,
    events: mpsc::UnboundedSender<HeartbeatEvent>,
}

impl Dispatch for Forward {
    fn on_message(&mut self, message: Message, out: &mut Outbox<'_>) {
        let reply = HeartbeatEvent::Reply {
            peer: self.peer,
            message,
        };
        if self.events.send(reply).is_err() {
            out.close();
        }
    }

    fn on_closed(&mut self, _reason: &str) {
        let _ = self.events.send(HeartbeatEvent::Closed(self.conn_id));
    }
}

pub struct Heartbeats {
    whoami: OsdId,
    tracker: HeartbeatTracker,
    peers: Peers,
    events_rx: mpsc::UnboundedReceiver<HeartbeatEvent>,
    connected_rx: mpsc::UnboundedReceiver<PeerConnected>,
    map: Option<Arc<OsdMap>>,
    /// Peers reported failed, to log a report once rather than at every repeat.
    reported: BTreeSet<OsdId>,
}

impl Heartbeats {
    pub fn new(whoami: OsdId, config: HeartbeatConfig) -> Self {
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let (connected_tx, connected_rx) = mpsc::unbounded_channel();
        let session = SessionConfig::new(EntityName::osd(whoami), Policy::Lossy);
        let make_dispatch: MakeDispatch = Rc::new(move |handle: &ConnectionHandle| {
            Box::new(Forward {
                conn_id: handle.id(),
                peer: handle.peer(),
                events: events_tx.clone(),
            }) as Box<dyn Dispatch>
        });
        Self {
            whoami,
            tracker: HeartbeatTracker::new(whoami, config, Instant::now()),
            peers: Peers::new(session, make_dispatch, connected_tx),
            events_rx,
            connected_rx,
            map: None,
            reported: BTreeSet::new(),
        }
    }

    /// When [`Self::tick`] is due.
    pub fn next_tick(&self) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.tracker.poll_timeout())
    }

    /// The next event of the heartbeat sessions (`None` never comes while `self` lives:
    /// it holds both senders through its `Peers`).
    pub async fn next_event(&mut self) -> Option<HeartbeatEvent> {
        tokio::select! {
            Some(event) = self.events_rx.recv() => Some(event),
            Some(connected) = self.connected_rx.recv() => Some(HeartbeatEvent::Connected(connected)),
            else => None,
        }
    }

    pub fn handle_event(&mut self, event: HeartbeatEvent, mon: &ConnectionHandle) {
        match event {
            HeartbeatEvent::Connected(connected) => self.peers.handle_connected(connected),
            HeartbeatEvent::Closed(conn_id) => self.peers.handle_closed(conn_id),
            HeartbeatEvent::Reply { peer, message } => {
                let Some(Msg::OsdPing(reply)) = from_message(message, &peer) else {
                    return;
                };
                let from = match (peer.kind, u32::try_from(peer.id)) {
                    (EntityKind::Osd, Ok(id)) => OsdId(id),
                    _ => return,
                };
                let actions = self.tracker.handle_reply(Instant::now(), from, &reply);
                self.carry_out(actions, mon);
            }
        }
    }

    pub fn tick(&mut self, mon: &ConnectionHandle) {
        let actions = self.tracker.handle_tick(Instant::now());
        self.carry_out(actions, mon);
    }

    pub fn handle_map(&mut self, map: Arc<OsdMap>, mon: &ConnectionHandle) {
        let actions = self.tracker.handle_map(Instant::now(), map.clone());
        for warning in self.tracker.take_warnings() {
            tracing::warn!("{}: config: {warning}", self.whoami);
        }
        self.map = Some(map);
        let tracker = &self.tracker;
        self.reported.retain(|&osd| tracker.is_reported(osd));
        self.carry_out(actions, mon);
    }

    fn carry_out(&mut self, actions: Vec<HeartbeatAction>, mon: &ConnectionHandle) {
        let Some(map) = self.map.clone() else {
            return;
        };
        let epoch = map.epoch;
        for action in actions {
            match action {
                HeartbeatAction::Ping(osd, ping) => {
                    let addr = map
                        .osd(osd)
                        .filter(|info| info.up)
                        .and_then(|info| info.shard_addrs.first().copied());
                    if let Some(addr) = addr {
                        let message = to_message(&Msg::OsdPing(ping), epoch);
                        self.peers.send((osd, ShardIndex(0)), addr, message);
                    }
                }
                HeartbeatAction::Report(report) => {
                    self.log_report(&report, epoch);
                    let _ = mon.send(to_message(&Msg::OsdFailure(report), epoch));
                }
            }
        }
    }

    fn log_report(&mut self, report: &carmine_proto::OsdFailure, epoch: Epoch) {
        let target = report.target;
        if report.alive {
            self.reported.remove(&target);
            tracing::info!(
                "{}: {target} answers again; withdrawing its failure report",
                self.whoami
            );
        } else if self.reported.insert(target) {
            tracing::warn!(
                "{}: {target} has not answered heartbeats for {:.1} s; reporting it failed (e{})",
                self.whoami,
                report.silent_for_ms as f64 / 1000.0,
                epoch.0
            );
        }
    }
}
