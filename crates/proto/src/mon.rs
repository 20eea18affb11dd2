//! Messages to and from the monitor: map subscription, OSD boot and stats, and the
//! operator's commands.

use bytes::Bytes;
use carmine_clustermap::{
    MapAdvance, OsdMap, OsdMapIncremental, PoolSpec, CONFIG_KEY_BYTES_MAX, CONFIG_VALUE_BYTES_MAX,
    OSD_MAP_VERSION,
};
use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
use carmine_types::limits::POOL_NAME_BYTES_MAX;
use carmine_types::{EVersion, EntityName, Epoch, OsdId, PgId};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

/// Asks for the map if the monitor has one newer than `have`; with `subscribe`, every
/// later epoch is pushed too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonGetMap {
    pub have: Epoch,
    pub subscribe: bool,
}

/// Map updates from the monitor, as Ceph's `MOSDMap`: a full map (to a newcomer or a
/// subscriber too far behind), a run of consecutive incrementals (to one that holds an
/// epoch the monitor still has the changes after), or a full map and the incrementals
/// that follow it. Subscribers apply it with [`OsdMapMsg::advance`].
#[derive(Debug, Clone, PartialEq)]
pub struct OsdMapMsg {
    pub full: Option<Arc<OsdMap>>,
    /// Oldest first, each the epoch after the one before (and after `full`, if any).
    pub incrementals: Vec<Arc<OsdMapIncremental>>,
}

/// Most incrementals one map message carries; the monitor splits longer runs.
pub const MAP_INCREMENTALS_PER_MESSAGE_MAX: usize = 256;

impl OsdMapMsg {
    pub fn full(map: Arc<OsdMap>) -> Self {
        Self {
            full: Some(map),
            incrementals: Vec::new(),
        }
    }

    pub fn incrementals(incrementals: Vec<Arc<OsdMapIncremental>>) -> Self {
        assert!(!incrementals.is_empty(), "a map message carries a map");
        Self {
            full: None,
            incrementals,
        }
    }

    /// The newest epoch the message brings.
    pub fn newest_epoch(&self) -> Epoch {
        let from_full = self.full.as_ref().map(|m| m.epoch);
        let from_incrementals = self.incrementals.last().map(|i| i.epoch);
        from_incrementals.or(from_full).unwrap_or(Epoch(0))
    }

    /// What the message does for a subscriber holding `held` (see
    /// [`carmine_clustermap::advance`]).
    pub fn advance(&self, held: Option<&Arc<OsdMap>>) -> MapAdvance {
        carmine_clustermap::advance(held, self.full.as_ref(), &self.incrementals)
    }
}

/// An OSD announcing itself: its id, one address per shard, and its host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OsdBoot {
    pub osd: OsdId,
    pub shard_addrs: Vec<SocketAddr>,
    pub host: String,
    pub fsid: u128,
    /// Random per process start; tells a restart from a reconnect.
    pub instance: u64,
}

/// PG states, as bits that combine like Ceph's (`active+clean`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, PartialOrd, Ord, Hash)]
pub struct PgState(pub u32);

impl PgState {
    pub const CREATING: u32 = 1 << 0;
    pub const ACTIVE: u32 = 1 << 1;
    pub const CLEAN: u32 = 1 << 2;
    pub const DEGRADED: u32 = 1 << 3;
    pub const UNDERSIZED: u32 = 1 << 4;
    pub const PEERING: u32 = 1 << 5;
    pub const INACTIVE: u32 = 1 << 6;
    pub const STALE: u32 = 1 << 7;
    pub const DOWN: u32 = 1 << 8;
    pub const RECOVERING: u32 = 1 << 9;
    pub const BACKFILLING: u32 = 1 << 10;
    pub const INCOMPLETE: u32 = 1 << 11;
    /// The acting set differs from the up set (a pg_temp entry is in force).
    pub const REMAPPED: u32 = 1 << 12;
    /// Objects to backfill or recover, none in flight: waiting for the shard's
    /// recovery scheduler (Ceph's `backfill_wait` / `recovery_wait`).
    pub const BACKFILL_WAIT: u32 = 1 << 13;
    pub const RECOVERY_WAIT: u32 = 1 << 14;
    /// Active, but serving nothing until read leases granted to an earlier primary
    /// have run out (Ceph's `wait`).
    pub const WAIT: u32 = 1 << 15;
    /// Active, but the read lease from the other acting members lapsed: ops wait for
    /// a renewal or a new interval (Ceph's `laggy`).
    pub const LAGGY: u32 = 1 << 16;
    /// Objects to backfill, but a target refused for want of space (backfillfull or
    /// full): the primary tries again later (Ceph's `backfill_toofull`).
    pub const BACKFILL_TOOFULL: u32 = 1 << 17;
    /// Objects to recover from the log, but a target refused for want of space (it is
    /// full): the primary tries again later (Ceph's `recovery_toofull`).
    pub const RECOVERY_TOOFULL: u32 = 1 << 18;
    /// Deleting the clones of removed snapshots (Ceph's `snaptrim`).
    pub const SNAPTRIM: u32 = 1 << 19;
    /// Clones to trim, but trimming waits (here: for the PG to be clean, as a trim is
    /// a write every copy must take; Ceph's `snaptrim_wait`).
    pub const SNAPTRIM_WAIT: u32 = 1 << 20;
    /// Active, but objects the PG's history holds have no reachable copy: reads and
    /// writes of them fail until an OSD holding them returns (Ceph's
    /// `recovery_unfound`).
    pub const RECOVERY_UNFOUND: u32 = 1 << 21;

