//! The monitor: the authority on the cluster map, as a pure state machine, replicated
//! across a group of 1, 3 or 5 monitors through Raft (TiKV's `raft` crate).
//!
//! A [`Monitor`] takes inputs — a message from a connection, a connection closing, a
//! tick — each with the current time, and returns [`MonOutput`]s for its driver: send
//! this message, here is a newly applied map. It owns no socket, clock or thread, so the
//! simulator, the tests and the real daemon drive the same code. After every call the
//! driver takes [`Monitor::take_store`] and, if it returns an image, makes it durable
//! **before** carrying out the outputs of that call (Raft's rule: persist, then send).
//!
//! How a change flows:
//!
//! - Any monitor serves map subscriptions (`MonGetMap`) from the map it has applied:
//!   the incrementals after the subscriber's epoch while it keeps them all
//!   ([`RECENT_INCREMENTALS_MAX`]), else the newest full map; each new epoch goes to
//!   the subscribers as one incremental (a full map to one that holds none yet).
//! - A command, an OSD boot or a stats report received by a follower is forwarded to
//!   the leader (`MonForward`); one received while no leader is known waits (commands
//!   fail after [`MonConfig::command_timeout`]).
//! - The leader alone computes the next map, one proposal at a time, from the newest
//!   applied map, and proposes it as a Raft entry ([`entry::MonEntry`]).
//! - Every monitor applies committed entries in log order: each entry's map becomes the
//!   next epoch, is handed to the driver ([`MonOutput::PersistMap`]) and pushed to that
//!   monitor's subscribers. The monitor that holds the requesting client answers it.
//!
//! Failure detection: OSDs heartbeat each other and report a silent peer
//! ([`carmine_proto::OsdFailure`]); the leader marks an OSD down once
//! `min_down_reporters` distinct up OSDs hold fresh reports on it (module `failure`).
//! As a backstop the leader also hears from each OSD directly (its session) or through
//! the stats reports followers forward: an OSD with no session and silent for
//! `osd_down_grace` is marked down. A down OSD is marked out after
//! `osd_down_out_interval` (unless `noout`). The map's config keys
//! `osd_heartbeat_grace`, `mon_osd_min_down_reporters` and `mon_osd_down_out_interval`
//! override the configured values.
//!
//! ```
//! use carmine_mon::{MonConfig, Monitor};
//! use carmine_clustermap::OsdMap;
//! use std::time::Instant;
//!
//! // A group of one monitor elects itself at once.
//! let mon = Monitor::new(OsdMap::new_dev(3), MonConfig::default(), Instant::now());
//! assert_eq!(mon.map().epoch.0, 1);
//! assert_eq!(mon.leader(), Some(0));
//! ```

pub mod entry;
mod failure;
mod replication;
mod service;
mod status;
pub mod storage;

pub use storage::{MonStore, StoreError};

use carmine_clustermap::settings::SettingsReader;
use carmine_clustermap::{HistoryTracker, OsdMap, OsdMapIncremental};
use carmine_proto::{MonForward, Msg, OsdStats};
use carmine_types::{EntityName, Epoch, OsdId};
use entry::Origin;
use raft::RawNode;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A connection, as the driver numbers them.
pub type ConnId = u64;

/// Incrementals kept to send subscribers every epoch they missed; one further behind
/// gets the newest full map.
pub const RECENT_INCREMENTALS_MAX: usize = 64;
/// Bytes of incrementals one map message carries at most; a longer run is split.
pub const INCREMENTAL_BYTES_PER_MESSAGE_MAX: usize = 8 << 20;
const _: () = assert!(RECENT_INCREMENTALS_MAX <= carmine_proto::MAP_INCREMENTALS_PER_MESSAGE_MAX);
const _: () =
    assert!(INCREMENTAL_BYTES_PER_MESSAGE_MAX < carmine_types::limits::MESSAGE_BYTES_MAX / 2);
/// Requests held while no leader is known.
pub const UNROUTED_MAX: usize = 1024;
/// Commands waiting for an answer at one monitor.
pub const WAITERS_MAX: usize = 4096;
/// Operations queued at the leader.
pub const QUEUED_OPS_MAX: usize = 4096;
/// Raft ticks caught up at most in one `handle_tick`.
const TICKS_PER_CALL_MAX: u32 = 64;

