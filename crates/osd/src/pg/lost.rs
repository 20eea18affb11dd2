//! Giving unfound objects up: `carmine pg mark_unfound_lost PGID delete` (Ceph's
//! `mark_unfound_lost delete`), for objects no OSD that will return holds.
//!
//! The primary logs a removal of each unfound object (a `Delete` entry by the PG's own
//! client id, [`LOST_CLIENT`]) and replicates it like any write: every member's log
//! then says the object is gone, so no later peering looks for it again, and a copy
//! that returns with an older version of it has it removed as a stale copy. What any
//! member still stores of it (an unreadable copy, a stale one) is removed by recovery:
//! the primary pushes its state, absent, to every replica. The operator's answer comes
//! once every member has committed the last removal. Ceph's `revert` (roll back to an
//! older version a copy holds) is not built: Carmine keeps no older versions outside
//! snapshots.

use super::Pg;
use crate::{ClientRef, Output};
use carmine_proto::{LogEntry, LogOp, Msg, OpOutput, OsdOp, OsdOpReply};
use carmine_store::{ObjectStore, Transaction};
use carmine_types::{EVersion, ObjectId, ReqId};

/// The client id of the removals `mark_unfound_lost` logs (no client process uses it).
pub const LOST_CLIENT: u64 = u64::MAX - 1;

impl Pg {
    /// Primary, active: logs the removal of every unfound object and answers `client`
    /// with their names once all are committed (at once when there are none).
    pub(super) fn mark_unfound_lost(
        &mut self,
        store: &mut dyn ObjectStore,
        client: ClientRef,
        op: &OsdOp,
        out: &mut Vec<Output>,
    ) {
        let unfound: Vec<String> = self.unfound_objects().cloned().collect();
        let lost: Vec<(String, EVersion)> = (unfound.into_iter())
            .filter(|name| self.still_unreadable(&*store, name))
            .map(|name| {
                let need = self.version_needed(&*store, &name);
                (name, need.unwrap_or(EVersion::ZERO))
            })
            .collect();
        let reply = OsdOpReply {
            reqid: op.reqid,
            pgid: self.pgid,
            result: Ok(()),
            outputs: vec![OpOutput::Unfound {
                objects: lost.clone(),
                next: None,
            }],
            user_version: 0,
            version: self.info.last_update,
            map_epoch: self.map_epoch,
        };
        if lost.is_empty() {
            out.push(Output::Client(client, Msg::OsdOpReply(reply)));
            return;
        }
        let count = lost.len();
        for (at, (name, need)) in lost.into_iter().enumerate() {
            let version = EVersion {
                epoch: self.map_epoch,
                version: self.info.last_update.version + 1,
            };
            let entry = LogEntry {
                version,
                prior_version: need,
                reqid: ReqId {
                    client: LOST_CLIENT,
                    tid: version.version,
                },
                oid: name.clone(),
                op: LogOp::Delete,
                user_version: version.version,
            };
            let tx = self.forget_object(&*store, &name);
            let last = at + 1 == count;
            let (clients, mut reply) = if last {
                (vec![client], reply.clone())
            } else {
                (Vec::new(), reply.clone())
            };
            reply.version = version;
            if let Err(error) = self.log_lost_removal(store, entry, tx, clients, reply, out) {
                tracing::error!("{}: cannot log the removal of {name}: {error}", self.pgid);
                out.push(self.reply(client, op, Err(error)));
                return;
            }
            tracing::warn!(
                "{}: {name} marked lost (it needed {need}); its removal is logged",
                self.pgid
            );
        }
        self.schedule_recovery(store, out);
    }

    /// Whether our copy of `name` is still missing, absent or unreadable, with no
    /// write to it in flight. Defensive: writes to an unfound object are refused
    /// (`Gate::Unfound`) and a repair takes it off the unfound set, but a removal
    /// based on a stale mark would destroy a good copy.
    fn still_unreadable(&self, store: &dyn ObjectStore, name: &str) -> bool {
        !self.writes_per_object.contains_key(name)
            && (self.missing.contains(name)
                || !store.exists(self.coll, &ObjectId::head(name))
                || self.copy_is_corrupt(store, name))
    }

    /// Drops our bookkeeping of unfound `name` and returns the transaction every
    /// member applies: it removes the head and the clones we know of wherever they are
    /// (created first, so a member without them applies it too) and the object's
    /// missing-set key. Each replica also gets the object's state (absent) by push,
    /// which clears its missing set in memory.
    fn forget_object(&mut self, store: &dyn ObjectStore, name: &str) -> Transaction {
        let mut tx = Transaction::new();
        let clones = crate::snaps::stored_clones(store, self.coll, name);
        for oid in std::iter::once(ObjectId::head(name)).chain(clones) {
            tx.touch(self.coll, oid.clone());
            tx.remove(self.coll, oid);
        }
        let key = crate::pglog::missing_key(name);
        tx.omap_rm(self.coll, crate::pglog::pgmeta_oid(), vec![key]);
        self.missing.remove(name);
        self.missing_need.remove(name);
        self.local_corrupt.remove(name);
        self.unfound.remove(name);
        for replica in self.replicas() {
            (self.peer_missing.entry(replica).or_default()).insert(name.to_string());
            self.replica_corrupt.remove(&(replica, name.to_string()));
        }
        tx
    }
}
