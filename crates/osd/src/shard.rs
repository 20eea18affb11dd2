//! One OSD shard: the PGs it owns, its store, and the routing of messages to them.
//!
//! A shard owns its state outright (DESIGN.md §2): the runtime gives each shard thread
//! its own `OsdShard`, and nothing in it is shared or locked.

use crate::pg::purge::{marked_deleting, stray_notices, PurgeProgress, PURGE_OBJECTS_PER_TURN};
use crate::pg::Pg;
use crate::pg_set::PgSet;
use crate::recovery_sched::RecoverySched;
use crate::reserver::{Room, ShardReservations};
use crate::{ClientRef, MclockSettings, OsdTuning, Output};
use carmine_clustermap::settings::{
    SettingsReader, OSD_MAX_BACKFILLS, OSD_READ_LEASE_INTERVAL, OSD_RECOVERY_MAX_ACTIVE,
};
use carmine_clustermap::{pg_shard, OsdMap};
use carmine_proto::{Msg, OpError, OsdOp, OsdOpReply, PgStat};
use carmine_store::{CollectionId, ObjectStore, StoreUsage, Transaction};
use carmine_types::{EVersion, Epoch, OsdId, PgId, ShardIndex};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the daemon ticks a shard ([`OsdShard::tick`]): read lease renewals are
/// due every quarter of the lease length, checked at this pace.
pub const TICK_INTERVAL: Duration = Duration::from_millis(100);

/// Messages held until the shard has the map epoch their sender used.
pub const WAITING_FOR_MAP_MAX: usize = 8192;

/// Counters a shard reports (summed by shard 0 into the OSD's stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShardCounters {
    pub ops_total: u64,
    pub write_bytes_total: u64,
    pub read_bytes_total: u64,
    /// Client ops that arrived at a shard that does not own their PG.
    pub wrong_shard_total: u64,
    /// Object copies found unreadable (data failing its checksum) by reads, pushes
    /// and scrubs of the PGs this shard is primary for, and replica copies a scrub
    /// comparison found different from the primary's.
    pub corrupt_copies_found_total: u64,
    /// Of those, copies replaced by a good one.
    pub copies_repaired_total: u64,
    /// Scrub comparisons of the members' copies (see `pg/scrub_compare.rs`): objects
    /// compared, replica copies found different (also counted in
    /// `corrupt_copies_found_total`), and our own copies found lost.
    pub scrub_objects_compared_total: u64,
    pub scrub_replica_copies_differing_total: u64,
    pub scrub_own_copies_lost_total: u64,
}

/// Objects one [`OsdShard::scrub_step`] call verifies in one PG at most.
pub const SCRUB_OBJECTS_PER_STEP: usize = 64;

/// Bytes a deep-scrub step verifies by default (at least one object, whatever its
/// size). A step runs on the shard's thread between client ops: sixteen 4 MiB image
/// objects read whole in one step held it for 10–48 ms (fio's p99.9 at depth 16 went
/// from 4 ms to 12–34 ms). MemStore now verifies without reading; the budget bounds
/// what a store that reads (LogStore) spends per step.
pub const SCRUB_BYTES_PER_STEP: u64 = 4 * 1024 * 1024;

#[derive(Debug)]
enum Held {
    Client(ClientRef, OsdOp),
    Peer(OsdId, Msg),
}

/// The pure core of one OSD shard.
pub struct OsdShard<S: ObjectStore> {
    whoami: OsdId,
    index: ShardIndex,
    shard_count: u16,
    store: S,
    map: Option<Arc<OsdMap>>,
    pgs: BTreeMap<PgId, Pg>,
    /// PGs with writes waiting for a store commit, walked after every turn.
    pending: PgSet,
    /// The walk's copy of `pending` (kept to reuse its buffer).
    walking: Vec<PgId>,
    /// PGs with snapshot trimming to do (see `snap_trim_turn`).
    snap_trimming: BTreeSet<PgId>,
    waiting_for_map: VecDeque<(Epoch, Held)>,
    counters: ShardCounters,
    /// The runtime flushes once per event-loop turn ([`OsdShard::flush`]), so that
    /// every transaction of the turn shares one sync (group commit).
    deferred_flush: bool,
    tuning: OsdTuning,
    /// When recovery may push (`recovery_sched.rs`): pushes in flight over all PGs,
    /// bounded by `OsdTuning::recovery_max_active`, and the mClock tags.
    recovery: RecoverySched,
    /// Recovery pushes in flight over the shard: the tuning's, or the map's
    /// `osd_recovery_max_active`.
    recovery_max_active: usize,
    /// Recovery/backfill reservations: local and remote slots (see `reserver.rs`).
    reservations: ShardReservations,
    /// Where the next scrub step starts: a PG and the last object verified in it.
    scrub_cursor: Option<(PgId, Option<String>)>,
    /// Stray copies being deleted, a few objects per turn (see `pg/purge.rs`).
    deleting: BTreeSet<PgId>,
    /// PGs the current map makes this OSD a member of whose opening the store
    /// refused; the tick tries again (`retry_unopened`).
    unopened: BTreeSet<PgId>,
    /// The driver's latest clock reading ([`OsdShard::set_clock`]).
    clock: ShardClock,
    /// The first time given: when this process (instance) started, for the promises
    /// a restart forgot (see `pg/lease.rs`).
    started: Option<Instant>,
    /// The read lease length: the tuning's, or the map's `osd_read_lease_interval`.
    lease_duration: Duration,
    settings: SettingsReader,
}

/// Messages (peer messages included) a shard holds for a newer map before it drops
/// peer messages too.
pub const PEER_MESSAGES_WAITING_MAX: usize = 65_536;

