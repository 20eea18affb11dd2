//! The shared-nothing rule, checked: the data path — the OSD's PG and shard code, the
//! stores, the shard event loop and its peer sessions, the objecter — names no
//! `Mutex`, `RwLock` or atomic type. A shard owns its state; cross-shard work is a
//! message (docs/architecture.md). Cross-shard plumbing outside these files (map
//! distribution, stats) uses bounded channels.

use std::path::{Path, PathBuf};

const DATA_PATH: &[&str] = &[
    "crates/osd/src",
    "crates/store/src",
    "crates/rt/src/shard_loop.rs",
    "crates/rt/src/peers.rs",
    "crates/client/src/objecter.rs",
];

const FORBIDDEN: &[&str] = &[
    "Mutex",
    "RwLock",
    "AtomicU",
    "AtomicI",
    "AtomicBool",
    "AtomicPtr",
];

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_file() {
        out.push(path.to_path_buf());
        return;
    }
    for entry in std::fs::read_dir(path).expect("readable source directory") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() || path.extension().is_some_and(|e| e == "rs") {
            rust_files(&path, out);
        }
    }
}

#[test]
fn the_data_path_uses_no_locks_or_atomics() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for part in DATA_PATH {
        rust_files(&root.join(part), &mut files);
    }
    assert!(
        files.len() > 10,
        "found only {} files; did the layout move?",
        files.len()
    );
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable source");
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for word in FORBIDDEN {
                if code.contains(word) {
                    found.push(format!(
                        "{}:{}: {}",
                        file.display(),
                        number + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "locks or atomics on the data path:\n{}",
        found.join("\n")
    );
}
