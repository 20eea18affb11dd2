//! Idle polling: before a runtime thread goes to sleep, it polls its sockets for a
//! short while, as Seastar's reactor does (`--idle-poll-time-us`, 200 µs by default)
//! and as Crimson's OSD therefore does.
//!
//! Why: on a virtual machine a halted vCPU is slow to wake. On this project's 2-vCPU
//! test machines with guest halt polling off, a loopback TCP round trip between two
//! sleeping threads took 106–168 µs against 24 µs with the guest polling for 200 µs
//! (`tcp-ceiling 4096 1 20000`), and most of a depth-1 write's time was such wake-ups.
//! A thread that polls for the next message for a few tens of microseconds after its
//! last one keeps its vCPU awake, and a sender whose peer is polling wakes nobody.
//!
//! How: a thread that [`enable`]s idle polling gets its own epoll instance, to which
//! every socket the messenger (or the NBD server) opens on that thread is added
//! level-triggered ([`watch`]). The runtime calls [`poll_before_park`] from its
//! `on_thread_park` hook: it asks that epoll instance, without blocking, whether any
//! socket has bytes, yielding the CPU between asks (`sched_yield`, so a process that
//! shares the CPU runs first), until one has or the budget is spent; then the runtime
//! parks as usual, and its own epoll returns the socket's event at once. A closed socket
//! leaves the epoll instance with its last file reference. Threads that never call
//! [`enable`] (tests, tools) are untouched: [`watch`] and [`poll_before_park`] are no-ops.
//!
//! The cost is CPU while idle-polling: at most the budget after each burst of work, so an
//! idle daemon spends nothing, and a busy one rarely parks at all.

use std::cell::{Cell, RefCell};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The default budget, Seastar's (`--idle-poll-time-us`). On the 2-vCPU test machine,
/// 4 KiB writes one at a time (size-3 pool) took a mean of 392–999 µs with no polling,
/// 342–347 µs with 50 µs, 305–322 µs with 100, 210–228 µs with 200 and 214–237 µs with
/// 400 (BENCHMARKS.md, "Idle polling").
pub const IDLE_POLL_DEFAULT: Duration = Duration::from_micros(200);

/// `PROCESS_BUDGET_US` before [`set_process_budget`].
const UNSET: u64 = u64::MAX;
static PROCESS_BUDGET_US: AtomicU64 = AtomicU64::new(UNSET);

struct Poller {
    epoll: OwnedFd,
    budget: Duration,
}

thread_local! {
    static POLLER: RefCell<Option<Poller>> = const { RefCell::new(None) };
    static IDLE_WORK: Cell<Option<fn() -> bool>> = const { Cell::new(None) };
}

/// Gives the calling thread's idle polling something useful to do between asks: `work`
/// does one small piece of background work (a few microseconds) and returns whether
/// there was any. A pool of pre-touched buffers (`carmine_store::page_pool`) is filled
/// this way, where the polling would otherwise only yield. `None` removes it.
pub fn set_idle_work(work: Option<fn() -> bool>) {
    IDLE_WORK.with(|w| w.set(work));
}

/// Turns idle polling on for the calling thread, with `budget` per park; a zero budget
/// turns it off. Sockets opened on this thread afterwards are watched.
pub fn enable(budget: Duration) -> std::io::Result<()> {
    if budget.is_zero() {
        POLLER.with(|p| *p.borrow_mut() = None);
        return Ok(());
    }
    let epoll = create_epoll()?;
    POLLER.with(|p| *p.borrow_mut() = Some(Poller { epoll, budget }));
    Ok(())
}

/// The process's budget: what [`set_process_budget`] set, else [`IDLE_POLL_DEFAULT`].
pub fn process_budget() -> Duration {
    match PROCESS_BUDGET_US.load(Ordering::Relaxed) {
        UNSET => IDLE_POLL_DEFAULT,
        micros => Duration::from_micros(micros),
    }
}

/// Sets the budget the process's runtimes use (`carmine --idle-poll-us`), before they
/// start.
pub fn set_process_budget(budget: Duration) {
    let micros = u64::try_from(budget.as_micros()).unwrap_or(UNSET - 1);
    PROCESS_BUDGET_US.store(micros.min(UNSET - 1), Ordering::Relaxed);
}

