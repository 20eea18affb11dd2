//! pg_temp and the recovery budget: a primary whose copy would have to be refilled
//! before it could serve asks for a temporary acting set led by a complete copy, the
//! PG serves clients while the empty copy is backfilled as a replica, and once the
//! temporary set is removed the original primary serves everything; a shard never
//! keeps more recovery pushes in flight than its budget.

mod harness;

use carmine_osd::OsdTuning;
use harness::{read, write, Cluster, Config};

fn one_pg_cluster() -> Cluster {
    Cluster::new(Config {
        pg_num: 1,
        ..Config::default()
    })
}

#[test]
fn an_empty_primary_serves_through_pg_temp_and_takes_over_once_filled() {
    let mut cluster = one_pg_cluster();
    let names: Vec<String> = (0..80).map(|i| format!("obj-{i:03}")).collect();
    for name in &names {
        write(&mut cluster, name, &format!("v1 of {name}"));
    }
    let pgid = cluster.pg_of(&names[0]);
    let primary = cluster.primary_of(pgid);

    // The primary comes back empty: 80 objects are too many to pull before serving.
    cluster.restart(primary, true);
    cluster.run();
    let stat = cluster.pg_stat(pgid);
    assert_eq!(stat.state.name(), "peering", "it waits for the pg_temp");
    let want = stat.want_acting.clone();
    assert_eq!(want.len(), 3, "{want:?}");
    assert_ne!(want[0], primary, "a complete copy leads");
    assert!(want.contains(&primary), "the empty copy stays a member");

    // The monitor grants it: the complete copy serves at once and backfills the empty one.
    cluster.change_map(|map| map.set_pg_temp(pgid, want.clone()).unwrap());
    cluster.run();
    assert_eq!(cluster.primary_of(pgid), want[0]);
    write(&mut cluster, "written-under-pg-temp", "v2");
    cluster.run();
    assert_eq!(cluster.pg_stat(pgid).state.name(), "active+clean+remapped");
    cluster.assert_all_replicas_identical();

    // Removed (the monitor does so once the PG reports clean): the up primary is back,
    // peers without copying anything, and serves every object.
    cluster.change_map(|map| map.set_pg_temp(pgid, Vec::new()).unwrap());
    cluster.run();
    assert_eq!(cluster.primary_of(pgid), primary);
    let stat = cluster.pg_stat(pgid);
    assert_eq!(stat.state.name(), "active+clean");
    assert!(stat.want_acting.is_empty());
    for name in &names {
        assert_eq!(
            read(&mut cluster, name),
            format!("v1 of {name}").into_bytes()
        );
    }
    assert_eq!(read(&mut cluster, "written-under-pg-temp"), b"v2");
    cluster.assert_all_replicas_identical();
}

#[test]
fn a_shard_keeps_at_most_its_recovery_budget_of_pushes_in_flight() {
    let mut cluster = one_pg_cluster();
    let names: Vec<String> = (0..60).map(|i| format!("obj-{i:03}")).collect();
    for name in &names {
        write(&mut cluster, name, &format!("v1 of {name}"));
    }
    let pgid = cluster.pg_of(&names[0]);
    let primary = cluster.primary_of(pgid);
    let replica = cluster
        .acting(pgid)
        .into_iter()
        .find(|&osd| osd != primary)
        .unwrap();
    let budget = 3;
    let tuning = OsdTuning {
        recovery_max_active: budget,
        pushes_in_flight_max: 64,
        ..OsdTuning::default()
    };
    let primary_addr = cluster.addr(primary, pgid);
    cluster.shard_mut(primary_addr).set_tuning(tuning);

    // A replica comes back empty: the primary pushes every object to it.
    cluster.restart(replica, true);
    let mut most = 0;
    while cluster.step() {
        let in_flight = cluster.shard(primary_addr).recovery_in_flight();
        assert!(in_flight <= budget, "{in_flight} pushes in flight");
        most = most.max(in_flight);
    }
    assert_eq!(most, budget, "recovery used its whole budget");
    assert_eq!(cluster.shard(primary_addr).recovery_in_flight(), 0);
    assert_eq!(cluster.pg_stat(pgid).state.name(), "active+clean");
    cluster.assert_all_replicas_identical();
}

#[test]
fn a_pg_held_back_by_the_budget_reports_backfill_wait() {
    let mut cluster = Cluster::new(Config {
        pg_num: 6,
        ..Config::default()
    });
    let names: Vec<String> = (0..120).map(|i| format!("obj-{i:03}")).collect();
    for name in &names {
        write(&mut cluster, name, &format!("v1 of {name}"));
    }
    let tuning = OsdTuning {
        recovery_max_active: 1,
        ..OsdTuning::default()
    };
    for osd in cluster.osds() {
        let addr = cluster.addr(osd, cluster.pg_of(&names[0]));
        cluster.shard_mut(addr).set_tuning(tuning);
    }
    let victim = cluster.osds()[2];
    cluster.restart(victim, true);
    let pgids: Vec<_> = cluster.map.all_pgs().collect();
    let mut waits = 0;
    while cluster.step() {
        for &pgid in &pgids {
            let name = cluster.pg_stat(pgid).state.name();
            if name.contains("backfill_wait") || name.contains("recovery_wait") {
                waits += 1;
            }
        }
    }
    assert!(waits > 0, "no PG ever waited for the budget");
    for &pgid in &pgids {
        assert_eq!(cluster.pg_stat(pgid).state.name(), "active+clean", "{pgid}");
    }
    cluster.assert_all_replicas_identical();
}
