//! OSD map incrementals: what changed from epoch `e` to `e + 1`, in the spirit of
//! Ceph's `OSDMap::Incremental`.
//!
//! A subscriber that holds epoch `e` needs only the change, not the whole next map: with
//! a thousand OSDs one OSD going down is a few hundred bytes instead of a few hundred
//! kilobytes. An incremental records every top-level field of [`OsdMap`] that changed:
//! keyed collections (OSDs, pools, PG histories, config keys, pg_temp) as the entries
//! set (whole entries, new or changed) and the keys removed; scalars (next pool id,
//! flags) and the CRUSH map only when they changed.
//!
//! Each incremental carries the CRC-32C of the new map's full encoding (Ceph's
//! `full_crc`). [`OsdMap::apply`] recomputes it on the map it built and refuses the
//! result on a mismatch, so a subscriber whose map diverged from the monitor's, or an
//! incremental that forgot a field, is detected rather than acted on.
//!
//! ```
//! use carmine_clustermap::{OsdMap, OsdMapIncremental};
//! use carmine_types::OsdId;
//!
//! let mut old = OsdMap::new_dev(3);
//! old.boot_osd(OsdId(0), vec!["127.0.0.1:6800".parse().unwrap()], "h0".into()).unwrap();
//! let mut new = old.clone();
//! new.mark_down(OsdId(0)).unwrap();
//! new.epoch = old.epoch.next();
//! let inc = OsdMapIncremental::between(&old, &new);
//! assert_eq!(old.apply(&inc).unwrap(), new);
//! ```
//!
//! Encoding, version 1 (inside the usual envelope): `u64 fsid_low | u64 fsid_high |
//! u32 epoch | u32 full_crc | delta<OsdId, OsdInfo> osds | delta<PoolId, PoolInfo>
//! pools | option<u64> next_pool_id | option<blob> crush | option<u32> flags |
//! delta<PgId, vec<PastInterval>> pg_history | delta<string, string> config |
//! delta<PgId, vec<OsdId>> pg_temp`, where `delta<K, V>` is
//! `u32 count | (K, V) × count | u32 count | K × count` (set, then removed).

use crate::osdmap::{OsdFlags, OsdInfo, OsdMap, CONFIG_KEY_BYTES_MAX, CONFIG_VALUE_BYTES_MAX};
use crate::pool::{PoolInfo, POOL_SIZE_MAX};
use crate::PastInterval;
use carmine_crush::CrushMap;
use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
use carmine_types::{Epoch, OsdId, PgId, PoolId};
use std::collections::BTreeMap;

/// Version of the incremental's encoding.
const INCREMENTAL_VERSION: u8 = 1;

/// The CRC-32C of a map's canonical encoding (Ceph's `OSDMap::full_crc`).
pub fn map_crc(map: &OsdMap) -> u32 {
    crc32c::crc32c(&map.to_bytes())
}

/// The change to one keyed collection: entries set (added or changed, whole), and keys
/// removed. The two never share a key.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MapDelta<K: Ord, V> {
    pub set: BTreeMap<K, V>,
    pub removed: Vec<K>,
}

impl<K: Ord + Clone, V: Clone + PartialEq> MapDelta<K, V> {
    /// The change that turns `old` into `new`.
    pub fn between(old: &BTreeMap<K, V>, new: &BTreeMap<K, V>) -> Self {
        let set = new
            .iter()
            .filter(|(key, value)| old.get(key) != Some(value))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        let removed = old
            .keys()
            .filter(|key| !new.contains_key(key))
            .cloned()
            .collect();
        Self { set, removed }
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.removed.is_empty()
    }

    /// Applies the change to `map`. Removing a key the map lacks means the holder's map
    /// is not the one the change was computed from.
    fn apply_to(&self, map: &mut BTreeMap<K, V>, what: &'static str) -> Result<(), ApplyError> {
        for key in &self.removed {
            if map.remove(key).is_none() {
                return Err(ApplyError::Diverged(what));
            }
        }
        for (key, value) in &self.set {
            map.insert(key.clone(), value.clone());
        }
        Ok(())
    }
}

impl<K: Ord + Encode, V: Encode> Encode for MapDelta<K, V> {
    fn encode(&self, e: &mut Encoder) {
        self.set.encode(e);
        self.removed.encode(e);
    }
}

