//! The hash functions Ceph uses for placement.
//!
//! * `crush_hash32_rjenkins1_*` are the multi-word Jenkins mixes of Ceph's
//!   `src/crush/hash.c` (CRUSH_HASH_RJENKINS1, seed 1315423911). Every bucket
//!   algorithm and the reweight test draw their randomness from them.
//! * [`str_hash_rjenkins`] is `ceph_str_hash_rjenkins` from
//!   `src/common/ceph_hash.cc`: object name -> placement seed.
//! * [`stable_mod`] is `ceph_stable_mod` from `src/include/rados.h`: placement
//!   seed -> PG number, stable when `pg_num` grows.

/// The only hash type Ceph defines (`CRUSH_HASH_RJENKINS1`).
pub const CRUSH_HASH_RJENKINS1: u8 = 0;

/// The seed Ceph's `hash.c` xors into every CRUSH hash.
const CRUSH_HASH_SEED: u32 = 1_315_423_911;

/// Robert Jenkins' 96-bit mix, as `crush_hashmix` in Ceph's `hash.c`.
#[inline(always)]
fn hashmix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*b).wrapping_sub(*c) ^ (*c >> 13);
    *b = b.wrapping_sub(*c).wrapping_sub(*a) ^ (*a << 8);
    *c = c.wrapping_sub(*a).wrapping_sub(*b) ^ (*b >> 13);
    *a = a.wrapping_sub(*b).wrapping_sub(*c) ^ (*c >> 12);
    *b = b.wrapping_sub(*c).wrapping_sub(*a) ^ (*a << 16);
    *c = c.wrapping_sub(*a).wrapping_sub(*b) ^ (*b >> 5);
    *a = a.wrapping_sub(*b).wrapping_sub(*c) ^ (*c >> 3);
    *b = b.wrapping_sub(*c).wrapping_sub(*a) ^ (*a << 10);
    *c = c.wrapping_sub(*a).wrapping_sub(*b) ^ (*b >> 15);
}

/// `crush_hash32_rjenkins1_2(a, b)`.
#[inline]
pub fn crush_hash32_rjenkins1_2(a: u32, b: u32) -> u32 {
    let (mut a, mut b) = (a, b);
    let mut hash = CRUSH_HASH_SEED ^ a ^ b;
    let (mut x, mut y) = (231_232u32, 1232u32);
    hashmix(&mut a, &mut b, &mut hash);
    hashmix(&mut x, &mut a, &mut hash);
    hashmix(&mut b, &mut y, &mut hash);
    hash
}

/// `crush_hash32_rjenkins1_3(a, b, c)`.
#[inline]
pub fn crush_hash32_rjenkins1_3(a: u32, b: u32, c: u32) -> u32 {
    rjenkins1_3(a, b, c)
}

/// [`crush_hash32_rjenkins1_3`] of `(a, b[i], c)` for every lane: straight-line
/// code the compiler turns into vector instructions (straw2 hashes every item of a
/// bucket with the same `a` and `c`).
#[inline]
pub(crate) fn crush_hash32_rjenkins1_3_lanes<const N: usize>(
    a: u32,
    b: &[u32; N],
    c: u32,
) -> [u32; N] {
    let mut out = [0u32; N];
    for (out, &b) in out.iter_mut().zip(b) {
        *out = rjenkins1_3(a, b, c);
    }
    out
}

#[inline(always)]
fn rjenkins1_3(a: u32, b: u32, c: u32) -> u32 {
    let (mut a, mut b, mut c) = (a, b, c);
    let mut hash = CRUSH_HASH_SEED ^ a ^ b ^ c;
    let (mut x, mut y) = (231_232u32, 1232u32);
    hashmix(&mut a, &mut b, &mut hash);
    hashmix(&mut c, &mut x, &mut hash);
    hashmix(&mut y, &mut a, &mut hash);
    hashmix(&mut b, &mut x, &mut hash);
    hashmix(&mut y, &mut c, &mut hash);
    hash
}

/// `crush_hash32_rjenkins1_4(a, b, c, d)`.
pub fn crush_hash32_rjenkins1_4(a: u32, b: u32, c: u32, d: u32) -> u32 {
    let (mut a, mut b, mut c, mut d) = (a, b, c, d);
    let mut hash = CRUSH_HASH_SEED ^ a ^ b ^ c ^ d;
    let (mut x, mut y) = (231_232u32, 1232u32);
    hashmix(&mut a, &mut b, &mut hash);
    hashmix(&mut c, &mut d, &mut hash);
    hashmix(&mut a, &mut x, &mut hash);
    hashmix(&mut y, &mut b, &mut hash);
    hashmix(&mut c, &mut x, &mut hash);
    hashmix(&mut y, &mut d, &mut hash);
    hash
}

