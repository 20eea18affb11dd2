//! An OSD process in the simulator: its shards (`OsdShard<MemStore>`), the global task
//! that holds the monitor session (boot, map distribution, stats), crash and restart.
//!
//! A shard's [`SimStore`] stands for its disk: a crash drops the shards and keeps the
//! stores (a LogStore's device loses its unsynced writes and the store is recovered
//! from the rest); a restart builds new shards on them (`OsdShard::new` then maps),
//! which is all the real daemon could do — whatever a PG keeps only in memory is lost.
//! LogStore shards defer their flushes to a [`Event::DiskSync`] after a seed-chosen
//! disk latency, as the daemon's shard loop flushes once per turn.

use crate::disk::{DiskKind, SimStore};
use crate::events::Event;
use crate::network::{Endpoint, Node, SessionId, Wire};
use crate::sim::Sim;
use crate::time::{Nanos, MILLISECOND, SECOND};
use carmine_clustermap::{pg_shard, OsdMap};
use carmine_osd::{OsdShard, OsdTuning, Output};
use carmine_proto::{MonGetMap, Msg, OsdBoot, OsdMapMsg, OsdStats, PgState};
use carmine_types::{Epoch, OsdId, PgId, ShardIndex};
use std::net::SocketAddr;
use std::sync::Arc;

/// How long an OSD waits before reconnecting to the monitor (the daemon's 250 ms).
pub const MON_RECONNECT_DELAY: Nanos = 250 * MILLISECOND;
/// How long a connection attempt across a partition takes to fail.
pub const CONNECT_TIMEOUT: Nanos = SECOND;
/// How often an OSD reports stats (the daemon's `SHARD_REPORT_INTERVAL`).
pub const STATS_INTERVAL: Nanos = SECOND;
/// How often an OSD's shards tick (the daemon's `carmine_osd::TICK_INTERVAL`).
pub const TICK_INTERVAL: Nanos = 100 * MILLISECOND;
/// The most an OSD's clock runs fast or slow, in parts per million of virtual time.
/// Read leases only ever compare an OSD's clock with itself and carry a margin for
/// this; a rate skew of 5% tests that margin.
pub const CLOCK_RATE_SKEW_PPM_MAX: u64 = 50_000;

/// New, empty stores for each of OSD `id`'s shards: its disks when it is first
/// deployed (`generation` 0), or the ones that replace them (each later generation
/// draws its devices' faults from its own seed).
pub fn fresh_disks(
    id: OsdId,
    shard_count: u16,
    disk: DiskKind,
    seed: u64,
    ack_before_sync: bool,
    generation: u64,
) -> Vec<SimStore> {
    (0..shard_count)
        .map(|index| {
            let device_seed =
                seed ^ (u64::from(id.0) << 20) ^ u64::from(index) ^ (generation << 40);
            SimStore::with_canary(disk, device_seed, ack_before_sync)
        })
        .collect()
}

/// A process is running its shards, or is down with only its disks.
pub enum Process {
    Up(Vec<OsdShard<SimStore>>),
    Down(Vec<SimStore>),
}

pub struct OsdNode {
    pub shard_count: u16,
    pub addrs: Vec<SocketAddr>,
    pub process: Process,
    pub mon_session: Option<SessionId>,
    /// The global task's newest map (what the shards got).
    pub map: Option<Arc<OsdMap>>,
    pub booted_epoch: Epoch,
    /// Process starts so far; the boot's instance id (a restart is a new instance).
    pub starts: u64,
    /// Shards with a [`Event::DiskSync`] on its way.
    pub sync_scheduled: Vec<bool>,
    /// Which monitor to try next.
    pub mon_hunt: carmine_client::MonHunt,
    /// This machine's monotonic clock: its own origin and its own rate (see
    /// [`OsdNode::local_nanos`]); a restart keeps it, as a process restart keeps
    /// the machine's `CLOCK_MONOTONIC`.
    pub clock_origin: Nanos,
    pub clock_rate_ppm: i64,
}

