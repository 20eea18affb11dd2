//! An object's extents by offset, with the common shapes kept inline.
//!
//! Nearly every object holds one extent (a whole-object write, or a block image's 4 KiB
//! data object). A `BTreeMap` for it allocates a leaf node of about 460 bytes per
//! object, and a whole-object overwrite removes and inserts through it. Held inline,
//! an object with no extent or one costs nothing beyond the map's own size, and only
//! an object with two or more extents has a tree.

use bytes::Bytes;
use std::collections::BTreeMap;

/// Non-overlapping extents keyed by offset (the caller keeps them apart).
#[derive(Debug, Clone, Default)]
pub(super) enum ExtentMap {
    #[default]
    Empty,
    One(u64, Bytes),
    /// Two or more extents (a map that shrinks to one goes back inline).
    Many(BTreeMap<u64, Bytes>),
}

impl ExtentMap {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        match self {
            ExtentMap::Empty => 0,
            ExtentMap::One(..) => 1,
            ExtentMap::Many(map) => map.len(),
        }
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[cfg(test)]
    pub fn get(&self, offset: u64) -> Option<&Bytes> {
        match self {
            ExtentMap::Empty => None,
            ExtentMap::One(at, data) => (*at == offset).then_some(data),
            ExtentMap::Many(map) => map.get(&offset),
        }
    }

    /// Inserts `data` at `offset`, returning the extent that started there.
    pub fn insert(&mut self, offset: u64, data: Bytes) -> Option<Bytes> {
        match self {
            ExtentMap::Empty => {
                *self = ExtentMap::One(offset, data);
                None
            }
            ExtentMap::One(at, old) if *at == offset => Some(std::mem::replace(old, data)),
            ExtentMap::One(..) => {
                let ExtentMap::One(at, old) = std::mem::take(self) else {
                    unreachable!("matched above");
                };
                *self = ExtentMap::Many(BTreeMap::from([(at, old), (offset, data)]));
                None
            }
            ExtentMap::Many(map) => map.insert(offset, data),
        }
    }

    /// Removes the extent starting at `offset`.
    pub fn remove(&mut self, offset: u64) -> Option<Bytes> {
        match self {
            ExtentMap::Empty => None,
            ExtentMap::One(at, _) if *at != offset => None,
            ExtentMap::One(..) => match std::mem::take(self) {
                ExtentMap::One(_, data) => Some(data),
                _ => unreachable!("matched above"),
            },
            ExtentMap::Many(map) => {
                let removed = map.remove(&offset);
                if map.len() == 1 {
                    let (at, data) = map.pop_first().expect("one left");
                    *self = ExtentMap::One(at, data);
                }
                removed
            }
        }
    }

    /// The last extent starting before `bound` (inclusive when `inclusive`).
    pub fn last_before(&self, bound: u64, inclusive: bool) -> Option<(u64, &Bytes)> {
        let before = |at: u64| at < bound || (inclusive && at == bound);
        match self {
            ExtentMap::Empty => None,
            ExtentMap::One(at, data) => before(*at).then_some((*at, data)),
            ExtentMap::Many(map) if inclusive => map
                .range(..=bound)
                .next_back()
                .map(|(&at, data)| (at, data)),
            ExtentMap::Many(map) => map.range(..bound).next_back().map(|(&at, data)| (at, data)),
        }
    }

    /// The last extent starting at or before `bound`, to change in place.
    pub fn last_at_or_before_mut(&mut self, bound: u64) -> Option<(u64, &mut Bytes)> {
        match self {
            ExtentMap::Empty => None,
            ExtentMap::One(at, data) => (*at <= bound).then_some((*at, data)),
            ExtentMap::Many(map) => map
                .range_mut(..=bound)
                .next_back()
                .map(|(&at, data)| (at, data)),
        }
    }

    /// The offset of the first extent starting in `start..end`.
    pub fn first_in(&self, start: u64, end: u64) -> Option<u64> {
        match self {
            ExtentMap::Empty => None,
            ExtentMap::One(at, _) => (start..end).contains(at).then_some(*at),
            ExtentMap::Many(map) => map.range(start..end).next().map(|(&at, _)| at),
        }
    }

    /// Calls `f` on every extent starting in `start..end`, in order.
    pub fn for_each_in(&self, start: u64, end: u64, mut f: impl FnMut(u64, &Bytes)) {
        match self {
            ExtentMap::Empty => {}
            ExtentMap::One(at, data) => {
                if (start..end).contains(at) {
                    f(*at, data);
                }
            }
            ExtentMap::Many(map) => map.range(start..end).for_each(|(&at, data)| f(at, data)),
        }
    }

    /// Every extent, in order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &Bytes)> + '_ {
        let (one, many) = match self {
            ExtentMap::Empty => (None, None),
            ExtentMap::One(at, data) => (Some((*at, data)), None),
            ExtentMap::Many(map) => (None, Some(map.iter().map(|(&at, data)| (at, data)))),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(n: u8) -> Bytes {
        Bytes::from(vec![n; 4])
    }

    #[test]
    fn grows_into_a_tree_and_shrinks_back_inline() {
        let mut map = ExtentMap::default();
        assert_eq!(map.insert(8, b(1)), None);
        assert!(matches!(map, ExtentMap::One(8, _)));
        assert_eq!(map.insert(8, b(2)), Some(b(1)));
        assert_eq!(map.insert(0, b(3)), None);
        assert_eq!(map.insert(16, b(4)), None);
        assert_eq!(map.len(), 3);
        let all: Vec<u64> = map.iter().map(|(at, _)| at).collect();
        assert_eq!(all, vec![0, 8, 16]);
        assert_eq!(map.last_before(8, false).map(|(at, _)| at), Some(0));
        assert_eq!(map.last_before(8, true).map(|(at, _)| at), Some(8));
        assert_eq!(map.last_at_or_before_mut(9).map(|(at, _)| at), Some(8));
        assert_eq!(map.last_at_or_before_mut(7).map(|(at, _)| at), Some(0));
        assert_eq!(map.first_in(1, 17), Some(8));
        let mut seen = Vec::new();
        map.for_each_in(1, 17, |at, _| seen.push(at));
        assert_eq!(seen, vec![8, 16]);
        assert_eq!(map.remove(8), Some(b(2)));
        assert_eq!(map.remove(8), None);
        assert_eq!(map.remove(0), Some(b(3)));
        assert!(matches!(map, ExtentMap::One(16, _)));
        assert_eq!(map.last_at_or_before_mut(15), None);
        assert_eq!(map.last_at_or_before_mut(16).map(|(at, _)| at), Some(16));
        assert_eq!(map.last_before(16, false), None);
        assert_eq!(map.first_in(0, 16), None);
        assert_eq!(map.first_in(16, 17), Some(16));
        assert_eq!(map.remove(3), None);
        assert_eq!(map.remove(16), Some(b(4)));
        assert!(map.is_empty());
        assert_eq!(map.iter().count(), 0);
    }
}
