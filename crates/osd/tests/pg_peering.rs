//! Peering and recovery: after restarts (with the store kept or wiped), partitions and
//! primary changes, every acknowledged write is readable with its content, replicas
//! are identical, and a PG that cannot prove it has every acknowledged write stays
//! down instead of serving stale data.

mod harness;

use carmine_proto::{OpCode, OpOutput, PgState};
use carmine_types::OsdId;
use harness::{bytes, Cluster, Config};

fn write(cluster: &mut Cluster, name: &str, content: &str) {
    let reply = cluster.call(
        name,
        vec![OpCode::WriteFull {
            data: bytes(content.as_bytes()),
        }],
    );
    assert_eq!(reply.result, Ok(()), "write {name}");
}

fn read(cluster: &mut Cluster, name: &str) -> Option<Vec<u8>> {
    let reply = cluster.call(
        name,
        vec![OpCode::Read {
            offset: 0,
            length: 0,
        }],
    );
    match (reply.result, reply.outputs.first()) {
        (Ok(()), Some(OpOutput::Data(data))) => Some(data.to_vec()),
        (Err(carmine_proto::OpError::NotFound), _) => None,
        (other, _) => panic!("read {name}: {other:?}"),
    }
}

fn names(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("obj-{i:03}")).collect()
}

fn assert_clean_everywhere(cluster: &Cluster) {
    let pgs: Vec<_> = cluster.map.all_pgs().collect();
    for pgid in pgs {
        let state = cluster.pg_stat(pgid).state;
        assert_eq!(state.name(), "active+clean", "{pgid}");
    }
    cluster.assert_all_replicas_identical();
}

#[test]
fn an_osd_restarting_with_an_empty_store_is_refilled_and_nothing_is_lost() {
    let mut cluster = Cluster::new(Config::default());
    let objects = names(40);
    for name in &objects {
        write(&mut cluster, name, &format!("v1 of {name}"));
    }
    cluster.restart(OsdId(1), true);
    cluster.run();
    assert_clean_everywhere(&cluster);
    for name in &objects {
        assert_eq!(
            read(&mut cluster, name),
            Some(format!("v1 of {name}").into_bytes())
        );
    }
}

#[test]
fn every_osd_restarting_empty_in_turn_loses_nothing() {
    let mut cluster = Cluster::new(Config::default());
    let objects = names(30);
    for (round, osd) in [0, 1, 2, 0, 2].into_iter().enumerate() {
        for name in &objects {
            write(&mut cluster, name, &format!("round {round} {name}"));
        }
        cluster.restart(OsdId(osd), true);
        cluster.run();
        assert_clean_everywhere(&cluster);
        for name in &objects {
            let expected = format!("round {round} {name}").into_bytes();
            assert_eq!(read(&mut cluster, name), Some(expected), "round {round}");
        }
    }
}

#[test]
fn a_restart_keeping_the_store_recovers_only_what_was_missed() {
    let mut cluster = Cluster::new(Config::default());
    let objects = names(20);
    for name in &objects {
        write(&mut cluster, name, "old");
    }
    cluster.crash(OsdId(2));
    cluster.run();
    for name in objects.iter().step_by(2) {
        write(&mut cluster, name, "new");
    }
    assert_eq!(cluster.call("obj-001", vec![OpCode::Remove]).result, Ok(()));
    let epoch = cluster.restart(OsdId(2), false);
    assert!(epoch.0 > 0);
    cluster.run();
    assert_clean_everywhere(&cluster);
    for (i, name) in objects.iter().enumerate() {
        let expected = match i {
            1 => None,
            i if i % 2 == 0 => Some(b"new".to_vec()),
            _ => Some(b"old".to_vec()),
        };
        assert_eq!(read(&mut cluster, name), expected, "{name}");
    }
}

