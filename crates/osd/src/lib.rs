//! The OSD's logic as pure state machines: the placement group (op execution, PG log,
//! primary-copy replication), the shard that owns a set of PGs and one store, and the
//! heartbeat tracker that watches peer OSDs ([`heartbeat`]).
//!
//! Nothing here touches a socket, a clock or a thread (DESIGN.md §3). The runtime
//! (`carmine-rt`) feeds an [`OsdShard`] with messages and maps and carries out the
//! [`Output`]s it returns; the simulator drives the very same code.
//!
//! The write path's durability contract: a primary answers a client write only after
//! every member of the acting set — itself included — reports the write's transaction
//! (data, object info and PG log entry together) durable in its store.
//!
//! ```
//! use carmine_osd::OsdShard;
//! use carmine_store::MemStore;
//! use carmine_types::{OsdId, ShardIndex};
//!
//! let shard = OsdShard::new(OsdId(0), ShardIndex(0), 1, MemStore::new());
//! assert_eq!(shard.pg_count(), 0);
//! ```

mod direct;
mod exec;
mod fast_hash;
pub mod heartbeat;
mod osd_set;
mod pg;
mod pglog;
mod recovery_budget;
mod shard;
mod snaps;
mod tuning;

pub use direct::DirectClient;
pub use pg::Pg;
pub use pglog::{PgLog, LOG_ENTRIES_MAX};
pub use shard::{OsdShard, ShardCounters, TICK_INTERVAL};
pub use tuning::OsdTuning;

use carmine_proto::Msg;
use carmine_types::{OsdId, ShardIndex};

/// A client connection, as the runtime numbers them. Replies go back on it.
pub type ClientRef = u64;

/// Something the runtime must send.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// A reply to the client on connection `ClientRef`.
    Client(ClientRef, Msg),
    /// A message to shard `ShardIndex` of OSD `OsdId`.
    Peer(OsdId, ShardIndex, Msg),
}
