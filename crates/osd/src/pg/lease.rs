//! Read leases: a primary serves IO only while every other member of its acting set
//! has promised not to let a newer interval serve before the lease ends, and a new
//! primary serves nothing until every promise made in earlier intervals has run out
//! (Ceph Octopus's `readable_until` / `prior_readable_until_ub`, simplified).
//!
//! Without them a primary cut off from the monitors and its peers keeps answering
//! reads from its copy after a new interval elsewhere has acknowledged newer writes.
//!
//! - **Primary.** From the shard tick it sends a [`PgLease`] renewal (sequence number,
//!   length `L`) every `L / 4`. When every other acting member has acknowledged one,
//!   the PG is readable until `sent + L * (1 - margin)` of its own clock: the lease
//!   runs from when the renewal was *sent*, which only makes it shorter than the
//!   members' promises. A primary whose lease ran out is `laggy` and holds every
//!   client op until a renewal is acknowledged or the interval changes.
//! - **Member.** Accepting a renewal from the primary of its own interval, it
//!   promises `L` of its own clock from the moment it handles it. It remembers the
//!   latest promise for good (intervals change; the promise does not end with them)
//!   and reports what is left of it in every `PgNotify`.
//! - **New primary.** Its own promise and every reported remainder (stretched by the
//!   margin, from when the notify arrived, so message delay only lengthens the wait)
//!   set `prior_readable_until`; once active it stays in `wait`, serving nothing,
//!   until that has passed.
//!
//! Only durations cross between OSDs, never instants: each clock is only compared
//! with itself. The margin (a quarter) covers clocks that run up to about 10% fast or
//! slow against each other, and the staleness of the time a shard was last given.
//!
//! A restarted OSD has lost its promises. A copy that was ever activated
//! (`last_epoch_started` > 0) could have granted one just before the crash, so the
//! shard treats it as promised until one lease length after the process started
//! (its first clock reading): short, bounded, and only after a restart. A copy never
//! activated never granted one: a member grants only while the primary activates it,
//! and the primary serves only after every member's activation is durable.

use super::{peer_output, Pg};
use crate::Output;
use carmine_proto::{Msg, PgLease, PgLeaseAck};
use carmine_types::OsdId;
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

/// Default lease length. Well under the default heartbeat grace (3 s): after a
/// primary crashes, its promises run out (at most 1.25 s, with the margin, after its
/// last renewal) before heartbeats could report it, so only a crash the monitor learns
/// of at once (a reset session) makes the new primary wait, and briefly.
pub const LEASE_DURATION: Duration = Duration::from_secs(1);
/// The shortest lease a shard accepts (shorter renews every tick and lags anyway).
pub const LEASE_DURATION_MIN: Duration = Duration::from_millis(100);
/// Renewals a primary keeps waiting for acknowledgements (the oldest is forgotten).
pub const LEASE_RENEWALS_IN_FLIGHT_MAX: usize = 8;
/// Primaries a copy remembers promises to (expired ones are forgotten first).
pub const PROMISES_MAX: usize = 16;
/// Renewals per lease length.
const RENEWALS_PER_LEASE: u32 = 4;

/// `duration` shortened by the clock margin: how long a primary trusts a lease.
fn trusted(duration: Duration) -> Duration {
    duration - duration / 4
}

/// `duration` stretched by the clock margin: how long a new primary waits for a
/// promise another OSD reports.
fn stretched(duration: Duration) -> Duration {
    duration + duration / 4
}

/// One PG's lease bookkeeping, in the clock of the OSD that holds it.
#[derive(Debug, Default)]
pub(crate) struct Lease {
    /// The time the shard last gave; `None` until a driver gives one (then leases
    /// are not enforced: only harnesses that do not model time run so). The shard
    /// gives it when it hands the PG work or shows it, not on every clock reading
    /// (see `OsdShard::set_clock`), hence a `Cell`.
    now: Cell<Option<Instant>>,
    /// The lease length the shard used when it read its clock.
    duration: Cell<Duration>,
    /// The number of the shard's clock reading `now` came from (0: none yet).
    reading: Cell<u64>,
    /// Primary: renewals sent and not yet acknowledged by every member.
    renewals: VecDeque<Renewal>,
    next_seq: u64,
    last_renewal_at: Option<Instant>,
    /// Primary: IO may be served before this (every member acknowledged a renewal).
    readable_until: Option<Instant>,
    /// Primary: no IO before this (promises made to earlier primaries).
    prior_readable_until: Option<Instant>,
    /// Any role: the latest promise this copy made to each primary (`None`: to one
    /// it does not know, assumed after a restart). A promise only lets the primary
    /// it was made to serve, so a new primary ignores those made to itself.
    promises: BTreeMap<Option<OsdId>, Instant>,
}

