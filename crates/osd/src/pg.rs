//! A placement group: executes client ops as primary, orders writes with PG versions,
//! replicates them to the acting set and answers the client only once every member has
//! committed; as a replica, applies the primary's transactions in order.
//!
//! The PG is a pure state machine: it reads and submits through the `ObjectStore` it is
//! handed and returns messages as [`Output`]s.

use crate::exec::{self, store_error};
use crate::osd_set::OsdSet;
use crate::pglog::{pgmeta_oid, PgLog, INFO_KEY};
use crate::tuning::OsdTuning;
use crate::{ClientRef, Output};
use carmine_clustermap::{OsdMap, PoolInfo};
use carmine_proto::{
    LogEntry, Msg, OpCode, OpError, OpOutput, OsdOp, OsdOpReply, PgInfo, PgStat, PgState, RepOp,
};
use carmine_store::{CollectionId, ObjectStore, Transaction, TxSeq};
use carmine_types::encoding::{Decode, Encode};
use carmine_types::fast_hash::FastHash;
use carmine_types::limits::LIST_ENTRIES_MAX;
use carmine_types::{EVersion, Epoch, ObjectId, OsdId, PgId, ShardIndex};
pub use repair::RepairCounters;
use repair::{unfound_error, Gate};
pub use scrub_compare::CompareCounters;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// Client ops a PG holds while it cannot serve them (inactive, or reads behind a write).
pub const WAITING_OPS_MAX: usize = 4096;
/// Writes a primary keeps in flight before it answers `Busy`.
pub const IN_FLIGHT_WRITES_MAX: usize = 4096;
pub use lease::{LEASE_DURATION, LEASE_DURATION_MIN};

/// A primary's pushes in flight to one replica: each object with our `last_update`
/// when its push first went out.
type Pushing = BTreeMap<String, EVersion>;

#[derive(Debug)]
struct InFlightWrite {
    version: EVersion,
    rep_tid: u64,
    /// A write that changes its object; `false` for a logged failure (an error
    /// entry), which changes nothing and which the activation carries to replicas.
    is_write: bool,
    oid: String,
    clients: Vec<ClientRef>,
    reply: OsdOpReply,
    local_seq: TxSeq,
    local_committed: bool,
    waiting_on: OsdSet,
    /// The replicas' message, kept while the write is in flight: a replica whose
    /// store refused it for want of space gets it again on each tick (and so does
    /// every later write it ignored as not following), until it applies it or the
    /// interval ends. `None` when there are no replicas.
    rep: Option<RepOp>,
    /// Replicas whose store refused this write with `NoSpace` (they stay in
    /// `waiting_on`: the write is not answered until they apply it).
    refused_by: OsdSet,
    /// Replicas that logged this write without holding it: they lack its object (their
    /// store refused its push) and applied only the log entry. The write is answered
    /// only while at least `min_size` members hold it (Ceph keeps as many copies out of
    /// its async recovery targets; it blocks a write to a degraded object instead): an
    /// acknowledged write must survive what `min_size` says it survives. A push that
    /// lands there later, covering it, takes the replica out.
    log_only: OsdSet,
    /// Logged before this interval's activation, which carried its entry to every
    /// replica: it waits only for a push of its object to each. A write logged since
    /// is a replica's only once it answers the RepOp (it may have ignored it).
    carried_over: bool,
}

/// A message sent once the store has committed through `seq`: a replica's answers
/// (to a `RepOp`, an activation, a push) and a primary's activations, which must not
/// hand out log entries that this copy could still lose.
#[derive(Debug)]
struct HeldMessage {
    seq: TxSeq,
    to: OsdId,
    reply: Msg,
}

/// Where a PG stands in its current interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Not the primary (a replica or a stray): follows the primary.
    Replica,
    /// Primary: waiting for the infos of `waiting`.
    GetInfo {
        waiting: BTreeSet<OsdId>,
    },
    /// Primary: waiting for the authoritative log from `auth`.
    GetLog {
        auth: OsdId,
    },
    /// Primary: pulling the objects it lacks from `source`.
    Pull {
        source: OsdId,
        all: bool,
    },
    /// Primary: its copy lacks more than it should pull before serving, and `auth`
    /// holds a complete one; it asked the monitor for a temporary acting set led by
    /// `auth` (pg_temp) and waits for the map that brings it.
    WaitPgTemp {
        auth: OsdId,
    },
    /// Primary: up to date and ready to activate, but the map does not yet show this
    /// OSD alive through the interval's start (`up_thru`; see `peering.rs`); asked
    /// for with the stats, it waits for the map that records it.
    WaitUpThru,
    /// Primary: waiting for the replicas to acknowledge activation.
    Activating {
        waiting: BTreeSet<OsdId>,
    },
    Active,
    /// Primary: cannot prove it would see every acknowledged write (a past interval
    /// that may have accepted writes has no member up to ask); why.
    Down(String),
    /// Primary: every past interval is accounted for, but no reachable copy is
    /// complete enough to serve (the newest history is held only by copies that were
    /// never fully backfilled); why. It waits, as when down, for a new map.
    Incomplete(String),
}

