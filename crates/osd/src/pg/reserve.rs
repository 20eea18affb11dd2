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
//! A request left without any answer (lost with a session) is sent again after
//! [`PEERING_RESEND_INTERVAL`]. A target that must make the request wait answers
//! `Queued`; the primary then asks again only every [`QUEUED_RECONFIRM_INTERVAL`],
//! quietly, because only a lost `Grant` needs that (a target answers a resent
//! request with where it stands: `Grant` or `Queued`). A stale rejection (the
//! target's map says our interval is over) releases everything and tries again after
//! [`PEERING_RESEND_INTERVAL`], by which time the new map has usually arrived.
//!
//! A target with no room for a backfill (backfillfull or full) or a recovery (full)
//! rejects it as too full: the PG releases everything, shows `backfill_toofull` or
//! `recovery_toofull`, and tries again after [`TOOFULL_RETRY_INTERVAL`], or at once
//! when a new map marks that target less full than when it refused.
//!
//! A target may give a granted slot to a request of higher priority: it sends
//! `Revoke`, and the PG gives up its round and asks again at once (Ceph's
//! `RemoteReservationRevoked`).
//!
//! Every `Release` is sent again each [`PEERING_RESEND_INTERVAL`] until the target
//! answers `Released` or the interval ends (the target then drops the slot on its own
//! when its map shows the end), so a release lost with a session never keeps a slot.

use super::peering::PEERING_RESEND_INTERVAL;
use super::{peer_output, Pg, Phase};
use crate::reserver::LocalOp;
use crate::Output;
use carmine_clustermap::{Fullness, OsdMap};
use carmine_proto::{Msg, PgReserve, PgState, Purpose, RejectReason, ReserveKind};
use carmine_store::ObjectStore;
use carmine_types::{Epoch, OsdId};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How long a PG refused as too full waits before asking again (Ceph's
/// `osd_backfill_retry_interval` is 30 s). Shorter here: a map that marks the target
/// less full retries at once, so this only paces the retries against a target that
/// refused by its own store usage, and 10 s lets a simulated cluster converge within
/// its bound after usage drops.
pub const TOOFULL_RETRY_INTERVAL: Duration = Duration::from_secs(10);

/// How long a PG whose request a target queued waits before asking whether it was
/// granted (only a `Grant` lost with a session needs it; the target answers again).
pub const QUEUED_RECONFIRM_INTERVAL: Duration = Duration::from_secs(10);

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
    /// Holds the local slot and the remote slots of `granted`; waits for `asked`'s
    /// (which said it `queued` the request, or has not answered), then asks `left`,
    /// in order.
    WaitRemote {
        asked: OsdId,
        queued: bool,
        left: BTreeSet<OsdId>,
        granted: BTreeSet<OsdId>,
    },
    /// Holds every slot it needs: pushes.
    Reserved { granted: BTreeSet<OsdId> },
    /// A target rejected the request: holds nothing, tries again later. `toofull`
    /// when it had no room.
    Backoff { toofull: Option<TooFull> },
}