/// A current-thread runtime (I/O and time enabled) for the calling thread, which
/// idle-polls with `budget` (see the module docs; zero: never). Build it on the thread
/// that runs it: the watched sockets are those opened on this thread.
pub fn current_thread_runtime(budget: Duration) -> std::io::Result<tokio::runtime::Runtime> {
    enable(budget)?;
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all();
    if !budget.is_zero() {
        builder.on_thread_park(poll_before_park);
    }
    builder.build()
}

/// Whether the calling thread idle-polls.
pub fn enabled() -> bool {
    POLLER.with(|p| p.borrow().is_some())
}

/// Watches `socket` for readable bytes while this thread idle-polls (a no-op otherwise).
/// A socket that cannot be added is simply not polled for.
pub fn watch(socket: &impl AsRawFd) {
    POLLER.with(|p| {
        if let Some(poller) = p.borrow().as_ref() {
            add_readable(poller.epoll.as_raw_fd(), socket.as_raw_fd());
        }
    });
}

/// The runtime's `on_thread_park` hook: returns once a watched socket has bytes or the
/// thread's budget is spent (at once on a thread that does not idle-poll).
pub fn poll_before_park() {
    let Some((epoll, budget)) =
        POLLER.with(|p| p.borrow().as_ref().map(|p| (p.epoll.as_raw_fd(), p.budget)))
    else {
        return;
    };
    let work = IDLE_WORK.with(Cell::get);
    let start = Instant::now();
    loop {
        if any_readable(epoll) {
            return;
        }
        if start.elapsed() >= budget {
            return;
        }
        // One piece at a time, so a message waits at most one piece; the yield stays,
        // so a process sharing the CPU still runs first.
        if let Some(work) = work {
            work();
        }
        yield_cpu();
    }
}

#[allow(unsafe_code)]
fn create_epoll() -> std::io::Result<OwnedFd> {
    // SAFETY: epoll_create1 takes no pointers; a non-negative result is a new fd we own.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[allow(unsafe_code)]
fn add_readable(epoll: RawFd, fd: RawFd) {
    let mut event = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: fd as u64,
    };
    // SAFETY: `event` is a valid epoll_event for the duration of the call; both fds are
    // open (the caller holds the socket). A failure (EEXIST for a reused fd number that
    // is still registered) leaves the set as it was.
    let _ = unsafe { libc::epoll_ctl(epoll, libc::EPOLL_CTL_ADD, fd, &mut event) };
}

#[allow(unsafe_code)]
fn any_readable(epoll: RawFd) -> bool {
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 1];
    // SAFETY: `events` has room for the one event asked for; timeout 0 never blocks.
    let ready = unsafe { libc::epoll_wait(epoll, events.as_mut_ptr(), 1, 0) };
    ready > 0
}

