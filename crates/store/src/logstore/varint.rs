//! LEB128 variable-length integers and a bounds-checked cursor over a byte slice, for
//! the compact checkpoint encoding (`checkpoint.rs`), where a million objects must
//! encode small and decode fast.
//!
//! A varint stores 7 bits per byte, low bits first, with the high bit set on every
//! byte but the last: 0..=127 take one byte, a `u64` at most [`VARINT_BYTES_MAX`].

use carmine_types::encoding::DecodeError;

pub const VARINT_BYTES_MAX: usize = 10;

pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Zigzag: small negative and positive deltas both become small unsigned values.
pub fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

pub fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

fn invalid(what: &'static str, value: u64) -> DecodeError {
    DecodeError::Invalid { what, value }
}

/// Reads from a slice; every read checks what is left.
#[derive(Debug)]
pub struct Cursor<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, position: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.position
    }

    pub fn take(&mut self, count: usize) -> Result<&'a [u8], DecodeError> {
        if count > self.remaining() {
            return Err(DecodeError::Truncated {
                needed: count,
                remaining: self.remaining(),
            });
        }
        let taken = &self.bytes[self.position..self.position + count];
        self.position += count;
        Ok(taken)
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }

    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }

    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut value = 0u64;
        for index in 0..VARINT_BYTES_MAX {
            let byte = self.u8()?;
            let bits = u64::from(byte & 0x7F);
            if index == VARINT_BYTES_MAX - 1 && bits > 1 {
                return Err(invalid("varint over 64 bits", bits));
            }
            value |= bits << (7 * index);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(invalid("varint longer than 10 bytes", 0))
    }

    /// A varint that must fit a `u32`.
    pub fn varint_u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        let value = self.varint()?;
        u32::try_from(value).map_err(|_| invalid(what, value))
    }

    /// An element count, checked against what is left (each element takes at least
    /// `element_bytes_min` bytes), so a corrupt count cannot make a huge allocation.
    pub fn count(
        &mut self,
        what: &'static str,
        element_bytes_min: usize,
    ) -> Result<usize, DecodeError> {
        let count = self.varint()?;
        let bytes_min = count.saturating_mul(element_bytes_min.max(1) as u64);
        if bytes_min > self.remaining() as u64 {
            return Err(DecodeError::TooLong {
                what,
                length: usize::try_from(count).unwrap_or(usize::MAX),
                limit: self.remaining() / element_bytes_min.max(1),
            });
        }
        Ok(count as usize)
    }

    /// A varint length of at most `limit`, then that many bytes.
    pub fn blob(&mut self, what: &'static str, limit: usize) -> Result<&'a [u8], DecodeError> {
        let length = self.varint()?;
        if length > limit as u64 {
            return Err(DecodeError::TooLong {
                what,
                length: usize::try_from(length).unwrap_or(usize::MAX),
                limit,
            });
        }
        self.take(length as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_every_width() {
        let mut values = vec![0, 1, 127, 128, 300, u64::MAX, u64::MAX - 1];
        values.extend((0..64).map(|shift| 1u64 << shift));
        values.extend((1..64).map(|shift| (1u64 << shift) - 1));
        let mut out = Vec::new();
        for &value in &values {
            put_varint(&mut out, value);
        }
        let mut cursor = Cursor::new(&out);
        for &value in &values {
            assert_eq!(cursor.varint().unwrap(), value);
        }
        assert_eq!(cursor.remaining(), 0);
    }

    #[test]
    fn bad_varints_are_rejected() {
        assert!(Cursor::new(&[0x80, 0x80]).varint().is_err(), "truncated");
        assert!(Cursor::new(&[0xFF; 11]).varint().is_err(), "too long");
        let mut over = vec![0xFF; 9];
        over.push(0x02);
        assert!(Cursor::new(&over).varint().is_err(), "over 64 bits");
    }

    #[test]
    fn zigzag_round_trips() {
        for value in [0, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(value)), value);
        }
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
    }

    #[test]
    fn counts_cannot_outrun_the_buffer() {
        let mut out = Vec::new();
        put_varint(&mut out, 5);
        out.extend_from_slice(&[0; 10]);
        assert_eq!(Cursor::new(&out).count("things", 2).unwrap(), 5);
        assert!(Cursor::new(&out).count("things", 3).is_err());
    }
}
