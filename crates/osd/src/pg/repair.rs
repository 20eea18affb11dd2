//! Repair: copies whose data fails its checksum are never served and never spread.
//!
//! - **Read repair on the primary.** A read that hits a corrupt local copy (or an
//!   object the primary knows it lacks) is not answered: the op waits, like a read
//!   behind a write, while the primary pulls the object from an acting replica that
//!   holds it (one not missing it and not known corrupt), then runs again. Writes to
//!   the object wait too, so a pulled copy never overwrites a newer local write, and
//!   a pulled copy older than the newest change the log records for the object (its
//!   source had yet to apply a write we applied) is refused: that source lacks the
//!   object, and the primary pulls from another.
//! - **Replica copies.** A replica asked to copy an object it cannot read names it in
//!   its answer's `corrupt` list instead of sending bytes; a replica whose scrub finds
//!   a corrupt copy reports it in a `PgPushReply` (once, then again after 1, 2, 4, …
//!   up to [`CORRUPT_REPORT_PASSES`] scrub passes while it stays corrupt). The primary
//!   pushes its good copy.
//! - **An unacknowledged write with no readable copy.** A primary whose copy of a
//!   write still in flight (never acknowledged) rots rolls that write back at the
//!   next interval (`Pg::roll_back_unreadable_writes`), so the object's acknowledged
//!   version is recovered instead of an unreadable one waited for.
//! - **No good copy.** When no acting member can supply the object, ops on it fail
//!   with `OpError::Io` (EIO) naming the object: never wrong data.
//!
//! A scrub ([`Pg::scrub`]) reads and verifies every object's data, so corruption that
//! no client reads is found too. Everything here is in memory and per interval: a new
//! interval drops the repairs in flight and the ops run again once the PG is active
//! (corruption is found again on the next read or scrub).

use super::snap_trim::SNAP_TRIM_CLIENT;
use super::{peer_output, Pg, Phase};
use crate::exec::OBJECT_INFO_XATTR;
use crate::{ClientRef, Output};
use carmine_proto::{
    LogEntry, LogOp, Msg, ObjectCopy, ObjectInfo, OpError, OpOutput, OsdOp, PgPull, PgPush,
    PgPushReply,
};
use carmine_store::{ObjectStore, StoreError};
use carmine_types::encoding::Decode;
use carmine_types::limits::LIST_ENTRIES_MAX;
use carmine_types::{EVersion, ObjectId, OsdId, SnapId};
use std::collections::BTreeSet;

/// Objects [`Pg::retry_unfound`] tries again per stray announcement.
pub(super) const UNFOUND_RETRY_MAX: usize = 64;
/// The most scrub passes a replica lets go by before it reports a copy that is still
/// corrupt to its primary again.
pub const CORRUPT_REPORT_PASSES: u32 = 32;

/// When a replica reports a copy that stays corrupt again: after `gap` more scrub
/// passes, the gap doubling up to [`CORRUPT_REPORT_PASSES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReportBackoff {
    passes: u32,
    gap: u32,
}

impl Default for ReportBackoff {
    fn default() -> Self {
        Self { passes: 0, gap: 1 }
    }
}

impl ReportBackoff {
    /// One more pass found the copy corrupt: whether to report it now.
    fn pass(&mut self) -> bool {
        self.passes += 1;
        if self.passes < self.gap {
            return false;
        }
        self.passes = 0;
        self.gap = (self.gap * 2).min(CORRUPT_REPORT_PASSES);
        true
    }
}

/// Corrupt copies found and repaired by one PG, summed into the shard's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RepairCounters {
    /// Copies found unreadable: the primary's own, or a replica's (reported by the
    /// replica or found when it was asked for a copy).
    pub corrupt_copies_found: u64,
    /// Copies replaced by a good one: the primary's own by a pull, a replica's by a
    /// push it acknowledged.
    pub copies_repaired: u64,
}

