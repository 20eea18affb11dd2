//! The monitor: the authority on the cluster map, as a pure state machine.
//!
//! A [`Monitor`] takes inputs — a message from a connection, a connection closing, a
//! tick — each with the current time, and returns [`MonOutput`]s for its driver: persist
//! this map, send that message. It owns no socket, clock or thread, so the simulator
//! and the real daemon drive the same code. This is the single-monitor foundation;
//! replication of map changes through Raft comes with the monitor issue.
//!
//! Failure detection here is deliberately simple: an OSD's session with the monitor is
//! its liveness signal. When it closes and the OSD does not boot again within
//! `osd_down_grace`, the monitor marks it down (and out after `osd_down_out_interval`).
//!
//! ```
//! use carmine_mon::{MonConfig, Monitor};
//! use carmine_clustermap::OsdMap;
//! use std::time::Instant;
//!
//! let mon = Monitor::new(OsdMap::new_dev(3), MonConfig::default(), Instant::now());
//! assert_eq!(mon.map().epoch.0, 1);
//! ```

mod status;

use carmine_clustermap::{HistoryTracker, OsdMap, OsdMapError, WEIGHT_IN};
use carmine_proto::{
    Command, CommandOutput, MonCommand, MonCommandReply, MonGetMap, Msg, OsdBoot, OsdMapMsg,
    OsdStats, PgState,
};
use carmine_types::{EntityKind, EntityName, Epoch, OsdId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A connection, as the driver numbers them.
pub type ConnId = u64;

/// Monitor settings (Ceph's `mon_osd_*` options).
#[derive(Debug, Clone)]
pub struct MonConfig {
    /// How long an OSD may be without a monitor session before it is marked down.
    pub osd_down_grace: Duration,
    /// How long a down OSD stays in before it is marked out (data re-placed).
    pub osd_down_out_interval: Duration,
    /// Monitors in the cluster (reported in status).
    pub mon_count: u32,
}

impl Default for MonConfig {
    fn default() -> Self {
        Self {
            osd_down_grace: Duration::from_secs(3),
            osd_down_out_interval: Duration::from_secs(600),
            mon_count: 1,
        }
    }
}

/// What the driver must do, in order.
// Outputs live only until the driver carries them out; boxing would cost more than it saves.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum MonOutput {
    /// Make this map durable before sending anything that follows.
    PersistMap(Arc<OsdMap>),
    Send(ConnId, Msg),
}

#[derive(Debug, Default)]
struct OsdTracking {
    /// Connections over which the OSD booted and that are still open.
    sessions: BTreeSet<ConnId>,
    /// When its last session closed, if none is open.
    disconnected_at: Option<Instant>,
    down_since: Option<Instant>,
    stats: Option<(Instant, OsdStats)>,
    previous_stats: Option<(Instant, OsdStats)>,
}

/// The monitor state machine.
pub struct Monitor {
    config: MonConfig,
    map: Arc<OsdMap>,
    subscribers: BTreeSet<ConnId>,
    conn_osd: BTreeMap<ConnId, OsdId>,
    osds: BTreeMap<OsdId, OsdTracking>,
    history: HistoryTracker,
}

impl Monitor {
    /// Starts from `map` (loaded from disk, or new). OSDs the map lists as up get the
    /// grace period to reconnect before they are marked down.
    pub fn new(map: OsdMap, config: MonConfig, now: Instant) -> Self {
        let mut osds = BTreeMap::new();
        for osd in map.osds.values().filter(|osd| osd.up) {
            osds.insert(
                osd.id,
                OsdTracking {
                    disconnected_at: Some(now),
                    ..OsdTracking::default()
                },
            );
        }
        Self {
            config,
            history: HistoryTracker::new(&map),
            map: Arc::new(map),
            subscribers: BTreeSet::new(),
            conn_osd: BTreeMap::new(),
            osds,
        }
    }