    const NAMES: [(u32, &'static str); 22] = [
        (Self::CREATING, "creating"),
        (Self::ACTIVE, "active"),
        (Self::CLEAN, "clean"),
        (Self::DEGRADED, "degraded"),
        (Self::UNDERSIZED, "undersized"),
        (Self::PEERING, "peering"),
        (Self::INACTIVE, "inactive"),
        (Self::STALE, "stale"),
        (Self::DOWN, "down"),
        (Self::RECOVERING, "recovering"),
        (Self::BACKFILLING, "backfilling"),
        (Self::INCOMPLETE, "incomplete"),
        (Self::REMAPPED, "remapped"),
        (Self::BACKFILL_WAIT, "backfill_wait"),
        (Self::BACKFILL_TOOFULL, "backfill_toofull"),
        (Self::RECOVERY_WAIT, "recovery_wait"),
        (Self::RECOVERY_TOOFULL, "recovery_toofull"),
        (Self::RECOVERY_UNFOUND, "recovery_unfound"),
        (Self::WAIT, "wait"),
        (Self::LAGGY, "laggy"),
        (Self::SNAPTRIM, "snaptrim"),
        (Self::SNAPTRIM_WAIT, "snaptrim_wait"),
    ];

    pub fn contains(self, bit: u32) -> bool {
        self.0 & bit != 0
    }

    /// `active+clean`, `active+undersized+degraded`, ... (`unknown` when empty).
    pub fn name(self) -> String {
        let names: Vec<&str> = Self::NAMES
            .iter()
            .filter(|(bit, _)| self.contains(*bit))
            .map(|(_, name)| *name)
            .collect();
        if names.is_empty() {
            "unknown".into()
        } else {
            names.join("+")
        }
    }
}

/// A primary's report on one PG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgStat {
    pub pgid: PgId,
    pub state: PgState,
    pub object_count: u64,
    pub data_bytes: u64,
    pub last_update: EVersion,
    pub acting: Vec<OsdId>,
    /// The epoch the reporting primary's current interval started.
    pub interval_start: Epoch,
    /// The temporary acting set the primary asks the monitor for (Ceph's pg_temp
    /// request, carried with the stats so a lost request is repeated by the next
    /// report): its copy lacks data that a complete member can serve meanwhile.
    /// Empty: no request (encoding v3).
    pub want_acting: Vec<OsdId>,
    /// Why the PG is not active, in one sentence starting with the state it explains
    /// ("down: …", "incomplete: …", "peering: waiting for …"); empty when active or
    /// from a reporter before encoding v4. At most [`PG_STAT_REASON_BYTES_MAX`] bytes.
    pub reason: String,
    /// The `up_thru` the primary waits for before it activates the PG (its interval's
    /// start; see `OsdInfo::up_thru`), repeated by every report until a map brings it.
    /// `Epoch(0)`: it waits for none (encoding v5; 0 from older).
    pub want_up_thru: Epoch,
    /// Objects of the PG with no reachable copy (Ceph's unfound objects; encoding v6,
    /// 0 from older).
    pub unfound: u64,
}

/// The longest [`PgStat::reason`] carried (a reporter cuts a longer one short).
pub const PG_STAT_REASON_BYTES_MAX: usize = 512;

impl PgStat {
    /// Cuts `reason` to at most [`PG_STAT_REASON_BYTES_MAX`] bytes, at a character
    /// boundary, marking the cut with an ellipsis.
    pub fn bounded_reason(mut reason: String) -> String {
        if reason.len() <= PG_STAT_REASON_BYTES_MAX {
            return reason;
        }
        let ellipsis = "…";
        let mut end = PG_STAT_REASON_BYTES_MAX - ellipsis.len();
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
        reason.push_str(ellipsis);
        reason
    }
}

/// An OSD's periodic report: its primary PGs, its store usage, its op counters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OsdStats {
    pub osd: OsdId,
    pub map_epoch: Epoch,
    pub pgs: Vec<PgStat>,
    pub object_count: u64,
    pub data_bytes: u64,
    pub capacity_bytes: u64,
    /// Client ops completed since the OSD started (for rates).
    pub ops_total: u64,
    pub write_bytes_total: u64,
    pub read_bytes_total: u64,
    /// Client ops that reached a shard not owning their PG and were redirected
    /// (encoding v2; 0 from v1).
    pub wrong_shard_total: u64,
    /// Object copies found corrupt (a checksum failure on read, push or scrub) and
    /// copies replaced by a good one since the OSD started (encoding v3; 0 from older).
    pub corrupt_copies_found_total: u64,
    pub copies_repaired_total: u64,
    /// Bytes of xattrs, omap and metadata (the PG logs among them): with
    /// `data_bytes`, what the store holds against `capacity_bytes` (encoding v4; 0
    /// from older).
    pub metadata_bytes: u64,
}

/// Longest pool setting name or value in a `PoolSet` command.
pub const POOL_SETTING_BYTES_MAX: usize = 64;

/// An operator command for the monitor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    PoolCreate(PoolSpec),
    /// Deleting needs `confirm`, as Ceph's `--yes-i-really-really-mean-it`.
    PoolDelete {
        name: String,
        confirm: bool,
    },
    OsdDown(OsdId),
    OsdOut(OsdId),
    OsdIn(OsdId),
    Status,
    /// Set an OSD's primary affinity (16.16, 0..=0x10000), as `ceph osd primary-affinity`.
    OsdPrimaryAffinity(OsdId, u32),
    /// Set (`set: true`) or clear one of [`carmine_clustermap::OsdFlags`], as
    /// `ceph osd set|unset FLAG`.
    OsdFlag {
        flag: u32,
        set: bool,
    },
    /// An override weight (16.16, 0..=0x10000), as `ceph osd reweight`.
    OsdReweight(OsdId, u32),
    /// One pool setting, as `ceph osd pool set NAME KEY VALUE`.
    PoolSet {
        name: String,
        key: String,
        value: String,
    },
    /// Every PG's last report from its primary, as `ceph pg dump`.
    PgDump,
    /// Set (`Some`) or remove (`None`) a config key, as `ceph config-key set|rm`.
    ConfigSet {
        key: String,
        value: Option<String>,
    },
    /// Allocate a self-managed snapshot id in a pool (librados'
    /// `selfmanaged_snap_create`). The reply's message is
    /// [`snap_allocated_message`]; [`parse_snap_allocated`] reads the id back.
    PoolSnapCreate {
        pool: String,
    },
    /// Mark a self-managed snapshot id removed; OSDs trim its clones.
    PoolSnapRemove {
        pool: String,
        snap: u64,
    },
    /// Declare a down OSD's data lost, as `ceph osd lost N`; needs `confirm`, as
    /// Ceph's `--yes-i-really-mean-it`.
    OsdLost {
        osd: OsdId,
        confirm: bool,
    },
    /// Remove a down OSD from the map and the CRUSH hierarchy for good, as `ceph osd
    /// purge N --yes-i-really-mean-it`; refused unless `confirm`, and, unless `force`,
    /// unless [`Command::OsdSafeToDestroy`] would say yes.
    OsdPurge {
        osd: OsdId,
        confirm: bool,
        force: bool,
    },
    /// Whether removing an OSD would leave every PG's data on its other copies, as
    /// `ceph osd safe-to-destroy N`: answered at once, no map changes.
    OsdSafeToDestroy(OsdId),
}