#[allow(unsafe_code)]
fn yield_cpu() {
    // SAFETY: sched_yield takes no arguments and cannot fail in a way that matters.
    unsafe {
        libc::sched_yield();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    /// Long enough that a test which waited it out would be noticed.
    const LONG: Duration = Duration::from_secs(20);
    const PROMPT: Duration = Duration::from_secs(10);

    /// How long the hook polls with one watched socket that never gets a byte.
    fn poll_a_quiet_socket() -> Duration {
        let (a, _b) = UnixStream::pair().unwrap();
        watch(&a);
        let start = Instant::now();
        poll_before_park();
        start.elapsed()
    }

    #[test]
    fn a_thread_that_does_not_idle_poll_parks_at_once() {
        assert!(!enabled());
        assert!(poll_a_quiet_socket() < PROMPT);
    }

    #[test]
    fn polling_ends_as_soon_as_a_watched_socket_has_bytes() {
        enable(LONG).unwrap();
        let (mut a, mut b) = UnixStream::pair().unwrap();
        watch(&a);
        b.write_all(b"x").unwrap();
        let start = Instant::now();
        poll_before_park();
        assert!(start.elapsed() < PROMPT, "polled {:?}", start.elapsed());
        // Once read, the socket is quiet again: level-triggered, not a stale event.
        let mut byte = [0u8; 1];
        a.read_exact(&mut byte).unwrap();
        enable(Duration::from_millis(30)).unwrap();
        watch(&a);
        let start = Instant::now();
        poll_before_park();
        assert!(start.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn polling_gives_up_after_its_budget() {
        enable(Duration::from_millis(30)).unwrap();
        let polled = poll_a_quiet_socket();
        assert!(polled >= Duration::from_millis(30), "polled {polled:?}");
        assert!(polled < PROMPT, "polled {polled:?}");
    }

    thread_local! {
        static PIECES_DONE: Cell<u32> = const { Cell::new(0) };
    }

    fn count_a_piece() -> bool {
        PIECES_DONE.with(|n| n.set(n.get() + 1));
        true
    }

    #[test]
    fn idle_work_runs_while_polling_and_never_delays_a_message() {
        enable(Duration::from_millis(30)).unwrap();
        set_idle_work(Some(count_a_piece));
        poll_a_quiet_socket();
        let pieces = PIECES_DONE.with(Cell::get);
        assert!(pieces > 0, "no idle work in 30 ms of polling");

        enable(LONG).unwrap();
        let (a, mut b) = UnixStream::pair().unwrap();
        watch(&a);
        b.write_all(b"x").unwrap();
        let start = Instant::now();
        poll_before_park();
        assert!(start.elapsed() < PROMPT, "polled {:?}", start.elapsed());

        set_idle_work(None);
        enable(Duration::from_millis(5)).unwrap();
        let before = PIECES_DONE.with(Cell::get);
        poll_a_quiet_socket();
        assert_eq!(
            PIECES_DONE.with(Cell::get),
            before,
            "work ran after removal"
        );
    }

    #[test]
    fn the_process_budget_is_what_was_set() {
        set_process_budget(Duration::from_micros(123));
        assert_eq!(process_budget(), Duration::from_micros(123));
        set_process_budget(Duration::MAX);
        assert!(process_budget() > Duration::from_secs(1_000_000));
    }

    #[test]
    fn a_zero_budget_turns_polling_off() {
        enable(LONG).unwrap();
        assert!(enabled());
        enable(Duration::ZERO).unwrap();
        assert!(!enabled());
        assert!(poll_a_quiet_socket() < PROMPT);
    }

    /// The hook runs only when the runtime has nothing to do: work made ready by the
    /// last task (a spawned task completing what the `block_on` future awaits, a
    /// `LocalSet` task waking another, a yield) runs without waiting out the budget.
    /// tokio checks for pending work before its park hook (1.54); this keeps it so.
    #[test]
    fn a_polling_runtime_never_polls_while_it_has_work() {
        let runtime = current_thread_runtime(LONG).unwrap();
        let start = Instant::now();
        runtime.block_on(async {
            let (_a, _b) = tokio::net::UnixStream::pair().unwrap();
            for _ in 0..3 {
                let (tx, rx) = tokio::sync::oneshot::channel();
                tokio::spawn(async move { tx.send(()).unwrap() });
                rx.await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        let local = tokio::task::LocalSet::new();
        local.block_on(&runtime, async {
            for _ in 0..3 {
                let (tx, rx) = tokio::sync::oneshot::channel();
                tokio::task::spawn_local(async move { tx.send(()).unwrap() });
                rx.await.unwrap();
            }
        });
        assert!(start.elapsed() < PROMPT, "took {:?}", start.elapsed());
    }

    /// The runtime's own epoll still gets the socket's event after the hook saw it, and
    /// timers still fire (late by at most the budget).
    #[test]
    fn a_polling_runtime_wakes_for_its_sockets_and_its_timers() {
        let runtime = current_thread_runtime(LONG).unwrap();
        let start = Instant::now();
        runtime.block_on(async {
            let (mut a, b) = tokio::net::UnixStream::pair().unwrap();
            watch(&a);
            let b = b.into_std().unwrap();
            b.set_nonblocking(false).unwrap();
            let writer = std::thread::spawn(move || (&b).write_all(b"ping").map(|()| b));
            let mut got = [0u8; 4];
            tokio::io::AsyncReadExt::read_exact(&mut a, &mut got)
                .await
                .unwrap();
            assert_eq!(&got, b"ping");
            let _b = writer.join().unwrap().unwrap();
        });
        assert!(start.elapsed() < PROMPT, "took {:?}", start.elapsed());

        let runtime = current_thread_runtime(Duration::from_millis(5)).unwrap();
        let start = Instant::now();
        runtime.block_on(async { tokio::time::sleep(Duration::from_millis(1)).await });
        assert!(start.elapsed() < PROMPT, "took {:?}", start.elapsed());
    }
}