impl OsdNode {
    pub fn new(
        id: OsdId,
        shard_count: u16,
        disk: DiskKind,
        seed: u64,
        ack_before_sync: bool,
        tuning: OsdTuning,
    ) -> Self {
        // The clock from its own stream of the seed, so nothing else drawn changes.
        let mut clock_rng = crate::rng::Rng::new(seed).fork(0x434c_4f43 ^ u64::from(id.0));
        let clock_origin = clock_rng.between(0, 1000 * SECOND);
        let skew = clock_rng.between(0, 2 * CLOCK_RATE_SKEW_PPM_MAX) as i64;
        let clock_rate_ppm = skew - CLOCK_RATE_SKEW_PPM_MAX as i64;
        let addrs = (0..shard_count)
            .map(|shard| SocketAddr::from(([10, 0, id.0 as u8, 1], 6800 + shard)))
            .collect();
        let shards = fresh_disks(id, shard_count, disk, seed, ack_before_sync, 0)
            .into_iter()
            .enumerate()
            .map(|(index, store)| {
                let index = index as u16;
                let mut shard = OsdShard::new(id, ShardIndex(index), shard_count, store);
                shard.set_deferred_flush(shard.store().needs_sync());
                shard.set_tuning(tuning);
                shard
            })
            .collect();
        Self {
            shard_count,
            addrs,
            process: Process::Up(shards),
            mon_session: None,
            map: None,
            booted_epoch: Epoch(0),
            starts: 1,
            sync_scheduled: vec![false; usize::from(shard_count)],
            mon_hunt: carmine_client::MonHunt::new(),
            clock_origin,
            clock_rate_ppm,
        }
    }

    /// This machine's monotonic time at virtual time `now`: its origin plus `now` run
    /// at its rate (never backwards, since the rate stays positive).
    pub fn local_nanos(&self, now: Nanos) -> Nanos {
        let skew = i128::from(now) * i128::from(self.clock_rate_ppm) / 1_000_000;
        let local = i128::from(now) + skew;
        self.clock_origin + u64::try_from(local).expect("the rate is positive")
    }

    pub fn is_up(&self) -> bool {
        matches!(self.process, Process::Up(_))
    }

    pub fn store(&self, shard: ShardIndex) -> &SimStore {
        match &self.process {
            Process::Up(shards) => shards[usize::from(shard.0)].store(),
            Process::Down(stores) => &stores[usize::from(shard.0)],
        }
    }

    /// Whether the process runs and every shard has map `epoch`.
    pub fn has_epoch(&self, epoch: Epoch) -> bool {
        match &self.process {
            Process::Up(shards) => shards.iter().all(|shard| shard.epoch() == epoch),
            Process::Down(_) => false,
        }
    }

    pub fn pg_state(&self, shard: ShardIndex, pgid: PgId) -> Option<PgState> {
        match &self.process {
            Process::Up(shards) => shards[usize::from(shard.0)].pg(pgid).map(|pg| pg.state()),
            Process::Down(_) => None,
        }
    }

    /// Whether the copy of `pgid` here has no snapshot trimming left (a copy that is
    /// down or absent has none).
    pub fn pg_snap_trim_idle(&self, shard: ShardIndex, pgid: PgId) -> bool {
        match &self.process {
            Process::Up(shards) => shards[usize::from(shard.0)]
                .pg(pgid)
                .is_none_or(|pg| pg.snap_trim_idle()),
            Process::Down(_) => true,
        }
    }

    fn epoch(&self) -> Epoch {
        self.map.as_ref().map_or(Epoch(0), |map| map.epoch)
    }
}

impl Sim {
    /// Connects to the next monitor in turn, as the daemon's `GlobalTask::run`.
    pub(crate) fn osd_connect_mon(&mut self, osd: OsdId) {
        let count = self.mon_count() as usize;
        let node = self.osds.get_mut(&osd).expect("exists");
        if !node.is_up() || node.mon_session.is_some() {
            return;
        }
        let rank = node.mon_hunt.next_target(count) as u64;
        let from = Endpoint::Osd(osd, ShardIndex(0));
        let session = if self.mon_running(rank) {
            self.net.connect(from, Endpoint::Mon(rank))
        } else {
            None
        };
        match session {
            Some(session) => {
                self.osds.get_mut(&osd).expect("exists").mon_session = Some(session);
                self.trace
                    .note(self.now(), || format!("{osd} connects to mon.{rank}"));
                self.osd_boot(osd);
            }
            None => {
                let refused = self.net.reachable(from.node(), Node::Mon(rank));
                let wait = if refused {
                    MILLISECOND
                } else {
                    CONNECT_TIMEOUT
                };
                self.schedule(MON_RECONNECT_DELAY + wait, Event::OsdConnectMon(osd));
            }
        }
    }

