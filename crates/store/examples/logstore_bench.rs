//! Durable 4 KiB transactions per second on a `FileDevice`, with group commits of 1,
//! 16 and 64 transactions per flush, against fio's one-fdatasync-per-write baseline
//! on a file in the same directory, in the same run.
//!
//! ```text
//! cargo run --release -p carmine-store --example logstore_bench -- [DIR] [SECONDS]
//! ```
//!
//! DIR defaults to the system temp directory; SECONDS (per case) to 3. The fio
//! baseline is skipped when `fio` is not installed.

use bytes::Bytes;
use carmine_store::{CollectionId, FileDevice, LogStore, LogStoreConfig, ObjectStore, Transaction};
use carmine_types::{ObjectId, PgId};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const DEVICE_BYTES: u64 = 1 << 30;
const OBJECT_COUNT: u64 = 4096;
const BLOCK_BYTES: usize = 4096;
const GROUP_SIZES: [u64; 3] = [1, 16, 64];

fn pg() -> CollectionId {
    CollectionId::Pg(PgId::new(1, 0))
}

/// Transactions per second with `group` transactions per flush (each acknowledged
/// only when the flush returns).
fn logstore_tx_per_second(dir: &Path, group: u64, seconds: f64) -> f64 {
    let path = dir.join("logstore-bench.dev");
    let device = FileDevice::create(&path, DEVICE_BYTES).expect("create device file");
    let mut store = LogStore::open(device, LogStoreConfig::default()).expect("open store");
    let mut tx = Transaction::new();
    tx.create_collection(pg());
    store.submit(tx).expect("setup");
    store.flush().expect("flush");
    let data = Bytes::from(vec![0xA5u8; BLOCK_BYTES]);
    let start = Instant::now();
    let mut count = 0u64;
    while start.elapsed() < Duration::from_secs_f64(seconds) {
        for _ in 0..group {
            let oid = ObjectId::head(format!("bench_{}", count % OBJECT_COUNT));
            let offset = (count / OBJECT_COUNT % 256) * BLOCK_BYTES as u64;
            let mut tx = Transaction::new();
            tx.write(pg(), oid, offset, data.clone());
            let seq = store.submit(tx).expect("submit");
            count += 1;
            assert!(store.committed_through() < seq);
        }
        store.flush().expect("flush");
    }
    let rate = count as f64 / start.elapsed().as_secs_f64();
    let stats = store.stats();
    drop(store);
    let _ = std::fs::remove_file(&path);
    eprintln!(
        "  group {group:>2}: {count} tx, {} syncs, {} cleaned bytes",
        stats.syncs, stats.cleaned_bytes
    );
    rate
}

/// fio's IOPS for 4 KiB sequential writes with an fdatasync after each, or `None`.
fn fio_iops(dir: &Path, seconds: f64) -> Option<f64> {
    let file = dir.join("fio-bench.dat");
    let output = Command::new("fio")
        .args([
            "--name=baseline",
            "--rw=write",
            "--bs=4k",
            "--fdatasync=1",
            "--size=256m",
        ])
        .args(["--ioengine=psync", "--time_based", "--output-format=json"])
        .arg(format!("--runtime={}", seconds.ceil() as u64))
        .arg(format!("--filename={}", file.display()))
        .output()
        .ok()?;
    let _ = std::fs::remove_file(&file);
    if !output.status.success() {
        eprintln!("fio failed: {}", String::from_utf8_lossy(&output.stderr));
        return None;
    }
    let json = String::from_utf8_lossy(&output.stdout);
    let write = &json[json.find("\"write\" : {")?..];
    let iops = &write[write.find("\"iops\"")? + 6..];
    let value = iops.trim_start_matches([' ', ':']);
    let end = value.find([',', '\n'])?;
    value[..end].trim().parse().ok()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let seconds: f64 = args
        .next()
        .map_or(3.0, |s| s.parse().expect("SECONDS is a number"));
    println!(
        "LogStore 4 KiB durable transactions in {} ({seconds} s per case)",
        dir.display()
    );
    let baseline = fio_iops(&dir, seconds);
    match baseline {
        Some(iops) => println!("fio --rw=write --bs=4k --fdatasync=1: {iops:.0} IOPS"),
        None => println!("fio not available: no baseline"),
    }
    for group in GROUP_SIZES {
        let rate = logstore_tx_per_second(&dir, group, seconds);
        let ratio = baseline.map_or(String::new(), |iops| format!("  ({:.2}x fio)", rate / iops));
        println!("group commit {group:>2} tx/flush: {rate:>9.0} tx/s{ratio}");
    }
}
