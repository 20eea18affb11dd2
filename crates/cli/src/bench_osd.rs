//! `carmine bench osd`: the OSD alone, per shard, in this process.
//!
//! * `--path direct`: one pinned thread per shard, each owning a [`DirectClient`]
//!   (that shard's PG code and its own MemStore, no network, no runtime). Each turn
//!   submits `--in-flight` ops and then ends the turn as the runtime does (one flush,
//!   then every reply), so "in flight" is the number of ops per event-loop turn.
//! * `--path net`: a real one-monitor, one-OSD cluster of this binary's daemons
//!   (`--shards S`, MemStore, shard threads pinned) in a temporary directory, a size-1
//!   pool, and `--clients` client threads (pinned to the CPUs the shards leave free,
//!   where there are any) each keeping `--in-flight` ops in flight through the
//!   messenger on loopback, exactly as `carmine bench POOL` does. The cluster is
//!   stopped, by pid, before the command returns.
//!
//! Both paths run 4 KiB `write_full` for `--seconds`, then 4 KiB reads of the written
//! objects for `--seconds`, and print one row per op: ops/s in all, ops/s per shard,
//! and latency (the net path only; a direct op completes inside its turn).

use crate::bench::{self, BenchArgs, BenchMode, BenchSummary};
use crate::vstart::{self, VstartArgs};
use anyhow::{bail, Context, Result};
use bytes::Bytes;
use carmine_client::{Client, ClientConfig};
use carmine_osd::DirectClient;
use carmine_proto::{OpCode, OsdOpReply};
use carmine_store::MemStore;
use carmine_types::ShardIndex;
use clap::{Args, ValueEnum};
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Objects each direct shard cycles through (overwrites keep memory bounded).
const DIRECT_OBJECTS_PER_SHARD: usize = 1024;
/// PGs per shard in the benchmark pool.
const PGS_PER_SHARD: u32 = 32;
/// Bytes per op.
const OP_BYTES: usize = 4096;
/// Most shards or clients one run starts.
const THREADS_MAX: u16 = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OsdBenchPath {
    Direct,
    Net,
}

#[derive(Args, Debug, Clone)]
pub struct OsdBenchArgs {
    /// `direct`: into the PG code with no network; `net`: a real OSD over loopback.
    #[arg(long, value_enum, default_value_t = OsdBenchPath::Direct)]
    pub path: OsdBenchPath,
    /// OSD shards (one pinned thread each).
    #[arg(long, default_value_t = 1)]
    pub shards: u16,
    /// Seconds per op type (write, then read).
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Ops in flight per client (`net`) or per event-loop turn (`direct`).
    #[arg(long, default_value_t = 64)]
    pub in_flight: usize,
    /// Client threads (`net` only; default: one per shard).
    #[arg(long)]
    pub clients: Option<u16>,
}

/// One result row.
#[derive(Debug, Clone, Serialize)]
pub struct OsdBenchRow {
    pub path: OsdBenchPath,
    pub op: &'static str,
    pub shards: u16,
    pub clients: u16,
    pub in_flight: usize,
    pub seconds: f64,
    pub ops: u64,
    pub ops_per_s: f64,
    pub ops_per_s_per_shard: f64,
    /// Mean and p99 op latency in µs (the net path only).
    pub lat_mean_us: Option<f64>,
    pub lat_p99_us: Option<u32>,
    pub errors: u64,
}

pub fn run(args: OsdBenchArgs, json: bool) -> Result<()> {
    validate(&args)?;
    let rows = match args.path {
        OsdBenchPath::Direct => run_direct(&args)?,
        OsdBenchPath::Net => run_net(&args)?,
    };
    print_rows(&rows, json)
}