#[test]
fn writes_that_reach_objects_before_recovery_does_are_pushed_first() {
    let mut cluster = Cluster::new(Config {
        pg_num: 1,
        ..Config::default()
    });
    let objects = names(40);
    for name in &objects {
        write(&mut cluster, name, "base");
    }
    let pgid = cluster.pg_of("obj-000");
    let replica = cluster.acting(pgid)[1];
    cluster.restart(replica, true);
    // Deliver messages one at a time until the PG is active but still recovering.
    for _ in 0..100_000 {
        let state = cluster.pg_stat(pgid).state;
        if state.contains(PgState::ACTIVE) {
            break;
        }
        assert!(
            cluster.step(),
            "the network went quiet before the PG activated"
        );
    }
    assert!(!cluster.pg_stat(pgid).state.contains(PgState::CLEAN));
    for name in objects.iter().rev().take(10) {
        let reply = cluster.call(
            name,
            vec![OpCode::Append {
                data: bytes(b"+more"),
            }],
        );
        assert_eq!(reply.result, Ok(()));
    }
    cluster.run();
    assert_clean_everywhere(&cluster);
    for (i, name) in objects.iter().enumerate() {
        let expected: &[u8] = if i >= 30 { b"base+more" } else { b"base" };
        assert_eq!(
            read(&mut cluster, name).as_deref(),
            Some(expected),
            "{name}"
        );
    }
}

/// A size-2 PG whose object `x` is at v1 on `b` and at v2 on `a` alone (acknowledged
/// with min_size 1), with `a` crashed and `b` back: down, since serving `b` would lose
/// the acknowledged v2. Returns the cluster, the PG, `a` and `b`.
fn down_for_the_newer_copy() -> (Cluster, carmine_types::PgId, OsdId, OsdId) {
    let mut cluster = Cluster::new(Config {
        osd_count: 3,
        size: 2,
        min_size: Some(1),
        pg_num: 1,
        ..Config::default()
    });
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
    (cluster, pgid, a, b)
}

#[test]
fn a_pg_whose_only_current_copy_is_down_stays_down_until_it_returns() {
    let (mut cluster, _, a, _) = down_for_the_newer_copy();
    let op = cluster.op(
        "x",
        vec![OpCode::Read {
            offset: 0,
            length: 0,
        }],
    );
    let reqid = cluster.send(op.clone());
    cluster.run();
    assert!(!cluster.has_reply(reqid), "a down PG answered");
    cluster.revive(a);
    cluster.run();
    // The primary changed: the client resends (the objecter does so on the new map).
    let mut resend = op;
    resend.map_epoch = cluster.map.epoch;
    cluster.send(resend);
    cluster.run();
    let reply = cluster
        .take_replies_for(reqid)
        .pop()
        .expect("answered once up");
    assert_eq!(reply.outputs, vec![OpOutput::Data(bytes(b"v2"))]);
    assert_clean_everywhere(&cluster);
}

/// The same down PG, and an operator who declares the OSD with the newer copy lost
/// (`osd lost`): peering stops waiting for it and the PG serves what the remaining
/// copy holds, the write only the lost OSD held given up, as Ceph does. When the OSD
/// returns, the history the PG went on with stands (it was activated later): the
/// returning copy's write is divergent and rolled back, with or without newer writes
/// (Ceph would take the returning copy's newer history back where no write followed;
/// Carmine's peering ranks by the last activation first).
#[test]
fn a_down_pg_goes_on_without_an_osd_marked_lost() {
    for write_before_return in [true, false] {
        let (mut cluster, pgid, a, b) = down_for_the_newer_copy();
        // Another OSD marked lost changes nothing: the PG still waits for `a`.
        let other = (cluster.osds().into_iter()).find(|o| *o != a && *o != b);
        let other = other.expect("three OSDs");
        cluster.crash(other);
        cluster.change_map(|map| map.mark_lost(other).expect("down"));
        cluster.run();
        let state = cluster.pg_stat(pgid).state;
        assert!(state.contains(PgState::DOWN), "{}", state.name());

        cluster.change_map(|map| map.mark_lost(a).expect("down"));
        cluster.run();
        cluster.run_ticks(5);
        let state = cluster.pg_stat(pgid).state;
        assert!(state.contains(PgState::ACTIVE), "{}", state.name());
        assert_eq!(read(&mut cluster, "x").as_deref(), Some(&b"v1"[..]));
        if write_before_return {
            write(&mut cluster, "x", "v3");
        }
        cluster.revive(a);
        cluster.run();
        cluster.run_ticks(10);
        let expected: &[u8] = if write_before_return { b"v3" } else { b"v1" };
        assert_eq!(read(&mut cluster, "x").as_deref(), Some(expected));
        assert_clean_everywhere(&cluster);
    }
}

