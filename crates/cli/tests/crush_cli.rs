//! `carmine crush compile|decompile|test` run as a real process against Ceph
//! 16.2.15's own output: the vectors in `crates/crush/tests/data` (see
//! `README-vectors.md` there) and, when it is installed, a live `crushtool`.
//!
//! `cases.tsv` rows are `rule numrep pool_id weights min_x max_x results`; each
//! row expands to the lines `crushtool --test --show-mappings --rule RULE
//! --num-rep NUMREP --min-x MIN_X --max-x MAX_X [--pool-id P] [--weight DEV W]…`
//! prints, `CRUSH rule RULE x X RESULT`. crushtool with `--rule` left out prints
//! the same lines for every rule in id order, which is how the vectors were made,
//! so the rows of one (numrep, pool_id, weights) group concatenated in rule order
//! are what `carmine crush test` must print without `--rule`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Seeds whose every case runs through the binary: multi-take, choose_args,
/// device classes, indep holes, and maps whose decompiled text does not compile
/// back to the same binary.
const TEST_SEEDS: [u32; 5] = [1, 5, 10, 14, 20];
const SEED_COUNT: u32 = 20;

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../crush/tests/data")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()))
}

fn carmine(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_carmine"))
        .args(args)
        .output()
        .expect("run carmine")
}