impl<S: ObjectStore> OsdShard<S> {
    pub fn new(whoami: OsdId, index: ShardIndex, shard_count: u16, store: S) -> Self {
        assert!(index.0 < shard_count, "shard {index:?} of {shard_count}");
        Self {
            whoami,
            index,
            shard_count,
            store,
            map: None,
            pgs: BTreeMap::new(),
            pending: PgSet::default(),
            walking: Vec::new(),
            snap_trimming: BTreeSet::new(),
            waiting_for_map: VecDeque::new(),
            counters: ShardCounters::default(),
            deferred_flush: false,
            tuning: OsdTuning::default(),
            recovery: RecoverySched::default(),
            recovery_max_active: OsdTuning::default().recovery_max_active,
            reservations: ShardReservations::new(OsdTuning::default().max_backfills),
            scrub_cursor: None,
            deleting: BTreeSet::new(),
            unopened: BTreeSet::new(),
            clock: ShardClock::default(),
            started: None,
            lease_duration: OsdTuning::default().lease_duration,
            settings: SettingsReader::default(),
        }
    }

    /// The driver's monotonic clock, given before it hands the shard work (each event
    /// loop turn; the simulator before every event). PGs judge their read leases by
    /// it, so it must not lag the real time by more than a small part of the lease
    /// length. A shard never given a time enforces no leases (test harnesses that do
    /// not model time).
    ///
    /// A PG gets the reading only when the shard next hands it work or shows it
    /// (`ShardClock::give`), not here: walking every PG on every reading cost more
    /// than the write it preceded (64 PGs, twice per event-loop turn).
    pub fn set_clock(&mut self, now: Instant) {
        if let Some(before) = self.clock.now {
            assert!(now >= before, "shard clock went back");
        }
        self.clock = ShardClock {
            now: Some(now),
            reading: self.clock.reading + 1,
            lease_duration: self.lease_duration,
        };
        self.started.get_or_insert(now);
    }

    /// The periodic tick (the daemon's every [`TICK_INTERVAL`]): resends the peering
    /// requests left unanswered too long, renews the read leases of the PGs this
    /// shard leads and serves the ops held while a PG waited.
    pub fn tick(&mut self, now: Instant, out: &mut Vec<Output>) {
        let start = out.len();
        self.set_clock(now);
        let limit = self.recovery_max_active;
        for pg in self.pgs.values_mut() {
            if pg.is_primary() {
                self.clock.give(pg);
                // Resends and the end of a reservation backoff may start pushes.
                let before = self.recovery.grant(limit, Some(now), pg);
                pg.peering_tick(now, &mut self.store, out);
                pg.lease_tick(&mut self.store, out);
                self.reservations.settle(pg, out);
                pg.resend_refused(out);
                if pg.has_pending_commits() {
                    self.pending.insert(pg.pgid());
                }
                self.recovery.settle(Some(now), pg, before);
            }
        }
        if !self.unopened.is_empty() {
            self.retry_unopened(out);
        }
        let epoch = self.epoch();
        let room = self.room();
        self.reservations.sweep(&mut self.pgs, epoch, room, out);
        self.after_io(out);
        self.route_peer_messages(out, start);
    }

    /// What this shard has room to take in by backfill or recovery (its map entry and
    /// its store's usage against the map's ratios).
    fn room(&self) -> Room {
        let Some(map) = self.map.as_deref() else {
            return Room::default();
        };
        let marked = map.fullness(self.whoami);
        Room::new(marked, &map.full_ratios(), self.store.usage())
    }

    /// Recovery reservation slots of this shard: local in use, local waiting, remote
    /// in use, remote waiting.
    pub fn reservation_counts(&self) -> [usize; 4] {
        self.reservations.counts()
    }

    /// The read lease length in force.
    pub fn lease_duration(&self) -> Duration {
        self.lease_duration
    }

    /// A PG just opened: give it the time, and after a restart assume it promised a
    /// lease until one length after the process started (its promises were lost).
    fn prepare_opened(&self, pg: &mut Pg) {
        if let Some(now) = self.clock.now {
            pg.set_time(self.clock.reading, now, self.lease_duration);
        }
        if let Some(started) = self.started {
            pg.assume_restart_promise(started + self.lease_duration);
        }
    }

    /// Whether a PG asked for a report to the monitor before the next period; clears it.
    pub fn take_report_urgent(&mut self) -> bool {
        self.recovery.take_report_urgent()
    }

    /// Recovery pushes in flight over all PGs of this shard.
    pub fn recovery_in_flight(&self) -> usize {
        self.recovery.in_flight()
    }

    /// When the driver should call [`OsdShard::resume_recovery`] if nothing else
    /// reaches the shard first: PGs wait for the recovery scheduler's tags to let them
    /// push (`None`: none does; completions and client ops resume them too, and the
    /// tick does in any case).
    pub fn recovery_wakeup(&self) -> Option<Instant> {
        let now = self.clock.now?;
        self.recovery.wakeup(self.recovery_max_active, now)
    }

    /// Lets the PGs the recovery scheduler held back push, as far as it allows at `now`
    /// (the driver's timer for [`OsdShard::recovery_wakeup`]).
    pub fn resume_recovery(&mut self, now: Instant, out: &mut Vec<Output>) {
        self.set_clock(now);
        self.after_io(out);
    }

    /// Lets PGs that the recovery scheduler held back push again, in turn, while it
    /// allows.
    fn resume_starved(&mut self, out: &mut Vec<Output>) {
        let limit = self.recovery_max_active;
        let now = self.clock.now;
        // Each PG resumed either leaves the queue or pushes (and goes to its back), so
        // this bound lets every waiting PG and every free push slot have a turn.
        for _ in 0..self.recovery.starved_count() + limit {
            let Some(pgid) = self.recovery.next_starved(limit, now) else {
                break;
            };
            let Some(pg) = self.pgs.get_mut(&pgid) else {
                continue;
            };
            self.clock.give(pg);
            let before = self.recovery.grant(limit, now, pg);
            pg.resume_recovery(&mut self.store, out);
            if pg.has_pending_commits() {
                self.pending.insert(pgid);
            }
            self.recovery.settle(now, pg, before);
            self.reservations.settle(pg, out);
        }
    }

    /// Replaces the internal limits (the simulator shrinks them); PGs opened later use
    /// them, so call it before the first map.
    pub fn set_tuning(&mut self, tuning: OsdTuning) {
        self.tuning = tuning.sanitized();
        self.lease_duration = self.tuning.lease_duration;
        self.recovery.set_settings(self.tuning.mclock);
        self.recovery_max_active = self.tuning.recovery_max_active;
        self.reservations
            .set_max_backfills(self.tuning.max_backfills);
    }

