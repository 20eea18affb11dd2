//! Backfill and recovery reservations (`reserver.rs`, `pg/reserve.rs`): with
//! `max_backfills` = 1, an OSD marked in that gains several PGs is backfilled one PG
//! at a time, the others showing `backfill_wait`; an interval change releases held
//! and queued slots; a lost request is sent again; a stale request leaks nothing;
//! a release lost with a session is sent again until answered, so the slot is freed
//! within the resend interval; a queued request is answered `Queued` and not asked
//! again every resend interval; a log recovery preempts a backfill holding the
//! newcomer's slot; and a client write to an object still missing on the newcomer is
//! not held back.

mod harness;

use carmine_clustermap::WEIGHT_IN;
use carmine_osd::OsdTuning;
use carmine_proto::{Msg, OpCode, PgReserve, PgState, Purpose, RejectReason, ReserveKind};
use carmine_types::PgId;
use harness::{bytes, cluster_with_one_out, read, write, Cluster, Envelope, NEWCOMER, TICK};

/// Ticks (of [`TICK`]) a test waits for a resend: well past the resend intervals
/// (3 s, and 10 s for a queued request).
const TICKS_MAX: usize = 300;

/// As [`cluster_with_one_out`], with every PG written more often than its log holds:
/// the newcomer is backfilled in every PG, all at one priority, so nothing preempts.
fn cluster_with_one_out_backfills_only() -> Cluster {
    let (mut cluster, names) = cluster_with_one_out();
    let mut writes: std::collections::BTreeMap<PgId, (usize, String)> = Default::default();
    for name in &names {
        let entry = (writes.entry(cluster.pg_of(name))).or_insert((0, name.clone()));
        entry.0 += 1;
    }
    for (count, name) in writes.into_values() {
        for _ in count..9 {
            write(&mut cluster, &name, &format!("v1 of {name}"));
        }
    }
    cluster
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

fn is_reserve(kind: ReserveKind) -> impl Fn(&Envelope) -> bool {
    move |e: &Envelope| matches!(&e.msg, Msg::PgReserve(r) if r.kind == kind)
}

/// Ticks until every PG is active+clean; returns how many it took.
fn tick_until_clean(cluster: &mut Cluster) -> usize {
    let pgids: Vec<PgId> = cluster.map.all_pgs().collect();
    let mut ticks = 0;
    while !(pgids.iter()).all(|&pgid| state(cluster, pgid).name() == "active+clean") {
        assert!(ticks < TICKS_MAX, "still not clean after {ticks} ticks");
        cluster.advance(TICK);
        cluster.run_network();
        ticks += 1;
    }
    ticks
}

#[test]
fn a_lost_release_is_sent_again_and_the_slot_freed() {
    let mut cluster = cluster_with_one_out_backfills_only();
    mark_in(&mut cluster);
    let pgs = gaining(&cluster);
    let newcomer_shard = cluster.addr(NEWCOMER, pgs[0]);
    // Every message goes through but the first release to the newcomer, which the
    // messenger loses (it gave up on the session).
    let to_newcomer_released =
        |e: &Envelope| is_reserve(ReserveKind::Release)(e) && e.to.0 == NEWCOMER;
    let mut lost = 0;
    while lost == 0 {
        assert!(cluster.step(), "no release ever sent");
        lost = cluster.drop_where(to_newcomer_released);
    }
    assert_eq!(lost, 1);
    cluster.run_network();
    // The newcomer still holds the slot for the PG that is done, and the others wait.
    let counts = cluster.shard(newcomer_shard).reservation_counts();
    assert_eq!(
        counts[2], 1,
        "the slot of the lost release is held: {counts:?}"
    );
    assert!(counts[3] >= 1, "others wait for it: {counts:?}");
    let ticks = tick_until_clean(&mut cluster);
    // Bounded by the resend interval (3 s, 30 ticks) plus the backfills themselves.
    assert!(ticks <= 40, "{ticks} ticks");
    assert_all_clean(&cluster);
    assert_no_slot_held(&cluster);
    let unanswered: usize = (pgs.iter())
        .map(|&pgid| {
            let primary = cluster.primary_of(pgid);
            let shard = cluster.shard(cluster.addr(primary, pgid));
            shard.pg(pgid).map_or(0, |pg| pg.releases_unanswered())
        })
        .sum();
    assert_eq!(unanswered, 0, "a release is still resent");
}

#[test]
fn a_duplicated_reservation_message_leaks_nothing() {
    let (mut cluster, _) = cluster_with_one_out();
    mark_in(&mut cluster);
    // Every reservation message arrives three times: twice in turn and once late,
    // after the network ran dry (requests, queued answers, grants, releases and their
    // answers).
    let is_reserve_msg = |e: &Envelope| matches!(e.msg, Msg::PgReserve(_));
    let mut copies = std::collections::BTreeSet::new();
    let mut late = Vec::new();
    let mut steps = 0;
    loop {
        let originals = cluster.take_where(|e| is_reserve_msg(e) && !copies.contains(&e.seq));
        for e in originals {
            for _ in 0..2 {
                cluster.inject(e.from, e.to, e.msg.clone());
                copies.insert(cluster.pending().last().expect("just queued").seq);
            }
            late.push(e);
        }
        steps += 1;
        assert!(steps < 1_000_000, "duplicates never settle");
        if cluster.step() {
            continue;
        }
        if late.is_empty() {
            break;
        }
        for e in std::mem::take(&mut late) {
            cluster.inject(e.from, e.to, e.msg);
            copies.insert(cluster.pending().last().expect("just queued").seq);
        }
    }
    tick_until_clean(&mut cluster);
    assert_all_clean(&cluster);
    assert_no_slot_held(&cluster);
}

#[test]
fn a_queued_request_is_acknowledged_and_not_asked_again() {
    let (mut cluster, _) = cluster_with_one_out();
    mark_in(&mut cluster);
    let pgs = gaining(&cluster);
    let newcomer_shard = cluster.addr(NEWCOMER, pgs[0]);
    // Hold back every release: the first PG to get the newcomer's slot keeps it,
    // and the others wait in its queue.
    let mut releases = Vec::new();
    loop {
        releases.extend(cluster.take_where(is_reserve(ReserveKind::Release)));
        if !cluster.step() {
            break;
        }
    }
    let counts = cluster.shard(newcomer_shard).reservation_counts();
    assert_eq!(counts[2], 1, "{counts:?}");
    assert!(counts[3] >= 1, "{counts:?}");
    // For a few resend intervals nobody asks the newcomer again: they know they
    // are queued.
    let mut requests = 0;
    for _ in 0..3 * 30 {
        cluster.advance(TICK);
        releases.extend(cluster.take_where(is_reserve(ReserveKind::Release)));
        requests += cluster
            .take_where(|e| is_reserve(ReserveKind::Request)(e) && e.to.0 == NEWCOMER)
            .len();
        cluster.run_network();
    }
    assert_eq!(requests, 0, "queued requests were sent again");
    // The releases held back are resent meanwhile; once one goes through, all finish.
    assert!(!releases.is_empty());
    tick_until_clean(&mut cluster);
    assert_all_clean(&cluster);
    assert_no_slot_held(&cluster);
}

#[test]
fn a_lost_grant_of_a_queued_request_is_asked_for_again() {
    let mut cluster = cluster_with_one_out_backfills_only();
    mark_in(&mut cluster);
    // Lose the grants that come after a queued answer (to a request that waited).
    let mut queued = std::collections::BTreeSet::new();
    let mut lost = 0;
    loop {
        for e in cluster.pending() {
            if let Msg::PgReserve(r) = &e.msg {
                if r.kind == ReserveKind::Queued {
                    queued.insert(r.pgid);
                }
            }
        }
        let queued = queued.clone();
        lost += cluster.drop_where(|e| {
            matches!(&e.msg, Msg::PgReserve(r)
                if r.kind == ReserveKind::Grant && queued.contains(&r.pgid))
        });
        if lost > 0 || !cluster.step() {
            break;
        }
    }
    assert_eq!(lost, 1, "a grant to a queued request is lost");
    cluster.run_network();
    let ticks = tick_until_clean(&mut cluster);
    // The queued request is confirmed after 10 s (100 ticks) at most... and the
    // rest backfill at once.
    assert!(
        ticks > 30,
        "the lost grant was recovered before the reconfirm ({ticks})"
    );
    assert_all_clean(&cluster);
    assert_no_slot_held(&cluster);
}

/// PGs whose newcomer copy is recovered from the log ask at priority 180, those
/// backfilled at 100: a recovery that finds a backfill holding the newcomer's slot
/// takes it (Ceph's preemption), and the backfill goes back to waiting.
#[test]
fn a_recovery_preempts_a_backfill_holding_the_slot() {
    let (mut cluster, names) = cluster_with_one_out();
    mark_in(&mut cluster);
    let pgs = gaining(&cluster);
    let newcomer_shard = cluster.addr(NEWCOMER, pgs[0]);
    let mut revoked = Vec::new();
    loop {
        let revokes = (cluster.pending().into_iter())
            .filter(|e| is_reserve(ReserveKind::Revoke)(e))
            .map(|e| match &e.msg {
                Msg::PgReserve(r) => (r.pgid, r.priority),
                _ => unreachable!(),
            })
            .collect::<Vec<_>>();
        for (pgid, _) in revokes {
            if !revoked.contains(&pgid) {
                revoked.push(pgid);
            }
        }
        let remote = cluster.shard(newcomer_shard).reservation_counts()[2];
        assert!(remote <= 1, "{remote} remote slots held");
        if !cluster.step() {
            break;
        }
    }
    assert!(!revoked.is_empty(), "no backfill was preempted");
    tick_until_clean(&mut cluster);
    assert_all_clean(&cluster);
    assert_no_slot_held(&cluster);
    for name in &names {
        assert_eq!(read(&mut cluster, name), format!("v1 of {name}").as_bytes());
    }
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
        purpose: Purpose::Backfill,
        reason: RejectReason::Stale,
    };
    cluster.inject(from, to, Msg::PgReserve(stale));
    let answers = {
        cluster.deliver_where(|e| e.to == to);
        cluster.take_where(|e| matches!(e.msg, Msg::PgReserve(_)))
    };
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert!(
        matches!(&answers[0].msg, Msg::PgReserve(r)
            if r.kind == ReserveKind::Reject && r.reason == RejectReason::Stale),
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

/// A newcomer "backfilled" into a PG that held no objects had nothing to push, so its
/// backfill ends at activation. A later repair of its copy (here from a scrub
/// comparison) is reserved as a recovery. Before, such a target stayed named as
/// backfilling for the whole interval, and its repairs asked for backfill slots at
/// backfill priority.
#[test]
fn a_repair_after_an_empty_backfill_is_reserved_as_a_recovery() {
    let (mut cluster, names) = cluster_with_one_out();
    // A PG the newcomer will join, emptied before it does: the newcomer has no copy,
    // so it is backfilled, with nothing to push.
    mark_in(&mut cluster);
    let pgid = gaining(&cluster)[0];
    cluster.change_map(|map| map.reweight(NEWCOMER, 0).unwrap());
    cluster.run();
    let in_pg: Vec<String> = (names.into_iter())
        .filter(|name| cluster.pg_of(name) == pgid)
        .collect();
    for name in &in_pg {
        let reply = cluster.call(name, vec![OpCode::Remove]);
        assert_eq!(reply.result, Ok(()), "{name}");
    }
    let name = in_pg[0].clone();
    mark_in(&mut cluster);
    tick_until_clean(&mut cluster);
    assert!(cluster.acting(pgid).contains(&NEWCOMER));
    write(&mut cluster, &name, "new data");
    cluster.tamper(NEWCOMER, &name, 0, b"evil");
    cluster.scrub(cluster.primary_of(pgid));
    let mut purposes = Vec::new();
    loop {
        for envelope in cluster.pending() {
            if let Msg::PgReserve(r) = &envelope.msg {
                if r.pgid == pgid
                    && r.kind == ReserveKind::Request
                    && !purposes.contains(&r.purpose)
                {
                    purposes.push(r.purpose);
                }
            }
        }
        if !cluster.step() {
            break;
        }
    }
    tick_until_clean(&mut cluster);
    cluster.assert_replicas_identical(pgid);
    assert_eq!(purposes, vec![Purpose::Recovery]);
}
