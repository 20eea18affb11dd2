//! One run of the messenger benchmark (`carmine_msgr::bench`) over one transport, for
//! profiling a single case (`perf record`, `strace -c`, `valgrind --tool=callgrind`);
//! `carmine bench msgr` runs the whole table against raw TCP. A client keeps DEPTH
//! requests of SIZE bytes in flight on each of CONNS connections for SECONDS (after a
//! short warmup); the server answers each with a 16-byte ack. Threads are not pinned.
//!
//! ```text
//! cargo run --release -p carmine-msgr --example pingpong -- \
//!     SIZE DEPTH CONNS SECONDS [dispatch|channel|raw|blocking] [lossy|lossless]
//! ```

use carmine_msgr::bench::{self, Api, Placement, Spec, Transport};
use carmine_msgr::Policy;
use std::time::Duration;

fn parse_args() -> Result<(Transport, Spec), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 4 || args.len() > 6 {
        return Err(
            "usage: pingpong SIZE DEPTH CONNS SECONDS [dispatch|channel|raw|blocking] [lossy|lossless]"
                .into(),
        );
    }
    let number = |text: &str| text.parse::<usize>().map_err(|e| format!("{text:?}: {e}"));
    let transport = match args.get(4).map(String::as_str) {
        None | Some("dispatch") => Transport::Carmine(Api::Dispatch),
        Some("channel") => Transport::Carmine(Api::Channel),
        Some("raw") => Transport::RawTokio,
        Some("blocking") => Transport::RawBlocking,
        Some(other) => return Err(format!("unknown transport {other:?}")),
    };
    let policy = match args.get(5).map(String::as_str) {
        None | Some("lossy") => Policy::Lossy,
        Some("lossless") => Policy::Lossless,
        Some(other) => return Err(format!("unknown policy {other:?}")),
    };
    let seconds: f64 = args[3].parse().map_err(|e| format!("{:?}: {e}", args[3]))?;
    let spec = Spec {
        size_bytes: number(&args[0])?,
        depth: number(&args[1])?,
        connections: number(&args[2])?,
        policy,
        warmup: Duration::from_millis(200),
        measure: Duration::from_secs_f64(seconds),
    };
    let valid = (1..=bench::SIZE_BYTES_MAX).contains(&spec.size_bytes)
        && (1..=bench::DEPTH_MAX).contains(&spec.depth)
        && (1..=bench::CONNECTIONS_MAX).contains(&spec.connections)
        && seconds > 0.0;
    if !valid {
        return Err("bad arguments".into());
    }
    Ok((transport, spec))
}

fn main() {
    let (transport, spec) = match parse_args() {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    match bench::run(transport, &spec, &Placement::unpinned()) {
        Ok(m) => println!(
            "{transport:?} size={} depth={} conns={} ops={} ops_total={} ops_per_s={:.0} MB_per_s={:.1} lat_mean_us={:.2} lat_p99_us={:.2}",
            spec.size_bytes, spec.depth, spec.connections, m.ops, m.ops_total, m.ops_per_s, m.mb_per_s,
            m.lat_mean_us, m.lat_p99_us,
        ),
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(1);
        }
    }
}
