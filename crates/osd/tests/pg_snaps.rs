//! Self-managed snapshots in the PG: clone on the first write after a snapshot, reads
//! at a snapshot, whiteout heads, background trimming of removed snapshots, and
//! clones travelling with their head through replication, log recovery and backfill.

mod harness;

use carmine_proto::{Msg, OpCode, OpError, OpOutput, OsdOp, SnapContext, SnapSet};
use carmine_store::{CollectionId, ObjectStore};
use carmine_types::{OsdId, SnapId};
use harness::{bytes, read_at, Cluster, Config};

fn snap_create(cluster: &mut Cluster) -> u64 {
    let mut snap = 0;
    cluster.change_map(|map| snap = map.allocate_pool_snap("test").expect("pool exists"));
    cluster.run();
    snap
}

fn snap_remove(cluster: &mut Cluster, snap: u64) {
    cluster.change_map(|map| map.remove_pool_snap("test", snap).expect("allocated"));
    cluster.run();
}

/// The context a client holding `snaps` (any order) writes with.
fn snapc(snaps: &[u64]) -> SnapContext {
    let mut snaps = snaps.to_vec();
    snaps.sort_unstable_by(|a, b| b.cmp(a));
    SnapContext {
        seq: snaps.first().copied().unwrap_or(0),
        snaps,
    }
}

fn write(cluster: &mut Cluster, name: &str, content: &str, snapc: SnapContext) {
    let mut op = cluster.op(
        name,
        vec![OpCode::WriteFull {
            data: bytes(content.as_bytes()),
        }],
    );
    op.snapc = snapc;
    let reply = cluster.call_op(op);
    assert_eq!(reply.result, Ok(()), "write {name}");
}

fn remove(cluster: &mut Cluster, name: &str, snapc: SnapContext) {
    let mut op = cluster.op(name, vec![OpCode::Remove]);
    op.snapc = snapc;
    assert_eq!(cluster.call_op(op).result, Ok(()), "remove {name}");
}

fn list_snaps(cluster: &mut Cluster, name: &str) -> (SnapSet, bool) {
    let reply = cluster.call(name, vec![OpCode::ListSnaps]);
    match (reply.result, reply.outputs.first()) {
        (
            Ok(()),
            Some(OpOutput::Snaps {
                snapset,
                head_exists,
            }),
        ) => (snapset.clone(), *head_exists),
        other => panic!("list snaps {name}: {other:?}"),
    }
}

/// Clone objects (`name@id`) in `osd`'s copy of `name`'s PG.
/// The clones `osd` stores of `name` (from the store's listing: a copy may be
/// corrupt).
fn clones_on(cluster: &Cluster, osd: OsdId, name: &str) -> Vec<String> {
    let pgid = cluster.pg_of(name);
    let objects = (cluster.store(osd, pgid))
        .list_objects(CollectionId::Pg(pgid), None, usize::MAX)
        .expect("the PG's collection exists");
    objects
        .into_iter()
        .filter(|oid| oid.name == name && oid.snap != SnapId::HEAD)
        .map(|oid| format!("{name}@{}", oid.snap.0))
        .collect()
}

