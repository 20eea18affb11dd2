//! The map service: what clients and OSDs ask of a monitor, and how the leader turns
//! commands, boots and silence into the next map.

use crate::entry::{MonEntry, Origin};
use crate::{ConnId, MonOutput, Monitor, Op, QUEUED_OPS_MAX};
use carmine_clustermap::{Fullness, HistoryTracker, OsdFlags, OsdMap, OsdMapError, WEIGHT_IN};
use carmine_proto::{
    Command, CommandOutput, MonCommand, MonForward, MonGetMap, Msg, OsdBoot, OsdMapMsg, OsdStats,
    PgState,
};
use carmine_types::{EntityKind, EntityName, Epoch};
use std::collections::BTreeMap;
use std::time::Instant;

impl Monitor {
    pub(crate) fn dispatch(
        &mut self,
        now: Instant,
        conn: ConnId,
        from: EntityName,
        msg: Msg,
        out: &mut Vec<MonOutput>,
    ) {
        match msg {
            Msg::MonGetMap(request) => self.handle_get_map(conn, request, out),
            Msg::OsdBoot(boot) => self.handle_boot(now, conn, from, boot, out),
            Msg::OsdStats(stats) => self.handle_stats(now, from, stats, out),
            Msg::OsdFailure(report) => self.handle_failure(now, from, report, out),
            Msg::MonCommand(command) => self.accept_command(now, conn, from, command, out),
            Msg::MonRaft(raft) => self.handle_raft(now, from, raft),
            Msg::MonForward(forward) if from.kind == EntityKind::Mon => {
                self.route(now, forward, out)
            }
            Msg::MonCommandReply(reply) if from.kind == EntityKind::Mon => {
                let origin = Origin {
                    rank: self.rank,
                    token: reply.tid,
                };
                self.answer(origin, reply.result, out);
            }
            other => tracing::warn!(
                "mon.{}: ignoring unexpected message type {} from {from}",
                self.rank,
                other.msg_type()
            ),
        }
    }

    /// Serves a map request from the applied state (see [`Monitor::map_messages_after`])
    /// and, with `subscribe`, records the subscriber as holding the newest epoch.
    fn handle_get_map(&mut self, conn: ConnId, request: MonGetMap, out: &mut Vec<MonOutput>) {
        for msg in self.map_messages_after(request.have) {
            out.push(MonOutput::Send(conn, Msg::OsdMap(msg)));
        }
        let holds = request.have.max(self.map.epoch);
        if let Some(sent) = self.subscribers.get_mut(&conn) {
            *sent = (*sent).max(holds);
        } else if request.subscribe {
            self.subscribers.insert(conn, holds);
        }
    }

    /// What brings a holder of epoch `have` to the applied map: nothing if it is not
    /// behind; the incrementals to every epoch after it while they are all kept (a PG
    /// must see each interval change), in messages of bounded size; else, to a
    /// newcomer (`have` 0) or one too far behind, the newest full map.
    pub(crate) fn map_messages_after(&self, have: Epoch) -> Vec<OsdMapMsg> {
        if have >= self.map.epoch {
            return Vec::new();
        }
        let oldest_kept = self.recent_incrementals.front().map(|(inc, _)| inc.epoch);
        let newcomer = have.0 == 0;
        if newcomer || oldest_kept.is_none_or(|oldest| oldest.0 > have.0 + 1) {
            return vec![OsdMapMsg::full(self.map.clone())];
        }
        let mut messages = Vec::new();
        let mut batch = Vec::new();
        let mut batch_bytes = 0;
        for (inc, bytes) in &self.recent_incrementals {
            if inc.epoch <= have {
                continue;
            }
            if !batch.is_empty() && batch_bytes + bytes > crate::INCREMENTAL_BYTES_PER_MESSAGE_MAX {
                messages.push(OsdMapMsg::incrementals(std::mem::take(&mut batch)));
                batch_bytes = 0;
            }
            batch.push(inc.clone());
            batch_bytes += bytes;
        }
        assert_eq!(
            batch.last().map(|inc| inc.epoch),
            Some(self.map.epoch),
            "the kept incrementals lead to the applied map"
        );
        messages.push(OsdMapMsg::incrementals(batch));
        messages
    }

