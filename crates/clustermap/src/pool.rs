//! Pools: replicated groups of PGs sharing a size, `min_size` and CRUSH rule.

use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
use carmine_types::limits::POOL_NAME_BYTES_MAX;
use carmine_types::{Epoch, PoolId};
use std::collections::BTreeSet;

/// Most PGs one pool may have.
pub const PG_NUM_MAX: u32 = 65_536;
/// Largest replica count.
pub const POOL_SIZE_MAX: u8 = 10;
/// Most removed self-managed snapshot ids a pool remembers. Kept as single ids (Ceph
/// keeps an interval set); past this many, removing a snapshot is refused.
pub const REMOVED_SNAPS_MAX: usize = 16_384;

/// What an operator asks for when creating a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSpec {
    pub name: String,
    pub size: u8,
    /// `None` picks Ceph's default, `size - size/2`.
    pub min_size: Option<u8>,
    pub pg_num: u32,
    pub crush_rule: u32,
}

impl PoolSpec {
    pub fn replicated(name: &str, size: u8, pg_num: u32) -> Self {
        Self {
            name: name.to_string(),
            size,
            min_size: None,
            pg_num,
            crush_rule: 0,
        }
    }
}

/// A pool as the map records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolInfo {
    pub id: PoolId,
    pub name: String,
    pub size: u8,
    pub min_size: u8,
    pub pg_num: u32,
    /// PGs used for placement (`pgp_num`); equal to `pg_num` until splitting exists.
    pub pgp_num: u32,
    pub crush_rule: u32,
    pub created: Epoch,
    /// The newest self-managed snapshot id allocated in this pool (0: none yet).
    /// Encoding v2; 0 from v1.
    pub snap_seq: u64,
    /// Self-managed snapshot ids removed from this pool: the OSDs trim their clones.
    /// Encoding v2; empty from v1.
    pub removed_snaps: BTreeSet<u64>,
}

/// Ceph's `calc_bits_of(n - 1)` mask: the smallest `2^k - 1 >= n - 1`.
pub(crate) fn pg_mask(count: u32) -> u32 {
    debug_assert!(count > 0);
    let bits = 32 - (count - 1).leading_zeros();
    if bits >= 32 {
        u32::MAX
    } else {
        (1u32 << bits) - 1
    }
}

impl PoolInfo {
    pub fn pg_num_mask(&self) -> u32 {
        pg_mask(self.pg_num)
    }
    pub fn pgp_num_mask(&self) -> u32 {
        pg_mask(self.pgp_num)
    }

    /// Allocates the next self-managed snapshot id (Ceph's
    /// `pg_pool_t::add_unmanaged_snap`).
    pub fn allocate_snap(&mut self) -> u64 {
        self.snap_seq += 1;
        self.snap_seq
    }

    /// Records snapshot `snap` as removed, so OSDs trim its clones.
    pub fn remove_snap(&mut self, snap: u64) -> Result<(), String> {
        if snap == 0 || snap > self.snap_seq {
            return Err(format!(
                "snapshot id {snap} was never allocated in pool '{}'",
                self.name
            ));
        }
        if self.removed_snaps.contains(&snap) {
            return Err(format!("snapshot id {snap} is already removed"));
        }
        if self.removed_snaps.len() >= REMOVED_SNAPS_MAX {
            return Err(format!(
                "pool '{}' already records {REMOVED_SNAPS_MAX} removed snapshots",
                self.name
            ));
        }
        self.removed_snaps.insert(snap);
        Ok(())
    }
}

pub(crate) fn validate_pool_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("pool name is empty".into());
    }
    if name.len() > POOL_NAME_BYTES_MAX {
        return Err(format!(
            "pool name is {} bytes; the limit is {POOL_NAME_BYTES_MAX}",
            name.len()
        ));
    }
    if name.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!(
            "pool name {name:?} contains whitespace or control characters"
        ));
    }
    Ok(())
}

