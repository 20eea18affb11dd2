//! Histories whose newest version of an object has no readable copy, and what peering
//! makes of them (swarm seeds 7290, 4040 and 6236; `MemStore::inject_decay` stands in for
//! the flipped bit):
//!
//! - a write applied only on the primary (its replicas never got the `RepOp`, so it
//!   was never acknowledged) whose only copy then rots is rolled back at the next
//!   interval, instead of leaving the object unfound and the PG degraded forever,
//!   also when the primary restarted meanwhile (seed 4040);
//! - a PG that peers below `min_size` records no activation, so its shorter log does
//!   not outrank the members that hold newer writes (and a rotten copy of the older
//!   version does not become the only source);
//! - a replica does not report the same corrupt copy on every scrub pass.

mod harness;

use carmine_proto::{Msg, OpCode, OpError, OpOutput};
use carmine_types::OsdId;
use harness::{bytes, Cluster, Config};

fn write(cluster: &mut Cluster, name: &str, content: &[u8]) {
    let ops = vec![OpCode::WriteFull {
        data: bytes(content),
    }];
    assert_eq!(cluster.call(name, ops).result, Ok(()), "write {name}");
}

fn send_write(cluster: &mut Cluster, name: &str, content: &[u8]) -> carmine_proto::OsdOp {
    let op = cluster.op(
        name,
        vec![OpCode::WriteFull {
            data: bytes(content),
        }],
    );
    cluster.send(op.clone());
    op
}

/// Reads `name` through its primary; `None` if no answer came (the op waits).
fn read(cluster: &mut Cluster, name: &str) -> Option<Result<Vec<u8>, OpError>> {
    let op = cluster.op(
        name,
        vec![OpCode::Read {
            offset: 0,
            length: 0,
        }],
    );
    let reqid = cluster.send(op);
    cluster.run();
    let reply = cluster.take_replies_for(reqid).pop()?;
    Some(reply.result.map(|()| match reply.outputs.first() {
        Some(OpOutput::Data(data)) => data.to_vec(),
        other => panic!("read {name}: {other:?}"),
    }))
}

fn state(cluster: &Cluster, name: &str) -> String {
    let pgid = cluster.pg_of(name);
    cluster.pg_stat(pgid).state.name()
}

/// Seed 7290: the primary applied a write its replicas never got (they were cut off;
/// the write was never acknowledged), then a bit flip hit that only copy. At the next
/// interval its log was still the newest, so the replicas were told they lack the
/// object, and nobody could supply it: pulls answered "corrupt", the carried-over
/// write waited for a push that could never be made, and every later write behind it
/// too. The primary now rolls that never-acknowledged write back and recovers the
/// acknowledged version from a replica.
#[test]
fn an_unacknowledged_write_whose_only_copy_rots_is_rolled_back() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "victim", b"acknowledged");
    let pgid = cluster.pg_of("victim");
    let members = cluster.acting(pgid);
    let (primary, leaving) = (members[0], members[2]);
    let lost = send_write(&mut cluster, "victim", b"never acknowledged");
    cluster.drop_where(|env| env.is_rep_op());
    cluster.run();
    assert!(!cluster.has_reply(lost.reqid), "answered without replicas");
    cluster.decay(primary, "victim");

    // A new interval with the same primary (a replica goes away).
    cluster.crash(leaving);
    cluster.run();
    assert_eq!(cluster.primary_of(pgid), primary);
    assert_eq!(
        read(&mut cluster, "victim"),
        Some(Ok(b"acknowledged".to_vec()))
    );
    assert!(
        !cluster.has_reply(lost.reqid),
        "a rolled-back write is never answered"
    );
    cluster.restart(leaving, false);
    cluster.run();
    assert_eq!(state(&cluster, "victim"), "active+clean");
    cluster.assert_replicas_identical(pgid);

    // The client's resend runs afresh.
    let mut resend = lost;
    resend.map_epoch = cluster.map.epoch;
    assert_eq!(cluster.call_op(resend).result, Ok(()));
    assert_eq!(
        read(&mut cluster, "victim"),
        Some(Ok(b"never acknowledged".to_vec()))
    );
    cluster.assert_replicas_identical(pgid);
}

