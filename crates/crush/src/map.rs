//! The CRUSH map: devices, types, buckets, rules, tunables, device classes
//! and choose_args, with the queries and edits the rest of Carmine needs.

use std::collections::BTreeMap;

use crate::bucket::{Bucket, BucketAlg};

/// `CRUSH_ITEM_NONE`: a hole in an `indep` result.
pub const CRUSH_ITEM_NONE: i32 = 0x7fff_ffff;

/// `CRUSH_ITEM_UNDEF`: a slot `indep` has not filled yet (never returned).
pub(crate) const CRUSH_ITEM_UNDEF: i32 = 0x7fff_fffe;

/// The choose_args index Ceph falls back to (`-1` as a u64).
pub const DEFAULT_CHOOSE_ARGS: u64 = u64::MAX;

/// Most bucket slots a map may have: bucket ids run from -1 down to
/// `-BUCKET_COUNT_MAX`. Ceph's maps stay far below this.
pub const BUCKET_COUNT_MAX: i32 = 1 << 16;

/// Device ids run from 0 up to `DEVICE_COUNT_MAX - 1`.
pub const DEVICE_COUNT_MAX: i32 = 1 << 20;

/// Rule ids run from 0 up to `RULE_COUNT_MAX - 1`.
pub const RULE_COUNT_MAX: u32 = 1 << 16;

/// Rule type codes as Ceph stores them (`CEPH_PG_TYPE_*`).
pub const RULE_TYPE_REPLICATED: u8 = 1;
pub const RULE_TYPE_ERASURE: u8 = 3;

/// A device (an OSD).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    pub id: i32,
    pub name: String,
    /// Device class id (see [`CrushMap::class_name`]).
    pub class_id: Option<i32>,
}

/// Map-wide tunables. [`Tunables::default`] is Ceph's "optimal" (jewel)
/// profile; [`Tunables::legacy`] is what `crushtool -c` starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tunables {
    pub choose_local_tries: u32,
    pub choose_local_fallback_tries: u32,
    pub choose_total_tries: u32,
    pub chooseleaf_descend_once: u32,
    pub chooseleaf_vary_r: u8,
    pub chooseleaf_stable: u8,
    pub straw_calc_version: u8,
    pub allowed_bucket_algs: u32,
}

impl Default for Tunables {
    fn default() -> Tunables {
        Tunables {
            choose_local_tries: 0,
            choose_local_fallback_tries: 0,
            choose_total_tries: 50,
            chooseleaf_descend_once: 1,
            chooseleaf_vary_r: 1,
            chooseleaf_stable: 1,
            straw_calc_version: 1,
            allowed_bucket_algs: 54,
        }
    }
}

impl Tunables {
    /// Ceph's legacy (argonaut) tunables, `set_tunables_legacy`.
    pub fn legacy() -> Tunables {
        Tunables {
            choose_local_tries: 2,
            choose_local_fallback_tries: 5,
            choose_total_tries: 19,
            chooseleaf_descend_once: 0,
            chooseleaf_vary_r: 0,
            chooseleaf_stable: 0,
            straw_calc_version: 0,
            allowed_bucket_algs: 22,
        }
    }
}

/// One step of a rule (`CRUSH_RULE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Noop,
    /// Start from a bucket or device (a shadow bucket for `take X class C`).
    Take(i32),
    ChooseFirstN {
        count: i32,
        type_id: i32,
    },
    ChooseIndep {
        count: i32,
        type_id: i32,
    },
    ChooseLeafFirstN {
        count: i32,
        type_id: i32,
    },
    ChooseLeafIndep {
        count: i32,
        type_id: i32,
    },
    Emit,
    SetChooseTries(i32),
    SetChooseLeafTries(i32),
    SetChooseLocalTries(i32),
    SetChooseLocalFallbackTries(i32),
    SetChooseLeafVaryR(i32),
    SetChooseLeafStable(i32),
}

