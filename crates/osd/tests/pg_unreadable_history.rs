//! Histories whose newest version of an object has no readable copy, and what peering
//! makes of them (swarm seeds 7290, 4040 and 6236; `MemStore::inject_decay` stands in for
//! the flipped bit):
//!
//! - a write applied only on the primary (its replicas never got the `RepOp`, so it
//!   was never acknowledged) whose only copy then rots is rolled back at the next
//!   interval, instead of leaving the object unfound and the PG degraded forever,
//!   also when the primary restarted meanwhile (seed 4040) or came back to lead no
//!   more (seed 5531), and from far enough back that no object is left at a version
//!   only the primary wrote (seed 23448);
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
    let members = unacknowledged_write_over_a_copy_that_rots(&mut cluster);
    let pgid = cluster.pg_of("victim");
    restart_unseen(&mut cluster, &members);
    cluster.revive(members[0]);
    cluster.run();
    assert_eq!(cluster.acting(pgid), members);
    assert_the_acknowledged_victim_is_back(&mut cluster);
}

/// Seed 5531 of remaps, disk errors and expansion: as for seed 4040, but the copy
/// holding the never-acknowledged write comes back as a replica (its own rollback
/// never reached its disk: its store failed on that transaction), and another member
/// leads. That member adopted the returning copy's newer log, and no copy could ever
/// serve the version it named. The new primary asks the copy which objects of its
/// newest entries it cannot read, proves the write was never acknowledged from the
/// other member's `last_update`, and adopts the log without it.
#[test]
fn an_unacknowledged_write_whose_only_copy_rots_is_dropped_when_another_member_leads() {
    let mut cluster = Cluster::new(Config::default());
    let members = unacknowledged_write_over_a_copy_that_rots(&mut cluster);
    let pgid = cluster.pg_of("victim");
    let former = members[0];
    // It comes back with no primary affinity: the next member leads.
    restart_unseen(&mut cluster, &members);
    cluster.change_map(|map| map.set_primary_affinity(former, 0).unwrap());
    cluster.revive(former);
    cluster.run();
    let mut acting = cluster.acting(pgid);
    assert_ne!(acting[0], former, "it leads again");
    acting.sort();
    assert_eq!(acting, sorted(&members));
    assert_the_acknowledged_victim_is_back(&mut cluster);
}

/// `victim` reads back at its acknowledged version, and its PG goes clean with
/// identical copies.
fn assert_the_acknowledged_victim_is_back(cluster: &mut Cluster) {
    assert_eq!(read(cluster, "victim"), Some(Ok(b"acknowledged".to_vec())));
    cluster.run();
    assert_eq!(state(cluster, "victim"), "active+clean");
    cluster.assert_replicas_identical(cluster.pg_of("victim"));
}

/// As above, with a later write nobody acknowledged to a second object, readable on
/// the returning copy, and an OSD that never held the PG leading. The later write is
/// left out with the first, and the new primary, pulling both objects from the
/// returning copy, finds the second one of a write its history does not hold: it
/// stays missing, and is recovered from the other member at its acknowledged
/// version. (Taking that copy put the dropped write's data under an older version:
/// seed 7859 of remaps, disk errors and expansion with snapshots, where the PG's byte
/// count then disagreed with its data.)
#[test]
fn a_dropped_write_is_not_pulled_from_the_copy_that_made_it() {
    let mut cluster = Cluster::new(Config {
        osd_count: 4,
        ..Config::default()
    });
    let other = neighbour_of(&cluster, "victim");
    write(&mut cluster, "victim", b"acknowledged");
    write(&mut cluster, &other, b"acknowledged too");
    let pgid = cluster.pg_of("victim");
    let members = cluster.acting(pgid);
    let former = members[0];
    let newcomer = *(cluster.osds().iter())
        .find(|osd| !members.contains(osd))
        .expect("a fourth OSD");
    for (name, content) in [
        ("victim", &b"never acknowledged"[..]),
        (other.as_str(), b"never acknowledged either"),
    ] {
        let lost = send_write(&mut cluster, name, content);
        cluster.drop_where(|env| env.is_rep_op());
        cluster.run();
        assert!(!cluster.has_reply(lost.reqid), "answered without replicas");
    }
    cluster.decay(former, "victim");

    // The newcomer leads.
    restart_unseen(&mut cluster, &members);
    cluster.heal(former);
    let info = cluster.map.osd(former).expect("in map").clone();
    cluster.change_map(|map| {
        map.boot_osd(former, info.shard_addrs, info.host).unwrap();
        map.set_pg_temp(pgid, vec![newcomer, former, members[1]])
            .unwrap();
    });
    cluster.run();
    assert_eq!(cluster.primary_of(pgid), newcomer);
    assert_eq!(
        read(&mut cluster, "victim"),
        Some(Ok(b"acknowledged".to_vec()))
    );
    assert_eq!(
        read(&mut cluster, &other),
        Some(Ok(b"acknowledged too".to_vec()))
    );
    cluster.run();
    assert_eq!(state(&cluster, "victim"), "active+clean+remapped");
    cluster.assert_replicas_identical(pgid);
    let stat = cluster.pg_stat(pgid);
    assert_eq!((stat.object_count, stat.data_bytes), (2, 12 + 16));
}

