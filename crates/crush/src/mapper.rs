//! `crush_do_rule` and its helpers, step for step as Ceph's
//! `src/crush/mapper.c` (Pacific): firstn and indep choice, retries,
//! local retries with the permutation fallback, vary_r, stable, the
//! reweight test and choose_args.

use crate::bucket::{Bucket, BucketAlg};
use crate::hash::{crush_hash32_rjenkins1_2, crush_hash32_rjenkins1_3};
use std::collections::BTreeMap;

use crate::map::{ChooseArg, CrushMap, Step, Tunables};

/// Most items one `do_rule` call may ask for.
pub const RESULT_COUNT_MAX: usize = 1024;

/// Per-bucket permutation state (`crush_work_bucket`), reset for every rule run.
#[derive(Clone, Default)]
struct PermWork {
    perm_x: u32,
    perm_n: u32,
    perm: Vec<u32>,
}

/// The retry budget of one choose step.
#[derive(Clone, Copy)]
struct Tries {
    tries: u32,
    recurse_tries: u32,
    local_retries: u32,
    local_fallback_retries: u32,
    vary_r: u32,
    stable: u32,
}

/// Everything one `crush_do_rule` call shares.
struct Mapper<'a> {
    map: &'a CrushMap,
    weights: &'a [u32],
    /// The choose_args set in use, by bucket id.
    args: Option<&'a BTreeMap<i32, ChooseArg>>,
    /// Permutation state of the buckets `perm_choose` has visited, by id.
    /// Few buckets ever need one, so a short list beats a full table.
    work: Vec<(i32, PermWork)>,
}

impl CrushMap {
    /// Runs rule `rule_id` for input `x`, asking for `result_max` items.
    /// `weights[osd]` is the reweight vector (0x10000 in, 0 out); devices
    /// past its end count as out. Holes in `indep` results are
    /// [`CRUSH_ITEM_NONE`](crate::CRUSH_ITEM_NONE). Uses no choose_args. An unknown rule maps to
    /// nothing.
    ///
    /// # Panics
    ///
    /// If `result_max` exceeds [`RESULT_COUNT_MAX`] (a caller's bug: no
    /// pool has that many replicas or shards).
    pub fn do_rule(&self, rule_id: u32, x: u32, result_max: usize, weights: &[u32]) -> Vec<i32> {
        self.do_rule_with_args(rule_id, x, result_max, weights, None)
    }

    /// [`CrushMap::do_rule`] with the choose_args set `choose_args_index`,
    /// falling back to the default set (index -1) as Ceph's
    /// `choose_args_get_with_fallback` does. Pools use their pool id.
    pub fn do_rule_with_args(
        &self,
        rule_id: u32,
        x: u32,
        result_max: usize,
        weights: &[u32],
        choose_args_index: Option<u64>,
    ) -> Vec<i32> {
        assert!(
            result_max <= RESULT_COUNT_MAX,
            "result_max {result_max} is past {RESULT_COUNT_MAX}"
        );
        let Some(rule) = self.rule(rule_id) else {
            return Vec::new();
        };
        let mut mapper = Mapper {
            map: self,
            weights,
            args: self.choose_args_by_index(choose_args_index),
            work: Vec::new(),
        };
        mapper.run(&rule.steps, x as i32, result_max)
    }

    fn choose_args_by_index(&self, index: Option<u64>) -> Option<&BTreeMap<i32, ChooseArg>> {
        let index = index?;
        self.choose_args
            .get(&index)
            .or_else(|| self.choose_args.get(&crate::map::DEFAULT_CHOOSE_ARGS))
    }
}

