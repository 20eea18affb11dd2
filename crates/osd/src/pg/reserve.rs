//! Recovery and backfill reservations, the primary's side (Ceph's
//! `WaitLocalBackfillReserved` → `WaitRemoteBackfillReserved` → `Backfilling`, and the
//! same for recovery). See `crate::reserver` for the shard's reservers.
//!
//! An active primary with objects to push in the background asks its shard for a
//! local slot, then each target (every replica missing something) for a remote slot,
//! one at a time in OSD id order, and pushes only once it holds them all; meanwhile it
//! shows `backfill_wait` or `recovery_wait`. It releases them when nothing is left to
//! push, and on any interval change.
//!
//! What clients wait on never waits for a reservation: the object of a write that
//! reaches a missing object, the objects of writes carried over from the previous
//! interval, repairs of the primary's own corrupt copies and the pulls a primary
//! makes before it activates all go at once (Ceph likewise recovers an object a blocked op needs
//! ahead of the queue). A scrub that finds a replica's copy corrupt while the PG holds
//! its reservation has the copy pushed under it even if that replica was not a target.
//!
//! A request or a grant lost with a session (or a target that restarted within the
//! interval) is sent again after [`PEERING_RESEND_INTERVAL`] without an answer; a
//! target answers a resent request it granted with another grant. A rejection (the
//! target's map says our interval is over) releases everything and tries again after
//! the same interval, by which time the new map has usually arrived.

use super::peering::PEERING_RESEND_INTERVAL;
use super::{peer_output, Pg, Phase};
use crate::reserver::LocalOp;
use crate::Output;
use carmine_proto::{Msg, PgReserve, ReserveKind};
use carmine_store::ObjectStore;
use carmine_types::{Epoch, OsdId};
use std::collections::BTreeSet;
use std::time::Instant;

/// Ceph's priorities (`OSD_BACKFILL_PRIORITY_BASE`, `OSD_BACKFILL_DEGRADED_PRIORITY_BASE`,
/// `OSD_RECOVERY_PRIORITY_BASE`): higher goes first.
pub const BACKFILL_PRIORITY: u8 = 100;
pub const BACKFILL_DEGRADED_PRIORITY: u8 = 140;
pub const RECOVERY_PRIORITY: u8 = 180;
/// Highest priority a PG asks for (Ceph's `OSD_RECOVERY_PRIORITY_MAX`).
pub const PRIORITY_MAX: u8 = 253;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum Step {
    /// Holds and wants nothing.
    #[default]
    Idle,
    /// Waits for the shard's local slot.
    WaitLocal,
    /// Holds the local slot and the remote slots of `granted`; waits for `asked`'s,
    /// then asks `left`, in order.
    WaitRemote {
        asked: OsdId,
        left: BTreeSet<OsdId>,
        granted: BTreeSet<OsdId>,
    },
    /// Holds every slot it needs: pushes.
    Reserved { granted: BTreeSet<OsdId> },
    /// A target rejected the request: holds nothing, tries again later.
    Backoff,
}

/// A primary's reservation state.
#[derive(Debug, Default)]
pub(crate) struct Reservation {
    step: Step,
    /// The interval and round the step belongs to.
    interval: Epoch,
    round: u32,
    priority: u8,
    /// What the shard's local reserver must do for us, in order.
    local_ops: Vec<LocalOp>,
    /// Since when the step waits on a target (or backs off), for resends.
    since: Option<Instant>,
}

impl Pg {
    /// The shard's next local-reserver operation for this PG.
    pub(crate) fn take_local_op(&mut self) -> Option<LocalOp> {
        if self.reservation.local_ops.is_empty() {
            return None;
        }
        Some(self.reservation.local_ops.remove(0))
    }

    pub(crate) fn has_local_ops(&self) -> bool {
        !self.reservation.local_ops.is_empty()
    }

