//! `crushtool -d`: the text form, laid out as Ceph's
//! `CrushCompiler::decompile` (Pacific) prints it.

use std::collections::BTreeSet;
use std::fmt::Write;

use crate::bucket::BucketAlg;
use crate::map::{
    ChooseArg, CrushMap, Rule, Step, Tunables, RULE_TYPE_ERASURE, RULE_TYPE_REPLICATED,
};

/// `print_fixedpoint`: `%.3f` of the float quotient.
pub(crate) fn fixed_point(value: u32) -> String {
    format!("{:.3}", f64::from(value as f32 / 65536.0f32))
}

impl CrushMap {
    /// The map in Ceph's text syntax, exactly as `crushtool -d` prints it.
    pub fn to_text(&self) -> String {
        let mut out = String::from("# begin crush map\n");
        self.write_tunables(&mut out);
        out.push_str("\n# devices\n");
        for device in self.devices.values() {
            let _ = write!(out, "device {} {}", device.id, device.name);
            if let Some(class) = device.class_id.and_then(|class| self.class_name(class)) {
                let _ = write!(out, " class {class}");
            }
            out.push('\n');
        }
        out.push_str("\n# types\n");
        if !self.types.contains_key(&0) && !self.types.is_empty() {
            out.push_str("type 0 osd\n");
        }
        for (id, name) in self.types.range(0..) {
            let _ = writeln!(out, "type {id} {name}");
        }
        out.push_str("\n# buckets\n");
        let mut done = BTreeSet::new();
        for index in 0..self.buckets.len() {
            self.write_bucket_tree(-1 - index as i32, &mut done, &mut out, 0);
        }
        out.push_str("\n# rules\n");
        for rule in self.rules() {
            self.write_rule(rule, &mut out);
        }
        if !self.choose_args.is_empty() {
            out.push_str("\n# choose_args\n");
            // Ceph keys choose_args by int64_t, so -1 (the default set) sorts first.
            let mut sets: Vec<_> = self.choose_args.iter().collect();
            sets.sort_by_key(|(index, _)| **index as i64);
            for (index, args) in sets {
                let _ = writeln!(out, "choose_args {index} {{");
                for (bucket_id, arg) in args.iter().rev() {
                    write_choose_arg(*bucket_id, arg, &mut out);
                }
                out.push_str("}\n");
            }
        }
        out.push_str("\n# end crush map\n");
        out
    }

    fn write_tunables(&self, out: &mut String) {
        let t = &self.tunables;
        let legacy = Tunables::legacy();
        let values = [
            (
                "choose_local_tries",
                t.choose_local_tries,
                legacy.choose_local_tries,
            ),
            (
                "choose_local_fallback_tries",
                t.choose_local_fallback_tries,
                legacy.choose_local_fallback_tries,
            ),
            (
                "choose_total_tries",
                t.choose_total_tries,
                legacy.choose_total_tries,
            ),
            (
                "chooseleaf_descend_once",
                t.chooseleaf_descend_once,
                legacy.chooseleaf_descend_once,
            ),
            (
                "chooseleaf_vary_r",
                t.chooseleaf_vary_r.into(),
                legacy.chooseleaf_vary_r.into(),
            ),
            (
                "chooseleaf_stable",
                t.chooseleaf_stable.into(),
                legacy.chooseleaf_stable.into(),
            ),
            (
                "straw_calc_version",
                t.straw_calc_version.into(),
                legacy.straw_calc_version.into(),
            ),
            (
                "allowed_bucket_algs",
                t.allowed_bucket_algs,
                legacy.allowed_bucket_algs,
            ),
        ];
        for (name, value, default) in values {
            if value != default {
                let _ = writeln!(out, "tunable {name} {value}");
            }
        }
    }

    /// Depth-first: children before parents, each bucket once.
    fn write_bucket_tree(&self, id: i32, done: &mut BTreeSet<i32>, out: &mut String, depth: usize) {
        let Some(bucket) = self.bucket(id) else {
            return;
        };
        if depth > self.buckets.len() || !done.insert(id) {
            return;
        }
        for &item in &bucket.items {
            self.write_bucket_tree(item, done, out, depth + 1);
        }
        if bucket.name.contains('~') {
            return; // shadow buckets are implied by the class ids
        }
        let type_name = self.type_name(bucket.type_id).map_or_else(
            || {
                if bucket.type_id == 0 {
                    "device".to_string()
                } else {
                    format!("type{}", bucket.type_id)
                }
            },
            str::to_string,
        );
        let _ = writeln!(out, "{type_name} {} {{", bucket.name);
        let _ = writeln!(out, "\tid {id}\t\t# do not change unnecessarily");
        for (class, shadow) in self.class_buckets.get(&id).into_iter().flatten() {
            let class_name = self.class_name(*class).unwrap_or("?");
            let _ = writeln!(
                out,
                "\tid {shadow} class {class_name}\t\t# do not change unnecessarily"
            );
        }
        let _ = writeln!(out, "\t# weight {}", fixed_point(bucket.weight()));
        let _ = write!(out, "\talg {}", bucket.alg.name());
        let with_pos = matches!(bucket.alg, BucketAlg::Uniform | BucketAlg::Tree);
        match bucket.alg {
            BucketAlg::Uniform => {
                let _ = write!(
                    out,
                    "\t# do not change bucket size ({}) unnecessarily",
                    bucket.items.len()
                );
            }
            BucketAlg::List => {
                out.push_str("\t# add new items at the end; do not change order unnecessarily")
            }
            BucketAlg::Tree => {
                out.push_str("\t# do not change pos for existing items unnecessarily")
            }
            _ => {}
        }
        out.push('\n');
        let _ = writeln!(out, "\thash {}\t# rjenkins1", bucket.hash);
        for (position, (&item, &weight)) in
            bucket.items.iter().zip(&bucket.item_weights).enumerate()
        {
            let _ = write!(
                out,
                "\titem {} weight {}",
                self.item_text_name(item),
                fixed_point(weight)
            );
            if with_pos {
                let _ = write!(out, " pos {position}");
            }
            out.push('\n');
        }
        out.push_str("}\n");
    }