/// `victim` written and acknowledged, then a write to it that the replicas never get
/// (so never acknowledged), then the primary's copy rots. Returns the PG's members,
/// the primary first.
fn unacknowledged_write_over_a_copy_that_rots(cluster: &mut Cluster) -> Vec<OsdId> {
    write(cluster, "victim", b"acknowledged");
    let members = cluster.acting(cluster.pg_of("victim"));
    let lost = send_write(cluster, "victim", b"never acknowledged");
    cluster.drop_where(|env| env.is_rep_op());
    cluster.run();
    assert!(!cluster.has_reply(lost.reqid), "answered without replicas");
    cluster.decay(members[0], "victim");
    members
}

/// The first of `members` restarts before the others see any map without it, and
/// stays cut off until the caller brings it back.
fn restart_unseen(cluster: &mut Cluster, members: &[OsdId]) {
    for &other in &members[1..] {
        cluster.partition(other);
    }
    cluster.restart_process(members[0], false);
    for &other in &members[1..] {
        cluster.heal(other);
    }
}

fn sorted(osds: &[OsdId]) -> Vec<OsdId> {
    let mut osds = osds.to_vec();
    osds.sort();
    osds
}

/// A second object of the same PG as `name`.
fn neighbour_of(cluster: &Cluster, name: &str) -> String {
    let pgid = cluster.pg_of(name);
    (0..10_000)
        .map(|i| format!("neighbour-{i}"))
        .find(|other| cluster.pg_of(other) == pgid)
        .expect("some name maps to the same PG")
}

/// Seed 23448: the cut-off primary wrote `shared`, then `victim`, then `shared` again,
/// none of them acknowledged, and a bit flip hit `victim`. Rolling back from the
/// `victim` write, the first entry whose object it could not read, kept the first
/// `shared` write in the log: a version only the primary had written and had since
/// overwritten, so nobody could serve it and the PG stayed incomplete. The rollback
/// now starts at that first `shared` write, and both objects come back at their
/// acknowledged versions.
#[test]
fn a_rollback_keeps_no_version_only_the_rolled_back_copy_wrote() {
    let (mut cluster, shared) = three_unacknowledged_writes_and_a_rot();
    let pgid = cluster.pg_of("victim");
    let members = cluster.acting(pgid);
    restart_unseen(&mut cluster, &members);
    cluster.revive(members[0]);
    cluster.run();
    assert_eq!(cluster.acting(pgid), members);
    assert_acknowledged_versions_are_back(&mut cluster, &shared);
}

/// The same at an interval change with no restart, where the ops still in flight say
/// which writes were never acknowledged (`Pg::roll_back_unreadable_writes`).
#[test]
fn a_rollback_of_writes_in_flight_keeps_no_version_only_the_primary_wrote() {
    let (mut cluster, shared) = three_unacknowledged_writes_and_a_rot();
    let pgid = cluster.pg_of("victim");
    let members = cluster.acting(pgid);
    cluster.crash(members[2]);
    cluster.run();
    assert_eq!(cluster.primary_of(pgid), members[0]);
    cluster.restart(members[2], false);
    cluster.run();
    assert_acknowledged_versions_are_back(&mut cluster, &shared);
}

/// `victim` and `shared` (a name of the same PG) written and acknowledged, then three
/// writes the replicas never get: `shared`, `victim`, `shared`; then the primary's
/// copy of `victim` rots. Returns the cluster and the name of `shared`.
fn three_unacknowledged_writes_and_a_rot() -> (Cluster, String) {
    let mut cluster = Cluster::new(Config::default());
    let shared = neighbour_of(&cluster, "victim");
    write(&mut cluster, "victim", b"acknowledged");
    write(&mut cluster, &shared, b"acknowledged too");
    let primary = cluster.primary_of(cluster.pg_of("victim"));
    let mut lost = Vec::new();
    for (name, content) in [
        (shared.as_str(), &b"first, never acknowledged"[..]),
        ("victim", b"never acknowledged"),
        (shared.as_str(), b"second, never acknowledged"),
    ] {
        lost.push(send_write(&mut cluster, name, content));
        cluster.drop_where(|env| env.is_rep_op());
    }
    cluster.run();
    for op in &lost {
        assert!(!cluster.has_reply(op.reqid), "answered without replicas");
    }
    cluster.decay(primary, "victim");
    (cluster, shared)
}

