//! LogStore on a `FileDevice` against fio on a file in the same directory, in the same
//! run, for the four cases of issue #7:
//!
//! 1. 4 KiB durable writes one at a time (one transaction per flush) against
//!    `fio --rw=write --bs=4k --fdatasync=1`;
//! 2. 4 KiB durable writes 16 in flight (16 transactions per flush: group commit)
//!    against the same fio run;
//! 3. 1 MiB durable writes one at a time against `fio --rw=write --bs=1m --fdatasync=1`
//!    (the same sync policy: every write durable before the next starts);
//! 4. restart time with 1 M small 64-byte objects: open until ready, the device's page
//!    cache dropped, after a clean close and after a crash that left the whole build
//!    in the log (a copy of the crashed device each round).
//!
//! ```text
//! cargo run --release -p carmine-store --example logstore_bench -- [DIR] [ROUNDS] [SECONDS] [CASES]
//! ```
//!
//! DIR defaults to the system temp directory, ROUNDS to 5, SECONDS (per run) to 3,
//! CASES to `small,large,restart`. Each round runs fio and LogStore back to back,
//! alternating which goes first; the table gives medians over rounds and the median of
//! the per-round ratios. Both sides write to files created the same way (written full
//! of zeros, then synced), so both overwrite allocated blocks and `fdatasync` has no
//! allocation to commit; fio's own layout (`fallocate`, unwritten extents) would also
//! make every one of its syncs write file system metadata. fio runs with
//! `--invalidate=0`: by default it drops its file from the page cache as it starts, so
//! every buffered write must first allocate pages (its 1 MiB writes took 1.7-6 ms
//! instead of 0.25 ms here), while LogStore's device file stays cached.
//!
//! The disk of a shared machine changes speed several times over within seconds, so
//! LogStore's runs also time a second baseline, in process and interleaved with
//! LogStore flush by flush: the same write (4 KiB or 1 MiB) and one `fdatasync` on
//! the fio file. Its ratio is the one the noise does not move.
//!
//! The page cache of the restart device is dropped with `dd iflag=nocache count=0`
//! (`posix_fadvise(DONTNEED)` on that file only); the fio baselines are skipped when
//! `fio` is not installed.

use bytes::Bytes;
use carmine_store::logstore;
use carmine_store::{CollectionId, FileDevice, LogStore, LogStoreConfig, ObjectStore, Transaction};
use carmine_types::{ObjectId, PgId};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const DEVICE_BYTES: u64 = 1 << 30;
const FIO_FILE_BYTES: u64 = 512 << 20;
const SMALL_BYTES: usize = 4096;
/// 4 KiB writes cycle over these objects and block offsets (64 MiB live at most).
const SMALL_OBJECT_COUNT: u64 = 1024;
const SMALL_BLOCKS_PER_OBJECT: u64 = 16;
const LARGE_BYTES: usize = 1 << 20;
/// 1 MiB writes cycle over these objects (64 MiB live).
const LARGE_OBJECT_COUNT: u64 = 64;
const IN_FLIGHT: u64 = 16;
const RESTART_DEVICE_BYTES: u64 = 512 << 20;
const RESTART_OBJECT_COUNT: u64 = 1_000_000;
const RESTART_OBJECT_BYTES: usize = 64;
const RESTART_WRITES_PER_TX: u64 = 64;
const RESTART_TX_PER_FLUSH: u64 = 16;