/// A placement rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub id: u32,
    pub name: String,
    /// [`RULE_TYPE_REPLICATED`] or [`RULE_TYPE_ERASURE`] (or another code).
    pub rule_type: u8,
    pub min_size: i32,
    pub max_size: i32,
    pub steps: Vec<Step>,
}

/// Per-bucket choose_args: alternative straw2 weights per output position
/// and alternative ids fed to the hash.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ChooseArg {
    pub weight_set: Vec<Vec<u32>>,
    pub ids: Vec<i32>,
}

/// A row of [`CrushMap::tree_rows`].
#[derive(Clone, Debug, PartialEq)]
pub struct TreeRow {
    pub id: i32,
    pub type_name: String,
    pub name: String,
    /// Weight in units (16.16 divided by 0x10000).
    pub weight: f64,
    pub depth: usize,
}

/// A CRUSH map.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CrushMap {
    pub(crate) devices: BTreeMap<i32, Device>,
    pub(crate) types: BTreeMap<i32, String>,
    /// Indexed by `-1 - id`, as Ceph's `map->buckets`.
    pub(crate) buckets: Vec<Option<Bucket>>,
    /// Indexed by rule id.
    pub(crate) rules: Vec<Option<Rule>>,
    pub(crate) tunables: Tunables,
    pub(crate) class_names: BTreeMap<i32, String>,
    /// original bucket id -> class id -> shadow bucket id.
    pub(crate) class_buckets: BTreeMap<i32, BTreeMap<i32, i32>>,
    /// choose_args index -> bucket id -> arguments.
    pub(crate) choose_args: BTreeMap<u64, BTreeMap<i32, ChooseArg>>,
    /// Highest device id in a bucket or named, plus one (Ceph's `max_devices`).
    pub(crate) max_devices: i32,
}

impl CrushMap {
    /// An empty map with Ceph's optimal tunables.
    pub fn new() -> CrushMap {
        CrushMap::default()
    }

    /// A map for a dev cluster: root `default` -> `host{osd}` -> `osd.{osd}`,
    /// straw2 everywhere, weight 1.0 per OSD, and rule 0 `replicated_rule`
    /// (take default, chooseleaf firstn 0 type host, emit).
    pub fn simple(osd_count: u32) -> CrushMap {
        let mut map = CrushMap::new();
        for (id, name) in DEFAULT_TYPES {
            map.types.insert(id, name.to_string());
        }
        map.add_bucket(Bucket::new(
            -1,
            "default".into(),
            11,
            BucketAlg::Straw2,
            vec![],
            vec![],
            1,
        ))
        .expect("an empty map has room for the root");
        for osd in 0..osd_count {
            map.add_osd_in_own_host(osd as i32, 0x10000);
        }
        map.rules = vec![Some(Rule {
            id: 0,
            name: "replicated_rule".into(),
            rule_type: RULE_TYPE_REPLICATED,
            min_size: 1,
            max_size: 10,
            steps: vec![
                Step::Take(-1),
                Step::ChooseLeafFirstN {
                    count: 0,
                    type_id: 1,
                },
                Step::Emit,
            ],
        })];
        map
    }

