//! Dups through peering: the requests of trimmed log entries travel with the log, so a
//! copy that adopts another's log (as a primary catching up) or is backfilled answers
//! a resent write from them, with its original version, instead of applying it twice.

mod harness;

use carmine_osd::OsdTuning;
use carmine_proto::OpCode;
use harness::{boot_as_primary, bytes, read, write, Cluster, Config};

/// Entries each PG log keeps: five writes trim the first.
const LOG_ENTRIES: usize = 4;

fn cluster() -> Cluster {
    Cluster::new(Config {
        pg_num: 1,
        tuning: OsdTuning {
            log_entries_max: LOG_ENTRIES,
            ..harness::tuning()
        },
        ..Config::default()
    })
}

#[test]
fn a_primary_that_adopted_the_log_answers_a_resend_trimmed_elsewhere() {
    let mut cluster = cluster();
    let pgid = cluster.pg_of("a");
    let acting = cluster.acting(pgid);
    let behind = acting[1];
    let op = cluster.op("a", vec![OpCode::Append { data: bytes(b"x") }]);
    let first = cluster.call_op(op.clone());
    assert_eq!(first.result, Ok(()));
    // `behind` misses the writes that trim the append from the others' logs; its own
    // log still holds the append's entry, which adopting their log drops.
    cluster.crash(behind);
    cluster.run();
    for i in 0..LOG_ENTRIES {
        write(&mut cluster, &format!("b{i}"), "y");
    }
    boot_as_primary(&mut cluster, pgid, behind, &[acting[0], acting[2]]);

    let mut resend = op;
    resend.map_epoch = cluster.map.epoch;
    let reply = cluster.call_op(resend);
    assert_eq!(reply.result, Ok(()));
    assert_eq!(reply.version, first.version, "answered as the first time");
    assert_eq!(reply.user_version, first.user_version);
    assert_eq!(
        read(&mut cluster, "a"),
        b"x",
        "the append was applied twice"
    );
    cluster.assert_all_replicas_identical();
}

#[test]
fn a_backfilled_copy_answers_a_resend_trimmed_before_it_was_filled() {
    let mut cluster = cluster();
    let pgid = cluster.pg_of("a");
    let acting = cluster.acting(pgid);
    let wiped = acting[2];
    let op = cluster.op("a", vec![OpCode::Append { data: bytes(b"x") }]);
    let first = cluster.call_op(op.clone());
    assert_eq!(first.result, Ok(()));
    for i in 0..LOG_ENTRIES {
        write(&mut cluster, &format!("b{i}"), "y");
    }
    // Comes back empty and is backfilled as a replica; then it leads.
    cluster.restart(wiped, true);
    cluster.run();
    assert_eq!(cluster.pg_stat(pgid).state.name(), "active+clean");
    boot_as_primary(&mut cluster, pgid, wiped, &[acting[0], acting[1]]);

    let mut resend = op;
    resend.map_epoch = cluster.map.epoch;
    let reply = cluster.call_op(resend);
    assert_eq!(reply.result, Ok(()));
    assert_eq!(reply.version, first.version, "answered as the first time");
    assert_eq!(
        read(&mut cluster, "a"),
        b"x",
        "the append was applied twice"
    );
    cluster.assert_all_replicas_identical();
}
