//! Repair of copies whose data fails its checksum (`MemStore::inject_decay` stands in
//! for a flipped bit): a corrupt copy is never served and never spread, the primary
//! repairs its own copy from a replica before answering, replicas found corrupt (when
//! asked for a copy, or by a scrub) get the primary's copy, and with no good copy at
//! all the op fails with EIO rather than return wrong data.

mod harness;

use carmine_clustermap::WEIGHT_IN;
use carmine_osd::{ShardCounters, LOG_PINNED_GROWTH};
use carmine_proto::PgState;
use carmine_proto::{LogEntry, Msg, OpCode, OpError, OpOutput};
use carmine_store::ObjectStore;
use carmine_types::OsdId;
use harness::{bytes, Cluster, Config};

fn write(cluster: &mut Cluster, name: &str, content: &[u8]) {
    let ops = vec![OpCode::WriteFull {
        data: bytes(content),
    }];
    assert_eq!(cluster.call(name, ops).result, Ok(()), "write {name}");
}

fn read(cluster: &mut Cluster, name: &str) -> Result<Vec<u8>, OpError> {
    let ops = vec![OpCode::Read {
        offset: 0,
        length: 0,
    }];
    let reply = cluster.call(name, ops);
    reply.result?;
    match reply.outputs.first() {
        Some(OpOutput::Data(data)) => Ok(data.to_vec()),
        other => panic!("read {name}: {other:?}"),
    }
}

/// The acting set of `name`'s PG, primary first.
fn acting(cluster: &Cluster, name: &str) -> Vec<OsdId> {
    cluster.acting(cluster.pg_of(name))
}

fn counters(cluster: &Cluster, osd: OsdId, name: &str) -> ShardCounters {
    let pgid = cluster.pg_of(name);
    cluster.shard(cluster.addr(osd, pgid)).counters()
}

fn assert_clean_and_identical(cluster: &Cluster, name: &str) {
    let pgid = cluster.pg_of(name);
    assert_eq!(cluster.pg_stat(pgid).state.name(), "active+clean");
    cluster.assert_replicas_identical(pgid);
}

#[test]
fn a_read_of_a_corrupt_primary_copy_is_repaired_from_a_replica_and_served() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "victim", b"precious bytes");
    let primary = acting(&cluster, "victim")[0];
    cluster.decay(primary, "victim");

    assert_eq!(read(&mut cluster, "victim"), Ok(b"precious bytes".to_vec()));
    let counters = counters(&cluster, primary, "victim");
    assert_eq!(counters.corrupt_copies_found_total, 1);
    assert_eq!(counters.copies_repaired_total, 1);
    assert_clean_and_identical(&cluster, "victim");
    assert_eq!(read(&mut cluster, "victim"), Ok(b"precious bytes".to_vec()));
}

/// Writes never read old data, so one can land on a corrupt copy; the repair that
/// follows must bring back a copy with that write, not the one before it.
#[test]
fn a_write_on_a_corrupt_primary_copy_survives_its_repair() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "victim", b"0123456789");
    let primary = acting(&cluster, "victim")[0];
    cluster.decay(primary, "victim");
    let patch = vec![OpCode::Write {
        offset: 2,
        data: bytes(b"ab"),
    }];
    assert_eq!(cluster.call("victim", patch).result, Ok(()));
    assert_eq!(read(&mut cluster, "victim"), Ok(b"01ab456789".to_vec()));
    assert_clean_and_identical(&cluster, "victim");
}

#[test]
fn a_corrupt_first_source_is_skipped_and_then_repaired_too() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "victim", b"only one good copy");
    let members = acting(&cluster, "victim");
    assert_eq!(members.len(), 3);
    cluster.decay(members[0], "victim");
    cluster.decay(members[1], "victim");

    assert_eq!(
        read(&mut cluster, "victim"),
        Ok(b"only one good copy".to_vec())
    );
    let counters = counters(&cluster, members[0], "victim");
    assert_eq!(counters.corrupt_copies_found_total, 2, "{counters:?}");
    assert_eq!(counters.copies_repaired_total, 2, "{counters:?}");
    assert_clean_and_identical(&cluster, "victim");
}

#[test]
fn with_every_copy_corrupt_reads_and_writes_fail_with_eio_not_wrong_data() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "lost", b"gone");
    write(&mut cluster, "bystander", b"fine");
    for osd in acting(&cluster, "lost") {
        cluster.decay(osd, "lost");
    }
    match read(&mut cluster, "lost") {
        Err(OpError::Io(why)) => assert!(why.contains("no readable copy"), "{why}"),
        other => panic!("expected EIO, got {other:?}"),
    }
    assert_eq!(OpError::Io(String::new()).code(), 5, "EIO on the wire");
    assert_eq!(read(&mut cluster, "bystander"), Ok(b"fine".to_vec()));
    // The replicas now need the object and nobody can supply it: writes fail too
    // (as IO to an unfound object blocks in Ceph) instead of building on bad bytes.
    let ops = vec![OpCode::Append { data: bytes(b"!") }];
    assert!(matches!(
        cluster.call("lost", ops).result,
        Err(OpError::Io(_))
    ));
    assert_eq!(read(&mut cluster, "bystander"), Ok(b"fine".to_vec()));
}

