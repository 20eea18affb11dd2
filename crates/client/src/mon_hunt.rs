//! Which monitor to try next. Clients and OSDs keep one session to one monitor; when it
//! closes or a connection attempt fails they move on to the next monitor of the
//! monmap, round-robin, so a dead or cut-off monitor is left behind after one try.
//! The async client, the OSD daemon and the simulator all ask this one place.

/// Round-robin over the monitors `0..count`.
#[derive(Debug, Clone, Default)]
pub struct MonHunt {
    attempts: usize,
}

impl MonHunt {
    pub fn new() -> Self {
        Self::default()
    }

    /// The index of the monitor to connect to now, out of `count`; each call moves on.
    /// Returns 0 for an empty monmap (the callers refuse to start without monitors).
    pub fn next_target(&mut self, count: usize) -> usize {
        let index = if count == 0 { 0 } else { self.attempts % count };
        self.attempts = self.attempts.wrapping_add(1);
        index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_monitor_is_tried_in_turn() {
        let mut hunt = MonHunt::new();
        let tried: Vec<usize> = (0..7).map(|_| hunt.next_target(3)).collect();
        assert_eq!(tried, [0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(MonHunt::new().next_target(0), 0);
    }
}
