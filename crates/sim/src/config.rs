//! What a seed chooses: the cluster's shape, the workload and the fault rates; and
//! which fault classes a run may inject.

use crate::disk::DiskKind;
use crate::network::LatencyConfig;
use crate::rng::Rng;
use crate::time::{Nanos, MICROSECOND, MILLISECOND, SECOND};
use carmine_osd::OsdTuning;
use serde::Serialize;

/// Kinds of fault. The default set is what the current code is expected to survive;
/// crashes and partitions that involve OSDs need peering and recovery (issue 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FaultClasses {
    /// Random latency, spikes and so reordering across links (always on when faults
    /// are on at all; listed for the CLI).
    pub delays: bool,
    /// Client session resets: client ↔ OSD and client ↔ monitor.
    pub resets: bool,
    /// OSD ↔ monitor session resets: the OSD reconnects and boots again, which the
    /// monitor turns into a down map and an up map (a new interval for its PGs).
    pub osd_mon_resets: bool,
    /// A link becomes 20–100× slower for a while.
    pub slow_links: bool,
    /// A client is cut off from some OSDs or the monitor for a while.
    pub client_partitions: bool,
    /// OSDs are cut off from each other or from the monitor, both ways or one way.
    pub osd_partitions: bool,
    /// An OSD process crashes and restarts later on the same store.
    pub crashes: bool,
    /// A bit of data at rest flips on one OSD's LogStore device (LogStore seeds only):
    /// the OSDs must find the corrupt copy (by a read or a scrub) and repair it.
    pub bit_flips: bool,
    /// A monitor crashes and restarts later from its persisted Raft store.
    pub mon_crashes: bool,
    /// Monitors are cut off from each other: a minority, or the leader.
    pub mon_partitions: bool,
    /// One OSD shard's LogStore device fails its writes (LogStore seeds only): the
    /// store puts itself out of service, the OSD stops and restarts later. Not in
    /// [`FaultClasses::ALL`] yet (see `crate::disk_errors`).
    pub disk_errors: bool,
    /// One OSD shard's MemStore is squeezed to little more than it holds for a while
    /// (MemStore seeds only): writes find no room. Not in [`FaultClasses::ALL`] (see
    /// `crate::space`).
    pub space: bool,
    /// An operator marks OSDs out, reweights them and changes their primary affinity
    /// for a while: data moves. Not in [`FaultClasses::ALL`] (see `crate::remaps`).
    pub remaps: bool,
    /// An operator adds one or two new OSDs to the running cluster: data moves to
    /// them. Not in [`FaultClasses::ALL`] (see `crate::expansion`).
    pub expansion: bool,
    /// An OSD's disk dies and is replaced by an empty one; the OSD starts again on it
    /// under the same id, as it is or after the operator marked it lost or purged it. Not in
    /// [`FaultClasses::ALL`] (see `crate::replacement`).
    pub replacements: bool,
    /// An operator retires one OSD for good: out, `safe-to-destroy`, stop, purge. Not
    /// in [`FaultClasses::ALL`] (see `crate::decommission`).
    pub decommission: bool,
}

impl Default for FaultClasses {
    fn default() -> Self {
        Self::handled()
    }
}

impl FaultClasses {
    pub const NONE: FaultClasses = FaultClasses {
        delays: false,
        resets: false,
        osd_mon_resets: false,
        slow_links: false,
        client_partitions: false,
        osd_partitions: false,
        crashes: false,
        bit_flips: false,
        mon_crashes: false,
        mon_partitions: false,
        disk_errors: false,
        space: false,
        remaps: false,
        expansion: false,
        replacements: false,
        decommission: false,
    };

    pub const ALL: FaultClasses = FaultClasses {
        delays: true,
        resets: true,
        osd_mon_resets: true,
        slow_links: true,
        client_partitions: true,
        osd_partitions: true,
        crashes: true,
        bit_flips: true,
        mon_crashes: true,
        mon_partitions: true,
        // Not in `all`: see `crate::disk_errors` (`--faults all,disk-errors` adds it).
        disk_errors: false,
        // Not in `all`: see `crate::space` (`--faults all,space`).
        space: false,
        // Not in `all`: see `crate::remaps` (`--faults all,remaps`).
        remaps: false,
        // Not in `all`: see `crate::expansion` (`--faults all,expansion`).
        expansion: false,
        // Not in `all`: see `crate::replacement` (`--faults all,replacements`).
        replacements: false,
        // Not in `all`: see `crate::decommission` (`--faults all,decommission`).
        decommission: false,
    };

