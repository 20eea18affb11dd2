//! The OsdMap: one epoch of the cluster's membership, pools and placement rules.
//!
//! Maps are immutable once published: the monitor clones the current map, changes the
//! clone, bumps the epoch and publishes it; daemons share each epoch as an
//! `Arc<OsdMap>` read-only snapshot.

use crate::pool::{validate_pool_name, PoolInfo, PoolSpec, PG_NUM_MAX, POOL_SIZE_MAX};
use carmine_crush::CrushMap;
use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
use carmine_types::{Epoch, OsdId, PoolId};
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Reweight of an OSD that is fully in (16.16 fixed point, as CRUSH takes it).
pub const WEIGHT_IN: u32 = 0x10000;
/// Most shards one OSD may run.
pub const OSD_SHARDS_MAX: u16 = 256;
/// Most OSDs a map may hold.
pub const OSDS_MAX: usize = 65_536;
/// Longest config key, longest value, and most keys a map may hold.
pub const CONFIG_KEY_BYTES_MAX: usize = 256;
pub const CONFIG_VALUE_BYTES_MAX: usize = 4096;
pub const CONFIG_KEYS_MAX: usize = 1024;

/// Cluster-wide flags, as `ceph osd set FLAG`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OsdFlags(pub u32);

impl OsdFlags {
    pub const NOOUT: u32 = 1 << 0;
    pub const NODOWN: u32 = 1 << 1;
    pub const NOUP: u32 = 1 << 2;
    pub const NOIN: u32 = 1 << 3;

    /// Every flag with its `ceph osd set` name.
    pub const NAMED: [(&'static str, u32); 4] = [
        ("noout", Self::NOOUT),
        ("nodown", Self::NODOWN),
        ("noup", Self::NOUP),
        ("noin", Self::NOIN),
    ];

    pub fn contains(self, flag: u32) -> bool {
        self.0 & flag != 0
    }

    /// The flag called `name` (`noout`, `nodown`, `noup`, `noin`).
    pub fn by_name(name: &str) -> Option<u32> {
        Self::NAMED
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, flag)| *flag)
    }

    /// The names of the flags set, in `NAMED` order.
    pub fn names(self) -> Vec<&'static str> {
        Self::NAMED
            .iter()
            .filter(|(_, flag)| self.contains(*flag))
            .map(|(name, _)| *name)
            .collect()
    }
}

/// One OSD as the map records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OsdInfo {
    pub id: OsdId,
    /// Running and reachable.
    pub up: bool,
    /// Reweight, 16.16: `WEIGHT_IN` when in, 0 when out.
    pub weight: u32,
    /// One listening address per shard; clients talk to the shard owning the PG.
    pub shard_addrs: Vec<SocketAddr>,
    /// Epoch at which the OSD last came up.
    pub up_from: Epoch,
    /// Epoch at which the OSD last went down (0 if never).
    pub down_at: Epoch,
    /// The newest epoch through which the monitor knows the OSD was alive (Ceph's
    /// `up_thru`): a primary asks for it to reach its interval's start before it
    /// activates a PG, so a past interval whose primary's `up_thru` (in the interval's
    /// last map) stayed below its start never accepted a write, and peering need not
    /// wait for its members (`history.rs`). Only ever raised; encoding v5, 0 from older.
    pub up_thru: Epoch,
    /// The host it runs on (the CRUSH host bucket name).
    pub host: String,
    /// How willing the OSD is to be a PG's primary, 16.16 from 0 to
    /// [`OsdInfo::PRIMARY_AFFINITY_MAX`] (Ceph's `ceph osd primary-affinity`): a PG whose
    /// CRUSH-chosen primary has affinity `a` keeps it with probability `a / 1.0`,
    /// otherwise the next OSD in the up set that accepts becomes primary.
    pub primary_affinity: u32,
    /// The running process's instance id (random per start): a boot with another
    /// instance while the map shows the OSD up is a restart the monitor must see.
    pub instance: u64,
    /// How full the monitor last found its store (Ceph's `CEPH_OSD_FULL`,
    /// `BACKFILLFULL`, `NEARFULL` state bits; encoding v4, `None` from older).
    pub fullness: Fullness,
    /// The epoch at which an operator declared the data of this down OSD lost (Ceph's
    /// `lost_at`, set by `ceph osd lost`): peering no longer waits for it in past
    /// intervals that began before it. Kept when the OSD returns: what it brings back
    /// is then a stray's copy like any other. 0 when never (encoding v6, 0 from older).
    pub lost_at: Epoch,
}

/// An OSD's fullness as the map publishes it, from its usage reports against the
/// ratios [`FullRatios`]: a primary refuses writes that add data to a PG with a `Full`
/// member; `NearFull` and `BackfillFull` only warn (backfill is not throttled yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Fullness {
    #[default]
    None = 0,
    NearFull = 1,
    BackfillFull = 2,
    Full = 3,
}

impl Fullness {
    pub fn from_u8(value: u8) -> Option<Self> {
        match value {
            0 => Some(Self::None),
            1 => Some(Self::NearFull),
            2 => Some(Self::BackfillFull),
            3 => Some(Self::Full),
            _ => None,
        }
    }

    /// The Ceph health-check word for this state (`None` has none).
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "ok",
            Self::NearFull => "nearfull",
            Self::BackfillFull => "backfillfull",
            Self::Full => "full",
        }
    }
}

/// The fullness thresholds (fractions of an OSD's capacity) with Ceph's defaults,
/// kept as config keys in the map (`carmine osd set-full-ratio` and friends set them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FullRatios {
    pub nearfull: f64,
    pub backfillfull: f64,
    pub full: f64,
    /// The OSD's own last line: above it a primary refuses writes that add data even
    /// before the monitor marked anything full (Ceph's `osd_failsafe_full_ratio`).
    pub failsafe: f64,
}

