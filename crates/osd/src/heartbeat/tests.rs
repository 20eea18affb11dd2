use super::*;
use carmine_clustermap::PoolSpec;
use std::net::SocketAddr;

const SECOND: Duration = Duration::from_secs(1);

/// `osd_count` OSDs, all up, at `epoch`.
fn map_with(osd_count: u32, epoch: u32) -> OsdMap {
    let mut map = OsdMap::new_dev(osd_count);
    for id in 0..osd_count {
        let addr: SocketAddr = format!("127.0.0.1:{}", 6800 + id).parse().unwrap();
        map.boot_osd(OsdId(id), vec![addr], format!("host{id}"))
            .unwrap();
    }
    map.epoch = Epoch(epoch);
    map
}

fn next(map: &OsdMap, change: impl FnOnce(&mut OsdMap)) -> Arc<OsdMap> {
    let mut next = map.clone();
    next.epoch = map.epoch.next();
    change(&mut next);
    Arc::new(next)
}

fn pings(actions: &[HeartbeatAction]) -> Vec<(OsdId, OsdPing)> {
    actions
        .iter()
        .filter_map(|a| match a {
            HeartbeatAction::Ping(osd, ping) => Some((*osd, ping.clone())),
            _ => None,
        })
        .collect()
}

fn reports(actions: &[HeartbeatAction]) -> Vec<OsdFailure> {
    actions
        .iter()
        .filter_map(|a| match a {
            HeartbeatAction::Report(report) => Some(report.clone()),
            _ => None,
        })
        .collect()
}

/// Ticks every 100 ms from `from` to `to`, answering every ping from the OSDs in
/// `alive` at once; returns every report made.
fn run(
    tracker: &mut HeartbeatTracker,
    from: Instant,
    to: Instant,
    alive: &[u32],
) -> Vec<(Instant, OsdFailure)> {
    let mut made = Vec::new();
    let mut now = from;
    while now <= to {
        let actions = tracker.handle_tick(now);
        made.extend(reports(&actions).into_iter().map(|r| (now, r)));
        for (osd, ping) in pings(&actions) {
            if alive.contains(&osd.0) {
                let reply = reply_to(&ping, Epoch(1)).unwrap();
                let actions = tracker.handle_reply(now, osd, &reply);
                made.extend(reports(&actions).into_iter().map(|r| (now, r)));
            }
        }
        now += Duration::from_millis(100);
    }
    made
}

#[test]
fn peers_are_the_pg_peers_plus_the_next_osds_by_id() {
    // Without pools: the next up OSDs by id, wrapping, up to min_peers.
    let map = map_with(5, 2);
    let peers = choose_peers(&map, OsdId(3), 2);
    assert_eq!(peers, BTreeSet::from([OsdId(4), OsdId(0)]));
    // Never itself, never a down OSD.
    let mut map = map_with(5, 2);
    map.mark_down(OsdId(4)).unwrap();
    let peers = choose_peers(&map, OsdId(3), 10);
    assert_eq!(peers, BTreeSet::from([OsdId(0), OsdId(1), OsdId(2)]));

    // With a pool: every OSD sharing a PG, though min_peers alone would pick fewer.
    let mut map = map_with(12, 2);
    map.create_pool(PoolSpec::replicated("rbd", 3, 64)).unwrap();
    let me = OsdId(5);
    let mut sharing = BTreeSet::new();
    for pg in map.all_pgs().collect::<Vec<_>>() {
        let mapping = map.pg_mapping(pg).unwrap();
        if mapping.acting.contains(&me) {
            sharing.extend(mapping.acting.iter().copied());
        }
    }
    sharing.remove(&me);
    assert!(sharing.len() > 2, "the pool spreads PGs: {sharing:?}");
    let peers = choose_peers(&map, me, 1);
    assert!(peers.is_superset(&sharing), "{peers:?} ⊉ {sharing:?}");
    assert!(
        peers.contains(&OsdId(6)),
        "the next OSD by id is always watched"
    );
    assert!(!peers.contains(&me));
}

