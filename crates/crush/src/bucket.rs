//! Buckets: the interior nodes of the hierarchy, and the five ways Ceph
//! chooses among a bucket's items (`src/crush/mapper.c`), with the derived
//! tables Ceph's `builder.c` precomputes for list, tree and straw buckets.

use crate::hash::{
    crush_hash32_rjenkins1_3, crush_hash32_rjenkins1_3_lanes, crush_hash32_rjenkins1_4,
};
use crate::ln::crush_ln;

/// A bucket algorithm, numbered as Ceph's `CRUSH_BUCKET_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BucketAlg {
    Uniform = 1,
    List = 2,
    Tree = 3,
    Straw = 4,
    Straw2 = 5,
}

impl BucketAlg {
    /// The name Ceph's text syntax uses (`alg straw2`).
    pub fn name(self) -> &'static str {
        match self {
            BucketAlg::Uniform => "uniform",
            BucketAlg::List => "list",
            BucketAlg::Tree => "tree",
            BucketAlg::Straw => "straw",
            BucketAlg::Straw2 => "straw2",
        }
    }

    /// Parses a text name.
    pub fn from_name(name: &str) -> Option<BucketAlg> {
        [
            BucketAlg::Uniform,
            BucketAlg::List,
            BucketAlg::Tree,
            BucketAlg::Straw,
            BucketAlg::Straw2,
        ]
        .into_iter()
        .find(|alg| alg.name() == name)
    }

    /// Parses Ceph's numeric code.
    pub fn from_code(code: u8) -> Option<BucketAlg> {
        [
            BucketAlg::Uniform,
            BucketAlg::List,
            BucketAlg::Tree,
            BucketAlg::Straw,
            BucketAlg::Straw2,
        ]
        .into_iter()
        .find(|alg| *alg as u8 == code)
    }
}

/// A bucket: id (< 0), name, type, algorithm and its items with 16.16 weights.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub id: i32,
    pub name: String,
    pub type_id: i32,
    pub alg: BucketAlg,
    /// Hash function; 0 (rjenkins1) is the only one Ceph defines.
    pub hash: u8,
    pub items: Vec<i32>,
    /// 16.16 fixed-point weight of each item, parallel to `items`.
    pub item_weights: Vec<u32>,
    /// Derived tables, recomputed by [`Bucket::rebuild`].
    pub(crate) derived: Derived,
}

/// What Ceph's builder precomputes per algorithm.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(crate) struct Derived {
    /// Sum of all item weights (Ceph's `bucket->weight`).
    pub(crate) weight: u32,
    /// list: running sums; tree: node weights; straw: straw lengths.
    pub(crate) table: Vec<u32>,
}

impl Bucket {
    /// Builds a bucket and its derived tables. `straw_calc_version` matters
    /// only for straw buckets (it is the map tunable in force when Ceph
    /// built the bucket).
    pub fn new(
        id: i32,
        name: String,
        type_id: i32,
        alg: BucketAlg,
        items: Vec<i32>,
        item_weights: Vec<u32>,
        straw_calc_version: u8,
    ) -> Bucket {
        assert!(id < 0, "bucket id {id} must be negative");
        assert_eq!(items.len(), item_weights.len());
        let mut bucket = Bucket {
            id,
            name,
            type_id,
            alg,
            hash: 0,
            items,
            item_weights,
            derived: Derived::default(),
        };
        bucket.rebuild(straw_calc_version);
        bucket
    }

    /// Recomputes the derived tables after items or weights changed.
    pub fn rebuild(&mut self, straw_calc_version: u8) {
        let weight = self
            .item_weights
            .iter()
            .fold(0u32, |sum, w| sum.wrapping_add(*w));
        let table = match self.alg {
            BucketAlg::Uniform | BucketAlg::Straw2 => Vec::new(),
            BucketAlg::List => self
                .item_weights
                .iter()
                .scan(0u32, |sum, w| {
                    *sum = sum.wrapping_add(*w);
                    Some(*sum)
                })
                .collect(),
            BucketAlg::Tree => tree_node_weights(&self.item_weights),
            BucketAlg::Straw => calc_straws(&self.item_weights, straw_calc_version),
        };
        self.derived = Derived { weight, table };
    }

    /// The bucket's weight: the sum of its item weights.
    pub fn weight(&self) -> u32 {
        self.derived.weight
    }

    /// Number of items.
    pub fn size(&self) -> usize {
        self.items.len()
    }