#[test]
fn a_scrub_finds_a_corrupt_replica_copy_and_the_primary_pushes_its_own() {
    let mut cluster = Cluster::new(Config::default());
    for name in ["a", "b", "c"] {
        write(&mut cluster, name, name.repeat(100).as_bytes());
    }
    let members = acting(&cluster, "b");
    let replica = members[2];
    cluster.decay(replica, "b");
    // The primary's copy is good: reads never notice.
    assert_eq!(read(&mut cluster, "b"), Ok("b".repeat(100).into_bytes()));
    assert_eq!(
        counters(&cluster, members[0], "b").corrupt_copies_found_total,
        0
    );

    cluster.scrub(replica);
    cluster.run();
    let counters = counters(&cluster, members[0], "b");
    assert_eq!(counters.corrupt_copies_found_total, 1);
    assert_eq!(counters.copies_repaired_total, 1);
    assert_clean_and_identical(&cluster, "b");
    // Nothing left to find: a clean scrub sends only the primaries' comparisons
    // (requests and scrub maps), which find nothing to push.
    for osd in cluster.osds() {
        cluster.scrub(osd);
    }
    let sent = cluster.pending_count();
    let comparisons = (cluster.pending().iter())
        .filter(|envelope| {
            matches!(
                envelope.msg,
                carmine_proto::Msg::PgScrubRequest(_) | carmine_proto::Msg::PgScrubMap(_)
            )
        })
        .count();
    assert_eq!(sent, comparisons, "a clean scrub only compares");
    cluster.run();
    let after = self::counters(&cluster, members[0], "b");
    assert!(after.scrub_objects_compared_total > 0, "{after:?}");
    assert_eq!(after.scrub_replica_copies_differing_total, 0);
    assert_eq!(
        (
            after.corrupt_copies_found_total,
            after.copies_repaired_total
        ),
        (1, 1),
        "and finds nothing"
    );
}

#[test]
fn a_scrub_of_the_primary_repairs_its_copy_without_any_read() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "victim", b"data at rest");
    let primary = acting(&cluster, "victim")[0];
    cluster.decay(primary, "victim");
    cluster.scrub(primary);
    cluster.run();
    assert_eq!(
        counters(&cluster, primary, "victim").copies_repaired_total,
        1
    );
    assert_clean_and_identical(&cluster, "victim");
}

/// A deep-scrub step stops once the objects it verified hold its byte budget: a step
/// runs between client ops on the shard's thread, and sixteen 4 MiB image objects in
/// one step, read whole, held the shard for 10–48 ms. At least one object is verified per step.
#[test]
fn a_scrub_step_verifies_objects_up_to_its_byte_budget() {
    const MIB: usize = 1024 * 1024;
    let mut cluster = Cluster::new(Config {
        pg_num: 1,
        ..Config::default()
    });
    let names = ["big0", "big1", "big2"];
    for (index, name) in names.iter().enumerate() {
        write(&mut cluster, name, &vec![index as u8 + 1; 3 * MIB]);
    }
    let primary = acting(&cluster, names[0])[0];
    for name in names {
        cluster.decay(primary, name);
    }
    let found = |cluster: &Cluster| counters(cluster, primary, names[0]).corrupt_copies_found_total;

    // 3 MiB, then 6 MiB: past the 4 MiB budget after the second object.
    cluster.scrub_bounded(primary, 16, 4 * MIB as u64);
    assert_eq!(found(&cluster), 2, "the first step stops after two objects");
    cluster.run();
    // A budget smaller than any object still verifies one.
    cluster.scrub_bounded(primary, 16, 1);
    assert_eq!(found(&cluster), 3, "the next step goes on with the third");
    cluster.run();
    assert_eq!(
        counters(&cluster, primary, names[0]).copies_repaired_total,
        3
    );
    for name in names {
        assert_clean_and_identical(&cluster, name);
    }
}

/// Seed 3267 of the simulator: a replica lost the `RepOp` of a write (it restarted
/// within the interval), the primary's copy then decayed, and its scrub pulled the
/// object from that replica, whose copy predated the write. The write was later
/// acknowledged with its data gone. A repair now pulls from a replica that has
/// acknowledged the interval's writes to the object.
#[test]
fn a_repair_pulls_from_a_replica_that_acked_the_writes_to_the_object() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "victim", b"old");
    let members = acting(&cluster, "victim");
    let (primary, lagging, current) = (members[0], members[1], members[2]);
    let reqid = send_write(&mut cluster, "victim", b"new");
    // The RepOp to the first replica is held back (lost with a restart, say).
    let held = cluster.take_where(|e| e.is_rep_op() && e.to.0 == lagging);
    assert_eq!(held.len(), 1);
    cluster.run();
    assert!(
        !cluster.has_reply(reqid),
        "the write waits for every replica"
    );

    cluster.decay(primary, "victim");
    cluster.scrub(primary);
    assert_eq!(pull_targets(&cluster), vec![current]);
    cluster.run();
    assert_eq!(stored_data(&mut cluster, primary, "victim"), b"new");

    for envelope in held {
        cluster.inject(envelope.from, envelope.to, envelope.msg);
    }
    cluster.run();
    let replies = cluster.take_replies_for(reqid);
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].result, Ok(()));
    assert_eq!(read(&mut cluster, "victim"), Ok(b"new".to_vec()));
    assert_clean_and_identical(&cluster, "victim");
}

