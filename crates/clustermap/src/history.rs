//! PG history: the intervals a PG went through since it was last known clean.
//!
//! An interval is a run of epochs in which a PG's acting set and primary stay the same.
//! A write is acknowledged only once every member of the acting set has it, so a primary
//! peering in a new interval finds every acknowledged write if, for each earlier interval
//! that may have accepted writes, it hears from one member that was active in it. The
//! monitor sees every epoch, so it records the closed intervals of every PG that is not
//! known clean in the map itself ([`OsdMap::pg_history`]); OSDs never need old maps.
//! When a PG's primary reports it active+clean in its current interval, every member
//! has every write, and the PG's past intervals are dropped at the next epoch.

use crate::osdmap::OsdMap;
use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
use carmine_types::{Epoch, OsdId, PgId};
use std::collections::BTreeMap;

/// Most past intervals kept per PG. Beyond it the two oldest merge into one that
/// starts where the later of them starts, has the union of their members, no single
/// primary, and `maybe_went_rw` if either did. That stays sound: to cover the merged
/// interval a copy must have been activated at or after the later start, and such a
/// copy's log holds every write acknowledged in both (it peered after them).
pub const PAST_INTERVALS_MAX: usize = 16;

/// One closed interval of a PG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastInterval {
    pub first: Epoch,
    pub last: Epoch,
    pub acting: Vec<OsdId>,
    pub primary: Option<OsdId>,
    /// The acting set was large enough (`min_size`) for the PG to accept writes.
    pub maybe_went_rw: bool,
}

impl Encode for PastInterval {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(1, 1, |e| {
            self.first.encode(e);
            self.last.encode(e);
            self.acting.encode(e);
            self.primary.encode(e);
            self.maybe_went_rw.encode(e);
        });
    }
}

impl Decode for PastInterval {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("PastInterval", 1, |d, _| {
            Ok(PastInterval {
                first: Epoch::decode(d)?,
                last: Epoch::decode(d)?,
                acting: Vec::decode(d)?,
                primary: Option::decode(d)?,
                maybe_went_rw: bool::decode(d)?,
            })
        })
    }
}

/// The monitor's bookkeeping for PG histories across epochs.
#[derive(Debug, Clone, Default)]
pub struct HistoryTracker {
    /// Start of each PG's current interval.
    interval_since: BTreeMap<PgId, Epoch>,
    /// PGs whose primary reported them active+clean, with the interval start reported.
    clean_in: BTreeMap<PgId, Epoch>,
}

impl HistoryTracker {
    /// Starts tracking from `map` (after a restart, every current interval is taken to
    /// start at the loaded epoch, which only widens what peering probes).
    pub fn new(map: &OsdMap) -> Self {
        let interval_since = map.all_pgs().map(|pg| (pg, map.epoch)).collect();
        Self {
            interval_since,
            clean_in: BTreeMap::new(),
        }
    }

    /// The start of `pg`'s current interval as the monitor knows it.
    pub fn interval_since(&self, pg: PgId) -> Option<Epoch> {
        self.interval_since.get(&pg).copied()
    }

    /// A primary reported `pg` active+clean in the interval that started at `since`.
    pub fn report_clean(&mut self, pg: PgId, since: Epoch) {
        if self.interval_since.get(&pg) == Some(&since) {
            self.clean_in.insert(pg, since);
        }
    }