/// One PG as one OSD shard holds it.
#[derive(Debug)]
pub struct Pg {
    pgid: PgId,
    coll: CollectionId,
    whoami: OsdId,
    pool: PoolInfo,
    acting: Vec<OsdId>,
    primary: Option<OsdId>,
    map_epoch: Epoch,
    interval_start: Epoch,
    /// The primaries, and their intervals, whose queries this copy answered (since it
    /// was opened): an activation of such an interval may carry an earlier date than
    /// ours.
    /// (Several: a late query from an earlier primary must not make this copy ignore
    /// the current one's activation. At most `peering::QUERIES_REMEMBERED_MAX`.)
    queried_by: BTreeSet<(Epoch, OsdId)>,
    /// This copy adopted an activation since it last answered a query: another
    /// activation before the next query is a resend of the same one.
    activated_since_query: bool,
    info: PgInfo,
    log: PgLog,
    tuning: OsdTuning,
    in_flight: VecDeque<InFlightWrite>,
    /// Writes in flight per object (every write adds, completes and looks up a name
    /// here, so it hashes with [`FastHash`], not SipHash).
    writes_per_object: HashMap<String, u32, FastHash>,
    blocked_reads: HashMap<String, Vec<(ClientRef, OsdOp)>, FastHash>,
    blocked_read_count: usize,
    waiting_for_active: VecDeque<(ClientRef, OsdOp)>,
    held_until_commit: VecDeque<HeldMessage>,
    /// Primary, while activating: the store sequence of its own activation record (the
    /// adopted log, pulled objects and `last_epoch_started` it submitted). The PG goes
    /// active only once that is durable: peering later trusts a primary's word that it
    /// never activated in an interval, and the monitor drops the history a clean PG
    /// reports. A primary that went active on an unsynced record and crashed came back
    /// without it, took itself for never activated, and served a stale copy (seed
    /// 119989 lost five acknowledged writes).
    activation_record: Option<TxSeq>,
    /// Members of the acting set that the map marks full; while any is, writes that
    /// add data are refused with `NoSpace` before they run.
    full_members: Vec<OsdId>,
    /// OSDs an operator declared lost (`osd lost`), with the epoch of the mark, from
    /// the current map, and past members it purged (`osd purge`, at the current
    /// epoch): peering does not wait for them in intervals that began before.
    lost_osds: BTreeMap<OsdId, Epoch>,
    /// The map's `osd_failsafe_full_ratio`: above it this OSD's own store refuses
    /// writes that add data, whatever the map says.
    failsafe_full_ratio: f64,
    last_submitted: TxSeq,
    next_rep_tid: u64,
    phase: Phase,
    /// Closed intervals since the PG was last clean, from the map.
    past_intervals: Vec<carmine_clustermap::PastInterval>,
    /// Infos gathered while peering.
    notifies: BTreeMap<OsdId, carmine_proto::PgNotify>,
    /// Objects this copy knows it lacks (persisted as `missing.NAME` pgmeta keys).
    missing: BTreeSet<String>,
    /// The version this copy needs of objects in `missing`, where known (the value of
    /// their `missing.NAME` keys; Ceph's `pg_missing_item::need`). The log names it
    /// while it holds the object's newest change; this keeps it once the log is
    /// trimmed past that change, so that a copy holding exactly that version, a
    /// stray or a backfill target, can still be found (seed 36287 of expansion,
    /// remaps, space and snapshot trims). See `Pg::needs_of`.
    missing_need: BTreeMap<String, EVersion>,
    /// Primary: objects each replica lacks.
    peer_missing: BTreeMap<OsdId, BTreeSet<String>>,
    /// Primary: objects pushed to each replica and not yet acknowledged, each with our
    /// `last_update` when its push first went out: the writes that push covers.
    pushing: BTreeMap<OsdId, Pushing>,
    backfilling: BTreeSet<OsdId>,
    /// Primary: objects still to pull from the peering source.
    pulling: BTreeSet<String>,
    /// Primary, peering: the exact versions the pull in progress asks for (a probe of
    /// a copy whose history differs from ours; see `Pg::probe_for_missing`), empty for
    /// an ordinary pull; and the copies probed so far this round.
    pull_exact: Vec<(String, EVersion)>,
    probed: BTreeSet<OsdId>,
    /// Primary, peering: the copies from an older interval whose logs reach past the
    /// latest interval's, with whether each log continues that history with writes
    /// the best copy lacks (`log_continues` in `pg/peering.rs`), learned from their
    /// logs this round; and the copy whose log is being read for that.
    extensions: BTreeMap<OsdId, bool>,
    reading_extension: Option<OsdId>,
    /// The up set (CRUSH's choice); differs from `acting` while a pg_temp is in force.
    up: Vec<OsdId>,
    /// Primary: the pg_temp it asks the monitor for (reported with the stats).
    want_acting: Vec<OsdId>,
    /// Something the monitor should hear before the next periodic report.
    report_urgent: bool,
    /// This OSD's `up_thru` in the newest map.
    up_thru: Epoch,
    /// Pushes the shard lets this PG keep in flight (the count cap's share), the
    /// background pushes it may start before the shard grants again (the rate tags'
    /// share), and whether it stopped short of work for lack of either.
    push_allowance: usize,
    push_starts_left: usize,
    recovery_starved: bool,
    /// Work is left that the scheduler held back (until the next push goes out): the
    /// state shows `backfill_wait`/`recovery_wait` while nothing is in flight.
    waiting_for_budget: bool,
    /// Objects and bytes this copy sent in pushes (recovery, backfill, answers to
    /// pulls, repairs) since the shard last took them, to charge recovery's cost.
    recovery_sent: (u64, u64),
    /// Primary: objects the peering source could not read (they stay missing here).
    pull_unreadable: BTreeSet<String>,
    /// Primary: those of `pull_unreadable` the source holds at another version than
    /// the exact one asked for: missing here still, but not a bad copy there.
    pull_lacking: BTreeSet<String>,
    /// Primary: objects of the pull under way whose pulled copy our store refused (no
    /// room): they stay missing here.
    pull_not_applied: BTreeSet<String>,
    /// Primary: objects whose own copy is unreadable, and the pull repairing each.
    repairs: BTreeMap<String, repair::RepairPull>,
    /// Primary: objects no reachable copy could supply at the last try to repair ours
    /// (see [`Pg::unfound_objects`]).
    unfound: BTreeSet<String>,
    /// Primary: objects whose own copy was found corrupt and not yet repaired (so one
    /// corruption is counted once, however often it is met).
    local_corrupt: BTreeSet<String>,
    /// Primary: replica copies found unreadable and not yet replaced by a push.
    replica_corrupt: BTreeSet<(OsdId, String)>,
    /// Primary: copies found this interval without an object at the version needed:
    /// strays of this interval's peering asked for an object none of the acting
    /// members can supply, and replicas asked for exactly that version. Neither is
    /// asked again for it this interval.
    lacks_needed: BTreeSet<(OsdId, String)>,
    /// Primary: objects whose push a replica's store refused for want of space this
    /// interval, until a push of them lands there: client writes to them are refused
    /// meanwhile (`pg/degraded.rs`).
    pushes_refused_for_space: BTreeSet<(OsdId, String)>,
    /// Primary, active: copies that strays announced after this interval's peering
    /// (an OSD back from a restart), as sources for objects no member holds.
    late_stray_notifies: BTreeMap<OsdId, carmine_proto::PgNotify>,
    /// Primary: requests it answered `NoSpace` without logging the refusal (a write a
    /// replica refused held the log), so that another copy of one gets the same
    /// answer here (see `handle_write`), oldest first.
    refused_for_space: BTreeSet<carmine_types::ReqId>,
    refused_for_space_order: VecDeque<carmine_types::ReqId>,
    /// Replica: the interval, and the corrupt copies a scrub reported to its primary
    /// in it with the scrub passes since (see `Pg::corrupt_to_report`).
    corrupt_reported: (
        carmine_types::Epoch,
        BTreeMap<String, repair::ReportBackoff>,
    ),
    /// Replica: objects whose push our store refused, with the interval it was in,
    /// until a push of them lands: a RepOp for one applies only its log entry in that
    /// interval (see `handle_rep_op`).
    push_refused: BTreeMap<String, carmine_types::Epoch>,
    /// Replica: the newest RepOp this copy ignored as not following its log, with the
    /// interval it came in. Until our log reaches it, pushes are refused: one carries
    /// the primary's copy with writes we have not logged, which the resent RepOps
    /// would then apply again on top.
    rep_ops_ignored_to: (carmine_types::Epoch, EVersion),
    repair_counters: RepairCounters,
    /// Primary: the comparisons of the members' copies waiting for their scrub maps,
    /// the rounds started, and what comparisons found (see `pg/scrub_compare.rs`).
    scrub_compares: std::collections::VecDeque<scrub_compare::ScrubCompare>,
    scrub_round: u64,
    compare_counters: CompareCounters,
    /// Primary: removed snapshots whose clones are trimmed, and the pass under way.
    snap_trimmed: BTreeSet<u64>,
    snap_trim_pass: Option<snap_trim::TrimPass>,
    /// Stray: this copy is being deleted (see `pg/purge.rs`).
    deleting: bool,
    /// Primary: the strays of this interval were told to delete their copies.
    strays_purged: bool,
    /// Primary: OSDs that announced a copy after booting (outside this interval's
    /// peering), to be told to delete it once the PG is clean (see `pg/purge.rs`).
    late_strays: BTreeSet<OsdId>,
    /// Primary: the peering step it waits on and since when (see `peering_tick`).
    resend_watch: Option<peering::ResendWatch>,
    /// Primary, active: the repairs and pushes it waits on and since when (see
    /// `recovery_tick`).
    recovery_watch: Option<recovery::RecoveryWatch>,
    /// Read leases: this copy's promises, and as primary its own lease and the wait
    /// for earlier promises (see `pg/lease.rs`).
    lease: lease::Lease,
    /// Primary: the recovery/backfill reservation it holds or waits for (see
    /// `pg/reserve.rs`).
    reservation: reserve::Reservation,
}

