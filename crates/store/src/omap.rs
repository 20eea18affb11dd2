//! [`OmapKey`], the key both stores keep an object's omap by (a sorted map of keys to
//! byte values), and the omap reads they share.

use bytes::Bytes;
use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::ops::Bound;

/// Entries with keys strictly after `after` (all when `None`), in key order, at most
/// `max_entries`.
pub(crate) fn range(
    omap: &BTreeMap<OmapKey, Bytes>,
    after: Option<&[u8]>,
    max_entries: usize,
) -> Vec<(Bytes, Bytes)> {
    let start = after.map_or(Bound::Unbounded, Bound::Excluded);
    omap.range::<[u8], _>((start, Bound::Unbounded))
        .take(max_entries)
        .map(|(key, value)| (key.to_bytes(), value.clone()))
        .collect()
}

/// The entries of `keys` that exist, in key order, each key once.
pub(crate) fn lookup(omap: &BTreeMap<OmapKey, Bytes>, keys: &[Bytes]) -> Vec<(Bytes, Bytes)> {
    let found: BTreeMap<Bytes, Bytes> = keys
        .iter()
        .filter_map(|key| omap.get_key_value(key.as_ref()))
        .map(|(key, value)| (key.to_bytes(), value.clone()))
        .collect();
    found.into_iter().collect()
}

/// An omap key as the stores keep it. A short key lives inside the B-tree node, so a
/// search compares the keys of the node it has already read, instead of following one
/// pointer to the heap per key compared, and storing it allocates nothing. The PG
/// metadata object holds thousands of keys per PG (its log and dups) and every write
/// inserts and removes some: with `Bytes` keys their comparisons were the largest item
/// of a replicated write once the log was full. A longer key is kept as `Bytes`.
#[derive(Clone)]
pub(crate) struct OmapKey(Repr);

// `compare_padded` reads inline keys in whole words.
const _: () = assert!(OmapKey::INLINE_MAX.is_multiple_of(8));

#[derive(Clone)]
enum Repr {
    Inline {
        len: u8,
        bytes: [u8; OmapKey::INLINE_MAX],
    },
    Heap(Bytes),
}

impl OmapKey {
    /// Longest key held inside the key itself: every key the OSD writes (PG log and
    /// dup keys are 35 bytes, `info`, most `missing.` names) and most client keys.
    pub const INLINE_MAX: usize = 40;

    /// The key `bytes`, copied when short (so it never pins a larger buffer it was
    /// sliced from) and otherwise kept as given: the caller owns long keys.
    pub fn new(bytes: Bytes) -> Self {
        if bytes.len() <= Self::INLINE_MAX {
            Self::copied(&bytes)
        } else {
            Self(Repr::Heap(bytes))
        }
    }

    /// The key `bytes`, copied.
    pub fn copied(bytes: &[u8]) -> Self {
        if bytes.len() <= Self::INLINE_MAX {
            let mut inline = [0u8; Self::INLINE_MAX];
            inline[..bytes.len()].copy_from_slice(bytes);
            Self(Repr::Inline {
                len: bytes.len() as u8,
                bytes: inline,
            })
        } else {
            Self(Repr::Heap(Bytes::copy_from_slice(bytes)))
        }
    }

    /// The key as handed back to readers.
    pub fn to_bytes(&self) -> Bytes {
        match &self.0 {
            Repr::Inline { .. } => Bytes::copy_from_slice(self.as_slice()),
            Repr::Heap(bytes) => bytes.clone(),
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Heap(bytes) => bytes,
        }
    }
}

impl Borrow<[u8]> for OmapKey {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for OmapKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for OmapKey {}

impl Ord for OmapKey {
    fn cmp(&self, other: &Self) -> Ordering {
        match (&self.0, &other.0) {
            (
                Repr::Inline { len, bytes },
                Repr::Inline {
                    len: other_len,
                    bytes: other_bytes,
                },
            ) => compare_padded(bytes, other_bytes).then(len.cmp(other_len)),
            _ => self.as_slice().cmp(other.as_slice()),
        }
    }
}

impl PartialOrd for OmapKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Debug for OmapKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", Bytes::copy_from_slice(self.as_slice()))
    }
}