    /// The recovery scheduler's settings in force (the tuning's, or the map's
    /// `osd_mclock_*` keys).
    pub fn mclock_settings(&self) -> MclockSettings {
        self.recovery.settings()
    }

    pub fn whoami(&self) -> OsdId {
        self.whoami
    }

    pub fn index(&self) -> ShardIndex {
        self.index
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }

    /// With `true`, handling a message no longer flushes the store; the runtime calls
    /// [`OsdShard::flush`] once it has handled every message that was ready.
    pub fn set_deferred_flush(&mut self, deferred: bool) {
        self.deferred_flush = deferred;
    }

    /// Makes every submitted transaction durable with one store flush, then completes
    /// the PG work that waited for it.
    pub fn flush(&mut self, out: &mut Vec<Output>) {
        self.background_turn(out);
        // Work no PG waits on (a purge step, a stray copy dropped, a deleted pool's
        // PGs removed) is synced in the same turn too, so nothing submitted stays
        // volatile on a shard that then goes idle.
        let unsynced = self.store.submitted_through() > self.store.committed_through();
        if self.pending.is_empty() && !unsynced {
            return;
        }
        if let Err(error) = self.store.flush() {
            tracing::error!("store flush failed: {error}");
        }
        self.after_io(out);
    }

    /// The background work of one turn: a step of snapshot trimming and one of
    /// purging deleted pools' PGs. [`OsdShard::flush`] runs it; a driver that does
    /// not flush every turn (the simulator flushes only when a store needs a sync)
    /// calls this on its ticks, so the work goes on while no client writes.
    pub fn background_turn(&mut self, out: &mut Vec<Output>) {
        let start = out.len();
        self.snap_trim_turn(out);
        self.purge_turn();
        self.route_peer_messages(out, start);
    }

    /// One bounded step of snapshot trimming in every PG that has some to do: trim
    /// runs in the background, a little per shard turn.
    fn snap_trim_turn(&mut self, out: &mut Vec<Output>) {
        if self.snap_trimming.is_empty() {
            return;
        }
        let trimming = std::mem::take(&mut self.snap_trimming);
        for pgid in trimming {
            let Some(pg) = self.pgs.get_mut(&pgid) else {
                continue;
            };
            self.clock.give(pg);
            if pg.snap_trim_step(&mut self.store, out) {
                self.snap_trimming.insert(pgid);
            }
            if pg.has_pending_commits() {
                self.pending.insert(pgid);
            }
        }
    }

    /// One bounded step of deleting stray copies: at most `PURGE_OBJECTS_PER_TURN`
    /// objects over all deleting PGs; a PG whose collection is gone is dropped.
    fn purge_turn(&mut self) {
        let mut left = PURGE_OBJECTS_PER_TURN;
        let deleting: Vec<PgId> = self.deleting.iter().copied().collect();
        for pgid in deleting {
            if left == 0 {
                break;
            }
            let Some(pg) = self.pgs.get_mut(&pgid) else {
                self.deleting.remove(&pgid);
                continue;
            };
            self.clock.give(pg);
            match pg.purge_step(&mut self.store, left) {
                PurgeProgress::More { removed } => left = left.saturating_sub(removed.max(1)),
                PurgeProgress::Done { removed } => {
                    left = left.saturating_sub(removed.max(1));
                    tracing::info!("osd.{}: stray copy of {pgid} deleted", self.whoami.0);
                    self.deleting.remove(&pgid);
                    if let Some(pg) = self.pgs.remove(&pgid) {
                        self.recovery.forget(&pg);
                    }
                    self.pending.remove(&pgid);
                }
            }
        }
    }

    /// Stray copies being deleted on this shard.
    pub fn deleting_count(&self) -> usize {
        self.deleting.len()
    }

    /// Ends this shard, keeping its store (a process restart rebuilds a shard on it).
    pub fn into_store(self) -> S {
        self.store
    }

    pub fn map(&self) -> Option<&Arc<OsdMap>> {
        self.map.as_ref()
    }

    pub fn epoch(&self) -> Epoch {
        self.map.as_ref().map(|m| m.epoch).unwrap_or(Epoch(0))
    }

    pub fn pg_count(&self) -> usize {
        self.pgs.len()
    }

    pub fn counters(&self) -> ShardCounters {
        let mut counters = self.counters;
        for pg in self.pgs.values() {
            let repairs = pg.repair_counters();
            counters.corrupt_copies_found_total += repairs.corrupt_copies_found;
            counters.copies_repaired_total += repairs.copies_repaired;
            let compared = pg.compare_counters();
            counters.scrub_objects_compared_total += compared.objects_compared;
            counters.scrub_replica_copies_differing_total += compared.replica_copies_differing;
            counters.scrub_own_copies_lost_total += compared.own_copies_lost;
        }
        counters
    }

    /// A deep-scrub step: reads and verifies the data of up to `objects_max` objects
    /// holding up to `bytes_max` bytes (at least one object), going through the
    /// shard's PGs in order and wrapping around, continuing where the last step
    /// stopped. Corrupt copies are repaired (see `pg/repair.rs`). The driver decides
    /// how often to call it; nothing calls it on its own.
    pub fn scrub_step(&mut self, objects_max: usize, bytes_max: u64, out: &mut Vec<Output>) {
        let start = out.len();
        let mut left = objects_max.max(1);
        let mut bytes_left = bytes_max.max(1);
        let mut pgs_started = 0;
        let pg_count = self.pgs.len();
        while left > 0 && bytes_left > 0 && pgs_started < pg_count {
            let (pgid, after) = match self.scrub_cursor.take() {
                Some((pgid, after)) if self.pgs.contains_key(&pgid) => (pgid, after),
                Some((pgid, _)) => match self.pgs.range(pgid..).next() {
                    Some((&next, _)) => (next, None),
                    None => break,
                },
                None => match self.pgs.keys().next() {
                    Some(&first) => (first, None),
                    None => break,
                },
            };
            if after.is_none() {
                pgs_started += 1;
            }
            let pg = self.pgs.get_mut(&pgid).expect("chosen above");
            self.clock.give(pg);
            let budget = left.min(SCRUB_OBJECTS_PER_STEP);
            let (listed, last, bytes) = if pg.is_deleting() {
                (0, None, 0)
            } else {
                pg.scrub(&self.store, after.as_deref(), budget, bytes_left, out)
            };
            bytes_left = bytes_left.saturating_sub(bytes);
            match last {
                Some(last) => self.scrub_cursor = Some((pgid, Some(last))),
                None => {
                    let next = self.pgs.range(pgid..).nth(1).map(|(&next, _)| next);
                    self.scrub_cursor = next.map(|next| (next, None));
                }
            }
            // An empty PG still costs a step, so a shard of empty PGs ends.
            left = left.saturating_sub(listed.max(1));
        }
        self.route_peer_messages(out, start);
    }

