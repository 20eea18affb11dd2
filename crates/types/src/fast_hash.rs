//! A keyed multiply-fold hasher for the hash maps on the data path (the OSD's object
//! names and request ids, the client's op waiters, sessions and PG targets): std's
//! SipHash costs about a thousand instructions for a 37-byte RBD object name, this
//! about fifty (through the NBD server, SipHash was about 860 instructions per 4 KiB
//! write; callgrind).
//!
//! Each 16 bytes are folded in with one 64×64→128-bit product (as foldhash does),
//! enough mixing for hashbrown, which takes its bucket from the low bits and its tag
//! from the high ones. The key is random per map, so clients cannot choose object
//! names that collide.
//!
//! ```ignore
//! let mut writes: HashMap<String, u32, FastHash> = HashMap::with_hasher(FastHash::new());
//! ```

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

/// A `HashMap` with a [`FastHash`] (its `default()` draws the key).
pub type FastHashMap<K, V> = HashMap<K, V, FastHash>;

/// Builds [`FastHasher`]s with one random key.
#[derive(Debug, Clone, Copy)]
pub struct FastHash {
    key: u64,
}

impl FastHash {
    /// A hasher keyed with a random value (from std's `RandomState`).
    pub fn new() -> Self {
        let key = std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64);
        Self { key }
    }
}

impl Default for FastHash {
    fn default() -> Self {
        Self::new()
    }
}

impl BuildHasher for FastHash {
    type Hasher = FastHasher;

    fn build_hasher(&self) -> FastHasher {
        FastHasher(self.key)
    }
}

/// The hasher [`FastHash`] builds.
pub struct FastHasher(u64);

const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;
const SECOND: u64 = 0x243f_6a88_85a3_08d3;

fn fold(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

fn word(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word[..bytes.len()].copy_from_slice(bytes);
    u64::from_le_bytes(word)
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(16);
        for chunk in &mut chunks {
            let (low, high) = chunk.split_at(8);
            self.0 = fold(self.0 ^ word(low), word(high) ^ SECOND);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let (low, high) = rest.split_at(rest.len().min(8));
            // The length keeps "a" and "a\0" apart.
            let high = word(high) ^ ((rest.len() as u64) << 56);
            self.0 = fold(self.0 ^ word(low), high ^ SECOND);
        }
    }

    fn write_u8(&mut self, value: u8) {
        self.write_u64(u64::from(value));
    }

    fn write_u32(&mut self, value: u32) {
        self.write_u64(u64::from(value));
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = fold(self.0 ^ value, MULTIPLIER);
    }

    fn write_usize(&mut self, value: usize) {
        self.write_u64(value as u64);
    }

    fn finish(&self) -> u64 {
        fold(self.0, MULTIPLIER.rotate_left(29) | 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    #[test]
    fn equal_keys_hash_equal_and_near_keys_apart() {
        let hash = FastHash::new();
        let names: Vec<String> = (0..4096)
            .map(|i| format!("rbd_data.10226b8b4567.{i:016x}"))
            .collect();
        for name in &names {
            assert_eq!(hash.hash_one(name), hash.hash_one(name.clone()));
        }
        let distinct: HashSet<u64> = names.iter().map(|n| hash.hash_one(n)).collect();
        assert_eq!(distinct.len(), names.len());
        // hashbrown buckets by the low bits: they too must spread.
        let buckets: HashSet<u64> = names.iter().map(|n| hash.hash_one(n) & 4095).collect();
        assert!(buckets.len() > 2000, "{} buckets of 4096", buckets.len());
        assert_ne!(hash.hash_one("a"), hash.hash_one("a\0"));
        assert_ne!(hash.hash_one(""), hash.hash_one("\0"));
    }

    #[test]
    fn sequential_ids_differ_in_the_high_bits() {
        // hashbrown picks a group by the low bits and tags entries with the top 7; a
        // hasher that left either constant for counting keys (tids) would pile them up.
        let hash = FastHash::new();
        let tops: HashSet<u64> = (1..=128u64).map(|tid| hash.hash_one(tid) >> 57).collect();
        let lows: HashSet<u64> = (1..=128u64).map(|tid| hash.hash_one(tid) & 0x7f).collect();
        // Random hashes would give about 81 distinct values of 128 each.
        assert!(tops.len() > 64, "top bits take {} values", tops.len());
        assert!(lows.len() > 64, "low bits take {} values", lows.len());
    }

    #[test]
    fn works_as_a_map_hasher() {
        let mut map: HashMap<String, u32, FastHash> = HashMap::default();
        for i in 0..1000 {
            *map.entry(format!("object{i}")).or_default() += i;
        }
        assert_eq!(map.len(), 1000);
        assert_eq!(map["object999"], 999);
    }
}
