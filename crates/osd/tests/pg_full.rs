//! A full OSD gives clients a clear `NoSpace`, never a stalled PG or divergent copies.
//!
//! - A primary refuses a write that adds data, before it runs, while the map marks a
//!   member of the PG full (or its own store is past the failsafe ratio); deletes
//!   still go through so an operator can free space.
//! - A replica whose store refuses a write the primary applied (it filled before the
//!   monitor marked it full) makes the primary hold the write, unanswered, and resend
//!   it on each tick until the replica has room: the write is acknowledged only once
//!   every copy holds it, a resend gets the same answer, and the copies never differ.

mod harness;

use carmine_clustermap::Fullness;
use carmine_proto::{OpCode, OpError, PgState};
use carmine_store::ObjectStore;
use carmine_types::OsdId;
use harness::{bytes, name_where, Cluster, Config};
use std::collections::BTreeMap;
use std::time::Duration;

/// Filler that leaves the tight replica full (past the full ratio, refusing recovery
/// reservations) with room for a small object only.
const FULL_FILLER: usize = 22 * 1024;

/// A name starting with `prefix` whose PG has `replica` as a member, not its primary.
fn name_with_replica(cluster: &Cluster, prefix: &str, replica: OsdId) -> String {
    name_where(cluster, prefix, |pgid| {
        let acting = cluster.acting(pgid);
        acting[0] != replica && acting.contains(&replica)
    })
}

fn write_full(len: usize) -> Vec<OpCode> {
    vec![OpCode::WriteFull {
        data: bytes(&vec![7; len]),
    }]
}

#[test]
fn a_primary_refuses_writes_while_a_member_is_marked_full_and_takes_deletes() {
    let mut cluster = Cluster::new(Config::default());
    let full = OsdId(2);
    let name = name_with_replica(&cluster, "obj", full);
    let pgid = cluster.pg_of(&name);
    assert_eq!(cluster.call(&name, write_full(100)).result, Ok(()));

    cluster.change_map(|map| map.set_fullness(full, Fullness::Full).unwrap());
    let refused = cluster.call(&name, write_full(200));
    assert_eq!(refused.result, Err(OpError::NoSpace));
    let append = vec![OpCode::Append {
        data: bytes(b"more"),
    }];
    assert_eq!(cluster.call(&name, append).result, Err(OpError::NoSpace));
    // Nothing ran: the object is as the first write left it, on every copy.
    let read = cluster.call(
        &name,
        vec![OpCode::Read {
            offset: 0,
            length: 1000,
        }],
    );
    assert_eq!(read.result, Ok(()));
    cluster.assert_replicas_identical(pgid);

    // Deletes free space and are taken.
    let truncate = vec![OpCode::Truncate { size_bytes: 10 }];
    assert_eq!(cluster.call(&name, truncate).result, Ok(()));
    assert_eq!(cluster.call(&name, vec![OpCode::Remove]).result, Ok(()));
    cluster.assert_replicas_identical(pgid);

    // Nearfull only warns; once the OSD is no longer full, writes are taken again.
    cluster.change_map(|map| map.set_fullness(full, Fullness::NearFull).unwrap());
    assert_eq!(cluster.call(&name, write_full(100)).result, Ok(()));
    cluster.assert_replicas_identical(pgid);
}

#[test]
fn a_primary_past_its_failsafe_ratio_refuses_writes_that_add_data() {
    let primary = OsdId(0);
    let mut capacity_bytes_of = BTreeMap::new();
    capacity_bytes_of.insert(primary, 64 * 1024);
    let mut cluster = Cluster::new(Config {
        capacity_bytes_of,
        ..Config::default()
    });
    let name = name_where(&cluster, "obj", |pgid| cluster.acting(pgid)[0] == primary);
    // Fill to past 97 % (the default failsafe ratio) while below 100 %: the store
    // itself would take a small write, the primary does not.
    let pgid = cluster.pg_of(&name);
    let mut filled = false;
    for kib in 58..64 {
        let reply = cluster.call(&name, write_full(kib * 1024));
        assert_eq!(reply.result, Ok(()), "{kib} KiB fits in the store");
        let usage = cluster.store(primary, pgid).usage();
        let used = usage.data_bytes + usage.metadata_bytes;
        if used as f64 >= 0.97 * usage.capacity_bytes as f64 {
            let append = vec![OpCode::Append { data: bytes(b"x") }];
            assert_eq!(cluster.call(&name, append).result, Err(OpError::NoSpace));
            filled = true;
            break;
        }
    }
    assert!(filled, "the store never filled");
    assert_eq!(cluster.call(&name, vec![OpCode::Remove]).result, Ok(()));
    assert_eq!(cluster.call(&name, write_full(10)).result, Ok(()));
}

