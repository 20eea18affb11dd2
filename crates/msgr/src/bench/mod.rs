//! The messenger benchmark behind `carmine bench msgr`, with its raw-TCP baseline.
//!
//! The scenarios follow the Crimson messenger study: (A) one connection kept saturated
//! with many requests in flight, (B) one server core saturated by several connections,
//! (C) latency, one request in flight. A client keeps `depth` requests of `size_bytes`
//! in flight on each connection (closed loop: each reply lets the next request go);
//! the server answers each with a 16-byte ack, as `shared/tools/tcp-ceiling.c` does.
//! Server and client each run on their own thread with a current-thread tokio runtime,
//! pinned to different cores when the caller says how.
//!
//! The same scenario runs over three transports:
//!
//! - [`Transport::Carmine`]: the messenger, through one of its two APIs ([`Api`]);
//! - [`Transport::RawTokio`]: plain TCP on the same runtime and threads, no framing, no
//!   checksums, with the same syscall economy as the messenger's driver (vectored
//!   writes, reads that stop at a short read) — the ceiling for any tokio messenger;
//! - [`Transport::RawBlocking`]: plain blocking TCP (one request in flight only), the
//!   loop of `tcp-ceiling.c`: the ceiling for any messenger at all.

mod carmine;
mod raw;
mod stats;

pub use stats::{LatencyRecorder, Measurement, LATENCY_SAMPLES_MAX};

use crate::config::Policy;
use std::time::Duration;

/// Bytes of every ack.
pub const ACK_BYTES: usize = 16;
/// Most requests in flight on one connection.
pub const DEPTH_MAX: usize = 65_536;
/// Most connections one scenario opens.
pub const CONNECTIONS_MAX: usize = 1024;
/// Largest request.
pub const SIZE_BYTES_MAX: usize = 16 * 1024 * 1024;
/// The message type of requests and of acks.
pub const MSG_REQUEST: u16 = 1;
pub const MSG_ACK: u16 = 2;

const _: () = assert!(SIZE_BYTES_MAX + 4096 < carmine_types::limits::MESSAGE_BYTES_MAX);

/// Which messenger API a Carmine run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// [`crate::tcp::serve_with`] / [`crate::tcp::connect_with`]: the server's and the
    /// client's code runs on each connection's task (run to completion).
    Dispatch,
    /// [`crate::tcp::serve`] / [`crate::tcp::connect`]: messages reach an owner task as
    /// `NetEvent`s, replies go back through a `ConnectionHandle` (what `carmine-rt`
    /// and the client library use today).
    Channel,
}

/// What carries the requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Carmine(Api),
    RawTokio,
    RawBlocking,
}

/// One measurement's parameters.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub size_bytes: usize,
    /// Requests in flight per connection.
    pub depth: usize,
    pub connections: usize,
    pub policy: Policy,
    /// Run before measuring (connections set up, caches and buffers warm).
    pub warmup: Duration,
    /// The measured window.
    pub measure: Duration,
}

impl Spec {
    /// Panics on parameters no run can use (a programmer error: the CLI checks them).
    pub fn assert_valid(&self) {
        assert!(self.size_bytes > 0 && self.size_bytes <= SIZE_BYTES_MAX);
        assert!(self.depth > 0 && self.depth <= DEPTH_MAX);
        assert!(self.connections > 0 && self.connections <= CONNECTIONS_MAX);
        assert!(!self.measure.is_zero());
    }
}

/// Where the two threads run. `pin` is called on each thread with its CPU (this crate
/// does no system calls of its own; the caller brings the affinity call).
#[derive(Debug, Clone, Copy)]
pub struct Placement {
    pub server_cpu: Option<usize>,
    pub client_cpu: Option<usize>,
    pub pin: fn(usize),
}

impl Placement {
    /// Both threads wherever the scheduler puts them.
    pub fn unpinned() -> Self {
        Self {
            server_cpu: None,
            client_cpu: None,
            pin: |_| {},
        }
    }

    fn pin_server(&self) {
        if let Some(cpu) = self.server_cpu {
            (self.pin)(cpu);
        }
    }

    fn pin_client(&self) {
        if let Some(cpu) = self.client_cpu {
            (self.pin)(cpu);
        }
    }
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    #[error("benchmark I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("messenger connect: {0}")]
    Connect(#[from] crate::tcp::ConnectError),
    #[error("connection closed during the run: {0}")]
    Closed(String),
    #[error("{0}")]
    Unsupported(&'static str),
}

/// Runs one measurement of `spec` over `transport`.
pub fn run(
    transport: Transport,
    spec: &Spec,
    placement: &Placement,
) -> Result<Measurement, BenchError> {
    spec.assert_valid();
    match transport {
        Transport::Carmine(api) => carmine::run(api, spec, placement),
        Transport::RawTokio => raw::run_tokio(spec, placement),
        Transport::RawBlocking => raw::run_blocking(spec, placement),
    }
}

/// A current-thread runtime, as each Carmine shard runs.
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// A loopback listener on an ephemeral port, ready for `TcpListener::from_std`.
fn listen() -> std::io::Result<(std::net::TcpListener, std::net::SocketAddr)> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(depth: usize, connections: usize, policy: Policy) -> Spec {
        Spec {
            size_bytes: 4096,
            depth,
            connections,
            policy,
            warmup: Duration::from_millis(20),
            measure: Duration::from_millis(100),
        }
    }

    /// Every transport completes a short run and counts what it did (no speed checks).
    #[test]
    fn every_transport_runs_and_counts() {
        let placement = Placement::unpinned();
        let runs = [
            (Transport::Carmine(Api::Dispatch), tiny(8, 2, Policy::Lossy)),
            (
                Transport::Carmine(Api::Dispatch),
                tiny(4, 1, Policy::Lossless),
            ),
            (Transport::Carmine(Api::Channel), tiny(8, 2, Policy::Lossy)),
            (
                Transport::Carmine(Api::Channel),
                tiny(1, 1, Policy::Lossless),
            ),
            (Transport::RawTokio, tiny(8, 2, Policy::Lossy)),
            (Transport::RawBlocking, tiny(1, 1, Policy::Lossy)),
        ];
        for (transport, spec) in runs {
            let measurement = run(transport, &spec, &placement).unwrap();
            assert!(measurement.ops > 0, "{transport:?}");
            assert!(measurement.lat_mean_us > 0.0, "{transport:?}");
            assert!(measurement.lat_p99_us >= measurement.lat_mean_us * 0.5);
        }
    }

    #[test]
    fn blocking_raw_refuses_depth() {
        let spec = tiny(2, 1, Policy::Lossy);
        let error = run(Transport::RawBlocking, &spec, &Placement::unpinned()).unwrap_err();
        assert!(matches!(error, BenchError::Unsupported(_)));
    }
}