#[test]
fn a_write_after_a_snapshot_clones_the_head_and_reads_at_the_snap_see_the_old_data() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "a", "before", snapc(&[]));
    let s1 = snap_create(&mut cluster);
    write(&mut cluster, "a", "after", snapc(&[s1]));
    // A second write under the same context must not clone again.
    write(&mut cluster, "a", "after again", snapc(&[s1]));
    assert_eq!(
        read_at(&mut cluster, "a", SnapId::HEAD).unwrap(),
        b"after again"
    );
    assert_eq!(read_at(&mut cluster, "a", SnapId(s1)).unwrap(), b"before");
    let (set, head_exists) = list_snaps(&mut cluster, "a");
    assert!(head_exists);
    assert_eq!(set.seq, s1);
    assert_eq!(set.clones.len(), 1);
    assert_eq!(set.clones[0].snaps, vec![s1]);
    assert_eq!(set.clones[0].size_bytes, 6);

    // An object created after the snapshot did not exist at it.
    write(&mut cluster, "b", "new", snapc(&[s1]));
    assert_eq!(
        read_at(&mut cluster, "b", SnapId(s1)),
        Err(OpError::NotFound)
    );

    // Two more snapshots with a write between: each snap reads its own content.
    let s2 = snap_create(&mut cluster);
    write(&mut cluster, "a", "third", snapc(&[s1, s2]));
    let s3 = snap_create(&mut cluster);
    let s4 = snap_create(&mut cluster);
    write(&mut cluster, "a", "fourth", snapc(&[s1, s2, s3, s4]));
    assert_eq!(read_at(&mut cluster, "a", SnapId(s1)).unwrap(), b"before");
    assert_eq!(
        read_at(&mut cluster, "a", SnapId(s2)).unwrap(),
        b"after again"
    );
    assert_eq!(read_at(&mut cluster, "a", SnapId(s3)).unwrap(), b"third");
    assert_eq!(read_at(&mut cluster, "a", SnapId(s4)).unwrap(), b"third");
    assert_eq!(read_at(&mut cluster, "a", SnapId::HEAD).unwrap(), b"fourth");
    // One clone for s3 and s4 together: nothing was written between them.
    assert_eq!(list_snaps(&mut cluster, "a").0.clones.len(), 3);
    cluster.assert_all_replicas_identical();
    for osd in cluster.acting(cluster.pg_of("a")) {
        assert_eq!(clones_on(&cluster, osd, "a").len(), 3, "{osd}");
    }
}

#[test]
fn a_removed_head_with_clones_is_a_whiteout_that_snapshots_still_read() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "gone", "kept by the snapshot", snapc(&[]));
    let s1 = snap_create(&mut cluster);
    remove(&mut cluster, "gone", snapc(&[s1]));
    assert_eq!(
        read_at(&mut cluster, "gone", SnapId::HEAD),
        Err(OpError::NotFound)
    );
    assert_eq!(
        read_at(&mut cluster, "gone", SnapId(s1)).unwrap(),
        b"kept by the snapshot"
    );
    let (set, head_exists) = list_snaps(&mut cluster, "gone");
    assert!(!head_exists);
    assert_eq!(set.clones.len(), 1);
    // Listing shows neither the whiteout nor the clone.
    let pgid = cluster.pg_of("gone");
    let list = cluster.op(
        "",
        vec![OpCode::PgList {
            after: None,
            max_entries: 100,
        }],
    );
    let list = OsdOp { pgid, ..list };
    let reply = cluster.call_op(list);
    let Some(OpOutput::List { names, .. }) = reply.outputs.first() else {
        panic!("list: {reply:?}");
    };
    assert!(!names.contains(&"gone".to_string()), "{names:?}");
    // Writing again recreates the head; the snapshot still reads the old data.
    write(&mut cluster, "gone", "back", snapc(&[s1]));
    assert_eq!(
        read_at(&mut cluster, "gone", SnapId::HEAD).unwrap(),
        b"back"
    );
    assert_eq!(
        read_at(&mut cluster, "gone", SnapId(s1)).unwrap(),
        b"kept by the snapshot"
    );
    cluster.assert_all_replicas_identical();
}

#[test]
fn removing_a_snapshot_trims_its_clones_on_every_replica_in_the_background() {
    let mut cluster = Cluster::new(Config::default());
    let names: Vec<String> = (0..20).map(|i| format!("obj-{i}")).collect();
    for name in &names {
        write(&mut cluster, name, "v1", snapc(&[]));
    }
    let s1 = snap_create(&mut cluster);
    let s2 = snap_create(&mut cluster);
    for name in &names {
        write(&mut cluster, name, "v2", snapc(&[s1, s2]));
    }
    remove(&mut cluster, "obj-0", snapc(&[s1, s2]));
    snap_remove(&mut cluster, s1);
    // s2 still needs the clone (it covers both snaps): nothing is deleted.
    for _ in 0..4 {
        cluster.turn();
    }
    assert_eq!(read_at(&mut cluster, "obj-3", SnapId(s2)).unwrap(), b"v1");
    assert_eq!(
        read_at(&mut cluster, "obj-3", SnapId(s1)),
        Err(OpError::NotFound)
    );
    assert_eq!(
        list_snaps(&mut cluster, "obj-3").0.clones[0].snaps,
        vec![s2]
    );
    snap_remove(&mut cluster, s2);
    for _ in 0..4 {
        cluster.turn();
    }
    for name in &names {
        let pgid = cluster.pg_of(name);
        for osd in cluster.acting(pgid) {
            assert!(clones_on(&cluster, osd, name).is_empty(), "{name} on {osd}");
        }
        assert_eq!(
            read_at(&mut cluster, name, SnapId(s2)),
            Err(OpError::NotFound)
        );
    }
    // The whiteout went with its last clone.
    let pgid = cluster.pg_of("obj-0");
    for osd in cluster.acting(pgid) {
        assert!(!cluster.dump_pg(osd, pgid).contains_key("obj-0"), "{osd}");
    }
    assert_eq!(read_at(&mut cluster, "obj-5", SnapId::HEAD).unwrap(), b"v2");
    cluster.assert_all_replicas_identical();
}