#[derive(Debug)]
struct Renewal {
    seq: u64,
    sent_at: Instant,
    duration: Duration,
    waiting: BTreeSet<OsdId>,
}

impl Lease {
    /// Time only moves forward; a driver that goes back is a bug.
    pub(crate) fn set_now(&self, now: Instant) {
        if let Some(before) = self.now.get() {
            assert!(now >= before, "PG clock went back");
        }
        self.now.set(Some(now));
    }

    /// A new interval: the old lease (as primary) ends, the promises stay.
    pub(crate) fn new_interval(&mut self) {
        self.renewals.clear();
        self.last_renewal_at = None;
        self.readable_until = None;
        self.prior_readable_until = None;
    }

    /// After a restart: this copy may have promised until `until`, to anyone.
    pub(crate) fn assume_promised_until(&mut self, until: Instant) {
        self.remember_promise(None, until);
    }

    fn remember_promise(&mut self, to: Option<OsdId>, until: Instant) {
        if let Some(now) = self.now.get() {
            self.promises.retain(|_, until| *until > now);
        }
        let entry = self.promises.entry(to).or_insert(until);
        *entry = (*entry).max(until);
        if self.promises.len() > PROMISES_MAX {
            // Too many primaries: merge into the unknown one, which binds everyone.
            let latest = self.promises.values().copied().max().expect("not empty");
            self.promises.clear();
            self.promises.insert(None, latest);
        }
    }

    /// The latest promise made to anyone but `primary`.
    fn promised_until_except(&self, primary: OsdId) -> Option<Instant> {
        self.promises
            .iter()
            .filter(|(to, _)| **to != Some(primary))
            .map(|(_, until)| *until)
            .max()
    }

    /// What is left of this copy's promises that bind `primary` (all but those made
    /// to it), to report in its notify.
    pub(crate) fn promise_remaining(&self, primary: OsdId) -> Duration {
        match (self.promised_until_except(primary), self.now.get()) {
            (Some(until), Some(now)) => until.saturating_duration_since(now),
            _ => Duration::ZERO,
        }
    }

    /// Primary `whoami`: wait out the earlier promises, beginning with our own.
    pub(crate) fn start_prior_wait(&mut self, whoami: OsdId) {
        let own = self.promised_until_except(whoami);
        self.prior_readable_until = self.prior_readable_until.max(own);
    }

    /// Primary: a peer reported `remaining` of a promise it made.
    pub(crate) fn note_prior(&mut self, remaining: Duration) {
        let (Some(now), false) = (self.now.get(), remaining.is_zero()) else {
            return;
        };
        let until = now + stretched(remaining);
        self.prior_readable_until = self.prior_readable_until.max(Some(until));
    }

    /// Primary: still waiting for earlier promises to run out.
    pub(crate) fn waiting(&self) -> bool {
        match (self.prior_readable_until, self.now.get()) {
            (Some(until), Some(now)) => now < until,
            _ => false,
        }
    }

    /// Primary: the lease from the other members (`has_replicas`) is not valid now.
    pub(crate) fn laggy(&self, has_replicas: bool) -> bool {
        let Some(now) = self.now.get() else {
            return false;
        };
        has_replicas && self.readable_until.is_none_or(|until| now >= until)
    }

    /// Primary: a renewal to send now, if one is due.
    fn renewal_due(&mut self, duration: Duration, replicas: &[OsdId]) -> Option<u64> {
        let now = self.now.get()?;
        let period = duration / RENEWALS_PER_LEASE;
        if self
            .last_renewal_at
            .is_some_and(|last| now.saturating_duration_since(last) < period)
        {
            return None;
        }
        self.last_renewal_at = Some(now);
        let seq = self.next_seq;
        self.next_seq += 1;
        if self.renewals.len() >= LEASE_RENEWALS_IN_FLIGHT_MAX {
            self.renewals.pop_front();
        }
        self.renewals.push_back(Renewal {
            seq,
            sent_at: now,
            duration,
            waiting: replicas.iter().copied().collect(),
        });
        Some(seq)
    }