fn send_write(cluster: &mut Cluster, name: &str, content: &[u8]) -> carmine_types::ReqId {
    let op = cluster.op(
        name,
        vec![OpCode::WriteFull {
            data: bytes(content),
        }],
    );
    cluster.send(op)
}

fn pull_targets(cluster: &Cluster) -> Vec<OsdId> {
    cluster
        .pending()
        .iter()
        .filter(|e| matches!(e.msg, Msg::PgPull(_)))
        .map(|e| e.to.0)
        .collect()
}

/// What `osd`'s own copy holds (an empty vector if it cannot be read).
fn stored_data(cluster: &mut Cluster, osd: OsdId, name: &str) -> Vec<u8> {
    let reply = cluster.local_read(
        osd,
        name,
        vec![OpCode::Read {
            offset: 0,
            length: 0,
        }],
    );
    match reply.outputs.first() {
        Some(OpOutput::Data(data)) => data.to_vec(),
        _ => Vec::new(),
    }
}

/// Entries the PG log keeps in the backfill tests: five writes trim the first.
const LOG_ENTRIES: usize = 4;

/// One size-3 PG whose log keeps [`LOG_ENTRIES`] entries, so an OSD that misses a few
/// writes comes back behind the log's tail and is backfilled.
fn short_log_cluster() -> Cluster {
    Cluster::new(Config {
        pg_num: 1,
        tuning: carmine_osd::OsdTuning {
            log_entries_max: LOG_ENTRIES,
            ..harness::tuning()
        },
        ..Config::default()
    })
}

/// Seed 211550's shape: the only intact copy of a write the log no longer records is
/// on an OSD that returns behind the log's tail. It is backfilled, and a backfill
/// replaces each object only as the primary's copy arrives; until then the returning
/// copy keeps its own, and the primary, whose copy is corrupt, pulls exactly the
/// version its object info names from it. (Before, the backfill emptied the returning
/// copy first, and the object was unfound for good.)
#[test]
fn a_backfill_target_supplies_the_last_intact_copy_of_a_write_the_log_forgot() {
    let mut cluster = short_log_cluster();
    write(&mut cluster, "victim", b"the last good copy");
    write(&mut cluster, "bystander", b"fine");
    let members = acting(&cluster, "victim");
    let returning = members[2];
    cluster.crash(returning);
    cluster.run();
    // The log moves past the victim's write, and the copies that stay both rot.
    for i in 0..=LOG_ENTRIES {
        write(&mut cluster, &format!("later{i}"), b"y");
    }
    cluster.decay(members[0], "victim");
    cluster.decay(members[1], "victim");

    cluster.revive(returning);
    cluster.run();
    assert_eq!(
        read(&mut cluster, "victim"),
        Ok(b"the last good copy".to_vec())
    );
    assert_eq!(read(&mut cluster, "bystander"), Ok(b"fine".to_vec()));
    assert_clean_and_identical(&cluster, "victim");
}

/// A copy being backfilled serves only the exact version asked for: asked for another
/// one (or with none named), its stale copy is refused, and with no good copy left the
/// object fails with EIO rather than come back older than the write acknowledged last.
#[test]
fn a_backfill_target_never_serves_a_stale_copy() {
    let mut cluster = short_log_cluster();
    write(&mut cluster, "victim", b"old");
    let members = acting(&cluster, "victim");
    let returning = members[2];
    cluster.crash(returning);
    cluster.run();
    write(&mut cluster, "victim", b"new, acknowledged");
    for i in 0..=LOG_ENTRIES {
        write(&mut cluster, &format!("later{i}"), b"y");
    }
    cluster.decay(members[0], "victim");
    cluster.decay(members[1], "victim");

    cluster.revive(returning);
    cluster.run();
    match read(&mut cluster, "victim") {
        Err(OpError::Io(why)) => assert!(why.contains("no readable copy"), "{why}"),
        other => panic!("expected EIO, never the stale copy: got {other:?}"),
    }
}

/// A copy lost behind the PG's back (its store has no such object, while the log's
/// newest change to it was a client's write): a read on the primary would deny an
/// acknowledged write with `NotFound`. It is repaired like a corrupt copy.
#[test]
fn a_read_of_an_object_the_primary_lost_is_answered_after_a_pull() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "lost", b"still here");
    let primary = acting(&cluster, "lost")[0];
    cluster.lose(primary, "lost");

    assert_eq!(read(&mut cluster, "lost"), Ok(b"still here".to_vec()));
    assert_eq!(
        cluster.local_data(primary, "lost").as_deref(),
        Some(&b"still here"[..])
    );
    let counters = counters(&cluster, primary, "lost");
    assert_eq!(
        (
            counters.corrupt_copies_found_total,
            counters.copies_repaired_total
        ),
        (1, 1)
    );
    assert_clean_and_identical(&cluster, "lost");
}

