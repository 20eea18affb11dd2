//! Regression tests: each once showed a bug in the PG state machine (its name says
//! what went wrong) and now guards the fix.

mod harness;

use carmine_proto::{OpCode, OpError, OpOutput, PgState};

use carmine_types::OsdId;
use harness::{bytes, Cluster, Config};

#[test]
fn in_flight_write_hangs_when_a_remaining_replica_sees_the_new_map_before_the_rep_op() {
    let mut cluster = Cluster::new(Config::default());
    let op = cluster.op(
        "w",
        vec![OpCode::WriteFull {
            data: bytes(b"data"),
        }],
    );
    let pgid = op.pgid;
    let [primary, stays, leaves] = cluster.acting(pgid)[..] else {
        panic!("size 3")
    };
    let reqid = cluster.send(op.clone());
    // `leaves` dies; `stays` hears of it before the primary's RepOp reaches it.
    cluster.partition(leaves);
    cluster.change_map_for(&[stays], |map| map.mark_down(leaves).unwrap());
    cluster.run();
    cluster.deliver_map_to(&[primary]);
    cluster.run();
    // Even a resend does not help: it joins the stuck write.
    let mut resend = op;
    resend.map_epoch = cluster.map.epoch;
    cluster.send(resend);
    cluster.run();
    assert!(
        cluster.has_reply(reqid),
        "the write never completes: the primary waits on {stays} for a RepOp {stays} dropped"
    );
}

#[test]
fn held_ops_stay_stuck_when_min_size_is_lowered_without_an_acting_change() {
    let mut cluster = Cluster::new(Config::default());
    let pgid = cluster.pg_of("held");
    let acting = cluster.acting(pgid);
    cluster.crash(acting[1]);
    cluster.crash(acting[2]);
    let write = cluster.op("held", vec![OpCode::WriteFull { data: bytes(b"w") }]);
    let write_id = cluster.send(write);
    cluster.run();
    assert!(!cluster.has_reply(write_id));

    let pool = cluster.pool;
    cluster.change_map(|map| map.pools.get_mut(&pool).unwrap().min_size = 1);
    assert!(cluster.pg_stat(pgid).state.contains(PgState::ACTIVE));
    cluster.run();
    // A new op is served at once, overtaking the held one.
    let later = cluster.op("held", vec![OpCode::Stat]);
    cluster.send(later);
    cluster.run();
    assert!(
        cluster.has_reply(write_id),
        "the PG is active but the held write was never served; replies: {:?}",
        cluster.replies()
    );
}

#[test]
fn in_flight_write_is_acked_after_the_acting_set_falls_below_min_size() {
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
    cluster.partition(acting[1]);
    cluster.partition(acting[2]);
    cluster.change_map(|map| {
        map.mark_down(acting[1]).unwrap();
        map.mark_down(acting[2]).unwrap();
    });
    cluster.run();
    assert!(cluster.pg_stat(pgid).state.contains(PgState::INACTIVE));
    let copies = acting
        .iter()
        .filter(|&&osd| cluster.dump_pg(osd, pgid).contains_key("w"))
        .count();
    assert!(
        !cluster.has_reply(reqid),
        "acknowledged with {copies} copy while min_size is 2: {:?}",
        cluster.replies()
    );
}

#[test]
fn failed_write_is_answered_before_the_in_flight_write_it_observed() {
    let mut cluster = Cluster::new(Config::default());
    let first = cluster.op("x", vec![OpCode::Create { exclusive: true }]);
    let first_id = cluster.send(first);
    let second = cluster.op("x", vec![OpCode::Create { exclusive: true }]);
    let second_id = cluster.send(second);
    assert!(
        !cluster.has_reply(second_id),
        "the second create was answered {:?} before the first was acknowledged",
        cluster.replies()
    );
    cluster.run();
    let order: Vec<_> = cluster.replies().iter().map(|(_, r)| r.reqid).collect();
    assert_eq!(order, vec![first_id, second_id]);
}

#[test]
fn local_read_with_an_empty_name_exposes_the_pg_metadata_object() {
    let mut cluster = Cluster::new(Config::default());
    cluster.call("a", vec![OpCode::WriteFull { data: bytes(b"1") }]);
    let pgid = cluster.pg_of("a");
    let mut op = cluster.op(
        "",
        vec![OpCode::OmapGetVals {
            after: None,
            max_entries: 100,
        }],
    );
    op.pgid = pgid;
    op.flags |= carmine_proto::OsdOp::FLAG_LOCAL_READ;
    let replica = cluster.acting(pgid)[1];
    let addr = cluster.addr(replica, pgid);
    let reqid = cluster.send_to(addr, 1, op);
    let reply = cluster.take_replies_for(reqid).pop().unwrap();
    assert!(
        matches!(reply.result, Err(OpError::Invalid(_))),
        "local read of the empty name returned {:?}",
        reply.outputs
    );
}

#[test]
fn zero_on_a_missing_object_creates_it() {
    let mut cluster = Cluster::new(Config::default());
    let reply = cluster.call(
        "nz",
        vec![OpCode::Zero {
            offset: 0,
            length: 10,
        }],
    );
    assert_eq!(reply.result, Ok(()));
    let stat = cluster.call("nz", vec![OpCode::Stat]);
    assert_eq!(
        stat.result,
        Err(OpError::NotFound),
        "zero created the object: {:?}",
        stat.outputs
    );
}

