//! The OSD's internal limits, in one place so the simulator can shrink them (its
//! BUGGIFY-style hooks): a tiny PG log makes members fall behind the log and take the
//! backfill path, a tiny push window and batch stretch recovery across many round
//! trips, tiny queues make ops bounce with `Busy`. Daemons use [`OsdTuning::default`].

use crate::pg::peering::PULL_BEFORE_ACTIVE_MAX;
use crate::pg::recovery::{OBJECTS_PER_PUSH_MAX, PUSHES_IN_FLIGHT_MAX};
use crate::pg::LEASE_DURATION;
use crate::pg::{IN_FLIGHT_WRITES_MAX, WAITING_OPS_MAX};
use crate::pglog::LOG_ENTRIES_MAX;
use crate::recovery_sched::MclockSettings;
use crate::reserver::MAX_BACKFILLS;
use crate::shard::WAITING_FOR_MAP_MAX;

/// Default shard-wide cap on recovery pushes in flight (each one object).
pub const RECOVERY_MAX_ACTIVE: usize = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OsdTuning {
    /// Read lease length (`osd_read_lease_interval` in the map's config overrides
    /// it): how long a primary cut off from its peers may go on serving reads, and so
    /// how long a new primary may have to wait before serving. Keep it well under the
    /// heartbeat grace, so after a crash the promises have run out before failover.
    pub lease_duration: std::time::Duration,
    /// Entries a PG log keeps before trimming the oldest.
    pub log_entries_max: usize,
    /// Ops a PG holds while inactive, and reads blocked behind writes.
    pub waiting_ops_max: usize,
    /// Writes a PG keeps in flight.
    pub in_flight_writes_max: usize,
    /// Pushes in flight per recovering replica.
    pub pushes_in_flight_max: usize,
    /// Objects per push message.
    pub objects_per_push_max: usize,
    /// Messages a shard holds until it has the sender's map epoch.
    pub waiting_for_map_max: usize,
    /// Recovery pushes a shard keeps in flight over all its PGs (Ceph's
    /// `osd_recovery_max_active`): recovery shares the shard's core and sessions with
    /// client IO, so it gets a bounded slice of them.
    pub recovery_max_active: usize,
    /// When recovery may push, against client IO: reservation, limit and weights
    /// (see `recovery_sched.rs`; the map's `osd_mclock_*` keys override them).
    pub mclock: MclockSettings,
    /// Most objects a primary pulls before it activates; with more to copy it asks
    /// for a pg_temp led by a complete copy instead (0: whenever it lacks anything).
    pub pull_before_active_max: usize,
    /// Recovery/backfill reservation slots per shard, local and remote (Ceph's
    /// `osd_max_backfills`): at most this many PGs push from, and into, one shard
    /// at a time (see `reserver.rs`).
    pub max_backfills: usize,
}

impl Default for OsdTuning {
    fn default() -> Self {
        Self {
            lease_duration: LEASE_DURATION,
            log_entries_max: LOG_ENTRIES_MAX,
            waiting_ops_max: WAITING_OPS_MAX,
            in_flight_writes_max: IN_FLIGHT_WRITES_MAX,
            pushes_in_flight_max: PUSHES_IN_FLIGHT_MAX,
            objects_per_push_max: OBJECTS_PER_PUSH_MAX,
            waiting_for_map_max: WAITING_FOR_MAP_MAX,
            recovery_max_active: RECOVERY_MAX_ACTIVE,
            mclock: MclockSettings::default(),
            pull_before_active_max: PULL_BEFORE_ACTIVE_MAX,
            max_backfills: MAX_BACKFILLS,
        }
    }
}

impl OsdTuning {
    /// Every limit at least 1 (a zero would stall, not stress).
    pub fn sanitized(self) -> Self {
        Self {
            lease_duration: self.lease_duration.max(crate::pg::LEASE_DURATION_MIN),
            log_entries_max: self.log_entries_max.max(1),
            waiting_ops_max: self.waiting_ops_max.max(1),
            in_flight_writes_max: self.in_flight_writes_max.max(1),
            pushes_in_flight_max: self.pushes_in_flight_max.max(1),
            objects_per_push_max: self.objects_per_push_max.max(1),
            waiting_for_map_max: self.waiting_for_map_max.max(1),
            recovery_max_active: self.recovery_max_active.max(1),
            mclock: self.mclock.sanitized(),
            pull_before_active_max: self.pull_before_active_max,
            max_backfills: self.max_backfills.max(1),
        }
    }
}
