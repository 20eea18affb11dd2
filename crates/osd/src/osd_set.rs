//! [`OsdSet`]: the members of an acting set that a write still waits on.
//!
//! Every replicated write on a primary builds one and empties it as the replicas
//! answer. A `BTreeSet` allocated a node for it per write; an acting set has a few
//! members, so they live inline, with a vector behind them only for a set larger than
//! any pool's size (never, as pools are validated, but not assumed).

use carmine_types::OsdId;

/// Members kept inline: the largest pool size is 10, so a primary waits on at most 9.
const INLINE_MAX: usize = 9;

/// A small set of OSD ids: insertion order is not kept, membership is all it answers.
#[derive(Clone, Default)]
pub(crate) struct OsdSet {
    inline: [OsdId; INLINE_MAX],
    inline_len: usize,
    spilled: Vec<OsdId>,
}

impl OsdSet {
    pub fn is_empty(&self) -> bool {
        self.inline_len == 0 && self.spilled.is_empty()
    }

    pub fn len(&self) -> usize {
        self.inline_len + self.spilled.len()
    }

    pub fn contains(&self, osd: &OsdId) -> bool {
        self.inline[..self.inline_len].contains(osd) || self.spilled.contains(osd)
    }

    /// Adds `osd`; false if it was already a member.
    pub fn insert(&mut self, osd: OsdId) -> bool {
        if self.contains(&osd) {
            return false;
        }
        if self.inline_len < INLINE_MAX {
            self.inline[self.inline_len] = osd;
            self.inline_len += 1;
        } else {
            self.spilled.push(osd);
        }
        true
    }

    /// Removes `osd`; false if it was not a member.
    pub fn remove(&mut self, osd: &OsdId) -> bool {
        if let Some(index) = self.inline[..self.inline_len]
            .iter()
            .position(|held| held == osd)
        {
            self.inline_len -= 1;
            self.inline.swap(index, self.inline_len);
            return true;
        }
        match self.spilled.iter().position(|held| held == osd) {
            Some(index) => {
                self.spilled.swap_remove(index);
                true
            }
            None => false,
        }
    }

    pub fn clear(&mut self) {
        self.inline_len = 0;
        self.spilled.clear();
    }

    pub fn iter(&self) -> impl Iterator<Item = &OsdId> + '_ {
        self.inline[..self.inline_len].iter().chain(&self.spilled)
    }
}

impl FromIterator<OsdId> for OsdSet {
    fn from_iter<I: IntoIterator<Item = OsdId>>(members: I) -> Self {
        let mut set = OsdSet::default();
        for osd in members {
            set.insert(osd);
        }
        set
    }
}

impl std::fmt::Debug for OsdSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Against `BTreeSet` (what it replaces), past the inline capacity too.
    #[test]
    fn behaves_as_a_set() {
        let mut set = OsdSet::default();
        let mut model = BTreeSet::new();
        let mut state = 7u32;
        for _ in 0..2_000 {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            let osd = OsdId((state >> 16) % 24);
            match (state >> 8) % 4 {
                0 | 1 => assert_eq!(set.insert(osd), model.insert(osd)),
                2 => assert_eq!(set.remove(&osd), model.remove(&osd)),
                _ => assert_eq!(set.contains(&osd), model.contains(&osd)),
            }
            assert_eq!(set.is_empty(), model.is_empty());
            assert_eq!(set.iter().copied().collect::<BTreeSet<_>>(), model);
            if state.is_multiple_of(97) {
                set.clear();
                model.clear();
            }
        }
    }

    #[test]
    fn collects_without_duplicates() {
        let set: OsdSet = [OsdId(3), OsdId(1), OsdId(3)].into_iter().collect();
        assert!(set.contains(&OsdId(1)) && set.contains(&OsdId(3)));
        assert_eq!(set.iter().count(), 2);
    }
}