#[test]
fn zero_length_write_past_the_end_breaks_pg_stats() {
    let mut cluster = Cluster::new(Config {
        pg_num: 1,
        ..Config::default()
    });
    cluster.call(
        "a",
        vec![OpCode::WriteFull {
            data: bytes(&[1; 10]),
        }],
    );
    let reply = cluster.call(
        "a",
        vec![OpCode::Write {
            offset: 100,
            data: bytes(b""),
        }],
    );
    assert_eq!(reply.result, Ok(()));
    let stat = cluster.call("a", vec![OpCode::Stat]);
    let [OpOutput::Stat { size_bytes, .. }] = stat.outputs[..] else {
        panic!("{stat:?}")
    };
    let pg = cluster.pg_stat(cluster.pg_of("a"));
    assert_eq!(
        pg.data_bytes, size_bytes,
        "PG data_bytes disagrees with the only object's size"
    );
}

#[test]
fn new_primary_acks_a_resent_write_that_a_remaining_replica_never_received() {
    let mut cluster = Cluster::new(Config::default());
    let op = cluster.op(
        "lost",
        vec![OpCode::WriteFull {
            data: bytes(b"data"),
        }],
    );
    let pgid = op.pgid;
    let [old_primary, new_primary, other] = cluster.acting(pgid)[..] else {
        panic!("size 3")
    };
    cluster.send(op.clone());
    cluster.deliver_where(|e| e.is_rep_op() && e.to.0 == new_primary);
    cluster.drop_where(|e| e.is_rep_op() && e.to.0 == other);
    cluster.crash(old_primary);
    cluster.run();
    assert_eq!(cluster.primary_of(pgid), new_primary);

    let mut resend = op;
    resend.map_epoch = cluster.map.epoch;
    let reply = cluster.call_op(resend);
    assert_eq!(reply.result, Ok(()));
    let holders: Vec<OsdId> = cluster
        .acting(pgid)
        .into_iter()
        .filter(|&osd| cluster.dump_pg(osd, pgid).contains_key("lost"))
        .collect();
    assert_eq!(
        holders,
        vec![new_primary, other],
        "acknowledged, but only {holders:?} hold the object"
    );
}

/// Seed 1997 of the simulator: a replica restarted while cut off from the monitors got
/// its first map after the epoch that started the PG's interval, so it dated the
/// interval later than the primary and dropped the primary's activation as stale,
/// after answering its query. Nothing resends an activation: the PG stayed peering.
#[test]
fn a_replica_whose_first_map_comes_mid_interval_ignores_the_activation() {
    let mut cluster = Cluster::new(Config::default());
    let written = cluster.call(
        "w",
        vec![OpCode::WriteFull {
            data: bytes(b"data"),
        }],
    );
    assert_eq!(written.result, Ok(()));
    let pgid = cluster.pg_of("w");
    let [primary, stays, late] = cluster.acting(pgid)[..] else {
        panic!("size 3")
    };
    // `late` restarts; its boot starts a new interval, but the map that says so reaches
    // only the others, and `late`'s first map is the next one.
    cluster.restart_process(late, false);
    cluster.heal(late);
    let info = cluster.map.osd(late).expect("osd in map").clone();
    let boot = cluster.change_map_for(&[primary, stays], |map| {
        map.boot_osd(late, info.shard_addrs, info.host)
            .expect("boot")
    });
    cluster.run();
    cluster.change_map_for(&[primary, stays], |_| {});
    cluster.deliver_map_to(&[late]);
    cluster.run();
    assert_eq!(cluster.acting(pgid), vec![primary, stays, late]);
    let state = cluster.pg_stat(pgid).state;
    assert!(
        state.contains(PgState::ACTIVE),
        "the PG of the interval that began at e{} is {state:?}, not active",
        boot.0
    );
    assert!(state.contains(PgState::CLEAN), "{state:?}");
    cluster.assert_replicas_identical(pgid);
}

/// Seed 761 of the simulator: a client's resend of a write crossed the primary's
/// answer that it failed, and ran again after another write created the object, so
/// the log applied a write the client saw fail.
#[test]
fn a_resend_of_a_failed_write_runs_again_after_the_object_appears() {
    let mut cluster = Cluster::new(Config::default());
    let remove = cluster.op("w", vec![OpCode::Remove]);
    let failed = cluster.call_op(remove.clone());
    assert_eq!(failed.result, Err(OpError::NotFound));
    let created = cluster.call(
        "w",
        vec![OpCode::WriteFull {
            data: bytes(b"data"),
        }],
    );
    assert_eq!(created.result, Ok(()));
    // The resend that crossed the failure arrives now: it must fail the same way.
    let resent = cluster.call_op(remove);
    assert_eq!(resent.result, Err(OpError::NotFound));
    let read = cluster.call(
        "w",
        vec![OpCode::Read {
            offset: 0,
            length: 0,
        }],
    );
    assert_eq!(read.outputs, vec![OpOutput::Data(bytes(b"data"))]);
}
