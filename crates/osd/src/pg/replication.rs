//! The write path: ordering, local submission, replication, commit tracking and the
//! client reply; and the replica's side of it.

use super::degraded::DegradedWrite;
use super::{peer_output, HeldMessage, InFlightWrite, Pg, Phase};
use crate::exec::{self, store_error};
use crate::osd_set::OsdSet;
use crate::pglog::Applied;
use crate::{ClientRef, Output};
use carmine_clustermap::OsdMap;
use carmine_proto::{
    LogEntry, LogOp, Msg, OpCode, OpError, OsdOp, OsdOpReply, PgInfo, RepOp, RepOpReply,
};
use carmine_store::{ObjectStore, Transaction, TxSeq};
use carmine_types::{EVersion, ObjectId, OsdId};
use std::sync::Arc;

/// A log entry ready to submit: the PG info after it, the transaction that carries it
/// (the write's, or empty for an error entry), who waits for it and their answer.
struct Logged {
    entry: LogEntry,
    info: PgInfo,
    tx: Transaction,
    clients: Vec<ClientRef>,
    reply: OsdOpReply,
}

/// Requests a primary remembers refusing for want of space without logging the
/// refusal (per PG; see `handle_write`): enough for every client's ops in flight, and a
/// copy of one arrives within the resend interval.
const REFUSED_FOR_SPACE_KEPT: usize = 1024;

impl Pg {
    pub(super) fn handle_write(
        &mut self,
        store: &mut dyn ObjectStore,
        client: ClientRef,
        op: OsdOp,
        out: &mut Vec<Output>,
    ) {
        if let Some(applied) = self.log.find_reqid(op.reqid) {
            self.answer_duplicate(client, &op, applied, out);
            return;
        }
        if self.in_flight.len() >= self.tuning.in_flight_writes_max {
            out.push(self.reply(client, &op, Err(OpError::Busy)));
            return;
        }
        let adds_data = op.ops.iter().any(OpCode::adds_data);
        if adds_data && self.refused_for_space.contains(&op.reqid) {
            out.push(self.reply(client, &op, Err(OpError::NoSpace)));
            return;
        }
        if adds_data && self.is_full(store) {
            // Refused before anything runs: no object changes. Deletes, truncates and
            // removals still go through, to free space. The client takes the answer
            // as final, so every later copy of the request must get it too, from this
            // primary or any later one: the refusal is logged as the write's result
            // (an error entry, as any other failure). Remembered by this primary
            // alone, it was lost with the PG's copy here (a stray deleted and made
            // again), and a copy held while the PG peered ran once the room came back,
            // applying a write the client had been told failed (the simulator's remap
            // and space classes, seeds 2630 and 21752). A new request may run once
            // there is room.
            return self.refuse_for_space(store, client, &op, out);
        }
        let removal = op.ops.iter().all(|code| matches!(code, OpCode::Remove));
        match self.degraded_write(store, &op.oid, removal, out) {
            DegradedWrite::Go => {}
            // A push to a replica lacking the object, or the repair of our copy.
            DegradedWrite::Wait => return self.block_read(client, op, out),
            DegradedWrite::NoRoom => return self.refuse_for_space(store, client, &op, out),
            DegradedWrite::Unfound => {
                let error = super::repair::unfound_error(&op.oid);
                return self.answer_failed_write(store, client, &op, error, out);
            }
        }
        if let Err(error) = self.start_write(store, client, &op, out) {
            self.answer_failed_write(store, client, &op, error, out);
        }
    }

    /// Refuses write `op` for want of space, before anything runs (see `handle_write`).
    fn refuse_for_space(
        &mut self,
        store: &mut dyn ObjectStore,
        client: ClientRef,
        op: &OsdOp,
        out: &mut Vec<Output>,
    ) {
        if self.log_waits_for_room() {
            // The log cannot take the entry until the write a replica refused
            // lands: answer at once rather than stall every writer of the PG, and
            // remember the request here (a primary change before then forgets it).
            self.remember_refused_for_space(op.reqid);
            out.push(self.reply(client, op, Err(OpError::NoSpace)));
        } else {
            self.answer_failed_write(store, client, op, OpError::NoSpace, out);
        }
    }

