//! Tracks the writes in flight on an image so that a flush can wait for exactly the
//! writes that started before it (NBD's FLUSH contract: everything acknowledged, or
//! submitted, before the flush is durable when the flush completes).
//!
//! Carmine acknowledges a write only once every replica has it durable, so a flush has
//! nothing to push down: it only has to wait for earlier writes still in flight.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

#[derive(Debug, Default)]
struct State {
    next_sequence: u64,
    in_flight: BTreeSet<u64>,
}

/// Shared by every handle and connection that writes one image.
#[derive(Debug, Default, Clone)]
pub struct WriteTracker {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    state: Mutex<State>,
    changed: Notify,
}

/// Held while one write is in flight; dropping it (on success, failure or
/// cancellation) marks the write finished.
#[derive(Debug)]
pub struct WriteGuard {
    inner: Arc<Inner>,
    sequence: u64,
}

impl WriteTracker {
    /// Registers a write that is about to start.
    pub fn begin(&self) -> WriteGuard {
        let mut state = self.inner.state.lock().expect("tracker lock poisoned");
        let sequence = state.next_sequence;
        state.next_sequence += 1;
        assert!(state.in_flight.insert(sequence));
        WriteGuard {
            inner: self.inner.clone(),
            sequence,
        }
    }

    /// Waits until every write begun before this call has finished.
    pub async fn wait_for_earlier(&self) {
        let barrier = self
            .inner
            .state
            .lock()
            .expect("tracker lock poisoned")
            .next_sequence;
        loop {
            let notified = self.inner.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let oldest = self
                .inner
                .state
                .lock()
                .expect("tracker lock poisoned")
                .in_flight
                .first()
                .copied();
            match oldest {
                Some(sequence) if sequence < barrier => notified.await,
                _ => return,
            }
        }
    }

    /// Writes in flight now.
    #[cfg(test)]
    pub fn in_flight_count(&self) -> usize {
        self.inner
            .state
            .lock()
            .expect("tracker lock poisoned")
            .in_flight
            .len()
    }
}

impl Drop for WriteGuard {
    fn drop(&mut self) {
        let mut state = self.inner.state.lock().expect("tracker lock poisoned");
        assert!(
            state.in_flight.remove(&self.sequence),
            "write {} finished twice",
            self.sequence
        );
        drop(state);
        self.inner.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn flush_waits_for_earlier_writes_only() {
        let tracker = WriteTracker::default();
        let earlier = tracker.begin();
        let flush = tokio::spawn({
            let tracker = tracker.clone();
            async move { tracker.wait_for_earlier().await }
        });
        tokio::task::yield_now().await;
        let later = tracker.begin();
        tokio::task::yield_now().await;
        assert!(!flush.is_finished());
        drop(earlier);
        tokio::time::timeout(Duration::from_secs(5), flush)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(tracker.in_flight_count(), 1);
        drop(later);
        assert_eq!(tracker.in_flight_count(), 0);
        tracker.wait_for_earlier().await;
    }
}
