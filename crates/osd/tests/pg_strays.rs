//! Stray purge: once a PG is active+clean with its whole up set acting, the copies left
//! on OSDs outside it are deleted, a few objects per shard turn, and the space is
//! freed; a stale removal (its sender's interval is over and the stray is a member
//! again, or was activated since) is ignored; a deletion cut short by a restart
//! resumes; a copy being deleted never takes part in peering; and a stray holding
//! writes the new acting set lacks is kept until they are copied.

mod harness;

use carmine_clustermap::WEIGHT_IN;
use carmine_proto::{Msg, PgState};
use carmine_store::{CollectionId, ObjectStore};
use carmine_types::{OsdId, PgId};
use harness::{read, write, Cluster, Config, Envelope};

fn four_osds() -> Cluster {
    Cluster::new(Config {
        osd_count: 4,
        pg_num: 1,
        ..Config::default()
    })
}

/// Writes `count` objects of 100 bytes each; returns their names.
fn fill(cluster: &mut Cluster, count: usize) -> Vec<String> {
    let names: Vec<String> = (0..count).map(|i| format!("obj-{i:04}")).collect();
    for name in &names {
        write(cluster, name, &format!("{name:-<100}"));
    }
    names
}

fn check_contents(cluster: &mut Cluster, names: &[String]) {
    for name in names {
        assert_eq!(read(cluster, name), format!("{name:-<100}").into_bytes());
    }
}

fn set_weight(cluster: &mut Cluster, osd: OsdId, weight: u32) {
    cluster.change_map(|map| map.reweight(osd, weight).unwrap());
}

fn holds(cluster: &Cluster, osd: OsdId, pgid: PgId) -> bool {
    (cluster.store(osd, pgid)).collection_exists(CollectionId::Pg(pgid))
}

fn object_count(cluster: &Cluster, osd: OsdId, pgid: PgId) -> usize {
    let store = cluster.store(osd, pgid);
    (store.list_objects(CollectionId::Pg(pgid), None, usize::MAX))
        .map(|objects| objects.len())
        .unwrap_or(0)
}

/// Shard turns until `osd` holds nothing of `pgid`; panics if that takes too long.
fn turn_until_purged(cluster: &mut Cluster, osd: OsdId, pgid: PgId) -> usize {
    for turns in 0..100 {
        if !holds(cluster, osd, pgid) {
            return turns;
        }
        cluster.turn();
    }
    panic!("{osd} still holds {pgid} after 100 turns");
}

fn is_removal(envelope: &Envelope) -> bool {
    matches!(envelope.msg, Msg::PgRemove(_))
}

/// Runs the network dry except for removals, which are taken out and returned.
fn run_holding_removals(cluster: &mut Cluster) -> Vec<Envelope> {
    let mut removals = Vec::new();
    loop {
        cluster.deliver_where(|envelope| !is_removal(envelope));
        let taken = cluster.take_where(is_removal);
        if taken.is_empty() {
            return removals;
        }
        removals.extend(taken);
    }
}

#[test]
fn a_stray_left_by_an_out_osd_is_deleted_once_the_pg_is_clean_and_its_space_freed() {
    let mut cluster = four_osds();
    let names = fill(&mut cluster, 150);
    let pgid = cluster.pg_of(&names[0]);
    let stray = cluster.acting(pgid)[2];
    let used = cluster.store(stray, pgid).usage();
    assert!(used.data_bytes >= 150 * 100, "{used:?}");

    set_weight(&mut cluster, stray, 0);
    cluster.run();
    assert!(!cluster.acting(pgid).contains(&stray));
    assert_eq!(cluster.pg_stat(pgid).state.name(), "active+clean");
    // Deletion is paced: 150 objects take several turns, not one.
    let turns = turn_until_purged(&mut cluster, stray, pgid);
    assert!(turns >= 1, "deleted in one go");
    let addr = cluster.addr(stray, pgid);
    assert!(cluster.shard(addr).pg(pgid).is_none());
    assert_eq!(cluster.shard(addr).deleting_count(), 0);
    let left = cluster.store(stray, pgid).usage();
    assert_eq!(left.object_count, 0, "{left:?}");
    assert_eq!(left.data_bytes, 0, "{left:?}");

    check_contents(&mut cluster, &names);
    cluster.assert_all_replicas_identical();
    assert_eq!(cluster.pg_stat(pgid).state.name(), "active+clean");
}

#[test]
fn a_stale_removal_is_ignored_by_a_stray_that_became_a_member_again() {
    let mut cluster = four_osds();
    let names = fill(&mut cluster, 20);
    let pgid = cluster.pg_of(&names[0]);
    let primary = cluster.primary_of(pgid);
    let stray = cluster.acting(pgid)[2];
    set_weight(&mut cluster, stray, 0);
    let stale = run_holding_removals(&mut cluster);
    assert_eq!(stale.len(), 1, "one stray: {stale:?}");
    assert_eq!(stale[0].to.0, stray);

    // Back in before the removal arrives: a member of a newer interval.
    set_weight(&mut cluster, stray, WEIGHT_IN);
    let newer = run_holding_removals(&mut cluster);
    assert!(cluster.acting(pgid).contains(&stray));
    assert!(newer.iter().all(|envelope| envelope.to.0 != stray));
    write(&mut cluster, &names[0], "written while a member again");
    let replay = |cluster: &mut Cluster, removals: &[Envelope]| {
        for envelope in removals {
            cluster.inject(envelope.from, envelope.to, envelope.msg.clone());
        }
        cluster.run();
        for _ in 0..5 {
            cluster.turn();
        }
    };
    replay(&mut cluster, &stale);
    assert!(holds(&cluster, stray, pgid), "a member deleted its copy");
    assert_eq!(cluster.pg_stat(pgid).state.name(), "active+clean");
    cluster.assert_all_replicas_identical();

    // Out again: the stale removal still names an interval older than the one the
    // copy was last activated in, so it is ignored even though the copy is a stray.
    set_weight(&mut cluster, stray, 0);
    let current = run_holding_removals(&mut cluster);
    assert!(!cluster.acting(pgid).contains(&stray));
    replay(&mut cluster, &stale);
    assert!(
        holds(&cluster, stray, pgid),
        "a stale removal deleted a copy"
    );
    let stray_addr = cluster.addr(stray, pgid);
    assert_eq!(cluster.shard(stray_addr).deleting_count(), 0);

    // The current primary's removal is obeyed.
    assert_eq!(cluster.primary_of(pgid), primary);
    assert!(current.iter().any(|envelope| envelope.to.0 == stray));
    replay(&mut cluster, &current);
    turn_until_purged(&mut cluster, stray, pgid);
    assert_eq!(
        read(&mut cluster, &names[0]),
        b"written while a member again"
    );
    check_contents(&mut cluster, &names[1..]);
    cluster.assert_all_replicas_identical();
}

