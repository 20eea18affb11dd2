//! Optional: checks freshly generated maps against a locally installed
//! `crushtool` (Debian: `ceph-base`). Not part of the normal run:
//!
//! ```text
//! CARGO_TARGET_DIR=/work/tgt/crush cargo test -p carmine-crush --test crushtool_live -- --ignored
//! ```
//!
//! Environment: `CRUSHTOOL` (default `crushtool`), `CRUSH_LIVE_SEEDS` as
//! `FROM..TO` (default `21..60`). Maps come from `tests/tools/gen.py`, the
//! generator that made `tests/data`.

use std::path::PathBuf;
use std::process::Command;

use carmine_crush::{parse_text, test_mappings};

fn run(command: &mut Command) -> String {
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

#[test]
#[ignore = "needs crushtool and python3"]
fn generated_maps_match_the_installed_crushtool() {
    let crushtool = std::env::var("CRUSHTOOL").unwrap_or_else(|_| "crushtool".into());
    let seeds = std::env::var("CRUSH_LIVE_SEEDS").unwrap_or_else(|_| "21..60".into());
    let (from, to) = seeds
        .split_once("..")
        .expect("CRUSH_LIVE_SEEDS is FROM..TO");
    let (from, to): (u32, u32) = (from.parse().unwrap(), to.parse().unwrap());
    let tools = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/tools");
    let scratch = std::env::temp_dir().join(format!("carmine-crush-live-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    for seed in from..to {
        let text = run(Command::new("python3")
            .arg(tools.join("gen.py"))
            .arg(seed.to_string()));
        let (text_path, bin_path) = (scratch.join("map.txt"), scratch.join("map.bin"));
        std::fs::write(&text_path, &text).unwrap();
        run(Command::new(&crushtool)
            .arg("-c")
            .arg(&text_path)
            .arg("-o")
            .arg(&bin_path));
        let map = parse_text(&text).unwrap_or_else(|error| panic!("seed {seed}: {error}"));
        let decompiled = run(Command::new(&crushtool).arg("-d").arg(&bin_path));
        assert_eq!(map.to_text(), decompiled, "seed {seed}: decompile differs");
        for num_rep in [1, 3, 6] {
            let expected = run(Command::new(&crushtool).arg("-i").arg(&bin_path).args([
                "--test",
                "--show-mappings",
                "--num-rep",
                &num_rep.to_string(),
                "--min-x",
                "0",
                "--max-x",
                "255",
            ]));
            let got = test_mappings(&map, None, num_rep, 0, 255, None, &[]);
            let expected: Vec<&str> = expected
                .lines()
                .filter(|line| line.starts_with("CRUSH rule"))
                .collect();
            assert_eq!(got, expected, "seed {seed} num-rep {num_rep}");
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
}