    /// Whether this PG holds or waits for a local slot.
    pub(crate) fn wants_local_reservation(&self) -> bool {
        matches!(
            self.reservation.step,
            Step::WaitLocal | Step::WaitRemote { .. } | Step::Reserved { .. }
        )
    }

    /// Whether the PG waits for a reservation (`backfill_wait`/`recovery_wait`).
    pub(crate) fn waiting_for_reservation(&self) -> bool {
        matches!(
            self.reservation.step,
            Step::WaitLocal | Step::WaitRemote { .. } | Step::Backoff
        )
    }

    /// Whether the PG holds every slot it needs to push in the background.
    pub fn recovery_reserved(&self) -> bool {
        matches!(self.reservation.step, Step::Reserved { .. })
    }

    /// The primary this copy follows in its current interval.
    pub(crate) fn leader(&self) -> Option<OsdId> {
        self.primary
    }

    pub(crate) fn interval_start(&self) -> Epoch {
        self.interval_start
    }

    /// Ceph's rule: recovery (log-based) before backfill; an undersized PG before a
    /// merely misplaced one, the more so the more copies it lacks.
    fn reservation_priority(&self) -> u8 {
        let size = usize::from(self.pool.size);
        let lacking = size.saturating_sub(self.acting.len()) as u8;
        let base = if !self.backfilling.is_empty() && lacking == 0 {
            BACKFILL_PRIORITY
        } else if !self.backfilling.is_empty() {
            BACKFILL_DEGRADED_PRIORITY
        } else {
            RECOVERY_PRIORITY
        };
        base.saturating_add(lacking).min(PRIORITY_MAX)
    }

    /// Replicas with objects to push in the background.
    fn reservation_targets(&self) -> BTreeSet<OsdId> {
        (self.peer_missing.iter())
            .filter(|(osd, missing)| !missing.is_empty() && self.acting.contains(osd))
            .map(|(osd, _)| *osd)
            .collect()
    }

    /// Called by `schedule_recovery`: whether background pushes may go out now. With
    /// work and no reservation it starts asking; with no work left it releases.
    pub(super) fn reserve_for_recovery(&mut self, out: &mut Vec<Output>) -> bool {
        if self.phase != Phase::Active || !self.is_primary() {
            return false;
        }
        let work = self.peer_missing.values().any(|m| !m.is_empty());
        let pushing = self.pushing.values().any(|p| !p.is_empty());
        if !work && !pushing {
            self.release_reservation(out);
            return false;
        }
        match self.reservation.step {
            Step::Reserved { .. } => true,
            Step::Idle if work => {
                self.reservation.round += 1;
                self.reservation.interval = self.interval_start;
                self.reservation.priority = self.reservation_priority();
                self.reservation.since = None;
                self.reservation.step = Step::WaitLocal;
                let priority = self.reservation.priority;
                self.reservation
                    .local_ops
                    .push(LocalOp::Request { priority });
                false
            }
            _ => false,
        }
    }

    /// The shard granted the local slot: ask the first target. Returns `false` if
    /// this PG no longer wants it (the shard takes it back).
    pub(crate) fn local_reservation_granted(&mut self, out: &mut Vec<Output>) -> bool {
        if self.reservation.step != Step::WaitLocal {
            return false;
        }
        if self.reservation.interval != self.interval_start
            || !self.is_primary()
            || self.phase != Phase::Active
        {
            // Cannot happen (an interval change releases), but never wait for ever.
            self.reservation.step = Step::Idle;
            return false;
        }
        let mut left = self.reservation_targets();
        let Some(first) = left.pop_first() else {
            // Nothing left to push after all (urgent pushes took it): give it back.
            self.reservation.step = Step::Idle;
            return false;
        };
        self.reservation.step = Step::WaitRemote {
            asked: first,
            left,
            granted: BTreeSet::new(),
        };
        self.reservation.since = None;
        self.send_reserve(first, ReserveKind::Request, out);
        true
    }

