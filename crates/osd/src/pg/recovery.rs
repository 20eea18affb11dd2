//! Recovery: copying whole objects between the copies of a PG.
//!
//! A primary that lacks objects after adopting the authoritative log **pulls** them
//! (or, when its copy is not covered by the log, every object) before it activates.
//! Once active it **pushes** each replica's missing objects in the background, at most
//! [`PUSHES_IN_FLIGHT_MAX`] per replica, and pushes an object at once when a client
//! write reaches it first: the push goes out before the write's `RepOp` on the same
//! ordered session, so the replica applies the write on top of a complete object.
//! A push carries the object's whole state (data, xattrs with the object info, omap),
//! or its absence, and replaces the receiver's copy in one transaction.

use super::repair::{copy_version, is_removal};
use super::{peer_output, Pg, Phase};
use crate::exec::OBJECT_INFO_XATTR;
use crate::pglog::missing_key;
use crate::Output;
use carmine_proto::{Msg, ObjectCopy, ObjectInfo, ObjectState, PgPull, PgPush, PgPushReply};
use carmine_store::{CollectionId, ObjectStore, Transaction};
use carmine_types::encoding::Decode;
use carmine_types::{EVersion, ObjectId, OsdId};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

/// Pushes a primary keeps in flight to one replica (recovery is throttled so client
/// IO keeps most of the shard).
pub const PUSHES_IN_FLIGHT_MAX: usize = 4;
/// Objects per push message when answering a pull.
pub const OBJECTS_PER_PUSH_MAX: usize = 16;

/// The repairs and pushes an active primary waits on, and since when. Like a lost
/// peering request (see `peering.rs`), a pull or push lost with a session reset, or
/// with a peer that restarted within the interval, is never answered; one that has
/// waited [`super::peering::PEERING_RESEND_INTERVAL`] with nothing answered in
/// between is sent again. Both are idempotent: a copy that arrives twice replaces the
/// same object, and answers to a request no longer waited on are ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecoveryWatch {
    interval: carmine_types::Epoch,
    repairs: BTreeMap<String, super::repair::RepairPull>,
    pushing: BTreeMap<OsdId, super::Pushing>,
    since: Instant,
}

impl Pg {
    /// Primary, each tick: resends the repairs and pushes that have waited too long
    /// with no answer (see [`RecoveryWatch`]).
    pub(super) fn recovery_tick(
        &mut self,
        now: Instant,
        store: &mut dyn ObjectStore,
        out: &mut Vec<Output>,
    ) {
        if self.is_primary() && self.phase == Phase::Active {
            self.repair_what_we_lack(store, out);
        }
        let waiting = !self.repairs.is_empty() || self.pushing.values().any(|p| !p.is_empty());
        if !self.is_primary() || self.phase != Phase::Active || !waiting {
            self.recovery_watch = None;
            return;
        }
        match &mut self.recovery_watch {
            Some(watch)
                if watch.interval == self.interval_start
                    && watch.repairs == self.repairs
                    && watch.pushing == self.pushing =>
            {
                let waited = now.saturating_duration_since(watch.since);
                if waited < super::peering::PEERING_RESEND_INTERVAL {
                    return;
                }
                watch.since = now;
            }
            _ => {
                self.recovery_watch = Some(RecoveryWatch {
                    interval: self.interval_start,
                    repairs: self.repairs.clone(),
                    pushing: self.pushing.clone(),
                    since: now,
                });
                return;
            }
        }
        self.resend_recovery(store, out);
    }

    /// Primary, active, each tick: objects our copy lacks or cannot read, with no
    /// repair under way and not known unfound, are pulled from the next copy that may
    /// hold them (a source asked before answered that it lacks them, and the copies
    /// that do hold them may be strays alone). Without this they waited for an op or a
    /// stray's announcement, the PG recovering and the object on one copy meanwhile;
    /// Ceph's recovery likewise goes on to the next location. Not while our store is
    /// full: the copy would be refused (a repair then waits for the resend above).
    /// At most [`super::repair::UNFOUND_RETRY_MAX`] a tick.
    fn repair_what_we_lack(&mut self, store: &dyn ObjectStore, out: &mut Vec<Output>) {
        let lacking: Vec<String> = (self.missing.iter().chain(&self.local_corrupt))
            .filter(|name| name.as_str() != crate::pglog::MISSING_ALL)
            .filter(|name| !self.repairs.contains_key(*name) && !self.unfound.contains(*name))
            .take(super::repair::UNFOUND_RETRY_MAX)
            .cloned()
            .collect();
        // The usual PG lacks nothing: the store's usage is read only when it does.
        if lacking.is_empty() || self.is_full(store) {
            return;
        }
        for name in lacking {
            self.start_repair(store, &name, None, out);
        }
    }

