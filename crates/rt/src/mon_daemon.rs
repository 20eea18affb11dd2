//! `carmine mon`: the monitor daemon. One current-thread runtime drives the pure
//! [`Monitor`]: it accepts sessions, keeps one outgoing session to each peer monitor,
//! feeds messages and ticks in, writes the Raft store atomically (write, fsync, rename,
//! fsync the directory) **before** carrying out anything that follows it, and sends.

use crate::files::write_atomically;
use crate::{from_message, to_message, DaemonError};
use carmine_clustermap::OsdMap;
use carmine_mon::{MonConfig, MonOutput, MonStore, Monitor};
use carmine_msgr::tcp::{connect, serve, ConnId, ConnectionHandle, NetEvent};
use carmine_msgr::{Policy, SessionConfig};
use carmine_types::encoding::Decode;
use carmine_types::{EntityName, ShardIndex};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How to run a monitor.
#[derive(Debug, Clone)]
pub struct MonDaemonConfig {
    pub rank: u64,
    pub addr: SocketAddr,
    /// Every monitor of the group by rank (the monmap), this one included.
    pub monmap: BTreeMap<u64, SocketAddr>,
    pub data_dir: PathBuf,
    pub fsid: u128,
    /// OSD count of the CRUSH map a brand-new cluster starts with.
    pub initial_osd_count: u32,
    pub mon: MonConfig,
}

/// The Raft store: hard state, snapshot (the map) and log, rewritten whole.
const STORE_FILE: &str = "mon.store";
/// The map file of a single monitor from before Raft; adopted as the initial map.
const LEGACY_MAP_FILE: &str = "osdmap";
/// Pause before connecting to a peer monitor again.
const PEER_RETRY_INTERVAL: Duration = Duration::from_millis(300);

fn load_or_create_store(config: &MonDaemonConfig) -> Result<MonStore, DaemonError> {
    let path = config.data_dir.join(STORE_FILE);
    let corrupt = |detail: String| DaemonError::Corrupt {
        path: path.display().to_string(),
        detail,
    };
    match std::fs::read(&path) {
        Ok(bytes) => {
            let store = MonStore::from_bytes(&bytes).map_err(|e| corrupt(e.to_string()))?;
            let map = store.snapshot_map().map_err(|e| corrupt(e.to_string()))?;
            if map.fsid != config.fsid {
                return Err(DaemonError::Config(format!(
                    "{} belongs to cluster {:032x}, not {:032x}",
                    path.display(),
                    map.fsid,
                    config.fsid
                )));
            }
            tracing::info!(
                "mon.{}: loaded the store (snapshot e{}) from {}",
                config.rank,
                map.epoch.0,
                path.display()
            );
            Ok(store)
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let map = initial_map(config)?;
            let ranks: Vec<u64> = config.monmap.keys().copied().collect();
            let store = MonStore::bootstrap(&map, &ranks);
            write_atomically(&path, &store.to_bytes())?;
            Ok(store)
        }
        Err(error) => Err(error.into()),
    }
}

fn initial_map(config: &MonDaemonConfig) -> Result<OsdMap, DaemonError> {
    let legacy = config.data_dir.join(LEGACY_MAP_FILE);
    if config.monmap.len() == 1 {
        if let Ok(bytes) = std::fs::read(&legacy) {
            let map = OsdMap::from_bytes(&bytes).map_err(|e| DaemonError::Corrupt {
                path: legacy.display().to_string(),
                detail: e.to_string(),
            })?;
            if map.fsid == config.fsid {
                tracing::info!("mon.{}: adopting {}", config.rank, legacy.display());
                return Ok(map);
            }
        }
    }
    let mut map = OsdMap::new_dev(config.initial_osd_count);
    map.fsid = config.fsid;
    Ok(map)
}

/// Runs a monitor until the process is stopped.
pub fn run_monitor(config: MonDaemonConfig) -> Result<(), DaemonError> {
    if config.monmap.get(&config.rank) != Some(&config.addr) {
        return Err(DaemonError::Config(format!(
            "the monitor map {:?} does not list mon.{} at {}",
            config.monmap, config.rank, config.addr
        )));
    }
    std::fs::create_dir_all(&config.data_dir)?;
    let store = load_or_create_store(&config)?;
    let ranks: Vec<u64> = config.monmap.keys().copied().collect();
    let monitor = Monitor::open(
        config.rank,
        &ranks,
        store,
        config.mon.clone(),
        Instant::now(),
    )
    .map_err(|e| DaemonError::Config(format!("mon.{}: {e}", config.rank)))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(config.addr)
            .await
            .map_err(|source| DaemonError::Bind {
                addr: config.addr,
                source,
            })?;
        tracing::info!(
            "mon.{} listening on {} ({} monitors)",
            config.rank,
            config.addr,
            config.monmap.len()
        );
        MonLoop::new(monitor, config).run(listener).await
    })
}

/// The outgoing session to one peer monitor.
#[derive(Default)]
struct PeerLink {
    conn: Option<ConnId>,
    connecting: bool,
    next_attempt: Option<Instant>,
}

