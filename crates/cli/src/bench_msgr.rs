//! `carmine bench msgr`: the messenger against raw TCP over loopback, in the scenarios
//! of the Crimson messenger study — (A) one saturated connection, (B) one saturated
//! server core with several connections, (C) latency with one request in flight —
//! for each request size. Each row alternates messenger and raw-TCP runs and prints
//! the medians; the work itself is in `carmine_msgr::bench`.

use anyhow::{bail, Context, Result};
use carmine_msgr::bench::{self, Api, Measurement, Placement, Spec, Transport};
use carmine_msgr::Policy;
use std::time::Duration;

/// Most runs per row.
const RUNS_MAX: usize = 101;
/// Longest measured window of one run.
const SECONDS_MAX: f64 = 3600.0;
/// Warmup before each run's window, at most.
const WARMUP_MAX: Duration = Duration::from_millis(500);

#[derive(clap::Args, Debug)]
pub struct MsgrBenchArgs {
    /// Measured seconds of each run (after a warmup of up to 0.5 s).
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Request sizes in bytes; suffixes k and m are powers of two.
    #[arg(long, value_delimiter = ',', default_value = "4k,64k,256k,1m", value_parser = parse_size)]
    pub sizes: Vec<usize>,
    /// Scenarios: a (one saturated connection), b (a saturated core, several
    /// connections), c (latency, depth 1).
    #[arg(long, value_delimiter = ',', value_enum, default_value = "a,b,c")]
    pub scenarios: Vec<Scenario>,
    /// Requests in flight in scenarios a and b (b splits them across its connections).
    #[arg(long, default_value_t = 512)]
    pub depth: usize,
    /// Connections of scenario b.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    #[arg(long, value_enum, default_value_t = PolicyArg::Lossy)]
    pub policy: PolicyArg,
    /// dispatch: handlers run on each connection's task (serve_with/connect_with);
    /// channel: NetEvent channel and ConnectionHandle (serve/connect).
    #[arg(long, value_enum, default_value_t = ApiArg::Dispatch)]
    pub api: ApiArg,
    /// Runs per row, messenger and raw TCP alternating; the medians are printed.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// CPU of the server thread (default 0 when there are two or more).
    #[arg(long)]
    pub server_cpu: Option<usize>,
    /// CPU of the client thread (default 1 when there are two or more).
    #[arg(long)]
    pub client_cpu: Option<usize>,
    /// Leave both threads to the scheduler.
    #[arg(long, conflicts_with_all = ["server_cpu", "client_cpu"])]
    pub no_pin: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    A,
    B,
    C,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PolicyArg {
    Lossy,
    Lossless,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ApiArg {
    Dispatch,
    Channel,
}

/// One printed row: medians over the runs.
#[derive(Debug, Clone, serde::Serialize)]
struct Row {
    scenario: &'static str,
    api: &'static str,
    policy: &'static str,
    size_bytes: usize,
    depth: usize,
    connections: usize,
    runs: usize,
    ops_per_s: f64,
    mb_per_s: f64,
    lat_mean_us: f64,
    lat_p99_us: f64,
    raw_ops_per_s: f64,
    raw_lat_mean_us: f64,
    raw_lat_p99_us: f64,
    /// Messenger ops/s over raw (tokio) ops/s.
    ratio: f64,
    /// Scenario c only: plain blocking TCP, the loop of tcp-ceiling.c.
    #[serde(skip_serializing_if = "Option::is_none")]
    raw_blocking_ops_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    raw_blocking_lat_mean_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_blocking: Option<f64>,
}

pub fn run(args: MsgrBenchArgs, json: bool) -> Result<()> {
    validate(&args)?;
    let placement = placement(&args);
    let measure = Duration::from_secs_f64(args.seconds);
    let warmup = WARMUP_MAX.min(measure / 4);
    let policy = match args.policy {
        PolicyArg::Lossy => Policy::Lossy,
        PolicyArg::Lossless => Policy::Lossless,
    };
    let api = match args.api {
        ApiArg::Dispatch => Api::Dispatch,
        ApiArg::Channel => Api::Channel,
    };
    if !json {
        print_header(&placement);
    }
    for &scenario in &args.scenarios {
        for &size_bytes in &args.sizes {
            let (connections, depth) = match scenario {
                Scenario::A => (1, args.depth),
                Scenario::B => (args.connections, args.depth.div_ceil(args.connections)),
                Scenario::C => (1, 1),
            };
            let spec = Spec {
                size_bytes,
                depth,
                connections,
                policy,
                warmup,
                measure,
            };
            let row = measure_row(scenario, api, &spec, args.runs, &placement)?;
            print_row(&row, json)?;
        }
    }
    Ok(())
}

fn validate(args: &MsgrBenchArgs) -> Result<()> {
    if !(args.seconds > 0.0 && args.seconds <= SECONDS_MAX) {
        bail!("seconds must be above 0 and at most {SECONDS_MAX}");
    }
    if args.runs == 0 || args.runs > RUNS_MAX {
        bail!("runs must be 1 to {RUNS_MAX}, not {}", args.runs);
    }
    if args.depth == 0 || args.depth > bench::DEPTH_MAX {
        bail!(
            "depth must be 1 to {}, not {}",
            bench::DEPTH_MAX,
            args.depth
        );
    }
    if args.connections == 0 || args.connections > bench::CONNECTIONS_MAX {
        bail!(
            "connections must be 1 to {}, not {}",
            bench::CONNECTIONS_MAX,
            args.connections
        );
    }
    for &size in &args.sizes {
        if size == 0 || size > bench::SIZE_BYTES_MAX {
            bail!(
                "sizes must be 1 to {} bytes, not {size}",
                bench::SIZE_BYTES_MAX
            );
        }
    }
    if args.sizes.is_empty() || args.scenarios.is_empty() {
        bail!("nothing to run: give at least one size and one scenario");
    }
    Ok(())
}

fn placement(args: &MsgrBenchArgs) -> Placement {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if args.no_pin {
        return Placement::unpinned();
    }
    let default = |cpu: usize| (cpus >= 2).then_some(cpu);
    Placement {
        server_cpu: args.server_cpu.or(default(0)),
        client_cpu: args.client_cpu.or(default(1)),
        pin: pin_to_cpu,
    }
}

/// Runs the row's transports in turn, `runs` times, and takes each metric's median.
fn measure_row(
    scenario: Scenario,
    api: Api,
    spec: &Spec,
    runs: usize,
    placement: &Placement,
) -> Result<Row> {
    let blocking = scenario == Scenario::C;
    let mut carmine = Vec::with_capacity(runs);
    let mut raw = Vec::with_capacity(runs);
    let mut raw_blocking = Vec::with_capacity(runs);
    let context = |what: &str| format!("{what} run, {scenario:?} {} bytes", spec.size_bytes);
    for _ in 0..runs {
        carmine.push(
            bench::run(Transport::Carmine(api), spec, placement)
                .with_context(|| context("messenger"))?,
        );
        raw.push(bench::run(Transport::RawTokio, spec, placement).with_context(|| context("raw"))?);
        if blocking {
            raw_blocking.push(
                bench::run(Transport::RawBlocking, spec, placement)
                    .with_context(|| context("raw blocking"))?,
            );
        }
    }
    let ours = medians(&carmine);
    let theirs = medians(&raw);
    let blocking = (!raw_blocking.is_empty()).then(|| medians(&raw_blocking));
    Ok(Row {
        scenario: match scenario {
            Scenario::A => "a",
            Scenario::B => "b",
            Scenario::C => "c",
        },
        api: match api {
            Api::Dispatch => "dispatch",
            Api::Channel => "channel",
        },
        policy: match spec.policy {
            Policy::Lossy => "lossy",
            Policy::Lossless => "lossless",
        },
        size_bytes: spec.size_bytes,
        depth: spec.depth,
        connections: spec.connections,
        runs,
        ops_per_s: ours.ops_per_s,
        mb_per_s: ours.mb_per_s,
        lat_mean_us: ours.lat_mean_us,
        lat_p99_us: ours.lat_p99_us,
        raw_ops_per_s: theirs.ops_per_s,
        raw_lat_mean_us: theirs.lat_mean_us,
        raw_lat_p99_us: theirs.lat_p99_us,
        ratio: ours.ops_per_s / theirs.ops_per_s,
        raw_blocking_ops_per_s: blocking.map(|b| b.ops_per_s),
        raw_blocking_lat_mean_us: blocking.map(|b| b.lat_mean_us),
        ratio_blocking: blocking.map(|b| ours.ops_per_s / b.ops_per_s),
    })
}

/// Each field's median over the runs (fields taken separately).
fn medians(runs: &[Measurement]) -> Measurement {
    let median = |field: fn(&Measurement) -> f64| {
        let mut values: Vec<f64> = runs.iter().map(field).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    Measurement {
        ops: runs[runs.len() / 2].ops,
        ops_total: runs[runs.len() / 2].ops_total,
        seconds: median(|m| m.seconds),
        ops_per_s: median(|m| m.ops_per_s),
        mb_per_s: median(|m| m.mb_per_s),
        lat_mean_us: median(|m| m.lat_mean_us),
        lat_p99_us: median(|m| m.lat_p99_us),
    }
}

fn print_header(placement: &Placement) {
    let cpu = |cpu: Option<usize>| cpu.map_or("any".to_string(), |c| c.to_string());
    println!(
        "server cpu {}, client cpu {}; medians; ratio = messenger ops/s / raw TCP ops/s",
        cpu(placement.server_cpu),
        cpu(placement.client_cpu)
    );
    println!(
        "{:<3} {:>8} {:>5} {:>5} {:>10} {:>8} {:>9} {:>9} | {:>10} {:>9} {:>6} | {:>10} {:>6}",
        "sc",
        "size",
        "depth",
        "conns",
        "ops/s",
        "MB/s",
        "mean_us",
        "p99_us",
        "raw_ops/s",
        "raw_mean",
        "ratio",
        "block_ops/s",
        "ratio"
    );
}

fn print_row(row: &Row, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(row)?);
        return Ok(());
    }
    let blocking = match (row.raw_blocking_ops_per_s, row.ratio_blocking) {
        (Some(ops), Some(ratio)) => format!("{ops:>10.0} {ratio:>5.2}x"),
        _ => format!("{:>10} {:>6}", "-", "-"),
    };
    println!(
        "{:<3} {:>8} {:>5} {:>5} {:>10.0} {:>8.1} {:>9.1} {:>9.1} | {:>10.0} {:>9.1} {:>5.2}x | {}",
        row.scenario,
        crate::output::bytes(row.size_bytes as u64),
        row.depth,
        row.connections,
        row.ops_per_s,
        row.mb_per_s,
        row.lat_mean_us,
        row.lat_p99_us,
        row.raw_ops_per_s,
        row.raw_lat_mean_us,
        row.ratio,
        blocking,
    );
    Ok(())
}

/// `4096`, `4k`, `1m` (k and m are powers of two).
fn parse_size(text: &str) -> Result<usize, String> {
    let lower = text.trim().to_ascii_lowercase();
    let (digits, unit) = match lower.strip_suffix('k') {
        Some(digits) => (digits, 1024),
        None => match lower.strip_suffix('m') {
            Some(digits) => (digits, 1024 * 1024),
            None => (lower.as_str(), 1),
        },
    };
    let count: usize = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size (e.g. 4096, 64k, 1m)"))?;
    count
        .checked_mul(unit)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// Pins the calling thread to one CPU.
#[allow(unsafe_code)]
fn pin_to_cpu(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET only write inside it, and
    // sched_setaffinity(0, ..) reads it for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            eprintln!("warning: could not pin a bench thread to CPU {cpu}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert!(parse_size("k").is_err());
        assert!(parse_size("12q").is_err());
    }

    #[test]
    fn medians_take_each_field_apart() {
        let run = |ops_per_s: f64, lat_mean_us: f64| Measurement {
            ops: 1,
            ops_total: 1,
            seconds: 1.0,
            ops_per_s,
            mb_per_s: ops_per_s,
            lat_mean_us,
            lat_p99_us: lat_mean_us,
        };
        let median = medians(&[run(3.0, 1.0), run(1.0, 9.0), run(2.0, 5.0)]);
        assert_eq!((median.ops_per_s, median.lat_mean_us), (2.0, 5.0));
    }
}
