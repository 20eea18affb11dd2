//! `--snap-trim`: clients remove snapshots through the monitor (Ceph's
//! `selfmanaged_snap_remove`), and the simulator records when each removal reached
//! the maps, so that the checkers know which snapshots a primary dropped from a
//! write's context and trimmed at each log entry (both follow the primary's map, and
//! a log entry's version names that map's epoch).
//!
//! A removal is first taken out of the live snapshots, so no read starts at it any
//! more; clients that have not refreshed their context still write under it, as an
//! image writer that has not reread its header does. The request goes to the
//! monitor on the remover's session and is sent again, by whichever client has a
//! session, until the monitor answers it.

use crate::sim::Sim;
use crate::time::{Nanos, SECOND};
use carmine_clustermap::OsdMap;
use carmine_proto::{Command, MonCommand, MonCommandReply, Msg};
use carmine_types::{Epoch, PoolId};
use std::collections::{BTreeMap, BTreeSet};

/// How long a removal waits for the monitor's answer before it is sent again.
pub const RESEND_AFTER: Nanos = SECOND;
/// A removal's command tid: the snap id plus this, so replies name their snapshot.
const TID_BASE: u64 = 1 << 40;

/// The removals asked for and the epochs at which the maps show them.
#[derive(Debug, Default)]
pub struct SnapRemovals {
    /// Removals the monitor has not answered yet, with when each was last sent.
    pending: BTreeMap<u64, Option<Nanos>>,
    /// Each removed snapshot with the oldest epoch whose map shows it removed.
    removed_at: BTreeMap<u64, Epoch>,
}

impl SnapRemovals {
    /// Notes what a map a monitor applied shows removed.
    pub fn record_map(&mut self, map: &OsdMap, pool: PoolId) {
        let Some(pool) = map.pools.get(&pool) else {
            return;
        };
        for &snap in &pool.removed_snaps {
            let at = self.removed_at.entry(snap).or_insert(map.epoch);
            *at = (*at).min(map.epoch);
        }
    }

    /// Each removed snapshot with the first epoch that shows it.
    pub fn removed_at(&self) -> &BTreeMap<u64, Epoch> {
        &self.removed_at
    }

    pub fn removed_count(&self) -> u64 {
        self.removed_at.len() as u64
    }

    /// Whether a removal still waits for the monitor.
    pub fn any_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}

/// The snapshots removed in the map of `epoch`.
pub fn removed_in(removed_at: &BTreeMap<u64, Epoch>, epoch: Epoch) -> BTreeSet<u64> {
    removed_at
        .iter()
        .filter(|(_, &at)| at <= epoch)
        .map(|(&snap, _)| snap)
        .collect()
}

impl Sim {
    /// `--snap-trim`: now and then client `index` removes one of the live snapshots
    /// (never the only one, so reads at snapshots go on).
    pub(crate) fn snap_remove_step(&mut self, index: u32) {
        if self.live_snaps.len() < 2 || !self.workload_rng.chance(1, 50) {
            return;
        }
        let snap = self
            .live_snaps
            .remove(self.workload_rng.index(self.live_snaps.len()));
        let now = self.clock.now();
        self.trace
            .note(now, || format!("client{index} removes snapshot {snap}"));
        self.snap_removals.pending.insert(snap, None);
        self.send_snap_removals(index);
    }

    /// Sends, on client `index`'s monitor session, the removals not sent within
    /// [`RESEND_AFTER`].
    pub(crate) fn send_snap_removals(&mut self, index: u32) {
        let Some(session) = self.clients[index as usize].mon_session else {
            return;
        };
        let now = self.clock.now();
        let due: Vec<u64> = (self.snap_removals.pending.iter())
            .filter(|(_, sent)| sent.is_none_or(|at| now >= at + RESEND_AFTER))
            .map(|(&snap, _)| snap)
            .collect();
        let pool = self.newest_map.pools[&self.pool].name.clone();
        for snap in due {
            self.snap_removals.pending.insert(snap, Some(now));
            let command = Command::PoolSnapRemove {
                pool: pool.clone(),
                snap,
            };
            let msg = Msg::MonCommand(MonCommand {
                tid: TID_BASE + snap,
                command,
            });
            self.send_session(session, crate::network::Endpoint::Client(index), msg);
        }
    }

    /// The monitor's answer to a removal. "Already removed" answers a resend whose
    /// first copy got through; any other error leaves the removal pending.
    pub(crate) fn snap_removal_answered(&mut self, index: u32, reply: MonCommandReply) {
        let Some(snap) = reply.tid.checked_sub(TID_BASE) else {
            return;
        };
        let done = match &reply.result {
            Ok(_) => true,
            Err(error) => error.contains("already removed"),
        };
        let now = self.clock.now();
        self.trace.note(now, || {
            format!(
                "client{index}: the monitor answers the removal of snapshot {snap}: {:?}",
                reply.result
            )
        });
        if done {
            self.snap_removals.pending.remove(&snap);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removal_counts_from_the_oldest_map_that_shows_it() {
        let removed_at = BTreeMap::from([(3, Epoch(7)), (5, Epoch(9))]);
        assert!(removed_in(&removed_at, Epoch(6)).is_empty());
        assert_eq!(removed_in(&removed_at, Epoch(7)), BTreeSet::from([3]));
        assert_eq!(removed_in(&removed_at, Epoch(12)), BTreeSet::from([3, 5]));
    }
}