#[test]
fn a_removed_object_still_reads_as_absent_with_no_repair() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "gone", b"data");
    assert_eq!(cluster.call("gone", vec![OpCode::Remove]).result, Ok(()));
    assert_eq!(read(&mut cluster, "gone"), Err(OpError::NotFound));
    assert_eq!(read(&mut cluster, "never"), Err(OpError::NotFound));
    let primary = acting(&cluster, "gone")[0];
    assert_eq!(
        counters(&cluster, primary, "gone").corrupt_copies_found_total,
        0
    );
    assert_eq!(cluster.pending_count(), 0, "nothing pulled");
}

#[test]
fn an_object_lost_from_every_copy_is_unfound_not_absent() {
    let mut cluster = Cluster::new(Config::default());
    write(&mut cluster, "lost", b"data");
    let pgid = cluster.pg_of("lost");
    let written = cluster.pg_stat(pgid).last_update;
    write(&mut cluster, "kept", b"data");
    for osd in acting(&cluster, "lost") {
        cluster.lose(osd, "lost");
    }
    assert_eq!(list_unfound(&mut cluster, pgid, None, 10), (vec![], None));
    match read(&mut cluster, "lost") {
        Err(OpError::Io(message)) => assert!(message.contains("no readable copy"), "{message}"),
        other => panic!("{other:?}"),
    }
    // Reported as Ceph reports it: counted, named with the version the history
    // needs, and the PG `recovery_unfound`, never clean.
    let stat = cluster.pg_stat(pgid);
    assert_eq!(stat.unfound, 1);
    assert!(
        stat.state.contains(PgState::RECOVERY_UNFOUND) && !stat.state.contains(PgState::CLEAN),
        "{}",
        stat.state.name()
    );
    let listed = list_unfound(&mut cluster, pgid, None, 10);
    assert_eq!(listed, (vec![("lost".to_string(), written)], None));
}

/// An operator gives the unfound object up (`pg mark_unfound_lost delete`): its
/// removal is logged on every member, the PG goes clean with every copy alike, and
/// the object is gone for good, through restarts too; the other object is untouched.
/// (Before, nothing could: the PG stayed degraded until a copy returned.)
#[test]
fn an_unfound_object_marked_lost_is_deleted_everywhere() {
    let mut cluster = Cluster::new(Config {
        pg_num: 1,
        ..Config::default()
    });
    write(&mut cluster, "lost", b"data");
    write(&mut cluster, "kept", b"kept");
    let pgid = cluster.pg_of("lost");
    let written = cluster.pg_stat(pgid).last_update;
    let members = acting(&cluster, "lost");
    // One replica keeps an unreadable copy, the others lose theirs.
    for &osd in &members[..2] {
        cluster.lose(osd, "lost");
    }
    cluster.decay(members[2], "lost");
    assert!(matches!(read(&mut cluster, "lost"), Err(OpError::Io(_))));
    assert_eq!(cluster.pg_stat(pgid).unfound, 1);

    let marked = mark_unfound_lost(&mut cluster, pgid);
    assert_eq!(marked.len(), 1, "{marked:?}");
    assert_eq!(marked[0].0, "lost");
    assert!(marked[0].1 < written, "it needed the write before `kept`");
    cluster.run_ticks(10);
    assert_clean_and_identical(&cluster, "lost");
    assert_eq!(cluster.pg_stat(pgid).unfound, 0);
    assert_eq!(read(&mut cluster, "lost"), Err(OpError::NotFound));
    assert_eq!(read(&mut cluster, "kept"), Ok(b"kept".to_vec()));
    for &osd in &members {
        assert_eq!(cluster.local_data(osd, "lost"), None, "{osd}");
    }
    // Nothing left to give up; and the removal holds when the members restart.
    assert!(mark_unfound_lost(&mut cluster, pgid).is_empty());
    for &osd in &members {
        cluster.restart(osd, false);
        cluster.run();
    }
    cluster.run_ticks(10);
    assert_clean_and_identical(&cluster, "lost");
    assert_eq!(read(&mut cluster, "lost"), Err(OpError::NotFound));
    assert_eq!(read(&mut cluster, "kept"), Ok(b"kept".to_vec()));
}

/// `pg mark_unfound_lost` as a client sends it.
fn mark_unfound_lost(
    cluster: &mut Cluster,
    pgid: carmine_types::PgId,
) -> Vec<(String, carmine_types::EVersion)> {
    let mut op = cluster.op("", vec![OpCode::PgMarkUnfoundLost]);
    op.pgid = pgid;
    let reply = cluster.call_op(op);
    match (reply.result, reply.outputs.as_slice()) {
        (
            Ok(()),
            [OpOutput::Unfound {
                objects,
                next: None,
            }],
        ) => objects.clone(),
        other => panic!("mark_unfound_lost answered {other:?}"),
    }
}