/// Runs `carmine ARGS`, which must succeed; returns its stdout.
fn carmine_ok(args: &[&str]) -> String {
    let output = carmine(args);
    assert!(
        output.status.success(),
        "carmine {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("stdout is UTF-8")
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("carmine-crush-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The options of one crushtool run, as they appear in `cases.tsv`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Options {
    num_rep: String,
    pool_id: Option<String>,
    /// `--weight DEV W` pairs, W exactly as crushtool was given it.
    weights: Vec<(String, String)>,
    min_x: String,
    max_x: String,
}

impl Options {
    fn args(&self) -> Vec<String> {
        let mut args = vec![
            "--num-rep".to_string(),
            self.num_rep.clone(),
            "--min-x".to_string(),
            self.min_x.clone(),
            "--max-x".to_string(),
            self.max_x.clone(),
        ];
        if let Some(pool_id) = &self.pool_id {
            args.extend(["--pool-id".to_string(), pool_id.clone()]);
        }
        for (device, weight) in &self.weights {
            args.extend(["--weight".to_string(), device.clone(), weight.clone()]);
        }
        args
    }
}

/// `cases.tsv` of one seed: per options, the expected lines of each rule, in
/// rule order.
fn cases(seed: u32) -> BTreeMap<Options, BTreeMap<u32, Vec<String>>> {
    let text = read(&data_dir().join(format!("{seed}/cases.tsv")));
    let mut groups: BTreeMap<Options, BTreeMap<u32, Vec<String>>> = BTreeMap::new();
    for line in text.lines().skip(1) {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 7, "bad cases.tsv row: {line}");
        let rule: u32 = fields[0].parse().unwrap();
        let weights = if fields[3] == "-" {
            Vec::new()
        } else {
            fields[3]
                .split(',')
                .map(|pair| {
                    let (device, weight) = pair.split_once(':').unwrap();
                    (device.to_string(), weight.to_string())
                })
                .collect()
        };
        let options = Options {
            num_rep: fields[1].to_string(),
            pool_id: (fields[2] != "-").then(|| fields[2].to_string()),
            weights,
            min_x: fields[4].to_string(),
            max_x: fields[5].to_string(),
        };
        let min_x: u32 = fields[4].parse().unwrap();
        let results: Vec<&str> = if fields[6].is_empty() {
            Vec::new()
        } else {
            fields[6].split(' ').collect()
        };
        let lines = results
            .iter()
            .zip(min_x..)
            .map(|(result, x)| format!("CRUSH rule {rule} x {x} {result}"))
            .collect();
        groups.entry(options).or_default().insert(rule, lines);
    }
    groups
}

fn crush_test(map: &str, rule: Option<u32>, options: &Options) -> String {
    let mut args: Vec<String> = ["crush", "test", "-i", map, "--show-mappings"]
        .iter()
        .map(|arg| arg.to_string())
        .collect();
    if let Some(rule) = rule {
        args.extend(["--rule".to_string(), rule.to_string()]);
    }
    args.extend(options.args());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    carmine_ok(&args)
}

/// Where two outputs first differ, for a readable failure.
fn first_difference(got: &str, want: &str) -> String {
    let line = got
        .lines()
        .zip(want.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| got.lines().count().min(want.lines().count()));
    format!(
        "line {}: got {:?}, want {:?} ({} vs {} lines)",
        line + 1,
        got.lines().nth(line),
        want.lines().nth(line),
        got.lines().count(),
        want.lines().count()
    )
}

fn joined(lines: impl IntoIterator<Item = String>) -> String {
    lines.into_iter().map(|line| line + "\n").collect()
}

#[test]
fn test_prints_what_crushtool_printed_for_every_case() {
    let mut failures = Vec::new();
    let mut lines_checked = 0;
    for seed in TEST_SEEDS {
        let map = data_dir().join(format!("{seed}/map.txt"));
        let map = map.to_str().unwrap();
        for (options, rules) in cases(seed) {
            // Without --rule: every rule, in id order.
            let want = joined(rules.values().flatten().cloned());
            let got = crush_test(map, None, &options);
            if got != want {
                failures.push(format!(
                    "seed {seed} {options:?}: {}",
                    first_difference(&got, &want)
                ));
            }
            lines_checked += want.lines().count();
            // With --rule: the first and last rule on their own.
            for (&rule, lines) in [rules.iter().next(), rules.iter().last()]
                .into_iter()
                .flatten()
            {
                let want = joined(lines.iter().cloned());
                let got = crush_test(map, Some(rule), &options);
                if got != want {
                    failures.push(format!(
                        "seed {seed} rule {rule} {options:?}: {}",
                        first_difference(&got, &want)
                    ));
                }
            }
        }
    }
    println!("{lines_checked} crushtool lines matched");
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
}

#[test]
fn compile_then_decompile_gives_crushtools_text() {
    let scratch = Scratch::new("roundtrip");
    for seed in 1..=SEED_COUNT {
        let map = data_dir().join(format!("{seed}/map.txt"));
        let map = map.to_str().unwrap();
        let compiled = scratch.path(&format!("{seed}.bin"));
        assert_eq!(carmine_ok(&["crush", "compile", map, "-o", &compiled]), "");
        let want = read(&data_dir().join(format!("{seed}/map.d.txt")));
        let got = carmine_ok(&["crush", "decompile", &compiled]);
        assert!(
            got == want,
            "seed {seed} decompile: {}",
            first_difference(&got, &want)
        );
        let text = scratch.path(&format!("{seed}.txt"));
        carmine_ok(&["crush", "decompile", &compiled, "-o", &text]);
        assert_eq!(read(Path::new(&text)), want, "seed {seed}: decompile -o");
    }
}

/// `crush remove-item` gives what `crushtool --remove-item` gave (the texts in the
/// CRUSH crate's `tests/data/remove-item/`, one per seed map without choose_args; see
/// its conformance test), and refuses a bucket or an unknown name in one line.
#[test]
fn remove_item_gives_crushtools_map() {
    let scratch = Scratch::new("remove-item");
    let expected = data_dir().join("remove-item");
    for (seed, device) in [(1, "osd.0"), (2, "osd.0"), (3, "osd.27"), (4, "osd.0")] {
        let map = data_dir().join(format!("{seed}/map.txt"));
        let out = scratch.path(&format!("{seed}.bin"));
        carmine_ok(&[
            "crush",
            "remove-item",
            "-i",
            map.to_str().unwrap(),
            device,
            "-o",
            &out,
        ]);
        let want = read(&expected.join(format!("{seed}-{device}.txt")));
        let got = carmine_ok(&["crush", "decompile", &out]);
        assert!(
            got == want,
            "seed {seed}: {}",
            first_difference(&got, &want)
        );
    }
    let map = data_dir().join("1/map.txt");
    let map = map.to_str().unwrap();
    let out = scratch.path("x.bin");
    let error = carmine_error(&["crush", "remove-item", "-i", map, "osd.999", "-o", &out]);
    assert!(error.contains("no item named"), "{error}");
    let error = carmine_error(&["crush", "remove-item", "-i", map, "default", "-o", &out]);
    assert!(error.contains("is a bucket"), "{error}");
}

#[test]
fn test_reads_compiled_maps_like_text_maps() {
    let scratch = Scratch::new("compiled");
    for seed in TEST_SEEDS {
        let map = data_dir().join(format!("{seed}/map.txt"));
        let map = map.to_str().unwrap();
        let compiled = scratch.path(&format!("{seed}.bin"));
        carmine_ok(&["crush", "compile", map, "-o", &compiled]);
        let groups = cases(seed);
        let (options, rules) = groups.iter().next().unwrap();
        let want = joined(rules.values().flatten().cloned());
        assert_eq!(crush_test(&compiled, None, options), want, "seed {seed}");
    }
}

/// Runs `carmine ARGS`, which must fail; returns its stderr, checked to be a
/// single line.
fn carmine_error(args: &[&str]) -> String {
    let output = carmine(args);
    assert!(!output.status.success(), "carmine {args:?} succeeded");
    assert!(
        output.stdout.is_empty(),
        "carmine {args:?} printed to stdout"
    );
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "not one line: {stderr:?}");
    stderr
}