    fn handle_boot(
        &mut self,
        now: Instant,
        conn: ConnId,
        from: EntityName,
        boot: OsdBoot,
        out: &mut Vec<MonOutput>,
    ) {
        if from.kind != EntityKind::Osd || from.id != u64::from(boot.osd.0) {
            tracing::warn!(
                "mon.{}: {from} tried to boot as {}; ignored",
                self.rank,
                boot.osd
            );
            return;
        }
        if boot.fsid != self.map.fsid {
            tracing::warn!(
                "mon.{}: {} belongs to another cluster; ignored",
                self.rank,
                boot.osd
            );
            return;
        }
        // Subscribe first, so the new instance sees every epoch published from here on
        // (the first as a full map: what it holds is unknown until its MonGetMap).
        self.subscribers.entry(conn).or_insert(Epoch(0));
        let tracking = self.osds.entry(boot.osd).or_default();
        tracking.sessions.insert(conn);
        tracking.last_heard = Some(now);
        self.conn_osd.insert(conn, boot.osd);
        let osd = boot.osd;
        let inner = Msg::OsdBoot(boot);
        let forward = MonForward {
            origin_rank: self.rank,
            token: 0,
            sender: from,
            inner_type: inner.msg_type(),
            inner: inner.encode_front(),
        };
        self.add_pending_boot(forward, osd);
        self.resend_boots(now, out);
    }

    fn handle_stats(
        &mut self,
        now: Instant,
        from: EntityName,
        stats: OsdStats,
        out: &mut Vec<MonOutput>,
    ) {
        if from.kind != EntityKind::Osd || from.id != u64::from(stats.osd.0) {
            return;
        }
        if self.is_leader() {
            self.record_stats(now, stats);
        } else if self.known_leader.is_some() {
            let inner = Msg::OsdStats(stats);
            let forward = MonForward {
                origin_rank: self.rank,
                token: 0,
                sender: from,
                inner_type: inner.msg_type(),
                inner: inner.encode_front(),
            };
            self.route(now, forward, out);
        }
    }

    fn record_stats(&mut self, now: Instant, stats: OsdStats) {
        for pg in &stats.pgs {
            let clean = PgState::ACTIVE | PgState::CLEAN;
            let Some(mapping) = self.map.pg_mapping(pg.pgid) else {
                continue;
            };
            if mapping.primary != Some(stats.osd) {
                continue; // a report from an older interval
            }
            let is_clean = pg.state.0 & clean == clean;
            if is_clean {
                self.history.report_clean(pg.pgid, pg.interval_start);
            }
            let temp = self.map.pg_temp.get(&pg.pgid);
            if is_clean && temp.is_some() && pg.acting == mapping.acting {
                // The copies the pg_temp let catch up are complete: hand the PG back
                // to its up set.
                self.want_pg_temp(pg.pgid, Vec::new());
            } else if !pg.want_acting.is_empty() && temp != Some(&pg.want_acting) {
                self.want_pg_temp(pg.pgid, pg.want_acting.clone());
            }
            if pg.want_up_thru > Epoch(0) {
                self.want_up_thru(stats.osd, pg.want_up_thru);
            }
        }
        let osd = stats.osd;
        let tracking = self.osds.entry(osd).or_default();
        tracking.last_heard = Some(now);
        tracking.previous_stats = tracking.stats.take();
        tracking.stats = Some((now, stats));
        let changed = self
            .wanted_fullness(osd)
            .is_some_and(|wanted| wanted != self.map.fullness(osd));
        if changed && !self.queue.iter().any(|op| matches!(op, Op::Fullness)) {
            self.queue.push_back(Op::Fullness);
        }
    }

    /// The fullness `osd`'s latest usage report puts it in, against the map's ratios
    /// and the state the map shows (which gives the hysteresis); `None` without a
    /// report or for an OSD the map lacks.
    fn wanted_fullness(&self, osd: carmine_types::OsdId) -> Option<Fullness> {
        let info = self.map.osd(osd)?;
        let (_, stats) = self.osds.get(&osd)?.stats.as_ref()?;
        let used_bytes = stats.data_bytes.saturating_add(stats.metadata_bytes);
        let ratios = self.map.full_ratios();
        Some(ratios.fullness(used_bytes, stats.capacity_bytes, info.fullness))
    }