/// A page of `pg list_unfound`.
fn list_unfound(
    cluster: &mut Cluster,
    pgid: carmine_types::PgId,
    after: Option<String>,
    max_entries: u32,
) -> (Vec<(String, carmine_types::EVersion)>, Option<String>) {
    let mut op = cluster.op("", vec![OpCode::PgListUnfound { after, max_entries }]);
    op.pgid = pgid;
    let reply = cluster.call_op(op);
    match (reply.result, reply.outputs.as_slice()) {
        (Ok(()), [OpOutput::Unfound { objects, next }]) => (objects.clone(), next.clone()),
        other => panic!("list_unfound answered {other:?}"),
    }
}

/// A size-2 PG (min_size 1) whose two copies of `obj` move to the two other OSDs,
/// whose stores have no room for it: the new primary's pull and its push to the other
/// are refused, and the PG goes active without it. Returns the cluster, the object's
/// name and the new acting set; the new members' stores are still full.
fn moved_onto_full_osds() -> (Cluster, String, Vec<OsdId>) {
    moved_onto_full_osds_of(Config {
        osd_count: 4,
        ..Config::default()
    })
}

fn moved_onto_full_osds_of(config: Config) -> (Cluster, String, Vec<OsdId>) {
    moved_onto_full_osds_after(config, |cluster, name| write(cluster, name, &[5; 64]))
}

/// `obj`, as `prepare` leaves it on a size-2 PG, is moved onto two OSDs with no room:
/// their pulls are refused, so neither holds it; the old members are strays.
fn moved_onto_full_osds_after(
    config: Config,
    prepare: impl FnOnce(&mut Cluster, &str),
) -> (Cluster, String, Vec<OsdId>) {
    let mut cluster = Cluster::new(Config {
        size: 2,
        min_size: Some(1),
        ..config
    });
    let name = "obj".to_string();
    prepare(&mut cluster, &name);
    let old = acting(&cluster, &name);
    let new: Vec<OsdId> = (cluster.osds().into_iter())
        .filter(|osd| !old.contains(osd))
        .take(2)
        .collect();
    let spare: Vec<OsdId> = (cluster.osds().into_iter())
        .filter(|osd| !old.contains(osd) && !new.contains(osd))
        .collect();
    set_capacity(&mut cluster, &new, &name, 1);
    cluster.change_map(|map| {
        for &osd in old.iter().chain(&spare) {
            map.set_weight(osd, 0).unwrap();
        }
    });
    cluster.run();
    cluster.run_ticks(5);
    let moved = acting(&cluster, &name);
    assert!(moved.iter().all(|osd| new.contains(osd)), "{moved:?}");
    assert!(
        cluster.local_data(moved[0], &name).is_none(),
        "the pull found no room"
    );
    (cluster, name, moved)
}

fn set_capacity(cluster: &mut Cluster, osds: &[OsdId], name: &str, capacity_bytes: u64) {
    let pgid = cluster.pg_of(name);
    for &osd in osds {
        let addr = cluster.addr(osd, pgid);
        (cluster.shard_mut(addr).store_mut()).set_capacity_bytes(capacity_bytes);
    }
}

/// An object that no member of the acting set holds is pulled from a stray that
/// answered this interval's peering with a log reaching the version needed: once there
/// is room, a read repairs it from an old member. (Before, only acting members were
/// asked: the object stayed unfound while a stray held it, the simulator's remap and
/// space classes together.) The replica, which lacks it too, is asked first for that
/// version; its answer that it holds another is not counted as a bad copy (it was,
/// with a warning that its copy was corrupt), and it gets the object once the primary
/// has it.
#[test]
fn an_object_no_member_holds_is_repaired_from_a_stray() {
    let (mut cluster, name, moved) = moved_onto_full_osds();
    set_capacity(&mut cluster, &moved, &name, u64::MAX);
    assert_eq!(read(&mut cluster, &name), Ok(vec![5; 64]));
    assert_eq!(cluster.local_data(moved[0], &name), Some(vec![5; 64]));
    let found = counters(&cluster, moved[0], &name);
    assert_eq!(found.corrupt_copies_found_total, 0, "{found:?}");
    for _ in 0..150 {
        cluster.advance(std::time::Duration::from_millis(100));
        cluster.run();
    }
    assert_eq!(cluster.local_data(moved[1], &name), Some(vec![5; 64]));
}

/// The same without any read: once its store has room, the primary pulls the object
/// from the stray in the background, and then pushes it to the replica. (Before, the
/// replica's answer that it lacked it ended the repair: the object stayed on the
/// stray alone, the PG recovering, until an op reached it.)
#[test]
fn an_object_no_member_holds_is_recovered_from_a_stray_without_a_read() {
    let (mut cluster, name, moved) = moved_onto_full_osds();
    set_capacity(&mut cluster, &moved, &name, u64::MAX);
    cluster.run_ticks(5);
    assert_eq!(cluster.local_data(moved[0], &name), Some(vec![5; 64]));
    cluster.run_ticks(150);
    assert_eq!(cluster.local_data(moved[1], &name), Some(vec![5; 64]));
    assert_clean_and_identical(&cluster, &name);
}