/// A target that refused for want of space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TooFull {
    osd: OsdId,
    /// What the refused slot was for (which `*_toofull` state the PG shows).
    purpose: Purpose,
    /// The target's fullest state in our maps since it refused: a map that marks it
    /// lower retries at once.
    marked: Fullness,
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
    /// Releases not yet answered `Released`, resent until they are: per target, the
    /// latest (interval, round) released (a release covers the earlier rounds of its
    /// interval at the target).
    releases: BTreeMap<OsdId, (Epoch, u32)>,
    /// Since when `releases` waits, for resends.
    releases_since: Option<Instant>,
    /// The acting members' fullness in the latest map.
    marked: BTreeMap<OsdId, Fullness>,
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
            Step::WaitLocal | Step::WaitRemote { .. } | Step::Backoff { .. }
        )
    }

    /// `state` as computed from the recovery work, with a wait for a target that
    /// refused as too full shown as `backfill_toofull`/`recovery_toofull` instead of
    /// `backfill_wait`/`recovery_wait`.
    pub(crate) fn reservation_state_bits(&self, bits: u32) -> u32 {
        let Step::Backoff {
            toofull: Some(toofull),
        } = self.reservation.step
        else {
            return bits;
        };
        let bits = bits & !(PgState::BACKFILL_WAIT | PgState::RECOVERY_WAIT);
        match toofull.purpose {
            Purpose::Backfill => bits | PgState::BACKFILL_TOOFULL,
            Purpose::Recovery => bits | PgState::RECOVERY_TOOFULL,
        }
    }

    /// Releases this PG still resends for want of an answer.
    pub fn releases_unanswered(&self) -> usize {
        self.reservation.releases.len()
    }

    /// Whether the PG holds every slot it needs to push in the background.
    pub fn recovery_reserved(&self) -> bool {
        matches!(self.reservation.step, Step::Reserved { .. })
    }

    /// The primary this copy follows in its current interval.
    pub(crate) fn leader(&self) -> Option<OsdId> {
        self.primary
    }

    pub fn interval_start(&self) -> Epoch {
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
            queued: false,
            left,
            granted: BTreeSet::new(),
        };
        self.reservation.since = None;
        self.send_reserve(first, ReserveKind::Request, out);
        true
    }

    /// A target answers our request or our release.
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
                self.send_release(from, answer.interval, answer.round, out);
            }
            ReserveKind::Grant => self.remote_reservation_granted(store, from, out),
            ReserveKind::Queued if current => {
                if let Step::WaitRemote { asked, queued, .. } = &mut self.reservation.step {
                    if *asked == from && !*queued {
                        tracing::debug!("{}: {from} queued our reservation", self.pgid);
                        *queued = true;
                        self.reservation.since = None;
                    }
                }
            }
            ReserveKind::Reject if current => self.remote_reservation_rejected(from, &answer, out),
            ReserveKind::Revoke if current => {
                tracing::info!(
                    "{}: {from} gave our slot to a request of higher priority; asking again",
                    self.pgid
                );
                // Ceph's `RemoteReservationRevoked`: give up the round (the revoker
                // holds nothing for it already) and queue again at once.
                self.release_reservation(out);
                self.schedule_recovery(store, out);
            }
            ReserveKind::Released => {
                let answered =
                    (self.reservation.releases.get(&from)).is_some_and(|&(interval, round)| {
                        interval == answer.interval && round <= answer.round
                    });
                if answered {
                    self.reservation.releases.remove(&from);
                }
            }
            ReserveKind::Queued
            | ReserveKind::Reject
            | ReserveKind::Revoke
            | ReserveKind::Request
            | ReserveKind::Release => {}
        }
    }

    /// `from` granted the slot we asked it for: ask the next target, or push.
    fn remote_reservation_granted(
        &mut self,
        store: &mut dyn ObjectStore,
        from: OsdId,
        out: &mut Vec<Output>,
    ) {
        let Step::WaitRemote {
            asked,
            queued,
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
                *queued = false;
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

    /// `from` refused this round: give back everything and back off, as too full
    /// when it had no room.
    fn remote_reservation_rejected(
        &mut self,
        from: OsdId,
        answer: &PgReserve,
        out: &mut Vec<Output>,
    ) {
        let toofull = (answer.reason == RejectReason::TooFull).then(|| TooFull {
            osd: from,
            purpose: answer.purpose,
            marked: self.reservation_marked(from),
        });
        match toofull {
            Some(_) => tracing::info!(
                "{}: {from} has no room for our {:?}; trying again later",
                self.pgid,
                answer.purpose
            ),
            None => tracing::info!(
                "{}: {from} rejected our reservation; trying again later",
                self.pgid
            ),
        }
        self.release_reservation(out);
        self.reservation.step = Step::Backoff { toofull };
    }

    /// Primary: `from`'s store refused objects we pushed (they are back among those
    /// to push there). Background pushes stop as when it refuses a reservation: for
    /// want of space the PG shows `*_toofull` and tries again after
    /// [`TOOFULL_RETRY_INTERVAL`] (or once a map marks `from` less full), otherwise
    /// after the resend interval.
    pub(super) fn push_refused_by(&mut self, from: OsdId, for_space: bool, out: &mut Vec<Output>) {
        let purpose = if self.backfilling.contains(&from) {
            Purpose::Backfill
        } else {
            Purpose::Recovery
        };
        let toofull = for_space.then(|| TooFull {
            osd: from,
            purpose,
            marked: self.reservation_marked(from),
        });
        tracing::info!(
            "{}: {from} could not apply our pushes{}; trying again later",
            self.pgid,
            if for_space { " (no room)" } else { "" }
        );
        self.release_reservation(out);
        self.reservation.step = Step::Backoff { toofull };
    }

    /// Primary, on each map: notes the acting members' fullness, and retries at once
    /// a reservation refused as too full by a target the map now marks less full.
    pub(super) fn reservation_map(
        &mut self,
        map: &OsdMap,
        store: &mut dyn ObjectStore,
        out: &mut Vec<Output>,
    ) {
        self.reservation.marked = (self.acting.iter())
            .map(|&osd| (osd, map.fullness(osd)))
            .collect();
        let Step::Backoff {
            toofull: Some(toofull),
        } = &mut self.reservation.step
        else {
            return;
        };
        let marked = (self.reservation.marked.get(&toofull.osd).copied()).unwrap_or_default();
        // Marked fuller since it refused: it is a drop from there that gives room.
        toofull.marked = toofull.marked.max(marked);
        let toofull = *toofull;
        if marked < toofull.marked {
            tracing::info!(
                "{}: {} is less full in the map; asking again",
                self.pgid,
                toofull.osd
            );
            self.reservation.step = Step::Idle;
            self.reservation.since = None;
            self.schedule_recovery(store, out);
        }
    }

    fn reservation_marked(&self, osd: OsdId) -> Fullness {
        (self.reservation.marked.get(&osd).copied()).unwrap_or_default()
    }

    /// Gives back every slot held or asked for (a target that has not answered yet
    /// drops its queued request), the local one included.
    pub(super) fn release_reservation(&mut self, out: &mut Vec<Output>) {
        let step = std::mem::take(&mut self.reservation.step);
        self.reservation.since = None;
        let targets: BTreeSet<OsdId> = match step {
            Step::Idle | Step::Backoff { .. } => return,
            Step::WaitLocal => BTreeSet::new(),
            Step::WaitRemote { asked, granted, .. } => {
                let mut targets = granted;
                targets.insert(asked);
                targets
            }
            Step::Reserved { granted } => granted,
        };
        let (interval, round) = (self.reservation.interval, self.reservation.round);
        for target in targets {
            self.send_release(target, interval, round, out);
        }
        self.reservation.local_ops.push(LocalOp::Cancel);
    }

    /// Sends `Release` for `target`'s slot of `(interval, round)` and remembers it
    /// until the target answers `Released`.
    fn send_release(&mut self, target: OsdId, interval: Epoch, round: u32, out: &mut Vec<Output>) {
        let latest = (self.reservation.releases)
            .entry(target)
            .or_insert((interval, round));
        *latest = (*latest).max((interval, round));
        self.send_reserve_of(target, ReserveKind::Release, interval, round, out);
    }

    /// Resends the releases left unanswered for [`PEERING_RESEND_INTERVAL`]. Those of
    /// an interval that ended are dropped instead: the target drops that interval's
    /// slots when its map shows the end.
    fn resend_releases(&mut self, now: Instant, out: &mut Vec<Output>) {
        let current = self.interval_start;
        self.reservation
            .releases
            .retain(|_, (interval, _)| *interval == current);
        if self.reservation.releases.is_empty() {
            self.reservation.releases_since = None;
            return;
        }
        let since = *self.reservation.releases_since.get_or_insert(now);
        if now.saturating_duration_since(since) < PEERING_RESEND_INTERVAL {
            return;
        }
        self.reservation.releases_since = Some(now);
        let releases: Vec<_> = (self.reservation.releases.iter())
            .map(|(&target, &(interval, round))| (target, interval, round))
            .collect();
        for (target, interval, round) in releases {
            tracing::debug!(
                "{}: no answer to our release from {target}; again",
                self.pgid
            );
            self.send_reserve_of(target, ReserveKind::Release, interval, round, out);
        }
    }

    /// Primary, each tick: resends a request left unanswered (or, rarely, one a
    /// target queued), resends unanswered releases, and ends a backoff.
    pub(super) fn reservation_tick(
        &mut self,
        now: Instant,
        store: &mut dyn ObjectStore,
        out: &mut Vec<Output>,
    ) {
        self.resend_releases(now, out);
        let (asked, wait) = match &self.reservation.step {
            Step::WaitRemote { asked, queued, .. } if *queued => {
                (Some((*asked, true)), QUEUED_RECONFIRM_INTERVAL)
            }
            Step::WaitRemote { asked, .. } => (Some((*asked, false)), PEERING_RESEND_INTERVAL),
            Step::Backoff { toofull: Some(_) } => (None, TOOFULL_RETRY_INTERVAL),
            Step::Backoff { toofull: None } => (None, PEERING_RESEND_INTERVAL),
            _ => return,
        };
        let since = *self.reservation.since.get_or_insert(now);
        if now.saturating_duration_since(since) < wait {
            return;
        }
        self.reservation.since = Some(now);
        match asked {
            Some((target, true)) => {
                tracing::debug!(
                    "{}: {target} queued our reservation a while ago; asking where it stands",
                    self.pgid
                );
                self.send_reserve(target, ReserveKind::Request, out);
            }
            Some((target, false)) => {
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
        let (interval, round) = (self.reservation.interval, self.reservation.round);
        self.send_reserve_of(target, kind, interval, round, out);
    }

    fn send_reserve_of(
        &self,
        target: OsdId,
        kind: ReserveKind,
        interval: Epoch,
        round: u32,
        out: &mut Vec<Output>,
    ) {
        // A target rebuilt object by object is backfilled; one with a log is recovered.
        let purpose = if self.backfilling.contains(&target) {
            Purpose::Backfill
        } else {
            Purpose::Recovery
        };
        let message = Msg::PgReserve(PgReserve {
            pgid: self.pgid,
            interval,
            map_epoch: self.map_epoch,
            round,
            kind,
            priority: self.reservation.priority,
            purpose,
            reason: RejectReason::Stale,
        });
        out.push(peer_output(target, message));
    }
}