/// The message of a successful [`Command::PoolSnapCreate`].
pub fn snap_allocated_message(pool: &str, snap: u64) -> String {
    format!("allocated snapshot id {snap} in pool '{pool}'")
}

/// The snapshot id in a [`snap_allocated_message`].
pub fn parse_snap_allocated(message: &str) -> Option<u64> {
    let rest = message.strip_prefix("allocated snapshot id ")?;
    rest.split(' ').next()?.parse().ok()
}

/// What a successful command returns.
// A reply lives only until it is printed or sent; boxing the status would cost more.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandOutput {
    Done {
        epoch: Epoch,
        message: String,
    },
    Status(ClusterStatus),
    /// The answer to [`Command::PgDump`]: the map epoch and the PGs, by id.
    PgStats {
        epoch: Epoch,
        pgs: Vec<PgStat>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonCommand {
    pub tid: u64,
    pub command: Command,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonCommandReply {
    pub tid: u64,
    pub result: Result<CommandOutput, String>,
}

/// Usage and object counts of one pool.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PoolStatus {
    pub name: String,
    pub id: u64,
    pub size: u8,
    pub min_size: u8,
    pub pg_num: u32,
    pub object_count: u64,
    pub data_bytes: u64,
}

/// Usage of one OSD.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OsdUsage {
    pub osd: OsdId,
    pub up: bool,
    pub weight: u32,
    pub object_count: u64,
    pub data_bytes: u64,
    pub capacity_bytes: u64,
    pub pg_count: u32,
    /// From the OSD's map entry and its last report (ClusterStatus encoding v3; 0
    /// from older encodings).
    pub shard_count: u16,
    pub ops_total: u64,
    pub wrong_shard_total: u64,
}

/// The cluster at a glance (`carmine status`, like `ceph -s`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterStatus {
    pub fsid: u128,
    pub epoch: Epoch,
    /// `HEALTH_OK`, `HEALTH_WARN` or `HEALTH_ERR`.
    pub health: String,
    /// One line per problem.
    pub health_checks: Vec<String>,
    pub mon_count: u32,
    pub osd_count: u32,
    pub osds_up: u32,
    pub osds_in: u32,
    pub pools: Vec<PoolStatus>,
    pub pg_count: u32,
    /// PG count by state name (`active+clean` → 64).
    pub pg_states: BTreeMap<String, u32>,
    pub object_count: u64,
    /// Logical bytes stored (one copy).
    pub data_bytes: u64,
    /// Bytes stored over all replicas.
    pub raw_used_bytes: u64,
    pub osds: Vec<OsdUsage>,
    pub client_ops_per_second: u64,
    pub client_write_bytes_per_second: u64,
    pub client_read_bytes_per_second: u64,
    /// The rank of the monitor leading the Raft group (encoding v2; `None` from v1).
    pub mon_leader: Option<u64>,
    /// Ranks of the monitors in quorum with the leader, ascending (v2; empty from v1).
    pub mon_quorum: Vec<u64>,
}

/// Raft traffic between monitors: one raft-rs `Message` in its protobuf encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonRaft {
    pub from_rank: u64,
    pub payload: Bytes,
}

/// A message that a monitor received from a client or an OSD (a command, a boot, a
/// stats report), passed on to the leader, which alone changes the map. The leader
/// answers a command with a [`MonCommandReply`] whose `tid` is `token`, sent to
/// `origin_rank`, which relays it to the client; a change it commits is answered by
/// the origin itself when it applies the entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonForward {
    pub origin_rank: u64,
    /// The origin's number for the request (0 when no answer is expected).
    pub token: u64,
    /// Who sent the inner message to the origin.
    pub sender: EntityName,
    /// The inner message: its wire type and encoded body.
    pub inner_type: u16,
    pub inner: Bytes,
}

// --- encoding -------------------------------------------------------------------

impl Encode for MonGetMap {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(1, 1, |e| {
            self.have.encode(e);
            self.subscribe.encode(e);
        });
    }
}

impl Decode for MonGetMap {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("MonGetMap", 1, |d, _| {
            Ok(MonGetMap {
                have: Epoch::decode(d)?,
                subscribe: bool::decode(d)?,
            })
        })
    }
}

/// The map message's envelope version. Before incrementals the message was a bare
/// `OsdMap`, whose envelope starts with the map's own version byte; numbering the
/// message from 16 keeps the two apart, so a bare map still decodes (as a full map).
const OSD_MAP_MSG_VERSION: u8 = 16;
const _: () = assert!(OSD_MAP_VERSION < OSD_MAP_MSG_VERSION);

