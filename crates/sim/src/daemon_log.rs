//! The daemons' own `tracing` output, woven into a full trace (`--trace` with
//! `CARMINE_LOG=debug`, say): each line lands after the event that produced it, so a
//! PG's reasons ("RepOp … does not follow …") read in place among its messages.
//!
//! The lines go to a buffer of this thread (the simulator runs a seed on one thread);
//! they never touch the trace's hash, so a seed's hash is the same with or without them.

use std::cell::RefCell;
use std::io::Write;

thread_local! {
    static LINES: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Captures the daemons' log lines matching `filter` (an `EnvFilter` directive) until
/// the guard drops.
pub(crate) fn capture(filter: &str) -> tracing::subscriber::DefaultGuard {
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .with_writer(|| ThreadBuffer)
        .finish();
    tracing::subscriber::set_default(subscriber)
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
