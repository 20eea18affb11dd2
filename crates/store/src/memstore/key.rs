//! [`ObjectKey`]: how a MemStore collection keys its objects.

use crate::omap::OmapKey;
use carmine_types::{ObjectId, SnapId};

/// A collection's key for an object: its name, held as a short omap key is (inside the
/// B-tree node when it fits in [`OmapKey::INLINE_MAX`] bytes), then its snapshot. It
/// orders exactly as [`ObjectId`] does (name bytes, then snapshot), so listings and
/// ranges are unchanged.
///
/// Why not `ObjectId` itself: object names share long prefixes
/// (`benchmark_data_<host>_<pid>_object`, `rbd_data.<image id>.`), and with the name
/// on the heap a B-tree search followed one pointer per key it compared, a cache miss
/// each in a collection of thousands of objects. Finding the object of a write was 5%
/// of the OSDs' CPU in a size-3 `carmine bench` run (BENCHMARKS.md, "Object keys
/// inside the node").
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(super) struct ObjectKey {
    name: OmapKey,
    snap: SnapId,
}

impl ObjectKey {
    /// The key of `oid` (no allocation unless its name is longer than the inline limit).
    pub fn of(oid: &ObjectId) -> Self {
        Self {
            name: OmapKey::copied(oid.name.as_bytes()),
            snap: oid.snap,
        }
    }

    /// The length of the object's name, for the store's accounting.
    pub fn name_bytes(&self) -> usize {
        self.name.as_slice().len()
    }

    /// The object this key was made from.
    pub fn to_oid(&self) -> ObjectId {
        ObjectId {
            name: String::from_utf8(self.name.as_slice().to_vec())
                .expect("keys are made from object names, which are strings"),
            snap: self.snap,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn object_ids() -> impl Strategy<Value = ObjectId> {
        // Shared prefixes and names on both sides of the inline limit, so that keys
        // often tie for a while and both representations meet.
        let name = prop_oneof![
            "[ab]{0,3}",
            "[a-c\u{e9}]{0,50}",
            (0u64..500).prop_map(|n| format!("rbd_data.10226b8b4567.{n:016x}")),
            (0u64..500).prop_map(|n| format!("benchmark_data_some-host_4242_object{n}")),
        ];
        (name, prop_oneof![Just(u64::MAX), 0u64..4]).prop_map(|(name, snap)| ObjectId {
            name,
            snap: SnapId(snap),
        })
    }

    proptest! {
        #[test]
        fn keys_order_as_object_ids_and_give_them_back(a in object_ids(), b in object_ids()) {
            let (x, y) = (ObjectKey::of(&a), ObjectKey::of(&b));
            prop_assert_eq!(x.cmp(&y), a.cmp(&b));
            prop_assert_eq!(x == y, a == b);
            prop_assert_eq!(x.to_oid(), a.clone());
            prop_assert_eq!(x.name_bytes(), a.name.len());
        }
    }
}
