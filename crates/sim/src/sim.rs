//! The simulator: one thread, one event queue, virtual time. It owns the monitors, the
//! OSD processes (their shards and stores), the clients and the network, and turns
//! each event into calls on the pure cores and each of their outputs into messages.
//!
//! A run has phases: warm-up (OSDs boot, clients fetch the map), faults (workload and
//! random faults), quiet (everything healed; the workload goes on for a while, then
//! stops), read-back (one client reads every object), then the checkers.

use crate::bitflips::FlipState;
use crate::checkers::{self, FinalState};
use crate::client_node::ClientNode;
use crate::config::SimConfig;
use crate::decommission::DecommissionState;
use crate::disk_errors::DiskErrorState;
use crate::dump;
use crate::events::{Event, EventQueue, EVENTS_PER_RUN_MAX};
use crate::expansion::ExpansionState;
use crate::faults::FaultState;
use crate::history::History;
use crate::log_record::LogRecord;
use crate::mon_node::{MonNode, MonRecord};
use crate::network::{Endpoint, Network, Sent, Wire};
use crate::osd_node::OsdNode;
use crate::remaps::RemapState;
use crate::replacement::ReplacementState;
use crate::rng::Rng;
use crate::snap_removal::SnapRemovals;
use crate::space::SpaceState;
use crate::time::{Clock, Nanos, MILLISECOND, SECOND};
use crate::trace::Trace;
use crate::SimReport;
use carmine_clustermap::{pg_shard, OsdMap, PoolSpec};
use carmine_proto::Msg;
use carmine_types::{EVersion, OsdId, PoolId};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Where the run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Warmup,
    Faults,
    /// Healed; clients still issue ops.
    Quiet,
    /// Clients stopped issuing; waiting for their ops and for convergence.
    Draining,
    ReadBack,
    Done,
}

/// How often each monitor ticks (and the simulator watches for convergence): the
/// monitors' Raft tick.
pub const MON_TICK: Nanos = 100 * MILLISECOND;

/// The simulated cluster. See the module docs.
pub struct Sim {
    pub(crate) config: SimConfig,
    pub(crate) clock: Clock,
    pub(crate) queue: EventQueue,
    pub(crate) net: Network,
    pub(crate) trace: Trace,
    pub(crate) history: History,
    pub(crate) log_record: LogRecord,
    pub(crate) mons: Vec<MonNode>,
    pub(crate) mon_record: MonRecord,
    /// The newest map any monitor applied.
    pub(crate) newest_map: Arc<OsdMap>,
    pub(crate) fsid: u128,
    pub(crate) osds: BTreeMap<OsdId, OsdNode>,
    pub(crate) clients: Vec<ClientNode>,
    pub(crate) pool: PoolId,
    pub(crate) phase: Phase,
    pub(crate) rng: Rng,
    pub(crate) workload_rng: Rng,
    /// `--snapshots`: the newest snapshot id allocated, and the live ones, newest first.
    pub(crate) snap_seq: u64,
    pub(crate) live_snaps: Vec<u64>,
    /// `--snap-trim`: removals asked for, and when the maps showed them.
    pub(crate) snap_removals: SnapRemovals,
    pub(crate) faults: FaultState,
    pub(crate) violations: Vec<String>,
    pub(crate) quiet_at: Nanos,
    pub(crate) converged_at: Option<Nanos>,
    pub(crate) canary_fired: bool,
    /// Peer messages delivered to a shard that does not own their PG.
    pub(crate) misrouted_total: u64,
    pub(crate) flips: FlipState,
    pub(crate) tamper: crate::tamper::TamperState,
    pub(crate) disk_errors: DiskErrorState,
    pub(crate) space: SpaceState,
    pub(crate) remaps: RemapState,
    pub(crate) expansion: ExpansionState,
    pub(crate) replacements: ReplacementState,
    pub(crate) decommission: DecommissionState,
    /// Backfill activations and pull-everything requests delivered.
    pub(crate) backfills: u64,
}