impl<K: Ord + Decode, V: Decode> Decode for MapDelta<K, V> {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        let set = BTreeMap::<K, V>::decode(d)?;
        let removed = Vec::<K>::decode(d)?;
        if removed.iter().any(|key| set.contains_key(key)) {
            return Err(DecodeError::Invalid {
                what: "map delta: a key both set and removed",
                value: removed.len() as u64,
            });
        }
        Ok(Self { set, removed })
    }
}

/// What changed from one epoch of the map to the next.
#[derive(Debug, Clone, PartialEq)]
pub struct OsdMapIncremental {
    pub fsid: u128,
    /// The epoch this incremental produces; it applies to `epoch - 1`.
    pub epoch: Epoch,
    /// CRC-32C of the resulting map's encoding ([`map_crc`]).
    pub full_crc: u32,
    pub osds: MapDelta<OsdId, OsdInfo>,
    pub pools: MapDelta<PoolId, PoolInfo>,
    pub next_pool_id: Option<u64>,
    /// The whole new CRUSH map, only when it changed.
    pub crush: Option<CrushMap>,
    pub flags: Option<OsdFlags>,
    pub pg_history: MapDelta<PgId, Vec<PastInterval>>,
    pub config: MapDelta<String, String>,
    pub pg_temp: MapDelta<PgId, Vec<OsdId>>,
}

/// Why an incremental does not apply to a map.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApplyError {
    #[error("the incremental belongs to another cluster")]
    OtherCluster,
    #[error("the incremental to {incremental} does not follow the map held, {held}")]
    NotNext { held: Epoch, incremental: Epoch },
    #[error("the map held lacks {0} the incremental removes: it diverged from the monitor's")]
    Diverged(&'static str),
    #[error("checksum mismatch: the incremental promises {expected:#010x}, the map built has {actual:#010x}")]
    Checksum { expected: u32, actual: u32 },
}

impl OsdMapIncremental {
    /// The change from `old` to `new`, which must be the next epoch of the same cluster.
    pub fn between(old: &OsdMap, new: &OsdMap) -> Self {
        assert_eq!(old.fsid, new.fsid, "an incremental stays in one cluster");
        assert_eq!(
            new.epoch.0,
            old.epoch.0 + 1,
            "an incremental spans one epoch"
        );
        // Destructured without `..`: a field added to OsdMap fails to compile here until
        // the incremental carries it.
        let OsdMap {
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
        } = new;
        Self {
            fsid: *fsid,
            epoch: *epoch,
            full_crc: map_crc(new),
            osds: MapDelta::between(&old.osds, osds),
            pools: MapDelta::between(&old.pools, pools),
            next_pool_id: (old.next_pool_id != *next_pool_id).then_some(*next_pool_id),
            crush: (old.crush != *crush).then(|| crush.clone()),
            flags: (old.flags != *flags).then_some(*flags),
            pg_history: MapDelta::between(&old.pg_history, pg_history),
            config: MapDelta::between(&old.config, config),
            pg_temp: MapDelta::between(&old.pg_temp, pg_temp),
        }
    }

    /// The encoded size in bytes (what a subscriber receives for this epoch).
    pub fn encoded_bytes(&self) -> usize {
        let mut e = Encoder::new();
        self.encode(&mut e);
        e.len()
    }

    /// Checks what the envelope cannot: the limits a full map's decode enforces.
    fn validate(&self) -> Result<(), DecodeError> {
        for (key, value) in &self.config.set {
            if key.is_empty() || key.len() > CONFIG_KEY_BYTES_MAX {
                return Err(DecodeError::TooLong {
                    what: "config key",
                    length: key.len(),
                    limit: CONFIG_KEY_BYTES_MAX,
                });
            }
            if value.len() > CONFIG_VALUE_BYTES_MAX {
                return Err(DecodeError::TooLong {
                    what: "config value",
                    length: value.len(),
                    limit: CONFIG_VALUE_BYTES_MAX,
                });
            }
        }
        if let Some(long) = self
            .pg_temp
            .set
            .values()
            .find(|v| v.len() > usize::from(POOL_SIZE_MAX))
        {
            return Err(DecodeError::TooLong {
                what: "pg_temp entry",
                length: long.len(),
                limit: usize::from(POOL_SIZE_MAX),
            });
        }
        if self.epoch.0 < 2 {
            return Err(DecodeError::Invalid {
                what: "incremental epoch",
                value: u64::from(self.epoch.0),
            });
        }
        Ok(())
    }
}