impl Pg {
    /// Opens the PG on this shard: loads its info and log if the store has them,
    /// otherwise creates its collection and metadata.
    pub fn open(
        pgid: PgId,
        whoami: OsdId,
        map: &OsdMap,
        store: &mut dyn ObjectStore,
        tuning: OsdTuning,
    ) -> Result<Pg, OpError> {
        let pool = map
            .pools
            .get(&pgid.pool)
            .cloned()
            .ok_or_else(|| OpError::Invalid(format!("pool of {pgid} does not exist")))?;
        let coll = CollectionId::Pg(pgid);
        let name_hash = FastHash::new();
        let mut pg = Pg {
            pgid,
            coll,
            whoami,
            pool,
            acting: Vec::new(),
            primary: None,
            map_epoch: Epoch(0),
            interval_start: Epoch(0),
            queried_by: BTreeSet::new(),
            activated_since_query: false,
            info: PgInfo {
                pgid,
                ..PgInfo::default()
            },
            log: PgLog::with_entries_max(tuning.log_entries_max),
            tuning,
            in_flight: VecDeque::new(),
            writes_per_object: HashMap::with_hasher(name_hash),
            blocked_reads: HashMap::with_hasher(name_hash),
            blocked_read_count: 0,
            waiting_for_active: VecDeque::new(),
            held_until_commit: VecDeque::new(),
            activation_record: None,
            full_members: Vec::new(),
            lost_osds: BTreeMap::new(),
            failsafe_full_ratio: carmine_clustermap::FullRatios::default().failsafe,
            last_submitted: 0,
            next_rep_tid: 1,
            phase: Phase::Replica,
            past_intervals: Vec::new(),
            notifies: BTreeMap::new(),
            missing: BTreeSet::new(),
            missing_need: BTreeMap::new(),
            peer_missing: BTreeMap::new(),
            pushing: BTreeMap::new(),
            backfilling: BTreeSet::new(),
            pulling: BTreeSet::new(),
            pull_exact: Vec::new(),
            probed: BTreeSet::new(),
            extensions: BTreeMap::new(),
            reading_extension: None,
            up: Vec::new(),
            want_acting: Vec::new(),
            report_urgent: false,
            up_thru: Epoch(0),
            push_allowance: usize::MAX,
            push_starts_left: usize::MAX,
            recovery_starved: false,
            waiting_for_budget: false,
            recovery_sent: (0, 0),
            pull_unreadable: BTreeSet::new(),
            pull_lacking: BTreeSet::new(),
            pull_not_applied: BTreeSet::new(),
            repairs: BTreeMap::new(),
            unfound: BTreeSet::new(),
            local_corrupt: BTreeSet::new(),
            replica_corrupt: BTreeSet::new(),
            lacks_needed: BTreeSet::new(),
            pushes_refused_for_space: BTreeSet::new(),
            late_stray_notifies: BTreeMap::new(),
            refused_for_space: BTreeSet::new(),
            refused_for_space_order: VecDeque::new(),
            corrupt_reported: (carmine_types::Epoch(0), BTreeMap::new()),
            push_refused: BTreeMap::new(),
            rep_ops_ignored_to: (carmine_types::Epoch(0), EVersion::default()),
            repair_counters: RepairCounters::default(),
            scrub_compares: Default::default(),
            scrub_round: 0,
            compare_counters: CompareCounters::default(),
            snap_trimmed: BTreeSet::new(),
            snap_trim_pass: None,
            deleting: false,
            strays_purged: false,
            late_strays: BTreeSet::new(),
            resend_watch: None,
            recovery_watch: None,
            lease: lease::Lease::default(),
            reservation: reserve::Reservation::default(),
        };
        if store.collection_exists(coll) {
            pg.load(store)?;
        } else {
            pg.info.created = map.epoch;
            let mut tx = Transaction::new();
            tx.create_collection(coll);
            tx.touch(coll, pgmeta_oid());
            tx.omap_set(
                coll,
                pgmeta_oid(),
                vec![(bytes::Bytes::from_static(INFO_KEY), pg.info.to_bytes())],
            );
            pg.last_submitted = store.submit(tx).map_err(store_error)?;
        }
        Ok(pg)
    }