impl Sim {
    pub fn new(config: SimConfig) -> Sim {
        let clock = Clock::new();
        let trace = if config.full_trace {
            Trace::keeping_everything()
        } else {
            Trace::default()
        };
        let seed_rng = Rng::new(config.seed);
        let mut map = OsdMap::new_dev(config.osd_count);
        let spec = PoolSpec::replicated("sim", config.pool_size, config.pg_num);
        let pool = map.create_pool(spec).expect("the seed picks a valid pool");
        if config.snap_trim {
            // The clients draw snapshot ids from the run's own allocator, which
            // stands for the monitor's; the pool must have allocated them for the
            // monitor to accept their removal.
            let pool = map.pools.get_mut(&pool).expect("just created");
            for _ in 0..crate::client_node::snapshots_max(&config) {
                pool.allocate_snap();
            }
        }
        let mut mon_record = MonRecord::default();
        let mons = Sim::new_monitors(&map, config.mon_count, clock.instant(), &mut mon_record);
        let fsid = map.fsid;
        let newest_map = Arc::new(map);
        let osds = (0..config.osd_count)
            .map(|id| {
                let ack_before_sync = config.canary == crate::Canary::AckBeforeSync;
                let node = OsdNode::new(
                    OsdId(id),
                    config.shards_per_osd,
                    config.disk,
                    config.seed,
                    ack_before_sync,
                    config.tuning,
                );
                (OsdId(id), node)
            })
            .collect();
        let clients = (0..config.client_count)
            .map(|index| ClientNode::new(index, &config))
            .collect();
        Sim {
            net: Network::new(seed_rng.fork(1), config.latency),
            rng: seed_rng.fork(2),
            workload_rng: seed_rng.fork(3),
            snap_seq: 0,
            live_snaps: Vec::new(),
            snap_removals: SnapRemovals::default(),
            faults: FaultState::new(seed_rng.fork(4)),
            flips: FlipState::new(config.seed),
            tamper: crate::tamper::TamperState::new(config.seed),
            disk_errors: DiskErrorState::new(config.seed),
            space: SpaceState::new(config.seed),
            remaps: RemapState::new(config.seed),
            expansion: ExpansionState::new(config.seed),
            replacements: ReplacementState::new(config.seed),
            decommission: DecommissionState::new(config.seed),
            config,
            clock,
            queue: EventQueue::default(),
            trace,
            history: History::default(),
            log_record: LogRecord::default(),
            mons,
            mon_record,
            newest_map,
            fsid,
            osds,
            clients,
            pool,
            phase: Phase::Warmup,
            violations: Vec::new(),
            quiet_at: 0,
            converged_at: None,
            canary_fired: false,
            misrouted_total: 0,
            backfills: 0,
        }
    }

    pub(crate) fn now(&self) -> Nanos {
        self.clock.now()
    }

    pub(crate) fn schedule(&mut self, after: Nanos, event: Event) {
        self.queue.push(self.clock.now() + after, event);
    }

    /// Runs to the end and checks.
    pub fn run(mut self) -> SimReport {
        let _daemon_log = (self.config.daemon_log.as_deref()).map(crate::daemon_log::capture);
        self.start();
        while self.phase != Phase::Done {
            let Some((at, seq, event)) = self.queue.pop() else {
                self.violations.push("the event queue ran dry".into());
                break;
            };
            self.clock.advance_to(at);
            self.trace.begin(at, seq);
            self.handle(event);
            if self.config.daemon_log.is_some() {
                for line in crate::daemon_log::take_lines() {
                    self.trace.note(at, || format!("  log: {line}"));
                }
            }
            assert!(
                self.trace.events() < EVENTS_PER_RUN_MAX,
                "livelock: {EVENTS_PER_RUN_MAX} events (seed {})",
                self.config.seed
            );
        }
        self.finish()
    }

