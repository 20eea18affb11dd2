//! Scrub comparisons (Ceph's scrub maps): after a deep-scrub step, a clean primary
//! compares its replicas' copies of the range with its own and repairs what differs:
//! copies that are intact and wrong, which checksums cannot find.

mod harness;

use carmine_proto::OpCode;
use harness::{bytes, read, read_at, write, Cluster, Config};

/// Scrubs the PG's primary and runs until the network is quiet and the PG is clean.
fn scrub_primary(cluster: &mut Cluster, name: &str) {
    let pgid = cluster.pg_of(name);
    let primary = cluster.primary_of(pgid);
    cluster.scrub(primary);
    cluster.run();
    cluster.tick_until(pgid, carmine_proto::PgState::CLEAN);
}

#[test]
fn a_replica_that_lost_an_object_gets_it_back() {
    let mut cluster = Cluster::new(Config::one_pg());
    let pgid = cluster.pg_of("obj");
    write(&mut cluster, "obj", "data");
    write(&mut cluster, "other", "other");
    let (primary, replica) = (cluster.primary_of(pgid), cluster.acting(pgid)[2]);
    cluster.lose(replica, "obj");
    assert_eq!(cluster.local_data(replica, "obj"), None);

    scrub_primary(&mut cluster, "obj");
    assert_eq!(
        cluster.local_data(replica, "obj").as_deref(),
        Some(&b"data"[..])
    );
    cluster.assert_replicas_identical(pgid);
    let counters = cluster.counters(primary);
    assert_eq!(counters.scrub_replica_copies_differing_total, 1);
    assert_eq!(counters.corrupt_copies_found_total, 1);
    assert_eq!(counters.copies_repaired_total, 1);
    assert!(counters.scrub_objects_compared_total >= 4, "{counters:?}");

    // A second pass finds nothing more.
    scrub_primary(&mut cluster, "obj");
    assert_eq!(
        cluster
            .counters(primary)
            .scrub_replica_copies_differing_total,
        1
    );
}

#[test]
fn a_replica_copy_with_other_bytes_is_replaced() {
    let mut cluster = Cluster::new(Config::one_pg());
    let pgid = cluster.pg_of("obj");
    write(&mut cluster, "obj", "good data");
    let replica = cluster.acting(pgid)[1];
    cluster.tamper(replica, "obj", 0, b"evil");
    assert_eq!(
        cluster.local_data(replica, "obj").as_deref(),
        Some(&b"evil data"[..])
    );

    scrub_primary(&mut cluster, "obj");
    assert_eq!(
        cluster.local_data(replica, "obj").as_deref(),
        Some(&b"good data"[..])
    );
    cluster.assert_replicas_identical(pgid);
}

/// Metadata counts as the copy too (Ceph's scrub compares attrs and an omap digest):
/// an RBD image's header lives in omap, and a replica that lost a key of it, or holds
/// an xattr the object never had, serves a wrong image once it becomes primary.
#[test]
fn a_replica_copy_with_other_omap_or_xattrs_is_replaced() {
    let mut cluster = Cluster::new(Config::one_pg());
    let pgid = cluster.pg_of("hdr");
    let setup = vec![
        OpCode::WriteFull {
            data: bytes(b"header"),
        },
        OpCode::SetXattr {
            name: "user.kind".into(),
            value: bytes(b"image"),
        },
        OpCode::OmapSet {
            entries: vec![
                (bytes(b"size"), bytes(b"1024")),
                (bytes(b"order"), bytes(b"22")),
            ],
        },
    ];
    assert_eq!(cluster.call("hdr", setup).result, Ok(()));
    write(&mut cluster, "plain", "data");
    let (primary, one, two) = (
        cluster.primary_of(pgid),
        cluster.acting(pgid)[1],
        cluster.acting(pgid)[2],
    );
    cluster.tamper_with(one, "hdr", |tx, coll, oid| {
        tx.omap_rm(coll, oid, vec![bytes(b"size")])
    });
    cluster.tamper_with(two, "plain", |tx, coll, oid| {
        tx.set_xattr(coll, oid, "user.extra".into(), bytes(b"x"))
    });

    // One pass repairs both replicas: the primary judges all maps together, before
    // its first repair makes the PG unclean.
    scrub_primary(&mut cluster, "hdr");
    cluster.assert_replicas_identical(pgid);
    assert_eq!(
        cluster
            .counters(primary)
            .scrub_replica_copies_differing_total,
        2
    );
    // Same data, size and version all along: only the metadata told them apart.
    assert_eq!(
        cluster.local_data(one, "hdr").as_deref(),
        Some(&b"header"[..])
    );
}