    fn load(&mut self, store: &mut dyn ObjectStore) -> Result<(), OpError> {
        let corrupt = |what: &str, e: String| OpError::Io(format!("{}: {what}: {e}", self.pgid));
        let keys = [bytes::Bytes::from_static(INFO_KEY)];
        let found = store
            .omap_get(self.coll, &pgmeta_oid(), &keys)
            .map_err(store_error)?;
        if let Some((_, raw)) = found.into_iter().next() {
            self.info = PgInfo::from_shared(raw).map_err(|e| corrupt("info", e.to_string()))?;
        }
        let mut after: Option<bytes::Bytes> = None;
        loop {
            let page = store
                .omap_list(self.coll, &pgmeta_oid(), after.as_deref(), 1024)
                .map_err(store_error)?;
            let Some((last, _)) = page.last() else { break };
            after = Some(last.clone());
            for (key, value) in page {
                if key.starts_with(b"log.") {
                    let entry = LogEntry::from_shared(value)
                        .map_err(|e| corrupt("log entry", e.to_string()))?;
                    self.log.load(entry);
                } else if key.starts_with(crate::pglog::DUP_PREFIX) {
                    let (reqid, applied) =
                        crate::pglog::decode_dup(&key, value).map_err(|e| corrupt("dup", e))?;
                    self.log.load_dup(reqid, applied);
                } else if key == purge::DELETING_KEY {
                    self.deleting = true;
                } else if let Some(name) = key.strip_prefix(crate::pglog::MISSING_PREFIX) {
                    let name = String::from_utf8_lossy(name).into_owned();
                    let need = crate::pglog::decode_need(value)
                        .map_err(|e| corrupt("missing object's version", e))?;
                    if let Some(need) = need {
                        self.missing_need.insert(name.clone(), need);
                    }
                    self.missing.insert(name);
                }
            }
        }
        Ok(())
    }