    /// Adds osd `id` in its own host bucket `host{id}` under root `default`
    /// (weight in 16.16), creating the root, the host type and the host as
    /// needed. Does nothing if the device is already in a bucket.
    pub fn add_osd_in_own_host(&mut self, id: i32, weight: u32) {
        assert!(id >= 0, "device id {id} must not be negative");
        if self.device_in_any_bucket(id) {
            return;
        }
        for (type_id, name) in [(0, "osd"), (1, "host"), (11, "root")] {
            self.types
                .entry(type_id)
                .or_insert_with(|| name.to_string());
        }
        let root_id = match self.bucket_id_by_name("default") {
            Some(root_id) => root_id,
            None => {
                let root_id = self.free_bucket_id();
                let root = Bucket::new(
                    root_id,
                    "default".into(),
                    11,
                    BucketAlg::Straw2,
                    vec![],
                    vec![],
                    1,
                );
                self.add_bucket(root).expect("free id");
                root_id
            }
        };
        let device_name = format!("osd.{id}");
        self.devices.entry(id).or_insert(Device {
            id,
            name: device_name,
            class_id: None,
        });
        let host_name = format!("host{id}");
        let host_id = match self.bucket_id_by_name(&host_name) {
            Some(host_id) => host_id,
            None => {
                let host_id = self.free_bucket_id();
                let host = Bucket::new(host_id, host_name, 1, BucketAlg::Straw2, vec![], vec![], 1);
                self.add_bucket(host).expect("free id");
                self.bucket_add_item(root_id, host_id, 0);
                host_id
            }
        };
        self.bucket_add_item(host_id, id, weight);
        self.adjust_ancestor_weights(host_id);
        self.max_devices = self.max_devices.max(id + 1);
    }

    /// The id of rule `name`.
    pub fn rule_id_by_name(&self, name: &str) -> Option<u32> {
        self.rules
            .iter()
            .flatten()
            .find(|rule| rule.name == name)
            .map(|rule| rule.id)
    }

    /// Whether rule `rule_id` exists.
    pub fn has_rule(&self, rule_id: u32) -> bool {
        self.rule(rule_id).is_some()
    }

    /// Rule `rule_id`.
    pub fn rule(&self, rule_id: u32) -> Option<&Rule> {
        self.rules.get(rule_id as usize).and_then(Option::as_ref)
    }