/// The same for an object removed under a snapshot: its newest change is the removal,
/// which leaves a whiteout head (dated by the removal) and the clone. The primary asks
/// a stray for exactly the removal's version and gets both. (Before, a removal had no
/// version to ask for, so no stray was asked and the clone stayed unfound while a
/// stray held it: seed 95 of the remap, space and snapshot-trim classes together.)
#[test]
fn an_object_removed_under_a_snapshot_is_repaired_from_a_stray() {
    let mut snap = 0;
    let config = Config {
        osd_count: 4,
        ..Config::default()
    };
    let (mut cluster, name, moved) = moved_onto_full_osds_after(config, |cluster, name| {
        write(cluster, name, &[5; 64]);
        cluster.change_map(|map| snap = map.allocate_pool_snap("test").expect("pool exists"));
        let mut op = cluster.op(name, vec![OpCode::Remove]);
        op.snapc = carmine_proto::SnapContext {
            seq: snap,
            snaps: vec![snap],
        };
        assert_eq!(cluster.call_op(op).result, Ok(()));
    });
    let pgid = cluster.pg_of(&name);
    let listed = |cluster: &Cluster, osd| {
        (cluster.store(osd, pgid))
            .list_objects(carmine_store::CollectionId::Pg(pgid), None, usize::MAX)
            .unwrap()
            .into_iter()
            .filter(|oid| oid.name == name)
            .count()
    };
    assert_eq!(listed(&cluster, moved[0]), 0, "the pull found no room");
    set_capacity(&mut cluster, &moved, &name, u64::MAX);
    assert_eq!(read(&mut cluster, &name), Err(OpError::NotFound));
    assert_eq!(
        harness::read_at(&mut cluster, &name, carmine_types::SnapId(snap)),
        Ok(vec![5; 64])
    );
    assert_eq!(
        listed(&cluster, moved[0]),
        2,
        "the whiteout head and the clone"
    );
}

/// The same for an object whose newest change is a snapshot trim, which changes the
/// head's clones and snapshot set but not its object info: the stray's own log ends by
/// that trim, so it vouches for its copy (seed 5332 of the remap, space and
/// snapshot-trim classes together: the object stayed unfound while a stray held it).
#[test]
fn an_object_last_changed_by_a_snapshot_trim_is_repaired_from_a_stray() {
    let config = Config {
        osd_count: 4,
        ..Config::default()
    };
    let (mut cluster, name, moved) = moved_onto_full_osds_after(config, |cluster, name| {
        write(cluster, name, &[5; 64]);
        let mut snap = 0;
        cluster.change_map(|map| snap = map.allocate_pool_snap("test").expect("pool exists"));
        let mut op = cluster.op(
            name,
            vec![OpCode::WriteFull {
                data: bytes(&[6; 64]),
            }],
        );
        op.snapc = carmine_proto::SnapContext {
            seq: snap,
            snaps: vec![snap],
        };
        assert_eq!(cluster.call_op(op).result, Ok(()));
        cluster.change_map(|map| map.remove_pool_snap("test", snap).expect("allocated"));
        cluster.run();
        for _ in 0..4 {
            cluster.turn();
        }
        // The trim is logged: the newest entry is the trim's, by its client.
        let pgid = cluster.pg_of(name);
        let primary = cluster.primary_of(pgid);
        let dump = cluster.dump_pg(primary, pgid);
        let (_, newest) = (dump[""].omap.iter())
            .rfind(|(key, _)| key.starts_with(b"log."))
            .expect("a log");
        let newest =
            <carmine_proto::LogEntry as carmine_types::Decode>::from_shared(newest.clone());
        assert_eq!(newest.unwrap().reqid.client, carmine_osd::SNAP_TRIM_CLIENT);
    });
    set_capacity(&mut cluster, &moved, &name, u64::MAX);
    assert_eq!(read(&mut cluster, &name), Ok(vec![6; 64]));
    assert_eq!(cluster.local_data(moved[0], &name), Some(vec![6; 64]));
}

/// A repaired copy the primary's store has no room for leaves the repair in flight and
/// the ops waiting on it held; the recovery tick pulls again later. (Before, the ops
/// ran again at once, each started the same repair, and the pulls went round for as
/// long as the store stayed full.)
#[test]
fn a_repair_the_primary_has_no_room_for_waits_and_pulls_again_later() {
    let (mut cluster, name, moved) = moved_onto_full_osds();
    let op = cluster.op(
        &name,
        vec![OpCode::Read {
            offset: 0,
            length: 0,
        }],
    );
    let reqid = cluster.send(op);
    let delivered = cluster.run();
    assert!(delivered < 50, "{delivered} messages for one read");
    assert!(!cluster.has_reply(reqid));

    set_capacity(&mut cluster, &moved, &name, u64::MAX);
    let replies = cluster.await_replies(reqid, 40);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(replies[0].outputs, vec![OpOutput::Data(bytes(&[5; 64]))]);
}

