//! Recovery and backfill reservations per OSD shard (Ceph's `AsyncReserver`, with
//! `osd_max_backfills` slots in each of a local and a remote reserver).
//!
//! A primary PG with background recovery or backfill to push first takes a slot of
//! its own shard's **local** reserver, then one of the **remote** reserver of every
//! target, on the target OSD's shard that owns the PG (the OSD is sharded: each shard
//! owns its PGs and their reservations, and reservation messages go straight to the
//! owning shard, like every other PG message). So at most `max_backfills` PGs push
//! from one shard, and at most `max_backfills` push into one shard, at a time. The
//! primary's side of the protocol is `pg/reserve.rs`; this module holds the pure
//! [`Reserver`] and the shard's two of them (`ShardReservations`), which also answer
//! the remote requests.
//!
//! Requests wait in priority order, first come first served within a priority. A
//! remote slot belongs to one primary's round in one interval (`Ticket`); a target
//! drops it when its own map ends that interval (the PG's primary or interval
//! changes, or the PG is gone), so a request that arrives stale, or a primary that
//! goes down, never leaks a slot (`ShardReservations::sweep`). Within an interval a
//! slot is freed by `Release`, which the primary sends again until this shard answers
//! `Released`, so a release lost with a session leaks nothing either.
//!
//! A request that must wait is answered `Queued` (the primary then stops asking
//! every few seconds). A waiting request of strictly higher priority takes the remote
//! slot of the lowest-priority holder, whose primary is sent `Revoke` and asks again
//! (Ceph's preemption; local slots are never preempted). A request this shard has no room for is answered `Reject`
//! with [`RejectReason::TooFull`], at arrival and again when its turn comes (Ceph's
//! `REJECT_TOOFULL`, checked in `RepNotBackfilling` and again in
//! `RepWaitBackfillReserved`): a backfill while this OSD is backfillfull or full in
//! the map or its own store is past the backfillfull ratio, a log-based recovery only
//! while it is full (`Room`).

use crate::pg::Pg;
use crate::Output;
use carmine_clustermap::{FullRatios, Fullness};
use carmine_proto::{Msg, PgReserve, Purpose, RejectReason, ReserveKind};
use carmine_store::StoreUsage;
use carmine_types::{Epoch, OsdId, PgId, ShardIndex};
use std::collections::{BTreeMap, BTreeSet};

/// Default slots per reserver (Ceph's `osd_max_backfills` default).
pub const MAX_BACKFILLS: usize = 1;

/// A pure slot reserver: at most `slots_max` keys hold a slot; the rest wait, highest
/// priority first, then in arrival order. Every call returns the keys it granted. A
/// preempting reserver (Ceph's `AsyncReserver` with a preemption callback) takes the
/// slot of a lowest-priority holder for a waiting key of strictly higher priority;
/// the holders it drops are collected for [`Reserver::take_preempted`].
#[derive(Debug, Clone)]
pub struct Reserver<K: Ord + Clone> {
    slots_max: usize,
    preempting: bool,
    /// Holders dropped for a higher-priority key, not yet taken.
    preempted: Vec<K>,
    granted: BTreeMap<K, u8>,
    /// Waiting keys by (priority descending, arrival).
    queue: BTreeMap<(std::cmp::Reverse<u8>, u64), K>,
    /// Each waiting key's place in `queue`.
    places: BTreeMap<K, (std::cmp::Reverse<u8>, u64)>,
    arrivals: u64,
}

impl<K: Ord + Clone> Reserver<K> {
    pub fn new(slots_max: usize) -> Self {
        Self {
            slots_max: slots_max.max(1),
            preempting: false,
            preempted: Vec::new(),
            granted: BTreeMap::new(),
            queue: BTreeMap::new(),
            places: BTreeMap::new(),
            arrivals: 0,
        }
    }

    /// A reserver that preempts lower-priority holders (see the type's docs).
    pub fn preempting(slots_max: usize) -> Self {
        Self {
            preempting: true,
            ..Self::new(slots_max)
        }
    }

    /// The holders preempted since the last call; they hold nothing now.
    pub fn take_preempted(&mut self) -> Vec<K> {
        std::mem::take(&mut self.preempted)
    }