    /// The straw lengths of a straw bucket (empty for other algorithms).
    pub fn straws(&self) -> &[u32] {
        if self.alg == BucketAlg::Straw {
            &self.derived.table
        } else {
            &[]
        }
    }

    /// Overrides the straw lengths (used when decoding a stored map).
    pub(crate) fn set_straws(&mut self, straws: Vec<u32>) {
        assert_eq!(self.alg, BucketAlg::Straw);
        assert_eq!(straws.len(), self.items.len());
        self.derived.table = straws;
    }

    /// list: `bucket_list_choose`.
    pub(crate) fn list_choose(&self, x: u32, r: u32) -> i32 {
        let sums = &self.derived.table;
        for index in (0..self.items.len()).rev() {
            let item = self.items[index];
            let draw = crush_hash32_rjenkins1_4(x, item as u32, r, self.id as u32) & 0xffff;
            let scaled = (u64::from(draw) * u64::from(sums[index])) >> 16;
            if scaled < u64::from(self.item_weights[index]) {
                return item;
            }
        }
        self.items[0]
    }

    /// tree: `bucket_tree_choose`, descending the implicit binary tree.
    pub(crate) fn tree_choose(&self, x: u32, r: u32) -> i32 {
        let nodes = &self.derived.table;
        let mut node = (nodes.len() >> 1) as u32;
        while node & 1 == 0 {
            let weight = u64::from(nodes[node as usize]);
            let hash = crush_hash32_rjenkins1_4(x, node, r, self.id as u32);
            let point = (u64::from(hash) * weight) >> 32;
            let left = tree_left(node);
            node = if point < u64::from(nodes[left as usize]) {
                left
            } else {
                tree_right(node)
            };
        }
        self.items[(node >> 1) as usize]
    }

    /// straw (v1): `bucket_straw_choose`.
    pub(crate) fn straw_choose(&self, x: u32, r: u32) -> i32 {
        let straws = &self.derived.table;
        let mut high = 0;
        let mut high_draw = 0u64;
        for (index, &item) in self.items.iter().enumerate() {
            let draw = u64::from(crush_hash32_rjenkins1_3(x, item as u32, r) & 0xffff)
                * u64::from(straws[index]);
            if index == 0 || draw > high_draw {
                high = index;
                high_draw = draw;
            }
        }
        self.items[high]
    }

    /// straw2: `bucket_straw2_choose`, with optional choose_args weights and ids.
    ///
    /// Ceph draws `crush_ln(hash & 0xffff) - 2^48` for every item, divides it by the
    /// item's weight and keeps the first highest draw. This returns the same item
    /// with less work per item (CRUSH's hottest loop):
    ///
    /// * the hashes are computed [`STRAW2_LANES`] items at a time, a loop the
    ///   compiler turns into vector instructions;
    /// * no division per item: every draw is `<= 0`, so with truncating division
    ///   `ln / w > best` exactly when `ln > best * w` (a 128-bit product), and the
    ///   division runs only for a new best;
    /// * when all weights are equal, the draw only grows with the hash (`crush_ln`
    ///   is monotonic on `0..=0xfffe`), so a group of hashes all below the best
    ///   one's is skipped without computing a single `crush_ln`.
    pub(crate) fn straw2_choose(&self, x: u32, r: u32, weights: &[u32], ids: &[i32]) -> i32 {
        let size = self.items.len();
        let (weights, ids) = (&weights[..size], &ids[..size]);
        let Some(&first) = weights.first() else {
            return self.items[0]; // an empty bucket: Ceph's caller never gets here
        };
        let equal = first != 0 && weights.iter().fold(0, |acc, &w| acc | (w ^ first)) == 0;
        let mut best = Straw2Best {
            index: 0,
            draw: i64::MIN,
            // The smallest hash that may still win, when all weights are equal.
            floor: 0,
        };
        let mut base = 0;
        let mut chunks = ids.chunks_exact(STRAW2_LANES);
        for chunk in &mut chunks {
            let mut chunk_ids = [0u32; STRAW2_LANES];
            for (lane, &id) in chunk_ids.iter_mut().zip(chunk) {
                *lane = id as u32;
            }
            let mut hashes = crush_hash32_rjenkins1_3_lanes(x, &chunk_ids, r);
            for hash in &mut hashes {
                *hash &= 0xffff;
            }
            if equal {
                // Only a hash at or above the floor can beat the best draw.
                let top = hashes.iter().fold(0, |top, &hash| top.max(hash));
                if top >= best.floor {
                    for (lane, &hash) in hashes.iter().enumerate() {
                        if hash >= best.floor {
                            best.offer(base + lane, hash, first);
                        }
                    }
                }
            } else {
                let chunk_weights = &weights[base..base + STRAW2_LANES];
                for (lane, (&hash, &weight)) in hashes.iter().zip(chunk_weights).enumerate() {
                    if weight != 0 {
                        best.offer(base + lane, hash, weight);
                    }
                }
            }
            base += STRAW2_LANES;
        }
        for (lane, &id) in chunks.remainder().iter().enumerate() {
            let weight = weights[base + lane];
            if weight != 0 {
                let hash = crush_hash32_rjenkins1_3(x, id as u32, r) & 0xffff;
                if !equal || hash >= best.floor {
                    best.offer(base + lane, hash, weight);
                }
            }
        }
        // With every weight 0, Ceph keeps item 0 (its draw is S64_MIN).
        self.items[best.index]
    }
}

