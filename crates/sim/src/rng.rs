//! A tiny seeded PRNG (SplitMix64), written here so that a seed replays the same run
//! whatever version of an external crate is in the lock file.
//!
//! The simulator keeps one stream per purpose (shape, network, workload, faults), each
//! forked from the seed, so that adding a draw to one purpose does not shift the others.

/// SplitMix64 (Steele, Lea, Flood 2014): one `u64` of state, full period, good mixing.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// An independent stream for `purpose`, derived from this one without drawing.
    pub fn fork(&self, purpose: u64) -> Rng {
        let mut mixer = Rng::new(self.state ^ purpose.wrapping_mul(0xA076_1D64_78BD_642F));
        Rng::new(mixer.next_u64())
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..count` (Lemire's multiply-shift; the bias is below 2^-32 here).
    pub fn below(&mut self, count: u64) -> u64 {
        assert!(count > 0, "below(0)");
        ((u128::from(self.next_u64()) * u128::from(count)) >> 64) as u64
    }

    /// Uniform in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        assert!(low <= high, "between({low}, {high})");
        low + self.below(high - low + 1)
    }

    /// True with probability `numerator / denominator`.
    pub fn chance(&mut self, numerator: u64, denominator: u64) -> bool {
        assert!(denominator > 0);
        self.below(denominator) < numerator
    }

    /// An index into a slice of `length` elements.
    pub fn index(&mut self, length: usize) -> usize {
        self.below(length as u64) as usize
    }

    /// An exponentially distributed delay with the given mean (at least 1).
    pub fn exponential(&mut self, mean: u64) -> u64 {
        // -ln(U) * mean, with U in (0, 1]; f64 is deterministic for these operations.
        let unit = (self.below(1 << 53) + 1) as f64 / (1u64 << 53) as f64;
        ((-unit.ln()) * mean as f64).max(1.0) as u64
    }

    pub fn bytes(&mut self, length: usize) -> Vec<u8> {
        (0..length).map(|_| self.below(256) as u8).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_forks_differ() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        assert_eq!(a.next_u64(), b.next_u64());
        let mut fork_1 = a.fork(1);
        let mut fork_2 = a.fork(2);
        assert_ne!(fork_1.next_u64(), fork_2.next_u64());
    }

    #[test]
    fn ranges_hold() {
        let mut rng = Rng::new(7);
        for _ in 0..10_000 {
            assert!(rng.below(5) < 5);
            let value = rng.between(3, 5);
            assert!((3..=5).contains(&value));
            assert!(rng.exponential(100) >= 1);
        }
    }
}