    fn remember_refused_for_space(&mut self, reqid: carmine_types::ReqId) {
        if !self.refused_for_space.insert(reqid) {
            return;
        }
        self.refused_for_space_order.push_back(reqid);
        if self.refused_for_space_order.len() > REFUSED_FOR_SPACE_KEPT {
            let oldest = (self.refused_for_space_order.pop_front()).expect("over the limit");
            self.refused_for_space.remove(&oldest);
        }
    }

    /// Whether an in-flight write waits for a replica's store to have room: until it
    /// lands, that replica takes no later entry, so nothing newly logged completes.
    fn log_waits_for_room(&self) -> bool {
        self.in_flight.iter().any(|w| !w.refused_by.is_empty())
    }

    /// Whether writes that add data are refused: a member of the acting set is marked
    /// full in the map, a replica refused an in-flight write for want of space (it
    /// will be marked full once the monitor hears of it), or this OSD's own store is
    /// past the failsafe ratio (Ceph's `osd_failsafe_full_ratio`).
    pub(super) fn is_full(&self, store: &dyn ObjectStore) -> bool {
        if !self.full_members.is_empty() {
            return true;
        }
        if self.log_waits_for_room() {
            return true;
        }
        let usage = store.usage();
        if usage.capacity_bytes == u64::MAX || usage.capacity_bytes == 0 {
            return false;
        }
        let used = usage.data_bytes.saturating_add(usage.metadata_bytes);
        used as f64 >= self.failsafe_full_ratio * usage.capacity_bytes as f64
    }

    /// A write failed. A failure the client retries on (the op reached the wrong OSD,
    /// or one that cannot serve it now) is answered at once: it says nothing about the
    /// object. Any other failure is the write's result: it is logged as an error entry
    /// (Ceph's `record_write_error`), so that a resend gets it again from this primary
    /// or any later one instead of running again (and perhaps succeeding, after another
    /// write changed the object), and answered like a write, once every member has the
    /// entry and after the writes before it (it was judged against their effects).
    pub(super) fn answer_failed_write(
        &mut self,
        store: &mut dyn ObjectStore,
        client: ClientRef,
        op: &OsdOp,
        error: OpError,
        out: &mut Vec<Output>,
    ) {
        let retried = matches!(
            error,
            OpError::WrongPrimary | OpError::WrongShard { .. } | OpError::NotActive | OpError::Busy
        );
        if retried {
            out.push(self.reply(client, op, Err(error)));
            return;
        }
        if let Err(refused) = self.record_write_error(store, client, op, error, out) {
            // The store refused even the log entry: the failure cannot be made the
            // answer to every resend, so it is no answer yet. The client retries.
            tracing::error!(
                "{}: cannot log the failure of {}: {refused}",
                self.pgid,
                op.reqid
            );
            out.push(self.reply(client, op, Err(OpError::Busy)));
        }
    }

    /// Logs and replicates the failure `error` of write `op` at the next PG version.
    /// The entry changes no object: the PG's version moves on, the object's does not.
    fn record_write_error(
        &mut self,
        store: &mut dyn ObjectStore,
        client: ClientRef,
        op: &OsdOp,
        error: OpError,
        out: &mut Vec<Output>,
    ) -> Result<(), OpError> {
        let version = EVersion {
            epoch: self.map_epoch,
            version: self.info.last_update.version + 1,
        };
        let entry = LogEntry {
            version,
            prior_version: EVersion::ZERO,
            reqid: op.reqid,
            oid: op.oid.clone(),
            op: LogOp::Error(error.clone()),
            user_version: 0,
        };
        let reply = OsdOpReply {
            reqid: op.reqid,
            pgid: self.pgid,
            result: Err(error),
            outputs: Vec::new(),
            user_version: 0,
            version,
            map_epoch: self.map_epoch,
        };
        let mut info = self.info.clone();
        info.last_update = version;
        info.log_tail = self.plan_log_trim();
        let logged = Logged {
            entry,
            info,
            tx: Transaction::new(),
            clients: vec![client],
            reply,
        };
        self.log_and_replicate(store, logged, out)
    }

