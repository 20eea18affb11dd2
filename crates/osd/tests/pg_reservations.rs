//! Backfill and recovery reservations (`reserver.rs`, `pg/reserve.rs`): with
//! `max_backfills` = 1, an OSD marked in that gains several PGs is backfilled one PG
//! at a time, the others showing `backfill_wait`; an interval change releases held
//! and queued slots; a lost request is sent again; a stale request leaks nothing;
//! and a client write to an object still missing on the newcomer is not held back.

mod harness;

use carmine_clustermap::WEIGHT_IN;
use carmine_osd::OsdTuning;
use carmine_proto::{Msg, OpCode, PgReserve, PgState, ReserveKind};
use carmine_types::{OsdId, PgId};
use harness::{bytes, read, write, Cluster, Config, Envelope, TICK};

const NEWCOMER: OsdId = OsdId(4);
/// Ticks (of [`TICK`]) a test waits for a resend: well past the resend interval.
const TICKS_MAX: usize = 100;

/// Five OSDs, the fifth out (and never a primary, so every PG that gains it
/// backfills it as a replica), 12 PGs of 3 copies, 120 objects, logs of 8 entries.
fn cluster_with_one_out() -> (Cluster, Vec<String>) {
    // A short log: the newcomer's old copies are no longer covered, so they are
    // backfilled, not recovered from the log.
    let tuning = OsdTuning {
        max_backfills: 1,
        log_entries_max: 8,
        ..harness::tuning()
    };
    let mut cluster = Cluster::new(Config {
        osd_count: 5,
        pg_num: 12,
        tuning,
        ..Config::default()
    });
    cluster.change_map(|map| {
        map.reweight(NEWCOMER, 0).unwrap();
        map.set_primary_affinity(NEWCOMER, 0).unwrap();
    });
    cluster.run();
    let names: Vec<String> = (0..120).map(|i| format!("obj-{i:03}")).collect();
    for name in &names {
        write(&mut cluster, name, &format!("v1 of {name}"));
    }
    (cluster, names)
}

fn mark_in(cluster: &mut Cluster) {
    cluster.change_map(|map| map.reweight(NEWCOMER, WEIGHT_IN).unwrap());
}

/// The PGs whose acting set holds the newcomer.
fn gaining(cluster: &Cluster) -> Vec<PgId> {
    let pgids: Vec<PgId> = cluster.map.all_pgs().collect();
    pgids
        .into_iter()
        .filter(|&pgid| cluster.acting(pgid).contains(&NEWCOMER))
        .collect()
}

fn state(cluster: &Cluster, pgid: PgId) -> PgState {
    cluster.pg_stat(pgid).state
}

/// Active and pushing (holding its reservations): backfilling, or recovering from
/// the log (the newcomer's old copy of a PG written less since is still covered).
fn pushing(state: PgState) -> bool {
    let busy = state.contains(PgState::BACKFILLING) || state.contains(PgState::RECOVERING);
    state.contains(PgState::ACTIVE) && busy && !waiting(state)
}

fn waiting(state: PgState) -> bool {
    state.contains(PgState::BACKFILL_WAIT) || state.contains(PgState::RECOVERY_WAIT)
}

fn assert_all_clean(cluster: &Cluster) {
    let pgids: Vec<PgId> = cluster.map.all_pgs().collect();
    for pgid in pgids {
        assert_eq!(state(cluster, pgid).name(), "active+clean", "{pgid}");
    }
    cluster.assert_all_replicas_identical();
}

fn assert_no_slot_held(cluster: &Cluster) {
    for osd in cluster.osds() {
        for pgid in cluster.map.all_pgs() {
            let counts = cluster.shard(cluster.addr(osd, pgid)).reservation_counts();
            assert_eq!(counts, [0; 4], "osd.{} still holds slots", osd.0);
        }
    }
}