impl Encode for PoolInfo {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(2, 1, |e| {
            self.id.encode(e);
            self.name.encode(e);
            e.put_u8(self.size);
            e.put_u8(self.min_size);
            e.put_u32(self.pg_num);
            e.put_u32(self.pgp_num);
            e.put_u32(self.crush_rule);
            self.created.encode(e);
            e.put_u64(self.snap_seq);
            e.put_u32(self.removed_snaps.len() as u32);
            for &snap in &self.removed_snaps {
                e.put_u64(snap);
            }
        });
    }
}

impl Decode for PoolInfo {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("PoolInfo", 2, |d, version| {
            let mut pool = PoolInfo {
                id: PoolId::decode(d)?,
                name: d.get_string("pool name", POOL_NAME_BYTES_MAX)?,
                size: d.get_u8()?,
                min_size: d.get_u8()?,
                pg_num: d.get_u32()?,
                pgp_num: d.get_u32()?,
                crush_rule: d.get_u32()?,
                created: Epoch::decode(d)?,
                snap_seq: 0,
                removed_snaps: BTreeSet::new(),
            };
            if version >= 2 {
                pool.snap_seq = d.get_u64()?;
                let count = d.get_count("removed snaps", 8)?;
                if count > REMOVED_SNAPS_MAX {
                    return Err(DecodeError::TooLong {
                        what: "removed snaps",
                        length: count,
                        limit: REMOVED_SNAPS_MAX,
                    });
                }
                for _ in 0..count {
                    pool.removed_snaps.insert(d.get_u64()?);
                }
            }
            let invalid = |what, value| DecodeError::Invalid { what, value };
            if pool.pg_num == 0 || pool.pg_num > PG_NUM_MAX {
                return Err(invalid("pool pg_num", u64::from(pool.pg_num)));
            }
            if pool.pgp_num == 0 || pool.pgp_num > pool.pg_num {
                return Err(invalid("pool pgp_num", u64::from(pool.pgp_num)));
            }
            if pool.size == 0 || pool.size > POOL_SIZE_MAX {
                return Err(invalid("pool size", u64::from(pool.size)));
            }
            if pool.min_size == 0 || pool.min_size > pool.size {
                return Err(invalid("pool min_size", u64::from(pool.min_size)));
            }
            Ok(pool)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> PoolInfo {
        PoolInfo {
            id: PoolId(1),
            name: "rbd".into(),
            size: 3,
            min_size: 2,
            pg_num: 8,
            pgp_num: 8,
            crush_rule: 0,
            created: Epoch(2),
            snap_seq: 0,
            removed_snaps: BTreeSet::new(),
        }
    }

    #[test]
    fn snapshot_ids_are_allocated_and_removed_once() {
        let mut pool = pool();
        assert_eq!(pool.allocate_snap(), 1);
        assert_eq!(pool.allocate_snap(), 2);
        assert!(pool.remove_snap(3).is_err());
        pool.remove_snap(1).unwrap();
        assert!(pool.remove_snap(1).is_err());
        let decoded = PoolInfo::from_shared(pool.to_bytes()).unwrap();
        assert_eq!(decoded, pool);
    }

    #[test]
    fn version_1_pools_decode_without_snapshots() {
        let pool = pool();
        let mut e = Encoder::new();
        e.versioned(1, 1, |e| {
            pool.id.encode(e);
            pool.name.encode(e);
            e.put_u8(pool.size);
            e.put_u8(pool.min_size);
            e.put_u32(pool.pg_num);
            e.put_u32(pool.pgp_num);
            e.put_u32(pool.crush_rule);
            pool.created.encode(e);
        });
        assert_eq!(PoolInfo::from_shared(e.into_bytes()).unwrap(), pool);
    }

    #[test]
    fn masks_match_ceph() {
        assert_eq!(pg_mask(1), 0);
        assert_eq!(pg_mask(2), 1);
        assert_eq!(pg_mask(8), 7);
        assert_eq!(pg_mask(12), 15);
        assert_eq!(pg_mask(64), 63);
        assert_eq!(pg_mask(65), 127);
    }
}
