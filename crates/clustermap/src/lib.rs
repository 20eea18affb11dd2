//! The cluster map: the epoch-numbered `OsdMap` that monitors publish and every daemon
//! and client acts on — OSDs (addresses per shard, up/in, weight), pools, the CRUSH map
//! and flags — its incrementals (epoch e → e+1, checked by a CRC of the new map), how a
//! subscriber advances through them, and the pure placement functions object → PG →
//! OSDs → shard.
//!
//! Placement follows Ceph exactly: `ceph_str_hash_rjenkins` of the object name,
//! `ceph_stable_mod` by `pg_num`, the pool-mixed placement seed
//! (`crush_hash32_2(stable_mod(seed, pgp_num), pool)`, Ceph's `HASHPSPOOL`), CRUSH with
//! the pool's rule and size, then removal of OSDs that do not exist or are down.
//!
//! ```
//! use carmine_clustermap::{OsdMap, PoolSpec};
//!
//! let mut map = OsdMap::new_dev(3);
//! let pool = map.create_pool(PoolSpec::replicated("rbd", 3, 8)).unwrap();
//! let pg = map.object_to_pg(pool, "greeting").unwrap();
//! assert_eq!(pg.pool, pool);
//! ```

mod feed;
mod history;
mod incremental;
mod osdmap;
mod placement;
mod pool;
pub mod settings;

pub use feed::{advance, AdvanceError, MapAdvance};
pub use history::{HistoryTracker, PastInterval, PAST_INTERVALS_MAX};
pub use incremental::{map_crc, ApplyError, MapDelta, OsdMapIncremental};
pub use osdmap::{
    FullRatios, Fullness, OsdFlags, OsdInfo, OsdMap, OsdMapError, CONFIG_KEYS_MAX,
    CONFIG_KEY_BYTES_MAX, CONFIG_VALUE_BYTES_MAX, FULLNESS_HYSTERESIS, OSD_MAP_VERSION, WEIGHT_IN,
};
pub use placement::{pg_shard, PgMapping};
pub use pool::{PoolInfo, PoolSpec};
