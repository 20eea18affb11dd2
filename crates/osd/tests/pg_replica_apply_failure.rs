//! A replica that cannot apply a write its primary applied: its store refuses the
//! transaction for a reason other than space (here its copy of the object vanished
//! behind the PG's back, so the transaction finds no object to change). Ceph's OSD
//! asserts there, and the map change that follows re-peers the PG. Carmine's primary
//! peers again within the interval instead: the replica's log, which stopped before
//! the write, is caught up by peering and the object pushed. The client's write
//! succeeds (the primary's copy and log hold it), and later writes go on; before, the
//! client got the replica's error for a write that had happened, and every later
//! write waited behind the replica's gap until some other change re-peered the PG.

mod harness;

use carmine_proto::{OpCode, SnapContext};
use carmine_types::SnapId;
use harness::{bytes, read, read_at, write, Cluster, Config};

/// A pool snapshot, and the context a client then writes with.
fn snap_create(cluster: &mut Cluster) -> SnapContext {
    let mut snap = 0;
    cluster.change_map(|map| snap = map.allocate_pool_snap("test").expect("pool exists"));
    cluster.run();
    SnapContext {
        seq: snap,
        snaps: vec![snap],
    }
}

/// The first write after a snapshot clones the head; the replica has no head to clone.
#[test]
fn a_write_a_replica_cannot_apply_succeeds_once_the_replica_is_caught_up() {
    let mut cluster = Cluster::new(Config::one_pg());
    let pgid = cluster.pg_of("obj");
    write(&mut cluster, "obj", "before");
    let snapc = snap_create(&mut cluster);
    let replica = cluster.acting(pgid)[1];
    cluster.lose(replica, "obj");

    let mut op = cluster.op(
        "obj",
        vec![OpCode::WriteFull {
            data: bytes(b"after"),
        }],
    );
    op.snapc = snapc.clone();
    let reply = cluster.call_op(op);
    assert_eq!(reply.result, Ok(()), "the primary's copy holds the write");
    assert_eq!(
        cluster.pg_state(pgid).name(),
        "active+clean",
        "{:?}",
        cluster.pg_stat(pgid)
    );
    cluster.assert_replicas_identical(pgid);
    assert_eq!(read(&mut cluster, "obj"), b"after");
    assert_eq!(
        read_at(&mut cluster, "obj", SnapId(snapc.seq)).as_deref(),
        Ok(&b"before"[..])
    );
    assert_eq!(
        cluster.local_data(replica, "obj").as_deref(),
        Some(&b"after"[..])
    );

    // Later writes are not stuck behind the replica's gap.
    write(&mut cluster, "other", "later");
    write(&mut cluster, "obj", "again");
    assert_eq!(read(&mut cluster, "other"), b"later");
    assert_eq!(read(&mut cluster, "obj"), b"again");
    cluster.assert_replicas_identical(pgid);
}

#[test]
fn a_remove_a_replica_cannot_apply_succeeds_and_no_copy_keeps_the_object() {
    let mut cluster = Cluster::new(Config::one_pg());
    let pgid = cluster.pg_of("obj");
    write(&mut cluster, "obj", "data");
    write(&mut cluster, "kept", "kept");
    let replica = cluster.acting(pgid)[2];
    cluster.lose(replica, "obj");

    let reply = cluster.call("obj", vec![OpCode::Remove]);
    assert_eq!(reply.result, Ok(()));
    assert_eq!(cluster.pg_state(pgid).name(), "active+clean");
    cluster.assert_replicas_identical(pgid);
    for osd in cluster.acting(pgid) {
        assert_eq!(cluster.local_data(osd, "obj"), None, "{osd}'s copy");
    }
    write(&mut cluster, "obj", "new");
    assert_eq!(read(&mut cluster, "obj"), b"new");
    assert_eq!(read(&mut cluster, "kept"), b"kept");
    cluster.assert_replicas_identical(pgid);
}

/// Several writes in flight behind the one the replica refuses: it ignores them (they
/// do not follow its log), and each still completes once the replica is caught up.
#[test]
fn writes_in_flight_behind_a_refused_one_all_complete() {
    let mut cluster = Cluster::new(Config::one_pg());
    let pgid = cluster.pg_of("obj");
    write(&mut cluster, "obj", "data");
    let replica = cluster.acting(pgid)[1];
    cluster.lose(replica, "obj");

    let mut sent = Vec::new();
    let first = cluster.op("obj", vec![OpCode::Remove]);
    sent.push(cluster.send(first));
    for i in 0..4 {
        let name = format!("next{i}");
        let op = cluster.op(
            &name,
            vec![OpCode::WriteFull {
                data: bytes(name.as_bytes()),
            }],
        );
        sent.push(cluster.send(op));
    }
    cluster.run();
    for reqid in sent {
        let replies = cluster.take_replies_for(reqid);
        assert_eq!(replies.len(), 1, "{reqid}: {replies:?}");
        assert_eq!(replies[0].result, Ok(()), "{reqid}");
    }
    assert_eq!(cluster.pg_state(pgid).name(), "active+clean");
    cluster.assert_replicas_identical(pgid);
    for i in 0..4 {
        let name = format!("next{i}");
        assert_eq!(read(&mut cluster, &name), name.as_bytes());
    }
}
