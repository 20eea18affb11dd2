//! crc32c (Castagnoli, as in iSCSI and Ceph's msgr2), the checksum of every frame.
//!
//! Buffers of [`FOLD_BYTES_MIN`] bytes or more are folded with carry-less
//! multiplication over 512-bit registers (VPCLMULQDQ, AVX-512) where the CPU has it:
//! four times the speed of the `crc32` instruction the `crc32c` crate uses (three
//! streams in parallel), which is the fallback for long buffers on other CPUs. Short
//! buffers and the tails of folded ones take a plain `crc32` loop, cheaper to start.
//! At 4 KiB the checksum of a message's payload was a quarter of the messenger's own
//! CPU time per round trip.
//!
//! Folding, in the bit-reflected layout the CPU's `crc32` instruction uses: a 128-bit
//! lane `A = H·x^64 + L` (H in the low quadword: earlier bits are higher powers) moved
//! `D` bits forward is congruent, modulo the polynomial P, to `H·(x^(D+64) mod P) +
//! L·(x^D mod P)`, a value under 96 bits that is XORed into the lane `D` bits later.
//! A carry-less product of two reflected quadwords comes out multiplied by x, so the
//! constants are `x^(D+63) mod P` and `x^(D-1) mod P`. What is left after folding, one
//! 128-bit lane, is finished with two `crc32` instructions.
#![allow(unsafe_code)]

/// Buffers at least this long are folded (when the CPU can).
pub const FOLD_BYTES_MIN: usize = 256;

/// The crc32c of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

/// The crc32c of the bytes whose crc32c is `crc`, followed by `data`.
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if data.len() >= FOLD_BYTES_MIN && fold::available() {
            let folded_bytes = data.len() / 64 * 64;
            // SAFETY: `available` checked that the CPU has every feature `fold_raw`
            // and `words_raw` enable.
            let raw = unsafe {
                let raw = fold::fold_raw(!crc, &data[..folded_bytes]);
                fold::words_raw(raw, &data[folded_bytes..])
            };
            return !raw;
        }
        if data.len() < FOLD_BYTES_MIN && fold::has_crc32() {
            // SAFETY: `has_crc32` checked for SSE4.2.
            return !unsafe { fold::words_raw(!crc, data) };
        }
    }
    crc32c::crc32c_append(crc, data)
}

/// Shared segments at least this long have their crc32c remembered (see
/// [`crc32c_shared`]); shorter ones are cheaper to checksum again than to look up.
pub const MEMO_BYTES_MIN: usize = 64 * 1024;

thread_local! {
    /// The last large shared segment checksummed or verified on this thread, and its
    /// crc32c. Holding a reference keeps its memory alive, so no other buffer can
    /// appear at the same address meanwhile: same pointer and length means same bytes
    /// (a `Bytes` is immutable). It pins at most one buffer per thread.
    static MEMO: std::cell::RefCell<Option<(bytes::Bytes, u32)>> =
        const { std::cell::RefCell::new(None) };
}

/// The crc32c of a shared segment, computed once per buffer rather than once per
/// send: a primary OSD verifies a large write payload on receipt ([`remember`]) and
/// forwards the very same buffer to each replica, so each send finds it here.
pub fn crc32c_shared(segment: &bytes::Bytes) -> u32 {
    if segment.len() < MEMO_BYTES_MIN {
        return crc32c(segment);
    }
    let same = |(known, _): &(bytes::Bytes, u32)| {
        known.as_ptr() == segment.as_ptr() && known.len() == segment.len()
    };
    let hit = MEMO.with_borrow(|memo| memo.as_ref().filter(|m| same(m)).map(|m| m.1));
    if let Some(crc) = hit {
        return crc;
    }
    let crc = crc32c(segment);
    remember(segment, crc);
    crc
}

/// Records that `segment` (received and verified, or just checksummed) has `crc`.
pub fn remember(segment: &bytes::Bytes, crc: u32) {
    if segment.len() >= MEMO_BYTES_MIN {
        debug_assert_eq!(crc32c(segment), crc);
        MEMO.with_borrow_mut(|memo| *memo = Some((segment.clone(), crc)));
    }
}