    /// All rules in id order.
    pub fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.rules.iter().flatten()
    }

    /// Number of rule slots (highest rule id + 1), Ceph's `max_rules`.
    pub fn max_rules(&self) -> u32 {
        self.rules.len() as u32
    }

    /// Adds or replaces a rule.
    pub fn set_rule(&mut self, rule: Rule) {
        let index = rule.id as usize;
        if self.rules.len() <= index {
            self.rules.resize(index + 1, None);
        }
        self.rules[index] = Some(rule);
    }

    /// Highest device id + 1 (Ceph's `max_devices`).
    pub fn max_devices(&self) -> i32 {
        self.max_devices
    }

    /// Number of bucket slots (Ceph's `max_buckets`).
    pub fn max_buckets(&self) -> i32 {
        self.buckets.len() as i32
    }

    /// The name of device `id`.
    pub fn device_name(&self, id: i32) -> Option<&str> {
        self.devices.get(&id).map(|device| device.name.as_str())
    }

    /// The class name of device `id`.
    pub fn device_class(&self, id: i32) -> Option<&str> {
        let class_id = self.devices.get(&id)?.class_id?;
        self.class_name(class_id)
    }

    /// All devices in id order.
    pub fn devices(&self) -> impl Iterator<Item = &Device> {
        self.devices.values()
    }

    /// The name of a device class.
    pub fn class_name(&self, class_id: i32) -> Option<&str> {
        self.class_names.get(&class_id).map(String::as_str)
    }

    /// The name of bucket `id`.
    pub fn bucket_name(&self, id: i32) -> Option<&str> {
        self.bucket(id).map(|bucket| bucket.name.as_str())
    }

    /// Bucket `id`.
    pub fn bucket(&self, id: i32) -> Option<&Bucket> {
        if id >= 0 {
            return None;
        }
        self.buckets
            .get((-1 - i64::from(id)) as usize)
            .and_then(Option::as_ref)
    }

    /// All buckets, from id -1 downwards (shadow buckets included).
    pub fn buckets(&self) -> impl Iterator<Item = &Bucket> {
        self.buckets.iter().flatten()
    }

    /// Whether `id` is a shadow (device-class) bucket.
    pub fn is_shadow_bucket(&self, id: i32) -> bool {
        self.bucket(id)
            .is_some_and(|bucket| bucket.name.contains('~'))
    }

    /// The id of the bucket named `name`.
    pub fn bucket_id_by_name(&self, name: &str) -> Option<i32> {
        self.buckets()
            .find(|bucket| bucket.name == name)
            .map(|bucket| bucket.id)
    }

    /// The id of the item (bucket or device) named `name`.
    pub fn item_id_by_name(&self, name: &str) -> Option<i32> {
        self.bucket_id_by_name(name).or_else(|| {
            self.devices
                .values()
                .find(|device| device.name == name)
                .map(|device| device.id)
        })
    }

    /// The name of an item (bucket or device).
    pub fn item_name(&self, id: i32) -> Option<&str> {
        if id < 0 {
            self.bucket_name(id)
        } else {
            self.device_name(id)
        }
    }

    /// The name of type `type_id`.
    pub fn type_name(&self, type_id: i32) -> Option<&str> {
        self.types.get(&type_id).map(String::as_str)
    }

    /// The id of type `name`.
    pub fn type_id_by_name(&self, name: &str) -> Option<i32> {
        self.types
            .iter()
            .find(|(_, type_name)| *type_name == name)
            .map(|(id, _)| *id)
    }

    /// The map's tunables.
    pub fn tunables(&self) -> &Tunables {
        &self.tunables
    }

    /// Replaces the tunables (straws already computed are kept, as in Ceph).
    pub fn set_tunables(&mut self, tunables: Tunables) {
        self.tunables = tunables;
    }

    /// The shadow bucket of `bucket_id` for class `class_name`, if any.
    pub fn class_bucket(&self, bucket_id: i32, class_name: &str) -> Option<i32> {
        let class_id = self
            .class_names
            .iter()
            .find(|(_, name)| *name == class_name)?
            .0;
        self.class_buckets.get(&bucket_id)?.get(class_id).copied()
    }

    /// choose_args sets by index.
    pub fn choose_args(&self) -> &BTreeMap<u64, BTreeMap<i32, ChooseArg>> {
        &self.choose_args
    }

    /// Whether device `id` sits in at least one bucket.
    pub fn device_in_any_bucket(&self, id: i32) -> bool {
        self.buckets().any(|bucket| bucket.items.contains(&id))
    }

    /// The reweight vector `crushtool --test` uses: 0x10000 for every device
    /// that sits in a bucket, 0 otherwise, `max_devices` long.
    pub fn default_weights(&self) -> Vec<u32> {
        let mut weights = vec![0u32; self.max_devices.max(0) as usize];
        for bucket in self.buckets() {
            for &item in &bucket.items {
                if item >= 0 && (item as usize) < weights.len() {
                    weights[item as usize] = 0x10000;
                }
            }
        }
        weights
    }

    /// The hierarchy for `carmine osd tree`: each root (-1 first) followed
    /// depth-first by its children in bucket order; shadow buckets left out.
    /// A device row carries its weight in the bucket above it.
    pub fn tree_rows(&self) -> Vec<TreeRow> {
        let mut rows = Vec::new();
        for root in self.roots() {
            self.push_tree_rows(root, 0x10000, 0, &mut rows);
        }
        rows
    }

    fn push_tree_rows(&self, id: i32, weight: u32, depth: usize, rows: &mut Vec<TreeRow>) {
        if depth > self.buckets.len() {
            return; // a cycle; maps built through this crate have none
        }
        let (type_name, name, weight) = match self.bucket(id) {
            Some(bucket) => {
                let type_name = self.type_name(bucket.type_id).unwrap_or("?");
                (type_name.to_string(), bucket.name.clone(), bucket.weight())
            }
            None => {
                let name = self
                    .device_name(id)
                    .map_or_else(|| format!("osd.{id}"), str::to_string);
                (self.type_name(0).unwrap_or("osd").to_string(), name, weight)
            }
        };
        rows.push(TreeRow {
            id,
            type_name,
            name,
            weight: f64::from(weight) / 65536.0,
            depth,
        });
        if let Some(bucket) = self.bucket(id) {
            for (&item, &item_weight) in bucket.items.iter().zip(&bucket.item_weights) {
                self.push_tree_rows(item, item_weight, depth + 1, rows);
            }
        }
    }

    /// Non-shadow buckets that no bucket contains, -1 first.
    pub fn roots(&self) -> Vec<i32> {
        let mut contained = std::collections::BTreeSet::new();
        for bucket in self.buckets() {
            contained.extend(bucket.items.iter().copied());
        }
        let mut roots: Vec<i32> = self
            .buckets()
            .filter(|bucket| !bucket.name.contains('~') && !contained.contains(&bucket.id))
            .map(|bucket| bucket.id)
            .collect();
        roots.sort_unstable_by(|a, b| b.cmp(a));
        roots
    }

    /// Adds a bucket; fails if its id is taken.
    pub fn add_bucket(&mut self, bucket: Bucket) -> Result<(), BucketExists> {
        let index = (-1 - i64::from(bucket.id)) as usize;
        if self.buckets.len() <= index {
            self.buckets.resize(index + 1, None);
        }
        if self.buckets[index].is_some() {
            return Err(BucketExists(bucket.id));
        }
        for &item in &bucket.items {
            if item >= 0 {
                self.max_devices = self.max_devices.max(item + 1);
            }
        }
        self.buckets[index] = Some(bucket);
        Ok(())
    }

    /// The first free bucket id from -1 downwards.
    pub fn free_bucket_id(&self) -> i32 {
        let free = self
            .buckets
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.buckets.len());
        -1 - free as i32
    }

    fn bucket_mut(&mut self, id: i32) -> Option<&mut Bucket> {
        if id >= 0 {
            return None;
        }
        self.buckets
            .get_mut((-1 - i64::from(id)) as usize)
            .and_then(Option::as_mut)
    }

    fn bucket_add_item(&mut self, bucket_id: i32, item: i32, weight: u32) {
        let straw_calc_version = self.tunables.straw_calc_version;
        let bucket = self.bucket_mut(bucket_id).expect("bucket exists");
        bucket.items.push(item);
        bucket.item_weights.push(weight);
        bucket.rebuild(straw_calc_version);
    }

    /// Re-sums the weights of every ancestor of `id` after a change.
    fn adjust_ancestor_weights(&mut self, id: i32) {
        let mut child = id;
        for _ in 0..self.buckets.len() {
            let Some(parent) = self
                .buckets()
                .find(|bucket| bucket.items.contains(&child))
                .map(|b| b.id)
            else {
                return;
            };
            let child_weight = self.bucket(child).map_or(0, Bucket::weight);
            let straw_calc_version = self.tunables.straw_calc_version;
            let bucket = self.bucket_mut(parent).expect("parent exists");
            if let Some(position) = bucket.items.iter().position(|&item| item == child) {
                bucket.item_weights[position] = child_weight;
            }
            bucket.rebuild(straw_calc_version);
            child = parent;
        }
    }
}

