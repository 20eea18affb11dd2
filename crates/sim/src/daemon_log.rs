//! The daemons' own `tracing` output, woven into a full trace (`--trace` with
//! `CARMINE_LOG=debug`, say): each line lands after the event that produced it, so a
//! PG's reasons ("RepOp … does not follow …") read in place among its messages.
//!
//! The lines go to a buffer of this thread (the simulator runs a seed on one thread);
//! they never touch the trace's hash, so a seed's hash is the same with or without them.

use std::cell::RefCell;
use std::io::Write;
use std::sync::OnceLock;

thread_local! {
    static LINES: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Captures the daemons' log lines matching `filter` (an `EnvFilter` directive) until
/// the guard drops.
pub(crate) fn capture(filter: &str) -> tracing::subscriber::DefaultGuard {
    keep_a_second_dispatcher_registered();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .with_writer(|| ThreadBuffer)
        .finish();
    tracing::subscriber::set_default(subscriber)
}

/// Keeps a do-nothing dispatcher registered for the life of the process, so that ours is
/// never the only one.
///
/// Why: with exactly one registered dispatcher, `tracing-core` (0.1.36) works out a
/// callsite's interest from the default of whichever thread first reaches it. A thread
/// running a seed without capture (a test beside this one, say) would then mark the
/// callsite "never" for every thread, and lines this thread should log would vanish:
/// `daemon_log_lines_join_the_trace_without_changing_the_run` failed about one run in
/// eight that way. With two registered, interest is asked of all of them.
fn keep_a_second_dispatcher_registered() {
    static SECOND: OnceLock<tracing::Dispatch> = OnceLock::new();
    SECOND.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
}

/// Takes the lines logged since the last call.
pub(crate) fn take_lines() -> Vec<String> {
    let bytes = LINES.with(|lines| std::mem::take(&mut *lines.borrow_mut()));
    String::from_utf8_lossy(&bytes)
        .lines()
        .map(|line| line.trim_end().to_string())
        .filter(|line| !line.is_empty())
        .collect()
}

struct ThreadBuffer;

impl Write for ThreadBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        LINES.with(|lines| lines.borrow_mut().extend_from_slice(bytes));
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