    /// Boot and subscribe, as the daemon's `GlobalTask::boot`.
    fn osd_boot(&mut self, osd: OsdId) {
        let node = self.osds.get_mut(&osd).expect("exists");
        let session = node.mon_session.expect("booting needs a session");
        let epoch = node.epoch();
        node.booted_epoch = epoch;
        let boot = Msg::OsdBoot(OsdBoot {
            osd,
            shard_addrs: node.addrs.clone(),
            host: format!("host{}", osd.0),
            fsid: self.fsid,
            instance: (u64::from(osd.0) << 32) | node.starts,
        });
        let from = Endpoint::Osd(osd, ShardIndex(0));
        self.send_session(session, from, boot);
        let subscribe = Msg::MonGetMap(MonGetMap {
            have: epoch,
            subscribe: true,
        });
        self.send_session(session, from, subscribe);
    }

    pub(crate) fn osd_session_closed(&mut self, osd: OsdId, session: SessionId) {
        let node = self.osds.get_mut(&osd).expect("exists");
        if node.is_up() && node.mon_session == Some(session) {
            node.mon_session = None;
            self.schedule(MON_RECONNECT_DELAY, Event::OsdConnectMon(osd));
        }
    }

    pub(crate) fn osd_receive(&mut self, osd: OsdId, shard: ShardIndex, wire: Wire) {
        if !self.osds[&osd].is_up() {
            return;
        }
        let mut out = Vec::new();
        match (wire.from, wire.msg) {
            (Endpoint::Mon(_), Msg::OsdMap(update)) => return self.osd_handle_update(osd, update),
            (Endpoint::Client(_), Msg::OsdOp(op)) => {
                let crate::network::Via::Session(conn) = wire.via else {
                    panic!("clients talk over sessions");
                };
                self.shard_mut(osd, shard)
                    .handle_client_op(conn, op, &mut out);
            }
            (Endpoint::Osd(from, _), msg) => {
                self.note_misrouted(osd, shard, &msg);
                self.shard_mut(osd, shard)
                    .handle_peer_message(from, msg, &mut out);
            }
            (from, msg) => panic!("{from} sent {osd} an unexpected {}", msg.msg_type()),
        }
        self.osd_outputs(osd, shard, out);
        self.observe_logs(osd, shard);
        self.schedule_sync(osd, shard);
    }

    /// Records what is new in the shard's PG logs (see [`crate::log_record`]).
    fn observe_logs(&mut self, osd: OsdId, shard: ShardIndex) {
        let Process::Up(shards) = &self.osds[&osd].process else {
            return;
        };
        for pg in shards[usize::from(shard.0)].pgs() {
            self.log_record.observe(osd, pg.pgid(), pg.log_entries());
        }
    }

    /// A deferred-flush shard's disk syncs after a latency; one sync at a time.
    fn schedule_sync(&mut self, osd: OsdId, shard: ShardIndex) {
        let node = self.osds.get_mut(&osd).expect("exists");
        if !node.store(shard).needs_sync() || node.sync_scheduled[usize::from(shard.0)] {
            return;
        }
        node.sync_scheduled[usize::from(shard.0)] = true;
        let start = node.starts;
        let latency = self
            .rng
            .between(self.config.disk_latency_min, self.config.disk_latency_max);
        self.schedule(latency, Event::DiskSync { osd, shard, start });
    }

    /// The sync completes: the shard flushes, and the work that waited on it goes on.
    pub(crate) fn disk_sync(&mut self, osd: OsdId, shard: ShardIndex, start: u64) {
        let node = self.osds.get_mut(&osd).expect("exists");
        if !node.is_up() || node.starts != start {
            return;
        }
        node.sync_scheduled[usize::from(shard.0)] = false;
        let mut out = Vec::new();
        self.shard_mut(osd, shard).flush(&mut out);
        self.osd_outputs(osd, shard, out);
        self.observe_logs(osd, shard);
    }