/// A bucket id was already taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("bucket id {0} already exists")]
pub struct BucketExists(pub i32);

/// Ceph's default type list.
pub const DEFAULT_TYPES: [(i32, &str); 12] = [
    (0, "osd"),
    (1, "host"),
    (2, "chassis"),
    (3, "rack"),
    (4, "row"),
    (5, "pdu"),
    (6, "pod"),
    (7, "room"),
    (8, "datacenter"),
    (9, "zone"),
    (10, "region"),
    (11, "root"),
];

impl CrushMap {
    /// Checks what the mapper relies on: every bucket item names an existing
    /// bucket or a device below `max_devices`, the hierarchy has no cycles,
    /// and every choose_args entry matches its bucket's size.
    pub(crate) fn validate(&self) -> Result<(), String> {
        for bucket in self.buckets() {
            if bucket.hash != 0 {
                return Err(format!(
                    "bucket {} uses unsupported hash {}",
                    bucket.name, bucket.hash
                ));
            }
            for &item in &bucket.items {
                if item >= self.max_devices || (item < 0 && self.bucket(item).is_none()) {
                    return Err(format!("bucket {} holds unknown item {item}", bucket.name));
                }
            }
        }
        self.check_acyclic()?;
        for (index, args) in &self.choose_args {
            for (&bucket_id, arg) in args {
                let Some(bucket) = self.bucket(bucket_id) else {
                    return Err(format!(
                        "choose_args {index} names unknown bucket {bucket_id}"
                    ));
                };
                let size = bucket.items.len();
                if arg.weight_set.iter().any(|row| row.len() != size)
                    || !(arg.ids.is_empty() || arg.ids.len() == size)
                {
                    return Err(format!("choose_args {index} for bucket {bucket_id} does not match its {size} items"));
                }
            }
        }
        Ok(())
    }

