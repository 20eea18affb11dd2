//! The trace: a running hash of every event processed, in order, and the last few
//! events in words for a failure report.
//!
//! The hash is FNV-1a over a canonical byte form of each event (virtual time, kind,
//! endpoints, and a message's wire encoding), so it depends on nothing but the run.

use crate::time::{format_nanos, Nanos};
use std::collections::VecDeque;

/// Events kept in words for the failure report.
pub const TRACE_TAIL_MAX: usize = 64;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

#[derive(Debug)]
pub struct Trace {
    hash: u64,
    events: u64,
    tail: VecDeque<String>,
    /// Keep every event in words, not only the tail (for debugging a seed).
    keep_all: bool,
}

impl Default for Trace {
    fn default() -> Self {
        Self {
            hash: FNV_OFFSET,
            events: 0,
            tail: VecDeque::new(),
            keep_all: false,
        }
    }
}

impl Trace {
    pub fn keeping_everything() -> Self {
        Self {
            keep_all: true,
            ..Self::default()
        }
    }

    pub fn hash(&self) -> u64 {
        self.hash
    }

    pub fn events(&self) -> u64 {
        self.events
    }

    pub fn mix(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.hash ^= u64::from(byte);
            self.hash = self.hash.wrapping_mul(FNV_PRIME);
        }
    }

    pub fn mix_u64(&mut self, value: u64) {
        self.mix(&value.to_le_bytes());
    }

    /// Starts an event: counts it and mixes its time and scheduling order.
    pub fn begin(&mut self, at: Nanos, seq: u64) {
        self.events += 1;
        self.mix_u64(at);
        self.mix_u64(seq);
    }

    /// Records an event in words (kept only for the last [`TRACE_TAIL_MAX`]).
    pub fn note(&mut self, at: Nanos, words: impl FnOnce() -> String) {
        if self.tail.len() == TRACE_TAIL_MAX && !self.keep_all {
            self.tail.pop_front();
        }
        self.tail
            .push_back(format!("{} {}", format_nanos(at), words()));
    }

    pub fn tail(&self) -> Vec<String> {
        self.tail.iter().cloned().collect()
    }
}
