//! Client writes to degraded objects (Ceph's `wait_for_degraded_object`).
//!
//! A replica recovering from the log (not a backfill target) that lacks an object
//! gets it pushed before a client write to it runs, and the write waits for the
//! push's answer. If the replica's store refused the push for want of space, the
//! write is refused with `NoSpace`, as writes are while a member is full: applied, it
//! would rest on the primary's data alone (the replica would log it without the
//! object), and a stale primary overwriting that only copy with a write nobody
//! acknowledged, rolled back by the next peering, then lost it (seed 34338 of
//! expansion, remaps, space and snapshot trims). Ceph holds such a write until its
//! recovery ends; Carmine answers at once, as it does for a full member, rather than
//! stall the PG's writers.
//!
//! Backfill targets, and replicas behind the RepOps they refused, keep the earlier
//! rule: the write goes on, the replica logs it without the data, and it is
//! acknowledged while `min_size` members hold it (Ceph's backfill and asynchronous
//! recovery likewise keep writing to the complete copies). So does a removal: its
//! entry is all any copy needs of it, and refusing it would refuse the very deletes
//! that free a full store.

use super::Pg;
use crate::Output;
use carmine_store::ObjectStore;

/// What a client write to an object must do first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DegradedWrite {
    /// Go on: no recovering replica lacks the object.
    Go,
    /// Wait for a push of the object to a replica, or for our own copy's repair.
    Wait,
    /// A replica's store refused the object's push for want of space.
    NoRoom,
    /// A replica lacks the object and our copy is unreadable, with no repair.
    Unfound,
}

impl Pg {
    /// Primary, before a client write to `name` (`removal`: one that only removes
    /// it): see the module docs. Backfill targets and replicas behind, and every
    /// replica for a removal, get the object pushed ahead of the write on the same
    /// ordered session, as before (`Pg::push_before_write`).
    pub(super) fn degraded_write(
        &mut self,
        store: &dyn ObjectStore,
        name: &str,
        removal: bool,
        out: &mut Vec<Output>,
    ) -> DegradedWrite {
        if removal {
            return match self.push_before_write(store, name, out) {
                true => DegradedWrite::Go,
                false => self.repairing_or_unfound(name),
            };
        }
        let mut gate = DegradedWrite::Go;
        for replica in self.replicas() {
            // Looked up first: a replica lacks nothing on nearly every write.
            let lacks = (self.peer_missing.get(&replica)).is_some_and(|m| m.contains(name));
            let pushing = (self.pushing.get(&replica)).is_some_and(|p| p.contains_key(name));
            if !lacks && !pushing {
                continue;
            }
            if self.backfilling.contains(&replica) || self.replica_behind(replica) {
                if lacks && !self.push_ahead(store, replica, name, out) {
                    return self.repairing_or_unfound(name);
                }
                continue;
            }
            if pushing {
                gate = DegradedWrite::Wait;
                continue;
            }
            let refused = (replica, name.to_string());
            if self.pushes_refused_for_space.contains(&refused) {
                return DegradedWrite::NoRoom;
            }
            if !self.push_ahead(store, replica, name, out) {
                return self.repairing_or_unfound(name);
            }
            gate = DegradedWrite::Wait;
        }
        gate
    }

    /// Pushes `name` to `replica`, which lacks it; `false` when our copy is unreadable
    /// (its repair starts, and the replica still lacks it).
    pub(super) fn push_ahead(
        &mut self,
        store: &dyn ObjectStore,
        replica: carmine_types::OsdId,
        name: &str,
        out: &mut Vec<Output>,
    ) -> bool {
        let lacked = (self.peer_missing.get_mut(&replica)).is_some_and(|m| m.remove(name));
        if lacked && !self.push_now(store, replica, name, out) {
            (self.peer_missing.entry(replica).or_default()).insert(name.to_string());
            return false;
        }
        true
    }

    fn repairing_or_unfound(&self, name: &str) -> DegradedWrite {
        if self.repairs.contains_key(name) {
            DegradedWrite::Wait
        } else {
            DegradedWrite::Unfound
        }
    }
}
