//! Carmine's own binary form of a CRUSH map (not Ceph's).
//!
//! Layout, all integers little-endian:
//!
//! ```text
//! magic      4 bytes  "CRSH"
//! version    u16      FORMAT_VERSION (a decoder refuses newer versions)
//! tunables   8 x u32  choose_local_tries, choose_local_fallback_tries,
//!                     choose_total_tries, chooseleaf_descend_once,
//!                     chooseleaf_vary_r, chooseleaf_stable,
//!                     straw_calc_version, allowed_bucket_algs
//! max_devices i32
//! types      u32 n, n x (i32 id, str name)
//! classes    u32 n, n x (i32 id, str name)
//! devices    u32 n, n x (i32 id, str name, i32 class id or -1)
//! buckets    u32 n, n x (i32 id, str name, i32 type, u8 alg, u8 hash,
//!                        u32 size, size x i32 item, size x u32 weight,
//!                        straw only: size x u32 straw)
//! shadows    u32 n, n x (i32 bucket, i32 class, i32 shadow bucket)
//! rules      u32 n, n x (u32 id, str name, u8 type, i32 min_size,
//!                        i32 max_size, u32 steps, steps x (u8 op, i32, i32))
//! choose_args u32 n, n x (u64 index, u32 m, m x (i32 bucket,
//!                        u32 rows, rows x (u32 k, k x u32), u32 k, k x i32))
//! ```
//!
//! `str` is a u32 byte length followed by UTF-8. Straws are stored because
//! Ceph computes them with the `straw_calc_version` in force when the bucket
//! was built, which a later tunable change does not undo.

use std::collections::BTreeMap;

use crate::bucket::{Bucket, BucketAlg};
use crate::map::{ChooseArg, CrushMap, Device, Rule, Step, Tunables};

const MAGIC: &[u8; 4] = b"CRSH";

/// The version [`CrushMap::encode`] writes.
pub const FORMAT_VERSION: u16 = 1;

/// Why a binary map could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("not a Carmine CRUSH map (bad magic)")]
    BadMagic,
    #[error("CRUSH map format version {found} is newer than this build understands ({supported})")]
    UnsupportedVersion { found: u16, supported: u16 },
    #[error("CRUSH map is truncated while reading {0}")]
    Truncated(&'static str),
    #[error("CRUSH map is invalid: {0}")]
    Invalid(String),
}

impl CrushMap {
    /// Encodes the map in Carmine's binary form (see the module docs).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Writer(Vec::with_capacity(4096));
        out.0.extend_from_slice(MAGIC);
        out.u16(FORMAT_VERSION);
        encode_tunables(&mut out, &self.tunables);
        out.i32(self.max_devices);
        out.u32(self.types.len() as u32);
        for (id, name) in &self.types {
            out.i32(*id);
            out.str(name);
        }
        out.u32(self.class_names.len() as u32);
        for (id, name) in &self.class_names {
            out.i32(*id);
            out.str(name);
        }
        out.u32(self.devices.len() as u32);
        for device in self.devices.values() {
            out.i32(device.id);
            out.str(&device.name);
            out.i32(device.class_id.unwrap_or(-1));
        }
        out.u32(self.buckets().count() as u32);
        for bucket in self.buckets() {
            encode_bucket(&mut out, bucket);
        }
        let shadows: Vec<(i32, i32, i32)> = self
            .class_buckets
            .iter()
            .flat_map(|(bucket, classes)| {
                classes
                    .iter()
                    .map(move |(class, shadow)| (*bucket, *class, *shadow))
            })
            .collect();
        out.u32(shadows.len() as u32);
        for (bucket, class, shadow) in shadows {
            out.i32(bucket);
            out.i32(class);
            out.i32(shadow);
        }
        out.u32(self.rules().count() as u32);
        for rule in self.rules() {
            encode_rule(&mut out, rule);
        }
        encode_choose_args(&mut out, &self.choose_args);
        out.0
    }

    /// Decodes a map written by [`CrushMap::encode`]. Never panics: bad,
    /// truncated or newer-version input returns an error.
    pub fn decode(bytes: &[u8]) -> Result<CrushMap, DecodeError> {
        let mut input = Reader(bytes);
        if input.take(4, "magic")? != MAGIC {
            return Err(DecodeError::BadMagic);
        }
        let version = input.u16("version")?;
        if version > FORMAT_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let mut map = CrushMap {
            tunables: decode_tunables(&mut input)?,
            ..CrushMap::default()
        };
        let max_devices = input.i32("max_devices")?;
        decode_names(&mut input, &mut map)?;
        for _ in 0..input.count(18, "buckets")? {
            let bucket = decode_bucket(&mut input)?;
            let id = bucket.id;
            map.add_bucket(bucket)
                .map_err(|_| DecodeError::Invalid(format!("bucket id {id} appears twice")))?;
        }
        for _ in 0..input.count(12, "shadow buckets")? {
            let (bucket, class) = (input.i32("shadow")?, input.i32("shadow")?);
            let shadow = input.i32("shadow")?;
            map.class_buckets
                .entry(bucket)
                .or_default()
                .insert(class, shadow);
        }
        for _ in 0..input.count(21, "rules")? {
            let rule = decode_rule(&mut input)?;
            if map.has_rule(rule.id) {
                return Err(DecodeError::Invalid(format!(
                    "rule id {} appears twice",
                    rule.id
                )));
            }
            map.set_rule(rule);
        }
        map.choose_args = decode_choose_args(&mut input)?;
        if !input.0.is_empty() {
            return Err(DecodeError::Invalid(format!(
                "{} trailing bytes",
                input.0.len()
            )));
        }
        if !(0..=crate::map::DEVICE_COUNT_MAX).contains(&max_devices) {
            return Err(DecodeError::Invalid(format!(
                "max_devices {max_devices} is out of range"
            )));
        }
        map.max_devices = map.max_devices.max(max_devices);
        map.validate().map_err(DecodeError::Invalid)?;
        Ok(map)
    }
}