/// A cluster whose `full` OSD has a 24 KiB store, `name` in a PG where `full` is a
/// replica, and `filler` in another PG on `full` (to take its space).
struct Tight {
    cluster: Cluster,
    full: OsdId,
    name: String,
    pgid: carmine_types::PgId,
    filler: String,
}

fn tight_replica() -> Tight {
    tight_replica_of(Config::default())
}

/// `tight_replica` on a cluster of `config`'s shape.
fn tight_replica_of(config: Config) -> Tight {
    let full = OsdId(2);
    let mut capacity_bytes_of = BTreeMap::new();
    capacity_bytes_of.insert(full, 24 * 1024);
    let cluster = Cluster::new(Config {
        capacity_bytes_of,
        ..config
    });
    let name = name_with_replica(&cluster, "big", full);
    let pgid = cluster.pg_of(&name);
    let filler = name_where(&cluster, "filler", |other| {
        other != pgid && cluster.acting(other).contains(&full)
    });
    Tight {
        cluster,
        full,
        name,
        pgid,
        filler,
    }
}

/// `name` is written small, `filler` takes the `full` replica's room, and `full` (with
/// `away`, which stays down) misses a 12 KiB version of `name` while it is down. Back,
/// it has no room for it: its copy stays the small one. Returns the missed version.
fn misses_a_version_it_has_no_room_for(
    cluster: &mut Cluster,
    full: OsdId,
    name: &str,
    filler: &str,
    away: &[OsdId],
) -> carmine_types::EVersion {
    assert_eq!(cluster.call(name, write_full(10)).result, Ok(()));
    assert_eq!(cluster.call(filler, write_full(14 * 1024)).result, Ok(()));
    for &osd in away.iter().chain([&full]) {
        cluster.mark_down(osd);
    }
    cluster.run();
    let missed = cluster.call(name, write_full(12 * 1024));
    assert_eq!(missed.result, Ok(()));
    cluster.revive(full);
    cluster.run();
    cluster.run_ticks(5);
    assert_eq!(cluster.local_data(full, name).map(|d| d.len()), Some(10));
    missed.version
}

/// The version `osd`'s copy keeps as needed of `name` with its missing set (the value
/// of its `missing.NAME` key), if it lacks it and knows it.
fn needed_version(cluster: &Cluster, osd: OsdId, name: &str) -> Option<carmine_types::EVersion> {
    let dump = cluster.dump_pg(osd, cluster.pg_of(name));
    let key = format!("missing.{name}");
    let (_, value) = (dump[""].omap.iter()).find(|(k, _)| k[..] == *key.as_bytes())?;
    (!value.is_empty()).then(|| carmine_types::Decode::from_shared(value.clone()).unwrap())
}

/// Removes `filler` (room again on the full replica) and lets up to 15 s pass until
/// the PG is clean.
fn free_room_and_await_clean(cluster: &mut Cluster, filler: &str, pgid: carmine_types::PgId) {
    assert_eq!(cluster.call(filler, vec![OpCode::Remove]).result, Ok(()));
    for _ in 0..150 {
        cluster.advance(Duration::from_millis(100));
        cluster.run();
        if cluster.pg_stat(pgid).state.name() == "active+clean" {
            break;
        }
    }
}

