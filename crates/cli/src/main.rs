//! `carmine`: the one binary of Carmine. Its verbs mirror the tools Ceph users know:
//! `vstart`/`vstop` (vstart.sh), `status`/`health`/`osd`/`pool` (`ceph`), `obj`
//! (`rados`), `bench` (`rados bench`), and the daemons `mon` and `osd` (`ceph-mon`,
//! `ceph-osd`). Errors print one sentence and exit non-zero.

mod admin;
mod bench;
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

fn main() {
    let cli = cli::Cli::parse();
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