/// Types, classes and devices.
fn decode_names(input: &mut Reader, map: &mut CrushMap) -> Result<(), DecodeError> {
    for _ in 0..input.count(8, "types")? {
        let id = input.i32("type id")?;
        map.types.insert(id, input.str("type name")?);
    }
    for _ in 0..input.count(8, "classes")? {
        let id = input.i32("class id")?;
        map.class_names.insert(id, input.str("class name")?);
    }
    for _ in 0..input.count(12, "devices")? {
        let id = input.i32("device id")?;
        if !(0..crate::map::DEVICE_COUNT_MAX).contains(&id) {
            return Err(DecodeError::Invalid(format!(
                "device id {id} is out of range"
            )));
        }
        let name = input.str("device name")?;
        let class_id = input.i32("device class")?;
        let class_id = (class_id >= 0).then_some(class_id);
        map.devices.insert(id, Device { id, name, class_id });
    }
    Ok(())
}

fn encode_tunables(out: &mut Writer, t: &Tunables) {
    for value in [
        t.choose_local_tries,
        t.choose_local_fallback_tries,
        t.choose_total_tries,
        t.chooseleaf_descend_once,
        u32::from(t.chooseleaf_vary_r),
        u32::from(t.chooseleaf_stable),
        u32::from(t.straw_calc_version),
        t.allowed_bucket_algs,
    ] {
        out.u32(value);
    }
}

fn decode_tunables(input: &mut Reader) -> Result<Tunables, DecodeError> {
    let mut values = [0u32; 8];
    for value in &mut values {
        *value = input.u32("tunables")?;
    }
    let small = |value: u32| {
        u8::try_from(value)
            .map_err(|_| DecodeError::Invalid(format!("tunable value {value} out of range")))
    };
    Ok(Tunables {
        choose_local_tries: values[0],
        choose_local_fallback_tries: values[1],
        choose_total_tries: values[2],
        chooseleaf_descend_once: values[3],
        chooseleaf_vary_r: small(values[4])?,
        chooseleaf_stable: small(values[5])?,
        straw_calc_version: small(values[6])?,
        allowed_bucket_algs: values[7],
    })
}

fn encode_bucket(out: &mut Writer, bucket: &Bucket) {
    out.i32(bucket.id);
    out.str(&bucket.name);
    out.i32(bucket.type_id);
    out.0.push(bucket.alg as u8);
    out.0.push(bucket.hash);
    out.u32(bucket.items.len() as u32);
    bucket.items.iter().for_each(|item| out.i32(*item));
    bucket
        .item_weights
        .iter()
        .for_each(|weight| out.u32(*weight));
    bucket.straws().iter().for_each(|straw| out.u32(*straw));
}

