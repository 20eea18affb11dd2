//! The runtime: real threads, TCP, files and clocks around Carmine's pure cores.
//!
//! - [`mon_daemon`] runs a [`carmine_mon::Monitor`] on one current-thread runtime.
//! - [`osd_daemon`] runs an OSD as `S` shards, each a pinned OS thread with its own
//!   current-thread runtime, listener, store, connections and PGs. Shard 0 also holds
//!   the OSD-global work (monitor session, boot, map distribution, stats); the other
//!   shards receive each map epoch as an immutable `Arc<OsdMap>` through a `watch`
//!   channel and report stats through a bounded queue. The data path never crosses a
//!   core: clients and peers connect straight to the shard that owns a PG.
//! - `heartbeat` runs the OSD's heartbeat tracker on shard 0: pings to the peers'
//!   shard 0, failure reports to the monitor; every shard answers pings.

pub mod files;
mod heartbeat;
pub mod malloc;
pub mod mon_daemon;
pub mod osd_daemon;
mod peers;
mod shard_loop;

pub use mon_daemon::{run_monitor, MonDaemonConfig};
pub use osd_daemon::{pin_current_thread, run_osd, OsdDaemonConfig, StoreKind};

use carmine_msgr::Message;
use carmine_proto::Msg;

/// Wraps a message for the messenger (the client library's, shared by the daemons).
pub use carmine_client::to_message;

/// Unwraps a received message; a malformed one is logged and dropped.
pub fn from_message(message: Message, from: &dyn std::fmt::Display) -> Option<Msg> {
    match Msg::decode_parts(message.header.msg_type, message.front, message.data) {
        Ok(msg) => Some(msg),
        Err(error) => {
            tracing::warn!("dropping a malformed message from {from}: {error}");
            None
        }
    }
}

/// Why a daemon could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DaemonError {
    #[error("cannot listen on {addr}: {source} (is another daemon using this port?)")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Config(String),
    #[error("data in {path} is unreadable: {detail}")]
    Corrupt { path: String, detail: String },
}