    pub fn map(&self) -> &Arc<OsdMap> {
        &self.map
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
        match msg {
            Msg::MonGetMap(request) => self.handle_get_map(conn, request, &mut out),
            Msg::OsdBoot(boot) => self.handle_boot(conn, from, boot, &mut out),
            Msg::OsdStats(stats) => self.handle_stats(now, from, stats),
            Msg::MonCommand(command) => self.handle_command(now, conn, command, &mut out),
            other => tracing::warn!(
                "mon: ignoring unexpected message type {} from {from}",
                other.msg_type()
            ),
        }
        out
    }

    /// A connection closed.
    pub fn handle_disconnect(&mut self, now: Instant, conn: ConnId) -> Vec<MonOutput> {
        self.subscribers.remove(&conn);
        if let Some(osd) = self.conn_osd.remove(&conn) {
            let tracking = self.osds.entry(osd).or_default();
            tracking.sessions.remove(&conn);
            if tracking.sessions.is_empty() {
                tracking.disconnected_at = Some(now);
            }
        }
        Vec::new()
    }

    /// Marks OSDs down or out whose grace has passed.
    pub fn handle_tick(&mut self, now: Instant) -> Vec<MonOutput> {
        let mut to_down = Vec::new();
        let mut to_out = Vec::new();
        for (&id, tracking) in &self.osds {
            let Some(info) = self.map.osd(id) else {
                continue;
            };
            if info.up {
                let silent = tracking
                    .disconnected_at
                    .is_some_and(|at| now.duration_since(at) >= self.config.osd_down_grace);
                if silent && tracking.sessions.is_empty() {
                    to_down.push(id);
                }
            } else if info.is_in() {
                let long_down = tracking
                    .down_since
                    .is_some_and(|at| now.duration_since(at) >= self.config.osd_down_out_interval);
                if long_down && !self.map.flags.contains(carmine_clustermap::OsdFlags::NOOUT) {
                    to_out.push(id);
                }
            }
        }
        let mut out = Vec::new();
        if to_down.is_empty() && to_out.is_empty() {
            return out;
        }
        let mut next = (*self.map).clone();
        for &id in &to_down {
            tracing::info!("mon: marking {id} down: no session for the grace period");
            next.mark_down(id).expect("tracked OSDs exist in the map");
            self.osds.entry(id).or_default().down_since = Some(now);
        }
        for &id in &to_out {
            tracing::info!("mon: marking {id} out: down for the down-out interval");
            next.set_weight(id, 0)
                .expect("tracked OSDs exist in the map");
        }
        self.publish(next, &mut out);
        out
    }