    /// A target answers our request.
    pub fn handle_reserve(
        &mut self,
        store: &mut dyn ObjectStore,
        from: OsdId,
        answer: PgReserve,
        out: &mut Vec<Output>,
    ) {
        let current = answer.interval == self.reservation.interval
            && answer.round == self.reservation.round
            && self.interval_start == self.reservation.interval
            && self.is_primary();
        match answer.kind {
            ReserveKind::Grant if !current => {
                // An answer to a round we gave up: give the slot back at once.
                let release = Msg::PgReserve(PgReserve {
                    map_epoch: self.map_epoch,
                    kind: ReserveKind::Release,
                    ..answer
                });
                out.push(peer_output(from, release));
            }
            ReserveKind::Grant => {
                let Step::WaitRemote {
                    asked,
                    left,
                    granted,
                } = &mut self.reservation.step
                else {
                    return;
                };
                if *asked != from {
                    return;
                }
                granted.insert(from);
                self.reservation.since = None;
                match left.pop_first() {
                    Some(next) => {
                        *asked = next;
                        self.send_reserve(next, ReserveKind::Request, out);
                    }
                    None => {
                        let granted = std::mem::take(granted);
                        self.reservation.step = Step::Reserved { granted };
                        tracing::debug!("{}: recovery reservations granted", self.pgid);
                        self.schedule_recovery(store, out);
                    }
                }
            }
            ReserveKind::Reject if current => {
                tracing::info!(
                    "{}: {from} rejected our reservation; trying again later",
                    self.pgid
                );
                self.release_reservation(out);
                self.reservation.step = Step::Backoff;
            }
            ReserveKind::Reject | ReserveKind::Request | ReserveKind::Release => {}
        }
    }

    /// Gives back every slot held or asked for (a target that has not answered yet
    /// drops its queued request), the local one included.
    pub(super) fn release_reservation(&mut self, out: &mut Vec<Output>) {
        let step = std::mem::take(&mut self.reservation.step);
        self.reservation.since = None;
        let targets: BTreeSet<OsdId> = match step {
            Step::Idle | Step::Backoff => return,
            Step::WaitLocal => BTreeSet::new(),
            Step::WaitRemote { asked, granted, .. } => {
                let mut targets = granted;
                targets.insert(asked);
                targets
            }
            Step::Reserved { granted } => granted,
        };
        for target in targets {
            self.send_reserve(target, ReserveKind::Release, out);
        }
        self.reservation.local_ops.push(LocalOp::Cancel);
    }

    /// Primary, each tick: resends a request left unanswered, and ends a backoff.
    pub(super) fn reservation_tick(
        &mut self,
        now: Instant,
        store: &mut dyn ObjectStore,
        out: &mut Vec<Output>,
    ) {
        let asked = match &self.reservation.step {
            Step::WaitRemote { asked, .. } => Some(*asked),
            Step::Backoff => None,
            _ => return,
        };
        let since = *self.reservation.since.get_or_insert(now);
        if now.saturating_duration_since(since) < PEERING_RESEND_INTERVAL {
            return;
        }
        self.reservation.since = Some(now);
        match asked {
            Some(target) => {
                tracing::info!(
                    "{}: no reservation answer from {target}; asking again",
                    self.pgid
                );
                self.send_reserve(target, ReserveKind::Request, out);
            }
            None => {
                self.reservation.step = Step::Idle;
                self.schedule_recovery(store, out);
            }
        }
    }

    fn send_reserve(&self, target: OsdId, kind: ReserveKind, out: &mut Vec<Output>) {
        let message = Msg::PgReserve(PgReserve {
            pgid: self.pgid,
            interval: self.reservation.interval,
            map_epoch: self.map_epoch,
            round: self.reservation.round,
            kind,
            priority: self.reservation.priority,
        });
        out.push(peer_output(target, message));
    }
}