    pub fn pgid(&self) -> PgId {
        self.pgid
    }

    pub fn is_primary(&self) -> bool {
        self.primary == Some(self.whoami)
    }

    pub fn is_member(&self) -> bool {
        self.acting.contains(&self.whoami)
    }

    /// Active: the primary has peered and may serve IO (at least `min_size` members).
    pub fn is_active(&self) -> bool {
        self.is_primary()
            && self.phase == Phase::Active
            && self.acting.len() >= usize::from(self.pool.min_size)
    }

    pub fn info(&self) -> &PgInfo {
        &self.info
    }

    /// The log entries this copy holds in memory, oldest first (the simulator records
    /// them as they appear, since trimming drops them).
    pub fn log_entries(&self) -> impl DoubleEndedIterator<Item = &carmine_proto::LogEntry> + '_ {
        self.log.entries()
    }

    pub fn has_pending_commits(&self) -> bool {
        !self.in_flight.is_empty()
            || !self.held_until_commit.is_empty()
            || self.activation_record.is_some()
    }

    /// Corrupt copies this PG found and repaired.
    pub fn repair_counters(&self) -> RepairCounters {
        self.repair_counters
    }

    pub fn compare_counters(&self) -> CompareCounters {
        self.compare_counters
    }

    /// Active with a full acting set and nothing to recover (what `active+clean`
    /// says).
    fn is_clean(&self) -> bool {
        let full = self.acting.len() >= usize::from(self.pool.size);
        self.is_active() && full && self.fully_recovered()
    }

    /// Whether every copy has every object (nothing to recover, backfill or repair).
    fn fully_recovered(&self) -> bool {
        self.peer_missing.values().all(BTreeSet::is_empty)
            && self.pushing.values().all(Pushing::is_empty)
            && self.repairs.is_empty()
    }

    /// The state as Ceph would name it.
    pub fn state(&self) -> PgState {
        let mut bits = match &self.phase {
            Phase::Active if self.is_active() => PgState::ACTIVE,
            Phase::Active => PgState::INACTIVE,
            Phase::Down(_) => PgState::DOWN,
            Phase::Incomplete(_) => PgState::INCOMPLETE,
            Phase::Replica => PgState::INACTIVE,
            _ => PgState::PEERING,
        };
        let undersized = self.acting.len() < usize::from(self.pool.size);
        if undersized {
            bits |= PgState::UNDERSIZED | PgState::DEGRADED;
        }
        if !self.fully_recovered() {
            bits |= PgState::DEGRADED;
        }
        // What recovery is doing is named only while the PG is active: a PG re-peering
        // still holds the last interval's missing sets, but it is peering, not
        // backfilling (`degraded+peering`, as Ceph shows it).
        if !self.fully_recovered() && bits & PgState::ACTIVE != 0 {
            let waiting = (self.waiting_for_budget && self.pushes_in_flight() == 0)
                || self.waiting_for_reservation();
            bits |= match (self.backfilling.is_empty(), waiting) {
                (true, false) => PgState::RECOVERING,
                (true, true) => PgState::RECOVERY_WAIT,
                (false, false) => PgState::BACKFILLING,
                (false, true) => PgState::BACKFILL_WAIT,
            };
            bits = self.reservation_state_bits(bits);
        }
        let unfound = bits & PgState::ACTIVE != 0 && self.unfound_objects().next().is_some();
        if unfound {
            bits |= PgState::RECOVERY_UNFOUND | PgState::DEGRADED;
        }
        if bits & PgState::ACTIVE != 0 && !undersized && self.fully_recovered() && !unfound {
            bits |= PgState::CLEAN;
        }
        if self.acting != self.up {
            bits |= PgState::REMAPPED;
        }
        bits |= self.lease_state_bits();
        // Clones of removed snapshots still to delete (Ceph's `snaptrim`, and
        // `snaptrim_wait` while trimming waits: here, for the PG to be clean).
        if bits & PgState::ACTIVE != 0 && self.is_primary() && !self.snap_trim_idle() {
            bits |= if bits & PgState::CLEAN != 0 {
                PgState::SNAPTRIM
            } else {
                PgState::SNAPTRIM_WAIT
            };
        }
        PgState(bits)
    }

    pub fn stat(&self) -> PgStat {
        PgStat {
            pgid: self.pgid,
            state: self.state(),
            object_count: self.info.object_count,
            data_bytes: self.info.data_bytes,
            last_update: self.info.last_update,
            acting: self.acting.clone(),
            interval_start: self.interval_start,
            want_acting: self.want_acting.clone(),
            reason: self.inactive_reason(),
            want_up_thru: self.want_up_thru(),
            unfound: self.unfound_objects().count() as u64,
        }
    }

    /// Whether the monitor should get a report now rather than at the next period
    /// (a pg_temp request); clears the flag.
    pub fn take_report_urgent(&mut self) -> bool {
        std::mem::take(&mut self.report_urgent)
    }

    /// Primary: pushes sent and not yet acknowledged, over all replicas.
    pub fn pushes_in_flight(&self) -> usize {
        self.pushing.values().map(Pushing::len).sum()
    }

    /// The shard's grant: this PG may keep at most `allowance` pushes in flight, and
    /// start at most `starts` background pushes until the next grant. The two are
    /// separate because a push completing inside the call frees room under the count
    /// cap but earns no room under the rate tags: with one ceiling, each completion
    /// let a new push start whatever the tags said, so recovery was paced by its round
    /// trips, not by its limit.
    pub fn set_push_allowance(&mut self, allowance: usize, starts: usize) {
        self.push_allowance = allowance;
        self.push_starts_left = starts;
    }

    /// Objects and bytes sent in pushes since the last call.
    pub fn take_recovery_sent(&mut self) -> (u64, u64) {
        std::mem::take(&mut self.recovery_sent)
    }

    /// Whether the PG stopped scheduling recovery for lack of allowance; clears it.
    pub fn take_recovery_starved(&mut self) -> bool {
        std::mem::take(&mut self.recovery_starved)
    }

    /// Schedules recovery again after the shard raised the allowance.
    pub fn resume_recovery(&mut self, store: &mut dyn ObjectStore, out: &mut Vec<Output>) {
        self.schedule_recovery(store, out);
    }

    /// Applies a new map. On an interval change (acting set or primary changed), the
    /// primary starts peering: until it has proven it holds every acknowledged write
    /// and activated the replicas, it serves nothing. A copy that stops being primary
    /// drops its queued ops (clients resend to the new primary).
    pub fn handle_map(&mut self, map: &OsdMap, store: &mut dyn ObjectStore, out: &mut Vec<Output>) {
        let Some(pool) = map.pools.get(&self.pgid.pool) else {
            return;
        };
        self.pool = pool.clone();
        let mapping = map.pg_mapping(self.pgid).expect("pool exists");
        // A member that booted after the interval started restarted (and may have lost
        // state) even if this copy never saw the epoch that marked it down: that too
        // starts a new interval.
        let restarted = mapping.acting.iter().any(|&osd| {
            map.osd(osd)
                .is_some_and(|info| info.up_from > self.interval_start)
        });
        // Likewise a map that closes an interval ending at or after ours: this copy
        // skipped the epochs where the acting set changed and came back (a full map
        // after a gap in its feed), and another primary may have served writes then.
        let closed_since = map
            .pg_history
            .get(&self.pgid)
            .and_then(|past| past.last())
            .is_some_and(|last| last.last >= self.interval_start);
        let changed = mapping.acting != self.acting
            || mapping.primary != self.primary
            || self.interval_start == Epoch(0)
            || restarted
            || closed_since;
        self.map_epoch = map.epoch;
        self.up_thru = map.osd(self.whoami).map_or(Epoch(0), |info| info.up_thru);
        self.full_members = mapping
            .acting
            .iter()
            .copied()
            .filter(|&osd| map.fullness(osd) == carmine_clustermap::Fullness::Full)
            .collect();
        self.failsafe_full_ratio = map.full_ratios().failsafe;
        self.past_intervals = map.pg_history.get(&self.pgid).cloned().unwrap_or_default();
        self.lost_osds = (map.osds.values())
            .filter(|osd| osd.lost_at > Epoch(0))
            .map(|osd| (osd.id, osd.lost_at))
            .collect();
        // A past member the map no longer has was purged (`osd purge`): lost as of
        // this map, as Ceph's PriorSet takes an OSD that no longer exists as gone.
        for interval in &self.past_intervals {
            for &osd in &interval.acting {
                if map.osd(osd).is_none() {
                    self.lost_osds.entry(osd).or_insert(map.epoch);
                }
            }
        }
        self.up = mapping.up;
        if changed {
            // Slots of the interval that ended go back (the targets drop them too).
            self.release_reservation(out);
            self.want_acting.clear();
            let was_primary = self.is_primary();
            if was_primary {
                self.roll_back_unreadable_writes(store);
            }
            self.acting = mapping.acting;
            self.primary = mapping.primary;
            self.interval_start = map.epoch;
            self.lease.new_interval();
            self.reset_snap_trim();
            if was_primary && !self.is_primary() {
                self.drop_primary_work();
            }
            if self.is_primary() {
                self.start_peering(map, store, out);
            } else {
                self.phase = Phase::Replica;
            }
        } else if self.phase == Phase::WaitUpThru {
            // Every answer is in and this copy is up to date: only the monitor's record
            // was missing, and this map may bring it.
            self.activate_when_alive(store, out);
        } else if self.is_primary() && self.phase != Phase::Active {
            // Peering (or down) in the same interval: an answer may have been lost with
            // a peer that crashed, or a peer it waits for came back. Ask again.
            self.start_peering(map, store, out);
        }
        if self.is_primary() {
            self.reservation_map(map, store, out);
            self.complete_writes(store, out);
            if self.is_active() && !self.waiting_for_active.is_empty() {
                let waiting = std::mem::take(&mut self.waiting_for_active);
                for (client, op) in waiting {
                    self.handle_client_op(store, client, op, out);
                }
            }
        }
    }

    /// The epoch since which this OSD has led the PG without a break, as far as the
    /// map's past intervals tell (Ceph's `same_primary_since`); where they are
    /// trimmed or have a gap, the later epoch (bouncing an op is always safe).
    fn primary_since(&self) -> Epoch {
        let mut since = self.interval_start;
        for interval in self.past_intervals.iter().rev() {
            let adjoins = interval.last.0.saturating_add(1) >= since.0;
            if !adjoins || interval.primary != Some(self.whoami) {
                break;
            }
            since = since.min(interval.first);
        }
        since
    }

    fn replicas(&self) -> Vec<OsdId> {
        self.acting
            .iter()
            .copied()
            .filter(|&osd| osd != self.whoami)
            .collect()
    }

    /// Primary, before logging a write: plans the trim its push makes, which keeps
    /// the entries naming objects this copy or a replica lacks (see
    /// `PgLog::plan_trim`), and returns the log tail after it (for the write's info).
    /// With nothing lacked (the usual case) the trim goes by count, unplanned.
    fn plan_log_trim(&mut self) -> EVersion {
        if self.missing.is_empty() && self.peer_missing.values().all(BTreeSet::is_empty) {
            self.log.unplan_trim();
        } else {
            let (missing, peer_missing) = (&self.missing, &self.peer_missing);
            self.log.plan_trim(|name| {
                missing.contains(name) || peer_missing.values().any(|lacks| lacks.contains(name))
            });
        }
        self.log.tail_after_push(self.info.log_tail)
    }

    fn drop_primary_work(&mut self) {
        self.notifies.clear();
        self.late_stray_notifies.clear();
        self.peer_missing.clear();
        self.pushing.clear();
        self.backfilling.clear();
        self.pulling.clear();
        self.repairs.clear();
        self.unfound.clear();
        self.local_corrupt.clear();
        self.replica_corrupt.clear();
        self.lacks_needed.clear();
        self.pushes_refused_for_space.clear();
        self.in_flight.clear();
        self.writes_per_object.clear();
        self.blocked_reads.clear();
        self.blocked_read_count = 0;
        self.waiting_for_active.clear();
    }

    fn reply(&self, client: ClientRef, op: &OsdOp, result: Result<(), OpError>) -> Output {
        Output::Client(
            client,
            Msg::OsdOpReply(OsdOpReply {
                reqid: op.reqid,
                pgid: self.pgid,
                result,
                outputs: Vec::new(),
                user_version: 0,
                version: EVersion::ZERO,
                map_epoch: self.map_epoch,
            }),
        )
    }

    /// A client op, routed here by the shard (which checked the map epoch).
    pub fn handle_client_op(
        &mut self,
        store: &mut dyn ObjectStore,
        client: ClientRef,
        op: OsdOp,
        out: &mut Vec<Output>,
    ) {
        if !self.is_primary() {
            out.push(self.reply(client, &op, Err(OpError::WrongPrimary)));
            return;
        }
        if op.map_epoch < self.primary_since() {
            // Sent before this OSD last became primary (the shard held it for a map,
            // or the PG for peering): the client may since have resent it to the
            // primary in between and had its answer, so running it now could apply a
            // write after it was answered. Bounce it; the client retries with a newer
            // map (Ceph discards such ops: `can_discard_op`, `same_primary_since`).
            out.push(self.reply(client, &op, Err(OpError::NotActive)));
            return;
        }
        // Inactive, or active but waiting out earlier leases or without its own:
        // hold the op (a read now could miss writes a newer interval acknowledged).
        if !self.is_active() || !self.lease_allows_io() {
            // A resend of an op already held replaces it (keeping its place): run
            // twice, a write that failed the first time could succeed the second.
            if let Some(held) = self
                .waiting_for_active
                .iter_mut()
                .find(|(_, held)| held.reqid == op.reqid)
            {
                *held = (client, op);
                return;
            }
            if self.waiting_for_active.len() < self.tuning.waiting_ops_max {
                self.waiting_for_active.push_back((client, op));
            } else {
                out.push(self.reply(client, &op, Err(OpError::NotActive)));
            }
            return;
        }
        // Ops held while the PG waited or lagged go first: the lease may have come
        // back (by time alone) since the last tick, and a newer op must not overtake.
        self.serve_held_ops(store, out);
        if let Err(error) = validate(&op) {
            out.push(self.reply(client, &op, Err(error)));
            return;
        }
        if op.oid.is_empty() && matches!(op.ops.as_slice(), [OpCode::PgMarkUnfoundLost]) {
            return self.mark_unfound_lost(store, client, &op, out);
        }
        if op.oid.is_empty() {
            let reply = self.list(store, &op);
            out.push(Output::Client(client, reply));
            return;
        }
        match self.repair_gate(&*store, &op.oid, out) {
            Gate::Ready => {}
            Gate::Wait => return self.block_read(client, op, out),
            // A resent write already in the log is answered from it below.
            Gate::Unfound if op.is_write() && self.log.find_reqid(op.reqid).is_some() => {}
            Gate::Unfound if op.is_write() => {
                return self.answer_failed_write(store, client, &op, unfound_error(&op.oid), out)
            }
            Gate::Unfound => {
                return out.push(self.reply(client, &op, Err(unfound_error(&op.oid))));
            }
        }
        if op.is_write() {
            self.handle_write(store, client, op, out);
        } else if self.writes_per_object.contains_key(&op.oid) {
            self.block_read(client, op, out);
        } else {
            self.serve_read(store, client, op, out);
        }
    }

    /// Holds an op on an object until its writes in flight complete or its repair
    /// ends (reads, and writes waiting for a repair).
    fn block_read(&mut self, client: ClientRef, op: OsdOp, out: &mut Vec<Output>) {
        if self.blocked_read_count >= self.tuning.waiting_ops_max {
            out.push(self.reply(client, &op, Err(OpError::Busy)));
            return;
        }
        self.blocked_read_count += 1;
        self.blocked_reads
            .entry(op.oid.clone())
            .or_default()
            .push((client, op));
    }

    /// Serves a read-only op from the local store, whatever this OSD's role (the
    /// debug read that compares replicas, and the primary's normal reads).
    pub fn read(&self, store: &dyn ObjectStore, op: &OsdOp) -> Msg {
        let result =
            crate::snaps::read_target(store, self.coll, &op.oid, op.snapid).and_then(|oid| {
                let none = carmine_proto::SnapContext::default();
                exec::execute(store, self.coll, &oid, &op.ops, &none, EVersion::ZERO, 0)
            });
        let (result, outputs, user_version) = match result {
            Ok(run) => (Ok(()), run.outputs, run.before.info.user_version),
            Err(error) => (Err(error), Vec::new(), 0),
        };
        Msg::OsdOpReply(OsdOpReply {
            reqid: op.reqid,
            pgid: self.pgid,
            result,
            outputs,
            user_version,
            version: self.info.last_update,
            map_epoch: self.map_epoch,
        })
    }

    fn list(&self, store: &dyn ObjectStore, op: &OsdOp) -> Msg {
        let result = match op.ops.as_slice() {
            [OpCode::PgList { after, max_entries }] => {
                let at_snapshot = op.snapid != carmine_types::SnapId::HEAD;
                self.list_names(store, after.as_deref(), *max_entries, at_snapshot)
            }
            [OpCode::PgListUnfound { after, max_entries }] => {
                Ok(self.list_unfound(store, after.as_deref(), *max_entries))
            }
            _ => Err(OpError::Invalid(
                "an op without an object name must be a single pg op".into(),
            )),
        };
        let (result, outputs) = match result {
            Ok(output) => (Ok(()), vec![output]),
            Err(error) => (Err(error), Vec::new()),
        };
        Msg::OsdOpReply(OsdOpReply {
            reqid: op.reqid,
            pgid: self.pgid,
            result,
            outputs,
            user_version: 0,
            version: self.info.last_update,
            map_epoch: self.map_epoch,
        })
    }

    /// Lists head names after `after`. Clones are never listed. Whiteout heads (kept
    /// only for their clones) are left out of a head listing; a listing `at_snapshot`
    /// names them too, so it is a superset of the objects that exist at any snapshot
    /// (the caller stats each name at its snapshot).
    fn list_names(
        &self,
        store: &dyn ObjectStore,
        after: Option<&str>,
        max_entries: u32,
        at_snapshot: bool,
    ) -> Result<OpOutput, OpError> {
        let max = (max_entries as usize).clamp(1, LIST_ENTRIES_MAX);
        let cursor = after.map(ObjectId::head);
        let objects = store
            .list_objects(self.coll, cursor.as_ref(), max + 2)
            .map_err(store_error)?;
        let mut names: Vec<String> = objects
            .into_iter()
            .filter(|oid| !oid.name.is_empty() && oid.snap == carmine_types::SnapId::HEAD)
            .filter(|oid| {
                at_snapshot || !crate::snaps::is_whiteout(store, self.coll, oid).unwrap_or(false)
            })
            .map(|oid| oid.name)
            .collect();
        let more = names.len() > max;
        names.truncate(max);
        let next = if more { names.last().cloned() } else { None };
        Ok(OpOutput::List { names, next })
    }
}