    /// The classes the code handles today (see the crate docs for the others). Bit
    /// flips are handled but left out, so the network-fault seed set keeps its runs.
    pub fn handled() -> FaultClasses {
        FaultClasses {
            osd_mon_resets: false,
            osd_partitions: false,
            crashes: false,
            bit_flips: false,
            disk_errors: false,
            space: false,
            remaps: false,
            expansion: false,
            replacements: false,
            decommission: false,
            ..Self::ALL
        }
    }

    /// Whether OSDs may leave acting sets (crashes, partitions, monitor resets, an OSD
    /// stopping on a disk error).
    pub fn moves_osds(&self) -> bool {
        self.osd_mon_resets
            || self.osd_partitions
            || self.crashes
            || self.disk_errors
            || self.remaps
            || self.expansion
            || self.replacements
            || self.decommission
    }

    /// Parses `all`, `none`, `handled`, or a comma list of `delays`, `resets`,
    /// `osd-mon-resets`, `slow`, `client-partitions`, `osd-partitions`, `crashes`,
    /// `bit-flips`, `mon-crashes`, `mon-partitions`, `disk-errors`, `space`, `remaps`,
    /// `expansion`, `replacements`, `decommission`.
    pub fn parse(text: &str) -> Result<FaultClasses, String> {
        let mut classes = FaultClasses::NONE;
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "all" => classes = Self::ALL,
                "none" => classes = Self::NONE,
                "handled" => classes = Self::handled(),
                "delays" => classes.delays = true,
                "resets" => classes.resets = true,
                "osd-mon-resets" => classes.osd_mon_resets = true,
                "slow" => classes.slow_links = true,
                "client-partitions" => classes.client_partitions = true,
                "osd-partitions" => classes.osd_partitions = true,
                "crashes" => classes.crashes = true,
                "bit-flips" => classes.bit_flips = true,
                "mon-crashes" => classes.mon_crashes = true,
                "mon-partitions" => classes.mon_partitions = true,
                "disk-errors" => classes.disk_errors = true,
                "space" => classes.space = true,
                "remaps" => classes.remaps = true,
                "expansion" => classes.expansion = true,
                "replacements" => classes.replacements = true,
                "decommission" => classes.decommission = true,
                other => {
                    return Err(format!(
                        "unknown fault class '{other}'; use all, none, handled, delays, \
                         resets, osd-mon-resets, slow, client-partitions, osd-partitions, \
                         crashes, bit-flips, mon-crashes, mon-partitions, disk-errors, \
                         space, remaps, expansion, replacements or decommission"
                    ))
                }
            }
        }
        Ok(classes)
    }

    /// The `--faults` argument that parses back to these classes.
    pub fn to_arg(&self) -> String {
        if *self == Self::ALL {
            return "all".into();
        }
        if *self == Self::handled() {
            return "handled".into();
        }
        let names = [
            (self.delays, "delays"),
            (self.resets, "resets"),
            (self.osd_mon_resets, "osd-mon-resets"),
            (self.slow_links, "slow"),
            (self.client_partitions, "client-partitions"),
            (self.osd_partitions, "osd-partitions"),
            (self.crashes, "crashes"),
            (self.bit_flips, "bit-flips"),
            (self.mon_crashes, "mon-crashes"),
            (self.mon_partitions, "mon-partitions"),
            (self.disk_errors, "disk-errors"),
            (self.space, "space"),
            (self.remaps, "remaps"),
            (self.expansion, "expansion"),
            (self.replacements, "replacements"),
            (self.decommission, "decommission"),
        ];
        let on: Vec<&str> = names
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, n)| *n)
            .collect();
        if on.is_empty() {
            "none".into()
        } else {
            on.join(",")
        }
    }

    pub fn any_injected(&self) -> bool {
        self.resets
            || self.osd_mon_resets
            || self.slow_links
            || self.client_partitions
            || self.osd_partitions
            || self.crashes
            || self.mon_crashes
            || self.mon_partitions
    }
}

