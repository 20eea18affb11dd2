//! Pure placement: object name → PG → up/acting OSDs → owning shard, computed the same
//! way by clients, peers and the OSD itself.

use crate::osdmap::OsdMap;
use carmine_crush::hash::{crush_hash32_rjenkins1_2, stable_mod, str_hash_rjenkins};
use carmine_crush::CRUSH_ITEM_NONE;
use carmine_types::{OsdId, PgId, PoolId, ShardIndex};

/// Where a PG lives at one epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgMapping {
    /// CRUSH's result before removing down OSDs.
    pub raw: Vec<OsdId>,
    /// The OSDs that are up, in CRUSH order.
    pub up: Vec<OsdId>,
    /// The OSDs that serve the PG (equal to `up` until pg_temp exists).
    pub acting: Vec<OsdId>,
    pub primary: Option<OsdId>,
}

/// The shard of an OSD with `shard_count` shards that owns `pg`. Every party computes
/// it from the PG id alone, so a request needs no hop between cores.
pub fn pg_shard(pg: PgId, shard_count: u16) -> ShardIndex {
    assert!(shard_count > 0, "an OSD has at least one shard");
    let mixed = crush_hash32_rjenkins1_2(pg.seed, pg.pool.0 as u32);
    ShardIndex((mixed % u32::from(shard_count)) as u16)
}

impl OsdMap {
    /// The PG that holds object `name` in `pool` (Ceph's `object_locator_to_pg` +
    /// `raw_pg_to_pg`). `None` if the pool does not exist.
    pub fn object_to_pg(&self, pool: PoolId, name: &str) -> Option<PgId> {
        let info = self.pools.get(&pool)?;
        let hash = str_hash_rjenkins(name.as_bytes());
        let seed = stable_mod(hash, info.pg_num, info.pg_num_mask());
        Some(PgId { pool, seed })
    }

    /// The CRUSH input for a PG (Ceph's `raw_pg_to_pps` with `HASHPSPOOL`).
    pub fn pg_placement_seed(&self, pg: PgId) -> Option<u32> {
        let info = self.pools.get(&pg.pool)?;
        let seed = stable_mod(pg.seed, info.pgp_num, info.pgp_num_mask());
        Some(crush_hash32_rjenkins1_2(seed, pg.pool.0 as u32))
    }

    /// Maps a PG to its OSDs. `None` if the pool does not exist.
    pub fn pg_mapping(&self, pg: PgId) -> Option<PgMapping> {
        let info = self.pools.get(&pg.pool)?;
        let pps = self.pg_placement_seed(pg)?;
        let weights = self.crush_weights();
        let raw: Vec<OsdId> = self
            .crush
            .do_rule(info.crush_rule, pps, usize::from(info.size), &weights)
            .into_iter()
            .filter(|&item| item != CRUSH_ITEM_NONE && item >= 0)
            .map(|item| OsdId(item as u32))
            .filter(|osd| self.osds.contains_key(osd))
            .collect();
        let up: Vec<OsdId> = raw.iter().copied().filter(|&osd| self.is_up(osd)).collect();
        let primary = up.first().copied();
        Some(PgMapping {
            raw,
            acting: up.clone(),
            up,
            primary,
        })
    }

    /// Every PG of every pool, in order.
    pub fn all_pgs(&self) -> impl Iterator<Item = PgId> + '_ {
        self.pools.values().flat_map(|pool| {
            (0..pool.pg_num).map(move |seed| PgId {
                pool: pool.id,
                seed,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PoolSpec;
    use std::net::SocketAddr;

    fn booted_map(osd_count: u32) -> OsdMap {
        let mut map = OsdMap::new_dev(osd_count);
        for id in 0..osd_count {
            let addr: SocketAddr = format!("127.0.0.1:{}", 6800 + id).parse().unwrap();
            map.boot_osd(OsdId(id), vec![addr], format!("host{id}"))
                .unwrap();
        }
        map
    }

    #[test]
    fn size_three_pool_maps_to_three_distinct_osds() {
        let mut map = booted_map(3);
        let pool = map.create_pool(PoolSpec::replicated("rbd", 3, 64)).unwrap();
        for pg in map.all_pgs().collect::<Vec<_>>() {
            let mapping = map.pg_mapping(pg).unwrap();
            let mut acting = mapping.acting.clone();
            acting.sort();
            acting.dedup();
            assert_eq!(acting.len(), 3, "{pg} -> {:?}", mapping.acting);
            assert_eq!(mapping.primary, Some(mapping.acting[0]));
            assert_eq!(pg.pool, pool);
        }
    }

    #[test]
    fn down_osds_leave_the_up_set() {
        let mut map = booted_map(3);
        map.create_pool(PoolSpec::replicated("rbd", 3, 16)).unwrap();
        map.mark_down(OsdId(1)).unwrap();
        for pg in map.all_pgs().collect::<Vec<_>>() {
            let mapping = map.pg_mapping(pg).unwrap();
            assert!(!mapping.up.contains(&OsdId(1)));
            assert_eq!(mapping.up.len(), 2);
        }
    }

    #[test]
    fn shard_is_a_pure_function_within_range() {
        for seed in 0..100 {
            let pg = PgId::new(1, seed);
            assert!(pg_shard(pg, 4).0 < 4);
            assert_eq!(pg_shard(pg, 4), pg_shard(pg, 4));
            assert_eq!(pg_shard(pg, 1), ShardIndex(0));
        }
    }
}