impl Default for FullRatios {
    fn default() -> Self {
        Self {
            nearfull: 0.85,
            backfillfull: 0.90,
            full: 0.95,
            failsafe: 0.97,
        }
    }
}

/// How far below a threshold an OSD's usage must fall before the monitor clears the
/// state it marked, so usage hovering at a threshold does not publish a map per report.
pub const FULLNESS_HYSTERESIS: f64 = 0.01;

impl FullRatios {
    /// The ratios in `config`, each falling back to its default when absent or bad.
    pub fn from_config(config: &BTreeMap<String, String>) -> Self {
        use crate::settings::{
            MON_OSD_BACKFILLFULL_RATIO, MON_OSD_FULL_RATIO, MON_OSD_NEARFULL_RATIO,
            OSD_FAILSAFE_FULL_RATIO,
        };
        let default = Self::default();
        let read = |key: &str, fallback: f64| {
            config
                .get(key)
                .and_then(|value| crate::settings::parse_ratio(key, value).ok())
                .unwrap_or(fallback)
        };
        Self {
            nearfull: read(MON_OSD_NEARFULL_RATIO, default.nearfull),
            backfillfull: read(MON_OSD_BACKFILLFULL_RATIO, default.backfillfull),
            full: read(MON_OSD_FULL_RATIO, default.full),
            failsafe: read(OSD_FAILSAFE_FULL_RATIO, default.failsafe),
        }
    }

    /// Whether the ratios ascend as they must (Ceph's `OSD_OUT_OF_ORDER_FULL` check).
    pub fn in_order(&self) -> bool {
        self.nearfull <= self.backfillfull
            && self.backfillfull <= self.full
            && self.full <= self.failsafe
    }

    /// The state an OSD at `used / capacity` is in, given the state the map shows
    /// now: a state is entered at its threshold and left only [`FULLNESS_HYSTERESIS`]
    /// below it.
    pub fn fullness(&self, used_bytes: u64, capacity_bytes: u64, now: Fullness) -> Fullness {
        if capacity_bytes == 0 || capacity_bytes == u64::MAX {
            return Fullness::None;
        }
        let ratio = used_bytes as f64 / capacity_bytes as f64;
        let thresholds = [
            (Fullness::Full, self.full),
            (Fullness::BackfillFull, self.backfillfull),
            (Fullness::NearFull, self.nearfull),
        ];
        for (state, threshold) in thresholds {
            let margin = if now >= state {
                FULLNESS_HYSTERESIS
            } else {
                0.0
            };
            if ratio >= threshold - margin {
                return state;
            }
        }
        Fullness::None
    }
}

impl OsdInfo {
    /// Ceph's `CEPH_OSD_DEFAULT_PRIMARY_AFFINITY`: 1.0, always willing.
    pub const PRIMARY_AFFINITY_DEFAULT: u32 = 0x10000;
    /// Ceph's `CEPH_OSD_MAX_PRIMARY_AFFINITY`.
    pub const PRIMARY_AFFINITY_MAX: u32 = 0x10000;

    pub fn is_in(&self) -> bool {
        self.weight > 0
    }

    pub fn shard_count(&self) -> u16 {
        self.shard_addrs.len() as u16
    }
}

/// Why a map change was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OsdMapError {
    #[error("pool {0:?} already exists")]
    PoolExists(String),
    #[error("pool {0:?} does not exist")]
    NoSuchPool(String),
    #[error("invalid pool: {0}")]
    InvalidPool(String),
    #[error("{0} does not exist")]
    NoSuchOsd(OsdId),
    #[error("invalid OSD boot: {0}")]
    InvalidBoot(String),
    #[error("primary affinity {0:#x} is above 1.0 (0x10000)")]
    InvalidPrimaryAffinity(u32),
    #[error("reweight {0:#x} is above 1.0 (0x10000)")]
    InvalidReweight(u32),
    #[error("invalid config key: {0}")]
    InvalidConfig(String),
    #[error("invalid pg_temp: {0}")]
    InvalidPgTemp(String),
    #[error("{0} is up; only a down OSD can be marked lost")]
    OsdIsUp(OsdId),
    #[error("{0} is up; stop it before purging it")]
    PurgeUp(OsdId),
}

/// The cluster map at one epoch.
#[derive(Debug, Clone, PartialEq)]
pub struct OsdMap {
    /// Identifies the cluster; daemons refuse maps of another cluster.
    pub fsid: u128,
    pub epoch: Epoch,
    pub osds: BTreeMap<OsdId, OsdInfo>,
    pub pools: BTreeMap<PoolId, PoolInfo>,
    pub next_pool_id: u64,
    pub crush: CrushMap,
    pub flags: OsdFlags,
    /// Closed intervals of every PG not known clean (see `history.rs`).
    pub pg_history: BTreeMap<carmine_types::PgId, Vec<crate::PastInterval>>,
    /// Operator key/values (`carmine config set KEY VALUE`, as `ceph config-key`),
    /// replicated with the map so every daemon and client sees them (encoding v3).
    pub config: BTreeMap<String, String>,
    /// Temporary acting sets (Ceph's pg_temp, encoding v4): while a PG's up primary
    /// lacks data it would have to copy before serving, the monitor lets an OSD with a
    /// complete copy act as primary, and clears the entry once the PG is clean.
    pub pg_temp: BTreeMap<carmine_types::PgId, Vec<OsdId>>,
}

impl OsdMap {
    /// An empty map at epoch 1 whose CRUSH map has one host per OSD for `osd_count`
    /// OSDs (none of which has booted yet).
    pub fn new_dev(osd_count: u32) -> Self {
        Self::new(0, CrushMap::simple(osd_count))
    }