    fn resend_recovery(&mut self, store: &mut dyn ObjectStore, out: &mut Vec<Output>) {
        tracing::info!(
            "{}: {} repairs and {} pushes unanswered; sending them again",
            self.pgid,
            self.repairs.len(),
            self.pushes_in_flight()
        );
        for (name, pull) in self.repairs.clone() {
            out.push(peer_output(
                pull.source,
                self.repair_pull(&name, pull.exact),
            ));
        }
        for (replica, names) in self.pushing.clone() {
            for name in names.into_keys() {
                // Our copy as it is now: it holds every write whose RepOp went out
                // before, so the replica ends where those writes leave it.
                match self.object_copy(store, &name) {
                    Ok(copy) => {
                        let push = self.one_object_push(copy);
                        out.push(peer_output(replica, push));
                    }
                    Err(_) => {
                        // Unreadable here since: back in the queue, which repairs it.
                        if let Some(pushing) = self.pushing.get_mut(&replica) {
                            pushing.remove(&name);
                        }
                        self.peer_missing.entry(replica).or_default().insert(name);
                    }
                }
            }
        }
        self.schedule_recovery(store, out);
    }

    /// Counts `objects` as sent in a push, for the shard to charge recovery's cost.
    fn note_sent(&mut self, objects: &[ObjectCopy]) {
        let states = objects
            .iter()
            .flat_map(|copy| copy.state.iter().chain(copy.clones.iter().map(|(_, s)| s)));
        let bytes: usize = states.map(|state| state.data.len()).sum();
        self.recovery_sent.0 += objects.len() as u64;
        self.recovery_sent.1 += bytes as u64;
    }

    /// Reads one object's whole state from our store, its snapshot clones included;
    /// `Err` when our copy cannot be trusted: its data (or a clone's) fails its checksum
    /// or cannot be read, or we know we lack the object. Never an empty or partial copy
    /// in its place.
    pub(super) fn object_copy(
        &self,
        store: &dyn ObjectStore,
        name: &str,
    ) -> Result<ObjectCopy, String> {
        if self.lacks(name) {
            return Err(format!("{name} is missing here"));
        }
        read_copy(store, self.coll, name)
    }

    /// Whether this copy knows it lacks the current `name` (named missing, or the
    /// whole copy is, until a pull of everything completes).
    pub(super) fn lacks(&self, name: &str) -> bool {
        self.missing.contains(name) || self.missing.contains(crate::pglog::MISSING_ALL)
    }

    /// Our copy of `name` for a primary that needs exactly `version` of it, and only
    /// if it is that version: even a copy this one lists as missing (say, waiting to be
    /// backfilled) then holds the write the primary needs, and may be the only intact
    /// copy of it left. A removal's or a snapshot trim's version is met by our copy as
    /// it is where our log ends by that entry.
    fn exact_copy(
        &self,
        store: &dyn ObjectStore,
        name: &str,
        version: EVersion,
    ) -> Result<ObjectCopy, CopyMiss> {
        let ours = store
            .getxattr(self.coll, &ObjectId::head(name), OBJECT_INFO_XATTR)
            .ok()
            .and_then(|raw| ObjectInfo::from_shared(raw).ok())
            .map(|info| info.version);
        // A removal or a snapshot trim does not date the head's object info by its
        // version (a removal leaves a whiteout of that version, or no object; a trim
        // changes only the clones and the snapshot set). Where our own log ends its
        // changes to the object with exactly that entry and we lack nothing of it, our
        // copy is that version: whatever is stored, absence included.
        let vouched = !self.lacks(name)
            && (self.newest_change(name)).is_some_and(|entry| {
                entry.version == version && !super::repair::is_plain_write(entry)
            });
        if vouched {
            return read_copy(store, self.coll, name).map_err(CopyMiss::Unreadable);
        }
        if ours != Some(version) {
            return Err(CopyMiss::OtherVersion(format!(
                "{name} is not here at {version} (our copy: {ours:?})"
            )));
        }
        read_copy(store, self.coll, name).map_err(CopyMiss::Unreadable)
    }

