//! Peering: how a primary in a new interval proves it holds every acknowledged write,
//! brings itself up to date, and activates its replicas.
//!
//! 1. **GetInfo.** Query every up OSD that may hold the newest writes: the acting and
//!    up sets, and the members of every past interval that may have accepted writes.
//!    An interval that may have gone read-write is *covered* when some answering copy
//!    was activated in or after it (`last_epoch_started`); since a write is
//!    acknowledged only once every member of the interval has it, that copy's log holds
//!    every write acknowledged in it. An interval whose members all answered without
//!    having been activated in it never accepted writes. Any other interval leaves the
//!    PG **down**: it waits for those OSDs rather than serve stale data. If every
//!    interval is accounted for but the newest copy lacks objects that no reachable
//!    copy with its history holds, the PG is **incomplete** and waits likewise.
//! 2. **GetLog.** The authoritative copy is the one with the highest
//!    `(last_epoch_started, last_update)`. If it is not the primary, the primary fetches
//!    its log, works out which objects it lacks (newer entries, and its own divergent
//!    entries, which were never acknowledged), adopts the log with its dups (the
//!    requests of trimmed entries) and **pulls** them.
//! 3. **WaitUpThru.** Before it activates, the primary needs a map that shows its OSD
//!    alive through the interval's start (`up_thru`, as Ceph's `WaitUpThru`): it asks
//!    with its stats from the start of peering, so the monitor's answer overlaps the
//!    queries. The monitor computes each closed interval's `maybe_went_rw` from it, so
//!    an interval whose primary died before that record never counts as having
//!    accepted writes, and a PG does not stay down waiting for an OSD that booted,
//!    became primary and failed before it could serve anything.
//! 4. **Activate.** Each replica gets the log suffix it lacks (or, when the log no
//!    longer covers its copy or its copy diverged, a full backfill) and the list of
//!    objects it must receive, once the primary's own log is durable. Once all have
//!    acknowledged, the PG is active; missing objects are pushed in the background
//!    (see `recovery.rs`).
//!
//! OSD-to-OSD sessions are lossless while both ends live, but a session reset (a
//! peer that could not be reached, a connection the messenger gave up on) loses what
//! was queued, and a lost query, log request or activation would leave the PG peering
//! until the next interval. So a primary that has waited [`PEERING_RESEND_INTERVAL`]
//! (by the clock its ticks bring) for the same step sends its request again to the
//! peers it still waits for. Every request is idempotent: a query is answered again,
//! a log request too, and a replica that adopted an activation since the primary's
//! last query only acknowledges it again (adopting twice would put the objects
//! pushed since back among the missing).

use super::{peer_output, Pg, Phase};
use crate::pglog::{pgmeta_oid, INFO_KEY, MISSING_ALL};
use crate::Output;
use bytes::Bytes;
use carmine_clustermap::OsdMap;
use carmine_proto::{
    LogDup, LogEntry, Msg, PgActivate, PgActivated, PgInfo, PgLogReply, PgLogRequest, PgNotify,
    PgQuery,
};
use carmine_store::{ObjectStore, Transaction};
use carmine_types::encoding::Encode;
use carmine_types::{EVersion, OsdId, SnapId};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Most objects a primary pulls before it activates. A primary that lacks more (or
/// must be backfilled) asks for a pg_temp led by a complete copy instead, so clients
/// are served while it catches up as a replica (Ceph backfills behind pg_temp too).
pub const PULL_BEFORE_ACTIVE_MAX: usize = 32;

/// How long a primary waits on one peering step before it sends its requests again
/// to the peers that have not answered (see the module comment).
pub const PEERING_RESEND_INTERVAL: Duration = Duration::from_secs(3);
const _: () =
    assert!(PEERING_RESEND_INTERVAL.as_millis() >= 10 * crate::shard::TICK_INTERVAL.as_millis());

/// The primaries' queries (interval, primary) a copy remembers answering, newest
/// intervals kept: enough for the primaries of the intervals a copy goes through while
/// messages are held up by a partition.
pub const QUERIES_REMEMBERED_MAX: usize = 16;

/// The peering step a primary waits on (its interval and phase) and since when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResendWatch {
    interval: carmine_types::Epoch,
    phase: Phase,
    since: Instant,
}

/// How a copy catches up with the authoritative log.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CatchUp {
    /// Its log is a prefix of ours up to `after`: replay the entries after it.
    Prefix { after: EVersion },
    /// Not covered by our log (too old, or diverged): copy every object.
    Backfill,
}

impl Pg {
    fn send(&self, osd: OsdId, msg: Msg, out: &mut Vec<Output>) {
        out.push(peer_output(osd, msg));
    }

    /// Sends `msg` once the store has committed everything this copy submitted so far.
    /// A primary's activation hands its log to the replicas, and they take the objects
    /// it names as theirs to recover: if it left before the primary's own writes were
    /// durable, and the primary then lost them (it crashed, or its disk failed before
    /// the sync), a replica would hold log entries whose data no copy has, and peering
    /// would trust them (seed 173 of `--faults all,disk-errors`). The daemon sends a
    /// turn's messages after its flush anyway; this makes it the PG's rule, not the
    /// driver's.
    fn send_once_durable(&mut self, osd: OsdId, msg: Msg) {
        self.held_until_commit.push_back(super::HeldMessage {
            seq: self.last_submitted,
            to: osd,
            reply: msg,
        });
    }

    fn my_notify(&self) -> PgNotify {
        PgNotify {
            pgid: self.pgid,
            interval: self.interval_start,
            map_epoch: self.map_epoch,
            info: self.info.clone(),
            exists: true,
            missing: self.missing.iter().cloned().collect(),
            missing_need: self.needs_to_send(&self.missing),
            // Filled in for the primary that asks (`handle_query`).
            prior_lease_remaining_ns: 0,
        }
    }

    /// Primary, new interval: query every OSD that may hold acknowledged writes.
    pub(super) fn start_peering(
        &mut self,
        map: &OsdMap,
        store: &mut dyn ObjectStore,
        out: &mut Vec<Output>,
    ) {
        self.notifies.clear();
        self.probed.clear();
        self.pull_exact.clear();
        self.extensions.clear();
        self.reading_extension = None;
        self.late_stray_notifies.clear();
        self.strays_purged = false;
        self.scrub_compares.clear();
        self.want_acting.clear();
        self.peer_missing.clear();
        self.waiting_for_budget = false;
        self.notifies.insert(self.whoami, self.my_notify());
        self.lease.start_prior_wait(self.whoami);
        if self.up_thru < self.activation_floor() {
            // Ask now; the monitor's answer overlaps the queries (see WaitUpThru).
            self.report_urgent = true;
        }
        // Pushes of an earlier interval are never acknowledged (replies from another
        // interval are ignored), and repairs belong to an interval too: the ops waiting
        // on them run again once active, and activation recomputes what to push.
        self.pushing.clear();
        self.backfilling.clear();
        self.repairs.clear();
        self.unfound.clear();
        self.local_corrupt.clear();
        self.replica_corrupt.clear();
        self.lacks_needed.clear();
        self.pushes_refused_for_space.clear();
        let mut probe: BTreeSet<OsdId> = self.acting.iter().copied().collect();
        if let Some(mapping) = map.pg_mapping(self.pgid) {
            probe.extend(mapping.up);
        }
        for interval in self.past_intervals.iter().filter(|i| i.maybe_went_rw) {
            probe.extend(interval.acting.iter().copied());
        }
        probe.remove(&self.whoami);
        let probe: Vec<OsdId> = probe.into_iter().filter(|&o| map.is_up(o)).collect();
        for &osd in &probe {
            let query = Msg::PgQuery(PgQuery {
                pgid: self.pgid,
                interval: self.interval_start,
                map_epoch: self.map_epoch,
            });
            self.send(osd, query, out);
        }
        self.phase = Phase::GetInfo {
            waiting: probe.into_iter().collect(),
        };
        self.after_infos(store, out);
    }

    /// Primary, active: peers again within the interval, when a replica's copy fell
    /// behind its log in a way replication cannot mend (see `handle_rep_reply`). The
    /// round queries every member first, so each answers with its log as it now is.
    pub(super) fn peer_again(
        &mut self,
        map: &OsdMap,
        store: &mut dyn ObjectStore,
        out: &mut Vec<Output>,
    ) {
        // The slots were for recovery this round recomputes.
        self.release_reservation(out);
        self.start_peering(map, store, out);
    }

    /// Any role: a primary asks for this copy's info.
    pub fn handle_query(&mut self, from: OsdId, query: PgQuery, out: &mut Vec<Output>) {
        self.queried_by.insert((query.interval, from));
        while self.queried_by.len() > QUERIES_REMEMBERED_MAX {
            self.queried_by.pop_first();
        }
        self.activated_since_query = false;
        let mut notify = self.my_notify();
        notify.interval = query.interval;
        notify.prior_lease_remaining_ns = self.lease.promise_remaining(from).as_nanos() as u64;
        out.push(peer_output(from, Msg::PgNotify(notify)));
    }

