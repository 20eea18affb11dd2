use super::*;
use crate::{HistoryTracker, PoolSpec, WEIGHT_IN};
use proptest::prelude::*;
use std::net::SocketAddr;

/// One change the monitor can make to a map (the operations of `service.rs`).
#[derive(Debug, Clone)]
enum Change {
    Boot {
        osd: u32,
        port: u16,
        shards: u8,
    },
    Instance {
        osd: u32,
        instance: u64,
    },
    Down {
        osd: u32,
    },
    Reweight {
        osd: u32,
        weight: u32,
    },
    Affinity {
        osd: u32,
        affinity: u32,
    },
    CreatePool {
        name: u8,
        size: u8,
        pg_num: u32,
    },
    DeletePool {
        name: u8,
    },
    PoolSet {
        name: u8,
        key: u8,
        value: u32,
    },
    AllocateSnap {
        name: u8,
    },
    RemoveSnap {
        name: u8,
        snap: u64,
    },
    Config {
        key: u8,
        value: Option<u8>,
    },
    Flag {
        flag: u8,
        set: bool,
    },
    PgTemp {
        pool: u64,
        seed: u32,
        osds: Vec<u32>,
    },
    CleanPgTemps,
    /// Publish an epoch: the PG histories advance.
    Epoch,
}

fn change() -> impl Strategy<Value = Change> {
    // Six OSD ids over a CRUSH map made for four: a boot of 4 or 5 changes CRUSH.
    let osd = 0u32..6;
    prop_oneof![
        3 => (osd.clone(), 6800u16..6804, 1u8..3)
            .prop_map(|(osd, port, shards)| Change::Boot { osd, port, shards }),
        1 => (osd.clone(), 0u64..3).prop_map(|(osd, instance)| Change::Instance { osd, instance }),
        2 => osd.clone().prop_map(|osd| Change::Down { osd }),
        1 => (osd.clone(), prop_oneof![Just(0), Just(0x8000), Just(WEIGHT_IN)])
            .prop_map(|(osd, weight)| Change::Reweight { osd, weight }),
        1 => (osd.clone(), 0u32..=0x10000).prop_map(|(osd, affinity)| Change::Affinity { osd, affinity }),
        1 => (0u8..3, 1u8..4, 1u32..9)
            .prop_map(|(name, size, pg_num)| Change::CreatePool { name, size, pg_num }),
        1 => (0u8..3).prop_map(|name| Change::DeletePool { name }),
        1 => (0u8..3, 0u8..3, 0u32..4)
            .prop_map(|(name, key, value)| Change::PoolSet { name, key, value }),
        1 => (0u8..3).prop_map(|name| Change::AllocateSnap { name }),
        1 => (0u8..3, 0u64..4).prop_map(|(name, snap)| Change::RemoveSnap { name, snap }),
        1 => (0u8..4, proptest::option::of(0u8..3))
            .prop_map(|(key, value)| Change::Config { key, value }),
        1 => (0u8..4, any::<bool>()).prop_map(|(flag, set)| Change::Flag { flag, set }),
        3 => (1u64..3, 0u32..8, proptest::collection::vec(0u32..4, 0..4))
            .prop_map(|(pool, seed, osds)| Change::PgTemp { pool, seed, osds }),
        1 => Just(Change::CleanPgTemps),
        2 => Just(Change::Epoch),
    ]
}

const POOL_NAMES: [&str; 3] = ["rbd", "data", "meta"];
const POOL_KEYS: [&str; 3] = ["size", "min_size", "crush_rule"];