/// Seed 4040: as for seed 7290, but the primary crashed before any new interval (the
/// monitor was down) and came back with the never-acknowledged write as the newest
/// entry of its log and nothing in flight to say it was never acknowledged. Its log
/// was chosen, the replicas were told they lack the object, and nobody could supply
/// it. The replicas' `last_update`s prove the write was never acknowledged (they were
/// members of the interval it was made in), so peering rolls it back.
#[test]
fn an_unacknowledged_write_whose_only_copy_rots_is_rolled_back_after_a_restart() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "victim", b"acknowledged");
    let pgid = cluster.pg_of("victim");
    let members = cluster.acting(pgid);
    let primary = members[0];
    let lost = send_write(&mut cluster, "victim", b"never acknowledged");
    cluster.drop_where(|env| env.is_rep_op());
    cluster.run();
    assert!(!cluster.has_reply(lost.reqid), "answered without replicas");
    cluster.decay(primary, "victim");

    // The primary restarts before its replicas see any map without it.
    for &replica in &members[1..] {
        cluster.partition(replica);
    }
    cluster.restart_process(primary, false);
    for &replica in &members[1..] {
        cluster.heal(replica);
    }
    cluster.revive(primary);
    cluster.run();
    assert_eq!(cluster.acting(pgid), members);
    assert_eq!(
        read(&mut cluster, "victim"),
        Some(Ok(b"acknowledged".to_vec()))
    );
    cluster.run();
    assert_eq!(state(&cluster, "victim"), "active+clean");
    cluster.assert_replicas_identical(pgid);
}

/// Seed 6236: a replica missed the newest writes (it crashed before their `RepOp`s
/// reached it), came back alone while the other members were down, and peered as the
/// only member, below `min_size`. It recorded that interval as one it activated in,
/// so when the others came back its shorter log was chosen over theirs, their newer
/// copies were rolled back onto its own, and its own copy had rotted meanwhile: the
/// object had no readable copy, and the PG never became clean. A PG peered below
/// `min_size` takes no writes and now records no activation either.
#[test]
fn a_pg_peered_below_min_size_does_not_outrank_newer_members() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "shared", b"old");
    let pgid = cluster.pg_of("shared");
    let members = cluster.acting(pgid);
    let (primary, lagging, other) = (members[0], members[1], members[2]);
    let newer = send_write(&mut cluster, "shared", b"new");
    cluster.drop_where(|env| env.is_rep_op() && env.to.0 == lagging);
    cluster.run();
    assert!(
        !cluster.has_reply(newer.reqid),
        "the lagging replica lacks it"
    );

    // Only the lagging replica is up: it leads the PG alone, below min_size.
    cluster.crash(primary);
    cluster.crash(other);
    cluster.run();
    assert_eq!(cluster.acting(pgid), vec![lagging]);
    cluster.decay(lagging, "shared");

    cluster.restart(primary, false);
    cluster.restart(other, false);
    cluster.run();
    assert_eq!(read(&mut cluster, "shared"), Some(Ok(b"new".to_vec())));
    cluster.run();
    assert_eq!(state(&cluster, "shared"), "active+clean");
    cluster.assert_replicas_identical(pgid);
}

/// The endless `PgPushReply { corrupt }` of seed 6236: a replica whose copy is corrupt
/// and that the primary cannot repair (every copy is corrupt) reported it on every
/// scrub pass. It reports it once, and only again after many passes.
#[test]
fn a_replica_reports_a_corrupt_copy_once_not_on_every_scrub() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "lost", b"gone");
    let pgid = cluster.pg_of("lost");
    let members = cluster.acting(pgid);
    for &osd in &members {
        cluster.decay(osd, "lost");
    }
    let replica = members[1];
    let mut reports = Vec::new();
    for _ in 0..5 {
        cluster.scrub(replica);
        reports.push(corrupt_reports_from(&cluster, replica));
        cluster.run();
    }
    assert_eq!(reports, vec![1, 0, 0, 0, 0]);
}

fn corrupt_reports_from(cluster: &Cluster, osd: OsdId) -> usize {
    cluster
        .pending()
        .iter()
        .filter(|e| e.from.0 == osd)
        .filter(|e| matches!(&e.msg, Msg::PgPushReply(r) if !r.corrupt.is_empty()))
        .count()
}
