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
//!
//! An interval may have accepted writes only if its acting set reached `min_size` and
//! its primary's `up_thru` in the interval's last map reached the interval's start
//! (Ceph's `PastIntervals::check_new_interval`): a primary activates a PG only once a
//! map shows it alive through its interval's start, so an interval whose primary died
//! before the monitor recorded that never served a write, and peering need not wait
//! for a member of it that may never come back.

use crate::osdmap::OsdMap;
use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
use carmine_types::{Epoch, OsdId, PgId};
use std::collections::{BTreeMap, BTreeSet};

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
    /// The PG may have accepted writes in it: the acting set was large enough
    /// (`min_size`) and the primary's `up_thru` reached `first` (or the interval's
    /// start is not known exactly; see [`HistoryTracker::new`]).
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
    /// PGs whose current interval started before the tracker did, at an epoch it does
    /// not know: `up_thru` cannot tell whether such an interval went read-write (its
    /// primary may have been recorded alive between the true start and the epoch
    /// assumed), so it is taken to have.
    start_unknown: BTreeSet<PgId>,
}

impl HistoryTracker {
    /// Starts tracking from `map` (after a restart, every current interval is taken to
    /// start at the loaded epoch, which only widens what peering probes, and to have
    /// gone read-write once it closes).
    pub fn new(map: &OsdMap) -> Self {
        let interval_since = map.all_pgs().map(|pg| (pg, map.epoch)).collect();
        Self {
            interval_since,
            clean_in: BTreeMap::new(),
            start_unknown: map.all_pgs().collect(),
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
                let primary_alive = before.primary.is_some_and(|primary| {
                    self.start_unknown.contains(&pg) || alive_through(prev, primary, since)
                });
                let interval = PastInterval {
                    first: since,
                    last: prev.epoch,
                    maybe_went_rw: primary_alive && before.acting.len() >= min_size,
                    acting: before.acting,
                    primary: before.primary,
                };
                self.start_unknown.remove(&pg);
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
        self.start_unknown
            .retain(|pg| next.pools.contains_key(&pg.pool));
    }
}

/// Whether `map` (an interval's last) shows `osd` up since `first` at the latest and
/// recorded alive through `first`: only then can it have activated a PG in an interval
/// that started at `first`.
fn alive_through(map: &OsdMap, osd: OsdId, first: Epoch) -> bool {
    map.osd(osd)
        .is_some_and(|info| info.up_from <= first && info.up_thru >= first)
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

    #[test]
    fn an_interval_went_rw_only_if_its_primary_was_recorded_alive_through_its_start() {
        let map = booted(4);
        let mut tracker = HistoryTracker::new(&map);
        // Every interval the tracker saw start: osd.3 goes, every PG it was in changes.
        let start = step(&mut tracker, &map, |m| m.mark_down(OsdId(3)).unwrap());
        let pgs: Vec<PgId> = start.pg_history.keys().copied().collect();
        assert!(!pgs.is_empty());
        assert!(
            pgs.iter().all(|pg| start.pg_history[pg][0].maybe_went_rw),
            "intervals that began before the tracker may have gone rw"
        );
        // osd.0 is recorded alive through the new intervals' start; no one else is.
        let recorded = step(&mut tracker, &start, |m| {
            m.raise_up_thru(OsdId(0), start.epoch).unwrap()
        });
        let closed = step(&mut tracker, &recorded, |m| {
            m.boot_osd(
                OsdId(3),
                vec!["127.0.0.1:1".parse().unwrap()],
                "host3".into(),
            )
            .unwrap()
        });
        let mut checked = 0;
        for pg in pgs {
            let primary = start.pg_mapping(pg).unwrap().primary.unwrap();
            let Some(past) = closed.pg_history[&pg].get(1) else {
                continue; // osd.3 came back elsewhere: this PG's interval goes on
            };
            assert_eq!(past.first, start.epoch);
            assert_eq!(
                past.maybe_went_rw,
                primary == OsdId(0),
                "{pg} led by {primary}: {past:?}"
            );
            checked += 1;
        }
        assert!(checked > 0);
    }

    #[test]
    fn up_thru_counts_only_for_the_life_that_began_by_the_interval() {
        let mut map = booted(3);
        let info = map.osds.get_mut(&OsdId(0)).unwrap();
        info.up_from = Epoch(5);
        info.up_thru = Epoch(100);
        assert!(alive_through(&map, OsdId(0), Epoch(5)));
        assert!(alive_through(&map, OsdId(0), Epoch(100)));
        assert!(
            !alive_through(&map, OsdId(0), Epoch(101)),
            "not recorded that far"
        );
        // An interval that began before this life: the record is not about it.
        assert!(!alive_through(&map, OsdId(0), Epoch(4)));
        assert!(!alive_through(&map, OsdId(9), Epoch(5)), "no such OSD");
    }
}
