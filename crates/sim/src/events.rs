//! The event queue: everything that will happen, ordered by virtual time and, at equal
//! times, by the order it was scheduled. That total order is what makes a run
//! reproducible.

use crate::network::{Endpoint, SessionId, Wire};
use crate::time::Nanos;
use carmine_client::Target;
use carmine_types::OsdId;
use std::collections::BTreeMap;

/// Events one run may process before the simulator declares a livelock.
pub const EVENTS_PER_RUN_MAX: u64 = 20_000_000;

/// Something that happens at a point of virtual time.
#[derive(Debug)]
pub enum Event {
    /// A message arrives (if the network still lets it).
    Deliver(Box<Wire>),
    /// `endpoint` learns that `session` closed.
    SessionClosed {
        session: SessionId,
        endpoint: Endpoint,
    },
    /// An OSD (re)connects to the monitor and boots.
    OsdConnectMon(OsdId),
    ClientConnectMon(u32),
    /// A client's connection attempt to `target` failed.
    ClientUnreachable {
        client: u32,
        target: Target,
    },
    /// Periodic: objecter timeouts and retries.
    ClientTick(u32),
    /// The client's workload issues its next op.
    ClientIssue(u32),
    /// Periodic: an OSD reports its stats to the monitor.
    OsdStats(OsdId),
    /// A shard has news for the monitor (a pg_temp or up_thru request): the OSD
    /// reports now, as the daemon does, outside the period.
    OsdStatsUrgent(OsdId),
    OsdTick(OsdId),
    /// Periodic, per monitor rank: Raft's clock, the down/out timers; rank 0's also
    /// runs the convergence watch (whether or not that monitor is running).
    MonTick(u64),
    /// Monitor `from` (re)opens its outgoing session to peer monitor `to`.
    MonConnectPeer {
        from: u64,
        to: u64,
    },
    /// A crashed monitor starts again from its persisted store.
    MonRestart(u64),
    /// The warm-up is over: clients start their workload, faults start.
    StartWorkload,
    /// Inject the next random fault.
    Fault,
    /// Undo fault number `fault` (heal a partition, end a slow link).
    EndFault(u64),
    OsdRestart(OsdId),
    /// A LogStore shard's disk finishes its sync (only for the process start `start`:
    /// a sync scheduled before a crash never completes).
    DiskSync {
        osd: OsdId,
        shard: carmine_types::ShardIndex,
        start: u64,
    },
    /// Flip a bit of data at rest (the bit-flip fault class).
    BitFlip,
    /// Periodic (with bit flips): every up OSD runs a deep-scrub step.
    Scrub,
    /// Arm the next disk error (the disk-error fault class).
    DiskError,
    /// Squeeze the next MemStore (the space fault class).
    SpaceSqueeze,
    /// The operator changes an OSD's setting (the remap fault class).
    Remap,
    /// The operator sets one back.
    RemapRestore(crate::remaps::Setting),
    /// The operator starts a new OSD (the expansion class).
    Deploy(carmine_types::OsdId),
    /// A disk dies and is replaced, if the cluster has converged (the replacement
    /// class).
    DiskDies,
    /// The operator starts the OSD on its new disk (or waits for its `lost` mark).
    ReplacementStarts(OsdId),
    /// The operator starts retiring an OSD (the decommission class).
    Decommission,
    /// The operator's next look at the retirement.
    DecommissionStep,
    /// A squeezed store gets its room back.
    SpaceRelease {
        osd: OsdId,
        shard: carmine_types::ShardIndex,
    },
    /// A store of `osd` has failed: the process (start `start`) stops.
    StoreFailed {
        osd: OsdId,
        start: u64,
    },
    /// The fault phase ends: heal everything, restart every crashed OSD and monitor.
    Quiet,
    /// Clients stop issuing new ops.
    StopWorkload,
    /// The run is over, whatever its state.
    Deadline,
}

/// Events by `(time, scheduling order)`.
#[derive(Debug, Default)]
pub struct EventQueue {
    events: BTreeMap<(Nanos, u64), Event>,
    next_seq: u64,
}

impl EventQueue {
    pub fn push(&mut self, at: Nanos, event: Event) {
        self.events.insert((at, self.next_seq), event);
        self.next_seq += 1;
    }

    pub fn pop(&mut self) -> Option<(Nanos, u64, Event)> {
        let ((at, seq), event) = self.events.pop_first()?;
        Some((at, seq, event))
    }
}
