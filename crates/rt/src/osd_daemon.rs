//! `carmine osd`: an OSD process of `S` shards.
//!
//! Each shard is one OS thread (pinned to a CPU when there are enough) running a
//! current-thread runtime and `LocalSet` with its own listener, store and PGs
//! (`shard_loop::ShardLoop`). Shard 0
//! also runs the OSD-global task: the monitor session (boot, map subscription, stats),
//! the distribution of each map epoch to every shard as an `Arc<OsdMap>`, and the
//! heartbeats (module `heartbeat`).

use crate::heartbeat::Heartbeats;
use crate::shard_loop::{ShardLoop, ShardReport, SHARD_REPORT_INTERVAL};
use crate::{from_message, to_message, DaemonError};
use carmine_clustermap::OsdMap;
use carmine_msgr::tcp::{connect, ConnectionHandle, NetEvent};
use carmine_msgr::{Policy, SessionConfig};
use carmine_osd::heartbeat::HeartbeatConfig;
use carmine_osd::OsdShard;
use carmine_proto::{MonGetMap, Msg, OsdBoot, OsdMapMsg, OsdStats};
use carmine_store::logstore::shard_device_path;
use carmine_store::{FileDevice, LogStore, LogStoreConfig, MemStore};
use carmine_types::{EntityName, Epoch, OsdId, ShardIndex};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Which object store backs the OSD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// In memory: fast, and lost when the process stops. `capacity_bytes` per shard
    /// (Ceph's `memstore_device_bytes`): past it the store refuses writes with
    /// `NoSpace`, and the OSD's usage reports let the monitor mark it nearfull and
    /// full first; `None`, unbounded (the process grows until the machine's memory
    /// runs out).
    Mem { capacity_bytes: Option<u64> },
    /// `LogStore`: one log-structured device file per shard under the data directory
    /// (`logstore.shardN`, created with `size_bytes`); survives restarts and crashes.
    Log { size_bytes: u64 },
}

/// How to run an OSD.
#[derive(Debug, Clone)]
pub struct OsdDaemonConfig {
    pub id: OsdId,
    pub fsid: u128,
    pub mon_addrs: Vec<SocketAddr>,
    pub bind_ip: IpAddr,
    /// Shard `i` listens on `base_port + i`; 0 picks free ports.
    pub base_port: u16,
    pub shard_count: u16,
    pub data_dir: PathBuf,
    pub store: StoreKind,
    /// The CRUSH host this OSD sits in.
    pub host: String,
    pub pin_threads: bool,
    /// Shard `i` is pinned to CPU `(first_cpu + i) % cpus`, so that several OSDs on
    /// one machine (a dev cluster) do not all pile onto CPU 0.
    pub first_cpu: usize,
    /// How long a shard polls its sockets before it sleeps
    /// ([`carmine_msgr::idle_poll`]); zero: never.
    pub idle_poll: Duration,
    /// Heartbeat timing (the map's config keys override it).
    pub heartbeat: HeartbeatConfig,
}

/// Reports queued from the shards to shard 0.
const SHARD_REPORTS_QUEUED_MAX: usize = 64;
/// Map epochs queued for one shard.
const MAPS_QUEUED_MAX: usize = 4096;

fn bind_listeners(config: &OsdDaemonConfig) -> Result<Vec<std::net::TcpListener>, DaemonError> {
    (0..config.shard_count)
        .map(|index| {
            let port = if config.base_port == 0 {
                0
            } else {
                config.base_port.checked_add(index).ok_or_else(|| {
                    DaemonError::Config(format!("port {} + {index} overflows", config.base_port))
                })?
            };
            let addr = SocketAddr::new(config.bind_ip, port);
            let listener = std::net::TcpListener::bind(addr)
                .map_err(|source| DaemonError::Bind { addr, source })?;
            listener.set_nonblocking(true)?;
            Ok(listener)
        })
        .collect()
}