    fn start(&mut self) {
        let osds: Vec<OsdId> = self.osds.keys().copied().collect();
        for osd in osds {
            let jitter = self.rng.below(50 * MILLISECOND);
            self.schedule(jitter, Event::OsdConnectMon(osd));
            let jitter = self.rng.below(SECOND);
            self.schedule(jitter, Event::OsdStats(osd));
            // Ticks start at a fixed offset, so the seeded stream above is unchanged.
            let offset = u64::from(osd.0) * crate::time::MILLISECOND;
            self.schedule(offset, Event::OsdTick(osd));
        }
        for client in 0..self.config.client_count {
            let jitter = self.rng.below(50 * MILLISECOND);
            self.schedule(jitter, Event::ClientConnectMon(client));
            let jitter = self.rng.below(100 * MILLISECOND);
            self.schedule(jitter, Event::ClientTick(client));
        }
        self.start_monitors();
        self.schedule(self.config.warmup, Event::StartWorkload);
        self.schedule(self.config.warmup + self.config.fault_phase, Event::Quiet);
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Deliver(wire) => self.deliver(wire),
            Event::SessionClosed { session, endpoint } => self.session_closed(session, endpoint),
            Event::OsdConnectMon(osd) => self.osd_connect_mon(osd),
            Event::ClientConnectMon(client) => self.client_connect_mon(client),
            Event::ClientUnreachable { client, target } => self.client_unreachable(client, target),
            Event::ClientTick(client) => self.client_tick(client),
            Event::ClientIssue(client) => self.client_issue(client),
            Event::OsdStats(osd) => self.osd_stats(osd),
            Event::OsdStatsUrgent(osd) => self.send_osd_stats(osd),
            Event::OsdTick(osd) => self.osd_tick(osd),
            Event::MonTick(rank) => self.mon_tick(rank),
            Event::MonConnectPeer { from, to } => self.mon_connect_peer(from, to),
            Event::MonRestart(rank) => self.restart_mon(rank),
            Event::StartWorkload => self.start_workload(),
            Event::Fault => self.inject_fault(),
            Event::EndFault(id) => self.end_fault(id),
            Event::OsdRestart(osd) => self.restart_osd(osd),
            Event::DiskSync { osd, shard, start } => self.disk_sync(osd, shard, start),
            Event::BitFlip => self.inject_bit_flip(),
            Event::Scrub => self.scrub_tick(),
            Event::DiskError => self.inject_disk_error(),
            Event::SpaceSqueeze => self.squeeze_space(),
            Event::SpaceRelease { osd, shard } => self.release_space(osd, shard),
            Event::Remap => self.remap(),
            Event::RemapRestore(setting) => self.remap_restore(setting),
            Event::Deploy(osd) => self.deploy(osd),
            Event::DiskDies => self.disk_dies(),
            Event::ReplacementStarts(osd) => self.replacement_starts(osd),
            Event::Decommission => self.decommission(),
            Event::DecommissionStep => self.decommission_step(),
            Event::StoreFailed { osd, start } => self.stop_on_store_failure(osd, start),
            Event::Quiet => self.enter_quiet(),
            Event::StopWorkload => {
                self.trace.note(self.now(), || "workload stops".into());
                self.phase = Phase::Draining;
            }
            Event::Deadline => self.deadline(),
        }
    }

    fn start_workload(&mut self) {
        self.trace
            .note(self.now(), || "workload and faults start".into());
        self.phase = Phase::Faults;
        for client in 0..self.config.client_count {
            self.schedule(0, Event::ClientIssue(client));
        }
        if self.config.faults.any_injected() {
            let first = self.faults.rng.exponential(self.config.fault_interval_mean);
            self.schedule(first, Event::Fault);
        }
        self.start_bit_flips();
        self.start_disk_errors();
        self.start_space_faults();
        self.start_remaps();
        self.start_expansion();
        self.start_replacements();
        self.start_decommission();
    }

    fn enter_quiet(&mut self) {
        self.trace
            .note(self.now(), || "quiet: every fault heals".into());
        self.phase = Phase::Quiet;
        self.quiet_at = self.now();
        self.disarm_disk_errors();
        self.release_all_space();
        self.restore_all_remaps();
        self.deploy_all_pending();
        self.end_replacements();
        self.heal_everything();
        self.schedule(self.config.quiet_workload, Event::StopWorkload);
        self.schedule(self.config.quiet_max, Event::Deadline);
    }

    fn deadline(&mut self) {
        let in_flight: usize = self.clients.iter().map(|c| c.objecter.in_flight()).sum();
        self.violations.push(format!(
            "the run did not finish within {}s of healing: phase {:?}, {in_flight} ops in flight, {}",
            self.config.quiet_max / SECOND,
            self.phase,
            self.convergence_problem().unwrap_or_else(|| "converged".into())
        ));
        self.phase = Phase::Done;
    }

    // --- the network ----------------------------------------------------------------

    /// Schedules what the network did with a message.
    pub(crate) fn carry(&mut self, sent: Sent) {
        if let Sent::At(at, wire) = sent {
            self.queue.push(at, Event::Deliver(wire));
        }
    }

    pub(crate) fn send_session(&mut self, session: u64, from: Endpoint, msg: Msg) {
        let sent = self.net.send_session(self.now(), session, from, msg);
        self.carry(sent);
    }

    fn deliver(&mut self, wire: Box<Wire>) {
        let now = self.now();
        let Some(wire) = self.net.admit(wire) else {
            self.trace.mix(b"lost");
            return;
        };
        if matches!(wire.via, crate::network::Via::Link { .. }) {
            let released = self.net.release_after_delivery(now, wire.from, wire.to);
            self.schedule_released(released);
        }
        if self.canary_strikes(&wire) {
            return;
        }
        self.mix_wire(&wire);
        match &wire.msg {
            Msg::PgActivate(activate) if activate.backfill => self.backfills += 1,
            Msg::PgPull(pull) if pull.all => self.backfills += 1,
            _ => {}
        }
        let full = self.config.full_trace;
        self.trace.note(now, || describe(&wire, full));
        match wire.to {
            Endpoint::Mon(rank) => self.mon_receive(rank, *wire),
            Endpoint::Osd(osd, shard) => self.osd_receive(osd, shard, *wire),
            Endpoint::Client(client) => self.client_receive(client, *wire),
        }
    }

    fn mix_wire(&mut self, wire: &Wire) {
        let from = format!("{}", wire.from);
        let to = format!("{}", wire.to);
        self.trace.mix(from.as_bytes());
        self.trace.mix(to.as_bytes());
        self.trace.mix_u64(u64::from(wire.msg.msg_type()));
        self.trace.mix(&wire.msg.encode_front());
    }

    /// The canary: drops the first replicated write to a replica and forges the
    /// replica's acknowledgement, so the primary acks a write a replica never saw.
    fn canary_strikes(&mut self, wire: &Wire) -> bool {
        if self.config.canary != crate::Canary::ForgedReplicaAck
            || self.canary_fired
            || self.phase != Phase::Faults
        {
            return false;
        }
        let Msg::RepOp(rep) = &wire.msg else {
            return false;
        };
        self.canary_fired = true;
        let reply = Msg::RepOpReply(carmine_proto::RepOpReply {
            pgid: rep.pgid,
            map_epoch: rep.map_epoch,
            rep_tid: rep.rep_tid,
            version: rep.entry.version,
            result: Ok(()),
            log_only: false,
        });
        let (pgid, version) = (rep.pgid, rep.entry.version);
        self.trace.note(self.now(), || {
            format!(
                "CANARY: dropped {pgid} v{version} to {}; forged its ack",
                wire.to
            )
        });
        let sent = self.net.send_link(self.now(), wire.to, wire.from, reply);
        self.carry(sent);
        true
    }

    fn session_closed(&mut self, session: u64, endpoint: Endpoint) {
        self.trace.mix_u64(session);
        self.trace.note(self.now(), || {
            format!("{endpoint} sees session {session} close")
        });
        match endpoint {
            Endpoint::Mon(rank) => self.mon_session_closed(rank, session),
            Endpoint::Osd(osd, _) => self.osd_session_closed(osd, session),
            Endpoint::Client(client) => self.client_session_closed(client, session),
        }
    }

    // --- convergence ----------------------------------------------------------------

    pub(crate) fn watch_convergence(&mut self) {
        if self.converged_at.is_none() && self.converged() {
            let at = self.now();
            self.trace.note(at, || "every PG is active+clean".into());
            self.converged_at = Some(at);
        }
        // The read-back starts, and the run ends, only while the cluster is converged
        // *now*: it may come apart again after it first converged (the monitors, their
        // quorum back, act on failure reports from before the heal and mark OSDs down),
        // and replicas compared mid-recovery differ for no fault of theirs.
        let idle = self.clients.iter().all(|c| c.objecter.in_flight() == 0);
        if self.phase == Phase::Draining && idle && self.converged_at.is_some() && self.converged()
        {
            self.start_read_back();
        }
        if self.phase == Phase::ReadBack {
            self.read_back_done();
        }
    }

    /// Every monitor on the newest map, every OSD up on it, every PG of it active+clean
    /// on its primary.
    fn converged(&self) -> bool {
        self.convergence_problem().is_none()
    }

    /// Why the cluster has not converged yet, in words.
    pub(crate) fn convergence_problem(&self) -> Option<String> {
        if let Some(problem) = self.mon_convergence_problem() {
            return Some(problem);
        }
        let map = self.newest_map.clone();
        // A retired OSD (the decommission class) stays down for good.
        let serving = self.osds.len()
            - usize::from(
                self.decommissioned()
                    .is_some_and(|osd| self.is_retired(osd)),
            );
        if map.up_count() != serving {
            return Some(format!(
                "{} of {serving} OSDs up in e{}",
                map.up_count(),
                map.epoch.0
            ));
        }
        if let Some((osd, _)) = (self.osds.iter())
            .find(|(osd, node)| !self.is_retired(**osd) && !node.has_epoch(map.epoch))
        {
            return Some(format!("{osd} lacks e{}", map.epoch.0));
        }
        for pgid in map.all_pgs() {
            let mapping = map.pg_mapping(pgid).expect("the pool exists");
            let Some(primary) = mapping.primary else {
                return Some(format!("{pgid} has no primary"));
            };
            if mapping.acting.len() != usize::from(self.config.pool_size) {
                return Some(format!("{pgid} acting {:?}", mapping.acting));
            }
            let shard = pg_shard(pgid, self.config.shards_per_osd);
            let state = self.osds[&primary].pg_state(shard, pgid);
            // A PG waiting out an earlier lease, or without its own, serves nothing
            // yet: not converged (its held ops would run after the read-back began).
            let clean = state.is_some_and(|state| {
                state.contains(carmine_proto::PgState::ACTIVE)
                    && state.contains(carmine_proto::PgState::CLEAN)
                    && !state.contains(carmine_proto::PgState::WAIT)
                    && !state.contains(carmine_proto::PgState::LAGGY)
            });
            if !clean {
                let state = state.map_or("absent".into(), |state| state.name());
                return Some(format!("{pgid} is {state} on its primary {primary}"));
            }
        }
        if let Some(problem) = self.snap_trim_problem() {
            return Some(problem);
        }
        if let Some(problem) = self.remap_problem() {
            return Some(problem);
        }
        if let Some(problem) = self.decommission_problem() {
            return Some(problem);
        }
        if let Some(problem) = self.tampered_problem() {
            return Some(problem);
        }
        self.unhealed_flip()
    }

    /// `--snap-trim`: a removal the monitor has not answered, or a primary with clones
    /// of removed snapshots still to trim.
    fn snap_trim_problem(&self) -> Option<String> {
        if !self.config.snap_trim {
            return None;
        }
        if self.snap_removals.any_pending() {
            return Some("a snapshot removal waits for the monitor".into());
        }
        let map = &self.newest_map;
        map.all_pgs().into_iter().find_map(|pgid| {
            let primary = map.pg_mapping(pgid)?.primary?;
            let shard = pg_shard(pgid, self.config.shards_per_osd);
            let idle = self.osds[&primary].pg_snap_trim_idle(shard, pgid);
            (!idle).then(|| format!("{pgid} has snapshots to trim on {primary}"))
        })
    }

    // --- the end ----------------------------------------------------------------------

    pub(crate) fn read_back_done(&mut self) {
        if self.phase == Phase::ReadBack
            && self.clients[0].objecter.in_flight() == 0
            && self.converged()
        {
            self.trace.note(self.now(), || "read-back done".into());
            self.phase = Phase::Done;
        }
    }

    /// What the cluster holds, and each PG's history (problems rebuilding one go to
    /// `problems`).
    fn final_state(&self, problems: &mut Vec<String>) -> FinalState {
        let map = self.newest_map.clone();
        let mut pgs = BTreeMap::new();
        let mut logs = BTreeMap::new();
        for pgid in map.all_pgs() {
            let acting = map.pg_mapping(pgid).map(|m| m.acting).unwrap_or_default();
            let shard = pg_shard(pgid, self.config.shards_per_osd);
            let members = acting
                .iter()
                .map(|&osd| (osd, dump::dump_pg(self.osds[&osd].store(shard), pgid)))
                .collect::<Vec<_>>();
            let Some((_, primary)) = members.first() else {
                continue;
            };
            let final_log = dump::log_entries(primary);
            let info = dump::pg_info(primary);
            match (final_log, info) {
                (Ok(final_log), Ok(info)) => {
                    let last_update = info.map_or(EVersion::ZERO, |info| info.last_update);
                    match self.log_record.history(pgid, final_log, last_update) {
                        Ok(history) => {
                            logs.insert(pgid, history);
                        }
                        Err(error) => problems.push(error),
                    }
                }
                (Err(error), _) | (_, Err(error)) => problems.push(format!("{pgid}: {error}")),
            }
            pgs.insert(pgid, members);
        }
        problems.extend(self.log_record.conflicts());
        FinalState {
            map,
            pool: self.pool,
            pgs,
            logs,
            snaps_removed_at: self.snap_removals.removed_at().clone(),
        }
    }

    fn finish(mut self) -> SimReport {
        match self.converged_at {
            Some(at) if at - self.quiet_at <= self.config.converge_bound => {}
            Some(at) => self.violations.push(format!(
                "PGs took {}ms after healing to become active+clean (bound {}ms)",
                (at - self.quiet_at) / MILLISECOND,
                self.config.converge_bound / MILLISECOND
            )),
            None => self
                .violations
                .push("the PGs never all became active+clean after healing".into()),
        }
        let mut violations = std::mem::take(&mut self.violations);
        let end = self.final_state(&mut violations);
        if self.misrouted_total > 0 {
            violations.push(format!(
                "{} OSD-to-OSD messages reached a shard that does not own their PG (dropped there)",
                self.misrouted_total
            ));
        }
        violations.extend(checkers::check(&self.history, &end, &self.mon_record));
        let snap_trims = (end.logs.values().flatten())
            .filter(|entry| entry.reqid.client == carmine_osd::SNAP_TRIM_CLIENT)
            .count() as u64;
        SimReport {
            seed: self.config.seed,
            ok: violations.is_empty(),
            trace_hash: self.trace.hash(),
            events: self.trace.events(),
            virtual_ms: self.now() / MILLISECOND,
            ops_acked: self.history.acked_count(),
            ops_failed: self.history.failed_count(),
            faults: self.faults.injected,
            bit_flips: self.flips.flips.len() as u64,
            disk_errors: self.disk_errors.injected,
            store_failure_stops: self.disk_errors.stops,
            space_squeezes: self.space.squeezes,
            remaps: self.remaps.changes,
            osds_added: self.expansion.deployed,
            pgs_on_added_osds: self.pgs_on_added_osds(),
            disks_replaced: self.replacements.replaced,
            replaced_marked_lost: self.replacements.marked_lost,
            replaced_purged: self.replacements.purged,
            osds_retired: self.decommission.retired,
            retirement_refusals: self.decommission.refused,
            repairs: self.repairs_total(),
            scrub_compared: self.live_counters(|c| c.scrub_objects_compared_total),
            scrub_differing: self.live_counters(|c| {
                c.scrub_replica_copies_differing_total + c.scrub_own_copies_lost_total
            }),
            tampered: self.tamper.tampered.len() as u64,
            backfills: self.backfills,
            snapshots: self.snap_seq,
            snapshots_removed: self.snap_removals.removed_count(),
            snap_trims,
            snapshot_reads: self.history.snapshot_reads(),
            shape: self.config.shape(),
            disk: self.config.disk,
            mon_count: self.config.mon_count,
            fault_classes: self.config.faults,
            violations,
            fault_log: self.faults.log.clone(),
            trace_tail: self.trace.tail(),
        }
    }
}