/// The race: the replica's store fills before any map marks it full. (This was the
/// known gap: the primary answered `NoSpace` while its copy and log held the write, the
/// replica's log had a hole, and later writes on the PG stalled.)
#[test]
fn a_replica_out_of_space_holds_the_write_until_it_has_room_and_copies_stay_identical() {
    let Tight {
        mut cluster,
        full,
        name,
        pgid,
        filler,
    } = tight_replica();
    assert_eq!(cluster.call(&filler, write_full(14 * 1024)).result, Ok(()));

    let op = cluster.op(&name, write_full(12 * 1024));
    let reqid = cluster.send(op.clone());
    cluster.run();
    assert!(
        !cluster.has_reply(reqid),
        "a write one copy lacks is neither acknowledged nor failed"
    );
    // Writes that add data are refused at once; the PG is not stalled for them.
    let other = cluster.call(&name, write_full(10));
    assert_eq!(other.result, Err(OpError::NoSpace));
    cluster.run_ticks(3);
    assert!(!cluster.has_reply(reqid), "still no room on {full}");

    // The operator frees space; the next tick's resend fits.
    assert_eq!(cluster.call(&filler, vec![OpCode::Remove]).result, Ok(()));
    cluster.advance(Duration::from_millis(100));
    cluster.run();
    let replies = cluster.take_replies_for(reqid);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(replies[0].result, Ok(()));
    // A resend gets the same answer, from the log.
    let again = cluster.call_op(op);
    assert_eq!(again.result, Ok(()));
    assert_eq!(again.version, replies[0].version);
    cluster.assert_replicas_identical(pgid);
    // And the PG serves writes again.
    assert_eq!(cluster.call(&name, write_full(100)).result, Ok(()));
    cluster.assert_replicas_identical(pgid);
}

/// A replica whose store has no room for a pushed object answers that it could not
/// apply it, and the PG does not go clean with the stale copy there. (Before, the
/// replica answered as if it had applied the push: the PG showed active+clean while
/// that copy held an older version, one failure away from serving it.) The primary
/// shows `recovery_toofull` and pushes again once the replica has room. A write to the
/// object meanwhile is refused for want of space (`pg/degraded.rs`): applied, it would
/// rest on the primary's data alone, the replica logging it without the object. (It
/// was acknowledged so, and a stale primary overwriting that only copy with a write
/// nobody acknowledged, rolled back by the next peering, lost it: the simulator's
/// seed 34338 of expansion, remaps, space and snapshot trims.)
#[test]
fn a_push_a_replica_has_no_room_for_keeps_the_pg_unclean_until_it_lands() {
    let Tight {
        mut cluster,
        full,
        name,
        pgid,
        filler,
    } = tight_replica();
    let missed = misses_a_version_it_has_no_room_for(&mut cluster, full, &name, &filler, &[]);
    let state = cluster.pg_stat(pgid).state;
    assert!(!state.contains(PgState::CLEAN), "{}", state.name());
    assert!(
        state.contains(PgState::RECOVERY_TOOFULL),
        "{}",
        state.name()
    );
    // The replica keeps the version it needs with its missing set: the missed one
    // (see `pg/missing.rs`).
    assert_eq!(needed_version(&cluster, full, &name), Some(missed));

    // A write to the object now is refused: the replica has no room for the object.
    let write = vec![OpCode::Write {
        offset: 0,
        data: bytes(b"new"),
    }];
    let refused = cluster.call(&name, write.clone());
    assert_eq!(refused.result, Err(OpError::NoSpace));
    assert_eq!(cluster.local_data(full, &name).map(|d| d.len()), Some(10));
    let primary = cluster.primary_of(pgid);
    assert_ne!(&cluster.local_data(primary, &name).unwrap()[..3], b"new");
    let state = cluster.pg_stat(pgid).state;
    assert!(!state.contains(PgState::CLEAN), "{}", state.name());

    // Room again: the push lands after the back-off, and the write goes through.
    free_room_and_await_clean(&mut cluster, &filler, pgid);
    assert_eq!(cluster.pg_stat(pgid).state.name(), "active+clean");
    assert_eq!(cluster.call(&name, write).result, Ok(()));
    cluster.assert_replicas_identical(pgid);
    let data = cluster.local_data(full, &name).expect("pushed");
    assert_eq!(data.len(), 12 * 1024);
    assert_eq!(&data[..3], b"new");
}

