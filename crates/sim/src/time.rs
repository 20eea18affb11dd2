//! Virtual time. The simulator reads the real clock exactly once, in [`Clock::new`], to
//! get an `Instant` to count from (the cores take `Instant`s); after that every
//! `Instant` it hands out is that epoch plus a virtual duration, and nothing in the
//! simulator reads the real clock, sleeps or spawns a thread. The trace hash uses the
//! virtual nanoseconds, never the epoch, so it is the same on every run.

use std::time::{Duration, Instant};

/// Nanoseconds of virtual time since the simulation started.
pub type Nanos = u64;

pub const MICROSECOND: Nanos = 1_000;
pub const MILLISECOND: Nanos = 1_000_000;
pub const SECOND: Nanos = 1_000_000_000;

/// The simulation's clock: moves only when the event loop moves it.
#[derive(Debug)]
pub struct Clock {
    epoch: Instant,
    now: Nanos,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    pub fn new() -> Self {
        Self {
            epoch: Instant::now(),
            now: 0,
        }
    }

    pub fn now(&self) -> Nanos {
        self.now
    }

    /// The current virtual time as the `Instant` the cores expect.
    pub fn instant(&self) -> Instant {
        self.at(self.now)
    }

    pub fn at(&self, nanos: Nanos) -> Instant {
        self.epoch + Duration::from_nanos(nanos)
    }

    /// Virtual nanoseconds of an `Instant` handed out by this clock.
    pub fn nanos_of(&self, instant: Instant) -> Nanos {
        instant.saturating_duration_since(self.epoch).as_nanos() as Nanos
    }

    /// Moves to `nanos`; time never goes backwards.
    pub fn advance_to(&mut self, nanos: Nanos) {
        assert!(nanos >= self.now, "time went back: {nanos} < {}", self.now);
        self.now = nanos;
    }
}

/// `1.234567s`, for traces.
pub fn format_nanos(nanos: Nanos) -> String {
    format!("{}.{:06}s", nanos / SECOND, (nanos % SECOND) / MICROSECOND)
}