fn decode_bucket(input: &mut Reader) -> Result<Bucket, DecodeError> {
    let id = input.i32("bucket id")?;
    let name = input.str("bucket name")?;
    let type_id = input.i32("bucket type")?;
    let alg_code = input.take(1, "bucket alg")?[0];
    let alg = BucketAlg::from_code(alg_code)
        .ok_or_else(|| DecodeError::Invalid(format!("bucket {id} has unknown alg {alg_code}")))?;
    let hash = input.take(1, "bucket hash")?[0];
    let size = input.count(8, "bucket items")?;
    if !(-crate::map::BUCKET_COUNT_MAX..0).contains(&id) {
        return Err(DecodeError::Invalid(format!(
            "bucket id {id} is out of range"
        )));
    }
    let items = (0..size)
        .map(|_| input.i32("bucket item"))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(item) = items.iter().find(|&&item| {
        !(-crate::map::BUCKET_COUNT_MAX..crate::map::DEVICE_COUNT_MAX).contains(&item)
    }) {
        return Err(DecodeError::Invalid(format!(
            "bucket {id} holds out-of-range item {item}"
        )));
    }
    let weights = (0..size)
        .map(|_| input.u32("bucket weight"))
        .collect::<Result<Vec<_>, _>>()?;
    let mut bucket = Bucket::new(id, name, type_id, alg, items, weights, 1);
    bucket.hash = hash;
    if alg == BucketAlg::Straw {
        let straws = (0..size)
            .map(|_| input.u32("straws"))
            .collect::<Result<Vec<_>, _>>()?;
        bucket.set_straws(straws);
    }
    Ok(bucket)
}

fn encode_rule(out: &mut Writer, rule: &Rule) {
    out.u32(rule.id);
    out.str(&rule.name);
    out.0.push(rule.rule_type);
    out.i32(rule.min_size);
    out.i32(rule.max_size);
    out.u32(rule.steps.len() as u32);
    for step in &rule.steps {
        let (op, arg1, arg2) = step_to_code(step);
        out.0.push(op);
        out.i32(arg1);
        out.i32(arg2);
    }
}

fn decode_rule(input: &mut Reader) -> Result<Rule, DecodeError> {
    let id = input.u32("rule id")?;
    let name = input.str("rule name")?;
    let rule_type = input.take(1, "rule type")?[0];
    let min_size = input.i32("rule min_size")?;
    let max_size = input.i32("rule max_size")?;
    let mut steps = Vec::new();
    for _ in 0..input.count(9, "rule steps")? {
        let op = input.take(1, "step op")?[0];
        let (arg1, arg2) = (input.i32("step arg")?, input.i32("step arg")?);
        let step = step_from_code(op, arg1, arg2)
            .ok_or_else(|| DecodeError::Invalid(format!("rule {id} has unknown step op {op}")))?;
        steps.push(step);
    }
    if id >= crate::map::RULE_COUNT_MAX {
        return Err(DecodeError::Invalid(format!(
            "rule id {id} is out of range"
        )));
    }
    Ok(Rule {
        id,
        name,
        rule_type,
        min_size,
        max_size,
        steps,
    })
}

/// Ceph's `CRUSH_RULE_*` op codes and arguments.
pub(crate) fn step_to_code(step: &Step) -> (u8, i32, i32) {
    match *step {
        Step::Noop => (0, 0, 0),
        Step::Take(item) => (1, item, 0),
        Step::ChooseFirstN { count, type_id } => (2, count, type_id),
        Step::ChooseIndep { count, type_id } => (3, count, type_id),
        Step::Emit => (4, 0, 0),
        Step::ChooseLeafFirstN { count, type_id } => (6, count, type_id),
        Step::ChooseLeafIndep { count, type_id } => (7, count, type_id),
        Step::SetChooseTries(n) => (8, n, 0),
        Step::SetChooseLeafTries(n) => (9, n, 0),
        Step::SetChooseLocalTries(n) => (10, n, 0),
        Step::SetChooseLocalFallbackTries(n) => (11, n, 0),
        Step::SetChooseLeafVaryR(n) => (12, n, 0),
        Step::SetChooseLeafStable(n) => (13, n, 0),
    }
}