    /// One map with every OSD whose fullness changed (Ceph's `OSDMonitor` turns the
    /// usage reports into the full/backfillfull/nearfull state bits the same way).
    fn fullness_maps(&self) -> Option<Vec<OsdMap>> {
        let changes: Vec<(carmine_types::OsdId, Fullness)> = self
            .map
            .osds
            .keys()
            .filter_map(|&osd| Some((osd, self.wanted_fullness(osd)?)))
            .filter(|&(osd, wanted)| wanted != self.map.fullness(osd))
            .collect();
        if changes.is_empty() {
            return None;
        }
        let mut builder = MapBuilder::new(self);
        builder
            .step(|next| {
                for &(osd, fullness) in &changes {
                    tracing::info!(
                        "mon.{}: {osd} is now {} ({:?} before)",
                        self.rank,
                        fullness.name(),
                        next.fullness(osd)
                    );
                    next.set_fullness(osd, fullness)?;
                }
                Ok(())
            })
            .ok()?;
        Some(builder.maps)
    }

    /// Leader: queues recording `osd` alive through `epoch` (all pending ones go into
    /// one epoch). Only an OSD the map shows up gets it, and never beyond the map's
    /// epoch: a primary asks for the start of an interval it saw.
    fn want_up_thru(&mut self, osd: carmine_types::OsdId, epoch: Epoch) {
        let epoch = epoch.min(self.map.epoch);
        let Some(info) = self.map.osd(osd).filter(|info| info.up) else {
            return;
        };
        let pending = self.pending_up_thru.get(&osd).copied();
        if info.up_thru >= epoch || pending.is_some_and(|p| p >= epoch) {
            return;
        }
        self.pending_up_thru.insert(osd, epoch);
        if !self.queue.iter().any(|op| matches!(op, Op::UpThru)) {
            self.queue.push_back(Op::UpThru);
        }
    }

    /// One map recording every pending `up_thru` that still applies (the OSD still up
    /// and not yet recorded that far).
    fn up_thru_maps(&mut self) -> Option<Vec<OsdMap>> {
        let pending = std::mem::take(&mut self.pending_up_thru);
        let mut builder = MapBuilder::new(self);
        let mut changed = false;
        builder
            .step(|next| {
                for (osd, epoch) in pending {
                    if next
                        .osd(osd)
                        .is_some_and(|info| info.up && info.up_thru < epoch)
                    {
                        next.raise_up_thru(osd, epoch)?;
                        changed = true;
                    }
                }
                Ok(())
            })
            .ok()?;
        changed.then_some(builder.maps)
    }

    /// Leader: queues a pg_temp change (all pending ones go into one epoch).
    fn want_pg_temp(&mut self, pgid: carmine_types::PgId, acting: Vec<carmine_types::OsdId>) {
        if self.pending_pg_temp.get(&pgid) == Some(&acting) {
            return;
        }
        self.pending_pg_temp.insert(pgid, acting);
        if !self.queue.iter().any(|op| matches!(op, Op::PgTemp)) {
            self.queue.push_back(Op::PgTemp);
        }
    }

    /// One map with every pending pg_temp change that still applies.
    fn pg_temp_maps(&mut self) -> Option<Vec<OsdMap>> {
        let pending = std::mem::take(&mut self.pending_pg_temp);
        let mut builder = MapBuilder::new(self);
        let mut changed = false;
        builder
            .step(|next| {
                for (pgid, acting) in pending {
                    if next
                        .pg_temp
                        .get(&pgid)
                        .map_or(acting.is_empty(), |t| *t == acting)
                    {
                        continue;
                    }
                    match next.set_pg_temp(pgid, acting.clone()) {
                        Ok(()) => changed = true,
                        Err(error) => tracing::warn!("pg_temp {pgid} {acting:?} refused: {error}"),
                    }
                }
                Ok(())
            })
            .ok()?;
        changed.then_some(builder.maps)
    }