#[test]
fn malformed_maps_fail_with_one_line_naming_the_line() {
    let scratch = Scratch::new("malformed");
    let good = read(&data_dir().join("3/map.txt"));
    let lines: Vec<&str> = good.lines().collect();
    let step_at = lines
        .iter()
        .position(|line| line.trim_start().starts_with("step chooseleaf"))
        .expect("seed 3 has a chooseleaf step");
    // (line index, replacement, the line the error must name). Ceph's grammar
    // ignores line breaks, so a statement cut short is noticed at the next token,
    // one line further down.
    let corruptions = [
        (step_at, "\tstep chooseleaf firstn 0 type hots", step_at + 1),
        (step_at, "\tstep chooseleaf firstn", step_at + 2),
        (1, "tunable choose_local_tries many", 2),
    ];
    for (index, replacement, line_number) in corruptions {
        let mut text: Vec<&str> = lines.clone();
        text[index] = replacement;
        let path = scratch.path("bad.txt");
        std::fs::write(&path, text.join("\n") + "\n").unwrap();
        for args in [
            vec![
                "crush",
                "compile",
                path.as_str(),
                "-o",
                &scratch.path("bad.bin"),
            ],
            vec![
                "crush",
                "test",
                "-i",
                path.as_str(),
                "--num-rep",
                "3",
                "--show-mappings",
            ],
        ] {
            let error = carmine_error(&args);
            assert!(
                error.starts_with("error: ") && error.contains(&format!("line {line_number}")),
                "{replacement:?} at line {line_number}: {error:?}"
            );
            assert!(error.contains("bad.txt"), "names the file: {error:?}");
        }
    }
    let missing = carmine_error(&["crush", "decompile", &scratch.path("absent.bin")]);
    assert!(missing.contains("absent.bin"), "{missing:?}");
    let ceph_binary = scratch.path("ceph.bin");
    std::fs::write(&ceph_binary, [0x00, 0x00, 0x01, 0x00, 0x05, 0x00]).unwrap();
    let error = carmine_error(&["crush", "decompile", &ceph_binary]);
    assert!(error.contains("crushtool -d"), "{error:?}");
    let truncated = scratch.path("truncated.bin");
    std::fs::write(&truncated, b"CRSH\x01").unwrap();
    carmine_error(&["crush", "decompile", &truncated]);
    let good_path = data_dir().join("3/map.txt");
    let good_path = good_path.to_str().unwrap();
    let error = carmine_error(&["crush", "test", "-i", good_path, "--num-rep", "3"]);
    assert!(error.contains("--show-mappings"), "{error:?}");
    let error = carmine_error(&[
        "crush",
        "test",
        "-i",
        good_path,
        "--weight",
        "3",
        "heavy",
        "--show-mappings",
    ]);
    assert!(error.contains("heavy"), "{error:?}");
}

