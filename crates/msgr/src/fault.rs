//! Fault injection, built in so tests can aim at reconnect races.
//!
//! A [`FaultPlan`] travels in the session's configuration. The session applies the
//! parts that are protocol events (drop the connection after every N received
//! messages or with probability p from an explicit seed; fail or stall on receiving a
//! named handshake step); the driver applies the write delay. An injected fault is a
//! recoverable error: a lossless session reconnects and resumes.

use std::time::Duration;

/// A handshake step, named by the frame (or banner) being received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HandshakeStep {
    Banner,
    Hello,
    HelloReply,
    AuthRequest,
    AuthDone,
    SessionRequest,
    SessionReady,
}

/// Faults to inject into one session. All zero / `None` means no faults.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FaultPlan {
    /// Seed of the generator behind `drop_probability`.
    pub seed: u64,
    /// Drop the connection on every N-th message received (0: never).
    pub drop_every_messages: u64,
    /// Probability of dropping the connection on each message received.
    pub drop_probability: f64,
    /// Fail when receiving this handshake step.
    pub fail_at: Option<HandshakeStep>,
    /// How many times `fail_at` fires in one session (0: every time).
    pub fail_at_times: u32,
    /// The driver waits this long before each write (0: no delay).
    pub write_delay: Duration,
    /// Stop processing input for `stall_for` on reaching this handshake step (once
    /// per session); a stall past the handshake timeout aims at reconnect races.
    pub stall_at: Option<HandshakeStep>,
    pub stall_for: Duration,
}

impl FaultPlan {
    pub fn none() -> Self {
        Self::default()
    }

    pub fn is_none(&self) -> bool {
        *self == Self::none()
    }
}

/// Why a fault fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InjectedFault {
    DropAfterMessages { count: u64 },
    DropByChance,
    FailAtStep(HandshakeStep),
}

impl std::fmt::Display for InjectedFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InjectedFault::DropAfterMessages { count } => write!(f, "drop after {count} messages"),
            InjectedFault::DropByChance => write!(f, "random drop"),
            InjectedFault::FailAtStep(step) => write!(f, "fail at handshake step {step:?}"),
        }
    }
}

/// A plan plus its running state (counters, generator).
#[derive(Debug, Clone)]
pub(crate) struct FaultState {
    plan: FaultPlan,
    rng: u64,
    messages_received: u64,
    /// Messages received since the last `drop_every_messages` fault.
    messages_since_drop: u64,
    step_failures: u32,
    stalled: bool,
}

impl FaultState {
    pub(crate) fn new(plan: FaultPlan) -> Self {
        let rng = plan.seed ^ 0x9e37_79b9_7f4a_7c15;
        Self {
            plan,
            rng,
            messages_received: 0,
            messages_since_drop: 0,
            step_failures: 0,
            stalled: false,
        }
    }

    /// Called before a received message is delivered.
    pub(crate) fn on_message(&mut self) -> Result<(), InjectedFault> {
        self.messages_received += 1;
        if self.plan.drop_every_messages > 0 {
            self.messages_since_drop += 1;
            if self.messages_since_drop == self.plan.drop_every_messages {
                self.messages_since_drop = 0;
                return Err(InjectedFault::DropAfterMessages {
                    count: self.messages_received,
                });
            }
        }
        if self.plan.drop_probability > 0.0 && self.next_unit() < self.plan.drop_probability {
            return Err(InjectedFault::DropByChance);
        }
        Ok(())
    }

    /// Called before a received handshake step is processed.
    pub(crate) fn on_step(&mut self, step: HandshakeStep) -> Result<(), InjectedFault> {
        if self.plan.fail_at != Some(step) {
            return Ok(());
        }
        let times = self.plan.fail_at_times;
        if times != 0 && self.step_failures >= times {
            return Ok(());
        }
        self.step_failures += 1;
        Err(InjectedFault::FailAtStep(step))
    }

    /// How long to stall on reaching `step`, the first time only.
    pub(crate) fn stall(&mut self, step: HandshakeStep) -> Option<Duration> {
        if self.stalled || self.plan.stall_at != Some(step) {
            return None;
        }
        self.stalled = true;
        Some(self.plan.stall_for)
    }

    /// splitmix64, mapped to [0, 1).
    fn next_unit(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_every_n_fires_on_multiples() {
        let mut state = FaultState::new(FaultPlan {
            drop_every_messages: 3,
            ..FaultPlan::none()
        });
        let fired: Vec<bool> = (0..7).map(|_| state.on_message().is_err()).collect();
        assert_eq!(fired, [false, false, true, false, false, true, false]);
    }

    #[test]
    fn probability_is_seeded_and_roughly_right() {
        let plan = FaultPlan {
            seed: 42,
            drop_probability: 0.25,
            ..FaultPlan::none()
        };
        let run = |plan: &FaultPlan| {
            let mut state = FaultState::new(plan.clone());
            (0..4000).filter(|_| state.on_message().is_err()).count()
        };
        let fired = run(&plan);
        assert_eq!(fired, run(&plan));
        assert!((800..1200).contains(&fired), "{fired}");
    }

    #[test]
    fn step_failures_are_limited() {
        let mut state = FaultState::new(FaultPlan {
            fail_at: Some(HandshakeStep::Hello),
            fail_at_times: 2,
            ..FaultPlan::none()
        });
        assert!(state.on_step(HandshakeStep::Banner).is_ok());
        assert!(state.on_step(HandshakeStep::Hello).is_err());
        assert!(state.on_step(HandshakeStep::Hello).is_err());
        assert!(state.on_step(HandshakeStep::Hello).is_ok());
    }
}