    /// Replaces our copies of `objects` and forgets them as missing, in one transaction.
    /// When the store refuses it (no room, say), nothing changes, here or in memory:
    /// the objects stay missing.
    pub(super) fn apply_copies(
        &mut self,
        store: &mut dyn ObjectStore,
        objects: Vec<ObjectCopy>,
    ) -> Result<(), carmine_store::StoreError> {
        let mut tx = Transaction::new();
        let mut names = Vec::new();
        for copy in objects {
            let oid = ObjectId::head(copy.oid.clone());
            let clones = crate::snaps::stored_clones(store, self.coll, &copy.oid);
            if store.exists(self.coll, &oid) {
                tx.remove(self.coll, oid.clone());
            }
            for clone in clones {
                tx.remove(self.coll, clone);
            }
            if let Some(state) = copy.state {
                write_state(&mut tx, self.coll, oid, state);
            }
            for (id, state) in copy.clones {
                write_state(
                    &mut tx,
                    self.coll,
                    crate::snaps::clone_oid(&copy.oid, id),
                    state,
                );
            }
            names.push(copy.oid);
        }
        let recovered: Vec<_> = (names.iter())
            .filter(|name| self.missing.contains(*name))
            .map(|name| missing_key(name))
            .collect();
        if !recovered.is_empty() {
            tx.omap_rm(self.coll, crate::pglog::pgmeta_oid(), recovered);
        }
        self.last_submitted = store.submit(tx)?;
        for name in &names {
            self.missing.remove(name);
            self.missing_need.remove(name);
            // A replaced copy is a new copy: if it rots too, the next scrub reports it
            // at once rather than as a corruption already reported.
            self.corrupt_reported.1.remove(name);
        }
        // The last missing object of a history whose counts a rollback left in doubt:
        // they can be counted now (in a transaction of their own; until it lands they
        // stay in doubt, which is safe).
        if self.recount_stats_if_complete(store) {
            self.persist_info(store);
        }
        Ok(())
    }

    /// Primary: pull `names` (or everything, with `all`) from `source`.
    pub(super) fn start_pull(
        &mut self,
        store: &mut dyn ObjectStore,
        source: OsdId,
        names: BTreeSet<String>,
        all: bool,
        out: &mut Vec<Output>,
    ) {
        if names.is_empty() && !all {
            self.activate_when_alive(store, out);
            return;
        }
        self.send_pull(source, names, all, Vec::new(), out);
    }

    /// Pulls `names` (everything with `all`) from `source`, of exactly the versions in
    /// `exact` where it names them, and waits for them in the pull phase.
    pub(super) fn send_pull(
        &mut self,
        source: OsdId,
        names: BTreeSet<String>,
        all: bool,
        exact: Vec<(String, EVersion)>,
        out: &mut Vec<Output>,
    ) {
        self.pulling = names;
        self.pull_unreadable.clear();
        self.pull_lacking.clear();
        self.pull_not_applied.clear();
        self.pull_exact = exact;
        out.push(peer_output(source, self.pull_message(all)));
        self.phase = Phase::Pull { source, all };
    }