/// A new primary that pulls everything from the authoritative copy (a backfill: its
/// log does not reach the copy's tail) keeps the objects that copy lacks as missing.
/// Here the newest log is on two OSDs that lack `obj` (no room for it when it moved
/// there), and the PG moves on to an empty OSD. (Before, the pull of everything the
/// source held did not name `obj`, and the new primary took it as absent: the PG went
/// clean without an acknowledged object and a read answered that it does not exist;
/// the simulator's remap and space classes together.) With the old members' copies
/// lost too, no copy holds it: it is unfound, the PG is not clean, and a read fails
/// rather than deny the object. The log keeps the entry naming `obj` while members
/// lack it, so it takes more writes than a log may grow by to get there.
#[test]
fn a_pull_of_everything_keeps_what_the_source_lacks_missing() {
    let writes = (LOG_PINNED_GROWTH + 1) * LOG_ENTRIES;
    let write_obj = |cluster: &mut Cluster, name: &str| write(cluster, name, &[5; 64]);
    let (mut cluster, name) = moved_on_after_with(writes, write_obj, |cluster, name| {
        let pgid = cluster.pg_of(name);
        for osd in cluster.osds() {
            let oid = carmine_types::ObjectId::head(name);
            let coll = carmine_store::CollectionId::Pg(pgid);
            if cluster.store(osd, pgid).exists(coll, &oid) {
                cluster.lose(osd, name);
            }
        }
    });
    let pgid = cluster.pg_of(&name);
    let state = cluster.pg_stat(pgid).state;
    assert!(!state.contains(PgState::CLEAN), "{}", state.name());
    let read_back = read(&mut cluster, &name);
    assert!(matches!(read_back, Err(OpError::Io(_))), "{read_back:?}");
    // The read asked the strays too (their announcements did not list the object as
    // missing), so it is now known to be unfound, and reported so.
    let stat = cluster.pg_stat(pgid);
    assert!(
        stat.state.contains(PgState::RECOVERY_UNFOUND),
        "{}",
        stat.state.name()
    );
    assert_eq!(stat.unfound, 1);
    let listed = list_unfound(&mut cluster, pgid, None, 10);
    assert_eq!(listed.0.iter().map(|(n, _)| n).collect::<Vec<_>>(), [&name]);
    // Given up, it is gone: the PG no longer waits for it.
    let marked = mark_unfound_lost(&mut cluster, pgid);
    assert_eq!(marked.iter().map(|(n, _)| n).collect::<Vec<_>>(), [&name]);
    cluster.run_ticks(10);
    let stat = cluster.pg_stat(pgid);
    assert_eq!(stat.unfound, 0);
    assert_eq!(stat.state.name(), "active+degraded+undersized");
    assert_eq!(read(&mut cluster, &name), Err(OpError::NotFound));
}

/// The same with the old members' copies intact. The log has trimmed every entry
/// naming `obj`, but the copies lacking it kept the version it needs with their
/// missing set (Ceph's `pg_missing_item::need`), on disk (they restart before the
/// move), and sent it with their notify, so the new primary asks a stray for exactly
/// that version and reads it back. (Before, the version went with the last entry
/// naming it, and the object stayed unfound while strays held it: the simulator's
/// seed 36287 of expansion, remaps, space and snapshot trims, where every entry left
/// naming such objects was a failed write's.)
#[test]
fn the_needed_version_outlives_the_log_entries_that_named_it() {
    let writes = (LOG_PINNED_GROWTH + 1) * LOG_ENTRIES;
    let write_obj = |cluster: &mut Cluster, name: &str| write(cluster, name, &[5; 64]);
    let (mut cluster, name) = moved_on_after_with(writes, write_obj, |cluster, name| {
        let members = acting(cluster, name);
        for osd in members {
            let pgid = cluster.pg_of(name);
            let dump = cluster.dump_pg(osd, pgid);
            let key = format!("missing.{name}");
            let need = (dump[""].omap.iter()).find(|(k, _)| k[..] == *key.as_bytes());
            assert!(
                need.is_some_and(|(_, need)| !need.is_empty()),
                "{osd} keeps no version of {name}: {need:?}"
            );
            cluster.restart(osd, false);
        }
        cluster.run();
        cluster.run_ticks(5);
    });
    let pgid = cluster.pg_of(&name);
    let primary = cluster.primary_of(pgid);
    let dump = cluster.dump_pg(primary, pgid);
    let named = (dump[""].omap.iter())
        .filter(|(key, _)| key.starts_with(b"log."))
        .map(|(_, raw)| <LogEntry as carmine_types::Decode>::from_shared(raw.clone()).unwrap())
        .any(|entry| entry.oid == name);
    assert!(!named, "the log still names {name}");
    assert_eq!(read(&mut cluster, &name), Ok(vec![5; 64]));
    assert_eq!(cluster.local_data(primary, &name), Some(vec![5; 64]));
}