    pub fn usage(&self) -> StoreUsage {
        self.store.usage()
    }

    /// Reports of the PGs this shard is primary for.
    pub fn pg_stats(&self) -> Vec<PgStat> {
        self.pgs
            .values()
            .filter(|pg| pg.is_primary())
            .map(|pg| {
                self.clock.give(pg);
                pg.stat()
            })
            .collect()
    }

    pub fn pg(&self, pgid: PgId) -> Option<&Pg> {
        let pg = self.pgs.get(&pgid)?;
        self.clock.give(pg);
        Some(pg)
    }

    /// Every PG this shard holds, by id.
    pub fn pgs(&self) -> impl Iterator<Item = &Pg> + '_ {
        self.pgs.values().inspect(|pg| self.clock.give(pg))
    }

    fn owns(&self, pgid: PgId) -> bool {
        shard_of(pgid, self.shard_count) == self.index
    }

    /// A new map epoch: create the PGs this shard now serves, update every PG, remove
    /// the PGs of deleted pools, and release messages that waited for this epoch.
    pub fn handle_map(&mut self, map: Arc<OsdMap>, out: &mut Vec<Output>) {
        let start = out.len();
        self.handle_map_inner(map, out);
        self.route_peer_messages(out, start);
    }

    fn handle_map_inner(&mut self, map: Arc<OsdMap>, out: &mut Vec<Output>) {
        if self.map.as_ref().is_some_and(|m| m.epoch >= map.epoch) {
            return;
        }
        let first_map = self.map.is_none();
        let up_from = |m: &OsdMap| m.osd(self.whoami).filter(|o| o.up).map(|o| o.up_from);
        let joined =
            up_from(&map).is_some() && self.map.as_deref().and_then(up_from) != up_from(&map);
        self.map = Some(map.clone());
        self.lease_duration = self
            .settings
            .seconds(
                &map.config,
                OSD_READ_LEASE_INTERVAL,
                self.tuning.lease_duration,
            )
            .max(crate::pg::LEASE_DURATION_MIN);
        let max_backfills = self.tuning.max_backfills.try_into().unwrap_or(u32::MAX);
        let max_backfills = (self.settings).count(&map.config, OSD_MAX_BACKFILLS, max_backfills);
        self.reservations.set_max_backfills(max_backfills as usize);
        let max_active = self
            .tuning
            .recovery_max_active
            .try_into()
            .unwrap_or(u32::MAX);
        let max_active = (self.settings).count(&map.config, OSD_RECOVERY_MAX_ACTIVE, max_active);
        self.recovery_max_active = (max_active as usize).max(1);
        let mclock = crate::recovery_sched::read_settings(
            &mut self.settings,
            &map.config,
            self.tuning.mclock,
        );
        self.recovery.set_settings(mclock);
        for warning in self.settings.take_warnings() {
            tracing::warn!("osd.{}: {warning}", self.whoami.0);
        }
        self.remove_deleted_pools(&map);
        if first_map {
            self.resume_deletions(&map);
        }
        let serving: Vec<PgId> = map
            .all_pgs()
            .filter(|&pgid| self.owns(pgid))
            .filter(|&pgid| {
                map.pg_mapping(pgid)
                    .is_some_and(|m| m.acting.contains(&self.whoami))
            })
            .collect();
        self.unopened.clear();
        for pgid in serving {
            if self.pgs.get(&pgid).is_some_and(Pg::is_deleting) {
                self.abandon_deletion(pgid);
            }
            if !self.pgs.contains_key(&pgid) {
                self.open_serving(pgid, &map);
            }
        }
        let pgids: Vec<PgId> = self.pgs.keys().copied().collect();
        for pgid in pgids {
            self.pg_takes_map(pgid, &map, out);
        }
        if joined {
            let owned = |pgid| pg_shard(pgid, self.shard_count) == self.index;
            out.extend(stray_notices(&self.store, &map, self.whoami, owned));
        }
        // Slots of intervals that ended here, or of PGs gone, go to the next in line.
        let room = self.room();
        self.reservations.sweep(&mut self.pgs, map.epoch, room, out);
        self.release_waiting(out);
        self.after_io(out);
    }

    /// Opens (creating it if new) our copy of `pgid`, which `map` makes this OSD a
    /// member of. When the store refuses (no room for the collection, say), the PG is
    /// noted in `unopened` and the tick tries again (`retry_unopened`): left until the
    /// next map, which a quiet cluster may not publish for long, the PG would have no
    /// copy here and its peering would wait on us for good.
    fn open_serving(&mut self, pgid: PgId, map: &OsdMap) -> bool {
        let opened = match Pg::open(pgid, self.whoami, map, &mut self.store, self.tuning) {
            // A copy whose deletion a restart interrupted: start afresh.
            Ok(pg) if pg.is_deleting() => {
                self.pgs.insert(pgid, pg);
                self.abandon_deletion(pgid);
                Pg::open(pgid, self.whoami, map, &mut self.store, self.tuning)
            }
            other => other,
        };
        match opened {
            Ok(mut pg) => {
                self.prepare_opened(&mut pg);
                self.pgs.insert(pgid, pg);
                self.unopened.remove(&pgid);
                true
            }
            Err(error) => {
                // Once per map, not on every retry.
                if self.unopened.insert(pgid) {
                    tracing::error!("cannot open {pgid} (trying again each tick): {error}");
                }
                false
            }
        }
    }

    /// PG `pgid` learns of `map` (and what it starts: peering, purges, trims).
    fn pg_takes_map(&mut self, pgid: PgId, map: &OsdMap, out: &mut Vec<Output>) {
        let limit = self.recovery_max_active;
        let Some(pg) = self.pgs.get_mut(&pgid) else {
            return;
        };
        self.clock.give(pg);
        let before = self.recovery.grant(limit, self.clock.now, pg);
        pg.handle_map(map, &mut self.store, out);
        pg.purge_strays(out);
        if pg.has_pending_commits() {
            self.pending.insert(pgid);
        }
        if pg.is_primary() && !pg.snap_trim_idle() {
            self.snap_trimming.insert(pg.pgid());
        }
        self.recovery.settle(self.clock.now, pg, before);
        self.reservations.settle(pg, out);
    }

    /// The tick: PGs of the current map whose opening the store refused are tried
    /// again, and those that open take the map.
    fn retry_unopened(&mut self, out: &mut Vec<Output>) {
        let Some(map) = self.map.clone() else {
            return;
        };
        let unopened: Vec<PgId> = self.unopened.iter().copied().collect();
        for pgid in unopened {
            if self.pgs.contains_key(&pgid) {
                self.unopened.remove(&pgid);
                continue;
            }
            if self.open_serving(pgid, &map) {
                tracing::info!("opened {pgid} on a retry");
                self.pg_takes_map(pgid, &map, out);
            }
        }
    }

    /// After a restart: the stray copies whose deletion was under way go on being
    /// deleted (their marker is persisted before the first object goes).
    fn resume_deletions(&mut self, map: &OsdMap) {
        for coll in self.store.list_collections() {
            let CollectionId::Pg(pgid) = coll else {
                continue;
            };
            if self.pgs.contains_key(&pgid)
                || !self.owns(pgid)
                || !map.pools.contains_key(&pgid.pool)
                || !marked_deleting(&self.store, coll)
            {
                continue;
            }
            match Pg::open(pgid, self.whoami, map, &mut self.store, self.tuning) {
                Ok(pg) => {
                    assert!(pg.is_deleting(), "{pgid}: marker read above");
                    tracing::info!("osd.{}: resuming deletion of {pgid}", self.whoami.0);
                    self.pgs.insert(pgid, pg);
                    self.deleting.insert(pgid);
                }
                Err(error) => tracing::error!("cannot open deleting {pgid}: {error}"),
            }
        }
    }

    /// A copy being deleted is needed again (this OSD is a member of the PG once
    /// more): what is left of it goes at once, and the PG starts empty (a backfill
    /// refills it). Half a copy is never kept.
    fn abandon_deletion(&mut self, pgid: PgId) {
        tracing::info!(
            "osd.{}: {pgid} is needed again; dropping the rest of its stray copy",
            self.whoami.0
        );
        self.deleting.remove(&pgid);
        if let Some(pg) = self.pgs.remove(&pgid) {
            self.recovery.forget(&pg);
        }
        self.pending.remove(&pgid);
        let mut tx = Transaction::new();
        tx.remove_collection(CollectionId::Pg(pgid));
        if let Err(error) = self.store.submit(tx) {
            tracing::error!("removing the rest of {pgid} failed: {error}");
        }
    }

    fn remove_deleted_pools(&mut self, map: &OsdMap) {
        let gone: Vec<PgId> = self
            .pgs
            .keys()
            .copied()
            .filter(|pgid| !map.pools.contains_key(&pgid.pool))
            .collect();
        if gone.is_empty() {
            return;
        }
        let mut tx = Transaction::new();
        for pgid in gone {
            if let Some(pg) = self.pgs.remove(&pgid) {
                self.recovery.forget(&pg);
            }
            self.pending.remove(&pgid);
            self.deleting.remove(&pgid);
            tx.remove_collection(CollectionId::Pg(pgid));
        }
        if let Err(error) = self.store.submit(tx) {
            tracing::error!("removing the PGs of deleted pools failed: {error}");
        }
    }

    fn release_waiting(&mut self, out: &mut Vec<Output>) {
        let epoch = self.epoch();
        let waiting = std::mem::take(&mut self.waiting_for_map);
        for (needed, held) in waiting {
            if needed > epoch {
                self.waiting_for_map.push_back((needed, held));
                continue;
            }
            match held {
                Held::Client(client, op) => self.handle_client_op(client, op, out),
                Held::Peer(from, msg) => self.handle_peer_message(from, msg, out),
            }
        }
    }

    /// Holds a message until the shard has map `needed`. A client op beyond the limit
    /// is refused with `Busy` (the client resends); a peer message is held up to a far
    /// larger bound, since peering and replication do not resend within an interval (a
    /// dropped `PgQuery` left a primary waiting for ever).
    fn hold(&mut self, needed: Epoch, held: Held, out: &mut Vec<Output>) {
        match held {
            Held::Client(client, op)
                if self.waiting_for_map.len() >= self.tuning.waiting_for_map_max =>
            {
                out.push(error_reply(client, &op, OpError::Busy, self.epoch()));
            }
            Held::Peer(from, _) if self.waiting_for_map.len() >= PEER_MESSAGES_WAITING_MAX => {
                tracing::error!(
                    "osd.{} shard {}: {} messages wait for a map; dropping one from {from}",
                    self.whoami.0,
                    self.index.0,
                    self.waiting_for_map.len()
                );
            }
            held => self.waiting_for_map.push_back((needed, held)),
        }
    }

    /// The highest epoch a held message is waiting for, so the runtime can ask the
    /// monitor for it.
    pub fn wanted_epoch(&self) -> Option<Epoch> {
        self.waiting_for_map.iter().map(|(epoch, _)| *epoch).max()
    }

    /// A client request.
    pub fn handle_client_op(&mut self, client: ClientRef, op: OsdOp, out: &mut Vec<Output>) {
        let start = out.len();
        self.handle_client_op_inner(client, op, out);
        self.route_peer_messages(out, start);
    }

    fn handle_client_op_inner(&mut self, client: ClientRef, op: OsdOp, out: &mut Vec<Output>) {
        let Some(map) = self.map.clone() else {
            self.hold(op.map_epoch.max(Epoch(1)), Held::Client(client, op), out);
            return;
        };
        if op.map_epoch > map.epoch {
            self.hold(op.map_epoch, Held::Client(client, op), out);
            return;
        }
        self.count(&op);
        if !map.pools.contains_key(&op.pgid.pool) {
            let error = OpError::Invalid(format!("pool {} does not exist", op.pgid.pool));
            out.push(error_reply(client, &op, error, map.epoch));
            return;
        }
        if !self.owns(op.pgid) {
            // A stale map sent it here: redirect the sender to a newer map.
            self.counters.wrong_shard_total += 1;
            let error = OpError::WrongShard {
                shard_count: self.shard_count,
            };
            out.push(error_reply(client, &op, error, map.epoch));
            return;
        }
        let local_read = op.flags & OsdOp::FLAG_LOCAL_READ != 0 && !op.is_write();
        let Some(pg) = self.pgs.get_mut(&op.pgid) else {
            out.push(error_reply(client, &op, OpError::WrongPrimary, map.epoch));
            return;
        };
        self.clock.give(pg);
        let before = self
            .recovery
            .grant(self.recovery_max_active, self.clock.now, pg);
        if local_read {
            let reply = match crate::pg::validate(&op) {
                Ok(()) if !op.oid.is_empty() => pg.read(&self.store, &op),
                Ok(()) => return out.push(error_reply(client, &op, local_list_error(), map.epoch)),
                Err(error) => return out.push(error_reply(client, &op, error, map.epoch)),
            };
            out.push(Output::Client(client, reply));
        } else {
            pg.handle_client_op(&mut self.store, client, op, out);
        }
        if pg.has_pending_commits() {
            self.pending.insert(pg.pgid());
        }
        self.recovery.settle(self.clock.now, pg, before);
        self.reservations.settle(pg, out);
        self.after_io(out);
    }

    /// Counts a client op, and charges its cost to the client class of the recovery
    /// scheduler (client ops run as they come; their cost is what recovery's weight
    /// share is measured against).
    fn count(&mut self, op: &OsdOp) {
        self.counters.ops_total += 1;
        let mut bytes = 0;
        for sub in &op.ops {
            match sub {
                carmine_proto::OpCode::WriteFull { data }
                | carmine_proto::OpCode::Write { data, .. }
                | carmine_proto::OpCode::Append { data } => {
                    self.counters.write_bytes_total += data.len() as u64;
                    bytes += data.len() as u64;
                }
                carmine_proto::OpCode::Read { length, .. } => {
                    // The length is whatever the client sent: any u64.
                    let counter = &mut self.counters.read_bytes_total;
                    *counter = counter.saturating_add(*length);
                    bytes = bytes.saturating_add(*length);
                }
                _ => {}
            }
        }
        if let Some(now) = self.clock.now {
            self.recovery.charge_client(now, 1, bytes);
        }
    }

    /// A message from another OSD.
    pub fn handle_peer_message(&mut self, from: OsdId, msg: Msg, out: &mut Vec<Output>) {
        let start = out.len();
        self.handle_peer_message_inner(from, msg, out);
        self.route_peer_messages(out, start);
    }

    fn handle_peer_message_inner(&mut self, from: OsdId, msg: Msg, out: &mut Vec<Output>) {
        let epoch = self.epoch();
        let Some((pgid, sender_epoch)) = peer_message_pg(&msg) else {
            tracing::warn!("unexpected message type {} from {from}", msg.msg_type());
            return;
        };
        if sender_epoch > epoch {
            self.hold(sender_epoch, Held::Peer(from, msg), out);
            return;
        }
        if let Msg::PgRemove(remove) = &msg {
            self.handle_remove(from, remove, out);
            return;
        }
        if let Msg::PgReserve(reserve) = &msg {
            // A primary asks this shard for a remote slot, or gives one back; answers
            // go to the primary's PG below.
            use carmine_proto::ReserveKind::{Release, Request};
            if matches!(reserve.kind, Request | Release) {
                let reserve = reserve.clone();
                let room = self.room();
                let reservations = &mut self.reservations;
                reservations.handle_remote(&self.pgs, epoch, room, from, reserve, out);
                return;
            }
        }
        if !self.pgs.contains_key(&pgid) && !self.open_stray(pgid, from, &msg, out) {
            return;
        }
        if self.pgs.get(&pgid).is_some_and(Pg::is_deleting) {
            // Half a copy must not take part in peering: it holds nothing.
            self.answer_absent(pgid, from, &msg, out);
            return;
        }
        let pg = self.pgs.get_mut(&pgid).expect("opened above");
        self.clock.give(pg);
        let before = self
            .recovery
            .grant(self.recovery_max_active, self.clock.now, pg);
        let store = &mut self.store;
        match msg {
            Msg::RepOp(rep) => pg.handle_rep_op(store, from, rep, out),
            Msg::RepOpReply(reply) => {
                let map = self.map.as_deref().expect("a PG is opened from a map");
                pg.handle_rep_reply(map, store, from, reply, out)
            }
            Msg::PgQuery(query) => pg.handle_query(from, query, out),
            Msg::PgNotify(notify) => pg.handle_notify(store, from, notify, out),
            Msg::PgLogRequest(request) => pg.handle_log_request(store, from, request, out),
            Msg::PgLogReply(reply) => pg.handle_log_reply(store, from, reply, out),
            Msg::PgActivate(activate) => pg.handle_activate(store, from, activate, out),
            Msg::PgActivated(activated) => pg.handle_activated(store, from, activated, out),
            Msg::PgPull(pull) => pg.handle_pull(store, from, pull, out),
            Msg::PgPush(push) => pg.handle_push(store, from, push, out),
            Msg::PgPushReply(reply) => pg.handle_push_reply(store, from, reply, out),
            Msg::PgLease(lease) => pg.handle_lease(from, lease, out),
            Msg::PgLeaseAck(ack) => pg.handle_lease_ack(store, from, ack, out),
            Msg::PgReserve(answer) => pg.handle_reserve(store, from, answer, out),
            Msg::PgScrubRequest(request) => pg.handle_scrub_request(store, from, request, out),
            Msg::PgScrubMap(map) => pg.handle_scrub_map(store, from, map, out),
            _ => unreachable!("filtered by peer_message_pg"),
        }
        pg.purge_strays(out);
        if pg.has_pending_commits() {
            self.pending.insert(pgid);
        }
        self.recovery.settle(self.clock.now, pg, before);
        self.reservations.settle(pg, out);
        self.after_io(out);
    }

    /// A peer asks about a PG this shard does not serve: open the copy the store still
    /// holds (a stray), or answer a query with "nothing here". Returns whether the PG
    /// is now open.
    fn open_stray(&mut self, pgid: PgId, from: OsdId, msg: &Msg, out: &mut Vec<Output>) -> bool {
        let Some(map) = self.map.clone() else {
            return false;
        };
        if !map.pools.contains_key(&pgid.pool) || !self.owns(pgid) {
            return false;
        }
        if self.store.collection_exists(CollectionId::Pg(pgid)) {
            match Pg::open(pgid, self.whoami, &map, &mut self.store, self.tuning) {
                Ok(mut pg) => {
                    self.prepare_opened(&mut pg);
                    pg.handle_map(&map, &mut self.store, out);
                    if pg.is_deleting() {
                        self.deleting.insert(pgid);
                    }
                    self.pgs.insert(pgid, pg);
                    return true;
                }
                Err(error) => tracing::error!("cannot open stray {pgid}: {error}"),
            }
        }
        self.answer_absent(pgid, from, msg, out);
        false
    }

    /// Stray: a primary asks this copy to delete itself (see `pg/purge.rs`).
    fn handle_remove(
        &mut self,
        from: OsdId,
        remove: &carmine_proto::PgRemove,
        out: &mut Vec<Output>,
    ) {
        let Some(map) = self.map.clone() else {
            return;
        };
        let pgid = remove.pgid;
        if !self.pgs.contains_key(&pgid) {
            let msg = Msg::PgRemove(remove.clone());
            if !self.open_stray(pgid, from, &msg, out) {
                return;
            }
        }
        let pg = self.pgs.get_mut(&pgid).expect("opened above");
        self.clock.give(pg);
        if pg.handle_remove(&mut self.store, &map, from, remove) {
            self.deleting.insert(pgid);
        }
        self.after_io(out);
    }

    /// Answers a query for a PG this shard holds no usable copy of: "nothing here".
    fn answer_absent(&self, pgid: PgId, from: OsdId, msg: &Msg, out: &mut Vec<Output>) {
        let Some(map) = &self.map else {
            return;
        };
        if let Msg::PgQuery(query) = msg {
            let shard = map
                .osd(from)
                .map(|info| pg_shard(pgid, info.shard_count()))
                .unwrap_or_default();
            let notify = carmine_proto::PgNotify {
                pgid,
                interval: query.interval,
                map_epoch: map.epoch,
                info: carmine_proto::PgInfo {
                    pgid,
                    ..Default::default()
                },
                exists: false,
                missing: Vec::new(),
                missing_need: Vec::new(),
                // No copy here, so no promise: a lease is granted only by a copy
                // that exists (and stays until it is purged).
                prior_lease_remaining_ns: 0,
            };
            out.push(Output::Peer(from, shard, Msg::PgNotify(notify)));
        } else {
            tracing::debug!("message for {pgid}, which this shard does not hold, from {from}");
        }
    }

    /// Points every peer message in `out[start..]` at the shard of its target OSD that
    /// owns the message's PG, as the current map says (PGs need not track the shard
    /// counts of every OSD they talk to).
    fn route_peer_messages(&self, out: &mut [Output], start: usize) {
        let Some(map) = &self.map else { return };
        for output in out.iter_mut().skip(start) {
            if let Output::Peer(osd, shard, msg) = output {
                let (Some((pgid, _)), Some(info)) = (peer_message_pg(msg), map.osd(*osd)) else {
                    continue;
                };
                if info.shard_count() > 0 {
                    *shard = shard_of(pgid, info.shard_count());
                }
            }
        }
    }

    /// Tells PGs what the store has made durable; the runtime calls this after the
    /// store reports commit progress (MemStore commits at once).
    pub fn after_io(&mut self, out: &mut Vec<Output>) {
        let start = out.len();
        self.after_io_inner(out);
        self.route_peer_messages(out, start);
    }

    fn after_io_inner(&mut self, out: &mut Vec<Output>) {
        if self.reservations.has_news() {
            self.reservations.tell_granted(&mut self.pgs, out);
        }
        // Budget freed by an interval change or a completed push goes to starved PGs.
        if self.recovery.has_starved() {
            self.resume_starved(out);
        }
        // Without a per-turn flush from the runtime, each call is a turn.
        if !self.deferred_flush && !self.deleting.is_empty() {
            self.purge_turn();
        }
        if self.pending.is_empty() {
            return;
        }
        if !self.deferred_flush {
            if let Err(error) = self.store.flush() {
                tracing::error!("store flush failed: {error}");
            }
        }
        let committed = self.store.committed_through();
        let mut walking = std::mem::take(&mut self.walking);
        self.pending.take_into(&mut walking);
        let limit = self.recovery_max_active;
        for &pgid in &walking {
            let Some(pg) = self.pgs.get_mut(&pgid) else {
                continue;
            };
            self.clock.give(pg);
            let before = self.recovery.grant(limit, self.clock.now, pg);
            pg.handle_committed(&mut self.store, committed, out);
            pg.purge_strays(out);
            if pg.has_pending_commits() {
                self.pending.insert(pgid);
            }
            self.recovery.settle(self.clock.now, pg, before);
            self.reservations.settle(pg, out);
        }
        self.walking = walking;
    }
}