/// Runs the OSD until the process is stopped.
pub fn run_osd(config: OsdDaemonConfig) -> Result<(), DaemonError> {
    if config.shard_count == 0 {
        return Err(DaemonError::Config(
            "an OSD needs at least one shard".into(),
        ));
    }
    if config.mon_addrs.is_empty() {
        return Err(DaemonError::Config(
            "no monitor addresses configured".into(),
        ));
    }
    // Before any thread starts: large write buffers are reused, not faulted in again.
    let malloc_setup = crate::malloc::keep_freed_memory();
    tracing::info!("{} malloc: {malloc_setup:?}", config.id);
    std::fs::create_dir_all(&config.data_dir)?;
    let listeners = bind_listeners(&config)?;
    let shard_addrs: Vec<SocketAddr> = listeners
        .iter()
        .map(|l| l.local_addr())
        .collect::<Result<_, _>>()?;
    tracing::info!("{} shards listening on {shard_addrs:?}", config.id);
    // Every shard gets every epoch, in order: a PG must see each interval change.
    let (map_txs, map_rxs): (Vec<_>, Vec<_>) = (0..config.shard_count)
        .map(|_| mpsc::channel::<Arc<OsdMap>>(MAPS_QUEUED_MAX))
        .unzip();
    let mut map_rxs = map_rxs.into_iter();
    let shard0_map_rx = map_rxs.next().expect("at least one shard");
    let (report_tx, report_rx) = mpsc::channel(SHARD_REPORTS_QUEUED_MAX);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut threads = Vec::new();
    let mut listeners = listeners.into_iter();
    let shard0_listener = listeners.next().expect("at least one shard");
    for (offset, (listener, map_rx)) in listeners.zip(map_rxs).enumerate() {
        let index = ShardIndex(offset as u16 + 1);
        let report_tx = report_tx.clone();
        let config = config.clone();
        let pin = config.pin_threads && usize::from(config.shard_count) <= cpus;
        let thread = std::thread::Builder::new()
            .name(format!("{}-shard{}", config.id, index.0))
            .spawn(move || {
                if pin {
                    pin_current_thread((config.first_cpu + usize::from(index.0)) % cpus);
                }
                run_shard(&config, index, listener, map_rx, report_tx, None)
            })?;
        threads.push(thread);
    }
    if config.pin_threads && usize::from(config.shard_count) <= cpus {
        pin_current_thread(config.first_cpu % cpus);
    }
    let global = Some((shard_addrs, map_txs, report_rx));
    let result = run_shard(
        &config,
        ShardIndex(0),
        shard0_listener,
        shard0_map_rx,
        report_tx,
        global,
    );
    for thread in threads {
        let _ = thread.join();
    }
    result
}

type Global = (
    Vec<SocketAddr>,
    Vec<mpsc::Sender<Arc<OsdMap>>>,
    mpsc::Receiver<ShardReport>,
);

fn run_shard(
    config: &OsdDaemonConfig,
    index: ShardIndex,
    listener: std::net::TcpListener,
    map_rx: mpsc::Receiver<Arc<OsdMap>>,
    report_tx: mpsc::Sender<ShardReport>,
    global: Option<Global>,
) -> Result<(), DaemonError> {
    let runtime = carmine_msgr::idle_poll::current_thread_runtime(config.idle_poll)?;
    // A LocalSet: the shard's connection tasks share its state without locks.
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        if let Some((addrs, map_txs, report_rx)) = global {
            let global = GlobalTask::new(config.clone(), addrs, map_txs, report_rx);
            tokio::task::spawn_local(global.run());
        }
        match config.store {
            StoreKind::Mem { capacity_bytes } => {
                // New objects' data goes into buffers faulted in while idle-polling.
                carmine_store::page_pool::enable(carmine_store::page_pool::DEFAULT_BUFFERS);
                carmine_msgr::idle_poll::set_idle_work(Some(carmine_store::page_pool::top_up_one));
                let store =
                    capacity_bytes.map_or_else(MemStore::new, MemStore::with_capacity_bytes);
                let shard = OsdShard::new(config.id, index, config.shard_count, store);
                // MemStore commits at once: flush and reply at the end of each turn.
                ShardLoop::new(shard, map_rx, report_tx, false)
                    .run(listener)
                    .await;
            }
            StoreKind::Log { size_bytes } => {
                let store = open_log_store(config, index, size_bytes)?;
                let shard = OsdShard::new(config.id, index, config.shard_count, store);
                // A LogStore flush is a sync: one for all ready connections.
                ShardLoop::new(shard, map_rx, report_tx, true)
                    .run(listener)
                    .await;
            }
        }
        Ok(())
    })
}

