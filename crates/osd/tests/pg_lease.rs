//! Read leases (`pg/lease.rs`): a primary that cannot renew its lease with the other
//! acting members stops serving (`laggy`), and a new primary serves nothing until the
//! lease its predecessor may still hold has run out (`wait`).

mod harness;

use carmine_proto::{OpCode, OpOutput, OsdOpReply, PgState};
use harness::{bytes, Cluster, Config, CLIENT, TICK};
use std::time::Duration;

fn read_op() -> Vec<OpCode> {
    vec![OpCode::Read {
        offset: 0,
        length: 0,
    }]
}

fn data_of(reply: &OsdOpReply) -> Vec<u8> {
    match reply.outputs.as_slice() {
        [OpOutput::Data(data)] => data.to_vec(),
        other => panic!("read returned {other:?} ({:?})", reply.result),
    }
}

fn write(cluster: &mut Cluster, name: &str, data: &[u8]) {
    let reply = cluster.call(name, vec![OpCode::WriteFull { data: bytes(data) }]);
    assert_eq!(reply.result, Ok(()));
}

#[test]
fn a_primary_cut_off_from_its_replicas_holds_reads_once_its_lease_lapses() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "obj", b"v1");
    let pgid = cluster.pg_of("obj");
    let primary = cluster.primary_of(pgid);
    let addr = cluster.addr(primary, pgid);
    let cut = move |e: &harness::Envelope| e.from.0 == primary || e.to.0 == primary;

    // Three seconds (three lease lengths) pass; every renewal and acknowledgement to or from the primary is
    // lost, but clients still reach it.
    for _ in 0..30 {
        cluster.advance(TICK);
        cluster.drop_where(cut);
        cluster.run_network();
    }
    let state = cluster.pg_stat(pgid).state;
    assert!(state.contains(PgState::ACTIVE), "{}", state.name());
    assert!(state.contains(PgState::LAGGY), "{}", state.name());
    let read = cluster.op("obj", read_op());
    let reqid = cluster.send_to(addr, CLIENT, read);
    cluster.drop_where(cut);
    cluster.run_network();
    assert!(!cluster.has_reply(reqid), "a laggy primary served a read");

    // The links heal: the next renewal is acknowledged and the held read is served.
    for _ in 0..10 {
        if cluster.has_reply(reqid) {
            break;
        }
        cluster.advance(TICK);
        cluster.run_network();
    }
    let reply = cluster
        .take_replies_for(reqid)
        .pop()
        .expect("served once renewed");
    assert_eq!(data_of(&reply), b"v1");
    let state = cluster.pg_stat(pgid).state;
    assert!(!state.contains(PgState::LAGGY), "{}", state.name());
}

#[test]
fn a_new_primary_waits_out_the_lease_its_predecessor_may_still_hold() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "obj", b"v1");
    let pgid = cluster.pg_of("obj");
    let old = cluster.primary_of(pgid);
    // The primary is cut off from everyone, the monitor included: it never learns
    // that it was marked down, and its lease (granted at time 0 for 1 s) may let it
    // serve reads of v1 for up to 0.75 s of its clock.
    cluster.partition(old);
    cluster.mark_down(old);
    cluster.run_network();
    let new = cluster.primary_of(pgid);
    assert_ne!(new, old);
    let state = cluster.pg_stat(pgid).state;
    assert!(state.contains(PgState::ACTIVE), "{}", state.name());
    assert!(state.contains(PgState::WAIT), "{}", state.name());

    let op = cluster.op("obj", vec![OpCode::WriteFull { data: bytes(b"v2") }]);
    let reqid = cluster.send(op);
    cluster.run_network();
    assert!(
        !cluster.has_reply(reqid),
        "served before the old lease ran out"
    );
    // The replica reported 1 s left; the new primary waits that plus a quarter.
    cluster.advance(Duration::from_millis(1200));
    cluster.run_network();
    assert!(
        !cluster.has_reply(reqid),
        "the clock margin was not applied"
    );
    assert!(cluster.pg_stat(pgid).state.contains(PgState::WAIT));
    cluster.advance(Duration::from_millis(200));
    cluster.run_network();
    let reply = cluster
        .take_replies_for(reqid)
        .pop()
        .expect("served after the wait");
    assert_eq!(reply.result, Ok(()));
    let state = cluster.pg_stat(pgid).state;
    assert!(!state.contains(PgState::WAIT), "{}", state.name());
    let read = cluster.call("obj", read_op());
    assert_eq!(data_of(&read), b"v2");
}

#[test]
fn a_restarted_member_reports_a_promise_it_may_have_forgotten() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "obj", b"v1");
    let pgid = cluster.pg_of("obj");
    let acting = cluster.acting(pgid);
    // Long after any lease: nothing is outstanding.
    cluster.advance(Duration::from_secs(10));
    cluster.run();
    // A replica restarts (keeping its store) and, once it is back, the primary is
    // marked down: the new primary must assume the restarted copy promised a lease
    // just before its crash, for one lease length after it started.
    cluster.restart(acting[1], false);
    cluster.run_network();
    cluster.mark_down(acting[0]);
    cluster.run_network();
    let state = cluster.pg_stat(pgid).state;
    assert!(state.contains(PgState::WAIT), "{}", state.name());
    let read = cluster.op("obj", read_op());
    let reqid = cluster.send(read);
    cluster.run();
    let reply = cluster
        .take_replies_for(reqid)
        .pop()
        .expect("served after the wait");
    assert_eq!(data_of(&reply), b"v1");
}
