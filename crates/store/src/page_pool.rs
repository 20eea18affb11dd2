//! Buffers whose memory is faulted in ahead of need, for the data of small writes.
//!
//! A store that keeps data in memory (MemStore) needs fresh memory for every new
//! object: a page the kernel must zero on first touch. On the project's test VMs that
//! touch is slow when the page was free long enough for the balloon's free-page
//! reporting to hand it back to the host: the host must then back it again. A depth-1
//! 4 KiB write of a new object took 78–89 µs once the store held about 600,000
//! objects against 51–53 µs on a fresh one, and `clear_page_erms` went from 1% to 15%
//! of the OSDs' time (BENCHMARKS.md, "New objects on a grown store").
//!
//! Seastar (and with it Crimson) takes its memory up front for the same reason: no page
//! fault on the data path. Carmine keeps its memory small at rest instead and fills a
//! bounded pool of pre-touched buffers in time it would otherwise spend idle-polling
//! (`carmine_msgr::idle_poll::set_idle_work`): a shard thread that [`enable`]s the pool
//! gets one buffer per [`top_up_one`], and the store [`take`]s one for each small
//! write's copy. The CPU a fault costs is the same; it moves off the write's latency.
//! Under sustained load the pool drains and writes fault as before.
//!
//! The pool is per thread, as everything of a shard is (no locks). A thread that never
//! enables it (tests, the simulator, tools) gets `None` from [`take`] and allocates as
//! usual, so results never depend on it: only where the memory comes from does.

use bytes::BytesMut;
use std::cell::RefCell;

/// The size of a pooled buffer: the commonest small write (a 4 KiB block or object).
pub const BUFFER_BYTES: usize = 4096;

/// Buffers a shard keeps ready by default: 4 MiB, a few milliseconds of writes.
pub const DEFAULT_BUFFERS: usize = 1024;

struct Pool {
    ready: Vec<BytesMut>,
    max: usize,
}

thread_local! {
    static POOL: RefCell<Option<Pool>> = const { RefCell::new(None) };
}

/// Keeps up to `max` pre-touched buffers for the calling thread (0: none, and drops
/// any it holds).
pub fn enable(max: usize) {
    POOL.with(|pool| {
        *pool.borrow_mut() = (max > 0).then(|| Pool {
            ready: Vec::new(),
            max,
        })
    });
}

/// Adds one pre-touched buffer to the calling thread's pool. False when the pool is
/// full or not enabled: there was nothing to do.
pub fn top_up_one() -> bool {
    POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        let Some(pool) = pool.as_mut() else {
            return false;
        };
        if pool.ready.len() >= pool.max {
            return false;
        }
        let mut buffer = BytesMut::with_capacity(BUFFER_BYTES);
        // Writing every byte faults in every page the buffer spans (an allocation of
        // 4 KiB need not be page-aligned); `clear` keeps them.
        buffer.resize(BUFFER_BYTES, 0);
        buffer.clear();
        pool.ready.push(buffer);
        true
    })
}

/// An empty pre-touched buffer with room for exactly `len` bytes, if the calling
/// thread's pool has one of that size.
pub fn take(len: usize) -> Option<BytesMut> {
    if len != BUFFER_BYTES {
        return None;
    }
    POOL.with(|pool| pool.borrow_mut().as_mut()?.ready.pop())
}

/// Frees the calling thread's buffers (it stays enabled): an idle shard gives its
/// memory back.
pub fn release() {
    POOL.with(|pool| {
        if let Some(pool) = pool.borrow_mut().as_mut() {
            pool.ready = Vec::new();
        }
    });
}

/// How many buffers the calling thread's pool holds.
pub fn ready() -> usize {
    POOL.with(|pool| pool.borrow().as_ref().map_or(0, |pool| pool.ready.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_without_a_pool_takes_nothing_and_tops_up_nothing() {
        std::thread::spawn(|| {
            assert!(!top_up_one());
            assert!(take(BUFFER_BYTES).is_none());
            assert_eq!(ready(), 0);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_pool_fills_to_its_bound_and_hands_out_empty_buffers_of_the_size() {
        std::thread::spawn(|| {
            enable(3);
            let mut added = 0;
            while top_up_one() {
                added += 1;
            }
            assert_eq!(added, 3);
            assert!(take(BUFFER_BYTES - 1).is_none(), "only the pooled size");
            let buffer = take(BUFFER_BYTES).unwrap();
            assert!(buffer.is_empty());
            assert!(buffer.capacity() >= BUFFER_BYTES);
            assert_eq!(ready(), 2);
            assert!(top_up_one(), "room again after a take");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn release_empties_the_pool_and_disabling_drops_it() {
        std::thread::spawn(|| {
            enable(4);
            assert!(top_up_one() && top_up_one());
            release();
            assert_eq!(ready(), 0);
            assert!(top_up_one(), "still enabled after a release");
            enable(0);
            assert_eq!(ready(), 0);
            assert!(!top_up_one());
        })
        .join()
        .unwrap();
    }
}