    /// Any role: a primary pulls objects from us.
    pub fn handle_pull(
        &mut self,
        store: &dyn ObjectStore,
        from: OsdId,
        pull: PgPull,
        out: &mut Vec<Output>,
    ) {
        let names: Vec<String> = if pull.all {
            self.all_objects(store).into_iter().collect()
        } else {
            pull.oids
        };
        let exact: BTreeMap<&str, EVersion> = pull
            .exact
            .iter()
            .map(|(name, version)| (name.as_str(), *version))
            .collect();
        let chunks: Vec<&[String]> = names.chunks(self.tuning.objects_per_push_max).collect();
        let chunk_count = chunks.len().max(1);
        for index in 0..chunk_count {
            let (mut objects, mut corrupt, mut lacking) = (Vec::new(), Vec::new(), Vec::new());
            for name in chunks.get(index).copied().unwrap_or_default() {
                let copy = match exact.get(name.as_str()) {
                    Some(version) => self.exact_copy(store, name, *version),
                    None => self.object_copy(store, name).map_err(CopyMiss::Unreadable),
                };
                match copy {
                    Ok(copy) => objects.push(copy),
                    Err(CopyMiss::OtherVersion(why)) => {
                        // A probe or a repair asking round: an answer, not a fault.
                        tracing::debug!("{}: {why}", self.pgid);
                        corrupt.push(name.clone());
                        lacking.push(name.clone());
                    }
                    Err(CopyMiss::Unreadable(why)) => {
                        tracing::warn!("{}: cannot copy {why}", self.pgid);
                        corrupt.push(name.clone());
                    }
                }
            }
            self.note_sent(&objects);
            let last = (index + 1 == chunk_count).then(|| names.clone());
            let push = Msg::PgPush(PgPush {
                pgid: self.pgid,
                interval: pull.interval,
                map_epoch: self.map_epoch,
                objects,
                last,
                corrupt,
                lacking,
            });
            out.push(peer_output(from, push));
        }
    }

    /// Objects arrive: as the primary pulling them, or as a replica being recovered.
    pub fn handle_push(
        &mut self,
        store: &mut dyn ObjectStore,
        from: OsdId,
        push: PgPush,
        out: &mut Vec<Output>,
    ) {
        if push.interval != self.interval_start {
            return;
        }
        if let Phase::Pull { source, all } = self.phase.clone() {
            if source == from && self.is_primary() {
                self.receive_pulled(store, push, all, out);
            }
            return;
        }
        if self.is_primary() {
            self.receive_repair(store, from, push, out);
            return;
        }
        if self.primary != Some(from) {
            return;
        }
        let oids: Vec<String> = push.objects.iter().map(|o| o.oid.clone()).collect();
        let mut reply = PgPushReply {
            pgid: self.pgid,
            interval: push.interval,
            map_epoch: self.map_epoch,
            oids: Vec::new(),
            corrupt: Vec::new(),
            refused: Vec::new(),
            refused_for_space: false,
        };
        // Behind the RepOps we ignored (an earlier one was refused for space and is
        // still to be resent): the copies carry writes our log lacks, and the resent
        // RepOps would land on them. Refused, they come again once we have caught up.
        let (ignored_in, ignored_to) = self.rep_ops_ignored_to;
        let behind = ignored_in == self.interval_start && self.info.last_update < ignored_to;
        let refused = if behind {
            Some((
                false,
                format!("our log is behind {ignored_to}, the RepOps we ignored"),
            ))
        } else {
            let versions = self.versions_of_missing(&push.objects);
            match self.apply_copies(store, push.objects) {
                Ok(()) => None,
                Err(error) => {
                    self.note_refused_needs(store, versions);
                    Some((
                        matches!(error, carmine_store::StoreError::NoSpace { .. }),
                        error.to_string(),
                    ))
                }
            }
        };
        match refused {
            None => {
                for name in &oids {
                    self.push_refused.remove(name);
                }
                reply.oids = oids;
            }
            Some((for_space, why)) => {
                // Answered, not dropped, and not as applied: a reply naming them as
                // pushed made the primary count this copy complete (the PG went clean
                // with a stale copy here). They stay missing here, and a RepOp for one
                // of them applies only its log entry until a push lands
                // (`handle_rep_op`).
                tracing::warn!(
                    "{}: cannot apply {} objects pushed by {from}: {why}",
                    self.pgid,
                    oids.len()
                );
                for name in &oids {
                    self.push_refused.insert(name.clone(), self.interval_start);
                }
                reply.refused = oids;
                reply.refused_for_space = for_space;
            }
        }
        self.held_until_commit.push_back(super::HeldMessage {
            seq: self.last_submitted,
            to: from,
            reply: Msg::PgPushReply(reply),
        });
    }