    /// A resent write that the log already holds (applied, or its failure logged):
    /// answer it with the original result once it is complete.
    fn answer_duplicate(
        &mut self,
        client: ClientRef,
        op: &OsdOp,
        applied: Applied,
        out: &mut Vec<Output>,
    ) {
        if let Some(write) = self
            .in_flight
            .iter_mut()
            .find(|w| w.version == applied.version)
        {
            write.clients.push(client);
            return;
        }
        out.push(Output::Client(
            client,
            Msg::OsdOpReply(OsdOpReply {
                reqid: op.reqid,
                pgid: self.pgid,
                result: applied.error.map_or(Ok(()), Err),
                outputs: Vec::new(),
                user_version: applied.user_version,
                version: applied.version,
                map_epoch: self.map_epoch,
            }),
        ));
    }

    fn start_write(
        &mut self,
        store: &mut dyn ObjectStore,
        client: ClientRef,
        op: &OsdOp,
        out: &mut Vec<Output>,
    ) -> Result<(), OpError> {
        let version = EVersion {
            epoch: self.map_epoch,
            version: self.info.last_update.version + 1,
        };
        let oid = ObjectId::head(op.oid.clone());
        // A writer may not know yet that a snapshot was removed: a clone made for it
        // now would never be trimmed (as Ceph, the OSD drops removed snaps).
        let mut snapc = op.snapc.clone();
        snapc
            .snaps
            .retain(|snap| !self.pool.removed_snaps.contains(snap));
        let run = exec::execute(
            store,
            self.coll,
            &oid,
            &op.ops,
            &snapc,
            version,
            op.mtime_ns,
        )?;
        self.submit_write(store, op.reqid, &op.oid, run, version, vec![client], out)
    }