    /// The shard, its clock set to its machine's time now (every driver call gives
    /// the shard the time first).
    fn shard_mut(&mut self, osd: OsdId, shard: ShardIndex) -> &mut OsdShard<SimStore> {
        let now = self.osd_instant(osd);
        let no_leases = self.no_leases();
        let shard = match &mut self.osds.get_mut(&osd).expect("exists").process {
            Process::Up(shards) => &mut shards[usize::from(shard.0)],
            Process::Down(_) => panic!("{osd} is down"),
        };
        if !no_leases {
            shard.set_clock(now);
        }
        shard
    }

    /// The [`crate::Canary::NoLeases`] canary: shards get no clock, so no leases.
    pub(crate) fn no_leases(&self) -> bool {
        self.config.canary == crate::Canary::NoLeases
    }

    /// `osd`'s machine clock now, as the `Instant` the cores take.
    pub(crate) fn osd_instant(&self, osd: OsdId) -> std::time::Instant {
        self.clock.at(self.osds[&osd].local_nanos(self.now()))
    }

    /// The shards tick (lease renewals, ops held for a lease), as the daemon's shard
    /// loop every `TICK_INTERVAL`.
    pub(crate) fn osd_tick(&mut self, osd: OsdId) {
        self.schedule(TICK_INTERVAL, Event::OsdTick(osd));
        if !self.osds[&osd].is_up() || self.no_leases() {
            return;
        }
        let now = self.osd_instant(osd);
        for index in 0..self.osds[&osd].shard_count {
            let shard = ShardIndex(index);
            let mut out = Vec::new();
            let driven = self.shard_mut(osd, shard);
            // The daemon's tick is a turn, which ends with a flush and so with the
            // shard's background work; here flushes follow disk syncs, which an idle
            // shard never needs (the tick completes what the work submits).
            driven.background_turn(&mut out);
            driven.tick(now, &mut out);
            self.osd_outputs(osd, shard, out);
            self.observe_logs(osd, shard);
            self.schedule_sync(osd, shard);
        }
    }

    /// The global task's map handling, then the watch channel to every shard.
    /// As the daemon's `handle_map_update`: every new epoch in order, and a request
    /// for what a gap or a checksum mismatch left out.
    fn osd_handle_update(&mut self, osd: OsdId, update: OsdMapMsg) {
        let node = &self.osds[&osd];
        let step = update.advance(node.map.as_ref());
        for map in step.maps {
            self.osd_handle_map(osd, map);
        }
        if let Some(have) = step.request {
            let error = step.error.map_or_else(String::new, |e| e.to_string());
            self.trace.note(self.now(), || {
                format!("{osd} asks for maps after e{}: {error}", have.0)
            });
            if let Some(session) = self.osds[&osd].mon_session {
                let request = Msg::MonGetMap(MonGetMap {
                    have,
                    subscribe: true,
                });
                self.send_session(session, Endpoint::Osd(osd, ShardIndex(0)), request);
            }
        }
    }

    fn osd_handle_map(&mut self, osd: OsdId, map: Arc<OsdMap>) {
        let node = self.osds.get_mut(&osd).expect("exists");
        if map.epoch <= node.epoch() {
            return;
        }
        let instance = (u64::from(osd.0) << 32) | node.starts;
        let marked_down = map.osd(osd).is_some_and(|info| {
            !info.up || info.shard_addrs != node.addrs || info.instance != instance
        });
        let map = carmine_osd::map_for_instance(map, osd, instance, &node.addrs);
        node.map = Some(map.clone());
        let reboot = marked_down && map.epoch > node.booted_epoch && node.mon_session.is_some();
        for index in 0..node.shard_count {
            let mut out = Vec::new();
            self.shard_mut(osd, ShardIndex(index))
                .handle_map(map.clone(), &mut out);
            self.osd_outputs(osd, ShardIndex(index), out);
            self.observe_logs(osd, ShardIndex(index));
            self.schedule_sync(osd, ShardIndex(index));
        }
        if reboot {
            self.trace.note(self.now(), || {
                format!("{osd}: e{} marks it down; boots again", map.epoch.0)
            });
            self.osd_boot(osd);
        }
    }