    /// Primary: `from` acknowledged renewal `seq`; whether the lease is now valid
    /// again after having lapsed.
    fn acknowledged(&mut self, from: OsdId, seq: u64) -> bool {
        let lapsed = self.laggy(true);
        let Some(index) = self.renewals.iter().position(|r| r.seq == seq) else {
            return false;
        };
        self.renewals[index].waiting.remove(&from);
        if !self.renewals[index].waiting.is_empty() {
            return false;
        }
        // Every member promised this renewal; older ones are superseded.
        let renewal = self
            .renewals
            .drain(..=index)
            .next_back()
            .expect("index is in range");
        let until = renewal.sent_at + trusted(renewal.duration);
        self.readable_until = self.readable_until.max(Some(until));
        lapsed && !self.laggy(true)
    }

    /// Member: promise `duration` from now to `primary`; false without a clock.
    fn promise(&mut self, primary: OsdId, duration: Duration) -> bool {
        let Some(now) = self.now.get() else {
            return false;
        };
        self.remember_promise(Some(primary), now + duration);
        true
    }
}

impl Pg {
    /// The shard's time and lease length from its clock reading number `reading`,
    /// before it hands the PG any work or shows it. A PG given that reading already
    /// keeps what it has (it may have had a newer lease length when it opened), so
    /// the PG sees exactly what it would if the shard gave every PG every reading.
    pub fn catch_up_time(&self, reading: u64, now: Instant, lease_duration: Duration) {
        if self.lease.reading.get() != reading {
            self.set_time(reading, now, lease_duration);
        }
    }

    /// The shard's time and lease length (clock reading number `reading`).
    pub fn set_time(&self, reading: u64, now: Instant, lease_duration: Duration) {
        self.lease.set_now(now);
        self.lease.duration.set(lease_duration);
        self.lease.reading.set(reading);
    }

    /// After a restart: this copy may have promised a lease until `until`, if it was
    /// ever activated (see the module comment).
    pub fn assume_restart_promise(&mut self, until: Instant) {
        if self.info.last_epoch_started.0 > 0 {
            self.lease.assume_promised_until(until);
        }
    }

    /// Primary: may serve client ops now (active, earlier promises run out, and the
    /// members' lease valid).
    pub(super) fn lease_allows_io(&self) -> bool {
        !self.lease.waiting() && !self.lease.laggy(!self.replicas().is_empty())
    }

    /// Whether the primary holds ops for its lease (`wait`, `laggy`) now.
    pub(super) fn lease_state_bits(&self) -> u32 {
        if !self.is_active() {
            return 0;
        }
        if self.lease.waiting() {
            carmine_proto::PgState::WAIT
        } else if self.lease.laggy(!self.replicas().is_empty()) {
            carmine_proto::PgState::LAGGY
        } else {
            0
        }
    }

    /// The periodic tick: renew the lease, and serve the ops held while waiting or
    /// laggy once that is over (`wait` ends by time alone).
    pub fn lease_tick(
        &mut self,
        store: &mut dyn carmine_store::ObjectStore,
        out: &mut Vec<Output>,
    ) {
        if !self.is_active() {
            return;
        }
        self.renew_lease(out);
        self.serve_held_ops(store, out);
    }

    /// Primary: sends a renewal to every other member if one is due (at once after
    /// activation: the replicas handle it right after their `PgActivate`).
    pub(super) fn renew_lease(&mut self, out: &mut Vec<Output>) {
        let replicas = self.replicas();
        if replicas.is_empty() {
            return;
        }
        let duration = self.lease.duration.get().max(LEASE_DURATION_MIN);
        let Some(seq) = self.lease.renewal_due(duration, &replicas) else {
            return;
        };
        for replica in replicas {
            let lease = Msg::PgLease(PgLease {
                pgid: self.pgid,
                interval: self.interval_start,
                map_epoch: self.map_epoch,
                seq,
                duration_ns: duration.as_nanos() as u64,
            });
            out.push(peer_output(replica, lease));
        }
    }