/// `x^exponent mod P` for P the crc32c polynomial, as a quadword in the reflected
/// layout (the coefficient of `x^d` at bit `63 - d`).
const fn power_mod_reflected(exponent: u32) -> u64 {
    const POLY: u64 = 0x1_1EDC_6F41;
    let mut remainder: u64 = 1;
    let mut step = 0;
    while step < exponent {
        remainder <<= 1;
        if remainder & (1 << 32) != 0 {
            remainder ^= POLY;
        }
        step += 1;
    }
    remainder.reverse_bits()
}

/// The pair of constants that moves a 128-bit lane `bits` forward: (for the low
/// quadword, for the high quadword).
const fn fold_constants(bits: u32) -> (u64, u64) {
    (
        power_mod_reflected(bits + 63),
        power_mod_reflected(bits - 1),
    )
}

#[cfg(target_arch = "x86_64")]
mod fold {
    use super::fold_constants;
    use std::arch::x86_64::*;

    /// The `crc32` instruction (SSE4.2); the short-buffer path.
    pub(super) fn has_crc32() -> bool {
        is_x86_feature_detected!("sse4.2")
    }

    /// The raw crc32c register after `data`, eight bytes per `crc32` instruction:
    /// for short buffers and the tail of folded ones, where the `crc32c` crate's
    /// set-up costs more than the bytes.
    ///
    /// # Safety
    /// The CPU must have SSE4.2 ([`has_crc32`]).
    #[target_feature(enable = "sse4.2")]
    pub(super) unsafe fn words_raw(state: u32, data: &[u8]) -> u32 {
        let mut raw = u64::from(state);
        let mut words = data.chunks_exact(8);
        for word in &mut words {
            raw = _mm_crc32_u64(raw, u64::from_le_bytes(word.try_into().expect("8 bytes")));
        }
        let mut raw = raw as u32;
        for &byte in words.remainder() {
            raw = _mm_crc32_u8(raw, byte);
        }
        raw
    }

    pub(super) fn available() -> bool {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("vpclmulqdq")
            && is_x86_feature_detected!("pclmulqdq")
            && is_x86_feature_detected!("sse4.2")
    }

    const BY_2048: (u64, u64) = fold_constants(2048);
    const BY_1536: (u64, u64) = fold_constants(1536);
    const BY_1024: (u64, u64) = fold_constants(1024);
    const BY_512: (u64, u64) = fold_constants(512);
    const BY_384: (u64, u64) = fold_constants(384);
    const BY_256: (u64, u64) = fold_constants(256);
    const BY_128: (u64, u64) = fold_constants(128);

    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse4.2")]
    fn wide((low, high): (u64, u64)) -> __m512i {
        let (low, high) = (low as i64, high as i64);
        _mm512_set_epi64(high, low, high, low, high, low, high, low)
    }

    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse4.2")]
    fn narrow((low, high): (u64, u64)) -> __m128i {
        _mm_set_epi64x(high as i64, low as i64)
    }

    /// Each 128-bit lane of `value` moved forward by the distance of `constants`.
    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse4.2")]
    fn fold_wide(value: __m512i, constants: __m512i) -> __m512i {
        let low = _mm512_clmulepi64_epi128::<0x00>(value, constants);
        let high = _mm512_clmulepi64_epi128::<0x11>(value, constants);
        _mm512_xor_si512(low, high)
    }

    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse4.2")]
    fn fold_narrow(value: __m128i, constants: __m128i) -> __m128i {
        let low = _mm_clmulepi64_si128::<0x00>(value, constants);
        let high = _mm_clmulepi64_si128::<0x11>(value, constants);
        _mm_xor_si128(low, high)
    }

    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse4.2")]
    fn load(block: &[u8]) -> __m512i {
        assert!(block.len() >= 64);
        // SAFETY: the 64 bytes read are inside `block` (checked above); the load has
        // no alignment requirement.
        unsafe { _mm512_loadu_si512(block.as_ptr().cast()) }
    }