/// A write to an object a replica lacks goes out as a push of our copy before the
/// write, then the write's `RepOp`. The replica's store may take the push and refuse
/// the write: the push's answer covers only what the pushed copy held, so the write
/// waits for the replica's own answer. (Before, the push's answer completed the write
/// too: it was acknowledged while the replica held neither it nor a log without a hole,
/// and every later write to the PG stalled, the replica ignoring them as not
/// following; the space fault class's seeds 1514, 1822 and 2346.)
#[test]
fn a_write_a_replica_refuses_after_taking_its_push_waits_for_the_replica() {
    let Tight {
        mut cluster,
        full,
        name,
        pgid,
        filler,
    } = tight_replica();
    assert_eq!(cluster.call(&name, write_full(10)).result, Ok(()));
    assert_eq!(
        cluster.call(&filler, write_full(FULL_FILLER)).result,
        Ok(())
    );
    // The replica misses a small version while it is away, and is back full: too
    // full for a recovery reservation, with room for a small push only.
    cluster.mark_down(full);
    cluster.run();
    assert_eq!(cluster.call(&name, write_full(20)).result, Ok(()));
    cluster.revive(full);
    cluster.run();
    cluster.run_ticks(5);
    let state = cluster.pg_stat(pgid).state;
    assert!(!state.contains(PgState::CLEAN), "{}", state.name());
    assert_eq!(cluster.local_data(full, &name).map(|d| d.len()), Some(10));

    let op = cluster.op(&name, write_full(12 * 1024));
    let reqid = cluster.send(op);
    cluster.run();
    assert_eq!(
        cluster.local_data(full, &name).map(|d| d.len()),
        Some(20),
        "the push ahead of the write landed"
    );
    assert!(
        !cluster.has_reply(reqid),
        "the write is not acknowledged while {full} lacks it"
    );

    // Room again: the resent write lands, and only then is it acknowledged.
    assert_eq!(cluster.call(&filler, vec![OpCode::Remove]).result, Ok(()));
    cluster.advance(Duration::from_millis(100));
    cluster.run();
    let replies = cluster.take_replies_for(reqid);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(replies[0].result, Ok(()));
    assert_eq!(
        cluster.local_data(full, &name).map(|d| d.len()),
        Some(12 * 1024)
    );
    // Later writes are not ignored as not following.
    assert_eq!(cluster.call(&name, write_full(100)).result, Ok(()));
    cluster.assert_replicas_identical(pgid);
}

/// A write to an object that the only other member lacks, with no room for its push,
/// is refused for want of space: the primary alone would hold it. (Once it was
/// acknowledged so: a size-3, min_size-2 pool lost an acknowledged write to one
/// failure. Then it waited until `min_size` members held it, the member logging it
/// without the data, which is still how a backfill target takes a write.) Once the
/// member has room, the push lands and the write goes through.
#[test]
fn a_write_only_the_primary_could_hold_is_refused_for_want_of_space() {
    let Tight {
        mut cluster,
        full,
        name,
        pgid,
        filler,
    } = tight_replica();
    let acting = cluster.acting(pgid);
    let other = *acting
        .iter()
        .find(|&&osd| osd != acting[0] && osd != full)
        .expect("a size-3 acting set");
    // The full replica misses a 12 KiB version it has no room for, and the other
    // replica leaves: the primary alone holds the object.
    misses_a_version_it_has_no_room_for(&mut cluster, full, &name, &filler, &[]);
    cluster.mark_down(other);
    cluster.run();
    cluster.run_ticks(5);
    assert_eq!(cluster.acting(pgid).len(), 2);
    assert_eq!(cluster.local_data(full, &name).map(|d| d.len()), Some(10));

    let write = vec![OpCode::Write {
        offset: 0,
        data: bytes(b"new"),
    }];
    let refused = cluster.call(&name, write.clone());
    assert_eq!(refused.result, Err(OpError::NoSpace));
    assert_eq!(cluster.local_data(full, &name).map(|d| d.len()), Some(10));

    // Room again: the push lands, and the write goes through.
    free_room_and_await_clean(&mut cluster, &filler, pgid);
    assert_eq!(cluster.call(&name, write).result, Ok(()));
    let data = cluster.local_data(full, &name).expect("pushed");
    assert_eq!(data.len(), 12 * 1024);
    assert_eq!(&data[..3], b"new");
    cluster.assert_replicas_identical(pgid);
}