#[test]
fn a_replica_that_missed_the_cloning_write_gets_the_clone_by_log_recovery() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "x", "old", snapc(&[]));
    let pgid = cluster.pg_of("x");
    let replica = *cluster.acting(pgid).last().expect("size 3");
    let s1 = snap_create(&mut cluster);
    cluster.crash(replica);
    cluster.run();
    write(&mut cluster, "x", "new", snapc(&[s1]));
    cluster.revive(replica);
    cluster.run();
    assert_eq!(clones_on(&cluster, replica, "x"), vec![format!("x@{s1}")]);
    cluster.assert_all_replicas_identical();
    // The recovered copy serves the snapshot once it is primary.
    cluster.change_map(|map| {
        let _ = map.set_primary_affinity(OsdId(0), 0);
        let _ = map.set_primary_affinity(OsdId(1), 0);
        let _ = map.set_primary_affinity(OsdId(2), 0);
        map.set_primary_affinity(replica, 0x10000)
            .expect("osd exists");
    });
    cluster.run();
    assert_eq!(cluster.primary_of(pgid), replica);
    assert_eq!(read_at(&mut cluster, "x", SnapId(s1)).unwrap(), b"old");
}

#[test]
fn a_wiped_replica_gets_clones_and_whiteouts_back_by_backfill() {
    let mut cluster = Cluster::new(Config::default());
    let s1 = {
        write(&mut cluster, "y", "y-old", snapc(&[]));
        write(&mut cluster, "z", "z-old", snapc(&[]));
        snap_create(&mut cluster)
    };
    write(&mut cluster, "y", "y-new", snapc(&[s1]));
    remove(&mut cluster, "z", snapc(&[s1]));
    cluster.restart(OsdId(1), true);
    cluster.run();
    cluster.assert_all_replicas_identical();
    for name in ["y", "z"] {
        let pgid = cluster.pg_of(name);
        if cluster.acting(pgid).contains(&OsdId(1)) {
            assert_eq!(clones_on(&cluster, OsdId(1), name).len(), 1, "{name}");
        }
    }
    assert_eq!(read_at(&mut cluster, "z", SnapId(s1)).unwrap(), b"z-old");
    assert_eq!(
        read_at(&mut cluster, "z", SnapId::HEAD),
        Err(OpError::NotFound)
    );
}

#[test]
fn malformed_snapshot_contexts_and_writes_at_a_snapshot_are_refused() {
    let mut cluster = Cluster::new(Config::default());
    let mut op = cluster.op("w", vec![OpCode::WriteFull { data: bytes(b"x") }]);
    op.snapc = SnapContext {
        seq: 3,
        snaps: vec![2, 3],
    };
    assert!(matches!(
        cluster.call_op(op).result,
        Err(OpError::Invalid(_))
    ));
    let mut op = cluster.op("w", vec![OpCode::WriteFull { data: bytes(b"x") }]);
    op.snapid = SnapId(1);
    assert!(matches!(
        cluster.call_op(op).result,
        Err(OpError::Invalid(_))
    ));
}

