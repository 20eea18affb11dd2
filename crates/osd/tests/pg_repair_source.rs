//! A primary that must repair its own copy before it can push it pulls from a replica
//! that holds the object, never from the replica it was about to push it to.

mod harness;

use carmine_proto::{Msg, PgState};
use carmine_types::OsdId;
use harness::{read, write, Cluster, Config};
use std::collections::BTreeSet;

/// The first replica in acting order lacks the object (it was down for its last
/// write) and the primary's copy is corrupt: the push to it turns into a repair, whose
/// source must be the other replica. (Taking the object off the first replica's queue
/// to push it once made that replica look like a holder, and it was asked first.)
#[test]
fn a_repair_for_a_push_does_not_pull_from_the_push_target() {
    let mut cluster = Cluster::new(Config {
        osd_count: 3,
        pg_num: 1,
        ..Config::default()
    });
    write(&mut cluster, "object", "v1");
    let pgid = cluster.pg_of("object");
    let acting = cluster.acting(pgid);
    let (primary, lacking, holder) = (acting[0], acting[1], acting[2]);
    assert_eq!(cluster.primary_of(pgid), primary);
    cluster.crash(lacking);
    cluster.run();
    write(&mut cluster, "object", "v2");
    cluster.decay(primary, "object");
    cluster.revive(lacking);
    assert_eq!(cluster.acting(pgid), acting, "the same order again");
    let mut pulls: BTreeSet<(u64, OsdId, OsdId)> = BTreeSet::new();
    cluster.deliver_where(|e| {
        if matches!(e.msg, Msg::PgPull(_)) {
            pulls.insert((e.seq, e.from.0, e.to.0));
        }
        true
    });
    cluster.run();
    let sources: Vec<OsdId> = pulls.iter().map(|&(_, _, to)| to).collect();
    assert!(
        !sources.is_empty(),
        "the primary repaired its copy by a pull"
    );
    assert!(
        pulls
            .iter()
            .all(|&(_, from, to)| from == primary && to == holder),
        "pulls (seq, from, to): {pulls:?}; {lacking} lacks the object"
    );
    assert!(cluster.pg_stat(pgid).state.contains(PgState::CLEAN));
    assert_eq!(read(&mut cluster, "object"), b"v2");
    cluster.assert_replicas_identical(pgid);
}