#[test]
fn an_osd_marked_in_is_backfilled_one_pg_at_a_time() {
    let (mut cluster, names) = cluster_with_one_out();
    mark_in(&mut cluster);
    let pgs = gaining(&cluster);
    assert!(pgs.len() >= 3, "the newcomer gains {} PGs", pgs.len());
    let newcomer_shard = cluster.addr(NEWCOMER, pgs[0]);
    let (mut most_pushing, mut most_waiting, mut steps) = (0, 0, 0);
    let mut ever_pushed = std::collections::BTreeSet::new();
    let mut backfill_waits = 0;
    while cluster.step() {
        steps += 1;
        let states: Vec<(PgId, PgState)> = pgs.iter().map(|&p| (p, state(&cluster, p))).collect();
        let now_pushing: Vec<PgId> = (states.iter())
            .filter(|(_, s)| pushing(*s))
            .map(|(p, _)| *p)
            .collect();
        let now_waiting = states.iter().filter(|(_, s)| waiting(*s)).count();
        backfill_waits += (states.iter())
            .filter(|(_, s)| s.contains(PgState::BACKFILL_WAIT))
            .count();
        assert!(
            now_pushing.len() <= 1,
            "step {steps}: {now_pushing:?} push into osd.4 at once"
        );
        let remote = cluster.shard(newcomer_shard).reservation_counts()[2];
        assert!(remote <= 1, "step {steps}: {remote} remote slots held");
        ever_pushed.extend(now_pushing.iter().copied());
        most_pushing = most_pushing.max(now_pushing.len());
        most_waiting = most_waiting.max(now_waiting);
    }
    assert_eq!(most_pushing, 1);
    assert!(most_waiting >= 2, "at most {most_waiting} PGs waited");
    assert!(backfill_waits > 0, "no PG showed backfill_wait");
    assert_eq!(ever_pushed.len(), pgs.len(), "every PG pushed in turn");
    assert_all_clean(&cluster);
    assert_no_slot_held(&cluster);
    for name in names.iter().step_by(17) {
        assert_eq!(read(&mut cluster, name), format!("v1 of {name}").as_bytes());
    }
}

#[test]
fn more_slots_let_more_pgs_backfill_at_once() {
    let (mut cluster, _) = cluster_with_one_out();
    let tuning = OsdTuning {
        max_backfills: 3,
        log_entries_max: 8,
        ..harness::tuning()
    };
    let addrs: Vec<_> = (cluster.osds().into_iter())
        .flat_map(|osd| {
            let pgids: Vec<PgId> = cluster.map.all_pgs().collect();
            pgids.into_iter().map(move |pgid| (osd, pgid))
        })
        .map(|(osd, pgid)| cluster.addr(osd, pgid))
        .collect();
    for addr in addrs {
        cluster.shard_mut(addr).set_tuning(tuning);
    }
    mark_in(&mut cluster);
    let pgs = gaining(&cluster);
    let newcomer_shard = cluster.addr(NEWCOMER, pgs[0]);
    let mut most = 0;
    while cluster.step() {
        let remote = cluster.shard(newcomer_shard).reservation_counts()[2];
        assert!(remote <= 3, "{remote} remote slots held");
        most = most.max(remote);
    }
    assert!(most >= 2, "at most {most} PGs backfilled at once");
    assert_all_clean(&cluster);
    assert_no_slot_held(&cluster);
}

#[test]
fn an_interval_change_releases_held_and_queued_reservations() {
    let (mut cluster, _) = cluster_with_one_out();
    mark_in(&mut cluster);
    let pgs = gaining(&cluster);
    let newcomer_shard = cluster.addr(NEWCOMER, pgs[0]);
    // Until one PG backfills and another waits for the newcomer's slot.
    loop {
        assert!(cluster.step(), "never one backfilling and one waiting");
        let counts = cluster.shard(newcomer_shard).reservation_counts();
        if counts[2] == 1 && counts[3] >= 1 {
            break;
        }
    }
    // The newcomer goes out again: every PG that gained it starts a new interval.
    cluster.change_map(|map| map.reweight(NEWCOMER, 0).unwrap());
    cluster.run();
    assert_no_slot_held(&cluster);
    assert_all_clean(&cluster);
    // And in again: the backfills start over and finish.
    mark_in(&mut cluster);
    cluster.run();
    assert_all_clean(&cluster);
    assert_no_slot_held(&cluster);
}