/// Makes `change` to `map` as the monitor would; refused changes change nothing.
fn make(map: &mut OsdMap, change: &Change) {
    let name = |index: &u8| POOL_NAMES[usize::from(*index)];
    let _ = match change {
        Change::Boot { osd, port, shards } => {
            let addrs: Vec<SocketAddr> = (0..*shards)
                .map(|s| SocketAddr::from(([127, 0, 0, 1], port + u16::from(s) * 10)))
                .collect();
            map.boot_osd(OsdId(*osd), addrs, format!("host{osd}"))
        }
        Change::Instance { osd, instance } => map.set_instance(OsdId(*osd), *instance),
        Change::Down { osd } => map.mark_down(OsdId(*osd)),
        Change::Reweight { osd, weight } => map.reweight(OsdId(*osd), *weight),
        Change::Affinity { osd, affinity } => map.set_primary_affinity(OsdId(*osd), *affinity),
        Change::CreatePool {
            name: n,
            size,
            pg_num,
        } => {
            let spec = PoolSpec::replicated(name(n), *size, *pg_num);
            map.create_pool(spec).map(|_| ())
        }
        Change::DeletePool { name: n } => map.delete_pool(name(n)).map(|_| ()),
        Change::PoolSet {
            name: n,
            key,
            value,
        } => map.set_pool_value(name(n), POOL_KEYS[usize::from(*key)], &value.to_string()),
        Change::AllocateSnap { name: n } => map.allocate_pool_snap(name(n)).map(|_| ()),
        Change::RemoveSnap { name: n, snap } => map.remove_pool_snap(name(n), *snap),
        Change::Config { key, value } => {
            let value = value.map(|v| "x".repeat(usize::from(v)));
            map.set_config(&format!("key{key}"), value.as_deref())
        }
        Change::Flag { flag, set } => {
            let bit = OsdFlags::NAMED[usize::from(*flag)].1;
            map.flags.0 = if *set {
                map.flags.0 | bit
            } else {
                map.flags.0 & !bit
            };
            Ok(())
        }
        Change::PgTemp { pool, seed, osds } => {
            let acting = osds.iter().map(|&o| OsdId(o)).collect();
            map.set_pg_temp(
                PgId {
                    pool: PoolId(*pool),
                    seed: *seed,
                },
                acting,
            )
        }
        Change::CleanPgTemps => {
            map.clean_pg_temps();
            Ok(())
        }
        Change::Epoch => Ok(()),
    };
}

/// Publishes `next` as the epoch after `prev`, histories advanced as the leader does.
fn publish(tracker: &mut HistoryTracker, prev: &OsdMap, mut next: OsdMap) -> OsdMap {
    next.epoch = prev.epoch.next();
    tracker.advance(prev, &mut next);
    next
}

/// The map after `history` (each `Epoch` publishes), then the next epoch after `step`.
fn pair(history: &[Change], step: &[Change]) -> (OsdMap, OsdMap) {
    let mut map = OsdMap::new(
        0x1234_5678_9abc_def0_1122_3344_5566_7788,
        CrushMap::simple(4),
    );
    // Every history starts from four booted OSDs and one pool, so that most random
    // changes (pg_temp above all) find what they need.
    for osd in 0..4 {
        let addr = SocketAddr::from(([127, 0, 0, 1], 6800 + osd as u16));
        map.boot_osd(OsdId(osd), vec![addr], format!("host{osd}"))
            .unwrap();
    }
    map.create_pool(PoolSpec::replicated("rbd", 3, 8)).unwrap();
    let mut tracker = HistoryTracker::new(&map);
    let mut draft = map.clone();
    for change in history {
        if let Change::Epoch = change {
            map = publish(&mut tracker, &map, draft);
            draft = map.clone();
        } else {
            make(&mut draft, change);
        }
    }
    let old = publish(&mut tracker, &map, draft);
    let mut new = old.clone();
    for change in step {
        make(&mut new, change);
    }
    let new = publish(&mut tracker, &old, new);
    (old, new)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn applying_the_incremental_between_two_epochs_gives_the_newer(
        history in proptest::collection::vec(change(), 0..40),
        step in proptest::collection::vec(change(), 0..8),
    ) {
        let (old, new) = pair(&history, &step);
        let inc = OsdMapIncremental::between(&old, &new);
        prop_assert_eq!(&old.apply(&inc).unwrap(), &new);

        let bytes = inc.to_bytes();
        let decoded = OsdMapIncremental::from_bytes(&bytes).unwrap();
        prop_assert_eq!(&decoded, &inc);
        prop_assert_eq!(bytes.len(), inc.encoded_bytes());
        for cut in [0, 1, 5, 6, bytes.len() / 2, bytes.len() - 1] {
            prop_assert!(OsdMapIncremental::from_bytes(&bytes[..cut]).is_err(), "cut at {}", cut);
        }
        // Applied to any other epoch it is refused, never silently wrong.
        prop_assert!(new.apply(&inc).is_err());
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = OsdMapIncremental::from_bytes(&bytes);
    }
}