impl<'a> Mapper<'a> {
    fn bucket_at(&self, id: i32) -> &'a Bucket {
        self.map
            .bucket(id)
            .expect("items of a valid map name existing buckets")
    }

    /// The rule interpreter (`crush_do_rule`).
    fn run(&mut self, steps: &[Step], x: i32, result_max: usize) -> Vec<i32> {
        let map = self.map;
        let mut result = Vec::with_capacity(result_max);
        let mut w: Vec<i32> = Vec::with_capacity(result_max);
        let mut o = vec![0i32; result_max];
        let mut c = vec![0i32; result_max];
        let mut state = StepState::new(&map.tunables);
        for step in steps {
            match *step {
                Step::Take(item) => {
                    if (item >= 0 && item < map.max_devices) || map.bucket(item).is_some() {
                        w.clear();
                        w.push(item);
                    }
                }
                Step::ChooseFirstN { count, type_id }
                | Step::ChooseLeafFirstN { count, type_id }
                | Step::ChooseIndep { count, type_id }
                | Step::ChooseLeafIndep { count, type_id } => {
                    if w.is_empty() {
                        continue;
                    }
                    let firstn = matches!(
                        step,
                        Step::ChooseFirstN { .. } | Step::ChooseLeafFirstN { .. }
                    );
                    let leaf = matches!(
                        step,
                        Step::ChooseLeafFirstN { .. } | Step::ChooseLeafIndep { .. }
                    );
                    let tries = state.tries(firstn, map.tunables.chooseleaf_descend_once != 0);
                    let choice = Choice {
                        x,
                        count,
                        type_id,
                        firstn,
                        leaf,
                        result_max,
                    };
                    let osize = self.choose_step(&w, &choice, &tries, &mut o, &mut c);
                    // chooseleaf emits the leaves it found below each item.
                    let chosen = if leaf { &c[..osize] } else { &o[..osize] };
                    w.clear();
                    w.extend_from_slice(chosen);
                }
                Step::Emit => {
                    let room = result_max - result.len();
                    result.extend(w.iter().take(room));
                    w.clear();
                }
                _ => state.apply(step),
            }
        }
        result
    }

    /// One choose/chooseleaf step over every bucket in the working set.
    fn choose_step(
        &mut self,
        w: &[i32],
        choice: &Choice,
        tries: &Tries,
        o: &mut [i32],
        c: &mut [i32],
    ) -> usize {
        let mut osize = 0usize;
        let result_max = choice.result_max;
        for &item in w {
            let mut numrep = choice.count;
            if numrep <= 0 {
                numrep = numrep.wrapping_add(result_max as i32);
                if numrep <= 0 {
                    continue;
                }
            }
            // w[i] may be CRUSH_ITEM_NONE or a device: only buckets go on.
            if item >= 0 || self.map.bucket(item).is_none() {
                continue;
            }
            let (out, out2) = (&mut o[osize..], &mut c[osize..]);
            if choice.firstn {
                let request = Request {
                    x: choice.x,
                    numrep,
                    type_id: choice.type_id,
                    recurse_to_leaf: choice.leaf,
                };
                let out_size = (result_max - osize) as i32;
                osize += self.choose_firstn(item, &request, out, 0, out_size, tries, Some(out2), 0);
            } else {
                let out_size = (numrep as usize).min(result_max - osize);
                let request = Request {
                    x: choice.x,
                    numrep,
                    type_id: choice.type_id,
                    recurse_to_leaf: choice.leaf,
                };
                self.choose_indep(
                    item,
                    &request,
                    out,
                    0,
                    out_size,
                    tries.tries,
                    tries.recurse_tries,
                    Some(out2),
                    0,
                );
                osize += out_size;
            }
        }
        osize
    }

    /// `crush_bucket_choose`: one draw from a bucket.
    fn bucket_choose(&mut self, bucket: &Bucket, x: i32, r: i32, position: usize) -> i32 {
        let (x, r_u) = (x as u32, r as u32);
        match bucket.alg {
            BucketAlg::Uniform => self.perm_choose(bucket, x, r),
            BucketAlg::List => bucket.list_choose(x, r_u),
            BucketAlg::Tree => bucket.tree_choose(x, r_u),
            BucketAlg::Straw => bucket.straw_choose(x, r_u),
            BucketAlg::Straw2 => {
                let arg = self.args.and_then(|args| args.get(&bucket.id));
                let weights = match arg {
                    Some(arg) if !arg.weight_set.is_empty() => {
                        let row = position.min(arg.weight_set.len() - 1);
                        &arg.weight_set[row]
                    }
                    _ => &bucket.item_weights,
                };
                let ids = match arg {
                    Some(arg) if !arg.ids.is_empty() => &arg.ids,
                    _ => &bucket.items,
                };
                bucket.straw2_choose(x, r_u, weights, ids)
            }
        }
    }

    /// `bucket_perm_choose`: a pseudo-random permutation of the bucket,
    /// computed lazily and kept for the rest of this rule run.
    fn perm_choose(&mut self, bucket: &Bucket, x: u32, r: i32) -> i32 {
        let size = bucket.items.len() as u32;
        let slot = match self.work.iter().position(|(id, _)| *id == bucket.id) {
            Some(slot) => slot,
            None => {
                self.work.push((bucket.id, PermWork::default()));
                self.work.len() - 1
            }
        };
        let work = &mut self.work[slot].1;
        let pr = (r as u32) % size;
        if work.perm.len() != size as usize {
            work.perm = vec![0; size as usize];
        }
        if work.perm_x != x || work.perm_n == 0 {
            work.perm_x = x;
            if pr == 0 {
                let s = crush_hash32_rjenkins1_3(x, bucket.id as u32, 0) % size;
                work.perm[0] = s;
                work.perm_n = 0xffff;
                return bucket.items[s as usize];
            }
            for (i, slot) in work.perm.iter_mut().enumerate() {
                *slot = i as u32;
            }
            work.perm_n = 0;
        } else if work.perm_n == 0xffff {
            // Clean up after the r = 0 shortcut above.
            for i in 1..size as usize {
                work.perm[i] = i as u32;
            }
            let first = work.perm[0] as usize;
            work.perm[first] = 0;
            work.perm_n = 1;
        }
        while work.perm_n <= pr {
            let p = work.perm_n;
            if p < size - 1 {
                let i = crush_hash32_rjenkins1_3(x, bucket.id as u32, p) % (size - p);
                if i != 0 {
                    work.perm.swap((p + i) as usize, p as usize);
                }
            }
            work.perm_n += 1;
        }
        bucket.items[work.perm[pr as usize] as usize]
    }

    /// `is_out`: whether the reweight vector rejects `item` for input `x`.
    fn is_out(&self, item: i32, x: i32) -> bool {
        let Some(&weight) = self.weights.get(item as usize) else {
            return true;
        };
        if weight >= 0x10000 {
            return false;
        }
        if weight == 0 {
            return true;
        }
        (crush_hash32_rjenkins1_2(x as u32, item as u32) & 0xffff) >= weight
    }

    fn item_type(&self, item: i32) -> i32 {
        if item < 0 {
            self.bucket_at(item).type_id
        } else {
            0
        }
    }
}

