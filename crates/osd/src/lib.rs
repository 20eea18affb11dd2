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
pub mod heartbeat;
mod instance;
mod osd_set;
mod pg;
mod pg_set;
mod pglog;
mod recovery_sched;
pub mod reserver;
mod shard;
mod snaps;
mod tuning;

pub use direct::DirectClient;
pub use instance::map_for_instance;
pub use pg::{Pg, SNAP_TRIM_CLIENT};
pub use pglog::{PgLog, LOG_ENTRIES_MAX, LOG_PINNED_GROWTH};
pub use recovery_sched::MclockSettings;
pub use shard::{OsdShard, ShardCounters, SCRUB_BYTES_PER_STEP, TICK_INTERVAL};
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

impl Output {
    /// Whether this output may leave before the store flush that ends the shard's
    /// turn ([`OsdShard::flush`]). The outputs' durability contract:
    ///
    /// - A `RepOp` may: it asks a replica to apply a write and claims nothing about
    ///   this shard's store. The write is acknowledged to its client only once every
    ///   member, this primary included, has committed it, so a primary that crashes
    ///   before its own commit leaves at most replicas holding an unacknowledged entry,
    ///   which peering settles as it settles any entry in flight at a crash (Ceph's
    ///   primary, too, sends its repops in parallel with its local commit).
    /// - Everything else waits for the flush: client replies, `RepOpReply`,
    ///   `PgActivated`, `PgPushReply`, peering answers and any message the PG produced
    ///   after a store commit may say that something is durable here, and the flush is
    ///   what makes the turn's transactions durable. (The PG also gates those on the
    ///   store's `committed_through`; waiting for the flush keeps a store whose
    ///   commit and flush differ honest too.)
    ///
    /// Keep this set small and explicit: adding a message here is a claim that it
    /// says nothing about this shard's durable state.
    pub fn may_leave_before_flush(&self) -> bool {
        matches!(self, Output::Peer(_, _, Msg::RepOp(_)))
    }

    /// The peer shard a message goes to (`None` for a client reply).
    fn peer_key(&self) -> Option<(OsdId, ShardIndex)> {
        match self {
            Output::Peer(osd, shard, _) => Some((*osd, *shard)),
            Output::Client(..) => None,
        }
    }
}

/// Moves the outputs in `outputs[start..]` that may leave before the turn's flush
/// ([`Output::may_leave_before_flush`]) to `now`, keeping the rest, in order, in
/// `outputs` (which then holds only outputs that wait for the flush).
///
/// Each peer shard gets its messages in the order the PGs produced them (a replica
/// must see a push before the write that needed it, and RepOps in version order): a
/// `RepOp` to a shard that some held output in `outputs` also goes to is held too,
/// behind it. Held outputs are few per turn, so the scan is short.
pub fn take_outputs_before_flush(outputs: &mut Vec<Output>, start: usize, now: &mut Vec<Output>) {
    assert!(
        start <= outputs.len(),
        "start {start} past {}",
        outputs.len()
    );
    let mut index = start;
    while index < outputs.len() {
        let output = &outputs[index];
        let leaves = output.may_leave_before_flush()
            && !output.peer_key().is_some_and(|key| {
                outputs[..index]
                    .iter()
                    .any(|held| held.peer_key() == Some(key))
            });
        if leaves {
            now.push(outputs.remove(index));
        } else {
            index += 1;
        }
    }
}