    fn receive_pulled(
        &mut self,
        store: &mut dyn ObjectStore,
        push: PgPush,
        all: bool,
        out: &mut Vec<Output>,
    ) {
        let pulled_from = self.phase.clone();
        // Progress: the pull's resend timer starts again (see `peering_tick`).
        self.resend_watch = None;
        for copy in &push.objects {
            self.pulling.remove(&copy.oid);
        }
        // Removals apart: they grow nothing, so a full store still takes them, where
        // one transaction with copies that add data was refused whole and left the
        // removed objects missing here with no version anyone could supply (the
        // remap and space classes, seed 3984).
        let (ahead, objects): (Vec<_>, Vec<_>) =
            (push.objects.into_iter()).partition(|copy| self.copy_is_ahead_of_log(copy));
        for copy in ahead {
            tracing::warn!(
                "{}: the source's copy of {} is of a write our history does not hold; it \
                 stays missing here",
                self.pgid,
                copy.oid
            );
            self.pull_not_applied.insert(copy.oid);
        }
        let (removals, copies): (Vec<_>, Vec<_>) =
            (objects.into_iter()).partition(|copy| copy.state.is_none() && copy.clones.is_empty());
        for batch in [removals, copies] {
            if batch.is_empty() {
                continue;
            }
            let pulled: Vec<String> = batch.iter().map(|c| c.oid.clone()).collect();
            let versions = self.versions_of_missing(&batch);
            if let Err(error) = self.apply_copies(store, batch) {
                // They stay missing, to be recovered once active. (Forgotten, as
                // before, the primary served and wrote on its stale copies: the
                // simulator's space faults, seed 141.)
                tracing::error!("{}: cannot apply pulled objects: {error}", self.pgid);
                self.note_refused_needs(store, versions);
                self.pull_not_applied.extend(pulled);
            }
        }
        for name in push.corrupt {
            // The source cannot read its copy either, or holds another version than
            // the one asked for: ours stays missing, to be repaired from another
            // member once active. (Taken as not sent, an object whose newest change
            // was a removal was taken as absent, and a stale copy here served: seed
            // 1437 of remaps and space.)
            self.pulling.remove(&name);
            if push.lacking.contains(&name) {
                self.pull_lacking.insert(name.clone());
            }
            self.pull_unreadable.insert(name);
        }
        let Some(names) = push.last else { return };
        if all {
            let keep: BTreeSet<String> = names.into_iter().collect();
            let mut tx = Transaction::new();
            for name in self.all_objects(store).difference(&keep) {
                tx.remove(self.coll, ObjectId::head(name.clone()));
                for clone in crate::snaps::stored_clones(store, self.coll, name) {
                    tx.remove(self.coll, clone);
                }
            }
            // Complete now: the copy may be trusted again.
            if self.missing.remove(crate::pglog::MISSING_ALL) {
                let key = missing_key(crate::pglog::MISSING_ALL);
                tx.omap_rm(self.coll, crate::pglog::pgmeta_oid(), vec![key]);
            }
            self.submit_meta(store, tx);
        }
        // Objects the source did not send: it lacks them too. They stay missing here
        // (unfound until a copy turns up), never taken as absent; unless our log shows
        // one gone for good, when absent is right.
        let mut unsent = std::mem::take(&mut self.pulling);
        unsent.retain(|name| !self.removed_for_good(self.log.entries(), name));
        if !unsent.is_empty() && !self.pull_exact.is_empty() {
            // A probe asks one copy of several: the others may still hold them.
            tracing::info!(
                "{}: the probed copy lacks {} of the exact versions asked for",
                self.pgid,
                unsent.len()
            );
        } else if !unsent.is_empty() {
            tracing::error!(
                "{}: the source lacks {} objects; they are unfound",
                self.pgid,
                unsent.len()
            );
        }
        let unreadable = std::mem::take(&mut self.pull_unreadable);
        let lacking = std::mem::take(&mut self.pull_lacking);
        let mut still_missing = std::mem::take(&mut self.pull_not_applied);
        still_missing.extend(unsent);
        still_missing.extend(unreadable.iter().cloned());
        self.keep_missing_only(store, &still_missing);
        if !self.pull_exact.is_empty() {
            // A probe: a copy that could not send the exact version is not bad.
            return self.after_probe(store, out);
        }
        self.activate_when_alive(store, out);
        let Phase::Pull { source, .. } = pulled_from else {
            unreachable!("receive_pulled runs in the pull phase");
        };
        for name in unreadable
            .into_iter()
            .filter(|name| !lacking.contains(name))
        {
            self.note_replica_corrupt(source, name);
        }
    }