    /// Changes the slot count; a larger one grants waiting keys at once (a smaller
    /// one takes no slot back: holders keep theirs until they release).
    pub fn set_slots_max(&mut self, slots_max: usize) -> Vec<K> {
        self.slots_max = slots_max.max(1);
        self.grant_waiting()
    }

    /// Asks for a slot for `key`. A key that holds one keeps it; a waiting key
    /// asking with another priority moves to the back of that priority.
    pub fn request(&mut self, key: K, priority: u8) -> Vec<K> {
        if self.granted.contains_key(&key) {
            return Vec::new();
        }
        if let Some(place) = self.places.get(&key) {
            if place.0 .0 == priority {
                return Vec::new();
            }
            let place = self.places.remove(&key).expect("looked up");
            self.queue.remove(&place);
        }
        self.arrivals += 1;
        let place = (std::cmp::Reverse(priority), self.arrivals);
        self.queue.insert(place, key.clone());
        self.places.insert(key, place);
        self.grant_waiting()
    }

    /// Gives up `key`'s slot or its place in the queue (nothing if it has neither).
    pub fn cancel(&mut self, key: &K) -> Vec<K> {
        if self.granted.remove(key).is_none() {
            if let Some(place) = self.places.remove(key) {
                self.queue.remove(&place);
            }
            return Vec::new();
        }
        self.grant_waiting()
    }

    /// Cancels every key, granted or waiting, that `keep` refuses.
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) -> Vec<K> {
        let gone: Vec<K> = (self.granted.keys())
            .chain(self.places.keys())
            .filter(|key| !keep(key))
            .cloned()
            .collect();
        let mut granted = Vec::new();
        for key in gone {
            granted.extend(self.cancel(&key));
        }
        // A key granted by one cancel and refused by a later one is not granted.
        granted.retain(|key| self.granted.contains_key(key));
        granted
    }

    pub fn is_granted(&self, key: &K) -> bool {
        self.granted.contains_key(key)
    }

    pub fn is_waiting(&self, key: &K) -> bool {
        self.places.contains_key(key)
    }

    pub fn granted_count(&self) -> usize {
        self.granted.len()
    }

    pub fn waiting_count(&self) -> usize {
        self.places.len()
    }

    fn grant_waiting(&mut self) -> Vec<K> {
        let mut granted = Vec::new();
        while self.granted.len() < self.slots_max {
            let Some((place, key)) = self.queue.pop_first() else {
                break;
            };
            self.places.remove(&key);
            self.granted.insert(key.clone(), place.0 .0);
            granted.push(key);
        }
        while self.preempting {
            let Some((&(std::cmp::Reverse(first), _), _)) = self.queue.first_key_value() else {
                break;
            };
            // The lowest-priority holder; among equals, the greatest key (any rule
            // would do: it only has to be deterministic).
            let lowest = (self.granted.iter())
                .min_by_key(|(key, priority)| (**priority, std::cmp::Reverse((*key).clone())))
                .map(|(key, priority)| (key.clone(), *priority));
            let Some((victim, priority)) = lowest else {
                break;
            };
            if priority >= first {
                break;
            }
            self.granted.remove(&victim);
            granted.retain(|key| *key != victim);
            self.preempted.push(victim);
            let (place, key) = self.queue.pop_first().expect("looked at");
            self.places.remove(&key);
            self.granted.insert(key.clone(), place.0 .0);
            granted.push(key);
        }
        assert!(self.granted.len() <= self.slots_max || granted.is_empty());
        assert_eq!(self.queue.len(), self.places.len());
        granted
    }
}

/// What a shard has room to take in, judged when a remote request arrives and when
/// its turn comes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Room {
    /// Refuse backfills: backfillfull or full in the map, or the store past the
    /// backfillfull ratio.
    refuse_backfill: bool,
    /// Refuse log-based recoveries too: full in the map, or the store past the full
    /// ratio.
    refuse_recovery: bool,
}

impl Room {
    /// From this OSD's state in the map and its own store's usage (the store is
    /// consulted too because the monitor marks an OSD only after its next report).
    pub(crate) fn new(marked: Fullness, ratios: &FullRatios, usage: StoreUsage) -> Room {
        let unbounded = usage.capacity_bytes == 0 || usage.capacity_bytes == u64::MAX;
        let used = usage.data_bytes.saturating_add(usage.metadata_bytes);
        let past = |ratio: f64| !unbounded && used as f64 >= ratio * usage.capacity_bytes as f64;
        Room {
            refuse_backfill: marked >= Fullness::BackfillFull || past(ratios.backfillfull),
            refuse_recovery: marked >= Fullness::Full || past(ratios.full),
        }
    }

