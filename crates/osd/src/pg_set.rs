//! [`PgSet`]: a small ordered set of PG ids that keeps its buffer.
//!
//! The shard notes which PGs wait for a store commit after every message and walks
//! them after every turn. A `BTreeSet` allocated a node for the first PG noted and
//! freed it at the walk: an allocation and a free per turn on the write path. A
//! shard holds at most a few hundred PGs and a turn touches a few, so a sorted
//! vector is as fast to search and allocates only when it grows past its largest
//! size so far. The order is the ids' order, as before, so a walk is deterministic.

use carmine_types::PgId;

#[derive(Debug, Default, Clone)]
pub(crate) struct PgSet {
    sorted: Vec<PgId>,
}

impl PgSet {
    pub fn insert(&mut self, pgid: PgId) {
        if let Err(at) = self.sorted.binary_search(&pgid) {
            self.sorted.insert(at, pgid);
        }
    }

    pub fn remove(&mut self, pgid: &PgId) {
        if let Ok(at) = self.sorted.binary_search(pgid) {
            self.sorted.remove(at);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// Moves every member, in order, into `into` (which is cleared first) and leaves
    /// the set empty: the caller walks them while the set collects the next ones, and
    /// both buffers are kept for the next turn.
    pub fn take_into(&mut self, into: &mut Vec<PgId>) {
        into.clear();
        std::mem::swap(&mut self.sorted, into);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn behaves_as_an_ordered_set() {
        let mut set = PgSet::default();
        let mut model = BTreeSet::new();
        let mut walked = Vec::new();
        // A fixed pseudo-random walk of inserts, removes and takes.
        let mut x = 12345u64;
        for _ in 0..5_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let pgid = PgId::new((x >> 60) % 3, ((x >> 40) % 17) as u32);
            match (x >> 20) % 7 {
                0..=3 => {
                    set.insert(pgid);
                    model.insert(pgid);
                }
                4 | 5 => {
                    set.remove(&pgid);
                    model.remove(&pgid);
                }
                _ => {
                    set.take_into(&mut walked);
                    let expected: Vec<PgId> = std::mem::take(&mut model).into_iter().collect();
                    assert_eq!(walked, expected);
                    assert!(set.is_empty());
                }
            }
            assert_eq!(set.is_empty(), model.is_empty());
            assert_eq!(set.sorted, model.iter().copied().collect::<Vec<_>>());
        }
    }
}
