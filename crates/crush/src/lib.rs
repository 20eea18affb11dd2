//! Carmine's placement: CRUSH exactly as Ceph computes it.
//!
//! This crate maps a placement input (a PG seed) to an ordered list of
//! devices the way Ceph's `crush_do_rule` does, bit for bit: the rjenkins1
//! hashes, the five bucket algorithms (uniform, list, tree, straw, straw2
//! with Ceph's fixed-point `crush_ln`), rules with `take` (optionally by
//! device class), `choose`/`chooseleaf` `firstn`/`indep`, `emit`, the
//! tunable steps, map tunables, device-class shadow trees, the reweight
//! vector and choose_args. It reads and writes Ceph's text syntax
//! (`crushtool -c` / `crushtool -d`), has its own versioned binary form, and
//! reproduces `crushtool --test --show-mappings` output line for line.
//!
//! It depends on no other Carmine crate.
//!
//! ```
//! use carmine_crush::{CrushMap, CRUSH_ITEM_NONE};
//!
//! let map = CrushMap::simple(6);
//! let rule = map.rule_id_by_name("replicated_rule").unwrap();
//! let weights = vec![0x10000; 6]; // every OSD in
//! let osds = map.do_rule(rule, 42, 3, &weights);
//! assert_eq!(osds.len(), 3);
//! assert!(!osds.contains(&CRUSH_ITEM_NONE));
//!
//! // The same map survives Carmine's binary form and Ceph's text form.
//! let decoded = CrushMap::decode(&map.encode()).unwrap();
//! assert_eq!(decoded.do_rule(rule, 42, 3, &weights), osds);
//! let parsed = carmine_crush::parse_text(&map.to_text()).unwrap();
//! assert_eq!(parsed.do_rule(rule, 42, 3, &weights), osds);
//! ```

mod bucket;
mod encode;
pub mod hash;
pub mod ln;
mod map;
mod mapper;
mod tester;
mod text;

pub use bucket::{Bucket, BucketAlg};
pub use encode::DecodeError;
pub use map::{
    BucketExists, ChooseArg, CrushMap, Device, Rule, Step, TreeRow, Tunables, BUCKET_COUNT_MAX,
    CRUSH_ITEM_NONE, DEFAULT_CHOOSE_ARGS, DEFAULT_TYPES, DEVICE_COUNT_MAX, RULE_COUNT_MAX,
    RULE_TYPE_ERASURE, RULE_TYPE_REPLICATED,
};
pub use mapper::RESULT_COUNT_MAX;
pub use tester::{format_mapping, test_mappings, weight_from_text, TestOptions};
pub use text::{parse_text, ParseError};
