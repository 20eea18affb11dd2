//! The replacement fault class: an OSD's disk dies and is replaced. The process stops
//! at once (a crash), every one of its stores is swapped for an empty one, and after
//! 0.5–6 s the operator starts the OSD again under the same id on the new disks, as
//! one redeploys `osd.N` on a new device (`ceph-volume lvm create --osd-id N`). A
//! third of the time it just starts it; a third of the time it first declares the old
//! disk's data lost (`osd lost N`, once the map shows the OSD down) and starts it
//! only once the map shows the mark; and a third of the time it purges the OSD (`osd
//! purge N --force`: gone from the map and CRUSH, its data given up) and starts it
//! once the map no longer has it, so that it joins as a new OSD under the old id, as
//! Ceph's replacement procedures destroy or purge the old OSD before redeploying.
//!
//! A disk dies only while the cluster has converged (every PG active+clean with all
//! its copies, every OSD up on the newest map, no unhealed bit flip), and only one at
//! a time: then every acknowledged write is on every copy, and the copies on the
//! other disks survive. A second disk lost before the first is recovered would be
//! data loss that no replication survives, which is not what this class tests. What
//! it tests: an empty copy under a known OSD id must never stand in for the history
//! the old disk held (peering must not count the new disk as a member of the
//! intervals the old one served), the PGs must backfill it, and with the `lost`
//! mark peering goes on without the old disk where it may.
//!
//! Replacements run on their own schedule and random stream (a fork of the seed), so
//! seeds without the class run exactly as before. Not part of `--faults all`:
//! `--faults all,replacements` adds it.

use crate::events::Event;
use crate::osd_node::{fresh_disks, Process};
use crate::rng::Rng;
use crate::sim::{Phase, Sim};
use crate::time::{Nanos, MILLISECOND, SECOND};
use carmine_proto::Command;
use carmine_types::{Epoch, OsdId};

/// Mean time between the operator's looks for a disk to fail.
pub const REPLACEMENT_INTERVAL_MEAN: Nanos = 2 * SECOND;
/// How often a replacement waiting for the `lost` mark or the purge looks at the map
/// again.
pub const LOST_POLL: Nanos = 100 * MILLISECOND;
/// How long the operator waits for the map to show the `lost` mark or the purge
/// before sending the command again.
pub const LOST_RESEND_AFTER: Nanos = SECOND;
/// The operator's command tids for replacements start here (above the remap class's,
/// whose replies the clients route the same way: traced only).
pub const TID_BASE: u64 = 1 << 42;

/// What the operator does about the dead disk before it starts the OSD on the new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Before {
    Nothing,
    /// `osd lost N`.
    MarkLost,
    /// `osd purge N --force`.
    Purge,
}

/// A disk replaced whose OSD has not started on the new one yet.
#[derive(Debug, Clone, Copy)]
struct Pending {
    osd: OsdId,
    /// The newest map's epoch when the disk died.
    died_at: Epoch,
    before: Before,
    /// When the operator's command last went out.
    sent_at: Option<Nanos>,
}

#[derive(Debug)]
pub struct ReplacementState {
    rng: Rng,
    pending: Option<Pending>,
    next_tid: u64,
    /// Disks replaced so far, and OSDs the operator marked lost or purged first.
    pub replaced: u64,
    pub marked_lost: u64,
    pub purged: u64,
}

impl ReplacementState {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Rng::new(seed).fork(0x5245_504c), // "REPL"
            pending: None,
            next_tid: TID_BASE,
            replaced: 0,
            marked_lost: 0,
            purged: 0,
        }
    }
}

impl Sim {
    /// At the start of the workload: the first look for a disk to fail.
    pub(crate) fn start_replacements(&mut self) {
        if self.config.faults.replacements {
            let first = self.replacements.rng.exponential(REPLACEMENT_INTERVAL_MEAN);
            self.schedule(first, Event::DiskDies);
        }
    }