    /// Fails if a bucket contains itself, directly or below.
    fn check_acyclic(&self) -> Result<(), String> {
        // 0 = unvisited, 1 = on the current path, 2 = done.
        let mut state = vec![0u8; self.buckets.len()];
        for start in self.buckets() {
            let mut stack = vec![(start.id, 0usize)];
            while let Some((id, next)) = stack.pop() {
                let index = (-1 - i64::from(id)) as usize;
                let bucket = self
                    .bucket(id)
                    .ok_or_else(|| format!("unknown bucket {id}"))?;
                if next == 0 {
                    match state[index] {
                        2 => continue,
                        1 => return Err(format!("bucket {} contains itself", bucket.name)),
                        _ => state[index] = 1,
                    }
                }
                let child = bucket.items[next..]
                    .iter()
                    .position(|&item| item < 0)
                    .map(|offset| next + offset);
                match child {
                    Some(position) => {
                        stack.push((id, position + 1));
                        let child_id = bucket.items[position];
                        let child_index = (-1 - i64::from(child_id)) as usize;
                        if state[child_index] == 1 {
                            return Err(format!("bucket {} contains itself", bucket.name));
                        }
                        if state[child_index] == 0 {
                            stack.push((child_id, 0));
                        }
                    }
                    None => state[index] = 2,
                }
            }
        }
        Ok(())
    }
}

impl CrushMap {
    /// The id of device class `name`.
    pub fn class_id(&self, name: &str) -> Option<i32> {
        self.class_names
            .iter()
            .find(|(_, class)| *class == name)
            .map(|(id, _)| *id)
    }

    /// The id of device class `name`, allocating the next id if it is new
    /// (Ceph's `get_or_create_class_id`).
    pub(crate) fn class_id_or_create(&mut self, name: &str) -> i32 {
        if let Some(id) = self.class_id(name) {
            return id;
        }
        let id = self
            .class_names
            .keys()
            .next_back()
            .map_or(0, |last| last + 1);
        self.class_names.insert(id, name.to_string());
        id
    }
}

impl CrushMap {
    /// Sets the crush weight of `item` in every bucket that holds it and
    /// carries each changed bucket's new total up to its parents, as Ceph's
    /// `CrushWrapper::adjust_item_weight` does (`ceph osd crush reweight`,
    /// `crushtool --reweight-item`; `osdmaptool --mark-up-in` sets every OSD to 1.0
    /// this way), step for step: in a uniform bucket (one weight for all its items)
    /// every item takes the weight, and choose_args weight sets follow (see
    /// [`CrushMap::remove_device`]). Returns how many buckets held the item.
    pub fn adjust_item_weight(&mut self, item: i32, weight: u32) -> usize {
        let holding = self.buckets().filter(|b| b.items.contains(&item)).count();
        self.adjust_item_weight_with_sets(item, weight, true);
        holding
    }
}

impl CrushMap {
    /// The crush weight of `item` in the first bucket (from id -1 down) that
    /// holds it, as Ceph's `get_item_weight`.
    pub fn item_weight(&self, item: i32) -> Option<u32> {
        self.buckets().find_map(|bucket| {
            let position = bucket.items.iter().position(|&held| held == item)?;
            Some(bucket.item_weights[position])
        })
    }
}