#[test]
fn a_replica_that_kept_a_removed_object_loses_it() {
    let mut cluster = Cluster::new(Config::one_pg());
    let pgid = cluster.pg_of("obj");
    write(&mut cluster, "obj", "data");
    assert_eq!(cluster.call("obj", vec![OpCode::Remove]).result, Ok(()));
    let replica = cluster.acting(pgid)[1];
    cluster.tamper(replica, "obj", 0, b"leftover");

    scrub_primary(&mut cluster, "obj");
    assert_eq!(cluster.local_data(replica, "obj"), None);
    cluster.assert_replicas_identical(pgid);
    let primary = cluster.primary_of(pgid);
    assert_eq!(cluster.counters(primary).scrub_own_copies_lost_total, 0);
}

#[test]
fn a_primary_that_lost_an_object_pulls_it_back_and_serves_it() {
    let mut cluster = Cluster::new(Config::one_pg());
    let pgid = cluster.pg_of("obj");
    write(&mut cluster, "obj", "data");
    let primary = cluster.primary_of(pgid);
    cluster.lose(primary, "obj");

    scrub_primary(&mut cluster, "obj");
    assert_eq!(
        cluster.local_data(primary, "obj").as_deref(),
        Some(&b"data"[..])
    );
    assert_eq!(read(&mut cluster, "obj"), b"data");
    cluster.assert_replicas_identical(pgid);
    let counters = cluster.counters(primary);
    assert_eq!(counters.scrub_own_copies_lost_total, 1);
    assert_eq!(
        counters.copies_repaired_total,
        counters.corrupt_copies_found_total
    );
}

/// A primary that lost the head of an object but still holds a clone of it (a copy
/// lost behind the store's back) lacks the head, whatever the clone says: it pulls
/// the replica's head and clones back. Taking the replica's head for one the primary
/// legitimately lacks pushed "ours", which removed the replica's head and every clone
/// with it (seed 1116 of the remap class with snapshots: the object and its snapshot
/// were gone from every copy).
#[test]
fn a_primary_that_lost_a_head_but_holds_its_clone_pulls_the_head_back() {
    let mut cluster = Cluster::new(Config::one_pg());
    let pgid = cluster.pg_of("obj");
    write(&mut cluster, "obj", "before the snapshot");
    let mut snap = 0;
    cluster.change_map(|map| snap = map.allocate_pool_snap("test").expect("pool exists"));
    let mut op = cluster.op(
        "obj",
        vec![OpCode::WriteFull {
            data: bytes(b"after it"),
        }],
    );
    op.snapc = carmine_proto::SnapContext {
        seq: snap,
        snaps: vec![snap],
    };
    assert_eq!(cluster.call_op(op).result, Ok(()));
    let primary = cluster.primary_of(pgid);
    cluster.lose(primary, "obj");

    scrub_primary(&mut cluster, "obj");
    assert_eq!(
        cluster.local_data(primary, "obj").as_deref(),
        Some(&b"after it"[..])
    );
    let replica = cluster.acting(pgid)[1];
    assert_eq!(
        cluster.local_data(replica, "obj").as_deref(),
        Some(&b"after it"[..])
    );
    assert_eq!(read(&mut cluster, "obj"), b"after it");
    assert_eq!(
        read_at(&mut cluster, "obj", carmine_types::SnapId(snap)),
        Ok(b"before the snapshot".to_vec())
    );
    cluster.assert_replicas_identical(pgid);
    assert_eq!(cluster.counters(primary).scrub_own_copies_lost_total, 1);
}