    fn refuses(self, purpose: Purpose) -> bool {
        match purpose {
            Purpose::Backfill => self.refuse_backfill || self.refuse_recovery,
            Purpose::Recovery => self.refuse_recovery,
        }
    }
}

/// What a primary's PG asks of its shard's local reserver, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LocalOp {
    Request { priority: u8 },
    Cancel,
}

/// One primary's reservation round on a target: who asked, for which interval and
/// round. A remote slot is held for exactly this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Ticket {
    primary: OsdId,
    interval: Epoch,
    round: u32,
}

impl Ticket {
    /// The ticket of a request (or release) `message` from `primary`.
    fn of(primary: OsdId, message: &PgReserve) -> Self {
        Self {
            primary,
            interval: message.interval,
            round: message.round,
        }
    }
}

/// A remote slot held or waited for: whose, and what for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    ticket: Ticket,
    purpose: Purpose,
}

/// A shard's local and remote reservers, and the tickets of its remote slots.
#[derive(Debug)]
pub(crate) struct ShardReservations {
    local: Reserver<PgId>,
    remote: Reserver<PgId>,
    tickets: BTreeMap<PgId, Held>,
    /// PGs granted a local slot that have not been told yet.
    local_granted: Vec<PgId>,
    /// Remote slots granted that the primaries have not been told of yet.
    remote_granted: Vec<PgId>,
}

impl ShardReservations {
    pub(crate) fn new(max_backfills: usize) -> Self {
        Self {
            local: Reserver::new(max_backfills),
            // Only remote slots are preempted, as Ceph's `remote_reserver` is: a local
            // slot is the primary's own pacing.
            remote: Reserver::preempting(max_backfills),
            tickets: BTreeMap::new(),
            local_granted: Vec::new(),
            remote_granted: Vec::new(),
        }
    }

    /// Changes the slots of both reservers; waiting PGs that a larger count admits
    /// are told with the next sweep.
    pub(crate) fn set_max_backfills(&mut self, max_backfills: usize) {
        let local = self.local.set_slots_max(max_backfills);
        self.local_granted.extend(local);
        let remote = self.remote.set_slots_max(max_backfills);
        self.remote_granted.extend(remote);
    }

    /// Local slots in use and waiting; remote slots in use and waiting.
    pub(crate) fn counts(&self) -> [usize; 4] {
        [
            self.local.granted_count(),
            self.local.waiting_count(),
            self.remote.granted_count(),
            self.remote.waiting_count(),
        ]
    }

    /// After calling into `pg`: carries out what it asked of the local reserver, and
    /// tells it at once if it got the slot.
    pub(crate) fn settle(&mut self, pg: &mut Pg, out: &mut Vec<Output>) {
        let pgid = pg.pgid();
        while let Some(op) = pg.take_local_op() {
            let granted = match op {
                LocalOp::Request { priority } => self.local.request(pgid, priority),
                LocalOp::Cancel => self.local.cancel(&pgid),
            };
            for granted in granted {
                if granted != pgid {
                    self.local_granted.push(granted);
                } else if !pg.local_reservation_granted(out) {
                    let next = self.local.cancel(&pgid);
                    self.local_granted.extend(next);
                }
            }
        }
    }

    /// Whether PGs got a local slot they have not been told about.
    pub(crate) fn has_news(&self) -> bool {
        !self.local_granted.is_empty()
    }

    /// Tells the PGs granted a local slot (one that no longer wants it gives it back).
    pub(crate) fn tell_granted(&mut self, pgs: &mut BTreeMap<PgId, Pg>, out: &mut Vec<Output>) {
        while let Some(pgid) = self.local_granted.pop() {
            let wanted = match pgs.get_mut(&pgid) {
                Some(pg) => {
                    let wanted = pg.local_reservation_granted(out);
                    self.settle(pg, out);
                    wanted
                }
                None => false,
            };
            if !wanted && self.local.is_granted(&pgid) {
                let next = self.local.cancel(&pgid);
                self.local_granted.extend(next);
            }
        }
    }

