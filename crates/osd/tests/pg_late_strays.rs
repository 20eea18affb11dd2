//! A stray on an OSD that was down while its PG moved away is purged too: when the OSD
//! joins the map again it announces the copies it holds of PGs the map no longer gives
//! it, and the primary of such a PG tells it to delete its copy once the PG is clean.

mod harness;

use carmine_clustermap::WEIGHT_IN;
use carmine_proto::{Msg, PgState};
use carmine_store::{CollectionId, ObjectStore};
use carmine_types::{OsdId, PgId};
use harness::{read, write, Cluster, Config};

fn four_osds() -> Cluster {
    Cluster::new(Config {
        osd_count: 4,
        pg_num: 1,
        ..Config::default()
    })
}

fn holds(cluster: &Cluster, osd: OsdId, pgid: PgId) -> bool {
    (cluster.store(osd, pgid)).collection_exists(CollectionId::Pg(pgid))
}

/// Shard turns until `osd` holds nothing of `pgid`; panics if that takes too long.
fn turn_until_purged(cluster: &mut Cluster, osd: OsdId, pgid: PgId) {
    for _ in 0..100 {
        if !holds(cluster, osd, pgid) {
            return;
        }
        cluster.turn();
    }
    panic!("{osd} still holds {pgid} after 100 turns");
}

fn names(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("obj-{i:03}")).collect()
}

/// `stray` crashes holding a copy, is marked out, and the PG moves to the fourth OSD
/// while it is down (so peering never asks it about its copy).
fn move_away_while_down(cluster: &mut Cluster, names: &[String]) -> (PgId, OsdId) {
    for name in names {
        write(cluster, name, &format!("content of {name}"));
    }
    let pgid = cluster.pg_of(&names[0]);
    let stray = cluster.acting(pgid)[2];
    cluster.crash(stray);
    cluster.run();
    cluster.change_map(|map| map.reweight(stray, 0).unwrap());
    cluster.run();
    assert!(!cluster.acting(pgid).contains(&stray));
    assert_eq!(cluster.pg_stat(pgid).state.name(), "active+clean");
    assert!(holds(cluster, stray, pgid), "the down OSD kept its copy");
    (pgid, stray)
}

#[test]
fn a_stray_on_an_osd_that_was_down_is_purged_when_it_comes_back() {
    let mut cluster = four_osds();
    let names = names(30);
    let (pgid, stray) = move_away_while_down(&mut cluster, &names);
    // It boots (still out): nothing in the PG's interval changes, so nothing queries
    // it; its own notice is what gets its copy removed.
    cluster.revive(stray);
    cluster.run();
    turn_until_purged(&mut cluster, stray, pgid);
    let addr = cluster.addr(stray, pgid);
    assert!(cluster.shard(addr).pg(pgid).is_none());
    for name in &names {
        assert_eq!(
            read(&mut cluster, name),
            format!("content of {name}").into_bytes()
        );
    }
    cluster.assert_all_replicas_identical();
    assert_eq!(cluster.pg_stat(pgid).state.name(), "active+clean");
}

#[test]
fn a_stray_announced_while_the_pg_recovers_is_purged_once_it_is_clean() {
    let mut cluster = four_osds();
    let names = names(30);
    let (pgid, stray) = move_away_while_down(&mut cluster, &names);
    // A member goes down and comes back: the PG recovers it, and the stray's notice
    // arrives meanwhile (its removal waits for clean).
    let primary = cluster.primary_of(pgid);
    let member = *(cluster.acting(pgid).iter())
        .find(|&&osd| osd != primary)
        .expect("size 3");
    cluster.crash(member);
    cluster.run();
    write(&mut cluster, &names[0], "written while a member was down");
    cluster.revive(member);
    cluster.revive(stray);
    // The notice is handled before recovery is done: no removal yet.
    let delivered = cluster.deliver_where(|e| !matches!(e.msg, Msg::PgPush(_)));
    assert!(delivered > 0);
    let state = cluster.pg_stat(pgid).state;
    assert!(!state.contains(PgState::CLEAN), "{}", state.name());
    assert!(holds(&cluster, stray, pgid));
    cluster.run();
    turn_until_purged(&mut cluster, stray, pgid);
    assert_eq!(
        read(&mut cluster, &names[0]),
        b"written while a member was down"
    );
    cluster.assert_all_replicas_identical();
    // It stays out; back in, it would be backfilled from scratch.
    cluster.change_map(|map| map.reweight(stray, WEIGHT_IN).unwrap());
    cluster.run();
    cluster.turn();
    assert_eq!(cluster.pg_stat(pgid).state.name(), "active+clean");
    cluster.assert_all_replicas_identical();
}