/// A map pair in which every field of the map changes.
fn everything_changes() -> (OsdMap, OsdMap) {
    use Change::*;
    let history = [
        Boot {
            osd: 0,
            port: 6800,
            shards: 1,
        },
        Boot {
            osd: 1,
            port: 6801,
            shards: 1,
        },
        Boot {
            osd: 2,
            port: 6802,
            shards: 1,
        },
        Boot {
            osd: 3,
            port: 6803,
            shards: 1,
        },
        CreatePool {
            name: 0,
            size: 3,
            pg_num: 8,
        },
        CreatePool {
            name: 1,
            size: 2,
            pg_num: 4,
        },
        Config {
            key: 0,
            value: Some(1),
        },
        PgTemp {
            pool: 1,
            seed: 0,
            osds: vec![3, 2],
        },
        Epoch,
        Down { osd: 3 },
    ];
    let step = [
        Boot {
            osd: 5,
            port: 6805,
            shards: 2,
        },
        Down { osd: 0 },
        DeletePool { name: 1 },
        CreatePool {
            name: 2,
            size: 2,
            pg_num: 2,
        },
        AllocateSnap { name: 0 },
        Config {
            key: 0,
            value: None,
        },
        Config {
            key: 1,
            value: Some(2),
        },
        Flag { flag: 0, set: true },
        PgTemp {
            pool: 1,
            seed: 0,
            osds: vec![],
        },
        PgTemp {
            pool: 1,
            seed: 1,
            osds: vec![2, 1],
        },
    ];
    pair(&history, &step)
}

#[test]
fn every_field_of_the_map_is_carried() {
    let (old, new) = everything_changes();
    let inc = OsdMapIncremental::between(&old, &new);
    assert!(!inc.osds.set.is_empty());
    assert_eq!(inc.pools.removed, vec![PoolId(2)]);
    assert!(inc.next_pool_id.is_some());
    assert!(inc.crush.is_some(), "osd.5 joined CRUSH");
    assert!(inc.flags.is_some());
    assert!(!inc.pg_history.is_empty());
    assert_eq!(inc.config.removed, vec!["key0".to_string()]);
    assert!(!inc.pg_temp.removed.is_empty() && !inc.pg_temp.set.is_empty());
    assert_eq!(old.apply(&inc).unwrap(), new);
    let round = OsdMapIncremental::from_bytes(&inc.to_bytes()).unwrap();
    assert_eq!(old.apply(&round).unwrap(), new);
}

#[test]
fn an_incremental_that_drops_a_change_fails_its_checksum() {
    let (old, new) = everything_changes();
    let inc = OsdMapIncremental::between(&old, &new);
    let forgetful: [fn(&mut OsdMapIncremental); 6] = [
        |inc| inc.flags = None,
        |inc| inc.crush = None,
        |inc| inc.next_pool_id = None,
        |inc| inc.osds.set.clear(),
        |inc| inc.pg_history.set.clear(),
        |inc| inc.config.set.clear(),
    ];
    for forget in forgetful {
        let mut broken = inc.clone();
        forget(&mut broken);
        assert!(
            matches!(old.apply(&broken), Err(ApplyError::Checksum { .. })),
            "{broken:?}"
        );
    }
    let mut stray = inc.clone();
    stray.pools.removed.push(PoolId(99));
    assert_eq!(old.apply(&stray), Err(ApplyError::Diverged("a pool")));
    let mut other = inc.clone();
    other.fsid ^= 1;
    assert_eq!(old.apply(&other), Err(ApplyError::OtherCluster));
}

#[test]
fn one_osd_down_is_small() {
    let (_, old) = pair(
        &[
            Change::Boot {
                osd: 0,
                port: 6800,
                shards: 1,
            },
            Change::Boot {
                osd: 1,
                port: 6801,
                shards: 1,
            },
        ],
        &[],
    );
    let mut new = old.clone();
    new.mark_down(OsdId(1)).unwrap();
    new.epoch = old.epoch.next();
    let inc = OsdMapIncremental::between(&old, &new);
    assert_eq!(inc.osds.set.len(), 1);
    assert!(inc.crush.is_none() && inc.pools.is_empty() && inc.config.is_empty());
    assert!(inc.encoded_bytes() < 160, "{} bytes", inc.encoded_bytes());
}

#[test]
fn malformed_incrementals_are_refused() {
    let (old, new) = everything_changes();
    let inc = OsdMapIncremental::between(&old, &new);
    // A key both set and removed.
    let mut both = inc.clone();
    both.config
        .removed
        .push(both.config.set.keys().next().unwrap().clone());
    assert!(OsdMapIncremental::from_bytes(&both.to_bytes()).is_err());
    // A config value longer than a map may hold.
    let mut long = inc.clone();
    long.config
        .set
        .insert("k".into(), "v".repeat(CONFIG_VALUE_BYTES_MAX + 1));
    assert!(OsdMapIncremental::from_bytes(&long.to_bytes()).is_err());
    // A newer, incompatible writer.
    let mut newer = inc.to_bytes().to_vec();
    newer[0] = 9;
    newer[1] = 9;
    assert!(matches!(
        OsdMapIncremental::from_bytes(&newer),
        Err(DecodeError::UnsupportedVersion { .. })
    ));
}
