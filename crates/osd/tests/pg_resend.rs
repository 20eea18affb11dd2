//! Peering survives a lost message. OSD-to-OSD sessions replay across reconnects, but
//! a session reset loses what was queued; a primary that waited too long for a peer's
//! info, log or activation acknowledgement asks again (by the clock its ticks bring),
//! and a replica asked to activate twice in one interval only acknowledges again.

mod harness;

use carmine_proto::{Msg, PgState};
use carmine_types::{OsdId, PgId};
use harness::{read, write, Cluster, Config, Envelope};

/// A replica of the PG that is not its primary.
fn a_replica(cluster: &Cluster, pgid: PgId) -> OsdId {
    let primary = cluster.primary_of(pgid);
    *(cluster.acting(pgid).iter())
        .find(|&&osd| osd != primary)
        .expect("size 3")
}

/// Starts a new interval (a replica crashes), loses the first message matching
/// `lost` once it is sent, and lets everything else through. Returns the PG.
fn new_interval_losing(cluster: &mut Cluster, lost: fn(&Envelope) -> bool) -> PgId {
    write(cluster, "before", "written before the interval change");
    let pgid = cluster.pg_of("before");
    let gone = a_replica(cluster, pgid);
    cluster.crash(gone);
    cluster.deliver_where(|envelope| !lost(envelope));
    assert_eq!(
        cluster.drop_where(lost),
        1,
        "one message of that kind is lost"
    );
    cluster.run_network();
    pgid
}

fn finish(cluster: &mut Cluster, pgid: PgId) {
    assert_eq!(
        read(cluster, "before"),
        b"written before the interval change"
    );
    write(cluster, "after", "written after the resend");
    // The crashed replica comes back and the PG ends clean, replicas identical.
    let gone = *(cluster.osds().iter())
        .find(|osd| !cluster.acting(pgid).contains(osd))
        .expect("one OSD is out");
    cluster.revive(gone);
    cluster.run();
    cluster.tick_until(pgid, PgState::ACTIVE);
    cluster.run();
    let state = cluster.pg_state(pgid);
    assert!(state.contains(PgState::CLEAN), "{}", state.name());
    assert_eq!(read(cluster, "after"), b"written after the resend");
    cluster.assert_replicas_identical(pgid);
}

#[test]
fn a_lost_activation_is_sent_again_and_the_pg_goes_active() {
    let mut cluster = Cluster::new(Config::one_pg());
    let pgid = new_interval_losing(&mut cluster, |e| matches!(e.msg, Msg::PgActivate(_)));
    // Nothing else is on its way: without a resend the PG would wait for good.
    assert_eq!(cluster.pending_count(), 0);
    assert!(!cluster.pg_state(pgid).contains(PgState::ACTIVE));
    let ticks = cluster.tick_until(pgid, PgState::ACTIVE);
    assert!(ticks > 1, "not before the resend interval ({ticks} ticks)");
    finish(&mut cluster, pgid);
}

#[test]
fn a_lost_query_is_sent_again_and_the_pg_goes_active() {
    let mut cluster = Cluster::new(Config::one_pg());
    let pgid = new_interval_losing(&mut cluster, |e| matches!(e.msg, Msg::PgQuery(_)));
    assert_eq!(cluster.pending_count(), 0);
    assert!(cluster.pg_state(pgid).contains(PgState::PEERING));
    cluster.tick_until(pgid, PgState::ACTIVE);
    finish(&mut cluster, pgid);
}

#[test]
fn a_lost_info_answer_is_asked_for_again() {
    let mut cluster = Cluster::new(Config::one_pg());
    let pgid = new_interval_losing(&mut cluster, |e| matches!(e.msg, Msg::PgNotify(_)));
    assert!(cluster.pg_state(pgid).contains(PgState::PEERING));
    cluster.tick_until(pgid, PgState::ACTIVE);
    finish(&mut cluster, pgid);
}

#[test]
fn a_lost_activation_ack_gets_an_ack_again_without_a_second_adoption() {
    let mut cluster = Cluster::new(Config::one_pg());
    let pgid = new_interval_losing(&mut cluster, |e| matches!(e.msg, Msg::PgActivated(_)));
    assert!(!cluster.pg_state(pgid).contains(PgState::ACTIVE));
    cluster.tick_until(pgid, PgState::ACTIVE);
    finish(&mut cluster, pgid);
}

/// A resent activation that arrives late, after pushes have brought the replica up to
/// date, must not make it adopt the activation's list of missing objects again.
#[test]
fn a_late_duplicate_activation_does_not_undo_recovery() {
    let mut cluster = Cluster::new(Config {
        osd_count: 3,
        pg_num: 1,
        min_size: Some(1),
        ..Config::default()
    });
    write(&mut cluster, "before", "v1");
    let pgid = cluster.pg_of("before");
    let gone = a_replica(&cluster, pgid);
    cluster.crash(gone);
    cluster.run();
    // Written while `gone` is away: it must recover it when it comes back.
    write(&mut cluster, "before", "v2");
    cluster.revive(gone);
    let is_activation_to_gone =
        move |e: &Envelope| matches!(e.msg, Msg::PgActivate(_)) && e.to.0 == gone;
    cluster.deliver_where(|e| !is_activation_to_gone(e));
    let activations = cluster.take_where(is_activation_to_gone);
    assert_eq!(activations.len(), 1);
    let activation = activations[0].clone();
    cluster.inject(activation.from, activation.to, activation.msg.clone());
    cluster.run();
    assert!(cluster.pg_state(pgid).contains(PgState::CLEAN));
    // The duplicate (a resend that crossed the acknowledgement) arrives after the push.
    cluster.inject(activation.from, activation.to, activation.msg);
    cluster.run();
    assert_eq!(read(&mut cluster, "before"), b"v2");
    cluster.assert_replicas_identical(pgid);
    // `gone` does not think it lacks the object: left alone, it serves it (a copy
    // listing it missing, with nobody to pull from, would leave the PG incomplete).
    let others: Vec<OsdId> = (cluster.acting(pgid).into_iter())
        .filter(|&osd| osd != gone)
        .collect();
    // Both others stop at once (one at a time, the survivor would pull it anyway).
    for &osd in &others {
        cluster.partition(osd);
    }
    cluster.change_map(|map| {
        for &osd in &others {
            map.mark_down(osd).unwrap();
        }
    });
    cluster.run();
    cluster.tick_until(pgid, PgState::ACTIVE);
    assert_eq!(read(&mut cluster, "before"), b"v2");
}