fn validate(args: &OsdBenchArgs) -> Result<()> {
    if args.shards == 0 || args.shards > THREADS_MAX {
        bail!("--shards must be 1 to {THREADS_MAX}, not {}", args.shards);
    }
    if args.seconds == 0 || args.seconds > bench::SECONDS_MAX {
        bail!(
            "--seconds must be 1 to {}, not {}",
            bench::SECONDS_MAX,
            args.seconds
        );
    }
    if args.in_flight == 0 || args.in_flight > bench::CONCURRENCY_MAX {
        bail!(
            "--in-flight must be 1 to {}, not {}",
            bench::CONCURRENCY_MAX,
            args.in_flight
        );
    }
    if let Some(clients) = args.clients {
        if clients == 0 || clients > THREADS_MAX {
            bail!("--clients must be 1 to {THREADS_MAX}, not {clients}");
        }
        if args.path == OsdBenchPath::Direct {
            bail!("--clients applies to --path net only");
        }
    }
    Ok(())
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

// ---------------------------------------------------------------------------
// The direct path.
// ---------------------------------------------------------------------------

/// What one direct shard thread did.
struct DirectCounts {
    writes: u64,
    write_seconds: f64,
    reads: u64,
    read_seconds: f64,
    write_errors: u64,
    read_errors: u64,
}

fn run_direct(args: &OsdBenchArgs) -> Result<Vec<OsdBenchRow>> {
    let shards = args.shards;
    let pin = usize::from(shards) <= cpus();
    let threads: Vec<_> = (0..shards)
        .map(|index| {
            let args = args.clone();
            std::thread::Builder::new()
                .name(format!("bench-shard{index}"))
                .spawn(move || {
                    if pin {
                        carmine_rt::pin_current_thread(usize::from(index));
                    }
                    direct_shard(&args, ShardIndex(index))
                })
                .context("cannot start a shard thread")
        })
        .collect::<Result<_>>()?;
    let mut counts = Vec::new();
    for thread in threads {
        counts.push(
            thread
                .join()
                .map_err(|_| anyhow::anyhow!("a shard thread panicked"))?,
        );
    }
    let row = |op: &'static str, ops: u64, seconds: f64, errors: u64| {
        let ops_per_s = ops as f64 / seconds.max(1e-9);
        OsdBenchRow {
            path: OsdBenchPath::Direct,
            op,
            shards,
            clients: shards,
            in_flight: args.in_flight,
            seconds,
            ops,
            ops_per_s,
            ops_per_s_per_shard: ops_per_s / f64::from(shards),
            lat_mean_us: None,
            lat_p99_us: None,
            errors,
        }
    };
    // The shards ran side by side for the same time: the slowest one's time is the
    // run's time.
    let longest = |f: fn(&DirectCounts) -> f64| counts.iter().map(f).fold(0.0, f64::max);
    Ok(vec![
        row(
            "write",
            counts.iter().map(|c| c.writes).sum(),
            longest(|c| c.write_seconds),
            counts.iter().map(|c| c.write_errors).sum(),
        ),
        row(
            "read",
            counts.iter().map(|c| c.reads).sum(),
            longest(|c| c.read_seconds),
            counts.iter().map(|c| c.read_errors).sum(),
        ),
    ])
}

fn direct_shard(args: &OsdBenchArgs, index: ShardIndex) -> DirectCounts {
    let pg_num = PGS_PER_SHARD * u32::from(args.shards);
    let mut direct = DirectClient::for_shard(MemStore::new(), pg_num, index, args.shards);
    let names: Vec<String> = (0..)
        .map(|i| format!("bench-object-{i}"))
        .filter(|name| direct.owns(name))
        .take(DIRECT_OBJECTS_PER_SHARD)
        .collect();
    let data = Bytes::from(vec![0x5a; OP_BYTES]);
    let write = |_: usize| OpCode::WriteFull { data: data.clone() };
    let read = |_: usize| OpCode::Read {
        offset: 0,
        length: OP_BYTES as u64,
    };
    let duration = Duration::from_secs(args.seconds);
    let (writes, write_seconds, write_errors) =
        direct_phase(&mut direct, &names, args.in_flight, duration, write);
    let (reads, read_seconds, read_errors) =
        direct_phase(&mut direct, &names, args.in_flight, duration, read);
    DirectCounts {
        writes,
        write_seconds,
        reads,
        read_seconds,
        write_errors,
        read_errors,
    }
}

