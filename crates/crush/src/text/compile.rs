//! Builds a [`CrushMap`] from the syntax tree with the semantics of Ceph's
//! `CrushCompiler::parse_crush` (Pacific): legacy tunables first, automatic
//! bucket ids, weights converted through `strtof`, shadow trees built when
//! the first rule is read, choose_args last.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::syntax::{BucketLine, BucketSyntax, ChooseArgSyntax, RuleSyntax, Statement, StepSyntax};
use super::ParseError;
use crate::bucket::{Bucket, BucketAlg};
use crate::map::{
    ChooseArg, CrushMap, Device, Rule, Step, Tunables, BUCKET_COUNT_MAX, DEVICE_COUNT_MAX,
    RULE_COUNT_MAX, RULE_TYPE_ERASURE, RULE_TYPE_REPLICATED,
};

/// Ceph's `CRUSH_MAX_DEVICE_WEIGHT` and `CRUSH_MAX_BUCKET_WEIGHT`.
const DEVICE_WEIGHT_MAX: u32 = 100 * 0x10000;
const BUCKET_WEIGHT_MAX: u32 = 65535 * 0x10000;

/// The compiler's symbol tables (`CrushCompiler`'s `item_id`, `id_item`,
/// `item_weight`, `type_id`, `rule_id`).
pub(super) struct Compiler {
    pub(super) map: CrushMap,
    item_id: HashMap<String, i32>,
    id_item: BTreeSet<i32>,
    item_weight: HashMap<i32, u32>,
    type_id: HashMap<String, i32>,
    rule_names: BTreeSet<String>,
    /// Shadow ids given explicitly with `id -N class C`.
    explicit_class_ids: BTreeMap<i32, BTreeMap<i32, i32>>,
}

fn error(line: usize, message: String) -> ParseError {
    ParseError::new(line, message)
}

/// `float_node(...) * (float)0x10000` stored into an unsigned.
pub(super) fn fixed_weight(value: f32) -> u32 {
    (value * 65536.0) as u32
}

impl Compiler {
    pub(super) fn new() -> Compiler {
        let map = CrushMap {
            tunables: Tunables::legacy(),
            ..CrushMap::default()
        };
        Compiler {
            map,
            item_id: HashMap::new(),
            id_item: BTreeSet::new(),
            item_weight: HashMap::new(),
            type_id: HashMap::new(),
            rule_names: BTreeSet::new(),
            explicit_class_ids: BTreeMap::new(),
        }
    }

    pub(super) fn compile(
        mut self,
        mut statements: Vec<Statement>,
    ) -> Result<CrushMap, ParseError> {
        adjust_bucket_item_place(&mut statements)?;
        for statement in &statements {
            if let Statement::Bucket(bucket) = statement {
                if let Some((BucketLine::Id { id, .. }, _)) = bucket.lines.first() {
                    self.id_item.insert(clamp_i32(*id));
                }
            }
        }
        let mut saw_rule = false;
        for statement in &statements {
            match statement {
                Statement::Tunable { name, value, line } => self.tunable(name, *value, *line)?,
                Statement::Device {
                    id,
                    name,
                    class,
                    line,
                } => self.device(*id, name, class.as_deref(), *line)?,
                Statement::Type { id, name, line } => {
                    let id = i32::try_from(*id)
                        .map_err(|_| error(*line, format!("type id {id} is out of range")))?;
                    self.type_id.insert(name.clone(), id);
                    self.map.types.insert(id, name.clone());
                }
                Statement::Bucket(bucket) => {
                    if saw_rule {
                        return Err(error(
                            bucket.line,
                            "buckets must be defined before rules".into(),
                        ));
                    }
                    self.bucket(bucket)?;
                }
                Statement::Rule(rule) => {
                    if !saw_rule {
                        saw_rule = true;
                        // Ceph ignores a failure here (a later `take ... class` then fails).
                        let _ = super::classes::populate_classes(
                            &mut self.map,
                            &self.explicit_class_ids,
                        );
                    }
                    self.rule(rule)?;
                }
                Statement::ChooseArgs { index, args, line } => {
                    self.choose_args(*index, args, *line)?
                }
            }
        }
        self.finalize()
    }

