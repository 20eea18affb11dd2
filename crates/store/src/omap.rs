//! Omap reads shared by the stores: both keep an object's omap as a sorted map of
//! byte keys to byte values.

use bytes::Bytes;
use std::collections::BTreeMap;
use std::ops::Bound;

/// Entries with keys strictly after `after` (all when `None`), in key order, at most
/// `max_entries`.
pub(crate) fn range(
    omap: &BTreeMap<Bytes, Bytes>,
    after: Option<&[u8]>,
    max_entries: usize,
) -> Vec<(Bytes, Bytes)> {
    let start = after.map_or(Bound::Unbounded, Bound::Excluded);
    omap.range::<[u8], _>((start, Bound::Unbounded))
        .take(max_entries)
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

/// The entries of `keys` that exist, in key order, each key once.
pub(crate) fn lookup(omap: &BTreeMap<Bytes, Bytes>, keys: &[Bytes]) -> Vec<(Bytes, Bytes)> {
    let found: BTreeMap<Bytes, Bytes> = keys
        .iter()
        .filter_map(|key| omap.get_key_value(key))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    found.into_iter().collect()
}
