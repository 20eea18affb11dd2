//! Combining CRC-32C values: the crc of `A ‖ B` from the crcs of `A` and `B` and the
//! length of `B`, in about a microsecond whatever the length, so a large Data
//! record's payload is checksummed once for the piece and the record both. (The
//! `crc32c` crate's own combine took longer than checksumming 4 KiB.)
//!
//! Same method as zlib's `crc32_combine`: the crc register is shifted over `len(B)`
//! zero bytes by multiplying it by x^(8·len(B)) modulo the polynomial, in the
//! reflected bit order CRC-32C uses (bit 31 is x^0).

/// The Castagnoli polynomial, reflected.
const POLY: u32 = 0x82F6_3B78;

/// `a · b mod POLY`.
const fn multiply_mod(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    let mut bit = 1u32 << 31;
    while bit != 0 {
        if a & bit != 0 {
            product ^= b;
        }
        bit >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    product
}

/// `X_TO_THE_2_TO_THE[k]` = x^(2^k) mod POLY.
const X_TO_THE_2_TO_THE: [u32; 64] = {
    let mut table = [0u32; 64];
    table[0] = 1 << 30;
    let mut k = 1;
    while k < 64 {
        table[k] = multiply_mod(table[k - 1], table[k - 1]);
        k += 1;
    }
    table
};

/// x^(8·bytes) mod POLY.
fn x_to_the_8_times(bytes: u64) -> u32 {
    let mut power = 1u32 << 31;
    let mut rest = bytes;
    let mut k = 3;
    while rest != 0 {
        if rest & 1 != 0 {
            power = multiply_mod(X_TO_THE_2_TO_THE[k], power);
        }
        rest >>= 1;
        k += 1;
    }
    power
}

/// `crc32c(A ‖ B)` from `crc32c(A)`, `crc32c(B)` and `B`'s length.
pub fn combine(crc_a: u32, crc_b: u32, length_b: usize) -> u32 {
    multiply_mod(x_to_the_8_times(length_b as u64), crc_a) ^ crc_b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combine_matches_checksumming_the_whole() {
        let data: Vec<u8> = (0..70_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for split in [0, 1, 3, 8, 31, 32, 4096, 65_536, 69_999, 70_000] {
            let (a, b) = data.split_at(split);
            let whole = crc32c::crc32c(&data);
            assert_eq!(
                combine(crc32c::crc32c(a), crc32c::crc32c(b), b.len()),
                whole,
                "split at {split}"
            );
        }
    }

    #[test]
    fn combine_of_a_record_header_and_payload() {
        let header = [0xA5u8; 28];
        let payload = vec![0x3Cu8; 65_536];
        let expected = crc32c::crc32c_append(crc32c::crc32c(&header), &payload);
        let combined = combine(crc32c::crc32c(&header), crc32c::crc32c(&payload), 65_536);
        assert_eq!(combined, expected);
    }
}