/// The pull repairing the primary's copy of an object: from `source`, and of exactly
/// `exact` when the source was not expected to hold the current copy (see
/// [`Pg::start_repair`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RepairPull {
    pub source: OsdId,
    pub exact: Option<EVersion>,
}

/// Whether an op on an object may run on the primary's copy now.
pub(super) enum Gate {
    Ready,
    /// A repair is in flight: the op waits for it.
    Wait,
    /// No acting member has a readable copy.
    Unfound,
}

/// A client's write (not a removal, nor a snapshot trim, which may remove a whiteout
/// head while logging a change).
/// The newest of `entries` that changed object `name`.
pub(super) fn newest_change_among<'a>(
    entries: impl DoubleEndedIterator<Item = &'a LogEntry>,
    name: &str,
) -> Option<&'a LogEntry> {
    (entries.rev()).find(|entry| entry.oid == name && entry.changes_object())
}

/// The version a copy's object info names; `None` when it has none or it is
/// unreadable (such a copy cannot be dated).
pub(super) fn copy_version(state: &carmine_proto::ObjectState) -> Option<EVersion> {
    let raw = state.xattrs.get(OBJECT_INFO_XATTR)?;
    ObjectInfo::from_shared(raw.clone())
        .ok()
        .map(|info| info.version)
}

pub(super) fn is_removal(entry: &LogEntry) -> bool {
    matches!(entry.op, LogOp::Delete)
}

pub(super) fn is_plain_write(entry: &LogEntry) -> bool {
    matches!(entry.op, LogOp::Modify) && entry.reqid.client != SNAP_TRIM_CLIENT
}

/// The error of an op on an object no acting member can read.
pub(super) fn unfound_error(name: &str) -> OpError {
    OpError::Io(format!(
        "object {name} has no readable copy on any acting OSD (every copy is corrupt or \
         missing); it stays unavailable until an OSD with a good copy returns"
    ))
}

impl Pg {
    /// Whether our stored data of `name` fails its checksum: its head's, or a
    /// snapshot clone's (repair replaces an object with all its clones, so a corrupt
    /// clone is repaired as its object is).
    pub(super) fn copy_is_corrupt(&self, store: &dyn ObjectStore, name: &str) -> bool {
        let clones = crate::snaps::stored_clones(store, self.coll, name);
        self.any_corrupt(store, &ObjectId::head(name), &clones)
    }

    /// Whether the data of `head` or of one of `clones` fails its checksum.
    fn any_corrupt(&self, store: &dyn ObjectStore, head: &ObjectId, clones: &[ObjectId]) -> bool {
        std::iter::once(head)
            .chain(clones)
            .any(|oid| matches!(store.verify(self.coll, oid), Err(StoreError::Corrupt(_))))
    }

    /// Primary, before an op on `name` runs on our copy.
    pub(super) fn repair_gate(
        &mut self,
        store: &dyn ObjectStore,
        name: &str,
        out: &mut Vec<Output>,
    ) -> Gate {
        if self.repairs.contains_key(name) {
            return Gate::Wait;
        }
        if !self.missing.contains(name) {
            return Gate::Ready;
        }
        if self.start_repair(store, name, None, out) {
            Gate::Wait
        } else {
            Gate::Unfound
        }
    }

    /// Primary: answers a read from our copy, or, if our copy is corrupt, holds the
    /// read and repairs the copy first.
    pub(super) fn serve_read(
        &mut self,
        store: &dyn ObjectStore,
        client: ClientRef,
        op: OsdOp,
        out: &mut Vec<Output>,
    ) {
        let reply = self.read(store, &op);
        let (failed, absent) = match &reply {
            Msg::OsdOpReply(r) => (
                matches!(r.result, Err(OpError::Io(_))),
                r.result == Err(OpError::NotFound),
            ),
            _ => (false, false),
        };
        let broken = (failed && self.copy_is_corrupt(store, &op.oid))
            || (absent && op.snapid == SnapId::HEAD && self.copy_is_lost(store, &op.oid));
        if !broken {
            out.push(Output::Client(client, reply));
            return;
        }
        self.note_local_corrupt(&op.oid);
        if self.start_repair(store, &op.oid, None, out) {
            self.block_read(client, op, out);
        } else {
            out.push(self.reply(client, &op, Err(unfound_error(&op.oid))));
        }
    }