    /// A target's side: a primary asks for, or gives back, a remote slot; `room` is
    /// what this shard has room for now.
    pub(crate) fn handle_remote(
        &mut self,
        pgs: &BTreeMap<PgId, Pg>,
        epoch: Epoch,
        room: Room,
        from: OsdId,
        message: PgReserve,
        out: &mut Vec<Output>,
    ) {
        let pgid = message.pgid;
        let ticket = Ticket::of(from, &message);
        let reply = |kind, reason, out: &mut Vec<Output>| {
            let reply = answer(&message, epoch, kind, reason);
            out.push(Output::Peer(from, ShardIndex::default(), reply));
        };
        match message.kind {
            ReserveKind::Request => self.handle_request(pgs, epoch, room, from, &message, out),
            ReserveKind::Release => {
                // A release covers the primary's earlier rounds in the interval too:
                // it gave them up before this one.
                let covers = |held: &Held| {
                    held.ticket.primary == from
                        && held.ticket.interval == ticket.interval
                        && held.ticket.round <= ticket.round
                };
                if self.tickets.get(&pgid).is_some_and(covers) {
                    self.tickets.remove(&pgid);
                    let granted = self.remote.cancel(&pgid);
                    self.send_grants(granted, epoch, room, out);
                }
                // Answered whether or not it freed anything: a resent release whose
                // first copy arrived must stop being resent.
                reply(ReserveKind::Released, RejectReason::Stale, out);
            }
            ReserveKind::Grant
            | ReserveKind::Reject
            | ReserveKind::Queued
            | ReserveKind::Released
            | ReserveKind::Revoke => {
                unreachable!("answers go to the primary's PG")
            }
        }
    }

    /// A primary asks for a remote slot: reject it (stale or no room), queue it, or
    /// grant it; a resend is told where it stands.
    fn handle_request(
        &mut self,
        pgs: &BTreeMap<PgId, Pg>,
        epoch: Epoch,
        room: Room,
        from: OsdId,
        message: &PgReserve,
        out: &mut Vec<Output>,
    ) {
        let pgid = message.pgid;
        let ticket = Ticket::of(from, message);
        let reply = |kind, reason, out: &mut Vec<Output>| {
            let reply = answer(message, epoch, kind, reason);
            out.push(Output::Peer(from, ShardIndex::default(), reply));
        };
        if !ticket_valid(pgs, pgid, &ticket) {
            tracing::debug!("{pgid}: reservation request from {from} is stale; rejecting");
            reply(ReserveKind::Reject, RejectReason::Stale, out);
            return;
        }
        match self.tickets.get(&pgid).copied() {
            // A resend: say again where it stands.
            Some(held) if held.ticket == ticket => {
                let kind = if self.remote.is_granted(&pgid) {
                    ReserveKind::Grant
                } else {
                    ReserveKind::Queued
                };
                reply(kind, RejectReason::Stale, out);
                return;
            }
            // A late resend of an earlier round of this primary.
            Some(held) if held.ticket.primary == from && held.ticket > ticket => return,
            Some(_) => {
                let granted = self.remote.cancel(&pgid);
                self.tickets.remove(&pgid);
                self.send_grants(granted, epoch, room, out);
            }
            None => {}
        }
        if room.refuses(message.purpose) {
            tracing::info!(
                "{pgid}: no room for a {:?} from {from}; rejecting as too full",
                message.purpose
            );
            reply(ReserveKind::Reject, RejectReason::TooFull, out);
            return;
        }
        let purpose = message.purpose;
        self.tickets.insert(pgid, Held { ticket, purpose });
        let granted = self.remote.request(pgid, message.priority);
        self.send_grants(granted, epoch, room, out);
        if self.remote.is_waiting(&pgid) {
            reply(ReserveKind::Queued, RejectReason::Stale, out);
        }
    }