    /// The leader's side of a request: commands and boots are queued for proposal.
    pub(crate) fn lead_forward(
        &mut self,
        now: Instant,
        forward: MonForward,
        out: &mut Vec<MonOutput>,
    ) {
        let msg = match Msg::decode(forward.inner_type, forward.inner) {
            Ok(msg) => msg,
            Err(error) => {
                tracing::warn!("mon.{}: bad forwarded message: {error}", self.rank);
                return;
            }
        };
        let origin = Origin {
            rank: forward.origin_rank,
            token: forward.token,
        };
        let sender = forward.sender;
        match msg {
            Msg::MonCommand(MonCommand {
                command: Command::Status,
                ..
            }) => {
                let status = self.status(now);
                self.answer(origin, Ok(CommandOutput::Status(status)), out);
            }
            Msg::MonCommand(MonCommand {
                command: Command::OsdSafeToDestroy(osd),
                ..
            }) => {
                let answer = if self.holds_read_lease(now) {
                    self.safe_to_destroy(osd)
                        .map(|message| CommandOutput::Done {
                            epoch: self.map.epoch,
                            message,
                        })
                } else {
                    Err(
                        "the monitor leader has not heard from a majority of the monitors \
                         lately, so its map may be stale; retry"
                            .to_string(),
                    )
                };
                self.answer(origin, answer, out);
            }
            Msg::MonCommand(MonCommand {
                command: Command::PgDump,
                ..
            }) => {
                let pgs = self.pg_dump();
                let epoch = self.map.epoch;
                self.answer(origin, Ok(CommandOutput::PgStats { epoch, pgs }), out);
            }
            Msg::MonCommand(MonCommand { command, .. }) => {
                if self.queue.len() >= QUEUED_OPS_MAX {
                    let error = "the monitor leader is overloaded; retry later".to_string();
                    self.answer(origin, Err(error), out);
                    return;
                }
                self.queue.push_back(Op::Command { origin, command });
            }
            Msg::OsdBoot(boot) if sender == EntityName::osd(boot.osd) => {
                let tracking = self.osds.entry(boot.osd).or_default();
                tracking.last_heard = Some(now);
                let osd = boot.osd;
                self.queue
                    .retain(|op| !matches!(op, Op::Boot(queued) if queued.osd == osd));
                self.queue.push_back(Op::Boot(boot));
            }
            Msg::OsdStats(stats) if sender == EntityName::osd(stats.osd) => {
                self.record_stats(now, stats)
            }
            Msg::OsdFailure(report) if sender == EntityName::osd(report.reporter) => {
                self.record_failure(now, report)
            }
            other => tracing::warn!(
                "mon.{}: ignoring forwarded message type {} from {sender}",
                self.rank,
                other.msg_type()
            ),
        }
    }

    /// Turns a queued operation into the entry to propose (or answers it at once).
    pub(crate) fn evaluate(
        &mut self,
        now: Instant,
        op: Op,
        out: &mut Vec<MonOutput>,
    ) -> Option<MonEntry> {
        match op {
            Op::Command { origin, command } => match self.command_maps(command) {
                Ok((message, maps)) => Some(MonEntry {
                    origin: Some(origin),
                    message,
                    maps,
                }),
                Err(error) => {
                    self.answer(origin, Err(error), out);
                    None
                }
            },
            Op::Boot(boot) => self.boot_maps(boot).map(|maps| MonEntry {
                origin: None,
                message: String::new(),
                maps,
            }),
            Op::FailureCheck => self.failure_maps(now).map(|maps| MonEntry {
                origin: None,
                message: String::new(),
                maps,
            }),
            Op::PgTemp => self.pg_temp_maps().map(|maps| MonEntry {
                origin: None,
                message: String::new(),
                maps,
            }),
            Op::Fullness => self.fullness_maps().map(|maps| MonEntry {
                origin: None,
                message: String::new(),
                maps,
            }),
            Op::UpThru => self.up_thru_maps().map(|maps| MonEntry {
                origin: None,
                message: String::new(),
                maps,
            }),
        }
    }

