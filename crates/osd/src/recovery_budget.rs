//! A shard's recovery budget (Ceph's `osd_recovery_max_active`): pushes in flight over
//! all the shard's PGs are bounded, so recovery gets a slice of the shard's core and
//! sessions rather than all of them. The shard wraps every call into a PG with
//! [`RecoveryBudget::grant`] and [`RecoveryBudget::settle`] (the PG is already in hand,
//! so this costs no lookup); PGs that stop short of work for lack of budget are resumed
//! in turn as pushes complete.

use crate::pg::Pg;
use carmine_types::PgId;
use std::collections::VecDeque;

#[derive(Debug, Default)]
pub(crate) struct RecoveryBudget {
    /// Pushes in flight over all PGs of the shard.
    in_flight: usize,
    /// PGs held back by the budget, in the order they ran out.
    starved: VecDeque<PgId>,
    /// A PG has news for the monitor (a pg_temp request): report before the period.
    report_urgent: bool,
}

impl RecoveryBudget {
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    pub(crate) fn take_report_urgent(&mut self) -> bool {
        std::mem::take(&mut self.report_urgent)
    }

    /// Before calling into `pg`: lets it use the budget `limit` leaves unused; returns
    /// its pushes in flight, for [`Self::settle`].
    pub(crate) fn grant(&self, limit: usize, pg: &mut Pg) -> usize {
        let before = pg.pushes_in_flight();
        pg.set_push_allowance(before + limit.saturating_sub(self.in_flight));
        before
    }

    /// After calling into `pg`: accounts its pushes and collects its requests.
    pub(crate) fn settle(&mut self, pg: &mut Pg, before: usize) {
        self.in_flight = (self.in_flight + pg.pushes_in_flight()).saturating_sub(before);
        let pgid = pg.pgid();
        if pg.take_recovery_starved() && !self.starved.contains(&pgid) {
            self.starved.push_back(pgid);
        }
        if pg.take_report_urgent() {
            self.report_urgent = true;
        }
    }

    /// `pg` is gone (its pool was deleted): its pushes no longer count.
    pub(crate) fn forget(&mut self, pg: &Pg) {
        self.in_flight = self.in_flight.saturating_sub(pg.pushes_in_flight());
        let pgid = pg.pgid();
        self.starved.retain(|&starved| starved != pgid);
    }

    pub(crate) fn has_starved(&self) -> bool {
        !self.starved.is_empty()
    }

    /// The PGs to resume now: as many as were waiting, while budget is left (each
    /// resumed PG is settled before the next is asked for).
    pub(crate) fn next_starved(&mut self, limit: usize) -> Option<PgId> {
        if self.in_flight >= limit {
            return None;
        }
        self.starved.pop_front()
    }

    pub(crate) fn starved_count(&self) -> usize {
        self.starved.len()
    }
}
