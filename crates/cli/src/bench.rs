//! `carmine bench`: a load generator in the style of `rados bench`.
//!
//! It measures what one client sees from the cluster: whole-object writes
//! (`write`), in-order reads of the objects a write run left behind (`seq`) and
//! reads of random objects from that set (`rand`). The driver keeps `concurrency`
//! ops in flight for `seconds`, prints one progress row per second, and ends with a
//! summary of throughput (MB/s, where MB is 2^20 bytes as in `rados bench`), IOPS
//! and latency (average, p50, p99, p99.9, max, from every op's latency).
//!
//! Compared with `rados bench` the object names, the metadata object and the
//! progress columns are the same in spirit, so the two can be run side by side
//! against the same workload. Differences: reads check each object's length (not
//! its contents); the metadata object is a small versioned JSON document; a write
//! run that cleans up does not write the metadata object at all, so an earlier
//! `--no-cleanup` run stays readable by `seq` and `rand`.

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use carmine_client::{Client, ClientError};
use carmine_types::limits::{OBJECT_NAME_BYTES_MAX, WRITE_BYTES_MAX};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Most ops one bench run keeps in flight.
pub const CONCURRENCY_MAX: usize = 4096;
/// Longest run, in seconds (one day).
pub const SECONDS_MAX: u64 = 24 * 60 * 60;
/// Most latency samples kept for percentiles; later ops still count towards the
/// average and the maximum.
pub const LATENCY_SAMPLES_MAX: usize = 10_000_000;
/// Largest metadata object accepted when reading it back.
pub const METADATA_BYTES_MAX: usize = 4096;
/// A run fails when more than this percentage of its ops failed.
pub const ERROR_PERCENT_MAX: u64 = 10;
/// A progress header is printed again after this many rows, as `rados bench` does.
const ROWS_PER_HEADER: u64 = 20;
/// Room left in an object name for `_object` and a 20-digit index.
const OBJECT_SUFFIX_BYTES_MAX: usize = "_object".len() + 20;
/// Bytes in a "MB" as `rados bench` counts them.
const BYTES_PER_MB: f64 = 1024.0 * 1024.0;
/// The version written into the metadata object.
const METADATA_FORMAT_VERSION: u32 = 1;

const _: () = assert!(CONCURRENCY_MAX < carmine_client::objecter::OPS_IN_FLIGHT_MAX);
const _: () = assert!(OBJECT_SUFFIX_BYTES_MAX < OBJECT_NAME_BYTES_MAX);
const _: () = assert!(ERROR_PERCENT_MAX < 100);

/// What a bench run does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BenchMode {
    Write,
    Seq,
    Rand,
}

/// The command line of `carmine bench`, parsed.
#[derive(Debug, Clone)]
pub struct BenchArgs {
    pub pool: String,
    pub mode: BenchMode,
    /// Object size for `write`; reads use the size the write run recorded.
    pub block_size_bytes: usize,
    pub concurrency: usize,
    pub seconds: u64,
    /// Remove the objects after a `write` run.
    pub cleanup: bool,
    pub run_name: Option<String>,
    /// `write`: write objects `0..max_objects` in turn, again and again, instead of a
    /// new object every op (a fixed working set; `None`: every op a new object, as
    /// `rados bench`).
    pub max_objects: Option<u64>,
    /// Print only the summary, as one JSON object.
    pub json: bool,
}

/// The result of a bench run; `ops` and `bytes` count successful ops only.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchSummary {
    pub mode: BenchMode,
    pub seconds_run: f64,
    pub ops: u64,
    pub bytes: u64,
    pub ops_per_second: f64,
    pub mb_per_second: f64,
    pub latency_us_avg: f64,
    pub latency_us_p50: u32,
    pub latency_us_p99: u32,
    pub latency_us_p999: u32,
    pub latency_us_max: u32,
    pub errors: u64,
    pub block_size_bytes: usize,
    pub concurrency: usize,
}

/// Runs one benchmark against `args.pool`, printing progress and a summary (or,
/// with `json`, only the summary as JSON), and returns the summary.
pub async fn run(client: &Client, args: BenchArgs) -> anyhow::Result<BenchSummary> {
    let summary = measure(client, &args).await?;
    print_summary(&summary, args.json)?;
    check_error_rate(summary.ops, summary.errors)?;
    Ok(summary)
}

/// Runs one benchmark and returns its summary without printing it (progress rows
/// are printed unless `args.json`).
pub async fn measure(client: &Client, args: &BenchArgs) -> anyhow::Result<BenchSummary> {
    validate_args(args)?;
    client
        .pool_id(&args.pool)
        .with_context(|| format!("cannot bench pool '{}'", args.pool))?;
    match args.mode {
        BenchMode::Write => run_write(client, args).await,
        BenchMode::Seq | BenchMode::Rand => run_read(client, args).await,
    }
}