    fn tunable(&mut self, name: &str, value: i64, line: usize) -> Result<(), ParseError> {
        let int = clamp_i32(value) as u32;
        let small = int as u8;
        let t = &mut self.map.tunables;
        match name {
            "choose_local_tries" => t.choose_local_tries = int,
            "choose_local_fallback_tries" => t.choose_local_fallback_tries = int,
            "choose_total_tries" => t.choose_total_tries = int,
            "chooseleaf_descend_once" => t.chooseleaf_descend_once = int,
            "chooseleaf_vary_r" => t.chooseleaf_vary_r = small,
            "chooseleaf_stable" => t.chooseleaf_stable = small,
            "straw_calc_version" => t.straw_calc_version = small,
            "allowed_bucket_algs" => t.allowed_bucket_algs = int,
            _ => return Err(error(line, format!("tunable {name} not recognized"))),
        }
        Ok(())
    }

    fn device(
        &mut self,
        id: i64,
        name: &str,
        class: Option<&str>,
        line: usize,
    ) -> Result<(), ParseError> {
        if !(0..i64::from(DEVICE_COUNT_MAX)).contains(&id) {
            return Err(error(
                line,
                format!("device id {id} is out of range (0..{DEVICE_COUNT_MAX})"),
            ));
        }
        let id = id as i32;
        if self.item_id.contains_key(name) {
            return Err(error(line, format!("item {name} defined twice")));
        }
        let class_id = class.map(|class| self.map.class_id_or_create(class));
        self.map.devices.insert(
            id,
            Device {
                id,
                name: name.to_string(),
                class_id,
            },
        );
        self.item_id.insert(name.to_string(), id);
        self.id_item.insert(id);
        Ok(())
    }

    fn bucket(&mut self, syntax: &BucketSyntax) -> Result<(), ParseError> {
        let line = syntax.line;
        let type_id = *self.type_id.get(&syntax.type_name).ok_or_else(|| {
            error(
                line,
                format!("bucket type '{}' is not defined", syntax.type_name),
            )
        })?;
        let name = &syntax.name;
        if self.item_id.contains_key(name) {
            return Err(error(
                line,
                format!("bucket or device '{name}' is already defined"),
            ));
        }
        let header = self.bucket_header(syntax)?;
        let (items, weights) = self.bucket_items(syntax, header.alg)?;
        let id = match header.id {
            Some(id) => id,
            None => {
                let mut id = -1;
                while self.id_item.contains(&id) {
                    id -= 1;
                }
                id
            }
        };
        if id < -BUCKET_COUNT_MAX {
            return Err(error(line, format!("bucket id {id} is out of range")));
        }
        if !header.class_ids.is_empty() {
            self.explicit_class_ids
                .entry(id)
                .or_default()
                .extend(header.class_ids.iter());
        }
        let bucket_weight = weights.iter().fold(0u32, |sum, w| sum.wrapping_add(*w));
        self.id_item.insert(id);
        self.item_id.insert(name.clone(), id);
        self.item_weight.insert(id, bucket_weight);
        if header.alg == BucketAlg::Uniform && !items.is_empty() && weights[0] == 0 {
            return Err(error(
                line,
                format!("uniform bucket '{name}' cannot have zero-weight items"),
            ));
        }
        let straw_calc_version = self.map.tunables.straw_calc_version;
        let mut bucket = Bucket::new(
            id,
            name.clone(),
            type_id,
            header.alg,
            items,
            weights,
            straw_calc_version,
        );
        bucket.hash = header.hash;
        self.map
            .add_bucket(bucket)
            .map_err(|_| error(line, format!("Duplicate bucket id {id}")))
    }

    fn bucket_header(&mut self, syntax: &BucketSyntax) -> Result<ResolvedHeader, ParseError> {
        let mut header = BucketHeader {
            id: None,
            alg: None,
            hash: 0,
            class_ids: BTreeMap::new(),
        };
        for (entry, line) in &syntax.lines {
            match entry {
                BucketLine::Id { id, class: None } => header.id = Some(clamp_i32(*id)),
                BucketLine::Id {
                    id,
                    class: Some(class),
                } => {
                    let class_id = self.map.class_id_or_create(class);
                    if header.class_ids.insert(class_id, clamp_i32(*id)).is_some() {
                        let message =
                            format!("duplicate device class {class} for bucket {}", syntax.name);
                        return Err(error(*line, message));
                    }
                }
                BucketLine::Alg(name) => {
                    let alg = BucketAlg::from_name(name)
                        .ok_or_else(|| error(*line, format!("unknown bucket alg '{name}'")))?;
                    header.alg = Some(alg);
                }
                BucketLine::Hash(name) => {
                    header.hash = match name.as_str() {
                        "rjenkins1" | "0" => 0,
                        _ => {
                            return Err(error(
                                *line,
                                format!("unsupported hash '{name}' (only rjenkins1, 0)"),
                            ))
                        }
                    };
                }
                BucketLine::Item { .. } => {}
            }
        }
        let alg = header.alg.ok_or_else(|| {
            error(
                syntax.line,
                format!("bucket '{}' has no 'alg'", syntax.name),
            )
        })?;
        Ok(BucketHeader {
            alg: Some(alg),
            ..header
        }
        .resolved())
    }