/// Monitor settings (Ceph's `mon_osd_*` options and the Raft timing).
#[derive(Debug, Clone)]
pub struct MonConfig {
    /// How long an OSD may be silent before it is marked down.
    pub osd_down_grace: Duration,
    /// How long a down OSD stays in before it is marked out (data re-placed); zero
    /// never marks it out.
    pub osd_down_out_interval: Duration,
    /// How long an OSD's failure report counts (Ceph's `osd_heartbeat_grace`): OSDs
    /// repeat their reports while a peer stays silent.
    pub osd_heartbeat_grace: Duration,
    /// Distinct OSDs that must report an OSD before it is marked down (Ceph's
    /// `mon_osd_min_down_reporters`, 2 there; 1 here, where clusters are small).
    pub min_down_reporters: u32,
    /// Monitors in the cluster; informational (the group's ranks decide).
    pub mon_count: u32,
    /// One Raft tick.
    pub raft_tick: Duration,
    /// Ticks without a leader's heartbeat before a follower campaigns.
    pub election_ticks: usize,
    /// Ticks between a leader's heartbeats.
    pub heartbeat_ticks: usize,
    /// How long a command may wait for a leader and its commit before it fails.
    pub command_timeout: Duration,
}

impl Default for MonConfig {
    fn default() -> Self {
        Self {
            osd_down_grace: Duration::from_secs(3),
            osd_down_out_interval: Duration::from_secs(600),
            osd_heartbeat_grace: Duration::from_secs(3),
            min_down_reporters: 1,
            mon_count: 1,
            raft_tick: Duration::from_millis(100),
            election_ticks: 10,
            heartbeat_ticks: 2,
            command_timeout: Duration::from_secs(10),
        }
    }
}

/// What the driver must do, in order (after persisting [`Monitor::take_store`]).
// Outputs live only until the driver carries them out; boxing would cost more than it saves.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum MonOutput {
    /// A newly applied epoch, in order (the durable copy is the Raft store; a driver may
    /// keep this one for operators).
    PersistMap(Arc<OsdMap>),
    /// Send on a connection: a client's, an OSD's, or one to a peer monitor that the
    /// driver announced with [`Monitor::handle_peer_connected`].
    Send(ConnId, Msg),
}

/// Why a monitor cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MonError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("rank {rank} is not among the monitors {ranks:?}")]
    UnknownRank { rank: u64, ranks: Vec<u64> },
    #[error("the Raft core refused to start: {0}")]
    Raft(String),
}

#[derive(Debug, Default)]
struct OsdTracking {
    /// Connections to this monitor over which the OSD booted and that are still open.
    sessions: BTreeSet<ConnId>,
    /// When the OSD was last heard from (directly or through a follower), or its last
    /// session here closed.
    last_heard: Option<Instant>,
    down_since: Option<Instant>,
    stats: Option<(Instant, OsdStats)>,
    previous_stats: Option<(Instant, OsdStats)>,
}

/// A command waiting for its answer at the monitor the client talks to.
#[derive(Debug)]
struct Waiter {
    conn: ConnId,
    tid: u64,
    deadline: Instant,
}

/// An OSD boot this monitor received, re-sent to the leader until the map shows it.
#[derive(Debug)]
struct PendingBoot {
    forward: MonForward,
    sent_at: Option<Instant>,
}

/// Work queued at the leader, proposed one entry at a time.
#[derive(Debug)]
enum Op {
    Command {
        origin: Origin,
        command: carmine_proto::Command,
    },
    Boot(carmine_proto::OsdBoot),
    FailureCheck,
    /// Apply the pg_temp changes collected in `Monitor::pending_pg_temp`.
    PgTemp,
    /// Publish the fullness the OSDs' latest usage reports put them in.
    Fullness,
    /// Record the `up_thru`s collected in `Monitor::pending_up_thru`.
    UpThru,
}

/// The failure-detection timing in force: [`MonConfig`] overridden by the map's config
/// keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FailureSettings {
    heartbeat_grace: Duration,
    min_down_reporters: u32,
    /// `None`: never mark out.
    down_out_interval: Option<Duration>,
}