    /// A random up OSD's disks die, if the cluster has converged and no replacement
    /// is under way; the OSD stops and its stores are swapped for empty ones.
    pub(crate) fn disk_dies(&mut self) {
        if self.phase != Phase::Faults {
            return;
        }
        let next = self.replacements.rng.exponential(REPLACEMENT_INTERVAL_MEAN);
        self.schedule(next, Event::DiskDies);
        if self.replacements.pending.is_some() {
            return;
        }
        if let Some(problem) = self.convergence_problem() {
            self.trace.note(self.now(), || {
                format!("replacements: no disk dies while not converged ({problem})")
            });
            return;
        }
        let osds: Vec<OsdId> = self.osds.keys().copied().collect();
        let osd = osds[self.replacements.rng.index(osds.len())];
        if self.decommissioned() == Some(osd) {
            return;
        }
        let before =
            [Before::Nothing, Before::MarkLost, Before::Purge][self.replacements.rng.index(3)];
        let downtime = self.replacements.rng.between(SECOND / 2, 6 * SECOND);
        self.crash_osd(osd);
        let config = &self.config;
        let generation = self.replacements.replaced + 1;
        let disks = fresh_disks(
            osd,
            config.shards_per_osd,
            config.disk,
            config.seed,
            config.canary == crate::Canary::AckBeforeSync,
            generation,
        );
        let node = self.osds.get_mut(&osd).expect("exists");
        node.process = Process::Down(disks);
        self.replacements.replaced += 1;
        self.replacements.pending = Some(Pending {
            osd,
            died_at: self.newest_map.epoch,
            before,
            sent_at: None,
        });
        self.schedule(downtime, Event::ReplacementStarts(osd));
        self.record_side_fault(format!(
            "disk of {osd} dies; replaced by an empty one, {osd} starts on it in {}ms{}",
            downtime / MILLISECOND,
            match before {
                Before::Nothing => "",
                Before::MarkLost => " once the operator has marked it lost",
                Before::Purge => " once the operator has purged it",
            }
        ));
    }

    /// The operator starts the OSD on its new disk, or, if it is to mark the old one
    /// lost or purge it first and the map does not show that yet, sends the command
    /// (once the map shows the OSD down) and looks again shortly.
    pub(crate) fn replacement_starts(&mut self, osd: OsdId) {
        let Some(mut pending) = self.replacements.pending.filter(|p| p.osd == osd) else {
            return;
        };
        if self.osds[&osd].is_up() {
            // Started some other way (the heal restarts every down OSD).
            self.replacements.pending = None;
            return;
        }
        let command = match pending.before {
            Before::MarkLost if !self.lost_since(osd, pending.died_at) => {
                Some(Command::OsdLost { osd, confirm: true })
            }
            Before::Purge if self.newest_map.osd(osd).is_some() => Some(Command::OsdPurge {
                osd,
                confirm: true,
                force: true,
            }),
            _ => None,
        };
        if let Some(command) = command {
            let now = self.now();
            let due = (pending.sent_at).is_none_or(|at| now >= at + LOST_RESEND_AFTER);
            let down_in_map = self.newest_map.osd(osd).is_some_and(|info| !info.up);
            let tid = self.replacements.next_tid;
            if due && down_in_map && self.send_operator_command(tid, command) {
                self.replacements.next_tid += 1;
                pending.sent_at = Some(now);
            }
            self.replacements.pending = Some(pending);
            self.schedule(LOST_POLL, Event::ReplacementStarts(osd));
            return;
        }
        match pending.before {
            Before::Nothing => {}
            Before::MarkLost => self.replacements.marked_lost += 1,
            Before::Purge => self.replacements.purged += 1,
        }
        self.replacements.pending = None;
        self.record_side_fault(format!("operator: starts {osd} on its new disk"));
        self.restart_osd(osd);
    }

    /// Whether the newest map shows `osd` marked lost after epoch `since`.
    fn lost_since(&self, osd: OsdId, since: Epoch) -> bool {
        (self.newest_map.osd(osd)).is_some_and(|info| info.lost_at > since)
    }

    /// The faults end: a replacement under way is over (the heal starts the OSD on
    /// its new disk, marked lost or purged or not).
    pub(crate) fn end_replacements(&mut self) {
        self.replacements.pending = None;
    }
}