fn validate_args(args: &BenchArgs) -> anyhow::Result<()> {
    if args.concurrency == 0 || args.concurrency > CONCURRENCY_MAX {
        bail!(
            "concurrency must be 1 to {CONCURRENCY_MAX}, not {}",
            args.concurrency
        );
    }
    if args.seconds == 0 || args.seconds > SECONDS_MAX {
        bail!("seconds must be 1 to {SECONDS_MAX}, not {}", args.seconds);
    }
    if args.block_size_bytes == 0 || args.block_size_bytes > WRITE_BYTES_MAX {
        bail!(
            "block size must be 1 to {WRITE_BYTES_MAX} bytes, not {}",
            args.block_size_bytes
        );
    }
    if args.max_objects == Some(0) {
        bail!("--max-objects must be at least 1");
    }
    if args.max_objects.is_some() && args.mode != BenchMode::Write {
        bail!("--max-objects applies to write runs only");
    }
    if let Some(name) = &args.run_name {
        if name.is_empty() {
            bail!("the run name is empty");
        }
        let length_max = OBJECT_NAME_BYTES_MAX - OBJECT_SUFFIX_BYTES_MAX;
        if name.len() > length_max {
            bail!(
                "the run name is {} bytes; the limit is {length_max}",
                name.len()
            );
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Object names and the metadata object.
// ---------------------------------------------------------------------------

/// The prefix of this run's object names: `{run_name}` or
/// `benchmark_data_{hostname}_{pid}`, as `rados bench` names them.
fn object_prefix(run_name: Option<&str>, hostname: &str, pid: u32) -> String {
    match run_name {
        Some(name) => name.to_string(),
        None => format!("benchmark_data_{hostname}_{pid}"),
    }
}

fn object_name(prefix: &str, index: u64) -> String {
    format!("{prefix}_object{index}")
}

/// The object recording the last write run: `benchmark_last_metadata` or
/// `{run_name}_metadata`.
fn metadata_name(run_name: Option<&str>) -> String {
    match run_name {
        Some(name) => format!("{name}_metadata"),
        None => "benchmark_last_metadata".to_string(),
    }
}

/// This host's name, for object names; "localhost" when it cannot be found.
fn hostname() -> String {
    let from_file = ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .map(|text| text.trim().to_string())
        .find(|name| !name.is_empty());
    from_file
        .or_else(|| {
            std::env::var("HOSTNAME")
                .ok()
                .filter(|name| !name.is_empty())
        })
        .unwrap_or_else(|| "localhost".to_string())
}

/// What a write run leaves for `seq` and `rand`: objects `{prefix}_object0` to
/// `{prefix}_object{object_count - 1}`, each `block_size_bytes` long.
///
/// Stored as one JSON object:
/// `{"format_version":1,"object_count":N,"block_size_bytes":B,"prefix":"P"}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct BenchMetadata {
    format_version: u32,
    object_count: u64,
    block_size_bytes: usize,
    prefix: String,
}

impl BenchMetadata {
    fn new(object_count: u64, block_size_bytes: usize, prefix: String) -> Self {
        Self {
            format_version: METADATA_FORMAT_VERSION,
            object_count,
            block_size_bytes,
            prefix,
        }
    }

    fn encode(&self) -> anyhow::Result<Bytes> {
        let encoded = serde_json::to_vec(self).context("encoding the bench metadata")?;
        assert!(encoded.len() <= METADATA_BYTES_MAX);
        Ok(Bytes::from(encoded))
    }

    fn decode(data: &[u8]) -> anyhow::Result<Self> {
        if data.len() > METADATA_BYTES_MAX {
            bail!(
                "the bench metadata is {} bytes; the limit is {METADATA_BYTES_MAX}",
                data.len()
            );
        }
        let metadata: BenchMetadata =
            serde_json::from_slice(data).context("the bench metadata is not valid JSON")?;
        if metadata.format_version != METADATA_FORMAT_VERSION {
            bail!(
                "the bench metadata has format version {}; expected {METADATA_FORMAT_VERSION}",
                metadata.format_version
            );
        }
        if metadata.block_size_bytes == 0 || metadata.block_size_bytes > WRITE_BYTES_MAX {
            bail!(
                "the bench metadata names a block size of {} bytes",
                metadata.block_size_bytes
            );
        }
        if metadata.prefix.is_empty()
            || metadata.prefix.len() > OBJECT_NAME_BYTES_MAX - OBJECT_SUFFIX_BYTES_MAX
        {
            bail!(
                "the bench metadata names an object prefix of {} bytes",
                metadata.prefix.len()
            );
        }
        Ok(metadata)
    }
}

async fn load_metadata(
    client: &Client,
    pool: &str,
    run_name: Option<&str>,
) -> anyhow::Result<BenchMetadata> {
    let name = metadata_name(run_name);
    let data = match client.read(pool, &name, 0, METADATA_BYTES_MAX as u64 + 1).await {
        Ok(data) => data,
        Err(error) if error.is_not_found() => bail!(
            "no benchmark data found in pool {pool}; run `carmine bench {pool} write --no-cleanup` first"
        ),
        Err(error) => return Err(anyhow!(error).context(format!("reading {name}"))),
    };
    let metadata =
        BenchMetadata::decode(&data).with_context(|| format!("object {name} in pool {pool}"))?;
    if metadata.object_count == 0 {
        bail!(
            "the last write run in pool {pool} left no objects; run a longer `write --no-cleanup`"
        );
    }
    Ok(metadata)
}

// ---------------------------------------------------------------------------
// The three modes.
// ---------------------------------------------------------------------------

async fn run_write(client: &Client, args: &BenchArgs) -> anyhow::Result<BenchSummary> {
    let prefix = object_prefix(args.run_name.as_deref(), &hostname(), std::process::id());
    let data = Bytes::from(fill_pattern(args.block_size_bytes));
    let workload = Workload {
        pool: args.pool.clone(),
        prefix: prefix.clone(),
        kind: OpKind::Write(data),
        concurrency: args.concurrency,
        duration: Duration::from_secs(args.seconds),
        print_progress: !args.json,
    };
    if !args.json {
        println!("Writing {}-byte objects for up to {} seconds with {} ops in flight; object prefix {prefix}",
            args.block_size_bytes, args.seconds, args.concurrency);
    }
    let source = match args.max_objects {
        Some(count) => IndexSource::cycle(count),
        None => IndexSource::sequential(None),
    };
    let (mut progress, elapsed) = drive(client, &workload, source).await?;
    let object_count = args
        .max_objects
        .map_or(progress.started, |count| progress.started.min(count));
    if args.cleanup {
        let failed =
            remove_objects(client, &args.pool, &prefix, object_count, args.concurrency).await?;
        if failed > 0 {
            eprintln!("warning: {failed} of {object_count} benchmark objects could not be removed");
        }
    } else {
        let metadata = BenchMetadata::new(object_count, args.block_size_bytes, prefix);
        let name = metadata_name(args.run_name.as_deref());
        client
            .write_full(&args.pool, &name, metadata.encode()?)
            .await
            .with_context(|| format!("writing the bench metadata object {name}"))?;
    }
    Ok(progress.summarize(args.mode, elapsed, args.block_size_bytes, args.concurrency))
}

async fn run_read(client: &Client, args: &BenchArgs) -> anyhow::Result<BenchSummary> {
    let metadata = load_metadata(client, &args.pool, args.run_name.as_deref()).await?;
    let source = match args.mode {
        BenchMode::Seq => IndexSource::sequential(Some(metadata.object_count)),
        BenchMode::Rand => IndexSource::random(metadata.object_count),
        BenchMode::Write => unreachable!("run() sends write runs to run_write"),
    };
    let workload = Workload {
        pool: args.pool.clone(),
        prefix: metadata.prefix.clone(),
        kind: OpKind::Read {
            length_bytes: metadata.block_size_bytes,
        },
        concurrency: args.concurrency,
        duration: Duration::from_secs(args.seconds),
        print_progress: !args.json,
    };
    if !args.json {
        println!(
            "Reading {} objects of {} bytes ({:?}) for up to {} seconds with {} ops in flight",
            metadata.object_count,
            metadata.block_size_bytes,
            args.mode,
            args.seconds,
            args.concurrency
        );
    }
    let (mut progress, elapsed) = drive(client, &workload, source).await?;
    Ok(progress.summarize(
        args.mode,
        elapsed,
        metadata.block_size_bytes,
        args.concurrency,
    ))
}

/// Block contents: a byte pattern that is not all zeroes, so a store that
/// special-cases zeroes is not flattered.
fn fill_pattern(length_bytes: usize) -> Vec<u8> {
    (0..length_bytes).map(|index| (index % 251) as u8).collect()
}

/// Removes `{prefix}_object0..count` with `concurrency` removes in flight; returns
/// how many failed (an object that is already gone is not a failure).
async fn remove_objects(
    client: &Client,
    pool: &str,
    prefix: &str,
    object_count: u64,
    concurrency: usize,
) -> anyhow::Result<u64> {
    let mut tasks = JoinSet::new();
    let mut failed = 0;
    let mut next = 0;
    while next < object_count || !tasks.is_empty() {
        while next < object_count && tasks.len() < concurrency {
            let (client, pool, oid) = (client.clone(), pool.to_string(), object_name(prefix, next));
            tasks.spawn(async move { client.remove(&pool, &oid).await });
            next += 1;
        }
        if let Some(joined) = tasks.join_next().await {
            match joined.context("a cleanup task panicked")? {
                Ok(()) => {}
                Err(error) if error.is_not_found() => {}
                Err(_) => failed += 1,
            }
        }
    }
    Ok(failed)
}

// ---------------------------------------------------------------------------
// The driver: keeps ops in flight, collects their outcomes, prints progress.
// ---------------------------------------------------------------------------

/// Which op every object gets.
#[derive(Debug, Clone)]
enum OpKind {
    /// Writes the same (cheaply cloned) block to every object.
    Write(Bytes),
    /// Reads whole objects and checks they are `length_bytes` long.
    Read { length_bytes: usize },
}

struct Workload {
    pool: String,
    prefix: String,
    kind: OpKind,
    concurrency: usize,
    duration: Duration,
    print_progress: bool,
}

/// Which object the next op goes to.
#[derive(Debug)]
enum IndexSource {
    /// 0, 1, 2, … up to `end` (exclusive) when there is one.
    Sequential { next: u64, end: Option<u64> },
    /// Uniformly random in `0..count`, without end.
    Random { rng: Box<StdRng>, count: u64 },
    /// 0, 1, …, `count - 1`, 0, 1, … without end.
    Cycle { next: u64, count: u64 },
}

impl IndexSource {
    fn sequential(end: Option<u64>) -> Self {
        IndexSource::Sequential { next: 0, end }
    }

    fn random(count: u64) -> Self {
        assert!(count > 0);
        IndexSource::Random {
            rng: Box::new(StdRng::from_entropy()),
            count,
        }
    }

    fn cycle(count: u64) -> Self {
        assert!(count > 0);
        IndexSource::Cycle { next: 0, count }
    }

    fn next_index(&mut self) -> Option<u64> {
        match self {
            IndexSource::Cycle { next, count } => {
                let index = *next;
                *next = (*next + 1) % *count;
                Some(index)
            }
            IndexSource::Sequential { next, end } => {
                if end.is_some_and(|end| *next >= end) {
                    return None;
                }
                let index = *next;
                *next += 1;
                Some(index)
            }
            IndexSource::Random { rng, count } => Some(rng.gen_range(0..*count)),
        }
    }
}

/// Why one op failed.
#[derive(Debug)]
enum OpFailure {
    Client(ClientError),
    WrongLength {
        length_bytes: usize,
        expected_bytes: usize,
    },
}

/// One finished op, as its task reports it.
#[derive(Debug)]
struct OpOutcome {
    oid: String,
    latency: Duration,
    result: Result<u64, OpFailure>,
}

async fn perform_op(client: Client, pool: String, oid: String, kind: OpKind) -> OpOutcome {
    let started = Instant::now();
    let result = match kind {
        OpKind::Write(data) => {
            let length_bytes = data.len() as u64;
            client
                .write_full(&pool, &oid, data)
                .await
                .map(|_| length_bytes)
                .map_err(OpFailure::Client)
        }
        OpKind::Read {
            length_bytes: expected_bytes,
        } => match client.read(&pool, &oid, 0, 0).await {
            Ok(data) if data.len() == expected_bytes => Ok(data.len() as u64),
            Ok(data) => Err(OpFailure::WrongLength {
                length_bytes: data.len(),
                expected_bytes,
            }),
            Err(error) => Err(OpFailure::Client(error)),
        },
    };
    OpOutcome {
        oid,
        latency: started.elapsed(),
        result,
    }
}

/// Runs `workload` until its time is up (then waits for the ops in flight, as
/// `rados bench` does) or `source` runs out; returns the tallies and the time taken.
async fn drive(
    client: &Client,
    workload: &Workload,
    mut source: IndexSource,
) -> anyhow::Result<(Progress, Duration)> {
    let start = Instant::now();
    let deadline = start + workload.duration;
    let mut ticker =
        tokio::time::interval_at(start + Duration::from_secs(1), Duration::from_secs(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tasks = JoinSet::new();
    let mut progress = Progress::new(start);
    let mut exhausted = false;
    if workload.print_progress {
        println!("{}", progress_header());
    }
    loop {
        while !exhausted && tasks.len() < workload.concurrency && Instant::now() < deadline {
            let Some(index) = source.next_index() else {
                exhausted = true;
                break;
            };
            let oid = object_name(&workload.prefix, index);
            tasks.spawn(perform_op(
                client.clone(),
                workload.pool.clone(),
                oid,
                workload.kind.clone(),
            ));
            progress.started += 1;
        }
        if tasks.is_empty() {
            break;
        }
        tokio::select! {
            Some(joined) = tasks.join_next() => {
                let outcome = joined.context("a bench op task panicked")?;
                progress.record(outcome, &workload.kind)?;
            }
            _ = ticker.tick() => {
                let row = progress.tick(Instant::now(), tasks.len());
                if workload.print_progress {
                    print_row(&row);
                }
            }
        }
    }
    Ok((progress, start.elapsed()))
}

// ---------------------------------------------------------------------------
// Tallies, latency and the summary.
// ---------------------------------------------------------------------------

/// Every op's latency in microseconds: samples for percentiles (up to
/// [`LATENCY_SAMPLES_MAX`]) plus an exact count, sum and maximum.
#[derive(Debug, Default)]
struct LatencyRecorder {
    samples_us: Vec<u32>,
    count: u64,
    sum_us: u64,
    max_us: u32,
}

impl LatencyRecorder {
    fn record(&mut self, latency: Duration) -> u32 {
        let latency_us = u32::try_from(latency.as_micros()).unwrap_or(u32::MAX);
        if self.samples_us.len() < LATENCY_SAMPLES_MAX {
            self.samples_us.push(latency_us);
        }
        self.count += 1;
        self.sum_us += u64::from(latency_us);
        self.max_us = self.max_us.max(latency_us);
        latency_us
    }

    fn average_us(&self) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        self.sum_us as f64 / self.count as f64
    }

    /// Sorts the samples; call once, before `percentile_us`.
    fn sort(&mut self) {
        self.samples_us.sort_unstable();
    }
}

/// The nearest-rank percentile of sorted samples: the smallest sample that at least
/// `fraction` of all samples are less than or equal to; 0 when there are none.
fn percentile_us(sorted_us: &[u32], fraction: f64) -> u32 {
    assert!((0.0..=1.0).contains(&fraction));
    debug_assert!(sorted_us.windows(2).all(|pair| pair[0] <= pair[1]));
    if sorted_us.is_empty() {
        return 0;
    }
    let rank = (fraction * sorted_us.len() as f64).ceil() as usize;
    sorted_us[rank.clamp(1, sorted_us.len()) - 1]
}

/// One row of progress output.
#[derive(Debug, Clone, PartialEq)]
struct ProgressRow {
    second: u64,
    ops_in_flight: usize,
    started: u64,
    finished: u64,
    mb_per_second_avg: f64,
    mb_per_second_current: f64,
    /// The latency of the last op that finished in this second; `None` if none did.
    latency_ms_last: Option<f64>,
    latency_ms_avg: f64,
}

/// What the driver has seen so far.
#[derive(Debug)]
struct Progress {
    start: Instant,
    started: u64,
    /// Ops that finished, successfully or not.
    finished: u64,
    ops: u64,
    bytes: u64,
    errors: u64,
    latency: LatencyRecorder,
    last_tick: Instant,
    bytes_at_last_tick: u64,
    latency_us_last: Option<u32>,
}

impl Progress {
    fn new(start: Instant) -> Self {
        Self {
            start,
            started: 0,
            finished: 0,
            ops: 0,
            bytes: 0,
            errors: 0,
            latency: LatencyRecorder::default(),
            last_tick: start,
            bytes_at_last_tick: 0,
            latency_us_last: None,
        }
    }

    /// Counts one finished op. A missing or wrong-length object during a read run
    /// means the write run's data is not there, so it ends the run.
    fn record(&mut self, outcome: OpOutcome, kind: &OpKind) -> anyhow::Result<()> {
        self.finished += 1;
        assert!(self.finished <= self.started);
        match outcome.result {
            Ok(length_bytes) => {
                self.ops += 1;
                self.bytes += length_bytes;
                self.latency_us_last = Some(self.latency.record(outcome.latency));
                Ok(())
            }
            Err(OpFailure::WrongLength {
                length_bytes,
                expected_bytes,
            }) => bail!(
                "benchmark object {} is {length_bytes} bytes; the write run wrote {expected_bytes}",
                outcome.oid
            ),
            Err(OpFailure::Client(error))
                if error.is_not_found() && matches!(kind, OpKind::Read { .. }) =>
            {
                bail!(
                    "benchmark object {} is missing ({error}); run `write --no-cleanup` again",
                    outcome.oid
                )
            }
            Err(OpFailure::Client(_)) => {
                self.errors += 1;
                Ok(())
            }
        }
    }

    /// The row for the second that ends at `now`; resets the per-second tallies.
    fn tick(&mut self, now: Instant, ops_in_flight: usize) -> ProgressRow {
        let interval = now.duration_since(self.last_tick).as_secs_f64();
        let elapsed = now.duration_since(self.start).as_secs_f64();
        let row = ProgressRow {
            second: now.duration_since(self.start).as_secs(),
            ops_in_flight,
            started: self.started,
            finished: self.finished,
            mb_per_second_avg: mb_per_second(self.bytes, elapsed),
            mb_per_second_current: mb_per_second(self.bytes - self.bytes_at_last_tick, interval),
            latency_ms_last: self.latency_us_last.map(|us| f64::from(us) / 1000.0),
            latency_ms_avg: self.latency.average_us() / 1000.0,
        };
        self.last_tick = now;
        self.bytes_at_last_tick = self.bytes;
        self.latency_us_last = None;
        row
    }

    fn summarize(
        &mut self,
        mode: BenchMode,
        elapsed: Duration,
        block_size_bytes: usize,
        concurrency: usize,
    ) -> BenchSummary {
        assert_eq!(self.ops, self.latency.count);
        self.latency.sort();
        let seconds_run = elapsed.as_secs_f64();
        let samples = &self.latency.samples_us;
        BenchSummary {
            mode,
            seconds_run,
            ops: self.ops,
            bytes: self.bytes,
            ops_per_second: if seconds_run > 0.0 {
                self.ops as f64 / seconds_run
            } else {
                0.0
            },
            mb_per_second: mb_per_second(self.bytes, seconds_run),
            latency_us_avg: self.latency.average_us(),
            latency_us_p50: percentile_us(samples, 0.50),
            latency_us_p99: percentile_us(samples, 0.99),
            latency_us_p999: percentile_us(samples, 0.999),
            latency_us_max: self.latency.max_us,
            errors: self.errors,
            block_size_bytes,
            concurrency,
        }
    }
}

fn mb_per_second(bytes: u64, seconds: f64) -> f64 {
    if seconds <= 0.0 {
        return 0.0;
    }
    bytes as f64 / BYTES_PER_MB / seconds
}

/// Fails the run when more than [`ERROR_PERCENT_MAX`] percent of its ops failed.
pub fn check_error_rate(ops: u64, errors: u64) -> anyhow::Result<()> {
    let total = ops + errors;
    if errors * 100 > total * ERROR_PERCENT_MAX {
        bail!("{errors} of {total} ops failed (more than {ERROR_PERCENT_MAX}%)");
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Output.
// ---------------------------------------------------------------------------

fn progress_header() -> String {
    format!(
        "{:>5} {:>8} {:>9} {:>9} {:>10} {:>10} {:>13} {:>12}",
        "sec",
        "Cur-ops",
        "started",
        "finished",
        "avg-MB/s",
        "cur-MB/s",
        "last-lat(ms)",
        "avg-lat(ms)"
    )
}

fn format_row(row: &ProgressRow) -> String {
    let latency_last = match row.latency_ms_last {
        Some(ms) => format!("{ms:.3}"),
        None => "-".to_string(),
    };
    format!(
        "{:>5} {:>8} {:>9} {:>9} {:>10.2} {:>10.2} {:>13} {:>12.3}",
        row.second,
        row.ops_in_flight,
        row.started,
        row.finished,
        row.mb_per_second_avg,
        row.mb_per_second_current,
        latency_last,
        row.latency_ms_avg
    )
}

fn print_row(row: &ProgressRow) {
    if row.second > 1 && row.second % ROWS_PER_HEADER == 1 {
        println!("{}", progress_header());
    }
    println!("{}", format_row(row));
}

fn format_summary(summary: &BenchSummary) -> String {
    let ms = |us: f64| us / 1000.0;
    [
        format!("Total time run (s):     {:.3}", summary.seconds_run),
        format!("Total ops:              {}", summary.ops),
        format!("Errors:                 {}", summary.errors),
        format!("Block size (bytes):     {}", summary.block_size_bytes),
        format!("Concurrency:            {}", summary.concurrency),
        format!("Bandwidth (MB/s):       {:.3}", summary.mb_per_second),
        format!("Average IOPS:           {:.1}", summary.ops_per_second),
        format!("Average latency (ms):   {:.3}", ms(summary.latency_us_avg)),
        format!(
            "p50 latency (ms):       {:.3}",
            ms(f64::from(summary.latency_us_p50))
        ),
        format!(
            "p99 latency (ms):       {:.3}",
            ms(f64::from(summary.latency_us_p99))
        ),
        format!(
            "p99.9 latency (ms):     {:.3}",
            ms(f64::from(summary.latency_us_p999))
        ),
        format!(
            "Max latency (ms):       {:.3}",
            ms(f64::from(summary.latency_us_max))
        ),
    ]
    .join("\n")
}

fn print_summary(summary: &BenchSummary, json: bool) -> anyhow::Result<()> {
    if json {
        println!(
            "{}",
            serde_json::to_string(summary).context("encoding the summary as JSON")?
        );
    } else {
        println!("{}", format_summary(summary));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress_with_latencies(latencies_us: &[u64], bytes_each: u64) -> Progress {
        let mut progress = Progress::new(Instant::now());
        for &latency_us in latencies_us {
            progress.started += 1;
            let outcome = OpOutcome {
                oid: "o".into(),
                latency: Duration::from_micros(latency_us),
                result: Ok(bytes_each),
            };
            progress
                .record(outcome, &OpKind::Write(Bytes::new()))
                .expect("a successful op");
        }
        progress
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let samples: Vec<u32> = (1..=1000).collect();
        assert_eq!(percentile_us(&samples, 0.50), 500);
        assert_eq!(percentile_us(&samples, 0.99), 990);
        assert_eq!(percentile_us(&samples, 0.999), 999);
        assert_eq!(percentile_us(&samples, 1.0), 1000);
        assert_eq!(percentile_us(&samples, 0.0), 1);
        assert_eq!(percentile_us(&[7], 0.5), 7);
        assert_eq!(percentile_us(&[], 0.99), 0);
        assert_eq!(percentile_us(&[10, 20, 30, 40], 0.5), 20);
        assert_eq!(percentile_us(&[10, 20, 30, 40], 0.51), 30);
    }

    #[test]
    fn summary_arithmetic() {
        let latencies: Vec<u64> = (1..=100).rev().map(|n| n * 100).collect();
        let mut progress = progress_with_latencies(&latencies, 1 << 20);
        progress.started += 1;
        let failed = OpOutcome {
            oid: "o".into(),
            latency: Duration::from_millis(1),
            result: Err(OpFailure::Client(ClientError::Disconnected)),
        };
        progress
            .record(failed, &OpKind::Write(Bytes::new()))
            .expect("errors are counted");
        let summary = progress.summarize(BenchMode::Write, Duration::from_secs(4), 1 << 20, 8);
        assert_eq!(summary.ops, 100);
        assert_eq!(summary.errors, 1);
        assert_eq!(summary.bytes, 100 << 20);
        assert!((summary.mb_per_second - 25.0).abs() < 1e-9);
        assert!((summary.ops_per_second - 25.0).abs() < 1e-9);
        assert!((summary.latency_us_avg - 5050.0).abs() < 1e-9);
        assert_eq!(summary.latency_us_p50, 5000);
        assert_eq!(summary.latency_us_p99, 9900);
        assert_eq!(summary.latency_us_p999, 10_000);
        assert_eq!(summary.latency_us_max, 10_000);
        let json = serde_json::to_value(&summary).expect("the summary encodes");
        assert_eq!(json["mode"], "write");
        assert_eq!(json["latency_us_p99"], 9900);
    }

    #[test]
    fn empty_run_summarizes_to_zeroes() {
        let mut progress = Progress::new(Instant::now());
        let summary = progress.summarize(BenchMode::Seq, Duration::ZERO, 4096, 1);
        assert_eq!(summary.ops, 0);
        assert_eq!(summary.ops_per_second, 0.0);
        assert_eq!(summary.mb_per_second, 0.0);
        assert_eq!(summary.latency_us_avg, 0.0);
        assert_eq!(summary.latency_us_max, 0);
    }

    #[test]
    fn read_runs_fail_on_missing_or_short_objects() {
        let read = OpKind::Read { length_bytes: 4 };
        let mut progress = Progress::new(Instant::now());
        progress.started = 2;
        let missing = OpOutcome {
            oid: "gone".into(),
            latency: Duration::ZERO,
            result: Err(OpFailure::Client(ClientError::Op(
                carmine_proto::OpError::NotFound,
            ))),
        };
        let error = progress
            .record(missing, &read)
            .expect_err("missing is fatal");
        assert!(error
            .to_string()
            .contains("benchmark object gone is missing"));
        let short = OpOutcome {
            oid: "x".into(),
            latency: Duration::ZERO,
            result: Err(OpFailure::WrongLength {
                length_bytes: 3,
                expected_bytes: 4,
            }),
        };
        assert!(progress.record(short, &read).is_err());
    }

    #[test]
    fn error_rate_limit() {
        assert!(check_error_rate(0, 0).is_ok());
        assert!(check_error_rate(90, 10).is_ok());
        assert!(check_error_rate(89, 11).is_err());
        assert!(check_error_rate(0, 1).is_err());
    }

    #[test]
    fn progress_rows_track_each_second() {
        let mut progress = progress_with_latencies(&[2000, 4000], 1 << 20);
        let start = progress.start;
        let row = progress.tick(start + Duration::from_secs(1), 3);
        assert_eq!(row.second, 1);
        assert_eq!((row.started, row.finished, row.ops_in_flight), (2, 2, 3));
        assert!((row.mb_per_second_avg - 2.0).abs() < 1e-9);
        assert!((row.mb_per_second_current - 2.0).abs() < 1e-9);
        assert_eq!(row.latency_ms_last, Some(4.0));
        assert!((row.latency_ms_avg - 3.0).abs() < 1e-9);
        let quiet = progress.tick(start + Duration::from_secs(2), 3);
        assert_eq!(quiet.latency_ms_last, None);
        assert_eq!(quiet.mb_per_second_current, 0.0);
        assert!((quiet.mb_per_second_avg - 1.0).abs() < 1e-9);
    }

    #[test]
    fn row_formatting_lines_up_with_the_header() {
        let row = ProgressRow {
            second: 3,
            ops_in_flight: 16,
            started: 120,
            finished: 104,
            mb_per_second_avg: 138.666,
            mb_per_second_current: 140.0,
            latency_ms_last: Some(0.4567),
            latency_ms_avg: 0.45,
        };
        let line = format_row(&row);
        assert_eq!(
            line,
            "    3       16       120       104     138.67     140.00         0.457        0.450"
        );
        assert_eq!(line.len(), progress_header().len());
        let quiet = format_row(&ProgressRow {
            latency_ms_last: None,
            ..row
        });
        assert!(quiet.contains("             - "));
        assert_eq!(quiet.len(), progress_header().len());
    }

    #[test]
    fn metadata_round_trips() {
        let metadata = BenchMetadata::new(42, 4 << 20, "benchmark_data_host_7".into());
        let encoded = metadata.encode().expect("encodes");
        assert_eq!(
            &encoded[..],
            br#"{"format_version":1,"object_count":42,"block_size_bytes":4194304,"prefix":"benchmark_data_host_7"}"#
        );
        assert_eq!(BenchMetadata::decode(&encoded).expect("decodes"), metadata);
    }

    #[test]
    fn metadata_rejects_bad_input() {
        assert!(BenchMetadata::decode(b"not json").is_err());
        assert!(BenchMetadata::decode(&vec![b' '; METADATA_BYTES_MAX + 1]).is_err());
        let future = br#"{"format_version":2,"object_count":1,"block_size_bytes":1,"prefix":"p"}"#;
        assert!(BenchMetadata::decode(future).is_err());
        let zero_block =
            br#"{"format_version":1,"object_count":1,"block_size_bytes":0,"prefix":"p"}"#;
        assert!(BenchMetadata::decode(zero_block).is_err());
        let no_prefix =
            br#"{"format_version":1,"object_count":1,"block_size_bytes":1,"prefix":""}"#;
        assert!(BenchMetadata::decode(no_prefix).is_err());
    }

    #[test]
    fn object_names_follow_rados_bench() {
        let prefix = object_prefix(None, "node1", 4242);
        assert_eq!(prefix, "benchmark_data_node1_4242");
        assert_eq!(object_name(&prefix, 0), "benchmark_data_node1_4242_object0");
        assert_eq!(object_name("myrun", 17), "myrun_object17");
        assert_eq!(object_prefix(Some("myrun"), "node1", 4242), "myrun");
        assert_eq!(metadata_name(None), "benchmark_last_metadata");
        assert_eq!(metadata_name(Some("myrun")), "myrun_metadata");
        assert!(!hostname().is_empty());
    }

    #[test]
    fn index_sources() {
        let mut bounded = IndexSource::sequential(Some(3));
        let taken: Vec<_> = std::iter::from_fn(|| bounded.next_index()).collect();
        assert_eq!(taken, vec![0, 1, 2]);
        let mut unbounded = IndexSource::sequential(None);
        assert_eq!(
            (0..1000).filter_map(|_| unbounded.next_index()).last(),
            Some(999)
        );
        let mut random = IndexSource::random(5);
        for _ in 0..1000 {
            assert!(random.next_index().is_some_and(|index| index < 5));
        }
        let mut cycle = IndexSource::cycle(3);
        let taken: Vec<_> = (0..7).filter_map(|_| cycle.next_index()).collect();
        assert_eq!(taken, vec![0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn argument_limits() {
        let good = BenchArgs {
            pool: "rbd".into(),
            mode: BenchMode::Write,
            block_size_bytes: 4096,
            concurrency: 16,
            seconds: 10,
            cleanup: true,
            run_name: None,
            max_objects: None,
            json: false,
        };
        assert!(validate_args(&good).is_ok());
        assert!(validate_args(&BenchArgs {
            max_objects: Some(100),
            ..good.clone()
        })
        .is_ok());
        assert!(validate_args(&BenchArgs {
            max_objects: Some(0),
            ..good.clone()
        })
        .is_err());
        assert!(validate_args(&BenchArgs {
            mode: BenchMode::Rand,
            max_objects: Some(100),
            ..good.clone()
        })
        .is_err());
        assert!(validate_args(&BenchArgs {
            concurrency: 0,
            ..good.clone()
        })
        .is_err());
        assert!(validate_args(&BenchArgs {
            seconds: 0,
            ..good.clone()
        })
        .is_err());
        assert!(validate_args(&BenchArgs {
            block_size_bytes: WRITE_BYTES_MAX + 1,
            ..good.clone()
        })
        .is_err());
        assert!(validate_args(&BenchArgs {
            run_name: Some(String::new()),
            ..good.clone()
        })
        .is_err());
        let long_name = "x".repeat(OBJECT_NAME_BYTES_MAX);
        assert!(validate_args(&BenchArgs {
            run_name: Some(long_name),
            ..good
        })
        .is_err());
        assert_eq!(fill_pattern(300)[256], 5);
    }
}
