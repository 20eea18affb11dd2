//! `crushtool --test --show-mappings`, line for line (Ceph's `CrushTester`).

use std::fmt::Write;

use crate::hash::crush_hash32_rjenkins1_2;
use crate::map::CrushMap;

/// Options of one `crushtool --test` run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TestOptions {
    /// `--rule`: only this rule; all rules in id order when `None`.
    pub rule: Option<u32>,
    pub num_rep: usize,
    pub min_x: u32,
    pub max_x: u32,
    /// `--pool-id`: the input becomes `crush_hash32_2(x, pool_id)`.
    pub pool_id: Option<i64>,
    /// `--weight DEV W` pairs in order, as 16.16 (see [`weight_from_text`]).
    pub weights: Vec<(i32, u32)>,
}

/// `crushtool --weight`'s conversion: `(int)(float(W) * 0x10000)`, clamped
/// to `[0, 0x10000]`.
pub fn weight_from_text(text: &str) -> Option<u32> {
    let value: f32 = text.trim().parse().ok()?;
    let fixed = (value * 65536.0) as i64;
    Some(fixed.clamp(0, 0x10000) as u32)
}

/// Formats a mapping as crushtool does: `[3,1,7]`, holes as 2147483647.
pub fn format_mapping(items: &[i32]) -> String {
    let mut text = String::with_capacity(2 + 11 * items.len());
    push_mapping(&mut text, items);
    text
}

/// Appends `[3,1,7]` to `text` without a string per item.
fn push_mapping(text: &mut String, items: &[i32]) {
    text.push('[');
    for (index, item) in items.iter().enumerate() {
        if index > 0 {
            text.push(',');
        }
        // Writing to a String cannot fail.
        let _ = write!(text, "{item}");
    }
    text.push(']');
}

/// The lines `crushtool -i MAP --test --show-mappings` prints for the given
/// rule (or every rule), num-rep, x range, pool id and weight overrides.
/// choose_args index 0 is used (falling back to the default set), as
/// crushtool does.
pub fn test_mappings(
    map: &CrushMap,
    rule: Option<u32>,
    num_rep: usize,
    min_x: u32,
    max_x: u32,
    pool_id: Option<i64>,
    weight_overrides: &[(i32, u32)],
) -> Vec<String> {
    let weights = tester_weights(map, weight_overrides);
    let mut lines = Vec::new();
    if weights.iter().map(|w| u64::from(*w)).sum::<u64>() == 0 {
        return lines; // crushtool prints nothing when every device is out
    }
    let rules: Vec<u32> = match rule {
        Some(rule) => vec![rule],
        None => (0..map.max_rules()).collect(),
    };
    for rule_id in rules.into_iter().filter(|rule_id| map.has_rule(*rule_id)) {
        for x in min_x..=max_x {
            let input = match pool_id {
                Some(pool) => crush_hash32_rjenkins1_2(x, pool as u32),
                None => x,
            };
            let out = map.do_rule_with_args(rule_id, input, num_rep, &weights, Some(0));
            let mut line = String::with_capacity(64);
            let _ = write!(line, "CRUSH rule {rule_id} x {x} ");
            push_mapping(&mut line, &out);
            lines.push(line);
        }
    }
    lines
}

/// crushtool's reweight vector: overrides, else 0x10000 for devices in a
/// bucket, else 0; `max_devices` long.
fn tester_weights(map: &CrushMap, overrides: &[(i32, u32)]) -> Vec<u32> {
    let mut weights = map.default_weights();
    for &(device, weight) in overrides {
        if device >= 0 && (device as usize) < weights.len() {
            weights[device as usize] = weight;
        }
    }
    weights
}

impl TestOptions {
    /// Runs [`test_mappings`] with these options.
    pub fn run(&self, map: &CrushMap) -> Vec<String> {
        test_mappings(
            map,
            self.rule,
            self.num_rep,
            self.min_x,
            self.max_x,
            self.pool_id,
            &self.weights,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_convert_like_crushtool() {
        let cases = [
            ("0.5", 32768),
            ("0.25", 16384),
            ("0.75", 49152),
            ("0.1", 6553),
            ("0.9", 58982),
            ("0.333", 21823),
        ];
        for (text, expected) in cases {
            assert_eq!(weight_from_text(text), Some(expected), "{text}");
        }
        assert_eq!(weight_from_text("2"), Some(0x10000));
        assert_eq!(weight_from_text("-1"), Some(0));
    }

    #[test]
    fn holes_print_as_item_none() {
        assert_eq!(
            format_mapping(&[5, crate::CRUSH_ITEM_NONE, 0]),
            "[5,2147483647,0]"
        );
        assert_eq!(format_mapping(&[]), "[]");
    }
}
