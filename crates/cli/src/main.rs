//! `carmine`: the one binary of Carmine. Its verbs mirror the tools Ceph users know:
//! `vstart`/`vstop` (vstart.sh), `status`/`health`/`osd`/`pool` (`ceph`), `obj`
//! (`rados`), `bench` (`rados bench`), and the daemons `mon` and `osd` (`ceph-mon`,
//! `ceph-osd`). Errors print one sentence and exit non-zero.

mod admin;
mod bench;
mod bench_msgr;
mod bench_osd;
mod cli;
mod conf;
mod crush;
mod daemons;
mod image;
mod objects;
mod output;
mod store;
mod vstart;

use clap::Parser;

/// Every role of this binary (daemons, client tools, the NBD server) allocates through
/// mimalloc: `carmine_rt::malloc` says why.
#[global_allocator]
static GLOBAL: carmine_rt::malloc::Allocator = carmine_rt::malloc::Allocator;

/// Command-line tools exit quietly when their output pipe closes (`carmine obj ls |
/// head`), as Unix tools do. Daemons and the NBD server keep SIGPIPE ignored (Rust's
/// default): a peer closing a socket must be an error they handle, not their death.
#[allow(unsafe_code)]
fn exit_quietly_on_broken_pipe() {
    // SAFETY: resetting a signal disposition to its default touches no Rust state.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() {
    // Before any thread starts (every role: the daemons log what it did).
    carmine_rt::malloc::keep_freed_memory();
    let cli = cli::Cli::parse();
    if !cli.runs_a_server() {
        exit_quietly_on_broken_pipe();
    }
    if let Err(error) = cli::dispatch(cli) {
        let mut message = format!("{error}");
        let mut source = error.source();
        while let Some(cause) = source {
            message.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        eprintln!("error: {message}");
        std::process::exit(1);
    }
}