    /// The item and weight vectors in position order, as `parse_bucket` lays them out.
    fn bucket_items(
        &self,
        syntax: &BucketSyntax,
        alg: BucketAlg,
    ) -> Result<(Vec<i32>, Vec<u32>), ParseError> {
        let name = &syntax.name;
        let (size, used) = item_positions(syntax)?;
        let mut items = vec![0i32; size];
        let mut weights = vec![0u32; size];
        let mut current = 0usize;
        let mut bucket_weight = 0u32;
        let mut uniform_weight = None;
        for (entry, line) in &syntax.lines {
            let BucketLine::Item {
                name: item_name,
                weight,
                pos,
            } = entry
            else {
                continue;
            };
            let item = *self.item_id.get(item_name).ok_or_else(|| {
                error(
                    *line,
                    format!("item '{item_name}' in bucket '{name}' is not defined"),
                )
            })?;
            let weight = match weight {
                Some(weight) => self.checked_weight(*weight, item, *line)?,
                None => self.item_weight.get(&item).copied().unwrap_or(0x10000),
            };
            if alg == BucketAlg::Uniform && *uniform_weight.get_or_insert(weight) != weight {
                let message = format!("item '{item_name}' in uniform bucket '{name}' has weight {weight} but previous item(s) have another; uniform bucket items must all have identical weights.");
                return Err(error(*line, message));
            }
            let position = match pos {
                Some(pos) => usize::try_from(*pos).unwrap_or(usize::MAX),
                None => {
                    while used.contains(&(current as i64)) {
                        current += 1;
                    }
                    current += 1;
                    current - 1
                }
            };
            if position >= size {
                return Err(error(
                    *line,
                    format!(
                        "item '{item_name}' in bucket '{name}' has pos {position} >= size {size}"
                    ),
                ));
            }
            items[position] = item;
            weights[position] = weight;
            bucket_weight = bucket_weight.checked_add(weight).ok_or_else(|| {
                error(*line, "oh no! our bucket weights are overflowing all over the place, better lower the item weights".into())
            })?;
        }
        Ok((items, weights))
    }

    fn checked_weight(&self, value: f32, item: i32, line: usize) -> Result<u32, ParseError> {
        let weight = fixed_weight(value);
        if item >= 0 && weight > DEVICE_WEIGHT_MAX {
            return Err(error(
                line,
                format!("device weight limited to {}", DEVICE_WEIGHT_MAX / 0x10000),
            ));
        }
        if item < 0 && weight > BUCKET_WEIGHT_MAX {
            return Err(error(
                line,
                format!(
                    "bucket weight limited to {} to prevent overflow",
                    BUCKET_WEIGHT_MAX / 0x10000
                ),
            ));
        }
        Ok(weight)
    }

    fn rule(&mut self, syntax: &RuleSyntax) -> Result<(), ParseError> {
        let line = syntax.line;
        let name = syntax.name.clone().unwrap_or_default();
        if !name.is_empty() && !self.rule_names.insert(name.clone()) {
            return Err(error(line, format!("rule name '{name}' already defined")));
        }
        let id = u32::try_from(syntax.id)
            .ok()
            .filter(|id| *id < RULE_COUNT_MAX);
        let id = id.ok_or_else(|| error(line, format!("rule id {} is out of range", syntax.id)))?;
        if self.map.has_rule(id) {
            return Err(error(line, format!("rule {id} already exists")));
        }
        let rule_type = if syntax.rule_type == "erasure" {
            RULE_TYPE_ERASURE
        } else {
            RULE_TYPE_REPLICATED
        };
        let mut steps = Vec::with_capacity(syntax.steps.len());
        for (step, step_line) in &syntax.steps {
            steps.push(self.step(step, &name, *step_line)?);
        }
        let (min_size, max_size) = (clamp_i32(syntax.min_size), clamp_i32(syntax.max_size));
        self.map.set_rule(Rule {
            id,
            name,
            rule_type,
            min_size,
            max_size,
            steps,
        });
        Ok(())
    }

