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

use super::{peer_output, Pg, Phase};
use crate::pglog::missing_key;
use crate::Output;
use carmine_proto::{Msg, ObjectCopy, ObjectState, PgPull, PgPush, PgPushReply};
use carmine_store::{ObjectStore, Transaction};
use carmine_types::{ObjectId, OsdId};
use std::collections::BTreeSet;

/// Pushes a primary keeps in flight to one replica (recovery is throttled so client
/// IO keeps most of the shard).
pub const PUSHES_IN_FLIGHT_MAX: usize = 4;
/// Objects per push message when answering a pull.
pub const OBJECTS_PER_PUSH_MAX: usize = 16;

impl Pg {
    /// Reads one object's whole state from our store.
    pub(super) fn object_copy(&self, store: &dyn ObjectStore, name: &str) -> ObjectCopy {
        let oid = ObjectId::head(name);
        let state = store.stat(self.coll, &oid).ok().map(|stat| {
            let data = store
                .read(self.coll, &oid, 0, stat.size_bytes)
                .unwrap_or_default();
            let xattrs = store.getxattrs(self.coll, &oid).unwrap_or_default();
            let omap = store
                .omap_list(self.coll, &oid, None, usize::MAX)
                .unwrap_or_default();
            ObjectState {
                data,
                mtime_ns: stat.mtime_ns,
                xattrs,
                omap,
            }
        });
        ObjectCopy {
            oid: name.to_string(),
            state,
        }
    }

    /// Replaces our copies of `objects` and forgets them as missing, in one transaction.
    fn apply_copies(&mut self, store: &mut dyn ObjectStore, objects: Vec<ObjectCopy>) {
        let mut tx = Transaction::new();
        let mut recovered = Vec::new();
        for copy in objects {
            let oid = ObjectId::head(copy.oid.clone());
            if store.exists(self.coll, &oid) {
                tx.remove(self.coll, oid.clone());
            }
            if let Some(state) = copy.state {
                tx.touch(self.coll, oid.clone());
                if !state.data.is_empty() {
                    tx.write(self.coll, oid.clone(), 0, state.data);
                }
                for (name, value) in state.xattrs {
                    tx.set_xattr(self.coll, oid.clone(), name, value);
                }
                if !state.omap.is_empty() {
                    tx.omap_set(self.coll, oid.clone(), state.omap);
                }
                tx.set_mtime(self.coll, oid, state.mtime_ns);
            }
            if self.missing.remove(&copy.oid) {
                recovered.push(missing_key(&copy.oid));
            }
        }
        if !recovered.is_empty() {
            tx.omap_rm(self.coll, crate::pglog::pgmeta_oid(), recovered);
        }
        self.submit_meta(store, tx);
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
            self.activate_replicas(store, out);
            return;
        }
        self.pulling = names.clone();
        let pull = Msg::PgPull(PgPull {
            pgid: self.pgid,
            interval: self.interval_start,
            map_epoch: self.map_epoch,
            oids: names.into_iter().collect(),
            all,
        });
        out.push(peer_output(source, pull));
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
        let chunks: Vec<&[String]> = names.chunks(self.tuning.objects_per_push_max).collect();
        let chunk_count = chunks.len().max(1);
        for index in 0..chunk_count {
            let objects = chunks
                .get(index)
                .map(|chunk| chunk.iter().map(|n| self.object_copy(store, n)).collect())
                .unwrap_or_default();
            let last = (index + 1 == chunk_count).then(|| names.clone());
            let push = Msg::PgPush(PgPush {
                pgid: self.pgid,
                interval: pull.interval,
                map_epoch: self.map_epoch,
                objects,
                last,
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
        if self.primary != Some(from) {
            return;
        }
        let oids: Vec<String> = push.objects.iter().map(|o| o.oid.clone()).collect();
        self.apply_copies(store, push.objects);
        self.replica_acks.push_back(super::ReplicaAck {
            seq: self.last_submitted,
            primary: from,
            reply: Msg::PgPushReply(PgPushReply {
                pgid: self.pgid,
                interval: push.interval,
                map_epoch: self.map_epoch,
                oids,
            }),
        });
    }

    fn receive_pulled(
        &mut self,
        store: &mut dyn ObjectStore,
        push: PgPush,
        all: bool,
        out: &mut Vec<Output>,
    ) {
        for copy in &push.objects {
            self.pulling.remove(&copy.oid);
        }
        self.apply_copies(store, push.objects);
        let Some(names) = push.last else { return };
        if all {
            let keep: BTreeSet<String> = names.into_iter().collect();
            let mut tx = Transaction::new();
            for name in self.all_objects(store).difference(&keep) {
                tx.remove(self.coll, ObjectId::head(name.clone()));
            }
            // Complete now: the copy may be trusted again.
            if self.missing.remove(crate::pglog::MISSING_ALL) {
                let key = missing_key(crate::pglog::MISSING_ALL);
                tx.omap_rm(self.coll, crate::pglog::pgmeta_oid(), vec![key]);
            }
            self.submit_meta(store, tx);
        }
        if !self.pulling.is_empty() {
            tracing::error!(
                "{}: the source lacks {} objects; they are unfound",
                self.pgid,
                self.pulling.len()
            );
            self.pulling.clear();
        }
        self.missing.clear();
        self.activate_replicas(store, out);
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
        if let Some(pushing) = self.pushing.get_mut(&from) {
            for oid in &reply.oids {
                pushing.remove(oid);
            }
        }
        for write in self.in_flight.iter_mut() {
            if reply.oids.contains(&write.oid) && write.is_write {
                write.waiting_on.remove(&from);
            }
        }
        if self.peer_missing.get(&from).is_some_and(BTreeSet::is_empty)
            && self.pushing.get(&from).is_none_or(BTreeSet::is_empty)
        {
            self.backfilling.remove(&from);
        }
        self.schedule_recovery(store, out);
        self.complete_writes(store, out);
    }

    /// Primary: keep up to the limit of pushes in flight to each replica.
    pub(super) fn schedule_recovery(&mut self, store: &mut dyn ObjectStore, out: &mut Vec<Output>) {
        if self.phase != Phase::Active {
            return;
        }
        for replica in self.replicas() {
            loop {
                let in_flight = self.pushing.get(&replica).map_or(0, BTreeSet::len);
                if in_flight >= self.tuning.pushes_in_flight_max {
                    break;
                }
                let Some(name) = self
                    .peer_missing
                    .get_mut(&replica)
                    .and_then(|m| m.pop_first())
                else {
                    break;
                };
                self.push_now(store, replica, &name, out);
            }
        }
    }

    fn push_now(
        &mut self,
        store: &dyn ObjectStore,
        replica: OsdId,
        name: &str,
        out: &mut Vec<Output>,
    ) {
        let copy = self.object_copy(store, name);
        self.pushing
            .entry(replica)
            .or_default()
            .insert(name.to_string());
        let push = Msg::PgPush(PgPush {
            pgid: self.pgid,
            interval: self.interval_start,
            map_epoch: self.map_epoch,
            objects: vec![copy],
            last: None,
        });
        out.push(peer_output(replica, push));
    }

    /// Primary, before a write to `name`: replicas still missing it get it now, ahead of
    /// the write on the same ordered session.
    pub(super) fn push_before_write(
        &mut self,
        store: &dyn ObjectStore,
        name: &str,
        out: &mut Vec<Output>,
    ) {
        for replica in self.replicas() {
            let missing = self
                .peer_missing
                .get_mut(&replica)
                .is_some_and(|m| m.remove(name));
            if missing {
                self.push_now(store, replica, name, out);
            }
        }
    }
}