    pub fn handle_notify(
        &mut self,
        store: &mut dyn ObjectStore,
        from: OsdId,
        notify: PgNotify,
        out: &mut Vec<Output>,
    ) {
        if self.note_stray(from, &notify) && self.phase == Phase::Active {
            // An OSD back from a restart may hold what no member does.
            self.late_stray_notifies.insert(from, notify.clone());
            self.retry_unfound(store, out);
        }
        if notify.interval == self.interval_start && self.is_primary() {
            // Whatever round it answers, the promise it reports must be waited out.
            let remaining = std::time::Duration::from_nanos(notify.prior_lease_remaining_ns);
            self.lease.note_prior(remaining);
        }
        let Phase::GetInfo { waiting } = &mut self.phase else {
            return;
        };
        if notify.interval != self.interval_start || !waiting.remove(&from) {
            return;
        }
        self.notifies.insert(from, notify);
        self.after_infos(store, out);
    }

    fn after_infos(&mut self, store: &mut dyn ObjectStore, out: &mut Vec<Output>) {
        let Phase::GetInfo { waiting } = &self.phase else {
            return;
        };
        if !waiting.is_empty() {
            return;
        }
        if let Err(reason) = self.check_coverage() {
            tracing::warn!("{} is down: {reason}", self.pgid);
            self.phase = Phase::Down(reason);
            return;
        }
        // Before our log can outrank the others: a write only this copy holds whose
        // object it cannot read is served by nobody (seed 4040); and counts a rollback
        // left unknown come from a copy that ends where we now do (seed 7290).
        let rolled_back = self.roll_back_unreadable_history(store);
        let settled = self.settle_stats();
        if rolled_back || settled {
            self.notifies.insert(self.whoami, self.my_notify());
        }
        if let Some(candidate) = self.unread_extension() {
            tracing::info!(
                "{}: reading the log of {candidate}, which reaches past the latest \
                 interval's",
                self.pgid
            );
            self.reading_extension = Some(candidate);
            self.request_log(candidate, out);
            self.phase = Phase::GetLog { auth: candidate };
            return;
        }
        let auth = match self.complete_auth() {
            Ok(auth) => auth,
            Err(_) if self.probe_for_missing(store, out) => return,
            Err(reason) => {
                tracing::warn!("{} is incomplete: {reason}", self.pgid);
                self.phase = Phase::Incomplete(reason);
                return;
            }
        };
        if auth == self.whoami && self.latest_best().is_some_and(|(osd, _)| *osd != auth) {
            tracing::info!(
                "{}: our log continues the latest interval's history; it is the \
                 authoritative one",
                self.pgid
            );
        }
        if auth == self.whoami {
            // Authoritative, but this copy may still lack objects (a pull cut short by a
            // new peering round, or a restart): fetch them before serving anything.
            match self.source_for_missing() {
                Some(source) => {
                    let mut names = self.missing.clone();
                    let all = names.remove(MISSING_ALL);
                    self.start_pull(store, source, names, all, out);
                }
                None => self.activate_when_alive(store, out),
            }
            return;
        }
        self.request_log(auth, out);
        self.phase = Phase::GetLog { auth };
    }

    /// Before a primary holding the newest log goes incomplete for objects it lacks
    /// that no answering copy can be shown to hold: asks the answering copies, one at
    /// a time, for exactly the versions its log needs. A copy whose log diverged from
    /// ours (a write we never logged, on another object), or a backfill target
    /// (which names every object missing while it keeps its own copies), may hold
    /// them, and sends only a copy whose object info is that version
    /// (`Pg::exact_copy`). Ceph's GetMissing works this out from their logs. Without
    /// it the PG stayed incomplete though a copy held what it lacked (seed 16262 of
    /// remaps, space and snapshot trims). Returns whether a probe went out; once it
    /// is answered, peering decides again (`Pg::after_probe`).
    fn probe_for_missing(&mut self, store: &mut dyn ObjectStore, out: &mut Vec<Output>) -> bool {
        if self.choose_auth() != self.whoami || self.missing.contains(MISSING_ALL) {
            return false;
        }
        let exact: Vec<(String, EVersion)> = (self.missing.iter())
            .filter_map(|name| Some((name.clone(), self.version_needed(store, name)?)))
            .collect();
        if exact.is_empty() {
            return false;
        }
        let candidate = (self.notifies.iter())
            .find(|(osd, n)| **osd != self.whoami && n.exists && !self.probed.contains(osd))
            .map(|(osd, _)| *osd);
        let Some(source) = candidate else {
            return false;
        };
        tracing::info!(
            "{}: asking {source} for {} objects no copy with our history holds",
            self.pgid,
            exact.len()
        );
        self.probed.insert(source);
        let names = exact.iter().map(|(name, _)| name.clone()).collect();
        self.send_pull(source, names, false, exact, out);
        true
    }

    /// The pull of what is still to come from the peering source: the exact versions
    /// of a probe, or by name.
    pub(super) fn pull_message(&self, all: bool) -> Msg {
        let exact: Vec<(String, EVersion)> = (self.pull_exact.iter())
            .filter(|(name, _)| self.pulling.contains(name))
            .cloned()
            .collect();
        Msg::PgPull(carmine_proto::PgPull {
            pgid: self.pgid,
            interval: self.interval_start,
            map_epoch: self.map_epoch,
            oids: self.pulling.iter().cloned().collect(),
            all,
            exact,
        })
    }

    /// A probe was answered (what arrived is applied): peering decides again, with
    /// what this copy now lacks.
    pub(super) fn after_probe(&mut self, store: &mut dyn ObjectStore, out: &mut Vec<Output>) {
        self.pull_exact.clear();
        self.notifies.insert(self.whoami, self.my_notify());
        self.phase = Phase::GetInfo {
            waiting: BTreeSet::new(),
        };
        self.after_infos(store, out);
    }

    /// Asks `auth` for its whole log (GetLog), and, where that log reaches past every
    /// other answering copy's, which objects of those newest writes its copy cannot
    /// read (see `drop_unreadable_tail`).
    fn request_log(&self, auth: OsdId, out: &mut Vec<Output>) {
        let check_after = (auth != self.whoami)
            .then(|| self.newest_other_than(auth))
            .flatten()
            .filter(|&others| {
                (self.notifies.get(&auth)).is_some_and(|n| n.info.last_update > others)
            });
        let request = Msg::PgLogRequest(PgLogRequest {
            pgid: self.pgid,
            interval: self.interval_start,
            map_epoch: self.map_epoch,
            after: None,
            check_after,
        });
        self.send(auth, request, out);
    }

    /// The newest last update among the answering copies other than `holder`'s.
    fn newest_other_than(&self, holder: OsdId) -> Option<EVersion> {
        (self.notifies.iter())
            .filter(|(osd, n)| **osd != holder && n.exists)
            .map(|(_, n)| n.info.last_update)
            .max()
    }

