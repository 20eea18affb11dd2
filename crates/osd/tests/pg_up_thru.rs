//! `up_thru` (Ceph's WaitUpThru): a primary activates a PG only once the map records
//! its OSD alive through the interval's start, and asks for that with its stats; an
//! interval whose primary died before the record never accepted a write, so the next
//! primary does not wait for it (it would otherwise stay down until that OSD returned).
//! Nor does it wait for a primary that was recorded alive but died while activating:
//! going active takes every member's activation, so one member that never got it
//! proves the interval served nothing. And a copy that skipped the maps of an interval
//! change and its undoing peers again rather than carry on in an interval that ended.

mod harness;

use carmine_types::{Epoch, OsdId};
use harness::{read, write, Cluster, Config};

#[test]
fn a_primary_activates_only_once_the_map_records_it_alive_through_its_interval() {
    let mut cluster = Cluster::new(Config::one_pg());
    let pgid = cluster.pg_of("obj");
    write(&mut cluster, "obj", "before");
    let primary = cluster.primary_of(pgid);
    let replica = cluster.acting(pgid)[1];

    cluster.grant_up_thru = false;
    let interval = cluster.crash(replica);
    cluster.run();
    assert_eq!(cluster.primary_of(pgid), primary);
    let stat = cluster.pg_stat(pgid);
    assert_eq!(stat.state.name(), "degraded+undersized+peering");
    assert_eq!(stat.want_up_thru, interval, "asked for with the stats");
    assert!(stat.reason.contains("up_thru"), "{}", stat.reason);
    // Another map in the same interval that still lacks it changes nothing.
    cluster.change_map(|_| {});
    cluster.run();
    assert_eq!(cluster.pg_stat(pgid).want_up_thru, interval);

    cluster.record_up_thru(primary);
    cluster.run();
    let stat = cluster.pg_stat(pgid);
    assert_eq!(stat.state.name(), "active+degraded+undersized");
    assert_eq!(stat.want_up_thru, Epoch(0));
    write(&mut cluster, "obj", "after");
    assert_eq!(read(&mut cluster, "obj"), b"after");
}

/// One PG holding "obj"; its primary goes, the other two lead, then it comes back and
/// leads again, waiting for its `up_thru`, which no map records. Returns the PG and
/// that primary.
fn back_as_primary_without_up_thru(cluster: &mut Cluster) -> (carmine_types::PgId, OsdId) {
    let pgid = cluster.pg_of("obj");
    write(cluster, "obj", "kept");
    let first = cluster.primary_of(pgid);
    cluster.crash(first);
    cluster.run();
    assert!(cluster.pg_state(pgid).name().starts_with("active"));
    cluster.grant_up_thru = false;
    cluster.revive(first);
    cluster.run();
    assert_eq!(cluster.primary_of(pgid), first);
    assert!(cluster.pg_stat(pgid).reason.contains("up_thru"));
    (pgid, first)
}

#[test]
fn a_primary_that_died_before_its_up_thru_never_holds_the_pg_down() {
    let mut cluster = Cluster::new(Config::one_pg());
    let (pgid, first) = back_as_primary_without_up_thru(&mut cluster);
    // It dies before any map records it alive in that interval.
    cluster.grant_up_thru = true;
    cluster.crash(first);
    cluster.run();

    // Without up_thru the interval it led would have to be asked about, and only it
    // could answer: the PG would stay down.
    let past = cluster.map.pg_history[&pgid].last().unwrap().clone();
    assert_eq!(past.primary, Some(first));
    assert!(!past.maybe_went_rw, "{past:?}");
    assert!(
        cluster.pg_state(pgid).name().starts_with("active"),
        "{:?}",
        cluster.pg_stat(pgid)
    );
    write(&mut cluster, "obj", "served");
    assert_eq!(read(&mut cluster, "obj"), b"served");
}

#[test]
fn a_primary_that_died_while_activating_never_holds_the_pg_down() {
    let mut cluster = Cluster::new(Config::one_pg());
    let (pgid, first) = back_as_primary_without_up_thru(&mut cluster);
    // The map records it alive and it activates, but it is cut off before its
    // activations arrive, and dies.
    cluster.record_up_thru(first);
    cluster.crash(first);
    cluster.grant_up_thru = true;
    cluster.change_map(|_| {});
    cluster.run();

    let led = cluster.map.pg_history[&pgid]
        .iter()
        .rev()
        .find(|past| past.primary == Some(first))
        .unwrap()
        .clone();
    assert!(led.maybe_went_rw, "recorded alive: it may have served");
    assert!(
        cluster.pg_state(pgid).name().starts_with("active"),
        "{:?}",
        cluster.pg_stat(pgid)
    );
    assert_eq!(read(&mut cluster, "obj"), b"kept");
    write(&mut cluster, "obj", "served");
    assert_eq!(read(&mut cluster, "obj"), b"served");
}

#[test]
fn a_copy_that_skipped_an_interval_change_and_its_undoing_peers_again() {
    let mut cluster = Cluster::new(Config::one_pg());
    let pgid = cluster.pg_of("obj");
    write(&mut cluster, "obj", "kept");
    let primary = cluster.primary_of(pgid);
    let before = cluster.pg_stat(pgid).interval_start;
    let others: Vec<_> = cluster
        .osds()
        .into_iter()
        .filter(|&osd| osd != primary)
        .collect();
    // The primary is marked out and in again; it sees neither map (a gap in its
    // feed), only the newest, whose acting set is the one it had.
    cluster.change_map_for(&others, |map| map.set_weight(primary, 0).unwrap());
    cluster.change_map_for(&others, |map| {
        map.set_weight(primary, carmine_clustermap::WEIGHT_IN)
            .unwrap()
    });
    cluster.deliver_map_to(&[primary]);
    cluster.run();
    assert_eq!(cluster.primary_of(pgid), primary);
    let stat = cluster.pg_stat(pgid);
    assert!(
        stat.interval_start > before,
        "the monitor closed intervals after e{}: {stat:?}",
        before.0
    );
    assert!(stat.state.name().starts_with("active"), "{stat:?}");
    assert_eq!(read(&mut cluster, "obj"), b"kept");
}
