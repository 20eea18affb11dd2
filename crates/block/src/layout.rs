//! Striping math: how a byte range of an image maps onto its data objects.
//!
//! An image of `order` k is cut into objects of 2^k bytes; byte `b` of the image is
//! byte `b % 2^k` of object `b >> k`. Pure functions only, so that they can be tested
//! exhaustively.

/// Smallest object order accepted (4 KiB objects), as `rbd`.
pub const ORDER_MIN: u8 = 12;
/// Largest object order accepted (32 MiB objects), as `rbd`.
pub const ORDER_MAX: u8 = 25;
/// The default order: 4 MiB objects.
pub const ORDER_DEFAULT: u8 = 22;

const _: () = assert!(ORDER_MIN <= ORDER_DEFAULT);
const _: () = assert!(ORDER_DEFAULT <= ORDER_MAX);
const _: () = assert!((1u64 << ORDER_MAX) <= carmine_types::limits::OBJECT_SIZE_BYTES_MAX);

/// The part of an image range that falls in one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectExtent {
    /// Which object (its number in the image).
    pub object_number: u64,
    /// Where the extent starts inside the object.
    pub offset_in_object: u64,
    /// How many bytes.
    pub length: u64,
    /// Where the extent starts inside the caller's buffer (relative to the range start).
    pub buffer_offset: u64,
}

impl ObjectExtent {
    /// Whether the extent covers its whole object.
    pub fn is_whole_object(&self, order: u8) -> bool {
        self.offset_in_object == 0 && self.length == object_size_bytes(order)
    }
}

/// Bytes per object for `order`.
pub fn object_size_bytes(order: u8) -> u64 {
    assert!((ORDER_MIN..=ORDER_MAX).contains(&order), "order {order}");
    1u64 << order
}

/// How many objects an image of `size_bytes` spans (the last one may be partial).
pub fn object_count(size_bytes: u64, order: u8) -> u64 {
    size_bytes.div_ceil(object_size_bytes(order))
}

/// Splits `[offset, offset + length)` into per-object extents, in ascending order.
/// An empty range yields no extents. The caller has checked that the range does not
/// overflow `u64`.
pub fn extents(offset: u64, length: u64, order: u8) -> impl Iterator<Item = ObjectExtent> {
    let object_bytes = object_size_bytes(order);
    let end = offset.checked_add(length).expect("range overflows u64");
    let mut position = offset;
    std::iter::from_fn(move || {
        if position >= end {
            return None;
        }
        let object_number = position >> order;
        let offset_in_object = position & (object_bytes - 1);
        let length = (object_bytes - offset_in_object).min(end - position);
        let extent = ObjectExtent {
            object_number,
            offset_in_object,
            length,
            buffer_offset: position - offset,
        };
        position += length;
        Some(extent)
    })
}

/// Whether `[offset, offset + length)` lies within an image of `size_bytes`.
pub fn in_bounds(offset: u64, length: u64, size_bytes: u64) -> bool {
    offset
        .checked_add(length)
        .is_some_and(|end| end <= size_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn splits_at_object_boundaries() {
        let got: Vec<_> = extents(4090, 4106 + 4096, 12).collect();
        assert_eq!(
            got,
            vec![
                ObjectExtent {
                    object_number: 0,
                    offset_in_object: 4090,
                    length: 6,
                    buffer_offset: 0
                },
                ObjectExtent {
                    object_number: 1,
                    offset_in_object: 0,
                    length: 4096,
                    buffer_offset: 6
                },
                ObjectExtent {
                    object_number: 2,
                    offset_in_object: 0,
                    length: 4096,
                    buffer_offset: 4102
                },
                ObjectExtent {
                    object_number: 3,
                    offset_in_object: 0,
                    length: 4,
                    buffer_offset: 8198
                },
            ]
        );
        assert!(got[1].is_whole_object(12));
        assert!(!got[0].is_whole_object(12));
        assert_eq!(extents(100, 0, 22).count(), 0);
    }

    #[test]
    fn counts_objects_and_bounds() {
        assert_eq!(object_count(0, 22), 0);
        assert_eq!(object_count(1, 22), 1);
        assert_eq!(object_count(4 << 20, 22), 1);
        assert_eq!(object_count((4 << 20) + 1, 22), 2);
        assert!(in_bounds(0, 10, 10));
        assert!(!in_bounds(1, 10, 10));
        assert!(!in_bounds(u64::MAX, 2, u64::MAX));
    }

    proptest! {
        #[test]
        fn extents_tile_the_range(offset in 0u64..(1 << 40), length in 0u64..(1 << 26), order in ORDER_MIN..=ORDER_MAX) {
            let object_bytes = object_size_bytes(order);
            let mut expected_buffer_offset = 0;
            let mut previous_object = None;
            for extent in extents(offset, length, order) {
                prop_assert_eq!(extent.buffer_offset, expected_buffer_offset);
                prop_assert!(extent.length > 0);
                prop_assert!(extent.offset_in_object + extent.length <= object_bytes);
                let image_offset = (extent.object_number << order) + extent.offset_in_object;
                prop_assert_eq!(image_offset, offset + extent.buffer_offset);
                if let Some(previous) = previous_object {
                    prop_assert_eq!(extent.object_number, previous + 1);
                    prop_assert_eq!(extent.offset_in_object, 0);
                }
                previous_object = Some(extent.object_number);
                expected_buffer_offset += extent.length;
            }
            prop_assert_eq!(expected_buffer_offset, length);
        }
    }
}