    /// When the next tick is useful.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.osds
            .values()
            .filter_map(|tracking| {
                tracking
                    .disconnected_at
                    .map(|at| at + self.config.osd_down_grace)
            })
            .min()
    }

    fn handle_get_map(&mut self, conn: ConnId, request: MonGetMap, out: &mut Vec<MonOutput>) {
        if request.subscribe {
            self.subscribers.insert(conn);
        }
        if request.have < self.map.epoch {
            out.push(MonOutput::Send(conn, self.map_msg()));
        }
    }

    fn handle_boot(
        &mut self,
        conn: ConnId,
        from: EntityName,
        boot: OsdBoot,
        out: &mut Vec<MonOutput>,
    ) {
        if from.kind != EntityKind::Osd || from.id != u64::from(boot.osd.0) {
            tracing::warn!("mon: {from} tried to boot as {}; ignored", boot.osd);
            return;
        }
        if boot.fsid != self.map.fsid {
            tracing::warn!("mon: {} belongs to another cluster; ignored", boot.osd);
            return;
        }
        if self.map.is_up(boot.osd) {
            // A new instance while the map says the old one is up (a restart within the
            // grace period): mark the old instance down first, as Ceph does, so every
            // PG it served sees a new interval and peers again.
            let mut down = (*self.map).clone();
            down.mark_down(boot.osd).expect("the OSD is in the map");
            tracing::info!(
                "mon: {} booted again; marking the old instance down",
                boot.osd
            );
            self.publish(down, out);
        }
        let mut next = (*self.map).clone();
        if let Err(error) = next.boot_osd(boot.osd, boot.shard_addrs, boot.host) {
            tracing::warn!("mon: boot of {} refused: {error}", boot.osd);
            return;
        }
        let tracking = self.osds.entry(boot.osd).or_default();
        tracking.sessions.insert(conn);
        tracking.disconnected_at = None;
        tracking.down_since = None;
        self.conn_osd.insert(conn, boot.osd);
        self.subscribers.insert(conn);
        tracing::info!("mon: {} booted", boot.osd);
        self.publish(next, out);
    }

    fn handle_stats(&mut self, now: Instant, from: EntityName, stats: OsdStats) {
        if from.kind != EntityKind::Osd || from.id != u64::from(stats.osd.0) {
            return;
        }
        for pg in &stats.pgs {
            let clean = PgState::ACTIVE | PgState::CLEAN;
            let primary = self.map.pg_mapping(pg.pgid).and_then(|m| m.primary);
            if pg.state.0 & clean == clean && primary == Some(stats.osd) {
                self.history.report_clean(pg.pgid, pg.interval_start);
            }
        }
        let tracking = self.osds.entry(stats.osd).or_default();
        tracking.previous_stats = tracking.stats.take();
        tracking.stats = Some((now, stats));
    }

    fn handle_command(
        &mut self,
        now: Instant,
        conn: ConnId,
        command: MonCommand,
        out: &mut Vec<MonOutput>,
    ) {
        let result = self.apply_command(now, command.command, out);
        out.push(MonOutput::Send(
            conn,
            Msg::MonCommandReply(MonCommandReply {
                tid: command.tid,
                result,
            }),
        ));
    }

    fn apply_command(
        &mut self,
        now: Instant,
        command: Command,
        out: &mut Vec<MonOutput>,
    ) -> Result<CommandOutput, String> {
        let mut next = (*self.map).clone();
        let message = match command {
            Command::Status => return Ok(CommandOutput::Status(self.status(now))),
            Command::PoolCreate(spec) => {
                let osd_count = next.osds.len();
                if usize::from(spec.size) > osd_count {
                    return Err(format!(
                        "pool size {} exceeds the {osd_count} OSDs in the cluster; \
                         use a size of at most {osd_count} or add OSDs",
                        spec.size
                    ));
                }
                let name = spec.name.clone();
                let id = next.create_pool(spec).map_err(map_error)?;
                format!("pool '{name}' created (id {id})")
            }
            Command::PoolDelete { name, confirm } => {
                if !confirm {
                    return Err(format!(
                        "deleting pool '{name}' destroys its data permanently; \
                         repeat with --yes-i-really-really-mean-it"
                    ));
                }
                next.delete_pool(&name).map_err(map_error)?;
                format!("pool '{name}' removed")
            }
            Command::OsdDown(id) => {
                next.mark_down(id).map_err(map_error)?;
                self.osds.entry(id).or_default().down_since = Some(now);
                format!("marked down {id}")
            }
            Command::OsdOut(id) => {
                next.set_weight(id, 0).map_err(map_error)?;
                format!("marked out {id}")
            }
            Command::OsdIn(id) => {
                next.set_weight(id, WEIGHT_IN).map_err(map_error)?;
                format!("marked in {id}")
            }
            Command::OsdPrimaryAffinity(id, affinity) => {
                next.set_primary_affinity(id, affinity).map_err(map_error)?;
                format!(
                    "set {id} primary-affinity to {}",
                    f64::from(affinity) / 65536.0
                )
            }
        };
        let epoch = self.publish(next, out);
        Ok(CommandOutput::Done { epoch, message })
    }

    /// Bumps the epoch of `next`, makes it current, persists and pushes it.
    fn publish(&mut self, mut next: OsdMap, out: &mut Vec<MonOutput>) -> Epoch {
        next.epoch = self.map.epoch.next();
        self.history.advance(&self.map, &mut next);
        self.map = Arc::new(next);
        out.push(MonOutput::PersistMap(self.map.clone()));
        let msg = self.map_msg();
        for &conn in &self.subscribers {
            out.push(MonOutput::Send(conn, msg.clone()));
        }
        self.map.epoch
    }

    fn map_msg(&self) -> Msg {
        Msg::OsdMap(OsdMapMsg {
            map: self.map.clone(),
        })
    }
}

fn map_error(error: OsdMapError) -> String {
    error.to_string()
}

#[cfg(test)]
mod tests;