/// A deliberately broken mode that the checkers must catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Canary {
    Off,
    /// The network drops the first replicated write to one replica and forges that
    /// replica's acknowledgement: the primary acknowledges a write that a replica
    /// never committed ("acknowledge before replicas commit").
    ForgedReplicaAck,
    /// Every OSD runs LogStore, and the stores report transactions durable as soon as
    /// they are submitted, before their sync ("acknowledge before the disk has it"):
    /// a crash then loses acknowledged writes.
    AckBeforeSync,
    /// With bit flips, the OSDs never scrub: a flipped copy that no client read or
    /// push touches stays corrupt, and the convergence check must say so.
    NoScrub,
    /// A monitor publishes a second map of its own making, outside Raft, for an epoch
    /// it applied (the map is only recorded, not sent): the monitor checker must see
    /// two maps for one epoch.
    MonLocalEpoch,
    /// The OSD shards are never given a clock, so no read lease is enforced (the
    /// OSD before leases): a primary cut off from its peers serves stale reads, and
    /// the linearizability checker must see them on the seeds that once failed so.
    NoLeases,
}

/// How [`SimConfig::shape`] ends for the snapshot workloads (the report's reproduce
/// line reads it back).
pub const SHAPE_SNAPSHOTS: &str = ", snapshots";
pub const SHAPE_SNAP_TRIM: &str = ", snapshots with removal";

/// One run's settings. [`SimConfig::from_seed`] draws them.
#[derive(Debug, Clone, Serialize)]
pub struct SimConfig {
    pub seed: u64,
    /// Monitors: 1, 3 or 5, replicated with Raft.
    pub mon_count: u64,
    pub osd_count: u32,
    pub shards_per_osd: u16,
    pub pool_size: u8,
    pub pg_num: u32,
    pub client_count: u32,
    pub faults: FaultClasses,
    /// Mean time between injected faults.
    pub fault_interval_mean: Nanos,
    /// Per-class weights of the fault chooser (seed-chosen rates).
    pub fault_weights: FaultWeights,
    pub warmup: Nanos,
    pub fault_phase: Nanos,
    /// How long clients keep issuing ops after the fault phase.
    pub quiet_workload: Nanos,
    /// Time after the fault phase within which every PG must be active+clean.
    pub converge_bound: Nanos,
    /// Time after the fault phase at which the run stops, done or not.
    pub quiet_max: Nanos,
    pub op_interval_mean: Nanos,
    pub ops_in_flight_max: u32,
    pub op_timeout: Nanos,
    pub shared_objects: u32,
    pub private_objects: u32,
    #[serde(skip)]
    pub latency: LatencyConfig,
    pub canary: Canary,
    /// Keep every event in words in the report, messages written out whole (slow; for
    /// debugging one seed).
    pub full_trace: bool,
    /// With `full_trace`, the daemons' `tracing` lines matching this filter (from
    /// `CARMINE_LOG`) are kept in the trace after the event that logged them.
    #[serde(skip)]
    pub daemon_log: Option<String>,
    /// The OSDs' store: MemStore, or LogStore on a crash-faulty device.
    pub disk: DiskKind,
    /// How long a LogStore shard's sync takes.
    pub disk_latency_min: Nanos,
    pub disk_latency_max: Nanos,
    /// The OSDs' internal limits; half the seeds shrink them (BUGGIFY), the PG log
    /// length included.
    #[serde(skip)]
    pub tuning: OsdTuning,
    pub buggify: bool,
    /// Clients take self-managed snapshots: writes carry snapshot contexts, some
    /// reads go to a snapshot, and the checkers follow clones (`--snapshots`; off by
    /// default so that every other seed draws the workload it always did).
    pub snapshots: bool,
    /// With `snapshots`, clients also remove snapshots through the monitor, the OSDs
    /// trim their clones under faults, and the checkers follow the trims
    /// (`--snap-trim`; off by default for the same reason).
    pub snap_trim: bool,
}