#[test]
fn trimming_is_bounded_per_turn_and_finishes_over_several() {
    let config = Config {
        pg_num: 1,
        ..Config::default()
    };
    let mut cluster = Cluster::new(config);
    let names: Vec<String> = (0..300).map(|i| format!("o{i:03}")).collect();
    for name in &names {
        write(&mut cluster, name, "v1", snapc(&[]));
    }
    let s1 = snap_create(&mut cluster);
    for name in &names {
        write(&mut cluster, name, "v2", snapc(&[s1]));
    }
    snap_remove(&mut cluster, s1);
    let remaining = |cluster: &Cluster| -> usize {
        let pgid = cluster.pg_of("o000");
        let primary = cluster.primary_of(pgid);
        cluster
            .dump_pg(primary, pgid)
            .keys()
            .filter(|key| key.contains('@'))
            .count()
    };
    assert_eq!(remaining(&cluster), 300);
    let pgid = cluster.pg_of("o000");
    assert_eq!(cluster.pg_stat(pgid).state.name(), "active+clean+snaptrim");
    cluster.turn();
    let after_one = remaining(&cluster);
    assert!(after_one < 300, "a turn trims something");
    assert!(
        after_one >= 300 - 16,
        "a turn starts at most 16 trims: {after_one} left"
    );
    let mut turns = 1;
    while remaining(&cluster) > 0 {
        cluster.turn();
        turns += 1;
        assert!(turns < 100, "trimming never finished");
    }
    assert!(turns >= 300 / 16, "{turns} turns");
    cluster.turn(); // the pass ends on an empty listing
    assert_eq!(cluster.pg_stat(pgid).state.name(), "active+clean");
    cluster.assert_all_replicas_identical();
    assert_eq!(read_at(&mut cluster, "o123", SnapId::HEAD).unwrap(), b"v2");
}

#[test]
fn a_writer_with_a_stale_context_makes_no_clone_for_a_removed_snapshot() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "s", "v1", snapc(&[]));
    let s1 = snap_create(&mut cluster);
    snap_remove(&mut cluster, s1);
    cluster.turn();
    // The writer still holds s1 in its context.
    write(&mut cluster, "s", "v2", snapc(&[s1]));
    let (set, _) = list_snaps(&mut cluster, "s");
    assert!(set.clones.is_empty(), "{set:?}");
    assert_eq!(set.seq, s1);
    assert_eq!(
        read_at(&mut cluster, "s", SnapId(s1)),
        Err(OpError::NotFound)
    );
}

/// A snapshot trim logs a change to the head that leaves its object info as it was:
/// a repair of the head after a trim takes a replica's copy as current (it checks
/// pulled copies against the newest change the log records for the object).
#[test]
fn a_head_trimmed_of_its_clones_is_repaired_from_a_replica() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "t", "v1", snapc(&[]));
    let s1 = snap_create(&mut cluster);
    write(&mut cluster, "t", "v2", snapc(&[s1]));
    snap_remove(&mut cluster, s1);
    for _ in 0..4 {
        cluster.turn();
    }
    let pgid = cluster.pg_of("t");
    let primary = cluster.primary_of(pgid);
    assert!(clones_on(&cluster, primary, "t").is_empty(), "trimmed");
    cluster.decay(primary, "t");
    assert_eq!(read_at(&mut cluster, "t", SnapId::HEAD).unwrap(), b"v2");
    cluster.run();
    cluster.assert_all_replicas_identical();
}

