//! Pure placement: object name → PG → up/acting OSDs → owning shard, computed the same
//! way by clients, peers and the OSD itself.

use crate::osdmap::{OsdInfo, OsdMap};
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
    /// The OSDs that serve the PG: the up members of its pg_temp entry when it has
    /// one with an up member, else `up`.
    pub acting: Vec<OsdId>,
    /// The first OSD of `acting`: CRUSH's first up OSD, unless primary affinity moved
    /// another one to the front or a pg_temp entry names another.
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

    /// Maps a PG to its OSDs (Ceph's `_pg_to_up_acting_osds` without upmap and
    /// primary_temp): CRUSH, removal of OSDs that do not exist, removal of down OSDs,
    /// primary affinity, then the pg_temp entry's up members as the acting set (an
    /// entry with no up member is ignored, as Ceph's `_get_temp_osds` does).
    /// `None` if the pool does not exist.
    pub fn pg_mapping(&self, pg: PgId) -> Option<PgMapping> {
        let info = self.pools.get(&pg.pool)?;
        let pps = self.pg_placement_seed(pg)?;
        let weights = self.crush_weights();
        let raw: Vec<OsdId> = self
            .crush
            .do_rule_with_args(
                info.crush_rule,
                pps,
                usize::from(info.size),
                &weights,
                Some(pg.pool.0), // the pool's choose_args, else the default set
            )
            .into_iter()
            .filter(|&item| item != CRUSH_ITEM_NONE && item >= 0)
            .map(|item| OsdId(item as u32))
            .filter(|osd| self.osds.contains_key(osd))
            .collect();
        let mut up: Vec<OsdId> = raw.iter().copied().filter(|&osd| self.is_up(osd)).collect();
        let mut primary = up.first().copied();
        self.apply_primary_affinity(pps, &mut up, &mut primary);
        let temp: Vec<OsdId> = self
            .pg_temp
            .get(&pg)
            .map(|temp| temp.iter().copied().filter(|&o| self.is_up(o)).collect())
            .unwrap_or_default();
        let acting = if temp.is_empty() {
            up.clone()
        } else {
            primary = temp.first().copied();
            temp
        };
        Some(PgMapping {
            raw,
            acting,
            up,
            primary,
        })
    }

    /// Ceph's `OSDMap::_apply_primary_affinity` for a replicated pool: walk the up set
    /// in order and take the first OSD that accepts, where an OSD with affinity `a`
    /// below 1.0 declines when `crush_hash32_2(pps, osd) >> 16 >= a` (so it keeps a
    /// share `a` of the PGs it would lead). If every OSD declines, the first one that
    /// declined stays primary. The new primary moves to the front; the others keep
    /// their order. Nothing changes unless an OSD of the set has a non-default
    /// affinity, so maps without affinities place exactly as before.
    fn apply_primary_affinity(&self, pps: u32, up: &mut Vec<OsdId>, primary: &mut Option<OsdId>) {
        let affinity = |osd: OsdId| {
            self.osds
                .get(&osd)
                .map_or(OsdInfo::PRIMARY_AFFINITY_DEFAULT, |info| {
                    info.primary_affinity
                })
        };
        if up
            .iter()
            .all(|&osd| affinity(osd) == OsdInfo::PRIMARY_AFFINITY_DEFAULT)
        {
            return;
        }
        let mut chosen = None;
        for (index, &osd) in up.iter().enumerate() {
            let osd_affinity = affinity(osd);
            let declines = osd_affinity < OsdInfo::PRIMARY_AFFINITY_MAX
                && (crush_hash32_rjenkins1_2(pps, osd.0) >> 16) >= osd_affinity;
            if !declines {
                chosen = Some(index);
                break;
            }
            // Declined, but remembered in case every OSD declines.
            chosen = chosen.or(Some(index));
        }
        let Some(index) = chosen else {
            return; // empty up set
        };
        let new_primary = up.remove(index);
        up.insert(0, new_primary);
        *primary = Some(new_primary);
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

    fn mappings(map: &OsdMap) -> Vec<(PgId, PgMapping)> {
        let pgs: Vec<PgId> = map.all_pgs().collect();
        pgs.into_iter()
            .map(|pg| (pg, map.pg_mapping(pg).unwrap()))
            .collect()
    }

    #[test]
    fn zero_affinity_osd_hands_its_primaries_to_the_next_osd() {
        let mut map = booted_map(4);
        map.create_pool(PoolSpec::replicated("rbd", 3, 128))
            .unwrap();
        let before = mappings(&map);
        map.set_primary_affinity(OsdId(0), 0).unwrap();
        let mut moved = 0;
        for (pg, old) in before {
            let new = map.pg_mapping(pg).unwrap();
            assert_eq!(new.raw, old.raw, "{pg}: affinity never changes CRUSH");
            assert_eq!(new.primary, new.up.first().copied());
            assert_ne!(
                new.primary,
                Some(OsdId(0)),
                "{pg}: the others always accept"
            );
            if old.primary == Some(OsdId(0)) {
                let expected = vec![old.up[1], old.up[0], old.up[2]];
                assert_eq!(new.up, expected, "{pg}: the next OSD moves to the front");
                moved += 1;
            } else {
                assert_eq!(new, old, "{pg}: untouched when the primary accepts");
            }
        }
        assert!(moved > 0);
    }

    #[test]
    fn when_every_osd_declines_crush_order_stands() {
        let mut map = booted_map(4);
        map.create_pool(PoolSpec::replicated("rbd", 3, 64)).unwrap();
        let before = mappings(&map);
        for id in 0..4 {
            map.set_primary_affinity(OsdId(id), 0).unwrap();
        }
        assert_eq!(mappings(&map), before);
    }

    #[test]
    fn half_affinity_keeps_about_half_of_the_primaries() {
        let mut map = booted_map(4);
        map.create_pool(PoolSpec::replicated("rbd", 3, 4096))
            .unwrap();
        map.set_primary_affinity(OsdId(2), 0x8000).unwrap();
        let (mut led_by_crush, mut kept) = (0u32, 0u32);
        for (_, mapping) in mappings(&map) {
            if mapping.raw[0] == OsdId(2) {
                led_by_crush += 1;
                kept += u32::from(mapping.primary == Some(OsdId(2)));
            }
        }
        let share = f64::from(kept) / f64::from(led_by_crush);
        assert!(
            (0.42..0.58).contains(&share),
            "kept {kept} of {led_by_crush}"
        );
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

    #[test]
    fn pg_temp_sets_the_acting_set_and_primary_until_cleared() {
        let mut map = booted_map(4);
        map.create_pool(PoolSpec::replicated("rbd", 3, 8)).unwrap();
        let pg = map.all_pgs().next().unwrap();
        let before = map.pg_mapping(pg).unwrap();
        let mut temp = before.up.clone();
        temp.rotate_left(1);
        map.set_pg_temp(pg, temp.clone()).unwrap();
        let during = map.pg_mapping(pg).unwrap();
        assert_eq!(during.up, before.up, "pg_temp leaves the up set alone");
        assert_eq!(during.acting, temp);
        assert_eq!(during.primary, Some(temp[0]));

        // A down member leaves the acting set; with none up the entry is ignored.
        map.mark_down(temp[0]).unwrap();
        let degraded = map.pg_mapping(pg).unwrap();
        assert_eq!(degraded.acting, temp[1..].to_vec());
        assert_eq!(degraded.primary, Some(temp[1]));
        for &osd in &temp[1..] {
            map.mark_down(osd).unwrap();
        }
        let none_up = map.pg_mapping(pg).unwrap();
        assert_eq!(none_up.acting, none_up.up);
        map.clean_pg_temps();
        assert!(
            map.pg_temp.is_empty(),
            "an entry with no up member is dropped"
        );
    }

    #[test]
    fn pg_temp_equal_to_up_is_redundant_and_bad_entries_are_refused() {
        let mut map = booted_map(4);
        map.create_pool(PoolSpec::replicated("rbd", 3, 8)).unwrap();
        let pg = map.all_pgs().next().unwrap();
        let up = map.pg_mapping(pg).unwrap().up;
        map.set_pg_temp(pg, up.clone()).unwrap();
        map.clean_pg_temps();
        assert!(map.pg_temp.is_empty());

        let other = PgId {
            pool: pg.pool,
            seed: 1,
        };
        let mut temp = map.pg_mapping(other).unwrap().up;
        temp.reverse();
        map.set_pg_temp(other, temp).unwrap();
        map.clean_pg_temps();
        assert_eq!(map.pg_temp.len(), 1, "a reordered set is kept");
        map.set_pg_temp(other, Vec::new()).unwrap();
        assert!(map.pg_temp.is_empty(), "an empty set removes the entry");

        let refused = [
            (pg, vec![OsdId(0), OsdId(0)]),
            (pg, vec![OsdId(0), OsdId(1), OsdId(2), OsdId(3)]),
            (pg, vec![OsdId(9)]),
            (
                PgId {
                    pool: pg.pool,
                    seed: 8,
                },
                vec![OsdId(0)],
            ),
            (
                PgId {
                    pool: PoolId(99),
                    seed: 0,
                },
                vec![OsdId(0)],
            ),
        ];
        for (pg, acting) in refused {
            assert!(
                map.set_pg_temp(pg, acting.clone()).is_err(),
                "{pg} {acting:?}"
            );
        }
        map.set_pg_temp(pg, vec![OsdId(3), OsdId(1)]).unwrap();
        map.delete_pool("rbd").unwrap();
        assert!(map.pg_temp.is_empty(), "deleting a pool drops its entries");
    }
}
