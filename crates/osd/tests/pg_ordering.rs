//! Ordering in the write path: resent requests, reads behind writes, reply order, and
//! messages that wait for a newer map.

mod harness;

use carmine_osd::Output;
use carmine_proto::{Msg, OpCode, OpError, OpOutput, OsdOpReply};
use carmine_types::{EVersion, OsdId};
use harness::{bytes, names_in_pg, Cluster, Config, Envelope, CLIENT};

fn read_all(cluster: &mut Cluster, name: &str) -> Vec<u8> {
    let reply = cluster.call(
        name,
        vec![OpCode::Read {
            offset: 0,
            length: 0,
        }],
    );
    match reply.outputs.as_slice() {
        [OpOutput::Data(data)] => data.to_vec(),
        other => panic!("read returned {other:?} ({:?})", reply.result),
    }
}

#[test]
fn a_write_resent_after_completion_is_answered_from_the_log_and_applied_once() {
    let mut cluster = Cluster::new(Config::default());
    let op = cluster.op(
        "dup",
        vec![OpCode::Append {
            data: bytes(b"abc"),
        }],
    );
    let first = cluster.call_op(op.clone());
    assert_eq!(first.result, Ok(()));
    let pgid = op.pgid;
    let last_update = cluster.pg_stat(pgid).last_update;

    let again = cluster.call_op(op.clone());
    assert_eq!(again.result, Ok(()));
    assert_eq!(again.version, first.version);
    assert_eq!(again.user_version, first.user_version);
    assert_eq!(again.reqid, op.reqid);
    assert_eq!(cluster.pending_count(), 0, "a duplicate was replicated");
    assert_eq!(cluster.pg_stat(pgid).last_update, last_update);
    assert_eq!(read_all(&mut cluster, "dup"), b"abc");
    cluster.assert_replicas_identical(pgid);

    // A later write is not mistaken for the duplicate.
    let later = cluster.call("dup", vec![OpCode::Append { data: bytes(b"d") }]);
    assert!(later.version > first.version);
    let third = cluster.call_op(op);
    assert_eq!(third.version, first.version);
    assert_eq!(read_all(&mut cluster, "dup"), b"abcd");
}

#[test]
fn a_write_resent_while_in_flight_is_answered_when_the_original_completes() {
    let mut cluster = Cluster::new(Config::default());
    let op = cluster.op(
        "dup",
        vec![OpCode::Append {
            data: bytes(b"xyz"),
        }],
    );
    let reqid = cluster.send(op.clone());
    cluster.deliver_where(Envelope::is_rep_op);
    // The resend arrives on a new connection before the replicas answered.
    let target = cluster.target(&op);
    cluster.send_to(target, 2, op.clone());
    assert!(!cluster.has_reply(reqid), "a duplicate was answered early");
    assert_eq!(
        cluster.pending().iter().filter(|e| e.is_rep_op()).count(),
        0,
        "a duplicate was replicated"
    );
    cluster.run();
    let replies: Vec<_> = cluster.replies().to_vec();
    assert_eq!(replies.len(), 2, "{replies:?}");
    let clients: Vec<u64> = replies.iter().map(|(client, _)| *client).collect();
    assert_eq!(clients, vec![CLIENT, 2]);
    assert_eq!(replies[0].1, replies[1].1);
    assert_eq!(replies[0].1.result, Ok(()));
    cluster.take_replies();
    assert_eq!(read_all(&mut cluster, "dup"), b"xyz");
    cluster.assert_replicas_identical(op.pgid);
}

