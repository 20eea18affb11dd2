//! Counting completed requests and their latencies inside the measured window.

use std::time::{Duration, Instant};

/// Most latency samples one recorder keeps for percentiles; later ops still count
/// towards throughput and the mean.
pub const LATENCY_SAMPLES_MAX: usize = 4 * 1024 * 1024;

/// Records the requests that complete inside `[start, end)`.
#[derive(Debug, Clone)]
pub struct LatencyRecorder {
    start: Instant,
    end: Instant,
    ops: u64,
    /// Every completed request, warmup and drain included (for cost per request).
    ops_total: u64,
    latency_nanos_sum: u128,
    samples_nanos: Vec<u64>,
}

impl LatencyRecorder {
    pub fn new(start: Instant, end: Instant) -> Self {
        assert!(start < end);
        Self {
            start,
            end,
            ops: 0,
            ops_total: 0,
            latency_nanos_sum: 0,
            samples_nanos: Vec::new(),
        }
    }

    /// When the window closes: clients stop sending then.
    pub fn end(&self) -> Instant {
        self.end
    }

    /// A request sent at `sent` completed at `done`.
    pub fn record(&mut self, sent: Instant, done: Instant) {
        self.ops_total += 1;
        if done < self.start || done >= self.end {
            return;
        }
        let nanos = done.saturating_duration_since(sent).as_nanos() as u64;
        self.ops += 1;
        self.latency_nanos_sum += u128::from(nanos);
        if self.samples_nanos.len() < LATENCY_SAMPLES_MAX {
            self.samples_nanos.push(nanos);
        }
    }

    pub fn merge(&mut self, other: LatencyRecorder) {
        assert_eq!((self.start, self.end), (other.start, other.end));
        self.ops += other.ops;
        self.ops_total += other.ops_total;
        self.latency_nanos_sum += other.latency_nanos_sum;
        let room = LATENCY_SAMPLES_MAX - self.samples_nanos.len();
        let take = room.min(other.samples_nanos.len());
        self.samples_nanos
            .extend_from_slice(&other.samples_nanos[..take]);
    }

    /// The window's throughput and latency, for requests of `size_bytes`.
    pub fn finish(mut self, size_bytes: usize) -> Measurement {
        let seconds = (self.end - self.start).as_secs_f64();
        self.samples_nanos.sort_unstable();
        let p99_nanos = match self.samples_nanos.len() {
            0 => 0,
            count => self.samples_nanos[(count * 99 / 100).min(count - 1)],
        };
        let mean_nanos = match self.ops {
            0 => 0.0,
            ops => self.latency_nanos_sum as f64 / ops as f64,
        };
        Measurement {
            ops: self.ops,
            ops_total: self.ops_total,
            seconds,
            ops_per_s: self.ops as f64 / seconds,
            mb_per_s: self.ops as f64 * size_bytes as f64 / seconds / 1e6,
            lat_mean_us: mean_nanos / 1e3,
            lat_p99_us: p99_nanos as f64 / 1e3,
        }
    }
}

/// One run's result. MB are 10^6 bytes, of request payload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measurement {
    /// Requests completed inside the window.
    pub ops: u64,
    /// Requests completed in the whole run, warmup and drain included.
    pub ops_total: u64,
    pub seconds: f64,
    pub ops_per_s: f64,
    pub mb_per_s: f64,
    pub lat_mean_us: f64,
    pub lat_p99_us: f64,
}

/// The window of a run that starts now: `warmup`, then `measure`.
pub(super) fn window(warmup: Duration, measure: Duration) -> LatencyRecorder {
    let start = Instant::now() + warmup;
    LatencyRecorder::new(start, start + measure)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_the_window_and_takes_percentiles() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut recorder = LatencyRecorder::new(t0 + ms(10), t0 + ms(1010));
        recorder.record(t0, t0 + ms(5)); // before the window
        for i in 0..100u64 {
            let done = t0 + ms(20 + i);
            recorder.record(done - Duration::from_micros(i + 1), done);
        }
        recorder.record(t0 + ms(1000), t0 + ms(1011)); // after
        let measurement = recorder.finish(1000);
        assert_eq!(measurement.ops, 100);
        assert!((measurement.ops_per_s - 100.0).abs() < 1e-6);
        assert!((measurement.mb_per_s - 0.1).abs() < 1e-9);
        assert!((measurement.lat_mean_us - 50.5).abs() < 1e-6);
        assert!((measurement.lat_p99_us - 100.0).abs() < 1e-6);
    }
}