#[test]
fn a_silent_peer_is_reported_after_the_grace_and_withdrawn_when_it_answers() {
    let start = Instant::now();
    let config = HeartbeatConfig::default();
    let mut tracker = HeartbeatTracker::new(OsdId(0), config, start);
    let map = Arc::new(map_with(3, 5));
    assert!(tracker.handle_map(start, map.clone()).is_empty());
    assert_eq!(tracker.peers(), vec![OsdId(1), OsdId(2)]);

    // Both answer for 10 s: pings every interval, no report.
    let first = tracker.handle_tick(start);
    assert_eq!(pings(&first).len(), 2);
    let made = run(
        &mut tracker,
        start + SECOND / 10,
        start + 10 * SECOND,
        &[1, 2],
    );
    assert!(made.is_empty(), "{made:?}");

    // osd.2 stops answering at 10 s: reported once silent for the grace, not before.
    let stopped = start + 10 * SECOND;
    let made = run(&mut tracker, stopped, stopped + 6 * SECOND, &[1]);
    let (at, first_report) = made.first().cloned().expect("osd.2 reported");
    assert_eq!(first_report.target, OsdId(2));
    assert_eq!(first_report.reporter, OsdId(0));
    assert_eq!(first_report.epoch, Epoch(5));
    assert!(!first_report.alive);
    assert!(first_report.silent_for_ms >= config.grace.as_millis() as u64);
    let answered_last = stopped; // the last ping osd.2 answered
    assert!(
        at >= answered_last + config.grace,
        "reported early at {:?}",
        at - stopped
    );
    assert!(
        at <= stopped + config.grace + SECOND,
        "reported late at {:?}",
        at - stopped
    );
    assert!(made.iter().all(|(_, r)| r.target == OsdId(2) && !r.alive));
    // Repeated every interval while the silence lasts (a lost report is sent again).
    assert!(made.len() >= 3, "{made:?}");
    assert!(tracker.is_reported(OsdId(2)));

    // It answers again: the report is withdrawn, once.
    let back = stopped + 6 * SECOND + SECOND / 10;
    let made = run(&mut tracker, back, back + 3 * SECOND, &[1, 2]);
    let (_, last) = made.last().expect("a cancellation");
    assert!(last.alive, "{made:?}");
    assert_eq!(last.target, OsdId(2));
    assert_eq!(made.iter().filter(|(_, r)| r.alive).count(), 1, "{made:?}");
    assert!(!tracker.is_reported(OsdId(2)));
}

#[test]
fn an_old_reply_does_not_withdraw_a_report() {
    let start = Instant::now();
    let mut tracker = HeartbeatTracker::new(OsdId(0), HeartbeatConfig::default(), start);
    tracker.handle_map(start, Arc::new(map_with(2, 3)));
    let first = pings(&tracker.handle_tick(start));
    let old_ping = first[0].1.clone();
    let made = run(&mut tracker, start + SECOND / 10, start + 5 * SECOND, &[]);
    assert!(!made.is_empty());
    // The reply to the very first ping arrives late (the peer was stopped).
    let late = start + 5 * SECOND;
    let reply = reply_to(&old_ping, Epoch(3)).unwrap();
    assert!(tracker.handle_reply(late, OsdId(1), &reply).is_empty());
    assert!(tracker.is_reported(OsdId(1)));
    // A stamp we never handed out (from the future) is ignored.
    let forged = OsdPing {
        stamp: u64::MAX / 2,
        ..reply
    };
    assert!(tracker.handle_reply(late, OsdId(1), &forged).is_empty());
    assert!(tracker.is_reported(OsdId(1)));
    // A ping (not a reply) is not an answer either.
    assert!(tracker.handle_reply(late, OsdId(1), &old_ping).is_empty());
}

#[test]
fn down_peers_are_not_reported_and_restarted_ones_get_a_grace() {
    let start = Instant::now();
    let config = HeartbeatConfig::default();
    let mut tracker = HeartbeatTracker::new(OsdId(0), config, start);
    let map = map_with(3, 5);
    tracker.handle_map(start, Arc::new(map.clone()));
    let made = run(&mut tracker, start, start + 5 * SECOND, &[1]);
    assert!(made.iter().any(|(_, r)| r.target == OsdId(2)));

    // The monitor marks osd.2 down: it is no longer pinged nor reported.
    let down = next(&map, |m| m.mark_down(OsdId(2)).unwrap());
    let later = start + 5 * SECOND;
    assert!(tracker.handle_map(later, down.clone()).is_empty());
    assert_eq!(tracker.peers(), vec![OsdId(1)]);
    let made = run(&mut tracker, later, later + 5 * SECOND, &[1]);
    assert!(made.is_empty(), "{made:?}");

    // It boots again (a new up_from): judged only after a full grace.
    let addr: SocketAddr = "127.0.0.1:7000".parse().unwrap();
    let up = next(&down, |m| {
        m.boot_osd(OsdId(2), vec![addr], "host2".into()).unwrap()
    });
    let booted = later + 5 * SECOND;
    tracker.handle_map(booted, up);
    let made = run(
        &mut tracker,
        booted,
        booted + config.grace - SECOND / 10,
        &[1],
    );
    assert!(made.is_empty(), "judged before its grace: {made:?}");
    let made = run(
        &mut tracker,
        booted + config.grace,
        booted + config.grace,
        &[1],
    );
    assert_eq!(made.len(), 1, "reported once its grace is over: {made:?}");
    assert_eq!(made[0].1.target, OsdId(2));
}

#[test]
fn a_peer_that_restarts_while_reported_is_judged_afresh() {
    let start = Instant::now();
    let mut tracker = HeartbeatTracker::new(OsdId(0), HeartbeatConfig::default(), start);
    let map = map_with(2, 5);
    tracker.handle_map(start, Arc::new(map.clone()));
    run(&mut tracker, start, start + 5 * SECOND, &[]);
    assert!(tracker.is_reported(OsdId(1)));
    // The map shows a new incarnation (down and up again between our maps).
    let restarted = next(&map, |m| {
        m.osds.get_mut(&OsdId(1)).unwrap().up_from = Epoch(6)
    });
    tracker.handle_map(start + 5 * SECOND, restarted);
    assert!(!tracker.is_reported(OsdId(1)));
}