    /// Logs, applies and replicates the write `run` of object `name` at `version`
    /// (the next PG version); `clients` get the reply once every member committed. A
    /// write the PG makes itself (snapshot trimming) has no clients.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn submit_write(
        &mut self,
        store: &mut dyn ObjectStore,
        reqid: carmine_types::ReqId,
        name: &str,
        run: exec::Execution,
        version: EVersion,
        clients: Vec<ClientRef>,
        out: &mut Vec<Output>,
    ) -> Result<(), OpError> {
        let entry = LogEntry {
            version,
            prior_version: run.before.info.version,
            reqid,
            oid: name.to_string(),
            op: if run.exists_after {
                LogOp::Modify
            } else {
                LogOp::Delete
            },
            user_version: version.version,
        };
        let mut info = self.info.clone();
        info.last_update = version;
        info.log_tail = self.plan_log_trim();
        // Heads that exist (not whiteouts) and clones count, as in Ceph.
        info.object_count = (info.object_count + u64::from(run.exists_after))
            .saturating_sub(u64::from(run.before.exists));
        info.data_bytes = (info.data_bytes + run.size_after).saturating_sub(run.before.size_bytes);
        info.object_count = (info.object_count + run.clones_made.objects)
            .saturating_sub(run.clones_dropped.objects);
        info.data_bytes =
            (info.data_bytes + run.clones_made.bytes).saturating_sub(run.clones_dropped.bytes);
        // Client writes pushed the object already (they wait when it cannot be
        // pushed); a write the PG makes itself (a snapshot trim) pushes it here.
        let _ = self.push_before_write(store, name, out);
        let reply = OsdOpReply {
            reqid,
            pgid: self.pgid,
            result: Ok(()),
            outputs: run.outputs,
            user_version: version.version,
            version,
            map_epoch: self.map_epoch,
        };
        let logged = Logged {
            entry,
            info,
            tx: run.tx,
            clients,
            reply,
        };
        self.log_and_replicate(store, logged, out)
    }

    /// Logs and replicates the removal of an object the PG gave up (`pg
    /// mark_unfound_lost delete`, see `pg/lost.rs`): `tx` removes whatever we still
    /// store of it; `clients` get `reply` once every member committed.
    pub(super) fn log_lost_removal(
        &mut self,
        store: &mut dyn ObjectStore,
        entry: LogEntry,
        tx: Transaction,
        clients: Vec<ClientRef>,
        reply: OsdOpReply,
        out: &mut Vec<Output>,
    ) -> Result<(), OpError> {
        let mut info = self.info.clone();
        info.last_update = entry.version;
        info.log_tail = self.plan_log_trim();
        // Its head counted as one object; its size, and any clones only other copies
        // held, are not known here (the counts overstate the bytes until a recount).
        info.object_count = info.object_count.saturating_sub(1);
        let logged = Logged {
            entry,
            info,
            tx,
            clients,
            reply,
        };
        self.log_and_replicate(store, logged, out)
    }

    /// Persists `logged` (its entry added to its transaction), sends it to the
    /// replicas and tracks it until every member has committed it.
    fn log_and_replicate(
        &mut self,
        store: &mut dyn ObjectStore,
        logged: Logged,
        out: &mut Vec<Output>,
    ) -> Result<(), OpError> {
        let Logged {
            entry,
            info,
            mut tx,
            clients,
            reply,
        } = logged;
        let version = entry.version;
        let changes_object = entry.changes_object();
        let name = entry.oid.clone();
        self.log.persist_append(&entry, &info, &mut tx);
        let replicas = self.replicas();
        // The replicas apply the same transaction; copy it only when there are any
        // (once: their messages share the copy).
        let replica_tx = (!replicas.is_empty()).then(|| Arc::new(tx.clone()));
        let local_seq = store.submit(tx).map_err(store_error)?;
        self.last_submitted = local_seq;
        self.info = info;
        self.log.push(entry.clone());
        let rep_tid = self.next_rep_tid;
        self.next_rep_tid += 1;
        // The in-flight write keeps `rep` for a replica that runs out of space.
        let rep = replica_tx.map(|tx| RepOp {
            pgid: self.pgid,
            map_epoch: self.map_epoch,
            rep_tid,
            entry,
            info: self.info.clone(),
            tx,
        });
        if let Some(rep) = &rep {
            for &osd in &replicas {
                out.push(peer_output(osd, Msg::RepOp(rep.clone())));
            }
        }
        if changes_object {
            // A write landed on it (one replacing an unreadable copy, say): no longer
            // known unfound; a read finds it again if it still is.
            self.unfound.remove(&name);
        }
        *self.writes_per_object.entry(name.clone()).or_default() += 1;
        self.in_flight.push_back(InFlightWrite {
            version,
            rep_tid,
            is_write: changes_object,
            oid: name,
            clients,
            reply,
            local_seq,
            local_committed: false,
            waiting_on: replicas.into_iter().collect(),
            rep,
            refused_by: Default::default(),
            log_only: Default::default(),
            carried_over: false,
        });
        Ok(())
    }

    /// The store has made every transaction up to `committed` durable.
    pub fn handle_committed(
        &mut self,
        store: &mut dyn ObjectStore,
        committed: TxSeq,
        out: &mut Vec<Output>,
    ) {
        for write in &mut self.in_flight {
            if write.local_seq <= committed {
                write.local_committed = true;
            }
        }
        while self
            .held_until_commit
            .front()
            .is_some_and(|ack| ack.seq <= committed)
        {
            let ack = self
                .held_until_commit
                .pop_front()
                .expect("checked non-empty");
            out.push(peer_output(ack.to, ack.reply));
        }
        if self.activation_record.is_some_and(|seq| seq <= committed) {
            self.activation_record = None;
            self.after_activated(store, out);
        }
        self.complete_writes(store, out);
    }

    /// Answers, in version order, every write that all members have committed and at
    /// least `min_size` of them hold. Nothing completes while the PG is inactive: fewer
    /// than `min_size` copies is not enough.
    pub(super) fn complete_writes(&mut self, store: &mut dyn ObjectStore, out: &mut Vec<Output>) {
        if !self.is_active() {
            return;
        }
        let min_size = usize::from(self.pool.min_size);
        let members = self.acting.len();
        while self.in_flight.front().is_some_and(|w| {
            w.local_committed
                && w.waiting_on.is_empty()
                && members.saturating_sub(w.log_only.len()) >= min_size
        }) {
            let mut write = self.in_flight.pop_front().expect("checked non-empty");
            // A resent write has more than one client waiting; the last takes the reply
            // itself, so the usual single client costs no copy of it.
            if let Some(last) = write.clients.pop() {
                for &client in &write.clients {
                    out.push(Output::Client(client, Msg::OsdOpReply(write.reply.clone())));
                }
                out.push(Output::Client(last, Msg::OsdOpReply(write.reply)));
            }
            let remaining = self
                .writes_per_object
                .get_mut(&write.oid)
                .expect("in-flight writes are counted");
            *remaining -= 1;
            if *remaining == 0 {
                self.writes_per_object.remove(&write.oid);
                self.release_reads(store, &write.oid, out);
            }
        }
    }

    pub(super) fn release_reads(
        &mut self,
        store: &mut dyn ObjectStore,
        oid: &str,
        out: &mut Vec<Output>,
    ) {
        let Some(reads) = self.blocked_reads.remove(oid) else {
            return;
        };
        self.blocked_read_count -= reads.len();
        for (client, op) in reads {
            self.handle_client_op(store, client, op, out);
        }
    }

    /// A replica's answer to one of our `RepOp`s.
    pub fn handle_rep_reply(
        &mut self,
        map: &OsdMap,
        store: &mut dyn ObjectStore,
        from: OsdId,
        reply: RepOpReply,
        out: &mut Vec<Output>,
    ) {
        let Some(index) = self
            .in_flight
            .iter()
            .position(|w| w.rep_tid == reply.rep_tid)
        else {
            return; // From an earlier interval; that write was dropped or completed.
        };
        let changed_object = self.in_flight[index].is_write;
        if reply.result == Err(OpError::NoSpace) {
            // The replica's store could not take the write (or error entry) we
            // applied. Answering now would leave the copies different, and failing
            // the write would lie (our copy and log hold it): keep it in flight and
            // resend it to the replica on each tick until its store takes it (space
            // freed) or the interval ends and peering settles it. Meanwhile writes
            // that add data are refused ([`Pg::is_full`]); the replica's report makes
            // the monitor mark it full.
            if self.in_flight[index].refused_by.insert(from) {
                tracing::warn!(
                    "{}: {from} is out of space for {}; holding the write until it has room",
                    self.pgid,
                    reply.version
                );
            }
            return;
        }
        if let Err(error) = &reply.result {
            // The replica's store refused, for another reason than space, an entry
            // this copy applied (its copy of the object is not what its log says: a
            // store bug, or an object lost behind the PG's back). Its log now stops
            // short of ours, so it ignores every later RepOp as not following, and
            // failing the write would lie (our copy and log hold it). Ceph's OSD
            // asserts here and the map change re-peers the PG; we peer again within
            // the interval instead: the replica's log is caught up by activation and
            // the objects of the writes in flight are pushed to it, which completes
            // them (`requeue_in_flight`). The write stays in flight, waiting on it.
            tracing::error!(
                "{}: {from} could not apply {} ({}changes an object): {error}; peering again",
                self.pgid,
                reply.version,
                if changed_object {
                    ""
                } else {
                    "an error entry; none "
                },
            );
            // A failure answered in an earlier interval is that interval's: its
            // peering heard the replica after it (messages keep their order), as does
            // a round that started since the RepOp went out (only an active PG sends
            // them).
            if reply.map_epoch >= self.interval_start && self.phase == Phase::Active {
                self.peer_again(map, store, out);
            }
            return;
        }
        let write = &mut self.in_flight[index];
        let was_refused = write.refused_by.remove(&from);
        write.waiting_on.remove(&from);
        if reply.log_only && write.is_write {
            // It holds the entry, not the write: a push that lands there later
            // makes it a holder (`handle_push_reply`).
            write.log_only.insert(from);
        }
        self.complete_writes(store, out);
        if was_refused && !self.replica_behind(from) {
            // Caught up: the pushes held back while it was behind may go now. (Nothing
            // else resumed them: a client write to an object it lacks pushed it, until
            // such writes were refused while its store refuses that push; seed 7404
            // of remaps and space stayed recovering with its reservation held.)
            self.schedule_recovery(store, out);
        }
    }

    /// Primary tick: resends to each replica that refused a write for want of space
    /// that write and every later one it still waits for (the replica ignored those
    /// as not following), in version order.
    pub fn resend_refused(&mut self, out: &mut Vec<Output>) {
        let mut refused = OsdSet::default();
        for write in &self.in_flight {
            for &osd in write.refused_by.iter() {
                refused.insert(osd);
            }
            for &osd in refused.iter() {
                if let (true, Some(rep)) = (write.waiting_on.contains(&osd), &write.rep) {
                    out.push(peer_output(osd, Msg::RepOp(rep.clone())));
                }
            }
        }
    }

    /// The primary's transaction for this replica.
    pub fn handle_rep_op(
        &mut self,
        store: &mut dyn ObjectStore,
        from: OsdId,
        rep: RepOp,
        out: &mut Vec<Output>,
    ) {
        if rep.map_epoch < self.interval_start || self.primary != Some(from) {
            tracing::debug!("{}: dropping RepOp from stale primary {from}", self.pgid);
            return;
        }
        let mut reply = RepOpReply {
            pgid: self.pgid,
            map_epoch: self.map_epoch,
            rep_tid: rep.rep_tid,
            version: rep.entry.version,
            result: Ok(()),
            log_only: false,
        };
        if rep.entry.version <= self.info.last_update {
            // Already applied (a resend): acknowledge once what we applied is durable.
            self.held_until_commit.push_back(HeldMessage {
                seq: self.last_submitted,
                to: from,
                reply: Msg::RepOpReply(reply),
            });
            return;
        }
        if rep.entry.version.version != self.info.last_update.version + 1 {
            // This copy missed writes of the interval: it restarted and lost what was
            // in flight to it, before any map showed the restart. Applying this one would
            // leave a hole in its log and objects; it stays unanswered (the primary does
            // not acknowledge the write) until the next interval's peering catches it up.
            tracing::debug!(
                "{}: RepOp {} does not follow {}; ignored",
                self.pgid,
                rep.entry.version,
                self.info.last_update
            );
            let ignored = &mut self.rep_ops_ignored_to;
            if ignored.0 != self.interval_start || ignored.1 < rep.entry.version {
                *ignored = (self.interval_start, rep.entry.version);
            }
            return;
        }
        // Our store refused the push of this object (the primary sends a push ahead of
        // a write to an object a replica lacks). Applied to the copy we have, stale or
        // none, the write would leave it different while our log says it is the same;
        // refused, it would leave a hole in our log. So only its log entry and PG info
        // are applied (Ceph's log-only op for an object a backfill target has not
        // reached): the object stays missing here, and the primary, told the push was
        // refused, pushes its whole state, this write included, once we have room.
        let log_only = (self.push_refused.get(&rep.entry.oid))
            .is_some_and(|&at| at == self.interval_start)
            && self.missing.contains(&rep.entry.oid);
        // A decoded RepOp holds the only reference; one passed in memory (the
        // simulator) may share it with the primary's other replicas.
        let mut tx = Arc::try_unwrap(rep.tx).unwrap_or_else(|shared| (*shared).clone());
        if log_only {
            reply.log_only = rep.entry.changes_object();
            tracing::debug!(
                "{}: {} applies only its log entry: {} is missing here",
                self.pgid,
                rep.entry.version,
                rep.entry.oid
            );
            tx.ops
                .retain(|op| op.object().is_none_or(|oid| oid.name.is_empty()));
            if reply.log_only {
                // The object now needs this write's version; the log will not say so
                // for ever (see `pg/missing.rs`).
                let need = Some(rep.entry.version);
                let key = crate::pglog::missing_key(&rep.entry.oid);
                let value = crate::pglog::encode_need(need);
                tx.omap_set(self.coll, crate::pglog::pgmeta_oid(), vec![(key, value)]);
            }
        }
        match store.submit(tx) {
            Ok(seq) => {
                if reply.log_only {
                    let name = rep.entry.oid.clone();
                    self.missing_need.insert(name, rep.entry.version);
                }
                self.last_submitted = seq;
                self.info = rep.info;
                self.log.push_trimmed_to(rep.entry, self.info.log_tail);
                self.held_until_commit.push_back(HeldMessage {
                    seq,
                    to: from,
                    reply: Msg::RepOpReply(reply),
                });
            }
            Err(error) => {
                // Nothing was applied (a store transaction is all or nothing): the log
                // keeps no hole, and the primary resends this write until it fits.
                reply.result = Err(store_error(error));
                if reply.result == Err(OpError::NoSpace) {
                    tracing::debug!(
                        "{}: out of space for {} from {from}; it will be resent",
                        self.pgid,
                        rep.entry.version
                    );
                    self.report_urgent = true;
                }
                out.push(peer_output(from, Msg::RepOpReply(reply)));
            }
        }
    }
}