impl Encode for OsdMapMsg {
    fn encode(&self, e: &mut Encoder) {
        assert!(self.incrementals.len() <= MAP_INCREMENTALS_PER_MESSAGE_MAX);
        e.versioned(OSD_MAP_MSG_VERSION, OSD_MAP_MSG_VERSION, |e| {
            match &self.full {
                None => e.put_u8(0),
                Some(map) => {
                    e.put_u8(1);
                    map.encode(e);
                }
            }
            e.put_u32(self.incrementals.len() as u32);
            for inc in &self.incrementals {
                inc.encode(e);
            }
        });
    }
}

impl Decode for OsdMapMsg {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        if d.clone().get_u8()? < OSD_MAP_MSG_VERSION {
            return Ok(OsdMapMsg::full(Arc::new(OsdMap::decode(d)?)));
        }
        d.versioned("OsdMapMsg", OSD_MAP_MSG_VERSION, |d, _| {
            let full = Option::<OsdMap>::decode(d)?.map(Arc::new);
            let count = d.get_count("map incrementals", 6)?;
            if count > MAP_INCREMENTALS_PER_MESSAGE_MAX {
                return Err(DecodeError::TooLong {
                    what: "map incrementals",
                    length: count,
                    limit: MAP_INCREMENTALS_PER_MESSAGE_MAX,
                });
            }
            let mut incrementals: Vec<Arc<OsdMapIncremental>> = Vec::with_capacity(count);
            let mut previous = full.as_ref().map(|m| m.epoch);
            for _ in 0..count {
                let inc = OsdMapIncremental::decode(d)?;
                if previous.is_some_and(|p| inc.epoch.0 != p.0 + 1) {
                    return Err(DecodeError::Invalid {
                        what: "map incremental out of sequence",
                        value: u64::from(inc.epoch.0),
                    });
                }
                previous = Some(inc.epoch);
                incrementals.push(Arc::new(inc));
            }
            if full.is_none() && incrementals.is_empty() {
                return Err(DecodeError::Invalid {
                    what: "map message with no map",
                    value: 0,
                });
            }
            Ok(OsdMapMsg { full, incrementals })
        })
    }
}

impl Encode for OsdBoot {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(2, 1, |e| {
            self.osd.encode(e);
            self.shard_addrs.encode(e);
            self.host.encode(e);
            e.put_u64(self.fsid as u64);
            e.put_u64((self.fsid >> 64) as u64);
            e.put_u64(self.instance);
        });
    }
}

impl Decode for OsdBoot {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("OsdBoot", 2, |d, version| {
            Ok(OsdBoot {
                osd: OsdId::decode(d)?,
                shard_addrs: Vec::decode(d)?,
                host: d.get_string("host", 256)?,
                fsid: u128::from(d.get_u64()?) | (u128::from(d.get_u64()?) << 64),
                instance: if version >= 2 { d.get_u64()? } else { 0 },
            })
        })
    }
}

impl Encode for PgStat {
    fn encode(&self, e: &mut Encoder) {
        assert!(
            self.reason.len() <= PG_STAT_REASON_BYTES_MAX,
            "reason too long"
        );
        e.versioned(6, 1, |e| {
            self.pgid.encode(e);
            e.put_u32(self.state.0);
            e.put_u64(self.object_count);
            e.put_u64(self.data_bytes);
            self.last_update.encode(e);
            self.acting.encode(e);
            self.interval_start.encode(e);
            self.want_acting.encode(e);
            self.reason.encode(e);
            self.want_up_thru.encode(e);
            e.put_u64(self.unfound);
        });
    }
}

impl Decode for PgStat {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("PgStat", 6, |d, version| {
            Ok(PgStat {
                pgid: PgId::decode(d)?,
                state: PgState(d.get_u32()?),
                object_count: d.get_u64()?,
                data_bytes: d.get_u64()?,
                last_update: EVersion::decode(d)?,
                acting: Vec::decode(d)?,
                interval_start: if version >= 2 {
                    Epoch::decode(d)?
                } else {
                    Epoch(0)
                },
                want_acting: if version >= 3 {
                    Vec::decode(d)?
                } else {
                    Vec::new()
                },
                reason: if version >= 4 {
                    d.get_string("pg stat reason", PG_STAT_REASON_BYTES_MAX)?
                } else {
                    String::new()
                },
                want_up_thru: if version >= 5 {
                    Epoch::decode(d)?
                } else {
                    Epoch(0)
                },
                unfound: if version >= 6 { d.get_u64()? } else { 0 },
            })
        })
    }
}

impl Encode for OsdStats {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(4, 1, |e| {
            self.osd.encode(e);
            self.map_epoch.encode(e);
            self.pgs.encode(e);
            for value in [
                self.object_count,
                self.data_bytes,
                self.capacity_bytes,
                self.ops_total,
                self.write_bytes_total,
                self.read_bytes_total,
                self.wrong_shard_total,
                self.corrupt_copies_found_total,
                self.copies_repaired_total,
                self.metadata_bytes,
            ] {
                e.put_u64(value);
            }
        });
    }
}

impl Decode for OsdStats {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("OsdStats", 4, |d, version| {
            Ok(OsdStats {
                osd: OsdId::decode(d)?,
                map_epoch: Epoch::decode(d)?,
                pgs: Vec::decode(d)?,
                object_count: d.get_u64()?,
                data_bytes: d.get_u64()?,
                capacity_bytes: d.get_u64()?,
                ops_total: d.get_u64()?,
                write_bytes_total: d.get_u64()?,
                read_bytes_total: d.get_u64()?,
                wrong_shard_total: if version >= 2 { d.get_u64()? } else { 0 },
                corrupt_copies_found_total: if version >= 3 { d.get_u64()? } else { 0 },
                copies_repaired_total: if version >= 3 { d.get_u64()? } else { 0 },
                metadata_bytes: if version >= 4 { d.get_u64()? } else { 0 },
            })
        })
    }
}

