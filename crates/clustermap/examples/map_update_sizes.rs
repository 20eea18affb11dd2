//! Bytes a subscriber receives for one epoch change, full map against incremental.
//!
//! For clusters of 3, 100 and 1000 OSDs (one host each, every OSD booted and in, one
//! replicated pool of size 3 with about 33 PGs per OSD, as Ceph's 100 PG copies per
//! OSD), marks one OSD down as the monitor does (PG histories advanced) and prints the
//! encoded size of the new full map and of the incremental to it.
//!
//! ```text
//! cargo run --release -p carmine-clustermap --example map_update_sizes
//! ```

use carmine_clustermap::{HistoryTracker, OsdMap, OsdMapIncremental, PoolSpec};
use carmine_types::encoding::Encode;
use carmine_types::OsdId;
use std::net::SocketAddr;

fn main() {
    println!("| OSDs | pg_num | full map (bytes) | incremental (bytes) | of which PG histories | full / incremental |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for osd_count in [3u32, 100, 1000] {
        let mut map = OsdMap::new_dev(osd_count);
        for id in 0..osd_count {
            let port = 6800 + (id % 50_000) as u16;
            let addr = SocketAddr::from(([10, 0, (id / 256) as u8, (id % 256) as u8], port));
            map.boot_osd(OsdId(id), vec![addr], format!("host{id}"))
                .unwrap();
        }
        let pg_num = (osd_count * 100 / 3).next_power_of_two().min(65_536);
        map.create_pool(PoolSpec::replicated("rbd", 3, pg_num))
            .unwrap();
        let mut tracker = HistoryTracker::new(&map);
        let mut next = map.clone();
        next.mark_down(OsdId(osd_count / 2)).unwrap();
        next.epoch = map.epoch.next();
        tracker.advance(&map, &mut next);

        let full_bytes = next.to_bytes().len();
        let inc = OsdMapIncremental::between(&map, &next);
        let inc_bytes = inc.encoded_bytes();
        let mut history_only = inc.clone();
        history_only.pg_history = Default::default();
        let history_bytes = inc_bytes - history_only.encoded_bytes();
        assert_eq!(map.apply(&inc).unwrap(), next);
        println!(
            "| {osd_count} | {pg_num} | {full_bytes} | {inc_bytes} | {history_bytes} | {:.0}x |",
            full_bytes as f64 / inc_bytes as f64
        );
    }
}