    /// The raw crc32c register (no final inversion) after `data`, starting from the
    /// raw register `state`. `data` is a multiple of 64 bytes, at least 256.
    ///
    /// # Safety
    /// The CPU must have AVX-512F, VPCLMULQDQ, PCLMULQDQ and SSE4.2 ([`available`]).
    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse4.2")]
    pub(super) unsafe fn fold_raw(state: u32, data: &[u8]) -> u32 {
        assert!(data.len() >= 256);
        assert!(data.len().is_multiple_of(64));
        let initial = _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, i64::from(state));
        let mut lanes = [
            _mm512_xor_si512(load(&data[0..]), initial),
            load(&data[64..]),
            load(&data[128..]),
            load(&data[192..]),
        ];
        let mut rest = &data[256..];
        let by_2048 = wide(BY_2048);
        while rest.len() >= 256 {
            for (index, lane) in lanes.iter_mut().enumerate() {
                let next = load(&rest[index * 64..]);
                *lane = _mm512_xor_si512(fold_wide(*lane, by_2048), next);
            }
            rest = &rest[256..];
        }
        let mut value = _mm512_ternarylogic_epi64::<0x96>(
            fold_wide(lanes[0], wide(BY_1536)),
            fold_wide(lanes[1], wide(BY_1024)),
            fold_wide(lanes[2], wide(BY_512)),
        );
        value = _mm512_xor_si512(value, lanes[3]);
        let by_512 = wide(BY_512);
        while !rest.is_empty() {
            value = _mm512_xor_si512(fold_wide(value, by_512), load(rest));
            rest = &rest[64..];
        }
        let folded = _mm_xor_si128(
            _mm_xor_si128(
                fold_narrow(_mm512_extracti32x4_epi32::<0>(value), narrow(BY_384)),
                fold_narrow(_mm512_extracti32x4_epi32::<1>(value), narrow(BY_256)),
            ),
            _mm_xor_si128(
                fold_narrow(_mm512_extracti32x4_epi32::<2>(value), narrow(BY_128)),
                _mm512_extracti32x4_epi32::<3>(value),
            ),
        );
        let low = _mm_extract_epi64::<0>(folded) as u64;
        let high = _mm_extract_epi64::<1>(folded) as u64;
        _mm_crc32_u64(_mm_crc32_u64(0, low), high) as u32
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn shared_crcs_are_remembered_per_buffer_not_per_content_or_length() {
        let a = bytes::Bytes::from(vec![1u8; MEMO_BYTES_MIN]);
        let b = bytes::Bytes::from(vec![2u8; MEMO_BYTES_MIN]);
        assert_eq!(crc32c_shared(&a), crc32c(&a));
        // Same length, another buffer: not mistaken for the remembered one.
        assert_eq!(crc32c_shared(&b), crc32c(&b));
        assert_eq!(crc32c_shared(&a), crc32c(&a));
        // A slice of the remembered buffer starts at the same address but is shorter.
        let head = a.slice(..MEMO_BYTES_MIN - 64);
        assert_eq!(crc32c_shared(&head), crc32c(&head));
        // What a receiver verified is found again when the same buffer is sent on.
        remember(&b, crc32c(&b));
        assert_eq!(crc32c_shared(&b.clone()), crc32c(&b));
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_answers() {
        // RFC 3720 B.4: 32 bytes of zeros, of 0xff, ascending.
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62a8_ab43);
        let ascending: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&ascending), 0x46dd_794e);
    }

    #[test]
    fn folding_matches_the_crc32_instruction_at_every_length() {
        let data: Vec<u8> = (0..3000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for length in 0..data.len() {
            let expected = crc32c::crc32c(&data[..length]);
            assert_eq!(crc32c(&data[..length]), expected, "length {length}");
        }
    }

    proptest! {
        #[test]
        fn appending_matches_one_pass(data in proptest::collection::vec(any::<u8>(), 0..20_000),
                                      cut in any::<usize>(), seed in any::<u32>()) {
            let cut = cut % (data.len() + 1);
            let whole = crc32c::crc32c_append(seed, &data);
            prop_assert_eq!(crc32c_append(crc32c_append(seed, &data[..cut]), &data[cut..]), whole);
            prop_assert_eq!(crc32c_append(seed, &data), whole);
        }
    }
}