/// The `crushtool` to compare with: `$CRUSHTOOL`, else `crushtool` on PATH.
fn crushtool() -> Option<String> {
    let program = std::env::var("CRUSHTOOL").unwrap_or_else(|_| "crushtool".to_string());
    let found = Command::new(&program).arg("--help").output().is_ok();
    found.then_some(program)
}

fn run_ok(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("running {command:?}: {error}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Both tools on the same maps and arguments; their stdout must be identical.
/// Skipped, with a note, where crushtool is not installed (Debian: ceph-base).
#[test]
fn diff_against_installed_crushtool() {
    let Some(crushtool) = crushtool() else {
        println!("note: crushtool is not installed; skipping the live comparison");
        return;
    };
    let scratch = Scratch::new("live");
    let mut lines_compared = 0;
    let argument_sets: [&[&str]; 6] = [
        &["--num-rep", "3", "--min-x", "0", "--max-x", "1023"],
        // No --num-rep: each rule's min_size..=max_size; no x range: 0..=1023.
        &["--rule", "0"],
        &[
            "--num-rep",
            "4",
            "--min-x",
            "100",
            "--max-x",
            "300",
            "--pool-id",
            "7",
        ],
        &["--num-rep", "3", "--x", "17", "--pool-id", "-1"],
        // --min-x alone is ignored by crushtool; repeated --weight: the last wins.
        &[
            "--num-rep",
            "2",
            "--min-x",
            "900",
            "--weight",
            "0",
            "0.5",
            "--weight",
            "1",
            "0",
            "--weight",
            "0",
            "0.25",
            "--weight",
            "2",
            "0.333",
        ],
        &[
            "--num-rep",
            "6",
            "--min-x",
            "0",
            "--max-x",
            "511",
            "--rule",
            "1",
        ],
    ];
    for seed in [3, 5, 12, 14] {
        let map = data_dir().join(format!("{seed}/map.txt"));
        let map = map.to_str().unwrap();
        let ceph_binary = scratch.path(&format!("{seed}.ceph.bin"));
        run_ok(Command::new(&crushtool).args(["-c", map, "-o", &ceph_binary]));
        let want = run_ok(Command::new(&crushtool).args(["-d", &ceph_binary]));
        let got = carmine_ok(&["crush", "decompile", map]);
        assert!(
            got == want,
            "seed {seed} decompile: {}",
            first_difference(&got, &want)
        );
        for arguments in argument_sets {
            let want = run_ok(
                Command::new(&crushtool)
                    .args(["-i", &ceph_binary, "--test", "--show-mappings"])
                    .args(arguments),
            );
            let mut args = vec!["crush", "test", "-i", map, "--show-mappings"];
            args.extend_from_slice(arguments);
            let got = carmine_ok(&args);
            lines_compared += want.lines().count();
            assert!(
                got == want,
                "seed {seed} {arguments:?}: {}",
                first_difference(&got, &want)
            );
        }
    }
    println!("crushtool and carmine agree on 4 maps x 6 argument sets ({lines_compared} lines)");
    assert!(
        lines_compared > 100_000,
        "only {lines_compared} lines compared"
    );
}
