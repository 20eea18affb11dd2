//! A restarted OSD process and the maps that still show its previous life.
//!
//! A process that restarts boots as a new instance, and until a map shows that
//! instance up, the maps it receives may show the previous instance up: a lagging
//! monitor hands a booting OSD every epoch since the one it asks for. Acting on such a
//! map, the new process takes itself for a member of the old intervals: it peered alone
//! as primary of an interval long closed and recorded that older interval as its last
//! activation, which lowered its `last_epoch_started` below that of a copy holding
//! fewer writes, so peering then chose that copy and lost acknowledged writes (seed
//! 138596). Ceph's OSD likewise acts only on maps that show its own address up.

use carmine_clustermap::OsdMap;
use carmine_types::OsdId;
use std::net::SocketAddr;
use std::sync::Arc;

/// `map` as the process `instance` at `addrs` must act on it: a map that shows OSD
/// `whoami` up as another process (an earlier instance, or other addresses) shows it,
/// for this one, down. Any other map is returned as it is (no copy).
pub fn map_for_instance(
    map: Arc<OsdMap>,
    whoami: OsdId,
    instance: u64,
    addrs: &[SocketAddr],
) -> Arc<OsdMap> {
    let someone_else = map
        .osd(whoami)
        .is_some_and(|info| info.up && (info.instance != instance || info.shard_addrs != addrs));
    if !someone_else {
        return map;
    }
    let mut mine = (*map).clone();
    // Marking down keeps the epoch: this is the same epoch, seen from this process.
    if mine.mark_down(whoami).is_err() {
        return map;
    }
    Arc::new(mine)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn booted(instance: u64) -> (OsdMap, Vec<SocketAddr>) {
        let mut map = OsdMap::new_dev(2);
        let addrs = vec![SocketAddr::from(([127, 0, 0, 1], 6800))];
        map.boot_osd(OsdId(0), addrs.clone(), "host0".into())
            .unwrap();
        map.set_instance(OsdId(0), instance).unwrap();
        (map, addrs)
    }

    #[test]
    fn a_map_of_this_instance_is_acted_on_as_it_is() {
        let (map, addrs) = booted(7);
        let map = Arc::new(map);
        let seen = map_for_instance(map.clone(), OsdId(0), 7, &addrs);
        assert!(Arc::ptr_eq(&map, &seen));
        assert!(seen.is_up(OsdId(0)));
    }

    #[test]
    fn a_map_of_an_earlier_instance_shows_this_one_down_in_the_same_epoch() {
        let (map, addrs) = booted(7);
        let epoch = map.epoch;
        let seen = map_for_instance(Arc::new(map), OsdId(0), 8, &addrs);
        assert!(!seen.is_up(OsdId(0)));
        assert_eq!(seen.epoch, epoch);
        let other_addrs = vec![SocketAddr::from(([127, 0, 0, 1], 6900))];
        let (map, _) = booted(8);
        assert!(!map_for_instance(Arc::new(map), OsdId(0), 8, &other_addrs).is_up(OsdId(0)));
    }

    #[test]
    fn a_map_that_shows_the_osd_down_is_left_alone() {
        let map = Arc::new(OsdMap::new_dev(2));
        let seen = map_for_instance(map.clone(), OsdId(0), 8, &[]);
        assert!(Arc::ptr_eq(&map, &seen));
    }
}