impl OsdMap {
    /// The map `inc` turns this one into, checked against the incremental's checksum.
    pub fn apply(&self, inc: &OsdMapIncremental) -> Result<OsdMap, ApplyError> {
        if inc.fsid != self.fsid {
            return Err(ApplyError::OtherCluster);
        }
        if inc.epoch.0 != self.epoch.0 + 1 {
            return Err(ApplyError::NotNext {
                held: self.epoch,
                incremental: inc.epoch,
            });
        }
        // Destructured without `..`, so a field added to the incremental and not
        // applied here is an unused binding (a warning, an error under clippy -D).
        let OsdMapIncremental {
            fsid: _,
            epoch,
            full_crc,
            osds,
            pools,
            next_pool_id,
            crush,
            flags,
            pg_history,
            config,
            pg_temp,
        } = inc;
        let mut next = self.clone();
        next.epoch = *epoch;
        osds.apply_to(&mut next.osds, "an OSD")?;
        pools.apply_to(&mut next.pools, "a pool")?;
        if let Some(next_pool_id) = next_pool_id {
            next.next_pool_id = *next_pool_id;
        }
        if let Some(crush) = crush {
            next.crush = crush.clone();
        }
        if let Some(flags) = flags {
            next.flags = *flags;
        }
        pg_history.apply_to(&mut next.pg_history, "a PG history")?;
        config.apply_to(&mut next.config, "a config key")?;
        pg_temp.apply_to(&mut next.pg_temp, "a pg_temp entry")?;
        let actual = map_crc(&next);
        if actual != *full_crc {
            return Err(ApplyError::Checksum {
                expected: *full_crc,
                actual,
            });
        }
        Ok(next)
    }
}

impl Encode for OsdMapIncremental {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(INCREMENTAL_VERSION, 1, |e| {
            e.put_u64(self.fsid as u64);
            e.put_u64((self.fsid >> 64) as u64);
            self.epoch.encode(e);
            e.put_u32(self.full_crc);
            self.osds.encode(e);
            self.pools.encode(e);
            self.next_pool_id.encode(e);
            match &self.crush {
                None => e.put_u8(0),
                Some(crush) => {
                    e.put_u8(1);
                    e.put_blob(&crush.encode());
                }
            }
            self.flags.map(|flags| flags.0).encode(e);
            self.pg_history.encode(e);
            self.config.encode(e);
            self.pg_temp.encode(e);
        });
    }
}

impl Decode for OsdMapIncremental {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("OsdMapIncremental", INCREMENTAL_VERSION, |d, _| {
            let fsid_low = u128::from(d.get_u64()?);
            let fsid = fsid_low | (u128::from(d.get_u64()?) << 64);
            let epoch = Epoch::decode(d)?;
            let full_crc = d.get_u32()?;
            let osds = MapDelta::decode(d)?;
            let pools = MapDelta::decode(d)?;
            let next_pool_id = Option::<u64>::decode(d)?;
            let crush = match d.get_u8()? {
                0 => None,
                1 => {
                    let bytes =
                        d.get_blob("crush map", carmine_types::limits::MESSAGE_BYTES_MAX)?;
                    let crush = CrushMap::decode(&bytes).map_err(|_| DecodeError::Invalid {
                        what: "crush map",
                        value: bytes.len() as u64,
                    })?;
                    Some(crush)
                }
                other => {
                    return Err(DecodeError::Invalid {
                        what: "option tag",
                        value: u64::from(other),
                    })
                }
            };
            let flags = Option::<u32>::decode(d)?.map(OsdFlags);
            let inc = OsdMapIncremental {
                fsid,
                epoch,
                full_crc,
                osds,
                pools,
                next_pool_id,
                crush,
                flags,
                pg_history: MapDelta::decode(d)?,
                config: MapDelta::decode(d)?,
                pg_temp: MapDelta::decode(d)?,
            };
            inc.validate()?;
            Ok(inc)
        })
    }
}

#[cfg(test)]
#[path = "incremental_tests.rs"]
mod tests;