/// Opens (recovering) or creates the shard's LogStore device file.
fn open_log_store(
    config: &OsdDaemonConfig,
    index: ShardIndex,
    size_bytes: u64,
) -> Result<LogStore<FileDevice>, DaemonError> {
    let path = shard_device_path(&config.data_dir, usize::from(index.0));
    let device = FileDevice::open_or_create(&path, size_bytes)?;
    let store =
        LogStore::open(device, LogStoreConfig::default()).map_err(|e| DaemonError::Corrupt {
            path: path.display().to_string(),
            detail: e.to_string(),
        })?;
    tracing::info!("{} shard {}: opened {}", config.id, index.0, path.display());
    Ok(store)
}

/// A random instance id (not on the data path: once per process).
fn random_instance() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.finish() | 1
}

/// Pins the calling thread to one CPU, so a shard keeps its caches and never migrates.
#[allow(unsafe_code)]
pub fn pin_current_thread(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET only write inside it, and
    // sched_setaffinity(0, ..) reads it for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            tracing::warn!("could not pin shard thread to CPU {cpu}");
        }
    }
}

/// Shard 0's OSD-global work: the monitor session, boot, maps and stats.
struct GlobalTask {
    config: OsdDaemonConfig,
    shard_addrs: Vec<SocketAddr>,
    map_txs: Vec<mpsc::Sender<Arc<OsdMap>>>,
    newest: Option<Arc<OsdMap>>,
    report_rx: mpsc::Receiver<ShardReport>,
    reports: BTreeMap<ShardIndex, ShardReport>,
    mon_hunt: carmine_client::MonHunt,
    booted_epoch: Epoch,
    /// Random per process start, so the monitor tells a restart from a reconnect.
    instance: u64,
    heartbeats: Heartbeats,
}

impl GlobalTask {
    fn new(
        config: OsdDaemonConfig,
        shard_addrs: Vec<SocketAddr>,
        map_txs: Vec<mpsc::Sender<Arc<OsdMap>>>,
        report_rx: mpsc::Receiver<ShardReport>,
    ) -> Self {
        Self {
            shard_addrs,
            map_txs,
            newest: None,
            report_rx,
            reports: BTreeMap::new(),
            mon_hunt: carmine_client::MonHunt::new(),
            booted_epoch: Epoch(0),
            instance: random_instance(),
            heartbeats: Heartbeats::new(config.id, config.heartbeat),
            config,
        }
    }

    fn epoch(&self) -> Epoch {
        self.newest.as_ref().map(|m| m.epoch).unwrap_or(Epoch(0))
    }

