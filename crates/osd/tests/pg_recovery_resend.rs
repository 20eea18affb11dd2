//! Recovery survives a lost message. A pull the primary sends before it activates,
//! or a push it keeps in flight to a replica, can be lost with a session reset (or
//! with a peer that restarted inside the interval) and is never answered; like a
//! peering request (`pg_resend.rs`), it is sent again once it has waited the resend
//! interval with nothing answered.

mod harness;

use carmine_proto::{Msg, PgState};
use carmine_types::OsdId;
use harness::{read, write, Cluster, Config};

/// The old primary comes back lacking a write made while it was away: it pulls the
/// object before it activates. The pull is lost; the primary pulls again.
#[test]
fn a_lost_pull_is_sent_again_and_the_pg_goes_active() {
    let mut cluster = Cluster::new(Config::one_pg());
    write(&mut cluster, "object", "v1");
    let pgid = cluster.pg_of("object");
    let primary = cluster.primary_of(pgid);
    cluster.crash(primary);
    cluster.run();
    write(&mut cluster, "object", "v2");
    cluster.revive(primary);
    assert_eq!(cluster.primary_of(pgid), primary, "it leads the PG again");
    let is_pull = |e: &harness::Envelope| matches!(e.msg, Msg::PgPull(_));
    cluster.deliver_where(|e| !is_pull(e));
    assert_eq!(cluster.drop_where(is_pull), 1, "one pull is lost");
    cluster.run_network();
    assert_eq!(cluster.pending_count(), 0);
    assert!(!cluster.pg_state(pgid).contains(PgState::ACTIVE));
    let ticks = cluster.tick_until(pgid, PgState::ACTIVE);
    assert!(ticks > 1, "not before the resend interval ({ticks} ticks)");
    cluster.run();
    cluster.tick_until(pgid, PgState::CLEAN);
    assert_eq!(read(&mut cluster, "object"), b"v2");
    cluster.assert_replicas_identical(pgid);
}

/// A replica comes back lacking a write made while it was away: the active primary
/// pushes it the object. The push is lost; the primary pushes again and the PG ends
/// clean.
#[test]
fn a_lost_push_is_sent_again_and_the_pg_ends_clean() {
    let mut cluster = Cluster::new(Config::one_pg());
    write(&mut cluster, "object", "v1");
    let pgid = cluster.pg_of("object");
    let primary = cluster.primary_of(pgid);
    let gone: OsdId = *(cluster.acting(pgid).iter())
        .find(|&&osd| osd != primary)
        .expect("size 3");
    cluster.crash(gone);
    cluster.run();
    write(&mut cluster, "object", "v2");
    cluster.revive(gone);
    let is_push = move |e: &harness::Envelope| matches!(e.msg, Msg::PgPush(_)) && e.to.0 == gone;
    cluster.deliver_where(|e| !is_push(e));
    assert_eq!(cluster.drop_where(is_push), 1, "one push is lost");
    cluster.run_network();
    assert_eq!(cluster.pending_count(), 0);
    let now = cluster.pg_state(pgid);
    assert!(now.contains(PgState::ACTIVE), "{}", now.name());
    assert!(!now.contains(PgState::CLEAN), "{}", now.name());
    let ticks = cluster.tick_until(pgid, PgState::CLEAN);
    assert!(ticks > 1, "not before the resend interval ({ticks} ticks)");
    assert_eq!(read(&mut cluster, "object"), b"v2");
    cluster.assert_replicas_identical(pgid);
}