    pub fn new(fsid: u128, crush: CrushMap) -> Self {
        Self {
            fsid,
            epoch: Epoch(1),
            osds: BTreeMap::new(),
            pools: BTreeMap::new(),
            next_pool_id: 1,
            crush,
            flags: OsdFlags::default(),
            pg_history: BTreeMap::new(),
            config: BTreeMap::new(),
            pg_temp: BTreeMap::new(),
        }
    }

    pub fn pool_by_name(&self, name: &str) -> Option<&PoolInfo> {
        self.pools.values().find(|pool| pool.name == name)
    }

    pub fn osd(&self, id: OsdId) -> Option<&OsdInfo> {
        self.osds.get(&id)
    }

    pub fn is_up(&self, id: OsdId) -> bool {
        self.osds.get(&id).is_some_and(|osd| osd.up)
    }

    /// The fullness the map shows for `id` (`None` for an unknown OSD).
    pub fn fullness(&self, id: OsdId) -> Fullness {
        self.osds
            .get(&id)
            .map_or(Fullness::None, |osd| osd.fullness)
    }

    /// The fullness thresholds in force (the config keys, else Ceph's defaults).
    pub fn full_ratios(&self) -> FullRatios {
        FullRatios::from_config(&self.config)
    }

    pub fn up_count(&self) -> usize {
        self.osds.values().filter(|osd| osd.up).count()
    }

    pub fn in_count(&self) -> usize {
        self.osds.values().filter(|osd| osd.is_in()).count()
    }

    /// The CRUSH reweight vector indexed by OSD id (0 for absent or out OSDs).
    pub fn crush_weights(&self) -> Vec<u32> {
        let length = self
            .osds
            .keys()
            .map(|id| id.0 as usize + 1)
            .max()
            .unwrap_or(0)
            .max(self.crush.max_devices().max(0) as usize);
        let mut weights = vec![0u32; length];
        for osd in self.osds.values() {
            weights[osd.id.0 as usize] = osd.weight;
        }
        weights
    }

    /// Adds a pool (does not bump the epoch; the caller publishes the change).
    pub fn create_pool(&mut self, spec: PoolSpec) -> Result<PoolId, OsdMapError> {
        validate_pool_name(&spec.name).map_err(OsdMapError::InvalidPool)?;
        if self.pool_by_name(&spec.name).is_some() {
            return Err(OsdMapError::PoolExists(spec.name));
        }
        if spec.size == 0 || spec.size > POOL_SIZE_MAX {
            return Err(OsdMapError::InvalidPool(format!(
                "size {} is outside 1..={POOL_SIZE_MAX}",
                spec.size
            )));
        }
        let min_size = spec.min_size.unwrap_or(spec.size - spec.size / 2);
        if min_size == 0 || min_size > spec.size {
            return Err(OsdMapError::InvalidPool(format!(
                "min_size {min_size} is outside 1..={}",
                spec.size
            )));
        }
        if spec.pg_num == 0 || spec.pg_num > PG_NUM_MAX {
            return Err(OsdMapError::InvalidPool(format!(
                "pg_num {} is outside 1..={PG_NUM_MAX}",
                spec.pg_num
            )));
        }
        if !self.crush.has_rule(spec.crush_rule) {
            return Err(OsdMapError::InvalidPool(format!(
                "CRUSH rule {} does not exist",
                spec.crush_rule
            )));
        }
        let id = PoolId(self.next_pool_id);
        self.next_pool_id += 1;
        self.pools.insert(
            id,
            PoolInfo {
                id,
                name: spec.name,
                size: spec.size,
                min_size,
                pg_num: spec.pg_num,
                pgp_num: spec.pg_num,
                crush_rule: spec.crush_rule,
                created: self.epoch.next(),
                snap_seq: 0,
                removed_snaps: Default::default(),
            },
        );
        Ok(id)
    }

    /// Changes one setting of pool `name`, as `ceph osd pool set NAME KEY VALUE`:
    /// `size`, `min_size` or `crush_rule`. `pg_num`/`pgp_num` would need PG
    /// splitting and merging, which Carmine does not do yet, so they are refused.
    pub fn set_pool_value(
        &mut self,
        name: &str,
        key: &str,
        value: &str,
    ) -> Result<(), OsdMapError> {
        let invalid = |text: String| Err(OsdMapError::InvalidPool(text));
        let number: u32 = match value.parse() {
            Ok(number) => number,
            Err(_) => return invalid(format!("{key} must be a number, not {value:?}")),
        };
        let has_rule = self.crush.has_rule(number);
        let pool = self
            .pools
            .values_mut()
            .find(|pool| pool.name == name)
            .ok_or_else(|| OsdMapError::NoSuchPool(name.to_string()))?;
        match key {
            "size" => {
                if number == 0 || number > u32::from(POOL_SIZE_MAX) {
                    return invalid(format!("size {number} is outside 1..={POOL_SIZE_MAX}"));
                }
                let size = number as u8;
                // Ceph keeps min_size where it was unless it no longer fits.
                pool.min_size = pool.min_size.min(size);
                pool.size = size;
            }
            "min_size" => {
                if number == 0 || number > u32::from(pool.size) {
                    return invalid(format!("min_size {number} is outside 1..={}", pool.size));
                }
                pool.min_size = number as u8;
            }
            "crush_rule" => {
                if !has_rule {
                    return invalid(format!("CRUSH rule {number} does not exist"));
                }
                pool.crush_rule = number;
            }
            "pg_num" | "pgp_num" => {
                return invalid(format!(
                    "changing {key} needs PG splitting and merging, which Carmine does not do yet; \
                     create a new pool with the pg_num you want"
                ))
            }
            other => {
                return invalid(format!(
                    "unknown pool setting {other:?}; expected size, min_size or crush_rule"
                ))
            }
        }
        Ok(())
    }