fn encode_pool_spec(e: &mut Encoder, spec: &PoolSpec) {
    spec.name.encode(e);
    e.put_u8(spec.size);
    spec.min_size.map(u32::from).encode(e);
    e.put_u32(spec.pg_num);
    e.put_u32(spec.crush_rule);
}

fn decode_pool_spec(d: &mut Decoder) -> Result<PoolSpec, DecodeError> {
    let name = d.get_string("pool name", POOL_NAME_BYTES_MAX)?;
    let size = d.get_u8()?;
    let min_size = Option::<u32>::decode(d)?.map(|v| v.min(255) as u8);
    Ok(PoolSpec {
        name,
        size,
        min_size,
        pg_num: d.get_u32()?,
        crush_rule: d.get_u32()?,
    })
}

impl Encode for Command {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(1, 1, |e| match self {
            Command::PoolCreate(spec) => {
                e.put_u8(1);
                encode_pool_spec(e, spec);
            }
            Command::PoolDelete { name, confirm } => {
                e.put_u8(2);
                name.encode(e);
                confirm.encode(e);
            }
            Command::OsdDown(osd) => {
                e.put_u8(3);
                osd.encode(e);
            }
            Command::OsdOut(osd) => {
                e.put_u8(4);
                osd.encode(e);
            }
            Command::OsdIn(osd) => {
                e.put_u8(5);
                osd.encode(e);
            }
            Command::Status => e.put_u8(6),
            Command::OsdPrimaryAffinity(osd, affinity) => {
                e.put_u8(7);
                osd.encode(e);
                e.put_u32(*affinity);
            }
            Command::OsdFlag { flag, set } => {
                e.put_u8(8);
                e.put_u32(*flag);
                set.encode(e);
            }
            Command::OsdReweight(osd, weight) => {
                e.put_u8(9);
                osd.encode(e);
                e.put_u32(*weight);
            }
            Command::PoolSet { name, key, value } => {
                e.put_u8(10);
                name.encode(e);
                key.encode(e);
                value.encode(e);
            }
            Command::PgDump => e.put_u8(11),
            Command::ConfigSet { key, value } => {
                e.put_u8(12);
                key.encode(e);
                value.encode(e);
            }
            Command::PoolSnapCreate { pool } => {
                e.put_u8(13);
                pool.encode(e);
            }
            Command::PoolSnapRemove { pool, snap } => {
                e.put_u8(14);
                pool.encode(e);
                e.put_u64(*snap);
            }
            Command::OsdLost { osd, confirm } => {
                e.put_u8(15);
                osd.encode(e);
                confirm.encode(e);
            }
            Command::OsdPurge {
                osd,
                confirm,
                force,
            } => {
                e.put_u8(16);
                osd.encode(e);
                confirm.encode(e);
                force.encode(e);
            }
            Command::OsdSafeToDestroy(osd) => {
                e.put_u8(17);
                osd.encode(e);
            }
        });
    }
}

impl Decode for Command {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("Command", 1, |d, _| {
            Ok(match d.get_u8()? {
                1 => Command::PoolCreate(decode_pool_spec(d)?),
                2 => Command::PoolDelete {
                    name: d.get_string("pool name", POOL_NAME_BYTES_MAX)?,
                    confirm: bool::decode(d)?,
                },
                3 => Command::OsdDown(OsdId::decode(d)?),
                4 => Command::OsdOut(OsdId::decode(d)?),
                5 => Command::OsdIn(OsdId::decode(d)?),
                6 => Command::Status,
                7 => Command::OsdPrimaryAffinity(OsdId::decode(d)?, d.get_u32()?),
                8 => Command::OsdFlag {
                    flag: d.get_u32()?,
                    set: bool::decode(d)?,
                },
                9 => Command::OsdReweight(OsdId::decode(d)?, d.get_u32()?),
                10 => Command::PoolSet {
                    name: d.get_string("pool name", POOL_NAME_BYTES_MAX)?,
                    key: d.get_string("pool setting", POOL_SETTING_BYTES_MAX)?,
                    value: d.get_string("pool setting value", POOL_SETTING_BYTES_MAX)?,
                },
                11 => Command::PgDump,
                12 => Command::ConfigSet {
                    key: d.get_string("config key", CONFIG_KEY_BYTES_MAX)?,
                    value: match bool::decode(d)? {
                        true => Some(d.get_string("config value", CONFIG_VALUE_BYTES_MAX)?),
                        false => None,
                    },
                },
                13 => Command::PoolSnapCreate {
                    pool: d.get_string("pool name", POOL_NAME_BYTES_MAX)?,
                },
                14 => Command::PoolSnapRemove {
                    pool: d.get_string("pool name", POOL_NAME_BYTES_MAX)?,
                    snap: d.get_u64()?,
                },
                15 => Command::OsdLost {
                    osd: OsdId::decode(d)?,
                    confirm: bool::decode(d)?,
                },
                16 => Command::OsdPurge {
                    osd: OsdId::decode(d)?,
                    confirm: bool::decode(d)?,
                    force: bool::decode(d)?,
                },
                17 => Command::OsdSafeToDestroy(OsdId::decode(d)?),
                other => {
                    return Err(DecodeError::Invalid {
                        what: "command",
                        value: u64::from(other),
                    })
                }
            })
        })
    }
}

impl Encode for MonCommand {
    fn encode(&self, e: &mut Encoder) {
        e.put_u64(self.tid);
        self.command.encode(e);
    }
}

impl Decode for MonCommand {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(MonCommand {
            tid: d.get_u64()?,
            command: Command::decode(d)?,
        })
    }
}