/// A message in a few words, for the trace.
/// Longest description of a message outside the core kinds, unless the whole trace is
/// kept (`--trace`), where it is written out whole.
const DESCRIPTION_BYTES_MAX: usize = 200;

/// `text` cut to at most `max` bytes on a character boundary, marked when cut.
fn clip(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

fn describe(wire: &Wire, full: bool) -> String {
    let what = match &wire.msg {
        Msg::OsdOp(op) => format!("OsdOp {} {} {}", op.reqid, op.pgid, op.oid),
        Msg::OsdOpReply(reply) => {
            format!(
                "OsdOpReply {} {:?} v{}",
                reply.reqid,
                reply.result.as_ref().err(),
                reply.version
            )
        }
        Msg::RepOp(rep) => format!(
            "RepOp {} v{} tid {}",
            rep.pgid, rep.entry.version, rep.rep_tid
        ),
        Msg::RepOpReply(reply) => format!(
            "RepOpReply {} v{} tid {}",
            reply.pgid, reply.version, reply.rep_tid
        ),
        Msg::OsdMap(map) => format!("OsdMap e{}", map.newest_epoch().0),
        Msg::OsdBoot(boot) => format!("OsdBoot {}", boot.osd),
        other if full => format!("{other:?}"),
        other => clip(format!("{other:?}"), DESCRIPTION_BYTES_MAX),
    };
    format!("{} -> {}: {what}", wire.from, wire.to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipping_cuts_on_a_character_boundary_and_says_so() {
        assert_eq!(clip("short".into(), 200), "short");
        assert_eq!(clip("abcdef".into(), 4), "abcd…");
        // 'é' is two bytes: a cut at byte 2 would split it.
        assert_eq!(clip("aéb".into(), 2), "a…");
    }
}