#[test]
fn a_read_waits_for_the_in_flight_write_to_its_object() {
    let mut cluster = Cluster::new(Config {
        pg_num: 1,
        ..Config::default()
    });
    ok_call(&mut cluster, "obj", b"old");
    ok_call(&mut cluster, "other", b"other");
    let write = cluster.op(
        "obj",
        vec![OpCode::WriteFull {
            data: bytes(b"new"),
        }],
    );
    let write_id = cluster.send(write);
    let read = cluster.op(
        "obj",
        vec![OpCode::Read {
            offset: 0,
            length: 0,
        }],
    );
    let read_id = cluster.send(read);
    assert!(
        !cluster.has_reply(read_id),
        "read saw an unacknowledged write"
    );
    // A read of another object in the same PG is not held up.
    let other = cluster.op("other", vec![OpCode::Stat]);
    let other_id = cluster.send(other);
    assert!(cluster.has_reply(other_id));
    // Nor is the read released by the replicas applying the write: only the ack.
    cluster.deliver_where(Envelope::is_rep_op);
    assert!(!cluster.has_reply(read_id));
    let replica = cluster_replica(&cluster, 1);
    cluster.deliver_where(|e| e.is_rep_reply() && e.from.0 == replica);
    assert!(!cluster.has_reply(read_id));
    cluster.run();
    let order: Vec<_> = cluster
        .replies()
        .iter()
        .map(|(_, reply)| reply.reqid)
        .collect();
    assert_eq!(order, vec![other_id, write_id, read_id]);
    let read_reply = cluster.take_replies_for(read_id).pop().unwrap();
    assert_eq!(read_reply.outputs, vec![OpOutput::Data(bytes(b"new"))]);
}

fn cluster_replica(cluster: &Cluster, index: usize) -> OsdId {
    cluster.acting(cluster.pg_of("obj"))[index]
}

fn ok_call(cluster: &mut Cluster, name: &str, data: &[u8]) -> OsdOpReply {
    let reply = cluster.call(name, vec![OpCode::WriteFull { data: bytes(data) }]);
    assert_eq!(reply.result, Ok(()), "{reply:?}");
    reply
}

#[test]
fn several_reads_behind_several_writes_see_the_last_write() {
    let mut cluster = Cluster::new(Config::default());
    ok_call(&mut cluster, "obj", b"v0");
    let mut reads = Vec::new();
    for i in 1..=3u8 {
        let write = cluster.op(
            "obj",
            vec![OpCode::Append {
                data: bytes(&[b'0' + i]),
            }],
        );
        cluster.send(write);
        let read = cluster.op("obj", vec![OpCode::Stat]);
        reads.push(cluster.send(read));
    }
    assert!(cluster.replies().is_empty(), "{:?}", cluster.replies());
    cluster.run();
    for id in reads {
        let reply = cluster.take_replies_for(id).pop().unwrap();
        let [OpOutput::Stat { size_bytes, .. }] = reply.outputs.as_slice() else {
            panic!("{reply:?}")
        };
        assert_eq!(*size_bytes, 5, "a read was released before the last write");
    }
}

#[test]
fn write_replies_come_back_in_version_order_when_replica_replies_are_reordered() {
    let mut cluster = Cluster::new(Config {
        pg_num: 1,
        ..Config::default()
    });
    let pgid = cluster.pg_of("a");
    let names = names_in_pg(&cluster, pgid, "o", 4);
    let mut ids = Vec::new();
    for name in &names {
        let op = cluster.op(name, vec![OpCode::WriteFull { data: bytes(b"x") }]);
        ids.push(cluster.send(op));
    }
    cluster.deliver_where(Envelope::is_rep_op);
    let replies_for = |version: u64| move |e: &Envelope| matches!(&e.msg, Msg::RepOpReply(r) if r.version.version == version);
    // Newest first: every replica reply of writes 4, 3, 2 overtakes those of write 1.
    for version in [4, 3, 2] {
        while cluster.deliver_out_of_order(replies_for(version)) {}
    }
    assert!(
        cluster.replies().is_empty(),
        "answered before write 1 completed"
    );
    assert!(cluster.deliver_out_of_order(replies_for(1)));
    assert!(
        cluster.replies().is_empty(),
        "answered with one replica missing"
    );
    assert!(cluster.deliver_out_of_order(replies_for(1)));
    let replies = cluster.take_replies();
    let got: Vec<_> = replies.iter().map(|r| r.reqid).collect();
    assert_eq!(got, ids);
    let versions: Vec<u64> = replies.iter().map(|r| r.version.version).collect();
    assert_eq!(versions, vec![1, 2, 3, 4]);
    assert!(replies.iter().all(|r| r.result == Ok(())));
    cluster.assert_replicas_identical(pgid);
}