    /// Carries out a shard's outputs, as the daemon's `ShardLoop::carry_out`.
    ///
    /// Everything a handled message produced leaves at once, even on a shard whose
    /// flush waits for a [`Event::DiskSync`]. That covers the daemon's order (a
    /// primary's RepOps leave before its flush, see
    /// `carmine_osd::Output::may_leave_before_flush`) and is stricter than it (the
    /// daemon holds everything else until the flush): the checkers see that the PGs'
    /// own wait for the store's `committed_through` keeps every durability claim
    /// honest, which the [`crate::Canary::AckBeforeSync`] canary relies on (holding
    /// replies until the sync here would hide the lying store from the checkers).
    pub(crate) fn osd_outputs(&mut self, osd: OsdId, shard: ShardIndex, outputs: Vec<Output>) {
        if self.store_failed(osd) {
            return;
        }
        let urgent = match &mut self.osds.get_mut(&osd).expect("exists").process {
            Process::Up(shards) => shards[usize::from(shard.0)].take_report_urgent(),
            Process::Down(_) => false,
        };
        if urgent {
            self.schedule(0, Event::OsdStatsUrgent(osd));
        }
        let from = Endpoint::Osd(osd, shard);
        for output in outputs {
            match output {
                Output::Client(conn, msg) => self.send_session(conn, from, msg),
                Output::Peer(to_osd, to_shard, msg) => {
                    let up = self
                        .shard_mut(osd, shard)
                        .map()
                        .is_some_and(|map| map.is_up(to_osd));
                    if up {
                        let to = Endpoint::Osd(to_osd, to_shard);
                        let sent = self.net.send_link(self.now(), from, to, msg);
                        self.carry(sent);
                    }
                }
            }
        }
    }

    pub(crate) fn osd_stats(&mut self, osd: OsdId) {
        self.schedule(STATS_INTERVAL, Event::OsdStats(osd));
        self.send_osd_stats(osd);
    }

    pub(crate) fn send_osd_stats(&mut self, osd: OsdId) {
        let node = &self.osds[&osd];
        let (Process::Up(shards), Some(session)) = (&node.process, node.mon_session) else {
            return;
        };
        let mut stats = OsdStats {
            osd,
            map_epoch: node.epoch(),
            ..OsdStats::default()
        };
        for shard in shards {
            stats.pgs.extend(shard.pg_stats());
            let usage = shard.usage();
            stats.object_count += usage.object_count;
            stats.data_bytes += usage.data_bytes;
            stats.metadata_bytes += usage.metadata_bytes;
            stats.capacity_bytes = stats.capacity_bytes.saturating_add(usage.capacity_bytes);
            let counters = shard.counters();
            stats.ops_total += counters.ops_total;
            stats.write_bytes_total += counters.write_bytes_total;
            stats.read_bytes_total += counters.read_bytes_total;
        }
        let msg = Msg::OsdStats(stats);
        self.send_session(session, Endpoint::Osd(osd, ShardIndex(0)), msg);
    }

    /// The process dies: shards and sessions go, the stores stay.
    pub(crate) fn crash_osd(&mut self, osd: OsdId) {
        self.save_repair_counts(osd);
        // The device is reset (`SimStore::crash`): an armed disk error is gone with it.
        self.disk_errors.armed.retain(|&(armed, _)| armed != osd);
        let node = self.osds.get_mut(&osd).expect("exists");
        if !node.is_up() {
            return;
        }
        let Process::Up(shards) = std::mem::replace(&mut node.process, Process::Down(Vec::new()))
        else {
            unreachable!("checked above");
        };
        let mut stores = Vec::new();
        let mut failures = Vec::new();
        for (index, shard) in shards.into_iter().enumerate() {
            match shard.into_store().crash() {
                Ok(store) => stores.push(store),
                Err(error) => {
                    failures.push(format!("{osd} shard {index}: {error}"));
                    stores.push(SimStore::new(DiskKind::Log, 0));
                }
            }
        }
        node.process = Process::Down(stores);
        node.sync_scheduled.iter_mut().for_each(|s| *s = false);
        node.mon_session = None;
        node.map = None;
        node.booted_epoch = Epoch(0);
        self.violations.extend(failures);
        self.net.crash(osd);
        let closed = self
            .net
            .close_where(|a, b| a == Node::Osd(osd) || b == Node::Osd(osd));
        for (session, a, b) in closed {
            // The peer's kernel answers with a reset: the survivor learns at once.
            let survivor = if a.node() == Node::Osd(osd) { b } else { a };
            let delay = self.rng.between(MILLISECOND, 5 * MILLISECOND);
            self.schedule(
                delay,
                Event::SessionClosed {
                    session,
                    endpoint: survivor,
                },
            );
        }
    }