    fn step(&self, step: &StepSyntax, rule: &str, line: usize) -> Result<Step, ParseError> {
        Ok(match step {
            StepSyntax::Take { item, class } => {
                Step::Take(self.take_target(item, class.as_deref(), rule, line)?)
            }
            StepSyntax::Emit => Step::Emit,
            StepSyntax::Noop => Step::Noop,
            StepSyntax::Set { name, value } => {
                let value = clamp_i32(*value);
                match name.as_str() {
                    "set_choose_tries" => Step::SetChooseTries(value),
                    "set_choose_local_tries" => Step::SetChooseLocalTries(value),
                    "set_choose_local_fallback_tries" => Step::SetChooseLocalFallbackTries(value),
                    "set_chooseleaf_tries" => Step::SetChooseLeafTries(value),
                    "set_chooseleaf_vary_r" => Step::SetChooseLeafVaryR(value),
                    _ => Step::SetChooseLeafStable(value),
                }
            }
            StepSyntax::Choose {
                leaf,
                firstn,
                count,
                type_name,
            } => {
                let type_id = *self.type_id.get(type_name).ok_or_else(|| {
                    error(
                        line,
                        format!("in rule '{rule}' type '{type_name}' not defined"),
                    )
                })?;
                let count = clamp_i32(*count);
                match (leaf, firstn) {
                    (false, true) => Step::ChooseFirstN { count, type_id },
                    (false, false) => Step::ChooseIndep { count, type_id },
                    (true, true) => Step::ChooseLeafFirstN { count, type_id },
                    (true, false) => Step::ChooseLeafIndep { count, type_id },
                }
            }
        })
    }

    fn take_target(
        &self,
        item: &str,
        class: Option<&str>,
        rule: &str,
        line: usize,
    ) -> Result<i32, ParseError> {
        let id = *self
            .item_id
            .get(item)
            .ok_or_else(|| error(line, format!("in rule '{rule}' item '{item}' not defined")))?;
        let Some(class) = class else {
            return Ok(id);
        };
        let class_id = self
            .map
            .class_id(class)
            .ok_or_else(|| error(line, format!("class '{class}' is not defined")))?;
        let classes = self.map.class_buckets.get(&id).ok_or_else(|| {
            error(
                line,
                format!("in rule '{rule}' step take {item} has no class information"),
            )
        })?;
        classes.get(&class_id).copied().ok_or_else(|| {
            error(
                line,
                format!("in rule '{rule}' step take {item} no matching bucket for class {class}"),
            )
        })
    }

    fn choose_args(
        &mut self,
        index: i64,
        args: &[ChooseArgSyntax],
        line: usize,
    ) -> Result<(), ParseError> {
        // Ceph reads the index with strtol into an int, then widens it to u64,
        // so 18446744073709551615 becomes -1, the default set.
        let index = i64::from(index as i32) as u64;
        if self.map.choose_args.contains_key(&index) {
            return Err(error(line, format!("{index} duplicated")));
        }
        let mut set = BTreeMap::new();
        for arg in args {
            let bucket_id = clamp_i32(arg.bucket_id);
            let bucket = self
                .map
                .bucket(bucket_id)
                .ok_or_else(|| error(arg.line, format!("{bucket_id} does not exist")))?;
            let size = bucket.items.len();
            let mut choose_arg = ChooseArg::default();
            for row in arg.weight_set.iter().flatten() {
                if row.len() != size {
                    return Err(error(
                        arg.line,
                        format!(
                            "{bucket_id} needs exactly {size} weights but got {}",
                            row.len()
                        ),
                    ));
                }
                choose_arg
                    .weight_set
                    .push(row.iter().map(|w| fixed_weight(*w)).collect());
            }
            if let Some(ids) = &arg.ids {
                if ids.len() != size {
                    return Err(error(
                        arg.line,
                        format!("{bucket_id} needs exactly {size} ids but got {}", ids.len()),
                    ));
                }
                choose_arg.ids = ids.iter().map(|id| clamp_i32(*id)).collect();
            }
            // Only straw2 buckets honour choose_args; Ceph drops the rest.
            let keep = bucket.alg == BucketAlg::Straw2
                && !(choose_arg.weight_set.is_empty() && choose_arg.ids.is_empty());
            if keep {
                set.insert(bucket_id, choose_arg);
            }
        }
        self.map.choose_args.insert(index, set);
        Ok(())
    }