    fn item_text_name(&self, item: i32) -> String {
        match self.item_name(item) {
            Some(name) => name.to_string(),
            None if item >= 0 => format!("device{item}"),
            None => format!("bucket{}", -1 - item),
        }
    }

    fn write_rule(&self, rule: &Rule, out: &mut String) {
        let _ = writeln!(out, "rule {} {{", rule.name);
        let _ = writeln!(out, "\tid {}", rule.id);
        match rule.rule_type {
            RULE_TYPE_REPLICATED => out.push_str("\ttype replicated\n"),
            RULE_TYPE_ERASURE => out.push_str("\ttype erasure\n"),
            other => {
                let _ = writeln!(out, "\ttype {other}");
            }
        }
        let _ = writeln!(
            out,
            "\tmin_size {}\n\tmax_size {}",
            rule.min_size, rule.max_size
        );
        for step in &rule.steps {
            out.push_str(&self.step_text(step));
            out.push('\n');
        }
        out.push_str("}\n");
    }

    fn step_text(&self, step: &Step) -> String {
        let type_name = |type_id: i32| {
            self.type_name(type_id).map_or_else(
                || {
                    if type_id == 0 {
                        "device".to_string()
                    } else {
                        format!("type{type_id}")
                    }
                },
                str::to_string,
            )
        };
        match *step {
            Step::Noop => "\tstep noop".into(),
            Step::Take(item) => self.take_text(item),
            Step::Emit => "\tstep emit".into(),
            Step::SetChooseTries(n) => format!("\tstep set_choose_tries {n}"),
            Step::SetChooseLocalTries(n) => format!("\tstep set_choose_local_tries {n}"),
            Step::SetChooseLocalFallbackTries(n) => {
                format!("\tstep set_choose_local_fallback_tries {n}")
            }
            Step::SetChooseLeafTries(n) => format!("\tstep set_chooseleaf_tries {n}"),
            Step::SetChooseLeafVaryR(n) => format!("\tstep set_chooseleaf_vary_r {n}"),
            Step::SetChooseLeafStable(n) => format!("\tstep set_chooseleaf_stable {n}"),
            Step::ChooseFirstN { count, type_id } => {
                format!("\tstep choose firstn {count} type {}", type_name(type_id))
            }
            Step::ChooseIndep { count, type_id } => {
                format!("\tstep choose indep {count} type {}", type_name(type_id))
            }
            Step::ChooseLeafFirstN { count, type_id } => {
                format!(
                    "\tstep chooseleaf firstn {count} type {}",
                    type_name(type_id)
                )
            }
            Step::ChooseLeafIndep { count, type_id } => {
                format!(
                    "\tstep chooseleaf indep {count} type {}",
                    type_name(type_id)
                )
            }
        }
    }

    /// `step take X` or, for a shadow bucket, `step take X class C`.
    fn take_text(&self, item: i32) -> String {
        for (original, classes) in &self.class_buckets {
            for (class, shadow) in classes {
                if *shadow == item {
                    let class_name = self.class_name(*class).unwrap_or("?");
                    return format!(
                        "\tstep take {} class {class_name}",
                        self.item_text_name(*original)
                    );
                }
            }
        }
        format!("\tstep take {}", self.item_text_name(item))
    }
}

fn write_choose_arg(bucket_id: i32, arg: &ChooseArg, out: &mut String) {
    out.push_str("  {\n");
    let _ = writeln!(out, "    bucket_id {bucket_id}");
    if !arg.weight_set.is_empty() {
        out.push_str("    weight_set [\n");
        for row in &arg.weight_set {
            out.push_str("      [ ");
            for weight in row {
                let _ = write!(out, "{} ", fixed_point(*weight));
            }
            out.push_str("]\n");
        }
        out.push_str("    ]\n");
    }
    if !arg.ids.is_empty() {
        out.push_str("    ids [ ");
        for id in &arg.ids {
            let _ = write!(out, "{id} ");
        }
        out.push_str("]\n");
    }
    out.push_str("  }\n");
}