/// A request refused for want of space is refused again, though there is room by then,
/// when another copy of it reaches the primary: the client took the first answer as
/// final. (Before, a copy held while the PG peered ran once the room came back and
/// applied the write the client had been told failed; the simulator's remap and space
/// classes, seed 2630.) A new request runs.
#[test]
fn another_copy_of_a_request_refused_for_space_gets_the_same_answer() {
    let mut cluster = Cluster::new(Config::default());
    let full = OsdId(2);
    let name = name_with_replica(&cluster, "obj", full);
    cluster.change_map(|map| map.set_fullness(full, Fullness::Full).unwrap());
    let op = cluster.op(&name, write_full(100));
    assert_eq!(cluster.call_op(op.clone()).result, Err(OpError::NoSpace));

    cluster.change_map(|map| map.set_fullness(full, Fullness::None).unwrap());
    assert_eq!(cluster.call_op(op).result, Err(OpError::NoSpace));
    assert_eq!(cluster.call(&name, write_full(100)).result, Ok(()));
    cluster.assert_replicas_identical(cluster.pg_of(&name));
}

/// The same after the primary changes: the refusal is logged as the write's result,
/// so the next primary gives a copy of the request the same answer. (Remembered by
/// the refusing primary alone, it was lost with its copy of the PG, and a held copy
/// ran once there was room; the simulator's remap and space classes, seed 21752.)
#[test]
fn a_request_refused_for_space_is_refused_again_by_the_next_primary() {
    let mut cluster = Cluster::new(Config::default());
    let full = OsdId(2);
    let name = name_with_replica(&cluster, "obj", full);
    let pgid = cluster.pg_of(&name);
    cluster.change_map(|map| map.set_fullness(full, Fullness::Full).unwrap());
    let op = cluster.op(&name, write_full(100));
    assert_eq!(cluster.call_op(op.clone()).result, Err(OpError::NoSpace));

    cluster.change_map(|map| map.set_fullness(full, Fullness::None).unwrap());
    let refusing = cluster.primary_of(pgid);
    cluster.crash(refusing);
    cluster.run();
    assert_ne!(cluster.primary_of(pgid), refusing);
    let mut resend = op;
    resend.map_epoch = cluster.map.epoch;
    assert_eq!(cluster.call_op(resend).result, Err(OpError::NoSpace));
    assert_eq!(cluster.call(&name, write_full(100)).result, Ok(()));
    cluster.assert_replicas_identical(pgid);
}

/// A store that refuses to create a PG the map makes its OSD a member of (a device
/// with no room left even for metadata): the shard tries again on every tick, so the
/// PG is created once the store takes it. Left for the next map, which a quiet
/// cluster may not publish for long, the PG had no copy there and stayed degraded.
#[test]
fn a_pg_whose_creation_the_store_refused_is_created_on_a_later_tick() {
    let mut cluster = Cluster::new(Config::one_pg());
    let names: Vec<String> = (0..4).map(|i| format!("obj-{i}")).collect();
    for name in &names {
        assert_eq!(cluster.call(name, write_full(100)).result, Ok(()));
    }
    let pgid = cluster.pg_of(&names[0]);
    let wiped = cluster.acting(pgid)[2];
    // Wiped, so every copy it holds must be created again; its store refuses the
    // first transaction it gets, which is that creation.
    cluster.restart_process(wiped, true);
    let addr = cluster.addr(wiped, pgid);
    cluster.shard_mut(addr).store_mut().refuse_next(1);
    cluster.revive(wiped);
    cluster.run();
    assert!(
        cluster.shard(addr).pg(pgid).is_none(),
        "the refused creation left no PG behind"
    );
    assert_ne!(cluster.pg_state(pgid).name(), "active+clean");

    cluster.run_ticks(50);
    assert!(cluster.shard(addr).pg(pgid).is_some(), "created on a retry");
    let stat = cluster.pg_stat(pgid);
    assert_eq!(stat.state.name(), "active+clean", "{}", stat.reason);
    cluster.assert_replicas_identical(pgid);
    for name in &names {
        let data = cluster.local_data(wiped, name).expect("recovered");
        assert_eq!(data, vec![7; 100]);
    }
}