    fn command_maps(&self, command: Command) -> Result<(String, Vec<OsdMap>), String> {
        let mut builder = MapBuilder::new(self);
        let message = match command {
            Command::Status | Command::PgDump | Command::OsdSafeToDestroy(_) => {
                unreachable!("reports are answered without a proposal")
            }
            Command::PoolCreate(spec) => {
                let osd_count = self.map.osds.len();
                if usize::from(spec.size) > osd_count {
                    return Err(format!(
                        "pool size {} exceeds the {osd_count} OSDs in the cluster; \
                         use a size of at most {osd_count} or add OSDs",
                        spec.size
                    ));
                }
                let name = spec.name.clone();
                let mut id = None;
                builder.step(|next| {
                    id = Some(next.create_pool(spec)?);
                    Ok(())
                })?;
                format!("pool '{name}' created (id {})", id.expect("created"))
            }
            Command::PoolDelete { name, confirm } => {
                if !confirm {
                    return Err(format!(
                        "deleting pool '{name}' destroys its data permanently; \
                         repeat with --yes-i-really-really-mean-it"
                    ));
                }
                builder.step(|next| next.delete_pool(&name).map(|_| ()))?;
                format!("pool '{name}' removed")
            }
            Command::OsdDown(id) => {
                builder.step(|next| next.mark_down(id))?;
                format!("marked down {id}")
            }
            Command::OsdLost { osd, confirm } => {
                if !confirm {
                    return Err(format!(
                        "marking {osd} lost gives up whatever only it holds: PGs that wait \
                         for it go on without it, and objects no other copy holds are \
                         unfound; repeat with --yes-i-really-mean-it"
                    ));
                }
                builder.step(|next| next.mark_lost(osd))?;
                format!("marked {osd} lost")
            }
            Command::OsdPurge {
                osd,
                confirm,
                force,
            } => {
                if !confirm {
                    return Err(format!(
                        "purging {osd} removes it from the map and the CRUSH hierarchy for \
                         good, and gives up whatever only it holds; repeat with \
                         --yes-i-really-mean-it"
                    ));
                }
                if self.map.is_up(osd) {
                    return Err(format!("{osd} is up; stop it before purging it"));
                }
                if !force {
                    self.safe_to_destroy(osd)
                        .map_err(|why| format!("{why}; --force purges it anyway"))?;
                }
                builder.step(|next| next.purge_osd(osd))?;
                format!("purged {osd}")
            }
            Command::OsdOut(id) => {
                builder.step(|next| next.set_weight(id, 0))?;
                format!("marked out {id}")
            }
            Command::OsdIn(id) => {
                builder.step(|next| next.set_weight(id, WEIGHT_IN))?;
                format!("marked in {id}")
            }
            Command::OsdPrimaryAffinity(id, affinity) => {
                builder.step(|next| next.set_primary_affinity(id, affinity))?;
                format!(
                    "set {id} primary-affinity to {}",
                    f64::from(affinity) / 65536.0
                )
            }
            Command::OsdFlag { flag, set } => {
                let Some((name, _)) = OsdFlags::NAMED.iter().find(|(_, f)| *f == flag) else {
                    return Err(format!("unknown OSD flag {flag:#x}"));
                };
                if self.map.flags.contains(flag) == set {
                    return Err(format!(
                        "{name} is already {}",
                        if set { "set" } else { "unset" }
                    ));
                }
                builder.step(|next| {
                    if set {
                        next.flags.0 |= flag;
                    } else {
                        next.flags.0 &= !flag;
                    }
                    Ok(())
                })?;
                format!("{name} is {}", if set { "set" } else { "unset" })
            }
            Command::OsdReweight(id, weight) => {
                builder.step(|next| next.reweight(id, weight))?;
                format!("reweighted {id} to {}", f64::from(weight) / 65536.0)
            }
            Command::ConfigSet { key, value } => {
                if let Some(value) = &value {
                    carmine_clustermap::settings::validate(&key, value)?;
                }
                builder.step(|next| next.set_config(&key, value.as_deref()))?;
                match value {
                    Some(_) => format!("set {key}"),
                    None => format!("key deleted: {key}"),
                }
            }
            Command::PoolSet { name, key, value } => {
                if key == "size" {
                    let osd_count = self.map.osds.len();
                    if value.parse::<usize>().is_ok_and(|size| size > osd_count) {
                        return Err(format!(
                            "pool size {value} exceeds the {osd_count} OSDs in the cluster"
                        ));
                    }
                }
                builder.step(|next| next.set_pool_value(&name, &key, &value))?;
                format!("set pool '{name}' {key} to {value}")
            }
            Command::PoolSnapCreate { pool } => {
                let mut snap = 0;
                builder.step(|next| {
                    snap = next.allocate_pool_snap(&pool)?;
                    Ok(())
                })?;
                carmine_proto::snap_allocated_message(&pool, snap)
            }
            Command::PoolSnapRemove { pool, snap } => {
                builder.step(|next| next.remove_pool_snap(&pool, snap))?;
                format!("removed snapshot id {snap} from pool '{pool}'")
            }
        };
        Ok((message, builder.maps))
    }