struct MonLoop {
    monitor: Monitor,
    config: MonDaemonConfig,
    conns: HashMap<ConnId, (ConnectionHandle, EntityName)>,
    peers: BTreeMap<u64, PeerLink>,
    events_tx: mpsc::UnboundedSender<NetEvent>,
    events: mpsc::UnboundedReceiver<NetEvent>,
    connected_tx: mpsc::UnboundedSender<(u64, Option<ConnectionHandle>)>,
    connected: mpsc::UnboundedReceiver<(u64, Option<ConnectionHandle>)>,
}

impl MonLoop {
    fn new(monitor: Monitor, config: MonDaemonConfig) -> Self {
        let (events_tx, events) = mpsc::unbounded_channel();
        let (connected_tx, connected) = mpsc::unbounded_channel();
        let peers = config
            .monmap
            .keys()
            .filter(|&&rank| rank != config.rank)
            .map(|&rank| (rank, PeerLink::default()))
            .collect();
        Self {
            monitor,
            config,
            conns: HashMap::new(),
            peers,
            events_tx,
            events,
            connected_tx,
            connected,
        }
    }

    fn session(&self) -> SessionConfig {
        let mut session = SessionConfig::new(EntityName::mon(self.config.rank), Policy::Lossy);
        session.handshake_timeout = Duration::from_secs(2);
        session
    }

    async fn run(mut self, listener: tokio::net::TcpListener) -> Result<(), DaemonError> {
        tokio::spawn(serve(listener, self.session(), self.events_tx.clone()));
        loop {
            self.connect_peers();
            let tick_at = self
                .monitor
                .poll_timeout()
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(1))
                .min(Instant::now() + Duration::from_secs(1));
            let outputs = tokio::select! {
                event = self.events.recv() => match event {
                    Some(event) => self.handle_event(event),
                    None => return Ok(()),
                },
                Some((rank, handle)) = self.connected.recv() => self.handle_connected(rank, handle),
                _ = tokio::time::sleep_until(tick_at.into()) => self.monitor.handle_tick(Instant::now()),
            };
            self.carry_out(outputs)?;
        }
    }

    fn connect_peers(&mut self) {
        let now = Instant::now();
        let session = self.session();
        for (&rank, link) in &mut self.peers {
            let due = link.next_attempt.filter(|&at| now < at).is_none();
            if link.conn.is_some() || link.connecting || !due {
                continue;
            }
            link.connecting = true;
            let addr = self.config.monmap[&rank];
            let session = session.clone();
            let events = self.events_tx.clone();
            let connected = self.connected_tx.clone();
            tokio::spawn(async move {
                let handle = match connect(addr, session, ShardIndex(0), events).await {
                    Ok(handle) => Some(handle),
                    Err(error) => {
                        tracing::debug!("mon: peer mon.{rank} at {addr}: {error}");
                        None
                    }
                };
                let _ = connected.send((rank, handle));
            });
        }
    }

    fn handle_connected(&mut self, rank: u64, handle: Option<ConnectionHandle>) -> Vec<MonOutput> {
        let link = self.peers.get_mut(&rank).expect("a configured peer");
        link.connecting = false;
        match handle {
            Some(handle) => {
                tracing::info!("mon.{}: connected to mon.{rank}", self.config.rank);
                link.conn = Some(handle.id());
                self.monitor.handle_peer_connected(rank, handle.id());
                self.conns
                    .insert(handle.id(), (handle, EntityName::mon(rank)));
            }
            None => link.next_attempt = Some(Instant::now() + PEER_RETRY_INTERVAL),
        }
        Vec::new()
    }

    fn handle_event(&mut self, event: NetEvent) -> Vec<MonOutput> {
        match event {
            NetEvent::Established { conn, peer, .. } => {
                self.conns.insert(conn.id(), (conn, peer));
                Vec::new()
            }
            NetEvent::Message {
                conn_id,
                peer,
                message,
            } => match from_message(message, &peer) {
                Some(msg) => self
                    .monitor
                    .handle_message(Instant::now(), conn_id, peer, msg),
                None => Vec::new(),
            },
            NetEvent::Closed { conn_id, .. } => {
                self.conns.remove(&conn_id);
                for link in self.peers.values_mut() {
                    if link.conn == Some(conn_id) {
                        link.conn = None;
                        link.next_attempt = Some(Instant::now() + PEER_RETRY_INTERVAL);
                    }
                }
                self.monitor.handle_disconnect(Instant::now(), conn_id)
            }
            _ => Vec::new(),
        }
    }

    fn carry_out(&mut self, outputs: Vec<MonOutput>) -> Result<(), DaemonError> {
        if let Some(image) = self.monitor.take_store() {
            write_atomically(&self.config.data_dir.join(STORE_FILE), &image)?;
        }
        let epoch = self.monitor.map().epoch;
        for output in outputs {
            match output {
                MonOutput::PersistMap(map) => {
                    tracing::debug!("mon.{}: applied e{}", self.config.rank, map.epoch.0);
                }
                MonOutput::Send(conn_id, msg) => {
                    if let Some((conn, peer)) = self.conns.get(&conn_id) {
                        if let Err(error) = conn.send(to_message(&msg, epoch)) {
                            tracing::debug!("mon: cannot send to {peer}: {error}");
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