    /// Sets (`Some`) or removes (`None`) config key `key`.
    pub fn set_config(&mut self, key: &str, value: Option<&str>) -> Result<(), OsdMapError> {
        let invalid = |text: String| Err(OsdMapError::InvalidConfig(text));
        if key.is_empty() || key.len() > CONFIG_KEY_BYTES_MAX {
            return invalid(format!("config keys are 1..={CONFIG_KEY_BYTES_MAX} bytes"));
        }
        if key.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return invalid(format!(
                "config key {key:?} holds whitespace or control characters"
            ));
        }
        match value {
            Some(value) => {
                if value.len() > CONFIG_VALUE_BYTES_MAX {
                    return invalid(format!(
                        "config values are at most {CONFIG_VALUE_BYTES_MAX} bytes, not {}",
                        value.len()
                    ));
                }
                if !self.config.contains_key(key) && self.config.len() >= CONFIG_KEYS_MAX {
                    return invalid(format!(
                        "the map already holds {CONFIG_KEYS_MAX} config keys"
                    ));
                }
                self.config.insert(key.to_string(), value.to_string());
            }
            None => {
                if self.config.remove(key).is_none() {
                    return invalid(format!("config key {key:?} does not exist"));
                }
            }
        }
        Ok(())
    }

    /// Allocates a self-managed snapshot id in pool `name`.
    pub fn allocate_pool_snap(&mut self, name: &str) -> Result<u64, OsdMapError> {
        let pool = self.pool_by_name_mut(name)?;
        Ok(pool.allocate_snap())
    }

    /// Marks self-managed snapshot `snap` of pool `name` removed.
    pub fn remove_pool_snap(&mut self, name: &str, snap: u64) -> Result<(), OsdMapError> {
        let pool = self.pool_by_name_mut(name)?;
        pool.remove_snap(snap).map_err(OsdMapError::InvalidPool)
    }

    fn pool_by_name_mut(&mut self, name: &str) -> Result<&mut PoolInfo, OsdMapError> {
        self.pools
            .values_mut()
            .find(|pool| pool.name == name)
            .ok_or_else(|| OsdMapError::NoSuchPool(name.to_string()))
    }

    pub fn delete_pool(&mut self, name: &str) -> Result<PoolId, OsdMapError> {
        let id = self
            .pool_by_name(name)
            .map(|pool| pool.id)
            .ok_or_else(|| OsdMapError::NoSuchPool(name.to_string()))?;
        self.pools.remove(&id);
        self.pg_temp.retain(|pg, _| pg.pool != id);
        Ok(id)
    }

    /// Sets (or, with an empty `acting`, removes) the temporary acting set of `pg`.
    /// The set must name distinct existing OSDs, at most the pool's size of them.
    pub fn set_pg_temp(
        &mut self,
        pg: carmine_types::PgId,
        acting: Vec<OsdId>,
    ) -> Result<(), OsdMapError> {
        let Some(pool) = self.pools.get(&pg.pool) else {
            return Err(OsdMapError::InvalidPgTemp(format!("{pg}: no such pool")));
        };
        if pg.seed >= pool.pg_num {
            return Err(OsdMapError::InvalidPgTemp(format!("{pg}: no such PG")));
        }
        if acting.is_empty() {
            self.pg_temp.remove(&pg);
            return Ok(());
        }
        if acting.len() > usize::from(pool.size) {
            return Err(OsdMapError::InvalidPgTemp(format!(
                "{pg}: {} OSDs for a pool of size {}",
                acting.len(),
                pool.size
            )));
        }
        for (index, osd) in acting.iter().enumerate() {
            if !self.osds.contains_key(osd) {
                return Err(OsdMapError::NoSuchOsd(*osd));
            }
            if acting[..index].contains(osd) {
                return Err(OsdMapError::InvalidPgTemp(format!("{pg}: {osd} twice")));
            }
        }
        self.pg_temp.insert(pg, acting);
        Ok(())
    }

    /// Drops temporary acting sets that no longer do anything: those whose up members
    /// are exactly the up set in the same order, or that have no up member (Ceph's
    /// `remove_redundant_temporaries` and `remove_down_pg_temp`), and those with fewer
    /// up members than the up set offers (an OSD came back: the PG must grow again; its
    /// up primary asks for a new entry that includes it if it still needs one).
    pub fn clean_pg_temps(&mut self) {
        let redundant: Vec<carmine_types::PgId> = self
            .pg_temp
            .iter()
            .filter(|(&pg, temp)| {
                let up_members: Vec<OsdId> =
                    temp.iter().copied().filter(|&o| self.is_up(o)).collect();
                let size = self.pools.get(&pg.pool).map_or(0, |p| usize::from(p.size));
                up_members.is_empty()
                    || self.pg_mapping(pg).is_none_or(|m| {
                        m.up == up_members || up_members.len() < m.up.len().min(size)
                    })
            })
            .map(|(&pg, _)| pg)
            .collect();
        for pg in redundant {
            self.pg_temp.remove(&pg);
        }
    }

    /// Records an OSD booting: marks it up with its shard addresses, adds it to CRUSH
    /// in its own host if the CRUSH map lacks it, and marks it in unless `noin`.
    pub fn boot_osd(
        &mut self,
        id: OsdId,
        shard_addrs: Vec<SocketAddr>,
        host: String,
    ) -> Result<(), OsdMapError> {
        if shard_addrs.is_empty() || shard_addrs.len() > usize::from(OSD_SHARDS_MAX) {
            return Err(OsdMapError::InvalidBoot(format!(
                "{id} announced {} shards; 1..={OSD_SHARDS_MAX} allowed",
                shard_addrs.len()
            )));
        }
        if self.osds.len() >= OSDS_MAX && !self.osds.contains_key(&id) {
            return Err(OsdMapError::InvalidBoot(format!(
                "the map already holds {OSDS_MAX} OSDs"
            )));
        }
        if self.crush.device_name(id.0 as i32).is_none() {
            self.crush.add_osd_in_own_host(id.0 as i32, WEIGHT_IN);
        }
        let next = self.epoch.next();
        let noin = self.flags.contains(OsdFlags::NOIN);
        let entry = self.osds.entry(id).or_insert_with(|| OsdInfo {
            id,
            up: false,
            weight: if noin { 0 } else { WEIGHT_IN },
            shard_addrs: Vec::new(),
            up_from: next,
            down_at: Epoch(0),
            up_thru: Epoch(0),
            host: host.clone(),
            primary_affinity: OsdInfo::PRIMARY_AFFINITY_DEFAULT,
            instance: 0,
            fullness: Fullness::None,
            lost_at: Epoch(0),
        });
        entry.up = true;
        entry.up_from = next;
        entry.shard_addrs = shard_addrs;
        entry.host = host;
        Ok(())
    }

    /// Records the instance id of the process that booted as `id`.
    pub fn set_instance(&mut self, id: OsdId, instance: u64) -> Result<(), OsdMapError> {
        let osd = self.osds.get_mut(&id).ok_or(OsdMapError::NoSuchOsd(id))?;
        osd.instance = instance;
        Ok(())
    }

    pub fn mark_down(&mut self, id: OsdId) -> Result<(), OsdMapError> {
        let next = self.epoch.next();
        let osd = self.osds.get_mut(&id).ok_or(OsdMapError::NoSuchOsd(id))?;
        osd.up = false;
        osd.down_at = next;
        Ok(())
    }

    /// `ceph osd lost`: declares the data of down OSD `id` lost as of the next epoch, so
    /// that PGs waiting for it to learn what a past interval wrote go on without it
    /// (and lose what only it held).
    pub fn mark_lost(&mut self, id: OsdId) -> Result<(), OsdMapError> {
        let next = self.epoch.next();
        let osd = self.osds.get_mut(&id).ok_or(OsdMapError::NoSuchOsd(id))?;
        if osd.up {
            return Err(OsdMapError::OsdIsUp(id));
        }
        osd.lost_at = next;
        Ok(())
    }

    /// `ceph osd purge`: removes down OSD `id` from the map and from the CRUSH
    /// hierarchy, with every pg_temp naming it; its id is free again (an OSD that
    /// boots with it is a new one). What it held is given up: peering treats a past
    /// interval's member the map no longer has as lost (Ceph's PriorSet does the same
    /// for an OSD that no longer exists). The PG histories keep naming it.
    pub fn purge_osd(&mut self, id: OsdId) -> Result<(), OsdMapError> {
        let osd = self.osds.get(&id).ok_or(OsdMapError::NoSuchOsd(id))?;
        if osd.up {
            return Err(OsdMapError::PurgeUp(id));
        }
        self.osds.remove(&id);
        self.crush.remove_device(id.0 as i32);
        self.pg_temp.retain(|_, acting| !acting.contains(&id));
        Ok(())
    }

    /// Records that `id` was alive through `epoch` (the monitor, when a primary asks
    /// before activating a PG); never lowers it.
    pub fn raise_up_thru(&mut self, id: OsdId, epoch: Epoch) -> Result<(), OsdMapError> {
        let osd = self.osds.get_mut(&id).ok_or(OsdMapError::NoSuchOsd(id))?;
        osd.up_thru = osd.up_thru.max(epoch);
        Ok(())
    }

    /// Publishes `id`'s fullness (the monitor, from its usage reports).
    pub fn set_fullness(&mut self, id: OsdId, fullness: Fullness) -> Result<(), OsdMapError> {
        let osd = self.osds.get_mut(&id).ok_or(OsdMapError::NoSuchOsd(id))?;
        osd.fullness = fullness;
        Ok(())
    }

    /// `ceph osd reweight`: an override weight, 16.16 from 0 (out) to 1.0 (in).
    pub fn reweight(&mut self, id: OsdId, weight: u32) -> Result<(), OsdMapError> {
        if weight > WEIGHT_IN {
            return Err(OsdMapError::InvalidReweight(weight));
        }
        self.set_weight(id, weight)
    }

    pub fn set_weight(&mut self, id: OsdId, weight: u32) -> Result<(), OsdMapError> {
        let osd = self.osds.get_mut(&id).ok_or(OsdMapError::NoSuchOsd(id))?;
        osd.weight = weight.min(WEIGHT_IN);
        Ok(())
    }

    /// Sets an OSD's primary affinity (16.16, 0..=1.0), as `ceph osd primary-affinity`.
    pub fn set_primary_affinity(&mut self, id: OsdId, affinity: u32) -> Result<(), OsdMapError> {
        if affinity > OsdInfo::PRIMARY_AFFINITY_MAX {
            return Err(OsdMapError::InvalidPrimaryAffinity(affinity));
        }
        let osd = self.osds.get_mut(&id).ok_or(OsdMapError::NoSuchOsd(id))?;
        osd.primary_affinity = affinity;
        Ok(())
    }

    /// Whether any OSD has a primary affinity below 1.0 (Ceph keeps no affinity vector
    /// at all until one is set, and placement skips the affinity step without one).
    pub fn has_primary_affinity(&self) -> bool {
        self.osds
            .values()
            .any(|osd| osd.primary_affinity != OsdInfo::PRIMARY_AFFINITY_DEFAULT)
    }
}