/// The monitor state machine.
pub struct Monitor {
    config: MonConfig,
    rank: u64,
    ranks: Vec<u64>,
    raft: RawNode<MonStore>,
    store_dirty: bool,
    // The applied state: identical on every monitor at the same applied index.
    map: Arc<OsdMap>,
    /// The changes to each recent epoch, oldest first, the last to `map`'s epoch, each
    /// with its encoded size. Rebuilt from the replayed log after a restart (empty
    /// until an epoch follows the loaded snapshot: subscribers then get full maps).
    recent_incrementals: VecDeque<(Arc<OsdMapIncremental>, usize)>,
    applied_index: u64,
    history: HistoryTracker,
    // Sessions with clients and OSDs at this monitor.
    /// Subscribed connections, each with the newest epoch it holds or has been sent
    /// (0: none yet, so its next map is a full one).
    subscribers: BTreeMap<ConnId, Epoch>,
    conn_osd: BTreeMap<ConnId, OsdId>,
    osds: BTreeMap<OsdId, OsdTracking>,
    // Peer monitors.
    peer_conns: BTreeMap<u64, ConnId>,
    peer_heard: BTreeMap<u64, Instant>,
    known_leader: Option<u64>,
    // Leader work.
    leading_from_index: Option<u64>,
    queue: VecDeque<Op>,
    in_flight: Option<u64>,
    // Requests this monitor received.
    next_token: u64,
    waiters: BTreeMap<u64, Waiter>,
    unrouted: VecDeque<MonForward>,
    pending_boots: BTreeMap<OsdId, PendingBoot>,
    next_tick_at: Instant,
    /// Leader: pg_temp changes primaries asked for (empty: remove), proposed together.
    pending_pg_temp: BTreeMap<carmine_types::PgId, Vec<OsdId>>,
    /// Leader: the `up_thru` primaries asked for before activating (Ceph's
    /// `MOSDAlive`), proposed together.
    pending_up_thru: BTreeMap<OsdId, carmine_types::Epoch>,
    // Failure reports (at the leader) and the settings that judge them.
    failures: failure::FailureReports,
    failure_settings: FailureSettings,
    settings_reader: SettingsReader,
}

impl Monitor {
    /// A group of one monitor (rank 0) starting from `map`, its store in memory: what the
    /// simulator and single-monitor tests use. It is leader at once.
    pub fn new(map: OsdMap, config: MonConfig, now: Instant) -> Self {
        let store = MonStore::bootstrap(&map, &[0]);
        Self::open(0, &[0], store, config, now).expect("a fresh single-monitor store opens")
    }

    /// Monitor `rank` of the group `ranks`, from its store (loaded from disk, or
    /// [`MonStore::bootstrap`] with the same initial map on every monitor).
    pub fn open(
        rank: u64,
        ranks: &[u64],
        store: MonStore,
        config: MonConfig,
        now: Instant,
    ) -> Result<Self, MonError> {
        let mut ranks = ranks.to_vec();
        ranks.sort_unstable();
        ranks.dedup();
        let Some(position) = ranks.iter().position(|&r| r == rank) else {
            return Err(MonError::UnknownRank { rank, ranks });
        };
        let configured: Vec<u64> = ranks.iter().map(|&r| raft_id(r)).collect();
        let mut stored = store.voters();
        stored.sort_unstable();
        if stored != configured {
            return Err(StoreError::Members {
                stored: stored.iter().map(|id| id - 1).collect(),
                configured: ranks,
            }
            .into());
        }
        let map = store.snapshot_map()?;
        let applied_index = store.snapshot_index();
        // Distinct, fixed election timeouts by rank: deterministic runs, no split votes
        // when every follower loses the leader at the same moment.
        let min_election_tick = config.election_ticks + 3 * position;
        let raft_config = raft::Config {
            id: raft_id(rank),
            election_tick: config.election_ticks,
            heartbeat_tick: config.heartbeat_ticks,
            min_election_tick,
            max_election_tick: min_election_tick + 1,
            applied: applied_index,
            check_quorum: true,
            pre_vote: true,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 64,
            ..raft::Config::default()
        };
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let raft = RawNode::new(&raft_config, store, &logger)
            .map_err(|error| MonError::Raft(error.to_string()))?;
        let mut osds = BTreeMap::new();
        for osd in map.osds.values() {
            let tracking = OsdTracking {
                last_heard: osd.up.then_some(now),
                down_since: (!osd.up).then_some(now),
                ..OsdTracking::default()
            };
            osds.insert(osd.id, tracking);
        }
        let map = Arc::new(map);
        let mut monitor = Self {
            history: HistoryTracker::new(&map),
            recent_incrementals: VecDeque::new(),
            map,
            config,
            rank,
            ranks,
            raft,
            store_dirty: false,
            applied_index,
            subscribers: BTreeMap::new(),
            conn_osd: BTreeMap::new(),
            osds,
            peer_conns: BTreeMap::new(),
            peer_heard: BTreeMap::new(),
            known_leader: None,
            leading_from_index: None,
            queue: VecDeque::new(),
            in_flight: None,
            next_token: 1,
            waiters: BTreeMap::new(),
            unrouted: VecDeque::new(),
            pending_boots: BTreeMap::new(),
            next_tick_at: now,
            pending_pg_temp: BTreeMap::new(),
            pending_up_thru: BTreeMap::new(),
            failures: failure::FailureReports::default(),
            failure_settings: FailureSettings {
                heartbeat_grace: Duration::ZERO,
                min_down_reporters: 1,
                down_out_interval: None,
            },
            settings_reader: SettingsReader::default(),
        };
        monitor.read_settings();
        if monitor.ranks.len() == 1 {
            monitor
                .raft
                .campaign()
                .map_err(|error| MonError::Raft(error.to_string()))?;
        }
        // Replays the committed entries after the snapshot. Nobody is connected yet, so
        // the outputs are only the replayed maps, which the driver has already seen.
        let mut replayed = Vec::new();
        monitor.drive(now, &mut replayed);
        assert!(replayed
            .iter()
            .all(|output| matches!(output, MonOutput::PersistMap(_))));
        Ok(monitor)
    }