impl CrushMap {
    /// Removes device `id` from every bucket that holds it (its class's shadow
    /// buckets included) and forgets its name and class, as Ceph's
    /// `CrushWrapper::remove_item` does for a device (`ceph osd crush remove osd.N`,
    /// `crushtool --remove-item`, and part of `ceph osd purge`), step for step so
    /// that the result is the same map: in each bucket holding it, the device's
    /// weight is first set to 0, in the bucket (in a uniform bucket, one weight for
    /// all its items, that zeroes every item) and in every choose_args weight set,
    /// each change carried up to the parents, weight sets included (Ceph's
    /// `choose_args_adjust_item_weight`, which also gives every bucket of a
    /// choose_args set a weight set of its own where it had none); then its column
    /// goes. A bucket left empty stays, and `max_devices` is not lowered. Returns how
    /// many buckets held the device.
    pub fn remove_device(&mut self, id: i32) -> usize {
        assert!(id >= 0, "device id {id} must not be negative");
        let mut changed = 0;
        for index in 0..self.buckets.len() {
            let Some(bucket) = self.buckets[index].as_ref() else {
                continue;
            };
            if !bucket.items.contains(&id) {
                continue;
            }
            let bucket_id = bucket.id;
            self.adjust_item_weight_in_bucket_with_sets(id, 0, bucket_id, true);
            self.bucket_remove_item(bucket_id, id);
            changed += 1;
        }
        self.devices.remove(&id);
        changed
    }

    /// Ceph's `CrushWrapper::adjust_item_weight`: `item`'s weight in every bucket.
    fn adjust_item_weight_with_sets(&mut self, item: i32, weight: u32, update_sets: bool) {
        for index in 0..self.buckets.len() {
            if let Some(bucket_id) = self.buckets[index].as_ref().map(|b| b.id) {
                self.adjust_item_weight_in_bucket_with_sets(item, weight, bucket_id, update_sets);
            }
        }
    }

    /// Ceph's `CrushWrapper::adjust_item_weight_in_bucket`: sets `item`'s weight in
    /// bucket `bucket_id` (and, with `update_sets`, its column of the bucket's weight
    /// sets), carries the bucket's new weight up, then carries the bucket's weight-set
    /// sums up to its parents' weight sets.
    fn adjust_item_weight_in_bucket_with_sets(
        &mut self,
        item: i32,
        weight: u32,
        bucket_id: i32,
        update_sets: bool,
    ) {
        let size = self.bucket(bucket_id).map_or(0, |b| b.items.len());
        for position in 0..size {
            if self.bucket(bucket_id).expect("exists").items[position] != item {
                continue;
            }
            if update_sets {
                for args in self.choose_args.values_mut() {
                    for row in args
                        .get_mut(&bucket_id)
                        .map_or(&mut [][..], |a| &mut a.weight_set)
                    {
                        row[position] = weight;
                    }
                }
            }
            let straw_calc_version = self.tunables.straw_calc_version;
            let bucket = self.bucket_mut(bucket_id).expect("exists");
            if bucket.alg == crate::bucket::BucketAlg::Uniform {
                bucket.item_weights.iter_mut().for_each(|w| *w = weight);
            } else {
                bucket.item_weights[position] = weight;
            }
            bucket.rebuild(straw_calc_version);
            let bucket_weight = bucket.weight();
            self.adjust_item_weight_with_sets(bucket_id, bucket_weight, false);
        }
        // Weight sets keep summing up the hierarchy.
        let indexes: Vec<u64> = self.choose_args.keys().copied().collect();
        for index in indexes {
            let Some(arg) = self.choose_args[&index].get(&bucket_id) else {
                continue;
            };
            if arg.weight_set.is_empty() {
                continue;
            }
            let sums = column_sums(&arg.weight_set, size);
            self.choose_args_adjust_item_weight(index, bucket_id, &sums);
        }
    }