/// A replica that ignored RepOps as not following its log (it refused an earlier one
/// for want of space, to be resent) refuses pushes until its log catches up: a push
/// carries the primary's copy as of now, writes the replica has not logged included,
/// and the resent RepOps would then land on a copy newer than they are. (Seed 7278 of
/// the remap and space classes: a push that removed an object reached a replica whose
/// log lacked the removal; the resent write before it then found no object, failed,
/// and the PG peered again and again.) The primary, for its part, pushes nothing to a
/// replica that owes it a refused write.
#[test]
fn a_replica_behind_the_rep_ops_it_ignored_refuses_pushes() {
    let Tight {
        mut cluster,
        full,
        name,
        pgid,
        filler,
    } = tight_replica();
    let others = harness::names_in_pg(&cluster, pgid, "other", 2);
    let (keep, gone) = (&others[0], &others[1]);
    for other in [keep, gone] {
        assert_eq!(cluster.call(other, write_full(100)).result, Ok(()));
    }
    assert_eq!(cluster.call(&filler, write_full(14 * 1024)).result, Ok(()));
    let op = cluster.op(&name, write_full(12 * 1024));
    let held = cluster.send(op);
    cluster.run();
    assert!(!cluster.has_reply(held), "refused by {full}, held");
    // A removal frees space, so it runs; the full replica ignores its RepOp as not
    // following the one it refused.
    let op = cluster.op(gone, vec![OpCode::Remove]);
    let removal = cluster.send(op);
    cluster.run();
    assert!(!cluster.has_reply(removal));

    // A push reaches it meanwhile (one sent before the primary heard of the refusal):
    // our copy of `keep` as absent, which no log entry of the replica's explains.
    let primary = cluster.primary_of(pgid);
    let interval = (cluster.shard(cluster.addr(primary, pgid)).pg(pgid))
        .map(|pg| pg.interval_start())
        .expect("the primary holds the PG");
    let push = carmine_proto::PgPush {
        pgid,
        interval,
        map_epoch: cluster.map.epoch,
        objects: vec![carmine_proto::ObjectCopy {
            oid: keep.clone(),
            state: None,
            clones: Vec::new(),
        }],
        last: None,
        corrupt: Vec::new(),
        lacking: Vec::new(),
    };
    let (from, to) = (cluster.addr(primary, pgid), cluster.addr(full, pgid));
    cluster.inject(from, to, carmine_proto::Msg::PgPush(push));
    cluster.run();
    assert_eq!(
        cluster.local_data(full, keep),
        Some(vec![7; 100]),
        "a push applied ahead of the RepOps it ignored"
    );

    // Room again: the refused write and the removal are resent in order and land.
    assert_eq!(cluster.call(&filler, vec![OpCode::Remove]).result, Ok(()));
    assert_eq!(cluster.await_replies(held, 20).len(), 1);
    assert_eq!(cluster.await_replies(removal, 20).len(), 1);
    // The refused push is made again after the recovery backoff.
    cluster.tick_until(pgid, PgState::CLEAN);
    assert_eq!(cluster.pg_state(pgid).name(), "active+clean");
    cluster.assert_replicas_identical(pgid);
    assert_eq!(cluster.local_data(full, keep), Some(vec![7; 100]));
}

