//! A cheap hasher for the client's per-op maps (op waiters by tid, sessions by
//! target, targets by PG).
//!
//! The standard `HashMap` hashes with SipHash-1-3, which resists flooding by keys an
//! attacker picks. These keys are not picked by anyone outside: tids count up from 1,
//! targets and PGs come from the cluster map. SipHash cost about 860 instructions per
//! 4 KiB write through the NBD server (three to four lookups per op; callgrind), the
//! multiply-rotate below (FxHash's) a few dozen.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` keyed by values that come from this process or the cluster map.
pub(crate) type FastHashMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// FxHash: per word, rotate, xor, multiply by an odd constant; the halves swapped at
/// the end (see `finish`).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FastHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("eight bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, value: u8) {
        self.add(u64::from(value));
    }

    fn write_u16(&mut self, value: u16) {
        self.add(u64::from(value));
    }

    fn write_u32(&mut self, value: u32) {
        self.add(u64::from(value));
    }

    fn write_u64(&mut self, value: u64) {
        self.add(value);
    }

    fn write_usize(&mut self, value: usize) {
        self.add(value as u64);
    }

    fn finish(&self) -> u64 {
        // hashbrown takes the bucket from the low bits and a 7-bit tag from the top
        // ones. A product's top bits vary little across counting keys (62 tags for
        // tids 1..=128); swapping the halves puts its best-mixed bits in both places
        // (110 tags, 120 buckets of 128).
        self.hash.rotate_left(32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn sequential_tids_differ_in_the_high_bits() {
        // hashbrown picks a group by the low bits and tags entries with the top 7; a
        // hasher that left either constant for counting keys would pile them up.
        let build = BuildHasherDefault::<FastHasher>::default();
        let tops: std::collections::HashSet<u64> =
            (1..=128u64).map(|tid| build.hash_one(tid) >> 57).collect();
        let lows: std::collections::HashSet<u64> =
            (1..=128u64).map(|tid| build.hash_one(tid) & 0x7f).collect();
        // Random hashes would give about 81 distinct values of 128 each.
        assert!(tops.len() > 96, "top bits take {} values", tops.len());
        assert!(lows.len() > 96, "low bits take {} values", lows.len());
    }

    #[test]
    fn byte_strings_hash_every_byte() {
        let build = BuildHasherDefault::<FastHasher>::default();
        assert_ne!(build.hash_one(b"abcdefghi"), build.hash_one(b"abcdefghj"));
        assert_ne!(build.hash_one(b"a"), build.hash_one(b"b"));
    }

    #[test]
    fn works_as_a_map() {
        let mut map = FastHashMap::default();
        for tid in 0..10_000u64 {
            map.insert(tid, tid * 3);
        }
        assert!((0..10_000u64).all(|tid| map.get(&tid) == Some(&(tid * 3))));
        assert_eq!(map.get(&10_000), None);
    }
}
