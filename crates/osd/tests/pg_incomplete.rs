//! `down` versus `incomplete`: a PG whose past interval has no member up to ask is
//! down; a PG whose members all answer but whose newest history is held only by a
//! copy that was never fully backfilled is incomplete. Neither serves, and both
//! recover once the copy they need comes back.

mod harness;

use carmine_osd::OsdTuning;
use carmine_proto::{OpCode, OpOutput, PgState};
use harness::{bytes, write, Cluster, Config};

fn read_op(cluster: &mut Cluster, name: &str) -> carmine_proto::OsdOp {
    cluster.op(
        name,
        vec![OpCode::Read {
            offset: 0,
            length: 0,
        }],
    )
}

/// Two copies, min_size 1, and a log short enough that an empty copy is backfilled
/// (the log no longer covers every object) rather than recovered from the log.
fn two_copy_cluster() -> Cluster {
    Cluster::new(Config {
        osd_count: 3,
        size: 2,
        min_size: Some(1),
        pg_num: 1,
        tuning: OsdTuning {
            log_entries_max: 8,
            ..harness::tuning()
        },
        ..Config::default()
    })
}

#[test]
fn a_pg_whose_only_newest_copy_is_a_partial_backfill_is_incomplete_not_down() {
    let mut cluster = two_copy_cluster();
    let names: Vec<String> = (0..40).map(|i| format!("obj-{i:03}")).collect();
    for name in &names {
        write(&mut cluster, name, &format!("v1 of {name}"));
    }
    let pgid = cluster.pg_of(&names[0]);
    let [complete, target] = cluster.acting(pgid)[..] else {
        panic!("size 2")
    };
    assert_eq!(cluster.primary_of(pgid), complete);
    // `target` comes back empty; it is activated as a backfill target and receives
    // a few objects before the complete copy dies.
    cluster.restart(target, true);
    let mut pushes = 0;
    while pushes < 3 {
        let Some(envelope) = cluster.pending().first().map(|e| (*e).clone()) else {
            panic!("the network went quiet before the backfill started");
        };
        if matches!(envelope.msg, carmine_proto::Msg::PgPush(_)) {
            pushes += 1;
        }
        cluster.step();
    }
    let stat = cluster.pg_stat(pgid);
    assert!(
        stat.state.contains(PgState::BACKFILLING),
        "{stat:?} {}",
        stat.state.name()
    );
    cluster.crash(complete);
    cluster.run();

    let state = cluster.pg_stat(pgid).state;
    assert!(state.contains(PgState::INCOMPLETE), "{}", state.name());
    assert!(!state.contains(PgState::DOWN), "{}", state.name());
    assert!(!state.contains(PgState::ACTIVE), "{}", state.name());
    let reason = cluster.pg_stat(pgid).reason;
    let expected = format!("incomplete: the newest copy ({target}, at ");
    assert!(reason.starts_with(&expected), "{reason}");
    let lacking = "objects and no reachable copy with its history holds them";
    assert!(reason.contains(lacking), "{reason}");
    assert!(
        reason.ends_with(&format!("not answering: {complete}")),
        "{reason}"
    );
    let op = read_op(&mut cluster, &names[39]);
    let reqid = cluster.send(op.clone());
    cluster.run();
    assert!(!cluster.has_reply(reqid), "an incomplete PG answered");

    // The complete copy returns: peering uses it, and nothing was lost.
    cluster.restart(complete, false);
    cluster.run();
    let mut resend = op;
    resend.map_epoch = cluster.map.epoch;
    cluster.send(resend);
    cluster.run();
    let reply = cluster.take_replies_for(reqid).pop().expect("answered");
    let expected = format!("v1 of {}", names[39]);
    assert_eq!(
        reply.outputs,
        vec![OpOutput::Data(bytes(expected.as_bytes()))]
    );
    for name in &names {
        let op = read_op(&mut cluster, name);
        let reply = cluster.call_op(op);
        let expected = format!("v1 of {name}");
        assert_eq!(
            reply.outputs,
            vec![OpOutput::Data(bytes(expected.as_bytes()))]
        );
    }
    assert_eq!(cluster.pg_stat(pgid).state.name(), "active+clean");
    cluster.assert_all_replicas_identical();
}

#[test]
fn a_pg_whose_past_interval_has_no_member_up_is_down_not_incomplete() {
    let mut cluster = two_copy_cluster();
    let pgid = cluster.pg_of("x");
    write(&mut cluster, "x", "v1");
    let [a, b] = cluster.acting(pgid)[..] else {
        panic!("size 2")
    };
    cluster.crash(b);
    cluster.run();
    write(&mut cluster, "x", "v2"); // acknowledged by `a` alone (min_size 1)
    cluster.crash(a);
    cluster.run();
    cluster.revive(b);
    cluster.run();
    let state = cluster.pg_stat(pgid).state;
    assert!(state.contains(PgState::DOWN), "{}", state.name());
    assert!(!state.contains(PgState::INCOMPLETE), "{}", state.name());
    // The report says why, naming the OSD it waits for.
    let reason = cluster.pg_stat(pgid).reason;
    assert!(reason.starts_with("down: interval e"), "{reason}");
    assert!(reason.ends_with(&format!("waiting for {a}")), "{reason}");
    cluster.revive(a);
    cluster.run();
    assert_eq!(cluster.pg_stat(pgid).state.name(), "active+clean");
    assert_eq!(cluster.pg_stat(pgid).reason, "");
}