/// The same with fewer writes than the log may grow by while its members lack `obj`:
/// the log keeps the entry naming it, so the empty OSD catches up on the log, and the
/// version that entry names is found on a stray that still holds it. (Before, the
/// log trimmed that entry, the empty OSD was backfilled from a copy lacking `obj`,
/// and no copy could show it held the version the history needs: the simulator's
/// seed 15189 of remaps, space and snapshot trims.)
#[test]
fn a_log_keeps_the_entry_of_an_object_its_members_lack() {
    let (mut cluster, name) = moved_on_after_writes(3 * LOG_ENTRIES);
    assert_eq!(read(&mut cluster, &name), Ok(vec![5; 64]));
}

/// A new primary backfilled from a copy that lacks `obj`, whose newest change is a
/// client's removal under a snapshot: its head is a whiteout, and its clone holds the
/// snapshot's data. A removal's log entry does not say whether clones remain, so with
/// snapshots in the pool an object the source lacks is not taken for gone because
/// the log ends by removing it: it stays missing, and is found on a stray that still
/// holds it. (Before, the new primary took it as absent, and a read at the snapshot
/// answered that the object never existed: the simulator's seed 1132 of expansion,
/// remaps, space and snapshot trims, where the copies then differed by the clone.)
#[test]
fn a_backfill_keeps_a_removed_object_the_source_lacks_missing_under_snapshots() {
    let mut snap = 0;
    let (mut cluster, name) = moved_on_after(1, |cluster, name| {
        // The log is trimmed before: the new OSD's empty copy cannot catch up on it.
        for round in 0..2 * LOG_ENTRIES {
            write(cluster, "other", format!("older {round}").as_bytes());
        }
        write(cluster, name, &[5; 64]);
        cluster.change_map(|map| snap = map.allocate_pool_snap("test").unwrap());
        cluster.run();
        let mut op = cluster.op(name, vec![OpCode::Remove]);
        op.snapc = carmine_proto::SnapContext {
            seq: snap,
            snaps: vec![snap],
        };
        assert_eq!(cluster.call_op(op).result, Ok(()));
    });
    let at_snap = harness::read_at(&mut cluster, &name, carmine_types::SnapId(snap));
    assert_eq!(at_snap, Ok(vec![5; 64]));
    assert_eq!(read(&mut cluster, &name), Err(OpError::NotFound));
    // Nothing left to recover: degraded only as one copy of two (undersized).
    cluster.run_ticks(10);
    let state = cluster.pg_stat(cluster.pg_of(&name)).state;
    assert_eq!(state.name(), "active+degraded+undersized");
}

/// `obj` on two full OSDs that lack it (`moved_onto_full_osds_of`, one PG, a short
/// log), room again, `writes` to another object, then the PG moved on to an OSD that
/// never held it; returns the cluster and the object's name.
fn moved_on_after_writes(writes: usize) -> (Cluster, String) {
    moved_on_after(writes, |cluster, name| write(cluster, name, &[5; 64]))
}

/// As `moved_on_after_writes`, with `obj` as `prepare` leaves it.
fn moved_on_after(writes: usize, prepare: impl FnOnce(&mut Cluster, &str)) -> (Cluster, String) {
    moved_on_after_with(writes, prepare, |_, _| {})
}

/// As `moved_on_after`, with `before_move` run just before the PG moves on.
fn moved_on_after_with(
    writes: usize,
    prepare: impl FnOnce(&mut Cluster, &str),
    before_move: impl FnOnce(&mut Cluster, &str),
) -> (Cluster, String) {
    let config = Config {
        osd_count: 5,
        pg_num: 1,
        tuning: carmine_osd::OsdTuning {
            log_entries_max: LOG_ENTRIES,
            ..harness::tuning()
        },
        ..Config::default()
    };
    let (mut cluster, name, moved) = moved_onto_full_osds_after(config, prepare);
    let pgid = cluster.pg_of(&name);
    set_capacity(&mut cluster, &moved, &name, u64::MAX);
    for round in 0..writes {
        write(&mut cluster, "other", format!("newer {round}").as_bytes());
    }
    let last = *(cluster.osds().iter())
        .find(|osd| cluster.store(**osd, pgid).usage().data_bytes == 0)
        .expect("an OSD that never held the PG");
    before_move(&mut cluster, &name);
    cluster.change_map(|map| {
        for osd in map.osds.keys().copied().collect::<Vec<_>>() {
            let weight = if osd == last { WEIGHT_IN } else { 0 };
            map.set_weight(osd, weight).unwrap();
        }
    });
    cluster.run();
    cluster.run_ticks(10);
    assert_eq!(acting(&cluster, &name), vec![last]);
    let newest = format!("newer {}", writes - 1);
    assert_eq!(read(&mut cluster, "other"), Ok(newest.into_bytes()));
    (cluster, name)
}
