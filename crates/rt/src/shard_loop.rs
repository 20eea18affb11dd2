//! One OSD shard's event loop: its listener, its sessions, its [`OsdShard`]. Runs on
//! the shard's own thread and current-thread runtime; shares nothing mutable with other
//! shards (maps arrive as immutable snapshots, stats leave through a bounded queue).

use crate::peers::{PeerConnected, Peers};
use crate::{from_message, to_message};
use carmine_clustermap::settings::{SettingsReader, OSD_SCRUB_INTERVAL};
use carmine_clustermap::OsdMap;
use carmine_msgr::tcp::{serve, ConnId, ConnectionHandle, NetEvent};
use carmine_msgr::{Policy, SessionConfig};
use carmine_osd::{OsdShard, Output, ShardCounters};
use carmine_proto::{Msg, OsdPing, PgStat};
use carmine_store::{ObjectStore, StoreUsage};
use carmine_types::{EntityKind, EntityName, OsdId, ShardIndex};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Most queued events handled before the shard flushes its store and sends replies.
pub const EVENTS_PER_TURN_MAX: usize = 256;

/// How often a shard reports its stats to shard 0.
pub const SHARD_REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// How often a shard checks whether a deep-scrub step is due.
const SCRUB_TICK: Duration = Duration::from_millis(250);
/// Seconds between deep-scrub steps unless the map's `osd_scrub_interval` says
/// otherwise.
pub const SCRUB_INTERVAL_DEFAULT: Duration = Duration::from_secs(1);
/// Objects one deep-scrub step verifies: a slow sweep, so scrubbing costs client IO
/// little (about 16 objects a second per shard by default).
pub const SCRUB_OBJECTS_PER_STEP: usize = 16;

/// A shard's periodic report to shard 0.
#[derive(Debug, Clone)]
pub struct ShardReport {
    pub shard: ShardIndex,
    pub pgs: Vec<PgStat>,
    pub usage: StoreUsage,
    pub counters: ShardCounters,
    /// A PG has news for the monitor (a pg_temp request): send it now.
    pub urgent: bool,
}

pub struct ShardLoop<S: ObjectStore> {
    shard: OsdShard<S>,
    inbound: HashMap<ConnId, (ConnectionHandle, EntityName)>,
    peers: Peers,
    events_rx: mpsc::UnboundedReceiver<NetEvent>,
    events_tx: mpsc::UnboundedSender<NetEvent>,
    connected_rx: mpsc::UnboundedReceiver<PeerConnected>,
    map_rx: mpsc::Receiver<Arc<OsdMap>>,
    report_tx: mpsc::Sender<ShardReport>,
    outputs: Vec<Output>,
    settings: SettingsReader,
    last_scrub: Instant,
}

impl<S: ObjectStore> ShardLoop<S> {
    pub fn new(
        shard: OsdShard<S>,
        map_rx: mpsc::Receiver<Arc<OsdMap>>,
        report_tx: mpsc::Sender<ShardReport>,
    ) -> Self {
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let (connected_tx, connected_rx) = mpsc::unbounded_channel();
        let name = EntityName::osd(shard.whoami());
        let peer_session = SessionConfig::new(name, Policy::Lossless);
        Self {
            shard,
            inbound: HashMap::new(),
            peers: Peers::new(peer_session, events_tx.clone(), connected_tx),
            events_rx,
            events_tx,
            connected_rx,
            map_rx,
            report_tx,
            outputs: Vec::new(),
            settings: SettingsReader::default(),
            last_scrub: Instant::now(),
        }
    }

    /// A deep-scrub step when one is due (`osd_scrub_interval`, 0: never).
    fn maybe_scrub(&mut self) {
        let Some(map) = self.shard.map().cloned() else {
            return;
        };
        let interval =
            self.settings
                .seconds(&map.config, OSD_SCRUB_INTERVAL, SCRUB_INTERVAL_DEFAULT);
        for warning in self.settings.take_warnings() {
            tracing::warn!("{}: {warning}", self.shard.whoami());
        }
        if interval.is_zero() || self.last_scrub.elapsed() < interval {
            return;
        }
        self.last_scrub = Instant::now();
        self.shard
            .scrub_step(SCRUB_OBJECTS_PER_STEP, &mut self.outputs);
    }