impl Encode for MonCommandReply {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(1, 1, |e| {
            e.put_u64(self.tid);
            match &self.result {
                Ok(CommandOutput::Done { epoch, message }) => {
                    e.put_u8(0);
                    epoch.encode(e);
                    message.encode(e);
                }
                Ok(CommandOutput::Status(status)) => {
                    e.put_u8(1);
                    status.encode(e);
                }
                Ok(CommandOutput::PgStats { epoch, pgs }) => {
                    e.put_u8(3);
                    epoch.encode(e);
                    pgs.encode(e);
                }
                Err(message) => {
                    e.put_u8(2);
                    message.encode(e);
                }
            }
        });
    }
}

impl Decode for MonCommandReply {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("MonCommandReply", 1, |d, _| {
            let tid = d.get_u64()?;
            let result = match d.get_u8()? {
                0 => Ok(CommandOutput::Done {
                    epoch: Epoch::decode(d)?,
                    message: String::decode(d)?,
                }),
                1 => Ok(CommandOutput::Status(ClusterStatus::decode(d)?)),
                2 => Err(String::decode(d)?),
                3 => Ok(CommandOutput::PgStats {
                    epoch: Epoch::decode(d)?,
                    pgs: Vec::decode(d)?,
                }),
                other => {
                    return Err(DecodeError::Invalid {
                        what: "command result",
                        value: u64::from(other),
                    })
                }
            };
            Ok(MonCommandReply { tid, result })
        })
    }
}

impl Encode for PoolStatus {
    fn encode(&self, e: &mut Encoder) {
        self.name.encode(e);
        e.put_u64(self.id);
        e.put_u8(self.size);
        e.put_u8(self.min_size);
        e.put_u32(self.pg_num);
        e.put_u64(self.object_count);
        e.put_u64(self.data_bytes);
    }
}

impl Decode for PoolStatus {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(PoolStatus {
            name: d.get_string("pool name", POOL_NAME_BYTES_MAX)?,
            id: d.get_u64()?,
            size: d.get_u8()?,
            min_size: d.get_u8()?,
            pg_num: d.get_u32()?,
            object_count: d.get_u64()?,
            data_bytes: d.get_u64()?,
        })
    }
}

impl Encode for OsdUsage {
    fn encode(&self, e: &mut Encoder) {
        self.osd.encode(e);
        self.up.encode(e);
        e.put_u32(self.weight);
        e.put_u64(self.object_count);
        e.put_u64(self.data_bytes);
        e.put_u64(self.capacity_bytes);
        e.put_u32(self.pg_count);
    }
}

impl Decode for OsdUsage {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(OsdUsage {
            osd: OsdId::decode(d)?,
            up: bool::decode(d)?,
            weight: d.get_u32()?,
            object_count: d.get_u64()?,
            data_bytes: d.get_u64()?,
            capacity_bytes: d.get_u64()?,
            pg_count: d.get_u32()?,
            // Filled in by the ClusterStatus v3 trailer.
            shard_count: 0,
            ops_total: 0,
            wrong_shard_total: 0,
        })
    }
}

impl Encode for ClusterStatus {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(3, 1, |e| {
            e.put_u64(self.fsid as u64);
            e.put_u64((self.fsid >> 64) as u64);
            self.epoch.encode(e);
            self.health.encode(e);
            self.health_checks.encode(e);
            for value in [self.mon_count, self.osd_count, self.osds_up, self.osds_in] {
                e.put_u32(value);
            }
            self.pools.encode(e);
            e.put_u32(self.pg_count);
            self.pg_states.encode(e);
            for value in [self.object_count, self.data_bytes, self.raw_used_bytes] {
                e.put_u64(value);
            }
            self.osds.encode(e);
            for value in [
                self.client_ops_per_second,
                self.client_write_bytes_per_second,
                self.client_read_bytes_per_second,
            ] {
                e.put_u64(value);
            }
            self.mon_leader.encode(e);
            self.mon_quorum.encode(e);
            // v3: each OSD's shards and op counters, in the order of `osds`.
            for osd in &self.osds {
                e.put_u16(osd.shard_count);
                e.put_u64(osd.ops_total);
                e.put_u64(osd.wrong_shard_total);
            }
        });
    }
}

impl Decode for ClusterStatus {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("ClusterStatus", 3, |d, version| {
            let mut status = ClusterStatus {
                fsid: u128::from(d.get_u64()?) | (u128::from(d.get_u64()?) << 64),
                epoch: Epoch::decode(d)?,
                health: String::decode(d)?,
                health_checks: Vec::decode(d)?,
                mon_count: d.get_u32()?,
                osd_count: d.get_u32()?,
                osds_up: d.get_u32()?,
                osds_in: d.get_u32()?,
                pools: Vec::decode(d)?,
                pg_count: d.get_u32()?,
                pg_states: BTreeMap::decode(d)?,
                object_count: d.get_u64()?,
                data_bytes: d.get_u64()?,
                raw_used_bytes: d.get_u64()?,
                osds: Vec::decode(d)?,
                client_ops_per_second: d.get_u64()?,
                client_write_bytes_per_second: d.get_u64()?,
                client_read_bytes_per_second: d.get_u64()?,
                mon_leader: if version >= 2 {
                    Option::decode(d)?
                } else {
                    None
                },
                mon_quorum: if version >= 2 {
                    Vec::decode(d)?
                } else {
                    Vec::new()
                },
            };
            if version >= 3 {
                for osd in &mut status.osds {
                    osd.shard_count = d.get_u16()?;
                    osd.ops_total = d.get_u64()?;
                    osd.wrong_shard_total = d.get_u64()?;
                }
            }
            Ok(status)
        })
    }
}

impl Encode for MonRaft {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(1, 1, |e| {
            e.put_u64(self.from_rank);
            self.payload.encode(e);
        });
    }
}

impl Decode for MonRaft {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("MonRaft", 1, |d, _| {
            Ok(MonRaft {
                from_rank: d.get_u64()?,
                payload: Bytes::decode(d)?,
            })
        })
    }
}

impl Encode for MonForward {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(1, 1, |e| {
            e.put_u64(self.origin_rank);
            e.put_u64(self.token);
            self.sender.encode(e);
            e.put_u16(self.inner_type);
            self.inner.encode(e);
        });
    }
}