/// Marks a member out, lets the PG go clean and the stray start deleting (the first
/// step runs with the removal), and returns the stray.
fn start_deleting(cluster: &mut Cluster, pgid: PgId, total: usize) -> OsdId {
    let stray = cluster.acting(pgid)[2];
    set_weight(cluster, stray, 0);
    cluster.run();
    let addr = cluster.addr(stray, pgid);
    assert_eq!(cluster.shard(addr).deleting_count(), 1);
    let left = object_count(cluster, stray, pgid);
    assert!(
        left > 1 && left < total + 1,
        "{left} of {total} objects left"
    );
    stray
}

#[test]
fn a_deletion_cut_short_by_a_restart_resumes() {
    let mut cluster = four_osds();
    let names = fill(&mut cluster, 300);
    let pgid = cluster.pg_of(&names[0]);
    let stray = start_deleting(&mut cluster, pgid, names.len());

    cluster.restart(stray, false);
    cluster.run();
    let addr = cluster.addr(stray, pgid);
    assert_eq!(
        cluster.shard(addr).deleting_count(),
        1,
        "resumed after the restart"
    );
    turn_until_purged(&mut cluster, stray, pgid);
    assert_eq!(cluster.shard(addr).deleting_count(), 0);
    assert_eq!(cluster.store(stray, pgid).usage().object_count, 0);
    check_contents(&mut cluster, &names);
    cluster.assert_all_replicas_identical();
}

#[test]
fn a_half_deleted_copy_needed_again_is_emptied_and_backfilled_never_trusted() {
    let mut cluster = four_osds();
    let names = fill(&mut cluster, 300);
    let pgid = cluster.pg_of(&names[0]);
    let stray = start_deleting(&mut cluster, pgid, names.len());
    cluster.restart(stray, false);
    // Back in: a member again, with half a copy on disk and its log intact. Peering
    // must not take it for a copy that only lacks a few log entries.
    set_weight(&mut cluster, stray, WEIGHT_IN);
    cluster.run();
    assert!(cluster.acting(pgid).contains(&stray));
    let addr = cluster.addr(stray, pgid);
    assert_eq!(cluster.shard(addr).deleting_count(), 0);
    assert_eq!(cluster.pg_stat(pgid).state.name(), "active+clean");
    cluster.assert_all_replicas_identical();
    check_contents(&mut cluster, &names);
}

#[test]
fn a_stray_holding_writes_the_new_acting_set_lacks_is_kept_until_they_are_copied() {
    let mut cluster = Cluster::new(Config {
        osd_count: 4,
        pg_num: 1,
        min_size: Some(1),
        ..Config::default()
    });
    let names = fill(&mut cluster, 10);
    let pgid = cluster.pg_of(&names[0]);
    let [a, b, c] = cluster.acting(pgid)[..] else {
        panic!("size 3")
    };
    cluster.crash(b);
    cluster.crash(c);
    cluster.run();
    let survivors = cluster.acting(pgid);
    assert!(survivors.contains(&a), "{survivors:?}");
    write(&mut cluster, "only-on-the-survivors", "precious");

    // `a` goes out as `b` and `c` come back: the new acting set lacks that write, and
    // `a`, now a stray, is the only copy of it.
    cluster.heal(b);
    cluster.heal(c);
    let infos = [b, c].map(|osd| cluster.map.osd(osd).unwrap().clone());
    cluster.change_map(|map| {
        map.reweight(a, 0).unwrap();
        for info in infos {
            map.boot_osd(info.id, info.shard_addrs, info.host).unwrap();
        }
    });
    let acting = cluster.acting(pgid);
    assert!(
        !acting.iter().any(|osd| survivors.contains(osd)),
        "{acting:?} vs {survivors:?}"
    );
    let mut removal_seen = false;
    while cluster.step() {
        if cluster.pending().iter().any(|e| is_removal(e)) {
            let state = cluster.pg_stat(pgid).state;
            assert!(
                state.contains(PgState::CLEAN),
                "removal while {}",
                state.name()
            );
            removal_seen = true;
        } else if !removal_seen {
            assert!(holds(&cluster, a, pgid), "deleted before any removal");
        }
    }
    assert!(removal_seen, "the stray was never told");
    turn_until_purged(&mut cluster, a, pgid);
    assert_eq!(read(&mut cluster, "only-on-the-survivors"), b"precious");
    check_contents(&mut cluster, &names);
    cluster.assert_all_replicas_identical();
}