fn pg() -> CollectionId {
    CollectionId::Pg(PgId::new(1, 0))
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// Opens the store on `path`, creating the collection on first use.
fn open_store(path: &Path) -> LogStore<FileDevice> {
    let device = FileDevice::open(path).expect("open device file");
    let mut store = LogStore::open(device, LogStoreConfig::default()).expect("open store");
    if !store.collection_exists(pg()) {
        let mut tx = Transaction::new();
        tx.create_collection(pg());
        store.submit(tx).expect("create collection");
        store.flush().expect("flush");
    }
    store
}

/// A payload that does not compress, as fio's buffers do not.
fn payload(length: usize, seed: u64) -> Bytes {
    let mut state = seed | 1;
    let mut out = Vec::with_capacity(length + 8);
    while out.len() < length {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(length);
    Bytes::from(out)
}

/// What fio does, in process: sequential positional writes to a file written full
/// beforehand, each followed by `fdatasync`.
struct RawFile {
    file: File,
    offset: u64,
}

impl RawFile {
    fn open(path: &Path) -> Self {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .expect("open baseline file");
        Self { file, offset: 0 }
    }

    fn write_and_sync(&mut self, data: &[u8]) {
        if self.offset + data.len() as u64 > FIO_FILE_BYTES {
            self.offset = 0;
        }
        self.file.write_all_at(data, self.offset).expect("write");
        self.file.sync_data().expect("fdatasync");
        self.offset += data.len() as u64;
    }
}

/// Writes per second of LogStore (`group` transactions of one `data` write per flush,
/// each acknowledged only when its flush returns) and of the in-process baseline
/// (one `data` write and one fdatasync), alternating one flush with one baseline
/// write so both see the same disk: it is shared and its sync latency swings by
/// several times from one second to the next.
fn interleaved_rates(
    path: &Path,
    raw: &mut RawFile,
    group: u64,
    seconds: f64,
    data: &Bytes,
    target: impl Fn(u64) -> (ObjectId, u64),
) -> (f64, f64) {
    let mut store = open_store(path);
    let before = store.stats();
    let (mut store_time, mut raw_time) = (Duration::ZERO, Duration::ZERO);
    let (mut count, mut raw_count) = (0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs_f64(seconds) {
        let flush_start = Instant::now();
        let mut last = 0;
        for _ in 0..group {
            let (oid, offset) = target(count);
            let mut tx = Transaction::new();
            tx.write(pg(), oid, offset, data.clone());
            last = store.submit(tx).expect("submit");
            count += 1;
        }
        store.flush().expect("flush");
        assert!(store.committed_through() >= last);
        store_time += flush_start.elapsed();
        let raw_start = Instant::now();
        raw.write_and_sync(data);
        raw_time += raw_start.elapsed();
        raw_count += 1;
    }
    let stats = store.stats();
    eprintln!(
        "    LogStore {} B x {group}/flush: {count} writes, {} syncs, {} device writes, {} KiB written, {} cleaned bytes",
        data.len(),
        stats.syncs - before.syncs,
        stats.device_writes - before.device_writes,
        (stats.bytes_written - before.bytes_written) >> 10,
        stats.cleaned_bytes - before.cleaned_bytes,
    );
    store.close().expect("close");
    (
        count as f64 / store_time.as_secs_f64(),
        raw_count as f64 / raw_time.as_secs_f64(),
    )
}

fn small_target(count: u64) -> (ObjectId, u64) {
    let oid = ObjectId::head(format!("small_{}", count % SMALL_OBJECT_COUNT));
    let block = count / SMALL_OBJECT_COUNT % SMALL_BLOCKS_PER_OBJECT;
    (oid, block * SMALL_BYTES as u64)
}

fn large_target(count: u64) -> (ObjectId, u64) {
    (
        ObjectId::head(format!("large_{}", count % LARGE_OBJECT_COUNT)),
        0,
    )
}

/// fio's write IOPS for sequential `block` writes with an fdatasync after each, on a
/// file written full beforehand and left in the page cache; `None` without fio.
fn fio_iops(file: &Path, block: &str, seconds: f64) -> Option<f64> {
    let output = Command::new("fio")
        .args(["--name=baseline", "--rw=write", "--fdatasync=1"])
        .arg(format!("--bs={block}"))
        .arg(format!("--size={}", FIO_FILE_BYTES))
        .args(["--ioengine=psync", "--invalidate=0", "--time_based"])
        .arg("--output-format=json")
        .arg(format!("--runtime={}", seconds.ceil() as u64))
        .arg(format!("--filename={}", file.display()))
        .output()
        .ok()?;
    if !output.status.success() {
        eprintln!("fio failed: {}", String::from_utf8_lossy(&output.stderr));
        return None;
    }
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
    let job = &json["jobs"][0];
    let iops = job["write"]["iops"].as_f64()?;
    eprintln!(
        "    fio --bs={block} --fdatasync=1: {iops:.1} IOPS (write {:.2} ms, fdatasync {:.2} ms)",
        job["write"]["clat_ns"]["mean"].as_f64().unwrap_or(0.0) / 1e6,
        job["sync"]["lat_ns"]["mean"].as_f64().unwrap_or(0.0) / 1e6,
    );
    Some(iops)
}

/// Per-round results of one case: LogStore's rate, fio's, and the in-process
/// baseline's that ran interleaved with LogStore.
#[derive(Default)]
struct Series {
    logstore: Vec<f64>,
    fio: Vec<f64>,
    raw: Vec<f64>,
}

impl Series {
    fn push(&mut self, (logstore, raw): (f64, f64), fio: Option<f64>) {
        self.logstore.push(logstore);
        self.raw.push(raw);
        self.fio.extend(fio);
    }

    fn ratio_cell(&self, baseline: &[f64]) -> String {
        if baseline.is_empty() {
            return "-".into();
        }
        let ratios: Vec<f64> = (self.logstore.iter().zip(baseline))
            .map(|(l, b)| l / b)
            .collect();
        format!("{:.2}x", median(&ratios))
    }

    fn row(&self, case: &str, unit: &str) {
        println!(
            "| {case} | {:.0} {unit} | {:.0} | {} | {:.0} | {} |",
            median(&self.logstore),
            median(&self.fio),
            self.ratio_cell(&self.fio),
            median(&self.raw),
            self.ratio_cell(&self.raw),
        );
    }

    fn rounds(&self) -> String {
        let rounds: Vec<String> = (0..self.logstore.len())
            .map(|i| {
                let fio = self.fio.get(i).map_or("-".into(), |f| format!("{f:.0}"));
                format!("{:.0}/{fio}/{:.0}", self.logstore[i], self.raw[i])
            })
            .collect();
        rounds.join(", ")
    }
}

/// Runs the LogStore measurement and fio back to back, fio first in even rounds.
fn paired<T>(
    round: usize,
    logstore: impl FnOnce() -> T,
    fio: impl FnOnce() -> Option<f64>,
) -> (T, Option<f64>) {
    if round & 1 == 0 {
        let f = fio();
        (logstore(), f)
    } else {
        let l = logstore();
        (l, fio())
    }
}

/// Drops the page cache of one file, so the next open reads from the disk.
fn drop_file_cache(path: &Path) {
    let status = Command::new("dd")
        .arg(format!("if={}", path.display()))
        .args(["iflag=nocache", "count=0", "status=none"])
        .status();
    if !matches!(status, Ok(s) if s.success()) {
        eprintln!("could not drop the page cache of {}", path.display());
    }
}

/// Seconds to open (and recover) the store at `path` with a cold cache.
fn timed_open(path: &Path) -> (f64, LogStore<FileDevice>) {
    drop_file_cache(path);
    let start = Instant::now();
    let device = FileDevice::open(path).expect("open device file");
    let store = LogStore::open(device, LogStoreConfig::default()).expect("open store");
    let seconds = start.elapsed().as_secs_f64();
    assert_eq!(store.usage().object_count, RESTART_OBJECT_COUNT);
    eprintln!(
        "    open wrote {} bytes with {} syncs",
        store.stats().bytes_written,
        store.stats().syncs
    );
    (seconds, store)
}

/// Builds a store holding 1 M small objects and leaves it as a crash does (the log
/// flushed, no checkpoint since the store was formatted), then each round restarts a
/// copy of it twice: after the crash (replaying the whole build) and, once that open
/// has been closed, after a clean close. Returns the records a crash restart replays
/// and both series of open times in seconds.
fn restart_case(dir: &Path, rounds: usize) -> (u64, Vec<f64>, Vec<f64>) {
    let image = dir.join("logstore-restart.crashed");
    let path = dir.join("logstore-restart.dev");
    drop(FileDevice::create(&image, RESTART_DEVICE_BYTES).expect("create device file"));
    let mut store = open_store(&image);
    let data = payload(RESTART_OBJECT_BYTES, 3);
    let start = Instant::now();
    let mut written = 0;
    while written < RESTART_OBJECT_COUNT {
        for _ in 0..RESTART_TX_PER_FLUSH {
            let mut tx = Transaction::new();
            for _ in 0..RESTART_WRITES_PER_TX.min(RESTART_OBJECT_COUNT - written) {
                let oid = ObjectId::head(format!("rbd_data.1234.{written:016x}"));
                tx.write(pg(), oid, 0, data.clone());
                written += 1;
            }
            if !tx.ops.is_empty() {
                store.submit(tx).expect("submit");
            }
        }
        store.flush().expect("flush");
    }
    eprintln!(
        "    built {written} objects in {:.1} s ({} MiB written, {} checkpoints)",
        start.elapsed().as_secs_f64(),
        store.stats().bytes_written >> 20,
        store.stats().checkpoints,
    );
    let stat = logstore::stat(store.device()).expect("stat");
    eprintln!(
        "    a crash leaves {} records to replay",
        stat.records_after_checkpoint
    );
    drop(store.into_device());
    let (mut crash, mut clean) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        std::fs::copy(&image, &path).expect("copy the crashed device");
        File::open(&path)
            .and_then(|f| f.sync_all())
            .expect("sync copy");
        let (seconds, store) = timed_open(&path);
        crash.push(seconds);
        store.close().expect("close");
        let (seconds, store) = timed_open(&path);
        clean.push(seconds);
        store.close().expect("close");
        eprintln!(
            "    restart after crash {:.3} s, after close {seconds:.3} s",
            crash.last().expect("pushed")
        );
    }
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&image);
    (stat.records_after_checkpoint, crash, clean)
}

/// The write cases: per round, fio and LogStore (with its interleaved baseline) back
/// to back. Returns the series for 4 KiB one per sync, 16 in flight and 1 MiB.
fn write_cases(
    dir: &Path,
    rounds: usize,
    seconds: f64,
    wants: impl Fn(&str) -> bool,
) -> [Series; 3] {
    let device_path = dir.join("logstore-bench.dev");
    let fio_path = dir.join("fio-bench.dat");
    let [mut one, mut sixteen, mut large] = [(); 3].map(|()| Series::default());
    drop(FileDevice::create(&device_path, DEVICE_BYTES).expect("create device file"));
    drop(FileDevice::create(&fio_path, FIO_FILE_BYTES).expect("create fio file"));
    let mut raw = RawFile::open(&fio_path);
    let small = payload(SMALL_BYTES, 1);
    let big = payload(LARGE_BYTES, 2);
    let device = device_path.as_path();
    for round in 0..rounds {
        eprintln!("  round {}", round + 1);
        if wants("small") {
            let (rates, fio) = paired(
                round,
                || {
                    let one = interleaved_rates(device, &mut raw, 1, seconds, &small, small_target);
                    let sixteen = interleaved_rates(
                        device,
                        &mut raw,
                        IN_FLIGHT,
                        seconds,
                        &small,
                        small_target,
                    );
                    (one, sixteen)
                },
                || fio_iops(&fio_path, "4k", seconds),
            );
            one.push(rates.0, fio);
            sixteen.push(rates.1, fio);
        }
        if wants("large") {
            let (rates, fio) = paired(
                round,
                || interleaved_rates(device, &mut raw, 1, seconds, &big, large_target),
                || fio_iops(&fio_path, "1m", seconds),
            );
            large.push(rates, fio);
        }
    }
    let _ = std::fs::remove_file(&device_path);
    let _ = std::fs::remove_file(&fio_path);
    [one, sixteen, large]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let rounds: usize = args.next().map_or(5, |s| s.parse().expect("ROUNDS"));
    let seconds: f64 = args.next().map_or(3.0, |s| s.parse().expect("SECONDS"));
    let cases = args.next().unwrap_or_else(|| "small,large,restart".into());
    let wants = |case: &str| cases.split(',').any(|c| c == case);
    println!(
        "LogStore against fio in {} ({rounds} rounds, {seconds} s per run)",
        dir.display()
    );
    let [one, sixteen, large] = if wants("small") || wants("large") {
        write_cases(&dir, rounds, seconds, wants)
    } else {
        [(); 3].map(|()| Series::default())
    };

    println!();
    println!(
        "| case | LogStore | fio | vs fio | in-process write+fdatasync, interleaved | vs it |"
    );
    println!("|---|---|---|---|---|---|");
    if wants("small") {
        one.row("4 KiB, 1 per sync", "writes/s");
        sixteen.row(&format!("4 KiB, {IN_FLIGHT} in flight"), "writes/s");
    }
    if wants("large") {
        large.row("1 MiB, 1 per sync", "MiB/s");
    }
    if wants("restart") {
        let (records, crash, clean) = restart_case(&dir, rounds);
        let max = |values: &[f64]| values.iter().copied().fold(0.0, f64::max);
        println!(
            "| restart, 1 M objects, after close | {:.3} s (max {:.3}) | - | - | - | target 2 s |",
            median(&clean),
            max(&clean)
        );
        println!(
            "| restart, 1 M objects, after crash ({records} records to replay) | {:.3} s (max {:.3}) | - | - | - | target 2 s |",
            median(&crash),
            max(&crash)
        );
    }
    for (name, series) in [
        ("4 KiB x1", &one),
        ("4 KiB x16", &sixteen),
        ("1 MiB", &large),
    ] {
        if !series.logstore.is_empty() {
            eprintln!(
                "  {name} per round (LogStore/fio/in-process): {}",
                series.rounds()
            );
        }
    }
}