/// Version 2 appended `primary_affinity`; version 1 decodes with the default (1.0).
/// Version 3 appended `instance` (older versions decode as 0).
/// Version 4 appended `fullness` as a u8 (older versions decode as `None`).
/// Version 5 appended `up_thru` (older versions decode as 0: a cluster whose monitor
/// records it runs OSDs that ask for it, so mixing versions is not supported).
/// Version 6 appended `lost_at` (older versions decode as 0: never lost).
const OSD_INFO_VERSION: u8 = 6;

impl Encode for OsdInfo {
    fn encode(&self, e: &mut Encoder) {
        assert!(self.primary_affinity <= OsdInfo::PRIMARY_AFFINITY_MAX);
        e.versioned(OSD_INFO_VERSION, 1, |e| {
            self.id.encode(e);
            self.up.encode(e);
            e.put_u32(self.weight);
            self.shard_addrs.encode(e);
            self.up_from.encode(e);
            self.down_at.encode(e);
            self.host.encode(e);
            e.put_u32(self.primary_affinity);
            e.put_u64(self.instance);
            e.put_u8(self.fullness as u8);
            self.up_thru.encode(e);
            self.lost_at.encode(e);
        });
    }
}

impl Decode for OsdInfo {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("OsdInfo", OSD_INFO_VERSION, |d, version| {
            let info = OsdInfo {
                id: OsdId::decode(d)?,
                up: bool::decode(d)?,
                weight: d.get_u32()?,
                shard_addrs: Vec::decode(d)?,
                up_from: Epoch::decode(d)?,
                down_at: Epoch::decode(d)?,
                host: d.get_string("host", 256)?,
                primary_affinity: if version >= 2 {
                    d.get_u32()?
                } else {
                    OsdInfo::PRIMARY_AFFINITY_DEFAULT
                },
                instance: if version >= 3 { d.get_u64()? } else { 0 },
                fullness: if version >= 4 {
                    let value = d.get_u8()?;
                    Fullness::from_u8(value).ok_or(DecodeError::Invalid {
                        what: "OSD fullness",
                        value: u64::from(value),
                    })?
                } else {
                    Fullness::None
                },
                up_thru: if version >= 5 {
                    Epoch::decode(d)?
                } else {
                    Epoch(0)
                },
                lost_at: if version >= 6 {
                    Epoch::decode(d)?
                } else {
                    Epoch(0)
                },
            };
            if info.primary_affinity > OsdInfo::PRIMARY_AFFINITY_MAX {
                return Err(DecodeError::Invalid {
                    what: "OSD primary affinity",
                    value: u64::from(info.primary_affinity),
                });
            }
            if info.shard_addrs.len() > usize::from(OSD_SHARDS_MAX) {
                return Err(DecodeError::TooLong {
                    what: "OSD shard addresses",
                    length: info.shard_addrs.len(),
                    limit: usize::from(OSD_SHARDS_MAX),
                });
            }
            Ok(info)
        })
    }
}