    async fn run(mut self) {
        loop {
            let (events_tx, events_rx) = mpsc::unbounded_channel();
            let index = self.mon_hunt.next_target(self.config.mon_addrs.len());
            let addr = self.config.mon_addrs[index];
            let session = SessionConfig::new(EntityName::osd(self.config.id), Policy::Lossy);
            match connect(addr, session, ShardIndex(0), events_tx).await {
                Ok(mon) => {
                    tracing::info!("{}: connected to the monitor at {addr}", self.config.id);
                    self.serve_mon(mon, events_rx).await;
                }
                Err(error) => {
                    tracing::warn!("{}: monitor {addr}: {error}", self.config.id);
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn boot(&mut self, mon: &ConnectionHandle) {
        let boot = Msg::OsdBoot(OsdBoot {
            osd: self.config.id,
            shard_addrs: self.shard_addrs.clone(),
            host: self.config.host.clone(),
            fsid: self.config.fsid,
            instance: self.instance,
        });
        let epoch = self.epoch();
        self.booted_epoch = epoch;
        let _ = mon.send(to_message(&boot, epoch));
        let subscribe = Msg::MonGetMap(MonGetMap {
            have: epoch,
            subscribe: true,
        });
        let _ = mon.send(to_message(&subscribe, epoch));
    }

    async fn serve_mon(
        &mut self,
        mon: ConnectionHandle,
        mut events: mpsc::UnboundedReceiver<NetEvent>,
    ) {
        self.boot(&mon);
        let mut stats_tick = tokio::time::interval(SHARD_REPORT_INTERVAL);
        loop {
            let heartbeat_due = self.heartbeats.next_tick();
            tokio::select! {
                event = events.recv() => match event {
                    Some(NetEvent::Message { message, peer, .. }) => {
                        if let Some(Msg::OsdMap(update)) = from_message(message, &peer) {
                            self.handle_map_update(&mon, update);
                        }
                    }
                    Some(NetEvent::Closed { reason, .. }) => {
                        tracing::warn!("{}: monitor session closed: {reason}", self.config.id);
                        return;
                    }
                    Some(_) => {}
                    None => return,
                },
                Some(report) = self.report_rx.recv() => {
                    let urgent = report.urgent;
                    self.reports.insert(report.shard, report);
                    if urgent {
                        self.send_stats(&mon);
                    }
                }
                _ = stats_tick.tick() => self.send_stats(&mon),
                Some(event) = self.heartbeats.next_event() => {
                    self.heartbeats.handle_event(event, &mon);
                }
                _ = tokio::time::sleep_until(heartbeat_due) => self.heartbeats.tick(&mon),
            }
        }
    }

    /// Applies a map message in epoch order and acts on every new epoch (a PG must see
    /// each interval change); asks the monitor for what a gap or a checksum mismatch
    /// left out.
    fn handle_map_update(&mut self, mon: &ConnectionHandle, update: OsdMapMsg) {
        let step = update.advance(self.newest.as_ref());
        for map in step.maps {
            self.handle_map(mon, map);
        }
        if let Some(have) = step.request {
            tracing::warn!(
                "{}: asking the monitor for maps after e{}: {}",
                self.config.id,
                have.0,
                step.error.map_or_else(String::new, |e| e.to_string())
            );
            let request = Msg::MonGetMap(MonGetMap {
                have,
                subscribe: true,
            });
            let _ = mon.send(to_message(&request, self.epoch()));
        }
    }

    fn handle_map(&mut self, mon: &ConnectionHandle, map: Arc<OsdMap>) {
        if map.fsid != self.config.fsid {
            tracing::error!("{}: ignoring a map of another cluster", self.config.id);
            return;
        }
        if map.epoch <= self.epoch() {
            return;
        }
        let marked_down = map.osd(self.config.id).is_some_and(|info| {
            !info.up || info.shard_addrs != self.shard_addrs || info.instance != self.instance
        });
        // A map showing our previous instance up shows us, this process, down.
        let map =
            carmine_osd::map_for_instance(map, self.config.id, self.instance, &self.shard_addrs);
        self.newest = Some(map.clone());
        self.heartbeats.handle_map(map.clone(), mon);
        for tx in &self.map_txs {
            if tx.try_send(map.clone()).is_err() {
                tracing::error!(
                    "{}: a shard is {MAPS_QUEUED_MAX} maps behind",
                    self.config.id
                );
            }
        }
        if marked_down && map.epoch > self.booted_epoch {
            // The map says we are down (or elsewhere) while we run: assert ourselves.
            tracing::warn!(
                "{}: map e{} marks us down; booting again",
                self.config.id,
                map.epoch.0
            );
            self.boot(mon);
        }
    }

    fn send_stats(&mut self, mon: &ConnectionHandle) {
        let mut stats = OsdStats {
            osd: self.config.id,
            map_epoch: self.epoch(),
            ..OsdStats::default()
        };
        for report in self.reports.values() {
            stats.pgs.extend(report.pgs.iter().cloned());
            stats.object_count += report.usage.object_count;
            stats.data_bytes += report.usage.data_bytes;
            stats.metadata_bytes += report.usage.metadata_bytes;
            stats.capacity_bytes = stats
                .capacity_bytes
                .saturating_add(report.usage.capacity_bytes);
            stats.ops_total += report.counters.ops_total;
            stats.write_bytes_total += report.counters.write_bytes_total;
            stats.read_bytes_total += report.counters.read_bytes_total;
            stats.wrong_shard_total += report.counters.wrong_shard_total;
            stats.corrupt_copies_found_total += report.counters.corrupt_copies_found_total;
            stats.copies_repaired_total += report.counters.copies_repaired_total;
        }
        let _ = mon.send(to_message(&Msg::OsdStats(stats), self.epoch()));
    }
}