    /// Member: the primary of our interval asks for a promise.
    pub fn handle_lease(&mut self, from: OsdId, lease: PgLease, out: &mut Vec<Output>) {
        let ours = lease.interval == self.interval_start
            && self.primary == Some(from)
            && !self.is_primary()
            && self.is_member();
        if !ours {
            return; // An earlier primary's renewal: refusing it is the point.
        }
        if !self
            .lease
            .promise(from, Duration::from_nanos(lease.duration_ns))
        {
            return;
        }
        let ack = Msg::PgLeaseAck(PgLeaseAck {
            pgid: self.pgid,
            interval: lease.interval,
            map_epoch: self.map_epoch,
            seq: lease.seq,
        });
        out.push(peer_output(from, ack));
    }

    /// Primary: a member promised renewal `ack.seq`.
    pub fn handle_lease_ack(
        &mut self,
        store: &mut dyn carmine_store::ObjectStore,
        from: OsdId,
        ack: PgLeaseAck,
        out: &mut Vec<Output>,
    ) {
        if ack.interval != self.interval_start || !self.is_primary() {
            return;
        }
        if self.lease.acknowledged(from, ack.seq) {
            self.serve_held_ops(store, out);
        }
    }

    /// Runs the ops held for the lease, once IO is allowed.
    pub(super) fn serve_held_ops(
        &mut self,
        store: &mut dyn carmine_store::ObjectStore,
        out: &mut Vec<Output>,
    ) {
        if !self.is_active() || !self.lease_allows_io() || self.waiting_for_active.is_empty() {
            return;
        }
        let waiting = std::mem::take(&mut self.waiting_for_active);
        for (client, op) in waiting {
            self.handle_client_op(store, client, op, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn a_lease_runs_from_the_renewal_sent_and_lapses() {
        let base = Instant::now();
        let duration = Duration::from_millis(1000);
        let mut lease = Lease::default();
        lease.set_now(base);
        assert!(lease.laggy(true), "no lease before any acknowledgement");
        assert!(!lease.laggy(false), "a primary alone needs none");
        let seq = lease.renewal_due(duration, &[OsdId(1), OsdId(2)]).unwrap();
        assert!(
            lease.renewal_due(duration, &[OsdId(1)]).is_none(),
            "not due yet"
        );
        lease.set_now(at(base, 100));
        assert!(!lease.acknowledged(OsdId(1), seq));
        assert!(lease.laggy(true), "one member of two is not enough");
        assert!(lease.acknowledged(OsdId(2), seq));
        assert!(!lease.laggy(true));
        lease.set_now(at(base, 749));
        assert!(!lease.laggy(true));
        lease.set_now(at(base, 750));
        assert!(
            lease.laggy(true),
            "trusted for 3/4 of the length from sending"
        );
    }

    #[test]
    fn a_new_primary_waits_out_reported_promises_stretched() {
        let base = Instant::now();
        let mut lease = Lease::default();
        lease.set_now(base);
        assert!(lease.promise(OsdId(1), Duration::from_millis(1000)));
        lease.set_now(at(base, 400));
        assert_eq!(
            lease.promise_remaining(OsdId(2)),
            Duration::from_millis(600)
        );
        assert_eq!(
            lease.promise_remaining(OsdId(1)),
            Duration::ZERO,
            "a promise binds everyone but the primary it was made to"
        );
        lease.new_interval();
        lease.start_prior_wait(OsdId(2));
        lease.note_prior(Duration::from_millis(800));
        assert!(lease.waiting());
        lease.set_now(at(base, 1399));
        assert!(lease.waiting(), "800 ms reported waits 1000 ms");
        lease.set_now(at(base, 1400));
        assert!(!lease.waiting());
        assert_eq!(lease.promise_remaining(OsdId(2)), Duration::ZERO);
    }

    #[test]
    fn a_restart_assumes_a_promise_to_anyone() {
        let base = Instant::now();
        let mut lease = Lease::default();
        lease.set_now(base);
        lease.assume_promised_until(at(base, 500));
        assert_eq!(
            lease.promise_remaining(OsdId(1)),
            Duration::from_millis(500)
        );
        lease.start_prior_wait(OsdId(0));
        assert!(
            lease.waiting(),
            "the copy's own forgotten promise binds it too"
        );
        lease.set_now(at(base, 500));
        assert!(!lease.waiting());
    }

    #[test]
    fn without_a_clock_nothing_is_promised_or_enforced() {
        let mut lease = Lease::default();
        assert!(!lease.promise(OsdId(1), Duration::from_secs(1)));
        assert!(!lease.laggy(true));
        assert!(!lease.waiting());
    }
}