/// A primary whose copy of an object is under repair leaves the object's trim until
/// the repair is done (as a client write waits): a copy pulled before the trim would
/// otherwise bring the trimmed clone back, and the next pass would trim it again on
/// replicas that no longer have it.
#[test]
fn trimming_waits_for_the_repair_of_the_primarys_copy() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "t", "v1", snapc(&[]));
    let s1 = snap_create(&mut cluster);
    let s2 = snap_create(&mut cluster);
    write(&mut cluster, "t", "v2", snapc(&[s1, s2]));
    let pgid = cluster.pg_of("t");
    let primary = cluster.primary_of(pgid);
    assert_eq!(clones_on(&cluster, primary, "t").len(), 1);
    // The primary finds its copy corrupt on a read and pulls a replica's; the copy
    // the replica sends is held on the way.
    cluster.decay(primary, "t");
    let read = cluster.op(
        "t",
        vec![OpCode::Read {
            offset: 0,
            length: 0,
        }],
    );
    let reqid = cluster.send(read);
    cluster.deliver_where(|e| !matches!(e.msg, Msg::PgPush(_)));
    let pushes = cluster.take_where(|e| matches!(e.msg, Msg::PgPush(_)));
    assert!(!pushes.is_empty(), "the repair pulled a copy");
    // Both snapshots go while the repair is in flight: nothing of "t" is trimmed.
    snap_remove(&mut cluster, s1);
    snap_remove(&mut cluster, s2);
    for _ in 0..4 {
        cluster.turn();
    }
    assert_eq!(clones_on(&cluster, primary, "t").len(), 1, "trim waited");
    for push in pushes {
        cluster.inject(push.from, push.to, push.msg);
    }
    cluster.run();
    assert_eq!(
        cluster.take_replies_for(reqid).len(),
        1,
        "the read was answered"
    );
    for _ in 0..4 {
        cluster.turn();
    }
    for osd in cluster.acting(pgid) {
        assert!(clones_on(&cluster, osd, "t").is_empty(), "trimmed on {osd}");
    }
    cluster.assert_all_replicas_identical();
    assert_eq!(read_at(&mut cluster, "t", SnapId::HEAD).unwrap(), b"v2");
    write(&mut cluster, "t", "v3", snapc(&[]));
    cluster.assert_all_replicas_identical();
}

/// Trimming is a write of every member's copy: a PG with a member away (undersized)
/// or a copy still to recover does not trim until it is clean again.
#[test]
fn trimming_waits_until_the_pg_is_clean() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "u", "v1", snapc(&[]));
    let s1 = snap_create(&mut cluster);
    write(&mut cluster, "u", "v2", snapc(&[s1]));
    let pgid = cluster.pg_of("u");
    let primary = cluster.primary_of(pgid);
    let away = *cluster
        .acting(pgid)
        .iter()
        .find(|&&osd| osd != primary)
        .expect("size 3");
    cluster.mark_down(away);
    cluster.run();
    assert_eq!(cluster.primary_of(pgid), primary);
    snap_remove(&mut cluster, s1);
    for _ in 0..4 {
        cluster.turn();
    }
    assert_eq!(
        clones_on(&cluster, primary, "u").len(),
        1,
        "undersized: no trim"
    );
    assert_eq!(
        cluster.pg_stat(pgid).state.name(),
        "active+degraded+undersized+snaptrim_wait"
    );
    cluster.revive(away);
    cluster.run();
    for _ in 0..4 {
        cluster.turn();
    }
    for osd in cluster.acting(pgid) {
        assert!(clones_on(&cluster, osd, "u").is_empty(), "trimmed on {osd}");
    }
    assert_eq!(cluster.pg_stat(pgid).state.name(), "active+clean");
    cluster.assert_all_replicas_identical();
}

/// A PG counts snapshot clones among its objects and bytes, as Ceph's `num_objects`
/// and `num_bytes` do (`carmine df` reports them); a whiteout head is not an object,
/// and trimming takes the clones back out.
#[test]
fn pg_counts_include_clones_until_they_are_trimmed() {
    let config = Config {
        pg_num: 1,
        ..Config::default()
    };
    let mut cluster = Cluster::new(config);
    write(&mut cluster, "c", "0123456789", snapc(&[]));
    let pgid = cluster.pg_of("c");
    let counts = |cluster: &Cluster| {
        let stat = cluster.pg_stat(pgid);
        (stat.object_count, stat.data_bytes)
    };
    assert_eq!(counts(&cluster), (1, 10));
    let s1 = snap_create(&mut cluster);
    write(&mut cluster, "c", "abc", snapc(&[s1]));
    assert_eq!(counts(&cluster), (2, 13), "the head and its clone");
    remove(&mut cluster, "c", snapc(&[s1]));
    assert_eq!(
        counts(&cluster),
        (1, 10),
        "the clone; the whiteout is no object"
    );
    snap_remove(&mut cluster, s1);
    for _ in 0..4 {
        cluster.turn();
    }
    assert_eq!(counts(&cluster), (0, 0), "trimmed");
    cluster.assert_all_replicas_identical();
}
