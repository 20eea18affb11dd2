//! Device-class shadow trees, as Ceph's `CrushWrapper::populate_classes`
//! and `device_class_clone` build them: for every root and every class, a
//! depth-first copy named `<bucket>~<class>` holding only that class's
//! devices, children numbered before parents.

use std::collections::{BTreeMap, BTreeSet};

use crate::bucket::{Bucket, BucketAlg};
use crate::map::{CrushMap, BUCKET_COUNT_MAX};

/// Why a shadow tree could not be built (Ceph then leaves it half built).
#[derive(Debug)]
pub(crate) struct CloneFailed;

/// Builds every shadow tree. `explicit` holds the shadow ids the text
/// reserved (`id -N class C`); those are honoured, and new ids avoid them.
pub(crate) fn populate_classes(
    map: &mut CrushMap,
    explicit: &BTreeMap<i32, BTreeMap<i32, i32>>,
) -> Result<(), CloneFailed> {
    let used: BTreeSet<i32> = explicit
        .values()
        .flat_map(|classes| classes.values().copied())
        .collect();
    let mut contained = BTreeSet::new();
    for bucket in map.buckets() {
        contained.extend(bucket.items.iter().copied());
    }
    let roots: BTreeSet<i32> = map
        .buckets()
        .filter(|bucket| !bucket.name.contains('~') && !contained.contains(&bucket.id))
        .map(|bucket| bucket.id)
        .collect();
    let classes: Vec<i32> = map.class_names.keys().copied().collect();
    for &root in &roots {
        for &class in &classes {
            clone_bucket(map, root, class, explicit, &used, 0)?;
        }
    }
    Ok(())
}

/// `device_class_clone`: returns the id of the shadow copy of `original`.
fn clone_bucket(
    map: &mut CrushMap,
    original: i32,
    class: i32,
    explicit: &BTreeMap<i32, BTreeMap<i32, i32>>,
    used: &BTreeSet<i32>,
    depth: usize,
) -> Result<i32, CloneFailed> {
    if depth > map.buckets.len() {
        return Err(CloneFailed); // a cycle; validation reports it later
    }
    let source = map.bucket(original).ok_or(CloneFailed)?.clone();
    let class_name = map.class_name(class).ok_or(CloneFailed)?.to_string();
    let copy_name = format!("{}~{}", source.name, class_name);
    if let Some(existing) = map.bucket_id_by_name(&copy_name) {
        return Ok(existing);
    }
    let mut items = Vec::new();
    let mut weights = Vec::new();
    for (&item, &weight) in source.items.iter().zip(&source.item_weights) {
        if item >= 0 {
            if map.devices.get(&item).and_then(|device| device.class_id) != Some(class) {
                continue;
            }
            items.push(item);
            weights.push(weight);
        } else {
            let child = clone_bucket(map, item, class, explicit, used, depth + 1)?;
            items.push(child);
            weights.push(map.bucket(child).map_or(0, Bucket::weight));
        }
        // Ceph cannot add an item to an empty uniform clone (-EINVAL).
        if source.alg == BucketAlg::Uniform {
            return Err(CloneFailed);
        }
    }
    let id = match explicit
        .get(&original)
        .and_then(|classes| classes.get(&class))
    {
        Some(&id) => id,
        None => {
            let mut id = -1;
            while map.bucket(id).is_some() || used.contains(&id) {
                id -= 1;
            }
            id
        }
    };
    if !(-BUCKET_COUNT_MAX..0).contains(&id) {
        return Err(CloneFailed);
    }
    let straw_calc_version = map.tunables.straw_calc_version;
    let mut copy = Bucket::new(
        id,
        copy_name,
        source.type_id,
        source.alg,
        items,
        weights,
        straw_calc_version,
    );
    copy.hash = source.hash;
    map.add_bucket(copy).map_err(|_| CloneFailed)?;
    map.class_buckets
        .entry(original)
        .or_default()
        .insert(class, id);
    Ok(id)
}