#[test]
fn nothing_is_judged_before_a_grace_from_the_start_or_after_a_stall() {
    let start = Instant::now();
    let config = HeartbeatConfig::default();
    let mut tracker = HeartbeatTracker::new(OsdId(0), config, start);
    tracker.handle_map(start, Arc::new(map_with(3, 2)));
    // Nobody ever answers: the first reports come a grace after the start.
    let made = run(&mut tracker, start, start + config.grace - SECOND / 10, &[]);
    assert!(made.is_empty(), "{made:?}");
    let made = run(
        &mut tracker,
        start + config.grace,
        start + config.grace,
        &[],
    );
    assert_eq!(made.len(), 2);

    // Everyone answers; then this tracker is stopped for 30 s (SIGSTOP): on waking it
    // must not report peers it could not hear while it was not running.
    let mut tracker = HeartbeatTracker::new(OsdId(0), config, start);
    tracker.handle_map(start, Arc::new(map_with(3, 2)));
    run(&mut tracker, start, start + 5 * SECOND, &[1, 2]);
    let woke = start + 35 * SECOND;
    let made = run(&mut tracker, woke, woke + config.grace - SECOND / 10, &[]);
    assert!(made.is_empty(), "reported after a stall: {made:?}");
    // Silence after waking still counts.
    let made = run(&mut tracker, woke + config.grace, woke + config.grace, &[]);
    assert_eq!(made.len(), 2);
}

#[test]
fn the_next_tick_is_always_in_the_future_after_a_tick() {
    // A driver sleeps until `poll_timeout`: it must move on with no map and while this
    // OSD is down, or the driver would spin.
    let start = Instant::now();
    let config = HeartbeatConfig::default();
    let mut tracker = HeartbeatTracker::new(OsdId(0), config, start);
    let mut now = start;
    for _ in 0..3 {
        tracker.handle_tick(now);
        assert_eq!(tracker.poll_timeout(), now + config.interval);
        now = tracker.poll_timeout();
    }
    let map = map_with(2, 3);
    let me_down = next(&map, |m| m.mark_down(OsdId(0)).unwrap());
    tracker.handle_map(now, me_down);
    tracker.handle_tick(now);
    assert!(tracker.poll_timeout() > now);
}

#[test]
fn an_osd_that_is_down_itself_neither_pings_nor_reports() {
    let start = Instant::now();
    let mut tracker = HeartbeatTracker::new(OsdId(0), HeartbeatConfig::default(), start);
    let map = map_with(3, 4);
    tracker.handle_map(start, Arc::new(map.clone()));
    run(&mut tracker, start, start + 5 * SECOND, &[]);
    let me_down = next(&map, |m| m.mark_down(OsdId(0)).unwrap());
    // Withdrawing is pointless too: the monitor ignores a down reporter.
    assert!(tracker.handle_map(start + 5 * SECOND, me_down).is_empty());
    assert!(tracker.peers().is_empty());
    let made = run(&mut tracker, start + 5 * SECOND, start + 10 * SECOND, &[]);
    assert!(made.is_empty());
    assert!(pings(&tracker.handle_tick(start + 11 * SECOND)).is_empty());
}

#[test]
fn timing_comes_from_the_map_config_and_bad_values_keep_the_default() {
    let start = Instant::now();
    let defaults = HeartbeatConfig::default();
    let mut tracker = HeartbeatTracker::new(OsdId(0), defaults, start);
    let mut map = map_with(2, 2);
    map.config.insert(OSD_HEARTBEAT_GRACE.into(), "6".into());
    map.config
        .insert(OSD_HEARTBEAT_INTERVAL.into(), "0.5".into());
    tracker.handle_map(start, Arc::new(map.clone()));
    assert_eq!(tracker.config().grace, 6 * SECOND);
    assert_eq!(tracker.config().interval, SECOND / 2);
    let made = run(&mut tracker, start, start + 5 * SECOND + SECOND / 2, &[]);
    assert!(made.is_empty(), "the map's longer grace applies: {made:?}");
    let made = run(&mut tracker, start + 6 * SECOND, start + 6 * SECOND, &[]);
    assert_eq!(made.len(), 1);

    let bad = next(&map, |m| {
        m.config.insert(OSD_HEARTBEAT_GRACE.into(), "soon".into());
    });
    tracker.handle_map(start + 7 * SECOND, bad.clone());
    assert_eq!(tracker.config().grace, defaults.grace);
    let warnings = tracker.take_warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let again = next(&bad, |_| {});
    tracker.handle_map(start + 8 * SECOND, again);
    assert!(tracker.take_warnings().is_empty(), "warned once");
}