/// `crush_hash32_rjenkins1_5(a, b, c, d, e)`.
pub fn crush_hash32_rjenkins1_5(a: u32, b: u32, c: u32, d: u32, e: u32) -> u32 {
    let (mut a, mut b, mut c, mut d, mut e) = (a, b, c, d, e);
    let mut hash = CRUSH_HASH_SEED ^ a ^ b ^ c ^ d ^ e;
    let (mut x, mut y) = (231_232u32, 1232u32);
    hashmix(&mut a, &mut b, &mut hash);
    hashmix(&mut c, &mut d, &mut hash);
    hashmix(&mut e, &mut x, &mut hash);
    hashmix(&mut y, &mut a, &mut hash);
    hashmix(&mut b, &mut x, &mut hash);
    hashmix(&mut y, &mut c, &mut hash);
    hashmix(&mut d, &mut x, &mut hash);
    hashmix(&mut y, &mut e, &mut hash);
    hash
}

/// Reads four little-endian bytes, as `ceph_str_hash_rjenkins` does.
fn word(k: &[u8]) -> u32 {
    u32::from(k[0]) | (u32::from(k[1]) << 8) | (u32::from(k[2]) << 16) | (u32::from(k[3]) << 24)
}

/// `ceph_str_hash_rjenkins`: the object-name hash of pools with
/// `object_hash rjenkins` (every pool Ceph creates by default).
pub fn str_hash_rjenkins(data: &[u8]) -> u32 {
    let mut a: u32 = 0x9e37_79b9;
    let mut b: u32 = a;
    let mut c: u32 = 0;
    let mut k = data;
    while k.len() >= 12 {
        a = a.wrapping_add(word(&k[0..4]));
        b = b.wrapping_add(word(&k[4..8]));
        c = c.wrapping_add(word(&k[8..12]));
        hashmix(&mut a, &mut b, &mut c);
        k = &k[12..];
    }
    // Ceph adds the length as a u32 (the original C takes `unsigned length`).
    c = c.wrapping_add(data.len() as u32);
    // The tail: bytes 0..4 go to a, 4..8 to b, 8..11 to c shifted one byte
    // up (c's low byte is reserved for the length).
    for (index, &byte) in k.iter().enumerate() {
        let byte = u32::from(byte);
        match index {
            0..=3 => a = a.wrapping_add(byte << (8 * index)),
            4..=7 => b = b.wrapping_add(byte << (8 * (index - 4))),
            _ => c = c.wrapping_add(byte << (8 * (index - 7))),
        }
    }
    hashmix(&mut a, &mut b, &mut c);
    c
}

/// `ceph_stable_mod(x, b, bmask)`: maps a placement seed onto `b` PGs, where
/// `bmask` is the next power of two at or above `b`, minus one.
pub fn stable_mod(x: u32, b: u32, bmask: u32) -> u32 {
    if (x & bmask) < b {
        x & bmask
    } else {
        x & (bmask >> 1)
    }
}

/// The mask `stable_mod` needs for `count` PGs: `(1 << cbits(count - 1)) - 1`,
/// as `pg_pool_t::calc_pg_masks` computes it.
pub fn stable_mod_mask(count: u32) -> u32 {
    let bits = 32 - count.saturating_sub(1).leading_zeros();
    if bits >= 32 {
        u32::MAX
    } else {
        (1u32 << bits) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_mod_folds_the_top_half() {
        assert_eq!(stable_mod_mask(192), 255);
        assert_eq!(stable_mod_mask(256), 255);
        assert_eq!(stable_mod_mask(1), 0);
        assert_eq!(stable_mod(0x1c5, 192, 255), 0x45);
        assert_eq!(stable_mod(0x1a, 192, 255), 0x1a);
    }

    #[test]
    fn hashes_are_deterministic_and_spread() {
        assert_ne!(
            crush_hash32_rjenkins1_2(0, 0),
            crush_hash32_rjenkins1_2(0, 1)
        );
        assert_ne!(
            crush_hash32_rjenkins1_3(1, 2, 3),
            crush_hash32_rjenkins1_3(3, 2, 1)
        );
        assert_ne!(str_hash_rjenkins(b"foo"), str_hash_rjenkins(b"fop"));
    }
}