pub(crate) fn step_from_code(op: u8, arg1: i32, arg2: i32) -> Option<Step> {
    let (count, type_id) = (arg1, arg2);
    Some(match op {
        0 => Step::Noop,
        1 => Step::Take(arg1),
        2 => Step::ChooseFirstN { count, type_id },
        3 => Step::ChooseIndep { count, type_id },
        4 => Step::Emit,
        6 => Step::ChooseLeafFirstN { count, type_id },
        7 => Step::ChooseLeafIndep { count, type_id },
        8 => Step::SetChooseTries(arg1),
        9 => Step::SetChooseLeafTries(arg1),
        10 => Step::SetChooseLocalTries(arg1),
        11 => Step::SetChooseLocalFallbackTries(arg1),
        12 => Step::SetChooseLeafVaryR(arg1),
        13 => Step::SetChooseLeafStable(arg1),
        _ => return None,
    })
}

fn encode_choose_args(out: &mut Writer, sets: &BTreeMap<u64, BTreeMap<i32, ChooseArg>>) {
    out.u32(sets.len() as u32);
    for (index, args) in sets {
        out.u64(*index);
        out.u32(args.len() as u32);
        for (bucket, arg) in args {
            out.i32(*bucket);
            out.u32(arg.weight_set.len() as u32);
            for row in &arg.weight_set {
                out.u32(row.len() as u32);
                row.iter().for_each(|weight| out.u32(*weight));
            }
            out.u32(arg.ids.len() as u32);
            arg.ids.iter().for_each(|id| out.i32(*id));
        }
    }
}

fn decode_choose_args(
    input: &mut Reader,
) -> Result<BTreeMap<u64, BTreeMap<i32, ChooseArg>>, DecodeError> {
    let mut sets = BTreeMap::new();
    for _ in 0..input.count(12, "choose_args")? {
        let index = input.u64("choose_args index")?;
        let mut args = BTreeMap::new();
        for _ in 0..input.count(12, "choose_args buckets")? {
            let bucket = input.i32("choose_args bucket")?;
            let mut arg = ChooseArg::default();
            for _ in 0..input.count(4, "weight_set")? {
                let row_size = input.count(4, "weight_set row")?;
                let row = (0..row_size)
                    .map(|_| input.u32("weight"))
                    .collect::<Result<Vec<_>, _>>()?;
                arg.weight_set.push(row);
            }
            let id_count = input.count(4, "choose_args ids")?;
            arg.ids = (0..id_count)
                .map(|_| input.i32("id"))
                .collect::<Result<Vec<_>, _>>()?;
            args.insert(bucket, arg);
        }
        sets.insert(index, args);
    }
    Ok(sets)
}

struct Writer(Vec<u8>);

impl Writer {
    fn u16(&mut self, value: u16) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn u32(&mut self, value: u32) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn i32(&mut self, value: i32) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn u64(&mut self, value: u64) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn str(&mut self, value: &str) {
        self.u32(value.len() as u32);
        self.0.extend_from_slice(value.as_bytes());
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, count: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < count {
            return Err(DecodeError::Truncated(what));
        }
        let (head, tail) = self.0.split_at(count);
        self.0 = tail;
        Ok(head)
    }
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let mut bytes = [0u8; N];
        bytes.copy_from_slice(self.take(N, what)?);
        Ok(bytes)
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn i32(&mut self, what: &'static str) -> Result<i32, DecodeError> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    /// A count of entries at least `entry_size` bytes each: refuses counts
    /// the remaining input cannot hold, so a corrupt count cannot make us
    /// allocate or loop for long.
    fn count(&mut self, entry_size: usize, what: &'static str) -> Result<usize, DecodeError> {
        let count = self.u32(what)? as usize;
        if count.saturating_mul(entry_size) > self.0.len() {
            return Err(DecodeError::Truncated(what));
        }
        Ok(count)
    }
    fn str(&mut self, what: &'static str) -> Result<String, DecodeError> {
        let size = self.u32(what)? as usize;
        let bytes = self.take(size, what)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| DecodeError::Invalid(format!("{what} is not UTF-8")))
    }
}