/// The driver's latest clock reading, numbered, with the lease length in force when
/// it was taken: what every PG would have been given had `set_clock` walked them all.
#[derive(Debug, Clone, Copy, Default)]
struct ShardClock {
    /// `None` until the driver gives a time (then no lease is enforced).
    now: Option<Instant>,
    /// Readings so far; a PG that was given this one is up to date.
    reading: u64,
    lease_duration: Duration,
}

impl ShardClock {
    /// Brings `pg` up to this reading, before the shard hands it work or shows it.
    fn give(&self, pg: &Pg) {
        if let Some(now) = self.now {
            pg.catch_up_time(self.reading, now, self.lease_duration);
        }
    }
}

/// The PG and the sender's epoch of an OSD-to-OSD message.
/// [`pg_shard`] without its hash when there is one shard: every client op and peer
/// message asks, and OSDs often run a single shard.
fn shard_of(pgid: PgId, shard_count: u16) -> ShardIndex {
    match shard_count {
        1 => ShardIndex(0),
        _ => pg_shard(pgid, shard_count),
    }
}

fn peer_message_pg(msg: &Msg) -> Option<(PgId, Epoch)> {
    Some(match msg {
        Msg::RepOp(m) => (m.pgid, m.map_epoch),
        Msg::RepOpReply(m) => (m.pgid, m.map_epoch),
        Msg::PgQuery(m) => (m.pgid, m.map_epoch),
        Msg::PgNotify(m) => (m.pgid, m.map_epoch),
        Msg::PgLogRequest(m) => (m.pgid, m.map_epoch),
        Msg::PgLogReply(m) => (m.pgid, m.map_epoch),
        Msg::PgActivate(m) => (m.pgid, m.map_epoch),
        Msg::PgActivated(m) => (m.pgid, m.map_epoch),
        Msg::PgPull(m) => (m.pgid, m.map_epoch),
        Msg::PgPush(m) => (m.pgid, m.map_epoch),
        Msg::PgPushReply(m) => (m.pgid, m.map_epoch),
        Msg::PgRemove(m) => (m.pgid, m.map_epoch),
        Msg::PgLease(m) => (m.pgid, m.map_epoch),
        Msg::PgLeaseAck(m) => (m.pgid, m.map_epoch),
        Msg::PgReserve(m) => (m.pgid, m.map_epoch),
        Msg::PgScrubRequest(m) => (m.pgid, m.map_epoch),
        Msg::PgScrubMap(m) => (m.pgid, m.map_epoch),
        _ => return None,
    })
}

