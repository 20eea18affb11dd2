//! `carmine mon`: the monitor daemon. One current-thread runtime drives the pure
//! [`Monitor`]: it accepts sessions, feeds messages and ticks in, persists each new
//! map (atomically, before anything that follows it is sent) and sends the rest.

use crate::files::write_atomically;
use crate::{from_message, to_message, DaemonError};
use carmine_clustermap::OsdMap;
use carmine_mon::{MonConfig, MonOutput, Monitor};
use carmine_msgr::tcp::{serve, ConnId, ConnectionHandle, NetEvent};
use carmine_msgr::{Policy, SessionConfig};
use carmine_types::encoding::{Decode, Encode};
use carmine_types::EntityName;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How to run a monitor.
#[derive(Debug, Clone)]
pub struct MonDaemonConfig {
    pub rank: u64,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    pub fsid: u128,
    /// OSD count of the CRUSH map a brand-new cluster starts with.
    pub initial_osd_count: u32,
    pub mon: MonConfig,
}

const MAP_FILE: &str = "osdmap";

fn load_or_create_map(config: &MonDaemonConfig) -> Result<OsdMap, DaemonError> {
    let path = config.data_dir.join(MAP_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => {
            let map = OsdMap::from_bytes(&bytes).map_err(|e| DaemonError::Corrupt {
                path: path.display().to_string(),
                detail: e.to_string(),
            })?;
            if map.fsid != config.fsid {
                return Err(DaemonError::Config(format!(
                    "{} belongs to cluster {:032x}, not {:032x}",
                    path.display(),
                    map.fsid,
                    config.fsid
                )));
            }
            tracing::info!(
                "mon: loaded map epoch {} from {}",
                map.epoch.0,
                path.display()
            );
            Ok(map)
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let mut map = OsdMap::new_dev(config.initial_osd_count);
            map.fsid = config.fsid;
            write_atomically(&path, &map.to_bytes())?;
            Ok(map)
        }
        Err(error) => Err(error.into()),
    }
}

/// Runs a monitor until the process is stopped.
pub fn run_monitor(config: MonDaemonConfig) -> Result<(), DaemonError> {
    std::fs::create_dir_all(&config.data_dir)?;
    let map = load_or_create_map(&config)?;
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
        tracing::info!("mon.{} listening on {}", config.rank, config.addr);
        let monitor = Monitor::new(map, config.mon.clone(), Instant::now());
        MonLoop::new(monitor, config).run(listener).await
    })
}

struct MonLoop {
    monitor: Monitor,
    config: MonDaemonConfig,
    conns: HashMap<ConnId, (ConnectionHandle, EntityName)>,
}

impl MonLoop {
    fn new(monitor: Monitor, config: MonDaemonConfig) -> Self {
        Self {
            monitor,
            config,
            conns: HashMap::new(),
        }
    }

    async fn run(mut self, listener: tokio::net::TcpListener) -> Result<(), DaemonError> {
        let (events_tx, mut events) = mpsc::unbounded_channel();
        let session = SessionConfig::new(EntityName::mon(self.config.rank), Policy::Lossy);
        tokio::spawn(serve(listener, session, events_tx));
        loop {
            let tick_at = self
                .monitor
                .poll_timeout()
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(1))
                .min(Instant::now() + Duration::from_secs(1));
            let outputs = tokio::select! {
                event = events.recv() => match event {
                    Some(event) => self.handle_event(event),
                    None => return Ok(()),
                },
                _ = tokio::time::sleep_until(tick_at.into()) => self.monitor.handle_tick(Instant::now()),
            };
            self.carry_out(outputs)?;
        }
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
                self.monitor.handle_disconnect(Instant::now(), conn_id)
            }
            _ => Vec::new(),
        }
    }

    fn carry_out(&mut self, outputs: Vec<MonOutput>) -> Result<(), DaemonError> {
        for output in outputs {
            match output {
                MonOutput::PersistMap(map) => {
                    let path = self.config.data_dir.join(MAP_FILE);
                    write_atomically(&path, &map.to_bytes())?;
                }
                MonOutput::Send(conn_id, msg) => {
                    let epoch = self.monitor.map().epoch;
                    if let Some((conn, peer)) = self.conns.get(&conn_id) {
                        if let Err(error) = conn.send(to_message(&msg, epoch)) {
                            tracing::warn!("mon: cannot send to {peer}: {error}");
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
