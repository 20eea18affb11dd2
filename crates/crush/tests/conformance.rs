//! Conformance with Ceph 16.2.15's own `crushtool` and `osdmaptool`, over
//! the vectors in `tests/data` (copied from `shared/crush-vectors`; see
//! `tests/data/README-vectors.md` for how they were made).
//!
//! For every seed: compile `map.txt`, run every row of `cases.tsv` through
//! [`carmine_crush::test_mappings`] and compare each line with crushtool's;
//! and check that printing the map gives `map.d.txt` byte for byte.

use std::path::{Path, PathBuf};

use carmine_crush::{hash, parse_text, test_mappings, weight_from_text, CrushMap};

const SEED_COUNT: u32 = 20;

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()))
}

/// One row of `cases.tsv`, expanded to crushtool's lines.
struct Case {
    rule: u32,
    num_rep: usize,
    pool_id: Option<i64>,
    weights: Vec<(i32, u32)>,
    min_x: u32,
    max_x: u32,
    expected: Vec<String>,
}

fn parse_cases(text: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    for line in text.lines().skip(1) {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 7, "bad cases.tsv row: {line}");
        let rule: u32 = fields[0].parse().unwrap();
        let pool_id = (fields[2] != "-").then(|| fields[2].parse().unwrap());
        let weights = if fields[3] == "-" {
            Vec::new()
        } else {
            fields[3]
                .split(',')
                .map(|pair| {
                    let (device, weight) = pair.split_once(':').unwrap();
                    (device.parse().unwrap(), weight_from_text(weight).unwrap())
                })
                .collect()
        };
        let (min_x, max_x): (u32, u32) = (fields[4].parse().unwrap(), fields[5].parse().unwrap());
        let results: Vec<&str> = if fields[6].is_empty() {
            Vec::new()
        } else {
            fields[6].split(' ').collect()
        };
        let expected = results
            .iter()
            .zip(min_x..=max_x)
            .map(|(result, x)| format!("CRUSH rule {rule} x {x} {result}"))
            .collect();
        cases.push(Case {
            rule,
            num_rep: fields[1].parse().unwrap(),
            pool_id,
            weights,
            min_x,
            max_x,
            expected,
        });
    }
    cases
}

/// (cases passed, cases total, first mismatch) for one seed.
fn run_seed(seed: u32) -> (usize, usize, Option<String>) {
    let dir = data_dir().join(seed.to_string());
    let map = match parse_text(&read(&dir.join("map.txt"))) {
        Ok(map) => map,
        Err(error) => return (0, 1, Some(format!("map.txt does not compile: {error}"))),
    };
    let cases = parse_cases(&read(&dir.join("cases.tsv")));
    let mut passed = 0;
    let mut first_mismatch = None;
    for case in &cases {
        let got = test_mappings(
            &map,
            Some(case.rule),
            case.num_rep,
            case.min_x,
            case.max_x,
            case.pool_id,
            &case.weights,
        );
        if got == case.expected {
            passed += 1;
        } else if first_mismatch.is_none() {
            let at = got
                .iter()
                .zip(&case.expected)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            first_mismatch = Some(format!(
                "rule {} num_rep {} pool {:?} weights {:?}: got {:?}, want {:?}",
                case.rule,
                case.num_rep,
                case.pool_id,
                case.weights,
                got.get(at),
                case.expected.get(at)
            ));
        }
    }
    (passed, cases.len(), first_mismatch)
}

#[test]
fn every_seed_maps_like_crushtool() {
    let mut failures = Vec::new();
    let (mut passed_total, mut cases_total) = (0, 0);
    for seed in 1..=SEED_COUNT {
        let (passed, total, mismatch) = run_seed(seed);
        println!("seed {seed}: {passed}/{total} cases match crushtool");
        passed_total += passed;
        cases_total += total;
        if let Some(mismatch) = mismatch {
            failures.push(format!("seed {seed}: {mismatch}"));
        }
    }
    println!("total: {passed_total}/{cases_total} cases");
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
}

#[test]
fn every_seed_decompiles_like_crushtool() {
    let mut failures = Vec::new();
    for seed in 1..=SEED_COUNT {
        let dir = data_dir().join(seed.to_string());
        let map = parse_text(&read(&dir.join("map.txt"))).unwrap();
        let expected = read(&dir.join("map.d.txt"));
        let got = map.to_text();
        if got != expected {
            failures.push(format!("seed {seed} {}", first_difference(&got, &expected)));
        }
    }
    assert!(
        failures.is_empty(),
        "decompile differs:\n{}",
        failures.join("\n")
    );
}

#[test]
fn every_seed_survives_binary_and_text_round_trips() {
    for seed in 1..=SEED_COUNT {
        let dir = data_dir().join(seed.to_string());
        let map = parse_text(&read(&dir.join("map.txt"))).unwrap();
        let decoded = CrushMap::decode(&map.encode()).unwrap();
        assert_eq!(decoded, map, "seed {seed}: encode/decode changed the map");
        let weights = map.default_weights();
        for rule in map.rules() {
            for x in 0..64 {
                assert_eq!(
                    decoded.do_rule_with_args(rule.id, x, 3, &weights, Some(0)),
                    map.do_rule_with_args(rule.id, x, 3, &weights, Some(0)),
                    "seed {seed} rule {} x {x}",
                    rule.id
                );
            }
        }
    }
}