#[test]
fn versions_increase_across_objects_of_a_pg_and_carry_the_epoch() {
    let mut cluster = Cluster::new(Config {
        pg_num: 1,
        ..Config::default()
    });
    let mut last = EVersion::ZERO;
    for i in 0..10 {
        let reply = ok_call(&mut cluster, &format!("n{}", i % 3), b"d");
        assert!(reply.version > last);
        assert_eq!(reply.version.epoch, cluster.map.epoch);
        last = reply.version;
    }
    assert_eq!(cluster.pg_stat(cluster.pg_of("n0")).last_update, last);
}

#[test]
fn an_op_from_a_client_with_a_newer_map_waits_for_that_map() {
    let mut cluster = Cluster::new(Config::default());
    let old = cluster.map.epoch;
    // The monitors publish a map no OSD has received yet.
    let new = cluster.change_map_for(&[], |_| {});
    assert!(new > old);
    let op = cluster.op("future", vec![OpCode::WriteFull { data: bytes(b"f") }]);
    assert_eq!(op.map_epoch, new);
    let target = cluster.target(&op);
    let reqid = cluster.send(op);
    assert!(!cluster.has_reply(reqid));
    assert_eq!(cluster.pending_count(), 0, "served before the map arrived");
    assert_eq!(cluster.shard(target).wanted_epoch(), Some(new));
    cluster.run();
    assert!(!cluster.has_reply(reqid));

    let all = cluster.osds();
    cluster.deliver_map_to(&all);
    cluster.run();
    let reply = cluster.take_replies_for(reqid).pop().expect("served");
    assert_eq!(reply.result, Ok(()));
    assert_eq!(reply.map_epoch, new);
    assert_eq!(reply.version.epoch, new);
}

#[test]
fn a_rep_op_from_a_primary_with_a_newer_map_waits_for_that_map_at_the_replica() {
    let mut cluster = Cluster::new(Config::default());
    let pgid = cluster.pg_of("obj");
    let acting = cluster.acting(pgid);
    // Only the primary learns the (unrelated) new map.
    let new = cluster.change_map_for(&acting[..1], |_| {});
    let mut op = cluster.op("obj", vec![OpCode::WriteFull { data: bytes(b"x") }]);
    op.map_epoch = new;
    let reqid = cluster.send(op);
    cluster.run();
    assert!(
        !cluster.has_reply(reqid),
        "replicas applied a newer-epoch RepOp"
    );
    for &osd in &acting[1..] {
        assert_eq!(
            cluster.shard(cluster.addr(osd, pgid)).wanted_epoch(),
            Some(new)
        );
        assert!(!cluster.dump_pg(osd, pgid).contains_key("obj"));
    }
    cluster.deliver_map_to(&acting[1..]);
    cluster.run();
    assert_eq!(
        cluster.take_replies_for(reqid).pop().unwrap().result,
        Ok(())
    );
    cluster.assert_replicas_identical(pgid);
}

#[test]
fn a_shard_without_any_map_holds_client_ops() {
    let mut shard = carmine_osd::OsdShard::new(
        OsdId(0),
        carmine_types::ShardIndex(0),
        1,
        carmine_store::MemStore::new(),
    );
    let mut cluster = Cluster::new(Config::default());
    let op = cluster.op("x", vec![OpCode::Stat]);
    let mut out = Vec::new();
    shard.handle_client_op(CLIENT, op.clone(), &mut out);
    assert!(out.is_empty());
    assert_eq!(shard.wanted_epoch(), Some(op.map_epoch));
    // Once given the map, it answers (here: this OSD may not be the primary).
    shard.handle_map(cluster.map.clone(), &mut out);
    let replies: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            Output::Client(_, Msg::OsdOpReply(reply)) => Some(reply.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(replies.len(), 1, "{out:?}");
    let primary = cluster.primary_of(op.pgid);
    if primary == OsdId(0) {
        assert_eq!(replies[0].result, Err(OpError::NotFound));
    } else {
        assert_eq!(replies[0].result, Err(OpError::WrongPrimary));
    }
}