    /// Primary: our store has no `name` although the newest change our log records
    /// for it was a client's write (so every copy should hold it): our copy was lost
    /// behind the PG's back. Answering `NotFound` would deny an acknowledged write; it
    /// is repaired from a replica like a corrupt copy. (A lost copy whose last change
    /// the log no longer records is found by the scrub comparisons instead.)
    fn copy_is_lost(&self, store: &dyn ObjectStore, name: &str) -> bool {
        self.newest_change(name).is_some_and(is_plain_write)
            && !store.exists(self.coll, &ObjectId::head(name))
    }

    /// The newest entry of our log that changed object `name`.
    pub(super) fn newest_change(&self, name: &str) -> Option<&LogEntry> {
        newest_change_among(self.log.entries(), name)
    }

    /// Whether the newest change our log records for `name` removed it.
    pub(super) fn log_removed(&self, name: &str) -> bool {
        self.newest_change(name).is_some_and(is_removal)
    }

    /// Whether a log (`entries`) shows object `name` gone for good, head and clones:
    /// its newest change removed it, and the pool never had a snapshot. A removed
    /// head keeps its clones (under a whiteout) until the snap trimmer removes them,
    /// and a removal's log entry, the client's or the trimmer's, does not say whether
    /// any remain. A copy that lacks such an object is then no proof it is gone:
    /// taking it for absent dropped a clone that held a live snapshot's data (seed
    /// 1132 of expansion, remaps, space and snapshot trims: a new OSD backfilled from
    /// a copy that lacked an object whose head a client had deleted).
    pub(super) fn removed_for_good<'a>(
        &self,
        entries: impl DoubleEndedIterator<Item = &'a LogEntry>,
        name: &str,
    ) -> bool {
        self.pool.snap_seq == 0 && newest_change_among(entries, name).is_some_and(is_removal)
    }

    /// Primary: our copy of `name` fails its checksum (counted once until repaired).
    pub(super) fn note_local_corrupt(&mut self, name: &str) {
        if self.local_corrupt.insert(name.to_string()) {
            self.repair_counters.corrupt_copies_found += 1;
            tracing::warn!("{}: our copy of {name} is corrupt; repairing it", self.pgid);
        }
    }

    /// Primary: pulls `name` from an acting replica that should hold a good copy: one
    /// not missing it (`lacking` names a replica known to lack it beyond what
    /// `peer_missing` says), not known corrupt, and not owing us a write to it. Failing
    /// that, when we know the exact version we need, from any replica not yet found
    /// unable to supply it, asking for that version: a copy that lists the object as
    /// missing (one waiting to be backfilled, say) may still hold exactly it, and be
    /// the last intact one (Ceph's `search_for_missing` looks for the missing version
    /// on every peer too). Failing those, from a stray that answered this interval's
    /// peering with a log that reaches that version and does not list the object as
    /// missing: a copy that left the acting set may be the last one holding it (a
    /// primary whose store had no room for its pull, say, while the copy it pulled from
    /// was remapped away). Ceph's recovery pulls from any peer its missing_loc names,
    /// strays included. Returns `false` when none can (the object is unfound for now).
    pub(super) fn start_repair(
        &mut self,
        store: &dyn ObjectStore,
        name: &str,
        lacking: Option<OsdId>,
        out: &mut Vec<Output>,
    ) -> bool {
        if self.repairs.contains_key(name) {
            return true;
        }
        if self.phase != Phase::Active {
            return false;
        }
        let Some(pull) = self.repair_source_for(store, name, lacking) else {
            self.note_unfound(name);
            return false;
        };
        out.push(peer_output(pull.source, self.repair_pull(name, pull.exact)));
        self.repairs.insert(name.to_string(), pull);
        self.unfound.remove(name);
        true
    }

    /// The pull [`Pg::start_repair`] would make for `name`, if any copy can supply it.
    fn repair_source_for(
        &self,
        store: &dyn ObjectStore,
        name: &str,
        lacking: Option<OsdId>,
    ) -> Option<RepairPull> {
        let replicas = self.replicas();
        let usable = |replica: &OsdId| {
            let copy = (*replica, name.to_string());
            !self.replica_corrupt.contains(&copy) && !self.lacks_needed.contains(&copy)
        };
        let current = |replica: &OsdId| {
            lacking != Some(*replica)
                && !self
                    .peer_missing
                    .get(replica)
                    .is_some_and(|missing| missing.contains(name))
                && !self.owes_write_ack(*replica, name)
        };
        match replicas.iter().find(|r| usable(r) && current(r)) {
            Some(&source) => Some(RepairPull {
                source,
                exact: None,
            }),
            None => self.version_needed(store, name).and_then(|version| {
                (replicas.iter().copied().find(|r| usable(r)))
                    .or_else(|| self.stray_source(name, version))
                    .map(|source| RepairPull {
                        source,
                        exact: Some(version),
                    })
            }),
        }
    }

    /// Primary: no reachable copy can supply `name` now (logged once per interval).
    fn note_unfound(&mut self, name: &str) {
        if self.unfound.insert(name.to_string()) {
            tracing::error!(
                "{}: no acting replica or stray has a readable copy of {name}; it is unfound",
                self.pgid
            );
        }
    }

    /// Primary, active: the objects of the PG's history that no reachable copy could
    /// supply at the last try (Ceph's unfound objects): our copy lacks them or is
    /// unreadable, and no pull for them is under way. Ops on them fail with `Io`
    /// until an OSD holding them announces itself (see [`Pg::retry_unfound`]).
    pub(super) fn unfound_objects(&self) -> impl Iterator<Item = &String> + '_ {
        (self.unfound.iter()).filter(|name| {
            (self.missing.contains(*name) || self.local_corrupt.contains(*name))
                && !self.repairs.contains_key(*name)
        })
    }

    /// Primary: up to `max_entries` unfound objects after `after`, each with the
    /// version the history needs (`pg PGID list_unfound`).
    pub(super) fn list_unfound(
        &self,
        store: &dyn ObjectStore,
        after: Option<&str>,
        max_entries: u32,
    ) -> OpOutput {
        let max = (max_entries as usize).clamp(1, LIST_ENTRIES_MAX);
        let mut objects: Vec<(String, EVersion)> = (self.unfound_objects())
            .filter(|name| after.is_none_or(|after| name.as_str() > after))
            .take(max + 1)
            .map(|name| {
                let need = self.version_needed(store, name);
                (name.clone(), need.unwrap_or(EVersion::ZERO))
            })
            .collect();
        let more = objects.len() > max;
        objects.truncate(max);
        let next = if more {
            objects.last().map(|(name, _)| name.clone())
        } else {
            None
        };
        OpOutput::Unfound { objects, next }
    }

    /// A stray of this interval's peering whose log reaches `version` and does not
    /// list `name` as missing, not yet found without it.
    fn stray_source(&self, name: &str, version: EVersion) -> Option<OsdId> {
        (self.notifies.iter().chain(&self.late_stray_notifies))
            .filter(|(osd, _)| **osd != self.whoami && !self.acting.contains(osd))
            .filter(|(osd, _)| !self.lacks_needed.contains(&(**osd, name.to_string())))
            .find(|(_, notify)| {
                notify.exists
                    && notify.info.last_update >= version
                    && !notify.missing.iter().any(|missing| missing == name)
            })
            .map(|(osd, _)| *osd)
    }

    /// Primary, active: a stray announced its copy after peering. The objects this copy
    /// lacks with no repair under way (unfound, perhaps) may be there: each is tried
    /// again, at most [`UNFOUND_RETRY_MAX`] per announcement (ops and recovery reach
    /// the others).
    pub(super) fn retry_unfound(&mut self, store: &dyn ObjectStore, out: &mut Vec<Output>) {
        let names: Vec<String> = (self.missing.iter())
            .filter(|name| name.as_str() != crate::pglog::MISSING_ALL)
            .filter(|name| !self.repairs.contains_key(*name))
            .take(UNFOUND_RETRY_MAX)
            .cloned()
            .collect();
        for name in names {
            self.start_repair(store, &name, None, out);
        }
    }

    /// Primary: `source`'s copy of `name` cannot repair ours: it is unreadable
    /// (`of_another_version` false), or of another version than the one we asked for
    /// exactly. A replica gets ours once ours is good, counted as a bad copy found
    /// only when it is one; no copy is asked again this interval for what it lacks.
    fn note_source_lacks(&mut self, source: OsdId, name: String, of_another_version: bool) {
        let replica = self.replicas().contains(&source);
        if replica && !of_another_version {
            self.note_replica_corrupt(source, name);
            return;
        }
        if replica {
            // Not the version the history needs: it lacks the object.
            (self.peer_missing.entry(source).or_default()).insert(name.clone());
        }
        self.lacks_needed.insert((source, name));
    }

    /// The pull that repairs our copy of `name` (of exactly `exact`, if named).
    pub(super) fn repair_pull(&self, name: &str, exact: Option<EVersion>) -> Msg {
        Msg::PgPull(PgPull {
            pgid: self.pgid,
            interval: self.interval_start,
            map_epoch: self.map_epoch,
            oids: vec![name.to_string()],
            all: false,
            exact: exact
                .map(|version| (name.to_string(), version))
                .into_iter()
                .collect(),
        })
    }

    fn repair_source(&self, name: &str) -> Option<OsdId> {
        self.repairs.get(name).map(|pull| pull.source)
    }

    /// The exact version of `name` the PG's history holds, when we know it: that of
    /// the newest write our log records for it, or, when the log no longer mentions a
    /// change to it, our own copy's (its object info is apart from its data, so a copy
    /// whose data fails its checksum still dates it), unless our copy is one we know
    /// we lack (it may hold a write the history rolled back). A removal's or a snapshot
    /// trim's version too: neither dates the head's object info, and a source whose
    /// own log ends by that entry vouches for its copy instead (`Pg::exact_copy`).
    /// Without them, a primary whose pull of such an object found no room, and whose
    /// acting members then lacked it, never asked the strays that held it (seeds 95
    /// and 5332 of remaps, space and snapshot trims). `None` when the log no longer
    /// names the object and our object info is gone too.
    pub(super) fn version_needed(&self, store: &dyn ObjectStore, name: &str) -> Option<EVersion> {
        if let Some(entry) = self.newest_change(name) {
            return Some(entry.version);
        }
        if self.missing.contains(name) || self.missing.contains(crate::pglog::MISSING_ALL) {
            return self.missing_need.get(name).copied();
        }
        let raw = store
            .getxattr(self.coll, &ObjectId::head(name), OBJECT_INFO_XATTR)
            .ok()?;
        ObjectInfo::from_shared(raw).ok().map(|info| info.version)
    }

    /// Primary, active: a replica answered a repair pull with copies, or with the
    /// names it could not read either.
    pub(super) fn receive_repair(
        &mut self,
        store: &mut dyn ObjectStore,
        from: OsdId,
        push: PgPush,
        out: &mut Vec<Output>,
    ) {
        if self.phase != Phase::Active {
            return;
        }
        let (copies, _stale): (Vec<_>, Vec<_>) = push
            .objects
            .into_iter()
            .partition(|copy| self.repair_source(&copy.oid) == Some(from));
        // A copy older than the newest change our log records for it (the source had
        // not applied a write we applied: its RepOp is still on its way, or was lost
        // with a restart inside the interval) would silently undo that write. That
        // source lacks the object: it gets ours later, and we pull from another.
        let (copies, behind): (Vec<_>, Vec<_>) = copies
            .into_iter()
            .partition(|copy| self.copy_is_current(copy));
        let mut finished = Vec::new();
        for copy in behind {
            tracing::warn!(
                "{}: {from}'s copy of {} predates our log; pulling it elsewhere",
                self.pgid,
                copy.oid
            );
            self.repairs.remove(&copy.oid);
            if self.replicas().contains(&from) {
                (self.peer_missing.entry(from).or_default()).insert(copy.oid.clone());
            } else {
                self.lacks_needed.insert((from, copy.oid.clone()));
            }
            if !self.start_repair(&*store, &copy.oid, None, out) {
                // No other source: the ops waiting on it run again and fail (EIO).
                finished.push(copy.oid);
            }
        }
        for name in &finished {
            self.local_corrupt.remove(name);
        }
        let names: Vec<String> = copies.iter().map(|c| c.oid.clone()).collect();
        if !copies.is_empty() {
            match self.apply_copies(store, copies) {
                Ok(()) => {
                    for name in &names {
                        self.repairs.remove(name);
                        self.local_corrupt.remove(name);
                    }
                    self.repair_counters.copies_repaired += names.len() as u64;
                    finished.extend(names);
                }
                Err(error) => {
                    // Our copies stay as they were, and so do the repairs and the ops
                    // held on them: the recovery tick pulls again after a while
                    // (`recovery_tick`), when the store may have room. Releasing the
                    // ops made each start the same repair again at once: a pull per op
                    // for as long as the store stayed full.
                    tracing::error!("{}: cannot apply repaired copies: {error}", self.pgid);
                }
            }
        }
        for name in push.corrupt {
            if self.repair_source(&name) == Some(from) {
                // That copy is bad too, or not the version asked for: it gets ours
                // once ours is good.
                self.repairs.remove(&name);
                let of_another_version = push.lacking.contains(&name);
                self.note_source_lacks(from, name.clone(), of_another_version);
                // The ops waiting on the object run again and try another source; if
                // there is none, it is unfound now, ops or not.
                if self.repair_source_for(&*store, &name, None).is_none() {
                    self.note_unfound(&name);
                }
                finished.push(name);
            }
        }
        for name in finished {
            self.release_reads(store, &name, out);
        }
        self.schedule_recovery(store, out);
    }

    /// Primary: whether `replica` has yet to acknowledge a `RepOp` of this interval
    /// that changed `name`: its copy may predate that write (a pull overtakes nothing
    /// on the ordered session, but the `RepOp` may have been lost with a restart).
    /// Writes carried over from an earlier interval wait on every replica until it
    /// has our copy by push; peering already told which replicas lack the object.
    fn owes_write_ack(&self, replica: OsdId, name: &str) -> bool {
        self.in_flight.iter().any(|write| {
            write.is_write
                && write.oid == name
                && write.version.epoch >= self.interval_start
                && write.waiting_on.contains(&replica)
        })
    }

    /// Primary: whether a pulled copy holds the newest change to its object that our
    /// log records (a removal: no object, or a whiteout at least that new). A copy
    /// whose object info is absent or unreadable, or one of an object the log no
    /// longer mentions, cannot be dated and is taken as it is.
    fn copy_is_current(&self, copy: &ObjectCopy) -> bool {
        let Some(newest) = self.newest_change(&copy.oid) else {
            return true;
        };
        let Some(state) = &copy.state else {
            return matches!(newest.op, LogOp::Delete);
        };
        // A snapshot trim changes the head's snapshot set but not its object info.
        let required = if newest.reqid.client == SNAP_TRIM_CLIENT {
            newest.prior_version
        } else {
            newest.version
        };
        copy_version(state).is_none_or(|version| version >= required)
    }

    /// Primary: `replica`'s copy of `name` is unreadable; push it ours.
    pub(super) fn note_replica_corrupt(&mut self, replica: OsdId, name: String) {
        if !self.replicas().contains(&replica) {
            return;
        }
        if self.replica_corrupt.insert((replica, name.clone())) {
            self.repair_counters.corrupt_copies_found += 1;
            tracing::warn!(
                "{}: {replica}'s copy of {name} is corrupt; pushing it ours",
                self.pgid
            );
        }
        self.peer_missing.entry(replica).or_default().insert(name);
    }

    /// Primary: `replica`'s copy of `name` differs from ours (a scrub comparison);
    /// push it ours, counted as a bad copy found and, once pushed, repaired.
    pub(super) fn note_replica_inconsistent(&mut self, replica: OsdId, name: String) {
        if self.replica_corrupt.insert((replica, name.clone())) {
            self.repair_counters.corrupt_copies_found += 1;
            tracing::warn!(
                "{}: {replica}'s copy of {name} differs from ours; pushing it ours",
                self.pgid
            );
        }
        self.peer_missing.entry(replica).or_default().insert(name);
    }

    /// Primary: our copy of `name` is gone while `source` holds one and our log does
    /// not say it was removed: pull it from there, as a repair (ops on it wait).
    pub(super) fn repair_lost_copy(&mut self, source: OsdId, name: &str, out: &mut Vec<Output>) {
        if self.repairs.contains_key(name) || self.phase != Phase::Active {
            return;
        }
        tracing::warn!(
            "{}: our copy of {name} is gone but {source} holds one; pulling it",
            self.pgid
        );
        self.note_local_corrupt(name);
        out.push(peer_output(source, self.repair_pull(name, None)));
        self.repairs.insert(
            name.to_string(),
            RepairPull {
                source,
                exact: None,
            },
        );
    }

    /// Primary: a replica acknowledged pushes (`oids`) and may report corrupt copies.
    pub(super) fn receive_push_reply_repairs(&mut self, from: OsdId, reply: &PgPushReply) {
        for name in &reply.oids {
            if self.replica_corrupt.remove(&(from, name.clone())) {
                self.repair_counters.copies_repaired += 1;
            }
        }
        if self.phase != Phase::Active {
            return;
        }
        for name in &reply.corrupt {
            let pushing = self
                .pushing
                .get(&from)
                .is_some_and(|names| names.contains_key(name));
            // A push already on its way replaces that copy.
            if !pushing {
                self.note_replica_corrupt(from, name.clone());
            }
        }
    }

    /// Reads and verifies the data of up to `objects_max` objects after `after`, in
    /// name order (a deep scrub step), stopping early once the objects verified hold
    /// `bytes_max` bytes (at least one object is verified, whatever its size). The
    /// primary repairs its corrupt copies (and fetches objects it knows it lacks); a
    /// replica reports its corrupt copies to the primary. Returns how many objects it
    /// went through, the last one when there may be more (`None` once the PG is done),
    /// and the bytes it verified.
    pub fn scrub(
        &mut self,
        store: &dyn ObjectStore,
        after: Option<&str>,
        objects_max: usize,
        bytes_max: u64,
        out: &mut Vec<Output>,
    ) -> (usize, Option<String>, u64) {
        let objects_max = objects_max.max(1);
        let cursor = after.map(ObjectId::head);
        let page = match store.list_objects(self.coll, cursor.as_ref(), objects_max) {
            Ok(page) => page,
            Err(error) => {
                tracing::error!("{}: scrub cannot list objects: {error}", self.pgid);
                return (0, None, 0);
            }
        };
        let page_full = page.len() == objects_max;
        let mut walked = 0;
        let mut bytes = 0u64;
        let mut next = None;
        let (mut corrupt, mut readable) = (Vec::new(), Vec::new());
        for oid in page {
            walked += 1;
            // An object is verified whole, its clones with its head, at the first of
            // its entries the listing shows: clones sort before their head, and the
            // next step lists after the head, so a step that ended on a clone used to
            // skip its head, and a corrupt clone there was never found (the
            // simulator's snapshot workload, seed 1439).
            let seen = next.as_deref() == Some(oid.name.as_str());
            let checkable = !oid.name.is_empty()
                && !seen
                && !self.missing.contains(&oid.name)
                && !self.repairs.contains_key(&oid.name);
            if !checkable {
                next = Some(oid.name);
                continue;
            }
            // Verifying may read the whole object and its clones (LogStore does): a
            // step of large objects (4 MiB image objects) holds the shard as long as
            // their bytes take.
            let head = ObjectId::head(oid.name.clone());
            let clones = crate::snaps::stored_clones(store, self.coll, &oid.name);
            let size: u64 = std::iter::once(&head)
                .chain(&clones)
                .map(|oid| store.stat(self.coll, oid).map_or(0, |stat| stat.size_bytes))
                .sum();
            bytes += size;
            if self.any_corrupt(store, &head, &clones) {
                corrupt.push(oid.name.clone());
            } else {
                readable.push(oid.name.clone());
            }
            next = Some(oid.name);
            if bytes >= bytes_max {
                break;
            }
        }
        // More may follow when the listing was cut short, by count or by bytes.
        let next = next.filter(|_| page_full || bytes >= bytes_max);
        if self.is_primary() {
            self.repair_after_scrub(store, corrupt, out);
            self.start_scrub_compare(store, after, next.as_deref(), out);
            return (walked, next, bytes);
        }
        let corrupt = self.corrupt_to_report(corrupt, &readable);
        if let Some(primary) = self.primary.filter(|_| !corrupt.is_empty()) {
            let report = Msg::PgPushReply(PgPushReply {
                pgid: self.pgid,
                interval: self.interval_start,
                map_epoch: self.map_epoch,
                oids: Vec::new(),
                corrupt,
                refused: Vec::new(),
                refused_for_space: false,
            });
            out.push(peer_output(primary, report));
        }
        (walked, next, bytes)
    }

    /// Replica: of the corrupt copies a scrub step found, those to report to the
    /// primary now: one not reported yet in this interval, or one still corrupt when
    /// its backoff has passed: the gap between reports doubles from one scrub pass to
    /// [`CORRUPT_REPORT_PASSES`]. The primary keeps a reported copy among the objects
    /// to push until a push replaces it, so reporting it on every pass (a pass over a
    /// small PG takes a tick) only floods a primary that has no good copy to push
    /// either (seed 6236: a `PgPushReply` every 300 ms, forever). It is reported again
    /// all the same: a primary that was not active yet ignored the report, and a
    /// partition or session reset may have lost it, and a fixed gap of 32 passes let
    /// a copy stay corrupt for seconds after such a loss (the snapshot workload's seed
    /// 1439). A new interval forgets the reports (its primary has not heard them), and
    /// so does a copy found readable again or replaced by a push (`apply_copies`).
    fn corrupt_to_report(&mut self, corrupt: Vec<String>, readable: &[String]) -> Vec<String> {
        let (interval, reported) = &mut self.corrupt_reported;
        if *interval != self.interval_start {
            *interval = self.interval_start;
            reported.clear();
        }
        for name in readable {
            reported.remove(name);
        }
        corrupt
            .into_iter()
            .filter(|name| match reported.get_mut(name) {
                None => {
                    reported.insert(name.clone(), ReportBackoff::default());
                    true
                }
                Some(backoff) => backoff.pass(),
            })
            .collect()
    }

    fn repair_after_scrub(
        &mut self,
        store: &dyn ObjectStore,
        corrupt: Vec<String>,
        out: &mut Vec<Output>,
    ) {
        if !self.is_active() {
            return;
        }
        for name in &corrupt {
            self.note_local_corrupt(name);
        }
        let lacking: BTreeSet<String> = self
            .missing
            .iter()
            .filter(|name| !self.repairs.contains_key(*name))
            .cloned()
            .collect();
        for name in corrupt.into_iter().chain(lacking) {
            self.start_repair(store, &name, None, out);
        }
    }
}