/// object name -> PG -> raw OSDs, as `osdmaptool --test-map-object` and
/// `--test-map-pgs-dump-all` printed them. The raw set is CRUSH's output
/// before pg_upmap_items (an osdmap feature, checked elsewhere). osdmaptool's
/// `--mark-up-in` also gives every OSD whose crush weight is 0 a weight of
/// 1.0 through `adjust_item_weightf` (which re-sums the ancestors), so we do
/// the same.
#[test]
fn objects_map_to_pgs_and_osds_like_osdmaptool() {
    let pools = [
        ("A", 192u32, 96u32, 5i32),
        ("B", 256, 256, 2),
        ("C", 192, 192, 5),
    ];
    let objects = read(&data_dir().join("objects.tsv"));
    let mut checked = 0;
    for (osdmap, pg_num, pgp_num, out_osd) in pools {
        let mut map = parse_text(&read(
            &data_dir().join(format!("osdmap_{osdmap}/crush.txt")),
        ))
        .unwrap();
        for osd in 0..map.max_devices() {
            if map.item_weight(osd) == Some(0) {
                map.adjust_item_weight(osd, 0x10000);
            }
        }
        let mut weights = vec![0x10000u32; map.max_devices() as usize];
        weights[out_osd as usize] = 0;
        for line in objects.lines().skip(1) {
            let fields: Vec<&str> = line.split('\t').collect();
            if fields[0] != osdmap {
                continue;
            }
            let (pool, name, pgid, raw) = (fields[1], fields[2], fields[3], fields[5]);
            assert_eq!(pool, "1");
            let seed = hash::str_hash_rjenkins(name.as_bytes());
            let ps = hash::stable_mod(seed, pg_num, hash::stable_mod_mask(pg_num));
            assert_eq!(format!("1.{ps:x}"), pgid, "osdmap {osdmap} object {name:?}");
            let pps = hash::crush_hash32_rjenkins1_2(
                hash::stable_mod(ps, pgp_num, hash::stable_mod_mask(pgp_num)),
                1,
            );
            let osds = map.do_rule_with_args(0, pps, 3, &weights, Some(1));
            assert_eq!(
                carmine_crush::format_mapping(&osds),
                raw,
                "osdmap {osdmap} object {name:?} pg {pgid}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 600);
}

/// `CrushMap::remove_device` leaves the map `crushtool -i MAP --remove-item osd.N`
/// leaves: the same buckets, weights (a uniform bucket's all zeroed) and shadow
/// (class) buckets, decompiled byte for byte. The expected texts in
/// `tests/data/remove-item/` were made with Ceph 16.2's crushtool from the seeds'
/// maps (`crushtool -c map.txt`, `--remove-item` of the first device, `-d`), one
/// file per seed named `SEED-DEVICE.txt`. Seeds whose maps carry choose_args (5 and
/// 7) are left out: `remove_device` follows Ceph's `remove_item` step for step
/// there too, and the hierarchy's own buckets get Ceph's weight sets, but Ceph then
/// rebuilds its class shadow trees, cloning the weight sets into them, which Carmine
/// does not; and on these generated maps (weight sets with a different number of
/// positions from one bucket to the next) Ceph writes out uninitialised weights
/// (`-22912.887`).
#[test]
fn removing_a_device_matches_crushtool_remove_item() {
    let compared = edits_match_crushtool("remove-item", |map, id| {
        assert!(map.remove_device(id) > 0, "osd.{id} was in no bucket");
    });
    assert!(compared >= 5, "only {compared} maps without choose_args");
}

/// `CrushMap::adjust_item_weight` leaves the map `crushtool -i MAP --reweight-item
/// osd.N 0.5` leaves (Ceph's `adjust_item_weight` with its weight sets), decompiled
/// byte for byte: in a uniform bucket every item takes the weight (seed 1). The texts
/// in `tests/data/reweight-item/` were made as those of `remove-item/`, for the seeds
/// without choose_args (with them, the same shadow-tree difference as for removal).
#[test]
fn reweighting_a_device_matches_crushtool_reweight_item() {
    let compared = edits_match_crushtool("reweight-item", |map, id| {
        assert!(
            map.adjust_item_weight(id, 0x8000) > 0,
            "osd.{id} was in no bucket"
        );
    });
    assert_eq!(compared, 6);
}

/// Applies `edit` (with the device's id) to each seed map named in `tests/data/DIR/`
/// (`SEED-osd.N.txt`, crushtool's text of the edited map) and compares the text;
/// maps with choose_args are skipped. Returns how many were compared.
fn edits_match_crushtool(dir: &str, edit: impl Fn(&mut carmine_crush::CrushMap, i32)) -> usize {
    let dir = data_dir().join(dir);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let mut compared = 0;
    let mut failures = Vec::new();
    for name in &names {
        let stem = name.trim_end_matches(".txt");
        let (seed, device) = stem.split_once('-').unwrap();
        let mut map = parse_text(&read(&data_dir().join(seed).join("map.txt"))).unwrap();
        if !map.choose_args().is_empty() {
            continue;
        }
        edit(&mut map, device.trim_start_matches("osd.").parse().unwrap());
        let expected = read(&dir.join(name));
        let got = map.to_text();
        compared += 1;
        if got != expected {
            failures.push(format!("{name} {}", first_difference(&got, &expected)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    compared
}

/// The first line where two texts differ, in words.
fn first_difference(got: &str, expected: &str) -> String {
    let line = (got.lines().zip(expected.lines()))
        .position(|(a, b)| a != b)
        .unwrap_or(0);
    format!(
        "line {}: got {:?}, want {:?}",
        line + 1,
        got.lines().nth(line),
        expected.lines().nth(line)
    )
}