    /// After a map change or PG removal: gives back the remote slots of intervals that
    /// ended here and the local slots of PGs that no longer want them, and tells the
    /// next in line.
    pub(crate) fn sweep(
        &mut self,
        pgs: &mut BTreeMap<PgId, Pg>,
        epoch: Epoch,
        room: Room,
        out: &mut Vec<Output>,
    ) {
        let stale: BTreeSet<PgId> = (self.tickets.iter())
            .filter(|(pgid, held)| !ticket_valid(pgs, **pgid, &held.ticket))
            .map(|(pgid, _)| *pgid)
            .collect();
        let granted = std::mem::take(&mut self.remote_granted);
        self.send_grants(granted, epoch, room, out);
        if !stale.is_empty() {
            for pgid in &stale {
                tracing::debug!("{pgid}: dropping the remote reservation of an ended interval");
                self.tickets.remove(pgid);
            }
            let granted = self.remote.retain(|pgid| !stale.contains(pgid));
            self.send_grants(granted, epoch, room, out);
        }
        let unwanted = |pgid: &PgId| {
            pgs.get(pgid)
                .is_none_or(|pg| !pg.wants_local_reservation() && !pg.has_local_ops())
        };
        let gone: BTreeSet<PgId> = self.local_keys().into_iter().filter(unwanted).collect();
        if !gone.is_empty() {
            let granted = self.local.retain(|pgid| !gone.contains(pgid));
            self.local_granted.extend(granted);
        }
        let local = &self.local;
        self.local_granted.retain(|pgid| local.is_granted(pgid));
        if self.has_news() {
            self.tell_granted(pgs, out);
        }
    }

    fn local_keys(&self) -> Vec<PgId> {
        (self.local.granted.keys())
            .chain(self.local.places.keys())
            .copied()
            .collect()
    }

    /// Tells the primaries of `granted` they hold their slot, unless this shard has
    /// no room for what they asked: those are rejected as too full and the slot goes
    /// to the next in line.
    fn send_grants(&mut self, granted: Vec<PgId>, epoch: Epoch, room: Room, out: &mut Vec<Output>) {
        self.send_revokes(epoch, out);
        let mut granted = std::collections::VecDeque::from(granted);
        while let Some(pgid) = granted.pop_front() {
            let Some(&Held { ticket, purpose }) = self.tickets.get(&pgid) else {
                continue;
            };
            if !self.remote.is_granted(&pgid) {
                continue;
            }
            let mut message = PgReserve {
                pgid,
                interval: ticket.interval,
                map_epoch: epoch,
                round: ticket.round,
                kind: ReserveKind::Grant,
                priority: self.remote.granted.get(&pgid).copied().unwrap_or_default(),
                purpose,
                reason: RejectReason::Stale,
            };
            if room.refuses(purpose) {
                tracing::info!("{pgid}: no room for a {purpose:?} whose turn came; rejecting");
                self.tickets.remove(&pgid);
                granted.extend(self.remote.cancel(&pgid));
                message.kind = ReserveKind::Reject;
                message.reason = RejectReason::TooFull;
            }
            let message = Msg::PgReserve(message);
            out.push(Output::Peer(ticket.primary, ShardIndex::default(), message));
            self.send_revokes(epoch, out);
        }
    }

    /// Tells the holders the remote reserver preempted that their slot is gone.
    fn send_revokes(&mut self, epoch: Epoch, out: &mut Vec<Output>) {
        for pgid in self.remote.take_preempted() {
            let Some(Held { ticket, purpose }) = self.tickets.remove(&pgid) else {
                continue;
            };
            tracing::info!(
                "{pgid}: a request of higher priority preempts osd.{}'s slot",
                ticket.primary.0
            );
            let revoke = Msg::PgReserve(PgReserve {
                pgid,
                interval: ticket.interval,
                map_epoch: epoch,
                round: ticket.round,
                kind: ReserveKind::Revoke,
                priority: 0,
                purpose,
                reason: RejectReason::Stale,
            });
            out.push(Output::Peer(ticket.primary, ShardIndex::default(), revoke));
        }
    }
}

/// Whether a remote slot for `ticket` may still be held here: this shard holds the PG,
/// not being deleted, led by the ticket's primary in the ticket's interval (or an
/// interval this copy dated earlier: a copy dates an interval by the first map in
/// which it saw it, see `handle_activate`).
fn ticket_valid(pgs: &BTreeMap<PgId, Pg>, pgid: PgId, ticket: &Ticket) -> bool {
    pgs.get(&pgid).is_some_and(|pg| {
        pg.leader() == Some(ticket.primary)
            && ticket.interval >= pg.interval_start()
            && !pg.is_deleting()
    })
}