/// The order of two inline keys' zero-padded bytes, eight at a time with no call to
/// `memcmp` (the PG's log keys share their first 30 bytes, and a B-tree search compares
/// a dozen of them per insert). With the lengths as tie-break it is byte-wise
/// lexicographic order, as `[u8]`'s (which [`Borrow`] requires): where the padded bytes
/// first differ inside both keys, that byte decides; past the end of the shorter one,
/// the longer has a non-zero byte there and is the greater, as a key is greater than
/// its prefixes; where they do not differ, the keys differ only in trailing zeros.
fn compare_padded(a: &[u8; OmapKey::INLINE_MAX], b: &[u8; OmapKey::INLINE_MAX]) -> Ordering {
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        let x = u64::from_be_bytes(x.try_into().expect("8 bytes"));
        let y = u64::from_be_bytes(y.try_into().expect("8 bytes"));
        if x != y {
            return x.cmp(&y);
        }
    }
    Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keys_are_the_size_of_six_words() {
        assert_eq!(std::mem::size_of::<OmapKey>(), 48);
    }

    #[test]
    fn short_keys_are_copied_and_long_keys_kept() {
        let buffer = Bytes::from(vec![7u8; 4096]);
        let short = OmapKey::new(buffer.slice(0..OmapKey::INLINE_MAX));
        assert!(matches!(short.0, Repr::Inline { .. }));
        assert_eq!(short.as_slice(), &buffer[..OmapKey::INLINE_MAX]);
        let long = OmapKey::new(buffer.slice(0..OmapKey::INLINE_MAX + 1));
        assert!(matches!(long.0, Repr::Heap(_)));
        assert_eq!(long.to_bytes(), buffer.slice(0..OmapKey::INLINE_MAX + 1));
        assert!(OmapKey::copied(b"").as_slice().is_empty());
    }

    fn key_bytes() -> impl Strategy<Value = Vec<u8>> {
        // Few distinct bytes and shared prefixes, so that keys often tie for a while.
        prop_oneof![
            proptest::collection::vec(0u8..3, 0..70),
            proptest::collection::vec(any::<u8>(), 0..70),
            (0u64..2000).prop_map(|n| format!("log.0000000003.{n:020}").into_bytes()),
        ]
    }

    proptest! {
        #[test]
        fn keys_order_and_compare_as_byte_strings(a in key_bytes(), b in key_bytes()) {
            let (x, y) = (OmapKey::copied(&a), OmapKey::new(Bytes::from(b.clone())));
            prop_assert_eq!(x.cmp(&y), a.as_slice().cmp(b.as_slice()));
            prop_assert_eq!(x == y, a == b);
            prop_assert_eq!(x.as_slice(), a.as_slice());
        }
    }

    #[test]
    fn a_map_of_keys_answers_ranges_and_lookups_by_byte_strings() {
        let mut omap = BTreeMap::new();
        for key in ["b", "a", "log.1", "log.10", "log.2", "dup.1"] {
            omap.insert(OmapKey::copied(key.as_bytes()), Bytes::from(key));
        }
        let listed: Vec<Bytes> = range(&omap, Some(b"dup.1"), 3)
            .into_iter()
            .map(|(key, _)| key)
            .collect();
        assert_eq!(
            listed,
            ["log.1", "log.10", "log.2"].map(|key| Bytes::from_static(key.as_bytes()))
        );
        let found = lookup(
            &omap,
            &[Bytes::from("log.2"), Bytes::from("zz"), Bytes::from("a")],
        );
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].0, Bytes::from("a"));
    }
}