/// A min_size-1 pool: a write to an object the full replica lacks is refused for want
/// of space (the third member is away, so the primary alone would hold it). The
/// primary then applies a write to another object that nobody acknowledges, and dies.
/// The third member returns and leads the next interval, adopting the full replica's
/// log. When the old primary comes back and leads again, the later write is rolled
/// back (nobody acknowledged it, and every copy of the object holds the version
/// before it), and the object the full replica lacked is pushed to it once it has
/// room: nothing acknowledged is lost. (Before, the first write was acknowledged with
/// the primary's copy alone, the replica logging it without the object; a later
/// write to the same object nobody acknowledged then overwrote that only copy, and a
/// peering that rolled it back found no copy of the version before it: the
/// simulator's seed 28576 of remaps, space and snapshot trims, then, after the fix
/// for that one (a log continuing the latest interval's history is authoritative),
/// seed 34338 of expansion, remaps, space and snapshot trims.)
#[test]
fn a_write_the_primary_alone_would_hold_is_refused_and_its_return_loses_nothing() {
    a_returning_copy_loses_nothing_acknowledged(true);
}

/// The same, with the old primary back as a replica (its primary affinity is 0).
#[test]
fn a_write_the_primary_alone_would_hold_is_refused_and_its_return_as_a_replica_loses_nothing() {
    a_returning_copy_loses_nothing_acknowledged(false);
}

fn a_returning_copy_loses_nothing_acknowledged(leads_again: bool) {
    let Tight {
        mut cluster,
        full,
        filler,
        ..
    } = tight_replica_of(Config {
        min_size: Some(1),
        ..Config::default()
    });
    // The full replica comes last, so that the third member leads without the primary.
    let name = name_where(&cluster, "big", |pgid| {
        pgid != cluster.pg_of(&filler) && cluster.acting(pgid)[2] == full
    });
    let pgid = cluster.pg_of(&name);
    let other = harness::names_in_pg(&cluster, pgid, "other", 1).remove(0);
    assert_eq!(cluster.call(&other, write_full(10)).result, Ok(()));
    let acting = cluster.acting(pgid);
    let primary = acting[0];
    let third = acting[1];
    // The full replica misses a version it has no room for; the third member is away.
    misses_a_version_it_has_no_room_for(&mut cluster, full, &name, &filler, &[third]);

    // Refused: the primary alone would hold it.
    let refused = vec![OpCode::Write {
        offset: 0,
        data: bytes(b"refused"),
    }];
    assert_eq!(cluster.call(&name, refused).result, Err(OpError::NoSpace));
    // Applied by the primary only: its RepOp never leaves, and the primary dies.
    let later = cluster.op(
        &other,
        vec![OpCode::Write {
            offset: 0,
            data: bytes(b"later"),
        }],
    );
    let later = cluster.send(later);
    cluster.deliver_where(|env| env.to.0 == primary);
    assert_eq!(cluster.drop_where(|env| env.is_rep_op()), 1, "one RepOp");
    cluster.crash(primary);
    cluster.revive(third);
    cluster.run();
    cluster.run_ticks(5);
    assert!(!cluster.has_reply(later));
    assert_eq!(cluster.primary_of(pgid), third, "the next interval");
    let state = cluster.pg_stat(pgid).state;
    assert!(state.contains(PgState::ACTIVE), "{}", state.name());

    // The old primary's process restarts on its store, and room comes back on the
    // full replica.
    if !leads_again {
        cluster.change_map(|map| map.set_primary_affinity(primary, 0).unwrap());
        cluster.run();
    }
    cluster.restart(primary, false);
    free_room_and_await_clean(&mut cluster, &filler, pgid);
    let leader = if leads_again { primary } else { third };
    assert_eq!(cluster.primary_of(pgid), leader);
    assert_eq!(cluster.pg_stat(pgid).state.name(), "active+clean");
    cluster.assert_replicas_identical(pgid);
    let data = cluster.local_data(leader, &name).expect("held");
    assert_eq!(data, vec![7; 12 * 1024], "the acknowledged version");
    let data = cluster.local_data(leader, &other).expect("held");
    assert_eq!(data, vec![7; 10], "the unacknowledged write rolled back");
}