    pub(crate) fn restart_osd(&mut self, osd: OsdId) {
        if self.is_retired(osd) {
            return;
        }
        // The process starts now: its first clock reading is its start (see leases).
        let now = self.osd_instant(osd);
        let no_leases = self.no_leases();
        let node = self.osds.get_mut(&osd).expect("exists");
        let Process::Down(stores) = &mut node.process else {
            return;
        };
        let count = node.shard_count;
        let tuning = self.config.tuning;
        let shards = std::mem::take(stores)
            .into_iter()
            .enumerate()
            .map(|(index, store)| {
                let deferred = store.needs_sync();
                let mut shard = OsdShard::new(osd, ShardIndex(index as u16), count, store);
                shard.set_deferred_flush(deferred);
                shard.set_tuning(tuning);
                if !no_leases {
                    shard.set_clock(now);
                }
                shard
            })
            .collect();
        node.process = Process::Up(shards);
        node.starts += 1;
        self.trace.note(self.now(), || format!("{osd} restarts"));
        self.schedule(MILLISECOND, Event::OsdConnectMon(osd));
    }

    /// Counts a peer message delivered to a shard that does not own its PG: the
    /// shard drops it, so a protocol waiting for an answer stalls.
    fn note_misrouted(&mut self, osd: OsdId, shard: ShardIndex, msg: &Msg) {
        let Some(pgid) = peer_message_pgid(msg) else {
            return;
        };
        let owner = pg_shard(pgid, self.osds[&osd].shard_count);
        if owner != shard {
            self.misrouted_total += 1;
            let kind = msg.msg_type();
            self.trace.note(self.now(), || {
                format!(
                    "MISROUTED: type {kind} for {pgid} reached {osd} shard {}, owner is shard {}",
                    shard.0, owner.0
                )
            });
        }
    }
}

/// The PG an OSD-to-OSD message is about.
fn peer_message_pgid(msg: &Msg) -> Option<PgId> {
    Some(match msg {
        Msg::RepOp(m) => m.pgid,
        Msg::RepOpReply(m) => m.pgid,
        Msg::PgQuery(m) => m.pgid,
        Msg::PgNotify(m) => m.pgid,
        Msg::PgLogRequest(m) => m.pgid,
        Msg::PgLogReply(m) => m.pgid,
        Msg::PgActivate(m) => m.pgid,
        Msg::PgActivated(m) => m.pgid,
        Msg::PgPull(m) => m.pgid,
        Msg::PgPush(m) => m.pgid,
        Msg::PgPushReply(m) => m.pgid,
        Msg::PgRemove(m) => m.pgid,
        Msg::PgLease(m) => m.pgid,
        Msg::PgLeaseAck(m) => m.pgid,
        Msg::PgReserve(m) => m.pgid,
        _ => return None,
    })
}

/// An up OSD and one of its shards, drawn from `rng` (the OSD first, then the shard):
/// where a fault class strikes a store.
pub(crate) fn pick_up_shard(
    osds: &std::collections::BTreeMap<OsdId, OsdNode>,
    rng: &mut crate::rng::Rng,
) -> Option<(OsdId, ShardIndex)> {
    let up: Vec<OsdId> = (osds.iter())
        .filter(|(_, node)| node.is_up())
        .map(|(&osd, _)| osd)
        .collect();
    if up.is_empty() {
        return None;
    }
    let osd = up[rng.index(up.len())];
    let shard = ShardIndex(rng.below(u64::from(osds[&osd].shard_count)) as u16);
    Some((osd, shard))
}