/// A message to another OSD about this PG. The shard index is filled in by
/// `OsdShard`, which routes every peer message to the target OSD's shard that owns the
/// message's PG (from the current map), so PGs keep no shard bookkeeping.
pub(crate) fn peer_output(osd: OsdId, msg: Msg) -> Output {
    Output::Peer(osd, ShardIndex::default(), msg)
}

/// Checks a request's shape before it is routed or executed.
pub(crate) fn validate(op: &OsdOp) -> Result<(), OpError> {
    if op.ops.is_empty() {
        return Err(OpError::Invalid("request has no ops".into()));
    }
    if op.oid.is_empty() && !matches!(op.ops.as_slice(), [pg_op] if pg_op.is_pg_op()) {
        return Err(OpError::Invalid("object name is empty".into()));
    }
    if !op.oid.is_empty() && op.ops.iter().any(OpCode::is_pg_op) {
        return Err(OpError::Invalid("a pg op takes no object name".into()));
    }
    if op.is_write() {
        if op.snapid != carmine_types::SnapId::HEAD {
            return Err(OpError::Invalid(
                "writes go to the head; a snapshot is read-only".into(),
            ));
        }
        op.snapc.validate().map_err(OpError::Invalid)?;
    }
    Ok(())
}

mod degraded;
mod lease;
mod lost;
mod missing;
pub(crate) mod peering;
pub(crate) mod purge;
pub(crate) mod recovery;
mod repair;
mod replication;
mod reserve;
mod scrub_compare;
mod snap_trim;
pub use snap_trim::SNAP_TRIM_CLIENT;
