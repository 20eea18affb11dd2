//! A target short of space refuses reservations as Ceph does (`REJECT_TOOFULL`): a
//! backfill to an OSD marked backfillfull (or full) is refused and the PG shows
//! `backfill_toofull`, asks again every `TOOFULL_RETRY_INTERVAL` and at once when a
//! map marks the target below backfillfull, then backfills with nothing lost; a
//! log-based recovery is refused only by a full OSD (`recovery_toofull`).

mod harness;

use carmine_clustermap::{Fullness, WEIGHT_IN};
use carmine_proto::{Msg, PgState, ReserveKind};
use carmine_types::{OsdId, PgId};
use harness::{cluster_with_one_out, read, write, Cluster, Config, Envelope, NEWCOMER, TICK};

fn state(cluster: &Cluster, pgid: PgId) -> PgState {
    cluster.pg_stat(pgid).state
}

fn all_clean(cluster: &Cluster) -> bool {
    let pgids: Vec<PgId> = cluster.map.all_pgs().collect();
    (pgids.iter()).all(|&pgid| state(cluster, pgid).name() == "active+clean")
}

/// Remote slots held and waited for at `osd`, over its shards.
fn remote_slots(cluster: &Cluster, osd: OsdId) -> [usize; 2] {
    let pgid = cluster.map.all_pgs().next().expect("a PG");
    let counts = cluster.shard(cluster.addr(osd, pgid)).reservation_counts();
    [counts[2], counts[3]]
}

fn requests_to(osd: OsdId) -> impl Fn(&Envelope) -> bool {
    move |e: &Envelope| {
        matches!(&e.msg, Msg::PgReserve(r) if r.kind == ReserveKind::Request) && e.to.0 == osd
    }
}

#[test]
fn a_backfill_to_a_backfillfull_osd_waits_in_backfill_toofull_until_it_drops_below() {
    let (mut cluster, names) = cluster_with_one_out();
    cluster.change_map(|map| {
        map.set_fullness(NEWCOMER, Fullness::BackfillFull).unwrap();
        map.reweight(NEWCOMER, WEIGHT_IN).unwrap();
    });
    cluster.run();
    let pgids: Vec<PgId> = cluster.map.all_pgs().collect();
    let gaining: Vec<PgId> = (pgids.iter().copied())
        .filter(|&pgid| cluster.acting(pgid).contains(&NEWCOMER))
        .collect();
    // Every backfill is refused; a PG recovered from the log is not.
    let toofull: Vec<PgId> = (gaining.iter().copied())
        .filter(|&pgid| state(&cluster, pgid).contains(PgState::BACKFILL_TOOFULL))
        .collect();
    assert!(
        toofull.len() >= 2,
        "{} of {} PGs toofull",
        toofull.len(),
        gaining.len()
    );
    for &pgid in &gaining {
        let state = state(&cluster, pgid);
        let clean = state.name() == "active+clean";
        assert!(clean || toofull.contains(&pgid), "{pgid}: {}", state.name());
        assert!(
            !state.contains(PgState::BACKFILL_WAIT),
            "{pgid}: {}",
            state.name()
        );
    }
    // As `pg stat` and `pg dump` print it.
    let name = state(&cluster, toofull[0]).name();
    assert!(name.contains("+backfill_toofull"), "{name}");
    assert_eq!(remote_slots(&cluster, NEWCOMER), [0, 0]);

    // It asks again only after the retry interval (10 s: 100 ticks), and is refused
    // again while the newcomer stays backfillfull.
    let mut asked_at = None;
    for tick in 1..=120 {
        cluster.advance(TICK);
        if cluster.pending().iter().any(|e| requests_to(NEWCOMER)(e)) {
            asked_at.get_or_insert(tick);
        }
        cluster.run_network();
        assert_eq!(remote_slots(&cluster, NEWCOMER), [0, 0], "tick {tick}");
    }
    let asked_at = asked_at.expect("asked again");
    assert!(
        (95..=105).contains(&asked_at),
        "asked again at tick {asked_at}"
    );
    for &pgid in &toofull {
        let state = state(&cluster, pgid);
        assert!(
            state.contains(PgState::BACKFILL_TOOFULL),
            "{pgid}: {}",
            state.name()
        );
    }

    // The newcomer drops below backfillfull: the new map alone (no tick) restarts the
    // backfills, which finish with every object intact.
    cluster.change_map(|map| map.set_fullness(NEWCOMER, Fullness::NearFull).unwrap());
    cluster.run();
    assert!(all_clean(&cluster));
    cluster.assert_all_replicas_identical();
    assert_eq!(remote_slots(&cluster, NEWCOMER), [0, 0]);
    for name in &names {
        assert_eq!(read(&mut cluster, name), format!("v1 of {name}").as_bytes());
    }
}

/// Three OSDs; the third is down while writes reach every PG, then comes back marked
/// `fullness`: its copies are recovered from the log (not backfilled).
fn recover_into(fullness: Fullness) -> (Cluster, Vec<String>) {
    let mut cluster = Cluster::new(Config::default());
    let names: Vec<String> = (0..40).map(|i| format!("obj-{i:03}")).collect();
    for name in &names {
        write(&mut cluster, name, &format!("v1 of {name}"));
    }
    let target = OsdId(2);
    cluster.crash(target);
    cluster.run();
    for name in &names {
        write(&mut cluster, name, &format!("v2 of {name}"));
    }
    cluster.change_map(|map| map.set_fullness(target, fullness).unwrap());
    cluster.revive(target);
    cluster.run();
    (cluster, names)
}

#[test]
fn a_log_recovery_to_a_backfillfull_osd_is_not_refused() {
    let (mut cluster, names) = recover_into(Fullness::BackfillFull);
    assert!(all_clean(&cluster));
    cluster.assert_all_replicas_identical();
    for name in &names {
        assert_eq!(read(&mut cluster, name), format!("v2 of {name}").as_bytes());
    }
}

#[test]
fn a_log_recovery_to_a_full_osd_waits_in_recovery_toofull_until_it_drops_below() {
    let (mut cluster, names) = recover_into(Fullness::Full);
    // Every PG written while the OSD was down waits, but those it leads: a primary
    // pulls what it lacks before it activates, without a reservation.
    let written: std::collections::BTreeSet<PgId> = (names.iter())
        .map(|name| cluster.pg_of(name))
        .filter(|&pgid| cluster.primary_of(pgid) != OsdId(2))
        .collect();
    assert!(written.len() >= 2);
    for &pgid in &written {
        let state = state(&cluster, pgid);
        assert!(
            state.contains(PgState::RECOVERY_TOOFULL),
            "{pgid}: {}",
            state.name()
        );
        assert!(
            !state.contains(PgState::BACKFILL_TOOFULL),
            "{pgid}: {}",
            state.name()
        );
    }
    let name = state(&cluster, *written.first().expect("a PG")).name();
    assert!(name.contains("+recovery_toofull"), "{name}");
    assert_eq!(remote_slots(&cluster, OsdId(2)), [0, 0]);
    cluster.change_map(|map| map.set_fullness(OsdId(2), Fullness::BackfillFull).unwrap());
    cluster.run();
    assert!(all_clean(&cluster));
    cluster.assert_all_replicas_identical();
    for name in &names {
        assert_eq!(read(&mut cluster, name), format!("v2 of {name}").as_bytes());
    }
}