    /// The newest applied map.
    pub fn map(&self) -> &Arc<OsdMap> {
        &self.map
    }

    pub fn rank(&self) -> u64 {
        self.rank
    }

    /// The leader's rank, if this monitor knows one.
    pub fn leader(&self) -> Option<u64> {
        self.known_leader
    }

    pub fn is_leader(&self) -> bool {
        self.known_leader == Some(self.rank)
    }

    /// The Raft term (for tests and logs).
    pub fn term(&self) -> u64 {
        self.raft.raft.term
    }

    /// The Raft index of the newest applied entry.
    pub fn applied_index(&self) -> u64 {
        self.applied_index
    }

    /// The Raft store's image if it changed since the last call. The driver must make
    /// it durable before carrying out the outputs of the call that produced it.
    pub fn take_store(&mut self) -> Option<bytes::Bytes> {
        if !self.store_dirty {
            return None;
        }
        self.store_dirty = false;
        Some(self.raft.store().to_bytes().into())
    }

    /// The driver opened a connection to peer monitor `rank`.
    pub fn handle_peer_connected(&mut self, rank: u64, conn: ConnId) {
        if rank != self.rank && self.ranks.contains(&rank) {
            self.peer_conns.insert(rank, conn);
        }
    }

    /// Handles one message from connection `conn` whose peer is `from`.
    pub fn handle_message(
        &mut self,
        now: Instant,
        conn: ConnId,
        from: EntityName,
        msg: Msg,
    ) -> Vec<MonOutput> {
        let mut out = Vec::new();
        self.dispatch(now, conn, from, msg, &mut out);
        self.drive(now, &mut out);
        out
    }

    /// A connection closed.
    pub fn handle_disconnect(&mut self, now: Instant, conn: ConnId) -> Vec<MonOutput> {
        self.subscribers.remove(&conn);
        self.peer_conns.retain(|_, c| *c != conn);
        if let Some(osd) = self.conn_osd.remove(&conn) {
            let tracking = self.osds.entry(osd).or_default();
            tracking.sessions.remove(&conn);
            if tracking.sessions.is_empty() {
                tracking.last_heard = Some(now);
                self.pending_boots.remove(&osd);
            }
        }
        Vec::new()
    }

    /// Advances Raft's clock, retries what waits for a leader, expires commands, and
    /// (at the leader) marks OSDs down or out whose time has come.
    pub fn handle_tick(&mut self, now: Instant) -> Vec<MonOutput> {
        let mut out = Vec::new();
        let mut ticks = 0;
        while self.next_tick_at <= now && ticks < TICKS_PER_CALL_MAX {
            self.raft.tick();
            self.next_tick_at += self.config.raft_tick;
            ticks += 1;
        }
        if self.next_tick_at <= now {
            self.next_tick_at = now + self.config.raft_tick;
        }
        self.drive(now, &mut out);
        self.expire_waiters(now, &mut out);
        self.resend_boots(now, &mut out);
        if self.is_leader() && !self.queue.iter().any(|op| matches!(op, Op::FailureCheck)) {
            self.queue.push_back(Op::FailureCheck);
        }
        self.drive(now, &mut out);
        out
    }

    /// When the next tick is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        Some(self.next_tick_at)
    }
}

/// Raft ids start at 1; ranks at 0.
fn raft_id(rank: u64) -> u64 {
    rank + 1
}

#[cfg(test)]
mod group_tests;
#[cfg(test)]
mod map_service_tests;
#[cfg(test)]
mod tests;