    /// Primary, pulling: whether a copy holds a write the history we adopted does not:
    /// an object info newer than our last update, or no object where our log's newest
    /// change to it is not a removal. The source's history then goes on past ours, with
    /// entries we left out as provably never acknowledged (`drop_unreadable_tail`);
    /// taking its copy put a dropped write's data under an older version (seed 7859 of
    /// remaps, disk errors and expansion with snapshots: the PG's byte count and the
    /// data no longer agreed). Such an object stays missing, to be recovered from a
    /// copy that holds our history once active.
    fn copy_is_ahead_of_log(&self, copy: &ObjectCopy) -> bool {
        let Some(state) = &copy.state else {
            let removal = copy.clones.is_empty();
            return removal
                && self
                    .newest_change(&copy.oid)
                    .is_some_and(|e| !is_removal(e));
        };
        copy_version(state).is_some_and(|version| version > self.info.last_update)
    }

    /// After a pull: the objects still missing are exactly `names`, in memory and in
    /// the persisted missing keys.
    fn keep_missing_only(&mut self, store: &mut dyn ObjectStore, names: &BTreeSet<String>) {
        let mut tx = Transaction::new();
        let added: BTreeSet<String> = names.difference(&self.missing).cloned().collect();
        let mut needs = self.needs_of(&added, &BTreeMap::new());
        if !added.is_empty() {
            let omap = Self::missing_omap(&added, &needs);
            tx.omap_set(self.coll, crate::pglog::pgmeta_oid(), omap);
        }
        needs.extend(
            (std::mem::take(&mut self.missing_need).into_iter())
                .filter(|(name, _)| names.contains(name)),
        );
        self.missing = names.clone();
        self.missing_need = needs;
        self.submit_meta(store, tx);
    }

    /// Primary: a replica applied pushed objects.
    pub fn handle_push_reply(
        &mut self,
        store: &mut dyn ObjectStore,
        from: OsdId,
        reply: PgPushReply,
        out: &mut Vec<Output>,
    ) {
        if reply.interval != self.interval_start {
            return;
        }
        self.receive_push_reply_repairs(from, &reply);
        // The writes each applied copy covers: those logged before its push went out.
        // A write logged after it (a push ahead of a client write goes out just before
        // the write's RepOp) is the replica's to answer, and its store may yet refuse
        // it for space.
        let mut covered = BTreeMap::new();
        if let Some(pushing) = self.pushing.get_mut(&from) {
            for oid in &reply.oids {
                if let Some(version) = pushing.remove(oid) {
                    covered.insert(oid.as_str(), version);
                }
            }
            for oid in &reply.refused {
                pushing.remove(oid);
            }
        }
        for oid in &reply.oids {
            self.pushes_refused_for_space.remove(&(from, oid.clone()));
        }
        if !reply.refused.is_empty() && self.phase == Phase::Active {
            // Still to push there, once it has room (or after a pause).
            let missing = self.peer_missing.entry(from).or_default();
            missing.extend(reply.refused.iter().cloned());
            if reply.refused_for_space {
                let refused = reply.refused.iter().map(|oid| (from, oid.clone()));
                self.pushes_refused_for_space.extend(refused);
            }
            self.push_refused_by(from, reply.refused_for_space, out);
        }
        // A write logged since the activation is the replica's once it has logged it
        // (answered its RepOp): a push gives it the data of one it logged only. One it
        // has not answered it may never have logged (its store refused an earlier
        // RepOp, and it ignores those that do not follow), and the data alone leaves a
        // hole in its log that stops every later RepOp (seed 7278 of remaps and
        // space). A write carried over reached the replica's log with the activation;
        // the push is what it waits for.
        for write in self.in_flight.iter_mut() {
            let covers = covered.get(write.oid.as_str());
            if write.is_write && covers.is_some_and(|&version| write.version <= version) {
                write.log_only.remove(&from);
                if write.carried_over {
                    write.waiting_on.remove(&from);
                }
            }
        }
        if self.peer_missing.get(&from).is_some_and(BTreeSet::is_empty)
            && self.pushing.get(&from).is_none_or(super::Pushing::is_empty)
        {
            self.backfilling.remove(&from);
        }
        self.schedule_recovery(store, out);
        self.complete_writes(store, out);
        // Client writes waiting for these pushes (`pg/degraded.rs`) run again.
        for oid in reply.oids.iter().chain(&reply.refused) {
            self.release_reads(store, oid, out);
        }
    }

