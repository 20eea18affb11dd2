//! `carmine image bench`, in the style of `rbd bench`: `io_threads` workers issue
//! `io_size` reads and/or writes at sequential or random offsets until `io_total`
//! bytes are done; one row per second, then a summary with latency percentiles.

use super::{IoPattern, IoType};
use crate::output::bytes;
use anyhow::{bail, Result};
use bytes::Bytes;
use carmine_block::lease::WriterLeaseTask;
use carmine_block::Image;
use rand::Rng;
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Latency samples kept per worker for the percentiles.
const LATENCY_SAMPLES_PER_WORKER_MAX: usize = 1 << 20;
/// Largest I/O size accepted.
const IO_SIZE_BYTES_MAX: u64 = 32 * 1024 * 1024;

pub struct BenchArgs {
    pub io_type: IoType,
    pub io_size: u64,
    pub io_threads: usize,
    pub io_total: u64,
    pub io_pattern: IoPattern,
    pub json: bool,
}

#[derive(Default)]
struct Counters {
    next_op: AtomicU64,
    ops_done: AtomicU64,
    reads_done: AtomicU64,
}

fn validate(image: &Image, args: &BenchArgs) -> Result<u64> {
    if args.io_size == 0 || args.io_size > IO_SIZE_BYTES_MAX {
        bail!("--io-size must be 1..={IO_SIZE_BYTES_MAX} bytes");
    }
    if args.io_size > image.size() {
        bail!(
            "--io-size {} is larger than the image ({} bytes)",
            args.io_size,
            image.size()
        );
    }
    if args.io_threads == 0 || args.io_threads > 1024 {
        bail!("--io-threads must be 1..=1024");
    }
    let ops = args.io_total / args.io_size;
    if ops == 0 {
        bail!("--io-total must be at least --io-size");
    }
    Ok(ops)
}

pub async fn run(image: Arc<Image>, args: BenchArgs) -> Result<()> {
    let op_count = validate(&image, &args)?;
    if !args.json {
        println!(
            "bench type {:?} io_size {} io_threads {} bytes {} pattern {:?}",
            args.io_type, args.io_size, args.io_threads, args.io_total, args.io_pattern
        );
        println!(
            "{:>5} {:>10} {:>10} {:>12}",
            "SEC", "OPS", "OPS/SEC", "BYTES/SEC"
        );
    }
    // A writing bench holds a writer lease, as the NBD server does, so snapshots taken
    // while it runs hold none of its later writes.
    let lease = match args.io_type {
        IoType::Read => None,
        IoType::Write | IoType::Readwrite => Some(WriterLeaseTask::take(image.clone()).await?),
    };
    let counters = Arc::new(Counters::default());
    let data = Bytes::from(
        (0..args.io_size)
            .map(|i| (i * 31 + 7) as u8)
            .collect::<Vec<u8>>(),
    );
    let start = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..args.io_threads {
        let (image, counters, data) = (image.clone(), counters.clone(), data.clone());
        let (io_type, io_pattern, io_size) = (args.io_type, args.io_pattern, args.io_size);
        workers.spawn(async move {
            worker(
                &image, &counters, data, op_count, io_type, io_pattern, io_size,
            )
            .await
        });
    }
    let mut latencies_us = Vec::new();
    let mut ticker = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_secs(1),
        Duration::from_secs(1),
    );
    let (mut second, mut ops_at_last_tick) = (0u64, 0u64);
    loop {
        tokio::select! {
            joined = workers.join_next() => match joined {
                Some(result) => latencies_us.extend(result??),
                None => break,
            },
            _ = ticker.tick(), if !args.json => {
                second += 1;
                let ops = counters.ops_done.load(Ordering::Relaxed);
                let rate = (ops - ops_at_last_tick) as f64;
                println!("{second:>5} {ops:>10} {rate:>10.0} {:>10}/s", bytes((rate * args.io_size as f64) as u64));
                ops_at_last_tick = ops;
            }
        }
    }
    if let Some(lease) = lease {
        lease.release().await?;
    }
    summarize(&args, &counters, start.elapsed(), latencies_us);
    Ok(())
}

async fn worker(
    image: &Image,
    counters: &Counters,
    data: Bytes,
    op_count: u64,
    io_type: IoType,
    io_pattern: IoPattern,
    io_size: u64,
) -> Result<Vec<u32>> {
    let slots = image.size() / io_size;
    let mut latencies_us = Vec::new();
    loop {
        let index = counters.next_op.fetch_add(1, Ordering::Relaxed);
        if index >= op_count {
            return Ok(latencies_us);
        }
        let (slot, read) = {
            let mut rng = rand::thread_rng();
            let slot = match io_pattern {
                IoPattern::Seq => index % slots,
                IoPattern::Rand => rng.gen_range(0..slots),
            };
            let read = match io_type {
                IoType::Read => true,
                IoType::Write => false,
                IoType::Readwrite => rng.gen_bool(0.5),
            };
            (slot, read)
        };
        let began = Instant::now();
        if read {
            image.read(slot * io_size, io_size).await?;
            counters.reads_done.fetch_add(1, Ordering::Relaxed);
        } else {
            image.write(slot * io_size, data.clone()).await?;
        }
        if latencies_us.len() < LATENCY_SAMPLES_PER_WORKER_MAX {
            latencies_us.push(u32::try_from(began.elapsed().as_micros()).unwrap_or(u32::MAX));
        }
        counters.ops_done.fetch_add(1, Ordering::Relaxed);
    }
}

fn percentile_us(sorted: &[u32], fraction: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (fraction * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn summarize(args: &BenchArgs, counters: &Counters, elapsed: Duration, mut latencies_us: Vec<u32>) {
    latencies_us.sort_unstable();
    let ops = counters.ops_done.load(Ordering::Relaxed);
    let seconds = elapsed.as_secs_f64().max(1e-9);
    let ops_per_second = ops as f64 / seconds;
    let bytes_per_second = ops_per_second * args.io_size as f64;
    let average_us = latencies_us.iter().map(|&l| u64::from(l)).sum::<u64>() as f64
        / latencies_us.len().max(1) as f64;
    let (p50, p99, max) = (
        percentile_us(&latencies_us, 0.5),
        percentile_us(&latencies_us, 0.99),
        latencies_us.last().copied().unwrap_or(0),
    );
    if args.json {
        println!(
            "{}",
            json!({"elapsed_seconds": seconds, "ops": ops, "reads": counters.reads_done.load(Ordering::Relaxed), "ops_per_second": ops_per_second,
                   "bytes_per_second": bytes_per_second, "latency_us_avg": average_us, "latency_us_p50": p50, "latency_us_p99": p99, "latency_us_max": max})
        );
    } else {
        println!(
            "elapsed: {seconds:.2} s  ops: {ops}  ops/sec: {ops_per_second:.1}  bytes/sec: {}/s  latency avg {average_us:.0} us, p50 {p50} us, p99 {p99} us, max {max} us",
            bytes(bytes_per_second as u64)
        );
    }
}
