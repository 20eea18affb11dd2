//! Map changes under a PG with writes in flight: departing replicas, falling below
//! `min_size`, and a primary that loses primacy.

mod harness;

use carmine_proto::{OpCode, OpError, OpOutput, PgState};
use harness::{bytes, Cluster, Config, Envelope};

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
fn a_replica_that_goes_down_mid_write_is_no_longer_waited_for() {
    let mut cluster = Cluster::new(Config::default());
    let op = cluster.op(
        "w",
        vec![OpCode::WriteFull {
            data: bytes(b"data"),
        }],
    );
    let pgid = op.pgid;
    let acting = cluster.acting(pgid);
    let reqid = cluster.send(op);
    // Both replicas apply it; one answers, the other dies before answering.
    cluster.deliver_where(Envelope::is_rep_op);
    cluster.deliver_where(|e| e.from.0 == acting[1]);
    assert!(!cluster.has_reply(reqid));
    cluster.crash(acting[2]);
    cluster.run();
    let reply = cluster.take_replies_for(reqid).pop().expect("answered");
    assert_eq!(reply.result, Ok(()));
    assert_eq!(cluster.acting(pgid), acting[..2].to_vec());
    cluster.assert_replicas_identical(pgid);
    let stat = cluster.pg_stat(pgid);
    assert!(stat.state.contains(PgState::ACTIVE));
    assert!(stat.state.contains(PgState::DEGRADED));
    // Writes go on with two copies.
    let next = cluster.call("w", vec![OpCode::Append { data: bytes(b"+") }]);
    assert_eq!(next.result, Ok(()));
    assert_eq!(read_all(&mut cluster, "w"), b"data+");
    cluster.assert_replicas_identical(pgid);
}

#[test]
fn a_replica_that_goes_down_before_the_rep_op_arrives_is_not_waited_for() {
    let mut cluster = Cluster::new(Config::default());
    let op = cluster.op(
        "w",
        vec![OpCode::WriteFull {
            data: bytes(b"data"),
        }],
    );
    let pgid = op.pgid;
    let acting = cluster.acting(pgid);
    let reqid = cluster.send(op);
    // The surviving replica applies and answers; the other never sees the write.
    cluster.deliver_where(|e| e.to.0 == acting[1] || e.from.0 == acting[1]);
    cluster.crash(acting[2]);
    cluster.run();
    assert_eq!(
        cluster.take_replies_for(reqid).pop().unwrap().result,
        Ok(())
    );
    cluster.assert_replicas_identical(pgid);
}

#[test]
fn below_min_size_the_pg_is_inactive_and_holds_ops_until_it_is_active_again() {
    let mut cluster = Cluster::new(Config::default());
    let pgid = cluster.pg_of("held");
    let acting = cluster.acting(pgid);
    cluster.crash(acting[1]);
    cluster.crash(acting[2]);
    let stat = cluster.pg_stat(pgid);
    assert!(
        stat.state.contains(PgState::INACTIVE),
        "{}",
        stat.state.name()
    );
    assert!(!stat.state.contains(PgState::ACTIVE));

    let write = cluster.op("held", vec![OpCode::WriteFull { data: bytes(b"w") }]);
    let write_id = cluster.send(write);
    let read = cluster.op("held", vec![OpCode::Stat]);
    let read_id = cluster.send(read);
    cluster.run();
    assert!(cluster.replies().is_empty(), "an inactive PG answered");
    assert!(!cluster.dump_pg(acting[0], pgid).contains_key("held"));

    cluster.revive(acting[1]);
    cluster.run();
    let order: Vec<_> = cluster.take_replies().into_iter().collect();
    assert_eq!(order.len(), 2, "{order:?}");
    assert_eq!(order[0].reqid, write_id);
    assert_eq!(order[0].result, Ok(()));
    assert_eq!(order[1].reqid, read_id);
    assert_eq!(order[1].result, Ok(()));
    assert!(cluster.pg_stat(pgid).state.contains(PgState::ACTIVE));
    cluster.assert_replicas_identical(pgid);
}

#[test]
fn a_primary_that_loses_primacy_drops_in_flight_ops_and_the_new_primary_serves_the_resend() {
    let mut cluster = Cluster::new(Config::default());
    let op = cluster.op(
        "p",
        vec![OpCode::Append {
            data: bytes(b"once"),
        }],
    );
    let pgid = op.pgid;
    let old = cluster.acting(pgid);
    let reqid = cluster.send(op.clone());
    // Both replicas apply it, then the old primary is marked down (but still runs).
    cluster.deliver_where(Envelope::is_rep_op);
    cluster.mark_down(old[0]);
    cluster.run();
    assert!(!cluster.has_reply(reqid), "a deposed primary answered");
    assert_eq!(cluster.primary_of(pgid), old[1]);

    let mut resend = op;
    resend.map_epoch = cluster.map.epoch;
    let reply = cluster.call_op(resend);
    assert_eq!(reply.result, Ok(()));
    assert_eq!(read_all(&mut cluster, "p"), b"once", "applied twice");
    cluster.assert_replicas_identical(pgid);

    // The deposed primary refuses client ops.
    let stale = cluster.op("p", vec![OpCode::Stat]);
    let addr = cluster.addr(old[0], pgid);
    cluster.send_to(addr, 1, stale.clone());
    let refused = cluster.take_replies_for(stale.reqid).pop().unwrap();
    assert_eq!(refused.result, Err(OpError::WrongPrimary));
}

#[test]
fn a_write_the_new_primary_never_saw_is_executed_by_it_on_resend() {
    let mut cluster = Cluster::new(Config::default());
    let op = cluster.op(
        "q",
        vec![OpCode::Append {
            data: bytes(b"one"),
        }],
    );
    let pgid = op.pgid;
    let old = cluster.acting(pgid);
    cluster.send(op.clone());
    cluster.crash(old[0]);
    cluster.run();
    assert!(cluster.replies().is_empty());
    let mut resend = op;
    resend.map_epoch = cluster.map.epoch;
    let reply = cluster.call_op(resend);
    assert_eq!(reply.result, Ok(()));
    assert_eq!(read_all(&mut cluster, "q"), b"one");
    cluster.assert_replicas_identical(pgid);
}

#[test]
fn queued_reads_and_writes_of_a_deposed_primary_get_no_reply() {
    let mut cluster = Cluster::new(Config::default());
    let pgid = cluster.pg_of("d");
    let old = cluster.acting(pgid);
    let write = cluster.op("d", vec![OpCode::WriteFull { data: bytes(b"1") }]);
    cluster.send(write);
    let read = cluster.op("d", vec![OpCode::Stat]);
    cluster.send(read);
    cluster.mark_down(old[0]);
    cluster.run();
    assert!(cluster.replies().is_empty(), "{:?}", cluster.replies());
    // The new primary serves new requests.
    let fresh = cluster.call("e", vec![OpCode::WriteFull { data: bytes(b"2") }]);
    assert_eq!(fresh.result, Ok(()));
}