/// The map's encoding version: v2 appends the PG histories, v3 the config keys, v4 the
/// pg_temp entries. (The map message relies on it staying below 16.)
pub const OSD_MAP_VERSION: u8 = 4;

impl Encode for OsdMap {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(OSD_MAP_VERSION, 1, |e| {
            e.put_u64(self.fsid as u64);
            e.put_u64((self.fsid >> 64) as u64);
            self.epoch.encode(e);
            e.put_u32(self.osds.len() as u32);
            for osd in self.osds.values() {
                osd.encode(e);
            }
            e.put_u32(self.pools.len() as u32);
            for pool in self.pools.values() {
                pool.encode(e);
            }
            e.put_u64(self.next_pool_id);
            e.put_blob(&self.crush.encode());
            e.put_u32(self.flags.0);
            self.pg_history.encode(e);
            e.put_u32(self.config.len() as u32);
            for (key, value) in &self.config {
                key.encode(e);
                value.encode(e);
            }
            self.pg_temp.encode(e);
        });
    }
}

impl Decode for OsdMap {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("OsdMap", OSD_MAP_VERSION, |d, version| {
            let fsid_low = u128::from(d.get_u64()?);
            let fsid = fsid_low | (u128::from(d.get_u64()?) << 64);
            let epoch = Epoch::decode(d)?;
            let mut osds = BTreeMap::new();
            for _ in 0..d.get_count("osds", 8)? {
                let osd = OsdInfo::decode(d)?;
                osds.insert(osd.id, osd);
            }
            let mut pools = BTreeMap::new();
            for _ in 0..d.get_count("pools", 8)? {
                let pool = PoolInfo::decode(d)?;
                pools.insert(pool.id, pool);
            }
            let next_pool_id = d.get_u64()?;
            let crush_bytes = d.get_blob("crush map", carmine_types::limits::MESSAGE_BYTES_MAX)?;
            let crush = CrushMap::decode(&crush_bytes).map_err(|_| DecodeError::Invalid {
                what: "crush map",
                value: crush_bytes.len() as u64,
            })?;
            let flags = OsdFlags(d.get_u32()?);
            let pg_history = if version >= 2 {
                BTreeMap::decode(d)?
            } else {
                BTreeMap::new()
            };
            let mut config = BTreeMap::new();
            if version >= 3 {
                for _ in 0..d.get_count("config keys", 8)? {
                    let key = d.get_string("config key", CONFIG_KEY_BYTES_MAX)?;
                    let value = d.get_string("config value", CONFIG_VALUE_BYTES_MAX)?;
                    config.insert(key, value);
                }
            }
            let pg_temp: BTreeMap<carmine_types::PgId, Vec<OsdId>> = if version >= 4 {
                BTreeMap::decode(d)?
            } else {
                BTreeMap::new()
            };
            if let Some(long) = pg_temp
                .values()
                .find(|v| v.len() > usize::from(POOL_SIZE_MAX))
            {
                return Err(DecodeError::TooLong {
                    what: "pg_temp entry",
                    length: long.len(),
                    limit: usize::from(POOL_SIZE_MAX),
                });
            }
            Ok(OsdMap {
                fsid,
                epoch,
                osds,
                pools,
                next_pool_id,
                crush,
                flags,
                pg_history,
                config,
                pg_temp,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn booted_info() -> OsdInfo {
        OsdInfo {
            id: OsdId(7),
            up: true,
            weight: WEIGHT_IN,
            shard_addrs: vec!["127.0.0.1:6807".parse().unwrap()],
            up_from: Epoch(3),
            down_at: Epoch(0),
            up_thru: Epoch(5),
            host: "node7".to_string(),
            primary_affinity: 0x8000,
            instance: 42,
            fullness: Fullness::NearFull,
            lost_at: Epoch(4),
        }
    }

    #[test]
    fn osd_info_v6_round_trips_lost_at_and_older_versions_decode_without_it() {
        let info = booted_info();
        let bytes = info.to_bytes();
        assert_eq!(bytes[0], 6, "version");
        assert_eq!(OsdInfo::from_bytes(&bytes).unwrap(), info);
        // Version 5 wrote the same fields less the trailing lost_at (4 bytes), version
        // 4 less the up_thru before it, and version 3 less the fullness byte as well.
        let older = |version: u8, cut: usize| {
            let mut old = bytes.to_vec();
            old.truncate(old.len() - cut);
            old[0] = version;
            let body = u32::from_le_bytes(old[2..6].try_into().unwrap()) - cut as u32;
            old[2..6].copy_from_slice(&body.to_le_bytes());
            OsdInfo::from_bytes(&old).unwrap()
        };
        let v5 = older(5, 4);
        assert_eq!((v5.lost_at, v5.up_thru), (Epoch(0), Epoch(5)));
        let v4 = older(4, 8);
        assert_eq!(v4.up_thru, Epoch(0));
        assert_eq!(v4.fullness, Fullness::NearFull);
        let v3 = older(3, 9);
        assert_eq!(v3.fullness, Fullness::None);
        assert_eq!(v3.instance, 42);
    }

    #[test]
    fn only_a_down_osd_is_marked_lost_and_the_mark_stays_when_it_returns() {
        let mut map = OsdMap::new_dev(2);
        let addrs = vec!["127.0.0.1:6800".parse().unwrap()];
        map.boot_osd(OsdId(0), addrs.clone(), "h0".into()).unwrap();
        map.epoch = map.epoch.next();
        assert_eq!(map.mark_lost(OsdId(0)), Err(OsdMapError::OsdIsUp(OsdId(0))));
        assert_eq!(
            map.mark_lost(OsdId(5)),
            Err(OsdMapError::NoSuchOsd(OsdId(5)))
        );
        map.mark_down(OsdId(0)).unwrap();
        map.epoch = map.epoch.next();
        map.mark_lost(OsdId(0)).unwrap();
        let lost_at = map.epoch.next();
        assert_eq!(map.osd(OsdId(0)).unwrap().lost_at, lost_at);
        map.epoch = map.epoch.next();
        map.boot_osd(OsdId(0), addrs, "h0".into()).unwrap();
        assert_eq!(map.osd(OsdId(0)).unwrap().lost_at, lost_at);
    }

    #[test]
    fn a_purged_osd_leaves_the_map_crush_and_pg_temps_and_may_boot_anew() {
        let mut map = OsdMap::new_dev(3);
        let addr = |port: u16| vec![SocketAddr::from(([127, 0, 0, 1], port))];
        for id in 0..3 {
            map.boot_osd(OsdId(id), addr(6800 + id as u16), format!("h{id}"))
                .unwrap();
        }
        map.epoch = map.epoch.next();
        let pool = map.create_pool(PoolSpec::replicated("p", 2, 8)).unwrap();
        let pg = carmine_types::PgId { pool, seed: 0 };
        map.set_pg_temp(pg, vec![OsdId(2), OsdId(0)]).unwrap();
        assert_eq!(map.purge_osd(OsdId(2)), Err(OsdMapError::PurgeUp(OsdId(2))));
        assert_eq!(
            map.purge_osd(OsdId(9)),
            Err(OsdMapError::NoSuchOsd(OsdId(9)))
        );
        map.mark_down(OsdId(2)).unwrap();
        map.epoch = map.epoch.next();
        let before = map.clone();
        map.purge_osd(OsdId(2)).unwrap();
        map.epoch = map.epoch.next();
        assert!(map.osd(OsdId(2)).is_none());
        assert!(!map.crush.device_in_any_bucket(2));
        assert!(map.pg_temp.is_empty());
        for seed in 0..8 {
            let pgid = carmine_types::PgId { pool, seed };
            let mapping = map.pg_mapping(pgid).unwrap();
            assert!(!mapping.up.contains(&OsdId(2)) && !mapping.acting.contains(&OsdId(2)));
            assert_eq!(mapping.acting.len(), 2, "{pgid} {mapping:?}");
        }
        // Subscribers get it as an incremental.
        let inc = crate::OsdMapIncremental::between(&before, &map);
        assert_eq!(before.apply(&inc).unwrap(), map);
        // The id boots again as a new OSD, back in CRUSH under a host of its own.
        map.boot_osd(OsdId(2), addr(6900), "h2".into()).unwrap();
        let info = map.osd(OsdId(2)).unwrap();
        assert_eq!(
            (info.up, info.lost_at, info.up_thru),
            (true, Epoch(0), Epoch(0))
        );
        assert!(map.crush.device_in_any_bucket(2));
    }

    #[test]
    fn fullness_has_ceph_defaults_and_hysteresis() {
        let ratios = FullRatios::default();
        assert!(ratios.in_order());
        let at = |percent: u64, now| ratios.fullness(percent, 100, now);
        assert_eq!(at(50, Fullness::None), Fullness::None);
        assert_eq!(at(85, Fullness::None), Fullness::NearFull);
        assert_eq!(at(90, Fullness::None), Fullness::BackfillFull);
        assert_eq!(at(95, Fullness::None), Fullness::Full);
        // Leaving full needs a drop below 0.94, not just below 0.95.
        assert_eq!(
            ratios.fullness(9_450, 10_000, Fullness::Full),
            Fullness::Full
        );
        assert_eq!(
            ratios.fullness(9_350, 10_000, Fullness::Full),
            Fullness::BackfillFull
        );
        assert_eq!(
            ratios.fullness(10, u64::MAX, Fullness::Full),
            Fullness::None
        );
        let config = BTreeMap::from([(
            crate::settings::MON_OSD_FULL_RATIO.to_string(),
            "0.5".to_string(),
        )]);
        let low = FullRatios::from_config(&config);
        assert_eq!(low.full, 0.5);
        assert!(!low.in_order());
        assert_eq!(low.fullness(60, 100, Fullness::None), Fullness::Full);
    }

    /// `OsdInfo` as version 1 wrote it (before primary affinity), kept as bytes.
    const OSD_INFO_V1: &str = concat!(
        "0101",
        "25000000", // version 1, compat 1, body length 37
        "07000000",
        "01",
        "00000100", // id 7, up, weight 1.0
        "01000000",
        "04",
        "7f000001",
        "971a", // one shard address, 127.0.0.1:6807
        "03000000",
        "00000000", // up_from 3, down_at 0
        "05000000",
        "6e6f646537", // host "node7"
    );

    #[test]
    fn osd_info_round_trips_with_primary_affinity() {
        let info = booted_info();
        let bytes = info.to_bytes();
        assert_eq!(bytes[0], OSD_INFO_VERSION, "version");
        assert_eq!(bytes[1], 1, "compat: version 1 readers skip the new field");
        assert_eq!(OsdInfo::from_bytes(&bytes).unwrap(), info);
    }

    #[test]
    fn osd_info_version_1_decodes_with_default_affinity() {
        let bytes: Vec<u8> = (0..OSD_INFO_V1.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&OSD_INFO_V1[at..at + 2], 16).unwrap())
            .collect();
        let info = OsdInfo::from_bytes(&bytes).unwrap();
        let expected = OsdInfo {
            primary_affinity: OsdInfo::PRIMARY_AFFINITY_DEFAULT,
            instance: 0,
            fullness: Fullness::None,
            up_thru: Epoch(0),
            lost_at: Epoch(0),
            ..booted_info()
        };
        assert_eq!(info, expected);
    }

    #[test]
    fn affinity_above_one_is_refused() {
        let mut map = OsdMap::new_dev(2);
        map.boot_osd(
            OsdId(0),
            vec!["127.0.0.1:6800".parse().unwrap()],
            "h0".into(),
        )
        .unwrap();
        assert!(!map.has_primary_affinity());
        assert_eq!(
            map.set_primary_affinity(OsdId(0), 0x10001),
            Err(OsdMapError::InvalidPrimaryAffinity(0x10001))
        );
        assert_eq!(
            map.set_primary_affinity(OsdId(1), 0),
            Err(OsdMapError::NoSuchOsd(OsdId(1)))
        );
        map.set_primary_affinity(OsdId(0), 0).unwrap();
        assert_eq!(map.osd(OsdId(0)).unwrap().primary_affinity, 0);
        assert!(map.has_primary_affinity());
        let mut corrupt = map.osd(OsdId(0)).unwrap().to_bytes().to_vec();
        // The affinity is the u32 before the trailing u64 instance id, u8 fullness,
        // u32 up_thru and u32 lost_at.
        let at = corrupt.len() - 21;
        corrupt[at..at + 4].copy_from_slice(&0x10001u32.to_le_bytes());
        assert!(OsdInfo::from_bytes(&corrupt).is_err());
    }

    #[test]
    fn config_keys_round_trip_and_are_bounded() {
        let mut map = OsdMap::new_dev(1);
        map.set_config("mgr/dashboard/url", Some("http://x"))
            .unwrap();
        map.set_config("empty", Some("")).unwrap();
        assert_eq!(OsdMap::from_bytes(&map.to_bytes()).unwrap(), map);
        assert!(map.set_config("", Some("v")).is_err());
        assert!(map.set_config("has space", Some("v")).is_err());
        assert!(map
            .set_config(&"k".repeat(CONFIG_KEY_BYTES_MAX + 1), Some("v"))
            .is_err());
        let big = "v".repeat(CONFIG_VALUE_BYTES_MAX + 1);
        assert!(map.set_config("big", Some(&big)).is_err());
        assert!(map.set_config("missing", None).is_err());
        map.set_config("empty", None).unwrap();
        assert_eq!(map.config.len(), 1);
    }

    #[test]
    fn pg_temp_round_trips_and_a_v3_map_decodes_without_it() {
        let mut map = OsdMap::new_dev(3);
        for id in 0..3 {
            let addr = format!("127.0.0.1:{}", 6800 + id).parse().unwrap();
            map.boot_osd(OsdId(id), vec![addr], format!("h{id}"))
                .unwrap();
        }
        map.create_pool(PoolSpec::replicated("rbd", 3, 4)).unwrap();
        let pg = carmine_types::PgId {
            pool: carmine_types::PoolId(1),
            seed: 2,
        };
        map.set_pg_temp(pg, vec![OsdId(2), OsdId(0)]).unwrap();
        let bytes = map.to_bytes();
        assert_eq!(bytes[0], 4, "version");
        assert_eq!(OsdMap::from_bytes(&bytes).unwrap(), map);

        // The same map as version 3 wrote it: no trailing pg_temp, version byte 3.
        let mut v3 = map.clone();
        v3.pg_temp.clear();
        let mut v3_bytes = v3.to_bytes().to_vec();
        let body = v3_bytes.len() - 6 - 4; // drop the empty pg_temp count
        v3_bytes.truncate(6 + body);
        v3_bytes[0] = 3;
        v3_bytes[2..6].copy_from_slice(&(body as u32).to_le_bytes());
        assert_eq!(OsdMap::from_bytes(&v3_bytes).unwrap(), v3);
    }
}