/// Items whose straw2 hashes are computed together (one vectorised loop).
const STRAW2_LANES: usize = 8;

/// The best straw2 draw so far.
struct Straw2Best {
    index: usize,
    /// `(crush_ln(hash) - 2^48) / weight`; `i64::MIN` before the first item, as
    /// for Ceph's zero-weight items (which therefore never win past item 0).
    draw: i64,
    /// For equal weights: hashes below this cannot beat `draw`.
    floor: u32,
}

impl Straw2Best {
    /// Item `index` with hash `hash` and weight `weight > 0` replaces the best if
    /// its draw is strictly higher (ties keep the earlier item, as in Ceph).
    #[inline(always)]
    fn offer(&mut self, index: usize, hash: u32, weight: u32) {
        let ln = crush_ln(hash) as i64 - 0x1_0000_0000_0000;
        // ln <= 0, and for ln <= 0, w > 0 and an integer d, C's truncating
        // ln / w > d exactly when ln > d * w: no division unless this item wins.
        if i128::from(ln) > i128::from(self.draw) * i128::from(weight) {
            self.index = index;
            self.draw = ln / i64::from(weight);
            // crush_ln grows with its input up to 0xfffe; crush_ln(0xffff) falls
            // between crush_ln(0xfffd) and crush_ln(0xfffe).
            self.floor = if hash == 0xffff { 0xfffe } else { hash };
        }
    }
}

fn tree_height(mut node: u32) -> u32 {
    let mut height = 0;
    while node & 1 == 0 {
        height += 1;
        node >>= 1;
    }
    height
}

fn tree_left(node: u32) -> u32 {
    node - (1 << (tree_height(node) - 1))
}

fn tree_right(node: u32) -> u32 {
    node + (1 << (tree_height(node) - 1))
}

fn tree_parent(node: u32) -> u32 {
    let height = tree_height(node);
    if node & (1 << (height + 1)) != 0 {
        node - (1 << height)
    } else {
        node + (1 << height)
    }
}

/// The tree node that holds leaf `index` (`crush_calc_tree_node`).
pub(crate) fn tree_leaf_node(index: usize) -> usize {
    ((index + 1) << 1) - 1
}

/// Node weights of a tree bucket, as `crush_make_tree_bucket` computes them.
fn tree_node_weights(weights: &[u32]) -> Vec<u32> {
    if weights.is_empty() {
        return Vec::new();
    }
    let mut depth = 1;
    let mut t = weights.len() - 1;
    while t != 0 {
        t >>= 1;
        depth += 1;
    }
    let mut nodes = vec![0u32; 1 << depth];
    for (index, &weight) in weights.iter().enumerate() {
        let mut node = tree_leaf_node(index) as u32;
        nodes[node as usize] = weight;
        for _ in 1..depth {
            node = tree_parent(node);
            nodes[node as usize] = nodes[node as usize].wrapping_add(weight);
        }
    }
    nodes
}

