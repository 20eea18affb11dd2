//! Snapshot trimming: the primary deletes the clones of snapshots the pool has
//! removed, in the background and a bounded amount per shard turn.
//!
//! A pass walks the PG's objects with a cursor, [`SNAP_TRIM_SCAN_MAX`] per step, and
//! for each head whose clones serve a removed snap starts a trim write (at most
//! [`SNAP_TRIM_WRITES_MAX`] per step). A trim write is an ordinary PG write of the
//! head — logged, replicated, answered to nobody — so replicas apply the same
//! deletions and recovery sees the head as changed. When a pass ends, every snap
//! removed when it began is trimmed; snaps removed since start another pass. A copy
//! that becomes primary trims from scratch, since it cannot know what its
//! predecessor finished.

use super::Pg;
use crate::exec::{self, Execution};
use crate::snaps;
use crate::Output;
use carmine_store::ObjectStore;
use carmine_types::{EVersion, ObjectId, ReqId, SnapId};
use std::collections::BTreeSet;

/// Objects one trim step examines.
pub const SNAP_TRIM_SCAN_MAX: usize = 256;
/// Trim writes one step may start.
pub const SNAP_TRIM_WRITES_MAX: usize = 16;
/// The client id of the PG's own trim writes (no client process uses it).
pub const SNAP_TRIM_CLIENT: u64 = u64::MAX;

/// A trim pass in progress.
#[derive(Debug, Clone, Default)]
pub(crate) struct TrimPass {
    /// The removed snaps this pass trims.
    target: BTreeSet<u64>,
    /// The last object examined.
    cursor: Option<ObjectId>,
    /// An object was passed over (its copy here is under repair): the pass does not
    /// complete the target, and another follows.
    skipped: bool,
}

impl Pg {
    /// Whether every removed snapshot of the pool is trimmed here (as far as this
    /// copy knows: only a primary trims).
    pub fn snap_trim_idle(&self) -> bool {
        self.pool.removed_snaps.len() == self.snap_trimmed.len()
    }

    /// Forgets trim progress (a new interval: another primary may have trimmed).
    pub(super) fn reset_snap_trim(&mut self) {
        self.snap_trimmed.clear();
        self.snap_trim_pass = None;
    }

    /// One bounded trim step. Returns whether to call again: work remains, or the
    /// primary is not active yet.
    pub fn snap_trim_step(&mut self, store: &mut dyn ObjectStore, out: &mut Vec<Output>) -> bool {
        if !self.is_primary() || self.snap_trim_idle() {
            return false;
        }
        // As Ceph (`kick_snap_trim`), only a clean PG trims: a trim is a write of the
        // object, and a copy still to be recovered, here or on a replica, would take
        // it on a stale object (or on none) and end up different.
        if !self.is_active() || !self.is_clean() {
            return true;
        }
        let mut pass = self.snap_trim_pass.take().unwrap_or_else(|| TrimPass {
            target: self.pool.removed_snaps.clone(),
            cursor: None,
            skipped: false,
        });
        let page = match store.list_objects(self.coll, pass.cursor.as_ref(), SNAP_TRIM_SCAN_MAX) {
            Ok(page) => page,
            Err(error) => {
                tracing::error!("{}: snap trim cannot list objects: {error}", self.pgid);
                self.snap_trim_pass = Some(pass);
                return true;
            }
        };
        if page.is_empty() && pass.skipped {
            // Objects were passed over: the pass completes nothing, and a new one
            // starts at the next step (with what the map shows removed by then).
            return true;
        }
        if page.is_empty() {
            // The pass is complete.
            self.snap_trimmed = pass.target;
            return !self.snap_trim_idle();
        }
        // Objects are trimmed of every snap the map shows removed now, not only of
        // those the pass set out to trim: a trim entry then does exactly what the map
        // of its epoch says (the simulator's checker relies on it), and no object
        // needs a second write for a snap removed mid-pass.
        let removed = self.pool.removed_snaps.clone();
        let mut started = 0;
        for oid in page {
            pass.cursor = Some(oid.clone());
            if oid.name.is_empty() || oid.snap != SnapId::HEAD {
                continue;
            }
            // A copy of ours found corrupt or known stale waits for its repair, as a
            // client write does: the repair replaces it with another copy's state,
            // which a trim made here first would not be in.
            let waits = self.repairs.contains_key(&oid.name)
                || self.local_corrupt.contains(&oid.name)
                || self.lacks(&oid.name);
            if waits {
                pass.skipped = true;
                continue;
            }
            if self.trim_one(store, &oid.name, &removed, out) {
                started += 1;
            }
            let room = self.in_flight.len() < self.tuning.in_flight_writes_max / 2;
            if started >= SNAP_TRIM_WRITES_MAX || !room {
                break;
            }
        }
        self.snap_trim_pass = Some(pass);
        true
    }

    /// Starts the trim write of `name`, if its clones serve any of `removed`.
    fn trim_one(
        &mut self,
        store: &mut dyn ObjectStore,
        name: &str,
        removed: &BTreeSet<u64>,
        out: &mut Vec<Output>,
    ) -> bool {
        let trim = match snaps::trim_object(store, self.coll, name, removed) {
            Ok(Some(trim)) => trim,
            Ok(None) => return false,
            Err(error) => {
                tracing::error!("{}: cannot trim {name}: {error}", self.pgid);
                return false;
            }
        };
        let before = match exec::load_object(store, self.coll, &ObjectId::head(name)) {
            Ok(before) => before,
            Err(error) => {
                tracing::error!("{}: cannot trim {name}: {error}", self.pgid);
                return false;
            }
        };
        let run = Execution {
            outputs: Vec::new(),
            tx: trim.tx,
            before,
            exists_after: before.exists,
            size_after: before.size_bytes,
            wrote: true,
            clones_made: Default::default(),
            clones_dropped: trim.clones_removed,
        };
        let version = EVersion {
            epoch: self.map_epoch,
            version: self.info.last_update.version + 1,
        };
        let reqid = ReqId {
            client: SNAP_TRIM_CLIENT,
            tid: version.version,
        };
        match self.submit_write(store, reqid, name, run, version, Vec::new(), out) {
            Ok(()) => {
                tracing::debug!(
                    "{}: trimmed {} clones of {name}{}",
                    self.pgid,
                    trim.clones_removed.objects,
                    if trim.removed_head {
                        " and its whiteout"
                    } else {
                        ""
                    }
                );
                true
            }
            Err(error) => {
                tracing::error!("{}: trim of {name} failed: {error}", self.pgid);
                false
            }
        }
    }
}