/// Runs turns of `in_flight` ops for `duration`; returns (ops, seconds, errors).
fn direct_phase(
    direct: &mut DirectClient<MemStore>,
    names: &[String],
    in_flight: usize,
    duration: Duration,
    op: impl Fn(usize) -> OpCode,
) -> (u64, f64, u64) {
    let started = Instant::now();
    let mut replies: Vec<OsdOpReply> = Vec::with_capacity(in_flight);
    let (mut ops, mut errors, mut next) = (0u64, 0u64, 0usize);
    while started.elapsed() < duration {
        for _ in 0..in_flight {
            direct.submit(&names[next % names.len()], vec![op(next)]);
            next += 1;
        }
        direct.complete(&mut replies);
        ops += replies.len() as u64;
        errors += replies.iter().filter(|r| r.result.is_err()).count() as u64;
        replies.clear();
    }
    (ops, started.elapsed().as_secs_f64(), errors)
}

// ---------------------------------------------------------------------------
// The network path.
// ---------------------------------------------------------------------------

/// Stops the temporary cluster however the run ends.
struct TempCluster {
    dir: PathBuf,
}

impl Drop for TempCluster {
    fn drop(&mut self) {
        if let Err(error) = vstart::stop_all(&self.dir) {
            eprintln!(
                "could not stop the bench cluster in {}: {error:#}",
                self.dir.display()
            );
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run_net(args: &OsdBenchArgs) -> Result<Vec<OsdBenchRow>> {
    let clients = args.clients.unwrap_or(args.shards);
    let dir = std::env::temp_dir().join(format!("carmine-bench-osd-{}", std::process::id()));
    let vstart_args = VstartArgs {
        osds: 1,
        mons: 1,
        shards: args.shards,
        shards_per_osd: Vec::new(),
        store: "mem".into(),
        memstore_mib: 0,
        dir: dir.clone(),
        only: None,
        mon_port: 0,
        osd_down_grace_seconds: 3,
        osd_down_out_seconds: 600,
        osd_heartbeat_grace_seconds: 3.0,
        osd_heartbeat_interval_seconds: 1.0,
        mon_osd_min_down_reporters: 1,
    };
    let cluster = TempCluster { dir };
    let conf = vstart::start(&vstart_args).context("cannot start the bench cluster")?;
    let pool = "bench-osd".to_string();
    let pg_num = PGS_PER_SHARD * u32::from(args.shards);
    let mon_addrs = conf.mon_addrs.clone();
    with_runtime(async {
        let client = Client::connect(ClientConfig::new(mon_addrs.clone())).await?;
        let spec = carmine_clustermap::PoolSpec::replicated(&pool, 1, pg_num);
        client
            .command(carmine_proto::Command::PoolCreate(spec))
            .await
            .context("cannot create the bench pool")?;
        anyhow::Ok(())
    })?;
    // The shards hold CPUs 0..S (vstart pins them when they fit); clients take the
    // CPUs after them while there are any.
    let free_cpu = |client: u16| {
        let cpu = usize::from(args.shards) + usize::from(client);
        (usize::from(args.shards) <= cpus() && cpu < cpus()).then_some(cpu)
    };
    let mut rows = Vec::new();
    for mode in [BenchMode::Write, BenchMode::Rand] {
        let threads: Vec<_> = (0..clients)
            .map(|client| {
                let bench_args = BenchArgs {
                    pool: pool.clone(),
                    mode,
                    block_size_bytes: OP_BYTES,
                    concurrency: args.in_flight,
                    seconds: args.seconds,
                    cleanup: false,
                    run_name: Some(format!("bench-osd-client{client}")),
                    max_objects: None,
                    json: true,
                };
                let mon_addrs = mon_addrs.clone();
                let cpu = free_cpu(client);
                std::thread::Builder::new()
                    .name(format!("bench-client{client}"))
                    .spawn(move || {
                        if let Some(cpu) = cpu {
                            carmine_rt::pin_current_thread(cpu);
                        }
                        with_runtime(async move {
                            let client = Client::connect(ClientConfig::new(mon_addrs)).await?;
                            bench::measure(&client, &bench_args).await
                        })
                    })
                    .context("cannot start a client thread")
            })
            .collect::<Result<_>>()?;
        let mut summaries = Vec::new();
        for thread in threads {
            summaries.push(
                thread
                    .join()
                    .map_err(|_| anyhow::anyhow!("a client thread panicked"))??,
            );
        }
        rows.push(net_row(args, clients, mode, &summaries));
    }
    drop(cluster);
    for row in &rows {
        bench::check_error_rate(row.ops, row.errors)?;
    }
    Ok(rows)
}

fn with_runtime<T>(future: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(future)
}

/// One row from the clients' summaries: their ops add up; latency is the mean over
/// every op and the worst client's p99 (a bound, since p99s do not add).
fn net_row(
    args: &OsdBenchArgs,
    clients: u16,
    mode: BenchMode,
    summaries: &[BenchSummary],
) -> OsdBenchRow {
    let ops: u64 = summaries.iter().map(|s| s.ops).sum();
    let seconds = summaries.iter().map(|s| s.seconds_run).fold(0.0, f64::max);
    let ops_per_s: f64 = summaries.iter().map(|s| s.ops_per_second).sum();
    let lat_sum: f64 = summaries
        .iter()
        .map(|s| s.latency_us_avg * s.ops as f64)
        .sum();
    OsdBenchRow {
        path: OsdBenchPath::Net,
        op: match mode {
            BenchMode::Write => "write",
            BenchMode::Seq | BenchMode::Rand => "read",
        },
        shards: args.shards,
        clients,
        in_flight: args.in_flight,
        seconds,
        ops,
        ops_per_s,
        ops_per_s_per_shard: ops_per_s / f64::from(args.shards),
        lat_mean_us: Some(lat_sum / (ops.max(1) as f64)),
        lat_p99_us: summaries.iter().map(|s| s.latency_us_p99).max(),
        errors: summaries.iter().map(|s| s.errors).sum(),
    }
}

fn print_rows(rows: &[OsdBenchRow], json: bool) -> Result<()> {
    if json {
        for row in rows {
            println!("{}", serde_json::to_string(row)?);
        }
        return Ok(());
    }
    println!(
        "{:<7} {:<6} {:>6} {:>7} {:>9} {:>12} {:>14} {:>10} {:>9}",
        "path", "op", "shards", "clients", "in-flight", "ops/s", "ops/s/shard", "mean µs", "p99 µs"
    );
    for row in rows {
        let mean = row
            .lat_mean_us
            .map_or("-".to_string(), |us| format!("{us:.0}"));
        let p99 = row.lat_p99_us.map_or("-".to_string(), |us| us.to_string());
        println!(
            "{:<7} {:<6} {:>6} {:>7} {:>9} {:>12.0} {:>14.0} {:>10} {:>9}",
            format!("{:?}", row.path).to_lowercase(),
            row.op,
            row.shards,
            row.clients,
            row.in_flight,
            row.ops_per_s,
            row.ops_per_s_per_shard,
            mean,
            p99
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_shards_write_and_read_their_own_objects() {
        let args = OsdBenchArgs {
            path: OsdBenchPath::Direct,
            shards: 2,
            seconds: 1,
            in_flight: 8,
            clients: None,
        };
        let rows = run_direct(&args).unwrap();
        assert_eq!(rows.len(), 2);
        for row in &rows {
            assert!(row.ops > 0, "{row:?}");
            assert_eq!(row.errors, 0, "{row:?}");
            assert_eq!(row.shards, 2);
        }
        let json = serde_json::to_value(&rows[0]).unwrap();
        assert_eq!(json["op"], "write");
        assert_eq!(json["shards"], 2);
        assert!(json["ops_per_s"].as_f64().unwrap() > 0.0);
    }

    #[test]
    fn bad_arguments_are_refused() {
        let ok = OsdBenchArgs {
            path: OsdBenchPath::Direct,
            shards: 1,
            seconds: 1,
            in_flight: 1,
            clients: None,
        };
        assert!(validate(&ok).is_ok());
        for bad in [
            OsdBenchArgs {
                shards: 0,
                ..ok.clone()
            },
            OsdBenchArgs {
                seconds: 0,
                ..ok.clone()
            },
            OsdBenchArgs {
                in_flight: 0,
                ..ok.clone()
            },
            OsdBenchArgs {
                clients: Some(2),
                ..ok.clone()
            },
        ] {
            assert!(validate(&bad).is_err(), "{bad:?}");
        }
    }
}