    /// Primary: keep up to the limit of pushes in flight to each replica. Objects whose
    /// copy here is being repaired (or has no readable copy at all) wait.
    pub(super) fn schedule_recovery(&mut self, store: &mut dyn ObjectStore, out: &mut Vec<Output>) {
        if self.phase != Phase::Active {
            return;
        }
        // Background pushes wait for the PG's reservations (`pg/reserve.rs`).
        if !self.reserve_for_recovery(out) {
            return;
        }
        let mut total = self.pushes_in_flight();
        for replica in self.replicas() {
            if self.replica_behind(replica) {
                continue;
            }
            let mut deferred = Vec::new();
            loop {
                let in_flight = self.pushing.get(&replica).map_or(0, super::Pushing::len);
                if in_flight >= self.tuning.pushes_in_flight_max {
                    break;
                }
                if total >= self.push_allowance || self.push_starts_left == 0 {
                    // The shard's scheduler holds us back: it resumes us when pushes
                    // complete, or when its tags let recovery go again.
                    if self
                        .peer_missing
                        .get(&replica)
                        .is_some_and(|m| !m.is_empty())
                    {
                        self.recovery_starved = true;
                        self.waiting_for_budget = true;
                    }
                    break;
                }
                let Some(name) = self
                    .peer_missing
                    .get_mut(&replica)
                    .and_then(|m| m.pop_first())
                else {
                    break;
                };
                if self.repairs.contains_key(&name) || !self.push_now(store, replica, &name, out) {
                    deferred.push(name);
                } else {
                    total += 1;
                    self.push_starts_left -= 1;
                }
            }
            if !deferred.is_empty() {
                self.peer_missing
                    .entry(replica)
                    .or_default()
                    .extend(deferred);
            }
        }
    }

    /// Primary: whether `replica` refused a write for want of space that it still
    /// owes us: it ignores every later RepOp until the resend of that one lands, so
    /// its log is behind what we sent. Nothing is pushed to it meanwhile: a push
    /// carries our copy as of now, writes it has not logged included, and the resent
    /// RepOps then land on a copy newer than they are (seed 7278 of remaps and space:
    /// a resent write found its object removed by the push and failed, and the PG
    /// peered again and again).
    pub(super) fn replica_behind(&self, replica: OsdId) -> bool {
        (self.in_flight.iter())
            .any(|write| write.refused_by.contains(&replica) && write.waiting_on.contains(&replica))
    }

    /// Pushes our copy of `name` to `replica`. If our copy is unreadable, starts
    /// repairing it instead and returns `false` (the caller keeps `name` missing there).
    pub(super) fn push_now(
        &mut self,
        store: &dyn ObjectStore,
        replica: OsdId,
        name: &str,
        out: &mut Vec<Output>,
    ) -> bool {
        let copy = match self.object_copy(store, name) {
            Ok(copy) => copy,
            Err(why) => {
                if !self.missing.contains(name) {
                    self.note_local_corrupt(name);
                }
                tracing::warn!("{}: cannot push {why}; repairing our copy", self.pgid);
                self.start_repair(store, name, Some(replica), out);
                return false;
            }
        };
        self.waiting_for_budget = false;
        // A push already on its way keeps the version of its first send: a reply
        // may answer either send, and both cover at least that.
        let covers = self.info.last_update;
        (self.pushing.entry(replica).or_default())
            .entry(name.to_string())
            .or_insert(covers);
        let push = self.one_object_push(copy);
        out.push(peer_output(replica, push));
        true
    }