    /// Ceph's `CrushWrapper::choose_args_adjust_item_weight`: `item`'s weights in
    /// choose_args set `index`, in every bucket.
    fn choose_args_adjust_item_weight(&mut self, index: u64, item: i32, weight: &[u32]) -> usize {
        let mut changed = 0;
        for bucket_index in 0..self.buckets.len() {
            if let Some(bucket_id) = self.buckets[bucket_index].as_ref().map(|b| b.id) {
                changed +=
                    self.choose_args_adjust_item_weight_in_bucket(index, bucket_id, item, weight);
            }
        }
        changed
    }

    /// Ceph's `_choose_args_adjust_item_weight_in_bucket`: a bucket without a weight
    /// set in set `index` gets one, from its item weights, with as many positions as
    /// the set's first bucket that has one; `item`'s column there takes `weight`, and
    /// a change carries the bucket's sums up.
    fn choose_args_adjust_item_weight_in_bucket(
        &mut self,
        index: u64,
        bucket_id: i32,
        item: i32,
        weight: &[u32],
    ) -> usize {
        let positions = self.choose_args_positions(index);
        let bucket = self.bucket(bucket_id).expect("exists");
        let (items, item_weights) = (bucket.items.clone(), bucket.item_weights.clone());
        let arg = (self.choose_args.get_mut(&index).expect("exists"))
            .entry(bucket_id)
            .or_default();
        let mut changed = 0;
        if arg.weight_set.is_empty() {
            arg.weight_set = vec![item_weights; positions];
            changed += 1;
        }
        if arg.weight_set.len() != weight.len() {
            return 0;
        }
        for (position, &held) in items.iter().enumerate() {
            if held == item {
                for (row, &value) in arg.weight_set.iter_mut().zip(weight) {
                    row[position] = value;
                }
                changed += 1;
            }
        }
        if changed > 0 {
            let sums = column_sums(&arg.weight_set, items.len());
            self.choose_args_adjust_item_weight(index, bucket_id, &sums);
        }
        changed
    }

    /// Ceph's `get_choose_args_positions`: the positions of the first bucket (from
    /// id -1 down) with a weight set in set `index`, else 1.
    fn choose_args_positions(&self, index: u64) -> usize {
        let args = &self.choose_args[&index];
        (0..self.buckets.len())
            .filter_map(|bucket_index| args.get(&(-1 - bucket_index as i32)))
            .map(|arg| arg.weight_set.len())
            .find(|&positions| positions > 0)
            .unwrap_or(1)
    }

    /// Ceph's `CrushWrapper::bucket_remove_item`: `item` leaves the bucket, and its
    /// column leaves the bucket's weight sets and ids.
    fn bucket_remove_item(&mut self, bucket_id: i32, item: i32) {
        let straw_calc_version = self.tunables.straw_calc_version;
        let bucket = self.bucket_mut(bucket_id).expect("exists");
        let position = (bucket.items.iter().position(|&held| held == item)).expect("held");
        bucket.items.remove(position);
        bucket.item_weights.remove(position);
        bucket.rebuild(straw_calc_version);
        for args in self.choose_args.values_mut() {
            if let Some(arg) = args.get_mut(&bucket_id) {
                for row in &mut arg.weight_set {
                    if position < row.len() {
                        row.remove(position);
                    }
                }
                if position < arg.ids.len() {
                    arg.ids.remove(position);
                }
            }
        }
    }
}

/// Per position, the sum of a weight set's first `size` columns (Ceph sums into an
/// `int` and stores it back as `__u32`: wrapping).
fn column_sums(weight_set: &[Vec<u32>], size: usize) -> Vec<u32> {
    (weight_set.iter())
        .map(|row| (row.iter().take(size)).fold(0u32, |sum, w| sum.wrapping_add(*w)))
        .collect()
}