/// Relative rates of each fault kind.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FaultWeights {
    pub reset: u64,
    pub osd_mon_reset: u64,
    pub slow_link: u64,
    pub client_partition: u64,
    pub osd_partition: u64,
    pub crash: u64,
    pub mon_crash: u64,
    pub mon_partition: u64,
}

impl SimConfig {
    /// Everything drawn from `seed`, with the default fault classes.
    pub fn from_seed(seed: u64) -> SimConfig {
        let mut rng = Rng::new(seed).fork(0x0053_4841_5045); // "SHAPE"
        let osd_count = rng.between(3, 5) as u32;
        let pool_size = rng.between(2, 3) as u8;
        SimConfig {
            seed,
            mon_count: 1,
            osd_count,
            shards_per_osd: rng.between(1, 2) as u16,
            pool_size,
            pg_num: rng.between(4, 16) as u32,
            client_count: rng.between(1, 3) as u32,
            faults: FaultClasses::default(),
            fault_interval_mean: rng.between(200, 2_000) * MILLISECOND,
            fault_weights: FaultWeights {
                reset: rng.between(1, 10),
                osd_mon_reset: rng.between(1, 5),
                slow_link: rng.between(0, 5),
                client_partition: rng.between(0, 5),
                osd_partition: rng.between(0, 5),
                crash: rng.between(0, 5),
                mon_crash: 0,
                mon_partition: 0,
            },
            warmup: 2 * SECOND,
            fault_phase: rng.between(5, 12) * SECOND,
            quiet_workload: 2 * SECOND,
            converge_bound: 20 * SECOND,
            quiet_max: 60 * SECOND,
            op_interval_mean: rng.between(10, 40) * MILLISECOND,
            ops_in_flight_max: rng.between(1, 4) as u32,
            op_timeout: 30 * SECOND,
            shared_objects: rng.between(1, 4) as u32,
            private_objects: rng.between(1, 4) as u32,
            latency: LatencyConfig {
                base_min: rng.between(10, 100) * MICROSECOND,
                base_max: rng.between(200, 3_000) * MICROSECOND,
                spike_one_in: rng.between(50, 500),
                spike: rng.between(5, 50) * MILLISECOND,
            },
            canary: Canary::Off,
            full_trace: false,
            daemon_log: None,
            disk: DiskKind::Mem,
            disk_latency_min: 0,
            disk_latency_max: 0,
            tuning: OsdTuning::default(),
            buggify: false,
            snapshots: false,
            snap_trim: false,
        }
        .with_disk_from_seed(seed)
        .with_buggify_from_seed(seed)
        .with_mons_from_seed(seed)
    }

    /// The monitors and their fault rates from their own stream of the seed, so the
    /// shapes drawn above stay what they were with one monitor: 1, 3 or 5 monitors
    /// (two seeds in five each for 1 and 3, one in five for 5).
    fn with_mons_from_seed(mut self, seed: u64) -> SimConfig {
        let mut rng = Rng::new(seed).fork(0x4d4f_4e53); // "MONS"
        self.mon_count = [1, 1, 3, 3, 5][rng.below(5) as usize];
        self.fault_weights.mon_crash = rng.between(0, 3);
        self.fault_weights.mon_partition = rng.between(0, 4);
        self
    }

    /// `count` monitors instead of the seed's choice.
    pub fn with_mons(mut self, count: u64) -> SimConfig {
        self.mon_count = count.max(1);
        self
    }