fn assert_acknowledged_versions_are_back(cluster: &mut Cluster, shared: &str) {
    assert_eq!(read(cluster, "victim"), Some(Ok(b"acknowledged".to_vec())));
    assert_eq!(
        read(cluster, shared),
        Some(Ok(b"acknowledged too".to_vec()))
    );
    cluster.run();
    assert_eq!(state(cluster, "victim"), "active+clean");
    cluster.assert_replicas_identical(cluster.pg_of("victim"));
}

/// A rollback whose kept history ends at a version only the primary wrote (`other`,
/// never acknowledged but readable, stays): no other copy ends there, so none can
/// vouch for the object and byte counts, which still counted the rolled-back write.
/// They are held in doubt (`PgInfo::stats_invalid`, sent with every info) until the
/// primary holds every object of its history again, and then counted from its store;
/// the replicas take the counted ones with their activation (seed 382 of the remap
/// class with snapshots: a later primary adopted doubtful counts as sure, and the PG
/// reported 30 bytes it did not hold for good).
#[test]
fn counts_a_rollback_leaves_in_doubt_are_counted_once_every_object_is_back() {
    let mut cluster = Cluster::new(Config::default());
    let other = neighbour_of(&cluster, "victim");
    write(&mut cluster, "victim", b"acknowledged");
    let pgid = cluster.pg_of("victim");
    let members = cluster.acting(pgid);
    let primary = members[0];
    for (name, content) in [
        (other.as_str(), &b"kept, never acknowledged"[..]),
        ("victim", b"rolled back, never acknowledged"),
    ] {
        send_write(&mut cluster, name, content);
        cluster.drop_where(|env| env.is_rep_op());
    }
    cluster.run();
    cluster.decay(primary, "victim");
    let in_doubt = cluster.pg_stat(pgid);
    assert_eq!(
        (in_doubt.object_count, in_doubt.data_bytes),
        (2, 24 + 31),
        "before the rollback the counts are the primary's content"
    );

    cluster.crash(members[2]);
    cluster.run();
    assert_eq!(cluster.primary_of(pgid), primary);
    assert_eq!(
        read(&mut cluster, "victim"),
        Some(Ok(b"acknowledged".to_vec()))
    );
    let counted = cluster.pg_stat(pgid);
    assert_eq!((counted.object_count, counted.data_bytes), (2, 24 + 12));
    let info = |cluster: &Cluster, osd| {
        let dump = cluster.dump_pg(osd, pgid);
        let raw = &dump[""]
            .omap
            .iter()
            .find(|(key, _)| &key[..] == b"info")
            .unwrap()
            .1;
        <carmine_proto::PgInfo as carmine_types::Decode>::from_shared(raw.clone()).unwrap()
    };
    for osd in [primary, members[1]] {
        let info = info(&cluster, osd);
        assert!(!info.stats_invalid, "osd.{} holds them in doubt", osd.0);
        assert_eq!((info.object_count, info.data_bytes), (2, 24 + 12));
    }
    cluster.restart(members[2], false);
    cluster.run();
    assert_eq!(state(&cluster, "victim"), "active+clean");
    cluster.assert_replicas_identical(pgid);
    let info = info(&cluster, members[2]);
    assert_eq!(
        (info.object_count, info.data_bytes, info.stats_invalid),
        (2, 36, false)
    );
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
/// scrub pass. It reports it at once, then again after 1, 2, 4, … passes, up to 32
/// (a report lost to a partition is made again soon; a hopeless one rarely).
#[test]
fn a_replica_reports_a_corrupt_copy_with_backoff_not_on_every_scrub() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "lost", b"gone");
    let pgid = cluster.pg_of("lost");
    let members = cluster.acting(pgid);
    for &osd in &members {
        cluster.decay(osd, "lost");
    }
    let replica = members[1];
    let mut reported_at = Vec::new();
    for pass in 0..100 {
        cluster.scrub(replica);
        if corrupt_reports_from(&cluster, replica) > 0 {
            reported_at.push(pass);
        }
        cluster.run();
    }
    // A scrub step goes over the PG once or twice (it may wrap round to the PG it
    // started with), so the steps of the reports only follow the doubling roughly.
    assert_eq!(reported_at[..2], [0, 1], "{reported_at:?}");
    assert!(
        (6..=12).contains(&reported_at.len()),
        "{reported_at:?}: reported on every pass, or too rarely"
    );
    let gaps: Vec<usize> = reported_at.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps[gaps.len() - 1] >= 14, "gaps {gaps:?} stay short");
}

fn corrupt_reports_from(cluster: &Cluster, osd: OsdId) -> usize {
    cluster
        .pending()
        .iter()
        .filter(|e| e.from.0 == osd)
        .filter(|e| matches!(&e.msg, Msg::PgPushReply(r) if !r.corrupt.is_empty()))
        .count()
}