fn local_list_error() -> OpError {
    OpError::Invalid("a read from a named OSD needs an object name".into())
}

fn error_reply(client: ClientRef, op: &OsdOp, error: OpError, epoch: Epoch) -> Output {
    Output::Client(
        client,
        Msg::OsdOpReply(OsdOpReply {
            reqid: op.reqid,
            pgid: op.pgid,
            result: Err(error),
            outputs: Vec::new(),
            user_version: 0,
            version: EVersion::ZERO,
            map_epoch: epoch,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use carmine_types::PoolId;

    /// A one-shard OSD on a LogStore over a fault-injecting in-memory device.
    fn log_store_shard() -> OsdShard<carmine_store::LogStore<carmine_store::FaultyDevice>> {
        use carmine_store::{FaultConfig, FaultyDevice, LogStore, LogStoreConfig};
        let device = FaultyDevice::in_memory(4 << 20, FaultConfig::default());
        let store = LogStore::open(device, LogStoreConfig::small()).unwrap();
        OsdShard::new(OsdId(0), ShardIndex(0), 1, store)
    }

    /// A flush makes durable what was submitted with no PG waiting on it (a purge
    /// step, a stray copy dropped): it is not left volatile until some client write
    /// happens to come by.
    #[test]
    fn flush_syncs_work_no_pg_waits_on() {
        use carmine_store::{CollectionId, Transaction};
        let mut shard = log_store_shard();
        let mut tx = Transaction::new();
        tx.create_collection(CollectionId::Meta);
        let seq = shard.store_mut().submit(tx).unwrap();
        assert!(shard.store().committed_through() < seq);
        let mut out = Vec::new();
        shard.flush(&mut out);
        assert!(shard.store().committed_through() >= seq);
        let flushes = shard.store().stats().flushes;
        shard.flush(&mut out);
        assert_eq!(
            shard.store().stats().flushes,
            flushes,
            "nothing to sync: no flush"
        );
    }

    /// A device write that fails puts the store out of service, which the shard's
    /// drivers read after each flush to stop the OSD (`carmine_rt`'s shard loop exits,
    /// the simulator's disk-error class stops the node): nothing submitted after it
    /// is ever reported durable.
    #[test]
    fn a_failed_device_write_puts_the_store_out_of_service() {
        use carmine_store::{CollectionId, Transaction};
        let mut shard = log_store_shard();
        let mut out = Vec::new();
        let mut tx = Transaction::new();
        tx.create_collection(CollectionId::Meta);
        shard.store_mut().submit(tx).unwrap();
        shard.flush(&mut out);
        assert!(shard.store().failure().is_none());
        let durable = shard.store().committed_through();
        shard.store_mut().device_mut().fail_power_after_writes(0);
        let mut tx = Transaction::new();
        tx.touch(CollectionId::Meta, carmine_types::ObjectId::head("a"));
        let seq = shard.store_mut().submit(tx).unwrap();
        shard.flush(&mut out);
        assert!(
            matches!(
                shard.store().failure(),
                Some(carmine_store::StoreError::Io(_))
            ),
            "{:?}",
            shard.store().failure()
        );
        assert_eq!(shard.store().committed_through(), durable);
        assert!(seq > durable);
        let mut tx = Transaction::new();
        tx.touch(CollectionId::Meta, carmine_types::ObjectId::head("b"));
        assert!(
            shard.store_mut().submit(tx).is_err(),
            "it refuses all further work"
        );
    }

    #[test]
    fn shard_of_matches_pg_shard() {
        for shard_count in 1..=4 {
            for seed in 0..64 {
                let pgid = PgId {
                    pool: PoolId(3),
                    seed,
                };
                assert_eq!(shard_of(pgid, shard_count), pg_shard(pgid, shard_count));
            }
        }
    }
}