    /// BUGGIFY, from its own stream of the seed: tiny push windows and batches (so
    /// recovery takes many round trips), tiny op and map-wait queues (ops bounce with
    /// `Busy` and are resent), and a PG log of 8–64 entries, so that a copy that misses
    /// a few dozen writes is no longer covered by the log and is backfilled. (The
    /// checkers keep their own record of trimmed entries, [`crate::log_record`].)
    fn with_buggify_from_seed(mut self, seed: u64) -> SimConfig {
        let mut rng = Rng::new(seed).fork(0x4255_4747); // "BUGG"
        if rng.between(0, 1) == 1 {
            self.buggify = true;
            self.tuning = OsdTuning {
                log_entries_max: OsdTuning::default().log_entries_max,
                waiting_ops_max: rng.between(4, 64) as usize,
                in_flight_writes_max: rng.between(1, 16) as usize,
                pushes_in_flight_max: rng.between(1, 3) as usize,
                objects_per_push_max: rng.between(1, 4) as usize,
                waiting_for_map_max: rng.between(16, 256) as usize,
                recovery_max_active: rng.between(1, 4) as usize,
                pull_before_active_max: rng.between(0, 4) as usize,
                lease_duration: OsdTuning::default().lease_duration,
                max_backfills: OsdTuning::default().max_backfills,
                mclock: OsdTuning::default().mclock,
            };
            // Drawn last, so the limits above are what they were before it.
            self.tuning.log_entries_max = rng.between(8, 64) as usize;
            // A read lease of 0.3-3 s: short ones lapse under slow links (laggy),
            // long ones make new primaries wait.
            let lease_ms = rng.between(300, 3000);
            self.tuning.lease_duration = std::time::Duration::from_millis(lease_ms);
            // The recovery scheduler, drawn after everything above: a low limit and
            // reservation (down to 4 small pushes a second), clients that always or
            // never count as busy, and uneven weights, so recovery waits on its tags.
            let mib = 1u64 << 20;
            let limit = rng.between(mib / 4, 64 * mib);
            self.tuning.mclock = carmine_osd::MclockSettings {
                limit_bytes_per_s: limit,
                reservation_bytes_per_s: rng.between(0, limit / 4),
                client_weight: rng.between(1, 20) as u32,
                recovery_weight: rng.between(1, 4) as u32,
                client_idle_below_bytes_per_s: [0, mib, 16 * mib][rng.below(3) as usize],
                op_cost_bytes: 64 << 10,
            };
        }
        self
    }

    /// The daemons' limits instead of the seed's BUGGIFY choice.
    pub fn without_buggify(mut self) -> SimConfig {
        self.buggify = false;
        self.tuning = OsdTuning::default();
        self
    }

    /// The disk from its own stream of the seed, so the shape drawn above stays what
    /// it was before disks were simulated: half the seeds run LogStore.
    fn with_disk_from_seed(mut self, seed: u64) -> SimConfig {
        let mut rng = Rng::new(seed).fork(0x4449_534b); // "DISK"
        if rng.between(0, 1) == 1 {
            self.disk = DiskKind::Log;
            self.disk_latency_min = rng.between(20, 200) * MICROSECOND;
            self.disk_latency_max = self.disk_latency_min + rng.between(0, 5) * MILLISECOND;
        }
        self
    }

    pub fn with_snapshots(mut self, snapshots: bool) -> SimConfig {
        self.snapshots = snapshots;
        self
    }

    /// The snapshot workload with snapshot removal (implies `with_snapshots`).
    pub fn with_snap_trim(mut self, snap_trim: bool) -> SimConfig {
        self.snap_trim = snap_trim;
        self.snapshots |= snap_trim;
        self
    }

    /// Every OSD on `disk` (overriding the seed's choice).
    pub fn with_disk(mut self, disk: DiskKind) -> SimConfig {
        if disk == DiskKind::Log && self.disk_latency_max == 0 {
            self.disk_latency_min = 50 * MICROSECOND;
            self.disk_latency_max = 2 * MILLISECOND;
        }
        self.disk = disk;
        self
    }

    pub fn with_faults(mut self, faults: FaultClasses) -> SimConfig {
        self.faults = faults;
        self
    }

    pub fn with_canary(mut self, canary: Canary) -> SimConfig {
        self.canary = canary;
        if canary == Canary::AckBeforeSync {
            self = self.with_disk(DiskKind::Log);
        }
        self
    }

    /// A one-line summary of the shape, for reports.
    pub fn shape(&self) -> String {
        format!(
            "{} mon{}, {} osds x {} shards ({:?} store{}), size {}, pg_num {}, {} clients{}",
            self.mon_count,
            if self.mon_count == 1 { "" } else { "s" },
            self.osd_count,
            self.shards_per_osd,
            self.disk,
            if self.buggify { ", buggify" } else { "" },
            self.pool_size,
            self.pg_num,
            self.client_count,
            match (self.snapshots, self.snap_trim) {
                (_, true) => SHAPE_SNAP_TRIM,
                (true, false) => SHAPE_SNAPSHOTS,
                (false, false) => "",
            }
        )
    }
}