#[test]
fn a_lost_reservation_request_is_sent_again() {
    let (mut cluster, _) = cluster_with_one_out();
    mark_in(&mut cluster);
    let is_request = |e: &Envelope| {
        matches!(&e.msg, Msg::PgReserve(r) if r.kind == ReserveKind::Request) && e.to.0 == NEWCOMER
    };
    cluster.deliver_where(|e| !is_request(e));
    assert!(cluster.drop_where(is_request) >= 1, "a request is lost");
    cluster.run_network();
    let pgs = gaining(&cluster);
    let waiting_count = (pgs.iter())
        .filter(|&&pgid| waiting(state(&cluster, pgid)))
        .count();
    assert!(waiting_count >= 1, "a PG waits for the lost grant");
    let mut ticks = 0;
    while !pgs
        .iter()
        .all(|&pgid| state(&cluster, pgid).name() == "active+clean")
    {
        assert!(ticks < TICKS_MAX, "still not clean after {ticks} ticks");
        cluster.advance(TICK);
        cluster.run_network();
        ticks += 1;
    }
    assert!(ticks > 1, "not before the resend interval ({ticks} ticks)");
    assert_all_clean(&cluster);
    assert_no_slot_held(&cluster);
}

#[test]
fn a_stale_request_is_rejected_and_holds_no_slot() {
    let (mut cluster, _) = cluster_with_one_out();
    mark_in(&mut cluster);
    cluster.run();
    assert_all_clean(&cluster);
    let pgid = gaining(&cluster)[0];
    let primary = cluster.primary_of(pgid);
    let from = cluster.addr(primary, pgid);
    let to = cluster.addr(NEWCOMER, pgid);
    // A request from an interval that ended before the newcomer joined.
    let stale = PgReserve {
        pgid,
        interval: carmine_types::Epoch(1),
        map_epoch: cluster.map.epoch,
        round: 1,
        kind: ReserveKind::Request,
        priority: 100,
    };
    cluster.inject(from, to, Msg::PgReserve(stale));
    let answers = {
        cluster.deliver_where(|e| e.to == to);
        cluster.take_where(|e| matches!(e.msg, Msg::PgReserve(_)))
    };
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert!(
        matches!(&answers[0].msg, Msg::PgReserve(r) if r.kind == ReserveKind::Reject),
        "{answers:?}"
    );
    assert_no_slot_held(&cluster);
}

#[test]
fn a_write_to_an_object_the_newcomer_lacks_does_not_wait_for_a_reservation() {
    let (mut cluster, names) = cluster_with_one_out();
    mark_in(&mut cluster);
    // Every grant is held back: peering and activation go through, but no PG gets
    // to push in the background.
    let is_grant =
        |e: &Envelope| matches!(&e.msg, Msg::PgReserve(r) if r.kind == ReserveKind::Grant);
    let mut grants = Vec::new();
    let mut run_without_grants = |cluster: &mut Cluster| loop {
        grants.extend(cluster.take_where(is_grant));
        if !cluster.step() {
            break;
        }
    };
    run_without_grants(&mut cluster);
    let pgs = gaining(&cluster);
    let held: Vec<PgId> = (pgs.iter().copied())
        .filter(|&pgid| waiting(state(&cluster, pgid)))
        .collect();
    assert_eq!(held.len(), pgs.len(), "every PG waits");
    let name = (names.iter())
        .find(|name| held.contains(&cluster.pg_of(name)))
        .expect("an object in a waiting PG")
        .clone();
    let op = cluster.op(&name, vec![OpCode::WriteFull { data: bytes(b"v2") }]);
    let reqid = cluster.send(op);
    run_without_grants(&mut cluster);
    let replies = cluster.take_replies_for(reqid);
    assert_eq!(
        replies.len(),
        1,
        "the write is answered without a reservation"
    );
    assert_eq!(replies[0].result, Ok(()));
    let pgid = cluster.pg_of(&name);
    assert!(
        waiting(state(&cluster, pgid)),
        "{}",
        state(&cluster, pgid).name()
    );
    // The newcomer's copy of the written object is complete already.
    let local = cluster.local_read(
        NEWCOMER,
        &name,
        vec![OpCode::Read {
            offset: 0,
            length: 0,
        }],
    );
    assert_eq!(local.result, Ok(()));
    for grant in grants {
        cluster.inject(grant.from, grant.to, grant.msg);
    }
    cluster.run();
    assert_all_clean(&cluster);
    assert_eq!(read(&mut cluster, &name), b"v2");
}