    /// Every past interval that may have accepted writes is covered by an answer.
    fn check_coverage(&self) -> Result<(), String> {
        for interval in self.past_intervals.iter().filter(|i| i.maybe_went_rw) {
            let covered = self.notifies.iter().any(|(osd, n)| {
                n.exists
                    && n.info.last_epoch_started >= interval.first
                    && (interval.acting.contains(osd) || n.info.last_epoch_started > interval.last)
            });
            if covered || self.never_activated_in(interval) {
                continue;
            }
            let (lost, silent): (Vec<OsdId>, Vec<OsdId>) = (interval.acting.iter())
                .filter(|osd| !self.notifies.contains_key(osd))
                .partition(|osd| self.lost_in(**osd, interval));
            if silent.is_empty() && !lost.is_empty() {
                // Ceph's PriorSet likewise leaves out members lost since the interval:
                // what only they hold of it is given up (objects are then unfound).
                tracing::warn!(
                    "{}: going on without interval e{}-e{}: {} marked lost",
                    self.pgid,
                    interval.first.0,
                    interval.last.0,
                    lost.iter()
                        .map(OsdId::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                continue;
            }
            let silent: Vec<String> = silent.iter().map(OsdId::to_string).collect();
            if !silent.is_empty() {
                return Err(format!(
                    "interval e{}-e{} may have accepted writes and none of its answering \
                     members was active in it; waiting for {}",
                    interval.first.0,
                    interval.last.0,
                    silent.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// Whether an operator declared `osd` lost after `interval` began (`osd lost`).
    fn lost_in(&self, osd: OsdId, interval: &carmine_clustermap::PastInterval) -> bool {
        self.lost_osds
            .get(&osd)
            .is_some_and(|&lost_at| lost_at > interval.first)
    }

    /// Whether the PG provably never went active in `interval`: a member of it answered
    /// with a copy that already existed then and was not activated in it. Going active
    /// takes every member's acknowledgement of the activation, sent only once the
    /// member has durably recorded it (`last_epoch_started`), and no write is served
    /// before; so one member that never recorded it proves the interval served nothing
    /// (Ceph likewise needs one member of a replicated PG's past interval to answer).
    /// Without this, a primary that died while activating held the PG down until it
    /// came back, though its replicas could tell it had never served.
    fn never_activated_in(&self, interval: &carmine_clustermap::PastInterval) -> bool {
        // A merged interval (no single primary) can never be proven inactive: its
        // members are those of two intervals, and one may not have been in the later.
        if interval.primary.is_none() {
            return false;
        }
        interval.acting.iter().any(|osd| {
            self.notifies.get(osd).is_some_and(|n| {
                n.exists
                    && n.info.created <= interval.first
                    && n.info.last_epoch_started < interval.first
            })
        })
    }

    /// A peer whose log matches ours and that holds every object we lack.
    fn source_for_missing(&self) -> Option<OsdId> {
        if self.missing.is_empty() {
            return None;
        }
        let source = self.notifies.iter().find(|(osd, n)| {
            **osd != self.whoami
                && n.exists
                && n.info.last_update == self.info.last_update
                && !n.missing.iter().any(|name| self.missing.contains(name))
        });
        if source.is_none() {
            tracing::error!(
                "{}: no peer holds the {} objects this primary lacks; they are unfound",
                self.pgid,
                self.missing.len()
            );
        }
        source.map(|(osd, _)| *osd)
    }

    /// The authoritative copy, if a copy that can serve its history is reachable.
    /// The copy with the newest history may lack objects (an unfinished backfill or
    /// recovery target: its log is the newest, its objects are not all there). A
    /// copy with the same history that holds them then stands in for it (a primary
    /// that is the target itself pulls them from such a copy, `source_for_missing`,
    /// or repairs them from any answering copy whose version of them is current).
    /// Without one the PG is incomplete: every reachable older copy lacks
    /// acknowledged writes, and the target lacks objects (Ceph's `incomplete`).
    fn complete_auth(&self) -> Result<OsdId, String> {
        let auth = self.choose_auth();
        let Some(best) = self.notifies.get(&auth).filter(|n| n.exists) else {
            return Ok(auth);
        };
        if best.missing.is_empty() {
            return Ok(auth);
        }
        let stand_in = self
            .notifies
            .iter()
            .filter(|(_, n)| n.exists && n.info.last_update == best.info.last_update)
            .filter(|(_, n)| !n.missing.iter().any(|name| best.missing.contains(name)))
            .min_by_key(|(osd, n)| (n.missing.len(), **osd != self.whoami))
            .map(|(osd, _)| *osd);
        let wiped = best.missing.iter().any(|name| name == MISSING_ALL);
        match stand_in {
            Some(_) if auth == self.whoami => Ok(auth),
            Some(osd) => Ok(osd),
            None if wiped => Err(self.incomplete_reason(auth)),
            // Its log is not known before GetLog: as before, objects it lacks that
            // nobody supplies end up unfound rather than the PG incomplete.
            None if auth != self.whoami => Ok(auth),
            None if self.unobtainable_missing() > 0 => Err(self.incomplete_reason(auth)),
            None => Ok(auth),
        }
    }

    /// Primary holding the newest log: how many objects it lacks that no answering
    /// copy holds at their current version (the copy does not list them missing,
    /// and our log shows no write to them after the copy's last update).
    fn unobtainable_missing(&self) -> usize {
        let holders: Vec<(&PgNotify, BTreeSet<&str>)> = self
            .notifies
            .iter()
            .filter(|(osd, n)| **osd != self.whoami && n.exists)
            .filter(|(_, n)| !n.missing.iter().any(|name| name == MISSING_ALL))
            .filter(|(_, n)| {
                let theirs = n.info.last_update;
                theirs == self.info.last_update
                    || theirs == self.info.log_tail
                    || self.log.contains(theirs)
            })
            .map(|(_, n)| {
                let written_since: BTreeSet<&str> = self
                    .log
                    .entries()
                    .filter(|e| e.version > n.info.last_update && e.changes_object())
                    .map(|e| e.oid.as_str())
                    .collect();
                (n, written_since)
            })
            .collect();
        self.missing
            .iter()
            .filter(|name| {
                !holders.iter().any(|(n, written_since)| {
                    !written_since.contains(name.as_str()) && !n.missing.contains(*name)
                })
            })
            .count()
    }

    fn incomplete_reason(&self, auth: OsdId) -> String {
        let best = &self.notifies[&auth];
        let lacking = if best.missing.iter().any(|name| name == MISSING_ALL) {
            "is an unfinished backfill target".to_string()
        } else {
            format!("lacks {} objects", best.missing.len())
        };
        let mut silent: BTreeSet<OsdId> = self
            .past_intervals
            .iter()
            .flat_map(|interval| interval.acting.iter().copied())
            .collect();
        silent.retain(|osd| !self.notifies.contains_key(osd));
        let silent: Vec<String> = silent.iter().map(|osd| osd.to_string()).collect();
        format!(
            "the newest copy ({auth}, at {}) {lacking} and no reachable copy with its \
             history holds them; not answering: {}",
            best.info.last_update,
            if silent.is_empty() {
                "none".to_string()
            } else {
                silent.join(", ")
            }
        )
    }

    fn choose_auth(&self) -> OsdId {
        let Some((osd, best)) = self.latest_best() else {
            return self.whoami;
        };
        if self.our_log_continues(best) {
            return self.whoami;
        }
        (self.extensions.iter())
            .filter(|(_, continues)| **continues)
            .filter_map(|(osd, _)| Some((osd, self.notifies.get(osd)?)))
            .max_by_key(|(_, n)| n.info.last_update)
            .map_or(*osd, |(osd, _)| *osd)
    }

    /// The newest copy of the latest interval that went active (Ceph's
    /// `find_best_info`): the newest last update among the copies with the latest
    /// `last_epoch_started`, then a complete copy, then ourselves, then the fewest
    /// objects missing.
    fn latest_best(&self) -> Option<(&OsdId, &PgNotify)> {
        let key = |osd: &OsdId, n: &PgNotify| {
            (
                n.info.last_epoch_started,
                n.info.last_update,
                !n.missing.iter().any(|name| name == MISSING_ALL),
                *osd == self.whoami,
                std::cmp::Reverse(n.missing.len()),
            )
        };
        self.notifies
            .iter()
            .filter(|(_, n)| n.exists)
            .max_by_key(|(osd, n)| key(osd, n))
    }

    /// Whether our own log continues the history that ends at `best` (see
    /// `log_continues`).
    fn our_log_continues(&self, best: &PgNotify) -> bool {
        let ours = || self.log.entries();
        !self.missing.contains(MISSING_ALL)
            && log_continues(best, &self.info, ours, |name| !self.missing.contains(name))
    }

    /// A copy whose log may continue the latest interval's history with writes to
    /// objects the best copy lacks (see `log_continues`), and that we have not read
    /// yet this round: an answering copy of an older interval, complete, whose last
    /// update is past the best copy's, while the best copy lacks objects. Its log
    /// tells; the newest such copy first.
    fn unread_extension(&self) -> Option<OsdId> {
        let (_, best) = self.latest_best()?;
        if best.missing.is_empty() || self.our_log_continues(best) {
            return None;
        }
        (self.notifies.iter())
            .filter(|(osd, n)| **osd != self.whoami && n.exists)
            .filter(|(osd, _)| !self.extensions.contains_key(osd))
            .filter(|(_, n)| !n.missing.iter().any(|name| name == MISSING_ALL))
            .filter(|(_, n)| n.info.last_update > best.info.last_update)
            .max_by_key(|(_, n)| n.info.last_update)
            .map(|(osd, _)| *osd)
    }

    /// Any role: the primary wants our log, and perhaps which of the objects our
    /// newest entries wrote we cannot read.
    pub fn handle_log_request(
        &mut self,
        store: &dyn ObjectStore,
        from: OsdId,
        request: PgLogRequest,
        out: &mut Vec<Output>,
    ) {
        let unreadable = request.check_after.map_or_else(Vec::new, |after| {
            let written = objects_after_log(self.log.entries(), after);
            let corrupt = written
                .into_iter()
                .filter(|name| self.copy_is_corrupt(store, name));
            corrupt.collect()
        });
        let entries: Vec<LogEntry> = self
            .log
            .entries()
            .filter(|e| request.after.is_none_or(|after| e.version > after))
            .cloned()
            .collect();
        let reply = Msg::PgLogReply(PgLogReply {
            pgid: self.pgid,
            interval: request.interval,
            map_epoch: self.map_epoch,
            info: self.info.clone(),
            entries,
            dups: self.log.dups_to_send(),
            unreadable,
        });
        out.push(peer_output(from, reply));
    }

    /// Primary: the authoritative log arrived; adopt it and pull what we lack.
    pub fn handle_log_reply(
        &mut self,
        store: &mut dyn ObjectStore,
        from: OsdId,
        mut reply: PgLogReply,
        out: &mut Vec<Output>,
    ) {
        if self.phase != (Phase::GetLog { auth: from }) || reply.interval != self.interval_start {
            return;
        }
        if self.reading_extension == Some(from) {
            self.reading_extension = None;
            let continues = self.latest_best().is_some_and(|(_, best)| {
                let lacks: BTreeSet<&str> = (self.notifies.get(&from))
                    .map(|n| n.missing.iter().map(String::as_str).collect())
                    .unwrap_or_default();
                let theirs = || reply.entries.iter();
                log_continues(best, &reply.info, theirs, |name| !lacks.contains(name))
            });
            self.extensions.insert(from, continues);
            if !continues {
                // Peering decides again, without it.
                self.phase = Phase::GetInfo {
                    waiting: BTreeSet::new(),
                };
                self.after_infos(store, out);
                return;
            }
            tracing::info!(
                "{}: the log of {from} continues the latest interval's history; it is \
                 the authoritative one",
                self.pgid
            );
        }
        self.drop_unreadable_tail(from, &mut reply);
        let plan = catch_up_plan(
            &self.log_versions(),
            &self.info,
            self.info.last_update,
            &reply,
        );
        let mut lacking: BTreeSet<String> = self.missing.clone();
        match &plan {
            CatchUp::Prefix { after } => {
                lacking.extend(objects_after(&reply.entries, *after));
                lacking.extend(self.divergent_objects(&reply.entries, *after));
            }
            // Until the last object arrives this copy is incomplete, durably, so that a
            // new peering round that cuts the pull short does not trust it.
            CatchUp::Backfill => {
                lacking.insert(MISSING_ALL.to_string());
                // What the authoritative copy lacks, we lack too: the pull of everything
                // it holds does not name those, and taking them as absent dropped
                // acknowledged objects (the PG went clean without them; the
                // simulator's remap and space classes). Not one its log shows gone
                // for good: absent is what that copy should be (`removed_for_good`).
                // (Catching up on a prefix, the objects changed since our last update
                // are pulled by name, and one the source cannot send stays missing;
                // those we hold from before are current.)
                if let Some(notify) = self.notifies.get(&from) {
                    let deleted = |name: &str| self.removed_for_good(reply.entries.iter(), name);
                    let theirs = (notify.missing.iter())
                        .filter(|name| *name != MISSING_ALL && !deleted(name));
                    lacking.extend(theirs.cloned());
                }
            }
        }
        let much = plan == CatchUp::Backfill || lacking.len() > self.tuning.pull_before_active_max;
        if much && self.acting.contains(&from) {
            // Copying all that before serving would stall every client of the PG: let
            // the complete copy lead meanwhile (pg_temp), and be backfilled as a replica.
            // The complete copy first, then the other members, then any up OSD not yet
            // among them (the monitor drops an entry smaller than the up set).
            let mut want = vec![from];
            for &osd in self.acting.iter().chain(self.up.iter()) {
                if !want.contains(&osd) && want.len() < usize::from(self.pool.size) {
                    want.push(osd);
                }
            }
            tracing::info!(
                "{}: {} objects to copy before serving; asking for pg_temp {want:?}",
                self.pgid,
                if plan == CatchUp::Backfill {
                    "all".to_string()
                } else {
                    lacking.len().to_string()
                }
            );
            self.want_acting = want;
            self.report_urgent = true;
            self.phase = Phase::WaitPgTemp { auth: from };
            return;
        }
        let mut info = reply.info.clone();
        info.pgid = self.pgid;
        // Ours up to the point both histories share, then the authoritative copy's.
        let mut needs = match plan {
            CatchUp::Prefix { after } => self.own_needs_to(after),
            CatchUp::Backfill => BTreeMap::new(),
        };
        if let Some(notify) = self.notifies.get(&from) {
            needs.extend(notify.missing_need.iter().cloned());
        }
        let adopted = Adopted {
            info,
            entries: reply.entries,
            dups: &reply.dups,
            wipe: plan == CatchUp::Backfill,
            needs,
        };
        self.adopt_log(store, adopted, &lacking);
        let all = plan == CatchUp::Backfill || lacking.contains(MISSING_ALL);
        lacking.remove(MISSING_ALL);
        self.start_pull(store, from, lacking, all, out);
    }

    fn log_versions(&self) -> BTreeSet<EVersion> {
        self.log.entries().map(|e| e.version).collect()
    }

    /// Objects of our log entries after the common point `after` that the
    /// authoritative log does not have. Entries up to `after` are history both logs
    /// share, even where the authoritative log has trimmed them: taking those for
    /// divergent marked missing the current copies this OSD stores, and with no
    /// other copy holding them the PG went incomplete (seed 10963).
    fn divergent_objects(&self, auth_entries: &[LogEntry], after: EVersion) -> BTreeSet<String> {
        let auth: BTreeSet<EVersion> = auth_entries.iter().map(|e| e.version).collect();
        self.log
            .entries()
            .filter(|e| e.version > after && !auth.contains(&e.version) && e.changes_object())
            .map(|e| e.oid.clone())
            .collect()
    }

    /// Replaces our log, info and missing set with the authoritative ones, durably,
    /// and merges the authoritative copy's dups: the entries it trimmed may be ones
    /// this copy never logged, or ones the adopted log no longer holds.
    fn adopt_log(
        &mut self,
        store: &mut dyn ObjectStore,
        adopted: Adopted<'_>,
        missing: &BTreeSet<String>,
    ) {
        let Adopted {
            mut info,
            entries,
            dups,
            wipe,
            needs,
        } = adopted;
        info.created = if wipe {
            self.interval_start
        } else {
            self.info.created
        };
        // Only what the log keeps is persisted, so the log on disk is the one in memory.
        if let Some(tail) = self.log.replace(entries, !wipe) {
            info.log_tail = info.log_tail.max(tail);
        }
        self.log.merge_dups(dups);
        let mut tx = Transaction::new();
        tx.omap_clear(self.coll, pgmeta_oid());
        if wipe {
            // A backfill replaces each object as it arrives, and only then: until
            // then this copy keeps its own, named missing and never served, though a
            // primary that needs exactly the version one of them holds may still pull
            // it (the last intact copy of a write the log no longer records can be
            // here; seed 211550). What the authoritative copy does not hold goes now;
            // a copy pulling everything (`MISSING_ALL`) learns that only at the end.
            if !missing.contains(MISSING_ALL) {
                for oid in self.objects_not_in(store, missing) {
                    tx.remove(self.coll, oid);
                }
            }
        }
        let mut omap: Vec<(Bytes, Bytes)> = self
            .log
            .entries()
            .map(|e| (crate::pglog::log_key(e.version), e.to_bytes()))
            .collect();
        omap.extend(self.log.dup_omap());
        let needs = self.needs_of(missing, &needs);
        omap.extend(Self::missing_omap(missing, &needs));
        omap.push((Bytes::from_static(INFO_KEY), info.to_bytes()));
        tx.omap_set(self.coll, pgmeta_oid(), omap);
        self.submit_meta(store, tx);
        self.info = info;
        self.missing = missing.clone();
        self.missing_need = needs;
    }

    /// The epoch the map must show this OSD alive through before it activates the PG:
    /// the interval's start, or the epoch after the last interval the monitor closed
    /// if that is later (a copy that skipped maps may have missed an interval change
    /// and come back to the same acting set; the monitor's interval started there).
    pub(super) fn activation_floor(&self) -> carmine_types::Epoch {
        let closed = self
            .past_intervals
            .last()
            .map_or(carmine_types::Epoch(0), |interval| interval.last.next());
        self.interval_start.max(closed)
    }

    /// The `up_thru` this primary asks the monitor for (with its stats): the
    /// activation floor while it has yet to activate in this interval and the map
    /// shows less; `Epoch(0)` otherwise.
    pub(super) fn want_up_thru(&self) -> carmine_types::Epoch {
        let activated = matches!(self.phase, Phase::Activating { .. } | Phase::Active);
        let floor = self.activation_floor();
        if self.is_primary() && !activated && self.up_thru < floor {
            floor
        } else {
            carmine_types::Epoch(0)
        }
    }

    /// Primary, up to date: activates once the map shows this OSD alive through the
    /// interval's start, else waits for the map that does (WaitUpThru).
    pub(super) fn activate_when_alive(
        &mut self,
        store: &mut dyn ObjectStore,
        out: &mut Vec<Output>,
    ) {
        if self.up_thru >= self.activation_floor() {
            self.activate_replicas(store, out);
        } else {
            tracing::debug!(
                "{}: waiting for a map with up_thru >= e{} (have e{})",
                self.pgid,
                self.activation_floor().0,
                self.up_thru.0
            );
            self.phase = Phase::WaitUpThru;
            self.report_urgent = true;
        }
    }

    pub(super) fn submit_meta(&mut self, store: &mut dyn ObjectStore, tx: Transaction) {
        match store.submit(tx) {
            Ok(seq) => self.last_submitted = seq,
            Err(error) => tracing::error!("{}: cannot persist PG metadata: {error}", self.pgid),
        }
    }

    /// Persists our info alone (the PG's log and objects unchanged).
    pub(super) fn persist_info(&mut self, store: &mut dyn ObjectStore) {
        let mut tx = Transaction::new();
        let info = (Bytes::from_static(INFO_KEY), self.info.to_bytes());
        tx.omap_set(self.coll, pgmeta_oid(), vec![info]);
        self.submit_meta(store, tx);
    }

    /// Primary: we are up to date; send each replica what it lacks.
    pub(super) fn activate_replicas(&mut self, store: &mut dyn ObjectStore, out: &mut Vec<Output>) {
        // Only an interval that can take writes is recorded as started (Ceph's
        // `acting_set_writeable`): an acting set smaller than min_size never accepts a
        // write, and the past intervals call it never read-write. Recording it anyway
        // made this copy's log outrank copies holding newer writes of the interval
        // before (writes those copies applied but not every member acknowledged), so
        // peering rolled them back and took the object from this copy alone, which
        // may be the corrupt one (seed 3176).
        if self.acting_writeable() {
            self.info.last_epoch_started = self.interval_start;
        }
        // Counts a rollback left in doubt are counted afresh once this copy holds its
        // whole history: the replicas take them with this activation.
        self.recount_stats_if_complete(store);
        self.persist_info(store);
        self.activation_record = Some(self.last_submitted);
        let versions = self.log_versions();
        let mut waiting = BTreeSet::new();
        // What each replica lacks is worked out afresh; answers to pushes of an earlier
        // interval are ignored, so pushes still counted in flight would never finish.
        self.peer_missing.clear();
        self.pushing.clear();
        self.backfilling.clear();
        for replica in self.replicas() {
            let notify = self.notifies.get(&replica).cloned();
            let activate = self.activation_for(store, replica, notify, &versions);
            self.peer_missing
                .insert(replica, activate.missing.iter().cloned().collect());
            // A backfill target that already holds every object (nothing to push)
            // is done now: no push reply would ever take it out of `backfilling`, and
            // its later recoveries would be reserved as backfills.
            if activate.backfill && !activate.missing.is_empty() {
                self.backfilling.insert(replica);
            }
            self.send_once_durable(replica, Msg::PgActivate(activate));
            waiting.insert(replica);
        }
        // The first lease renewal follows the activation on each link, so the lease
        // is usually granted by the time the last replica has activated.
        self.renew_lease(out);
        self.phase = Phase::Activating { waiting };
        self.after_activated(store, out);
    }

    /// Whether the acting set is large enough to accept writes (min_size), the same
    /// rule the past intervals use for `maybe_went_rw`.
    fn acting_writeable(&self) -> bool {
        self.acting.len() >= usize::from(self.pool.min_size)
    }

    fn activation_for(
        &self,
        store: &dyn ObjectStore,
        _replica: OsdId,
        notify: Option<PgNotify>,
        versions: &BTreeSet<EVersion>,
    ) -> PgActivate {
        let plan = match &notify {
            Some(n) if n.exists && !n.missing.iter().any(|name| name == MISSING_ALL) => {
                let their = n.info.last_update;
                if their == self.info.last_update
                    || their == self.info.log_tail
                    || versions.contains(&their)
                    || (their == EVersion::ZERO && self.info.log_tail == EVersion::ZERO)
                {
                    CatchUp::Prefix { after: their }
                } else {
                    CatchUp::Backfill
                }
            }
            _ => CatchUp::Backfill,
        };
        let (common, missing, backfill) = match plan {
            CatchUp::Prefix { after } => {
                let mut missing = objects_after_log(self.log.entries(), after);
                if let Some(n) = &notify {
                    missing.extend(n.missing.iter().cloned());
                }
                (after, missing, false)
            }
            // Objects we lack are named too: the replica keeps its copies of them,
            // one of which may be the version we need.
            CatchUp::Backfill => {
                let mut names = self.all_objects(store);
                names.extend(self.missing.iter().filter(|n| *n != MISSING_ALL).cloned());
                (EVersion::ZERO, names, true)
            }
        };
        let entries = self
            .log
            .entries()
            .filter(|e| e.version > common)
            .cloned()
            .collect();
        PgActivate {
            pgid: self.pgid,
            interval: self.interval_start,
            map_epoch: self.map_epoch,
            info: self.info.clone(),
            common,
            entries,
            backfill,
            missing_need: self.needs_to_send(&missing),
            missing: missing.into_iter().collect(),
            dups: self.log.dups_to_send(),
        }
    }

    /// Our stored objects (heads and clones) whose names `keep` does not hold.
    fn objects_not_in(
        &self,
        store: &dyn ObjectStore,
        keep: &BTreeSet<String>,
    ) -> Vec<carmine_types::ObjectId> {
        let mut stray = Vec::new();
        self.for_each_object(store, |oid| {
            if !keep.contains(&oid.name) {
                stray.push(oid);
            }
        });
        stray
    }

    /// Every object name in our copy (backfill sends them all).
    pub(super) fn all_objects(&self, store: &dyn ObjectStore) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        self.for_each_object(store, |oid| {
            if oid.snap == SnapId::HEAD {
                names.insert(oid.name);
            }
        });
        names
    }

    /// Calls `visit` with each object stored in our collection (heads and clones),
    /// the PG's metadata object aside, a page at a time; a listing error ends it.
    fn for_each_object(
        &self,
        store: &dyn ObjectStore,
        mut visit: impl FnMut(carmine_types::ObjectId),
    ) {
        let listed = self.try_for_each_object(store, |oid| {
            visit(oid);
            Ok(())
        });
        if let Err(error) = listed {
            tracing::error!("{}: cannot list objects: {error}", self.pgid);
        }
    }

    /// [`Pg::for_each_object`], stopping at the first error of the listing or of
    /// `visit`.
    fn try_for_each_object(
        &self,
        store: &dyn ObjectStore,
        mut visit: impl FnMut(carmine_types::ObjectId) -> Result<(), String>,
    ) -> Result<(), String> {
        let mut after = None;
        loop {
            let page = (store.list_objects(self.coll, after.as_ref(), 1024))
                .map_err(|error| error.to_string())?;
            let Some(last) = page.last().cloned() else {
                return Ok(());
            };
            for oid in page.into_iter().filter(|oid| !oid.name.is_empty()) {
                visit(oid)?;
            }
            after = Some(last);
        }
    }

    /// Counts in doubt (`PgInfo::stats_invalid`) are counted afresh from our store
    /// once this copy holds every object of its history (nothing missing, so its
    /// content is exactly the history its log ends at), as Ceph's scrub does for
    /// `stats_invalid`. Primary and replicas alike: a primary may activate its
    /// replicas before it holds every object, and a replica then counts its own when
    /// its pushes are in (the primary's next write brings the primary's counts again).
    /// Heads that exist and clones count, as the write path counts them. Returns
    /// whether our info changed; the caller persists it. A read error leaves them in
    /// doubt. Costs a listing of the PG, only after such a rollback.
    pub(super) fn recount_stats_if_complete(&mut self, store: &dyn ObjectStore) -> bool {
        if !self.info.stats_invalid || !self.missing.is_empty() {
            return false;
        }
        let (mut objects, mut bytes) = (0u64, 0u64);
        let counted = self.try_for_each_object(store, |oid| {
            let size = if oid.snap == SnapId::HEAD {
                let head = crate::exec::load_object(store, self.coll, &oid)
                    .map_err(|error| format!("{}: {error:?}", oid.name))?;
                head.exists.then_some(head.size_bytes)
            } else {
                let stat = store.stat(self.coll, &oid);
                Some(stat.map_err(|error| error.to_string())?.size_bytes)
            };
            if let Some(size) = size {
                objects += 1;
                bytes += size;
            }
            Ok(())
        });
        if let Err(error) = counted {
            tracing::error!("{}: cannot count the PG's objects: {error}", self.pgid);
            return false;
        }
        tracing::info!(
            "{}: counted {objects} objects of {bytes} bytes (were {} of {}, in doubt)",
            self.pgid,
            self.info.object_count,
            self.info.data_bytes
        );
        self.info.object_count = objects;
        self.info.data_bytes = bytes;
        self.info.stats_invalid = false;
        true
    }

    /// Replica: adopt the primary's history for this interval.
    pub fn handle_activate(
        &mut self,
        store: &mut dyn ObjectStore,
        from: OsdId,
        activate: PgActivate,
        out: &mut Vec<Output>,
    ) {
        // Each copy dates an interval by the first map in which it saw it, so a copy
        // whose first map after a restart (or a gap) came mid-interval dates it later
        // than the primary does, and dropping the primary's activation for that left
        // the PG peering for ever (nothing resends it). An earlier-dated activation is
        // ours only if the primary sent it from a map no older than our interval (so
        // the interval had not ended for it) and built it on what this copy told it
        // since it was opened (our answer to its query for that interval), never on
        // what an earlier incarnation of this copy held.
        let earlier_ours = activate.map_epoch >= self.interval_start
            && self.queried_by.contains(&(activate.interval, from));
        let stale = activate.interval < self.interval_start && !earlier_ours;
        if stale || self.primary != Some(from) {
            return;
        }
        // Either way the primary's dating is the one that counts (it skipped an epoch
        // this copy saw, or this copy came in mid-interval): leases, pushes and acks
        // of the interval carry it.
        self.interval_start = activate.interval;
        // A resend (our acknowledgement was lost, or crossed it): this copy has
        // adopted this round's history already, and pushes may have come since.
        // Adopting again would put them back among the missing (every object of a
        // backfill); acknowledging again is all the primary needs. A new round always
        // queries this copy first, and an interval is not always new after a restart
        // (a monitor that publishes no map meanwhile), so the interval alone does not
        // tell a resend from a new round.
        // A primary that records the interval as started sends that in its info; one
        // whose acting set cannot take writes does not (see `activate_replicas`), and
        // this copy then keeps the newer of the two.
        let writeable = activate.info.last_epoch_started == activate.interval;
        let resend = self.activated_since_query
            && (!writeable || self.info.last_epoch_started == activate.interval)
            && self.queried_by.contains(&(activate.interval, from));
        if resend {
            self.queue_activated(from, activate.interval);
            return;
        }
        let mut missing = if activate.backfill {
            BTreeSet::new()
        } else {
            self.missing.clone()
        };
        missing.extend(activate.missing.iter().cloned());
        let mut entries: Vec<LogEntry> = if activate.backfill {
            Vec::new()
        } else {
            // Our entries the primary's log also covers: the replicas' logs then hold
            // the same span as the primary's, (log_tail, last_update].
            self.log
                .entries()
                .filter(|e| e.version <= activate.common && e.version > activate.info.log_tail)
                .cloned()
                .collect()
        };
        entries.extend(activate.entries);
        let mut info = activate.info;
        info.last_epoch_started = if writeable {
            activate.interval
        } else {
            info.last_epoch_started.max(self.info.last_epoch_started)
        };
        let mut needs = if activate.backfill {
            BTreeMap::new()
        } else {
            self.own_needs_to(activate.common)
        };
        needs.extend(activate.missing_need.iter().cloned());
        let adopted = Adopted {
            info,
            entries,
            dups: &activate.dups,
            wipe: activate.backfill,
            needs,
        };
        self.adopt_log(store, adopted, &missing);
        // The primary may activate us before it holds every object itself, with counts
        // still in doubt; a copy that lacks nothing counts its own.
        if self.recount_stats_if_complete(store) {
            self.persist_info(store);
        }
        self.activated_since_query = true;
        self.queue_activated(from, activate.interval);
        let _ = out;
    }

    /// Replica: acknowledges an activation once the store has committed what this
    /// copy submitted so far (the adopted history).
    fn queue_activated(&mut self, primary: OsdId, interval: carmine_types::Epoch) {
        self.held_until_commit.push_back(super::HeldMessage {
            seq: self.last_submitted,
            to: primary,
            reply: Msg::PgActivated(PgActivated {
                pgid: self.pgid,
                interval,
                map_epoch: self.map_epoch,
            }),
        });
    }

    /// Why the PG does not serve, for its stats (`PgStat::reason`); empty when it
    /// is active or this copy is not the primary.
    pub(super) fn inactive_reason(&self) -> String {
        let names = |osds: &BTreeSet<OsdId>| {
            let names: Vec<String> = osds.iter().map(OsdId::to_string).collect();
            names.join(", ")
        };
        let reason = match &self.phase {
            Phase::Replica => String::new(),
            Phase::Down(why) => format!("down: {why}"),
            Phase::Incomplete(why) => format!("incomplete: {why}"),
            Phase::GetInfo { waiting } => {
                format!("peering: waiting for the info of {}", names(waiting))
            }
            Phase::GetLog { auth } => format!("peering: waiting for the log of {auth}"),
            Phase::Pull { source, .. } => format!(
                "peering: pulling {} objects from {source} before serving",
                self.pulling.len()
            ),
            Phase::WaitPgTemp { auth } => {
                format!("peering: waiting for a pg_temp led by {auth}, which holds a complete copy")
            }
            Phase::WaitUpThru => format!(
                "peering: waiting for the monitor to record {} alive through e{} (up_thru)",
                self.whoami,
                self.activation_floor().0
            ),
            Phase::Activating { waiting } if waiting.is_empty() => {
                "activating: waiting for its own activation record to be durable".to_string()
            }
            Phase::Activating { waiting } => {
                format!("activating: waiting for {} to activate", names(waiting))
            }
            Phase::Active if self.is_active() => String::new(),
            Phase::Active => format!(
                "inactive: {} members acting, fewer than min_size {}",
                self.acting.len(),
                self.pool.min_size
            ),
        };
        carmine_proto::PgStat::bounded_reason(reason)
    }

    /// Primary, each tick: when the same peering step has waited
    /// `PEERING_RESEND_INTERVAL`, resends its requests to the peers that have not
    /// answered (their answer, or our request, may have been lost with a session).
    /// Recovery's pulls and pushes are resent likewise (`recovery_tick`).
    pub fn peering_tick(
        &mut self,
        now: Instant,
        store: &mut dyn ObjectStore,
        out: &mut Vec<Output>,
    ) {
        self.recovery_tick(now, store, out);
        self.reservation_tick(now, store, out);
        let waits_on_peers = matches!(
            self.phase,
            Phase::GetInfo { .. }
                | Phase::GetLog { .. }
                | Phase::Pull { .. }
                | Phase::Activating { .. }
        );
        if !self.is_primary() || !waits_on_peers {
            self.resend_watch = None;
            return;
        }
        match &mut self.resend_watch {
            Some(watch) if watch.interval == self.interval_start && watch.phase == self.phase => {
                if now.saturating_duration_since(watch.since) < PEERING_RESEND_INTERVAL {
                    return;
                }
                watch.since = now;
            }
            _ => {
                self.resend_watch = Some(ResendWatch {
                    interval: self.interval_start,
                    phase: self.phase.clone(),
                    since: now,
                });
                return;
            }
        }
        self.resend_peering(store, out);
    }

    /// Sends again what the current peering step waits for.
    fn resend_peering(&mut self, store: &mut dyn ObjectStore, out: &mut Vec<Output>) {
        match self.phase.clone() {
            Phase::GetInfo { waiting } => {
                tracing::info!(
                    "{}: no info yet from {waiting:?}; querying again",
                    self.pgid
                );
                for osd in waiting {
                    let query = Msg::PgQuery(PgQuery {
                        pgid: self.pgid,
                        interval: self.interval_start,
                        map_epoch: self.map_epoch,
                    });
                    self.send(osd, query, out);
                }
            }
            Phase::GetLog { auth } => {
                tracing::info!("{}: no log yet from {auth}; asking again", self.pgid);
                self.request_log(auth, out);
            }
            Phase::Pull { source, all } => {
                // Only what has not arrived: the source answers a pull again in full,
                // and copies that arrive twice replace the same object.
                tracing::info!(
                    "{}: {} objects not pulled yet from {source}; pulling again",
                    self.pgid,
                    self.pulling.len()
                );
                self.send(source, self.pull_message(all), out);
            }
            Phase::Activating { waiting } => {
                tracing::info!(
                    "{}: {waiting:?} not activated yet; activating again",
                    self.pgid
                );
                // Nothing changed since the first activation (no write is served
                // before every replica has acknowledged), so this is the same message.
                let versions = self.log_versions();
                for replica in waiting {
                    let notify = self.notifies.get(&replica).cloned();
                    let activate = self.activation_for(store, replica, notify, &versions);
                    self.send_once_durable(replica, Msg::PgActivate(activate));
                }
            }
            _ => {}
        }
    }

    /// Primary: a replica adopted our history.
    pub fn handle_activated(
        &mut self,
        store: &mut dyn ObjectStore,
        from: OsdId,
        activated: PgActivated,
        out: &mut Vec<Output>,
    ) {
        if activated.interval != self.interval_start {
            return;
        }
        if let Phase::Activating { waiting } = &mut self.phase {
            waiting.remove(&from);
        }
        self.after_activated(store, out);
    }

    pub(super) fn after_activated(&mut self, store: &mut dyn ObjectStore, out: &mut Vec<Output>) {
        let Phase::Activating { waiting } = &self.phase else {
            return;
        };
        if !waiting.is_empty() || self.activation_record.is_some() {
            return;
        }
        self.phase = Phase::Active;
        tracing::debug!(
            "{} active in interval e{}",
            self.pgid,
            self.interval_start.0
        );
        self.requeue_in_flight();
        // Clients wait on the writes carried over: push their objects now, ahead of
        // the backfill queue and outside its budget (Ceph recovers objects with blocked
        // ops first), or they would wait for everything sorting before them.
        let carried: BTreeSet<String> = self
            .in_flight
            .iter()
            .filter(|w| w.is_write)
            .map(|w| w.oid.clone())
            .collect();
        for oid in &carried {
            self.push_before_write(store, oid, out);
        }
        // Objects this copy still lacks (no peering source could supply them) come
        // from a replica that has them, before any op reaches them.
        let lacking: Vec<String> = self.missing.iter().cloned().collect();
        for name in lacking {
            self.start_repair(&*store, &name, None, out);
        }
        self.schedule_recovery(store, out);
        self.complete_writes(store, out);
        let waiting = std::mem::take(&mut self.waiting_for_active);
        for (client, op) in waiting {
            self.handle_client_op(store, client, op, out);
        }
    }

    /// Writes in flight from an earlier interval reach the new replicas by push: the
    /// pushed copy holds every write applied here. Writes whose log entry did not
    /// survive peering (this copy's divergent history was rolled back) are dropped
    /// unanswered: the client resends, and the write runs again.
    fn requeue_in_flight(&mut self) {
        let log = &self.log;
        self.in_flight.retain(|w| log.contains(w.version));
        self.writes_per_object.clear();
        for write in &self.in_flight {
            *self.writes_per_object.entry(write.oid.clone()).or_default() += 1;
        }
        let unblocked: Vec<String> = self
            .blocked_reads
            .keys()
            .filter(|oid| !self.writes_per_object.contains_key(*oid))
            .cloned()
            .collect();
        for oid in unblocked {
            if let Some(reads) = self.blocked_reads.remove(&oid) {
                self.blocked_read_count -= reads.len();
                self.waiting_for_active.extend(reads);
            }
        }
        // An error entry changes no object: the activation's log carried it to all.
        for failed in self.in_flight.iter_mut().filter(|w| !w.is_write) {
            failed.waiting_on.clear();
        }
        let replicas = self.replicas();
        for write in self.in_flight.iter_mut().filter(|w| w.is_write) {
            write.waiting_on = replicas.iter().copied().collect();
            write.log_only = Default::default();
            write.carried_over = true;
            // Its RepOp is moot: the activation carried the entry, and a RepOp of
            // the interval before would be dropped as stale anyway.
            write.refused_by = Default::default();
            for replica in &replicas {
                self.peer_missing
                    .entry(*replica)
                    .or_default()
                    .insert(write.oid.clone());
            }
        }
    }
}

impl Pg {
    /// Forgets the log from `first` on (`forgotten`; `kept` is what stays): their
    /// objects become missing here and in-flight writes from `first` on are dropped
    /// unanswered (the clients resend). Shared by both unreadable-write rollbacks.
    fn roll_back_log(
        &mut self,
        store: &mut dyn ObjectStore,
        kept: Vec<LogEntry>,
        forgotten: &[LogEntry],
        first: EVersion,
    ) {
        let mut missing = self.missing.clone();
        missing.extend(
            forgotten
                .iter()
                .filter(|entry| entry.changes_object())
                .map(|entry| entry.oid.clone()),
        );
        let mut info = self.info.clone();
        info.last_update = kept.last().map_or(info.log_tail, |entry| entry.version);
        // Our object and byte counts include the forgotten writes. A copy whose log
        // ends where ours now does counts exactly the history we keep (seed 4040:
        // without this, every member reported the rolled-back write's bytes for good).
        // With none, the counts are in doubt (`PgInfo::stats_invalid`) until such a
        // copy answers a peering, or a copy that holds every object of its history
        // counts them (`recount_stats_if_complete`).
        let counts = self.stats_at(info.last_update);
        if !take_counts(&mut info, counts) {
            tracing::info!(
                "{}: rolled back {} entries; the PG's object and byte counts are in doubt \
                 until a copy that ends at {} answers or every object is here",
                self.pgid,
                forgotten.len(),
                info.last_update
            );
        }
        let needs = (self.own_needs_to(first).into_iter())
            .filter(|(_, need)| *need < first)
            .collect();
        let adopted = Adopted {
            info,
            entries: kept,
            dups: &[],
            wipe: false,
            needs,
        };
        self.adopt_log(store, adopted, &missing);
        self.in_flight.retain(|write| write.version < first);
    }

    /// The object count and bytes of the history that ends at `last_update`, from an
    /// answering copy whose log ends exactly there and whose counts are not in doubt:
    /// versions name one history, so its counts are that history's.
    fn stats_at(&self, last_update: EVersion) -> Option<(u64, u64)> {
        self.notifies
            .iter()
            .filter(|(osd, n)| **osd != self.whoami && n.exists)
            .map(|(_, n)| &n.info)
            .find(|info| info.last_update == last_update && !info.stats_invalid)
            .map(|info| (info.object_count, info.data_bytes))
    }

    /// Counts in doubt (`PgInfo::stats_invalid`: a rollback that found no copy ending
    /// where our log now does, as a former primary rolls back at the interval change
    /// before it hears from anyone, seed 7290; or an adopted info that said so): takes
    /// the counts from a copy that answered this peering, ends there and is sure,
    /// so that they are the kept history's whether our log then becomes authoritative
    /// or not. Returns whether our info changed. The new counts reach the store with
    /// the next info this copy persists (activation, or its next write).
    fn settle_stats(&mut self) -> bool {
        if !self.info.stats_invalid {
            return false;
        }
        let counts = self.stats_at(self.info.last_update);
        take_counts(&mut self.info, counts)
    }

    /// Former primary, new interval: rolls back our writes that were never
    /// acknowledged when one of them left its object unreadable here.
    ///
    /// A write in flight from an earlier interval is carried over: it is acknowledged
    /// once every new replica has our copy by push. But when our copy of its object
    /// fails its checksum, no push can ever be made; the members that acknowledged
    /// nothing of it lack that version, so no copy anywhere can serve it (it is
    /// unfound) and, as our log is the newest, peering would make every member wait
    /// for it forever (seed 7290: a write applied only here while the replicas were
    /// cut off, then a bit flip on its only copy). That version was never
    /// acknowledged: only this OSD acknowledges the writes it logged, and only in log
    /// order, once every member has them (`complete_writes`), so the writes still in
    /// flight are exactly our newest log entries, and nobody was told of them. They
    /// are as safe to throw away as a divergent history (Ceph rolls back a copy's
    /// divergent entries; a write that was never acknowledged may be lost): we
    /// forget them from the first one whose object we cannot read, and their objects
    /// become missing here, so that peering takes the newest readable version from a
    /// member that holds the history up to that point, or from whichever copy turns
    /// out authoritative. Their clients get no answer; they resend, and the write
    /// runs again (as for the divergent writes of `requeue_in_flight`). Ceph would
    /// instead leave the object unfound until an operator runs
    /// `mark_unfound_lost revert`; here no acknowledged version can be lost by it, so
    /// the PG need not wait for one.
    pub(super) fn roll_back_unreadable_writes(&mut self, store: &mut dyn ObjectStore) {
        let Some(unreadable) = self
            .in_flight
            .iter()
            .filter(|write| write.is_write)
            .find(|write| self.copy_is_corrupt(store, &write.oid))
            .map(|write| write.version)
        else {
            return;
        };
        let in_flight: BTreeSet<EVersion> = self.in_flight.iter().map(|w| w.version).collect();
        let ours = || self.log.entries();
        let first = rollback_point_others_can_serve(ours, unreadable, |v| in_flight.contains(&v));
        let (kept, forgotten): (Vec<LogEntry>, Vec<LogEntry>) = self
            .log
            .entries()
            .cloned()
            .partition(|entry| entry.version < first);
        // What `complete_writes` guarantees (in-order answers); without it an entry
        // after `first` might have been acknowledged, so nothing is rolled back.
        if let Some(done) = forgotten.iter().find(|e| !in_flight.contains(&e.version)) {
            tracing::error!(
                "{}: cannot roll back from {first}: {} after it is not in flight",
                self.pgid,
                done.version
            );
            return;
        }
        tracing::warn!(
            "{}: our copy of a write never acknowledged ({unreadable}) is unreadable; \
             rolling back {} entries from {first}",
            self.pgid,
            forgotten.len()
        );
        self.roll_back_log(store, kept, &forgotten, first);
    }
}

impl Pg {
    /// Primary, peering: rolls back the entries of our log that no answering copy
    /// holds, from the first whose object we cannot read, when they provably were
    /// never acknowledged. Returns whether it rolled anything back.
    ///
    /// `roll_back_unreadable_writes` knows which writes were never acknowledged from
    /// the ops still in flight, which a restart forgets (seed 4040: the primary
    /// applied a write while cut off from both replicas, a bit flip hit its copy, it
    /// crashed, and came back with that write as the newest entry of its log; peering
    /// made its log authoritative, told the replicas they lack the object, and no copy
    /// could ever serve it, although both replicas held the acknowledged version).
    /// The log itself proves it (`unacknowledged_unreadable_tail`). Those entries
    /// are then as safe to throw away as a divergent history, and their
    /// objects become missing here: peering takes their newest readable version from
    /// a copy that holds the history up to that point.
    fn roll_back_unreadable_history(&mut self, store: &mut dyn ObjectStore) -> bool {
        let ours = || self.log.entries();
        let corrupt = |name: &str| self.copy_is_corrupt(store, name);
        let Some((unreadable, first)) =
            self.unacknowledged_unreadable_tail(self.whoami, &self.info, ours, corrupt)
        else {
            return false;
        };
        let (kept, forgotten): (Vec<LogEntry>, Vec<LogEntry>) = self
            .log
            .entries()
            .cloned()
            .partition(|entry| entry.version < first);
        tracing::warn!(
            "{}: our copy of {unreadable}, which no answering copy holds and a member of \
             its interval never applied, is unreadable; rolling back {} entries from {first}",
            self.pgid,
            forgotten.len()
        );
        self.roll_back_log(store, kept, &forgotten, first);
        true
    }

    /// Primary, GetLog: drops from the authoritative copy's log (`reply`, from
    /// `holder`) the entries that `roll_back_unreadable_history` would roll back were
    /// that copy the primary.
    ///
    /// A copy is not always primary where its own log is the newest, and its own
    /// rollback of such writes may never have reached its disk (seed 5531 of remaps,
    /// disk errors and expansion: the former primary rolled back a write nobody
    /// acknowledged, whose object a bit flip had left unreadable there, and its store
    /// failed on that very transaction; it came back with the write in its log, the
    /// new primary adopted that log, and no copy could ever serve the version it
    /// named, while both other members held the acknowledged version before it). So
    /// the copy names the objects of its newest entries that it cannot read
    /// (`PgLogRequest::check_after`), the same proof as for our own log shows those
    /// writes were never acknowledged, and the history we adopt ends before them.
    /// The copy's own entries past that point are then divergent: it is backfilled.
    fn drop_unreadable_tail(&self, holder: OsdId, reply: &mut PgLogReply) {
        if reply.unreadable.is_empty() {
            return;
        }
        let names: BTreeSet<&str> = reply.unreadable.iter().map(String::as_str).collect();
        let theirs = || reply.entries.iter();
        let unreadable = |name: &str| names.contains(name);
        let Some((unreadable, first)) =
            self.unacknowledged_unreadable_tail(holder, &reply.info, theirs, unreadable)
        else {
            return;
        };
        let before = reply.entries.len();
        reply.entries.retain(|entry| entry.version < first);
        tracing::warn!(
            "{}: {holder}'s copy of {unreadable}, which no other answering copy holds and \
             a member of its interval never applied, is unreadable; adopting its log \
             without the {} entries from {first}",
            self.pgid,
            before - reply.entries.len()
        );
        let info = &mut reply.info;
        info.last_update = reply.entries.last().map_or(info.log_tail, |e| e.version);
        // Its counts include the dropped writes (as for a rollback of our own log).
        let counts = self.stats_at(info.last_update);
        take_counts(info, counts);
    }

    /// Where the log of `holder` (its `info` and `entries`) may be rolled back: the
    /// version of a write only `holder` holds that its copy cannot read
    /// (`unreadable`), and the rollback point, when that history was provably never
    /// acknowledged; else `None`.
    ///
    /// The entries considered are those past every other answering copy's last
    /// update. A write is acknowledged only once every member of the acting set it
    /// was written in has applied it, and a member's `last_update` counts every entry
    /// it applied, so an answering member of that interval whose `last_update` is
    /// older never applied it, and the write was never acknowledged. Writes are
    /// acknowledged in log order, so nor was any entry after it. That holds within
    /// the interval the write was made in: an activation since (the holder's, or an
    /// entry taken from a later primary) could have carried the entries on to members
    /// that answered a client's resend of them.
    fn unacknowledged_unreadable_tail<'a, I: Iterator<Item = &'a LogEntry>>(
        &self,
        holder: OsdId,
        info: &PgInfo,
        entries: impl Fn() -> I,
        mut unreadable: impl FnMut(&str) -> bool,
    ) -> Option<(EVersion, EVersion)> {
        let others = self.newest_other_than(holder)?;
        let at = entries()
            .filter(|e| e.version > others && e.changes_object())
            .find(|e| unreadable(&e.oid))?
            .version;
        let first = rollback_point_others_can_serve(&entries, at, |v| v > others);
        let interval = (self.past_intervals.iter())
            .find(|i| i.first <= first.epoch && first.epoch <= i.last)?;
        let lacked_by_member = self.notifies.iter().any(|(osd, n)| {
            *osd != holder
                && n.exists
                && n.info.last_update < first
                && interval.acting.contains(osd)
        });
        let carried_on = info.last_epoch_started > interval.last
            || entries().any(|e| e.version >= first && e.version.epoch > interval.last);
        (lacked_by_member && !carried_on).then_some((at, first))
    }
}

/// Lowers a rollback point `first` of a log (its `entries`) until every object the
/// rollback forgets has a newest kept version that another copy holds. Rolling back
/// from `first` leaves those objects missing at their newest kept version, which the
/// rolled-back copy no longer has once a forgotten write overwrote it; a kept version
/// that is `unacknowledged` may be one no other copy ever applied, so nobody could
/// serve it (seed 23448: a rollback from 6'52 left two objects missing at versions of
/// 6'47..6'51 that only the primary had written, and the PG incomplete for good).
/// Entries from such a version on are as unacknowledged as `first`, so rolling them
/// back too loses nothing a client was told is done.
fn rollback_point_others_can_serve<'a, I: Iterator<Item = &'a LogEntry>>(
    entries: impl Fn() -> I,
    mut first: EVersion,
    unacknowledged: impl Fn(EVersion) -> bool,
) -> EVersion {
    loop {
        let forgotten: BTreeSet<&str> = entries()
            .filter(|e| e.version >= first && e.changes_object())
            .map(|e| e.oid.as_str())
            .collect();
        let unservable = entries()
            .filter(|e| e.version < first && e.changes_object() && unacknowledged(e.version))
            .find(|e| forgotten.contains(e.oid.as_str()))
            .map(|e| e.version);
        match unservable {
            Some(earlier) => first = earlier,
            None => return first,
        }
    }
}

/// Sets `info`'s object and byte counts to `counts` (`Pg::stats_at` of its last
/// update), or holds them in doubt (`PgInfo::stats_invalid`) when there are none.
/// Returns whether they are sure.
fn take_counts(info: &mut PgInfo, counts: Option<(u64, u64)>) -> bool {
    match counts {
        Some((object_count, data_bytes)) => {
            info.object_count = object_count;
            info.data_bytes = data_bytes;
            info.stats_invalid = false;
            true
        }
        None => {
            info.stats_invalid = true;
            false
        }
    }
}

/// The history a copy adopts: the authoritative info, log and dups; `wipe`: its own
/// copy is backfilled (every object it keeps is named missing until replaced).
struct Adopted<'a> {
    info: PgInfo,
    entries: Vec<LogEntry>,
    dups: &'a [LogDup],
    wipe: bool,
    /// The needs of missing objects known apart from the adopted log (see
    /// `Pg::needs_of`).
    needs: BTreeMap<String, EVersion>,
}

/// The newest object names touched by `entries` after `after`.
fn objects_after(entries: &[LogEntry], after: EVersion) -> BTreeSet<String> {
    entries
        .iter()
        .filter(|e| e.version > after && e.changes_object())
        .map(|e| e.oid.clone())
        .collect()
}

fn objects_after_log<'a>(
    entries: impl Iterator<Item = &'a LogEntry>,
    after: EVersion,
) -> BTreeSet<String> {
    entries
        .filter(|e| e.version > after && e.changes_object())
        .map(|e| e.oid.clone())
        .collect()
}

/// Whether a log (`info`, and its `entries`) continues the history that ends at
/// `best` (the newest copy of the latest interval that went active) with writes of
/// its own to an object that copy lacks and this log's copy `holds`. Such writes were
/// logged in an older interval that the later one never saw, and none was
/// acknowledged (the later interval's members would have logged it). Rolling them
/// back, as Ceph does, needs a copy of each object as it was before them, and there
/// may be none: a write acknowledged with one copy's data alone (with min_size 1,
/// while a full replica logged it only) lies under a later one there, and the latest
/// interval went active with the object unfound. Taking the later write for
/// divergent lost the acknowledged one (seed 28576 of remaps, space and snapshot
/// trims). So such a log is the authoritative one, and the later interval's copies
/// catch up on it, as Ceph's older `find_best_info` did for any log reaching past the
/// latest interval's. The log must hold that interval's last entry, so that no write
/// of the later history is missing from it; where the best copy holds every object
/// such writes touch, they are still rolled back.
fn log_continues<'a, I: Iterator<Item = &'a LogEntry>>(
    best: &PgNotify,
    info: &PgInfo,
    entries: impl Fn() -> I,
    holds: impl Fn(&str) -> bool,
) -> bool {
    let head = best.info.last_update;
    if info.last_update <= head || !(head == info.log_tail || entries().any(|e| e.version == head))
    {
        return false;
    }
    let lacks = |name: &str| best.missing.iter().any(|m| m == name || m == MISSING_ALL);
    entries()
        .filter(|e| e.version > head && e.changes_object())
        .any(|e| lacks(&e.oid) && holds(&e.oid))
}

/// How the primary (with `ours`) catches up with the authoritative `reply`.
fn catch_up_plan(
    ours: &BTreeSet<EVersion>,
    info: &PgInfo,
    last_update: EVersion,
    reply: &PgLogReply,
) -> CatchUp {
    let auth: BTreeSet<EVersion> = reply.entries.iter().map(|e| e.version).collect();
    if last_update == EVersion::ZERO && reply.info.log_tail == EVersion::ZERO {
        return CatchUp::Prefix {
            after: EVersion::ZERO,
        };
    }
    if auth.contains(&last_update) || last_update == reply.info.log_tail {
        return CatchUp::Prefix { after: last_update };
    }
    // Diverged: the newest of our entries the authoritative log also has.
    let common = ours
        .iter()
        .rev()
        .find(|v| auth.contains(v) || **v == reply.info.log_tail);
    match common {
        Some(&after) if after >= reply.info.log_tail => CatchUp::Prefix { after },
        _ if info.last_update == EVersion::ZERO && auth.is_empty() => CatchUp::Prefix {
            after: EVersion::ZERO,
        },
        _ => CatchUp::Backfill,
    }
}
