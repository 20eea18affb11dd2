//! Small attributes kept in buffers of their own (both stores): xattr and omap values
//! and keys arrive as slices of a larger buffer, and a store that kept the slices would
//! keep the whole buffer alive with them.

use crate::omap::OmapKey;
use bytes::Bytes;

/// Xattr and omap values and keys at most this long are kept in a buffer of their own.
const OWN_BELOW_BYTES: usize = 4096;

/// A small value to keep: its own buffer, unless it already is exactly one.
///
/// Values usually arrive as slices of a larger buffer: a message's 128 KiB receive buffer
/// (a replica's `RepOp` carries the object info, the snapset and the PG log entry) or
/// an encoder's scratch buffer. Kept as is, each would pin that whole buffer for as long
/// as the key lives, and the PG log keeps thousands of entries per PG: under 4 KiB
/// random overwrites an OSD held 356 MB of receive buffers for 256 MiB of data.
pub(crate) fn own_small(value: Bytes) -> Bytes {
    if value.len() >= OWN_BELOW_BYTES {
        return value;
    }
    match value.try_into_mut() {
        Ok(unique) if unique.capacity() <= unique.len().max(16) * 2 => unique.freeze(),
        Ok(unique) => Bytes::copy_from_slice(&unique),
        Err(shared) => Bytes::copy_from_slice(&shared),
    }
}

/// An omap key to keep: inline when short (see [`OmapKey`]), else its own buffer.
pub(crate) fn own_key(key: Bytes) -> OmapKey {
    if key.len() <= OmapKey::INLINE_MAX {
        OmapKey::copied(&key)
    } else {
        OmapKey::new(own_small(key))
    }
}

#[cfg(test)]
mod tests {
    use super::own_small;
    use bytes::Bytes;

    #[test]
    fn a_small_slice_of_a_large_buffer_is_copied_out_of_it() {
        let receive_buffer = Bytes::from(vec![7u8; 128 * 1024]);
        let slice = receive_buffer.slice(1000..1200);
        let start = slice.as_ptr();
        drop(receive_buffer);
        let kept = own_small(slice);
        assert_eq!(kept.len(), 200);
        assert_ne!(kept.as_ptr(), start, "the 128 KiB buffer would stay alive");
        assert!(kept.iter().all(|b| *b == 7));
    }

    #[test]
    fn a_value_in_its_own_buffer_is_kept_without_a_copy() {
        let own = Bytes::from(vec![1u8; 200]);
        let start = own.as_ptr();
        assert_eq!(own_small(own).as_ptr(), start);
        // Large values are left alone whatever holds them (data-sized, not metadata).
        let big = Bytes::from(vec![2u8; 64 * 1024]);
        let slice = big.slice(0..8192);
        assert_eq!(own_small(slice.clone()).as_ptr(), slice.as_ptr());
    }
}
