//! Error entries: a write that fails is logged (Ceph's `record_write_error`), so a
//! resend that reaches another primary after the client saw the failure gets the same
//! failure, even when the object changed so that the write would now succeed.

mod harness;

use carmine_osd::OsdTuning;
use carmine_proto::{OpCode, OpError, OpOutput};
use harness::{boot_as_primary, bytes, read, write, Cluster, Config};

fn stat_version(cluster: &mut Cluster, name: &str) -> u64 {
    let reply = cluster.call(name, vec![OpCode::Stat]);
    match reply.outputs.first() {
        Some(OpOutput::Stat { version, .. }) => *version,
        other => panic!("stat {name}: {:?} {other:?}", reply.result),
    }
}

/// A remove of an absent object fails on the first primary; the object is then
/// created; the primary dies; the resend of the remove reaches the new primary.
#[test]
fn a_new_primary_answers_a_resend_of_a_failed_write_with_its_error() {
    let mut cluster = Cluster::new(Config::default());
    let pgid = cluster.pg_of("w");
    let first_primary = cluster.primary_of(pgid);
    let remove = cluster.op("w", vec![OpCode::Remove]);
    let failed = cluster.call_op(remove.clone());
    assert_eq!(failed.result, Err(OpError::NotFound));
    // The failure took a PG version; it changed no object.
    assert_eq!(cluster.pg_stat(pgid).last_update, failed.version);
    write(&mut cluster, "w", "data");
    let version_before = stat_version(&mut cluster, "w");
    cluster.assert_replicas_identical(pgid);

    cluster.crash(first_primary);
    cluster.run();
    let new_primary = cluster.primary_of(pgid);
    assert_ne!(new_primary, first_primary);
    let mut resend = remove;
    resend.map_epoch = cluster.map.epoch;
    let again = cluster.call_op(resend);
    assert_eq!(again.result, Err(OpError::NotFound), "the resend ran again");
    assert_eq!(again.version, failed.version, "answered from the log");
    assert_eq!(read(&mut cluster, "w"), b"data");
    assert_eq!(stat_version(&mut cluster, "w"), version_before);
    cluster.assert_replicas_identical(pgid);
}

/// An exclusive create that found the object fails; the object is then removed; a
/// resend to the same primary, and then to a new one, gets the original failure.
#[test]
fn a_failed_guarded_create_stays_failed_on_every_primary() {
    let mut cluster = Cluster::new(Config::default());
    let pgid = cluster.pg_of("c");
    write(&mut cluster, "c", "old");
    let version_before = stat_version(&mut cluster, "c");
    let create = cluster.op(
        "c",
        vec![
            OpCode::Create { exclusive: true },
            OpCode::WriteFull {
                data: bytes(b"new"),
            },
        ],
    );
    let failed = cluster.call_op(create.clone());
    assert_eq!(failed.result, Err(OpError::Exists));
    assert_eq!(failed.user_version, 0);
    // The error entry does not touch the object's version.
    assert_eq!(stat_version(&mut cluster, "c"), version_before);
    let removed = cluster.call("c", vec![OpCode::Remove]);
    assert_eq!(removed.result, Ok(()));

    let again = cluster.call_op(create.clone());
    assert_eq!(again.result, Err(OpError::Exists));
    let old_primary = cluster.primary_of(pgid);
    cluster.crash(old_primary);
    cluster.run();
    let mut resend = create;
    resend.map_epoch = cluster.map.epoch;
    let again = cluster.call_op(resend);
    assert_eq!(again.result, Err(OpError::Exists), "the resend ran again");
    assert_eq!(again.version, failed.version);
    let stat = cluster.call("c", vec![OpCode::Stat]);
    assert_eq!(stat.result, Err(OpError::NotFound));
    // The old primary comes back and catches up: every copy holds the same log.
    cluster.revive(old_primary);
    cluster.run();
    cluster.assert_all_replicas_identical();
}

/// Entries each PG log keeps in the trimming test.
const LOG_ENTRIES: usize = 4;

/// The error entry is trimmed (into a dup carrying the error) on the copies that
/// stayed up; a copy that was down meanwhile adopts their log and dups, leads, and
/// answers the resend with the error.
#[test]
fn a_failure_trimmed_into_a_dup_travels_with_the_log() {
    let mut cluster = Cluster::new(Config {
        pg_num: 1,
        tuning: OsdTuning {
            log_entries_max: LOG_ENTRIES,
            ..harness::tuning()
        },
        ..Config::default()
    });
    let pgid = cluster.pg_of("a");
    let acting = cluster.acting(pgid);
    let behind = acting[1];
    let mismatch = cluster.op(
        "a",
        vec![
            OpCode::AssertVersion { version: 1 },
            OpCode::Append { data: bytes(b"x") },
        ],
    );
    let failed = cluster.call_op(mismatch.clone());
    assert_eq!(failed.result, Err(OpError::NotFound));
    cluster.crash(behind);
    cluster.run();
    // Four more entries: the error entry is trimmed, and `behind`'s log ends at the
    // others' tail (a prefix of their history, not a backfill).
    write(&mut cluster, "a", "y");
    for i in 0..LOG_ENTRIES - 1 {
        write(&mut cluster, &format!("b{i}"), "z");
    }
    boot_as_primary(&mut cluster, pgid, behind, &[acting[0], acting[2]]);

    let mut resend = mismatch;
    resend.map_epoch = cluster.map.epoch;
    let again = cluster.call_op(resend);
    assert_eq!(again.result, failed.result, "the resend ran again");
    assert_eq!(again.version, failed.version);
    assert_eq!(read(&mut cluster, "a"), b"y");
    cluster.assert_all_replicas_identical();
}

/// A failure logged only on a primary that dies before its replicas get the entry is
/// divergent: never answered, dropped when that copy comes back, and it makes nothing
/// missing there. The client's resend runs afresh on the new primary.
#[test]
fn a_divergent_error_entry_is_dropped() {
    let mut cluster = Cluster::new(Config::default());
    let pgid = cluster.pg_of("d");
    write(&mut cluster, "d", "one");
    let old_primary = cluster.primary_of(pgid);
    let create = cluster.op("d", vec![OpCode::Create { exclusive: true }]);
    let reqid = cluster.send(create.clone());
    // The replicas never get the entry.
    cluster.drop_where(|env| env.is_rep_op());
    cluster.run();
    assert!(
        !cluster.has_reply(reqid),
        "answered before the replicas had it"
    );
    cluster.crash(old_primary);
    cluster.run();
    // Meanwhile the object goes away: the resend now succeeds.
    let removed = cluster.call("d", vec![OpCode::Remove]);
    assert_eq!(removed.result, Ok(()));
    let mut resend = create;
    resend.map_epoch = cluster.map.epoch;
    let created = cluster.call_op(resend);
    assert_eq!(created.result, Ok(()));
    cluster.revive(old_primary);
    cluster.run();
    assert_eq!(cluster.pg_stat(pgid).state.name(), "active+clean");
    cluster.assert_all_replicas_identical();
    let stat = cluster.call("d", vec![OpCode::Stat]);
    assert_eq!(stat.result, Ok(()));
}