    /// Serves `listener` until the map channel closes (the OSD is stopping).
    pub async fn run(mut self, listener: tokio::net::TcpListener) {
        let name = EntityName::osd(self.shard.whoami());
        let session = SessionConfig::new(name, Policy::Lossy);
        tokio::spawn(serve(listener, session, self.events_tx.clone()));
        let mut report = tokio::time::interval(SHARD_REPORT_INTERVAL);
        let mut scrub = tokio::time::interval(SCRUB_TICK);
        let mut tick = tokio::time::interval(carmine_osd::TICK_INTERVAL);
        self.shard.set_deferred_flush(true);
        self.shard.set_clock(Instant::now());
        loop {
            tokio::select! {
                Some(event) = self.events_rx.recv() => {
                    // The shard judges read leases by this time: a turn handles at
                    // most EVENTS_PER_TURN_MAX events, far shorter than a lease.
                    self.shard.set_clock(Instant::now());
                    self.handle_event(event);
                    // Run to completion: handle everything already queued, then make
                    // it durable with one flush (group commit) before replying.
                    for _ in 0..EVENTS_PER_TURN_MAX {
                        match self.events_rx.try_recv() {
                            Ok(event) => self.handle_event(event),
                            Err(_) => break,
                        }
                    }
                }
                Some(connected) = self.connected_rx.recv() => self.peers.handle_connected(connected),
                map = self.map_rx.recv() => match map {
                    Some(map) => {
                        self.shard.set_clock(Instant::now());
                        self.shard.handle_map(map, &mut self.outputs);
                    }
                    None => return,
                },
                _ = report.tick() => self.report(false),
                _ = scrub.tick() => {
                    self.shard.set_clock(Instant::now());
                    self.maybe_scrub();
                }
                _ = tick.tick() => self.shard.tick(Instant::now(), &mut self.outputs),
            }
            // Flushing completes writes and may run the reads behind them: with the
            // time now, not that of the last event (a lease may have lapsed since).
            self.shard.set_clock(Instant::now());
            self.shard.flush(&mut self.outputs);
            self.carry_out();
            if self.shard.take_report_urgent() {
                self.report(true);
            }
        }
    }

    fn report(&mut self, urgent: bool) {
        let report = ShardReport {
            shard: self.shard.index(),
            pgs: self.shard.pg_stats(),
            usage: self.shard.usage(),
            counters: self.shard.counters(),
            urgent,
        };
        // A full queue means shard 0 is behind; the next report supersedes this one.
        let _ = self.report_tx.try_send(report);
    }

    fn handle_event(&mut self, event: NetEvent) {
        match event {
            NetEvent::Established { conn, peer, .. } => {
                self.inbound.insert(conn.id(), (conn, peer));
            }
            NetEvent::Message {
                conn_id,
                peer,
                message,
            } => {
                let Some(msg) = from_message(message, &peer) else {
                    return;
                };
                self.handle_msg(conn_id, peer, msg);
            }
            NetEvent::Closed { conn_id, .. } => {
                if self.peers.owns(conn_id) {
                    self.peers.handle_closed(conn_id);
                } else {
                    self.inbound.remove(&conn_id);
                }
            }
            _ => {}
        }
    }

    fn handle_msg(&mut self, conn_id: ConnId, peer: EntityName, msg: Msg) {
        match (peer.kind, msg) {
            (EntityKind::Osd, Msg::OsdPing(ping)) => self.answer_ping(conn_id, &ping),
            (EntityKind::Client, Msg::OsdOp(op)) => {
                self.shard.handle_client_op(conn_id, op, &mut self.outputs)
            }
            (EntityKind::Osd, msg) => {
                let from = OsdId(peer.id as u32);
                self.shard.handle_peer_message(from, msg, &mut self.outputs)
            }
            (_, msg) => tracing::warn!(
                "osd: unexpected message type {} from {peer}",
                msg.msg_type()
            ),
        }
    }

    /// Echoes a heartbeat on the connection it came on (the pinger's own session).
    fn answer_ping(&mut self, conn_id: ConnId, ping: &OsdPing) {
        let epoch = self.shard.epoch();
        let Some(reply) = carmine_osd::heartbeat::reply_to(ping, epoch) else {
            return;
        };
        if let Some((conn, peer)) = self.inbound.get(&conn_id) {
            if let Err(error) = conn.send(to_message(&Msg::OsdPing(reply), epoch)) {
                tracing::debug!("heartbeat reply to {peer} not sent: {error}");
            }
        }
    }

    fn carry_out(&mut self) {
        if self.outputs.is_empty() {
            return;
        }
        let epoch = self.shard.epoch();
        let map = self.shard.map().cloned();
        for output in std::mem::take(&mut self.outputs) {
            match output {
                Output::Client(conn_id, msg) => {
                    if let Some((conn, peer)) = self.inbound.get(&conn_id) {
                        if let Err(error) = conn.send(to_message(&msg, epoch)) {
                            tracing::debug!("reply to {peer} not sent: {error}");
                        }
                    }
                }
                Output::Peer(osd, shard, msg) => {
                    let addr = map.as_ref().and_then(|map| {
                        let info = map.osd(osd).filter(|info| info.up)?;
                        info.shard_addrs.get(usize::from(shard.0)).copied()
                    });
                    match addr {
                        Some(addr) => self.peers.send((osd, shard), addr, to_message(&msg, epoch)),
                        None => tracing::debug!("{osd} is down or unknown; message dropped"),
                    }
                }
            }
        }
    }
}