impl Decode for MonForward {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("MonForward", 1, |d, _| {
            Ok(MonForward {
                origin_rank: d.get_u64()?,
                token: d.get_u64()?,
                sender: EntityName::decode(d)?,
                inner_type: d.get_u16()?,
                inner: Bytes::decode(d)?,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Msg;

    fn down_stat() -> PgStat {
        PgStat {
            pgid: PgId {
                pool: carmine_types::PoolId(1),
                seed: 3,
            },
            state: PgState(PgState::DOWN),
            object_count: 10,
            data_bytes: 4096,
            last_update: EVersion::ZERO,
            acting: vec![OsdId(0), OsdId(2)],
            interval_start: Epoch(12),
            want_acting: vec![OsdId(2)],
            reason: "down: waiting for osd.3".into(),
            want_up_thru: Epoch(12),
            unfound: 7,
        }
    }

    #[test]
    fn pg_stat_v6_carries_unfound_and_older_versions_decode_without_it() {
        let stat = down_stat();
        assert_eq!(PgStat::from_bytes(&stat.to_bytes()).unwrap(), stat);
        // A version 3 body is the version 4 body without the trailing reason (a
        // 4-byte length and the bytes).
        let older = |source: &PgStat, version: u8, cut: usize| {
            let mut bytes = source.to_bytes().to_vec();
            bytes.truncate(bytes.len() - cut);
            bytes[0] = version;
            let length = u32::from_le_bytes(bytes[2..6].try_into().unwrap()) - cut as u32;
            bytes[2..6].copy_from_slice(&length.to_le_bytes());
            PgStat::from_bytes(&bytes).unwrap()
        };
        // Version 5 lacks the trailing unfound count (8 bytes), version 4 the
        // want_up_thru before it (4 bytes).
        let v5_source = PgStat {
            unfound: 0,
            ..stat.clone()
        };
        assert_eq!(older(&v5_source, 5, 8), v5_source);
        let v4_source = PgStat {
            want_up_thru: Epoch(0),
            ..v5_source.clone()
        };
        assert_eq!(older(&v4_source, 4, 12), v4_source);
        let v3_source = PgStat {
            reason: String::new(),
            ..v4_source
        };
        assert_eq!(older(&v3_source, 3, 16), v3_source);
    }

    #[test]
    fn osd_lost_round_trips_with_its_confirmation() {
        for confirm in [false, true] {
            let command = MonCommand {
                tid: 9,
                command: Command::OsdLost {
                    osd: OsdId(4),
                    confirm,
                },
            };
            assert_eq!(
                MonCommand::from_bytes(&command.to_bytes()).unwrap(),
                command
            );
        }
    }

    #[test]
    fn osd_purge_and_safe_to_destroy_round_trip() {
        let mut commands = vec![Command::OsdSafeToDestroy(OsdId(3))];
        for (confirm, force) in [(false, false), (true, false), (true, true)] {
            commands.push(Command::OsdPurge {
                osd: OsdId(3),
                confirm,
                force,
            });
        }
        for command in commands {
            let command = MonCommand { tid: 5, command };
            assert_eq!(
                MonCommand::from_bytes(&command.to_bytes()).unwrap(),
                command
            );
        }
    }

    #[test]
    fn a_long_pg_stat_reason_is_cut_at_a_character_boundary() {
        let long = "é".repeat(PG_STAT_REASON_BYTES_MAX);
        let cut = PgStat::bounded_reason(long);
        assert!(cut.len() <= PG_STAT_REASON_BYTES_MAX);
        assert!(cut.ends_with('…'));
        let stat = PgStat {
            reason: cut,
            ..down_stat()
        };
        assert_eq!(PgStat::from_bytes(&stat.to_bytes()).unwrap(), stat);
        assert_eq!(PgStat::bounded_reason("short".into()), "short");
    }

    #[test]
    fn cluster_status_v2_round_trips_and_v1_still_decodes() {
        let status = ClusterStatus {
            health: "HEALTH_OK".into(),
            mon_count: 3,
            mon_leader: Some(1),
            mon_quorum: vec![0, 1, 2],
            ..ClusterStatus::default()
        };
        assert_eq!(
            ClusterStatus::from_bytes(&status.to_bytes()).unwrap(),
            status
        );
        // A version 1 body is the version 2 body without the trailing monitor fields
        // (`None`: 1 byte, an empty list: 4 bytes).
        let v1_source = ClusterStatus {
            mon_leader: None,
            mon_quorum: Vec::new(),
            ..status
        };
        let mut bytes = v1_source.to_bytes().to_vec();
        bytes.truncate(bytes.len() - 5);
        bytes[0] = 1;
        let length = u32::from_le_bytes(bytes[2..6].try_into().unwrap()) - 5;
        bytes[2..6].copy_from_slice(&length.to_le_bytes());
        let decoded = ClusterStatus::from_bytes(&bytes).unwrap();
        assert_eq!(decoded, v1_source);
        assert_eq!(decoded.mon_leader, None);
    }

    #[test]
    fn cluster_status_v3_carries_osd_counters_and_v2_decodes_without_them() {
        let osd = OsdUsage {
            osd: OsdId(2),
            up: true,
            pg_count: 5,
            shard_count: 3,
            ops_total: 1234,
            wrong_shard_total: 7,
            ..OsdUsage::default()
        };
        let status = ClusterStatus {
            osds: vec![osd.clone()],
            mon_leader: Some(0),
            ..ClusterStatus::default()
        };
        assert_eq!(
            ClusterStatus::from_bytes(&status.to_bytes()).unwrap(),
            status
        );
        // A version 2 body is the version 3 body without the trailing counters
        // (2 + 8 + 8 bytes per OSD).
        let mut bytes = status.to_bytes().to_vec();
        bytes.truncate(bytes.len() - 18);
        bytes[0] = 2;
        let length = u32::from_le_bytes(bytes[2..6].try_into().unwrap()) - 18;
        bytes[2..6].copy_from_slice(&length.to_le_bytes());
        let decoded = ClusterStatus::from_bytes(&bytes).unwrap();
        assert_eq!(decoded.osds[0].pg_count, 5);
        assert_eq!(decoded.osds[0].shard_count, 0);
        assert_eq!(decoded.osds[0].wrong_shard_total, 0);
    }

    #[test]
    fn osd_stats_v2_round_trips() {
        let stats = OsdStats {
            osd: OsdId(1),
            ops_total: 10,
            wrong_shard_total: 3,
            ..OsdStats::default()
        };
        let msg = Msg::OsdStats(stats);
        assert_eq!(
            Msg::decode(msg.msg_type(), msg.encode_front()).unwrap(),
            msg
        );
    }

    #[test]
    fn osd_stats_v4_carries_metadata_bytes_and_v3_decodes_without_them() {
        let stats = OsdStats {
            osd: OsdId(1),
            data_bytes: 100,
            capacity_bytes: 1000,
            copies_repaired_total: 2,
            metadata_bytes: 40,
            ..OsdStats::default()
        };
        let bytes = stats.to_bytes();
        assert_eq!(bytes[0], 4, "version");
        assert_eq!(OsdStats::from_bytes(&bytes).unwrap(), stats);
        // Version 3 wrote the same fields less the trailing u64.
        let mut v3 = bytes.to_vec();
        v3.truncate(v3.len() - 8);
        v3[0] = 3;
        let body = u32::from_le_bytes(v3[2..6].try_into().unwrap()) - 8;
        v3[2..6].copy_from_slice(&body.to_le_bytes());
        let decoded = OsdStats::from_bytes(&v3).unwrap();
        assert_eq!(decoded.metadata_bytes, 0);
        assert_eq!(decoded.copies_repaired_total, 2);
    }

    #[test]
    fn monitor_messages_round_trip() {
        let raft = Msg::MonRaft(MonRaft {
            from_rank: 2,
            payload: Bytes::from_static(b"\x08\x01"),
        });
        let forward = Msg::MonForward(MonForward {
            origin_rank: 1,
            token: 9,
            sender: EntityName::client(4711),
            inner_type: crate::msg_type::MON_COMMAND,
            inner: Bytes::from_static(b"inner"),
        });
        for msg in [raft, forward] {
            assert_eq!(
                Msg::decode(msg.msg_type(), msg.encode_front()).unwrap(),
                msg
            );
        }
    }

    /// Epochs 1..=count of a small cluster, and the incrementals between them.
    fn map_chain(count: u32) -> (Vec<Arc<OsdMap>>, Vec<Arc<OsdMapIncremental>>) {
        let mut maps = vec![Arc::new(OsdMap::new_dev(3))];
        let mut incs = Vec::new();
        for osd in 0..count - 1 {
            let prev = maps.last().unwrap().clone();
            let mut next = (*prev).clone();
            next.epoch = prev.epoch.next();
            let addr = format!("127.0.0.1:{}", 6800 + osd).parse().unwrap();
            next.boot_osd(OsdId(osd), vec![addr], format!("h{osd}"))
                .unwrap();
            incs.push(Arc::new(OsdMapIncremental::between(&prev, &next)));
            maps.push(Arc::new(next));
        }
        (maps, incs)
    }

    #[test]
    fn map_messages_round_trip_full_incremental_and_both() {
        let (maps, incs) = map_chain(4);
        let messages = [
            OsdMapMsg::full(maps[3].clone()),
            OsdMapMsg::incrementals(incs.clone()),
            OsdMapMsg {
                full: Some(maps[1].clone()),
                incrementals: incs[1..].to_vec(),
            },
        ];
        for map_msg in messages {
            assert_eq!(map_msg.newest_epoch(), maps[3].epoch);
            let msg = Msg::OsdMap(map_msg);
            let decoded = Msg::decode(msg.msg_type(), msg.encode_front()).unwrap();
            assert_eq!(decoded, msg);
            let Msg::OsdMap(decoded) = decoded else {
                unreachable!()
            };
            let step = decoded.advance(Some(&maps[0]));
            assert_eq!(step.maps.last(), Some(&maps[3]));
            assert_eq!(step.request, None);
        }
    }

    #[test]
    fn a_bare_map_from_before_incrementals_decodes_as_a_full_map() {
        let (maps, _) = map_chain(2);
        let bare = maps[1].to_bytes();
        let msg = Msg::decode(crate::msg_type::OSD_MAP, bare).unwrap();
        assert_eq!(msg, Msg::OsdMap(OsdMapMsg::full(maps[1].clone())));
    }

    #[test]
    fn malformed_map_messages_are_errors() {
        let (maps, incs) = map_chain(4);
        let encode = |msg: &OsdMapMsg| Msg::OsdMap(msg.clone()).encode_front();
        let decode = |bytes: Bytes| Msg::decode(crate::msg_type::OSD_MAP, bytes);
        let out_of_order = OsdMapMsg {
            full: None,
            incrementals: vec![incs[0].clone(), incs[2].clone()],
        };
        assert!(decode(encode(&out_of_order)).is_err());
        let not_after_full = OsdMapMsg {
            full: Some(maps[2].clone()),
            incrementals: vec![incs[0].clone()],
        };
        assert!(decode(encode(&not_after_full)).is_err());
        let empty = OsdMapMsg {
            full: None,
            incrementals: Vec::new(),
        };
        assert!(decode(encode(&empty)).is_err());
        let good = encode(&OsdMapMsg::incrementals(incs.clone()));
        for cut in [0, 1, 6, 10, good.len() / 2, good.len() - 1] {
            assert!(decode(good.slice(..cut)).is_err(), "cut at {cut}");
        }
    }
}