    fn finalize(mut self) -> Result<CrushMap, ParseError> {
        if let Some(&last) = self.map.devices.keys().next_back() {
            self.map.max_devices = self.map.max_devices.max(last + 1);
        }
        self.map.validate().map_err(|message| error(1, message))?;
        Ok(self.map)
    }
}

struct BucketHeader {
    id: Option<i32>,
    alg: Option<BucketAlg>,
    hash: u8,
    class_ids: BTreeMap<i32, i32>,
}

struct ResolvedHeader {
    id: Option<i32>,
    alg: BucketAlg,
    hash: u8,
    class_ids: BTreeMap<i32, i32>,
}

impl BucketHeader {
    fn resolved(self) -> ResolvedHeader {
        ResolvedHeader {
            id: self.id,
            alg: self.alg.unwrap_or(BucketAlg::Straw2),
            hash: self.hash,
            class_ids: self.class_ids,
        }
    }
}

/// The bucket's size and the positions its items claim with `pos`.
fn item_positions(syntax: &BucketSyntax) -> Result<(usize, BTreeSet<i64>), ParseError> {
    let mut size = 0usize;
    let mut used = BTreeSet::new();
    for (entry, line) in &syntax.lines {
        if let BucketLine::Item {
            name: item, pos, ..
        } = entry
        {
            size += 1;
            if let Some(pos) = pos {
                if !used.insert(*pos) {
                    let message = format!(
                        "item '{item}' in bucket '{}' has explicit pos {pos}, which is occupied",
                        syntax.name
                    );
                    return Err(error(*line, message));
                }
            }
        }
    }
    // Ceph takes MAX(size, largest pos); a pos that large then fails the
    // `pos >= size` check, so capping it keeps the error and bounds memory.
    if let Some(&largest) = used.iter().next_back() {
        size = size.max(usize::try_from(largest).unwrap_or(usize::MAX).min(size + 1));
    }
    Ok((size, used))
}

/// `int_node`: `strtol` then truncation to `int`.
fn clamp_i32(value: i64) -> i32 {
    value as i32
}

/// Ceph's `adjust_bucket_item_place`: when a bucket uses a bucket defined
/// after it, swap the two so children come first.
fn adjust_bucket_item_place(statements: &mut [Statement]) -> Result<(), ParseError> {
    let positions: Vec<usize> = statements
        .iter()
        .enumerate()
        .filter(|(_, statement)| matches!(statement, Statement::Bucket(_)))
        .map(|(index, _)| index)
        .collect();
    let mut names = Vec::with_capacity(positions.len());
    let mut items: HashMap<String, BTreeSet<String>> = HashMap::new();
    for &index in &positions {
        if let Statement::Bucket(bucket) = &statements[index] {
            names.push(bucket.name.clone());
            let set = bucket.lines.iter().filter_map(|(line, _)| match line {
                BucketLine::Item { name, .. } => Some(name.clone()),
                _ => None,
            });
            items.entry(bucket.name.clone()).or_default().extend(set);
        }
    }
    // Where each bucket's statement sat before any swap. Ceph swaps the
    // contents behind its saved iterators without updating them, and so
    // do we.
    let at: HashMap<String, usize> = names
        .iter()
        .cloned()
        .zip(positions.iter().copied())
        .collect();
    for i in 0..names.len() {
        for j in i + 1..names.len() {
            let (a, b) = (&names[i], &names[j]);
            if items.get(a).is_some_and(|set| set.contains(b)) {
                if items.get(b).is_some_and(|set| set.contains(a)) {
                    let line = match &statements[at[a]] {
                        Statement::Bucket(bucket) => bucket.line,
                        _ => 1,
                    };
                    return Err(error(
                        line,
                        format!("bucket  '{a}' and bucket '{b}' are included each other"),
                    ));
                }
                statements.swap(at[a], at[b]);
            }
        }
    }
    Ok(())
}