/// Straw lengths, as `crush_calc_straw` computes them for
/// `straw_calc_version` 0 (the original, buggy for equal weights) and >= 1.
pub(crate) fn calc_straws(weights: &[u32], straw_calc_version: u8) -> Vec<u32> {
    let size = weights.len();
    // Stable insertion sort of indices by ascending weight.
    let mut order: Vec<usize> = Vec::with_capacity(size);
    for index in 0..size {
        let at = order
            .iter()
            .position(|&o| weights[index] < weights[o])
            .unwrap_or(order.len());
        order.insert(at, index);
    }
    let mut straws = vec![0u32; size];
    let mut numleft = size as i64;
    let mut straw = 1.0f64;
    let mut wbelow = 0.0f64;
    let mut lastw = 0.0f64;
    let mut i = 0;
    while i < size {
        if weights[order[i]] == 0 {
            straws[order[i]] = 0;
            i += 1;
            if straw_calc_version >= 1 {
                numleft -= 1;
            }
            continue;
        }
        straws[order[i]] = (straw * 65536.0) as u32;
        i += 1;
        if i == size {
            break;
        }
        let (current, previous) = (weights[order[i]], weights[order[i - 1]]);
        if straw_calc_version == 0 {
            if current == previous {
                continue;
            }
            wbelow += (f64::from(previous) - lastw) * numleft as f64;
            for j in i..size {
                if weights[order[j]] == current {
                    numleft -= 1;
                } else {
                    break;
                }
            }
        } else {
            wbelow += (f64::from(previous) - lastw) * numleft as f64;
            numleft -= 1;
        }
        // C computes `numleft * (w[i] - w[i-1])` in unsigned 32-bit arithmetic.
        let wnext = f64::from((numleft as u32).wrapping_mul(current.wrapping_sub(previous)));
        let pbelow = wbelow / (wbelow + wnext);
        straw *= (1.0 / pbelow).powf(1.0 / numleft as f64);
        lastw = f64::from(previous);
    }
    straws
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_nodes_sum_to_the_root() {
        let weights = [0x10000, 0x20000, 0x30000, 0x8000, 0x10000];
        let nodes = tree_node_weights(&weights);
        assert_eq!(nodes.len(), 16);
        assert_eq!(nodes[8], weights.iter().sum::<u32>());
        assert_eq!(nodes[tree_leaf_node(2)], 0x30000);
    }

    /// `bucket_straw2_choose` exactly as Ceph's `mapper.c` writes it.
    fn straw2_reference(x: u32, r: u32, items: &[i32], weights: &[u32]) -> i32 {
        let mut high = 0;
        let mut high_draw = 0i64;
        for (index, (&id, &weight)) in items.iter().zip(weights).enumerate() {
            let draw = if weight != 0 {
                let u = crush_hash32_rjenkins1_3(x, id as u32, r) & 0xffff;
                (crush_ln(u) as i64 - 0x1_0000_0000_0000) / i64::from(weight)
            } else {
                i64::MIN
            };
            if index == 0 || draw > high_draw {
                high = index;
                high_draw = draw;
            }
        }
        items[high]
    }

    #[test]
    fn straw2_picks_what_cephs_loop_picks() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let sizes = (1..=40).chain([63, 64, 65, 1000]);
        for size in sizes {
            let items: Vec<i32> = (0..size as i32).map(|i| i * 3 + 1).collect();
            // Equal, mixed (with zeros), tiny (many equal draws), all but one zero, all zero.
            let weight_sets: Vec<Vec<u32>> = vec![
                vec![0x10000; size],
                (0..size)
                    .map(|_| (next() % 0x30000) as u32 * (next() % 4 != 0) as u32)
                    .collect(),
                (0..size).map(|_| (next() % 3) as u32 + 1).collect(),
                vec![u32::MAX; size],
                (0..size)
                    .map(|i| if i + 1 == size { 0x8000 } else { 0 })
                    .collect(),
                vec![0; size],
            ];
            for weights in &weight_sets {
                let bucket = Bucket::new(
                    -1,
                    "b".into(),
                    1,
                    BucketAlg::Straw2,
                    items.clone(),
                    weights.clone(),
                    1,
                );
                for _ in 0..200 {
                    let (x, r) = (next() as u32, (next() % 8) as u32);
                    assert_eq!(
                        bucket.straw2_choose(x, r, weights, &items),
                        straw2_reference(x, r, &items, weights),
                        "size {size} x {x} r {r} weights {weights:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn crush_ln_is_what_the_straw2_shortcuts_assume() {
        // Draws are never positive, and the floor after a 0xffff hash is 0xfffe.
        assert!((0..=0xffff).all(|u| crush_ln(u) < 1 << 48));
        assert!(crush_ln(0xfffd) <= crush_ln(0xffff) && crush_ln(0xffff) < crush_ln(0xfffe));
        assert!((1..=0xfffe).all(|u| crush_ln(u - 1) <= crush_ln(u)));
    }

    #[test]
    fn equal_weights_get_equal_straws() {
        for version in [0, 1] {
            let straws = calc_straws(&[0x10000, 0x10000, 0x10000], version);
            assert_eq!(straws, vec![0x10000; 3]);
        }
        let straws = calc_straws(&[0, 0x10000, 0x20000], 1);
        assert_eq!(straws[0], 0);
        assert!(straws[2] > straws[1]);
    }
}