/// Writes in flight while the maps are taken are no difference: the request follows
/// their `RepOp`s on the ordered session, so each replica describes its copy after
/// them, whatever order the network delivers the PG's other messages in.
#[test]
fn writes_in_flight_during_a_comparison_are_no_difference() {
    let mut cluster = Cluster::with_seed(Config::one_pg(), 7);
    let pgid = cluster.pg_of("a");
    for i in 0..20 {
        write(&mut cluster, &format!("o{i}"), "first");
    }
    let primary = cluster.primary_of(pgid);
    for round in 0..10 {
        for i in 0..20 {
            let name = format!("o{i}");
            let data = bytes(format!("round {round}").as_bytes());
            let op = if i % 7 == 3 {
                cluster.op(&name, vec![OpCode::Remove])
            } else {
                cluster.op(&name, vec![OpCode::WriteFull { data }])
            };
            cluster.send(op);
            if i % 5 == 0 {
                cluster.scrub(primary);
            }
        }
        cluster.run();
        cluster.take_replies();
    }
    let counters = cluster.counters(primary);
    assert!(counters.scrub_objects_compared_total > 100, "{counters:?}");
    assert_eq!(counters.scrub_replica_copies_differing_total, 0);
    assert_eq!(counters.scrub_own_copies_lost_total, 0);
    cluster.assert_replicas_identical(pgid);
}

/// A step with budget to spare goes through each PG once, not twice: it used to
/// start one PG more than the shard holds, so a shard of one small PG scrubbed it
/// twice per step and sent two rounds of comparisons, the first dropped as stale.
#[test]
fn a_step_scrubs_and_compares_each_pg_once() {
    let mut cluster = Cluster::new(Config::one_pg());
    let pgid = cluster.pg_of("a");
    for i in 0..5 {
        write(&mut cluster, &format!("o{i}"), "data");
    }
    let primary = cluster.primary_of(pgid);
    cluster.scrub(primary);
    let requests = (cluster.pending().into_iter())
        .filter(|e| matches!(e.msg, carmine_proto::Msg::PgScrubRequest(_)))
        .count();
    assert_eq!(requests, cluster.acting(pgid).len() - 1);
    cluster.run();
    assert_eq!(
        cluster.counters(primary).scrub_objects_compared_total,
        2 * 5
    );
}

/// A step that starts a comparison before the last one's maps are in does not drop
/// the last one: each covers its own range. (When the newest replaced the others, a
/// range that the steps kept reaching first was never compared: the simulator's
/// snapshot workload, seed 657.)
#[test]
fn a_new_comparison_does_not_drop_one_still_waiting_for_maps() {
    let mut cluster = Cluster::new(Config::one_pg());
    let pgid = cluster.pg_of("o0");
    for i in 0..6 {
        write(&mut cluster, &format!("o{i}"), "data");
    }
    let (primary, replica) = (cluster.primary_of(pgid), cluster.acting(pgid)[1]);
    cluster.tamper(replica, "o1", 0, b"evil");
    // Two steps of three objects each, before any map is delivered.
    cluster.scrub_bounded(primary, 3, u64::MAX);
    cluster.scrub_bounded(primary, 3, u64::MAX);
    cluster.run();
    cluster.tick_until(pgid, carmine_proto::PgState::CLEAN);
    assert_eq!(
        cluster.local_data(replica, "o1").as_deref(),
        Some(&b"data"[..])
    );
    cluster.assert_replicas_identical(pgid);
    assert_eq!(
        cluster
            .counters(primary)
            .scrub_replica_copies_differing_total,
        1
    );
}