/// `osd purge` of the OSD a down PG waits for: the map no longer has it, so peering
/// takes it as lost (as Ceph's PriorSet takes an OSD that no longer exists) and the
/// PG goes on with the older copy, its CRUSH placement now without the purged OSD.
#[test]
fn a_down_pg_goes_on_without_a_purged_osd() {
    let (mut cluster, pgid, a, _) = down_for_the_newer_copy();
    cluster.change_map(|map| map.purge_osd(a).expect("down"));
    cluster.run();
    cluster.run_ticks(5);
    let state = cluster.pg_stat(pgid).state;
    assert!(state.contains(PgState::ACTIVE), "{}", state.name());
    assert_eq!(read(&mut cluster, "x").as_deref(), Some(&b"v1"[..]));
    write(&mut cluster, "x", "v3");
    assert_eq!(read(&mut cluster, "x").as_deref(), Some(&b"v3"[..]));
}

#[test]
fn an_unacknowledged_write_on_a_failed_primary_is_rolled_back() {
    let mut cluster = Cluster::new(Config {
        pg_num: 1,
        ..Config::default()
    });
    write(&mut cluster, "d", "acked");
    let pgid = cluster.pg_of("d");
    let primary = cluster.primary_of(pgid);
    // The primary applies a write, but its RepOps never leave: it dies.
    let op = cluster.op(
        "d",
        vec![OpCode::WriteFull {
            data: bytes(b"never acked"),
        }],
    );
    let lost = cluster.send(op);
    cluster.crash(primary);
    cluster.run();
    assert!(!cluster.has_reply(lost));
    write(&mut cluster, "d", "second");
    cluster.restart(primary, false);
    cluster.run();
    assert_clean_everywhere(&cluster);
    assert_eq!(read(&mut cluster, "d"), Some(b"second".to_vec()));
}

/// A primary comes back with a log that still reaches the authoritative one's newest
/// entries but starts further back than its tail: the entries the authoritative copy
/// trimmed are history both share, not divergent ones. Taking them for divergent
/// marked this copy's current objects missing and pulled them; where no other copy
/// held them, the PG went incomplete (the simulator's seed 10963, remaps and space).
#[test]
fn a_returning_primary_pulls_only_what_changed_not_what_the_other_log_trimmed() {
    let mut cluster = Cluster::new(Config {
        pg_num: 1,
        tuning: carmine_osd::OsdTuning {
            log_entries_max: 8,
            ..harness::tuning()
        },
        ..Config::default()
    });
    for i in 0..4 {
        write(&mut cluster, "early", &format!("early v{i}"));
    }
    for i in 0..4 {
        write(&mut cluster, "later", &format!("later v{i}"));
    }
    let pgid = cluster.pg_of("early");
    let primary = cluster.primary_of(pgid);
    cluster.crash(primary);
    cluster.run();
    // Past the returning copy's newest entry, and far enough that the others trim
    // every entry of "early" from their logs.
    for i in 4..8 {
        write(&mut cluster, "later", &format!("later v{i}"));
    }
    let survivor = cluster.primary_of(pgid);
    let addr = cluster.addr(survivor, pgid);
    let tail = cluster.shard(addr).pg(pgid).expect("held").info().log_tail;
    assert!(
        tail.version >= 4,
        "the writes of \"early\" are trimmed ({tail:?})"
    );
    cluster.revive(primary);
    assert_eq!(cluster.primary_of(pgid), primary, "it leads the PG again");
    let mut pulled = std::collections::BTreeSet::new();
    loop {
        for envelope in cluster.pending() {
            if let carmine_proto::Msg::PgPull(pull) = &envelope.msg {
                pulled.extend(pull.oids.iter().cloned());
            }
        }
        if !cluster.step() {
            break;
        }
    }
    assert_eq!(pulled, ["later".to_string()].into(), "what it pulled");
    cluster.run();
    assert_clean_everywhere(&cluster);
    assert_eq!(
        read(&mut cluster, "early").as_deref(),
        Some(&b"early v3"[..])
    );
    assert_eq!(
        read(&mut cluster, "later").as_deref(),
        Some(&b"later v7"[..])
    );
}