    /// Updates `next.pg_history` (and `next.epoch` must already be set) for the change
    /// from `prev` to `next`: closes the intervals that changed, drops the history of
    /// PGs known clean in their current interval and of deleted pools.
    pub fn advance(&mut self, prev: &OsdMap, next: &mut OsdMap) {
        next.pg_history
            .retain(|pg, _| next.pools.contains_key(&pg.pool));
        let pgs: Vec<PgId> = next.all_pgs().collect();
        let mut live = BTreeMap::new();
        for pg in pgs {
            let since = self.interval_since.get(&pg).copied().unwrap_or(next.epoch);
            let before = prev.pg_mapping(pg);
            let after = next.pg_mapping(pg).expect("pool exists in next");
            let changed = before
                .as_ref()
                .is_some_and(|b| b.acting != after.acting || b.primary != after.primary);
            if let (true, Some(before)) = (changed, before) {
                let min_size = usize::from(prev.pools[&pg.pool].min_size);
                let interval = PastInterval {
                    first: since,
                    last: prev.epoch,
                    maybe_went_rw: before.primary.is_some() && before.acting.len() >= min_size,
                    acting: before.acting,
                    primary: before.primary,
                };
                push_interval(next.pg_history.entry(pg).or_default(), interval);
                self.clean_in.remove(&pg);
                live.insert(pg, next.epoch);
            } else {
                if self.clean_in.get(&pg) == Some(&since) {
                    next.pg_history.remove(&pg);
                }
                live.insert(pg, since);
            }
        }
        self.interval_since = live;
        self.clean_in
            .retain(|pg, _| next.pools.contains_key(&pg.pool));
    }
}

fn push_interval(intervals: &mut Vec<PastInterval>, interval: PastInterval) {
    intervals.push(interval);
    if intervals.len() > PAST_INTERVALS_MAX {
        let second = intervals.remove(1);
        let first = &mut intervals[0];
        first.first = second.first;
        first.last = second.last;
        first.primary = None;
        first.maybe_went_rw |= second.maybe_went_rw;
        for osd in second.acting {
            if !first.acting.contains(&osd) {
                first.acting.push(osd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PoolSpec;
    use std::net::SocketAddr;

    fn booted(osds: u32) -> OsdMap {
        let mut map = OsdMap::new_dev(osds);
        for id in 0..osds {
            let addr: SocketAddr = format!("127.0.0.1:{}", 6800 + id).parse().unwrap();
            map.boot_osd(OsdId(id), vec![addr], format!("host{id}"))
                .unwrap();
        }
        map.create_pool(PoolSpec::replicated("p", 3, 8)).unwrap();
        map
    }

    fn step(
        tracker: &mut HistoryTracker,
        map: &OsdMap,
        change: impl FnOnce(&mut OsdMap),
    ) -> OsdMap {
        let mut next = map.clone();
        change(&mut next);
        next.epoch = map.epoch.next();
        tracker.advance(map, &mut next);
        next
    }

    #[test]
    fn records_closed_intervals_and_trims_clean_pgs() {
        let map = booted(3);
        let mut tracker = HistoryTracker::new(&map);
        let down = step(&mut tracker, &map, |m| m.mark_down(OsdId(2)).unwrap());
        assert_eq!(down.pg_history.len(), 8, "every PG had osd.2");
        let pg = PgId::new(1, 0);
        let past = &down.pg_history[&pg];
        assert_eq!(past.len(), 1);
        assert_eq!(past[0].acting.len(), 3);
        assert!(past[0].maybe_went_rw);
        assert_eq!(tracker.interval_since(pg), Some(down.epoch));

        // A stale clean report (older interval) trims nothing; a current one does.
        tracker.report_clean(pg, map.epoch);
        let same = step(&mut tracker, &down, |_| {});
        assert!(same.pg_history.contains_key(&pg));
        tracker.report_clean(pg, down.epoch);
        let trimmed = step(&mut tracker, &same, |_| {});
        assert!(!trimmed.pg_history.contains_key(&pg));
        assert_eq!(trimmed.pg_history.len(), 7);
    }

    #[test]
    fn an_undersized_interval_cannot_have_gone_rw() {
        let map = booted(3);
        let mut tracker = HistoryTracker::new(&map);
        let one = step(&mut tracker, &map, |m| {
            m.mark_down(OsdId(1)).unwrap();
            m.mark_down(OsdId(2)).unwrap();
        });
        let back = step(&mut tracker, &one, |m| {
            m.boot_osd(
                OsdId(1),
                vec!["127.0.0.1:1".parse().unwrap()],
                "host1".into(),
            )
            .unwrap();
        });
        let past = &back.pg_history[&PgId::new(1, 0)];
        assert_eq!(past.len(), 2);
        assert!(!past[1].maybe_went_rw, "one OSD < min_size 2");
    }
}