    /// A boot changes the map unless the map already shows this instance up (the same
    /// instance id and addresses: an OSD that only reconnected or moved to another
    /// monitor). A new instance of an OSD the map shows up is first marked down, as
    /// Ceph does, so every PG it served sees a new interval and peers again.
    fn boot_maps(&self, boot: OsdBoot) -> Option<Vec<OsdMap>> {
        if boot.fsid != self.map.fsid {
            return None;
        }
        let current = self.map.osd(boot.osd);
        let same_instance = |info: &carmine_clustermap::OsdInfo| {
            info.up && info.shard_addrs == boot.shard_addrs && info.instance == boot.instance
        };
        if current.is_some_and(same_instance) {
            return None;
        }
        if self.map.flags.contains(OsdFlags::NOUP) {
            // The OSD keeps asking; it comes up once an operator unsets noup.
            tracing::info!("mon.{}: noup is set; {} stays down", self.rank, boot.osd);
            return None;
        }
        let mut builder = MapBuilder::new(self);
        if self.map.is_up(boot.osd) {
            tracing::info!(
                "mon.{}: {} booted again; marking the old instance down",
                self.rank,
                boot.osd
            );
            builder.step(|next| next.mark_down(boot.osd)).ok()?;
        }
        let osd = boot.osd;
        let instance = boot.instance;
        let booted = builder.step(|next| {
            next.boot_osd(boot.osd, boot.shard_addrs, boot.host)?;
            next.set_instance(osd, instance)
        });
        if let Err(error) = booted {
            tracing::warn!("mon.{}: boot of {osd} refused: {error}", self.rank);
            return None;
        }
        tracing::info!("mon.{}: {osd} booted", self.rank);
        Some(builder.maps)
    }

    /// OSDs that enough peers report failed, or with no session and silent for the
    /// grace period, go down; down ones out after the interval.
    fn failure_maps(&self, now: Instant) -> Option<Vec<OsdMap>> {
        let mut to_down = Vec::new();
        let mut to_out = Vec::new();
        let mut reasons = BTreeMap::new();
        if !self.map.flags.contains(OsdFlags::NODOWN) {
            for (id, reason) in self.reported_down(now) {
                to_down.push(id);
                reasons.insert(id, reason);
            }
        }
        for (&id, tracking) in &self.osds {
            let Some(info) = self.map.osd(id) else {
                continue;
            };
            if info.up {
                let silent = tracking
                    .last_heard
                    .filter(|&at| now.duration_since(at) < self.config.osd_down_grace)
                    .is_none();
                if silent
                    && tracking.sessions.is_empty()
                    && !self.map.flags.contains(OsdFlags::NODOWN)
                    && !reasons.contains_key(&id)
                {
                    to_down.push(id);
                }
            } else if info.is_in() {
                let long_down = match self.failure_settings.down_out_interval {
                    Some(interval) => tracking
                        .down_since
                        .is_some_and(|at| now.duration_since(at) >= interval),
                    None => false,
                };
                if long_down && !self.map.flags.contains(OsdFlags::NOOUT) {
                    to_out.push(id);
                }
            }
        }
        if to_down.is_empty() && to_out.is_empty() {
            return None;
        }
        let mut builder = MapBuilder::new(self);
        builder
            .step(|next| {
                for &id in &to_down {
                    let reason = reasons
                        .get(&id)
                        .map_or("silent for the grace period", String::as_str);
                    tracing::info!("mon.{}: marking {id} down: {reason}", self.rank);
                    next.mark_down(id)?;
                }
                for &id in &to_out {
                    tracing::info!(
                        "mon.{}: marking {id} out: down for the down-out interval",
                        self.rank
                    );
                    next.set_weight(id, 0)?;
                }
                Ok(())
            })
            .ok()?;
        Some(builder.maps)
    }
}

/// Builds the next epoch(s) from the applied map, the PG histories advanced as the
/// monitor will advance them on apply.
struct MapBuilder {
    last: OsdMap,
    tracker: HistoryTracker,
    maps: Vec<OsdMap>,
}

impl MapBuilder {
    fn new(monitor: &Monitor) -> Self {
        Self {
            last: (*monitor.map).clone(),
            tracker: monitor.history.clone(),
            maps: Vec::new(),
        }
    }

    fn step(
        &mut self,
        change: impl FnOnce(&mut OsdMap) -> Result<(), OsdMapError>,
    ) -> Result<(), String> {
        let mut next = self.last.clone();
        change(&mut next).map_err(|error| error.to_string())?;
        next.clean_pg_temps();
        next.epoch = self.last.epoch.next();
        self.tracker.advance(&self.last, &mut next);
        self.last = next.clone();
        self.maps.push(next);
        Ok(())
    }
}