/// The tries and tunables the `set_*` steps of a rule adjust.
struct StepState {
    choose_tries: u32,
    choose_leaf_tries: u32,
    local_retries: u32,
    local_fallback_retries: u32,
    vary_r: u32,
    stable: u32,
}

impl StepState {
    fn new(tunables: &Tunables) -> StepState {
        StepState {
            // The original choose_total_tries counted retries, not tries.
            choose_tries: tunables.choose_total_tries.wrapping_add(1),
            choose_leaf_tries: 0,
            local_retries: tunables.choose_local_tries,
            local_fallback_retries: tunables.choose_local_fallback_tries,
            vary_r: u32::from(tunables.chooseleaf_vary_r),
            stable: u32::from(tunables.chooseleaf_stable),
        }
    }

    /// A `set_*` step; values out of range are ignored, as in Ceph.
    fn apply(&mut self, step: &Step) {
        match *step {
            Step::SetChooseTries(n) if n > 0 => self.choose_tries = n as u32,
            Step::SetChooseLeafTries(n) if n > 0 => self.choose_leaf_tries = n as u32,
            Step::SetChooseLocalTries(n) if n >= 0 => self.local_retries = n as u32,
            Step::SetChooseLocalFallbackTries(n) if n >= 0 => {
                self.local_fallback_retries = n as u32
            }
            Step::SetChooseLeafVaryR(n) if n >= 0 => self.vary_r = n as u32,
            Step::SetChooseLeafStable(n) if n >= 0 => self.stable = n as u32,
            _ => {}
        }
    }

    /// The budget of a choose step. indep leaves get one try unless a step
    /// says otherwise; firstn leaves too with descend_once, else the full budget.
    fn tries(&self, firstn: bool, descend_once: bool) -> Tries {
        let recurse_tries = if self.choose_leaf_tries != 0 {
            self.choose_leaf_tries
        } else if !firstn || descend_once {
            1
        } else {
            self.choose_tries
        };
        Tries {
            tries: self.choose_tries,
            recurse_tries,
            local_retries: self.local_retries,
            local_fallback_retries: self.local_fallback_retries,
            vary_r: self.vary_r,
            stable: self.stable,
        }
    }
}

/// The parameters of a choose step.
struct Choice {
    x: i32,
    count: i32,
    type_id: i32,
    firstn: bool,
    leaf: bool,
    result_max: usize,
}

/// What one choose call looks for.
pub(crate) struct Request {
    pub(crate) x: i32,
    pub(crate) numrep: i32,
    pub(crate) type_id: i32,
    pub(crate) recurse_to_leaf: bool,
}

mod firstn;
mod indep;
