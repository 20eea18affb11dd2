//! The requests one NBD connection has in flight, polled by the connection's own task.
//!
//! A request's future runs inside the connection's task instead of a task of its own:
//! it starts (and sends its ops) the moment it is decoded, and when its reply arrives
//! the wake-up lands on the connection's task, which writes the reply in the same turn.
//! Only futures that were woken are polled again (each slot has its own waker that
//! records the slot in a ready list), so a turn costs what completed, not what is in
//! flight.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Slots woken since the last poll, and the connection task's waker.
#[derive(Default)]
struct ReadyList {
    inner: Mutex<ReadyInner>,
}

#[derive(Default)]
struct ReadyInner {
    slots: Vec<usize>,
    task: Option<Waker>,
}

impl ReadyList {
    fn lock(&self) -> std::sync::MutexGuard<'_, ReadyInner> {
        self.inner.lock().expect("ready list lock poisoned")
    }
}

/// The waker of one slot: records the slot, then wakes the connection's task.
struct SlotWaker {
    slot: usize,
    ready: Arc<ReadyList>,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let task = {
            let mut inner = self.ready.lock();
            inner.slots.push(self.slot);
            inner.task.take()
        };
        if let Some(task) = task {
            task.wake();
        }
    }
}

struct Slot<T> {
    future: Option<BoxFuture<T>>,
    waker: Waker,
}

/// A set of futures, each polled only after it was woken; at most `count_max` at once.
pub struct InFlight<T> {
    slots: Vec<Slot<T>>,
    free: Vec<usize>,
    ready: Arc<ReadyList>,
    count: usize,
    /// Taken from the ready list each poll (the two swap, so neither reallocates).
    polling: Vec<usize>,
}

impl<T> InFlight<T> {
    pub fn new() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            ready: Arc::new(ReadyList::default()),
            count: 0,
            polling: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Adds a future; it is polled first by the next [`InFlight::poll_completed`].
    pub fn push(&mut self, future: BoxFuture<T>) {
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                let slot = self.slots.len();
                let waker = Waker::from(Arc::new(SlotWaker {
                    slot,
                    ready: self.ready.clone(),
                }));
                self.slots.push(Slot {
                    future: None,
                    waker,
                });
                slot
            }
        };
        assert!(self.slots[slot].future.is_none(), "slot {slot} in use");
        self.slots[slot].future = Some(future);
        self.count += 1;
        self.ready.lock().slots.push(slot);
    }

    /// Polls every woken future; hands each result to `done`. Registers the task's
    /// waker for the next wake-up.
    pub fn poll_completed(&mut self, cx: &mut Context<'_>, mut done: impl FnMut(T)) {
        loop {
            {
                let mut inner = self.ready.lock();
                std::mem::swap(&mut inner.slots, &mut self.polling);
                if self.polling.is_empty() {
                    if !inner.task.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        inner.task = Some(cx.waker().clone());
                    }
                    return;
                }
            }
            for index in 0..self.polling.len() {
                let slot_index = self.polling[index];
                let slot = &mut self.slots[slot_index];
                // A stale wake-up of a slot already finished (or reused) is harmless.
                let Some(future) = slot.future.as_mut() else {
                    continue;
                };
                let mut slot_cx = Context::from_waker(&slot.waker);
                if let Poll::Ready(output) = future.as_mut().poll(&mut slot_cx) {
                    slot.future = None;
                    self.free.push(slot_index);
                    self.count -= 1;
                    done(output);
                }
            }
            self.polling.clear();
        }
    }
}

impl<T: Send + 'static> InFlight<T> {
    /// Runs every future to its end, dropping the results.
    pub async fn finish(mut self) {
        std::future::poll_fn(|cx| {
            self.poll_completed(cx, drop);
            match self.is_empty() {
                true => Poll::Ready(()),
                false => Poll::Pending,
            }
        })
        .await
    }
}

impl<T> Default for InFlight<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    #[tokio::test]
    async fn polls_each_future_until_it_completes() {
        let mut in_flight = InFlight::new();
        let mut senders = Vec::new();
        for i in 0..5u32 {
            let (tx, rx) = oneshot::channel::<u32>();
            senders.push(tx);
            in_flight.push(Box::pin(async move { rx.await.unwrap() + i }));
        }
        in_flight.push(Box::pin(async { 100 }));
        let mut done = Vec::new();
        std::future::poll_fn(|cx| {
            in_flight.poll_completed(cx, |v| done.push(v));
            Poll::Ready(())
        })
        .await;
        assert_eq!(done, [100]);
        assert_eq!(in_flight.len(), 5);
        for (i, tx) in senders.into_iter().enumerate().rev() {
            tx.send(10 * i as u32).unwrap();
        }
        std::future::poll_fn(|cx| {
            in_flight.poll_completed(cx, |v| done.push(v));
            if in_flight.is_empty() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        done.sort_unstable();
        assert_eq!(done, [0, 11, 22, 33, 44, 100]);
    }
}