fn answer(request: &PgReserve, epoch: Epoch, kind: ReserveKind, reason: RejectReason) -> Msg {
    Msg::PgReserve(PgReserve {
        map_epoch: epoch,
        kind,
        reason,
        ..request.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(used_bytes: u64, capacity_bytes: u64) -> StoreUsage {
        StoreUsage {
            object_count: 1,
            data_bytes: used_bytes,
            metadata_bytes: 0,
            capacity_bytes,
        }
    }

    /// Ceph's rule: backfill is refused from backfillfull, recovery only at full,
    /// whether the map says so or the store's own usage does.
    #[test]
    fn room_refuses_backfill_from_backfillfull_and_recovery_only_at_full() {
        let ratios = FullRatios::default();
        let empty = usage(0, 1000);
        let refuses = |room: Room| {
            [Purpose::Backfill, Purpose::Recovery].map(|purpose| room.refuses(purpose))
        };
        for (marked, expected) in [
            (Fullness::None, [false, false]),
            (Fullness::NearFull, [false, false]),
            (Fullness::BackfillFull, [true, false]),
            (Fullness::Full, [true, true]),
        ] {
            assert_eq!(
                refuses(Room::new(marked, &ratios, empty)),
                expected,
                "{marked:?}"
            );
        }
        for (used, expected) in [
            (850, [false, false]),
            (900, [true, false]),
            (949, [true, false]),
            (950, [true, true]),
        ] {
            let room = Room::new(Fullness::None, &ratios, usage(used, 1000));
            assert_eq!(refuses(room), expected, "{used} of 1000");
        }
        // An unbounded store is never full by usage.
        let room = Room::new(Fullness::None, &ratios, usage(u64::MAX - 1, u64::MAX));
        assert_eq!(refuses(room), [false, false]);
    }

    #[test]
    fn one_slot_goes_to_the_first_and_then_to_the_next() {
        let mut reserver = Reserver::new(1);
        assert_eq!(reserver.request("a", 100), vec!["a"]);
        assert_eq!(reserver.request("b", 100), Vec::<&str>::new());
        assert_eq!(reserver.request("c", 100), Vec::<&str>::new());
        assert!(reserver.is_granted(&"a"));
        assert!(reserver.is_waiting(&"b"));
        assert_eq!(reserver.cancel(&"a"), vec!["b"]);
        assert_eq!(reserver.cancel(&"b"), vec!["c"]);
        assert_eq!(reserver.cancel(&"c"), Vec::<&str>::new());
        assert_eq!((reserver.granted_count(), reserver.waiting_count()), (0, 0));
    }

    #[test]
    fn higher_priority_goes_first_and_equal_priority_in_arrival_order() {
        let mut reserver = Reserver::new(1);
        reserver.request("holder", 100);
        reserver.request("backfill-1", 100);
        reserver.request("backfill-2", 100);
        reserver.request("degraded", 140);
        reserver.request("recovery", 180);
        let mut order = Vec::new();
        let mut current = "holder";
        for _ in 0..4 {
            let next = reserver.cancel(&current);
            assert_eq!(next.len(), 1);
            current = next[0];
            order.push(current);
        }
        assert_eq!(order, ["recovery", "degraded", "backfill-1", "backfill-2"]);
    }

    #[test]
    fn a_granted_key_is_not_queued_again_and_a_waiting_one_keeps_its_place() {
        let mut reserver = Reserver::new(1);
        reserver.request("a", 100);
        reserver.request("b", 100);
        reserver.request("c", 100);
        assert!(reserver.request("a", 100).is_empty());
        assert!(reserver.request("b", 100).is_empty());
        assert_eq!((reserver.granted_count(), reserver.waiting_count()), (1, 2));
        assert_eq!(reserver.cancel(&"a"), vec!["b"]);
        // A new priority re-queues at the back of that priority.
        reserver.request("d", 100);
        reserver.request("c", 120);
        assert_eq!(reserver.cancel(&"b"), vec!["c"]);
    }

    #[test]
    fn cancelling_a_waiting_key_grants_nothing_and_frees_its_place() {
        let mut reserver = Reserver::new(1);
        reserver.request("a", 100);
        reserver.request("b", 100);
        assert!(reserver.cancel(&"b").is_empty());
        assert!(reserver.cancel(&"nobody").is_empty());
        assert!(reserver.cancel(&"a").is_empty());
        assert_eq!((reserver.granted_count(), reserver.waiting_count()), (0, 0));
    }

    #[test]
    fn retain_drops_holders_and_waiters_and_grants_only_kept_keys() {
        let mut reserver = Reserver::new(2);
        for key in ["a", "b", "c", "d", "e"] {
            reserver.request(key, 100);
        }
        let granted = reserver.retain(|key| !matches!(*key, "a" | "c"));
        assert_eq!(granted, vec!["d"]);
        assert!(reserver.is_granted(&"b") && reserver.is_granted(&"d"));
        assert!(reserver.is_waiting(&"e"));
        assert_eq!((reserver.granted_count(), reserver.waiting_count()), (2, 1));
    }

    #[test]
    fn more_slots_grant_waiting_keys_at_once() {
        let mut reserver = Reserver::new(1);
        for key in ["a", "b", "c"] {
            reserver.request(key, 100);
        }
        assert_eq!(reserver.set_slots_max(3), vec!["b", "c"]);
        assert_eq!(reserver.set_slots_max(0), Vec::<&str>::new());
        assert_eq!(reserver.granted_count(), 3, "holders keep their slots");
        reserver.cancel(&"a");
        reserver.cancel(&"b");
        assert_eq!(reserver.request("d", 100), Vec::<&str>::new());
        assert_eq!(reserver.cancel(&"c"), vec!["d"]);
    }

    #[test]
    fn a_higher_priority_request_preempts_the_lowest_holder() {
        let mut reserver = Reserver::preempting(2);
        assert_eq!(reserver.request("backfill-a", 100), vec!["backfill-a"]);
        assert_eq!(reserver.request("backfill-b", 110), vec!["backfill-b"]);
        // Equal or lower priority waits.
        assert!(reserver.request("backfill-c", 100).is_empty());
        assert!(reserver.take_preempted().is_empty());
        // Higher takes the lowest holder's slot; the holder is dropped, not queued.
        assert_eq!(reserver.request("recovery", 180), vec!["recovery"]);
        assert_eq!(reserver.take_preempted(), vec!["backfill-a"]);
        assert!(!reserver.is_granted(&"backfill-a") && !reserver.is_waiting(&"backfill-a"));
        assert!(reserver.is_waiting(&"backfill-c"));
        assert_eq!(reserver.cancel(&"recovery"), vec!["backfill-c"]);
        // A plain reserver never preempts.
        let mut plain = Reserver::new(1);
        plain.request("low", 100);
        assert!(plain.request("high", 180).is_empty());
        assert!(plain.take_preempted().is_empty());
    }

    /// A model check: random requests and cancels never grant more than the slots,
    /// never grant a key twice, and never leave a free slot while a key waits.
    #[test]
    fn random_operations_keep_the_invariants() {
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for (slots, preempting) in [1, 2, 3].into_iter().flat_map(|n| [(n, false), (n, true)]) {
            let mut reserver = if preempting {
                Reserver::preempting(slots)
            } else {
                Reserver::new(slots)
            };
            let mut holders = BTreeSet::new();
            let mut priorities = BTreeMap::new();
            for _ in 0..5_000 {
                let key = next() % 12;
                let granted = if next() % 3 == 0 {
                    holders.remove(&key);
                    reserver.cancel(&key)
                } else {
                    let priority = (next() % 3) as u8 * 40 + 100;
                    if !holders.contains(&key) {
                        priorities.insert(key, priority);
                    }
                    reserver.request(key, priority)
                };
                for key in reserver.take_preempted() {
                    assert!(preempting, "a plain reserver preempted {key}");
                    assert!(holders.remove(&key), "{key} preempted but not held");
                }
                for key in granted {
                    assert!(holders.insert(key), "{key} granted twice");
                }
                if preempting && reserver.waiting_count() > 0 {
                    // Nothing waits with a priority above a holder's.
                    let lowest_held = holders.iter().map(|k| priorities[k]).min();
                    let highest_waiting = (reserver.places.keys()).map(|k| priorities[k]).max();
                    assert!(highest_waiting <= lowest_held, "a higher priority waits");
                }
                assert!(holders.len() <= slots);
                assert_eq!(holders.len(), reserver.granted_count());
                if reserver.waiting_count() > 0 {
                    assert_eq!(holders.len(), slots, "a slot idles while keys wait");
                }
            }
        }
    }
}