    /// A push of one object in this interval (recovery, a resend, or ahead of a write),
    /// counted for the shard to charge recovery's cost.
    fn one_object_push(&mut self, copy: ObjectCopy) -> Msg {
        self.note_sent(std::slice::from_ref(&copy));
        Msg::PgPush(PgPush {
            pgid: self.pgid,
            interval: self.interval_start,
            map_epoch: self.map_epoch,
            objects: vec![copy],
            last: None,
            corrupt: Vec::new(),
            lacking: Vec::new(),
        })
    }

    /// Primary, before a write to `name`: replicas still missing it get it now, ahead of
    /// the write on the same ordered session. Returns `false` if one of them could not
    /// get it because our copy is unreadable (the write must wait for its repair).
    pub(super) fn push_before_write(
        &mut self,
        store: &dyn ObjectStore,
        name: &str,
        out: &mut Vec<Output>,
    ) -> bool {
        let mut pushed_all = true;
        for replica in self.replicas() {
            // Looked up first: a replica lacks nothing on nearly every write.
            let lacks = (self.peer_missing.get(&replica)).is_some_and(|m| m.contains(name));
            if !lacks || self.replica_behind(replica) {
                // Behind: it logs this write only once it has the ones it refused; it
                // lacks the object, so it logs it without the data, and the push
                // follows.
                continue;
            }
            pushed_all &= self.push_ahead(store, replica, name, out);
        }
        pushed_all
    }
}

/// Why a pull of an exact version got no copy of an object.
pub(super) enum CopyMiss {
    /// The copy here is of another version, or there is none.
    OtherVersion(String),
    /// The copy here cannot be read (or this copy knows it lacks the object).
    Unreadable(String),
}

/// One object's whole state as stored here, its snapshot clones included; `Err` when
/// its data (or a clone's) fails its checksum or cannot be read.
fn read_copy(
    store: &dyn ObjectStore,
    coll: CollectionId,
    name: &str,
) -> Result<ObjectCopy, String> {
    let state = read_state(store, coll, &ObjectId::head(name))
        .map_err(|error| format!("{name}: {error}"))?;
    let snapset = crate::snaps::load_snapset(store, coll, name).unwrap_or_default();
    let mut clones = Vec::new();
    for clone in &snapset.clones {
        let oid = crate::snaps::clone_oid(name, clone.id);
        let clone_state = read_state(store, coll, &oid)
            .map_err(|error| format!("{name} clone {}: {error}", clone.id))?;
        if let Some(clone_state) = clone_state {
            clones.push((clone.id, clone_state));
        }
    }
    Ok(ObjectCopy {
        oid: name.to_string(),
        state,
        clones,
    })
}

/// One stored object's whole state (`None` if absent); an error when its data cannot
/// be read (a checksum failure).
fn read_state(
    store: &dyn ObjectStore,
    coll: CollectionId,
    oid: &ObjectId,
) -> Result<Option<ObjectState>, carmine_store::StoreError> {
    let Ok(stat) = store.stat(coll, oid) else {
        return Ok(None);
    };
    let data = store.read(coll, oid, 0, stat.size_bytes)?;
    let xattrs = store.getxattrs(coll, oid).unwrap_or_default();
    let omap = store
        .omap_list(coll, oid, None, usize::MAX)
        .unwrap_or_default();
    Ok(Some(ObjectState {
        data,
        mtime_ns: stat.mtime_ns,
        xattrs,
        omap,
    }))
}

/// Adds to `tx` the creation of `oid` with exactly `state`.
fn write_state(tx: &mut Transaction, coll: CollectionId, oid: ObjectId, state: ObjectState) {
    tx.touch(coll, oid.clone());
    if !state.data.is_empty() {
        tx.write(coll, oid.clone(), 0, state.data);
    }
    for (name, value) in state.xattrs {
        tx.set_xattr(coll, oid.clone(), name, value);
    }
    if !state.omap.is_empty() {
        tx.omap_set(coll, oid.clone(), state.omap);
    }
    tx.set_mtime(coll, oid, state.mtime_ns);
}
